"""Lowering, step 1b: a schedule's switch entries as the switch operations to lower (synth.lower.plan).

Entries are taken one to one (DESIGN.md: the sum of the srcs replaces every dst's copy), with two
rewrites that keep what every rank holds whenever anything reads it, so a Program and an MSCCL++
plan can run them the way NVLS does (reference/in-network.md 2.7):

- **Fusion.** A reduce (srcs S, one dst h in S) followed later by a multicast of the result from h
  to every other rank of S (h itself may be among the dsts) becomes one reduce-multicast (S -> S,
  h first: MSCCL++'s ``glres``) at the reduce's step, when nothing else writes a rank of S's copy
  of the chunk in the reduce's step, nothing reads another rank of S's copy or writes any until
  the multicast, which is then dropped. The other ranks get the sum earlier, but nobody looks
  before the multicast would have written it.
- **A multicast's own copy.** A multicast from s to dsts without s also writes s's own copy (its
  own value: nothing changes) when nothing else writes s's copy in that step: a switch channel's
  group is every rank it writes, the src included.

>>> from synth.baselines import registry
>>> from synth.core.library import resolve_topology
>>> nvls = registry()["nccl_nvls"].build(resolve_topology("h100"), "allreduce", None, 1)
>>> moves = switch_moves(nvls)
>>> [len(step) for step in moves], moves[0][3].srcs, moves[0][3].dsts
([8, 0], (0, 1, 2, 3, 4, 5, 6, 7), (3, 0, 1, 2, 4, 5, 6, 7))
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from synth.core.schedule import Schedule, SwitchSend


@dataclass(frozen=True)
class SwitchMove:
    """One switch operation to lower at ``step``: ``chunk`` read on every rank of ``srcs``
    (summed) and written over every rank of ``dsts``; ``fused``: a reduce and the multicast of
    its result (see the module)."""

    step: int
    chunk: int
    switch: str
    srcs: tuple[int, ...]
    dsts: tuple[int, ...]
    fused: bool = False


def _events(schedule: Schedule) -> dict[int, list[tuple[int, int, str, object]]]:
    """chunk -> (step, rank, "read" | "write", entry) for every send and switch entry."""
    out: dict[int, list] = defaultdict(list)
    for t, step in enumerate(schedule.steps):
        for s in step.sends:
            out[s.chunk] += [(t, s.src, "read", s), (t, s.dst, "write", s)]
        for e in step.switches:
            out[e.chunk] += [(t, r, "read", e) for r in e.srcs] + [(t, r, "write", e) for r in e.dsts]
    return out


def _multicast_after(entry: SwitchSend, t: int, events: list) -> tuple[int, SwitchSend] | None:
    """(step, the multicast) the reduce ``entry`` at step t fuses with, or None (see the module)."""
    group = set(entry.srcs)
    head = entry.dsts[0]
    if len(entry.srcs) < 2 or len(entry.dsts) != 1 or head not in group:
        return None
    later = sorted((e for e in events if e[0] > t and e[1] in group), key=lambda e: e[0])
    if any(e[0] == t and e[1] in group and e[2] == "write" and e[3] is not entry for e in events):
        return None
    for step, rank, kind, other in later:
        if isinstance(other, SwitchSend) and other.srcs == (head,) and rank == head and kind == "read":
            if set(other.dsts) | {head} != group:
                return None
            quiet = all(e[3] is other or (e[1] == head and e[2] == "read")
                        for e in later if e[0] <= step)
            return (step, other) if quiet else None
        if kind == "write" or rank != head:
            return None
    return None


def switch_moves(schedule: Schedule) -> list[list[SwitchMove]]:
    """Per step, the switch operations to lower (see the module)."""
    if not schedule.switch_count:
        return [[] for _ in schedule.steps]
    events = _events(schedule)
    fused: dict[int, tuple[int, SwitchSend]] = {}  # id(reduce entry) -> (step, its multicast)
    dropped: set[int] = set()
    for t, step in enumerate(schedule.steps):
        for entry in step.switches:
            found = _multicast_after(entry, t, events[entry.chunk])
            if found is not None and id(found[1]) not in dropped:
                fused[id(entry)] = found
                dropped.add(id(found[1]))
    moves: list[list[SwitchMove]] = [[] for _ in schedule.steps]
    for t, step in enumerate(schedule.steps):
        for entry in step.switches:
            if id(entry) in dropped:
                continue
            if id(entry) in fused:
                head = entry.dsts[0]
                dsts = (head, *(r for r in entry.srcs if r != head))
                moves[t].append(SwitchMove(t, entry.chunk, entry.switch, entry.srcs, dsts, True))
            else:
                moves[t].append(SwitchMove(t, entry.chunk, entry.switch, entry.srcs, _own_copy(entry, t, events)))
    return moves


def _own_copy(entry: SwitchSend, t: int, events: dict) -> tuple[int, ...]:
    """A multicast's dsts, with its src added when nothing else writes the src's copy in step t."""
    if len(entry.srcs) != 1 or entry.srcs[0] in entry.dsts:
        return entry.dsts
    src = entry.srcs[0]
    busy = any(e[0] == t and e[1] == src and e[2] == "write" for e in events[entry.chunk])
    return entry.dsts if busy else (*entry.dsts, src)
