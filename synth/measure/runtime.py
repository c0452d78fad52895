"""What NCCL (or RCCL) takes for a collective on a machine: the runtime model.

For every algorithm NCCL considers (``reference/nccl-model.md``) and every protocol P, with the
terms of a ``Calibration`` (names in ``synth.measure.calibration``):

    gpu_us(S)  = latency_scale x latency(algorithm, P)        NCCL's base + per-hop latencies;
                                                               inter-machine hops also pay
                                                               network_hop_us_<transport>
               + factor x S / bandwidth(S)                    factor: nccl-tests' busbw factor
               + fill_us x min(1, S / fill_bytes)             Simple only: pipeline fill
    bandwidth(S) = min(bus(algorithm) x share(P), channels(S, P) x channel_gbps_P)
    channels(S, P) = clamp(floor(S / channel_bytes_P), 1, max_channels)
    time(S)    = max(launch, min over (algorithm, P) of gpu_us(S))

``share(P)`` is the protocol's payload share (Simple 1, LL128 120/128, LL 1/2). ``bus`` is the
algorithm's bus bandwidth on the machine at the effective link rates (line rate times
``efficiency_<kind>``): rings use the ring plan of one machine (``nccl_ring``), capped across
machines by the machine's NICs; the tree across machines is capped by the GPU's port, the NICs
and 16 channels of ``tree_channel_gbps``. ``launch`` is the CPU's cost of a call: one process per
GPU pays ``launch_process_us``, one thread driving G GPUs pays ``launch_thread_gpu_us`` x G
(calls queue behind the CPU, so the measured time is the larger of the two, not their sum).

>>> from synth.core.library import resolve_topology
>>> from synth.measure.calibration import Calibration
>>> m = describe(resolve_topology("h100"))
>>> m.ring_gbps, m.machines, m.vendor
(450.0, 1, 'nccl')
>>> c = nccl_time(m, "allreduce", 1 << 30, Calibration(), Launch("processes", 1))
>>> c.algorithm, c.protocol, round(c.time_us)
('ring', 'simple', 5739)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from synth.baselines.nccl_model import BASE_US, HW_US
from synth.core.collective import busbw_factor
from synth.core.errors import InputError
from synth.core.subset import sub_topology
from synth.core.topology import Topology
from synth.measure.calibration import TRANSPORTS, Calibration

SHARE = {"ll": 0.5, "ll128": 120 / 128, "simple": 1.0}
PROTOCOL_NAMES = ("ll", "ll128", "simple")
TREE_CHANNELS = 16
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce")  # what it models


@dataclass(frozen=True)
class Machine:
    """What the runtime model needs of a topology: ranks, machines, the kind of the links inside
    a machine, the ideal ring and tree bus bandwidth of one machine, one GPU's port, one
    machine's NICs (GB/s, one direction), and whose library runs it."""

    name: str
    ranks: int
    machines: int
    intra_kind: str
    ring_gbps: float
    tree_gbps: float
    gpu_gbps: float
    nic_gbps: float
    vendor: str


@dataclass(frozen=True)
class Launch:
    """How the calls are issued: ``processes`` (one per GPU) or ``threads`` (one thread driving
    ``gpus_per_thread`` GPUs, nccl-tests ``-g N``)."""

    mode: str
    gpus_per_thread: int = 1


@dataclass(frozen=True)
class Choice:
    """One (algorithm, protocol, channels) option and its modelled time (us)."""

    algorithm: str
    protocol: str
    channels: int
    time_us: float


def launch_us(launch: Launch, cal: Calibration) -> float:
    """The CPU's cost of one call (the floor under every measured time)."""
    if launch.mode == "threads":
        return cal.get("launch_thread_gpu_us") * max(1, launch.gpus_per_thread)
    return cal.get("launch_process_us")


def nccl_options(machine: Machine, collective: str, size: float, cal: Calibration, launch: Launch,
                 transport: str = "ib") -> list[Choice]:
    """Every option NCCL considers here, each with its modelled time (launch floor included)."""
    if collective not in COLLECTIVES:
        raise InputError(f"the runtime model covers {', '.join(COLLECTIVES)}, not {collective}")
    if transport not in TRANSPORTS:
        raise InputError(f"unknown transport {transport!r}; known: {', '.join(TRANSPORTS)}")
    floor = launch_us(launch, cal)
    factor = busbw_factor(collective, machine.ranks)
    options = []
    for algorithm in _algorithms(machine, collective):
        bus = _bus_gbps(machine, algorithm, collective, cal)
        for protocol in PROTOCOL_NAMES:
            latency = cal.get("latency_scale") * _latency(machine, algorithm, collective, protocol, cal, transport)
            channels = _channels(size, protocol, cal)
            bandwidth = min(bus * SHARE[protocol], channels * cal.get(f"channel_gbps_{protocol}"))
            took = latency + factor * size / (bandwidth * 1e3)
            if protocol == "simple":
                took += cal.get("fill_us") * min(1.0, size / cal.get("fill_bytes"))
            options.append(Choice(algorithm, protocol, channels, max(floor, took)))
    return options


def nccl_time(machine: Machine, collective: str, size: float, cal: Calibration, launch: Launch,
              transport: str = "ib") -> Choice:
    """The fastest option (what NCCL's tuner should pick; ties go to the first considered)."""
    return min(nccl_options(machine, collective, size, cal, launch, transport), key=lambda c: c.time_us)


def _algorithms(machine: Machine, collective: str) -> tuple[str, ...]:
    """Ring everywhere; the tree for allreduce (RCCL runs rings across machines); alltoall is p2p."""
    if collective == "alltoall":
        return ("p2p",)
    if collective == "allreduce" and not (machine.vendor == "rccl" and machine.machines > 1):
        return ("ring", "tree")
    return ("ring",)


def _channels(size: float, protocol: str, cal: Calibration) -> int:
    """How many channels NCCL spreads a call of ``size`` bytes over."""
    wanted = math.floor(size / cal.get(f"channel_bytes_{protocol}"))
    return int(min(max(1, wanted), cal.get("max_channels")))


def _bus_gbps(machine: Machine, algorithm: str, collective: str, cal: Calibration) -> float:
    """The algorithm's bus bandwidth at effective link rates (see the module)."""
    intra = cal.get(f"efficiency_{machine.intra_kind}")
    net = machine.nic_gbps * cal.get("efficiency_net")
    if algorithm == "p2p":
        bus = machine.gpu_gbps * intra
        if machine.machines > 1:
            per_rank_nic = net / (machine.ranks / machine.machines)
            bus = min(bus, per_rank_nic * machine.machines / (machine.machines - 1))
        return bus
    if machine.machines == 1:
        return (machine.ring_gbps if algorithm == "ring" else machine.tree_gbps) * intra
    if algorithm == "ring":
        return min(machine.ring_gbps * intra, net)
    factor = busbw_factor(collective, machine.ranks)
    return min(machine.gpu_gbps * intra, net, TREE_CHANNELS * cal.get("tree_channel_gbps")) * factor


def _latency(machine: Machine, algorithm: str, collective: str, protocol: str, cal: Calibration,
             transport: str) -> float:
    """NCCL's latency of the algorithm (reference/nccl-model.md), network hops per transport."""
    n, nodes = machine.ranks, machine.machines
    table = "tree" if algorithm == "tree" else "ring"
    kind = "nvlink" if machine.intra_kind == "xgmi" else machine.intra_kind
    intra = HW_US[kind][table][protocol]
    inter = HW_US["net"][table][protocol] + cal.get(f"network_hop_us_{transport}")
    base = BASE_US[table][protocol]
    if algorithm == "p2p":
        return base + (inter if nodes > 1 else intra)
    if algorithm == "tree":
        return base + 2 * ((n / nodes - 1) * intra + math.log2(nodes) * inter)
    rounds = 2 if collective == "allreduce" else 1
    steps, inter_steps = rounds * (n - 1), rounds * (nodes - 1)
    return base + (steps - inter_steps) * intra + inter_steps * inter


def describe(topology: Topology) -> Machine:
    """The Machine a topology is (cached per topology)."""
    return _describe(topology)


@lru_cache(maxsize=64)
def _describe(topology: Topology) -> Machine:
    machines = topology.machines or (tuple(range(topology.ranks)),)
    first = machines[0]
    one = sub_topology(topology, tuple(first)) if len(machines) > 1 else topology
    kinds = [l.kind for l in one.links if l.kind]
    intra_kind = max(set(kinds), key=kinds.count) if kinds else "nvlink"
    ring = _ideal_bus(one, "nccl_ring", "allgather") if one.ranks > 1 else math.inf
    tree = _ideal_bus(one, "nccl_tree", "allreduce") if one.ranks > 1 else math.inf
    nic = sum(n.bandwidth for n in topology.nics if set(n.ranks) <= set(first)) if len(machines) > 1 else 0.0
    vendor = "rccl" if intra_kind == "xgmi" else "nccl"
    return Machine(topology.name, topology.ranks, len(machines), intra_kind, ring, tree,
                   _port_gbps(one), nic, vendor)


def _ideal_bus(topology: Topology, algorithm: str, collective: str) -> float:
    """Bus bandwidth of NCCL's algorithm on one machine in the ideal model (latency-free slope)."""
    from synth.baselines import registry
    from synth.cost import step_loads

    size = float(1 << 30)
    loads = step_loads(registry()[algorithm].make(topology, collective, None, None, size))
    slope = (loads.time_us(size) - loads.time_us(0.0)) / size
    return round(busbw_factor(collective, topology.ranks) / (slope * 1e3), 6)


def _port_gbps(topology: Topology) -> float:
    """What rank 0 can send at once: its links' sum, capped by any group of its own out-links."""
    out = [l for l in topology.links if l.src == 0]
    total = sum(l.bandwidth for l in out)
    keys = {l.key for l in out}
    for group in topology.groups:
        if group.links and set(group.links) <= keys:
            total = min(total, group.bandwidth)
    return total if out else math.inf
