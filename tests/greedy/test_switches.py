"""The switch planner: allreduce and allgather through a reducing and multicasting switch."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from synth.baselines import build_baseline
from synth.bounds.lower_bounds import lower_bounds
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.schedule import port_loads
from synth.cost import step_time_us
from synth.greedy.rails import rail_allreduce
from synth.greedy.switches import _allreduce, applies, machine_switches, switch_plan, switch_plans
from synth.verify import verify

SIZES = [1 << 10, 1 << 20, 1 << 24, 1 << 30, 1 << 32]


@pytest.fixture(scope="module")
def h100():
    return resolve_topology("h100")


@pytest.fixture(scope="module")
def plans(h100):
    return switch_plans(h100, "allreduce", SIZES)


def test_every_plan_verifies_and_beats_nvls_everywhere(h100, plans):
    """At least as fast as NCCL's NVLS (built as a schedule, its own best chunking per size) at
    every size: the same two steps per slice set, less traffic per port."""
    for size, schedule in plans.items():
        assert verify(schedule) == []
        nvls = build_baseline(h100, "nccl_nvls", "allreduce", size=size)
        assert step_time_us(schedule, size) <= step_time_us(nvls, size) * (1 + 1e-9)


def test_the_plan_never_beats_the_bound(h100, plans):
    for size, schedule in plans.items():
        bound = lower_bounds(h100, schedule.collective).time_us(size)
        assert bound <= step_time_us(schedule, size) * (1 + 1e-9)


def test_a_seventh_point_to_point_balances_the_ports(h100):
    """Per set of 8 heads x 7 slices: out 56 (reduce) - 8 + 7 (p2p) + 7 (multicast) = 62 chunks
    on every port, and in 62: (n^2-2)/(n(n-1)) of the buffer each way."""
    schedule = _allreduce(h100, h100.switches[0], 2, 7, 1)
    assert verify(schedule) == []
    middle = schedule.steps[1]
    ports, groups = port_loads(middle, h100)
    sends_out = sum(1 for s in middle.sends if s.src == 0)
    sends_in = sum(1 for s in middle.sends if s.dst == 0)
    assert ports[("nvswitch", 0, "out")] + sends_out == 62
    assert ports[("nvswitch", 0, "in")] + sends_in == 62
    assert Fraction(62, 56) == Fraction(8 * 8 - 2, 8 * 7)


def test_allgather_multicasts_once_and_meets_the_bound(h100):
    schedule = switch_plan(h100, "allgather", 1 << 30)
    assert verify(schedule) == [] and len(schedule.steps) == 1
    bound = lower_bounds(h100, schedule.collective).time_us(1 << 30)
    assert step_time_us(schedule, 1 << 30) == pytest.approx(bound, rel=1e-3)


def test_across_machines_verifies_and_keeps_the_nics_busy():
    topology = resolve_topology("h100x2")
    assert machine_switches(topology) is not None
    schedule = rail_allreduce(topology, machine_switches(topology), 3)
    assert verify(schedule) == []
    assert len(schedule.steps) == 3 + 3
    net = {link.key for link in topology.links if link.kind == "net"}
    overlapped = [step for step in schedule.steps
                  if step.switches and any((s.src, s.dst) in net for s in step.sends)]
    assert len(overlapped) >= 2  # NIC sends of one set run beside the switch entries of another


def test_where_it_does_not_apply(h100):
    assert applies(resolve_topology("dgx1"), "allreduce") is not None
    assert applies(h100, "alltoall") is not None
    assert applies(resolve_topology("h100x2"), "alltoall") is not None
    assert applies(resolve_topology("h100x2"), "allgather") is None  # the rail allgather (test_rails.py)
    assert applies(resolve_topology("a100x2"), "allgather") is not None  # no switch in a machine
    with pytest.raises(InputError, match="reduce and multicast"):
        switch_plan(replace(h100, switches=()), "allreduce", 1 << 20)


def test_with_sharp_the_rail_is_one_switch_entry_per_slice():
    """h100x2+sharp: the rail's reduce-scatter + allgather become one reduce-multicast entry
    per slice (three steps per set instead of four), valid, and faster at 1 GiB."""
    sharp, plain = resolve_topology("h100x2+sharp"), resolve_topology("h100x2")
    schedule = rail_allreduce(sharp, machine_switches(sharp), 2)
    assert verify(schedule) == [] and len(schedule.steps) == 2 + 2
    assert any(entry.switch == "sharp" and len(entry.srcs) == 2 == len(entry.dsts)
               for step in schedule.steps for entry in step.switches)
    without = rail_allreduce(plain, machine_switches(plain), 2)
    assert step_time_us(schedule, 1 << 30) < step_time_us(without, 1 << 30)


@pytest.mark.parametrize("name", ["h100", "h100x2", "h100x2+sharp"])
def test_a_stretched_pipeline_costs_what_the_built_one_does(name):
    """switch_plans times deep pipelines from a short member; the figure is the built one's."""
    from synth.cost import step_loads
    from synth.greedy.switches import families

    for family in families(resolve_topology(name), "allreduce"):
        for pieces, estimate in family.loads():
            if pieces == 8:
                built = step_loads(family.build(pieces))
                for size in (1 << 20, 1 << 30):
                    assert estimate.time_us(size) == pytest.approx(built.time_us(size), rel=1e-9)
