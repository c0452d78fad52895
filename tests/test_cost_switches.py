"""Costs of schedules with switch entries: a switch port is a resource like a link (alpha of the
switch plus chunks x b / bandwidth), its groups count as the links' do, the simulator is never
above the step model, and switch entries run under protocol Simple only."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.baselines import build_baseline
from synth.core.collectives import allgather, broadcast
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.schedule import Schedule, Send, Step, SwitchSend
from synth.cost import (
    best_protocol,
    cost_rows,
    simulate_us,
    step_loads,
    step_time_us,
    step_times_us,
)
from tests.switch_strategies import box, switch_schedules

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SIZES = (1024, 1024**2, 1024**3)
SIMPLE_HOP = 3.4 / 0.6  # NCCL's Simple / LL per-hop latency on NVLink (switch ports and untyped links)
SIMPLE_BASE = 8.4


def one_step_allgather(**box_args) -> Schedule:
    """Allgather on 4 ranks in one step: chunk 0 multicast to 1 and 2 and sent 0->3 over a link,
    chunks 1-3 multicast from their owners. Loads: in-ports 0, 1, 2 carry 3 chunks, in-port 3
    two; every out-port one; link 0->3 one; groups gpu0-out 2, gpu0/1/2/3-in 3, the rest 1."""
    topo = box(4, **box_args)
    entries = (SwitchSend(0, "nvs", (0,), (1, 2)),) + tuple(
        SwitchSend(c, "nvs", (c,), tuple(r for r in range(4) if r != c)) for c in (1, 2, 3))
    return Schedule(topo, allgather(4), (Step((Send(0, 0, 3),), 3, entries),))


def hand_time(b: float, switch_alpha: float, switch_bw: float, group_bw: float | None, link_alpha: float = 0.5,
              link_bw: float = 100.0) -> float:
    """DESIGN's step model for ``one_step_allgather``: the slowest of the busiest port, the link and
    the busiest group (None: no groups)."""
    port = switch_alpha + 3 * b / (switch_bw * 1e3)
    link = link_alpha + b / (link_bw * 1e3)
    group = 0.0 if group_bw is None else 3 * b / (group_bw * 1e3)
    return max(port, link, group)


CASES = [  # (box arguments, switch alpha, switch bw, group bw)
    (dict(alpha=2.0, switch_bw=200.0, group_bw=100.0), 2.0, 200.0, 100.0),  # large: a group is slowest
    (dict(alpha=2.0, switch_bw=200.0, group_bw=400.0), 2.0, 200.0, 400.0),  # large: the busiest port
    (dict(alpha=2.0, switch_bw=50.0, groups=False), 2.0, 50.0, None),
    (dict(alpha=0.0, switch_bw=400.0, group_bw=100.0, link_alpha=3.0), 0.0, 400.0, 100.0),  # small: the link
]


@pytest.mark.parametrize("args, switch_alpha, switch_bw, group_bw", CASES)
@pytest.mark.parametrize("size", [4096, 4 * 10**6])
def test_step_time_is_the_design_formula_with_ports_and_groups(args, switch_alpha, switch_bw, group_bw, size):
    schedule = one_step_allgather(**args)
    b = size / 4
    expected = hand_time(b, switch_alpha, switch_bw, group_bw, link_alpha=args.get("link_alpha", 0.5))
    assert step_times_us(schedule, size) == [pytest.approx(expected, rel=1e-12)]
    assert step_time_us(schedule, size) == pytest.approx(expected, rel=1e-12)


def test_the_figures_above_are_what_they_claim():
    b = 10**6
    assert hand_time(b, 2.0, 200.0, 100.0) == pytest.approx(30.0)  # gpu0-in: 3 x 10 us
    assert hand_time(b, 2.0, 200.0, 400.0) == pytest.approx(17.0)  # in-port 0: 2 + 3 x 5 us
    assert hand_time(1024, 0.0, 400.0, 100.0, link_alpha=3.0) == pytest.approx(3.01024)


@pytest.mark.parametrize("size", [4096, 4 * 10**6])
def test_under_simple_alphas_scale_and_the_base_latency_is_added(size):
    schedule = one_step_allgather(alpha=2.0, switch_bw=200.0, group_bw=100.0)
    b = size / 4
    expected = SIMPLE_BASE + max(2.0 * SIMPLE_HOP + 3 * b / 200e3, 0.5 * SIMPLE_HOP + b / 100e3, 3 * b / 100e3)
    assert step_time_us(schedule, size, "simple") == pytest.approx(expected, rel=1e-12)


def test_a_group_shared_by_three_entries_makes_the_simulator_wait_too():
    schedule = one_step_allgather(alpha=2.0, switch_bw=200.0, group_bw=100.0)
    assert simulate_us(schedule, 4 * 10**6) == pytest.approx(30.0)  # gpu*-in serve three chunks in turn
    wide = one_step_allgather(alpha=2.0, switch_bw=200.0, group_bw=400.0)
    assert simulate_us(wide, 4 * 10**6) == pytest.approx(17.0)  # then the busiest port decides


def test_the_nvls_allreduce_costs_the_buffer_through_every_port_each_way():
    schedule = build_baseline(resolve_topology("h100"), "nccl_nvls", "allreduce", chunks=1)
    size = 1024**3
    b = size / 8
    per_step = 0.7 + 8 * b / 450e3  # 8 chunks on every out-port (step 0), every in-port (step 1)
    assert step_times_us(schedule, size) == [pytest.approx(per_step, rel=1e-12)] * 2
    assert step_time_us(schedule, size) == pytest.approx(2 * per_step, rel=1e-12)


def test_a_chain_of_single_entries_simulates_to_the_step_model():
    topo = box(3, alpha=1.5, switch_bw=200.0)
    steps = (Step((), 1, (SwitchSend(0, "nvs", (0,), (1,)),)), Step((), 1, (SwitchSend(0, "nvs", (1,), (2,)),)))
    schedule = Schedule(topo, broadcast(3, 0), steps)
    for size in SIZES:
        assert simulate_us(schedule, size) == pytest.approx(step_time_us(schedule, size), rel=1e-12)
        # per step: the port (1.5 + b / 200 GB/s) or its gpuR group (b / 100 GB/s)
        assert step_time_us(schedule, size) == pytest.approx(2 * max(1.5 + size / 200e3, size / 100e3), rel=1e-12)


@SETTINGS
@given(switch_schedules(), st.sampled_from(SIZES), st.sampled_from(["ideal", "simple"]))
def test_the_simulator_is_never_above_the_step_model(schedule, size, protocol):
    step = step_time_us(schedule, size, protocol)
    simulated = simulate_us(schedule, size, protocol)
    assert 0 < simulated <= step * (1 + 1e-9) + 1e-9
    assert math.isfinite(step)


@SETTINGS
@given(switch_schedules(), st.sampled_from(SIZES))
def test_best_is_simple_for_switch_schedules(schedule, size):
    if not schedule.switch_count:
        return
    name, took = best_protocol(schedule, size)
    assert name == "simple" and took == pytest.approx(step_time_us(schedule, size, "simple"))
    assert step_loads(schedule).protocols == ("simple",)


@pytest.mark.parametrize("protocol", ["ll", "ll128"])
def test_ll_and_ll128_on_a_switch_schedule_are_input_errors(protocol):
    schedule = build_baseline(resolve_topology("h100"), "nccl_nvls", "allreduce", chunks=2)
    for cost in (step_time_us, step_times_us):
        with pytest.raises(InputError) as caught:
            cost(schedule, 1024, protocol)
        assert "\n" not in str(caught.value) and "simple" in str(caught.value)
    with pytest.raises(InputError):
        cost_rows(schedule, [1024], protocol=protocol)


@pytest.mark.parametrize("protocol", ["ll", "ll128"])
def test_the_simulator_also_refuses_ll_on_a_switch_schedule(protocol):
    schedule = build_baseline(resolve_topology("h100"), "nccl_nvls", "allreduce", chunks=2)
    with pytest.raises(InputError):
        simulate_us(schedule, 1024, protocol)


def test_best_picks_simple_where_a_plain_schedule_would_pick_ll():
    plain = Schedule(box(2), allgather(2), (Step((Send(0, 0, 1), Send(1, 1, 0)), 1),))
    assert best_protocol(plain, 1024)[0] == "ll"  # small: LL's low latency wins for sends
    switched = Schedule(box(2), allgather(2), (Step((), 1, (SwitchSend(0, "nvs", (0,), (1,)),
                                                         SwitchSend(1, "nvs", (1,), (0,)))),))
    assert best_protocol(switched, 1024) == ("simple", pytest.approx(step_time_us(switched, 1024, "simple")))
    rows = cost_rows(switched, [1024, 1024**3], protocol="best")
    assert [row["protocol"] for row in rows] == ["simple", "simple"]


def test_an_entry_on_no_switch_is_an_input_error_for_the_cost():
    schedule = Schedule(box(2), allgather(2), (Step((), 1, (SwitchSend(0, "ghost", (0,), (1,)),)),))
    with pytest.raises(InputError, match="ghost"):
        step_time_us(schedule, 1024)


def test_the_simulator_refuses_an_entry_whose_src_holds_nothing():
    schedule = Schedule(box(3), allgather(3), (Step((), 1, (SwitchSend(0, "nvs", (1,), (2,)),)),))
    with pytest.raises(InputError, match="does not hold"):
        simulate_us(schedule, 1024)
