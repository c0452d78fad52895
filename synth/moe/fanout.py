"""Plans inside one switch domain (one machine, as a GB200 NVL72 rack): every token leaves its
rank once where that rank's port is the bottleneck, in array operations.

With every rank one hop from every other, the direct plan (one copy per destination rank,
straight from the source) loads each rank's in-port with exactly what the bound demands, but the
out-port of a rank with many tokens carries one copy per destination. The bound lets a token
leave once and fan out; two ways do it here, each only for as many tokens as the overloaded
port needs (the most destinations first), so the other ports stay as they were:
- **multicast** (``multicast_hops``), where a switch over the domain has ``multicast``: the
  source writes the token once to the switch, which delivers it to all its destinations (one
  entry on the source's out-port and every destination's in-port, DESIGN.md). One step; combine
  runs it backwards as switch reduces (``synth.moe.plan.reversed_hops``);
- **relays** (``relay_hops``): the source sends the token to one of its destinations (a
  delivery, so no in-port carries more) with room on its out-port, which forwards it to the
  others a step later; pipelined over K steps like the machine plans. Combine: partial sums form
  at the relay before they cross back.
``domain_hops`` returns the candidates; the caller keeps the one the step model likes best.
"""

from __future__ import annotations

import numpy as np

from synth.moe.costing import LinkTable, port_bandwidth
from synth.moe.plan import Fans, Hops, Traffic, _Spread

RELAY_DEPTHS = (2, 3, 4, 6, 8, 12, 16, 24, 32)  # pipeline steps relay_hops tries
RELAY_ROUNDS = 64  # rounds of relay assignment (each places what fits, the rest tries again)


def domain_hops(traffic: Traffic, table: LinkTable) -> list[tuple[Hops, dict]]:
    """The fan-out plans of a routing whose tokens all stay in their machine: (plan, what it
    chose) for multicast (where a switch allows it) and for relays, best depth each."""
    if traffic.crossings:
        return []
    found = []
    loads = _Loads(traffic)
    if not (loads.excess > 0).any():
        return []
    switch = multicast_switch(traffic.topology)
    chunk_bytes = traffic.routing.token_bytes
    if switch is not None:
        hops = multicast_hops(traffic, loads, switch)
        found.append((hops, {"depth": 1, "shape": "multicast", "multicasts": len(hops.fans)}))
        if table.time_us(hops, chunk_bytes) <= loads.floor_us(chunk_bytes) * (1 + 1e-9):
            return found  # at the ports' bound: no relay plan can do better
    relays = relay_plan(traffic, loads)
    if relays is not None:
        best = None
        for depth in RELAY_DEPTHS:
            hops = relays.hops(depth)
            took = table.time_us(hops, chunk_bytes)
            if best is None or took < best[2]:
                best = (hops, depth, took)
        found.append((best[0], {"depth": best[1], "shape": "relayed", "relayed": relays.count}))
    return found


def multicast_switch(topology) -> int | None:
    """Index of a switch that multicasts over every rank of the (one) machine, or None."""
    for index, switch in enumerate(topology.switches):
        if switch.multicast and set(switch.ranks) >= set(range(topology.ranks)):
            return index
    return None


class _Loads:
    """Per token its destinations other than the source (``count``); per rank the copies the
    direct plan sends (``out``) and the most its out-port may carry at the bound's rate
    (``capacity``), in tokens; ``excess`` = out - capacity."""

    def __init__(self, traffic: Traffic):
        routing, n = traffic.routing, traffic.topology.ranks
        self.count = np.bincount(traffic.dest_token, minlength=routing.tokens)
        self.source = routing.token_source
        out_bw, in_bw = port_bandwidth(traffic.topology, across=False)
        self.out = np.bincount(self.source[traffic.dest_token], minlength=n).astype(float)
        sent = np.bincount(self.source[self.count > 0], minlength=n)
        received = np.bincount(traffic.dest_rank, minlength=n)
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = max(np.max(np.where(in_bw > 0, received / in_bw, 0.0)),
                       np.max(np.where(out_bw > 0, sent / out_bw, 0.0)))
        self.rate = rate  # tokens per GB/s: the ports' bound
        self.capacity = rate * out_bw
        self.excess = self.out - self.capacity

    def floor_us(self, chunk_bytes: float) -> float:
        """The ports' bound in microseconds: every token leaves its rank once and enters each
        destination, at the ports' rates."""
        return self.rate * chunk_bytes / 1e3

    def fewest_for(self, excess: np.ndarray, candidate: np.ndarray, saving: np.ndarray) -> np.ndarray:
        """Of the ``candidate`` tokens (each saving ``saving`` copies at its source), per source
        the fewest, most destinations first, whose savings cover ``excess`` of that source."""
        source = self.source[candidate]
        order = np.lexsort((candidate, -saving, source))
        source, gain = source[order], saving[order]
        before = np.cumsum(gain) - gain  # savings of the earlier candidates ...
        before = before - before[np.searchsorted(source, source)]  # ... of the same source
        return candidate[order[before < excess[source]]]


def _root_needs(traffic: Traffic, token: np.ndarray) -> np.ndarray:
    """Whether each token's source is one of its destinations (it then has an output in combine)."""
    routing = traffic.routing
    all_token, all_rank = routing.destination_pairs()
    own = np.zeros(routing.tokens, dtype=bool)
    own[all_token[all_rank == routing.token_source[all_token]]] = True
    return own[token]


def multicast_hops(traffic: Traffic, loads: _Loads, switch: int) -> Hops:
    """One step: the overloaded sources' tokens with the most destinations, as many as their
    out-ports need, go out once as multicasts; every other copy goes straight over its link."""
    many = np.flatnonzero(loads.count >= 2)
    chosen = loads.fewest_for(loads.excess, many, loads.count[many] - 1.0)
    chosen.sort()
    fanned = np.zeros(len(loads.count), dtype=bool)
    fanned[chosen] = True
    direct = ~fanned[traffic.dest_token]
    token, rank = traffic.dest_token, traffic.dest_rank
    leaves = rank[~direct]  # dest pairs are sorted by token, so the leaves of each entry are contiguous
    ptr = np.r_[0, np.cumsum(loads.count[chosen])]
    fans = Fans(chosen, np.zeros(len(chosen), dtype=np.int64), np.full(len(chosen), switch, dtype=np.int64),
                loads.source[chosen], ptr, leaves, _root_needs(traffic, chosen))
    return Hops(token[direct], loads.source[token[direct]], rank[direct], np.zeros(int(direct.sum()), dtype=np.int64),
                1, False, fans)


class RelayPlan:
    """Every send of a relay plan but the steps: the direct copies, each relayed token's first
    hop (source -> relay) and its forwards (relay -> the other destinations)."""

    def __init__(self, traffic: Traffic, relay: np.ndarray):
        source = traffic.routing.token_source
        token, rank = traffic.dest_token, traffic.dest_rank
        relayed = relay[token] >= 0
        first = relayed & (rank == relay[token])
        forward = relayed & ~first
        self.count = int(first.sum())  # relayed tokens
        self.direct = (token[~relayed], source[token[~relayed]], rank[~relayed])
        self.first = (token[first], source[token[first]], rank[first])
        self.forward = (token[forward], relay[token[forward]], rank[forward])
        first_of = np.full(len(relay), -1, dtype=np.int64)
        first_of[token[first]] = np.arange(self.count)
        self.forward_first = first_of[token[forward]]  # the first hop each forward follows
        ranks = traffic.topology.ranks
        fans_out = np.bincount(self.forward_first, minlength=self.count)
        self.directs = _Spread(self.direct[1], self.direct[2], ranks, ())
        self.firsts = _Spread(self.first[1], self.first[2], ranks, (-fans_out,))

    def hops(self, depth: int) -> Hops:
        """At ``depth`` steps (two or more): the direct copies in even runs per link over all of
        them, the first hops over the first ``depth - 1`` (those forwarded to the most ranks
        earliest) and their forwards a step later."""
        first_step = self.firsts.steps(depth - 1)
        parts = (self.direct, self.first, self.forward)
        chunk, src, dst = (np.concatenate([part[i] for part in parts]) for i in range(3))
        step = np.concatenate((self.directs.steps(depth), first_step, first_step[self.forward_first] + 1))
        return Hops(chunk, src, dst, step, int(step.max()) + 1 if len(step) else 0)


def relay_plan(traffic: Traffic, loads: _Loads) -> RelayPlan | None:
    """Relays for the overloaded sources' tokens (``relay_of``), None when none is placed."""
    relay = relay_of(traffic, loads)
    return RelayPlan(traffic, relay) if (relay >= 0).any() else None


def relay_of(traffic: Traffic, loads: _Loads) -> np.ndarray:
    """Per token its relay (-1: straight): in rounds, every overloaded source picks its tokens
    with the most destinations until their savings cover its excess; each picks the destination
    with the most room on its out-port, which takes them in order while they fit; the rest try
    again next round, against the rooms left."""
    count, source = loads.count, loads.source
    token, rank = traffic.dest_token, traffic.dest_rank
    out = loads.out.copy()
    relay = np.full(len(count), -1, dtype=np.int64)
    for _ in range(RELAY_ROUNDS):
        excess = out - loads.capacity
        room = np.maximum(loads.capacity - out, 0.0)
        free = np.flatnonzero((relay < 0) & (count >= 2) & (excess[source] > 0))
        if not len(free):
            break
        chosen = np.sort(loads.fewest_for(np.maximum(excess, 0.0), free, count[free] - 1.0))
        pick = np.isin(token, chosen)  # destination pairs of the chosen tokens, by token
        t, r = token[pick], rank[pick]
        order = np.lexsort((r, -room[r], t))  # per token: the destination with the most room first
        t, r = t[order], r[order]
        best = np.r_[True, t[1:] != t[:-1]]
        t, r = t[best], r[best]
        usable = room[r] >= count[t] - 1
        t, r = t[usable], r[usable]
        if not len(t):
            break
        order = np.lexsort((t, r))
        t, r = t[order], r[order]
        load = (count[t] - 1).astype(float)
        starts = np.searchsorted(r, r)
        used = np.cumsum(load) - (np.cumsum(load) - load)[starts]
        fits = used <= room[r]
        t, r = t[fits], r[fits]
        if not len(t):
            break
        relay[t] = r
        moved = (count[t] - 1).astype(float)
        np.subtract.at(out, source[t], moved)
        np.add.at(out, r, moved)
    return relay
