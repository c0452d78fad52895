"""A size selection (``synth.selection`` v1, written by ``synth report``) exported whole: one
runtime program per size range, the algorithm folder an MSCCL runtime loads.

The document: ``{"format": "synth.selection", "version": 1, "topology", "collective", "ranges":
[{"min_bytes", "max_bytes" (inclusive; null = no upper limit), "schedule" (a path relative to the
selection file's folder), "label", "protocol" (simple, ll128 or ll)}]}``. Ranges are sorted and
disjoint (gaps are allowed: NCCL's own algorithms run there); a range without ``protocol`` (a file
written before protocols were named) is exported as Simple. Every schedule is read and verified,
and must be for the selection's collective and topology. Each range is lowered with its
protocol and byte range (the exporter spells ``minBytes``/``maxBytes`` per runtime), into a file
named ``{collective}.{topology}.{index:02d}.{label}.{min}-{max|inf}.xml`` (``.program.json`` for
program JSON), so that a folder holds one selection's files in size order.

>>> doc = {"format": "synth.selection", "version": 1, "topology": "dgx1", "collective": "allgather",
...        "ranges": [{"min_bytes": 0, "max_bytes": 65535, "schedule": "schedules/a.json", "label": "smt S=2",
...                    "protocol": "ll"},
...                   {"min_bytes": 65536, "max_bytes": None, "schedule": "schedules/b.json", "label": "ring"}]}
>>> sel = parse_selection(doc, "sel.json")
>>> [(r.protocol, r.protocol_given) for r in sel.ranges]
[('LL', True), ('Simple', False)]
>>> [file_name(sel, r, "msccl-xml") for r in sel.ranges]
['allgather.dgx1.00.smt-s-2.0-65535.xml', 'allgather.dgx1.01.ring.65536-inf.xml']
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from synth.core.errors import InputError
from synth.exporters import EXPORTERS, export_schedule, exporter
from synth.program.ir import PROTOCOL_NAMES, Program, msccl_protocol

SELECTION_FORMAT = "synth.selection"  # written by synth.report.render.selection_doc
SELECTION_VERSION = 1
DEFAULT_PROTOCOL = "Simple"  # for ranges of selections written before protocols were named
MAX_LABEL_CHARS = 40  # of the label's slug in a file name
EXPORT_STEM = r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.\d{2,}\.[a-z0-9-]+\.\d+-(\d+|inf)"  # file_name's, before the suffix


@dataclass(frozen=True)
class SizeRange:
    """One range of a selection: sizes ``min_bytes..max_bytes`` (inclusive; None = no upper limit)
    run ``schedule`` (as written in the file) under ``protocol`` (MSCCL's spelling)."""

    index: int
    min_bytes: int
    max_bytes: int | None
    schedule: str
    label: str
    protocol: str
    protocol_given: bool  # False: the file names no protocol (exported as DEFAULT_PROTOCOL)

    @property
    def span(self) -> str:
        """``min..max`` bytes, ``max`` spelled ``unbounded`` when there is none."""
        return f"{self.min_bytes}..{'unbounded' if self.max_bytes is None else self.max_bytes}"


@dataclass(frozen=True)
class Selection:
    """A parsed selection file: ``path`` (schedules are relative to its folder) and its ranges."""

    path: Path
    topology: str
    collective: str
    ranges: tuple[SizeRange, ...]

    def schedule_path(self, rng: SizeRange) -> Path:
        """Where ``rng``'s schedule file is."""
        return self.path.parent / rng.schedule

    @property
    def unnamed_protocols(self) -> int:
        """How many ranges name no protocol."""
        return sum(not r.protocol_given for r in self.ranges)


@dataclass(frozen=True)
class ExportedFile:
    """One file of an exported selection: its name in the folder, its text, its range and program."""

    name: str
    text: str
    range: SizeRange
    program: Program | None  # None: a format that lowers the schedule itself (an MSCCL++ plan)


def is_selection(doc: Any) -> bool:
    """Whether ``doc`` says it is a synth.selection document (it may still be malformed)."""
    return isinstance(doc, dict) and doc.get("format") == SELECTION_FORMAT


# ---------------------------------------------------------------------- reading
def parse_selection(doc: Any, path: str | Path) -> Selection:
    """The Selection in ``doc`` (read from ``path``); InputError (one line naming the file) when it is
    malformed, its ranges are unsorted or overlap, or a range names an unknown protocol."""
    where = str(path)
    if not is_selection(doc):
        raise InputError(f"{where}: not a {SELECTION_FORMAT} document")
    version = doc.get("version")
    if type(version) is not int or version != SELECTION_VERSION:
        raise InputError(f"{where}: unsupported {SELECTION_FORMAT} version {version!r} "
                         f"(this synth reads version {SELECTION_VERSION})")
    for key in ("topology", "collective"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise InputError(f"{where}: {key!r} must be a non-empty string")
    items = doc.get("ranges")
    if not isinstance(items, list) or not items:
        raise InputError(f"{where}: 'ranges' must be a non-empty list")
    ranges = tuple(_parse_range(item, index, where) for index, item in enumerate(items))
    _check_order(ranges, where)
    return Selection(Path(path), doc["topology"], doc["collective"], ranges)


def _parse_range(item: Any, index: int, where: str) -> SizeRange:
    at = f"{where}: range {index}"
    if not isinstance(item, dict):
        raise InputError(f"{at}: expected an object")
    low, high = item.get("min_bytes"), item.get("max_bytes", "missing")
    if type(low) is not int or low < 0:
        raise InputError(f"{at}: 'min_bytes' must be an integer >= 0, got {low!r}")
    if high is not None and (type(high) is not int or high < low):
        raise InputError(f"{at}: 'max_bytes' must be null (no upper limit) or an integer >= min_bytes ({low}), "
                         f"got {high!r}")
    schedule = item.get("schedule")
    if not isinstance(schedule, str) or not schedule:
        raise InputError(f"{at}: 'schedule' must be a file path relative to the selection's folder")
    label = item.get("label", "")
    if not isinstance(label, str):
        raise InputError(f"{at}: 'label' must be a string, got {label!r}")
    given = "protocol" in item
    protocol = msccl_protocol(item["protocol"]) if given else DEFAULT_PROTOCOL
    if protocol is None:
        raise InputError(f"{at}: unknown protocol {item['protocol']!r}; known: {', '.join(PROTOCOL_NAMES)}")
    return SizeRange(index, low, high, schedule, label, protocol, given)


def _check_order(ranges: tuple[SizeRange, ...], where: str) -> None:
    for prev, rng in zip(ranges, ranges[1:]):
        if rng.min_bytes < prev.min_bytes:
            raise InputError(f"{where}: ranges are not sorted: range {rng.index} starts at {rng.min_bytes}, "
                             f"before range {prev.index} ({prev.min_bytes})")
        if prev.max_bytes is None or rng.min_bytes <= prev.max_bytes:
            raise InputError(f"{where}: range {rng.index} ({rng.span}) overlaps range {prev.index} ({prev.span})")


def gaps(selection: Selection) -> list[tuple[int, int]]:
    """The byte ranges (inclusive) between consecutive ranges that no range covers."""
    return [(prev.max_bytes + 1, rng.min_bytes - 1) for prev, rng in zip(selection.ranges, selection.ranges[1:])
            if prev.max_bytes is not None and rng.min_bytes > prev.max_bytes + 1]


def load_schedules(selection: Selection) -> tuple:
    """Each range's schedule, read and verified (each file once); InputError when one is missing or
    is for another collective or topology than the selection."""
    cache: dict[Path, Any] = {}
    out = []
    for rng in selection.ranges:
        path = selection.schedule_path(rng)
        if path not in cache:
            cache[path] = _load(selection, rng, path)
        schedule = cache[path]
        found = (schedule.collective.name, schedule.topology.name)
        if found != (selection.collective, selection.topology):
            raise InputError(f"{selection.path}: range {rng.index}: {path} is a schedule for {found[0]} on {found[1]}, "
                             f"not {selection.collective} on {selection.topology}")
        out.append(schedule)
    return tuple(out)


def _load(selection: Selection, rng: SizeRange, path: Path):
    """The verified schedule at ``path``; its errors keep their kind and say which range names it."""
    from synth.core.errors import InvalidScheduleError
    from synth.verify import load_schedule

    try:
        return load_schedule(path)
    except InvalidScheduleError as exc:
        raise InvalidScheduleError(f"{selection.path}: range {rng.index}: {exc}", exc.violations) from None
    except InputError as exc:
        raise InputError(f"{selection.path}: range {rng.index}: {exc}") from None


# ---------------------------------------------------------------------- exporting
def _slug(text: str, limit: int = MAX_LABEL_CHARS) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-") or "range"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def file_name(selection: Selection, rng: SizeRange, fmt: str) -> str:
    """``{collective}.{topology}.{index:02d}.{label}.{min}-{max|inf}`` plus the format's suffix."""
    high = "inf" if rng.max_bytes is None else str(rng.max_bytes)
    return (f"{_safe(selection.collective)}.{_safe(selection.topology)}.{rng.index:02d}.{_slug(rng.label)}."
            f"{rng.min_bytes}-{high}{exporter(fmt).suffix}")


def is_export_name(name: str) -> bool:
    """Whether ``name`` is a file name ``file_name`` makes (a file an earlier export wrote)."""
    suffixes = "|".join(re.escape(e.suffix) for e in EXPORTERS.values() if e.writes_programs)
    return re.fullmatch(f"{EXPORT_STEM}({suffixes})", name) is not None


def program_name(selection: Selection, rng: SizeRange) -> str:
    """The algorithm's name (legacy's label): the file name without range and suffix, <= 63 characters."""
    return f"{_safe(selection.collective)}.{_safe(selection.topology)}.{rng.index:02d}.{_slug(rng.label)}"[:63]


def export_selection(selection: Selection, schedules: tuple, fmt: str, options) -> tuple[ExportedFile, ...]:
    """One file per range: ``schedules[i]`` lowered with ``options`` (a LoweringOptions; its protocol,
    byte range and name are the range's); InputError naming the selection and range otherwise."""
    if not exporter(fmt).writes_programs:  # an unknown format is one line before any work
        raise InputError(f"--format {fmt} is one file for the whole selection, not one per range")
    out = []
    for rng, schedule in zip(selection.ranges, schedules):
        protocol = rng.protocol
        if exporter(fmt).plan is not None and protocol == "LL128":
            protocol = "Simple"  # MSCCL++ has no LL128: the range's plan runs Simple
        ranged = replace(options, protocol=protocol, min_bytes=rng.min_bytes, max_bytes=rng.max_bytes,
                         name=program_name(selection, rng))
        try:
            text, program = export_schedule(schedule, fmt, ranged)
        except InputError as exc:
            raise InputError(f"{selection.path}: range {rng.index} ({rng.schedule}, {rng.span} bytes, "
                             f"{rng.protocol}): {exc}") from None
        out.append(ExportedFile(file_name(selection, rng, fmt), text, rng, program))
    return tuple(out)
