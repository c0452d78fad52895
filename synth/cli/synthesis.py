"""``synth solve`` (smt, milp, greedy backends), ``synth least-steps`` and ``synth pareto``."""

from __future__ import annotations

import sys
import time

from synth.cli.common import (
    add_calibration_option,
    add_problem,
    add_sat_option,
    progress,
    smt_options,
    terms_of,
    topology_of,
    write_or_print,
)
from synth.core.errors import EXIT_INTERRUPTED, InputError


def add_synthesis_parsers(sub) -> None:
    """Add ``solve``, ``least-steps`` and ``pareto`` to ``sub``."""
    from synth import synthesizers

    p = sub.add_parser("solve", help="synthesize a schedule: one k-synchronous instance (smt), the sketch-guided "
                                     "MILP router (milp), or a pipelined greedy schedule (greedy)")
    add_problem(p)
    p.add_argument("--backend", choices=(synthesizers.AUTO, *synthesizers.names()), default=synthesizers.AUTO,
                   help="; ".join(f"{name}: {synthesizers.get(name).summary}" for name in synthesizers.names())
                        + "; auto (default): the first of these that takes the problem")
    p.add_argument("--size", help="milp/greedy: size S to optimise and report at (default: the sketch's, 1G); "
                                  "smt: the size --calibration reports at (default 1G)")
    p.add_argument("--sketch", help="milp: a synth.sketch v1 file (default: derived, see 'synth sketch show')")
    p.add_argument("--solver", choices=("highs", "cbc"), help="milp: MILP/LP solver (default highs)")
    p.add_argument("--gap", type=float, help="milp: relative MIP gap to stop at (default: prove optimality)")
    p.add_argument("--threads", type=int, help="milp: solver threads")
    p.add_argument("--steps", type=int)
    p.add_argument("--rounds", type=int, help="total rounds (default: = steps)")
    p.add_argument("--chunks", type=int, help="chunks per rank (default 1; milp: the sketch's chunk_up)")
    p.add_argument("--direct", action="store_true",
                   help="smt, allreduce: the direct encoding (reduction in flight) instead of reduce_scatter + "
                        "allgather")
    add_sat_option(p)
    p.add_argument("--max-threadblocks", type=int, metavar="N",
                   help="plan within N thread blocks per rank: every rank sends to at most N peers and receives "
                        "from at most N, over links a peer MILP keeps (docs/reports.md)")
    add_calibration_option(p, "also report the schedule's time under a runtime's terms at --size (a "
                              "synth.calibration file, or 'default'); the search itself uses the contract model, "
                              "but for greedy's switch planner, which plans under these terms")
    p.add_argument("-o", "--output", help="schedule file to write (default: stdout)")
    p.add_argument("--stats", action="store_true",
                   help="end with one line on stderr: the command's wall time (synthesis, verification, bound, "
                        "writing) and its peak memory (resident set size)")
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser("least-steps", help="fewest steps with rounds = steps + extra rounds")
    add_problem(p)
    p.add_argument("--chunks", type=int, default=1, help="chunks per rank (default 1)")
    p.add_argument("--extra-rounds", type=int, default=0, help="rounds beyond one per step (default 0)")
    p.add_argument("--max-steps", type=int, help="give up after this many steps")
    add_sat_option(p)
    p.add_argument("-o", "--output", help="schedule file to write (default: stdout)")
    p.set_defaults(func=cmd_least_steps)

    p = sub.add_parser("pareto", help="latency/bandwidth Pareto frontier of optimal schedules")
    add_problem(p)
    p.add_argument("--max-chunks", type=int,
                   help="largest chunks per rank to try (default 16 for broadcast and reduce, 8 otherwise)")
    p.add_argument("--direct", action="store_true",
                   help="allreduce: also search the direct encoding (overlapping reduce/copy trees; slower)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="N engines and seeds race on every SAT check, the first answer wins (a portfolio; "
                        "allreduce: its reduce-scatter and allgather frontiers side by side, each with N/2; "
                        "default 1)")
    add_sat_option(p)
    p.add_argument("--certify", action="store_true",
                   help="every infeasible budget gets a certificate, checked before it prunes anything: DRAT "
                        "proofs, exact LP certificates; written under DIR/certificates ('synth check-proof DIR')")
    p.add_argument("-o", "--output", required=True, help="folder for frontier.json and schedules")
    p.set_defaults(func=cmd_pareto)


def cmd_solve(args) -> int:
    """One problem through the synthesizer registry: the backend named (or ``auto``), its answer
    verified there, a summary line, and the schedule."""
    from synth import synthesizers

    started = time.perf_counter()
    terms_of(args)  # a bad calibration is one line before any search
    topo = topology_of(args.topology)
    args.terms = terms_of(args, topo)
    sketch = _sketch_file(args, topo)
    problem = synthesizers.Problem(topo, args.collective, args.root, args.chunks, args.steps, args.rounds,
                                   sketch.size if sketch is not None else _size(args), args.max_threadblocks)
    backend = synthesizers.choose(problem, args.backend)
    _reject_foreign_options(args, backend.name)
    options = synthesizers.Options(time_limit=args.time_limit, solver=args.solver, gap=args.gap,
                                   threads=args.threads, sketch=sketch, progress=progress, direct=args.direct,
                                   smt=smt_options(args) if backend.name == "smt" else None, terms=args.terms)
    result = synthesizers.synthesize(problem, options, backend.name)
    result.schedule_or_raise(_what(problem))  # infeasible (3), unknown (5) or a solver failure (1)
    if "size" in result.details:
        progress(_summary_line(problem, result))
    _runtime_line(args, result.schedule, result.details.get("size"))
    write_or_print(result.schedule.with_meta(solve_seconds=round(result.seconds, 4)).to_dict(), args.output)
    if args.stats:
        progress(f"stats: {time.perf_counter() - started:.1f} s wall (synthesis {result.seconds:.1f} s), "
                 f"peak memory {peak_memory_text()}")
    return 0


def peak_memory_text() -> str:
    """This process's peak resident set size so far, as '1.72 GB' (10^9 bytes); 'unknown' where
    the platform does not say (no ``resource`` module)."""
    try:
        import resource
    except ImportError:  # pragma: no cover (Windows)
        return "unknown"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak *= 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return f"{peak / 1e9:.2f} GB"


def _size(args) -> int | None:
    from synth.cost import parse_size

    return parse_size(args.size) if args.size is not None else None


def _sketch_file(args, topo):
    """The --sketch file's sketch (None without one), checked against --size and --chunks."""
    if args.sketch is None:
        return None
    from synth.cost import format_size
    from synth.milp.sketch import load_sketch

    sketch = load_sketch(args.sketch, topo)
    size = _size(args)
    if size is not None and size != sketch.size:
        raise InputError(f"--size {args.size} differs from the sketch's size {format_size(sketch.size)}; "
                         "give one of them")
    if args.chunks is not None and args.chunks != sketch.chunk_up:
        raise InputError(f"--chunks {args.chunks} differs from the sketch's chunk_up {sketch.chunk_up}; "
                         "give one of them")
    progress(f"sketch: {args.sketch}: " + "; ".join(sketch.describe()))
    return sketch


def _reject_foreign_options(args, backend: str) -> None:
    """Options only one backend reads are errors with the others."""
    if args.direct and backend != "smt":
        raise InputError("--direct applies to --backend smt (allreduce with --steps)")
    if args.sat != "auto" and backend != "smt":
        raise InputError("--sat applies to --backend smt")
    if backend == "milp":
        return
    for flag, given in (("--sketch", args.sketch), ("--solver", args.solver), ("--gap", args.gap),
                        ("--threads", args.threads)):
        if given is not None:
            raise InputError(f"{flag} applies to --backend milp")


def _what(problem) -> str:
    rounds = problem.steps if problem.rounds is None else problem.rounds
    return (f"{problem.collective} on {problem.topology.name} with {problem.steps} steps, {rounds} rounds, "
            f"{problem.chunks or 1} chunks")


def _summary_line(problem, result) -> str:
    """``TOPO COLL BACKEND: N steps, T s; at SIZE: t us = P% of the bound B us`` (and the event
    simulation and a TIMEOUT flag where the backend gives them)."""
    from synth.core.schedule import Status
    from synth.cost import format_size

    d = result.details
    line = (f"{problem.topology.name} {problem.collective} {result.backend}: {len(result.schedule.steps)} steps, "
            f"{result.seconds:.1f} s; at {format_size(d['size'])}: {d['time_us']:.1f} us = "
            f"{d['percent_of_bound']:.1f}% of the bound {d['bound_us']:.1f} us")
    if "simulated_us" in d:
        line += f" (event simulation {d['simulated_us']:.1f} us)"
    if problem.max_peers is not None:
        line += f"; within {problem.max_peers} send and receive peers per rank"
    if result.status is Status.TIMEOUT:
        line += " [TIMEOUT: routing plan not proven optimal]"
    return line


def _runtime_line(args, schedule, size: int | None = None) -> None:
    """With --calibration: one progress line, the schedule's time under the runtime's terms at the
    size (--size, else ``size``, else 1G) and its share of the runtime bound there."""
    from synth.bounds.runtime import runtime_bounds
    from synth.cost import best_protocol, format_size, parse_size

    terms = args.terms
    if terms is None:
        return
    at = parse_size(args.size) if args.size is not None else (size or 1 << 30)
    protocol, took = best_protocol(schedule, at, terms)
    bound = runtime_bounds(schedule.topology, schedule.collective, terms).time_us(at)
    progress(f"under calibration {terms.label} at {format_size(at)}: {took:.1f} us ({protocol}, "
             f"{terms.channels(at, protocol)} instances) = {100 * bound / took:.1f}% of the runtime bound "
             f"{bound:.1f} us")


def cmd_least_steps(args) -> int:
    from synth.smt.strategies import least_steps

    topo = topology_of(args.topology)
    result, _ = least_steps(topo, args.collective, args.root, args.chunks, args.extra_rounds,
                            args.max_steps, args.time_limit, progress, smt_options(args))
    meta = result.schedule_or_raise(f"{args.collective} on {topo.name}").meta
    progress(f"least steps: (S={meta.get('steps')}, R={meta.get('rounds')}, C={meta.get('chunks')})")
    progress(SRC_LEGEND)
    write_or_print(result.schedule.to_dict(), args.output)
    return 0


SRC_LEGEND = ("S = steps, R = rounds (a step of r rounds carries up to r chunks per unit of link capacity), "
              "C = chunks per rank; rounds/chunk = R/C, the bandwidth cost")


def _judged_bound(bounds: dict, direct: bool) -> tuple[str | None, str]:
    """(the rounds/chunk bound the frontier is judged against, what it is). Allreduce points are
    reduce_scatter + allgather compositions, so the composition bound applies to them; with
    --direct the proven bound does (a direct schedule may reduce in flight)."""
    proven, composition = bounds.get("rounds_per_chunk"), bounds.get("composition_rounds_per_chunk")
    if composition is None:
        return proven, "the proven bound"
    if direct:
        return proven, f"the proven bound, for schedules that reduce in flight; compositions: >= {composition}"
    return composition, (f"reduce_scatter + allgather composition bound, what these points are; the proven "
                         f"{proven} needs reduction in flight: --direct searches for it")


def _frontier_state(frontier, bound: str | None) -> str:
    """'complete, meets ...' / 'complete, best ... above ...' / 'INCOMPLETE (...)': complete means no
    attempt timed out; whether the best point meets the bound is said separately."""
    from fractions import Fraction

    if not frontier.complete:
        return ("INCOMPLETE (interrupted)" if frontier.note == "interrupted"
                else "INCOMPLETE (some attempts timed out)")
    if not frontier.points or bound is None:
        return "complete (no attempt timed out)"
    best = min(point.ratio for point in frontier.points)
    if best <= Fraction(bound):
        return f"complete (no attempt timed out; best rounds/chunk {best} meets the bound {bound})"
    return (f"complete (no attempt timed out; best rounds/chunk {best} is above the bound {bound}: "
            "none within --max-chunks reaches it)")


def _portfolio(args) -> int:
    """Racing engines per check: --jobs, shared by allreduce's two part frontiers."""
    return max(1, args.jobs // 2) if args.collective == "allreduce" else args.jobs


def cmd_pareto(args) -> int:
    from synth.core.errors import InputError
    from synth.core.io import write_frontier
    from synth.smt.strategies import pareto

    if args.jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {args.jobs}")
    if args.max_chunks is not None and args.max_chunks < 1:
        raise InputError(f"--max-chunks must be at least 1, got {args.max_chunks}")
    topo = topology_of(args.topology)
    frontier = pareto(topo, args.collective, args.root, args.max_chunks, args.time_limit, progress,
                      options=smt_options(args, args.certify, _portfolio(args)), direct_allreduce=args.direct,
                      jobs=args.jobs)
    path = write_frontier(args.output, frontier)
    if args.certify:
        from synth.smt.proof_files import write_certificates

        count = write_certificates(args.output, topo, frontier.attempts)
        print(f"certificates: {count} infeasible budget(s), each checked; 'synth check-proof {args.output}' "
              "checks them again")
    for point in frontier.points:
        print(f"(S={point.steps}, R={point.rounds}, C={point.chunks})  rounds/chunk {point.ratio}  "
              f"{point.solve_seconds:.2f} s")
    if frontier.points:
        print(SRC_LEGEND)
    bound, which = _judged_bound(frontier.bounds, args.direct)
    print(f"bounds: steps >= {frontier.bounds.get('steps')}, rounds/chunk >= {bound} ({which})")
    state = _frontier_state(frontier, bound)
    print(f"frontier {state}: {len(frontier.points)} point(s); wrote {path}")
    if frontier.note:
        print(f"note: {frontier.note}")
    if frontier.note == "interrupted":
        return EXIT_INTERRUPTED
    return 0
