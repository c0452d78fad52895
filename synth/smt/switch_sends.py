"""Switch entries in the SCCL-style encoding (DESIGN.md, "In-network reduction and multicast").

For a non-combining collective, S steps, on a topology whose switches take part (``taking_part``):
  reach[c][w][a][b][s]  rank a's copy of chunk c reaches rank b through switch w in step s;
  enter[c][w][a][s]     a puts c into w in step s: true when some reach of it is (reach -> enter).
Rules: a reach needs a to hold c when the step begins, b to hold it after the step and (with
``forbid_redundant_sends``) not before; a switch without ``multicast`` takes at most one dst per
(chunk, src, step). Every enter is one chunk on w's out-port of a, every reach one chunk on
w's in-port of b; a port carries at most ``switch_capacity`` x rounds[s] chunks in step s, and
the groups its ``out_group`` / ``in_group`` name count its chunks beside their links' sends. A
schedule has one entry per (chunk, switch, src, step) listing every dst it reaches (a (rank,
chunk) some other entry or send already writes in that step is left out of it).

The dual (a combining collective solved as its non-combining dual on the reversed topology and
run backwards by ``synth.core.reductions.DUAL``): the dual's entry a -> D in step s is, in the
original, the reduce entry D + [a] -> [a] in step S + 1 - s (each src only while it holds a
partial of c). Under the replace rule the dst's own partial survives only as one of the srcs,
so in the dual:
  - w takes part only with ``multicast`` in the dual view (``reduce`` in the original): even
    one dst makes two srcs, a and d;
  - a's in-port (its out-port in the original) carries c as well whenever a holds a partial of
    c by then in the original: a contributes (c's post in the dual) or a sends c in a later
    dual step (a partial reached a in an earlier original step);
  - a sends c nowhere else in step s (what the entry writes at a replaces a's copy: no other
    write to (a, c) in that step).
Those rules are exactly what a legal reduce entry needs, so an UNSAT of the dual is one of the
original with switch entries. ``reduce_multicast`` (many srcs to many dsts) has no tree-shaped
dual and is not used by either encoding; a switch that has it takes part through its
``reduce`` and ``multicast`` flags only.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from itertools import product

from synth.core.collective import Collective
from synth.core.schedule import SwitchSend
from synth.core.topology import Switch, Topology
from synth.smt.cardinality import neg

OUT, IN = "out", "in"


def taking_part(topology: Topology, dual: bool) -> tuple[Switch, ...]:
    """The switches whose entries the encoding uses: every one (a one-to-one entry needs no
    capability, several dsts need ``multicast``); in the dual only those with ``multicast`` in
    the dual view (``reduce`` in the original: see the module)."""
    return tuple(w for w in topology.switches if w.multicast or not dual)


def hop_distances(topology: Topology) -> tuple[tuple[float, ...], ...]:
    """dist[a][b]: fewest hops from a to b where a link is one hop and so is one switch entry
    between any two ports of a switch (math.inf when unreachable). The topology's own
    ``hop_distances`` when it has no switch."""
    if not topology.switches:
        return topology.hop_distances
    nexts = [{link.dst for link in topology.out_links[r]} for r in range(topology.ranks)]
    for switch in topology.switches:
        for a in switch.ranks:
            nexts[a].update(b for b in switch.ranks if b != a)
    return tuple(_breadth_first(nexts, start) for start in range(topology.ranks))


def _breadth_first(nexts: list[set[int]], start: int) -> tuple[float, ...]:
    """Hops from ``start`` to every rank over the neighbour sets ``nexts``."""
    dist = [math.inf] * len(nexts)
    dist[start] = 0
    queue = deque([start])
    while queue:
        rank = queue.popleft()
        for other in nexts[rank]:
            if dist[other] == math.inf:
                dist[other] = dist[rank] + 1
                queue.append(other)
    return tuple(dist)


def fewest_steps(topology: Topology, collective: Collective) -> float:
    """Steps any schedule needs with switch entries: the farthest rank that must receive a
    chunk from the nearest rank that starts with it (hops of ``hop_distances``)."""
    dist = hop_distances(topology)
    return max((min(dist[h][r] for h in pre) for pre, post in zip(collective.pre, collective.post)
                for r in post - pre), default=0)


@dataclass(frozen=True)
class SwitchVars:
    """The switch literals of one encoding: ``reach`` by (chunk, switch, src, dst, step),
    ``enter`` by (chunk, switch, src, step), and ``port_loads``: the literals each (switch,
    rank, 'out' | 'in', step) port counts."""

    reach: dict
    enter: dict
    port_loads: dict

    def incoming(self) -> dict:
        """(chunk, dst, step) -> the reach literals that bring the chunk there in the step."""
        into: dict = {}
        for (c, _, _, b, s), lit in self.reach.items():
            into.setdefault((c, b, s), []).append(lit)
        return into


def encode(inst, dist, need, dual: bool) -> SwitchVars:
    """The switch literals and rules of ``inst`` (an ``SmtInstance`` whose ``has`` and ``send``
    are built; ``dist`` its hop distances from each chunk's holders, ``need`` the ranks each
    chunk must reach): see the module."""
    topo = inst.topology
    reach = {key: inst._var("y_%d_%s_%d_%d_%d" % key) for key in _reach_keys(inst, dist, need, dual)}
    by_entry: dict = {}
    for (c, w, a, b, s), lit in reach.items():
        by_entry.setdefault((c, w, a, s), []).append(lit)
        inst._clause(-lit, inst.has[(c, a, s - 1)])
        inst._clause(-lit, inst.has[(c, b, s)])
        if inst.options.forbid_redundant_sends:
            inst._clause(-lit, neg(inst.has[(c, b, s - 1)]))
    enter = {}
    for key, lits in by_entry.items():
        enter[key] = lits[0] if len(lits) == 1 else inst._var("z_%d_%s_%d_%d" % key)
        for lit in lits:
            inst._clause(-lit, enter[key])
        if not topo.switch(key[1]).multicast:
            inst._at_most(lits, 1)
    loads: dict = {}
    for (c, w, a, s), lit in enter.items():
        loads.setdefault((w, a, OUT, s), []).append(lit)
    for (c, w, a, b, s), lit in reach.items():
        loads.setdefault((w, b, IN, s), []).append(lit)
    if dual:
        _dual_rules(inst, enter, loads)
    return SwitchVars(reach, enter, loads)


def _reach_keys(inst, dist, need, dual: bool) -> list[tuple]:
    """(chunk, switch, src, dst, step) for every reach reachability allows: the src can hold the
    chunk by the step's start, the dst does not start with it, and (``prune_useless_relays``)
    the dst can still pass it on to a rank that needs it."""
    coll, S, hops = inst.collective, inst.steps, inst._hops
    prune = inst.options.prune_useless_relays
    keys = []
    for switch in taking_part(inst.topology, dual):
        pairs = [(a, b) for a in switch.ranks for b in switch.ranks if a != b]
        for c, (a, b), s in product(range(coll.chunks), pairs, range(1, S + 1)):
            if b in coll.pre[c] or dist[c][a] > s - 1:
                continue
            if prune and not any(hops[b][d] <= S - s for d in need[c]):
                continue
            keys.append((c, switch.name, a, b, s))
    return keys


def _dual_rules(inst, enter: dict, loads: dict) -> None:
    """The dual's extra rules (see the module): the src's in-port carries the chunk when it holds
    a partial in the original, and a src that enters a switch with c sends c nowhere else in
    that step."""
    sent = _sends_by_src(inst, enter)
    for (c, w, a, s), lit in enter.items():
        charge = _src_charge(inst, lit, c, a, s, sent)
        if charge is not None:
            loads.setdefault((w, a, IN, s), []).append(charge)
        for other in sent.get((c, a, s), []):
            if other != lit:
                inst._clause(-lit, -other)


def _sends_by_src(inst, enter: dict) -> dict:
    """(chunk, src, step) -> every literal that sends the chunk out of the src in the step
    (link sends and switch entries)."""
    sent: dict = {}
    for (c, a, _, s), lit in inst.send.items():
        sent.setdefault((c, a, s), []).append(lit)
    for (c, _, a, s), lit in enter.items():
        sent.setdefault((c, a, s), []).append(lit)
    return sent


def _src_charge(inst, lit: int, c: int, a: int, s: int, sent: dict):
    """The literal that puts chunk c on a's in-port in step s for the dual's entry ``lit``: the
    entry itself when a contributes in the original, else one implied by the entry and any send
    of c out of a in a later step; None when a never sends c later (it holds nothing then)."""
    if a in inst.collective.post[c]:
        return lit
    later = [other for t in range(s + 1, inst.steps + 1) for other in sent.get((c, a, t), [])]
    if not later:
        return None
    charge = inst._var("q_%d_%d_%d" % (c, a, s))
    for other in later:
        inst._clause(-lit, -other, charge)
    return charge


def group_ports(topology: Topology) -> dict[str, list[tuple[str, int, str]]]:
    """group name -> the (switch, rank, 'out' | 'in') ports that share it."""
    found: dict = {}
    for switch in topology.switches:
        for rank in switch.ranks:
            for direction, group in ((OUT, switch.out_group(rank)), (IN, switch.in_group(rank))):
                if group is not None:
                    found.setdefault(group, []).append((switch.name, rank, direction))
    return found


def decode(value, switch_vars: SwitchVars, step: int, written: set) -> list[SwitchSend]:
    """The step's entries in a model (``value(lit)``: its truth): one per (chunk, switch, src)
    with every dst it reaches whose (rank, chunk) nothing in ``written`` (the step's writes so
    far, updated here) has written."""
    dsts: dict = {}
    for (c, w, a, b, s), lit in sorted(switch_vars.reach.items()):
        if s == step and value(lit) and (b, c) not in written:
            written.add((b, c))
            dsts.setdefault((c, w, a), []).append(b)
    return [SwitchSend(c, w, (a,), tuple(found)) for (c, w, a), found in sorted(dsts.items())]
