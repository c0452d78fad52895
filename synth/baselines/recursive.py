"""Recursive doubling and recursive halving (Rabenseifner) for power-of-two rank counts.

- ``recursive_doubling`` allgather: in step k rank r and its partner r ^ 2^k swap everything
  they hold (2^k blocks); log2(n) steps. Partners without a direct link are reached over
  shortest paths (copies only). Allreduce: in step k the partners swap their *whole* partial
  buffers with ``reduce``; log2(n) steps, n chunks per link per step; needs direct links.
- ``recursive_halving`` reduce-scatter: vector halving, the dual of the recursive-doubling
  allgather on the reversed topology (step k sends half of what is left to r ^ 2^(d-1-k)).
  Allreduce: recursive halving then recursive doubling (Rabenseifner), 2 log2(n) steps.

>>> from synth.core.generators import hypercube
>>> s = build_halving(hypercube(2), "allreduce", None, None)
>>> len(s.steps), s.meta["partners"]
(4, 'r ^ 2^k')
"""

from __future__ import annotations

from synth.baselines import Baseline
from synth.baselines.common import BaselineNotApplicable, Transfer, finish, holders, phases_to_steps
from synth.baselines.ring import chunks_per_rank, dual_steps
from synth.core import collectives
from synth.core.collective import Collective
from synth.core.schedule import Schedule, Send
from synth.core.topology import Topology

Steps = list[list[Send]]


def dimensions(topology: Topology, algorithm: str) -> int:
    """log2 of the rank count; raises BaselineNotApplicable when it is not a power of two."""
    n = topology.ranks
    if n & (n - 1):
        raise BaselineNotApplicable(
            f"{algorithm} needs a power-of-two rank count; {topology.name} has {n} ranks"
        )
    return n.bit_length() - 1


def missing_partner_links(topology: Topology, d: int) -> list[tuple[int, int]]:
    """Partner pairs (r, r ^ 2^k) with no direct link r -> partner."""
    return [
        (r, r ^ (1 << k))
        for k in range(d)
        for r in range(topology.ranks)
        if not topology.has_link(r, r ^ (1 << k))
    ]


def _require_direct(topology: Topology, d: int, algorithm: str, collective_name: str) -> None:
    missing = missing_partner_links(topology, d)
    if missing:
        a, b = missing[0]
        raise BaselineNotApplicable(
            f"{algorithm} {collective_name} reduces between partners r and r^2^k over direct links; "
            f"{topology.name} has no link {a}->{b} ({len(missing)} partner links missing)"
        )


def _doubling_allgather(topology: Topology, d: int, per_rank: int) -> tuple[Collective, Steps]:
    coll = collectives.allgather(topology.ranks, per_rank)
    phases = []
    for k in range(d):
        phase = []
        for r in range(topology.ranks):
            base = (r >> k) << k  # r holds the blocks of ranks base .. base + 2^k - 1
            phase += [
                Transfer(q * per_rank + i, r, r ^ (1 << k))
                for q in range(base, base + (1 << k))
                for i in range(per_rank)
            ]
        phases.append(phase)
    return coll, phases_to_steps(topology, phases, holders(coll))


def _halving_reduce_scatter(topology: Topology, d: int, per_rank: int) -> tuple[Collective, Steps]:
    reverse = topology.reversed()
    ag, steps = _doubling_allgather(reverse, d, per_rank)
    return collectives.reduce_scatter(topology.ranks, per_rank), dual_steps(reverse, ag, steps)


def _doubling_allreduce(topology: Topology, d: int, per_rank: int) -> tuple[Collective, Steps]:
    coll = collectives.allreduce(topology.ranks, per_rank)
    steps = [
        [Send(c, r, r ^ (1 << k), "reduce") for r in range(topology.ranks) for c in range(coll.chunks)]
        for k in range(d)
    ]
    return coll, steps


def _meta(topology: Topology, d: int) -> dict:
    missing = missing_partner_links(topology, d)
    meta = {"partners": "r ^ 2^k", "log2_ranks": d, "routed": bool(missing)}
    if missing:
        meta["note"] = f"{len(missing)} partner links missing: those copies are routed over shortest paths"
    return meta


def build_doubling(
    topology: Topology, collective_name: str, root: int | None, chunks: int | None
) -> Schedule:
    """Recursive doubling allgather (routed where partners lack a link) or allreduce (direct)."""
    per_rank = chunks_per_rank(chunks)
    d = dimensions(topology, "recursive_doubling")
    if collective_name == "allgather":
        coll, steps = _doubling_allgather(topology, d, per_rank)
    elif collective_name == "allreduce":
        _require_direct(topology, d, "recursive_doubling", collective_name)
        coll, steps = _doubling_allreduce(topology, d, per_rank)
    else:
        raise BaselineNotApplicable(
            f"recursive_doubling builds allgather and allreduce, not {collective_name}"
        )
    return finish(topology, coll, steps, "recursive_doubling", **_meta(topology, d))


def build_halving(
    topology: Topology, collective_name: str, root: int | None, chunks: int | None
) -> Schedule:
    """Recursive halving reduce-scatter, or Rabenseifner allreduce (halving then doubling)."""
    per_rank = chunks_per_rank(chunks)
    d = dimensions(topology, "recursive_halving")
    if collective_name not in ("reduce_scatter", "allreduce"):
        raise BaselineNotApplicable(
            f"recursive_halving builds reduce_scatter and allreduce, not {collective_name}"
        )
    _require_direct(topology, d, "recursive_halving", collective_name)
    rs, steps = _halving_reduce_scatter(topology, d, per_rank)
    meta = _meta(topology, d)
    if collective_name == "reduce_scatter":
        return finish(topology, rs, steps, "recursive_halving", **meta)
    _, ag_steps = _doubling_allgather(topology, d, per_rank)
    coll = collectives.allreduce(topology.ranks, per_rank)
    return finish(topology, coll, steps + ag_steps, "recursive_halving", variant="rabenseifner", **meta)


BASELINES: tuple[Baseline, ...] = (
    Baseline(
        name="recursive_doubling",
        collectives=frozenset({"allgather", "allreduce"}),
        build=build_doubling,
        description="partners r ^ 2^k swap what they hold (allgather) or their whole buffer (allreduce)",
    ),
    Baseline(
        name="recursive_halving",
        collectives=frozenset({"reduce_scatter", "allreduce"}),
        build=build_halving,
        description="vector halving reduce-scatter; allreduce = halving + doubling (Rabenseifner)",
    ),
)
