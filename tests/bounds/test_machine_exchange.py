"""The machines' exchange bound of allreduce across machines (docs/bounds.md): without a fabric
that reduces, every chunk leaves (and enters) machines 2(M-1) times in all.

Checked three ways: an exhaustive search over one-chunk gossip among M machines (the relaxation
the proof uses: a transfer gives its destinations everything its sources know) finds none with
fewer crossings, and finds the switch capabilities that escape each count; every verified
baseline and greedy schedule on composed machines crosses at least that often and is never
faster than the bound in the step model; and the figures ``synth bounds`` prints follow from it.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.baselines import build_baseline
from synth.bounds.lower_bounds import lower_bounds
from synth.bounds.machine_exchange import exchange_domains, machine_exchange_limit
from synth.bounds.runtime import runtime_bounds
from synth.core import collectives
from synth.core.compose import compose_machines
from synth.core.library import resolve_topology
from synth.core.topology import Link, Nic, Switch, Topology
from synth.cost import simulate_us, step_time_us
from synth.measure.calibration import Calibration
from synth.synthesizers import Problem, synthesize
from synth.verify import verify


# ---------------------------------------------------------------- exhaustive gossip
def _entries(m: int, reduce: bool, multicast: bool, reduce_multicast: bool):
    """(srcs, dsts) of every transfer among m machines: point to point, and the switch entries
    the capabilities allow (several srcs one dst: reduce; one src several dsts: multicast)."""
    out = [((a,), (b,)) for a in range(m) for b in range(m) if a != b]
    subsets = [s for k in range(1, m + 1) for s in itertools.combinations(range(m), k)]
    for srcs, dsts in itertools.product(subsets, subsets):
        many_srcs, many_dsts = len(srcs) > 1, len(dsts) > 1
        if (many_srcs and many_dsts and reduce_multicast) or (many_srcs and not many_dsts and reduce) \
                or (many_dsts and not many_srcs and multicast):
            out.append((srcs, dsts))
    return out


def least_crossings(m: int, count: str, reduce=False, multicast=False, reduce_multicast=False) -> int:
    """The fewest departures (``out``: a src with a dst outside it) or arrivals (``in``: a dst with
    a src outside it) that take m machines, each knowing its own contribution, to all knowing all
    (Dijkstra over knowledge states; transfers one at a time, which only helps)."""
    full = (1 << m) - 1
    moves = []
    for srcs, dsts in _entries(m, reduce, multicast, reduce_multicast):
        cost = sum(1 for s in srcs if set(dsts) - {s}) if count == "out" else \
            sum(1 for d in dsts if set(srcs) - {d})
        moves.append((srcs, dsts, cost))
    start = tuple(1 << r for r in range(m))
    best = {start: 0}
    queue = [(0, start)]
    while queue:
        spent, state = heapq.heappop(queue)
        if all(k == full for k in state):
            return spent
        if spent > best[state]:
            continue
        for srcs, dsts, cost in moves:
            known = 0
            for s in srcs:
                known |= state[s]
            after = list(state)
            for d in dsts:
                after[d] |= known
            after = tuple(after)
            if after != state and spent + cost < best.get(after, 1 << 30):
                best[after] = spent + cost
                heapq.heappush(queue, (spent + cost, after))
    raise AssertionError("unreachable")


@pytest.mark.parametrize("m", [2, 3, 4])
def test_point_to_point_needs_2_m_minus_1_crossings_each_way(m):
    assert least_crossings(m, "out") == 2 * (m - 1)
    assert least_crossings(m, "in") == 2 * (m - 1)


@pytest.mark.parametrize("m", [3, 4])
def test_each_count_survives_the_capability_that_does_not_touch_it(m):
    """Summing switches keep the departures, multicasting ones the arrivals
    (``exchange_domains`` merges machines only for the count a switch breaks)."""
    assert least_crossings(m, "out", reduce=True) == 2 * (m - 1)
    assert least_crossings(m, "in", reduce=True) < 2 * (m - 1)
    assert least_crossings(m, "in", multicast=True) == 2 * (m - 1)
    assert least_crossings(m, "out", multicast=True) < 2 * (m - 1)
    assert least_crossings(m, "out", reduce_multicast=True) < 2 * (m - 1)
    assert least_crossings(m, "in", reduce_multicast=True) < 2 * (m - 1)


# ---------------------------------------------------------------- domains
def _pairs(k: int, **capabilities) -> Topology:
    """k machines of 2 ranks (one 12.5 GB/s NIC each), with a switch over every rank when asked."""
    pair = Topology("pair", 2, (Link(0, 1, 25.0, 0.7), Link(1, 0, 25.0, 0.7)), machines=((0, 1),),
                    nics=(Nic("nic0", (0, 1), 12.5, 2.6),))
    joined = compose_machines(pair, k)
    if not capabilities:
        return joined
    nics = {r: f"m{r // 2}-nic0" for r in range(2 * k)}
    switch = Switch("fabric", tuple(range(2 * k)), 12.5, 2.6, out_groups=tuple(f"{nics[r]}-out" for r in nics),
                    in_groups=tuple(f"{nics[r]}-in" for r in nics), **capabilities)
    return Topology(joined.name, joined.ranks, joined.links, joined.groups, joined.machines, joined.nics,
                    switches=(switch,))


def test_domains_merge_only_for_the_count_a_switch_breaks():
    reducing = _pairs(3, reduce=True)
    assert exchange_domains(reducing, lambda s: s.multicast or s.reduce_multicast) == ((0, 1), (2, 3), (4, 5))
    assert exchange_domains(reducing, lambda s: s.reduce or s.reduce_multicast) == ((0, 1, 2, 3, 4, 5),)
    allreduce = collectives.allreduce(6)
    assert "leaves" in machine_exchange_limit(reducing, allreduce).binding
    assert "enters" in machine_exchange_limit(_pairs(3, multicast=True), allreduce).binding
    assert machine_exchange_limit(_pairs(3, reduce_multicast=True), allreduce) is None
    assert machine_exchange_limit(_pairs(3), collectives.allgather(6)) is None


def test_one_machine_or_none_listed_has_no_term():
    assert machine_exchange_limit(resolve_topology("h100"), collectives.allreduce(8)) is None
    assert machine_exchange_limit(resolve_topology("ring:8"), collectives.allreduce(8)) is None


def test_a_plain_composition_weighs_every_machine_by_its_nic():
    limit = machine_exchange_limit(_pairs(4), collectives.allreduce(8, 1))
    assert limit.full == pytest.approx(8 * 2 * 3 / (4 * 12.5))  # 8 chunks, 6 crossings, 4 NICs


# ---------------------------------------------------------------- the figures
def _algbw(name: str, coll: str = "allreduce") -> float:
    topo = resolve_topology(name)
    return lower_bounds(topo, collectives.make_collective(coll, topo.ranks)).algbw_gbps


def test_h100x4_allreduce_is_the_machines_exchange():
    topo = resolve_topology("h100x4")
    bounds = lower_bounds(topo, collectives.allreduce(32))
    assert bounds.algbw_gbps == pytest.approx(400 * 4 / 6)  # 266.7 GB/s
    assert bounds.binding.startswith("machines' exchange: every chunk leaves one of 4 machines 2 x 3 times")


@pytest.mark.parametrize("name, algbw", [("h100x2", 400.0), ("h100x3", 400 * 3 / 4), ("h100x16", 400 * 16 / 30)])
def test_multi_machine_h100_allreduce(name, algbw):
    assert _algbw(name) == pytest.approx(algbw)


@pytest.mark.parametrize("name", ["h100x4+sharp", "h100x16+sharp"])
def test_a_sharp_fabric_is_not_lowered(name):
    assert _algbw(name) == pytest.approx(400.0)  # every machine's NICs carry the buffer once each way


def test_gb200nvl72x2_keeps_its_switch_exchange_bound():
    topo = resolve_topology("gb200nvl72x2")
    bounds = lower_bounds(topo, collectives.allreduce(topo.ranks))
    assert bounds.binding.startswith("in + 142 x out >= 20734")


@pytest.mark.parametrize("coll, way", [("allgather", "in"), ("reduce_scatter", "out")])
def test_allgather_and_reduce_scatter_already_cross_m_minus_1_over_m(coll, way):
    topo = resolve_topology("h100x16")
    bounds = lower_bounds(topo, collectives.make_collective(coll, topo.ranks))
    assert bounds.algbw_gbps == pytest.approx(400 * 16 / 15)  # the machine cut
    assert bounds.binding.startswith(f"machine 0 {way}-bandwidth")
    assert _algbw("h100x4", coll) <= 400 * 4 / 3 + 1e-9  # there a GPU's own ports bind first


def test_runtime_bounds_follow():
    topo = resolve_topology("h100x4")
    coll = collectives.allreduce(32)
    runtime = runtime_bounds(topo, coll, Calibration().terms())
    assert runtime.bounds.binding.startswith("machines' exchange")
    assert runtime.time_us(1 << 30) >= lower_bounds(topo, coll).time_us(1 << 30)


def test_a_point_to_point_composition_proves_its_convention():
    bounds = lower_bounds(resolve_topology("ndv2x4"), collectives.allreduce(32))
    assert bounds.proven.algbw_gbps == pytest.approx(bounds.algbw_gbps)
    assert bounds.algbw_gbps == pytest.approx(12.5 * 4 / 6)


# ---------------------------------------------------------------- schedules never beat it
def _departures(schedule) -> Counter:
    """Per chunk: (entry, src machine) pairs with a dst on another machine."""
    machine = schedule.topology.machine_of
    out: Counter = Counter()
    for step in schedule.steps:
        for send in step.sends:
            out[send.chunk] += machine[send.src] != machine[send.dst]
        for entry in step.switches:
            homes = {machine[d] for d in entry.dsts}
            out[entry.chunk] += len({machine[s] for s in entry.srcs if homes - {machine[s]}})
    return out


def _check(schedule) -> None:
    assert verify(schedule) == []
    topo, coll = schedule.topology, schedule.collective
    m = topo.machine_count
    crossings = _departures(schedule)
    assert all(crossings[c] >= 2 * (m - 1) for c in range(coll.chunks))
    bounds = lower_bounds(topo, coll)
    for size in (1 << 20, 1 << 26, 1 << 30):
        assert step_time_us(schedule, size) >= bounds.time_us(size) * (1 - 1e-9)
        assert simulate_us(schedule, size) >= bounds.time_us(size) * (1 - 1e-9)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(["h100x3", "h100x4", "a100x3", "mi300xx4", "ndv2x3"]),
       st.sampled_from(["ring", "hierarchical", "nccl_ring", "nccl_tree", "double_binary_tree"]))
def test_no_baseline_beats_it(name, algo):
    _check(build_baseline(resolve_topology(name), algo, "allreduce"))


@pytest.mark.parametrize("name", ["h100x3", "h100x4"])
def test_the_greedy_pipeline_meets_it_without_beating_it(name):
    schedule = synthesize(Problem(resolve_topology(name), "allreduce", size=1 << 30), backend="greedy").schedule
    _check(schedule)
    bound = lower_bounds(schedule.topology, schedule.collective).time_us(1 << 30)
    assert step_time_us(schedule, 1 << 30) <= bound * 1.01  # it is tight: greedy is within 1%
