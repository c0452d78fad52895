"""NCCL's Ring algorithm with channels, as one verified schedule.

The channels come from ``channels.plan_channels`` (rings that together use every link unit on
a mesh, one ring on an NVSwitch machine, rail-aligned rings across machines); the data is split
evenly over them (every ring has the same unit bandwidth). Per collective:

- allgather: each rank's data is cut into one chunk per channel; chunk c travels ring c for
  n-1 steps, all rings side by side;
- reduce_scatter: the dual of the allgather on the reversed topology (rings run backwards);
- allreduce: reduce_scatter then allgather, 2(n-1) steps;
- broadcast: every ring, cut open before the root, is a chain; the buffer is cut into
  ``channels x pieces`` chunks that stream down the chains (n-2+pieces steps);
- reduce: the dual of the broadcast on the reversed topology.

The builder is *sized*: ``pieces`` for broadcast and reduce is the count (1, 2, 4, ... 64) that is
fastest at ``size`` in the step model at its best protocol (1 GiB when no size is given);
``chunks`` fixes it instead.

>>> from synth.core.library import resolve_topology
>>> s = build(resolve_topology("dgx1"), "allgather", None, None)
>>> len(s.steps), s.meta["channels"], s.collective.chunks_per_rank
(7, 6, 6)
"""

from __future__ import annotations

from synth.baselines import Baseline
from synth.baselines.channels import ChannelPlan, plan_channels
from synth.baselines.common import BaselineNotApplicable, Transfer, finish, holders, phases_to_steps
from synth.baselines.ring import bare_steps, chunks_per_rank, dual_steps, merge_phases, phase_counts, ring_phases
from synth.core import collectives
from synth.core.collective import Collective
from synth.core.schedule import Schedule, Send
from synth.core.topology import Topology
from synth.core.transforms import compose, dual_schedule

COLLECTIVES = frozenset({"allgather", "reduce_scatter", "allreduce", "broadcast", "reduce"})
PIECES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_SIZE = 1024**3
MAX_SENDS = 400_000  # broadcast/reduce candidates with more sends than this are not built

Steps = list[list[Send]]


def build(topology: Topology, collective_name: str, root: int | None, chunks: int | None,
          size: float | None = None) -> Schedule:
    """NCCL ring schedule for ``collective_name`` (verified); see the module docstring."""
    if collective_name not in COLLECTIVES:
        raise BaselineNotApplicable(
            f"nccl_ring builds {', '.join(sorted(COLLECTIVES))}, not {collective_name} "
            "(NCCL runs alltoall, gather and scatter as point-to-point sends: the 'direct' baseline)")
    if collective_name in ("broadcast", "reduce"):
        return _rooted(topology, collective_name, root, chunks, size)
    if root is not None:
        raise BaselineNotApplicable(f"{collective_name} takes no root")
    chunks_per_rank(chunks)  # validates; the channel count fixes the chunking
    plan = plan_channels(topology)
    meta = _meta(plan)
    if collective_name == "allgather":
        coll, steps = _allgather(topology, plan.rings)
        return finish(topology, coll, steps, "nccl_ring", **meta)
    rs, rs_steps = _reduce_scatter(topology, plan.rings)
    if collective_name == "reduce_scatter":
        return finish(topology, rs, rs_steps, "nccl_ring", **meta)
    ag, ag_steps = _allgather(topology, plan.rings)
    coll = collectives.allreduce(topology.ranks, ag.chunks_per_rank)
    joined = compose(Schedule(topology, rs, bare_steps(rs_steps)), Schedule(topology, ag, bare_steps(ag_steps)), coll)
    return finish(topology, coll, [step.sends for step in joined.steps], "nccl_ring", **meta)


def loads(topology: Topology, collective_name: str):
    """The StepLoads of ``build(topology, collective_name, None, None)`` for allgather,
    reduce_scatter and allreduce, counted: every step moves one chunk on every hop of every
    channel (n-1 steps a half, the reduce-scatter on the same hops as the allgather, its dual);
    None for broadcast and reduce (their pieces depend on the size: build them)."""
    from synth.cost import counted_loads

    if collective_name in ("broadcast", "reduce"):
        return None
    if collective_name not in COLLECTIVES:
        return build(topology, collective_name, None, None)  # raises what build says
    plan = plan_channels(topology)
    step = phase_counts(plan.rings, 1, 0)
    count = (topology.ranks - 1) * (2 if collective_name == "allreduce" else 1)
    made = getattr(collectives, collective_name)(topology.ranks, len(plan.rings))
    return counted_loads(topology, made.buffer_chunks, [step] * count)


def _meta(plan: ChannelPlan) -> dict:
    meta = {"channels": len(plan.rings), "rings": [list(r) for r in plan.rings], "method": plan.method}
    if plan.note:
        meta["note"] = plan.note
    return meta


def _reversed(ring: tuple[int, ...]) -> tuple[int, ...]:
    return (ring[0],) + tuple(reversed(ring[1:]))


def _allgather(topology: Topology, rings: tuple[tuple[int, ...], ...]) -> tuple[Collective, Steps]:
    """Chunk r*C + c (rank r's share on channel c) goes round ring c."""
    count = len(rings)
    coll = collectives.allgather(topology.ranks, count)
    phases = merge_phases(*(
        ring_phases(ring, {r: [r * count + c] for r in range(topology.ranks)}) for c, ring in enumerate(rings)))
    return coll, phases_to_steps(topology, phases, holders(coll))


def _reduce_scatter(topology: Topology, rings: tuple[tuple[int, ...], ...]) -> tuple[Collective, Steps]:
    reverse = topology.reversed()
    ag, steps = _allgather(reverse, tuple(_reversed(r) for r in rings))
    coll = collectives.reduce_scatter(topology.ranks, ag.chunks_per_rank)
    return coll, dual_steps(reverse, ag, steps)


# ---------------------------------------------------------------------------- broadcast / reduce
def _check_root(topology: Topology, root: int | None) -> int:
    root = 0 if root is None else root
    if not isinstance(root, int) or isinstance(root, bool) or not 0 <= root < topology.ranks:
        raise BaselineNotApplicable(f"root must be a rank of 0..{topology.ranks - 1}, got {root!r}")
    return root


def _rooted(topology: Topology, name: str, root: int | None, chunks: int | None, size: float | None) -> Schedule:
    root = _check_root(topology, root)
    plan = plan_channels(topology)
    if chunks is not None:
        return _rooted_with(topology, name, root, plan, chunks_per_rank(chunks), "given")
    at = DEFAULT_SIZE if size is None else size
    pieces = _pieces_at(topology, name, root, plan, [at])[at]
    return _rooted_with(topology, name, root, plan, pieces, f"fastest at {at:.0f} bytes")


def choices(topology: Topology, collective_name: str, root: int | None, sizes) -> dict | None:
    """The piece count ``build`` picks at each size (broadcast and reduce), None where the size
    changes nothing (allgather, reduce_scatter, allreduce)."""
    if collective_name not in ("broadcast", "reduce"):
        return None
    return _pieces_at(topology, collective_name, _check_root(topology, root), plan_channels(topology), sizes)


def _pieces_at(topology: Topology, name: str, root: int, plan: ChannelPlan, sizes) -> dict:
    """For each size, the piece count fastest at its best protocol (ties: fewer). Each candidate
    is costed once, unverified: a reduce costs what the broadcast on the reversed topology costs
    (the dual puts the same loads on the same links)."""
    from synth.cost import step_loads

    topo = topology if name == "broadcast" else topology.reversed()
    rings = plan.rings if name == "broadcast" else tuple(_reversed(r) for r in plan.rings)
    loads = {}
    for pieces in PIECES:
        if loads and len(rings) * pieces * topology.ranks > MAX_SENDS:
            break
        coll, steps = _broadcast(topo, rings, root, pieces)
        loads[pieces] = step_loads(Schedule(topo, coll, bare_steps(steps)))
    return {size: min(loads, key=lambda c: (loads[c].best(size)[1], c)) for size in sizes}


def _rooted_with(topology: Topology, name: str, root: int, plan: ChannelPlan, pieces: int, why: str) -> Schedule:
    meta = {**_meta(plan), "pieces": pieces, "pieces_chosen": why}
    if name == "broadcast":
        coll, steps = _broadcast(topology, plan.rings, root, pieces)
        return finish(topology, coll, steps, "nccl_ring", **meta)
    reverse = topology.reversed()
    coll, steps = _broadcast(reverse, tuple(_reversed(r) for r in plan.rings), root, pieces)
    dual = dual_schedule(Schedule(reverse, coll, bare_steps(steps)))
    return finish(topology, dual.collective, [step.sends for step in dual.steps], "nccl_ring", **meta)


def _broadcast(topology: Topology, rings: tuple[tuple[int, ...], ...], root: int,
               pieces: int) -> tuple[Collective, Steps]:
    """Chunk c*pieces + p streams down chain c (ring c opened before the root): hop h in step h + p."""
    count, n = len(rings), topology.ranks
    coll = collectives.broadcast(n, root, count * pieces)
    chains = []
    for ring in rings:
        at = ring.index(root)
        chains.append(ring[at:] + ring[:at])
    phases: list[list[Transfer]] = [[] for _ in range(n - 1 + pieces - 1)]
    for c, chain in enumerate(chains):
        for p in range(pieces):
            for hop in range(n - 1):
                phases[hop + p].append(Transfer(c * pieces + p, chain[hop], chain[hop + 1]))
    return coll, phases_to_steps(topology, phases, holders(coll))


NCCL_RING = Baseline(
    name="nccl_ring",
    collectives=COLLECTIVES,
    build=build,
    description="NCCL's channelized rings: rings covering every link unit / NIC rail, data split over them",
    sized=True,
    choices=choices,
    loads=loads,
)

BASELINES: tuple[Baseline, ...] = (NCCL_RING,)
