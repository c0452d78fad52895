"""``nccl``: at a size, the fastest option NCCL has (algorithm x protocol) in our cost model.

NCCL chooses per collective between a few algorithms (``nccl-model.md``): allreduce Ring or
Tree; allgather and reduce-scatter Ring, or PAT with one GPU per machine; broadcast and reduce
Ring; alltoall, gather and scatter are point-to-point sends to every peer (our ``direct``).
Each is built as a verified schedule (``nccl_ring``, ``nccl_tree``, ``nccl_pat``, ``direct``;
the sized ones tuned to the size) and costed at its best protocol (Simple, LL128, LL); the
fastest is the best NCCL could do, which is what every speedup is measured against. Channels:
the rings already use every link unit and NIC, and in the step model fewer channels never help,
so only the full channel plan is costed. On one NVSwitch domain with NVLink SHARP, allreduce
also has NVLS (``nccl_nvls``: switch entries, Simple only), and across such domains NVLSTree
(``nccl_nvls_tree``). CollNet is in the runtime model (``synth.measure.runtime``) only.

This is the choice in the contract model with NCCL's protocols. Under a calibration the choice
is ``synth.tuner.choice.nccl_schedule`` (the one ``synth tune`` writes: these schedules and the
runtime model together; ``synth baseline --algo nccl --calibration CAL`` calls it).

Beside it, the meta records what NCCL's own tuning model (``nccl_model``) predicts for every
(algorithm, protocol) it would consider, and which one its tuner would pick.

>>> from synth.core.library import resolve_topology
>>> s = build(resolve_topology("dgx1"), "allreduce", None, None, size=1024)
>>> s.meta["algorithm"], s.meta["nccl_algorithm"], s.meta["protocol"]
('nccl', 'nccl_ring', 'll')
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from synth.baselines import Baseline
from synth.baselines.common import BaselineNotApplicable
from synth.baselines.nccl_model import PROTOCOLS, Setup, applies, predicted_us
from synth.core.errors import InputError
from synth.core.schedule import Schedule
from synth.core.topology import Topology

OPTIONS = {  # collective -> the algorithm baselines NCCL chooses between
    "allreduce": ("nccl_ring", "nccl_tree", "nccl_nvls", "nccl_nvls_tree"),
    "allgather": ("nccl_ring", "nccl_pat"),
    "reduce_scatter": ("nccl_ring", "nccl_pat"),
    "broadcast": ("nccl_ring",),
    "reduce": ("nccl_ring",),
    "alltoall": ("direct",),
    "alltoallv": ("direct",),
    "gather": ("direct",),
    "scatter": ("direct",),
}
# our baseline -> NCCL's algorithm
MODEL_NAMES = {"nccl_ring": "ring", "nccl_tree": "tree", "nccl_pat": "pat", "nccl_nvls": "nvls",
               "nccl_nvls_tree": "nvls_tree"}
DEFAULT_SIZE = 1024**3


def options(topology: Topology, collective: str, root: int | None, size: float) -> list[tuple[str, Schedule]]:
    """(algorithm, schedule) for every option NCCL has here, each built for ``size``."""
    from synth.baselines import registry

    table = registry()
    built = []
    for name in OPTIONS.get(collective.partition(":")[0], ()):
        try:
            built.append((name, table[name].make(topology, collective, root, None, size)))
        except BaselineNotApplicable:
            continue
    return built


def variants(topology: Topology, collective: str, sizes: list[int],
             skipped: tuple[str, ...] = ()) -> list[tuple[str, Schedule]]:
    """(label, schedule) for every schedule NCCL would run somewhere on ``sizes``: each algorithm of
    ``OPTIONS`` that applies (less those ``skipped``), in each variant a size of the grid selects,
    built once with that chunking. A sized algorithm's label says ``pieces=N`` (NCCL's pipelining
    depth per channel, not the chunks per rank of a C column)."""
    from synth.baselines import registry

    out = []
    for name in OPTIONS.get(collective.partition(":")[0], ()):
        if name in skipped:
            continue
        entry = registry()[name]
        try:
            picks = entry.choices(topology, collective, None, sizes) if entry.choices else None
            if not picks:
                out.append((entry.name, entry.make(topology, collective)))
                continue
            out += [(f"{entry.name} pieces={c}", entry.make(topology, collective, None, c))
                    for c in sorted(set(picks.values()))]
        except BaselineNotApplicable:
            continue
    return out


def build(topology: Topology, collective_name: str, root: int | None, chunks: int | None,
          size: float | None = None) -> Schedule:
    """The fastest NCCL option at ``size`` (1 GiB when None), at its best protocol; see the module."""
    from synth.cost import best_protocol

    kind = collective_name.partition(":")[0]
    if kind not in OPTIONS:
        raise BaselineNotApplicable(f"nccl: NCCL has no algorithm for {collective_name}")
    if chunks is not None:
        raise InputError("nccl chooses its own chunking per algorithm; drop --chunks (or pick the algorithm)")
    at = DEFAULT_SIZE if size is None else size
    costed = []
    for name, schedule in options(topology, collective_name, root, at):
        protocol, took = best_protocol(schedule, at)
        costed.append((took, name, protocol, schedule))
    if not costed:
        raise BaselineNotApplicable(f"nccl: none of {', '.join(OPTIONS[kind])} applies to {collective_name} "
                                    f"on {topology.name}")
    took, name, protocol, schedule = min(costed, key=lambda item: (item[0], item[1]))
    meta: dict[str, Any] = {
        "algorithm": "nccl", "nccl_algorithm": name, "protocol": protocol, "size": at,
        "time_us": took,
        "options": [{"algorithm": n, "protocol": p, "time_us": t} for t, n, p, _ in sorted(costed, key=lambda c: c[1])],
    }
    meta.update(_tuning(topology, kind, name, protocol, costed, at))
    return schedule.with_meta(**meta)


def nccl_setup(topology: Topology, collective: str, channels: int) -> tuple[Setup, str]:
    """What NCCL's tuning model needs, read off the topology, and a note on what was assumed."""
    machines = max(1, topology.machine_count)
    mof = topology.machine_of
    kinds = Counter(l.kind for l in topology.links if mof[l.src] == mof[l.dst])
    intra, note = (kinds.most_common(1)[0][0] if kinds else None), ""
    if intra is None:
        intra, note = "nvlink", "links inside machines have no kind: NCCL's NVLink latencies assumed"
    per_channel = topology.min_link_bandwidth  # the unit every channel was packed with (a NIC across machines)
    return Setup(collective, topology.ranks, machines, channels, per_channel, intra), note


def _tuning(topology: Topology, collective: str, chosen: str, protocol: str, costed: list,
            size: float) -> dict[str, Any]:
    """NCCL's own prediction for each (algorithm, protocol) it considers, and its tuner's pick."""
    if collective not in ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce"):
        return {"nccl_model": "NCCL's tuning model covers collectives, not point-to-point sends"}
    channels = next((s.meta.get("channels") for _, n, _, s in costed if n == "nccl_ring"), None) or 1
    setup, note = nccl_setup(topology, collective, channels)
    predictions = []
    for _, name, _, _ in costed:
        algo = MODEL_NAMES.get(name)
        for option in PROTOCOLS:  # not ``protocol``: that names the chosen one, compared below
            if algo is not None and applies(setup, algo, option):
                predictions.append({"algorithm": name, "protocol": option,
                                    "predicted_us": predicted_us(setup, algo, option, size)})
    if not predictions:
        return {}
    pick = min(predictions, key=lambda p: p["predicted_us"])
    chosen_prediction = next((p["predicted_us"] for p in predictions
                              if p["algorithm"] == chosen and p["protocol"] == protocol),
                             None)
    out: dict[str, Any] = {"nccl_model": {"channels": setup.channels, "channel_gbps": setup.channel_gbps,
                                          "intra_kind": setup.intra_kind, "predictions": predictions,
                                          "tuner_pick": pick}}
    if chosen_prediction is not None:
        out["nccl_model"]["chosen_predicted_us"] = chosen_prediction
    if note:
        out["nccl_model"]["note"] = note
    return out


NCCL = Baseline(
    name="nccl",
    collectives=frozenset(OPTIONS),
    build=build,
    description="the fastest NCCL option at the size (ring/tree/PAT/NVLS/NVLSTree/p2p x Simple/LL128/LL) "
                "in our cost model",
    sized=True,
)

BASELINES: tuple[Baseline, ...] = (NCCL,)
