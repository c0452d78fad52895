"""``synth export``: lower a schedule file and write MSCCL XML or a synth.program JSON file.

Wired into synth.cli.main by ``add_export_parser(sub)``; ``cmd_export`` returns an exit code like
cli.py's commands. The schedule is re-verified on load; the footprint (thread blocks per rank,
channels, most steps in one thread block) goes to stderr; the file is written atomically, and
nothing is written when anything fails.
"""

from __future__ import annotations

import sys

from synth.core.errors import InputError

FORMATS = ("msccl-xml", "program-json")
DEFAULT_RUNTIME = "executor"  # for msccl-xml when --runtime is not given


def add_export_parser(sub) -> None:
    """Add ``export`` to ``sub`` (cli.py's subparsers action)."""
    from synth.lower.lowering import CHANNEL_POLICIES
    from synth.msccl.profiles import RUNTIMES
    from synth.program.ir import PROTOCOLS

    p = sub.add_parser("export", help="lower a schedule to thread blocks: MSCCL XML or synth.program JSON")
    p.add_argument("schedule", help="a synth.schedule file (verified on load)")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--runtime", choices=RUNTIMES,
                   help=f"MSCCL runtime whose limits apply (msccl-xml default: {DEFAULT_RUNTIME}; "
                        "program-json default: none)")
    p.add_argument("--proto", choices=PROTOCOLS, default="Simple", help="protocol (default Simple)")
    channels = p.add_mutually_exclusive_group()
    channels.add_argument("--channels", type=int, help="split each pair's traffic over up to N channels")
    channels.add_argument("--channel-policy", choices=CHANNEL_POLICIES,
                          help="one: channel 0; link: as many as the link's capacity (default); "
                               "max: up to 8 per pair")
    p.add_argument("--instances", type=int, default=1, help="replicate the program K times (default 1)")
    p.add_argument("--min-bytes", help="smallest call size it is selected for (bytes, K/M/G; default 0)")
    p.add_argument("--max-bytes", help="largest call size it is selected for, inclusive (default: unbounded)")
    p.add_argument("--inplace", action="store_true", help="the in-place variant (default: out of place)")
    p.add_argument("--max-threadblocks", type=int, help="at most N thread blocks per rank")
    p.add_argument("--name", help="algorithm name (default: derived from the schedule)")
    p.add_argument("-o", "--output", required=True, help="file to write")
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


def export_text(schedule, fmt: str, options) -> tuple[str, object]:
    """(file text, program) for ``schedule`` lowered with ``options`` in format ``fmt``."""
    from synth.exporters import EXPORTERS
    from synth.lower.lowering import lower

    if fmt not in EXPORTERS:
        raise InputError(f"unknown export format {fmt!r}; known: {', '.join(EXPORTERS)}")
    program = lower(schedule, options)
    return EXPORTERS[fmt][1](program, options.runtime), program


def footprint(program) -> str:
    """One line: thread blocks per rank, channels, the longest thread block."""
    return (f"footprint: {program.threadblocks_per_rank} thread blocks per rank, {program.channels} "
            f"channel(s), at most {program.max_ops_per_threadblock} steps per thread block, "
            f"nchunksperloop {program.chunks_per_loop}")


def cmd_export(args) -> int:
    from synth.core.io import load_schedule, write_text_atomic
    from synth.lower.lowering import LoweringOptions

    runtime = args.runtime or (DEFAULT_RUNTIME if args.format == "msccl-xml" else None)
    options = LoweringOptions(
        runtime=runtime, protocol=args.proto,
        channel_policy="max" if args.channels is not None else (args.channel_policy or "link"),
        channels=args.channels, instances=args.instances, inplace=args.inplace,
        max_threadblocks=args.max_threadblocks, min_bytes=_size(args.min_bytes, 0, "--min-bytes"),
        max_bytes=_size(args.max_bytes, None, "--max-bytes"), name=args.name)
    schedule = load_schedule(args.schedule)
    text, program = export_text(schedule, args.format, options)
    print(footprint(program) + (f" ({runtime})" if runtime else ""), file=sys.stderr)
    write_text_atomic(args.output, text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
