"""Our executor against torch.distributed's own collective, on the same processes, in one run.

For 8 ranks on gloo (one process per rank on this machine), allgather and allreduce at 1K..16M:
the time of a synth schedule executed by synth.runtime (point-to-point operations per connection)
with each of its two executors (``threads``: a thread per thread block; ``ordered``: one thread
walking a deadlock-free order) and the time of torch's native collective (gloo's own algorithm) on
the same inputs, measured in the same worker processes; the ratios ours / torch (> 1: ours is
slower). Every size is also checked bit for bit against torch's answer.

    python benchmarks/torch_runtime.py [--sizes 1K,4K,...] [--iters 10] [--schedules FILE ...]

Defaults: the DGX-1 SMT schedules from results/ (allgather s3-r7-c6, allreduce s6-r14-c6) and the
single ring baseline of each, so the table shows both the executor's overhead on a plain ring
(what gloo itself runs) and what a synthesized schedule costs on a machine without NVLink.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXECUTORS = ("threads", "ordered")
DEFAULT = [
    "results/dgx1/allgather/schedules/allgather.dgx1.ring.schedule.json",
    "results/dgx1/allgather/schedules/allgather.dgx1.s3-r7-c6.schedule.json",
    "results/dgx1/allreduce/schedules/allreduce.dgx1.ring.schedule.json",
    "results/dgx1/allreduce/schedules/allreduce.dgx1.s6-r14-c6.schedule.json",
]


def main() -> int:
    from synth.cost import format_size, parse_sizes
    from synth.runtime.launcher import World
    from synth.runtime.measure import RunOptions
    from synth.runtime.runnable import load_runnable

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1K,4K,16K,64K,256K,1M,4M,16M")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--schedules", nargs="*", default=DEFAULT)
    args = parser.parse_args()
    sizes = tuple(parse_sizes(args.sizes))
    rows = []
    started = time.monotonic()
    world = None
    for name in args.schedules:
        runnable = load_runnable(str(ROOT / name) if not Path(name).is_absolute() else name)
        if world is None or world.ranks != runnable.ranks:
            if world is not None:
                world.close()
            world = World(runnable.ranks, "gloo", 300)
        by_mode = {}
        for mode in EXECUTORS:
            options = RunOptions(sizes=sizes, iters=args.iters, warmup=args.warmup, timeout=300, vs_torch=True,
                                 executor=mode)
            result = world.run(runnable, options)
            print(f"{Path(name).name} ({mode}): {'correct' if result.correct else 'WRONG: ' + result.fault}",
                  file=sys.stderr)
            by_mode[mode] = result.rows
        for index, row in enumerate(by_mode[EXECUTORS[0]]):
            rows.append((Path(name).name, [by_mode[m][index] for m in EXECUTORS]))
    if world is not None:
        world.close()
    print(f"# synth.runtime vs torch.distributed (gloo), 8 ranks on one machine, {args.iters} timed iterations "
          f"after {args.warmup}; {time.monotonic() - started:.0f} s")
    print("| schedule | size | torch (us) | " + " | ".join(f"{m} (us) | {m} / torch" for m in EXECUTORS)
          + " | correct |")
    print("|---|---|---|" + "---|---|" * len(EXECUTORS) + "---|")
    for name, per_mode in rows:
        torch_us = sum(r.torch_us for r in per_mode) / len(per_mode)  # measured once per mode: the mean
        cells = []
        for r in per_mode:
            cells += [f"{r.time_us:.0f}", f"{r.time_us / torch_us:.2f}x"]
        ok = all(r.correct for r in per_mode)
        print(f"| {name} | {format_size(per_mode[0].size)} | {torch_us:.0f} | " + " | ".join(cells)
              + f" | {'yes' if ok else 'NO'} |")
    return 0 if all(r.correct for _, per_mode in rows for r in per_mode) else 1


if __name__ == "__main__":
    sys.exit(main())
