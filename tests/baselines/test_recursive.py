"""Recursive doubling and recursive halving (Rabenseifner) baselines."""

from __future__ import annotations

import pytest

from synth.baselines import BaselineNotApplicable
from synth.baselines.recursive import BASELINES, build_doubling, build_halving
from synth.core.library import resolve_topology
from synth.verify import verify

CASES = [
    (build_doubling, "allgather"),
    (build_doubling, "allreduce"),
    (build_halving, "reduce_scatter"),
    (build_halving, "allreduce"),
]


@pytest.mark.parametrize("spec", ["hypercube:3", "hypercube:2", "full:8", "dgx1", "ndv2x2", "full:2"])
@pytest.mark.parametrize("builder,name", CASES)
def test_direct_topologies_verify(spec, builder, name):
    topo = resolve_topology(spec)
    schedule = builder(topo, name, None, None)
    assert verify(schedule) == []
    assert schedule.collective.name == name and not schedule.meta["routed"]
    d = topo.ranks.bit_length() - 1
    rabenseifner = builder is build_halving and name == "allreduce"
    assert len(schedule.steps) == (2 * d if rabenseifner else d)


def test_hypercube_uses_only_partner_links():
    cube = resolve_topology("hypercube:3")
    for builder, name in CASES:
        schedule = builder(cube, name, None, None)
        assert len(schedule.steps) in (3, 6)
        for step in schedule.steps:
            for send in step.sends:
                assert cube.has_link(send.src, send.dst)
                assert bin(send.src ^ send.dst).count("1") == 1


def test_doubling_allgather_exchanges_growing_blocks():
    schedule = build_doubling(resolve_topology("hypercube:3"), "allgather", None, None)
    assert [len(step.sends) for step in schedule.steps] == [8, 16, 32]
    first = {(s.src, s.dst) for s in schedule.steps[0].sends}
    assert (0, 1) in first and (1, 0) in first


def test_halving_reduce_scatter_halves_the_vector():
    schedule = build_halving(resolve_topology("hypercube:3"), "reduce_scatter", None, None)
    assert [len(step.sends) for step in schedule.steps] == [32, 16, 8]
    assert all(s.op == "reduce" for step in schedule.steps for s in step.sends)


def test_doubling_allreduce_sends_whole_buffers():
    schedule = build_doubling(resolve_topology("hypercube:2"), "allreduce", None, 2)
    assert verify(schedule) == [] and schedule.collective.chunks == 8
    assert all(len(step.sends) == 4 * 8 for step in schedule.steps)


@pytest.mark.parametrize("spec", ["ring:8", "line:4", "torus:4x4", "star:4"])
def test_missing_partner_links(spec):
    topo = resolve_topology(spec)
    schedule = build_doubling(topo, "allgather", None, None)
    assert verify(schedule) == [] and schedule.meta["routed"] and "routed" in schedule.meta["note"]
    for builder, name in CASES[1:]:
        with pytest.raises(BaselineNotApplicable, match="direct link"):
            builder(topo, name, None, None)


@pytest.mark.parametrize("spec", ["ring:6", "full:3", "line:5"])
def test_non_power_of_two_is_refused(spec):
    topo = resolve_topology(spec)
    for builder, name in CASES:
        with pytest.raises(BaselineNotApplicable, match="power-of-two"):
            builder(topo, name, None, None)


def test_wrong_collective_and_registry():
    cube = resolve_topology("hypercube:2")
    with pytest.raises(BaselineNotApplicable):
        build_doubling(cube, "reduce_scatter", None, None)
    with pytest.raises(BaselineNotApplicable):
        build_halving(cube, "allgather", None, None)
    names = {entry.name: entry.collectives for entry in BASELINES}
    assert names == {
        "recursive_doubling": frozenset({"allgather", "allreduce"}),
        "recursive_halving": frozenset({"reduce_scatter", "allreduce"}),
    }
