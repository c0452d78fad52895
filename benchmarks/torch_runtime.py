"""Our executor against torch.distributed's own collective, on the same processes, in one run.

For 8 ranks on gloo (one process per rank on this machine), allgather and allreduce at 1K..16M:
the time of a synth schedule executed by synth.runtime (thread blocks, point-to-point operations)
and the time of torch's native collective (gloo's own algorithm) on the same inputs, measured
alternately in the same worker processes; the ratio ours / torch (> 1: ours is slower). Every
size is also checked bit for bit against torch's answer.

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
        options = RunOptions(sizes=sizes, iters=args.iters, warmup=args.warmup, timeout=300, vs_torch=True)
        result = world.run(runnable, options)
        print(f"{Path(name).name}: {'correct' if result.correct else 'WRONG: ' + result.fault}", file=sys.stderr)
        for row in result.rows:
            rows.append((Path(name).name, row))
    if world is not None:
        world.close()
    print(f"# synth.runtime vs torch.distributed (gloo), 8 ranks on one machine, {args.iters} timed iterations "
          f"after {args.warmup}; {time.monotonic() - started:.0f} s")
    print("| schedule | size | ours (us) | torch (us) | ours / torch | correct |")
    print("|---|---|---|---|---|---|")
    for name, row in rows:
        ratio = row.time_us / row.torch_us if row.time_us and row.torch_us else float("nan")
        print(f"| {name} | {format_size(row.size)} | {row.time_us:.0f} | {row.torch_us:.0f} | {ratio:.2f}x | "
              f"{'yes' if row.correct else 'NO'} |")
    return 0 if all(row.correct for _, row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
