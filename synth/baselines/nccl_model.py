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
- in-network algorithms (reference/in-network.md section 5; NCCL src/graph/tuning.cc at
  v2.30.7), Simple only, base latency 0: NVLS (``Setup.nvls``; one node, or several with CollNet)
  and NVLSTree (several nodes) over ``nvls_channels`` graph channels (one per NVLS head) of
  ``nvls_intra_gbps`` / ``nvls_inter_gbps``: per channel min(intra x nvlsEfficiency x (nCh-1)/nCh
  x (2 for allreduce, (ppn-1)/ppn for allgather / reduce-scatter), inter (x2 for NVLSTree on <= 2
  nodes), NVLSTree's per-channel cap), busBw = nCh x that, algBw = busBw x n / (2(n-1)) for
  allreduce (allgather / reduce-scatter stay unconverted, as NCCL leaves them); latency 25 us on
  NVLink (+ the NET latency, 18 us, across nodes) and NVLSTree 25 + 2 log2(nodes) x 20.9 us.
  CollNetDirect / CollNetChain (``Setup.collnet``, allreduce across nodes): busBw = channels x
  channel bandwidth (Direct / the GPU:NIC factor, x0.85 on sm_90+), algBw = busBw / 2; latency
  2 (min(1, ppn-1) x 3.7 + (ppn-1) x 0.4) + 31 us and 2 (ppn-1) x 2.8 + 30 us.
  ``nvls_graph`` gives the NVLS graph's bandwidths the way NCCL's search picks them on Hopper.

>>> # DGX-1 allgather, 6 rings of 25 GB/s, Simple, 1 GiB: 8.4 + 7 x 3.4 us + S / (150 GB/s x 8/7)
>>> round(predicted_us(Setup("allgather", 8, 1, 6, 25.0, "nvlink"), "ring", "simple", 1024**3), 1)
6295.7
>>> # 8 x H100 NVLS allreduce: 8 heads x min(40 x 0.85 x 7/8 x 2, 60) = 476 busbw = 272 GB/s algbw, 25 us
>>> nvls = with_nvls(Setup("allreduce", 8, 1, 16, 20.0, "nvlink"))
>>> round(algbw_gbps(nvls, "nvls", "simple"), 1), latency_us(nvls, "nvls", "simple", 1 << 30)
(272.0, 25.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

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

# In-network algorithms (Simple only; base latency 0): hwLat by link kind (tuning.cc:158-174).
SWITCH_ALGORITHMS = ("nvls", "nvls_tree", "collnet_direct", "collnet_chain")
SWITCH_HW_US = {"nvlink": {"nvls": 25.0, "nvls_tree": 25.0, "collnet_direct": 3.7, "collnet_chain": 2.8},
                "net": {"nvls": 18.0, "nvls_tree": 20.9, "collnet_direct": 31.0, "collnet_chain": 30.0}}
COLLNET_ARITY_US = 0.4  # CollNetDirect's per-local-rank serialization latency
NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}  # nvlsEfficiency
NVLS_TREE_CHANNEL_GBPS = {"hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 80.0)}  # 1 / 2 / more nodes
COLLNET_DIRECT_SM90 = 0.85
SM90_SPEEDS = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)  # search.cc sm90SpeedArrayIntra
SM90_INTER_SPEEDS = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5)  # sm90SpeedArrayInter (head)
SM90_NVLINK_GBPS = 18 * 20.6  # NCCL's H100 NVLink bandwidth: 18 links of 20.6 GB/s


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
    nvls: bool = False          # an NVLS graph exists (NVSwitch with NVLink SHARP, sm_90+)
    collnet: bool = False       # CollNet (SHARP) is enabled and the network has it
    arch: str = "hopper"        # compute capability class: nvlsEfficiency, NVLSTree caps
    nvls_channels: int = 0      # NVLS graph channels (= heads)
    nvls_intra_gbps: float = 0.0
    nvls_inter_gbps: float = 0.0

    @property
    def ppn(self) -> float:
        return self.ranks / self.machines


def applies(setup: Setup, algorithm: str, protocol: str) -> bool:
    """Whether NCCL considers ``algorithm`` with ``protocol`` for this setup."""
    if algorithm in SWITCH_ALGORITHMS:
        return protocol == "simple" and _switch_applies(setup, algorithm)
    if protocol not in BASE_US.get(algorithm, {}):
        return False
    if algorithm == "ring":
        return setup.collective in ("allgather", "reduce_scatter", "allreduce", "broadcast", "reduce")
    if algorithm == "tree":
        return setup.collective == "allreduce"
    if algorithm == "pat":
        return setup.collective in ("allgather", "reduce_scatter") and setup.ranks == setup.machines
    return False


def _switch_applies(setup: Setup, algorithm: str) -> bool:
    """NCCL's enable rules (in-network.md section 6): NVLS needs its graph (>= 2 channels) and,
    across nodes, CollNet; NVLSTree several nodes; CollNet allreduce across nodes (Direct with at
    most 8 local ranks); NVLS allgather / reduce-scatter on one node of at most 32 ranks."""
    nvls = setup.nvls and setup.nvls_channels >= 2 and NVLS_EFFICIENCY.get(setup.arch, 0.0) > 0
    if algorithm == "nvls":
        if setup.collective in ("allgather", "reduce_scatter"):
            return nvls and setup.machines == 1 and setup.ranks <= 32
        return setup.collective == "allreduce" and nvls and (setup.machines == 1 or setup.collnet)
    if algorithm == "nvls_tree":
        return setup.collective == "allreduce" and nvls and setup.machines > 1
    multi = setup.collective == "allreduce" and setup.collnet and setup.machines > 1
    return multi and (algorithm == "collnet_chain" or setup.ppn <= 8)


def with_nvls(setup: Setup, port_gbps: float = SM90_NVLINK_GBPS, nic_gbps: float | None = None) -> Setup:
    """``setup`` with the NVLS graph NCCL's search finds on Hopper (``nvls_graph``)."""
    intra, inter = nvls_graph(int(setup.ppn), port_gbps, nic_gbps if setup.machines > 1 else None)
    return replace(setup, nvls=True, nvls_channels=int(setup.ppn), nvls_intra_gbps=intra, nvls_inter_gbps=inter)


def nvls_graph(ppn: int, port_gbps: float = SM90_NVLINK_GBPS, nic_gbps: float | None = None) -> tuple[float, float]:
    """(bwIntra, bwInter) of NCCL's NVLS graph on Hopper: each of the ppn channels (heads) puts its
    speed on every GPU's port, twice on its head's (search.cc ncclTopoSearchTryNvls), so bwIntra is
    the fastest sm90 speed s with (ppn + 1) x s <= the port; bwInter is raised to the fastest
    speed below 2 x bwIntra on one node, or the fastest network speed within one GPU's NIC
    (``nic_gbps``) across nodes."""
    intra = next((s for s in SM90_SPEEDS if (ppn + 1) * s <= port_gbps), SM90_SPEEDS[-1])
    if nic_gbps is not None:
        return intra, next((s for s in SM90_INTER_SPEEDS if s <= nic_gbps), SM90_INTER_SPEEDS[-1])
    return intra, next(s for s in SM90_SPEEDS if s < 2 * intra)


def predicted_us(setup: Setup, algorithm: str, protocol: str, size: float) -> float:
    """NCCL's predicted time (us) of ``algorithm`` with ``protocol`` at ``size`` bytes."""
    return latency_us(setup, algorithm, protocol, size) + size / (1000.0 * algbw_gbps(setup, algorithm, protocol))


def latency_us(setup: Setup, algorithm: str, protocol: str, size: float) -> float:
    """NCCL's latency term (us) of ``algorithm`` with ``protocol``."""
    if algorithm in SWITCH_ALGORITHMS:
        return _switch_latency(setup, algorithm)
    return _latency(setup, algorithm, protocol, size)


def algbw_gbps(setup: Setup, algorithm: str, protocol: str) -> float:
    """NCCL's algorithm bandwidth (GB/s) of ``algorithm`` with ``protocol``."""
    if algorithm in SWITCH_ALGORITHMS:
        return _switch_algbw(setup, algorithm)
    return _algbw(setup, algorithm, protocol)


def _switch_latency(setup: Setup, algorithm: str) -> float:
    ppn, nodes = setup.ppn, setup.machines
    intra, inter = SWITCH_HW_US["nvlink"][algorithm], SWITCH_HW_US["net"][algorithm]
    if algorithm == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    if algorithm == "nvls_tree":
        return intra + 2 * math.floor(math.log2(nodes)) * inter
    if algorithm == "collnet_direct":
        return 2 * (min(1.0, ppn - 1) * intra + (ppn - 1) * COLLNET_ARITY_US) + inter
    return 2 * (ppn - 1) * intra + inter


def _switch_algbw(setup: Setup, algorithm: str) -> float:
    n = setup.ranks
    if algorithm.startswith("collnet"):
        busbw = setup.channels * setup.channel_gbps
        if algorithm == "collnet_direct":
            factor = setup.ppn / setup.channels
            busbw /= factor - (factor - 1) / 2
            busbw *= COLLNET_DIRECT_SM90 if setup.arch in ("hopper", "blackwell") else 1.0
        return busbw * 0.5
    channels = setup.nvls_channels
    intra = setup.nvls_intra_gbps * NVLS_EFFICIENCY[setup.arch] * (channels - 1) / channels
    allreduce = setup.collective == "allreduce"
    intra *= 2.0 if allreduce else (setup.ppn - 1) / setup.ppn
    inter = setup.nvls_inter_gbps * (2 if algorithm == "nvls_tree" and setup.machines <= 2 else 1)
    per_channel = min(intra, inter)
    if algorithm == "nvls_tree":
        caps = NVLS_TREE_CHANNEL_GBPS.get(setup.arch, (0.0, 0.0, 0.0))
        per_channel = min(per_channel, caps[min(setup.machines, 3) - 1])
    busbw = channels * per_channel
    return busbw * n / (2 * (n - 1)) if allreduce else busbw


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
