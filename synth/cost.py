"""The cost model of DESIGN.md (the contract), an event-driven simulator, bus bandwidth, sizes.

Units: sizes in bytes, bandwidth in GB/s (1e9 bytes/s), times in microseconds, so a chunk of
b bytes spends b / (bw * 1e3) us on a link.

- ``step_time_us``: for S bytes, b = S / buffer_chunks; a step lasts
  max(max over links used of alpha_l + n_l*b/bw_l, max over groups used of n_g*b/bw_g);
  the schedule lasts the sum over steps (an empty step costs nothing).
- ``simulate_us``: sends run as soon as their data and resources allow, ignoring step
  barriers. Sends are taken in schedule order. A send may start once the sender's copy (or,
  combining, its partial) as of the step's start is complete. Every link and every group is
  a FIFO server: the send occupies its link for b/bw_l and each of its groups for b/bw_g,
  queueing at each from that moment independently (a group is a shared server at the group
  bandwidth), and lands alpha_l after the link served it, or when the last group did if
  later. A rank's chunk is ready when the last write of that step lands (a reduce also waits
  for the rank's own partial). The makespan is the last arrival.
  By induction over steps, every resource is free and every value ready by the step model's
  end of the previous step, so each send of a step lands within that step's step-model
  duration: the simulator is never above ``step_time_us``, and equals it for a chain of
  dependent single-send steps.
- Protocols (docs/cost-model.md): ``ideal`` is the contract above. ``simple``, ``ll128`` and
  ``ll`` scale every link's alpha by NCCL's per-hop latency ratio for the link's kind and every
  link's and group's bandwidth by the protocol's payload share (``effective_link``), in both
  models, and add NCCL's base latency once per call. ``best`` takes the fastest per size.
- Runtime terms (``RuntimeTerms``, made from a ``synth.calibration`` document): what a real
  runtime pays on top of a protocol, the same for every schedule: link efficiency per kind,
  a per-thread-block bandwidth cap, scaled latencies, network hops, Simple's pipeline fill and
  the CPU's launch floor (docs/cost-model.md, "The runtime model").

>>> from synth.core.collectives import allgather
>>> from synth.core.schedule import Send, Step
>>> from synth.core.topology import Link, Topology
>>> pair = Topology("pair", 2, (Link(0, 1, 25.0, 0.7), Link(1, 0, 25.0, 0.7)))
>>> s = Schedule(pair, allgather(2), (Step((Send(0, 0, 1), Send(1, 1, 0))),))
>>> round(step_time_us(s, parse_size("1M")), 4)  # 0.7 + 524288 B / 25 GB/s
21.6715
>>> round(step_time_us(s, parse_size("1M"), "ll"), 4)  # 6.6 + 0.7 + 524288 B / (25 GB/s * 0.5)
49.243
>>> best_protocol(s, 1024)  # 6.6 + 0.7 + 512 B / 12.5 GB/s beats 8.4 + 0.7 * 3.4 / 0.6 + ...
('ll', 7.34096)
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

from synth.core.errors import InputError
from synth.core.schedule import Schedule, Step, port_loads
from synth.core.topology import Link, Topology

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


# ---------------------------------------------------------------------------- protocols
# NCCL's Ring per-hop latency hwLat in us, (LL, LL128, Simple), by link kind (src/graph/tuning.cc,
# reference/nccl-model.md). xGMI takes the NVLink row (an assumption: RCCL tunes xGMI like NVLink).
NCCL_RING_HOP_US = {
    "nvlink": (0.6, 1.9, 3.4),
    "pcie": (1.0, 2.5, 5.7),
    "net": (2.7, 4.0, 14.0),
}
LATENCY_ROW = {"nvlink": "nvlink", "xgmi": "nvlink", "pcie": "pcie", "net": "net",
               "nvls": "nvlink", "sharp": "net"}
UNKNOWN_KIND_ROW = "nvlink"  # the row for a link without ``kind`` (``synth cost`` says so)
# A switch's ports are costed under a kind of their own, so runtime terms can rate them apart
# from the links they share groups with: NVLink SHARP on an NVSwitch, SHARP on a network switch.
SWITCH_KIND = {"nvlink": "nvls", "net": "sharp", None: "nvls"}
SWITCH_PROTOCOLS = ("simple",)  # NVLS and CollNet run Simple only (reference/in-network.md 2.1)


def switch_kind(switch) -> str:
    """The cost kind of a switch's ports (``SWITCH_KIND`` by the switch's ``kind``)."""
    return SWITCH_KIND.get(switch.kind, "nvls")


@dataclass(frozen=True)
class Protocol:
    """How a runtime moves data: scales every bandwidth and alpha, adds a base latency per call.

    ``hop_column`` is the column of ``NCCL_RING_HOP_US`` (0 LL, 1 LL128, 2 Simple); a link's
    alpha is multiplied by hwLat(protocol, kind) / hwLat(LL, kind). None (``ideal``) keeps alpha.

    >>> PROTOCOLS["simple"].alpha_factor("net") == 14.0 / 2.7, PROTOCOLS["ideal"].alpha_factor(None)
    (True, 1.0)
    """

    name: str
    bandwidth_factor: float
    base_us: float
    hop_column: int | None = None

    def alpha_factor(self, kind: str | None) -> float:
        """The factor on the alpha of a link of this kind (None: ``UNKNOWN_KIND_ROW``)."""
        if self.hop_column is None:
            return 1.0
        row = NCCL_RING_HOP_US[LATENCY_ROW.get(kind, UNKNOWN_KIND_ROW)]
        return row[self.hop_column] / row[0]


PROTOCOLS = {
    "ideal": Protocol("ideal", 1.0, 0.0),  # the contract model: no factor, no base latency
    "simple": Protocol("simple", 1.0, 8.4, 2),
    "ll128": Protocol("ll128", 120 / 128, 14.0, 1),  # 120 data bytes per 128-byte line
    "ll": Protocol("ll", 0.5, 6.6, 0),  # 4 data bytes per 8-byte line
}
RUNTIME_PROTOCOLS = ("simple", "ll128", "ll")  # what ``best`` chooses from, ties to the first
PROTOCOL_CHOICES = (*PROTOCOLS, "best")


def protocol_of(protocol: str | Protocol) -> Protocol:
    """The Protocol named ``protocol`` (a Protocol passes through); InputError otherwise.

    >>> protocol_of("ll128").bandwidth_factor
    0.9375
    """
    if isinstance(protocol, Protocol):
        return protocol
    found = PROTOCOLS.get(protocol) if isinstance(protocol, str) else None
    if found is None:
        if protocol == "best":
            raise InputError("protocol 'best' is chosen per size: use best_protocol() or cost_rows()")
        raise InputError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOL_CHOICES)}")
    return found


def effective_link(link: Link, protocol: str | Protocol = "ideal") -> tuple[float, float]:
    """(alpha us, bandwidth GB/s) of ``link`` under ``protocol``.

    >>> effective_link(Link(0, 1, 25.0, 0.6, kind="nvlink"), "ll")
    (0.6, 12.5)
    """
    proto = protocol_of(protocol)
    return link.alpha * proto.alpha_factor(link.kind), link.bandwidth * proto.bandwidth_factor


def untyped_links(topology: Topology) -> int:
    """How many links have no ``kind`` (protocols cost them with ``UNKNOWN_KIND_ROW``)."""
    return sum(1 for link in topology.links if link.kind is None)


# ---------------------------------------------------------------------------- runtime terms
@dataclass(frozen=True)
class RuntimeTerms:
    """What a real runtime pays on top of a protocol's model (``Calibration.terms`` makes one).

    Under protocol P at a call of S bytes, with C = clamp(floor(S / channel_bytes[P]), 1,
    max_channels) thread blocks on every link (the schedule runs with C instances, as NCCL spreads
    a call over C channels):

    - a link of kind K moves at min(bw x efficiency[K] x share(P), C x channel_gbps[P]);
      a group at bw x efficiency[K] x share(P), K the kind its links share; a switch's port at
      bw x efficiency[K] x share(P) with K its ``switch_kind`` (no cap per thread block);
    - a link's alpha is latency_scale x alpha x P's hop factor, plus ``net_hop_us`` on a
      network link;
    - the call adds latency_scale x P's base latency, and under Simple the pipeline fill
      fill_us x min(1, S / fill_bytes);
    - the call takes at least ``launch_us`` (calls queue behind the CPU), and a call with switch
      entries at least ``switch_floor_us`` (NVLS's latency: what a call through the switch
      takes however little it moves, as NCCL's NVLS runs are measured);
    - bounds charge a call ``fastest_call_us``: no more than the fastest kernel any modelled
      runtime has pays in the launch mode (``call_floor_us``).

    Links without a kind take the efficiency of ``UNKNOWN_KIND_ROW``.
    """

    label: str
    latency_scale: float
    efficiency: Mapping[str, float]
    net_hop_us: float
    channel_gbps: Mapping[str, float]
    channel_bytes: Mapping[str, float]
    max_channels: int
    fill_us: float
    fill_bytes: float
    launch_us: float
    switch_floor_us: float = 0.0
    call_floor_us: float | None = None

    @property
    def fastest_call_us(self) -> float:
        """The least a call adds once under these terms, whatever runs it: the cheapest protocol's
        scaled base latency, or ``call_floor_us`` where a kernel outside the protocols (NCCL's
        symmetric LL kernels) or the launch mode (a CUDA graph's replay) charges less."""
        least = self.latency_scale * min(PROTOCOLS[p].base_us for p in RUNTIME_PROTOCOLS)
        return least if self.call_floor_us is None else min(least, self.call_floor_us)

    def channels(self, size_bytes: float, protocol: str) -> int:
        """Thread blocks per link for a call of ``size_bytes`` under ``protocol``."""
        wanted = math.floor(size_bytes / self.channel_bytes[protocol])
        return int(min(max(1, wanted), self.max_channels))

    def efficiency_of(self, kind: str | None) -> float:
        """The share of line rate a link of ``kind`` reaches (a switch kind without a term of
        its own takes its latency row's: nvls as nvlink, sharp as net)."""
        fallback = self.efficiency.get(LATENCY_ROW.get(kind, UNKNOWN_KIND_ROW), self.efficiency[UNKNOWN_KIND_ROW])
        return self.efficiency.get(kind or UNKNOWN_KIND_ROW, fallback)

    def call_us(self, proto: Protocol, size_bytes: float) -> float:
        """What the call adds once: the scaled base latency and (Simple) the pipeline fill."""
        fill = self.fill_us * min(1.0, size_bytes / self.fill_bytes) if proto.name == "simple" else 0.0
        return self.latency_scale * proto.base_us + fill


@dataclass(frozen=True)
class _Rates:
    """Alpha and bandwidth of every link and group under one (protocol, terms, size)."""

    alpha_factor: Mapping[str | None, float]
    alpha_add: Mapping[str | None, float]
    bandwidth_factor: Mapping[str | None, float]
    link_cap: float

    def alpha(self, alpha: float, kind: str | None) -> float:
        return alpha * self.alpha_factor[kind] + self.alpha_add[kind]

    def link_bandwidth(self, bandwidth: float, kind: str | None) -> float:
        """A link's rate, capped by its thread blocks; a switch's port is not (NVLS and SHARP
        run on CTAs of their own, as the runtime model has them)."""
        if kind in _SWITCH_KINDS:
            return bandwidth * self.bandwidth_factor[kind]
        return min(bandwidth * self.bandwidth_factor[kind], self.link_cap)

    def group_bandwidth(self, bandwidth: float, kind: str | None) -> float:
        return bandwidth * self.bandwidth_factor[kind]


_KINDS = (None, *LATENCY_ROW)
_NETWORK_KINDS = ("net", "sharp")
_SWITCH_KINDS = frozenset(SWITCH_KIND.values())


def rates_of(proto: Protocol, terms: RuntimeTerms | None, size_bytes: float) -> _Rates:
    """The protocol's factors, and with ``terms`` the runtime's (see ``RuntimeTerms``)."""
    if terms is None:
        return _Rates({k: proto.alpha_factor(k) for k in _KINDS}, dict.fromkeys(_KINDS, 0.0),
                      dict.fromkeys(_KINDS, proto.bandwidth_factor), math.inf)
    if proto.hop_column is None:
        raise InputError("runtime terms apply to a runtime's protocols (simple, ll128, ll, best), not 'ideal'")
    return _Rates({k: terms.latency_scale * proto.alpha_factor(k) for k in _KINDS},
                  {k: terms.net_hop_us if k in _NETWORK_KINDS else 0.0 for k in _KINDS},
                  {k: proto.bandwidth_factor * terms.efficiency_of(k) for k in _KINDS},
                  terms.channels(size_bytes, proto.name) * terms.channel_gbps[proto.name])


def _call_total(proto: Protocol, terms: RuntimeTerms | None, size_bytes: float, steps_us: float,
                switched: bool = False) -> float:
    """The call's time from its steps' sum: the protocol's base latency, and the runtime's terms
    (``switched``: the call has switch entries, so the switch's floor applies too)."""
    if terms is None:
        return steps_us + proto.base_us
    floor = max(terms.launch_us, terms.switch_floor_us) if switched else terms.launch_us
    return max(floor, steps_us + terms.call_us(proto, size_bytes))


# ---------------------------------------------------------------------------- step model
@dataclass(frozen=True)
class StepLoads:
    """What the step model needs of a schedule, counted once and reused for every size and
    protocol: per step, the distinct (alpha, kind, chunks, bandwidth) of its links and switch
    ports (a port is a resource like a link, of kind ``switch_kind``) and the distinct (chunks,
    bandwidth, kind) of its groups. ``protocols``: those it may run under (a schedule with
    switch entries: ``SWITCH_PROTOCOLS``)."""

    buffer_chunks: int
    links: tuple[tuple[tuple[float, str | None, int, float], ...], ...]
    groups: tuple[tuple[tuple[int, float, str | None], ...], ...]
    protocols: tuple[str, ...] = RUNTIME_PROTOCOLS

    def step_times_us(self, size_bytes: float, protocol: str | Protocol = "ideal",
                      terms: RuntimeTerms | None = None) -> list[float]:
        """Every step's duration (no per-call latency)."""
        proto = protocol_of(protocol)
        _check_protocol(proto, self.protocols)
        rates = rates_of(proto, terms, size_bytes)
        b = size_bytes / self.buffer_chunks
        times, known = [], {}  # a step whose terms are another's (counted_loads repeats them) costs what it did
        for link_terms, group_terms in zip(self.links, self.groups):
            key = (id(link_terms), id(group_terms))
            if key not in known:
                known[key] = _step_us(link_terms, group_terms, rates, b)
            times.append(known[key])
        return times

    def time_us(self, size_bytes: float, protocol: str | Protocol = "ideal",
                terms: RuntimeTerms | None = None) -> float:
        """The schedule's time: the sum of its steps plus the per-call terms (the protocol's base
        latency; with ``terms`` also the pipeline fill, the launch floor and, with switch
        entries, the switch's floor)."""
        proto = protocol_of(protocol)
        return _call_total(proto, terms, size_bytes, sum(self.step_times_us(size_bytes, proto, terms)),
                           self.switched)

    @property
    def switched(self) -> bool:
        """Whether the schedule has switch entries (it then runs under ``SWITCH_PROTOCOLS`` only)."""
        return self.protocols == SWITCH_PROTOCOLS

    def best(self, size_bytes: float, terms: RuntimeTerms | None = None) -> tuple[str, float]:
        """(name, time) of the fastest of its ``protocols`` at this size."""
        found = None
        for name in self.protocols:
            took = self.time_us(size_bytes, name, terms)
            if found is None or took < found[1]:
                found = (name, took)
        return found


def _step_us(link_terms, group_terms, rates: _Rates, b: float) -> float:
    """One step's duration: its slowest link (alpha plus chunks at the rate) or group."""
    longest = 0.0
    for alpha, kind, count, bandwidth in link_terms:
        longest = max(longest, rates.alpha(alpha, kind) + count * b / (rates.link_bandwidth(bandwidth, kind) * 1e3))
    for count, bandwidth, kind in group_terms:
        longest = max(longest, count * b / (rates.group_bandwidth(bandwidth, kind) * 1e3))
    return longest


def step_loads(schedule: Schedule) -> StepLoads:
    """Count every step's chunks per link, switch port and group once (InputError for a send on
    no link or an entry on no switch)."""
    topo = schedule.topology
    _check_switches(schedule)
    group_terms = _group_terms(topo)
    links, groups = [], []
    for index, step in enumerate(schedule.steps):
        per_link = Counter((s.src, s.dst) for s in step.sends)
        terms, per_group = _link_terms(topo, index, per_link)
        ports, switch_groups = port_loads(step, topo)
        for (name, _, _), count in ports.items():
            switch = topo.switch(name)
            terms[(switch.alpha, switch_kind(switch), count, switch.bandwidth)] = None
        per_group.update(switch_groups)
        links.append(tuple(terms))
        groups.append(tuple({(count, *group_terms[name]): None for name, count in per_group.items()}))
    protocols = SWITCH_PROTOCOLS if schedule.switch_count else RUNTIME_PROTOCOLS
    return StepLoads(schedule.collective.buffer_chunks, tuple(links), tuple(groups), protocols)


def _link_terms(topo: Topology, index: int, per_link: Mapping[tuple[int, int], int]) -> tuple[dict, Counter]:
    """One step's distinct (alpha, kind, chunks, bandwidth) of its links (a dict, in first-seen
    order) and its chunks per group, from its chunks per link; InputError for a send on no link."""
    per_group: Counter = Counter()
    terms: dict[tuple[float, str | None, int, float], None] = {}
    for key, count in per_link.items():
        link = topo.link(*key)
        if link is None:
            raise InputError(f"cost: step {index}: {key[0]}->{key[1]} is not a link of {topo.name}")
        terms[(link.alpha, link.kind, count, link.bandwidth)] = None
        for group in topo.groups_of_link.get(key, ()):
            per_group[group.name] += count
    return terms, per_group


def counted_loads(topology: Topology, buffer_chunks: int,
                  steps: Sequence[Mapping[tuple[int, int], int]]) -> StepLoads:
    """The StepLoads of a schedule without switch entries from its chunks per link, step by step
    (one mapping (src, dst) -> chunks per step), for a builder that knows them without making
    the sends (every step of a ring moves one chunk per hop). The same terms as ``step_loads``
    on the built schedule, each step's in its own order (the step model takes their max); a
    mapping passed for several steps is counted once."""
    group_terms = _group_terms(topology)
    done: dict[int, tuple[tuple, tuple]] = {}
    links, groups = [], []
    for index, per_link in enumerate(steps):
        if id(per_link) not in done:
            terms, per_group = _link_terms(topology, index, per_link)
            done[id(per_link)] = (tuple(terms),
                                  tuple({(count, *group_terms[name]): None for name, count in per_group.items()}))
        links.append(done[id(per_link)][0])
        groups.append(done[id(per_link)][1])
    return StepLoads(buffer_chunks, tuple(links), tuple(groups), RUNTIME_PROTOCOLS)


_GROUP_TERMS: dict[int, tuple[Topology, dict]] = {}  # id(topology) -> (it, {group: (bandwidth, kind)})


def _group_terms(topo: Topology) -> dict:
    """Every group's (bandwidth, kind), once per topology (a kind reads every link of its group:
    a second per step_loads on a 576-GPU composition, where a planner times dozens of variants)."""
    hit = _GROUP_TERMS.get(id(topo))
    if hit is None or hit[0] is not topo:
        if len(_GROUP_TERMS) > 16:
            _GROUP_TERMS.clear()
        hit = _GROUP_TERMS[id(topo)] = (topo, {g.name: (g.bandwidth, topo.group_kind(g)) for g in topo.groups})
    return hit[1]


def step_times_us(schedule: Schedule, size_bytes: float, protocol: str | Protocol = "ideal") -> list[float]:
    """The duration of every step under the contract cost model (under ``protocol``: scaled
    alphas and bandwidths; its base latency is not a step's, see ``step_time_us``)."""
    return step_loads(schedule).step_times_us(size_bytes, protocol)


def step_time_us(schedule: Schedule, size_bytes: float, protocol: str | Protocol = "ideal",
                 terms: RuntimeTerms | None = None) -> float:
    """The schedule's time in the contract cost model (sum of step durations), plus the
    protocol's base latency once (0 for ``ideal``); with ``terms``, the runtime's."""
    return step_loads(schedule).time_us(size_bytes, protocol, terms)


def best_protocol(schedule: Schedule, size_bytes: float, terms: RuntimeTerms | None = None) -> tuple[str, float]:
    """(name, step_time_us) of the fastest of simple, ll128 and ll at ``size_bytes``."""
    return step_loads(schedule).best(size_bytes, terms)


# ---------------------------------------------------------------------------- simulator
def simulate_us(schedule: Schedule, size_bytes: float, protocol: str | Protocol = "ideal",
                terms: RuntimeTerms | None = None) -> float:
    """Makespan of the event-driven simulation (see the module docstring); <= step_time_us.

    Under ``protocol`` (and ``terms``) every link and group moves at the same alpha and
    bandwidth as in the step model, and the same per-call terms are added once.
    """
    proto = protocol_of(protocol)
    if schedule.switch_count:
        _check_switches(schedule)
        _check_protocol(proto, SWITCH_PROTOCOLS)
    rates = rates_of(proto, terms, size_bytes)
    topo = schedule.topology
    b = size_bytes / schedule.collective.buffer_chunks
    group_time = {g.name: b / (rates.group_bandwidth(g.bandwidth, topo.group_kind(g)) * 1e3) for g in topo.groups}
    # key -> (key, alpha, time on the link, (group, time in it) per group), filled as links are first used
    link_cost: dict[tuple[int, int], SendCost] = {}

    def costs(index: int, step: Step):
        for send in step.sends:
            key = (send.src, send.dst)
            cost = link_cost.get(key)
            if cost is None:
                link = _link(schedule, index, key)
                cost = link_cost[key] = (key, rates.alpha(link.alpha, link.kind),
                                         b / (rates.link_bandwidth(link.bandwidth, link.kind) * 1e3),
                                         tuple((g.name, group_time[g.name]) for g in topo.groups_of_link.get(key, ())))
            yield cost

    switch_costs = _switch_costs(schedule, rates, b, group_time)
    makespan = event_makespan(schedule.steps, schedule.collective, costs, switch_costs)
    return _call_total(proto, terms, size_bytes, makespan, bool(schedule.switch_count))


def _switch_costs(schedule: Schedule, rates: "_Rates", b: float, group_time: Mapping[str, float]):
    """switch_costs(entry) -> (alpha, [(port key, time)], [(group key, time)]) for the simulator:
    an entry holds the out-port of every src and the in-port of every dst for b / port
    bandwidth, and the groups those ports share for their times."""
    known: dict = {}

    def costs(entry):
        key = (entry.switch, entry.srcs, entry.dsts)
        if key not in known:
            known[key] = _entry_costs(entry)
        return known[key]

    def _entry_costs(entry):
        switch = schedule.topology.switch(entry.switch)
        kind = switch_kind(switch)
        took = b / (rates.link_bandwidth(switch.bandwidth, kind) * 1e3)
        ports = [((switch.name, r, "out"), took) for r in entry.srcs]
        ports += [((switch.name, r, "in"), took) for r in entry.dsts]
        groups = [(g, group_time[g]) for r in entry.srcs if (g := switch.out_group(r)) is not None]
        groups += [(g, group_time[g]) for r in entry.dsts if (g := switch.in_group(r)) is not None]
        return rates.alpha(switch.alpha, kind), ports, groups
    return costs


SendCost = tuple  # (resource key, alpha, time on the link, ((group key, time in it), ...))


def event_makespan(steps, collective, costs, switch_costs=None) -> float:
    """The one event simulation: sends in step order, each starting when its source holds the
    chunk and its link is free, holding the link for its time and every group it crosses for
    theirs, landing alpha later (or when the last group is done); a step's writes land
    together (``synth.core.event_sim.Ready.land``). ``costs(index, step)`` yields each send's ``SendCost`` in order;
    resources are told apart by their keys. Switch entries follow the step's sends: each starts
    when every src holds the chunk, holds every resource ``switch_costs(entry)`` names from
    when it is free, and lands at every dst alpha after the last is done, replacing its copy."""
    from synth.core.event_sim import makespan

    return makespan(steps, collective, costs, switch_costs)


def _check_protocol(proto: Protocol, allowed: tuple[str, ...]) -> None:
    """InputError when a runtime protocol is not one the schedule runs under (switch entries:
    ``SWITCH_PROTOCOLS``)."""
    if proto.hop_column is not None and proto.name not in allowed:
        raise InputError(f"protocol {proto.name}: this schedule has switch entries, which run "
                         f"under {', '.join(allowed)} only")


def _check_switches(schedule: Schedule) -> None:
    """InputError for a switch entry naming a switch the topology lacks (verify first)."""
    for index, step in enumerate(schedule.steps):
        for entry in step.switches:
            if schedule.topology.switch(entry.switch) is None:
                raise InputError(f"cost: step {index}: {schedule.topology.name} has no switch {entry.switch!r}")


def _link(schedule: Schedule, index: int, key: tuple[int, int]) -> Link:
    link = schedule.topology.link(*key)
    if link is None:
        raise InputError(f"cost: step {index}: {key[0]}->{key[1]} is not a link of {schedule.topology.name}")
    return link


# ---------------------------------------------------------------------------- bandwidth
def algbw_gbps(size_bytes: float, time_us: float) -> float:
    """nccl-tests algorithm bandwidth S / t in GB/s (inf for t = 0)."""
    return math.inf if time_us <= 0 else size_bytes / (time_us * 1e3)


def busbw_gbps(size_bytes: float, time_us: float, factor: Any) -> float:
    """algbw x the nccl-tests factor; ``factor`` is a number or anything with ``busbw_factor``."""
    scale = getattr(factor, "busbw_factor", factor)
    return algbw_gbps(size_bytes, time_us) * float(scale)


def cost_rows(
    schedule: Schedule, sizes: Iterable[int], bounds: Any = None, protocol: str | Protocol = "ideal",
    terms: RuntimeTerms | None = None, simulated: Any = None,
) -> list[dict[str, Any]]:
    """One row per size: step-model and simulated times, algbw/busbw, fraction of the bound,
    and the protocol (for ``best``: the one picked at that size). Times are under the protocol
    (and the runtime ``terms``; then ``channels`` says how many thread blocks per link they assume).

    ``bounds`` is a ``synth.bounds.lower_bounds.Bounds`` (anything with ``time_us(size)``) or None.
    ``simulated``: the sizes to run the event simulation at (None: every size); elsewhere
    ``sim_time_us`` is None.
    """
    loads = step_loads(schedule)
    best = isinstance(protocol, str) and protocol == "best"
    fixed = None if best else protocol_of(protocol)
    rows = []
    for size in sizes:
        name, step = loads.best(size, terms) if best else (fixed.name, loads.time_us(size, fixed, terms))
        row: dict[str, Any] = {
            "size": size,
            "protocol": name,
            "step_time_us": step,
            "sim_time_us": (simulate_us(schedule, size, fixed or name, terms)
                            if simulated is None or size in simulated else None),
            "algbw_gbps": algbw_gbps(size, step),
            "busbw_gbps": busbw_gbps(size, step, schedule.collective),
            "bound_time_us": None,
            "bound_fraction": None,
        }
        if terms is not None:
            row["channels"] = terms.channels(size, name)
        if bounds is not None:
            limit = bounds.time_us(size)
            row["bound_time_us"] = limit
            row["bound_fraction"] = limit / step if step > 0 else None
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------- sizes
def parse_size(text: str) -> int:
    """Bytes from ``4096``, ``1K``, ``1.5M``, ``2G``, ``1T`` (powers of 1024, as nccl-tests).

    >>> parse_size("1M"), parse_size("1.5k"), parse_size("64")
    (1048576, 1536, 64)
    """
    match = _SIZE.match(str(text))
    if not match:
        raise InputError(f"bad size {text!r}: use bytes or a number with K, M, G or T (powers of 1024)")
    value = Fraction(match.group(1)) * _UNITS[match.group(2).upper()]
    if value.denominator != 1:
        raise InputError(f"bad size {text!r}: not a whole number of bytes")
    if value < 1:
        raise InputError(f"bad size {text!r}: must be at least 1 byte")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    """A comma-separated list of sizes, in the order given.

    >>> parse_sizes("1K,1M,1G")
    [1024, 1048576, 1073741824]
    """
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise InputError(f"bad size list {text!r}: give sizes separated by commas, e.g. 1K,1M,1G")
    return [parse_size(p) for p in parts]


LEVEL = 0.02  # a speedup within this fraction of 1 reads "level"


def speedup_text(speedup: float) -> str:
    """``1.32x faster``, ``level`` (within LEVEL either way) or ``1.15x slower``: one time over
    another, as every comparison prints it.

    >>> speedup_text(1.318), speedup_text(0.99), speedup_text(0.8)
    ('1.32x faster', 'level', '1.25x slower')
    """
    if 1 / (1 + LEVEL) <= speedup <= 1 + LEVEL:
        return "level"
    return f"{speedup:.2f}x faster" if speedup > 1 else f"{1 / speedup:.2f}x slower"


def format_size(size: int) -> str:
    """The shortest exact form with a 1024-power suffix (``parse_size`` reads it back).

    >>> format_size(1048576), format_size(1536), format_size(1000)
    ('1M', '1.5K', '1000')
    """
    for suffix in ("T", "G", "M", "K"):
        unit = _UNITS[suffix]
        if size >= unit:
            value = Fraction(size, unit)
            if (value * 1000).denominator == 1:
                text = f"{float(value):.3f}".rstrip("0").rstrip(".")
                return f"{text}{suffix}"
    return str(size)
