"""Topology automorphisms and the chunk permutations they induce on a collective.

An automorphism maps ranks to ranks so that links (with their capacities and alphas) and
groups map onto links and groups of the same kind. It is a symmetry of a collective when it
maps every class of chunks (same pre, same post) onto a class of the same size; chunk i of a
class goes to chunk i of the image class. Solvers use these to tie symmetric chunks' routes.

>>> from synth.core.generators import ring
>>> from synth.core.collectives import allgather
>>> syms = collective_symmetries(ring(4), allgather(4))
>>> len(syms), syms[0].ranks
(4, (0, 1, 2, 3))
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import networkx as nx
from networkx.algorithms.isomorphism import DiGraphMatcher

from synth.core.collective import Collective
from synth.core.topology import Topology


@dataclass(frozen=True)
class Symmetry:
    """``ranks[r]`` is the image of rank r; ``chunks[c]`` the image of chunk c."""

    ranks: tuple[int, ...]
    chunks: tuple[int, ...]

    @property
    def is_identity(self) -> bool:
        return all(i == r for i, r in enumerate(self.ranks))


def schedule_invariant(schedule, symmetries) -> bool:
    """True when every symmetry maps who receives which chunk in each step onto the same step's
    receptions (senders may differ: a decoder breaks ties between equal senders)."""
    for sym in symmetries:
        for step in schedule.steps:
            received = {(send.chunk, send.dst) for send in step.sends}
            if any((sym.chunks[c], sym.ranks[r]) not in received for c, r in received):
                return False
    return True


def rotation_group(topology: Topology) -> list[tuple[int, ...]]:
    """The largest cyclic group of rank rotations r -> (r + k) mod n (per machine for
    multi-machine topologies, r -> its machine's next copy) that are automorphisms."""
    n = topology.ranks
    candidates = []
    for k in range(1, n):
        if n % k == 0 or k == 1:
            candidates.append(tuple((r + k) % n for r in range(n)))
    best: list[tuple[int, ...]] = []
    for perm in candidates:
        if not _is_automorphism(topology, perm):
            continue
        group = [tuple(range(n))]
        while True:
            nxt = tuple(perm[r] for r in group[-1])
            if nxt == group[0]:
                break
            group.append(nxt)
        if len(group) > len(best):
            best = group
    return best


def _link_label(link) -> tuple:
    """What a rank permutation must preserve on a link."""
    return (link.bandwidth, link.alpha, link.capacity, link.kind)


def _is_automorphism(topology: Topology, perm: tuple[int, ...]) -> bool:
    for link in topology.links:
        image = topology.link(perm[link.src], perm[link.dst])
        if image is None or _link_label(image) != _link_label(link):
            return False
    groups = {frozenset(g.links): (g.bandwidth, g.capacity) for g in topology.groups}
    return not groups or _preserves_groups(perm, groups)


def automorphisms(topology: Topology, limit: int = 64) -> list[tuple[int, ...]]:
    """Up to ``limit`` rank permutations that preserve links (bandwidth, alpha, capacity, kind)
    and groups (found once per topology and limit; a topology's reversal, which a reduction's
    dual runs on, has the same ones, and is given the same list)."""
    key = (_structure(topology), limit)
    found = _FOUND.get(key)
    if found is None:
        found = _FOUND[key] = _automorphisms(topology, limit)
        while len(_FOUND) > 64:
            _FOUND.popitem(last=False)
    else:
        _FOUND.move_to_end(key)
    return list(found)


_FOUND: OrderedDict[tuple, tuple[tuple[int, ...], ...]] = OrderedDict()  # least recently used first


def _structure(topology: Topology) -> frozenset:
    """What ``_automorphisms`` reads of a topology, and the same read of its reversal (a
    permutation preserves links and groups iff it preserves them reversed): links in their
    order with their labels, groups. Not the name. (The graph matcher lists the automorphisms
    of every library machine and generator in the same order for both: tests/bounds.)"""
    ways = []
    for flip in (False, True):
        links = tuple(((l.dst, l.src) if flip else (l.src, l.dst), _link_label(l)) for l in topology.links)
        groups = tuple((tuple((b, a) if flip else (a, b) for a, b in g.links), g.bandwidth, g.capacity)
                       for g in topology.groups)
        ways.append((topology.ranks, links, groups))
    return frozenset(ways)


def _automorphisms(topology: Topology, limit: int) -> tuple[tuple[int, ...], ...]:
    graph = nx.DiGraph()
    graph.add_nodes_from(range(topology.ranks))
    for link in topology.links:
        graph.add_edge(link.src, link.dst, kind=_link_label(link))
    groups = {frozenset(g.links): (g.bandwidth, g.capacity) for g in topology.groups}
    matcher = DiGraphMatcher(graph, graph, edge_match=lambda a, b: a["kind"] == b["kind"])
    found: list[tuple[int, ...]] = []
    for mapping in matcher.isomorphisms_iter():
        perm = tuple(mapping[r] for r in range(topology.ranks))
        if groups and not _preserves_groups(perm, groups):
            continue
        found.append(perm)
        if len(found) >= limit:
            break
    return tuple(found)


def _preserves_groups(perm: tuple[int, ...], groups: dict) -> bool:
    for links, kind in groups.items():
        image = frozenset((perm[a], perm[b]) for a, b in links)
        if groups.get(image) != kind:
            return False
    return True


def chunk_permutation(collective: Collective, perm: tuple[int, ...]) -> tuple[int, ...] | None:
    """The chunk permutation ``perm`` induces, or None when it does not preserve the collective."""
    classes: dict[tuple[frozenset, frozenset], list[int]] = {}
    for c, key in enumerate(zip(collective.pre, collective.post)):
        classes.setdefault(key, []).append(c)
    image = [0] * collective.chunks
    for (pre, post), members in classes.items():
        target = classes.get((frozenset(perm[r] for r in pre), frozenset(perm[r] for r in post)))
        if target is None or len(target) != len(members):
            return None
        for c, d in zip(members, target):
            image[c] = d
    return tuple(image)


def collective_symmetries(topology: Topology, collective: Collective, limit: int = 64) -> list[Symmetry]:
    """Automorphisms of the topology that also preserve the collective (identity first).

    Uses the largest cyclic rotation group when there is one (its orbits are big and even),
    otherwise up to ``limit`` automorphisms found by graph matching."""
    out = []
    perms = rotation_group(topology)
    if len(perms) <= 2:
        perms = automorphisms(topology, limit)
    for perm in perms:
        chunks = chunk_permutation(collective, perm)
        if chunks is not None:
            out.append(Symmetry(perm, chunks))
    out.sort(key=lambda s: not s.is_identity)
    return out


AUTOMORPHISM_LIMIT = 1024  # beyond this many (NVSwitch boxes: n!) the search keeps to rotations


def search_symmetries(topology: Topology, collective: Collective) -> list[Symmetry]:
    """The symmetries a *restricted* search ties variables under (identity first).

    A group acting freely on the ranks (no element but the identity fixes a rank) restricts
    least: every rank's routes stay free, only their images are tied. The full group of a
    torus or hypercube fixes ranks (a reflection through rank 0), which forces symmetric
    routes out of rank 0 and makes tight budgets unsatisfiable under the restriction
    (torus:4x4 alltoall, S=4, R=8: the 16 translations find it in 2 s; the full group of
    384 finds nothing in 120 s). So: the largest cyclic rotation group when it is regular,
    else the largest freely acting subgroup found among the automorphisms, else (rooted
    collectives: every symmetry fixes the root) ``collective_symmetries``.

    >>> from synth.core.generators import torus
    >>> from synth.core.collectives import alltoall
    >>> len(search_symmetries(torus((4, 4)), alltoall(16)))
    16
    """
    n = topology.ranks
    rotations = rotation_group(topology)
    if len(rotations) < n:
        perms = automorphisms(topology, AUTOMORPHISM_LIMIT)
        if len(perms) < AUTOMORPHISM_LIMIT:
            kept = [p for p in perms if chunk_permutation(collective, p) is not None]
            free = free_subgroup(kept, n)
            if len(free) > max(1, len(rotations)):
                return _with_chunks(collective, free)
    return collective_symmetries(topology, collective)


def _with_chunks(collective: Collective, perms: list[tuple[int, ...]]) -> list[Symmetry]:
    out = [Symmetry(p, chunk_permutation(collective, p)) for p in perms]  # type: ignore[arg-type]
    out.sort(key=lambda s: not s.is_identity)
    return out


def free_subgroup(perms: list[tuple[int, ...]], n: int, seeds: int = 24) -> list[tuple[int, ...]]:
    """A large subgroup of the group ``perms`` (closed under composition) acting freely on
    range(n): greedy growth from each of up to ``seeds`` elements whose cycles all have one
    length (largest order first), stopping at a regular subgroup (order n). Identity first.

    >>> rot = [tuple((r + k) % 4 for r in range(4)) for k in range(4)]
    >>> flips = [tuple((k - r) % 4 for r in range(4)) for k in range(4)]
    >>> sorted(free_subgroup(rot + flips, 4)) == sorted(rot)
    True
    """
    identity = tuple(range(n))
    moving = [p for p in perms if _cycles_equal(p) and p != identity]  # its powers are free too
    moving.sort(key=lambda p: (-_order(p), p))
    best = [identity]
    for seed in moving[:seeds]:
        group = _closure([seed], n)
        if group is None:
            continue
        for other in moving:
            if len(group) == n:
                break
            if other in group:
                continue
            if any(_has_fixed_point(_compose(other, g)) for g in group):
                continue
            grown = _closure(list(group) + [other], n)
            if grown is not None:
                group = grown
        if len(group) > len(best):
            best = sorted(group, key=lambda p: p != identity)
        if len(best) == n:
            break
    return best


def _cycles_equal(p: tuple[int, ...]) -> bool:
    """All cycles of p have one length (so no power of p but the identity fixes a point)."""
    lengths, seen = set(), set()
    for start in range(len(p)):
        if start in seen:
            continue
        r, k = start, 0
        while r not in seen:
            seen.add(r)
            r, k = p[r], k + 1
        lengths.add(k)
    return len(lengths) == 1


def _compose(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(a[b[r]] for r in range(len(a)))


def _has_fixed_point(p: tuple[int, ...]) -> bool:
    return any(p[r] == r for r in range(len(p)))


def _order(p: tuple[int, ...]) -> int:
    q, k = p, 1
    identity = tuple(range(len(p)))
    while q != identity:
        q, k = _compose(p, q), k + 1
    return k


def _closure(generators: list[tuple[int, ...]], n: int) -> set[tuple[int, ...]] | None:
    """The group the generators make, or None once it has more than n elements or an element
    other than the identity with a fixed point (it would not act freely)."""
    identity = tuple(range(n))
    group = {identity}
    frontier = [identity]
    while frontier:
        nxt = []
        for g in frontier:
            for gen in generators:
                h = _compose(gen, g)
                if h in group:
                    continue
                if _has_fixed_point(h) or len(group) >= n:
                    return None
                group.add(h)
                nxt.append(h)
        frontier = nxt
    return group


def interchangeable_chunks(collective: Collective) -> list[list[int]]:
    """Classes of chunks with identical pre and post (any schedule may relabel them)."""
    classes: dict[tuple[frozenset, frozenset], list[int]] = {}
    for c, key in enumerate(zip(collective.pre, collective.post)):
        classes.setdefault(key, []).append(c)
    return [members for members in classes.values() if len(members) > 1]
