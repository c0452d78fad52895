"""Ring baseline and its cycle search; tree-shaped routing in baselines.common."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.baselines import BaselineNotApplicable
from synth.baselines.common import Transfer, holders, phases_to_steps, route_phase
from synth.baselines.cycles import crossings, find_ring
from synth.baselines.hierarchical import build as build_hierarchical
from synth.baselines.recursive import build_doubling
from synth.baselines.ring import BASELINES, build, ring_phases
from synth.core.collectives import allgather
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.topology import Group, Link, Topology
from synth.verify import verify
from tests.schedule_strategies import topologies

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")


def two_machines(size: int = 4, interleaved: bool = False) -> Topology:
    """Two machines, full mesh inside, every cross pair linked through one NIC per machine.

    All links have the same bandwidth, so only machine-awareness keeps crossings low. With
    ``interleaved`` the machines are the even and the odd ranks (rank order 0..n-1 would cross
    at every hop).
    """
    n = 2 * size
    machines = (tuple(range(0, n, 2)), tuple(range(1, n, 2))) if interleaved else (
        tuple(range(size)), tuple(range(size, n)))
    owner = {r: i for i, m in enumerate(machines) for r in m}
    links = tuple(Link(a, b, 25.0, 0.7) for a in range(n) for b in range(n) if a != b)
    groups = []
    for i, m in enumerate(machines):
        out = tuple((a, b) for a in m for b in range(n) if owner[b] != i)
        groups.append(Group(f"m{i}-nic-out", out, 25.0))
        groups.append(Group(f"m{i}-nic-in", tuple((b, a) for a, b in out), 25.0))
    return Topology("two-machines", n, links, tuple(groups), machines)


@pytest.mark.parametrize("spec", ["ring:5", "uring:4", "full:4", "hypercube:3", "torus:3x3", "dgx1",
                                  "mi250", "dgx2", "ndv2x2", "ring:2"])
@pytest.mark.parametrize("name", COLLECTIVES)
def test_ring_verifies(spec, name):
    topo = resolve_topology(spec)
    schedule = build(topo, name, None, None)
    assert verify(schedule) == []
    assert schedule.collective.name == name
    n = topo.ranks
    assert len(schedule.steps) == (2 * (n - 1) if name == "allreduce" else n - 1)
    assert schedule.meta["algorithm"] == "ring" and not schedule.meta["routed"]
    halves = 2 if schedule.meta["variant"] == "bidirectional" else 1
    assert schedule.collective.chunks_per_rank == halves
    assert schedule.collective.buffer_chunks == n * halves


def test_dgx1_ring_is_a_hamiltonian_cycle_of_wide_links():
    topo = resolve_topology("dgx1")
    ring = find_ring(topo)
    order = ring.order
    assert sorted(order) == list(range(8)) and ring.direct and ring.bidirectional
    hops = list(zip(order, order[1:] + order[:1]))
    assert all(topo.link(a, b).bandwidth == 50.0 and topo.link(b, a).bandwidth == 50.0 for a, b in hops)
    for name, steps in (("allgather", 7), ("reduce_scatter", 7), ("allreduce", 14)):
        schedule = build(topo, name, None, None)
        assert len(schedule.steps) == steps and schedule.meta["order"] == list(order)
        assert {(s.src, s.dst) for st in schedule.steps for s in st.sends} == set(hops) | {
            (b, a) for a, b in hops
        }


@pytest.mark.parametrize("interleaved", [False, True])
def test_two_machines_cross_twice_per_direction(interleaved):
    topo = two_machines(4, interleaved)
    ring = find_ring(topo)
    assert ring.crossings == 2 == crossings(ring.order, topo.machine_of)
    mof = topo.machine_of
    for name in COLLECTIVES:
        schedule = build(topo, name, None, None)
        assert verify(schedule) == []
        assert schedule.meta["machine_crossings"] == 2 and schedule.meta["variant"] == "bidirectional"
        cross = {(s.src, s.dst) for st in schedule.steps for s in st.sends if mof[s.src] != mof[s.dst]}
        assert len(cross) == 4  # two hops of the cycle, each used both ways
        assert {(b, a) for a, b in cross} == cross


def test_composed_machines_cross_once_per_machine():
    for spec, machines in (("ndv2x2", 2), ("dgx2x2", 2), ("h100x16", 16)):
        topo = resolve_topology(spec)
        ring = find_ring(topo)
        assert sorted(ring.order) == list(range(topo.ranks))
        assert ring.direct and ring.bidirectional and ring.crossings == machines


def test_ndv2x2_ring_keeps_nvlink_hops_wide():
    topo = resolve_topology("ndv2x2")
    order = find_ring(topo).order
    hops = list(zip(order, order[1:] + order[:1]))
    inside = [topo.link(a, b).bandwidth for a, b in hops if topo.machine_of[a] == topo.machine_of[b]]
    assert min(inside) == 50.0  # the doubled NVLinks only


def test_uring_is_unidirectional():
    topo = resolve_topology("uring:4")
    schedule = build(topo, "allreduce", None, None)
    assert schedule.meta["variant"] == "unidirectional" and schedule.meta["order"] == [0, 1, 2, 3]
    assert schedule.collective.chunks_per_rank == 1 and verify(schedule) == []


@pytest.mark.parametrize("spec", ["line:5", "star:5"])
def test_no_hamiltonian_cycle_routes_allgather_and_refuses_reductions(spec):
    topo = resolve_topology(spec)
    schedule = build(topo, "allgather", None, None)
    assert verify(schedule) == [] and schedule.meta["routed"] and "routed" in schedule.meta["note"]
    received = [(s.dst, s.chunk) for st in schedule.steps for s in st.sends]
    assert len(received) == len(set(received))  # a tree: every chunk reaches a rank once
    for name in ("reduce_scatter", "allreduce"):
        with pytest.raises(BaselineNotApplicable, match="Hamiltonian"):
            build(topo, name, None, None)


def test_chunks_pipeline_and_bad_chunks():
    topo = resolve_topology("ring:4")
    schedule = build(topo, "allreduce", None, 3)
    assert verify(schedule) == [] and schedule.collective.chunks_per_rank == 6
    assert len(schedule.steps) == 6 and schedule.collective.buffer_chunks == 24
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InputError):
            build(topo, "allgather", None, bad)
    with pytest.raises(BaselineNotApplicable):
        build(topo, "broadcast", None, None)


def test_registry_entry():
    (entry,) = BASELINES
    assert entry.name == "ring" and entry.collectives == frozenset(COLLECTIVES)


def test_single_rank_ring_is_empty():
    topo = Topology("one", 1, ())
    for name in COLLECTIVES:
        schedule = build(topo, name, None, None)
        assert schedule.steps == () and verify(schedule) == []


def test_ring_phases_backward_direction():
    phases = ring_phases((0, 1, 2), {0: [0], 1: [2], 2: [4]}, {0: [1], 1: [3], 2: [5]})
    first = {(t.chunk, t.src, t.dst) for t in phases[0]}
    assert (0, 0, 1) in first and (1, 0, 2) in first and len(phases) == 2


@st.composite
def partitioned(draw):
    """A random strongly connected topology (it has a Hamiltonian cycle), maybe cut into machines."""
    topo = draw(topologies(min_ranks=2, max_ranks=6))
    count = draw(st.sampled_from([d for d in (1, 2, 3) if topo.ranks % d == 0]))
    perm = draw(st.permutations(list(range(topo.ranks))))
    machines = tuple(tuple(sorted(perm[i::count])) for i in range(count))
    return Topology(topo.name, topo.ranks, topo.links, topo.groups, machines)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(partitioned(), st.sampled_from([None, 2]))
def test_random_topologies_build_valid_schedules(topo, chunks):
    ring = find_ring(topo)
    assert ring.direct and sorted(ring.order) == list(range(topo.ranks))
    assert all(topo.has_link(a, b) for a, b in zip(ring.order, ring.order[1:] + ring.order[:1]))
    for name in COLLECTIVES:  # finish() verifies and raises on an invalid schedule
        assert verify(build(topo, name, None, chunks)) == []
        if topo.machine_count > 1:
            assert verify(build_hierarchical(topo, name, None, chunks)) == []
    if topo.ranks & (topo.ranks - 1) == 0:
        assert verify(build_doubling(topo, "allgather", None, chunks)) == []


# ------------------------------------------------------------ tree-shaped routing (common)
def test_route_phase_with_held_skips_ranks_that_already_hold():
    line = resolve_topology("line:4")
    held = {(0, 0), (1, 0)}
    subs = route_phase(line, [Transfer(0, 0, 3), Transfer(0, 1, 2)], held)
    sends = [(s.src, s.dst) for sub in subs for s in sub]
    assert (0, 1) not in sends  # rank 1 already holds chunk 0
    assert sorted(sends) == [(1, 2), (2, 3)]
    assert held == {(0, 0), (1, 0), (2, 0), (3, 0)}


def test_route_phase_without_held_is_unchanged():
    line = resolve_topology("line:3")
    assert [[(s.src, s.dst) for s in sub] for sub in route_phase(line, [Transfer(0, 0, 2)])] == [
        [(0, 1)], [(1, 2)]]


def test_phases_to_steps_held_gives_a_tree_on_a_star():
    star = resolve_topology("star:5")
    coll = allgather(5)
    phases = [[Transfer(c, c, d) for c in range(5) for d in range(5) if c != d]]
    steps = phases_to_steps(star, phases, holders(coll))
    received = [(s.dst, s.chunk) for sub in steps for s in sub]
    assert len(received) == len(set(received))
    assert not any((r, c) in holders(coll) for r, c in received)


def test_fastest_baseline_is_the_minimum_over_applicable_ones():
    from synth.baselines import fastest_baseline, registry
    from synth.baselines.common import BaselineNotApplicable
    from synth.core.library import resolve_topology
    from synth.cost import step_time_us

    topo = resolve_topology("dgx1")
    name, took = fastest_baseline(topo, "allgather", 1 << 20)
    times = []
    for entry in registry().values():
        if "allgather" in entry.collectives:
            try:
                times.append(step_time_us(entry.build(topo, "allgather", None, None), 1 << 20))
            except BaselineNotApplicable:
                pass
    assert took == min(times) and name in registry()
