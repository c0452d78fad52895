"""The MILP router through switches that compute: multicast hyperedges in the ordering, their
dual (switch reductions), the timing and port-relief stages, and the point-to-point path left
as it was on machines without switches."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.bounds.solver import MilpOptions
from synth.core.collectives import allgather, allreduce, broadcast, reduce_scatter
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.orbits import Quotient
from synth.core.schedule import Schedule, Send, Step, SwitchSend
from synth.core.transforms import compose
from synth.cost import step_time_us
from synth.milp.multicast import Hyperedges, dual_with_switches
from synth.milp.ordering import OrderingRules, order_sends
from synth.milp.relief import multicast_fanouts, relieve_ports
from synth.milp.routing import _rotation_quotient, _RoutingModel, route
from synth.milp.sketch import default_sketch
from synth.milp.synthesize import switch_scope, synthesize
from synth.milp.timing import merge_starts, merge_steps_at_size
from synth.synthesizers import Options, Problem
from synth.synthesizers import synthesize as solve
from synth.verify import verify
from tests.switch_strategies import switch_schedules

GIB = 1 << 30
QUICK = MilpOptions(time_limit=10)
BRIEF = MilpOptions(time_limit=2)  # the exact stage (point to point, one small machine) stops early


def _router(topo, collective: str, chunks: int | None = None, options: MilpOptions = QUICK):
    sketch = default_sketch(topo, collective, GIB)[0]
    if chunks is not None:
        sketch = replace(sketch, chunk_up=chunks)
    lines: list[str] = []
    return synthesize(topo, collective, sketch, options, progress=lines.append), lines


def _no_switches(topo):
    return replace(topo, switches=())


@pytest.fixture(scope="module")
def h100():
    return resolve_topology("h100")


# ------------------------------------------------------------------ end to end
@pytest.mark.parametrize("name", ["h100", "h100x2"])
def test_allgather_goes_through_the_switch_and_is_no_slower(name):
    topo = resolve_topology(name)
    result, lines = _router(topo, "allgather", options=BRIEF)
    assert verify(result.schedule) == []
    assert result.schedule.switch_count > 0
    assert any(line.startswith("switch: ") and "the switch plan kept" in line for line in lines)
    plain, _ = _router(_no_switches(topo), "allgather", options=BRIEF)
    assert plain.schedule.switch_count == 0
    assert step_time_us(result.schedule, GIB) <= step_time_us(plain.schedule, GIB) * (1 + 1e-9)


@pytest.mark.slow
def test_broadcast_multicasts_from_the_root_and_beats_point_to_point(h100):
    result, _ = _router(h100, "broadcast", chunks=2, options=BRIEF)
    plain, _ = _router(_no_switches(h100), "broadcast", chunks=2, options=BRIEF)
    assert verify(result.schedule) == []
    assert result.schedule.switch_count > 0
    assert step_time_us(result.schedule, GIB) < step_time_us(plain.schedule, GIB)


def test_reduce_runs_the_broadcast_backwards_as_switch_reductions(h100):
    result, _ = _router(h100, "reduce", chunks=2, options=BRIEF)
    assert verify(result.schedule) == []
    entries = [e for step in result.schedule.steps for e in step.switches]
    assert entries and all(len(e.srcs) > 1 and e.dsts == (0,) for e in entries)


def test_the_backend_verifies_and_no_longer_says_point_to_point_only(h100):
    lines: list[str] = []
    result = solve(Problem(h100, "allgather", size=GIB), Options(time_limit=10, progress=lines.append), "milp")
    assert verify(result.schedule) == [] and result.schedule.switch_count > 0
    assert not any("point-to-point sends only" in line for line in lines)


def test_a_machine_without_switches_keeps_the_point_to_point_plan(h100):
    plain = _no_switches(h100)
    result, lines = _router(plain, "allgather")
    assert result.schedule.switch_count == 0
    assert not any(line.startswith("switch:") or "through" in line for line in lines)
    assert switch_scope(plain, allgather(8)) == "the machine has no switch"


def test_where_the_switch_plan_loses_the_point_to_point_plan_comes_back(h100):
    """The switch plan is planned beside the point-to-point one, which is the plan the router
    makes without the switch (a reduce_scatter alone gains nothing from switch reductions: its
    dual's echo costs every src one more port chunk)."""
    plain, _ = _router(_no_switches(h100), "reduce_scatter", chunks=2)
    mixed, lines = _router(h100, "reduce_scatter", chunks=2)
    assert any(line.startswith("switch: ") for line in lines)
    assert step_time_us(mixed.schedule, GIB) <= step_time_us(plain.schedule, GIB) * (1 + 1e-9)
    if mixed.schedule.switch_count == 0:
        assert [s.sends for s in mixed.schedule.steps] == [s.sends for s in plain.schedule.steps]


@pytest.mark.slow
@pytest.mark.parametrize("name, chunks", [("h100", 6), ("h100x2", 8)])
def test_allreduce_pipelines_switch_reductions_and_multicasts(name, chunks):
    """NVLS's shape: each piece reduced by the switch (inside every machine, NIC sends between
    them) and multicast back, pieces side by side, faster than point to point."""
    topo = resolve_topology(name)
    result, lines = _router(topo, "allreduce", chunks=chunks, options=BRIEF)
    assert verify(result.schedule) == []
    entries = [e for step in result.schedule.steps for e in step.switches]
    assert any(len(e.srcs) > 1 for e in entries) and any(len(e.dsts) > 1 for e in entries)
    assert result.schedule.meta["pipeline"]["pieces"] == chunks
    plain, _ = _router(_no_switches(topo), "allreduce", chunks=chunks, options=BRIEF)
    assert step_time_us(result.schedule, GIB) < step_time_us(plain.schedule, GIB)


# ------------------------------------------------------------------ ordering with hyperedges
def _switch_only(topo, inside_too: bool = False) -> OrderingRules:
    """Rules that allow the NIC links only (intra-machine traffic must take the switch)."""
    machine = topo.machine_of
    allowed = np.array([inside_too or machine[l.src] != machine[l.dst] for l in topo.links], dtype=bool)
    return OrderingRules(allowed, (None,) * len(topo.links))


def test_multicast_entries_put_one_chunk_on_the_src_out_port(h100):
    schedule = order_sends(h100, allgather(8), _switch_only(h100), hyperedges=Hyperedges.of(h100))
    assert verify(schedule) == [] and schedule.send_count == 0
    assert any(len(e.dsts) > 1 for step in schedule.steps for e in step.switches)


def test_reduce_scatter_through_switch_reductions_alone(h100):
    """The dual: allgather on the reversed machine with echoed multicasts, run backwards."""
    reversed_ = h100.reversed()
    forward = order_sends(reversed_, allgather(8), _switch_only(reversed_),
                          hyperedges=Hyperedges.of(reversed_, echo=True))
    assert all(e.srcs[0] in e.dsts for step in forward.steps for e in step.switches)
    backwards = dual_with_switches(forward, h100, reduce_scatter(8))
    assert verify(backwards) == [] and backwards.send_count == 0
    assert all(len(e.dsts) == 1 and len(e.srcs) > 1 for step in backwards.steps for e in step.switches)


def test_allreduce_across_machines_reduces_in_each_switch_and_crosses_by_nic():
    """NVLS across machines: switch reductions inside each machine, NIC sends between them,
    multicast back: reduce_scatter (its dual) then allgather, composed and verified."""
    topo = resolve_topology("h100x2")
    reversed_ = topo.reversed()
    forward = order_sends(reversed_, allgather(16), _switch_only(reversed_),
                          hyperedges=Hyperedges.of(reversed_, echo=True))
    scatter = dual_with_switches(forward, topo, reduce_scatter(16))
    gather = order_sends(topo, allgather(16), _switch_only(topo), hyperedges=Hyperedges.of(topo))
    whole = compose(scatter, gather, allreduce(16))
    assert verify(whole) == []
    ops = {("reduce" if len(e.srcs) > 1 else "multicast") for step in whole.steps for e in step.switches}
    assert ops == {"reduce", "multicast"}
    machine = topo.machine_of
    assert all(machine[s.src] != machine[s.dst] for step in whole.steps for s in step.sends)
    merged = merge_steps_at_size(whole, GIB)
    assert verify(merged) == [] and step_time_us(merged, GIB) <= step_time_us(whole, GIB)


def test_hyperedges_take_no_quotient(h100):
    coll = allgather(8)
    q = Quotient.of(h100, coll, [tuple((r + 1) % 8 for r in range(8))])
    with pytest.raises(InputError, match="no quotient"):
        order_sends(h100, coll, OrderingRules.of(h100), quotient=q, hyperedges=Hyperedges.of(h100))


def test_a_dual_needs_the_echo(h100):
    forward = order_sends(h100.reversed(), broadcast(8, 0), _switch_only(h100.reversed()),
                          hyperedges=Hyperedges.of(h100.reversed()))
    with pytest.raises(InputError, match="no echo"):
        dual_with_switches(forward, h100, reduce_scatter(8))


# ------------------------------------------------------------------ timing and relief
def test_an_echo_does_not_share_a_merged_step_with_another_read_of_its_chunk(h100):
    echo = Step((), 1, (SwitchSend(0, "nvswitch", (0,), (0, 1)),))
    send = Step((Send(0, 0, 2),), 1)
    plain = Step((), 1, (SwitchSend(0, "nvswitch", (0,), (1,)),))
    schedule = Schedule(h100, broadcast(8, 0), (echo, send))
    assert merge_starts(schedule) == [0, 1]
    assert merge_starts(Schedule(h100, broadcast(8, 0), (plain, send))) == [0, 0]


def test_a_switch_write_is_read_only_by_a_later_step(h100):
    first = Step((), 1, (SwitchSend(0, "nvswitch", (0,), (1, 2)),))
    relay = Step((Send(0, 1, 3),), 1)
    assert merge_starts(Schedule(h100, broadcast(8, 0), (first, relay))) == [0, 1]


def test_relief_moves_deliveries_only_while_the_step_gets_shorter(h100):
    entries = tuple(SwitchSend(r, "nvswitch", (r,), tuple(d for d in range(8) if d != r)) for r in range(8))
    one = Schedule(h100, allgather(8), (Step((), 7, entries),))
    relieved = relieve_ports(one, GIB)
    assert verify(relieved) == []
    assert step_time_us(relieved, GIB) < step_time_us(one, GIB)
    assert relieved.switch_count > 0 and relieved.send_count == relieved.meta["relieved_ports"]
    assert relieve_ports(relieved, GIB).send_count == relieved.send_count  # nothing left to gain


def test_fan_outs_become_multicasts_where_no_step_gets_slower(h100):
    """A point-to-point allgather in one step (every rank copies its chunk to the 7 others):
    each fan-out becomes one entry, one chunk on the src's out-port instead of 7."""
    sends = tuple(Send(r, r, d) for r in range(8) for d in range(8) if d != r)
    flat = Schedule(h100, allgather(8), (Step(sends, 7),))
    fanned = multicast_fanouts(flat, GIB, Hyperedges.of(h100).switches)
    assert verify(fanned) == [] and fanned.switch_count > 0
    assert step_time_us(fanned, GIB) <= step_time_us(flat, GIB)
    assert multicast_fanouts(flat, GIB, ()) is flat


def test_the_routing_milp_counts_a_multicast_machine_s_out_ports_by_chunks():
    """Where a multicast switch joins a machine, its out-port row counts the chunks that must
    leave one of its ports (each reaches every needer at once), not every reception."""
    topo = resolve_topology("h100x2")
    coll = allgather(16)
    sketch = default_sketch(topo, "allgather", GIB)[0]
    model = _RoutingModel(topo, coll, sketch, _rotation_quotient(topo, coll, sketch), frozenset({0, 1}))
    assert model._multicast_load(0) == 16  # every chunk is needed by two or more ranks of machine 0
    plan = route(topo, coll, sketch, QUICK, multicast=frozenset({0, 1}))
    assert plan.usable and plan.status.value == "solved"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(switch_schedules(), st.sampled_from([1 << 10, 1 << 20, 1 << 30]))
def test_relief_scores_each_move_as_a_recount_of_the_step_would(schedule, size):
    """The incremental loads give, move after move, what recounting the whole step gives: the
    same duration, count of slowest resources and port to relieve next (where the slowest is no
    port, no move follows, whichever resource is named)."""
    from synth.milp.relief import _TOL, _Loads, _one_move
    from synth.milp.timing import step_terms

    def _score(topo, step, b):  # the whole step recounted, resource by resource
        times = [(alpha + count * b / (bandwidth * 1e3), key) for key, count, alpha, bandwidth
                 in step_terms(topo, step)]
        longest = max((t for t, _ in times), default=0.0)
        slowest = [key for t, key in times if t >= longest - _TOL * max(1.0, longest)]
        ports = [key for key in slowest if key[0] == "port"]
        return round(longest, 6), len(slowest), (ports or slowest or [("none",)])[0]

    def verdict(score):
        return score[:2], score[2] if score[2][0] == "port" else None

    topo, b = schedule.topology, size / schedule.collective.buffer_chunks
    for step in schedule.steps:
        loads, entries, sends = _Loads(topo, step, b), list(step.switches), list(step.sends)
        score = loads.score(entries)
        assert verdict(score) == verdict(_score(topo, step, b))
        while (move := _one_move(topo, entries, score[2])) is not None:
            index, kept, send, changes = move
            entries, sends = entries[:index] + kept + entries[index + 1:], sends + [send]
            loads.apply(changes, 1)
            score = loads.score(entries)
            assert verdict(score) == verdict(_score(topo, Step(tuple(sends), None, tuple(entries)), b))
