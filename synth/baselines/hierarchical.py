"""Hierarchical (two-level) collectives for machines of equal size joined by a fabric.

Ranks with the same local index j (position in their machine) form *rail* j. Allgather:
(1) every rail runs a ring allgather over the fabric (K machines: K-1 steps), so each rank
holds its rail's data; (2) every machine runs a ring allgather of all it holds over its own
Hamiltonian cycle (G ranks: G-1 steps); hops without a link are routed. Both levels are
bidirectional when all their rings are. Reduce-scatter is the dual of the allgather on the
reversed topology (machine reduce-scatter, then rail reduce-scatter); allreduce is
reduce-scatter then allgather. ``meta`` counts the steps of each level (``rail_steps``,
``machine_steps``; per half for allreduce).

>>> from synth.core.library import resolve_topology
>>> s = build(resolve_topology("ndv2x2"), "allgather", None, None)
>>> len(s.steps), s.meta["rail_steps"], s.meta["machine_steps"]
(8, 1, 7)
"""

from __future__ import annotations

from synth.baselines import Baseline
from synth.baselines.common import BaselineNotApplicable, finish, holders, route_phase
from synth.baselines.cycles import Ring, find_ring
from synth.baselines.ring import (
    Steps,
    bare_steps,
    chunks_per_rank,
    dual_steps,
    merge_phases,
    own_blocks,
    phase_counts,
    ring_phases,
)
from synth.core import collectives
from synth.core.collective import Collective
from synth.core.schedule import Schedule
from synth.core.topology import Topology
from synth.core.transforms import compose


def machines_of(topology: Topology) -> tuple[tuple[int, ...], ...]:
    """The machines, when there are two or more of one size; else BaselineNotApplicable."""
    machines = topology.machines or ()
    if len(machines) < 2:
        raise BaselineNotApplicable(
            f"hierarchical needs a topology of two or more machines; {topology.name} is one machine"
        )
    sizes = sorted({len(m) for m in machines})
    if len(sizes) > 1:
        raise BaselineNotApplicable(
            f"hierarchical needs machines of equal size; {topology.name} has sizes {sizes}"
        )
    return machines


def plan(topology: Topology) -> tuple[tuple[Ring, ...], tuple[Ring, ...]]:
    """The rail rings (one per local index) and the machine rings of ``topology``."""
    machines = machines_of(topology)
    rails = tuple(find_ring(topology, [m[j] for m in machines]) for j in range(len(machines[0])))
    inner = tuple(find_ring(topology, m) for m in machines)
    return rails, inner


def _reversed(rings: tuple[Ring, ...]) -> tuple[Ring, ...]:
    return tuple(r.reversed() for r in rings)


def _allgather_steps(
    topology: Topology, rails: tuple[Ring, ...], inner: tuple[Ring, ...], per_rank: int
) -> tuple[Collective, Steps, int]:
    """Rail allgathers, then machine allgathers of everything held; also the rail sub-step count."""
    halves = 2 if all(r.bidirectional for r in rails + inner) else 1
    coll = collectives.allgather(topology.ranks, per_rank * halves)
    forward, backward = own_blocks(range(topology.ranks), per_rank, halves)
    rail_phases = merge_phases(*(ring_phases(r.order, forward, backward) for r in rails))
    fwd_all = {r: [c for q in ring.order for c in forward[q]] for ring in rails for r in ring.order}
    bwd_all = None
    if backward is not None:
        bwd_all = {r: [c for q in ring.order for c in backward[q]] for ring in rails for r in ring.order}
    machine_phases = merge_phases(*(ring_phases(m.order, fwd_all, bwd_all) for m in inner))
    held = holders(coll)
    steps = [sub for phase in rail_phases for sub in route_phase(topology, phase, held) if sub]
    rail_steps = len(steps)
    steps += [sub for phase in machine_phases for sub in route_phase(topology, phase, held) if sub]
    return coll, steps, rail_steps


def build(topology: Topology, collective_name: str, root: int | None, chunks: int | None) -> Schedule:
    """Hierarchical allgather, reduce_scatter or allreduce on a multi-machine topology (verified)."""
    per_rank = chunks_per_rank(chunks)
    if collective_name not in HIERARCHICAL.collectives:
        raise BaselineNotApplicable(
            f"hierarchical builds allgather, reduce_scatter and allreduce, not {collective_name}"
        )
    rails, inner = plan(topology)
    bidirectional = all(r.bidirectional for r in rails + inner)
    meta = {
        "variant": "bidirectional" if bidirectional else "unidirectional",
        "machines": len(inner),
        "rail_orders": [list(r.order) for r in rails],
        "machine_orders": [list(r.order) for r in inner],
        "routed": not all(r.direct for r in rails + inner),
    }
    if collective_name == "allgather":
        ag, ag_steps, rail_steps = _allgather_steps(topology, rails, inner, per_rank)
        meta.update(rail_steps=rail_steps, machine_steps=len(ag_steps) - rail_steps)
        return finish(topology, ag, ag_steps, "hierarchical", **meta)
    reverse = topology.reversed()
    rev_ag, rev_steps, rail_steps = _allgather_steps(reverse, _reversed(rails), _reversed(inner), per_rank)
    meta.update(rail_steps=rail_steps, machine_steps=len(rev_steps) - rail_steps)
    rs = collectives.reduce_scatter(topology.ranks, rev_ag.chunks_per_rank)
    rs_steps = dual_steps(reverse, rev_ag, rev_steps)
    if collective_name == "reduce_scatter":
        return finish(topology, rs, rs_steps, "hierarchical", **meta)
    ag, ag_steps, _ = _allgather_steps(topology, rails, inner, per_rank)
    coll = collectives.allreduce(topology.ranks, ag.chunks_per_rank)
    first, second = Schedule(topology, rs, bare_steps(rs_steps)), Schedule(topology, ag, bare_steps(ag_steps))
    joined = compose(first, second, coll)
    return finish(topology, coll, [step.sends for step in joined.steps], "hierarchical", **meta)


def loads(topology: Topology, collective_name: str):
    """The StepLoads of ``build(topology, collective_name, None, None)``, counted when every
    rail and machine ring is direct: a rail step moves one block per rail hop (each way when
    bidirectional), a machine step the K blocks of a rail per machine hop; the allgather is K-1
    rail steps then G-1 machine steps, the reduce-scatter (its dual) the same steps backwards.
    None when a ring is routed (build it)."""
    from synth.cost import counted_loads

    if collective_name not in HIERARCHICAL.collectives:
        raise BaselineNotApplicable(
            f"hierarchical builds allgather, reduce_scatter and allreduce, not {collective_name}")
    rails, inner = plan(topology)
    if not all(r.direct for r in rails + inner):
        return None
    halves = 2 if all(r.bidirectional for r in rails + inner) else 1
    machines = len(rails[0].order)
    rail = [phase_counts([r.order for r in rails], 1, halves - 1)] * (machines - 1)
    local = [phase_counts([m.order for m in inner], machines, machines * (halves - 1))] * (len(inner[0].order) - 1)
    steps = {"allgather": rail + local, "reduce_scatter": local + rail, "allreduce": local + rail + rail + local}
    made = getattr(collectives, collective_name)(topology.ranks, halves)
    return counted_loads(topology, made.buffer_chunks, steps[collective_name])


HIERARCHICAL = Baseline(
    name="hierarchical",
    collectives=frozenset({"allgather", "reduce_scatter", "allreduce"}),
    build=build,
    description="rail rings over the fabric, then machine rings over local links (multi-machine)",
    loads=loads,
)

BASELINES: tuple[Baseline, ...] = (HIERARCHICAL,)
