"""The shaped pipeline (synth.greedy.shaped): the LP's shapes, their rounding to slots, and the
schedules built from them on h100 (valid, never below the bounds, faster where it should be)."""

from __future__ import annotations

import pytest

from synth.bounds.lower_bounds import lower_bounds
from synth.bounds.runtime import runtime_bounds
from synth.core import collectives
from synth.core.library import resolve_topology
from synth.cost import step_loads
from synth.greedy.shaped import Rates, pipeline_shape, slot_plan
from synth.greedy.switches import _shaped_allreduce, domain_switch, families, port_rates, switch_plan
from synth.measure.calibration import load_calibration
from synth.verify import verify
from tests.switch_strategies import box

EXCHANGE = 62 / 56  # (n^2-2)/(n(n-1)) at n = 8: the buffer through each port, docs/bounds.md
EQUAL = Rates(450.0, 450.0, 450.0)
UNIT = 450e3  # bytes: one buffer at 450 GB/s takes 1 us


def _terms():
    return load_calibration("default").terms("default")


@pytest.mark.parametrize("steps", [3, 8, 32])
def test_the_shape_never_beats_the_exchange_bound_and_closes_on_it(steps):
    shape = pipeline_shape(8, steps, EQUAL, UNIT)
    assert shape.time_us >= EXCHANGE * (1 - 1e-9)
    if steps == 32:
        assert shape.time_us <= EXCHANGE * 1.005


def test_with_one_rate_the_shape_is_the_geometric_pipeline():
    """Step 0 reduces point to point only; from then on each step's switch reduction is
    (n-2)/(n-1) of what the step multicasts, which balances the step's ports."""
    shape = pipeline_shape(8, 12, EQUAL, UNIT)
    first = shape.steps[0]
    assert first.switch_reduce == pytest.approx(0.0, abs=1e-9) and first.p2p_reduce > 0
    assert first.multicast == pytest.approx(0.0, abs=1e-9) == first.p2p_spread
    cost = sum(max(s.switch_reduce + s.multicast / 8, s.switch_reduce / 8 + 7 / 8 * s.multicast,
                   s.switch_reduce + 7 / 8 * (s.p2p_reduce + s.p2p_spread) + s.multicast / 8,
                   s.switch_reduce / 8 + 7 / 8 * (s.p2p_reduce + s.p2p_spread + s.multicast))
               for s in shape.steps)
    assert cost == pytest.approx(shape.time_us, rel=1e-6)


def test_slots_are_spread_after_they_are_reduced_and_what_the_switch_sums_by_multicast():
    plan = slot_plan(pipeline_shape(8, 10, Rates(310.0, 349.6, 349.6, 5.2, 5.2), 64 << 20), 300)
    assert len(plan) == 300 and None not in plan
    assert all(spread > reduced for reduced, _, spread, _ in plan)
    assert [r for r, _, _, _ in plan] == sorted(r for r, _, _, _ in plan)
    assert all(spread_how == "switch" for _, how, _, spread_how in plan if how == "switch")


def test_the_alphas_are_hidden_under_a_busier_group_where_they_can_be():
    """With each step's alpha in the LP, a step may carry point-to-point work that keeps the
    group busier than the port plus its alpha: never slower than charging the alpha on top."""
    rates = Rates(310.0, 349.6, 349.6, 5.2, 5.2)
    for steps in (4, 12):
        with_alpha = pipeline_shape(8, steps, rates, 64 << 20).time_us
        without = pipeline_shape(8, steps, Rates(310.0, 349.6, 349.6), 64 << 20).time_us
        assert without <= with_alpha <= without + steps * 5.2 + 1e-6


@pytest.mark.parametrize("topology", [resolve_topology("h100"), box(4), box(5, switch_bw=200.0, group_bw=200.0)])
@pytest.mark.parametrize("steps", [3, 7])
def test_shaped_schedules_verify(topology, steps):
    rates = port_rates(topology, domain_switch(topology), 1 << 26, _terms())
    shape = pipeline_shape(topology.ranks, steps, rates, 1 << 26)
    schedule = _shaped_allreduce(topology, domain_switch(topology), shape, 1 << 26)
    assert verify(schedule) == []
    assert schedule.switch_count and any(step.sends for step in schedule.steps)


def test_under_the_runtime_terms_h100_at_1g_takes_the_shaped_pipeline_above_its_bound():
    """The LP shapes for NVLS's slower ports and Simple's step latency: faster than every uniform
    mix at 1 GiB, within 95% of the runtime bound and never below it."""
    h100, terms = resolve_topology("h100"), _terms()
    plan = switch_plan(h100, "allreduce", 1 << 30, terms)
    assert plan.meta["pipeline"] == "shaped" and verify(plan) == []
    took = step_loads(plan).best(1 << 30, terms)[1]
    uniform = min(loads.best(1 << 30, terms)[1] for family in families(h100, "allreduce")
                  for _, loads in family.loads())
    bound = runtime_bounds(h100, collectives.allreduce(8, 1), terms).time_us(1 << 30)
    assert bound <= took < uniform and took * 0.95 <= bound


def test_the_contract_model_keeps_its_own_pick_and_bound():
    h100 = resolve_topology("h100")
    plan = switch_plan(h100, "allreduce", 1 << 30)
    took = step_loads(plan).time_us(1 << 30)
    assert lower_bounds(h100, collectives.allreduce(8, 1)).time_us(1 << 30) <= took
