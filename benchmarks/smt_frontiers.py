"""SMT synthesis benchmark: the frontier and least-steps runs of issue 3, timed, with peak memory.

Run: python benchmarks/smt_frontiers.py [--quick] [--only TEXT ...] [--sat ENGINE] [--certify] [--jobs N]
Each instance runs in a fresh process (so peak memory is its own). ``--sat``: the SAT engine
under the encoding (z3, cadical, kissat, auto). Times: "wall s" from the process's start to the
frontier's end (start-up and imports included, as ``synth pareto`` is run; the NCCL comparison
after it is not counted); "seconds" the search call alone; "bound s" the time inside
``lower_bounds`` (cuts, flow LPs); "solver s" the time spent inside the engine's checks (no
encoding, LP or start-up time). What the last two leave of "seconds" is the walk's own work:
encodings, step LPs, symmetries. ``--certify``: the walk certifies every
infeasible budget, and the last column is what ``synth check-proof`` takes on the certificates.
``--jobs N``: a portfolio of N racing engines on every check (as ``synth pareto --jobs N``, but
allreduce's two part walks run one after the other, each racing N, so every race is timed in
this process); its solver seconds are the wall seconds inside the races (the members' own
seconds overlap them). The SCCL/msccl-tools
figures are the ones recorded in the shared reference (peers.md, measured on a 2-core machine
like ours); the ring column is measured here, in the same run: the best frontier point's
time at 1 GiB against the topology-aware ring baseline's, both in the contract cost model.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time

INSTANCES = [
    # (label, kind, topology, collective, root, kwargs, SCCL reference seconds or note)
    ("dgx1 allgather pareto", "pareto", "dgx1", "allgather", None, {"max_chunks": 8}, "11.4 s"),
    ("dgx1 reduce_scatter pareto", "pareto", "dgx1", "reduce_scatter", None, {"max_chunks": 8}, "-"),
    ("dgx1 allreduce pareto", "pareto", "dgx1", "allreduce", None, {"max_chunks": 8}, "crashes"),
    ("dgx1 allreduce pareto +direct (30 s/attempt)", "pareto", "dgx1", "allreduce", None,
     {"max_chunks": 8, "direct_allreduce": True, "time_limit": 30}, "crashes"),
    ("dgx1 gather(0) pareto", "pareto", "dgx1", "gather", 0, {"max_chunks": 8}, "-"),
    ("dgx1 broadcast(0) pareto", "pareto", "dgx1", "broadcast", 0, {"max_chunks": 8}, "never ends"),
    ("dgx1 reduce(0) pareto", "pareto", "dgx1", "reduce", 0, {"max_chunks": 8}, "never ends"),
    ("dgx1 alltoall least-steps", "least", "dgx1", "alltoall", None, {}, "3.1 s"),
    ("dgx1 alltoall pareto C<=3", "pareto", "dgx1", "alltoall", None, {"max_chunks": 3}, "> 600 s"),
    ("ring:8 allgather pareto", "pareto", "ring:8", "allgather", None, {"max_chunks": 8}, "0.39 s"),
    ("ring:16 allgather pareto", "pareto", "ring:16", "allgather", None, {"max_chunks": 4}, "-"),
    ("hypercube:3 allgather pareto", "pareto", "hypercube:3", "allgather", None, {"max_chunks": 8}, "-"),
    ("torus:3x3 allgather pareto", "pareto", "torus:3x3", "allgather", None, {"max_chunks": 8}, "-"),
    ("dgx2 allgather pareto", "pareto", "dgx2", "allgather", None, {"max_chunks": 8}, "> 600 s (bound LP)"),
    ("dgx2 allgather least-steps", "least", "dgx2", "allgather", None, {}, "never ends (486 s for S=3)"),
    # issue 15: the hard 16-rank machines and deep pipelines, at the CLI's defaults (120 s an attempt)
    ("dgx1 broadcast(0) pareto, default chunks", "pareto", "dgx1", "broadcast", 0, {"time_limit": 120},
     "(3,5,12), (4,4,13) uncapped"),
    ("mi250 allgather pareto", "pareto", "mi250", "allgather", None, {"time_limit": 120}, "-"),
    ("torus:4x4 alltoall pareto", "pareto", "torus:4x4", "alltoall", None, {"time_limit": 120}, "-"),
    ("hypercube:4 allgather pareto", "pareto", "hypercube:4", "allgather", None, {"time_limit": 120}, "-"),
    ("torus:4x4 allreduce pareto", "pareto", "torus:4x4", "allreduce", None, {"time_limit": 120}, "-"),
    ("hypercube:4 allreduce pareto", "pareto", "hypercube:4", "allreduce", None, {"time_limit": 120}, "-"),
]
QUICK = {"dgx1 allgather pareto", "ring:8 allgather pareto", "dgx2 allgather least-steps"}
# the rows docs/smt.md compares the SAT engines on (issue 29); mi250 runs ~15 min an engine
ENGINE_ROWS = {"dgx1 allgather pareto", "dgx1 allreduce pareto", "dgx1 alltoall pareto C<=3", "dgx1 gather(0) pareto",
               "dgx1 broadcast(0) pareto", "torus:4x4 alltoall pareto", "torus:4x4 allreduce pareto",
               "hypercube:4 allgather pareto", "hypercube:4 allreduce pareto", "mi250 allgather pareto"}


def _run(kind, topo_name, coll, root, kwargs, sat, certify, jobs, out):
    from synth.baselines import build_baseline
    from synth.bounds.lower_bounds import bound_seconds
    from synth.core.library import resolve_topology
    from synth.cost import best_protocol
    from synth.smt.encoding import SmtOptions
    from synth.smt.sat.choice import resolve_sat
    from synth.smt.sat.engines import engine_seconds
    from synth.smt.strategies import least_steps, pareto

    topo = resolve_topology(topo_name)
    resolve_sat(sat, certify)  # an engine that is not installed: fail before the run
    options = SmtOptions(sat=sat, certify=certify, portfolio=jobs)
    started = time.perf_counter()
    checked = "-"
    if kind == "pareto":
        frontier = pareto(topo, coll, root, **{"time_limit": 300, **kwargs}, options=options)
        points = [(p.steps, p.rounds, p.chunks) for p in frontier.points]
        schedules = [p.schedule for p in frontier.points]
        verdict = "complete" if frontier.complete else "incomplete"
        if frontier.note and "not reached" in frontier.note:
            verdict += " (rounds bound unreachable)"
        if certify:
            checked = _check_again(frontier)
    else:
        result, _ = least_steps(topo, coll, root, time_limit=300, **kwargs, options=options)
        meta = result.schedule.meta if result.schedule else {}
        points = [(meta.get("steps"), meta.get("rounds"), meta.get("chunks"))] if result.schedule else []
        schedules = [result.schedule] if result.schedule else []
        verdict = result.status.value
    seconds = time.perf_counter() - started
    finished = time.time()  # the wall clock, which the parent read before starting this process
    bound = bound_seconds()
    ring_ratio = "-"
    try:  # what NCCL runs at 1 GiB (its fastest option), both at their best protocol
        nccl = build_baseline(topo, "nccl", coll, root, None, 1 << 30)
        best = min(best_protocol(s, 1 << 30)[1] for s in schedules)
        ring_ratio = f"{best_protocol(nccl, 1 << 30)[1] / best:.2f}x ({nccl.meta['nccl_algorithm']})"
    except Exception:  # noqa: BLE001 - a collective NCCL lacks only blanks the column
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    spent = engine_seconds()
    solver = spent["portfolio"] if "portfolio" in spent else sum(spent.values())
    engines = "+".join(sorted(spent)) or options.sat
    out.put((points, verdict, seconds, solver, engines, checked, peak, ring_ratio, finished, bound))


def _check_again(frontier) -> str:
    """Write the frontier's certificates and time ``synth check-proof`` on them: "N in S s"."""
    import tempfile

    from synth.core.io import write_frontier
    from synth.smt.proof_files import check_folder, write_certificates

    with tempfile.TemporaryDirectory() as folder:
        write_frontier(folder, frontier)
        count = write_certificates(folder, frontier.topology, frontier.attempts)
        began = time.perf_counter()
        verdicts = check_folder(folder)
        seconds = time.perf_counter() - began
    held = sum(v.problem is None for v in verdicts)
    return f"{held}/{count} in {seconds:.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three representative instances only")
    parser.add_argument("--only", metavar="TEXT", action="append",
                        help="only the instances whose label contains TEXT (repeatable)")
    parser.add_argument("--engine-rows", action="store_true", help="only the rows the SAT engines are compared on")
    parser.add_argument("--sat", default="auto", help="the SAT engine: z3, cadical, kissat or auto (default)")
    parser.add_argument("--certify", action="store_true", help="certify infeasible budgets and time check-proof")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="N engines race on every check (pareto)")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    print("| instance | frontier / result (S,R,C) | verdict | wall s | seconds | bound s | solver s (engine) "
          "| certificates checked | peak MiB | SCCL (peers.md) | NCCL time / ours at 1 GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, kind, topo, coll, root, kwargs, sccl in INSTANCES:
        if (args.quick and label not in QUICK) or (args.engine_rows and label not in ENGINE_ROWS):
            continue
        if args.only and not any(text in label for text in args.only):
            continue
        out = ctx.Queue()
        proc = ctx.Process(target=_run, args=(kind, topo, coll, root, kwargs, args.sat, args.certify, args.jobs, out))
        began = time.time()
        proc.start()
        points, verdict, seconds, solver, engine, checked, peak, ring, finished, bound = out.get()
        proc.join()
        shown = ", ".join(f"({s},{r},{c})" for s, r, c in points)
        print(f"| {label} | {shown} | {verdict} | {finished - began:.2f} | {seconds:.2f} | {bound:.2f} "
              f"| {solver:.2f} ({engine}) | {checked} | {peak:.0f} | {sccl} | {ring} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
