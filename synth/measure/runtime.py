"""What NCCL (or RCCL) takes for a collective on a machine: the runtime model.

For every algorithm NCCL considers on the machine (``available``; reference/nccl-model.md and,
for the switch algorithms, reference/in-network.md sections 5 and 6) that the run allowed
(``synth.measure.nccl_env.Allowed``: NCCL_ALGO, NCCL_PROTO, NCCL_NVLS_ENABLE,
NCCL_COLLNET_ENABLE), and every protocol P, with the terms of a ``Calibration``:

    gpu_us(S)  = latency(algorithm, P)                          see below
               + S / algbw(algorithm, P, S)
               + fill_us x min(1, S / fill_bytes)               Simple only: pipeline fill
    time(S)    = max(launch, min over (algorithm, P) of gpu_us(S))

Ring, tree and point-to-point (NCCL's classic algorithms): latency = latency_scale x NCCL's base
+ per-hop latencies, plus ``network_hop_us_<transport>`` per inter-machine hop (unscaled);
algbw = min(bus x share(P), channels(S, P) x channel_gbps_P) / factor, with factor nccl-tests'
busbw factor, share(P) the protocol's payload share (Simple 1, LL128 120/128, LL 1/2),
channels(S, P) = clamp(floor(S / channel_bytes_P), 1, max_channels) and bus the bus bandwidth at
the effective link rates (line rate x ``efficiency_<kind>``): rings use the ring plan of one
machine (``nccl_ring``), capped across machines by one machine's NICs; the tree across machines
moves twice the buffer through every GPU's port (reduce up, broadcast down the chain inside a
machine) and 2(N-1)/N of it through a machine's NICs, and is capped by 16 channels of
``tree_channel_gbps``.

The switch algorithms run Simple only and are not capped per channel (NVLS has its own CTAs).
With n ranks per NVLink domain (a machine, or a rack of several with MNNVL: one node to NCCL),
N domains, ppn ranks per machine, the NVLS port rate
P = the switch port's line rate x ``efficiency_nvls``, at most the GPU's port x
``efficiency_<kind>`` (the switch's ports share the GPU's NVLink port), and the NICs' rate
NIC = one machine's NICs x ``efficiency_net``, algbw is:

- ``nvls`` on one domain: allreduce P x n/(n+1) (each port carries (n+1)/n of the buffer each
  way: one ld_reduce share out, one multicast in); allgather / reduce-scatter P (one way carries
  the whole buffer); across domains (NVLS + CollNet/SHARP) min(P x n/(n+1), a domain's NICs);
- ``nvls_tree``: min(P x n/(n+1), a domain's NICs x N/(2(N-1)), min(n, 16) heads x
  ``nvls_tree_channel_gbps`` of bus bandwidth), the head cap x NCCL's 45.5/57.7 beyond two domains;
- ``collnet_direct``: min(intra port x ppn/(2(ppn-1)), NIC) (reduce-scatter to the heads, SHARP
  across, allgather back); ``collnet_chain``: min(intra port / 2, NIC).

Their latency: ``nvls_latency_us`` for NVLS's NVLink part (NCCL: 25 us), plus latency_scale x
NCCL's NET latency and the transport's hop per network crossing (NVLS 18 us once, NVLSTree
20.9 us 2 log2(N) times; CollNet 31 / 30 us once, after latency_scale x NCCL's in-machine terms),
and never less than the runtime bound charges a call through the switch (latency_scale x (6.6 us
+ the switch's alpha)).

NCCL's enable rules: NVLS needs a switch with reduce and multicast of kind nvlink spanning a
machine's GPUs (an sm_90+ NVSwitch); NVLSTree only across domains; NVLS across domains only with
CollNet; CollNet only where the topology has a SHARP switch (reduce_multicast, kind net) and the
run did not turn it off; CollNetDirect with at most 8 ranks per machine; NVLS allgather /
reduce-scatter on one domain of at most 32 ranks. ``launch`` is the CPU's cost of a call: one
process per GPU pays ``launch_process_us``, one thread driving G GPUs pays
``launch_thread_gpu_us`` x G (calls queue behind the CPU, so the measured time is the larger of
the two, not their sum).

>>> from synth.core.library import resolve_topology
>>> from synth.measure.calibration import Calibration
>>> m = describe(resolve_topology("h100"))
>>> m.ring_gbps, m.machines, m.vendor, m.nvls_ranks
(450.0, 1, 'nccl', 8)
>>> c = nccl_time(m, "allreduce", 1 << 30, Calibration(), Launch("processes", 1))
>>> c.algorithm, c.protocol
('nvls', 'simple')
>>> off = Allowed(nvls=False)
>>> nccl_time(m, "allreduce", 1 << 30, Calibration(), Launch("processes", 1), allowed=off).algorithm
'ring'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from synth.baselines.nccl_model import BASE_US, COLLNET_ARITY_US, HW_US, NVLS_TREE_CHANNEL_GBPS, SWITCH_HW_US
from synth.core.collective import busbw_factor
from synth.core.errors import InputError
from synth.core.subset import sub_topology
from synth.core.topology import Topology
from synth.cost import PROTOCOLS, RUNTIME_PROTOCOLS
from synth.measure.calibration import TRANSPORTS, Calibration
from synth.measure.nccl_env import Allowed
from synth.measure.symmetric import Setup, eligible, kernel_algbw, pick

SHARE = {"ll": 0.5, "ll128": 120 / 128, "simple": 1.0}
PROTOCOL_NAMES = ("ll", "ll128", "simple")
TREE_CHANNELS = 16
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce")  # what it models
SWITCH_ALGORITHMS = ("nvls", "nvls_tree", "collnet_direct", "collnet_chain")
MAX_NVLS_ARITY = 32  # NVLS allgather / reduce-scatter: at most this many local ranks (device.h)
MAX_DIRECT_RANKS = 8  # CollNetDirect: at most this many ranks per machine (enqueue.cc)
MIN_BASE_US = min(PROTOCOLS[p].base_us for p in RUNTIME_PROTOCOLS)  # what the runtime bound charges a call
NVLS_CHANNELS = 16  # NVLS's CTAs on Hopper (nvls.cc NVLS_NCHANNELS_SM90): what a choice reports
NVLS_TREE_WIDE = NVLS_TREE_CHANNEL_GBPS["hopper"][2] / NVLS_TREE_CHANNEL_GBPS["hopper"][1]  # beyond 2 nodes
NVLS_TREE_MAX_HEADS = 16  # NVLSTree heads per domain: one per GPU, at most this many (docs/cost-model.md)


@dataclass(frozen=True)
class Machine:
    """What the runtime model needs of a topology: ranks, machines, the kind of the links inside
    a machine, the ideal ring and tree bus bandwidth of one machine, one GPU's port, one
    machine's NICs (GB/s, one direction), whose library runs it, and its computing switches:
    the port rate of the NVLS switch (``nvls_gbps``, 0: none), how many ranks it spans
    (``nvls_ranks``) and its alpha (``nvls_alpha``, us), and whether the network aggregates
    (``sharp``); ``arch``: the GPUs' generation, whose calibration defaults apply."""

    name: str
    ranks: int
    machines: int
    intra_kind: str
    ring_gbps: float
    tree_gbps: float
    gpu_gbps: float
    nic_gbps: float
    vendor: str
    nvls_gbps: float = 0.0
    nvls_ranks: int = 0
    sharp: bool = False
    nvls_alpha: float = 0.0
    arch: str | None = None
    direct: bool = False  # every two GPUs of a machine joined by NVLink (a link or an NVLink switch)

    @property
    def per_machine(self) -> int:
        """Ranks per machine."""
        return self.ranks // self.machines

    @property
    def nvls_domains(self) -> int:
        """NVLink domains with NVLS (0: no NVLS)."""
        return self.ranks // self.nvls_ranks if self.nvls_ranks >= 2 else 0


@dataclass(frozen=True)
class Launch:
    """How the calls are issued: ``processes`` (one per GPU) or ``threads`` (one thread driving
    ``gpus_per_thread`` GPUs, nccl-tests ``-g N``), eagerly or (``graph``) captured in a CUDA
    graph and replayed (nccl-tests ``-G N``)."""

    mode: str
    gpus_per_thread: int = 1
    graph: bool = False


@dataclass(frozen=True)
class Choice:
    """One (algorithm, protocol, channels) option and its modelled time (us). NCCL's symmetric
    kernels are algorithm ``symmetric`` with the kernel's name as protocol and its CTAs as
    channels; copy-engine collectives are ``copy_engine`` (``measured`` False: no run has timed
    them yet, so their terms are NCCL's structure with assumed values)."""

    algorithm: str
    protocol: str
    channels: int
    time_us: float
    measured: bool = True


def parse_launch(text: str | None) -> Launch | None:
    """The Launch ``processes``, ``threads:G`` or ``graph`` names (None for None; anything else is
    one InputError line): how a log that does not say was launched (``--launch``)."""
    if text is None:
        return None
    if text in ("processes", "graph"):
        return Launch("processes", 1, text == "graph")
    mode, _, count = text.partition(":")
    if mode == "threads" and count.isdigit() and 0 < int(count) <= 4096:
        return Launch("threads", int(count))
    raise InputError(f"--launch {text!r}: expected processes, threads:G (G GPUs per thread) or graph")


def launch_us(launch: Launch, cal: Calibration) -> float:
    """The cost of issuing one call, the floor under every measured time: eagerly, the CPU's
    (one process per GPU, or per GPU a thread drives); replayed from a CUDA graph, the GPU's cost
    of starting one kernel node (the CPU is out of the loop: one graph launch serves every call
    captured in it)."""
    if launch.graph:
        return cal.get("launch_graph_us")
    if launch.mode == "threads":
        return cal.get("launch_thread_gpu_us") * max(1, launch.gpus_per_thread)
    return cal.get("launch_process_us")


def available(machine: Machine, collective: str) -> tuple[str, ...]:
    """The algorithms NCCL may run for ``collective`` on ``machine`` (the module's rules)."""
    if collective == "alltoall":
        return ("p2p",)
    out = ["ring"]
    domains = machine.nvls_domains
    if collective == "allreduce":
        if not (machine.vendor == "rccl" and machine.machines > 1):
            out.append("tree")
        if domains == 1 or (domains > 1 and machine.sharp):
            out.append("nvls")
        if domains > 1:
            out.append("nvls_tree")
        if machine.sharp and machine.machines > 1:
            out += ["collnet_direct"] if machine.per_machine <= MAX_DIRECT_RANKS else []
            out.append("collnet_chain")
    elif collective in ("allgather", "reduce_scatter") and domains == 1 and machine.ranks <= MAX_NVLS_ARITY:
        out.append("nvls")
    return tuple(out)


def considered(machine: Machine, collective: str, allowed: Allowed | None = None) -> tuple[str, ...]:
    """``available`` less what the run did not allow (NVLS across machines goes with CollNet);
    InputError when nothing is left (NCCL would have refused the call)."""
    allowed = allowed or Allowed()  # CollNet unset: on where the topology has a SHARP switch
    kept = tuple(a for a in available(machine, collective) if allowed.permits(a)
                 and not (a == "nvls" and machine.nvls_domains > 1 and allowed.collnet is False))
    if not kept:
        raise InputError(f"the run allowed {allowed.describe()}, which leaves no algorithm for {collective} on "
                         f"{machine.name} (it offers {', '.join(available(machine, collective))})")
    return kept


def nccl_options(machine: Machine, collective: str, size: float, cal: Calibration, launch: Launch,
                 transport: str = "ib", allowed: Allowed | None = None, setup: Setup | None = None) -> list[Choice]:
    """Every option NCCL considers here (among those ``allowed``), each with its modelled time
    (launch floor included). With ``setup`` (the buffers' registration and NCCL's version), what
    NCCL decides before its tuner comes first: a copy-engine collective or a symmetric kernel is
    the only option where NCCL takes it (``synth.measure.symmetric``)."""
    if collective not in COLLECTIVES:
        raise InputError(f"the runtime model covers {', '.join(COLLECTIVES)}, not {collective}")
    if transport not in TRANSPORTS:
        raise InputError(f"unknown transport {transport!r}; known: {', '.join(TRANSPORTS)}")
    allowed = allowed or Allowed()
    cal = cal.on(machine.arch)
    classic = _classic_options(machine, collective, size, cal, launch, transport, allowed)
    if setup is None:
        return classic
    first = _before_tuner(machine, collective, size, cal, launch, allowed, setup, classic)
    return [first] if first is not None else classic


def _before_tuner(machine: Machine, collective: str, size: float, cal: Calibration, launch: Launch,
                  allowed: Allowed, setup: Setup, classic: list[Choice]) -> Choice | None:
    """The copy-engine collective or symmetric kernel NCCL runs here, else None (the classic path)."""
    version = setup.version or cal.nccl_version
    floor = launch_us(launch, cal)
    if copy_engine(machine, collective, size, setup, version):
        return Choice("copy_engine", "memcpy", 0, max(floor, _copy_engine_us(machine, size, cal)), measured=False)
    gpus = launch.gpus_per_thread if launch.mode == "threads" else 1
    kernels = eligible(machine, collective, setup, version, allowed.nvls is not False, gpus)
    if setup.registration != "symmetric":  # NOWIN: LL kernels only where NCCL's classic pick is LL
        kernels = kernels if min(classic, key=lambda c: c.time_us).protocol == "ll" else ()
    chosen = pick(kernels, size, machine.ranks, machine.arch) if kernels else None
    if chosen is None:
        return None
    took = symmetric_us(machine, collective, size, cal, chosen.kernel)
    return Choice("symmetric", chosen.kernel.name.split("_", 1)[1], chosen.ctas, max(floor, took))


def symmetric_capable(machine: Machine, collective: str, version: tuple[int, int, int]) -> bool:
    """Whether NCCL may run a symmetric kernel for ``collective`` on ``machine`` with registered
    buffers (what the runtime bound of an eager call there must allow for)."""
    return bool(eligible(machine, collective, Setup("symmetric"), version, True))


def symmetric_us(machine: Machine, collective: str, size: float, cal: Calibration, kernel) -> float:
    """What a symmetric kernel takes on the machine (``synth.measure.symmetric``): its class's
    latency plus the size at the busiest port's rate."""
    nvlink = machine.gpu_gbps * cal.get("efficiency_nvlink")
    ldst = machine.gpu_gbps * cal.get("efficiency_ldst")
    switch = _switch_algbw(machine, "nvls", collective, cal) if machine.nvls_ranks else nvlink
    algbw = kernel_algbw(kernel, machine.ranks, nvlink, ldst, switch)
    return cal.get(f"sym_{kernel.kind}_us") + size / (algbw * 1e3)


CE_THRESHOLD_ELEMENTS = 8 << 20  # NCCL_SYM_CE_THRESHOLD: Blackwell allgather switches to the copy engines above
CE_VERSION, CE_IMPLICIT_VERSION = (2, 28, 0), (2, 29, 2)


def copy_engine(machine: Machine, collective: str, size: float, setup: Setup, version) -> bool:
    """Whether NCCL runs ``collective`` on the copy engines (reference/nccl-symmetric.md section 4):
    allgather or alltoall, a symmetric window, one NVLink domain of directly joined GPUs, 2.28+,
    and NCCL_CTA_POLICY=ZERO; or (2.29.2+, Blackwell) an allgather of more than 8 Mi float
    elements per rank."""
    if machine.vendor != "nccl" or setup.registration != "symmetric" or version < CE_VERSION:
        return False
    if collective not in ("allgather", "alltoall") or not machine.direct or machine.machines > 1:
        return False
    implicit = (collective == "allgather" and machine.arch == "blackwell" and version >= CE_IMPLICIT_VERSION
                and size / machine.ranks / 4 > CE_THRESHOLD_ELEMENTS)
    return setup.cta_policy_zero or implicit


def _copy_engine_us(machine: Machine, size: float, cal: Calibration) -> float:
    """Two all-to-all flag rounds around n-1 peer copies of one rank's share, at NVLink's bulk rate."""
    n = machine.ranks
    return 2 * cal.get("ce_sync_us") + size * (n - 1) / n / (machine.gpu_gbps * cal.get("efficiency_nvlink") * 1e3)


def _classic_options(machine: Machine, collective: str, size: float, cal: Calibration, launch: Launch,
                     transport: str, allowed: Allowed) -> list[Choice]:
    """NCCL's ring / tree / switch algorithms x protocols allowed here, each with its time (replayed
    from a CUDA graph, NCCL's latencies scaled by ``latency_scale_graph``: no host work per call)."""
    floor = launch_us(launch, cal)
    if launch.graph:
        cal = cal.with_parameters(latency_scale=cal.get("latency_scale_graph"))
    options = []
    for algorithm in considered(machine, collective, allowed):
        protocols = ("simple",) if algorithm in SWITCH_ALGORITHMS else PROTOCOL_NAMES
        for protocol in (p for p in protocols if allowed.permits_protocol(p)):
            channels, took = _gpu_us(machine, algorithm, collective, protocol, size, cal, transport)
            options.append(Choice(algorithm, protocol, channels, max(floor, took)))
    if not options:
        raise InputError(f"the run allowed {allowed.describe()} and protocols "
                         f"{', '.join(sorted(allowed.protocols or ()))}: no option for {collective} on {machine.name}")
    return options


def nccl_time(machine: Machine, collective: str, size: float, cal: Calibration, launch: Launch,
              transport: str = "ib", allowed: Allowed | None = None, setup: Setup | None = None) -> Choice:
    """The fastest option (what NCCL's tuner should pick; ties go to the first considered), or
    what NCCL runs before its tuner (``nccl_options``)."""
    return min(nccl_options(machine, collective, size, cal, launch, transport, allowed, setup),
               key=lambda c: c.time_us)


def _gpu_us(machine: Machine, algorithm: str, collective: str, protocol: str, size: float, cal: Calibration,
            transport: str) -> tuple[int, float]:
    """(channels, GPU time in us) of one option (the module's formulas, before the launch floor)."""
    fill = cal.get("fill_us") * min(1.0, size / cal.get("fill_bytes")) if protocol == "simple" else 0.0
    if algorithm in SWITCH_ALGORITHMS:
        latency = _switch_latency(machine, algorithm, cal, transport)
        channels = NVLS_CHANNELS if algorithm.startswith("nvls") else _channels(size, protocol, cal)
        return channels, latency + size / (_switch_algbw(machine, algorithm, collective, cal) * 1e3) + fill
    factor = busbw_factor(collective, machine.ranks)
    latency = _latency(machine, algorithm, collective, protocol, cal.get("latency_scale"),
                       cal.get(f"network_hop_us_{transport}"))
    channels = _channels(size, protocol, cal)
    bandwidth = min(_bus_gbps(machine, algorithm, collective, cal) * SHARE[protocol],
                    channels * cal.get(f"channel_gbps_{protocol}"))
    return channels, latency + factor * size / (bandwidth * 1e3) + fill


def _channels(size: float, protocol: str, cal: Calibration) -> int:
    """How many channels NCCL spreads a call of ``size`` bytes over."""
    wanted = math.floor(size / cal.get(f"channel_bytes_{protocol}"))
    return int(min(max(1, wanted), cal.get("max_channels")))


def _bus_gbps(machine: Machine, algorithm: str, collective: str, cal: Calibration) -> float:
    """The classic algorithm's bus bandwidth at effective link rates (see the module)."""
    intra = cal.get(f"efficiency_{machine.intra_kind}")
    net = machine.nic_gbps * cal.get("efficiency_net")
    if algorithm == "p2p":
        bus = machine.gpu_gbps * intra
        if machine.machines > 1:
            per_rank_nic = net / machine.per_machine
            bus = min(bus, per_rank_nic * machine.machines / (machine.machines - 1))
        return bus
    if machine.machines == 1:
        return (machine.ring_gbps if algorithm == "ring" else machine.tree_gbps) * intra
    if algorithm == "ring":
        return min(machine.ring_gbps * intra, net)
    algbw = min(machine.gpu_gbps * intra / 2, net * _nic_share(machine.machines),
                TREE_CHANNELS * cal.get("tree_channel_gbps"))
    return algbw * busbw_factor(collective, machine.ranks)


def _nic_share(machines: int) -> float:
    """Algbw over one machine's NIC rate for a reduction across ``machines`` by point-to-point:
    each machine's NICs carry 2(N-1)/N of the buffer each way (the whole buffer for two)."""
    return machines / (2 * (machines - 1))


def _switch_algbw(machine: Machine, algorithm: str, collective: str, cal: Calibration) -> float:
    """The switch algorithm's algorithm bandwidth (see the module)."""
    ppn = machine.per_machine
    net = machine.nic_gbps * cal.get("efficiency_net")
    intra = machine.gpu_gbps * cal.get(f"efficiency_{machine.intra_kind}")
    if algorithm in ("nvls", "nvls_tree"):
        port = min(machine.nvls_gbps * cal.get("efficiency_nvls"), intra)  # the switch port rides the GPU's port
        if collective != "allreduce":
            return port
        # one NVLink domain (a machine, or an MNNVL rack of several) is one node to NCCL
        domain, domains = machine.nvls_ranks, machine.nvls_domains
        inside, net = port * domain / (domain + 1), net * domain / ppn
        if algorithm == "nvls":
            return inside if domains == 1 else min(inside, net)
        head = cal.get("nvls_tree_channel_gbps") * (1.0 if domains <= 2 else NVLS_TREE_WIDE)
        heads = min(domain, NVLS_TREE_MAX_HEADS)
        return min(inside, net * _nic_share(domains), heads * head / busbw_factor("allreduce", machine.ranks))
    if algorithm == "collnet_direct":
        return min(intra * ppn / (2 * (ppn - 1)) if ppn > 1 else math.inf, net)
    return min(intra / 2 if ppn > 1 else math.inf, net)


def _switch_latency(machine: Machine, algorithm: str, cal: Calibration, transport: str) -> float:
    """The switch algorithm's latency (see the module), never below what the runtime bound charges
    a call through the switch: latency_scale x (NCCL's smallest base latency + the switch's alpha)."""
    scale, hop = cal.get("latency_scale"), cal.get(f"network_hop_us_{transport}")
    return max(scale * (MIN_BASE_US + machine.nvls_alpha), _switch_hops_us(machine, algorithm, cal, scale, hop))


def _switch_hops_us(machine: Machine, algorithm: str, cal: Calibration, scale: float, hop: float) -> float:
    inter = scale * SWITCH_HW_US["net"][algorithm] + hop
    ppn = machine.per_machine
    if algorithm == "nvls":
        return cal.get("nvls_latency_us") + (inter if machine.nvls_domains > 1 else 0.0)
    if algorithm == "nvls_tree":
        return cal.get("nvls_latency_us") + 2 * math.log2(machine.nvls_domains) * inter
    intra = SWITCH_HW_US["nvlink"][algorithm]
    if algorithm == "collnet_direct":
        return scale * 2 * (min(1, ppn - 1) * intra + (ppn - 1) * COLLNET_ARITY_US) + inter
    return scale * 2 * (ppn - 1) * intra + inter


def _latency(machine: Machine, algorithm: str, collective: str, protocol: str, scale: float, hop: float) -> float:
    """A classic algorithm's latency: latency_scale x NCCL's (reference/nccl-model.md), plus the
    transport's hop per network crossing (unscaled, as the runtime terms add it to a network link)."""
    n, nodes = machine.ranks, machine.machines
    table = "tree" if algorithm == "tree" else "ring"
    kind = "nvlink" if machine.intra_kind == "xgmi" else machine.intra_kind
    intra, inter = HW_US[kind][table][protocol], HW_US["net"][table][protocol]
    base = BASE_US[table][protocol]
    if algorithm == "p2p":
        return scale * (base + (inter if nodes > 1 else intra)) + (hop if nodes > 1 else 0.0)
    if algorithm == "tree":
        crossings = 2 * math.log2(nodes)
        return scale * (base + 2 * (n / nodes - 1) * intra + crossings * inter) + crossings * hop
    rounds = 2 if collective == "allreduce" else 1
    steps, inter_steps = rounds * (n - 1), rounds * (nodes - 1)
    return scale * (base + (steps - inter_steps) * intra + inter_steps * inter) + inter_steps * hop


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
    nvls = nvls_switch(topology, first)
    return Machine(topology.name, topology.ranks, len(machines), intra_kind, ring, tree, _port_gbps(one), nic,
                   vendor, nvls.bandwidth if nvls else 0.0, len(nvls.ranks) if nvls else 0, has_sharp(topology),
                   nvls.alpha if nvls else 0.0, topology.arch, nvlink_direct(one))


def nvlink_direct(topology: Topology) -> bool:
    """Whether every two ranks are joined by an NVLink link or share an NVLink switch (NCCL 2.29.2's
    rule for its symmetric kernels: no GPU in between)."""
    joined = {(l.src, l.dst) for l in topology.links if (l.kind or "nvlink") == "nvlink"}
    spans = [set(s.ranks) for s in topology.switches if (s.kind or "nvlink") == "nvlink"]
    whole = any(len(s) == topology.ranks for s in spans)
    return whole or all((a, b) in joined or any(a in s and b in s for s in spans)
                        for a in range(topology.ranks) for b in range(topology.ranks) if a != b)


def nvls_switch(topology: Topology, machine: tuple[int, ...]):
    """The switch NCCL's NVLS runs on for ``machine`` (its ranks): reduce and multicast, kind
    nvlink, a port for every rank of the machine, and as many ports as every other such switch
    (the domains tile the ranks); None when there is none (no NVLS)."""
    found = [s for s in topology.switches if s.reduce and s.multicast and (s.kind or "nvlink") == "nvlink"]
    for switch in found:
        if set(machine) <= set(switch.ranks) and len(switch.ranks) >= 2 and topology.ranks % len(switch.ranks) == 0:
            return switch
    return None


def has_sharp(topology: Topology) -> bool:
    """Whether the network aggregates: a reduce_multicast switch of kind net (InfiniBand SHARP)."""
    return any(s.reduce_multicast and s.kind == "net" for s in topology.switches)


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
