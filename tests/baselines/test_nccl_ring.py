"""NCCL's channelized rings: channel plans and the schedules built on them."""

from __future__ import annotations

from collections import Counter

import pytest

from synth.baselines import build_baseline
from synth.baselines.channels import plan_channels
from synth.baselines.common import BaselineNotApplicable
from synth.baselines.nccl_ring import build
from synth.bounds.lower_bounds import lower_bounds
from synth.cli.main import main
from synth.core.library import resolve_topology
from synth.cost import step_time_us
from synth.verify import verify

GIB = 1024**3


def percent_of_bound(schedule, size=GIB) -> float:
    bound = lower_bounds(schedule.topology, schedule.collective).time_us(size)
    return 100 * bound / step_time_us(schedule, size)


def link_units(topology):
    unit = topology.min_link_bandwidth
    return {l.key: int(l.bandwidth / unit + 1e-9) for l in topology.links}


@pytest.mark.parametrize("name", ["dgx1", "ndv2"])
def test_mesh_rings_cover_every_nvlink_unit_once(name):
    topo = resolve_topology(name)
    plan = plan_channels(topo)
    use = Counter(hop for ring in plan.rings for hop in zip(ring, ring[1:] + ring[:1]))
    units = {key: count for key, count in link_units(topo).items()
             if topo.machine_of[key[0]] == topo.machine_of[key[1]]}
    assert len(plan.rings) == 6
    assert use == Counter(units)  # every NVLink unit in one ring, none twice
    for ring in plan.rings:
        assert sorted(ring) == list(range(topo.ranks))


@pytest.mark.parametrize("name, rings", [("ring:8", 2), ("torus:4x4", 4), ("h100", 1), ("dgx2", 1)])
def test_channel_counts(name, rings):
    assert len(plan_channels(resolve_topology(name)).rings) == rings


@pytest.mark.parametrize("name", ["dgx1", "ndv2"])
def test_allgather_reaches_the_bound_on_dgx1_meshes(name):
    schedule = build(resolve_topology(name), "allgather", None, None)
    assert verify(schedule) == []
    assert percent_of_bound(schedule) >= 99.0


@pytest.mark.parametrize("name", ["h100x2", "dgx2x2"])
def test_rings_across_machines_are_rail_aligned(name):
    topo = resolve_topology(name)
    plan = plan_channels(topo)
    per_machine = len(topo.nics) // topo.machine_count
    nic_of = {rank: i % per_machine for i, nic in enumerate(topo.nics) for rank in nic.ranks}
    sends: Counter = Counter()
    for ring in plan.rings:
        for a, b in zip(ring, ring[1:] + ring[:1]):
            if topo.machine_of[a] != topo.machine_of[b]:
                assert nic_of[a] == nic_of[b], f"crossing {a}->{b} changes rail"
                sends[(topo.machine_of[a], nic_of[a])] += 1
    assert len(plan.rings) == per_machine
    assert set(sends) == {(m, i) for m in range(topo.machine_count) for i in range(per_machine)}


def test_allgather_uses_every_nic_on_h100_compositions():
    """A ring moves (n-1)/n of the data over every NIC where K machines need (K-1)/K: on 4
    machines of 8 GPUs that is 24/31 = 77.4% of the cut bound before alphas."""
    schedule = build(resolve_topology("h100x4"), "allgather", None, None)
    assert verify(schedule) == []
    busy = Counter(g.name for step in schedule.steps for s in step.sends
                   for g in schedule.topology.groups_of_link.get((s.src, s.dst), ()) if "nic" in g.name)
    assert len(busy) == len(schedule.topology.nics) * 2  # every NIC sends and receives
    assert percent_of_bound(schedule) >= 75.0


@pytest.mark.slow
def test_h100x16_allgather_reaches_85_percent():
    schedule = build(resolve_topology("h100x16"), "allgather", None, None)
    assert percent_of_bound(schedule) >= 85.0


@pytest.mark.parametrize("coll", ["reduce_scatter", "allreduce", "broadcast", "reduce"])
@pytest.mark.parametrize("name", ["dgx1", "ring:8", "dgx2x2", "ndv2x2"])
def test_every_collective_verifies(name, coll):
    schedule = build(resolve_topology(name), coll, None, None)
    assert verify(schedule) == []
    assert schedule.meta["algorithm"] == "nccl_ring"


def test_allreduce_is_twice_the_allgather_steps():
    topo = resolve_topology("dgx1")
    assert len(build(topo, "allreduce", None, None).steps) == 2 * len(build(topo, "allgather", None, None).steps)


def test_broadcast_pipelines_more_at_large_sizes():
    topo = resolve_topology("dgx1")
    small = build(topo, "broadcast", 3, None, size=1024)
    large = build(topo, "broadcast", 3, None, size=GIB)
    assert small.meta["pieces"] < large.meta["pieces"]
    assert small.collective.root == 3
    assert step_time_us(small, 1024) <= step_time_us(large, 1024)
    assert step_time_us(large, GIB) <= step_time_us(small, GIB)
    assert build_baseline(topo, "nccl_ring", "reduce", 2, None, GIB).collective.root == 2


def test_not_applicable_cases_are_clear():
    with pytest.raises(BaselineNotApplicable, match="point-to-point"):
        build(resolve_topology("dgx1"), "alltoall", None, None)
    with pytest.raises(BaselineNotApplicable, match="Hamiltonian"):
        build(resolve_topology("line:4"), "allgather", None, None)


def test_cli_lists_and_refuses(capsys):
    assert main(["baseline", "dgx1", "allgather", "--algo", "list"]) == 0
    assert "nccl_ring" in capsys.readouterr().out
    assert main(["baseline", "dgx1", "alltoall", "--algo", "nccl_ring"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "alltoall" in err[0]
