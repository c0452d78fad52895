"""The array replay (synth.verify.is_valid) says "valid" exactly when the exact replay finds nothing."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.core.library import resolve_topology
from synth.milp.sketch import default_sketch
from synth.milp.synthesize import synthesize
from synth.verify import is_valid, verify
from tests.schedule_strategies import MUTATIONS, mutate, valid_schedules


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_schedules())
def test_valid_schedules_are_valid(schedule):
    assert verify(schedule) == []
    assert is_valid(schedule) is True


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_schedules(), st.sampled_from(MUTATIONS), st.integers(0, 2**32 - 1))
def test_mutations_get_the_same_verdict(schedule, kind, seed):
    mutated = mutate(schedule, kind, random.Random(seed))
    assert is_valid(mutated) is (verify(mutated) == [])


def test_big_schedules_take_the_array_replay_and_a_flaw_still_gets_its_message(monkeypatch):
    """h100x4 allgather from the router (7936 sends; the threshold lowered below that): valid
    by the array replay; with one send dropped the exact replay gives its message."""
    import synth.verify

    monkeypatch.setattr(synth.verify, "ARRAY_REPLAY_SENDS", 1000)
    topo = resolve_topology("h100x4")
    sketch, _ = default_sketch(topo, "allgather", 1 << 30)
    schedule = synthesize(topo, "allgather", sketch).schedule
    assert is_valid(schedule) is True and verify(schedule) == []
    steps = list(schedule.steps)
    steps[-1] = type(steps[-1])(steps[-1].sends[1:], steps[-1].rounds)
    broken = type(schedule)(schedule.topology, schedule.collective, tuple(steps), schedule.meta)
    assert is_valid(broken) is False
    problems = verify(broken)
    assert problems and problems[0].kind == "postcondition"
