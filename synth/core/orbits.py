"""Schedules invariant under a group of rank rotations, held as one representative per orbit.

A ``Quotient`` ties a topology, a collective and a group G of rank permutations that are
automorphisms of the topology (links and groups map onto alike ones), preserve the collective
(each permutation induces a chunk permutation, ``synth.core.symmetry.chunk_permutation``) and
act freely on ranks and chunks (no element but the identity fixes any rank or chunk). A
schedule invariant under G is then fixed by the sends of one chunk per chunk orbit, the
*representatives*: every other send is the image g(s) = (g(chunk), g(src), g(dst)) of one
representative send s under one element g, and

- the load of link l in a step is the number of representative sends on links of l's orbit
  (exactly one image of each lands on l: G acts freely on links);
- the load of a group is the sum of its links' loads, the same for every group of an orbit;
- a step's slowest resource is therefore found among the orbits' representatives.

So the router solves, merges and costs the representative schedule (``rep_collective``: the
representative chunks only, renumbered, with the full ``buffer_chunks`` so a chunk keeps its
bytes) and ``expand`` writes the full schedule once, at the end, for the verifier. Work and
memory grow with the number of orbits, not with the ranks.

>>> from synth.core.library import resolve_topology
>>> from synth.core.collectives import allgather
>>> topo = resolve_topology("ring:4")
>>> q = Quotient.of(topo, allgather(4, 2), [tuple((r + 1) % 4 for r in range(4))])
>>> q.order, q.rep_collective.chunks, q.link_orbits
(4, 2, 2)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from synth.core.collective import Collective
from synth.core.errors import InputError
from synth.core.schedule import Schedule, Send, Step
from synth.core.symmetry import _is_automorphism, chunk_permutation
from synth.core.topology import Topology

MAX_ORDER = 1 << 16  # elements a group may have before the closure refuses (memory: order x ranks)


@dataclass(frozen=True, eq=False)
class Quotient:
    """See the module docstring; build one with ``Quotient.of``."""

    topology: Topology
    collective: Collective
    ranks: np.ndarray        # [order, n]: ranks[e, r] is the image of rank r under element e (0: identity)
    chunks: np.ndarray       # [order, C]: the induced chunk permutations
    reps: np.ndarray         # [R]: the representative chunk of each orbit (its smallest member)
    link_orbit: np.ndarray   # [L]: orbit number of each link (orbits numbered by first link)
    orbit_link: np.ndarray   # [O]: a link of each orbit (its first)
    resources: "Resources"
    generators: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of(cls, topology: Topology, collective: Collective, generators: Sequence[Sequence[int]],
           chunk_generators: Sequence[Sequence[int]] | None = None) -> "Quotient":
        """The quotient by the group the rank permutations ``generators`` generate.

        ``chunk_generators`` gives each generator's chunk permutation where the collective's own
        classes do not fix it (allreduce as reduce_scatter then allgather: chunk c is the one
        reduced at its owner); by default ``chunk_permutation`` induces it. InputError when a
        generator is not an automorphism, does not preserve the collective, or some element
        fixes a rank or a chunk.
        """
        n = topology.ranks
        if collective.ranks != n:
            raise InputError(f"quotient: the collective has {collective.ranks} ranks, {topology.name} {n}")
        rank_gens, chunk_gens = [], []
        for i, perm in enumerate(generators):
            perm = tuple(int(r) for r in perm)
            if sorted(perm) != list(range(n)):
                raise InputError(f"quotient: generator {i} is not a permutation of the {n} ranks")
            if not _is_automorphism(topology, perm):
                raise InputError(f"quotient: generator {i} is not an automorphism of {topology.name}")
            chunks = chunk_permutation(collective, perm) if chunk_generators is None else tuple(chunk_generators[i])
            if chunks is None:
                raise InputError(f"quotient: generator {i} does not preserve the {collective.name} collective")
            rank_gens.append(np.array(perm, dtype=np.int32))
            chunk_gens.append(np.array(chunks, dtype=np.int32))
        if chunk_generators is not None:
            _check_chunks_preserved(collective, rank_gens, chunk_gens)
        ranks, chunks = _closure(rank_gens, chunk_gens, n, collective.chunks)
        moved_rank = (ranks[1:] != np.arange(n)).all(axis=1)
        moved_chunk = (chunks[1:] != np.arange(collective.chunks)).all(axis=1)
        if not moved_rank.all() or not moved_chunk.all():
            raise InputError("quotient: some rotation fixes a rank or a chunk (the group must act freely)")
        reps = np.unique(chunks.min(axis=0))
        link_orbit, orbit_link, link_id = _link_orbits(topology, ranks)
        resources = Resources.of(topology, link_orbit, orbit_link, link_id)
        return cls(topology, collective, ranks, chunks, reps, link_orbit, orbit_link, resources,
                   tuple(tuple(int(r) for r in g) for g in rank_gens))

    @property
    def order(self) -> int:
        return int(self.ranks.shape[0])

    @property
    def link_orbits(self) -> int:
        return int(self.orbit_link.shape[0])

    @property
    def rep_collective(self) -> Collective:
        """The collective of the representative chunks, renumbered 0..R-1 in ``reps`` order."""
        coll = self.collective
        return replace(coll, pre=tuple(coll.pre[int(c)] for c in self.reps),
                       post=tuple(coll.post[int(c)] for c in self.reps))

    def expand(self, rep: Schedule, collective: Collective | None = None) -> Schedule:
        """The full schedule whose representative part is ``rep`` (chunks numbered as in
        ``rep_collective``): in every step, each representative send followed by its images in
        element order, so every link and group sees its sends in the same order as every other
        of its orbit (the event simulation stays symmetric)."""
        coll = collective or self.collective
        order = self.order
        steps = []
        for step in rep.steps:
            if not step.sends:
                steps.append(step)
                continue
            chunk = self.reps[np.fromiter((s.chunk for s in step.sends), dtype=np.int64, count=len(step.sends))]
            src = np.fromiter((s.src for s in step.sends), dtype=np.int64, count=len(step.sends))
            dst = np.fromiter((s.dst for s in step.sends), dtype=np.int64, count=len(step.sends))
            ops = [s.op for s in step.sends]
            full_chunk = self.chunks[:, chunk].T.ravel().tolist()  # rep-major: [send, element]
            full_src = self.ranks[:, src].T.ravel().tolist()
            full_dst = self.ranks[:, dst].T.ravel().tolist()
            full_ops = [op for op in ops for _ in range(order)]
            steps.append(Step(tuple(map(Send, full_chunk, full_src, full_dst, full_ops)), step.rounds))
        return Schedule(self.topology, coll, tuple(steps), dict(rep.meta))

    def rep_schedule(self, full: Schedule) -> Schedule:
        """The representative part of a G-invariant ``full`` schedule (``expand``'s inverse)."""
        number = {int(c): i for i, c in enumerate(self.reps)}
        steps = tuple(Step(tuple(Send(number[s.chunk], s.src, s.dst, s.op) for s in step.sends if s.chunk in number),
                           step.rounds) for step in full.steps)
        return Schedule(self.topology, self.rep_collective, steps, dict(full.meta))

    def rounds_needed(self, sends: Sequence[Send]) -> int | None:
        """Rounds a step of these representative sends needs in the full schedule."""
        topo = self.topology
        if not topo.rounds_apply:
            return None
        used, counts = self.loads(self.link_indices(sends))
        if not used.size:
            return 1
        return max(1, int(np.ceil((counts / self.resources.capacity[used]).max() - 1e-9)))

    def loads(self, link_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(resources, chunks on each) that representative sends on links ``link_index`` put on
        every link and group of the full schedule (one per resource: they load alike)."""
        counts = Counter(self.link_orbit[link_index].tolist())
        total: Counter = Counter()
        for o, k in counts.items():
            for res, mult in self.resources.of_orbit[o]:
                total[res] += k * mult
        keys = np.array(sorted(total), dtype=np.int64)
        return keys, np.array([total[k] for k in keys.tolist()], dtype=float)

    def link_indices(self, sends: Sequence[Send]) -> np.ndarray:
        """Link index of every send (InputError for a send on no link)."""
        n = self.topology.ranks
        keys = np.fromiter((s.src * n + s.dst for s in sends), dtype=np.int64, count=len(sends))
        found = self.resources.link_id[keys] if len(keys) else keys
        if (found < 0).any():
            bad = sends[int(np.flatnonzero(found < 0)[0])]
            raise InputError(f"{bad.src}->{bad.dst} is not a link of {self.topology.name}")
        return found


@dataclass(frozen=True, eq=False)
class Resources:
    """The distinct resources of a quotient: one per link orbit, then one per class of groups
    with the same loads (groups of one orbit always load alike; classes are found by their
    rows, so no group image is ever computed).

    ``of_orbit[o]``: (resource, multiplicity) pairs a representative send on a link of orbit o
    loads; ``alpha``/``bandwidth``/``kind``/``capacity`` per resource (groups: alpha 0, the kind
    their links share, else None).
    """

    link_id: np.ndarray      # [n*n]: link index of src*n+dst, -1 where none
    orbit_count: int
    of_orbit: tuple[tuple[tuple[int, int], ...], ...]
    alpha: np.ndarray
    bandwidth: np.ndarray
    capacity: np.ndarray     # chunks per round (nan where the topology has no whole capacities)
    kind: tuple[str | None, ...]
    is_group: np.ndarray

    @classmethod
    def of(cls, topology: Topology, link_orbit: np.ndarray, orbit_link: np.ndarray,
           link_id: np.ndarray) -> "Resources":
        n, links = topology.ranks, topology.links
        orbits = len(orbit_link)
        whole = topology.rounds_apply
        alpha = [links[int(i)].alpha for i in orbit_link]
        bandwidth = [links[int(i)].bandwidth for i in orbit_link]
        capacity = [topology.link_capacity(links[int(i)]) if whole else np.nan for i in orbit_link]
        kind = [links[int(i)].kind for i in orbit_link]
        of_orbit: list[dict[int, int]] = [{o: 1} for o in range(orbits)]
        classes: dict[tuple, int] = {}
        for group in topology.groups:
            keys = np.array([a * n + b for a, b in group.links], dtype=np.int64)
            member = link_id[keys]
            member = member[member >= 0]
            if not member.size:
                continue
            present, counts = np.unique(link_orbit[member], return_counts=True)
            signature = (present.tobytes(), counts.tobytes(), group.bandwidth,
                         topology.group_capacity(group) if whole else None)
            number = classes.get(signature)
            if number is None:
                number = classes[signature] = orbits + len(classes)
                alpha.append(0.0)
                bandwidth.append(group.bandwidth)
                capacity.append(topology.group_capacity(group) if whole else np.nan)
                kind.append(topology.group_kind(group))
                for o, k in zip(present.tolist(), counts.tolist()):
                    of_orbit[o][number] = int(k)
        return cls(link_id, orbits, tuple(tuple(sorted(d.items())) for d in of_orbit),
                   np.array(alpha, dtype=float), np.array(bandwidth, dtype=float),
                   np.array(capacity, dtype=float), tuple(kind),
                   np.arange(len(alpha)) >= orbits)

    @property
    def count(self) -> int:
        return len(self.alpha)

    @property
    def max_multiplicity(self) -> int:
        """The most links of one orbit any group holds (1: every group's load is a plain sum of
        distinct orbits' loads; more: some element maps a group onto itself)."""
        return max((k for row in self.of_orbit for r, k in row if r >= self.orbit_count), default=1)

    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ptr, resource, multiplicity) over link orbits, as arrays."""
        sizes = np.array([len(r) for r in self.of_orbit], dtype=np.int64)
        ptr = np.concatenate(([0], np.cumsum(sizes)))
        flat = [pair for row in self.of_orbit for pair in row]
        res = np.array([p[0] for p in flat], dtype=np.int64)
        mult = np.array([p[1] for p in flat], dtype=np.float64)
        return ptr, res, mult


def _closure(rank_gens: list[np.ndarray], chunk_gens: list[np.ndarray], n: int,
             c: int) -> tuple[np.ndarray, np.ndarray]:
    """Every element of the group the generators generate (breadth first; identity first)."""
    identity = np.arange(n, dtype=np.int32)
    ranks = [identity]
    chunks = [np.arange(c, dtype=np.int32)]
    seen = {identity.tobytes(): 0}
    i = 0
    while i < len(ranks):
        for rg, cg in zip(rank_gens, chunk_gens):
            image = rg[ranks[i]]
            key = image.tobytes()
            if key not in seen:
                if len(ranks) >= MAX_ORDER:
                    raise InputError(f"quotient: the group has more than {MAX_ORDER} elements")
                seen[key] = len(ranks)
                ranks.append(image)
                chunks.append(cg[chunks[i]])
        i += 1
    return np.stack(ranks), np.stack(chunks)


def _check_chunks_preserved(collective: Collective, rank_gens: list[np.ndarray], chunk_gens: list[np.ndarray]) -> None:
    """Given chunk permutations must map each chunk's pre and post onto its image's (checked per
    generator: the group's other elements are their products)."""
    for perm, image in zip(rank_gens, chunk_gens):
        for c, (pre, post) in enumerate(zip(collective.pre, collective.post)):
            d = int(image[c])
            if frozenset(int(perm[r]) for r in pre) != collective.pre[d] or \
                    frozenset(int(perm[r]) for r in post) != collective.post[d]:
                raise InputError(f"quotient: the chunk permutation maps chunk {c} onto chunk {d}, "
                                 "whose holders are not the images of its own")


def orbit_representatives(ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(least, to_rep) for a freely acting group given as [element, rank] images: ``least[r]``
    is the smallest rank of r's orbit and ``to_rep[r]`` the one element taking r there (so a
    tuple of ranks starting at r is keyed by its image under ``to_rep[r]``)."""
    least = ranks.min(axis=0).astype(np.int64)
    return least, np.argmax(ranks == least[None, :], axis=0)


def _link_orbits(topology: Topology, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Orbit number of every link (numbered in order of their first link), each orbit's first
    link, and the link index of every src*n+dst (-1 where none).

    A link's orbit is keyed by its image under the element that takes its source to the
    smallest rank of the source's orbit (one such element: G acts freely), so no loop runs over
    the group's elements."""
    n = topology.ranks
    src = np.fromiter((l.src for l in topology.links), dtype=np.int64, count=len(topology.links))
    dst = np.fromiter((l.dst for l in topology.links), dtype=np.int64, count=len(topology.links))
    least, to_rep = orbit_representatives(ranks)
    key = least[src] * n + ranks[to_rep[src], dst].astype(np.int64)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # number orbits by their first link
    number = np.empty(len(order), dtype=np.int64)
    number[order] = np.arange(len(order))
    link_id = np.full(n * n, -1, dtype=np.int64)
    link_id[src * n + dst] = np.arange(len(src))
    return number[inverse.ravel()], first[order].astype(np.int64), link_id


def orbit_classes(keys: list, maps: list) -> dict:
    """Every key's class representative (its smallest member) when each key is joined with its
    image under every map (images outside ``keys`` ignored): union-find."""
    parent = {k: k for k in keys}

    def find(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for image_of in maps:
        for k in keys:
            image = image_of(k)
            if image in parent:
                a, b = find(k), find(image)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return {k: find(k) for k in keys}
