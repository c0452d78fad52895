"""Personalised-exchange baselines: ``direct`` (one shot) and ``bruck`` (log2 n phases).

``direct`` sends every chunk straight from its holder to each rank that needs it, routed over
shortest paths (load spread per hop) where there is no link: alltoall, alltoallv, scatter,
gather. ``direct_schedule(topology, collective)`` takes any non-combining Collective, e.g. an
alltoallv built from a traffic matrix. ``bruck`` is Bruck's algorithm for alltoall and allgather.

>>> from synth.core.library import resolve_topology
>>> len(direct(resolve_topology("full:4"), "alltoall", None, None).steps)
1
>>> len(bruck(resolve_topology("full:8"), "alltoall", None, None).steps)
3
"""

from __future__ import annotations

from synth.baselines import Baseline
from synth.baselines.common import BaselineNotApplicable, Transfer, finish, route_phase
from synth.baselines.trees import check_args
from synth.core.collective import Collective
from synth.core.collectives import allgather, alltoall, gather, make_collective, scatter
from synth.core.errors import InputError
from synth.core.schedule import Schedule, Send
from synth.core.topology import Topology

ALLTOALLV_HINT = (
    "alltoallv needs a traffic matrix; use the name alltoallv:FILE (a synth.traffic JSON) or "
    "synth.baselines.alltoall.direct_schedule(topology, collective)"
)


# ---------------------------------------------------------------------------- direct
def direct_transfers(topology: Topology, collective: Collective) -> list[Transfer]:
    """One logical transfer per (chunk, rank that needs it), from the nearest holder."""
    dist = topology.hop_distances
    transfers = []
    for chunk, (pre, post) in enumerate(zip(collective.pre, collective.post)):
        for dst in sorted(post - pre):
            src = min(sorted(pre), key=lambda h: dist[h][dst])
            transfers.append(Transfer(chunk, src, dst))
    return transfers


def direct_schedule(topology: Topology, collective: Collective, **meta) -> Schedule:
    """Every chunk goes straight to where it is needed in one (routed) phase.

    Works for any non-combining collective (alltoall, alltoallv, scatter, gather, ...).

    >>> from synth.core.collectives import alltoallv
    >>> from synth.core.library import resolve_topology
    >>> s = direct_schedule(resolve_topology("ring:4"), alltoallv([[0, 3, 0, 1]] + [[1] * 4] * 3))
    >>> s.meta["algorithm"], len(s.steps)
    ('direct', 2)
    """
    if collective.ranks != topology.ranks:
        raise InputError(
            f"{collective.name} is for {collective.ranks} ranks but {topology.name} has {topology.ranks}"
        )
    if collective.combining:
        raise BaselineNotApplicable(f"direct cannot build the combining collective {collective.name}")
    transfers = direct_transfers(topology, collective)
    steps = route_phase(topology, transfers)
    routed = sum(1 for t in transfers if not topology.has_link(t.src, t.dst))
    info = {"variant": "one-shot", "pieces": collective.chunks_per_rank, "routed_transfers": routed}
    return finish(topology, collective, steps, "direct", **{**info, **meta})


def collective_for(topology: Topology, name: str, root: int | None, chunks: int | None) -> Collective:
    """The Collective a direct/bruck builder works on (alltoallv:FILE loads the matrix)."""
    n = topology.ranks
    if name == "alltoallv":
        raise BaselineNotApplicable(ALLTOALLV_HINT)
    if name.startswith("alltoallv:"):
        check_args(topology, "alltoallv", root, chunks, rooted=False)
        if chunks not in (None, 1):
            raise InputError("alltoallv takes its chunk counts from the traffic matrix; drop chunks")
        return make_collective(name, n)
    rooted = name in ("scatter", "gather")
    root, per_rank = check_args(topology, name, root, chunks, rooted=rooted)
    if name == "alltoall":
        return alltoall(n, per_rank)
    if name == "allgather":
        return allgather(n, per_rank)
    if rooted:
        return (scatter if name == "scatter" else gather)(n, root, per_rank)
    raise BaselineNotApplicable(f"no personalised-exchange baseline builds {name}")


def direct(topology: Topology, collective_name: str, root: int | None, chunks: int | None) -> Schedule:
    """Registry builder for ``direct``: alltoall, alltoallv:FILE, scatter, gather, and MoE
    dispatch/combine (every token straight to each destination rank: NCCL's all_to_all_v)."""
    if collective_name.partition(":")[0] in ("moe_dispatch", "moe_combine"):
        from synth.baselines.moe import moe_baseline

        if root is not None:
            raise InputError(f"{collective_name.partition(':')[0]} has no root")
        return moe_baseline(topology, "direct", collective_name, chunks)
    if collective_name == "allgather":
        raise BaselineNotApplicable("direct builds alltoall, alltoallv, scatter and gather, not allgather")
    return direct_schedule(topology, collective_for(topology, collective_name, root, chunks))


# ---------------------------------------------------------------------------- bruck
def bruck_alltoall_phases(n: int, per_rank: int) -> list[list[Transfer]]:
    """Phase k: every block whose rotated index (dst - src) mod n has bit k moves +2^k.

    >>> [(t.chunk, t.src, t.dst) for t in bruck_alltoall_phases(2, 1)[0]]
    [(1, 0, 1), (2, 1, 0)]
    """
    phases = []
    for k in range((n - 1).bit_length()):
        hop, moves = 1 << k, []
        for src in range(n):
            for dst in range(n):
                offset = (dst - src) % n
                if offset & hop:
                    holder = (src + offset % hop) % n
                    for i in range(per_rank):
                        moves.append(Transfer((src * n + dst) * per_rank + i, holder, (holder + hop) % n))
        phases.append(moves)
    return phases


def bruck_allgather_phases(n: int, per_rank: int) -> list[list[Transfer]]:
    """Phase k: rank i sends blocks i .. i+2^k-1 (fewer in the last phase) to rank i - 2^k.

    >>> [[(t.chunk, t.src, t.dst) for t in ph] for ph in bruck_allgather_phases(3, 1)]
    [[(0, 0, 2), (1, 1, 0), (2, 2, 1)], [(0, 0, 1), (1, 1, 2), (2, 2, 0)]]
    """
    phases = []
    for k in range((n - 1).bit_length()):
        hop = 1 << k
        count = min(hop, n - hop)
        phases.append([
            Transfer(((rank + m) % n) * per_rank + i, rank, (rank - hop) % n)
            for rank in range(n) for m in range(count) for i in range(per_rank)
        ])
    return phases


def bruck_schedule(topology: Topology, collective: Collective) -> Schedule:
    """Bruck's algorithm for an alltoall or allgather Collective (from collectives.py)."""
    n, per_rank = topology.ranks, collective.chunks_per_rank
    if collective.ranks != n:
        raise InputError(f"{collective.name} is for {collective.ranks} ranks but {topology.name} has {n}")
    if collective.name == "alltoall":
        phases = bruck_alltoall_phases(n, per_rank)
    elif collective.name == "allgather":
        phases = bruck_allgather_phases(n, per_rank)
    else:
        raise BaselineNotApplicable(f"bruck builds alltoall and allgather, not {collective.name}")
    steps: list[list[Send]] = []
    routed = 0
    for phase in phases:
        steps.extend(route_phase(topology, phase))
        routed += len({(t.src, t.dst) for t in phase if not topology.has_link(t.src, t.dst)})
    return finish(
        topology, collective, steps, "bruck", variant=f"{collective.name}, {len(phases)} phases",
        pieces=per_rank, phases=len(phases), routed_pairs=routed,
    )


def bruck(topology: Topology, collective_name: str, root: int | None, chunks: int | None) -> Schedule:
    """Registry builder for ``bruck``: alltoall and allgather (any n; last phase partial)."""
    if collective_name not in ("alltoall", "allgather"):
        raise BaselineNotApplicable(f"bruck builds alltoall and allgather, not {collective_name}")
    return bruck_schedule(topology, collective_for(topology, collective_name, root, chunks))


BASELINES: tuple[Baseline, ...] = (
    Baseline(
        "direct",
        frozenset({"alltoall", "alltoallv", "scatter", "gather", "moe_dispatch", "moe_combine"}),
        direct,
        "every chunk straight from its holder to its destination in one routed phase",
    ),
    Baseline(
        "bruck",
        frozenset({"alltoall", "allgather"}),
        bruck,
        "Bruck: ceil(log2 n) phases, phase k moves blocks 2^k ranks along",
    ),
)
