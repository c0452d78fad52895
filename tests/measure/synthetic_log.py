"""An nccl-tests all_reduce_perf table written for a machine no shared log covers (issue 49: doctor
on 1440 GPUs), with plausible times: a latency floor plus the bytes at a bus bandwidth that grows
with the size, as measured runs show; the figures only need to parse and be positive."""

from __future__ import annotations

import math

SIZES = tuple(1 << k for k in range(3, 35))  # 8 B - 16 GiB


def allreduce_log(ranks: int, per_node: int = 4, sizes=SIZES, floor_us: float = 250.0,
                  busbw_gbps: float = 700.0) -> str:
    """The text of a one-process-per-GPU all_reduce_perf run on ``ranks`` GPUs, ``per_node`` per
    host: header, launch line, column headers and one row per size."""
    lines = [f"# mpirun -np {ranks} -N {per_node} --bind-to numa -x NCCL_DEBUG=WARN "
             f"./build/all_reduce_perf -b {sizes[0]} -e {sizes[-1]} -f 2 -g 1",
             f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[-1]} step: 2(factor) warmup iters: 5 "
             "iters: 20 agg iters: 1 validation: 1 graph: 0",
             "#",
             "#                                                              out-of-place                       "
             "in-place",
             "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   "
             "algbw   busbw  #wrong",
             "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  "
             "(GB/s)  (GB/s)"]
    factor = 2 * (ranks - 1) / ranks
    for size in sizes:
        reach = busbw_gbps * size / (size + 64 * 2**20)  # the bus bandwidth a size reaches
        took = floor_us + 2 * math.log2(size) + factor * size / (reach * 1e3)
        algbw = size / (took * 1e3)
        row = (f"{size:>12} {size // 4:>13}     float     sum      -1 {took:8.2f} {algbw:7.2f} {algbw * factor:7.2f}"
               f"       0 {took:8.2f} {algbw:7.2f} {algbw * factor:7.2f}       0")
        lines.append(row)
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 100.0", "#"]
    return "\n".join(lines) + "\n"
