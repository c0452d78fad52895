"""NCCL's NVLS algorithm (NVLink SHARP) on one NVSwitch domain, as a verified schedule with
switch entries (reference/in-network.md sections 2.1, 2.2 and 3).

Every GPU is the head of 1/n of the buffer. Allreduce, per slice with head h: one reduce entry
(every port's slice read and summed by the switch, delivered to h: ``multimem.ld_reduce``), then
one multicast entry (h's result written to every port, h's own included, as NCCL's broadcast
slot is: ``multimem.st``); each port carries (n+1)/n of the buffer each way. The buffer is cut
into ``pieces`` slices per head and pipelined: step t reduces the t-th slices while the
(t-1)-th are multicast. Allgather: every rank multicasts its shard to every port (out M/n, in M);
reduce-scatter: every rank's shard reduced to it (out M, in M/n).

The builder is *sized*: ``pieces`` (1, 2, 4, ... 256) is the count fastest at ``size`` in the
step model (1 GiB when no size is given); ``chunks`` fixes it instead. It applies where one
switch with reduce and multicast has every rank as a port and the ranks are one machine (NCCL
runs NVLS across machines only as NVLSTree or with CollNet).

>>> from synth.core.library import resolve_topology
>>> s = build(resolve_topology("h100"), "allreduce", None, 2)
>>> len(s.steps), s.switch_count, s.steps[1].rounds
(3, 32, 9)
"""

from __future__ import annotations

from synth.baselines import Baseline
from synth.baselines.common import BaselineNotApplicable
from synth.core import collectives
from synth.core.schedule import Schedule, Step, SwitchSend, rounds_needed
from synth.core.topology import Switch, Topology
from synth.verify import checked

COLLECTIVES = frozenset({"allreduce", "allgather", "reduce_scatter"})
PIECES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_SIZE = 1024**3


def nvls_switch(topology: Topology) -> Switch:
    """The switch NVLS runs on: reduce and multicast, every rank a port, one machine; else
    BaselineNotApplicable with the reason."""
    if topology.machine_count > 1:
        raise BaselineNotApplicable(f"nccl_nvls runs on one NVLink domain; {topology.name} has "
                                    f"{topology.machine_count} machines (NCCL runs NVLSTree there)")
    for switch in topology.switches:
        if switch.reduce and switch.multicast and len(switch.ranks) == topology.ranks:
            return switch
    raise BaselineNotApplicable(f"nccl_nvls needs a switch with reduce and multicast on every rank; "
                                f"{topology.name} has none (NVLS needs NVSwitch on Hopper or newer)")


def build(topology: Topology, collective_name: str, root: int | None, chunks: int | None,
          size: float | None = None) -> Schedule:
    """NCCL's NVLS schedule for ``collective_name`` (verified); see the module."""
    if collective_name not in COLLECTIVES:
        raise BaselineNotApplicable(f"nccl_nvls builds {', '.join(sorted(COLLECTIVES))}, not {collective_name}")
    if root is not None:
        raise BaselineNotApplicable(f"{collective_name} takes no root")
    switch = nvls_switch(topology)
    if chunks is not None:
        return _built(topology, switch, collective_name, chunks)
    if collective_name != "allreduce":
        return _built(topology, switch, collective_name, 1)
    return _fastest(topology, switch, DEFAULT_SIZE if size is None else size)


def _fastest(topology: Topology, switch: Switch, size: float) -> Schedule:
    built = _every_depth(topology, switch)
    return built[_fastest_depth(built, size)]


def _every_depth(topology: Topology, switch: Switch) -> dict:
    """{pieces: the allreduce pipelined that deep} for every depth in PIECES."""
    return {pieces: _built(topology, switch, "allreduce", pieces) for pieces in PIECES}


def _fastest_depth(built: dict, size: float) -> int:
    """The depth whose allreduce is fastest at ``size`` (the shallower on a tie)."""
    from synth.cost import step_time_us

    return min(built, key=lambda pieces: step_time_us(built[pieces], size))


def choices(topology: Topology, collective: str, root, sizes) -> dict | None:
    """{size: pieces build picks} for allreduce (None for the others: one variant)."""
    if collective != "allreduce":
        return None
    built = _every_depth(topology, nvls_switch(topology))
    return {size: _fastest_depth(built, size) for size in sizes}


def _built(topology: Topology, switch: Switch, name: str, pieces: int) -> Schedule:
    n = topology.ranks
    everyone = tuple(range(n))
    make = getattr(collectives, name)
    coll = make(n, pieces)
    if name == "allgather":
        steps = [[SwitchSend(c, switch.name, (c // pieces,), everyone) for c in range(coll.chunks)]]
    elif name == "reduce_scatter":
        steps = [[SwitchSend(c, switch.name, everyone, (c // pieces,)) for c in range(coll.chunks)]]
    else:
        steps = _allreduce_steps(switch.name, n, pieces)
    built = tuple(Step((), rounds_needed(topology, (), entries), tuple(entries)) for entries in steps)
    meta = {"synthesizer": "baseline", "algorithm": "nccl_nvls", "switch": switch.name, "pieces": pieces}
    return checked(Schedule(topology, coll, built, meta), f"baseline nccl_nvls on {topology.name}")


def _allreduce_steps(switch: str, n: int, pieces: int) -> list[list[SwitchSend]]:
    """Slice t of head h is chunk t*n + h: reduced to h in step t, multicast in step t+1."""
    everyone = tuple(range(n))
    steps: list[list[SwitchSend]] = [[] for _ in range(pieces + 1)]
    for t in range(pieces):
        for head in range(n):
            chunk = t * n + head
            steps[t].append(SwitchSend(chunk, switch, everyone, (head,)))
            steps[t + 1].append(SwitchSend(chunk, switch, (head,), everyone))
    return steps


BASELINES: tuple[Baseline, ...] = (
    Baseline(
        name="nccl_nvls",
        collectives=COLLECTIVES,
        build=build,
        description="NCCL's NVLS: the NVSwitch reduces each head's slice and multicasts it (switch entries)",
        sized=True,
        choices=choices,
    ),
)
