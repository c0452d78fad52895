"""Command line: argument parsing and printing only; ``main(argv) -> exit code``.

Exit codes: see synth.core.errors (0 ok, 1 internal error, 2 bad input, 3 infeasible,
4 invalid schedule, 5 unknown/timeout, 130 interrupted).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from synth import __version__
from synth.core.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_INPUT, EXIT_INVALID, InputError, SynthError

DEFAULT_COST_SIZES = "1K,64K,1M,16M,256M,1G"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) instead of usage dumps."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        raise InputError(f"{message} (see '{self.prog} --help')")


def _topology(spec: str):
    from synth.core.library import resolve_topology

    return resolve_topology(spec)


def _collective(spec: str, ranks: int, root: int | None, chunks: int):
    from synth.core.collectives import make_collective

    return make_collective(spec, ranks, root=root, chunks=chunks)


def _write_or_print(doc, output: str | None) -> None:
    from synth.core.io import dumps, write_text_atomic

    if output in (None, "-"):
        sys.stdout.write(dumps(doc))
    else:
        write_text_atomic(output, dumps(doc))
        print(f"wrote {output}", file=sys.stderr)


# ---------------------------------------------------------------------- topo / coll
def cmd_topo_list(args) -> int:
    from synth.core.library import list_topologies

    rows = list_topologies()
    width = max(len(name) for name, _ in rows)
    for name, description in rows:
        print(f"{name:<{width}}  {description}")
    return 0


def cmd_topo_show(args) -> int:
    from synth.core.topology_summary import describe

    topo = _topology(args.topology)
    if args.json:
        print(json.dumps(topo.to_dict(), indent=1))
    else:
        print(describe(topo))
    return 0


def cmd_coll_list(args) -> int:
    from synth.core.collectives import FILE_KINDS, REGISTRY

    for name, kind in sorted(REGISTRY.items()):
        rooted = " (rooted: --root R)" if kind.rooted else ""
        print(f"{name:<15} {kind.description}{rooted}")
    for name, text in sorted(FILE_KINDS.items()):
        print(f"{name:<15} {text}")
    return 0


def cmd_coll_show(args) -> int:
    ranks = args.ranks
    if ranks is None:
        if ":" in args.collective or args.collective.endswith(".json"):
            ranks = -1
        else:
            raise InputError("coll show needs -n N (the number of ranks)")
    coll = _collective(args.collective, ranks if ranks > 0 else _ranks_of_file(args.collective), args.root, args.chunks)
    if args.json:
        print(json.dumps(coll.to_dict(), indent=1))
        return 0
    print(f"{coll.name}: {coll.ranks} ranks, {coll.chunks} chunks, buffer {coll.buffer_chunks} chunks, "
          f"{'combining' if coll.combining else 'non-combining'}"
          + (f", root {coll.root}" if coll.root is not None else ""))
    for c, (pre, post) in enumerate(zip(coll.pre, coll.post)):
        print(f"  chunk {c:>3}: pre {sorted(pre)} -> post {sorted(post)}")
    return 0


def _ranks_of_file(spec: str) -> int:
    """Rank count of a file-based collective (read from the file itself)."""
    from synth.core.io import read_json

    kind, _, path = spec.partition(":")
    doc = read_json(path if path else spec)
    if kind == "alltoallv":
        rows = doc.get("chunks") if isinstance(doc, dict) else doc
        return len(rows) if isinstance(rows, list) else 0
    if isinstance(doc, dict) and isinstance(doc.get("ranks"), int):
        return doc["ranks"]
    raise InputError(f"{spec}: cannot tell the number of ranks; give -n N")


# ---------------------------------------------------------------------- verify / bounds / cost
def cmd_verify(args) -> int:
    from synth.core.io import load_schedule
    from synth.verify import verify

    schedule = load_schedule(args.file, check=False)
    violations = verify(schedule)
    coll, topo = schedule.collective, schedule.topology
    summary = (f"{coll.name} on {topo.name}: {len(schedule.steps)} steps, "
               f"{schedule.send_count} sends, rounds {schedule.total_rounds}")
    if args.json:
        print(json.dumps({
            "valid": not violations,
            "violations": [{"step": v.step, "kind": v.kind, "message": v.message} for v in violations],
        }, indent=1))
    elif violations:
        print(f"INVALID {summary}: {len(violations)} violation(s)")
        for v in violations:
            print(f"  {v}")
    else:
        print(f"valid {summary}")
    return EXIT_INVALID if violations else 0


def cmd_bounds(args) -> int:
    from synth.bounds.lower_bounds import lower_bounds
    from synth.cost import format_size, parse_size

    topo = _topology(args.topology)
    coll = _collective(args.collective, topo.ranks, args.root, args.chunks)
    coll.check_on(topo)
    size = parse_size(args.size)
    bounds = lower_bounds(topo, coll)
    doc = bounds.to_dict(size)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"lower bounds for {coll.name} on {topo.name} ({topo.ranks} ranks)")
    print(f"  steps              >= {doc['steps']}")
    print(f"  rounds per chunk   >= {doc['rounds_per_chunk'] or 'n/a (capacities are not whole numbers)'}")
    print(f"  time at {format_size(size):>6}     >= {doc['time_us']:.4g} us")
    print(f"  algbw              <= {doc['algbw_gbps']:.4g} GB/s")
    print(f"  busbw              <= {doc['busbw_gbps']:.4g} GB/s")
    if doc.get("binding"):
        print(f"  binding: {doc['binding']}")
    proven = doc.get("proven")
    if proven:
        print(f"  (the composition figure is what reports compare with; a schedule that reduces in"
              f" flight can beat it: the proven limit is rounds per chunk >= {proven.get('rounds_per_chunk')},"
              f" busbw <= {proven.get('busbw_gbps'):.4g} GB/s)")
    return 0


def cmd_cost(args) -> int:
    from synth.bounds.lower_bounds import lower_bounds
    from synth.cost import cost_rows, format_size, parse_sizes
    from synth.core.io import load_schedule

    schedule = load_schedule(args.file)
    sizes = parse_sizes(args.sizes)
    bounds = lower_bounds(schedule.topology, schedule.collective)
    rows = cost_rows(schedule, sizes, bounds)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    coll, topo = schedule.collective, schedule.topology
    print(f"{coll.name} on {topo.name}: {len(schedule.steps)} steps, {schedule.send_count} sends "
          f"({schedule.meta.get('algorithm') or schedule.meta.get('synthesizer') or 'unnamed'})")
    print(f"{'size':>8} {'step time us':>13} {'sim time us':>12} {'algbw GB/s':>11} {'busbw GB/s':>11} {'% of bound':>11}")
    for row in rows:
        frac = row["bound_fraction"]
        print(f"{format_size(row['size']):>8} {row['step_time_us']:>13.4f} {row['sim_time_us']:>12.4f} "
              f"{row['algbw_gbps']:>11.3f} {row['busbw_gbps']:>11.3f} "
              f"{(f'{100 * frac:.1f}%' if frac is not None else '-'):>11}")
    return 0


# ---------------------------------------------------------------------- baselines
def cmd_baseline(args) -> int:
    from synth.baselines import applicable, build_baseline

    topo = _topology(args.topology)
    name = args.collective
    coll = _collective(name, topo.ranks, args.root, 1)
    coll.check_on(topo)
    if args.algo == "list":
        table = applicable(topo, name, args.root)
        if not table:
            print(f"no baseline builds {name}")
        for algo, reason in table.items():
            print(f"{algo:<20} {'applies' if reason is None else 'n/a: ' + reason}")
        return 0
    schedule = build_baseline(topo, args.algo, name, args.root, args.chunks)
    _write_or_print(schedule.to_dict(), args.output)
    return 0


# ---------------------------------------------------------------------- synthesis
def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _report_unsolved(result, what: str) -> int:
    from synth.core.errors import EXIT_INFEASIBLE, EXIT_UNKNOWN
    from synth.core.schedule import Status

    if result.status == Status.INFEASIBLE:
        detail = f": {result.message}" if result.message else ""
        print(f"synth: infeasible: {what}{detail} (proven)", file=sys.stderr)
        return EXIT_INFEASIBLE
    if result.status == Status.TIMEOUT:
        print(f"synth: unknown: the solver timed out on {what} after {result.seconds:.1f} s; "
              "nothing was proven (raise --time-limit)", file=sys.stderr)
        return EXIT_UNKNOWN
    print(f"synth: error: the solver failed on {what}: {result.message}", file=sys.stderr)
    return EXIT_INTERNAL


def cmd_solve(args) -> int:
    if args.backend == "greedy":
        return _solve_greedy(args)
    if args.backend == "milp":
        return _solve_milp(args)
    _reject_milp_options(args)
    from synth.smt.strategies import solve_instance

    topo = _topology(args.topology)
    if args.steps is None:
        raise InputError("--backend smt needs --steps S (or use least-steps / pareto)")
    rounds = args.rounds if args.rounds is not None else args.steps
    if args.steps < 1 or rounds < args.steps or args.chunks < 1:
        raise InputError("need steps >= 1, rounds >= steps and chunks >= 1")
    what = f"{args.collective} on {topo.name} with {args.steps} steps, {rounds} rounds, {args.chunks} chunks"
    result = solve_instance(topo, args.collective, args.root, args.steps, rounds, args.chunks,
                            args.time_limit, _progress)
    if result.schedule is None:
        return _report_unsolved(result, what)
    _write_or_print(result.schedule.to_dict(), args.output)
    return 0


def _reject_milp_options(args) -> None:
    """Options only the milp backend reads are errors elsewhere; chunks default to 1 there."""
    for flag, given in (("--sketch", args.sketch), ("--solver", args.solver), ("--gap", args.gap),
                        ("--threads", args.threads)):
        if given is not None:
            raise InputError(f"{flag} applies to --backend milp")
    if args.chunks is None:
        args.chunks = 1


def _solve_milp(args) -> int:
    import time

    from synth.milp.solver import MilpOptions
    from synth.cost import format_size, parse_size
    from synth.milp.synthesize import synthesize
    from synth.milp.sketch import default_sketch, load_sketch

    if args.steps is not None or args.rounds is not None:
        raise InputError("--backend milp chooses its own steps and rounds; drop --steps/--rounds")
    topo = _topology(args.topology)
    options = MilpOptions(solver=args.solver or "highs", time_limit=args.time_limit, gap=args.gap,
                          threads=args.threads)
    size = parse_size(args.size) if args.size is not None else None
    if args.sketch is not None:
        sketch = load_sketch(args.sketch, topo)
        if size is not None and size != sketch.size:
            raise InputError(f"--size {args.size} differs from the sketch's size {format_size(sketch.size)}; "
                             "give one of them")
        if args.chunks is not None and args.chunks != sketch.chunk_up:
            raise InputError(f"--chunks {args.chunks} differs from the sketch's chunk_up {sketch.chunk_up}; "
                             "give one of them")
        _progress(f"sketch: {args.sketch}: " + "; ".join(sketch.describe()))
    else:
        sketch, reasons = default_sketch(topo, args.collective, size)
        if args.chunks is not None:
            from dataclasses import replace

            sketch = replace(sketch, chunk_up=args.chunks)
            reasons = [r if not r.startswith("chunk_up") else f"chunk_up: {args.chunks} (--chunks)" for r in reasons]
        _progress(f"sketch: derived default (see 'synth sketch show {topo.name}'): " + "; ".join(reasons))
    started = time.perf_counter()
    result = synthesize(topo, args.collective, sketch, options, root=args.root, progress=_progress)
    seconds = time.perf_counter() - started
    flag = "" if result.status == "solved" else " [TIMEOUT: routing plan not proven optimal]"
    _progress(f"{topo.name} {args.collective} milp: {len(result.schedule.steps)} steps, {seconds:.1f} s; at "
              f"{format_size(result.size)}: {result.time_us:.1f} us = {result.percent_of_bound:.1f}% of the bound "
              f"{result.bound_us:.1f} us (event simulation {result.simulated_us:.1f} us){flag}")
    _write_or_print(result.schedule.with_meta(solve_seconds=round(seconds, 3)).to_dict(), args.output)
    return 0


def _solve_greedy(args) -> int:
    import time

    from synth.bounds.lower_bounds import lower_bounds
    from synth.cost import format_size, parse_size, step_time_us
    from synth.greedy.pipeline import pipelined

    if args.steps is not None or args.rounds is not None:
        raise InputError("--backend greedy chooses its own steps and rounds; drop --steps/--rounds")
    _reject_milp_options(args)
    if args.chunks < 1:
        raise InputError("--chunks must be >= 1")
    topo = _topology(args.topology)
    size = parse_size(args.size or "1G")
    started = time.perf_counter()
    schedule = pipelined(topo, args.collective, args.chunks, args.root)
    seconds = time.perf_counter() - started
    bound = lower_bounds(topo, schedule.collective).time_us(size)
    took = step_time_us(schedule, size)
    _progress(f"{topo.name} {args.collective} greedy (C={args.chunks}): {len(schedule.steps)} steps, "
              f"{seconds:.2f}s; at {format_size(size)}: {took:.1f} us, {100 * bound / took:.1f}% of the bound")
    _write_or_print(schedule.with_meta(solve_seconds=round(seconds, 4)).to_dict(), args.output)
    return 0


def cmd_least_steps(args) -> int:
    from synth.smt.strategies import least_steps

    topo = _topology(args.topology)
    result, _ = least_steps(topo, args.collective, args.root, args.chunks, args.extra_rounds,
                            args.max_steps, args.time_limit, _progress)
    if result.schedule is None:
        return _report_unsolved(result, f"{args.collective} on {topo.name}")
    meta = result.schedule.meta
    _progress(f"least steps: (S={meta.get('steps')}, R={meta.get('rounds')}, C={meta.get('chunks')})")
    _write_or_print(result.schedule.to_dict(), args.output)
    return 0


def cmd_pareto(args) -> int:
    from synth.core.io import write_frontier
    from synth.smt.strategies import pareto

    topo = _topology(args.topology)
    frontier = pareto(topo, args.collective, args.root, args.max_chunks, args.time_limit, _progress,
                      direct_allreduce=args.direct)
    path = write_frontier(args.output, frontier)
    for point in frontier.points:
        print(f"(S={point.steps}, R={point.rounds}, C={point.chunks})  rounds/chunk {point.ratio}  "
              f"{point.solve_seconds:.2f} s")
    state = "complete" if frontier.complete else (
        "INCOMPLETE (interrupted)" if frontier.note == "interrupted" else "INCOMPLETE (some attempts timed out)")
    print(f"frontier {state}: {len(frontier.points)} point(s); bounds steps {frontier.bounds.get('steps')}, "
          f"rounds/chunk {frontier.bounds.get('rounds_per_chunk')}; wrote {path}")
    if frontier.note:
        print(f"note: {frontier.note}")
    if frontier.note == "interrupted":
        return EXIT_INTERRUPTED
    return 0


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="synth", description="Collective-communication schedule synthesizer.")
    parser.add_argument("--version", action="version", version=f"synth {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    topo = sub.add_parser("topo", help="topology library: list, show")
    topo_sub = topo.add_subparsers(dest="topo_command", parser_class=_Parser, metavar="ACTION")
    p = topo_sub.add_parser("list", help="list library topologies and generators")
    p.set_defaults(func=cmd_topo_list)
    p = topo_sub.add_parser("show", help="describe a topology (name, generator, NAMExK or file)")
    p.add_argument("topology")
    p.add_argument("--json", action="store_true", help="print the synth.topology document")
    p.set_defaults(func=cmd_topo_show)

    coll = sub.add_parser("coll", help="collectives: list, show")
    coll_sub = coll.add_subparsers(dest="coll_command", parser_class=_Parser, metavar="ACTION")
    p = coll_sub.add_parser("list", help="list collectives")
    p.set_defaults(func=cmd_coll_list)
    p = coll_sub.add_parser("show", help="show a collective's pre/post conditions")
    p.add_argument("collective")
    p.add_argument("-n", "--ranks", type=int, help="number of ranks")
    _add_coll_options(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_coll_show)

    p = sub.add_parser("verify", help="replay a synth.schedule file; exit 0 valid, 4 invalid, 2 unreadable")
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("bounds", help="lower bounds: steps, rounds per chunk, time, algbw/busbw")
    p.add_argument("topology")
    p.add_argument("collective")
    _add_coll_options(p)
    p.add_argument("--size", default="1G", help="collective size S (bytes, K/M/G = 1024^k; default 1G)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bounds)

    p = sub.add_parser("cost", help="cost of a schedule file over sizes, both models, %% of the bound")
    p.add_argument("file")
    p.add_argument("--sizes", default=DEFAULT_COST_SIZES, help=f"comma-separated sizes (default {DEFAULT_COST_SIZES})")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cost)

    p = sub.add_parser("baseline", help="build a classic algorithm as a verified schedule")
    p.add_argument("topology")
    p.add_argument("collective")
    p.add_argument("--algo", required=True, help="algorithm name, or 'list' for those that apply")
    p.add_argument("--root", type=int, help="root rank of a rooted collective (default 0)")
    p.add_argument("--chunks", type=int, help="pieces per rank/buffer for pipelining (algorithm default)")
    p.add_argument("-o", "--output", help="schedule file to write (default: stdout)")
    p.set_defaults(func=cmd_baseline)

    p = sub.add_parser("solve", help="synthesize a schedule: one k-synchronous instance (smt), the sketch-guided "
                                     "MILP router (milp), or a pipelined greedy schedule (greedy)")
    _add_problem(p)
    p.add_argument("--backend", choices=("smt", "milp", "greedy"), default="smt",
                   help="smt: exact instance (needs --steps); milp: sketch-guided router for big "
                        "multi-machine topologies; greedy: one round per step, many chunks")
    p.add_argument("--size", help="milp/greedy: size S to optimise and report at (default: the sketch's, 1G)")
    p.add_argument("--sketch", help="milp: a synth.sketch v1 file (default: derived, see 'synth sketch show')")
    p.add_argument("--solver", choices=("highs", "cbc"), help="milp: MILP/LP solver (default highs)")
    p.add_argument("--gap", type=float, help="milp: relative MIP gap to stop at (default: prove optimality)")
    p.add_argument("--threads", type=int, help="milp: solver threads")
    p.add_argument("--steps", type=int)
    p.add_argument("--rounds", type=int, help="total rounds (default: = steps)")
    p.add_argument("--chunks", type=int, help="chunks per rank (default 1; milp: the sketch's chunk_up)")
    p.add_argument("-o", "--output", help="schedule file to write (default: stdout)")
    p.set_defaults(func=cmd_solve)

    from synth.cli.check import add_check_parser
    from synth.cli.export import add_export_parser
    from synth.cli.report import add_report_parser
    from synth.cli.sketch import add_sketch_parser

    add_sketch_parser(sub)
    add_report_parser(sub)
    add_export_parser(sub)
    add_check_parser(sub)

    p = sub.add_parser("least-steps", help="fewest steps with rounds = steps + extra rounds")
    _add_problem(p)
    p.add_argument("--chunks", type=int, default=1, help="chunks per rank (default 1)")
    p.add_argument("--extra-rounds", type=int, default=0, help="rounds beyond one per step (default 0)")
    p.add_argument("--max-steps", type=int, help="give up after this many steps")
    p.add_argument("-o", "--output", help="schedule file to write (default: stdout)")
    p.set_defaults(func=cmd_least_steps)

    p = sub.add_parser("pareto", help="latency/bandwidth Pareto frontier of optimal schedules")
    _add_problem(p)
    p.add_argument("--max-chunks", type=int, default=8, help="largest chunks per rank to try (default 8)")
    p.add_argument("--direct", action="store_true",
                   help="allreduce: also search the direct encoding (overlapping reduce/copy trees; slower)")
    p.add_argument("-o", "--output", required=True, help="folder for frontier.json and schedules")
    p.set_defaults(func=cmd_pareto)
    return parser


def _add_problem(p: argparse.ArgumentParser) -> None:
    p.add_argument("topology")
    p.add_argument("collective")
    p.add_argument("--root", type=int, help="root rank of a rooted collective (default 0)")
    p.add_argument("--time-limit", type=float, default=120.0, help="seconds per solver attempt (default 120)")


def _add_coll_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=int, help="root rank of a rooted collective (default 0)")
    p.add_argument("--chunks", type=int, default=1, help="chunks per rank (default 1)")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        func = getattr(args, "func", None)
        if func is None:
            parser.print_help(sys.stderr)
            return EXIT_INPUT
        return func(args)
    except SynthError as exc:
        print(f"synth: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("synth: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug in synth: one line, traceback only on request
        if os.environ.get("SYNTH_DEBUG"):
            raise
        print(f"synth: internal error: {type(exc).__name__}: {exc} (set SYNTH_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL
