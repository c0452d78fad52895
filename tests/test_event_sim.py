"""The event simulation's engine (synth.core.event_sim) against a plain loop over the holds
(tests/reference_sim.py), on random schedules with and without switch entries, under every
protocol and the runtime terms, by the whole-step path and the one-by-one path."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import synth.cost as cost
from synth.core import event_sim
from synth.core.errors import InputError
from synth.core.schedule import Schedule, Send, Step
from synth.measure.calibration import Calibration
from tests.reference_sim import reference_makespan
from tests.schedule_strategies import valid_schedules
from tests.switch_strategies import switch_schedules

TERMS = Calibration().terms()
SIZES = st.sampled_from([1, 1000, 1 << 20, 1 << 30])


def _both(monkeypatch, schedule: Schedule, size: int, protocol: str, terms) -> tuple[float, float]:
    ours = cost.simulate_us(schedule, size, protocol, terms)
    with monkeypatch.context() as patched:
        patched.setattr(cost, "event_makespan", reference_makespan)
        theirs = cost.simulate_us(schedule, size, protocol, terms)
    return ours, theirs


@pytest.mark.parametrize("small_step", [0, 1 << 30])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(schedule=valid_schedules(), size=SIZES, protocol=st.sampled_from(["ideal", "simple", "ll128", "ll"]),
       runtime=st.booleans())
def test_point_to_point_schedules_simulate_as_the_plain_loop(monkeypatch, small_step, schedule, size, protocol,
                                                             runtime):
    monkeypatch.setattr(event_sim, "SMALL_STEP", small_step)
    ours, theirs = _both(monkeypatch, schedule, size, protocol, TERMS if runtime and protocol != "ideal" else None)
    assert ours == pytest.approx(theirs, rel=1e-12)


@pytest.mark.parametrize("small_step", [0, 1 << 30])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(schedule=switch_schedules(), size=SIZES, runtime=st.booleans())
def test_switch_schedules_simulate_as_the_plain_loop(monkeypatch, small_step, schedule, size, runtime):
    monkeypatch.setattr(event_sim, "SMALL_STEP", small_step)
    protocol = "simple" if runtime else "ideal"
    ours, theirs = _both(monkeypatch, schedule, size, protocol, TERMS if runtime else None)
    assert ours == pytest.approx(theirs, rel=1e-12)


def test_a_send_of_what_the_rank_does_not_hold_is_named(monkeypatch):
    from synth.core.collectives import allgather
    from synth.core.library import resolve_topology

    ring = resolve_topology("ring:4")
    bad = Schedule(ring, allgather(4), (Step((Send(0, 0, 1), Send(2, 1, 2))),))
    for small_step in (0, 1 << 30):
        monkeypatch.setattr(event_sim, "SMALL_STEP", small_step)
        with pytest.raises(InputError, match="step 0: rank 1 sends chunk 2, which it does not hold"):
            cost.simulate_us(bad, 1 << 20)
