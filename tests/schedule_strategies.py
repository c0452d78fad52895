"""Hypothesis strategies: random topologies and random *valid* schedules on them, plus mutations.

Valid schedules are built constructively (flooding for copies, reduction trees for combining
collectives), never by asking the verifier, so the property tests can catch it.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import replace

from hypothesis import strategies as st

from synth.core import collectives as colls
from synth.core.schedule import Schedule, Send, Step, rounds_needed
from synth.core.topology import LINK_KINDS, Group, Link, Topology


@st.composite
def topologies(draw, min_ranks: int = 2, max_ranks: int = 6) -> Topology:
    """A strongly connected random digraph (a Hamiltonian cycle plus extra links), maybe groups,
    each link of a random kind or none."""
    n = draw(st.integers(min_ranks, max_ranks))
    order = draw(st.permutations(list(range(n))))
    edges = {(order[i], order[(i + 1) % n]) for i in range(n)}
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n))
    edges |= {(a, b) for a, b in extra if a != b}
    edges = sorted(edges)
    widths = draw(st.lists(st.sampled_from([25.0, 50.0]), min_size=len(edges), max_size=len(edges)))
    links = tuple(Link(a, b, w, 0.5) for (a, b), w in zip(edges, widths))
    groups = ()
    if draw(st.booleans()):
        hub = draw(st.integers(0, n - 1))
        outs = tuple((a, b) for a, b in edges if a == hub)
        if len(outs) >= 2:
            groups = (Group(f"rank{hub}-out", outs, 25.0 * draw(st.integers(1, 2))),)
    kinds = draw(st.lists(st.sampled_from([None, *LINK_KINDS]), min_size=len(links), max_size=len(links)))
    links = tuple(replace(link, kind=kind) for link, kind in zip(links, kinds))
    return Topology(f"random{n}", n, links, groups)


def _collective(draw, n: int, combining: bool):
    if combining:
        name = draw(st.sampled_from(["reduce_scatter", "reduce", "allreduce"]))
    else:
        name = draw(st.sampled_from(["allgather", "broadcast", "alltoall", "gather", "scatter"]))
    chunks = draw(st.integers(1, 2))
    root = draw(st.integers(0, n - 1))
    return colls.make_collective(name, n, root=root if name in ("broadcast", "reduce", "gather", "scatter") else None,
                                 chunks=chunks)


def _next_hop_tree(topo: Topology, target: int, rng: random.Random) -> dict[int, int]:
    """A random BFS in-tree to ``target``: parent[v] is v's next hop towards target."""
    parent: dict[int, int] = {}
    seen = {target}
    queue = deque([target])
    while queue:
        node = queue.popleft()
        preds = [l.src for l in topo.in_links[node] if l.src not in seen]
        rng.shuffle(preds)
        for p in preds:
            seen.add(p)
            parent[p] = node
            queue.append(p)
    return parent


def _flood(topo: Topology, coll, rng: random.Random) -> list[list[Send]]:
    """Copies: each step, each (chunk, rank) still needed pulls from a holder neighbour."""
    held = [set(p) for p in coll.pre]
    steps: list[list[Send]] = []
    while any(not post <= h for post, h in zip(coll.post, held)):
        sends: list[Send] = []
        for c, post in enumerate(coll.post):
            for target in sorted(post - held[c]):
                tree = _next_hop_tree(topo.reversed(), rng.choice(sorted(held[c])), rng)
                # tree on reversed topology: parent = previous hop from the holder; walk forward
                path = [target]
                while path[-1] not in held[c]:
                    path.append(tree[path[-1]])
                hop_src, hop_dst = path[-1], path[-2]
                if all(s.dst != hop_dst or s.chunk != c for s in sends):
                    sends.append(Send(c, hop_src, hop_dst))
        # random extra useless-but-legal copies
        for link in topo.links:
            for c in range(coll.chunks):
                if rng.random() < 0.05 and link.src in held[c] and all(
                    s.dst != link.dst or s.chunk != c for s in sends
                ):
                    sends.append(Send(c, link.src, link.dst))
        for s in sends:
            held[s.chunk].add(s.dst)
        steps.append(sends)
    return steps


def _reduce_trees(topo: Topology, coll, rng: random.Random) -> list[list[Send]]:
    """Reduce each chunk up a random in-tree to one owner, then copy out (allreduce)."""
    timeline: dict[int, list[Send]] = {}
    for c in range(coll.chunks):
        owner = rng.choice(sorted(coll.post[c]))
        parent = _next_hop_tree(topo, owner, rng)
        children: dict[int, list[int]] = {}
        for v, p in parent.items():
            children.setdefault(p, []).append(v)

        def height(v: int) -> int:
            return 1 + max((height(k) for k in children.get(v, [])), default=-1)

        when = {v: height(v) + rng.randint(0, 1) for v in parent}
        # a parent must send strictly after all its children landed
        for v in sorted(parent, key=height):
            for k in children.get(v, []):
                when[v] = max(when[v], when[k] + 1)
        for v, p in parent.items():
            timeline.setdefault(when[v], []).append(Send(c, v, p, "reduce"))
        done = max(when.values(), default=-1) + 1
        if len(coll.post[c]) > 1:
            out_parent = _next_hop_tree(topo.reversed(), owner, rng)
            depth: dict[int, int] = {owner: 0}

            def d(v: int) -> int:
                if v not in depth:
                    depth[v] = d(out_parent[v]) + 1
                return depth[v]

            for v, p in out_parent.items():
                timeline.setdefault(done + d(v) - 1, []).append(Send(c, p, v, "copy"))
    return [timeline.get(t, []) for t in range(max(timeline, default=-1) + 1)]


@st.composite
def valid_schedules(draw, combining: bool | None = None) -> Schedule:
    topo = draw(topologies())
    if combining is None:
        combining = draw(st.booleans())
    coll = _collective(draw, topo.ranks, combining)
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    raw = _reduce_trees(topo, coll, rng) if combining else _flood(topo, coll, rng)
    steps = []
    for sends in raw:
        need = rounds_needed(topo, sends)
        extra = draw(st.integers(0, 1))
        steps.append(Step(tuple(sorted(sends)), None if need is None else need + extra))
    return Schedule(topo, coll, tuple(steps))


MUTATIONS = ("drop", "retarget", "earlier", "duplicate_reduce", "exceed_capacity", "resource")


def mutate(schedule: Schedule, kind: str, rng: random.Random) -> Schedule:
    """Apply one mutation of ``kind``; the result may or may not still be valid."""
    steps = [list(step.sends) for step in schedule.steps]
    rounds = [step.rounds for step in schedule.steps]
    where = [(i, j) for i, sends in enumerate(steps) for j in range(len(sends))]
    if not where:
        return schedule
    i, j = rng.choice(where)
    send = steps[i][j]
    n = schedule.topology.ranks
    if kind == "drop":
        del steps[i][j]
    elif kind == "retarget":
        steps[i][j] = Send(send.chunk, send.src, rng.choice([r for r in range(n) if r != send.src] or [0]), send.op)
    elif kind == "earlier":
        if i == 0:
            return schedule
        del steps[i][j]
        steps[rng.randrange(i)].append(send)
    elif kind == "duplicate_reduce":
        reduces = [(a, b) for a, b in where if steps[a][b].op == "reduce"]
        if not reduces:
            return schedule
        a, b = rng.choice(reduces)
        target = rng.choice([a, min(a + 1, len(steps) - 1)])
        steps[target].append(steps[a][b])
    elif kind == "exceed_capacity":
        if rounds[i] is None or rounds[i] <= 1:
            steps[i].append(send)
        else:
            rounds[i] -= 1
    elif kind == "resource":
        rounds[i] = None if rng.random() < 0.2 else rng.choice([0, 1, 2])
    return Schedule(
        schedule.topology,
        schedule.collective,
        tuple(Step(tuple(s), r) for s, r in zip(steps, rounds)),
    )
