"""Shared machinery for baselines: routing logical transfers, rounds, verified assembly.

A classic algorithm is written as *phases* of logical transfers (chunk, src, dst) that assume a
direct connection. ``route_phase`` turns one phase into physical sub-steps along shortest paths
(store-and-forward through relays; only for copies), and ``finish`` sets each step's rounds to
the fewest that its link and group loads need, then verifies the result.

>>> from synth.topology import Topology, Link
>>> line = Topology("line3", 3, (Link(0, 1, 25.0), Link(1, 2, 25.0), Link(2, 1, 25.0), Link(1, 0, 25.0)))
>>> [[(s.src, s.dst) for s in sub] for sub in route_phase(line, [Transfer(0, 0, 2)])]
[[(0, 1)], [(1, 2)]]
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass
from typing import Iterable, Sequence

from synth.collective import Collective
from synth.errors import InputError
from synth.schedule import Schedule, Send, Step
from synth.topology import Topology


class BaselineNotApplicable(InputError):
    """The algorithm does not apply to this topology/collective (the message says why)."""


@dataclass(frozen=True)
class Transfer:
    """A logical send that may span several links; ``op`` as in Send."""

    chunk: int
    src: int
    dst: int
    op: str = "copy"


def shortest_paths_from(topology: Topology, src: int) -> list[list[int]]:
    """For every rank, the predecessors on shortest paths from ``src`` (BFS DAG)."""
    dist = topology.hop_distances[src]
    preds: list[list[int]] = [[] for _ in range(topology.ranks)]
    for link in topology.links:
        if dist[link.src] + 1 == dist[link.dst]:
            preds[link.dst].append(link.src)
    return preds


def route_phase(topology: Topology, transfers: Sequence[Transfer]) -> list[list[Send]]:
    """Expand concurrent logical transfers into sub-steps of physical sends.

    Each transfer follows a shortest path, chosen greedily to spread load over links used at
    the same hop. Copies of one chunk into one rank at one hop are merged (the data is the same).
    Multi-hop reductions are refused: a relay would mix its own contribution in.
    """
    hops: list[Counter] = []
    substeps: list[dict[tuple[int, int], Send]] = []
    pred_cache: dict[int, list[list[int]]] = {}
    for transfer in transfers:
        dist = topology.hop_distances[transfer.src][transfer.dst]
        if dist == math.inf:
            raise BaselineNotApplicable(f"rank {transfer.dst} is unreachable from rank {transfer.src}")
        if transfer.op == "reduce" and dist > 1:
            raise BaselineNotApplicable(
                f"needs a direct link {transfer.src}->{transfer.dst} to reduce over (no such link)"
            )
        if transfer.src not in pred_cache:
            pred_cache[transfer.src] = shortest_paths_from(topology, transfer.src)
        preds = pred_cache[transfer.src]
        # walk back from dst, choosing the least-loaded predecessor at each hop
        path = [transfer.dst]
        node = transfer.dst
        for hop in range(int(dist) - 1, -1, -1):
            while len(hops) <= hop:
                hops.append(Counter())
                substeps.append({})
            choices = preds[node]
            best = min(choices, key=lambda p: (hops[hop][(p, node)], p))
            path.append(best)
            node = best
        path.reverse()
        for hop, (a, b) in enumerate(zip(path, path[1:])):
            key = (b, transfer.chunk)
            existing = substeps[hop].get(key)
            if existing is not None and transfer.op == "copy" and existing.op == "copy":
                continue
            if existing is not None:
                raise BaselineNotApplicable(
                    f"two reductions of chunk {transfer.chunk} meet at rank {b} in one step"
                )
            substeps[hop][key] = Send(transfer.chunk, a, b, transfer.op)
            hops[hop][(a, b)] += 1
    return [sorted(sub.values()) for sub in substeps]


def phases_to_steps(topology: Topology, phases: Iterable[Sequence[Transfer]]) -> list[list[Send]]:
    """Route every phase and concatenate the resulting sub-steps."""
    steps: list[list[Send]] = []
    for phase in phases:
        steps.extend(route_phase(topology, phase))
    return steps


def rounds_needed(topology: Topology, sends: Sequence[Send]) -> int | None:
    """Fewest rounds for which the sends fit every link and group capacity (None: no rounds)."""
    if not topology.rounds_apply:
        return None
    per_link = Counter((s.src, s.dst) for s in sends)
    need = 1
    for key, count in per_link.items():
        capacity = topology.link_capacity(topology.link(*key))
        need = max(need, -(-count // capacity))
    for group in topology.groups:
        count = sum(per_link.get(key, 0) for key in group.links)
        if count:
            need = max(need, -(-count // topology.group_capacity(group)))
    return need


def finish(
    topology: Topology,
    collective: Collective,
    steps: Iterable[Sequence[Send]],
    algorithm: str,
    **meta,
) -> Schedule:
    """Assemble, set rounds, verify; an invalid result is a bug in the baseline and raises."""
    from synth.verify import verify

    built = tuple(
        Step(tuple(sorted(sends)), rounds_needed(topology, sends)) for sends in steps if sends
    )
    schedule = Schedule(topology, collective, built, {"synthesizer": "baseline", "algorithm": algorithm, **meta})
    violations = verify(schedule)
    if violations:
        raise RuntimeError(
            f"baseline {algorithm} built an invalid schedule on {topology.name}: {violations[0]}"
        )
    return schedule
