"""MILP router (synth solve --backend milp) on issue 4's instances: stage times, makespan, bound.

Run: python benchmarks/milp_router.py [--quick] [--solver highs|cbc] [--only NAME]
Each instance runs in a fresh process with the derived default sketch. Columns: routing,
ordering, timing and exact-MILP (one small machine only) seconds, the makespan in the contract step model (and the event
simulation), synth's cut bound in the same model, % of the bound, the best applicable
baseline measured in the same process (its % of the bound), the router's status, and the
process's peak memory.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from pathlib import Path

GIB, MIB = 1 << 30, 1 << 20
INSTANCES = [  # (topology, collective, size)
    ("ndv2", "allgather", MIB),
    ("ndv2", "allgather", 8 * MIB),
    ("ndv2x2", "allgather", GIB),
    ("dgx2x2", "allgather", GIB),
    ("ndv2x2", "alltoall", GIB),
    ("h100x4", "alltoallv:ZIPF", GIB),
    ("h100x16", "allgather", GIB),
    ("h100x16", "reduce_scatter", GIB),
    ("h100x16", "allreduce", GIB),
]
QUICK = {("ndv2", "allgather", MIB), ("ndv2x2", "allgather", GIB), ("ndv2x2", "alltoall", GIB)}


def zipf_matrix(ranks: int, per_machine: int = 8) -> list[list[int]]:
    """A skewed MoE dispatch: expert d receives ~8/(d mod 8 + 1) chunks from every rank."""
    return [[0 if s == d else max(1, round(8 / (d % per_machine + 1))) for d in range(ranks)]
            for s in range(ranks)]


def _run(topo_name, coll, size, solver, out):
    from synth.baselines import fastest_baseline
    from synth.bounds.solver import MilpOptions
    from synth.core.library import resolve_topology
    from synth.milp.sketch import default_sketch
    from synth.milp.synthesize import synthesize

    topo = resolve_topology(topo_name)
    if coll.endswith("ZIPF"):
        path = Path(tempfile.mkdtemp()) / "zipf.json"
        path.write_text(json.dumps(zipf_matrix(topo.ranks)))
        coll = f"alltoallv:{path}"
    sketch, _ = default_sketch(topo, coll, size)
    started = time.perf_counter()
    result = synthesize(topo, coll, sketch, MilpOptions(solver=solver, time_limit=120))
    total = time.perf_counter() - started
    best = fastest_baseline(topo, coll, size)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.put((result.stages, total, result.time_us, result.simulated_us, result.bound_us, best, result.status,
             len(result.schedule.steps), result.schedule.collective.chunks_per_rank, peak))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three small instances")
    parser.add_argument("--solver", default="highs", choices=("highs", "cbc"))
    parser.add_argument("--only", help="instances whose topology or collective contains this text")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    print(f"solver: {args.solver}")
    print("| instance | size | C | steps | routing s | ordering s | timing s | exact s | total s | makespan us (sim) | "
          "bound us | % of bound | best baseline (% of bound) | status | peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for topo, coll, size in INSTANCES:
        if args.quick and (topo, coll, size) not in QUICK:
            continue
        if args.only and args.only not in f"{topo} {coll}":
            continue
        out = ctx.Queue()
        proc = ctx.Process(target=_run, args=(topo, coll, size, args.solver, out))
        proc.start()
        stages, total, ours, simulated, bound, best, status, steps, chunks, peak = out.get()
        proc.join()
        base = f"{best[0]} ({100 * bound / best[1]:.1f}%)" if best else "-"
        label = "1M" if size == MIB else "8M" if size == 8 * MIB else "1G"
        print(f"| {topo} {coll.replace('ZIPF', 'zipf')} | {label} | {chunks} | {steps} | {stages.routing:.1f} | "
              f"{stages.ordering:.1f} | {stages.timing:.1f} | {stages.exact:.1f} | {total:.1f} | "
              f"{ours:.1f} ({simulated:.1f}) | {bound:.1f} | {100 * bound / ours:.1f}% | {base} | {status} | "
              f"{peak:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
