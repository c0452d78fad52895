"""Greedy pipelined backend on multi-machine topologies (issue 4's targets), at 1 GiB.

Run: python benchmarks/greedy_multimachine.py [--quick]
Each instance runs in a fresh process. Columns: steps, build seconds, makespan in the contract
cost model, synth's cut bound, % of the bound, the best applicable baseline measured in the same
process (and its % of the bound), and peak memory.
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

SIZE = 1 << 30
INSTANCES = [
    ("ndv2x2", "allgather", 8),
    ("ndv2x2", "allreduce", 8),
    ("ndv2x2", "alltoall", 1),
    ("h100x4", "allgather", 4),
    ("h100x4", "alltoallv:ZIPF", 1),
    ("dgx2x2", "allgather", 8),
    ("h100x16", "allgather", 3),
    ("h100x16", "reduce_scatter", 3),
    ("h100x16", "allreduce", 3),
]
QUICK = {("ndv2x2", "allgather", 8), ("h100x4", "alltoallv:ZIPF", 1)}


def zipf_matrix(ranks: int, per_machine: int = 8) -> list[list[int]]:
    """A skewed MoE dispatch: expert d receives ~8/(d mod 8 + 1) chunks from every rank."""
    return [[0 if s == d else max(1, round(8 / (d % per_machine + 1))) for d in range(ranks)]
            for s in range(ranks)]


def _run(topo_name, coll, chunks, out):
    from synth.baselines import fastest_baseline
    from synth.bounds.lower_bounds import lower_bounds
    from synth.core.collectives import make_collective
    from synth.core.library import resolve_topology
    from synth.cost import step_time_us
    from synth.greedy.pipeline import greedy_schedule, pipelined

    topo = resolve_topology(topo_name)
    started = time.perf_counter()
    if coll.startswith("alltoallv:"):
        path = Path(tempfile.mkdtemp()) / "zipf.json"
        path.write_text(json.dumps(zipf_matrix(topo.ranks)))
        coll = f"alltoallv:{path}"
        schedule = greedy_schedule(topo, make_collective(coll, topo.ranks))
    else:
        schedule = pipelined(topo, coll, chunks)
    seconds = time.perf_counter() - started
    bound = lower_bounds(topo, schedule.collective).time_us(SIZE)
    ours = step_time_us(schedule, SIZE)
    best = fastest_baseline(topo, coll, SIZE)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.put((len(schedule.steps), seconds, ours, bound, best, peak))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    print("| instance | C | steps | build s | makespan us | bound us | % of bound | best baseline (% of bound) "
          "| peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for topo, coll, chunks in INSTANCES:
        if args.quick and (topo, coll, chunks) not in QUICK:
            continue
        out = ctx.Queue()
        proc = ctx.Process(target=_run, args=(topo, coll, chunks, out))
        proc.start()
        steps, seconds, ours, bound, best, peak = out.get()
        proc.join()
        base = f"{best[0]} ({100 * bound / best[1]:.1f}%)" if best else "-"
        print(f"| {topo} {coll.replace('ZIPF', 'zipf')} | {chunks} | {steps} | {seconds:.1f} | {ours:.0f} | "
              f"{bound:.0f} | {100 * bound / ours:.1f}% | {base} | {peak:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
