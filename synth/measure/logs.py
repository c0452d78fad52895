"""Read nccl-tests / rccl-tests output as people paste it: a list of Runs, one Row per data line.

The reader follows the format, not particular files:

- **Runs.** A run begins at a ``# nThread T nGpus G ...`` header or a ``# Collective test
  starting: X_perf`` line (the two together begin one run). A device line (``# Rank ...``) or a
  column-header line or a launch command line (``mpirun ...``, ``./build/X_perf ...``) that comes
  after data rows begins a new run too, and so does a row whose size is smaller than the row
  before it (two tables glued without a header; equal sizes stay in the run; the new run keeps the
  header, devices and columns of the one before, as it does after a new column-header line). A run
  that printed no rows is skipped; a file with no rows at all is an error.
- **Rows.** A data row is a line whose first two fields are integers and whose third is a word
  (the dtype). Its columns are mapped by the run's column-header line (``#  size  count  type
  redop  root  time  algbw  busbw  #wrong  time ...``: the first ``time algbw busbw`` group is
  out-of-place, the second in-place); without one, by the field count of the run's first row:
  7-9 fields = out-of-place only, 11-13 = both, after 3, 4 or 5 leading fields
  (``size count type [redop|root] [root]``; a lone 4th field is ``root`` when it is an integer).
  The check column (``#wrong`` / ``error``, possibly ``N/A``) is not read. Every other line that
  is not a recognised comment (MPI warnings, shell prompts, ``$``, blank lines) is skipped;
  leading ``> `` quote marks are removed from every line.
- **Context.** The test name, library version and launch command are remembered as they appear
  and a run takes what was last seen when its first row is read, so what is printed between two
  tables belongs to the second. A new command line forgets the version seen before it.
- **NCCL settings** (``synth.measure.nccl_env``): NCCL_ALGO, NCCL_PROTO, NCCL_NVLS_ENABLE and
  NCCL_COLLNET_ENABLE. A launch command's own assignments (``NAME=V mpirun ...``, ``-x NAME=V``)
  hold for its invocation; NCCL's ``NAME set by environment to V`` line and assignments on other
  uncommented lines (``export NAME=V``) replace what was known; a comment (a header's prose)
  only states a variable not stated yet, so the first statement wins there (``NAME unset``
  states NCCL's default). Settings carry over a new command line.
- **Calls.** NCCL's per-call ``NCCL INFO AllReduce: N Bytes -> Algo A proto P`` lines (commented
  or not) belong to the run being read, before its rows or after them until the next run begins.

Any malformed data is one InputError line naming the file and the line.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field, replace
from itertools import dropwhile
from pathlib import Path

from synth.core.errors import InputError
from synth.core.io import read_bytes
from synth.measure import nccl_env
from synth.measure.nccl_env import Call

MAX_INT_DIGITS = 19  # sizes and counts must fit 64 bits
NO_ROWS = "no nccl-tests data rows (expected a table like '#  size  count  type ... time  algbw  busbw')"

_INT = re.compile(r"[0-9]+")
_SIGNED_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUOTE_MARKS = re.compile(r"(?:[ \t]*>(?=[ \t]|$))+")

_NTHREAD_START = re.compile(r"#\s*nThread\b")
_NTHREAD = re.compile(r"#\s*nThread\s+([0-9]{1,9})\s+nGpus\s+([0-9]{1,9})(?:\s|$)")
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"#\s*Collective test concluded:\s*(\S+)")
_DEVICE_START = re.compile(r"#\s*Rank\s+([0-9]{1,9})(?![0-9])")
_DEVICE = re.compile(r"#\s*Rank\s+([0-9]{1,9})\s+(?:Group\s+[0-9]{1,9}\s+)?(?:Pid\s+([0-9]{1,12})\s+)?"
                     r"(?:on\s+(\S+)\s+)?device\s+([0-9]{1,9})(?:\s+\[[^\]]*\])?\s*(.*)")
_HEADER_GRAPH = re.compile(r"\bgraph:\s*(\S*)")
_MODEL_NOTE = re.compile(r"\s+(?:\(|#|<-|--|//).*$")  # a note a person added after the model name
_NCCL_TESTS_VERSION = re.compile(r"#\s*nccl-tests version\s.*\bnccl-library=([0-9]{1,9})\b")
_LIBRARY_VERSION = re.compile(r"\b(NCCL|RCCL) version\s*:?\s*([0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4})")

# The tests of nccl-tests and rccl-tests, as prose may name them (``all_reduce_perf``).
_TESTS = ("all_reduce", "all_gather", "reduce_scatter", "alltoallv", "alltoall", "broadcast", "reduce",
          "gather", "scatter", "sendrecv", "hypercube")
_TEST_MENTION = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(_TESTS) + r")_perf(?![A-Za-z0-9_])")
_TEST_BINARY = re.compile(r"[A-Za-z0-9_]+_perf")
_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)
_LAUNCHERS = frozenset({"mpirun", "mpiexec", "orterun", "prterun", "srun", "mpirun.mpich", "mpirun.openmpi",
                        "mpiexec.hydra", "mpiexec.mpich", "mpiexec.openmpi"})


@dataclass(frozen=True)
class Row:
    """One data line of a table. Sizes and counts as printed (bytes, elements); times in us,
    bandwidths in GB/s. ``redop`` / ``root`` are None when the table has no such column (a root
    of -1 stays -1); the ``inplace_*`` fields are None when the table has no in-place columns.
    ``line`` is the 1-based line number in the file."""

    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    inplace_time_us: float | None
    inplace_algbw_gbps: float | None
    inplace_busbw_gbps: float | None
    line: int


@dataclass(frozen=True)
class Run:
    """One table of one test invocation, with what the output says about how it was launched.

    - ``collective``: synth's name for the test last named before the run's first row
      (``all_reduce_perf`` -> ``allreduce``, ``all_gather_perf`` -> ``allgather``,
      ``reduce_scatter_perf`` -> ``reduce_scatter``, otherwise the name without ``_perf``);
      None when the text never names the test.
    - ``threads`` / ``gpus_per_thread``: ``nThread`` / ``nGpus`` of the ``# nThread T nGpus G``
      header; without a header the command line's ``-t`` / ``-g``; else 1.
    - ``ranks``, ``hosts``, ``processes``, ``devices``: from the device (``# Rank``) lines when the
      run has them: their number, the distinct host names in order (a line may name none: ``on
      HOST`` is optional), the distinct (host, Pid) pairs, the device model of each; when the
      lines are not ranks 0..k-1 (a listing the author trimmed: only the last rank, or ``...``)
      ranks = the highest rank + 1 and hosts / processes are not known (() / None), devices
      those listed. Without device lines, from the launch command: processes =
      ``-np``/``-n``, else the sum of ``-H host:k`` counts, else per-node count x hosts; ranks =
      processes x threads x gpus_per_thread; hosts = the ``-H`` names; devices = (). None / ()
      when the output does not say.
    - ``version``: ``"nccl X.Y.Z"`` from ``nccl-library=CODE`` of the ``# nccl-tests version``
      line (22602 -> 2.26.2; old 4-digit codes: 2708 -> 2.7.8) or an ``NCCL version X.Y.Z`` line,
      ``"rccl X.Y.Z"`` from ``RCCL version : X.Y.Z-...``; None when not printed.
    - ``settings``: (variable, value) of the NCCL settings the text states for the run (value
      None: stated unset), in ``nccl_env.VARIABLES`` order; ``calls``: NCCL's per-call lines.
    - ``graph``: CUDA-graph launches per timed iteration (the header's ``graph: N``, else the
      command's ``-G N``, else a test command quoted in the header's prose; 0: eager launch).
    - ``registration``: nccl-tests ``-R`` (0 none, 1 local, 2 symmetric window) from the command,
      else from a test command quoted in prose; None when the text never says (nccl-tests' default
      is 0). Neither is printed by nccl-tests' own header.
    - ``skipped``: what was not read (a device line shortened by hand: its rank still counts).
    """

    source: str
    index: int
    collective: str | None
    gpus_per_thread: int
    threads: int
    ranks: int | None
    hosts: tuple[str, ...]
    processes: int | None
    devices: tuple[str, ...]
    version: str | None
    rows: tuple[Row, ...]
    settings: tuple[tuple[str, str | None], ...] = ()
    calls: tuple[Call, ...] = ()
    graph: int = 0
    registration: int | None = None
    skipped: tuple[str, ...] = ()

    @property
    def buffers(self) -> str:
        """The buffers' registration: ``none``, ``local`` or ``symmetric`` (nccl-tests ``-R``; not
        stated: ``none``, nccl-tests' default)."""
        return REGISTRATIONS[self.registration or 0]

    @property
    def nccl_settings(self) -> dict[str, str | None]:
        """``settings`` as a dict."""
        return dict(self.settings)

    @property
    def launch(self) -> str:
        """"threads" when one thread drives several GPUs (``-g N``, N > 1), else "processes"."""
        return "threads" if self.gpus_per_thread > 1 else "processes"

    @property
    def machines(self) -> int | None:
        """The number of distinct hosts, None when the output names none."""
        return len(self.hosts) or None


def read_runs(path: str | Path, text: str | None = None) -> list[Run]:
    """The runs of an nccl-tests output file (``text``, when given, instead of the file's
    content). A missing or unreadable file, bytes that are not UTF-8 and malformed output are one
    InputError line naming ``path``."""
    source = str(path)
    if text is None:
        data = read_bytes(path)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{source}: not text (byte {exc.start} is not UTF-8)") from None
    return parse_runs(text, source)


def parse_runs(text: str, source: str) -> list[Run]:
    """The runs in nccl-tests output ``text`` (rules in the module docstring); ``source`` names it
    in errors and in each Run.

    >>> text = '''# nThread 1 nGpus 8 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5
    ... #  Rank  0 Group  0 Pid  54740 on     thanos device  0 [0x07] NVIDIA A100-SXM4-80GB
    ... #       size         count      type   redop    root     time   algbw   busbw #wrong
    ...            8             2     float     sum      -1    40.12    0.00    0.00      0
    ...           16             4     float     sum      -1    39.64    0.00    0.00      0
    ... '''
    >>> [run] = parse_runs(text, "a.txt")
    >>> run.launch, run.ranks, run.hosts, [(r.size_bytes, r.time_us, r.inplace_time_us) for r in run.rows]
    ('threads', 1, ('thanos',), [(8, 40.12, None), (16, 39.64, None)])
    >>> parse_runs(text.replace("39.64    0.00    0.00      0", "39.64"), "a.txt")
    Traceback (most recent call last):
    synth.core.errors.InputError: a.txt: line 5: truncated row (6 of 9 columns)
    """
    reader = _Reader(source)
    for number, line in enumerate(text.removeprefix("\ufeff").split("\n"), start=1):
        reader.feed(number, _without_quote_marks(line))
    runs = reader.finish()
    if not runs:
        raise InputError(f"{source}: {NO_ROWS}")
    return runs


def nccl_version(code: int) -> str:
    """NCCL's NCCL_VERSION_CODE as X.Y.Z: X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before.

    >>> nccl_version(22602), nccl_version(2708), nccl_version(21803)
    ('2.26.2', '2.7.8', '2.18.3')
    """
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def collective_name(test: str) -> str:
    """synth's name for an nccl-tests binary: without ``_perf``, and ``all_X`` written ``allX``.

    >>> collective_name("all_reduce_perf"), collective_name("reduce_scatter_perf"), collective_name("alltoall_perf")
    ('allreduce', 'reduce_scatter', 'alltoall')
    """
    from synth.core.collectives import KINDS  # the spellings are facts of the collective kinds

    base = test.rsplit("/", 1)[-1].removesuffix("_perf")
    named = {kind.spelled_for("nccl-tests"): kind.name for kind in KINDS.values()}
    if base in named:
        return named[base]
    return "all" + base[len("all_"):] if base.startswith("all_") else base


# --- internal state --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    """Where a table's values are: the field count and the column index of each value."""

    width: int
    redop: int | None
    root: int | None
    out_of_place: tuple[int, int, int]  # time, algbw, busbw
    in_place: tuple[int, int, int] | None


@dataclass(frozen=True)
class _Device:
    rank: int
    pid: int | None  # None: the line names no Pid (a listing shortened by hand)
    host: str | None  # None: the line names no host (an abbreviated listing)
    model: str


@dataclass(frozen=True)
class _Command:
    """What a launch command line says: processes and hosts (mpirun/srun), threads and GPUs (-t/-g)."""

    processes: int | None = None
    hosts: tuple[str, ...] = ()
    threads: int | None = None
    gpus: int | None = None
    settings: tuple[tuple[str, str | None], ...] = ()  # its own NCCL assignments
    graph: int | None = None  # -G: CUDA-graph launches (0: eager)
    registration: int | None = None  # -R: 0 none, 1 local (ncclCommRegister), 2 symmetric window


@dataclass(frozen=True)
class _Context:
    """What was last printed about the test, the library and the launch."""

    collective: str | None = None
    version: str | None = None
    command: _Command = _Command()
    settings: tuple[tuple[str, str | None], ...] = ()  # NCCL settings stated so far
    prose: _Command = _Command()  # -R / -G a header's prose states for a test it quotes

    def stated(self, pairs, replacing: bool) -> "_Context":
        """With ``pairs`` stated: replacing what was known, or only where nothing was (prose)."""
        merged = dict(self.settings)
        for name, value in pairs:
            if replacing or name not in merged:
                merged[name] = value
        return replace(self, settings=tuple(merged.items()))


@dataclass
class _Draft:
    """A run being read."""

    markers: set[str] = field(default_factory=set)  # "header", "starting": what began it
    threads: int | None = None
    gpus: int | None = None
    devices: list[_Device] = field(default_factory=list)
    layout: _Layout | None = None
    context: _Context = _Context()
    rows: list[Row] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    graph: int | None = None  # the header's "graph: N"
    skipped: list[str] = field(default_factory=list)

    def successor(self) -> _Draft:
        """The next run of the same invocation: same header, devices and layout, no rows."""
        return _Draft(set(self.markers), self.threads, self.gpus, list(self.devices), self.layout, self.context,
                      graph=self.graph, skipped=list(self.skipped))


class _Reader:
    """Reads lines one at a time into runs (rules in the module docstring)."""

    def __init__(self, source: str):
        self.source = source
        self.runs: list[Run] = []
        self.draft = _Draft()
        self.context = _Context()
        self.command_parts: list[str] | None = None  # a command line continued with a backslash
        self.line = 0
        self.command_where = source

    def feed(self, number: int, line: str) -> None:
        self.line = number
        text = line.strip()
        fields = text.split()
        if self.command_parts is not None:
            if not text.startswith("#") and not _looks_like_row(fields):
                self._continue_command(text)
                return
            self._end_command()
        if not text:
            return
        if text.startswith("#"):
            self._comment(number, text)
        elif _looks_like_row(fields):
            self._row(number, fields)
        else:
            self._other(text)

    def finish(self) -> list[Run]:
        if self.command_parts is not None:
            self._end_command()
        self._close()
        return self.runs

    # --- line kinds

    def _comment(self, number: int, text: str) -> None:
        where = f"{self.source}: line {number}"
        if _NTHREAD_START.match(text):
            self._header(where, text)
        elif match := _STARTING.match(text):
            self._begin("starting")
            self.context = replace(self.context, collective=collective_name(match.group(1)))
        elif match := _CONCLUDED.match(text):
            if self.draft.rows and self.draft.context.collective is None:
                self.draft.context = replace(self.draft.context, collective=collective_name(match.group(1)))
        elif _DEVICE_START.match(text):
            self._device(where, text)
        elif (layout := _header_layout(text.lstrip("#").split())) is not None:
            self._column_header(layout)
        else:
            if match := _NCCL_TESTS_VERSION.match(text):
                self.context = replace(self.context, version="nccl " + nccl_version(int(match.group(1))))
            if not self._nccl_info(text):
                self.context = self.context.stated(nccl_env.prose_statements(text), replacing=False)
                self._quoted_test(text, where)
            self._mention(text)

    def _quoted_test(self, text: str, where: str) -> None:
        """A test command quoted in prose (the part that describes this run, ``nccl_env.prose_parts``)
        states -R and -G where nothing stated them yet."""
        quoted = [(part, m) for part in nccl_env.prose_parts(text) if (m := _TEST_MENTION.search(part))]
        if not quoted:
            return
        part, match = quoted[0]
        options = _test_options(part[match.end():].split(), where)
        prose = self.context.prose
        self.context = replace(self.context, prose=replace(
            prose, graph=prose.graph if prose.graph is not None else options.graph,
            registration=prose.registration if prose.registration is not None else options.registration))

    def _header(self, where: str, text: str) -> None:
        match = _NTHREAD.match(text)
        if match is None:
            raise InputError(f"{where}: malformed header (expected '# nThread T nGpus G ...')")
        self._begin("header")
        self.draft.threads, self.draft.gpus = int(match.group(1)) or None, int(match.group(2)) or None
        if graph := _HEADER_GRAPH.search(text):
            self.draft.graph = _graph_count(graph.group(1), where)

    def _device(self, where: str, text: str) -> None:
        if self.draft.rows:
            self._close()
            self.draft = _Draft()
        match = _DEVICE.fullmatch(text)
        if match is None:  # shortened by hand: the rank is still known, the rest is not
            rank = int(_DEVICE_START.match(text).group(1))
            self.draft.devices.append(_Device(rank, None, None, ""))
            self.draft.skipped.append(f"{where.rsplit(': ', 1)[-1]}: device line not read ({text[:60]!r})")
            return
        rank, pid, host, _, model = match.groups()
        model = _MODEL_NOTE.sub("", model.strip())
        self.draft.devices.append(_Device(int(rank), None if pid is None else int(pid), host, model))

    def _column_header(self, layout: _Layout) -> None:
        if self.draft.rows:
            self._close()
            self.draft = self.draft.successor()
        self.draft.layout = layout

    def _row(self, number: int, fields: list[str]) -> None:
        where = f"{self.source}: line {number}"
        layout = self.draft.layout or _inferred_layout(fields, where)
        row = _parse_row(fields, layout, number, where)
        if self.draft.rows and row.size_bytes < self.draft.rows[-1].size_bytes:
            self._close()
            self.draft = self.draft.successor()
        if not self.draft.rows:
            self.draft.layout = layout
            self.draft.context = self.context
        self.draft.rows.append(row)

    def _other(self, text: str) -> None:
        if match := _LIBRARY_VERSION.search(text):
            self.context = replace(self.context, version=f"{match.group(1).lower()} {match.group(2)}")
        if _command_tokens(text.removesuffix("\\"), options_needed=not text.endswith("\\")) is not None:
            self.command_parts = []
            self.command_where = f"{self.source}: line {self.line}"
            self._continue_command(text)
        else:
            if not self._nccl_info(text):
                self.context = self.context.stated(nccl_env.statements(text), replacing=True)
            self._mention(text)

    def _nccl_info(self, text: str) -> bool:
        """Take NCCL's own word on a setting or a call; whether the line was one."""
        if setting := nccl_env.info_setting(text):
            self.context = self.context.stated([setting], replacing=True)
            return True
        if call := nccl_env.chosen_call(text):
            self.draft.calls.append(call)
            return True
        return False

    def _mention(self, text: str) -> None:
        if match := _TEST_MENTION.search(text):
            self.context = replace(self.context, collective=collective_name(match.group(1)))

    # --- commands

    def _continue_command(self, text: str) -> None:
        self.command_parts = (self.command_parts or []) + [text.removesuffix("\\")]
        if not text.endswith("\\"):
            self._end_command()

    def _end_command(self) -> None:
        text = " ".join(self.command_parts or ())
        self.command_parts = None
        tokens = _command_tokens(text)
        if tokens is None:
            return
        if self.draft.rows:  # a new invocation: nothing of the previous run carries over
            self._close()
            self.draft = _Draft()
        binary = _binary_index(tokens)
        collective = collective_name(tokens[binary]) if binary is not None else self.context.collective
        command = replace(_parse_command(tokens, binary, self.command_where), settings=tuple(nccl_env.statements(text)))
        self.context = _Context(collective, None, command, self.context.settings)

    # --- runs

    def _begin(self, marker: str) -> None:
        """A run begins here, unless this is the other half of the current run's beginning."""
        if self.draft.rows:
            self._close()
            self.draft = _Draft()
        elif marker in self.draft.markers:
            self.draft = _Draft()  # the previous run printed no rows
        self.draft.markers.add(marker)

    def _close(self) -> None:
        if self.draft.rows:
            self.runs.append(_finished(self.draft, self.source, len(self.runs)))


def _finished(draft: _Draft, source: str, index: int) -> Run:
    command = draft.context.command
    threads = draft.threads or command.threads or 1
    gpus = draft.gpus or command.gpus or 1
    listed = sorted(d.rank for d in draft.devices)
    if draft.devices and listed != list(range(len(listed))):  # a trimmed listing ("Rank 127" only, "...")
        ranks: int | None = listed[-1] + 1
        hosts: tuple[str, ...] = ()
        processes: int | None = None
    elif draft.devices:
        ranks = len(draft.devices)
        named = all(d.host is not None for d in draft.devices)
        hosts = tuple(dict.fromkeys(d.host for d in draft.devices)) if named else ()
        pids = all(d.pid is not None for d in draft.devices)
        processes = len({(d.host, d.pid) for d in draft.devices}) if pids else None
    else:
        processes = command.processes
        ranks = processes * threads * gpus if processes else None
        hosts = command.hosts
    settings = dict(draft.context.stated(command.settings, replacing=True).settings)
    ordered = tuple((name, settings[name]) for name in nccl_env.VARIABLES if name in settings)
    prose = draft.context.prose
    graph = next((g for g in (draft.graph, command.graph, prose.graph) if g is not None), 0)
    registration = command.registration if command.registration is not None else prose.registration
    return Run(source=source, index=index, collective=draft.context.collective, gpus_per_thread=gpus,
               threads=threads, ranks=ranks, hosts=hosts, processes=processes,
               devices=tuple(d.model for d in draft.devices if d.model), version=draft.context.version,
               rows=tuple(draft.rows), settings=ordered, calls=tuple(draft.calls), graph=graph,
               registration=registration, skipped=tuple(draft.skipped))


# --- lines ---------------------------------------------------------------------------------------


def _without_quote_marks(line: str) -> str:
    """The line without a trailing CR and leading ``>`` quote marks (markdown, shell continuation)."""
    line = line.removesuffix("\r")
    match = _QUOTE_MARKS.match(line)
    return line[match.end():] if match else line


def _looks_like_row(fields: list[str]) -> bool:
    """Starts like a data row: an integer, an integer, a word (the dtype)."""
    return (len(fields) >= 3 and _INT.fullmatch(fields[0]) is not None and _INT.fullmatch(fields[1]) is not None
            and _WORD.fullmatch(fields[2]) is not None)


def _header_layout(names: list[str]) -> _Layout | None:
    """The layout a column-header line describes, or None when the line is not one."""
    if names[:3] != ["size", "count", "type"]:
        return None
    groups: list[dict[str, int]] = []
    for index, name in enumerate(names[3:], start=3):
        if name == "time":
            groups.append({"time": index})
        elif name in ("algbw", "busbw") and groups:
            groups[-1].setdefault(name, index)
    if not 1 <= len(groups) <= 2 or any(len(g) != 3 for g in groups):
        return None
    triples = [(g["time"], g["algbw"], g["busbw"]) for g in groups]
    return _Layout(len(names), _column(names, "redop"), _column(names, "root"), triples[0],
                   triples[1] if len(triples) == 2 else None)


def _column(names: list[str], name: str) -> int | None:
    return names.index(name, 3) if name in names[3:] else None


def _inferred_layout(fields: list[str], where: str) -> _Layout:
    """The layout of a table without a column header, from the field count of its first row."""
    width = len(fields)
    if width < 7:
        raise InputError(f"{where}: truncated row ({width} of at least 7 columns)")
    groups = 2 if width >= 11 else 1
    lead = width - 4 * groups
    if lead not in (3, 4, 5):
        raise InputError(f"{where}: a row of {width} columns fits no nccl-tests table "
                         f"(7-9 or 11-13 columns without a column header)")
    redop = root = None
    if lead == 5:
        redop, root = 3, 4
    elif lead == 4 and _SIGNED_INT.fullmatch(fields[3]):
        root = 3
    elif lead == 4:
        redop = 3
    in_place = (lead + 4, lead + 5, lead + 6) if groups == 2 else None
    return _Layout(width, redop, root, (lead, lead + 1, lead + 2), in_place)


def _parse_row(fields: list[str], layout: _Layout, number: int, where: str) -> Row:
    if len(fields) < layout.width:
        raise InputError(f"{where}: truncated row ({len(fields)} of {layout.width} columns)")
    if len(fields) > layout.width:
        raise InputError(f"{where}: {len(fields)} columns, but the table has {layout.width}")
    time, algbw, busbw = (_measure(fields[i], name, where) for i, name in zip(layout.out_of_place, _MEASURES))
    inplace: tuple[float | None, ...] = (None, None, None)
    if layout.in_place is not None:
        inplace = tuple(_measure(fields[i], "in-place " + name, where) for i, name in zip(layout.in_place, _MEASURES))
    return Row(size_bytes=_integer(fields[0], "size", where), count=_integer(fields[1], "count", where),
               dtype=fields[2], redop=_redop(fields, layout, where), root=_root(fields, layout, where),
               time_us=time, algbw_gbps=algbw, busbw_gbps=busbw, inplace_time_us=inplace[0],
               inplace_algbw_gbps=inplace[1], inplace_busbw_gbps=inplace[2], line=number)


_MEASURES = ("time", "algbw", "busbw")


def _integer(token: str, what: str, where: str) -> int:
    if _INT.fullmatch(token) is None:
        raise InputError(f"{where}: {what} {token!r} is not a non-negative integer")
    if len(token) > MAX_INT_DIGITS:
        raise InputError(f"{where}: {what} {token} is too large (more than {MAX_INT_DIGITS} digits)")
    return int(token)


def _redop(fields: list[str], layout: _Layout, where: str) -> str | None:
    if layout.redop is None:
        return None
    token = fields[layout.redop]
    if _WORD.fullmatch(token) is None:
        raise InputError(f"{where}: redop {token!r} is not a reduction name")
    return token


def _root(fields: list[str], layout: _Layout, where: str) -> int | None:
    if layout.root is None:
        return None
    token = fields[layout.root]
    if _SIGNED_INT.fullmatch(token) is None or len(token) > MAX_INT_DIGITS:
        raise InputError(f"{where}: root {token!r} is not an integer")
    return int(token)


def _measure(token: str, what: str, where: str) -> float:
    """A time or bandwidth: a finite, non-negative decimal number."""
    if _FLOAT.fullmatch(token) is None:
        raise InputError(f"{where}: {what} {token!r} is not a number")
    value = float(token)
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{where}: {what} {token} is not a finite non-negative number")
    return value


# --- command lines -------------------------------------------------------------------------------


def _command_tokens(text: str, options_needed: bool = True) -> list[str] | None:
    """The words of a launch command, or None when the line is not one.

    A command is a shell segment (between ``&&``, ``;``, ``|``) whose first word, after a prompt
    (``$``, ``user@host:~$``, ``Running:``), environment assignments (``X=1``) and ``sudo`` /
    ``time`` / ``env``, is a ``*_perf`` binary, or a launcher (mpirun, mpiexec, srun, ...)
    followed by at least one option (unless ``options_needed`` is false: the first line of a
    command continued with a backslash); so MPI's own messages ("mpirun noticed that process rank
    0 ...") are not commands.
    """
    try:
        tokens = shlex.split(text, comments=False)
    except ValueError:  # unbalanced quotes: split on blanks
        tokens = text.split()
    for segment in _shell_segments(tokens):
        words = list(dropwhile(_is_command_prefix, segment))
        if not words:
            continue
        name = _basename(words[0])
        options = not options_needed or any(w.startswith("-") for w in words[1:])
        if _TEST_BINARY.fullmatch(name) or (name in _LAUNCHERS and options):
            return words
    return None


def _shell_segments(tokens: list[str]) -> list[list[str]]:
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token in ("&&", "||", "|", ";"):
            segments.append([])
        elif token.endswith(";"):
            segments[-1].append(token[:-1])
            segments.append([])
        else:
            segments[-1].append(token)
    return segments


def _is_command_prefix(token: str) -> bool:
    """A shell prompt, a label, an environment assignment or a wrapper before the command itself."""
    return (token.endswith(("$", "#", "%", ">", ":")) or _ENV_ASSIGNMENT.fullmatch(token) is not None
            or token in ("sudo", "time", "env", "nohup", "exec"))


def _basename(token: str) -> str:
    return token.rsplit("/", 1)[-1]


def _launcher_index(tokens: list[str]) -> int | None:
    return next((i for i, t in enumerate(tokens) if _basename(t) in _LAUNCHERS), None)


def _binary_index(tokens: list[str]) -> int | None:
    start = _launcher_index(tokens)
    start = 0 if start is None else start + 1
    return next((i for i in range(start, len(tokens)) if _TEST_BINARY.fullmatch(_basename(tokens[i]))), None)


def _parse_command(tokens: list[str], binary: int | None, where: str) -> _Command:
    """Processes and hosts from the launcher's options, threads and GPUs from the test's."""
    launcher = _launcher_index(tokens)
    test_args = tokens[binary + 1:] if binary is not None else []
    threads = _last_count(test_args, ("-t", "--nthreads"))
    gpus = _last_count(test_args, ("-g", "--ngpus"))
    options = _test_options(test_args, where)
    if launcher is None:
        return replace(options, threads=threads, gpus=gpus)
    args = tokens[launcher + 1:binary]
    srun = _basename(tokens[launcher]) == "srun"
    hosts, slots = _hosts(_flag_values(args, ("-H", "-host", "--host", "-hosts", "--hosts")))
    processes = _last_count(args, ("-n", "--n", "-np", "--np", "--ntasks"))
    per_node = _per_node(args, srun)
    if processes is None and slots is not None:
        processes = slots
    if processes is None and per_node is not None:
        nodes = len(hosts) or (_last_count(args, ("-N", "--nodes")) if srun else None)
        processes = per_node * nodes if nodes else None
    return replace(options, processes=processes, hosts=hosts, threads=threads, gpus=gpus)


REGISTRATIONS = {0: "none", 1: "local", 2: "symmetric"}  # nccl-tests -R


def _test_options(args: list[str], where: str) -> _Command:
    """The launch mode a test's options set: ``-G N`` graph launches, ``-R N`` buffer registration;
    a value nccl-tests does not take is one InputError line (``where`` names the line)."""
    graph = registration = None
    for value in _flag_values(args, ("-G", "--cudagraph")):
        graph = _graph_count(value.rstrip(".,;)"), where)
    for value in _flag_values(args, ("-R", "--local_register")):
        value = value.rstrip(".,;)")
        if value not in ("0", "1", "2"):
            raise InputError(f"{where}: -R {value}: nccl-tests registers buffers with -R 0 (none), "
                             "1 (local, ncclCommRegister) or 2 (symmetric window)")
        registration = int(value)
    return _Command(graph=graph, registration=registration)


def _graph_count(value: str, where: str) -> int:
    """A CUDA-graph launch count (``graph: N`` in the header, ``-G N``): a non-negative integer."""
    if re.fullmatch(r"[0-9]{1,9}", value) is None:
        raise InputError(f"{where}: graph count {value!r} is not a non-negative integer (nccl-tests -G N)")
    return int(value)


def _per_node(args: list[str], srun: bool) -> int | None:
    names = ("--ntasks-per-node",) if srun else ("-N", "-npernode", "--npernode", "-ppn", "--ppn")
    count = _last_count(args, names)
    for value in _flag_values(args, ("--map-by", "-map-by")):
        match = re.fullmatch(r"ppr:([0-9]{1,9}):node", value)
        if match and int(match.group(1)) > 0:
            count = int(match.group(1))
    return count


def _hosts(values: list[str]) -> tuple[tuple[str, ...], int | None]:
    """Distinct host names of ``-H a:8,b:8`` options, and the sum of the slot counts when every
    entry has one."""
    names: list[str] = []
    slots: int | None = 0
    for value in values:
        for entry in filter(None, value.split(",")):
            name, _, count = entry.partition(":")
            names.append(name)
            slots = slots + int(count) if slots is not None and _is_count(count) else None
    return tuple(dict.fromkeys(n for n in names if n)), (slots or None) if names else None


def _flag_values(args: list[str], names: tuple[str, ...]) -> list[str]:
    """The values given to any of ``names``, as ``-x VALUE`` or ``-x=VALUE``, in order."""
    values = []
    for index, token in enumerate(args):
        if token in names and index + 1 < len(args):
            values.append(args[index + 1])
        elif "=" in token and token.split("=", 1)[0] in names:
            values.append(token.split("=", 1)[1])
    return values


def _last_count(args: list[str], names: tuple[str, ...]) -> int | None:
    counts = [int(v) for v in _flag_values(args, names) if _is_count(v)]
    return counts[-1] if counts else None


def _is_count(value: str) -> bool:
    return re.fullmatch(r"[0-9]{1,9}", value) is not None and int(value) > 0
