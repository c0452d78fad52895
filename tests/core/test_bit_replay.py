"""The bit-set replay (synth.core.bit_replay.bits_valid) says "valid" exactly when the exact replay
finds nothing: random switch schedules and their mutations, random point-to-point schedules and
theirs, mutations of NCCL's NVLS as a schedule; and a big schedule takes it in ``verify``."""

from __future__ import annotations

import functools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.baselines import build_baseline
from synth.core.bit_replay import bits_valid
from synth.core.library import resolve_topology
from synth.core.schedule import Schedule, Step
from synth.verify import verify
from tests.schedule_strategies import MUTATIONS, mutate, valid_schedules
from tests.switch_strategies import SWITCH_MUTATIONS, mutate_switches, switch_schedules

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MUTATION_SETTINGS = settings(SETTINGS, max_examples=300)


@SETTINGS
@given(switch_schedules())
def test_valid_switch_schedules_are_valid(schedule):
    assert bits_valid(schedule) is True


@MUTATION_SETTINGS
@given(switch_schedules(), st.sampled_from(SWITCH_MUTATIONS), st.integers(0, 2**32 - 1))
def test_switch_mutations_get_the_same_verdict(schedule, kind, seed):
    mutated = mutate_switches(schedule, kind, random.Random(seed))
    assert bits_valid(mutated) is (verify(mutated) == []), kind


@SETTINGS
@given(valid_schedules())
def test_valid_point_to_point_schedules_are_valid(schedule):
    assert bits_valid(schedule) is True


@MUTATION_SETTINGS
@given(valid_schedules(), st.sampled_from(MUTATIONS), st.integers(0, 2**32 - 1))
def test_point_to_point_mutations_get_the_same_verdict(schedule, kind, seed):
    mutated = mutate(schedule, kind, random.Random(seed))
    assert bits_valid(mutated) is (verify(mutated) == []), kind


@functools.cache
def nvls(collective: str, chunks: int) -> Schedule:
    return build_baseline(resolve_topology("h100"), "nccl_nvls", collective, chunks=chunks)


@SETTINGS
@given(st.sampled_from([(c, k) for c in ("allreduce", "allgather", "reduce_scatter") for k in (1, 2)]),
       st.sampled_from(SWITCH_MUTATIONS), st.integers(0, 2**32 - 1))
def test_nvls_mutations_get_the_same_verdict(case, kind, seed):
    mutated = mutate_switches(nvls(*case), kind, random.Random(seed))
    assert bits_valid(mutated) is (verify(mutated) == []), kind


@pytest.mark.parametrize("collective", ["allreduce", "allgather"])
def test_big_switch_schedules_take_it_and_a_flaw_still_gets_its_message(monkeypatch, collective):
    """NVLS on h100 (the threshold lowered below its size): valid by the bit-set replay; with the
    last step's last entry dropped, the exact replay names what is missing."""
    import synth.verify

    calls = []
    monkeypatch.setattr(synth.verify, "ARRAY_REPLAY_SENDS", 10)
    monkeypatch.setattr(synth.verify, "bits_valid", lambda s: calls.append(s) or bits_valid(s))
    schedule = nvls(collective, 2)
    assert verify(schedule) == [] and calls == [schedule]
    steps = list(schedule.steps)
    last = steps[-1]
    steps[-1] = Step(last.sends, last.rounds, last.switches[:-1])
    broken = Schedule(schedule.topology, schedule.collective, tuple(steps))
    problems = verify(broken)
    assert problems and problems[0].kind == "postcondition"
