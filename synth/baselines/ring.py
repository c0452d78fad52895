"""Ring allgather, reduce-scatter and allreduce over a topology-aware Hamiltonian cycle.

The rank order comes from ``cycles.find_ring`` (wide links first, as few machine crossings as
possible). When every hop has its reverse link the ring is *bidirectional*: each rank's data is
cut in two chunks, one travelling each way, so the collective is built with ``2 x chunks``
chunks per rank (``buffer_chunks`` is still S in chunks). Allgather takes n-1 steps of
neighbour sends; reduce-scatter is the dual of the allgather on the reversed topology;
allreduce is reduce-scatter then allgather (2(n-1) steps). Without a Hamiltonian cycle an
allgather is routed over shortest paths; the combining collectives then do not apply.

>>> from synth.core.generators import ring as ring_topology
>>> s = build(ring_topology(4), "allreduce", None, None)
>>> len(s.steps), s.meta["variant"], s.meta["order"]
(6, 'bidirectional', [0, 1, 2, 3])
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping, Sequence

from synth.baselines import Baseline
from synth.baselines.common import BaselineNotApplicable, Transfer, finish, holders, phases_to_steps
from synth.baselines.cycles import Ring, find_ring
from synth.core import collectives
from synth.core.collective import Collective
from synth.core.errors import InputError
from synth.core.schedule import Schedule, Send, Step
from synth.core.topology import Topology
from synth.core.transforms import compose, dual_schedule

Blocks = Mapping[int, Sequence[int]]
Steps = list[list[Send]]


def chunks_per_rank(chunks: int | None) -> int:
    """The ``chunks`` argument of a builder: None means 1; anything but a positive int is bad input."""
    if chunks is None:
        return 1
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1:
        raise InputError(f"chunks per rank must be a positive integer, got {chunks!r}")
    return chunks


def ring_phases(
    order: Sequence[int], forward: Blocks, backward: Blocks | None = None
) -> list[list[Transfer]]:
    """The len(order)-1 phases of a ring allgather of ``forward[r]`` (and ``backward[r]`` the other way).

    In phase s, ``order[i]`` passes the block that started on ``order[i-s]`` to ``order[i+1]``.

    >>> [[(t.chunk, t.src, t.dst) for t in p] for p in ring_phases((0, 1, 2), {0: [0], 1: [1], 2: [2]})]
    [[(0, 0, 1), (1, 1, 2), (2, 2, 0)], [(2, 0, 1), (0, 1, 2), (1, 2, 0)]]
    """
    m = len(order)
    phases = []
    for s in range(m - 1):
        phase = []
        for i, src in enumerate(order):
            phase += [Transfer(c, src, order[(i + 1) % m]) for c in forward[order[(i - s) % m]]]
            if backward is not None:
                phase += [Transfer(c, src, order[(i - 1) % m]) for c in backward[order[(i + s) % m]]]
        phases.append(phase)
    return phases


def merge_phases(*groups: list[list[Transfer]]) -> list[list[Transfer]]:
    """Run several independent phase lists side by side (phase i of each together)."""
    longest = max((len(g) for g in groups), default=0)
    return [[t for g in groups if i < len(g) for t in g[i]] for i in range(longest)]


def own_blocks(ranks: Sequence[int], per_rank: int, halves: int) -> tuple[dict, dict | None]:
    """Each rank's chunks (allgather numbering) split into the forward and backward halves."""
    width = per_rank * halves
    forward = {r: [r * width + i for i in range(per_rank)] for r in ranks}
    if halves == 1:
        return forward, None
    return forward, {r: [r * width + per_rank + i for i in range(per_rank)] for r in ranks}


def dual_steps(reversed_topology: Topology, collective: Collective, steps: Steps) -> Steps:
    """Reduce-scatter steps on the original topology from allgather ``steps`` on its reverse."""
    tree = Schedule(reversed_topology, collective, bare_steps(steps))
    return [list(step.sends) for step in dual_schedule(tree).steps]


def ring_meta(ring: Ring) -> dict:
    return {
        "variant": "bidirectional" if ring.bidirectional else "unidirectional",
        "order": list(ring.order),
        "routed": not ring.direct,
        "machine_crossings": ring.crossings,
    }


def _allgather_steps(topology: Topology, ring: Ring, per_rank: int) -> tuple[Collective, Steps]:
    halves = 2 if ring.bidirectional else 1
    coll = collectives.allgather(topology.ranks, per_rank * halves)
    forward, backward = own_blocks(range(topology.ranks), per_rank, halves)
    steps = phases_to_steps(topology, ring_phases(ring.order, forward, backward), holders(coll))
    return coll, steps


def _reduce_scatter_steps(topology: Topology, ring: Ring, per_rank: int) -> tuple[Collective, Steps]:
    reverse = topology.reversed()
    ag, steps = _allgather_steps(reverse, ring.reversed(), per_rank)
    coll = collectives.reduce_scatter(topology.ranks, ag.chunks_per_rank)
    return coll, dual_steps(reverse, ag, steps)


def build(topology: Topology, collective_name: str, root: int | None, chunks: int | None) -> Schedule:
    """Ring schedule for allgather, reduce_scatter or allreduce (verified)."""
    per_rank = chunks_per_rank(chunks)
    if collective_name not in RING.collectives:
        raise BaselineNotApplicable(
            f"ring builds allgather, reduce_scatter and allreduce, not {collective_name}"
        )
    ring = find_ring(topology)
    meta = ring_meta(ring)
    if not ring.direct:
        meta["note"] = "no Hamiltonian cycle of links: ring hops are routed over shortest paths"
    if collective_name == "allgather":
        coll, steps = _allgather_steps(topology, ring, per_rank)
        return finish(topology, coll, steps, "ring", **meta)
    if not ring.direct:
        raise BaselineNotApplicable(
            f"ring {collective_name} needs a Hamiltonian cycle of links and {topology.name} has none "
            "(only a non-combining ring is routed; try a tree or hierarchical baseline)"
        )
    rs, rs_steps = _reduce_scatter_steps(topology, ring, per_rank)
    if collective_name == "reduce_scatter":
        return finish(topology, rs, rs_steps, "ring", **meta)
    ag, ag_steps = _allgather_steps(topology, ring, per_rank)
    coll = collectives.allreduce(topology.ranks, ag.chunks_per_rank)
    first, second = Schedule(topology, rs, bare_steps(rs_steps)), Schedule(topology, ag, bare_steps(ag_steps))
    joined = compose(first, second, coll)
    return finish(topology, coll, [step.sends for step in joined.steps], "ring", **meta)


def phase_counts(orders: Iterable[Sequence[int]], forward: int, backward: int) -> Counter:
    """Chunks per link in one phase of ring allgathers side by side (``ring_phases``, each ring
    of ``orders`` with ``forward`` blocks per rank one way and ``backward`` the other): every hop
    carries its blocks; rings of one rank carry nothing."""
    counts: Counter = Counter()
    for order in orders:
        m = len(order)
        for i, src in enumerate(order if m > 1 else ()):
            counts[(src, order[(i + 1) % m])] += forward
            if backward:
                counts[(src, order[(i - 1) % m])] += backward
    return counts


def loads(topology: Topology, collective_name: str):
    """The StepLoads of ``build(topology, collective_name, None, None)``, counted: on a ring of
    direct hops every phase is one step moving one block per hop (both ways when bidirectional),
    the reduce-scatter (the dual of the allgather on the reversed ring) on the same hops; None
    for a routed ring (build it)."""
    from synth.cost import counted_loads

    if collective_name not in RING.collectives:
        raise BaselineNotApplicable(f"ring builds allgather, reduce_scatter and allreduce, not {collective_name}")
    ring = find_ring(topology)
    if not ring.direct:
        return None
    halves = 2 if ring.bidirectional else 1
    step = phase_counts([ring.order], 1, 1 if halves == 2 else 0)
    count = (len(ring.order) - 1) * (2 if collective_name == "allreduce" else 1)
    made = getattr(collectives, collective_name)(topology.ranks, halves)
    return counted_loads(topology, made.buffer_chunks, [step] * count)


def bare_steps(steps: Steps) -> tuple[Step, ...]:
    """Steps without rounds (``finish`` sets them), empty ones dropped."""
    return tuple(Step(tuple(s), None) for s in steps if s)


RING = Baseline(
    name="ring",
    collectives=frozenset({"allgather", "reduce_scatter", "allreduce"}),
    build=build,
    description="ring over a wide, machine-aware Hamiltonian cycle (bidirectional when links allow)",
    loads=loads,
)

BASELINES: tuple[Baseline, ...] = (RING,)
