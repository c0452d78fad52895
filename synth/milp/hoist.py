"""Hoisting stage of the MILP router: move alpha-critical sends into earlier steps.

The ordering fills rounds and the timing stage merges consecutive ones, but a step that
carries a single slow-alpha send (a NIC crossing) still pays that alpha. When the data was
available earlier, moving every send of a step that rides its slowest-alpha links into earlier
steps (each to the earliest step where its sender already holds the chunk and nothing else
writes the destination there) can drop that alpha from the step at a small cost in bandwidth
elsewhere. A move is kept only when the whole schedule gets faster at the size in the step
model at its best protocol (what a runtime would run: LL halves bandwidth, Simple multiplies
alphas, so a move that pays in the protocol-free model can lose under both); rounds are
recounted for the steps that change; the result is verified.

Only non-combining schedules without switch entries are hoisted (a copy moved earlier still
carries the same value); the router hoists reductions through their dual, which is
non-combining.

>>> from synth.core.collectives import broadcast
>>> from synth.core.topology import Link, Topology
>>> fork = Topology("fork", 3, (Link(0, 1, 25.0, 0.5), Link(0, 2, 25.0, 3.0)))
>>> two = Schedule(fork, broadcast(3, 0, 2), (Step((Send(0, 0, 1), Send(0, 0, 2))),
...                                           Step((Send(1, 0, 1), Send(1, 0, 2)))))
>>> hoisted = hoist_sends(two, 1024)  # the slow 0->2 send of chunk 1 joins step 0
>>> [[(s.chunk, s.dst) for s in step.sends] for step in hoisted.steps]
[[(0, 1), (0, 2), (1, 2)], [(1, 1)]]
"""

from __future__ import annotations

from collections import defaultdict

from synth.core.orbits import Quotient
from synth.core.schedule import SEND_ORDER, Schedule, Send, Step, rounds_needed
from synth.cost import step_loads
from synth.milp.orbit_cost import orbit_step_loads
from synth.verify import checked

_TOL = 1e-9


def hoist_sends(schedule: Schedule, size: float, quotient: Quotient | None = None) -> Schedule:
    """``schedule`` with alpha-critical sends moved earlier where that is faster at ``size``.

    With a ``quotient``, ``schedule`` holds the representative sends of a symmetric schedule:
    a representative moves with all its images (legal in the full schedule exactly when it is
    for the representative) and times are the full schedule's."""
    if schedule.collective.combining or len(schedule.steps) < 2 or schedule.switch_count:
        return schedule  # switch entries stay where the ordering put them
    steps = [list(step.sends) for step in schedule.steps]
    best = _time(schedule, steps, size, quotient)
    state = _available(schedule, steps)  # recounted only when a move is kept
    moved = 0
    for k in range(1, len(steps)):
        for group in _critical_groups(schedule, steps[k]):
            trial = _moved(steps, state, k, group)
            if trial is None:
                continue
            took = _time(schedule, trial, size, quotient)
            if took < best - _TOL * max(1.0, best):
                steps, best, moved = trial, took, moved + len(group)
                state = _available(schedule, steps)
    if not moved:
        return schedule
    return checked(_rebuild(schedule, steps, quotient).with_meta(hoisted=moved), "hoisting")


def _time(schedule: Schedule, steps: list[list[Send]], size: float, quotient: Quotient | None) -> float:
    """Step-model time at ``size`` under the fastest runtime protocol there."""
    trial = Schedule(schedule.topology, schedule.collective, tuple(Step(tuple(s), None) for s in steps if s))
    loads = step_loads(trial) if quotient is None else orbit_step_loads(quotient, trial)
    return loads.best(size)[1]


def _critical_groups(schedule: Schedule, sends: list[Send]) -> list[list[Send]]:
    """The step's sends on its slowest-alpha links, then those on its two slowest alphas."""
    link = schedule.topology.link
    alphas = sorted({link(s.src, s.dst).alpha for s in sends}, reverse=True)
    groups = []
    for cut in alphas[:2]:
        group = [s for s in sends if link(s.src, s.dst).alpha >= cut]
        if len(group) < len(sends):
            groups.append(group)
    return groups


def _available(schedule: Schedule, steps: list[list[Send]]) -> tuple[dict, dict]:
    """(first step at whose start (rank, chunk) is held, steps in which (rank, chunk) is written)."""
    held: dict[tuple[int, int], int] = {}
    for chunk, ranks in enumerate(schedule.collective.pre):
        for rank in ranks:
            held[(rank, chunk)] = 0
    written: dict[tuple[int, int], list[int]] = defaultdict(list)
    for index, sends in enumerate(steps):
        for s in sends:
            written[(s.dst, s.chunk)].append(index)
            held.setdefault((s.dst, s.chunk), index + 1)
    return held, written


def _moved(steps: list[list[Send]], state: tuple[dict, dict], k: int, group: list[Send]) -> list[list[Send]] | None:
    """The steps with every send of ``group`` (all in step k) moved to its earliest legal step
    before k, or None when some send cannot move; ``state`` is ``_available`` of ``steps``."""
    held, written = state
    trial = [list(sends) for sends in steps]
    taken = set(map(id, group))
    trial[k] = [s for s in trial[k] if id(s) not in taken]
    for send in group:
        start = held.get((send.src, send.chunk))
        if start is None or start >= k:
            return None
        if any(w != k for w in written.get((send.dst, send.chunk), ())):
            return None  # the destination is written elsewhere too: moving could reorder writes
        if held.get((send.dst, send.chunk), k + 1) < k + 1:
            return None
        trial[start].append(send)
    return trial


def _rebuild(schedule: Schedule, steps: list[list[Send]], quotient: Quotient | None) -> Schedule:
    topo = schedule.topology
    rounds = (lambda s: rounds_needed(topo, s)) if quotient is None else quotient.rounds_needed
    rebuilt = tuple(Step(tuple(sorted(s, key=SEND_ORDER)), rounds(s))
                    for s in steps if s)
    return Schedule(topo, schedule.collective, rebuilt, schedule.meta)
