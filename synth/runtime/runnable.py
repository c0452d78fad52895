"""What ``synth run`` executes: a Program plus what it means to the caller (no torch here).

A ``Runnable`` is a lowered or imported Program together with the facts a runtime needs to feed it
and to judge it: the collective it computes (synth's names), the root of a rooted collective, the
per-pair chunk counts of an alltoallv, whether it runs in place, how many chunks make up the
nccl-tests size S, and how the caller's packed input/output tensors map onto the Program's buffers
(``Binding``). ``load_runnable`` reads any of the three files people hand us:

- a ``synth.schedule`` (verified on load, then lowered with synth.lower; an alltoallv schedule is
  lowered with the custom buffer layout: chunk c at offset c of the input and the output; a
  moe_dispatch / moe_combine schedule with a rank's tokens packed in its buffers, synth.runtime.moe);
- a ``synth.program`` JSON file (synth.program.document);
- an MSCCL XML file, ours or anyone's (synth.msccl.xml_reader, read as the runtimes read it);
- an MSCCL++ execution plan, checked against the executor's rules and replayed, then run in an
  order its synchronisation allows (synth.mscclpp.program).

``precheck`` replays the Program with our own checker (synth.program.replay) before anything runs.

>>> r = runnable_from_schedule(_ring4(), "ring4")  # the bidirectional ring: 2 chunks per rank
>>> r.collective, r.ranks, r.size_chunks, r.binding.input_chunks(0), r.binding.output_chunks(0)
('allgather', 4, 8, (0, 1), (0, 1, 2, 3, 4, 5, 6, 7))
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from synth.core.errors import InputError
from synth.core.schedule import Schedule
from synth.program.buffers import Layout
from synth.program.ir import Program
from synth.runtime.moe import MOE, MoeTokens, lower_moe

RUNNABLE = ("allgather", "reduce_scatter", "allreduce", "alltoall", "alltoallv", "broadcast", "reduce",
            "gather", "scatter", "moe_dispatch", "moe_combine")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
SCHEDULE_ONLY = ("alltoallv", "moe_dispatch", "moe_combine")  # what they mean comes from the schedule's collective
DEFAULT_SIZES = (1024, 1 << 20)


@dataclass(frozen=True)
class Binding:
    """Where the caller's packed tensors live in the Program's buffers, per rank: the chunk offsets
    of the input view (``i``) that make up the caller's input, in order, and those of the output view
    (``o``) that make up its output. ``None`` = the whole view in order (zero-copy).
    ``splits``: for alltoallv, ``splits[s][d]`` chunks go from s to d. ``tokens``: for moe_dispatch and
    moe_combine, which token each row of every rank's input and output is (synth.runtime.moe)."""

    inputs: tuple[tuple[int, ...], ...] | None = None
    outputs: tuple[tuple[int, ...], ...] | None = None
    view_sizes: tuple[tuple[int, int], ...] = ()  # per rank: (input view chunks, output view chunks)
    splits: tuple[tuple[int, ...], ...] | None = None
    tokens: MoeTokens | None = None

    def input_chunks(self, rank: int) -> tuple[int, ...]:
        return self.inputs[rank] if self.inputs is not None else tuple(range(self.view_sizes[rank][0]))

    def output_chunks(self, rank: int) -> tuple[int, ...]:
        return self.outputs[rank] if self.outputs is not None else tuple(range(self.view_sizes[rank][1]))

    @property
    def identity(self) -> bool:
        return self.inputs is None and self.outputs is None


@dataclass(frozen=True)
class Runnable:
    """A Program and what it computes. ``size_chunks``: chunks in the nccl-tests size S (one chunk is
    S / size_chunks bytes); ``inplace``: which of the Program's variants runs; ``source``: the file;
    ``fixed_size``: the only S it runs at (a moe schedule: its routing fixes the token size), or None."""

    program: Program
    collective: str
    ranks: int
    root: int | None
    inplace: bool
    size_chunks: int
    binding: Binding
    source: str
    kind: str  # "schedule", "program" or "msccl-xml"
    fixed_size: int | None = None

    def layout(self, rank: int) -> Layout:
        """The real buffers of ``rank`` (sizes, in-place aliasing) as the replay lays them out."""
        return Layout(self.program, rank, self.inplace)

    def describe(self) -> str:
        p = self.program
        if self.binding.tokens is not None:
            t = self.binding.tokens
            return (f"{self.collective} on {self.ranks} ranks: {len(t.sources)} tokens of "
                    f"{self.fixed_size // self.size_chunks if self.fixed_size else '?'} bytes, {len(t.pairs())} "
                    f"destinations in all; {p.channels} channel(s), up to {p.threadblocks_per_rank} thread blocks "
                    "per rank")
        root = f", root {self.root}" if self.root is not None else ""
        mode = "in place" if self.inplace else "out of place"
        return (f"{self.collective}{root} on {self.ranks} ranks, {mode}; {p.chunks_per_loop} chunks per loop, "
                f"{p.channels} channel(s), up to {p.threadblocks_per_rank} thread blocks per rank")


# ---------------------------------------------------------------------- loading
def load_runnable(path: str, inplace: bool | None = None, root: int | None = None) -> Runnable:
    """The Runnable in ``path`` (a synth.schedule, synth.program JSON, MSCCL XML or MSCCL++ plan); InputError
    (one line naming the file) when it cannot be read or has nothing torch could compare it with."""
    from pathlib import Path

    from synth.core.io import read_bytes, read_json
    from synth.msccl.files import read_program_file

    suffix = Path(path).suffix
    if suffix == ".xml" or (suffix not in (".json", ".gz")
                            and read_bytes(path)[:4096].lstrip()[:1] not in (b"{", b"[")):
        return runnable_from_program(read_program_file(path)[0], path, "msccl-xml", inplace, root)
    doc = read_json(path, wide_ints=True)  # .json, .json.gz (big schedules gzipped), or JSON by content;
    fmt = doc.get("format") if isinstance(doc, dict) else None  # MSCCL++ plans write 2^64 - 1
    from synth.mscclpp.plan import looks_like_plan

    if looks_like_plan(doc):
        return runnable_from_plan(doc, path, inplace, root)
    if fmt == "synth.schedule":
        from synth.verify import schedule_from_doc

        return runnable_from_schedule(schedule_from_doc(doc, path), path, inplace, root)
    if fmt == "synth.program":
        from synth.program.document import program_from_dict

        return runnable_from_program(program_from_dict(doc, where=str(path)), path, "program", inplace, root)
    raise InputError(f"{path}: 'format' must be 'synth.schedule' or 'synth.program' (or the file an MSCCL++ "
                     f"plan), got {fmt!r}")


def runnable_from_plan(doc, source: str, inplace: bool | None = None, root: int | None = None) -> Runnable:
    """An MSCCL++ plan (synth.mscclpp.program: its ops in an order it allows, as sends, receives and
    local work); InputError when it breaks a rule of the executor or the replay finds it wrong."""
    from synth.mscclpp.plan import read_plan
    from synth.mscclpp.program import program_of
    from synth.mscclpp.rules import check_plan

    plan, problems = read_plan(doc)
    if plan is not None and plan.schema == "current":
        problems = problems + check_plan(plan)
    if problems:
        raise InputError(f"{source}: the MSCCL++ executor would not load it: {problems[0]}")
    if inplace is not None and inplace != plan.inplace:
        raise InputError(f"{source}: the plan runs {'in place' if plan.inplace else 'out of place'} only")
    try:
        program = program_of(plan)
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None
    return runnable_from_program(program, source, "mscclpp-json", plan.inplace,
                                 root if root is not None else plan.root)


def runnable_from_schedule(schedule: Schedule, source: str, inplace: bool | None = None,
                           root: int | None = None) -> Runnable:
    """Lower ``schedule`` (already verified) for the runtime: no MSCCL runtime limits, one channel per
    link unit, as ``synth export`` does by default."""
    from synth.lower.lowering import LoweringOptions, lower

    coll = schedule.collective
    if coll.name not in RUNNABLE:
        raise InputError(f"{source}: a {coll.name!r} schedule has no torch.distributed collective to compare "
                         f"with (runnable: {', '.join(RUNNABLE)})")
    if root is not None and coll.root is not None and root != coll.root:
        raise InputError(f"{source}: the schedule is rooted at rank {coll.root}, not {root}")
    want_inplace = bool(inplace)
    if coll.name == "alltoallv":
        if want_inplace:
            raise InputError(f"{source}: alltoallv runs out of place only (torch's all_to_all_single)")
        program = lower(replace(schedule, collective=replace(coll, name="custom")), LoweringOptions(inplace=False))
        program = replace(program, collective="alltoallv")
        return _alltoallv_runnable(program, schedule, source)
    if coll.name in MOE:
        return _moe_runnable(schedule, source, want_inplace, root)
    program = lower(schedule, LoweringOptions(inplace=want_inplace))
    rooted_at = coll.root if coll.root is not None else (min(coll.pre[0]) if coll.name in ("broadcast", "scatter")
                                                          else min(coll.post[0]) if coll.name in ROOTED else None)
    return _standard(program, source, "schedule", want_inplace, rooted_at)


def runnable_from_program(program: Program, source: str, kind: str, inplace: bool | None = None,
                          root: int | None = None) -> Runnable:
    """A Program read from a file: its collective must be one torch has; the variant run is
    out of place when the Program has it (unless ``inplace``); a rooted collective's root is
    ``root`` or found from which rank's buffers the Program reads or writes."""
    name = program.collective
    if name not in RUNNABLE or name in SCHEDULE_ONLY:
        raise InputError(f"{source}: collective {name!r} has no torch.distributed collective to compare with "
                         f"(runnable: {', '.join(c for c in RUNNABLE if c not in SCHEDULE_ONLY)}; "
                         f"{', '.join(SCHEDULE_ONLY)} from a synth.schedule file)")
    if program.ranks < 1 or len(program.gpus) != program.ranks:
        raise InputError(f"{source}: the program declares {program.ranks} ranks but describes {len(program.gpus)}")
    if program.chunks_per_loop < 1:
        raise InputError(f"{source}: nchunksperloop must be at least 1, got {program.chunks_per_loop}")
    if name in ("allgather", "reduce_scatter", "alltoall") and program.chunks_per_loop % program.ranks:
        raise InputError(f"{source}: {program.chunks_per_loop} chunks per loop do not split over "
                         f"{program.ranks} ranks, which {name} needs")
    if inplace is None:
        use_inplace = program.inplace and not program.outofplace
    else:
        use_inplace = inplace
        if inplace and not program.inplace or not inplace and not program.outofplace:
            want = "in place" if inplace else "out of place"
            raise InputError(f"{source}: the program does not run {want}")
    if name in ROOTED:
        found = _root_of(program, use_inplace)
        if root is None:
            if found is None:
                raise InputError(f"{source}: cannot tell which rank is the {name} root; give --root")
            root = found
        elif not 0 <= root < program.ranks:
            raise InputError(f"--root {root} out of range 0..{program.ranks - 1}")
    elif root is not None:
        raise InputError(f"--root applies to rooted collectives ({', '.join(ROOTED)}), not {name}")
    return _standard(program, source, kind, use_inplace, root)


def _standard(program: Program, source: str, kind: str, inplace: bool, root: int | None) -> Runnable:
    n = program.ranks
    views = []
    for r in range(n):
        lay = Layout(program, r, inplace)
        views.append((lay.view["i"][2], lay.view["o"][2]))
    size_chunks = program.chunks_per_loop * (n if program.collective in ("gather", "scatter") else 1)
    return Runnable(program, program.collective, n, root, inplace, size_chunks, Binding(view_sizes=tuple(views)),
                    str(source), kind)


def _alltoallv_runnable(program: Program, schedule: Schedule, source: str) -> Runnable:
    coll = schedule.collective
    n = coll.ranks
    splits = [[0] * n for _ in range(n)]
    ins: list[list[int]] = [[] for _ in range(n)]
    outs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for c, (pre, post) in enumerate(zip(coll.pre, coll.post)):
        (s,), (d,) = tuple(pre), tuple(post)
        splits[s][d] += 1
        ins[s].append(c)
        outs[d].append((s, c))
    binding = Binding(tuple(tuple(x) for x in ins), tuple(tuple(c for _, c in sorted(x)) for x in outs),
                      tuple((coll.chunks, coll.chunks) for _ in range(n)), tuple(tuple(row) for row in splits))
    return Runnable(program, "alltoallv", n, None, False, coll.buffer_chunks, binding, str(source), "schedule")


def _moe_runnable(schedule: Schedule, source: str, inplace: bool, root: int | None) -> Runnable:
    """A moe_dispatch / moe_combine schedule, its buffers as the caller packs them (synth.runtime.moe):
    out of place, unrooted, at the size its routing fixes."""
    coll = schedule.collective
    if inplace:
        raise InputError(f"{source}: {coll.name} runs out of place only (its input and output rows differ)")
    if root is not None:
        raise InputError(f"--root applies to rooted collectives ({', '.join(ROOTED)}), not {coll.name}")
    tokens = MoeTokens.of(coll, source)
    program = lower_moe(schedule, tokens)
    n = coll.ranks
    views = tuple((len(tokens.input_tokens(r)), len(tokens.output_tokens(r))) for r in range(n))
    return Runnable(program, coll.name, n, None, False, coll.buffer_chunks, Binding(view_sizes=views, tokens=tokens),
                    str(source), "schedule", coll.size_bytes)


def run_sizes(runnable: Runnable, asked: Sequence[int] | None) -> tuple[int, ...]:
    """The sizes (bytes) to run ``runnable`` at: those ``asked`` (none: 1K and 1M). A runnable with a
    fixed size (a moe schedule) runs at that size: when none is asked, or exactly it; any other is
    refused (InputError, one line naming the size to give)."""
    fixed = runnable.fixed_size
    if fixed is None:
        return tuple(asked) if asked else DEFAULT_SIZES
    if not asked:
        return (fixed,)
    other = next((s for s in asked if s != fixed), None)
    if other is not None:
        raise InputError(f"{runnable.source}: a {runnable.collective} run has the size its routing fixes, {fixed} "
                         f"bytes (up to {runnable.size_chunks} tokens of {fixed // runnable.size_chunks} bytes a "
                         f"rank), not {other}; give --size {fixed}")
    return tuple(dict.fromkeys(asked))


def _root_of(program: Program, inplace: bool) -> int | None:
    """The one rank whose input a broadcast/scatter reads, or whose output a reduce/gather writes;
    None when that is not exactly one rank."""
    from synth.program.ir import READS_SRC, WRITES_DST

    found = set()
    reading = program.collective in ("broadcast", "scatter")
    for g in program.gpus:
        for tb in g.threadblocks:
            for op in tb.ops:
                reads = op.type in READS_SRC or op.switches and op.src_off >= 0
                writes = op.type in WRITES_DST or op.switches and op.dst_off >= 0
                if reading and reads and op.src_buf == "i":
                    found.add(g.rank)
                if not reading and writes and op.dst_buf == "o" and not inplace:
                    found.add(g.rank)
    return found.pop() if len(found) == 1 else None


def check_backend(runnable: Runnable, backend: str) -> None:
    """InputError (one line) when ``backend`` cannot run the program: switch ops run emulated
    (synth.runtime.switch_ops) on gloo only; on nccl they would need real multimem (NVLS)."""
    if backend == "nccl" and runnable.program.switch_ops:
        raise InputError(f"{runnable.source}: its {runnable.program.switch_ops} switch ops run emulated on gloo "
                         "only (--backend nccl would need NVLS multimem, which synth run does not drive); use "
                         "--backend gloo")


# ---------------------------------------------------------------------- our own checker first
@dataclass(frozen=True)
class Precheck:
    """Our replay's verdict: ``correct`` True/False/None (not judged) and its first problem."""

    correct: bool | None
    first_problem: str
    note: str


def precheck(runnable: Runnable) -> Precheck:
    """Replay the Program (every interleaving our checker tries) in the variant that will run."""
    from synth.program.replay import replay

    program = runnable.program
    if runnable.collective == "alltoallv":
        program = replace(program, collective="custom")
    program = replace(program, inplace=runnable.inplace, outofplace=not runnable.inplace)
    result = replay(program)
    bad = [p for p in result.problems if p.severity != "note"]
    return Precheck(result.correct, str(bad[0]) if bad else "", result.note)


def _ring4() -> Schedule:  # doctest helper
    from synth.baselines import registry
    from synth.core.library import resolve_topology

    return registry()["ring"].build(resolve_topology("ring:4"), "allgather", None, None)
