"""Shared machinery for baselines: routing logical transfers, rounds, verified assembly.

A classic algorithm is written as *phases* of logical transfers (chunk, src, dst) that assume a
direct connection. ``route_phase`` turns one phase into physical sub-steps along shortest paths
(store-and-forward through relays; only for copies), and ``finish`` sets each step's rounds to
the fewest that its link and group loads need, then verifies the result.

>>> from synth.core.topology import Topology, Link
>>> line = Topology("line3", 3, (Link(0, 1, 25.0), Link(1, 2, 25.0), Link(2, 1, 25.0), Link(1, 0, 25.0)))
>>> [[(s.src, s.dst) for s in sub] for sub in route_phase(line, [Transfer(0, 0, 2)])]
[[(0, 1)], [(1, 2)]]
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from synth.core.collective import Collective
from synth.core.errors import InputError
from synth.core.schedule import SEND_ORDER, Schedule, Send, Step, rounds_needed
from synth.core.topology import Topology
from synth.verify import checked


class BaselineNotApplicable(InputError):
    """The algorithm does not apply to this topology/collective (the message says why)."""


@dataclass(frozen=True)
class Transfer:
    """A logical send that may span several links; ``op`` as in Send."""

    chunk: int
    src: int
    dst: int
    op: str = "copy"


def _preds(topology: Topology, dist: Sequence[float], node: int) -> list[int]:
    """The ranks one link before ``node`` on a shortest path from where ``dist`` was measured."""
    return [link.src for link in topology.in_links[node] if dist[link.src] + 1 == dist[link.dst]]


def holders(collective: Collective) -> set[tuple[int, int]]:
    """(rank, chunk) pairs that hold data at the start: the initial ``held`` for routing."""
    return {(rank, c) for c, pre in enumerate(collective.pre) for rank in pre}


def route_phase(
    topology: Topology, transfers: Sequence[Transfer], held: set[tuple[int, int]] | None = None
) -> list[list[Send]]:
    """Expand concurrent logical transfers into sub-steps of physical sends.

    Each transfer follows a shortest path, chosen greedily to spread load over links used at
    the same hop. Copies of one chunk into one rank at one hop are merged (the data is the same).
    Multi-hop reductions are refused: a relay would mix its own contribution in.

    With ``held`` (a set of (rank, chunk), updated in place) routing keeps copies tree-shaped:
    no copy goes to a rank that already holds the chunk, and a rank reached by several paths
    receives the chunk once, at its earliest hop. Use it for non-combining collectives (it
    assumes every copy of a chunk carries the same data), e.g. when a schedule will be dualized.
    """
    paths: list[tuple[Transfer, list[int]]] = []
    load: list[Counter] = []
    group_load: list[Counter] = []
    groups_of = topology.groups_of_link
    dists: dict[int, list[float]] = {}
    preds: dict[tuple[int, int], list[int]] = {}
    for transfer in transfers:
        if topology.has_link(transfer.src, transfer.dst):
            path = [transfer.src, transfer.dst]
        else:
            path = _route(topology, transfer, dists, preds, load, group_load)
        while len(load) < len(path) - 1:
            load.append(Counter())
            group_load.append(Counter())
        for hop, key in enumerate(zip(path, path[1:])):
            load[hop][key] += 1
            for group in groups_of.get(key, ()):
                group_load[hop][group.name] += 1
        paths.append((transfer, path))

    first: dict[tuple[int, int], int] = {}
    if held is not None:
        for transfer, path in paths:
            if transfer.op != "copy":
                continue
            for hop, node in enumerate(path[1:]):
                key = (node, transfer.chunk)
                if key not in held and hop < first.get(key, hop + 1):
                    first[key] = hop
    substeps: list[dict[tuple[int, int], Send]] = [{} for _ in load]
    for transfer, path in paths:
        for hop, (a, b) in enumerate(zip(path, path[1:])):
            key = (b, transfer.chunk)
            if held is not None and transfer.op == "copy" and first.get(key) != hop:
                continue
            existing = substeps[hop].get(key)
            if existing is not None and transfer.op == "copy" and existing.op == "copy":
                continue
            if existing is not None:
                raise BaselineNotApplicable(
                    f"two reductions of chunk {transfer.chunk} meet at rank {b} in one step"
                )
            substeps[hop][key] = Send(transfer.chunk, a, b, transfer.op)
    if held is not None:
        held.update(first)
    return [sorted(sub.values(), key=SEND_ORDER) for sub in substeps]


def _route(topology, transfer, dists, preds, load, group_load) -> list[int]:
    """A shortest path for a transfer without a direct link, hop by hop the one whose link and
    groups (NICs, switch ports) would finish soonest with one more chunk."""
    if transfer.src not in dists:  # every rank's distances at once: a thousand GPUs route thousands of hops
        dists[transfer.src] = topology.hop_distances[transfer.src]
    dist = dists[transfer.src][transfer.dst]
    if dist == math.inf:
        raise BaselineNotApplicable(f"rank {transfer.dst} is unreachable from rank {transfer.src}")
    if transfer.op == "reduce":
        raise BaselineNotApplicable(
            f"needs a direct link {transfer.src}->{transfer.dst} to reduce over (no such link)"
        )
    # walk back from dst, choosing the least-loaded predecessor at each hop
    path = [transfer.dst]
    node = transfer.dst
    groups_of = topology.groups_of_link
    for hop in range(int(dist) - 1, -1, -1):
        used = load[hop] if hop < len(load) else Counter()
        shared = group_load[hop] if hop < len(group_load) else Counter()

        def finish(p: int, node: int = node) -> tuple[float, int]:
            link = topology.link(p, node)
            busiest = (used[(p, node)] + 1) / link.bandwidth
            for group in groups_of.get((p, node), ()):
                busiest = max(busiest, (shared[group.name] + 1) / group.bandwidth)
            return (busiest, p)

        if (transfer.src, node) not in preds:
            preds[(transfer.src, node)] = _preds(topology, dists[transfer.src], node)
        node = min(preds[(transfer.src, node)], key=finish)
        path.append(node)
    path.reverse()
    return path


def phases_to_steps(
    topology: Topology,
    phases: Iterable[Sequence[Transfer]],
    held: Iterable[tuple[int, int]] | None = None,
) -> list[list[Send]]:
    """Route every phase and concatenate the resulting sub-steps.

    ``held`` (e.g. ``holders(collective)``) turns on tree-shaped routing, see ``route_phase``.
    """
    state = None if held is None else set(held)
    steps: list[list[Send]] = []
    for phase in phases:
        steps.extend(route_phase(topology, phase, state))
    return steps


def finish(
    topology: Topology,
    collective: Collective,
    steps: Iterable[Sequence[Send]],
    algorithm: str,
    **meta,
) -> Schedule:
    """Assemble, set rounds, verify; an invalid result is a bug in the baseline and raises."""

    built = tuple(
        Step(tuple(sorted(sends, key=SEND_ORDER)), rounds_needed(topology, sends)) for sends in steps if sends
    )
    header = {"synthesizer": "baseline", "algorithm": algorithm}
    schedule = Schedule(topology, collective, built, {**header, **meta})
    return checked(schedule, f"baseline {algorithm} on {topology.name}")
