"""``synth report``: Pareto-frontier reports (see synth.report)."""

from __future__ import annotations

import sys

# synth.report.runner.DEFAULT_SIZES as the help shows it. The runner (bounds, networkx, matplotlib) is
# imported only when a report runs: --sizes defaults to None here and cmd_report puts the runner's
# value in its place; tests/test_startup.py checks this text still names it.
DEFAULT_SIZES_TEXT = "1K..4G"


def add_report_parser(sub) -> None:
    from synth.cli.common import add_sat_option

    p = sub.add_parser("report",
                       help="frontier + baselines + bounds over sizes: tables, plots, size->algorithm selection")
    p.add_argument("topology", nargs="?")
    p.add_argument("collective", nargs="?")
    p.add_argument("-o", "--output", help="folder (default results/TOPO/COLL)")
    p.add_argument("--sizes", help=f"A..B (powers of two) or a comma list (default {DEFAULT_SIZES_TEXT})")
    p.add_argument("--from", dest="from_dir", help="read the frontier from a 'synth pareto -o DIR' folder instead")
    p.add_argument("--time-limit", type=float, default=120.0, help="seconds per solver call (default 120)")
    p.add_argument("--calibration", default="default", metavar="CAL",
                   help="cost under this synth.calibration file's runtime terms; 'default': the built-in terms "
                        "(the default); 'none': the contract model with protocol factors only")
    p.add_argument("--all", action="store_true", help="regenerate every committed report under results/")
    p.add_argument("--force", action="store_true", help="with --all: redo reports that are already there")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="with --all: run N reports side by side, each in its own process; for one report: run "
                        "the MILP router's size variants side by side (default 1: one after the other in this process)")
    p.add_argument("--ray", metavar="ADDRESS", help="with --all: run the reports on a Ray cluster (auto, "
                                                    "ray://HOST:10001, or local for a private instance; needs "
                                                    "pip install 'synth[ray]')")
    p.add_argument("--job-timeout", type=float, metavar="SEC",
                   help="with --all: stop a report that runs longer and go on with the others")
    add_sat_option(p)
    p.add_argument("--max-threadblocks", type=int, metavar="N",
                   help="the fastest schedule within N thread blocks per rank at each size (at most N // blocks "
                        "instances; NCCL at most N channels); default: no budget")
    p.add_argument("--replot", metavar="DIR",
                   help="only redraw busbw.png, time.png, speedup.png and threadblocks.png of the report in DIR "
                        "from its report.json (into -o, default DIR)")
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    from synth.core.errors import InputError
    from synth.measure.calibration import load_calibration
    from synth.report.runner import CONTRACT, DEFAULT_SIZES, report, report_all

    if args.sizes is None:
        args.sizes = DEFAULT_SIZES
    if args.calibration != CONTRACT:
        load_calibration(args.calibration)  # a bad file is one line before any synthesis

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.replot:
        from synth.report.plots import replot

        if args.topology or args.collective or args.all or args.from_dir:
            raise InputError("--replot takes only DIR (and -o)")
        for path in replot(args.replot, args.output):
            print(f"wrote {path}", file=sys.stderr)
        return 0

    if args.all:
        if args.topology or args.collective or args.from_dir:
            raise InputError("--all takes no TOPO/COLL/--from")
        if args.jobs < 1:
            raise InputError(f"--jobs must be at least 1, got {args.jobs}")
        path, failed = report_all(args.output or "results", args.force, args.time_limit, say, jobs=args.jobs,
                                  job_timeout=args.job_timeout, sizes=args.sizes, ray=args.ray,
                                  calibration=args.calibration)
        print(f"wrote {path}", file=sys.stderr)
        if failed:
            print(f"synth: error: {len(failed)} report(s) failed: " + "; ".join(failed), file=sys.stderr)
            return 1
        return 0
    if not args.topology or not args.collective:
        raise InputError("report needs TOPO COLL (or --all)")
    if args.force or args.job_timeout is not None or args.ray:
        raise InputError("--force, --ray and --job-timeout apply to --all")
    if args.max_threadblocks is not None and args.max_threadblocks < 1:
        raise InputError(f"--max-threadblocks must be at least 1, got {args.max_threadblocks}")
    if args.jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {args.jobs}")
    if args.collective.partition(":")[0] in ("moe_dispatch", "moe_combine"):
        return _moe(args, say)
    out = args.output or f"results/{args.topology}/{args.collective}"
    doc = report(args.topology, args.collective, out, args.sizes, args.from_dir, args.time_limit, say, jobs=args.jobs,
                 calibration=args.calibration, max_threadblocks=args.max_threadblocks, sat=args.sat)
    print(f"wrote {out}/report.md, report.csv, report.json, busbw.png, time.png, speedup.png, threadblocks.png, "
          "selection.json", file=sys.stderr)
    for line in summary_lines(doc):
        print(line)
    return 0


def _moe(args, say) -> int:
    """A routing's report: its own size, the contract model (synth.report.moe)."""
    from pathlib import Path

    from synth.core.errors import InputError
    from synth.report.moe import moe_report
    from synth.report.moe import summary_lines as moe_lines

    if args.from_dir or args.max_threadblocks is not None or args.sizes != DEFAULT_SIZES_TEXT:
        raise InputError("a MoE routing fixes its size and has one plan per method: --from, --sizes and "
                         "--max-threadblocks do not apply")
    kind, _, path = args.collective.partition(":")
    out = args.output or f"results/{args.topology}/{kind}-{Path(path).stem}"
    doc = moe_report(args.topology, args.collective, out, args.time_limit, say)
    print(f"wrote {out}/report.md, report.json, schedules/", file=sys.stderr)
    for line in moe_lines(doc):
        print(line)
    return 0


def span_text(min_bytes: int, max_bytes: int | None) -> str:
    """A selection range [min, max] (inclusive bytes) as ``1M..32M`` ([low, high), K/M/G).

    >>> span_text(0, 1023), span_text(33554432, 268435455), span_text(1 << 30, None)
    ('0..1K', '32M..256M', '1G..')
    """
    from synth.cost import format_size

    return f"{format_size(min_bytes)}..{'' if max_bytes is None else format_size(max_bytes + 1)}"


def summary_lines(doc: dict) -> list[str]:
    """What ``synth report`` prints: one line per selection range, the sizes where synthesis is
    slower than NCCL, and last the verdict line."""
    from synth.cost import format_size

    lines = []
    for w in doc["fastest"]:
        versus = []
        if w.get("nccl_speedup") is not None:
            versus.append(f"{w['nccl_speedup']:.2f}x-{w['nccl_speedup_max']:.2f}x NCCL: {w['nccl']}")
        if w["speedup"] is not None:
            versus.append(f"{w['speedup']:.2f}x-{w['speedup_max']:.2f}x the best baseline: {w['best_baseline']}")
        lines.append(f"{span_text(w['min_bytes'], w['max_bytes'])}: {w['label']} {w['protocol']}"
                     + (f" ({'; '.join(versus)})" if versus else ""))
    if doc.get("slower_than_nccl"):
        worst = min(doc["slower_than_nccl"], key=lambda s: s["nccl_us"] / s["synthesized_us"])
        lines.append(f"synthesis slower than NCCL at {len(doc['slower_than_nccl'])} grid size(s); worst at "
                     f"{format_size(worst['size'])}: {worst['synthesized_us']:.2f} us against {worst['nccl']} "
                     f"{worst['nccl_us']:.2f} us")
    lines.append(doc["verdict"])
    return lines
