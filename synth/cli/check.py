"""``synth check FILE``: does each MSCCL runtime load the file, and does it compute its collective?

Wired into synth.cli.main by ``add_check_parser(sub)``. Exit codes: 0 when the file loads on every
requested runtime and the replay finds it correct (or cannot judge it), 4 otherwise, 2 when the
file cannot be read, ends early (cut off inside a tag or with elements never closed), or is not an
MSCCL algorithm / synth.program file at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from synth.core.errors import EXIT_INVALID, EXIT_OK, InputError
from synth.msccl.load_rules import PROFILES, check_profile, check_program, ok
from synth.program.ir import Program
from synth.program.replay import ReplayResult, replay
from synth.program.deps import Problem


def add_check_parser(sub) -> None:
    """Add ``check`` to ``sub`` (cli.py's subparsers action)."""
    p = sub.add_parser("check", help="check an MSCCL XML (or synth.program JSON) file against the runtimes' load "
                                     "rules and replay it; exit 0 ok, 4 invalid, 2 unreadable")
    p.add_argument("file")
    p.add_argument("--runtime", action="append", metavar="NAME",
                   help=f"runtime profile(s): {', '.join(PROFILES)} (repeatable or comma-separated; default all)")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.set_defaults(func=cmd_check)


def runtimes(values: list[str] | None) -> list[str]:
    """The requested profile names, in PROFILES order; InputError for unknown names."""
    if not values:
        return list(PROFILES)
    names = {v.strip() for value in values for v in value.split(",") if v.strip()}
    unknown = sorted(names - set(PROFILES))
    if unknown:
        raise InputError(f"unknown runtime {', '.join(unknown)}; known: {', '.join(PROFILES)}")
    return [name for name in PROFILES if name in names]


def load(path: str) -> tuple[Program, object | None]:
    """(program, parsed XML or None for a synth.program JSON file); InputError if unreadable."""
    from synth.msccl.xml_reader import read_xml_file

    if Path(path).suffix in (".json", ".gz"):
        return _load_json(path), None
    parsed = read_xml_file(path)
    if not parsed.algo_count:
        raise InputError(f"{path}: no <algo> element: not an MSCCL algorithm file")
    cut = next((x for x in parsed.lexical if x.truncated), None)
    if cut is not None:
        raise InputError(f"{path}: line {cut.line}: the file ends early: {cut.message}")
    return parsed.program, parsed


def _load_json(path: str) -> Program:
    from synth.core.io import read_json

    try:
        from synth.exporters.program_json import program_from_dict
    except ImportError:
        raise InputError(f"{path}: reading synth.program JSON files is not available in this build") from None
    return program_from_dict(read_json(path), where=str(path))


@dataclass(frozen=True)
class CheckReport:
    """``doc``: the --json document; ``replay``: the replay result; ``summary``: one line about the program."""

    doc: dict
    replay: ReplayResult
    summary: str


def report(path: str, names: list[str]) -> CheckReport:
    """Check ``path`` against the profiles ``names`` and replay it."""
    program, parsed = load(path)
    profiles = {}
    for name in names:
        found = check_profile(parsed, PROFILES[name]) if parsed is not None else check_program(program, PROFILES[name])
        profiles[name] = {"loads": ok(found), "problems": [str(p) for p in found]}
    result = replay(program)
    doc = {"profiles": profiles, "replay": {"correct": result.correct, "problems": [str(p) for p in result.problems]}}
    return CheckReport(doc, result, _summary(program))


def _summary(program: Program) -> str:
    return (f"{program.collective or '?'} on {program.ranks} ranks, {program.protocol or '?'}, "
            f"{program.chunks_per_loop} chunks per loop, {program.channels} channels, up to "
            f"{program.threadblocks_per_rank} thread blocks per rank and {program.max_ops_per_threadblock} steps per block")


def exit_code(doc: dict) -> int:
    """0 when every profile loads the file and the replay does not find it wrong, else 4."""
    good = all(v["loads"] for v in doc["profiles"].values()) and doc["replay"]["correct"] is not False
    return EXIT_OK if good else EXIT_INVALID


def cmd_check(args) -> int:
    checked = report(args.file, runtimes(args.runtime))
    if args.json:
        print(json.dumps(checked.doc, indent=1))
    else:
        for line in describe(f"{args.file}: {checked.summary}", checked.doc, checked.replay):
            print(line)
    return exit_code(checked.doc)


def describe(path: str, doc: dict, result: ReplayResult) -> list[str]:
    """Human-readable lines: one verdict per profile and for the replay, then their problems."""
    lines = []
    width = max(len(n) for n in list(doc["profiles"]) + ["replay"])
    for name, verdict in doc["profiles"].items():
        problems = verdict["problems"]
        rejects = any(p.startswith("rejects:") for p in problems)
        label = "loads" if verdict["loads"] else "does not load" if rejects else "loads, but misbehaves"
        lines.append(f"{name:<{width}}  {label}")
        lines += ["  " + p for p in _collapse(problems)]
    correct = result.correct
    label = {True: "correct", False: "INCORRECT", None: "not judged"}[correct]
    extra = f" ({result.orders} interleavings)" + (f"; {result.note}" if result.note else "")
    lines.append(f"{'replay':<{width}}  {label}{extra}")
    lines += ["  " + p for p in _collapse(doc["replay"]["problems"])]
    return [path] + ["  " + line for line in lines]


def _collapse(problems: list[str]) -> list[str]:
    """Every problem on its own line, except repeated notes of one kind (shown once with a count)."""
    out, notes = [], {}
    for p in problems:
        if p.startswith("note:"):
            code = p.rsplit("[", 1)[-1]
            if code in notes:
                notes[code][1] += 1
                continue
            notes[code] = [len(out), 0]
        out.append(p)
    for code, (index, more) in notes.items():
        if more:
            out[index] += f" (and {more} more like it)"
    return out


__all__ = ["CheckReport", "Problem", "add_check_parser", "cmd_check", "describe", "exit_code", "report", "runtimes"]
