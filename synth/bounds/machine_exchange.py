"""The machines' exchange bound of an allreduce: what crosses between machines when no switch
on the fabric reduces (docs/bounds.md, "Across machines: the machines' exchange").

Treat every *domain* (a machine, or machines that a computing switch joins) as one node: inside
a domain anything goes (NVLink, NVLS), between domains data moves by point-to-point sends (or
switch entries of a switch that cannot do what the rule excludes). Then every element of an
allreduce over M domains crosses a domain boundary at least 2(M-1) times: the ring argument
(Patarasuk and Yuan) as one-way gossip over domains. Counted as departures (a chunk leaving a
domain's out-cut) it needs no switch that spans domains to deliver to several destinations in
one entry; counted as arrivals (a chunk entering a domain's in-cut), none that sums several
sources. So the out-count takes domains joined by switches that multicast (``multicast`` or
``reduce_multicast``), the in-count those joined by switches that sum (``reduce`` or
``reduce_multicast``); a SHARP fabric (``NAMExK+sharp``) joins every machine in both, and the
bound is gone, as it should be.

Domain d moves at most rate_d chunks per unit of time out of (into) itself: the rate of its cut
under links and groups (its NICs). A time x per unit of capacity therefore obeys
x sum_d rate_d >= 2(M-1) chunks. With M equal machines of NIC rate R that is 2(M-1)/M of the
buffer through every machine's NICs each way (``h100x4``: 1.5 x S / 400 GB/s, algbw 266.7).

>>> from synth.core.library import resolve_topology
>>> from synth.core.collectives import allreduce
>>> h100x4 = resolve_topology("h100x4")
>>> limit = machine_exchange_limit(h100x4, allreduce(h100x4.ranks))
>>> round(limit.full / len(allreduce(h100x4.ranks).pre) * 400.0, 6)  # buffers through 400 GB/s
1.5
>>> machine_exchange_limit(resolve_topology("h100x4+sharp"), allreduce(32)) is None
True
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from synth.bounds.cuts import Limit, network_of
from synth.bounds.flow import Network, cut_rate
from synth.bounds.switches import port_view
from synth.core.collective import Collective
from synth.core.topology import Switch, Topology


def _multicasts(switch: Switch) -> bool:
    """Whether one entry of ``switch`` can write several destinations."""
    return switch.multicast or switch.reduce_multicast


def _sums(switch: Switch) -> bool:
    """Whether one entry of ``switch`` can read several sources."""
    return switch.reduce or switch.reduce_multicast


def exchange_domains(topology: Topology, joins: Callable[[Switch], bool]) -> tuple[tuple[int, ...], ...]:
    """The topology's machines as ``Topology.machine_of`` reads them (no ``machines``: one machine;
    a rank in none: machine 0's), where a switch for which ``joins`` holds merges every machine it
    has a port in into one domain; sorted by least rank."""
    owner = list(range(topology.ranks))

    def root(rank: int) -> int:
        while owner[rank] != rank:
            owner[rank] = owner[owner[rank]]
            rank = owner[rank]
        return rank

    def merge(ranks) -> None:
        ranks = list(ranks)
        for rank in ranks[1:]:
            owner[root(rank)] = root(ranks[0])

    first: dict[int, int] = {}
    for rank, machine in enumerate(topology.machine_of):
        owner[rank] = first.setdefault(machine, rank)
    for switch in topology.switches:
        if joins(switch):
            merge(switch.ranks)
    domains: dict[int, list[int]] = {}
    for rank in range(topology.ranks):
        domains.setdefault(root(rank), []).append(rank)
    return tuple(sorted(tuple(d) for d in domains.values()))


def applies(collective: Collective) -> bool:
    """An allreduce: every chunk's contributions and destinations are all ranks."""
    everyone = frozenset(range(collective.ranks))
    return (collective.combining and collective.ranks > 1
            and all(p == everyone for p in collective.pre + collective.post))


def machine_exchange_limit(topology: Topology, collective: Collective, view: Topology | None = None) -> Limit | None:
    """The machines' exchange bound (see the module) as a ``Limit``; None where it does not apply
    (not an allreduce, or fewer than two domains both ways). ``view``: ``port_view(topology)``
    where the caller has it (a switch's ports as links: its entries leave and enter through them)."""
    if not applies(collective):
        return None
    view = port_view(topology) if view is None else view
    net = network_of(view)
    limits = []
    for direction, joins in (("out", _multicasts), ("in", _sums)):
        domains = exchange_domains(topology, joins)
        if len(domains) < 2:
            continue
        need = len(collective.pre) * 2 * (len(domains) - 1)

        def x(values, groups, domains=domains, direction=direction, need=need) -> float:
            return need / _total_rate(net, domains, direction, values, groups)

        rounds = None if net.capacity is None else x(net.capacity, net.group_capacity)
        moves = "leaves" if direction == "out" else "enters"
        binding = (f"machines' exchange: every chunk {moves} one of {len(domains)} machines "
                   f"2 x {len(domains) - 1} times in all (the fabric does not reduce)")
        limits.append(Limit(x(net.bandwidth, net.group_bandwidth), x(net.bandwidth, None), rounds, binding,
                            None if rounds is None else binding, "machines' exchange (docs/bounds.md)"))
    return _largest(limits)


def _largest(limits: list[Limit]) -> Limit | None:
    """Each value at its largest over ``limits``, named by the limit it comes from."""
    if not limits:
        return None
    full = max(limits, key=lambda limit: limit.full)
    rounds = max(limits, key=lambda limit: -1.0 if limit.rounds is None else limit.rounds)
    return Limit(full.full, max(limit.links for limit in limits), rounds.rounds, full.binding,
                 rounds.rounds_binding, full.method)


def _total_rate(net: Network, domains, direction: str, values, groups) -> float:
    """Sum over domains of the rate out of (``out``) or into (``in``) each, under the groups."""
    total = 0.0
    for domain in domains:
        inside = np.zeros(net.ranks, dtype=bool)
        inside[list(domain)] = True
        crossing = inside[net.src] & ~inside[net.dst] if direction == "out" else ~inside[net.src] & inside[net.dst]
        total += cut_rate(net, crossing, values, groups)[0]
    return total
