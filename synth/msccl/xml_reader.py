"""Read MSCCL algorithm XML into the Program IR the way the runtimes' tokenizer reads it.

All three runtimes use NCCL's small hand-written XML reader (shared/reference/msccl-format.md,
section 2), which accepts far less than XML and silently misreads some of what it accepts. This
reader mirrors it node by node: well-formed tags go through a fast regular expression that
accepts exactly what NCCL accepts; anything else is replayed character by character as NCCL
would, and where NCCL would fail the problem is recorded and the tag is re-read leniently so that
checking can go on. Integers are read as C ``strtol(s, NULL, 0)`` reads them ("010" is 8).
A file never raises: every problem ends up in ``ParsedXml.lexical`` or ``ParsedXml.missing``.

>>> p = read_xml('<algo name="a" proto="LL" nchannels="1" nchunksperloop="1" ngpus="1" '
...              'coll="allreduce" inplace="010"><gpu id="0" i_chunks="1" o_chunks="1" s_chunks="0"/></algo>')
>>> p.algo["inplace"], p.program.inplace, [x.code for x in p.lexical]
('010', True, ['octal'])
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from synth.core.io import read_bytes
from synth.msccl.profiles import PROFILES
from synth.msccl.xml_tokens import Element, Lexical, element_tree
from synth.program.ir import Op, Program, RankProgram, Threadblock

GPU_ATTRS = ("id", "i_chunks", "o_chunks", "s_chunks")
TB_ATTRS = ("id", "send", "recv", "chan")
STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")
COLLECTIVE_SPELLINGS = {spelled: name for profile in PROFILES.values()  # an MSCCL runtime's spelling -> synth name
                        for name, spelled in profile.coll_names.items() if spelled != name}
MAX_IR_RANKS = 4096  # larger ngpus values are not expanded into empty ranks

_PLAIN_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,8})")


@dataclass(frozen=True)
class Missing:
    """Mandatory attributes absent from one element (the runtimes refuse the file)."""

    element: str
    names: tuple[str, ...]
    line: int
    rank: int | None = None
    tb: int | None = None
    step: int | None = None


@dataclass(frozen=True)
class ParsedXml:
    """One MSCCL XML file as the runtimes read it.

    ``algo``: the ``<algo>`` attributes as read (raw strings); ``program``: the IR (missing
    attributes read as -1, or 0 for ``cnt``/``hasdep``, "" for strings); ``elements``: per rank,
    the elements the runtime stores when that rank loads the file; ``steps_raw``: per (rank, tb
    index in ``program``) the ``(s, hasdep)`` values of its steps; ``lines``: line numbers of
    ``()`` (the ``<algo>``), ``(rank,)``, ``(rank, tb)`` and ``(rank, tb, step)`` (tb = index in
    ``program``).
    """

    algo: Mapping[str, str]
    program: Program
    lexical: tuple[Lexical, ...] = ()
    missing: tuple[Missing, ...] = ()
    elements: Mapping[int, int] = field(default_factory=dict)
    first_element: str | None = None
    gpu_ids: tuple[int, ...] = ()
    tb_ids: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    steps_raw: Mapping[tuple[int, int], tuple[tuple[int, int], ...]] = field(default_factory=dict)
    lines: Mapping[tuple[int, ...], int] = field(default_factory=dict)
    algo_count: int = 0


# ---------------------------------------------------------------------- integers
@lru_cache(maxsize=4096)
def strtol(text: str, bits: int = 32) -> tuple[int, str | None]:
    """C ``strtol(text, NULL, 0)`` narrowed to a signed ``bits``-bit int, and a complaint code:
    None, "octal", "hex", "not-a-number", "trailing-text" or "out-of-range".

    >>> strtol("010"), strtol("0x10"), strtol("abc"), strtol("12ab")
    ((8, 'octal'), (16, 'hex'), (0, 'not-a-number'), (12, 'trailing-text'))
    """
    if _PLAIN_INT.fullmatch(text):
        return int(text), None
    i, n = 0, len(text)
    while i < n and text[i] in " \t\n\v\f\r":
        i += 1
    sign = 1
    if i < n and text[i] in "+-":
        sign = -1 if text[i] == "-" else 1
        i += 1
    base, digits = 10, "0123456789"
    if text[i:i + 2].lower() == "0x" and i + 2 < n and text[i + 2].lower() in "0123456789abcdef":
        base, digits, i = 16, "0123456789abcdef", i + 2
    elif text[i:i + 1] == "0":
        base, digits = 8, "01234567"
    start = i
    while i < n and text[i].lower() in digits:
        i += 1
    if i == start:
        return 0, "not-a-number"
    value = sign * int(text[start:i], base)
    complaint = None
    if base == 8 and i - start > 1:
        complaint = "octal" if value != sign * int(text[start:i]) else None
    elif base == 16:
        complaint = "hex"
    value = max(-(1 << 63), min((1 << 63) - 1, value))  # strtol saturates at LONG_MIN/MAX
    narrowed = (value + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
    if narrowed != value:
        complaint = "out-of-range"
    if i < n and complaint is None:
        complaint = "trailing-text"
    return narrowed, complaint


_INT_MESSAGES = {
    "octal": ("misbehaves", "zero-padded integer {v!r} reads as octal {n}"),
    "hex": ("note", "hexadecimal integer {v!r} (reads as {n})"),
    "not-a-number": ("misbehaves", "{v!r} is not a number and silently reads as 0"),
    "trailing-text": ("misbehaves", "{v!r}: text after the number is ignored (reads as {n})"),
    "out-of-range": ("misbehaves", "{v!r} does not fit the runtime's integer and wraps to {n}"),
}


# ---------------------------------------------------------------------- program
class _Reader:
    """Turns the element tree into the Program IR, recording misread integers and missing attributes."""

    def __init__(self, lexical: list, missing: list):
        self.lexical, self.missing = lexical, missing
        self.plain: dict[str, int] = {}

    def need(self, elem: Element, names: tuple[str, ...], **where) -> None:
        if len(elem.attrs) < len(names) or not elem.attrs.keys() >= set(names):
            absent = tuple(a for a in names if a not in elem.attrs)
            if absent:
                self.missing.append(Missing(elem.name, absent, elem.line, **where))

    def int(self, elem: Element, name: str, default: int = -1, bits: int = 32) -> int:
        raw = elem.attrs.get(name)
        if raw is None:
            return default
        value = self.plain.get(raw)
        if value is not None:
            return value
        value, complaint = strtol(raw, bits)
        if complaint is None:
            if bits == 32:
                self.plain[raw] = value
        else:
            severity, text = _INT_MESSAGES[complaint]
            self.lexical.append(Lexical(elem.line, complaint, f"<{elem.name}> {name}: " + text.format(v=raw, n=value),
                                        severity))
        return value


def read_xml(text: str) -> ParsedXml:
    """Read MSCCL XML text; never raises for bad content (see ParsedXml.lexical/missing)."""
    lexical: list[Lexical] = []
    missing: list[Missing] = []
    algos, first = element_tree(text, lexical)
    if not algos:
        lexical.append(Lexical(1, "no-algo", "no <algo> element", "rejects"))
        return ParsedXml({}, _empty_program(), tuple(lexical), tuple(missing), {}, first)
    if len(algos) > 1:
        lexical.append(Lexical(algos[1].line, "ignored-element", "a second <algo> is ignored", "note"))
    return _build(algos[0], first, len(algos), lexical, missing)


def _build(algo: Element, first, algo_count: int, lexical: list, missing: list) -> ParsedXml:
    rd = _Reader(lexical, missing)
    gpus = list(algo.children)
    ids = [rd.int(g, "id") for g in gpus]
    ngpus = rd.int(algo, "ngpus", 0)
    ranks = ngpus if 1 <= ngpus <= MAX_IR_RANKS else max([i + 1 for i in ids if 0 <= i < MAX_IR_RANKS], default=0)
    by_rank: dict[int, Element] = {}
    for gid, g in zip(ids, gpus):
        rd.need(g, GPU_ATTRS, rank=gid if gid >= 0 else None)
        if 0 <= gid < ranks and gid not in by_rank:
            by_rank[gid] = g
    rank_programs, tb_ids, steps_raw, elements = [], {}, {}, {}
    lines: dict[tuple[int, ...], int] = {(): algo.line}
    for r in range(ranks):
        g = by_rank.get(r)
        if g is None:
            rank_programs.append(RankProgram(r, 0, 0, 0, ()))
            elements[r] = 1 + len(gpus)
            continue
        lines[(r,)] = g.line
        tbs = []
        for t in g.children:
            tid = rd.int(t, "id")
            rd.need(t, TB_ATTRS, rank=r, tb=tid)
            ops, raw = [], []
            for pos, s in enumerate(t.children):
                rd.need(s, STEP_ATTRS, rank=r, tb=tid, step=pos)
                hasdep = rd.int(s, "hasdep", 0)
                ops.append(Op(s.attrs.get("type", ""), s.attrs.get("srcbuf", ""), rd.int(s, "srcoff"),
                              s.attrs.get("dstbuf", ""), rd.int(s, "dstoff"), rd.int(s, "cnt", 0),
                              rd.int(s, "depid"), rd.int(s, "deps"), hasdep == 1))
                raw.append((rd.int(s, "s"), hasdep, s.line))
            tbs.append((tid, Threadblock(tid, rd.int(t, "send"), rd.int(t, "recv"), rd.int(t, "chan"), tuple(ops)),
                        raw, t.line))
        tb_ids[r] = tuple(tid for tid, *_ in tbs)
        tbs.sort(key=lambda x: x[0])
        for index, (_, tb, raw, line) in enumerate(tbs):
            lines[(r, index)] = line
            steps_raw[(r, index)] = tuple((s, h) for s, h, _ in raw)
            for pos, (_, _, sline) in enumerate(raw):
                lines[(r, index, pos)] = sline
        elements[r] = 1 + len(gpus) + len(tbs) + sum(len(tb.ops) for _, tb, _, _ in tbs)
        rank_programs.append(RankProgram(r, rd.int(g, "i_chunks", 0), rd.int(g, "o_chunks", 0),
                                         rd.int(g, "s_chunks", 0), tuple(tb for _, tb, _, _ in tbs)))
    coll = algo.attrs.get("coll", "")
    inplace = rd.int(algo, "inplace", 0) != 0
    max_bytes = rd.int(algo, "maxBytes", 0, bits=64) if "maxBytes" in algo.attrs else 0
    program = Program(
        name=algo.attrs.get("name", ""), collective=COLLECTIVE_SPELLINGS.get(coll, coll), ranks=ranks,
        protocol=algo.attrs.get("proto", ""), chunks_per_loop=rd.int(algo, "nchunksperloop", 0),
        inplace=inplace, outofplace=rd.int(algo, "outofplace", int(not inplace)) != 0,
        channels=rd.int(algo, "nchannels", 0), gpus=tuple(rank_programs),
        min_bytes=rd.int(algo, "minBytes", 0, bits=64), max_bytes=max_bytes or None,
        meta={"format": "msccl-xml", "coll": coll})
    rd.int(algo, "nthreads", 0)  # only to flag a misread value
    return ParsedXml(dict(algo.attrs), program, tuple(lexical), tuple(missing), elements, first, tuple(ids),
                     tb_ids, steps_raw, lines, algo_count)


def _empty_program() -> Program:
    return Program("", "", 0, "", 0, False, False, 0, (), meta={"format": "msccl-xml"})


def read_xml_file(path: str | Path) -> ParsedXml:
    """Read an MSCCL XML file; InputError (exit 2) only when it cannot be read at all."""
    return read_xml(read_bytes(path).decode("latin-1"))
