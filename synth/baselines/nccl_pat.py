"""NCCL's PAT (Parallel Aggregated Trees) allgather and reduce-scatter, one GPU per machine.

PAT (NCCL 2.23+; S. Jeaugey, "PAT: a new algorithm for all-gather and reduce-scatter operations
at scale", 2025) is Bruck's allgather with its dimensions taken in reverse order: every rank's
block is broadcast along a binomial tree shifted to start at that rank, the farthest hop first.
In step k (distance 2^d, d from ceil(log2 n) - 1 down to 0) a rank passes to the rank 2^d below
it every block it holds whose offset from the block's owner is a multiple of 2^(d+1), so the long
hops carry one block and the last step, to the neighbour, carries half of them. Any rank count
works (offsets stop at n). NCCL cuts steps into smaller ones when its staging buffer cannot hold
the aggregated blocks; with unbounded buffers, as modelled here, there are ceil(log2 n) steps.

Reduce-scatter is the dual: the allgather on the reversed topology, run backwards as reductions.
NCCL enables PAT only with one GPU per node, and so does this builder.

>>> edges = binomial_phases(5)  # the tree every block follows: offsets owner - s
>>> edges
[[(0, 4)], [(0, 2)], [(0, 1), (2, 3)]]
>>> sorted({0} | {b for step in edges for _, b in step})
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

from synth.baselines import Baseline
from synth.baselines.common import BaselineNotApplicable, Transfer, finish, holders, phases_to_steps
from synth.baselines.ring import chunks_per_rank, dual_steps
from synth.baselines.trees import binomial_phases
from synth.core import collectives
from synth.core.collective import Collective
from synth.core.errors import InputError
from synth.core.schedule import Schedule, Send
from synth.core.topology import Topology

Steps = list[list[Send]]


def pat_phases(n: int, per_rank: int) -> list[list[Transfer]]:
    """Allgather phases: in each, every owner's block moves along that step's tree edges.

    >>> [[(t.chunk, t.src, t.dst) for t in ph] for ph in pat_phases(3, 1)]
    [[(0, 0, 1), (1, 1, 2), (2, 2, 0)], [(0, 0, 2), (1, 1, 0), (2, 2, 1)]]
    """
    return [
        [
            Transfer(owner * per_rank + i, (owner - a) % n, (owner - b) % n)
            for owner in range(n) for a, b in edges for i in range(per_rank)
        ]
        for edges in binomial_phases(n)
    ]


def require_one_gpu_per_machine(topology: Topology) -> None:
    """BaselineNotApplicable unless every machine of ``topology`` holds exactly one rank."""
    machines = topology.machines or (tuple(range(topology.ranks)),)
    sizes = sorted({len(m) for m in machines})
    if sizes != [1]:
        raise BaselineNotApplicable(
            f"PAT needs one GPU per machine (NCCL enables it only then); {topology.name} has "
            f"machines of {', '.join(map(str, sizes))} GPUs"
        )
    if topology.ranks < 2:
        raise BaselineNotApplicable(f"nccl_pat on {topology.name}: one rank has nothing to communicate")


def _allgather_steps(topology: Topology, per_rank: int) -> tuple[Collective, Steps]:
    coll = collectives.allgather(topology.ranks, per_rank)
    steps = phases_to_steps(topology, pat_phases(topology.ranks, per_rank), holders(coll))
    return coll, steps


def _meta(topology: Topology) -> dict:
    n = topology.ranks
    dims = (n - 1).bit_length()
    pairs = {(t.src, t.dst) for phase in pat_phases(n, 1) for t in phase}
    missing = sum(1 for key in pairs if not topology.has_link(*key))
    meta = {
        "variant": "reversed-dimension Bruck (PAT with unbounded aggregation)",
        "phases": dims,
        "distances": [1 << d for d in range(dims - 1, -1, -1)],
        "routed_pairs": missing,
    }
    if missing:
        meta["note"] = "some PAT partners have no direct link: those copies are routed over shortest paths"
    return meta


def build(topology: Topology, collective_name: str, root: int | None, chunks: int | None) -> Schedule:
    """PAT allgather or reduce-scatter (verified); ``chunks`` = chunks per rank."""
    if collective_name not in NCCL_PAT.collectives:
        raise BaselineNotApplicable(
            f"nccl_pat builds allgather and reduce_scatter (NCCL's PAT), not {collective_name}"
        )
    if root is not None:
        raise InputError(f"nccl_pat has no root (got root {root})")
    per_rank = chunks_per_rank(chunks)
    require_one_gpu_per_machine(topology)
    meta = _meta(topology)
    if collective_name == "allgather":
        coll, steps = _allgather_steps(topology, per_rank)
        return finish(topology, coll, steps, "nccl_pat", **meta)
    reverse = topology.reversed()
    ag, ag_steps = _allgather_steps(reverse, per_rank)
    rs = collectives.reduce_scatter(topology.ranks, per_rank)
    return finish(topology, rs, dual_steps(reverse, ag, ag_steps), "nccl_pat", **meta)


NCCL_PAT = Baseline(
    name="nccl_pat",
    collectives=frozenset({"allgather", "reduce_scatter"}),
    build=build,
    description="NCCL's PAT: reversed-dimension Bruck, log2 n steps, far hops first (one GPU per machine)",
)

BASELINES: tuple[Baseline, ...] = (NCCL_PAT,)
