"""Re-solving windows of a schedule's steps: one step fewer, never a claim about a budget."""

from __future__ import annotations

import pytest

from synth.core.library import resolve_topology
from synth.core.schedule import Status
from synth.smt.encoding import SmtInstance
from synth.smt.session import SmtSession
from synth.smt.windows import fewer_steps
from synth.verify import verify


@pytest.mark.parametrize("topo_name, name, root, budget, split", [
    ("hypercube:3", "allgather", None, (5, 2), (1, 1, 1, 1, 1)),
    ("ring:6", "broadcast", 0, (5, 2), (1, 1, 1, 1, 1)),
    ("dgx1", "reduce_scatter", None, (4, 2), (1, 1, 1, 1)),
])
def test_a_slow_schedule_loses_a_step_and_stays_valid(topo_name, name, root, budget, split):
    """A schedule with more steps than its rounds need (one round a step) comes back with one
    step fewer, no more rounds, the same collective, and verifies (duals on their own side)."""
    rounds, chunks = budget
    session = SmtSession(resolve_topology(topo_name), name, root)
    found = session.solve(len(split), rounds, chunks, time_limit=60)
    assert found.status == Status.SOLVED
    shorter = session.fewer_steps(found.schedule, time_limit=60)
    assert shorter.status == Status.SOLVED, shorter.message
    schedule = shorter.schedule
    assert verify(schedule) == [] and len(schedule.steps) == len(found.schedule.steps) - 1
    assert schedule.total_rounds <= found.schedule.total_rounds
    assert schedule.collective == found.schedule.collective and schedule.topology == found.schedule.topology


def test_no_window_below_the_hop_distance_is_a_timeout_not_a_proof():
    """uring:4 allgather needs 3 steps: from 3 steps no window fits in 2, and the answer is
    "unknown" (a window's no is about the schedule's neighbourhood only)."""
    from synth.core.collectives import allgather

    topology = resolve_topology("uring:4")
    three = SmtInstance(topology, allgather(4), 3, 3).solve(3).schedule
    result = fewer_steps(SmtInstance(topology, allgather(4), 2, 3), three, width=2, time_limit=10)
    assert result.status == Status.TIMEOUT and result.schedule is None


def test_kept_sends_outside_the_window_stay_in_the_shorter_schedule():
    from collections import Counter

    from synth.core.collectives import allgather

    topology = resolve_topology("ring:6")
    slow = SmtInstance(topology, allgather(6), 6, 6).solve_split((1,) * 6).schedule
    result = fewer_steps(SmtInstance(topology, allgather(6), 5, 6), slow, width=3, time_limit=30)
    assert result.status == Status.SOLVED and verify(result.schedule) == []
    start = int(result.message.split()[1].split("..")[0])
    before, after = slow.steps[:start - 1], slow.steps[start + 2:]
    shorter = result.schedule.steps
    for old, new in zip(before + after, shorter[:start - 1] + shorter[start + 1:]):
        assert Counter(old.sends) - Counter(new.sends) == Counter()


def test_a_restricted_schedule_is_invariant_and_a_lopsided_one_is_not():
    from synth.core.schedule import Schedule, Step
    from synth.core.symmetry import schedule_invariant, search_symmetries

    session = SmtSession(resolve_topology("ring:4"), "allgather", None)
    syms = tuple(search_symmetries(session.topology, session.collective(1)))
    found = SmtInstance(session.topology, session.collective(1), 2, 2, symmetries=syms).solve(2).schedule
    assert len(syms) > 1 and schedule_invariant(found, syms)
    first, *rest = found.steps
    lopsided = Schedule(found.topology, found.collective, (Step(first.sends[1:], first.rounds), *rest))
    assert not schedule_invariant(lopsided, syms)
