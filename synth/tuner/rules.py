"""What ``synth check`` says of a tuner config: the plugin's rules, lines that never apply, sizes
that fall through.

A call of collective C and ``nBytes`` bytes on a communicator of N nodes and R ranks takes the
first line (in file order) whose collective is C, whose range holds ``nBytes``, whose nNodes /
nRanks are N / R or -1, and whose algorithm x protocol NCCL offers there; a line NCCL marks IGNORE
is passed over. A call no line takes keeps NCCL's own choice but gets **1 channel**, as does a
line of -1 channels (shared/reference/nccl-tuner.md, 5 and 6.4). So, beside the rules each line
breaks (``config.read_lines``):

- a line whose combination NCCL never offers for its collective (section 3: no tree for
  broadcast, reduce, allgather, reduce-scatter) never applies;
- a line whose every size is taken by earlier lines of combinations always offered (ring or, for
  allreduce, tree, with LL or Simple) never applies;
- for every communicator the file names, every size from 0 to 2^64 - 1 of each of the five tuned
  collectives must be taken by a line of a combination always offered: where only lines of
  combinations NCCL may not offer (LL128, PAT, NVLS, CollNet) take a size, the call falls through
  on machines without them.

>>> text = "allreduce,0,1023,ring,ll,8,1,8\\nbroadcast,0,18446744073709551615,tree,simple,8,1,8\\n"
>>> findings = [str(f) for f in check_text(text).findings]
>>> print(findings[0])
line 2: tree/simple is not an option NCCL offers for broadcast (ring x ll, ll128, simple): it never applies
>>> print(next(f for f in findings if f.startswith("allreduce")).split(": NCCL")[0])
allreduce on 1 node x 8 ranks: sizes 1024..18446744073709551615 match no line
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.measure import symmetric
from synth.tuner.config import MAX_BYTES, MAX_CHANNELS, PROTOCOLS, TUNED, Note, TunerLine, plugin_name, read_lines

_RING = {("ring", p) for p in PROTOCOLS}
_SIMPLE_ONLY = {"pat", "nvls", "collnet_direct"}
OFFERED = {  # collective -> every (algorithm, protocol) NCCL may consider (reference section 3)
    "broadcast": _RING,
    "reduce": _RING,
    "allgather": _RING | {(a, "simple") for a in _SIMPLE_ONLY},
    "reduce_scatter": _RING | {(a, "simple") for a in _SIMPLE_ONLY},
    "allreduce": _RING | {("tree", p) for p in PROTOCOLS}
    | {(a, "simple") for a in ("collnet_direct", "collnet_chain", "nvls", "nvls_tree")},
}
ALWAYS = {("ring", "ll"), ("ring", "simple"), ("tree", "ll"), ("tree", "simple")}  # offered wherever NCCL runs
Interval = tuple[int, int]


@dataclass(frozen=True)
class Finding:
    """One rule broken: at a line (``line``) or for a communicator's collective (``line`` None)."""

    line: int | None
    text: str

    def __str__(self) -> str:
        return self.text if self.line is None else f"line {self.line}: {self.text}"


@dataclass(frozen=True)
class Checked:
    """A config read with the plugin's rules: the lines it loads, what is wrong, and the
    communicators (nNodes, nRanks; -1: any) its lines are for."""

    lines: tuple[TunerLine, ...]
    findings: tuple[Finding, ...]
    communicators: tuple[tuple[int, int], ...]

    @property
    def ok(self) -> bool:
        return not self.findings


def check_text(text: str) -> Checked:
    """Every rule of the module docstring applied to the config ``text``."""
    lines, notes = read_lines(text)
    findings = [_from_note(n) for n in notes]
    for index, line in enumerate(lines):
        findings += [Finding(line.number, t) for t in _line_problems(line, lines[:index])]
    communicators = _communicators(lines)
    for comm in communicators:
        for collective in TUNED:
            findings += _coverage(lines, comm, collective)
    findings.sort(key=lambda f: (f.line is None, f.line or 0))
    return Checked(tuple(lines), tuple(findings), tuple(communicators))


def _from_note(note: Note) -> Finding:
    return Finding(note.line, note.text)


def _line_problems(line: TunerLine, before: list[TunerLine]) -> list[str]:
    """What is wrong with one loaded line, given the lines before it."""
    out = []
    combo = (line.algorithm, line.protocol)
    if combo not in OFFERED[line.collective]:
        out.append(f"{line.algorithm}/{line.protocol} is not an option NCCL offers for {line.collective} "
                   f"({_offered_text(line.collective)}): it never applies")
    if line.min_bytes > line.max_bytes:
        out.append(f"min_bytes {line.min_bytes} > max_bytes {line.max_bytes}: the range is empty, it never applies")
    elif combo in OFFERED[line.collective]:
        takers = [b.number for b in before if _always(b) and _takes_all_of(b, line)
                  and b.min_bytes <= line.max_bytes and b.max_bytes >= line.min_bytes]
        if takers and _covered((line.min_bytes, line.max_bytes), [(b.min_bytes, b.max_bytes) for b in before
                                                                   if b.number in takers]):
            out.append(f"never applies: line{'s' if len(takers) > 1 else ''} {', '.join(map(str, takers))} "
                       "take every size of its range first")
    if line.channels == -1:
        out.append("-1 channels: the plugin then gives the call 1 channel (its default), not NCCL's choice; "
                   "write the channel count")
    elif line.channels < 1:
        out.append(f"{line.channels} channels: not a channel count (write a count from 1 to {MAX_CHANNELS})")
    elif line.channels > MAX_CHANNELS:
        out.append(f"{line.channels} channels: NCCL caps a call at {MAX_CHANNELS} (MAXCHANNELS) and at the "
                   "communicator's channel count")
    for name, value in (("nNodes", line.nodes), ("nRanks", line.ranks), ("numPipeOps", line.pipe_ops),
                        ("regBuff", line.reg_buff)):
        if value < -1 or (value == 0 and name in ("nNodes", "nRanks")):
            out.append(f"{name} {value}: no communicator has it (a count, or -1 for any)")
    return out


def _offered_text(collective: str) -> str:
    by_algo: dict[str, list[str]] = {}
    for algo, proto in sorted(OFFERED[collective], key=lambda c: (c[0], PROTOCOLS.index(c[1]))):
        by_algo.setdefault(algo, []).append(proto)
    return "; ".join(f"{a} x {', '.join(ps)}" for a, ps in sorted(by_algo.items(), key=lambda i: i[0] != "ring"))


def _always(line: TunerLine) -> bool:
    combo = (line.algorithm, line.protocol)
    return combo in ALWAYS and combo in OFFERED[line.collective] and line.min_bytes <= line.max_bytes


def _takes_all_of(first: TunerLine, later: TunerLine) -> bool:
    """Whether every call ``later`` could match, ``first`` matches too (sizes aside)."""
    if first.collective != later.collective:
        return False
    pairs = ((first.nodes, later.nodes), (first.ranks, later.ranks), (first.pipe_ops, later.pipe_ops),
             (first.reg_buff, later.reg_buff))
    return all(a == -1 or a == b for a, b in pairs)


def _communicators(lines: list[TunerLine]) -> list[tuple[int, int]]:
    """The (nNodes, nRanks) the file names; (-1, -1) alone when every line is for any communicator."""
    named = sorted({line.communicator for line in lines if line.communicator != (-1, -1)})
    return named or [(-1, -1)]


def _coverage(lines: list[TunerLine], comm: tuple[int, int], collective: str) -> list[Finding]:
    """The sizes of ``collective`` on ``comm`` no line takes, and those only lines of
    combinations NCCL may not offer take."""
    nodes, ranks = comm
    registered = _registered_only(lines, comm)
    reg = (-1, 1) if registered else (-1, 0)
    matching = [line for line in lines if line.collective == collective and line.pipe_ops == -1
                and line.reg_buff in reg and line.nodes in (-1, nodes) and line.ranks in (-1, ranks)
                and line.min_bytes <= line.max_bytes and (line.algorithm, line.protocol) in OFFERED[collective]]
    where = f"{plugin_name(collective)} on {communicator_text(comm)}"
    out = []
    anything = _union([(line.min_bytes, line.max_bytes) for line in matching])
    for low, high in _gaps(anything):
        if registered and collective in symmetric.COLLECTIVES and (low, high) == (0, int(symmetric.ANY_LIMIT) - 1):
            continue  # a registered table leaves these sizes to NCCL's symmetric kernels (synth tune --buffers)
        out.append(Finding(None, f"{where}: sizes {low}..{high} match no line: NCCL keeps its own choice there, "
                                 "with 1 channel"))
    always = _union([(line.min_bytes, line.max_bytes) for line in matching if _always(line)])
    fragile = [(max(g[0], a[0]), min(g[1], a[1])) for g in _gaps(always) for a in anything
               if g[0] <= a[1] and a[0] <= g[1]]
    for low, high in fragile:
        out.append(Finding(None, f"{where}: sizes {low}..{high} are taken only by lines NCCL may not offer "
                                 "(ll128, pat, nvls, collnet) on every machine: add a ring/simple line after "
                                 "them, or such calls fall through to 1 channel"))
    return out


def _registered_only(lines: list[TunerLine], comm: tuple[int, int]) -> bool:
    """Whether every line for ``comm`` is for registered buffers (regBuff 1): the table is checked
    for registered calls (NCCL 2.27+ with a symmetric window may leave sizes below 64 GiB of
    allreduce, allgather and reduce-scatter to its symmetric kernels, and no line is needed there)."""
    mine = [line for line in lines if line.nodes in (-1, comm[0]) and line.ranks in (-1, comm[1])]
    return bool(mine) and all(line.reg_buff == 1 for line in mine)


def communicator_text(comm: tuple[int, int]) -> str:
    nodes, ranks = comm
    if comm == (-1, -1):
        return "any communicator"
    n = "any number of nodes" if nodes == -1 else f"{nodes} node{'s' if nodes != 1 else ''}"
    r = "any number of ranks" if ranks == -1 else f"{ranks} ranks"
    return f"{n} x {r}"


def _union(intervals: list[Interval]) -> list[Interval]:
    """Sorted, merged (touching ones joined: 0..9 and 10..19 make 0..19)."""
    merged: list[list[int]] = []
    for low, high in sorted(intervals):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return [(a, b) for a, b in merged]


def _gaps(union: list[Interval]) -> list[Interval]:
    """The sizes 0..MAX_BYTES outside ``union`` (a merged, sorted list)."""
    out, start = [], 0
    for low, high in union:
        if low > start:
            out.append((start, low - 1))
        start = max(start, high + 1)
    if start <= MAX_BYTES:
        out.append((start, MAX_BYTES))
    return out


def _covered(interval: Interval, intervals: list[Interval]) -> bool:
    """Whether every size of ``interval`` is in some interval of ``intervals``."""
    low, high = interval
    return not [g for g in _gaps(_union(intervals)) if g[0] <= high and g[1] >= low]


def looks_like_config(path: str, head: bytes) -> bool:
    """Whether a file is a tuner config rather than MSCCL XML or JSON: named ``*.conf``, or text
    whose first line that is not a comment has at least 7 commas."""
    if path.endswith(".conf"):
        return True
    text = head.decode("utf-8", errors="replace")
    if text.lstrip()[:1] in ("<", "{", "["):
        return False
    first = next((line for line in text.splitlines() if line.strip() and not line.startswith("#")), "")
    return first.count(",") >= 7


def read_config(path: str) -> str:
    """The text of a tuner config; InputError (one line) when it cannot be read as text."""
    from synth.core.errors import InputError
    from synth.core.io import read_bytes

    data = read_bytes(path)
    if b"\0" in data:
        raise InputError(f"{path}: not a text file (a NUL byte): not a tuner config")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: byte {exc.start} is not UTF-8: not a tuner config") from None


def lookup(lines: list[TunerLine], collective: str, size: int, nodes: int, ranks: int,
           offered: set[tuple[str, str]] | None = None, registered: bool = False) -> TunerLine | None:
    """The line the plugin applies to an ungrouped call (numPipeOps 1; buffers unregistered, or
    ``registered``) of ``collective`` and ``size`` bytes on ``nodes`` x ``ranks``: the first whose
    collective, range and communicator match and whose combination is in ``offered`` (default:
    every one NCCL may offer for it); None: no line takes it (NCCL's own choice, 1 channel)."""
    offered = OFFERED[collective] if offered is None else offered
    reg = (-1, 1) if registered else (-1, 0)
    for line in lines:
        if (line.collective == collective and line.min_bytes <= size <= line.max_bytes
                and line.nodes in (-1, nodes) and line.ranks in (-1, ranks) and line.pipe_ops in (-1, 1)
                and line.reg_buff in reg and (line.algorithm, line.protocol) in offered):
            return line
    return None
