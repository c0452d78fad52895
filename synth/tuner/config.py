"""The example tuner plugin's config file: its lines as the plugin reads them, and as synth writes them.

One line per rule: ``collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks
[,numPipeOps[,regBuff]]``. The plugin (plugins/tuner/example/plugin.c, NCCL >= 2.30.3; the
reference is shared/reference/nccl-tuner.md, section 6) reads the file 254 characters at a time,
skips a line whose first byte is ``#`` or that is empty, splits on commas with consecutive commas
collapsed (an empty field shifts the ones after it), trims spaces and tabs, drops a line of fewer
than 8 fields and ignores fields past the 10th, and reads an unknown collective as allreduce, an
unknown algorithm as ring and an unknown protocol as simple, numbers with ``strtoull`` / ``atoi``
(``1M`` is 1). ``read_lines`` reads a file that way and says, line by line, where what the plugin
loads is not what the line says.

>>> text = "# made by hand\\nallreduce,0,1023,ring,ll,8,1,8\\nAllGather,0,1M,tree,,4,1,8\\n"
>>> lines, notes = read_lines(text)
>>> [(l.collective, l.min_bytes, l.max_bytes, l.algorithm, l.protocol, l.channels) for l in lines]
[('allreduce', 0, 1023, 'ring', 'll', 8)]
>>> notes[0].line, notes[0].text
(3, 'dropped: 7 fields after the plugin collapses empty ones (field 5 is empty); it needs 8 to 10')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from synth.core.collectives import KINDS

PLUGIN = "nccl-tuner"  # the runtime name the collective kinds spell themselves for
TUNED = ("broadcast", "reduce", "allgather", "reduce_scatter", "allreduce")  # NCCL tunes these five only
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
MAX_BYTES = 2**64 - 1  # nBytes is a size_t: the upper end of "every size"
MAX_LINE_CHARS = 254  # fgets into 256 bytes: longer lines are split
MAX_CHANNELS = 64  # MAXCHANNELS
HEADER = "# collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff"
_DECIMAL = re.compile(r"[0-9]+")
_INTEGER = re.compile(r"-?[0-9]+")


def plugin_name(collective: str) -> str:
    """How the plugin spells synth's ``collective`` (``reduce_scatter`` -> ``reducescatter``)."""
    return KINDS[collective].spelled_for(PLUGIN)


SYNTH_NAMES = {plugin_name(name): name for name in TUNED}  # the plugin's spelling -> synth's


@dataclass(frozen=True)
class TunerLine:
    """One rule as the plugin loads it: ``collective`` in synth's spelling, the inclusive byte range,
    NCCL's algorithm and protocol names as the plugin spells them, the channel count (-1: the
    plugin's default, 1), the communicator it is for (-1: any) and ``number``, its line in the
    file (0: not from a file)."""

    collective: str
    min_bytes: int
    max_bytes: int
    algorithm: str
    protocol: str
    channels: int
    nodes: int
    ranks: int
    pipe_ops: int = -1
    reg_buff: int = -1
    number: int = 0

    def text(self) -> str:
        """The line as synth writes it: every field explicit."""
        return ",".join(str(v) for v in (plugin_name(self.collective), self.min_bytes, self.max_bytes,
                                          self.algorithm, self.protocol, self.channels, self.nodes, self.ranks,
                                          self.pipe_ops, self.reg_buff))

    @property
    def communicator(self) -> tuple[int, int]:
        return self.nodes, self.ranks


@dataclass(frozen=True)
class Note:
    """Where the plugin reads line ``line`` otherwise than it is written (a rule the line breaks)."""

    line: int
    text: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.text}"


def render(lines: list[TunerLine], comments: list[str]) -> str:
    """A config file: ``comments`` (each a ``#`` line), the field names, then the lines."""
    out = [f"# {c}" for c in comments] + [HEADER] + [line.text() for line in lines]
    return "\n".join(out) + "\n"


def read_lines(text: str) -> tuple[list[TunerLine], list[Note]]:
    """The lines the plugin loads from ``text``, and a note for every place it reads a line
    otherwise than written (see the module)."""
    loaded, notes = [], []
    for number, raw in enumerate(text.split("\n"), 1):
        if raw == "" and number == len(text.split("\n")):
            break  # after the last newline
        line, found = _read_line(raw, number)
        notes += [Note(number, t) for t in found]
        if line is not None:
            loaded.append(line)
    return loaded, notes


def _read_line(raw: str, number: int) -> tuple[TunerLine | None, list[str]]:
    if len(raw.rstrip("\r")) > MAX_LINE_CHARS:
        return None, [f"{len(raw.rstrip(chr(13)))} characters: the plugin reads {MAX_LINE_CHARS} at a time and "
                      "parses the rest as another line (keep lines under 255 characters)"]
    if raw.startswith("#") or raw.rstrip("\r") == "":
        return None, []
    if raw.lstrip(" \t").startswith("#"):
        return None, ["a comment must start in column 1: the plugin drops this line as one of too few fields"]
    fields = raw.rstrip("\r").split(",")
    empty = [i for i, f in enumerate(fields, 1) if not f.strip(" \t")]
    tokens = [f.strip(" \t") for f in fields if f.strip(" \t")]
    notes = []
    where = f"field {empty[0]} is empty" if empty else ""
    if len(tokens) < 8:
        shown = f" ({where})" if where else ""
        return None, [f"dropped: {len(tokens)} fields after the plugin collapses empty ones{shown}; it needs 8 to 10"]
    if empty:
        notes.append(f"{where}: the plugin collapses empty fields, so the fields after it shift "
                     "(write -1 for 'any')")
    if len(tokens) > 10:
        notes.append(f"{len(tokens)} fields: the plugin ignores those past the 10th")
    line, more = _fields(tokens[:10], number)
    return line, notes + more


def _fields(tokens: list[str], number: int) -> tuple[TunerLine, list[str]]:
    """The plugin's reading of a line's 8-10 fields, with a note for every silent fallback."""
    notes = []
    collective = SYNTH_NAMES.get(tokens[0])
    if collective is None:
        notes.append(f"unknown collective {tokens[0]!r} (the plugin's names, lowercase: "
                     f"{', '.join(SYNTH_NAMES)}): the plugin reads it as allreduce")
        collective = "allreduce"
    low, high = (_unsigned(tokens[i], name, notes) for i, name in ((1, "min_bytes"), (2, "max_bytes")))
    algorithm, protocol = tokens[3], tokens[4]
    if algorithm not in ALGORITHMS:
        notes.append(f"unknown algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)}): the plugin reads it as ring")
        algorithm = "ring"
    if protocol not in PROTOCOLS:
        notes.append(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOLS)}): the plugin reads it as simple")
        protocol = "simple"
    names = ("channels", "nNodes", "nRanks", "numPipeOps", "regBuff")
    ints = [_signed(t, name, notes) for t, name in zip(tokens[5:], names)] + [-1] * (10 - len(tokens))
    return TunerLine(collective, low, high, algorithm, protocol, *ints, number=number), notes


def _unsigned(token: str, name: str, notes: list[str]) -> int:
    """``strtoull(token, 10)`` as the plugin reads it: the leading digits (a leading '-' negates,
    wrapping round 2^64), 0 without any."""
    if _DECIMAL.fullmatch(token):
        value = int(token)
        if value > MAX_BYTES:
            notes.append(f"{name} {token} is past 2^64 - 1: the plugin reads {MAX_BYTES}")
            return MAX_BYTES
        return value
    match = re.match(r"[+-]?[0-9]*", token)
    digits = match.group(0) if match else ""
    value = int(digits) if digits.strip("+-") else 0
    value %= 2**64
    notes.append(f"{name} {token!r} is not a plain decimal number of bytes: the plugin reads {value}")
    return value


def _signed(token: str, name: str, notes: list[str]) -> int:
    """``atoi(token)``: the leading integer, 0 without one."""
    if _INTEGER.fullmatch(token):
        return int(token)
    match = re.match(r"[+-]?[0-9]+", token)
    value = int(match.group(0)) if match else 0
    notes.append(f"{name} {token!r} is not an integer: the plugin reads {value}")
    return value
