"""Hoisting stage of the router: alpha-critical sends move earlier only when that is faster."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.core.library import resolve_topology
from synth.cost import best_protocol
from synth.milp.hoist import hoist_sends
from synth.milp.sketch import default_sketch
from synth.milp.synthesize import synthesize
from synth.verify import verify
from tests.schedule_strategies import valid_schedules


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_schedules(combining=False), st.sampled_from([1, 1024, 1 << 20, 1 << 30]))
def test_hoisting_keeps_schedules_valid_and_never_slower(schedule, size):
    hoisted = hoist_sends(schedule, size)
    assert verify(hoisted) == []
    assert best_protocol(hoisted, size)[1] <= best_protocol(schedule, size)[1] * (1 + 1e-9)
    assert hoisted.send_count == schedule.send_count
    assert hoisted is schedule or hoisted.meta["hoisted"] > 0


@settings(max_examples=20, deadline=None)
@given(valid_schedules(combining=True))
def test_combining_schedules_are_left_alone(schedule):
    assert hoist_sends(schedule, 1024) is schedule


def test_small_alltoall_crosses_the_nic_once():
    """ndv2x2 alltoall at 1 KiB: every crossing in the first step, so the NIC's 2.6 us alpha is
    paid once (the ordering alone spread crossings over both steps: 11.8 us with LL)."""
    topo = resolve_topology("ndv2x2")
    sketch, _ = default_sketch(topo, "alltoall", 1024)
    result = synthesize(topo, "alltoall", sketch)
    crossing = [any(topo.machine_of[s.src] != topo.machine_of[s.dst] for s in step.sends)
                for step in result.schedule.steps]
    assert crossing.count(True) == 1
    assert best_protocol(result.schedule, 1024)[1] < 6.6 + 2 * 2.6  # LL base + one NIC alpha and an NVLink one
