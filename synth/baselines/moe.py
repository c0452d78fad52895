"""Mixture-of-experts baselines: what people run for dispatch and combine today.

- ``direct`` (in ``synth.baselines.alltoall``'s entry): NCCL's all_to_all_v, one copy of every
  token per destination rank, straight from its source, one step;
- ``deepep``: DeepEP's internode scheme, every token crossing to each destination machine once,
  to the rank with its source's local index, which forwards it over NVLink; combine reversed
  with partial sums at that rank.
Both built by ``synth.moe.synthesize`` and verified here.

>>> sorted(MOE_COLLECTIVES)
['moe_combine', 'moe_dispatch']
"""

from __future__ import annotations

from synth.baselines import Baseline
from synth.baselines.common import BaselineNotApplicable
from synth.core.errors import InputError
from synth.core.schedule import Schedule
from synth.core.topology import Topology
from synth.verify import checked

MOE_COLLECTIVES = frozenset({"moe_dispatch", "moe_combine"})


def moe_baseline(topology: Topology, method: str, collective_name: str, chunks: int | None) -> Schedule:
    """The verified ``method`` (direct, deepep) schedule for ``moe_dispatch:FILE`` / ``moe_combine:FILE``."""
    from synth.moe.synthesize import missing_links, moe_schedule

    kind, _, path = collective_name.partition(":")
    if kind not in MOE_COLLECTIVES:
        raise BaselineNotApplicable(f"{method} builds moe_dispatch:FILE and moe_combine:FILE, not {collective_name}")
    if not path:
        raise BaselineNotApplicable(f"{kind} needs a routing file: {kind}:FILE (a synth.routing JSON file)")
    if chunks not in (None, 1):
        raise InputError(f"{kind} has one chunk per token; drop chunks")
    if missing_links(topology):
        raise BaselineNotApplicable(f"{method} needs a link between every two ranks; {topology.name} lacks "
                                    f"{missing_links(topology)}")
    return checked(moe_schedule(topology, collective_name, method).schedule, f"the {method} baseline")


def deepep(topology: Topology, collective_name: str, root: int | None, chunks: int | None) -> Schedule:
    """Registry builder for ``deepep``."""
    if root is not None:
        raise InputError(f"{collective_name.partition(':')[0]} has no root")
    return moe_baseline(topology, "deepep", collective_name, chunks)


BASELINES: tuple[Baseline, ...] = (
    Baseline(
        "deepep",
        MOE_COLLECTIVES,
        deepep,
        "DeepEP's MoE dispatch/combine: each token crosses to each destination machine once, to the rank "
        "with its local index, then NVLink",
    ),
)
