"""Whole planning capacities for machines whose bandwidths are not whole multiples."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.core.collectives import allgather
from synth.core.generators import ring
from synth.core.planning import SUBDIVISIONS, TOLERANCE, not_whole, on_machine, planning_view
from synth.core.schedule import Schedule, Send, Step
from synth.core.topology import Group, Link, Topology
from synth.verify import verify

RATES = st.floats(min_value=0.5, max_value=900.0, allow_nan=False, allow_infinity=False)


def _box(rates: list[float], group_rate: float) -> Topology:
    n = len(rates)
    links = tuple(Link(i, j, rates[i], 1.2, kind="pcie") for i in range(n) for j in range(n) if i != j)
    cross = tuple((i, j) for i in range(n) for j in range(n) if i != j and (i < n // 2) != (j < n // 2))
    return Topology("box", n, links, (Group("cpu", cross, group_rate),) if cross else ())


@settings(max_examples=60, deadline=None)
@given(st.lists(RATES, min_size=2, max_size=5), RATES)
def test_the_view_has_whole_capacities_and_the_same_rates(rates, group_rate):
    topo = _box(rates, group_rate)
    view = planning_view(topo)
    assert view.rounds_apply
    assert [(l.key, l.bandwidth, l.alpha, l.kind) for l in view.links] == \
        [(l.key, l.bandwidth, l.alpha, l.kind) for l in topo.links]
    assert [(g.name, g.links, g.bandwidth) for g in view.groups] == \
        [(g.name, g.links, g.bandwidth) for g in topo.groups]
    if topo.rounds_apply:
        assert view is topo


@settings(max_examples=60, deadline=None)
@given(st.lists(RATES, min_size=2, max_size=5), RATES)
def test_capacities_keep_the_ratios_of_the_rates(rates, group_rate):
    """The slowest resource gets d chunks per round for some d in SUBDIVISIONS, every capacity is
    its rate over slowest/d rounded (at least 1), and the rounding stays within TOLERANCE unless
    no subdivision achieves that."""
    topo = _box(rates, group_rate)
    if topo.rounds_apply:
        return
    view = planning_view(topo)
    pairs = [(view.link_capacity(l), l.bandwidth) for l in view.links] + \
            [(view.group_capacity(g), g.bandwidth) for g in view.groups]
    slowest = min(rate for _, rate in pairs)
    d = next(cap for cap, rate in pairs if rate == slowest)
    assert d in SUBDIVISIONS
    unit = slowest / d
    assert all(cap == max(1, round(rate / unit)) for cap, rate in pairs)

    def worst(u):
        return max(abs(max(1, round(rate / u)) * u - rate) / rate for _, rate in pairs)

    assert worst(unit) <= TOLERANCE or all(worst(slowest / k) > TOLERANCE for k in SUBDIVISIONS)


def test_a_pcie_box_with_a_slow_cpu_link_gets_whole_ratios():
    topo = _box([15.75] * 4, 10.0)
    view = planning_view(topo)
    assert {view.link_capacity(l) for l in view.links} == {3}
    assert view.group_capacity(view.groups[0]) == 2
    assert "planning view" in view.sources[-1]


def test_not_whole_names_the_rate_that_breaks_rounds():
    assert not_whole(ring(4)) == ""
    message = not_whole(_box([15.75] * 4, 10.0))
    assert "group 'cpu'" in message and "10 GB/s" in message and "15.75" in message


def test_on_machine_keeps_the_sends_and_drops_the_rounds():
    topo = _box([15.75] * 2, 10.0)
    view = planning_view(topo)
    coll = allgather(2, 1)
    planned = Schedule(view, coll, (Step((Send(0, 0, 1), Send(1, 1, 0)), 1),))
    back = on_machine(planned, topo)
    assert back.topology is topo
    assert [s.rounds for s in back.steps] == [None]
    assert back.steps[0].sends == planned.steps[0].sends
    assert verify(back) == []


def test_on_machine_leaves_a_schedule_already_there():
    topo = ring(3)
    schedule = Schedule(topo, allgather(3, 1), ())
    assert on_machine(schedule, topo) is schedule


@pytest.mark.parametrize("rates", [[25.0, 50.0], [300.0, 25.0, 25.0]])
def test_whole_topologies_are_their_own_view(rates):
    topo = Topology("w", 2, (Link(0, 1, rates[0]), Link(1, 0, rates[1])))
    assert planning_view(topo) is topo
