"""Hierarchical (rail rings + machine rings) baseline on multi-machine topologies."""

from __future__ import annotations

from collections import Counter

import pytest

from synth.baselines import BaselineNotApplicable
from synth.baselines.hierarchical import BASELINES, build, plan
from synth.baselines.ring import build as build_ring
from synth.core.library import resolve_topology
from synth.core.topology import Group, Link, Topology
from synth.verify import verify

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")


def gateways(machines: int, size: int) -> Topology:
    """Machines of ``size`` ranks (a ring inside); only local rank 0 reaches the fabric."""
    n = machines * size
    links = []
    for m in range(machines):
        base = m * size
        for i in range(size):
            a, b = base + i, base + (i + 1) % size
            if a != b:
                links += [Link(a, b, 50.0, 0.7), Link(b, a, 50.0, 0.7)]
    links = list({l.key: l for l in links}.values())
    heads = [m * size for m in range(machines)]
    fabric = [(a, b) for a in heads for b in heads if a != b]
    links += [Link(a, b, 12.5, 2.0) for a, b in fabric]
    groups = [
        Group(f"m{m}-nic-out", tuple(k for k in fabric if k[0] == h), 12.5) for m, h in enumerate(heads)
    ]
    machine_sets = tuple(tuple(range(m * size, (m + 1) * size)) for m in range(machines))
    return Topology(f"gateways{machines}x{size}", n, tuple(links), tuple(groups), machine_sets)


def alpha_beta_us(schedule, size: int) -> float:
    """The DESIGN.md cost model, written out here so the test does not depend on synth.cost."""
    topo, chunk = schedule.topology, size / schedule.collective.buffer_chunks
    total = 0.0
    for step in schedule.steps:
        per_link = Counter((s.src, s.dst) for s in step.sends)
        per_group = Counter()
        for key, count in per_link.items():
            for group in topo.groups_of_link.get(key, ()):
                per_group[group] += count
        links = [(topo.link(*k), c) for k, c in per_link.items()]
        times = [link.alpha + c * chunk / (link.bandwidth * 1e3) for link, c in links]
        times += [c * chunk / (g.bandwidth * 1e3) for g, c in per_group.items()]
        total += max(times)
    return total


@pytest.mark.parametrize("spec", ["ndv2x2", "dgx2x2"])
@pytest.mark.parametrize("name", COLLECTIVES)
def test_composed_machines_verify(spec, name):
    topo = resolve_topology(spec)
    schedule = build(topo, name, None, None)
    assert verify(schedule) == []
    assert schedule.collective.name == name and schedule.meta["machines"] == 2
    size = topo.ranks // 2
    steps = 1 + size - 1
    assert len(schedule.steps) == (2 * steps if name == "allreduce" else steps)
    assert not schedule.meta["routed"] and schedule.meta["variant"] == "bidirectional"


def test_allgather_levels():
    topo = resolve_topology("ndv2x2")
    schedule = build(topo, "allgather", None, None)
    assert schedule.meta["rail_steps"] == 1 and schedule.meta["machine_steps"] == 7
    mof = topo.machine_of
    first, rest = schedule.steps[0], schedule.steps[1:]
    assert all(mof[s.src] != mof[s.dst] and s.dst == (s.src + 8) % 16 for s in first.sends)
    assert all(mof[s.src] == mof[s.dst] for step in rest for s in step.sends)


@pytest.mark.parametrize("machines,size", [(2, 4), (3, 3), (4, 2)])
@pytest.mark.parametrize("name", COLLECTIVES)
def test_routed_rails_through_gateways_verify(machines, size, name):
    topo = gateways(machines, size)
    schedule = build(topo, name, None, None)
    assert verify(schedule) == [] and schedule.meta["routed"]


def test_chunks_and_plan():
    topo = gateways(2, 4)
    schedule = build(topo, "allreduce", None, 2)
    assert verify(schedule) == [] and schedule.collective.chunks_per_rank == 4
    rails, inner = plan(topo)
    assert [r.order for r in rails] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert all(r.direct for r in inner) and not rails[1].direct


@pytest.mark.parametrize("spec", ["dgx1", "ring:8", "h100"])
def test_single_machine_is_refused(spec):
    for name in COLLECTIVES:
        with pytest.raises(BaselineNotApplicable, match="two or more machines"):
            build(resolve_topology(spec), name, None, None)


def test_unequal_machines_and_wrong_collective():
    links = tuple(Link(a, b, 25.0) for a in range(3) for b in range(3) if a != b)
    uneven = Topology("uneven", 3, links, machines=((0, 1), (2,)))
    with pytest.raises(BaselineNotApplicable, match="equal size"):
        build(uneven, "allgather", None, None)
    with pytest.raises(BaselineNotApplicable):
        build(resolve_topology("ndv2x2"), "broadcast", None, None)
    assert BASELINES[0].name == "hierarchical"


@pytest.mark.parametrize("spec", ["ndv2x2", "dgx2x2"])
def test_beats_flat_ring_when_the_nic_binds(spec):
    topo = resolve_topology(spec)
    for name in ("allgather", "allreduce"):
        hier = alpha_beta_us(build(topo, name, None, None), 1 << 30)
        flat = alpha_beta_us(build_ring(topo, name, None, None), 1 << 30)
        assert hier < 0.8 * flat


@pytest.mark.slow
@pytest.mark.parametrize("name", COLLECTIVES)
def test_h100x16(name):
    """128 ranks; build() verifies through finish(), so only the allgather is replayed twice."""
    topo = resolve_topology("h100x16")
    schedule = build(topo, name, None, None)
    if name == "allgather":
        assert verify(schedule) == []
    assert schedule.meta["rail_steps"] == 15 and schedule.meta["machine_steps"] == 7
    assert len(schedule.steps) == (44 if name == "allreduce" else 22)
    assert schedule.meta["variant"] == "bidirectional" and not schedule.meta["routed"]
