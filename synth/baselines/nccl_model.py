"""NCCL's own time prediction (its tuning model), as ../shared/reference/nccl-model.md records it.

NCCL predicts ``time = latency + size / (1000 x algBw)`` (us, bytes, GB/s) per (collective,
algorithm, protocol) and runs the smallest. This module evaluates that formula for a topology,
so reports can show what NCCL itself would expect beside what our cost model says:

- latency: a per-call base latency plus per-hop latencies by link kind (nvlink, pcie, net;
  xgmi is read as nvlink) for the ring steps inside and between machines, or the tree's
  depth; on several machines LL's intra-machine latency is x1.8 and every intra hop costs at
  least the network post overhead (1 us, 3 us for Simple).
- bandwidth: busBw = channels x per-channel bandwidth (the intra-machine channel figure on up
  to 2 machines, the NIC figure beyond), times the protocol factor (LL 0.5, LL128 0.92, Simple
  1; tree LL 1/3.8 and x0.92 for tree allreduce; PAT 0.75); algBw = busBw x n / steps for
  rings, busBw / 2 for the tree allreduce.
- ring allreduce on several machines with Simple pays latency x1.9 beyond n/16 x 64 KiB
  (NCCL's "plateau" correction). Not modelled: the per-platform LL/LL128 caps and the tree's
  mid-size correction table (their values differ between NCCL versions).

>>> # DGX-1 allgather, 6 rings of 25 GB/s, Simple, 1 GiB: 8.4 + 7 x 3.4 us + S / (150 GB/s x 8/7)
>>> round(predicted_us(Setup("allgather", 8, 1, 6, 25.0, "nvlink"), "ring", "simple", 1024**3), 1)
6295.7
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PROTOCOLS = ("ll", "ll128", "simple")
BASE_US = {"ring": {"ll": 6.6, "ll128": 14.0, "simple": 8.4},
           "tree": {"ll": 6.8, "ll128": 14.0, "simple": 8.4},
           "pat": {"simple": 8.0}}
HW_US = {  # per-hop latency by link kind, algorithm, protocol
    "nvlink": {"ring": {"ll": 0.6, "ll128": 1.9, "simple": 3.4}, "tree": {"ll": 0.6, "ll128": 1.25, "simple": 4.0},
               "pat": {"simple": 4.0}},
    "pcie": {"ring": {"ll": 1.0, "ll128": 2.5, "simple": 5.7}, "tree": {"ll": 1.0, "ll128": 1.9, "simple": 4.0},
             "pat": {"simple": 4.0}},
    "net": {"ring": {"ll": 2.7, "ll128": 4.0, "simple": 14.0}, "tree": {"ll": 5.0, "ll128": 8.5, "simple": 14.0},
            "pat": {"simple": 14.0}},
}
BW_FACTOR = {"ll": 0.5, "ll128": 0.92, "simple": 1.0}
TREE_LL_FACTOR = 1 / 3.8
NET_POST_US = 1.0


@dataclass(frozen=True)
class Setup:
    """What NCCL's model needs: the collective, ranks, machines, channels and their bandwidth
    (GB/s each), and the kind of the links inside a machine."""

    collective: str
    ranks: int
    machines: int
    channels: int
    channel_gbps: float
    intra_kind: str


def applies(setup: Setup, algorithm: str, protocol: str) -> bool:
    """Whether NCCL considers ``algorithm`` with ``protocol`` for this setup."""
    if protocol not in BASE_US.get(algorithm, {}):
        return False
    if algorithm == "ring":
        return setup.collective in ("allgather", "reduce_scatter", "allreduce", "broadcast", "reduce")
    if algorithm == "tree":
        return setup.collective == "allreduce"
    if algorithm == "pat":
        return setup.collective in ("allgather", "reduce_scatter") and setup.ranks == setup.machines
    return False


def predicted_us(setup: Setup, algorithm: str, protocol: str, size: float) -> float:
    """NCCL's predicted time (us) of ``algorithm`` with ``protocol`` at ``size`` bytes."""
    latency, algbw = _latency(setup, algorithm, protocol, size), _algbw(setup, algorithm, protocol)
    return latency + size / (1000.0 * algbw)


def _kind(kind: str) -> str:
    return "nvlink" if kind == "xgmi" else kind


def _latency(setup: Setup, algorithm: str, protocol: str, size: float) -> float:
    n, nodes = setup.ranks, setup.machines
    intra = HW_US[_kind(setup.intra_kind)][algorithm][protocol]
    inter = HW_US["net"][algorithm][protocol]
    if nodes > 1:
        if protocol == "ll":
            intra *= 1.8
        intra = max(intra, NET_POST_US * (3 if protocol == "simple" else 1))
    base = BASE_US[algorithm][protocol]
    if algorithm == "tree":
        return base + 2 * ((n / nodes - 1) * intra + math.log2(nodes) * inter)
    if algorithm == "pat":
        return base + math.log2(nodes) * inter / 3.5 + n * 2.8
    twice = setup.collective == "allreduce"
    steps = (2 if twice else 1) * (n - 1)
    inter_steps = (2 if twice else 1) * (nodes - 1)
    latency = base + (steps - inter_steps) * intra + inter_steps * inter
    if twice and nodes > 1 and protocol == "simple" and size > n / 16 * 65536:
        latency *= 1.9
    return latency


def _algbw(setup: Setup, algorithm: str, protocol: str) -> float:
    n = setup.ranks
    busbw = setup.channels * setup.channel_gbps
    if algorithm == "tree":
        busbw *= (TREE_LL_FACTOR if protocol == "ll" else BW_FACTOR[protocol]) * 0.92
        return busbw / 2
    busbw *= BW_FACTOR[protocol]
    if algorithm == "pat":
        return busbw * 0.75 * n / (n - 1)
    if setup.collective in ("broadcast", "reduce"):
        return busbw
    steps = (2 if setup.collective == "allreduce" else 1) * (n - 1)
    return busbw * n / steps
