"""Cut bounds: for a rank set, the chunks that must cross its boundary over the rate the links
and groups allow across it; reception sets (ranks behind one incoming group) likewise.

``Limit`` holds bandwidth limits as x = chunk loads per unit of capacity (see synth.bounds.flow);
``cut_limit`` is always computed, the flow LP only where it is small enough.

>>> from synth.core.generators import ring
>>> from synth.core.collectives import allgather
>>> limit = cut_limit(ring(4), allgather(4))  # 3 chunks enter a rank over 2 links of 25 GB/s
>>> round(float(limit.full) * 25.0, 6), limit.binding
(1.5, 'rank 0 in-bandwidth')
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from synth.bounds.flow import Network, cut_rate
from synth.core.collective import Collective
from synth.core.orbits import orbit_representatives
from synth.core.topology import Topology

REL = 1e-7  # relative tolerance when comparing limits
_NETWORKS: dict[int, tuple[Topology, Network]] = {}


@dataclass(frozen=True)
class Limit:
    """Bandwidth limits as x = chunk loads per unit of capacity (see synth.bounds.flow)."""

    full: float
    links: float
    rounds: float | None
    binding: str
    rounds_binding: str | None
    method: str


def proportional(topo: Topology) -> bool:
    """Capacities all derived from bandwidths, so rounds = bandwidth LP x min bandwidth."""
    return all(l.capacity is None for l in topo.links) and all(g.capacity is None for g in topo.groups)


def network_of(topo: Topology) -> Network:
    hit = _NETWORKS.get(id(topo))
    if hit is None or hit[0] is not topo:
        if len(_NETWORKS) > 16:
            _NETWORKS.clear()
        hit = _NETWORKS[id(topo)] = (topo, Network.of(topo))
    return hit[1]


def cut_limit(topo: Topology, coll: Collective, symmetry: np.ndarray | None = None) -> Limit:
    """The largest cut and reception-set limits. ``symmetry``: rank permutations [element, rank]
    (automorphisms that preserve the collective and act freely, as a ``Quotient``'s ``ranks``):
    a candidate that is the image of an earlier one has its value and is skipped. Without one,
    from ``COPY_SYMMETRY_RANKS`` ranks on, ``copy_symmetry`` where it holds."""
    net = network_of(topo)
    if symmetry is None and topo.ranks >= COPY_SYMMETRY_RANKS:
        symmetry = copy_symmetry(topo, coll)
    seen = _OrbitKeys(symmetry) if symmetry is not None and len(symmetry) > 1 else None
    names, masks = _candidates(topo)
    classes = Counter(zip(coll.pre, coll.post))
    mult = np.array(list(classes.values()), dtype=float)
    pre = _membership([p for p, _ in classes], coll.ranks)
    post = _membership([q for _, q in classes], coll.ranks)
    inside = masks.T.astype(float)  # ranks x candidates; float products use BLAS
    outside = 1.0 - inside
    post_inside = (post @ outside) == 0
    if coll.combining:
        leaves = (pre @ inside > 0) & ~post_inside
    else:
        leaves = ((pre @ outside) == 0) & ~post_inside
    crossing = mult @ leaves
    best = {"full": (0.0, ""), "links": (0.0, ""), "rounds": (0.0, "")}
    variants = [("full", net.bandwidth, net.group_bandwidth), ("links", net.bandwidth, None)]
    scaled = net.capacity is not None and proportional(topo)
    if net.capacity is not None and not scaled:
        variants.append(("rounds", net.capacity, net.group_capacity))
    for i in np.flatnonzero(crossing > 0):
        in_s = masks[i]
        if seen is not None and not seen.first(in_s):
            continue
        cut = in_s[net.src] & ~in_s[net.dst]
        for key, values, groups in variants:
            rate, group = cut_rate(net, cut, values, groups)
            x = math.inf if rate <= 0 else crossing[i] / rate
            if x > best[key][0] * (1 + REL):
                best[key] = (x, names[i] + (f" ({group})" if group else ""))
    if not coll.combining:
        received = _OrbitKeys(symmetry) if seen is not None else None
        for name, mask, need in _reception_sets(topo, coll):
            if received is not None and not received.first(mask):
                continue
            into = mask[net.dst]
            for key, values, groups in variants:
                rate, group = cut_rate(net, into, values, groups)
                x = math.inf if rate <= 0 else need / rate
                if x > best[key][0] * (1 + REL):
                    best[key] = (x, name + (f" ({group})" if group else ""))
    if scaled:  # capacities are bandwidth / min bandwidth: the same cuts, rescaled
        best["rounds"] = (best["full"][0] * topo.min_link_bandwidth, best["full"][1])
    rounds = None if net.capacity is None else best["rounds"][0]
    rounds_name = None if net.capacity is None else best["rounds"][1]
    return Limit(best["full"][0], best["links"][0], rounds, best["full"][1], rounds_name, "cuts")


COPY_SYMMETRY_RANKS = 128  # from this many ranks cut_limit looks for copy_symmetry itself (gb200nvl72x2: 144)


def copy_symmetry(topo: Topology, coll: Collective) -> np.ndarray | None:
    """[element, rank] of the group of a composition's copies, where it is one: rank g of machine
    m goes to rank g + a of machine m + b (indices mod G and N; every machine G ranks, in the
    order ``machines`` lists them), when moving every rank one place inside its machine and every
    machine one place on are both automorphisms of ``topo`` that preserve ``coll``. The N x G
    translations act freely; ``NAMExK`` (full mesh or rails) of a machine whose ranks are alike
    (an NVL72 rack) has them, and its 2 x N x G rank cuts fall into 2 orbits. None otherwise."""
    from synth.core.symmetry import _is_automorphism, chunk_permutation

    machines = topo.machines or ()
    if len(machines) < 2 or len({len(m) for m in machines}) != 1:
        return None
    grid = np.array(machines, dtype=np.int64)  # [machine, index]
    count, size = grid.shape

    def moved(a: int, b: int) -> np.ndarray:
        perm = np.empty(topo.ranks, dtype=np.int64)
        perm[grid] = np.roll(np.roll(grid, -b, axis=0), -a, axis=1)
        return perm

    generators = [tuple(moved(1, 0).tolist()), tuple(moved(0, 1).tolist())]
    if not all(_is_automorphism(topo, g) and chunk_permutation(coll, g) is not None for g in generators):
        return None
    return np.array([moved(a, b) for a in range(size) for b in range(count)])


def _reception_sets(topo: Topology, coll: Collective):
    """Ranks that share one incoming group (e.g. two GPUs behind one NIC), with how many chunk
    receptions they need together: every needed copy arrives over some link into one of them
    (internal links included), so time >= receptions / (all links into the set, under groups).
    Cuts miss this: a copy that entered the set once is free for a cut, not for a reception."""
    need = np.zeros(topo.ranks)
    for (pre, post), count in Counter(zip(coll.pre, coll.post)).items():
        for rank in post - pre:
            need[rank] += count
    seen: set[frozenset[int]] = set()
    for group in topo.groups:
        ranks = frozenset(dst for _, dst in group.links)
        if len(ranks) < 2 or len(ranks) == topo.ranks or ranks in seen:
            continue
        seen.add(ranks)
        mask = np.zeros(topo.ranks, dtype=bool)
        mask[list(ranks)] = True
        listed = sorted(ranks)
        shown = _names(listed) if len(listed) <= 4 else f"{listed[0]}..{listed[-1]} ({len(listed)} ranks)"
        yield f"receptions of ranks {shown}, the destinations of {group.name}", mask, float(need[mask].sum())


class _OrbitKeys:
    """Which rank sets are images of sets already seen, under a freely acting group.

    A set's key is the least (as bytes) of its images under the elements that take one of
    its members to the smallest rank of that member's orbit: the same for every set of an
    orbit, since G acts freely (one such element per member)."""

    def __init__(self, ranks: np.ndarray):
        self.ranks = np.asarray(ranks)
        self.to_rep = orbit_representatives(self.ranks)[1]
        self.keys: set[bytes] = set()

    def first(self, mask: np.ndarray) -> bool:
        """True the first time a set of its orbit is seen."""
        n = len(mask)
        flip = bool(mask.sum() * 2 > n)
        members = np.flatnonzero(~mask if flip else mask)
        images = self.ranks[self.to_rep[members]][:, members]
        rows = np.zeros((len(members), n), dtype=bool)
        rows[np.arange(len(members))[:, None], images] = True
        packed = np.packbits(rows, axis=1)
        key = bytes([flip]) + min(row.tobytes() for row in packed)
        if key in self.keys:
            return False
        self.keys.add(key)
        return True


def _membership(sets: list[frozenset[int]], ranks: int) -> np.ndarray:
    out = np.zeros((len(sets), ranks))
    for i, s in enumerate(sets):
        out[i, list(s)] = 1.0
    return out


def _candidates(topo: Topology) -> tuple[list[str], np.ndarray]:
    """Rank sets to cut: (names, masks[candidate, rank]); each name says which way data leaves."""
    n = topo.ranks
    found: dict[bytes, str] = {}
    masks: list[np.ndarray] = []

    def add(name: str, ranks) -> None:
        mask = np.zeros(n, dtype=bool)
        mask[list(ranks)] = True
        if 0 < mask.sum() < n and mask.tobytes() not in found:
            found[mask.tobytes()] = name
            masks.append(mask)

    machines = topo.machines or ()
    m = len(machines)
    for i, machine in enumerate(machines if m > 1 else ()):
        add(f"machine {i} out-bandwidth", machine)
        add(f"machine {i} in-bandwidth", set(range(n)) - set(machine))
    for r in range(n):
        add(f"rank {r} out-bandwidth", {r})
        add(f"rank {r} in-bandwidth", set(range(n)) - {r})
    if 2 < m <= 8:
        for size in range(2, m - 1):
            for chosen in itertools.combinations(range(m), size):
                add(f"machines {_names(chosen)} out-bandwidth", set().union(*(machines[c] for c in chosen)))
    elif m > 8:
        for k in range(2, m - 1):
            chosen = set().union(*machines[:k])
            add(f"machines 0-{k - 1} out-bandwidth", chosen)
            add(f"machines 0-{k - 1} in-bandwidth", set(range(n)) - chosen)
    for k in range(2, n - 1) if m <= 1 else ():  # bisections of rings and meshes
        add(f"ranks 0-{k - 1} out-bandwidth", range(k))
        add(f"ranks 0-{k - 1} in-bandwidth", range(k, n))
    return list(found.values()), np.array(masks, dtype=bool).reshape(len(masks), n)


def _names(chosen) -> str:
    return ",".join(map(str, chosen))
