"""Lower bounds on a machine whose switches compute (reference/in-network.md section 4).

A switch entry is a hyperedge: one chunk out of every src's port, one into every dst's, summed
or copied inside. Point-to-point reasoning that counts a chunk per (src, dst) pair no longer
holds, so on a topology with switches the bounds are computed on the *port view*: the topology
with a virtual link between every two ports of every switch (at the port's bandwidth and alpha,
in the port's groups; where a link already joins them, that link's bandwidth grows by the
port's instead, outside the port's groups: more capacity than the machine has, so still a
bound), and:

- steps and the latency floor from hop distances over the port view (one switch entry is one
  hop between any of its ports);
- bandwidth from cuts only: for a rank set S, whatever must leave S leaves through a link or a
  port of a rank in S, at least one chunk per chunk that must cross, whatever the switch does
  inside; reception sets likewise for copies. The flow LP is not used: it routes a chunk to
  each destination over links and would charge a reduction's destination once per contributor;
- no link-only bound (data may travel through ports only);
- allreduce on a machine with a reducing switch reports the proven bound (every rank sends and
  receives the whole buffer: busbw 2(n-1)/n x port rate, section 4.2), not the
  reduce-scatter + allgather convention, which in-switch reduction beats;
- where no switch reduces and multicasts in one pass, the exchange bound (``exchange_limit``)
  tightens it: a switch's sum replaces its destination's copy, so every element costs the ranks
  together ``in + (n-2) out >= n^2 - 2`` chunk transfers (the proof is in docs/bounds.md);
- across machines, unless a switch on the fabric sums, the machines' exchange
  (``synth.bounds.machine_exchange``) tightens it too: NVLS inside a machine does not shorten
  what crosses between machines.

``nvls_busbw_gbps`` is the figure for NVLS as built (each port moves (n+1)/n of the buffer each
way: busbw 2(n-1)/(n+1) x port rate, section 4.2 item 4); it bounds NCCL's NVLS, not every schedule.
"""

from __future__ import annotations

from dataclasses import replace

from synth.bounds.cuts import Limit, network_of
from synth.bounds.flow import cut_rate
from synth.core.collective import Collective
from synth.core.topology import Group, Link, Topology


def reducing(topology: Topology) -> bool:
    """Whether a switch of ``topology`` can sum (reduce or reduce_multicast)."""
    return any(s.reduce or s.reduce_multicast for s in topology.switches)


def port_view(topology: Topology) -> Topology:
    """``topology`` without switches, a virtual link joining every two ports of each (see the
    module); the same topology when it has no switch."""
    if not topology.switches:
        return topology
    links = {link.key: link for link in topology.links}
    members: dict[str, list[tuple[int, int]]] = {}
    for switch in topology.switches:
        capacity = topology.switch_capacity(switch)
        for src in switch.ranks:
            for dst in switch.ranks:
                if src == dst:
                    continue
                existing = links.get((src, dst))
                links[(src, dst)] = _widened(existing, src, dst, switch, capacity, topology)
                if existing is not None:
                    continue
                for group in (switch.out_group(src), switch.in_group(dst)):
                    if group is not None:
                        members.setdefault(group, []).append((src, dst))
    groups = tuple(_grown(g, members.get(g.name, ())) for g in topology.groups)
    if topology.rounds_apply:  # the view's slowest link is not the machine's: keep its capacities
        links = {key: link if link.capacity is not None else replace(link, capacity=topology.link_capacity(link))
                 for key, link in links.items()}
        groups = tuple(g if g.capacity is not None else replace(g, capacity=topology.group_capacity(g))
                       for g in groups)
    return replace(topology, links=tuple(links.values()), groups=groups, switches=())


def _widened(link: Link | None, src: int, dst: int, switch, capacity, topology: Topology) -> Link:
    if link is None:
        return Link(src, dst, switch.bandwidth, switch.alpha, capacity, switch.kind)
    wider = None if capacity is None or topology.link_capacity(link) is None \
        else topology.link_capacity(link) + capacity
    return replace(link, bandwidth=link.bandwidth + switch.bandwidth, alpha=min(link.alpha, switch.alpha),
                   capacity=wider)


def _grown(group: Group, extra) -> Group:
    known = set(group.links)
    added = tuple(key for key in dict.fromkeys(extra) if key not in known)
    return replace(group, links=group.links + added) if added else group


def nvls_busbw_gbps(topology: Topology, collective: Collective) -> float | None:
    """busbw of NVLS as built for allreduce on one switch spanning every rank (None elsewhere)."""
    n = topology.ranks
    for switch in topology.switches:
        if switch.reduce and switch.multicast and len(switch.ranks) == n and collective.name == "allreduce":
            return 2 * (n - 1) / (n + 1) * switch.bandwidth
    return None


def exchange_applies(topology: Topology, collective: Collective) -> bool:
    """Whether ``exchange_limit`` holds: an allreduce of n >= 3 ranks on a machine with a reducing
    switch and none that reduces and multicasts in one pass (the proof's case analysis)."""
    everyone = frozenset(range(collective.ranks))
    return (collective.combining and collective.ranks >= 3 and reducing(topology)
            and not any(s.reduce_multicast for s in topology.switches)
            and all(p == everyone for p in collective.pre + collective.post))


def exchange_limit(topology: Topology, collective: Collective, view: Topology | None = None) -> Limit | None:
    """The exchange bound of an allreduce through switches whose sums replace (None where
    ``exchange_applies`` does not hold).

    Per chunk, the chunk transfers into ranks (``in``, links and ports) and out of them (``out``)
    satisfy in + (n-2) out >= n^2 - 2 (docs/bounds.md). Rank r moves at most in_r / out_r chunks
    per unit of time (its in and out rates on the port view, under groups), so the time x per
    unit of capacity obeys x (sum in_r + (n-2) sum out_r) >= chunks (n^2 - 2). On n ranks of
    equal rate R that is (n^2-2)/(n(n-1)) of the buffer per rank over R (NVLS as built moves
    (n+1)/n; the plain cut, 1). ``view``: ``port_view(topology)`` where the caller has it."""
    if not exchange_applies(topology, collective):
        return None
    view = port_view(topology) if view is None else view
    n, net = collective.ranks, network_of(view)
    need = len(collective.pre) * (n * n - 2)
    full = need / _weighted_rate(net, n, net.bandwidth, net.group_bandwidth)
    rounds = None if net.capacity is None else need / _weighted_rate(net, n, net.capacity, net.group_capacity)
    binding = f"in + {n - 2} x out >= {n * n - 2} transfers per chunk (a switch's sum replaces its destination's copy)"
    return Limit(full, 0.0, rounds, binding, None if rounds is None else binding, "exchange bound (docs/bounds.md)")


def _weighted_rate(net, n: int, values, groups) -> float:
    """sum over ranks of in-rate + (n-2) x out-rate, each under the groups (``cut_rate``)."""
    total = 0.0
    for rank in range(n):
        total += cut_rate(net, net.dst == rank, values, groups)[0]
        total += (n - 2) * cut_rate(net, net.src == rank, values, groups)[0]
    return total
