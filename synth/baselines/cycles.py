"""Hamiltonian cycles for ring baselines: wide links first, few crossings between machines.

``find_ring`` looks for a cycle whose hops are physical links, in both directions when it can
(a bidirectional ring), maximizing the narrowest link, then the fewest machine crossings, then
the total bandwidth. Multi-machine sets are chained machine by machine (a Hamiltonian path
inside each machine between ranks with fabric links), so K machines cost exactly K crossings;
otherwise a depth-first search with pruning and an expansion budget is used. Without a cycle
the ring is *routed*: a spanning order whose hops may take several links.

>>> from synth.core.generators import line, torus
>>> ring = find_ring(torus((2, 3)))
>>> ring.direct, ring.bidirectional, ring.order
(True, True, (0, 1, 2, 5, 4, 3))
>>> find_ring(line(4)).direct
False
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from synth.core.topology import Topology

BUDGET = 20_000  # node expansions per search (per bandwidth threshold)
PATH_BUDGET = 2_000  # expansions per intra-machine path search

Weights = Mapping[int, Mapping[int, float]]


@dataclass(frozen=True)
class Ring:
    """A rank order; hop i is ``order[i] -> order[i+1]`` (and back when bidirectional)."""

    order: tuple[int, ...]
    bidirectional: bool
    direct: bool  # every hop is a physical link (else hops are routed over shortest paths)
    crossings: int  # hops between machines

    def reversed(self) -> "Ring":
        """The same ring run the other way round (a ring of ``topology.reversed()``)."""
        return Ring((self.order[0],) + self.order[:0:-1], self.bidirectional, self.direct, self.crossings)


def find_ring(topology: Topology, ranks: Iterable[int] | None = None, budget: int = BUDGET) -> Ring:
    """The best ring over ``ranks`` (default: all ranks) of ``topology``; always returns one."""
    nodes = tuple(sorted(set(range(topology.ranks) if ranks is None else ranks)))
    mof = topology.machine_of
    if len(nodes) == 1:
        return Ring(nodes, False, True, 0)
    for both in (True, False):
        weights = _weights(topology, nodes, both)
        order = None
        if len({mof[v] for v in nodes}) > 1:
            order = _machine_cycle(nodes, weights, mof, budget)
        if order is None:
            order = _best(weights, nodes[0], None, mof, budget)
        if order is not None:
            return Ring(order, both, True, crossings(order, mof))
    order = _spanning_order(topology, nodes)
    symmetric = all(topology.has_link(l.dst, l.src) for l in topology.links)
    return Ring(order, symmetric and len(nodes) > 1, False, crossings(order, mof))


def crossings(order: tuple[int, ...], machine_of: tuple[int, ...]) -> int:
    """How many hops of the cycle ``order`` join two different machines."""
    if len(order) < 2:
        return 0
    return sum(machine_of[a] != machine_of[b] for a, b in zip(order, order[1:] + order[:1]))


def _weights(topology: Topology, nodes: tuple[int, ...], both: bool) -> dict[int, dict[int, float]]:
    """Usable hops among ``nodes``: bandwidth of a->b (min of both directions when ``both``)."""
    inside = set(nodes)
    out: dict[int, dict[int, float]] = {v: {} for v in nodes}
    for v in nodes:
        for link in topology.out_links[v]:
            if link.dst not in inside:
                continue
            if both:
                back = topology.link(link.dst, v)
                if back is None:
                    continue
                out[v][link.dst] = min(link.bandwidth, back.bandwidth)
            else:
                out[v][link.dst] = link.bandwidth
    return out


def _best(weights: Weights, start: int, goal: int | None, mof, budget: int) -> tuple[int, ...] | None:
    """Cycle (goal None) or start->goal path over all nodes, maximizing the narrowest hop."""
    for threshold in sorted({w for out in weights.values() for w in out.values()}, reverse=True):
        sub = {a: {b: w for b, w in out.items() if w >= threshold} for a, out in weights.items()}
        if _hopeless(sub, start, goal):
            continue
        found = _search(sub, start, goal, mof, budget)
        if found is not None:
            return found
    return None


def _hopeless(succ: Weights, start: int, goal: int | None) -> bool:
    """Cheap refutation: some node cannot be left or entered (a path's start needs no way in,
    its goal no way out)."""
    if goal is not None and start == goal:
        return len(succ) > 1
    entered = {b for out in succ.values() for b in out}
    for v, out in succ.items():
        if not out and v != goal:
            return True
        if v not in entered and (goal is None or v != start):
            return True
    return False


def _search(succ: Weights, start: int, goal: int | None, mof, budget: int) -> tuple[int, ...] | None:
    """Depth-first search for the best Hamiltonian cycle/path; stops at the budget or an ideal."""
    n = len(succ)
    closed = goal is None
    pred: dict[int, set[int]] = {v: set() for v in succ}
    for a, out in succ.items():
        for b in out:
            pred[b].add(a)
    top = max(w for out in succ.values() for w in out.values())
    machines = len({mof[v] for v in succ})
    least = (machines if machines > 1 else 0) if closed else machines - 1
    ideal = (-least, (n if closed else n - 1) * top)
    path, seen = [start], set()
    # successors and predecessors not yet on the path, counted as it changes
    unseen = {v: len(out) for v, out in succ.items()}
    unseen_in = {v: len(pred[v]) for v in succ}

    def visit(v: int, step: int) -> None:
        if step > 0:
            seen.add(v)
        else:
            seen.discard(v)
        for p in pred[v]:
            unseen[p] -= step
        for b in succ[v]:
            unseen_in[b] -= step

    def options(v: int):
        free = [b for b in succ[v] if b not in seen]
        free.sort(key=lambda b: (mof[b] != mof[v], -succ[v][b], unseen[b], b))
        return iter(free)

    def dead(prev: int, nxt: int) -> bool:
        for u in succ[prev]:  # prev's way out is taken: u needs another way in
            if u not in seen and not unseen_in[u] and nxt not in pred[u]:
                return True
        for u in pred[nxt]:  # nxt's way in is taken: u needs another way out
            if u not in seen and u != goal and not unseen[u] and not (closed and start in succ[u]):
                return True
        return closed and not unseen_in[start] and nxt not in pred[start]

    best, best_key, spent = None, None, 0
    visit(start, 1)
    stack = [options(start)]
    while stack:
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            visit(path.pop(), -1)
            continue
        if nxt in seen or (nxt == goal and len(path) < n - 1):
            continue
        spent += 1 + len(succ[nxt]) // 8  # dense graphs cost more per expansion
        if spent > budget:
            break
        path.append(nxt)
        visit(nxt, 1)
        if len(path) == n:
            if (closed and start in succ[nxt]) or (not closed and nxt == goal):
                key = _score(path, succ, mof, closed)
                if best_key is None or key > best_key:
                    best, best_key = tuple(path), key
                if key >= ideal:
                    break
        elif not dead(path[-2], nxt):
            stack.append(options(nxt))
            continue
        path.pop()
        visit(nxt, -1)
    return best


def _score(path: list[int], succ: Weights, mof, closed: bool) -> tuple[int, float]:
    hops = list(zip(path, path[1:])) + ([(path[-1], path[0])] if closed else [])
    return (-sum(mof[a] != mof[b] for a, b in hops), sum(succ[a][b] for a, b in hops))


def _machine_cycle(nodes: tuple[int, ...], weights: Weights, mof, budget: int) -> tuple[int, ...] | None:
    """Chain one Hamiltonian path per machine (entry -> exit), machines in index order."""
    groups: dict[int, list[int]] = {}
    for v in nodes:
        groups.setdefault(mof[v], []).append(v)
    ms = sorted(groups)
    local = {v: i for m in ms for i, v in enumerate(groups[m])}
    memo: dict[tuple[int, int], tuple[int, ...] | None] = {}
    spent = [0]

    def inner(entry: int, exit_: int) -> tuple[int, ...] | None:
        if (entry, exit_) not in memo:
            members = groups[mof[entry]]
            if len(members) == 1:
                memo[(entry, exit_)] = (entry,) if entry == exit_ else None
            elif entry == exit_:
                memo[(entry, exit_)] = None
            else:
                sub = {a: {b: w for b, w in weights[a].items() if mof[b] == mof[a]} for a in members}
                memo[(entry, exit_)] = _best(sub, entry, exit_, mof, PATH_BUDGET)
        return memo[(entry, exit_)]

    def width(path: tuple[int, ...]) -> tuple[float, float]:
        hops = [weights[a][b] for a, b in zip(path, path[1:])]
        return (min(hops, default=float("inf")), sum(hops))

    def chain(i: int, entry: int, first: int, acc: tuple[int, ...]) -> tuple[int, ...] | None:
        spent[0] += 1
        if spent[0] > budget:
            return None
        target = first if i == len(ms) - 1 else None
        nxt_m = ms[(i + 1) % len(ms)]
        exits = [x for x in groups[ms[i]] if any(mof[e] == nxt_m for e in weights[x])]
        paths = [p for p in (inner(entry, x) for x in exits) if p is not None]
        for path in sorted(paths, key=lambda p: tuple(-v for v in width(p))):
            x = path[-1]
            if target is not None:
                if target in weights[x]:
                    return acc + path
                continue
            entries = [e for e in weights[x] if mof[e] == nxt_m]
            entries.sort(key=lambda e: (local[e] != local[x], -weights[x][e], e))
            for e in entries:
                found = chain(i + 1, e, first, acc + path)
                if found is not None:
                    return found
        return None

    prev_m = ms[-1]
    for e0 in groups[ms[0]]:
        if any(mof[p] == prev_m and e0 in weights[p] for p in groups[prev_m]):
            found = chain(0, e0, e0, ())
            if found is not None:
                return found
    return None


def _spanning_order(topology: Topology, nodes: tuple[int, ...]) -> tuple[int, ...]:
    """Depth-first preorder over links among ``nodes``, widest first (for a routed ring)."""
    inside = set(nodes)
    order: list[int] = []
    seen: set[int] = set()
    for root in nodes:
        if root in seen:
            continue
        stack = [root]
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            order.append(v)
            nbrs = [l for l in topology.out_links[v] if l.dst in inside and l.dst not in seen]
            nbrs.sort(key=lambda l: (l.bandwidth, -l.dst))
            stack.extend(l.dst for l in nbrs)
    return tuple(order)
