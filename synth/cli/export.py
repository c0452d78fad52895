"""``synth export``: lower a schedule file and write MSCCL XML or a synth.program JSON file; or
lower every range of a size selection (``synth report``'s selection.json) into a folder.

Wired into synth.cli.main by ``add_export_parser(sub)``; ``cmd_export`` returns an exit code like
cli.py's commands. The input is recognised by its ``format``: a ``synth.schedule`` is re-verified
on load, lowered under ``--protocol`` (our names simple/ll128/ll or MSCCL's Simple/LL128/LL, any
case; ``--proto`` is the same option) and written to the file ``-o`` (MSCCL XML starts with a comment
naming the runtime it was written for, synth.msccl.target); its footprint (thread blocks
per rank, channels, most steps in one thread block) goes to stderr. A ``synth.selection`` is
exported whole into the folder ``-o`` (synth.exporters.selection): one file per size range with
that range's protocol and bytes, every other option applying to every file; one stderr line per
file and a summary. The folder must be new, empty, or hold only files an earlier selection export
wrote (names as ``selection.file_name`` makes them), which are then replaced. Nothing is written
when anything fails: a file is written atomically, a folder is filled beside its destination and
renamed into place.
"""

from __future__ import annotations

import sys
from pathlib import Path

from synth.core.errors import InputError

DEFAULT_PROTOCOL = "Simple"


def _protocol(text: str) -> str:
    """argparse type: MSCCL's spelling of a protocol named our way or MSCCL's, any case."""
    import argparse

    from synth.program.ir import PROTOCOL_NAMES, PROTOCOLS, msccl_protocol

    spelled = msccl_protocol(text)
    if spelled is None:
        raise argparse.ArgumentTypeError(f"unknown protocol {text!r}; known: {', '.join(PROTOCOL_NAMES)} "
                                         f"(or {', '.join(PROTOCOLS)})")
    return spelled


def add_export_parser(sub) -> None:
    """Add ``export`` to ``sub`` (cli.py's subparsers action)."""
    from synth.exporters import EXPORTERS
    from synth.lower.policies import CHANNEL_POLICIES
    from synth.msccl.runtimes import RUNTIMES
    from synth.program.ir import PROTOCOL_NAMES, PROTOCOLS

    p = sub.add_parser("export", help="lower a schedule (or every range of a selection.json) to thread blocks: "
                                      "MSCCL XML or synth.program JSON")
    p.add_argument("schedule", help="a synth.schedule file (verified on load), or a synth.selection file "
                                    "(synth report's selection.json: -o is then a folder, one file per size range)")
    p.add_argument("--format", required=True, choices=tuple(EXPORTERS),
                   help="; ".join(f"{e.name}: {e.description}" for e in EXPORTERS.values()))
    defaults = "; ".join(f"{e.name} default: {e.default_runtime or 'none'}" for e in EXPORTERS.values())
    p.add_argument("--runtime", choices=RUNTIMES, type=str.lower,
                   help=f"MSCCL runtime whose limits apply ({defaults})")
    p.add_argument("--protocol", "--proto", dest="protocol", type=_protocol, metavar="PROTOCOL",
                   help=f"protocol: {', '.join(PROTOCOL_NAMES)} or MSCCL's {', '.join(PROTOCOLS)}, any case "
                        f"(default {DEFAULT_PROTOCOL}; a selection names it per range)")
    channels = p.add_mutually_exclusive_group()
    channels.add_argument("--channels", type=int, help="split each pair's traffic over up to N channels")
    channels.add_argument("--channel-policy", choices=CHANNEL_POLICIES,
                          help="one: channel 0; link: as many as the link's capacity (default); "
                               "max: up to 8 per pair")
    p.add_argument("--instances", type=int, help="replicate the program K times (default 1; with --calibration: "
                                                 "as many as the model's thread blocks per link at --size)")
    p.add_argument("--calibration", metavar="CAL",
                   help="choose the protocol and instances the runtime model finds fastest at --size (a "
                        "synth.calibration file, or 'default'); what --protocol/--instances give is kept")
    p.add_argument("--size", help="with --calibration: the call size to choose for (default: --max-bytes, else 1G)")
    p.add_argument("--min-bytes", help="smallest call size it is selected for (bytes, K/M/G; default 0)")
    p.add_argument("--max-bytes", help="largest call size it is selected for, inclusive (default: unbounded)")
    p.add_argument("--inplace", action="store_true", help="the in-place variant (default: out of place)")
    p.add_argument("--mscclpp-version", choices=("0.8", "0.9", "0.10"),
                   help="mscclpp-json: the mscclpp release the plan is for (default 0.10; every op written exists "
                        "from 0.8)")
    p.add_argument("--max-threadblocks", type=int, help="at most N thread blocks per rank")
    p.add_argument("--name", help="algorithm name (default: derived from the schedule)")
    p.add_argument("-o", "--output", required=True, help="file to write (for a selection: the folder)")
    p.set_defaults(func=cmd_export)


def _size(text: str | None, default: int | None, flag: str) -> int | None:
    from synth.cost import parse_size

    if text is None:
        return default
    if str(text).strip() == "0":
        return 0
    try:
        return parse_size(text)
    except InputError as exc:
        raise InputError(f"{flag}: {exc}") from None


def footprint(program, text: str = "") -> str:
    """One line: thread blocks per rank, channels, the longest thread block (of an MSCCL++ plan,
    ``text``, when ``program`` is None)."""
    if program is None:
        import json

        from synth.mscclpp.plan import read_plan, summary

        return "plan: " + summary(read_plan(json.loads(text))[0]).split(": ", 1)[1]
    switches = f", {program.switch_ops} switch ops" if program.switch_ops else ""
    return (f"footprint: {program.threadblocks_per_rank} thread blocks per rank, {program.channels} "
            f"channel(s), at most {program.max_ops_per_threadblock} steps per thread block, "
            f"nchunksperloop {program.chunks_per_loop}{switches}")


def _options(args, runtime: str | None):
    from synth.lower.lowering import LoweringOptions

    return LoweringOptions(
        runtime=runtime, protocol=args.protocol or DEFAULT_PROTOCOL,
        channel_policy="max" if args.channels is not None else (args.channel_policy or "link"),
        channels=args.channels, instances=args.instances or 1, inplace=args.inplace,
        max_threadblocks=args.max_threadblocks, min_bytes=_size(args.min_bytes, 0, "--min-bytes"),
        max_bytes=_size(args.max_bytes, None, "--max-bytes"), name=args.name,
        mscclpp_version=args.mscclpp_version)


def _read_input(path: str):
    """The document in ``path``: InputError unless it says it is a schedule or a selection."""
    from synth.core.io import read_json
    from synth.core.schedule import SCHEDULE_FORMAT
    from synth.exporters.selection import SELECTION_FORMAT

    doc = read_json(path)
    if isinstance(doc, dict) and doc.get("format") not in (SCHEDULE_FORMAT, SELECTION_FORMAT):
        raise InputError(f"{path}: 'format' must be {SCHEDULE_FORMAT!r} (a schedule) or {SELECTION_FORMAT!r} "
                         f"(a size selection), got {doc.get('format')!r}")
    return doc


def cmd_export(args) -> int:
    """Export one schedule to the file ``-o``, or a selection to the folder ``-o``; the exit code."""
    from synth.core.io import write_text_atomic
    from synth.exporters import export_schedule, exporter
    from synth.exporters.selection import is_selection
    from synth.verify import schedule_from_doc

    if not exporter(args.format).writes_programs:
        return _export_nccl_settings(args)
    if exporter(args.format).plan is not None:
        _refuse_msccl_options(args)
    elif args.mscclpp_version is not None:
        raise InputError("--mscclpp-version applies to --format mscclpp-json")
    runtime = exporter(args.format).runtime(args.runtime)
    options = _options(args, runtime)
    doc = _read_input(args.schedule)
    if is_selection(doc):
        return _export_selection(args, doc, options)
    schedule = schedule_from_doc(doc, args.schedule)
    if args.calibration is not None:
        options = _calibrated(args, schedule, options)
    elif args.size is not None:
        raise InputError("--size applies with --calibration (it names the size to choose the protocol for)")
    text, program = export_schedule(schedule, args.format, options)
    text = _marked(text, args.format, runtime)
    print(footprint(program, text) + (f" ({runtime})" if runtime else ""), file=sys.stderr)
    write_text_atomic(args.output, text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _marked(text: str, fmt: str, runtime: str | None) -> str:
    """The file names the runtime it was written for where its format needs it (MSCCL XML: a
    comment before ``<algo>``, what ``synth check`` judges by default)."""
    from synth.exporters import exporter

    return exporter(fmt).marked(text, runtime)


def _calibrated(args, schedule, options):
    """``options`` with the protocol and instances fastest under the calibration at the size
    (those the user gave are kept); one stderr line says what was chosen and why."""
    from dataclasses import replace

    from synth.cost import best_protocol, format_size, parse_size, step_time_us
    from synth.lower.lowering import lower
    from synth.measure.calibration import load_terms
    from synth.program.ir import msccl_protocol

    terms = load_terms(args.calibration, schedule.topology.arch)
    size = parse_size(args.size) if args.size is not None else (options.max_bytes or 1 << 30)
    if args.protocol is None:
        name, took = best_protocol(schedule, size, terms)
    else:
        name = args.protocol.lower()  # MSCCL's spelling (Simple, LL128, LL) of a cost-model protocol
        took = step_time_us(schedule, size, name, terms)
    options = replace(options, protocol=msccl_protocol(name))
    wanted = terms.channels(size, name)
    if args.instances is None:
        per_instance = lower(schedule, replace(options, instances=1)).channels
        instances = max(1, wanted // max(1, per_instance))
        while instances > 1:
            try:
                lower(schedule, replace(options, instances=instances))
                break
            except InputError:
                instances //= 2
        options = replace(options, instances=instances)
    print(f"calibration {terms.label} at {format_size(size)}: {options.protocol}, {options.instances} instance(s) "
          f"(the model costs {wanted} thread blocks per link there: {took:.1f} us)", file=sys.stderr)
    return options


def _refuse_msccl_options(args) -> None:
    """The options that shape an MSCCL program do not apply to an MSCCL++ plan: one line."""
    given = [flag for flag, value in (("--runtime", args.runtime), ("--channels", args.channels),
                                      ("--channel-policy", args.channel_policy), ("--instances", args.instances),
                                      ("--calibration", args.calibration)) if value is not None]
    if given:
        raise InputError(f"{given[0]} does not apply to --format {args.format} (it shapes MSCCL programs)")


def _export_nccl_settings(args) -> int:
    """``--format nccl-tuner`` / ``nccl-env``: stock NCCL's fastest settings on a selection's machine
    (synth.tuner), one file (``-o``): for its collective and the other four NCCL tunes, which the
    same file steers (a call no line takes gets 1 channel)."""
    from synth.core.io import write_text_atomic
    from synth.exporters import selection as sel
    from synth.measure.calibration import load_calibration
    from synth.tuner.config import TUNED
    from synth.tuner.env import env_text
    from synth.tuner.tune import config_text, tune
    from synth.verify import load_schedule

    given = [flag for flag, value in (("--runtime", args.runtime), ("--protocol", args.protocol),
                                      ("--channels", args.channels), ("--channel-policy", args.channel_policy),
                                      ("--instances", args.instances), ("--size", args.size),
                                      ("--min-bytes", args.min_bytes), ("--max-bytes", args.max_bytes),
                                      ("--max-threadblocks", args.max_threadblocks), ("--name", args.name))
             if value is not None] + (["--inplace"] if args.inplace else [])
    if given:
        raise InputError(f"{given[0]} does not apply to --format {args.format} (NCCL's own settings, no program)")
    doc = _read_input(args.schedule)
    if not sel.is_selection(doc):
        raise InputError(f"{args.schedule}: --format {args.format} writes NCCL's settings for a whole collective: "
                         "give synth report's selection.json (or run 'synth tune TOPO')")
    selection = sel.parse_selection(doc, args.schedule)
    if selection.collective not in TUNED:
        raise InputError(f"{args.schedule}: NCCL tunes {', '.join(TUNED)} only, not {selection.collective}")
    topology = load_schedule(selection.schedule_path(selection.ranges[0])).topology
    label = args.calibration or "default"
    # every collective NCCL tunes, the selection's among them: a call no line takes gets 1 channel
    tuned = tune(topology, list(TUNED), [None], load_calibration(label), label)
    text = config_text(topology, tuned, label) if args.format == "nccl-tuner" else env_text(tuned)
    write_text_atomic(args.output, text)
    for table in tuned:
        print(table.summary(), file=sys.stderr)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _export_selection(args, doc, options) -> int:
    """Every range of the selection ``doc`` into the folder ``args.output``; see the module doc."""
    from synth.core.io import folder_problem, write_folder_atomic
    from synth.exporters import selection as sel

    given = [flag for flag, value in (("--protocol", args.protocol), ("--min-bytes", args.min_bytes),
                                      ("--max-bytes", args.max_bytes), ("--name", args.name),
                                      ("--calibration", args.calibration), ("--size", args.size)) if value is not None]
    if given:
        raise InputError(f"{args.schedule}: {given[0]} does not apply to a selection: each range sets its protocol, "
                         "bytes and name")
    selection = sel.parse_selection(doc, args.schedule)
    problem = folder_problem(args.output, sel.is_export_name)
    if problem:  # before the work of lowering; checked again when writing
        raise InputError(f"{args.output}: {problem}")
    files = sel.export_selection(selection, sel.load_schedules(selection), args.format, options)
    write_folder_atomic(args.output, {f.name: _marked(f.text, args.format, options.runtime) for f in files},
                        sel.is_export_name)
    if selection.unnamed_protocols:
        print(f"note: {args.schedule}: {selection.unnamed_protocols} of {len(selection.ranges)} range(s) name no "
              f"protocol (a selection written before protocols were named); exported as {sel.DEFAULT_PROTOCOL}",
              file=sys.stderr)
    for f in files:
        print(f"wrote {Path(args.output) / f.name}: {f.range.span} bytes, {f.range.protocol}, "
              f"{f.range.label or f.range.schedule}; {footprint(f.program, f.text)}", file=sys.stderr)
    print(_summary(args, selection, len(files), options.runtime), file=sys.stderr)
    return 0


def _summary(args, selection, count: int, runtime: str | None) -> str:
    """The last line: how many files, where, and which sizes they cover."""
    from synth.exporters.selection import gaps

    last = selection.ranges[-1].max_bytes
    holes = ", ".join(f"{a}..{b}" for a, b in gaps(selection))
    cover = (f"{selection.ranges[0].min_bytes}..{'unbounded' if last is None else last} bytes, "
             + (f"not covered: {holes}" if holes else "no gap"))
    where = f" for {runtime}" if runtime else ""
    return (f"wrote {count} {args.format} file(s){where} to {args.output}: {selection.collective} on "
            f"{selection.topology}, {cover}")
