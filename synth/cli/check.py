"""``synth check FILE``: does each MSCCL runtime load the file, and does it compute its collective?

Wired into synth.cli.main by ``add_check_parser(sub)``. Every runtime's verdict is shown; the exit
code judges the targeted runtimes: ``--runtime``, else the one the file says it was written for
(synth.msccl.target: ``synth export``'s mark), else all. Exit codes: 0 when the file loads on every
targeted runtime and the replay finds it correct (or cannot judge it), 4 otherwise, 2 when the
file cannot be read, ends early (cut off inside a tag or with elements never closed), or is not an
MSCCL algorithm / synth.program file at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from synth.core.errors import EXIT_INVALID, EXIT_OK, InputError

# The checker (synth.msccl.load_rules, synth.program.replay: numpy) and the runtimes' profiles are
# imported by the functions that run them, not here: building the parser must not load them. The
# parser offers the runtimes' names (synth.msccl.runtimes), in PROFILES order.
from synth.msccl.runtimes import RUNTIMES

if TYPE_CHECKING:
    from synth.program.ir import Program
    from synth.program.replay import ReplayResult


def __getattr__(name: str):
    """``Problem`` (in __all__) resolved on first use rather than at import."""
    if name == "Problem":
        from synth.program.deps import Problem

        return Problem
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def add_check_parser(sub) -> None:
    """Add ``check`` to ``sub`` (cli.py's subparsers action)."""
    p = sub.add_parser("check", help="check an MSCCL XML (or synth.program JSON) file against the runtimes' load "
                                     "rules and replay it, an MSCCL++ execution plan against the executor's rules "
                                     "(and replay it), or an NCCL tuner config (synth tune) against the plugin's "
                                     "rules; exit 0 ok, 4 invalid, 2 unreadable")
    p.add_argument("file")
    p.add_argument("--runtime", action="append", metavar="NAME",
                   help=f"runtime profile(s) to judge: {', '.join(RUNTIMES)}, any case (repeatable or comma-separated; "
                        "default: the runtime the file was written for, else all); every verdict is shown")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.set_defaults(func=cmd_check)


def runtimes(values: list[str] | None) -> list[str]:
    """The requested profile names, in PROFILES order; InputError for unknown names."""
    if not values:
        return list(RUNTIMES)
    names = {v.strip().lower() for value in values for v in value.split(",") if v.strip()}
    unknown = sorted(names - set(RUNTIMES))
    if unknown:
        raise InputError(f"unknown runtime {', '.join(unknown)}; known: {', '.join(RUNTIMES)}")
    return [name for name in RUNTIMES if name in names]


@dataclass(frozen=True)
class CheckReport:
    """``doc``: the --json document; ``replay``: the replay result; ``summary``: one line about the
    program; ``why``: how the targets (``doc["targets"]``) were chosen."""

    doc: dict
    replay: ReplayResult
    summary: str
    why: str = ""


def report(path: str, names: list[str] | None = None) -> CheckReport:
    """Check ``path`` against every profile and replay it; ``names`` (else the runtime the file was
    written for, else every profile) are the targets its exit code judges."""
    from synth.msccl.files import read_program_file
    from synth.msccl.load_rules import check_profile, check_program, ok
    from synth.msccl.profiles import PROFILES
    from synth.msccl.target import written_for
    from synth.program.replay import replay

    program, parsed = read_program_file(path)
    marked = written_for(path, program)
    if names:
        targets, why = names, "judged for " + ", ".join(names) + " (--runtime)"
    elif marked is not None:
        targets, why = [marked], f"judged for {marked}: the file says it was written for it (--runtime overrides)"
    else:
        targets, why = list(PROFILES), "judged for every runtime: the file does not say which it was written for"
    profiles = {}
    for name in PROFILES:
        found = check_profile(parsed, PROFILES[name]) if parsed is not None else check_program(program, PROFILES[name])
        profiles[name] = {"loads": ok(found), "problems": [str(p) for p in found]}
    result = replay(program)
    doc = {"profiles": profiles, "targets": targets,
           "replay": {"correct": result.correct, "problems": [str(p) for p in result.problems]}}
    return CheckReport(doc, result, _summary(program), why)


def _summary(program: Program) -> str:
    switches = f", {program.switch_ops} switch ops" if program.switch_ops else ""
    return (f"{program.collective or '?'} on {program.ranks} ranks, {program.protocol or '?'}, "
            f"{program.chunks_per_loop} chunks per loop, {program.channels} channels, up to "
            f"{program.threadblocks_per_rank} thread blocks per rank and "
            f"{program.max_ops_per_threadblock} steps per block{switches}")


def exit_code(doc: dict) -> int:
    """0 when every targeted profile (``doc["targets"]``, else all) loads the file and the replay
    does not find it wrong, else 4."""
    targets = doc.get("targets") or list(doc["profiles"])
    good = all(doc["profiles"][t]["loads"] for t in targets) and doc["replay"]["correct"] is not False
    return EXIT_OK if good else EXIT_INVALID


def cmd_check(args) -> int:
    if _is_tuner_config(args.file):
        return check_tuner_config(args)
    plan_doc = _mscclpp_doc(args.file)
    if plan_doc is not None:
        return check_mscclpp_plan(args, plan_doc)
    checked = report(args.file, runtimes(args.runtime) if args.runtime else None)
    if args.json:
        print(json.dumps(checked.doc, indent=1))
    else:
        for line in describe(f"{args.file}: {checked.summary}", checked.doc, checked.replay):
            print(line)
        print(f"  {checked.why}")
    return exit_code(checked.doc)


def _mscclpp_doc(path: str):
    """The JSON document of an MSCCL++ plan file, or None for any other file (read strictly: a
    plan cut off is one line naming where, exit 2)."""
    if not path.endswith(".json"):
        return None
    from synth.core.io import read_json
    from synth.mscclpp.plan import looks_like_plan

    try:
        with open(path, "rb") as handle:
            if handle.read(4096).lstrip()[:1] != b"{":
                return None
    except OSError:
        return None
    doc = read_json(path, wide_ints=True)  # plans write max_message_size 2^64 - 1
    return doc if looks_like_plan(doc) else None


def check_mscclpp_plan(args, doc) -> int:
    """An MSCCL++ execution plan: the loader's and the spec's rules (synth.mscclpp.rules), then the
    data-level replay (synth.mscclpp.replay); exit 0 when it loads and the replay does not find
    it wrong, 4 otherwise."""
    from synth.mscclpp.plan import read_plan, summary
    from synth.mscclpp.replay import replay
    from synth.mscclpp.rules import check_plan
    from synth.mscclpp.switch_rules import switch_note

    if args.runtime:
        raise InputError("--runtime applies to MSCCL XML files; an MSCCL++ plan is checked against mscclpp >= 0.8")
    plan, problems = read_plan(doc)
    if plan is not None and plan.schema == "current":
        problems = problems + check_plan(plan)
    result = replay(plan)
    notes = list(plan.notes) + ([switch_note(plan)] if plan.schema == "current" and switch_note(plan) else [])
    loads = not problems and plan.schema == "current"
    good = (loads or plan.schema == "legacy") and result.correct is not False
    if args.json:
        print(json.dumps({"format": "mscclpp", "schema": plan.schema, "loads": loads,
                          "problems": [str(p) for p in problems], "notes": notes,
                          "replay": {"correct": result.correct, "problems": list(result.problems),
                                     "note": result.note}}, indent=1))
        return EXIT_OK if good else EXIT_INVALID
    print(f"{args.file}: {summary(plan)}")
    verdict = "not judged" if plan.schema == "legacy" else "loads" if loads else "does not load"
    print(f"  mscclpp  {verdict}" + (f" ({len(problems)} problem(s))" if problems else ""))
    lines = [str(p) for p in problems] + notes
    print("".join(f"    {line}\n" for line in lines[:30]), end="")
    label = {True: "correct", False: "INCORRECT", None: "not judged"}[result.correct]
    print(f"  replay   {label}" + (f" ({result.note})" if result.note else ""))
    print("".join(f"    {p}\n" for p in result.problems), end="")
    return EXIT_OK if good else EXIT_INVALID


def _is_tuner_config(path: str) -> bool:
    from synth.tuner.rules import looks_like_config

    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False  # the MSCCL path says why it cannot be read
    return looks_like_config(path, head)


def check_tuner_config(args) -> int:
    """A config of NCCL's example tuner plugin read with the plugin's rules (synth.tuner.rules):
    every finding, then a verdict; exit 0 when there is none, 4 otherwise."""
    from synth.tuner.config import plugin_name
    from synth.tuner.rules import check_text, communicator_text, read_config

    if args.runtime:
        raise InputError("--runtime applies to MSCCL files; a tuner config is read as NCCL's example plugin reads it")
    checked = check_text(read_config(args.file))
    names = sorted({plugin_name(line.collective) for line in checked.lines})
    comms = ", ".join(communicator_text(c) for c in checked.communicators)
    if args.json:
        print(json.dumps({"format": "nccl-tuner", "lines": len(checked.lines), "collectives": names,
                          "communicators": [list(c) for c in checked.communicators],
                          "findings": [str(f) for f in checked.findings], "ok": checked.ok}, indent=1))
        return EXIT_OK if checked.ok else EXIT_INVALID
    print(f"{args.file}: NCCL example tuner plugin config: {len(checked.lines)} lines for "
          f"{', '.join(names) or 'no collective'} on {comms}")
    for finding in checked.findings:
        print(f"  {finding}")
    if checked.ok:
        print(f"  ok: every size 0..2^64-1 of the five collectives NCCL tunes takes a line with an explicit channel "
              f"count, on {comms}")
    else:
        print(f"  {len(checked.findings)} problem(s): NCCL would not run what the file says there")
    return EXIT_OK if checked.ok else EXIT_INVALID


def describe(path: str, doc: dict, result: ReplayResult) -> list[str]:
    """Human-readable lines: one verdict per profile and for the replay, then their problems."""
    lines = []
    width = max(len(n) for n in list(doc["profiles"]) + ["replay"])
    targets = doc.get("targets") or list(doc["profiles"])
    for name, verdict in doc["profiles"].items():
        problems = verdict["problems"]
        rejects = any(p.startswith("rejects:") for p in problems)
        label = "loads" if verdict["loads"] else "does not load" if rejects else "loads, but misbehaves"
        aside = "" if name in targets or len(targets) == len(doc["profiles"]) else " (not targeted)"
        lines.append(f"{name:<{width}}  {label}{aside}")
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


__all__ = ["CheckReport", "add_check_parser", "cmd_check", "describe", "exit_code", "report", "runtimes"]
