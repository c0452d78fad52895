"""Lower bounds: the published figures, the LP against the cuts, duality, and validity
against every schedule we can build (hand-made, baselines, random valid schedules)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from synth import baselines
from synth.baselines import BaselineNotApplicable
from synth.bounds.lower_bounds import Bounds, lower_bounds
from synth.bounds.steps import steps_bound
from synth.core.collectives import allgather, allreduce, alltoall, broadcast, gather, reduce, reduce_scatter
from synth.core.errors import CollectiveError
from synth.core.io import read_json
from synth.core.library import resolve_topology
from synth.core.schedule import Schedule, Send, Step
from synth.core.topology import Group, Link, Topology
from synth.core.transforms import dual_collective
from synth.cost import step_time_us
from synth.verify import verify
from tests.schedule_strategies import valid_schedules

DATA = Path(__file__).parents[1] / "data"
MIB = 1 << 20


def both_ways(name: str, n: int, pairs: dict[tuple[int, int], float], alpha: float = 0.7, groups=()) -> Topology:
    links = []
    for (a, b), bw in sorted(pairs.items()):
        links += [Link(a, b, bw, alpha), Link(b, a, bw, alpha)]
    return Topology(name, n, tuple(links), tuple(groups))


def dgx1() -> Topology:
    double = [(0, 1), (0, 4), (1, 3), (2, 3), (2, 6), (4, 5), (5, 7), (6, 7)]
    single = [(0, 2), (0, 3), (1, 2), (1, 5), (3, 7), (4, 6), (4, 7), (5, 6)]
    return both_ways("dgx1", 8, {**{p: 50.0 for p in double}, **{p: 25.0 for p in single}})


def dgx2() -> Topology:
    n = 16
    links = tuple(Link(a, b, 125.0, 0.35) for a in range(n) for b in range(n) if a != b)
    groups = []
    for r in range(n):
        groups.append(Group(f"gpu{r}-out", tuple((r, b) for b in range(n) if b != r), 125.0))
        groups.append(Group(f"gpu{r}-in", tuple((a, r) for a in range(n) if a != r), 125.0))
    return Topology("dgx2-model", n, links, tuple(groups))


def uring4() -> Topology:
    return Topology.from_dict(read_json(DATA / "topology-uring4.json"))


def star(leaf_mesh: float | None = None) -> Topology:
    """Hub 0 and leaves 1..4 at 25 GB/s; optionally leaves fully meshed."""
    pairs = {(0, leaf): 25.0 for leaf in range(1, 5)}
    if leaf_mesh:
        pairs.update({(a, b): leaf_mesh for a in range(1, 5) for b in range(a + 1, 5)})
    return both_ways("star", 5, pairs)


def library(name: str) -> Topology:
    return resolve_topology(name)


# ------------------------------------------------------------------ published figures
def test_dgx1_allgather_matches_sccl_and_forestcoll():
    b = lower_bounds(dgx1(), allgather(8))
    assert b.steps == 2
    assert b.rounds_per_chunk == Fraction(7, 6)
    assert b.busbw_gbps == pytest.approx(150.0)
    assert b.algbw_gbps == pytest.approx(171.4286, abs=1e-3)
    assert "in-bandwidth" in b.binding and "flow LP" in b.method
    doc = json.loads(json.dumps(b.to_dict(MIB)))
    assert doc["rounds_per_chunk"] == "7/6" and doc["size"] == MIB
    assert {"steps", "time_us", "algbw_gbps", "busbw_gbps", "binding"} <= set(doc)


def test_rounds_per_chunk_ignores_chunking():
    assert lower_bounds(dgx1(), allgather(8, chunks=3)).rounds_per_chunk == Fraction(7, 6)


def test_cuts_alone_give_the_same_dgx1_figures():
    b = lower_bounds(dgx1(), allgather(8), max_flow_vars=0)
    assert b.rounds_per_chunk == Fraction(7, 6) and b.busbw_gbps == pytest.approx(150.0)
    assert "skipped" in b.method


def test_dgx2_model_allgather():
    b = lower_bounds(dgx2(), allgather(16))
    assert (b.steps, b.rounds_per_chunk) == (1, Fraction(15))
    assert b.busbw_gbps == pytest.approx(125.0)
    assert "gpu" in b.binding  # a switch-port group binds


def test_uring4_allgather_and_allreduce():
    ring = uring4()
    ag = lower_bounds(ring, allgather(4))
    assert (ag.steps, ag.rounds_per_chunk) == (3, Fraction(3))
    assert ag.busbw_gbps == pytest.approx(25.0)
    ar = lower_bounds(ring, allreduce(4))
    assert ar.busbw_gbps == pytest.approx(25.0)
    assert ar.rounds_per_chunk == Fraction(6)
    assert ar.bandwidth_time_per_byte == pytest.approx(2 * ag.bandwidth_time_per_byte)
    assert ar.steps == 3 and "reduce-scatter + allgather" in ar.binding
    # the proven bound: every link carries every chunk once
    assert ar.proven is not None and ar.proven.algbw_gbps == pytest.approx(25.0)
    assert "proven" in ar.to_dict(MIB)


def test_ndv2x2_box_cut_binds():
    b = lower_bounds(library("ndv2x2"), allgather(16))
    assert b.algbw_gbps == pytest.approx(25.0)
    assert b.binding.startswith("machine")


def test_h100x16_uses_cuts_and_finishes():
    topo = library("h100x16")
    b = lower_bounds(topo, allgather(topo.ranks))
    assert "skipped" in b.method  # never tries the 260M-variable LP
    assert b.steps == 1
    # 120 chunks into a box through 8 NICs of 50 GB/s: 128 / (120 / 400) GB/s
    assert b.algbw_gbps == pytest.approx(128 / 0.3)
    assert "machine" in b.binding


# ------------------------------------------------------------------ LP against cuts
def test_flow_lp_beats_cuts_for_alltoall_on_a_one_way_ring():
    # chunk s->d rides (d - s) mod 4 links: 24 link loads on 4 links, 6 each; cuts see 4
    ring = uring4()
    lp = lower_bounds(ring, alltoall(4))
    cuts = lower_bounds(ring, alltoall(4), max_flow_vars=0)
    assert lp.algbw_gbps == pytest.approx(4 * 25.0 / 6)
    assert cuts.algbw_gbps == pytest.approx(25.0)
    assert lp.binding.startswith("flow LP") and lp.rounds_per_chunk == Fraction(6)


def test_broadcast_and_reduce_on_a_star():
    hub = star(leaf_mesh=100.0)
    b = lower_bounds(hub, broadcast(5, root=0))
    assert b.algbw_gbps == pytest.approx(100.0)  # S / (4 x 25 GB/s out of the hub)
    assert b.binding == "rank 0 out-bandwidth"
    r = lower_bounds(hub, reduce(5, root=0))
    assert r.algbw_gbps == pytest.approx(100.0) and r.binding == "rank 0 in-bandwidth"
    # without the leaf mesh every leaf link carries the whole buffer
    assert lower_bounds(star(), broadcast(5, root=0)).algbw_gbps == pytest.approx(25.0)


def test_reduce_scatter_is_the_dual_on_the_reversed_topology():
    one_way = uring4()
    rs = lower_bounds(one_way, reduce_scatter(4))
    ag = lower_bounds(one_way.reversed(), dual_collective(reduce_scatter(4)))
    assert rs.bandwidth_time_per_byte == pytest.approx(ag.bandwidth_time_per_byte)
    assert rs.rounds_per_chunk == ag.rounds_per_chunk and rs.steps == ag.steps


def test_alltoall_on_dgx1():
    b = lower_bounds(dgx1(), alltoall(8))
    assert b.steps == 2
    assert b.algbw_gbps == pytest.approx(75.0)


def test_groups_limit_time_but_carry_no_alpha():
    slow_nic = Group("nic", ((0, 1),), 10.0)
    pair = Topology("pair", 2, (Link(0, 1, 100.0, 5.0), Link(1, 0, 100.0, 5.0)), (slow_nic,))
    b = lower_bounds(pair, broadcast(2, root=0))
    assert b.algbw_gbps == pytest.approx(10.0) and "(nic)" in b.binding
    # a step costs max(alpha + S/100, S/10): small sizes pay alpha, large ones the group
    assert b.time_us(1000) == pytest.approx(5.0 + 1000 / 100e3)
    assert b.time_us(10**7) == pytest.approx(10**7 / 10e3)


def test_rounds_need_whole_capacities():
    odd = both_ways("odd", 3, {(0, 1): 25.0, (1, 2): 40.0})
    b = lower_bounds(odd, allgather(3))
    assert b.rounds_per_chunk is None and b.to_dict()["rounds_per_chunk"] is None
    assert b.algbw_gbps > 0


def test_explicit_capacities_solve_their_own_lp():
    links = tuple(Link(i, (i + 1) % 4, 25.0, 0.7, capacity=2) for i in range(4))
    b = lower_bounds(Topology("cap2", 4, links), allgather(4))
    assert b.rounds_per_chunk == Fraction(3, 2) and b.busbw_gbps == pytest.approx(25.0)


def test_steps_bound():
    line = both_ways("line", 4, {(0, 1): 25.0, (1, 2): 25.0, (2, 3): 25.0})
    assert steps_bound(line, broadcast(4, root=1)) == 2
    assert steps_bound(line, reduce(4, root=0)) == 3
    assert steps_bound(line, allreduce(4)) == 3
    assert steps_bound(line, gather(4, root=3)) == 3


def test_nothing_to_move():
    solo = Topology("solo", 1, ())
    b = lower_bounds(solo, allgather(1))
    assert b.steps == 0 and b.time_us(MIB) == 0.0 and math.isinf(b.algbw_gbps)
    assert b.to_dict(MIB)["algbw_gbps"] is None


def test_unreachable_is_an_input_error():
    one_way = Topology("line", 3, (Link(0, 1, 25.0), Link(1, 2, 25.0)))
    with pytest.raises(CollectiveError):
        lower_bounds(one_way, allgather(3))


# ------------------------------------------------------------------ validity
def _hub_allreduce(n_leaves: int = 3) -> Schedule:
    """Leaves reduce chunk k into the hub while the hub sends chunk k-1 back: pipelined."""
    n = n_leaves + 1
    topo = both_ways("star", n, {(0, leaf): 25.0 for leaf in range(1, n)}, alpha=0.0)
    steps = []
    for k in range(n + 1):
        sends = []
        if k < n:
            sends += [Send(k, leaf, 0, "reduce") for leaf in range(1, n)]
        if k > 0:
            sends += [Send(k - 1, 0, leaf, "copy") for leaf in range(1, n)]
        steps.append(Step(tuple(sends), 1))
    return Schedule(topo, allreduce(n), tuple(steps))


def test_allreduce_composition_is_a_convention_not_a_proof():
    schedule = _hub_allreduce()
    assert verify(schedule) == []
    b = lower_bounds(schedule.topology, schedule.collective)
    size = 4 * MIB
    assert step_time_us(schedule, size) < b.time_us(size)  # 5 chunk-times against 6
    assert b.proven.time_us(size) <= step_time_us(schedule, size)


def _check_valid_schedule(schedule: Schedule) -> None:
    b = lower_bounds(schedule.topology, schedule.collective)
    proven = b.proven or b
    assert sum(1 for step in schedule.steps if step.sends or step.switches) >= proven.steps
    for size in (1, 4096, MIB, 1 << 30):
        assert proven.time_us(size) <= step_time_us(schedule, size) * (1 + 1e-9)
    if proven.rounds_per_chunk is not None and schedule.total_rounds is not None:
        assert (schedule.total_rounds / schedule.collective.chunks_per_rank
                >= proven.rounds_per_chunk - Fraction(1, 10**6))


@pytest.mark.parametrize("name", ["schedule-uring4-allgather-ring.json", "schedule-uring4-allreduce-ring.json"])
def test_examples_respect_the_bounds(name):
    schedule = Schedule.from_dict(read_json(DATA / name))
    _check_valid_schedule(schedule)
    b = lower_bounds(schedule.topology, schedule.collective)
    # the ring meets the conventional limit at large sizes
    assert b.time_us(1 << 30) / step_time_us(schedule, 1 << 30) == pytest.approx(1.0, rel=1e-3)


BASELINE_TOPOLOGIES = {"dgx1": dgx1, "uring4": uring4, "star": lambda: star(leaf_mesh=50.0)}
# (topology, baseline, collective) that raise BaselineNotApplicable, with a word of the reason;
# every other combination must build and respect the bounds
NOT_APPLICABLE = {
    **{(t, "direct", "alltoallv"): "traffic matrix" for t in BASELINE_TOPOLOGIES},  # needs alltoallv:FILE
    **{(t, "nccl", "alltoallv"): "none of direct applies" for t in BASELINE_TOPOLOGIES},
    **{(t, b, c): "routing file" for t in BASELINE_TOPOLOGIES  # needs moe_dispatch:FILE (tests/moe runs them)
       for b in ("direct", "deepep") for c in ("moe_dispatch", "moe_combine")},
    **{(t, "hierarchical", c): "two or more machines"
       for t in BASELINE_TOPOLOGIES for c in ("allgather", "allreduce", "reduce_scatter")},
    **{(t, "nccl_pat", c): "one GPU per machine" for t in BASELINE_TOPOLOGIES for c in ("allgather", "reduce_scatter")},
    **{(t, "nccl_nvls", c): "reduce and multicast" for t in BASELINE_TOPOLOGIES  # no switch here
       for c in ("allgather", "allreduce", "reduce_scatter")},
    **{(t, "nccl_nvls_tree", "allreduce"): "NVLink domains" for t in BASELINE_TOPOLOGIES},  # one domain
    ("uring4", "recursive_doubling", "allreduce"): "direct links",  # unidirectional: no r <-> r^1 pair
    ("uring4", "recursive_halving", "allreduce"): "direct links",
    ("uring4", "recursive_halving", "reduce_scatter"): "direct links",
    ("star", "recursive_doubling", "allgather"): "power-of-two",  # 5 ranks
    ("star", "recursive_doubling", "allreduce"): "power-of-two",
    ("star", "recursive_halving", "allreduce"): "power-of-two",
    ("star", "recursive_halving", "reduce_scatter"): "power-of-two",
}
BASELINE_CASES = [
    (topo, name, coll)
    for topo in BASELINE_TOPOLOGIES
    for name, entry in sorted(baselines.registry().items())
    for coll in sorted(entry.collectives)
]


def test_the_not_applicable_baseline_cases_are_real_cases():
    assert set(NOT_APPLICABLE) <= set(BASELINE_CASES)
    assert len(BASELINE_CASES) - len(NOT_APPLICABLE) >= 80  # 86 of 114 build today


@pytest.mark.parametrize("topo_name, name, coll", BASELINE_CASES)
def test_baselines_respect_the_bounds(topo_name, name, coll):
    topo = BASELINE_TOPOLOGIES[topo_name]()
    reason = NOT_APPLICABLE.get((topo_name, name, coll))
    if reason is not None:
        with pytest.raises(BaselineNotApplicable, match=reason):
            baselines.build_baseline(topo, name, coll)
        return
    schedule = baselines.build_baseline(topo, name, coll)  # any exception fails the case
    assert verify(schedule) == []
    assert schedule.collective.name == coll
    _check_valid_schedule(schedule)


@pytest.mark.parametrize("coll", ["allgather", "allreduce", "reduce_scatter"])
@pytest.mark.parametrize("chunks", [1, 3])
def test_switch_schedules_respect_the_switch_bounds(coll, chunks):
    """NVLS through the h100's NVSwitch: valid, and never faster than the bounds with switches
    (a point-to-point bound would be beaten: allreduce NVLS busbw 700 > 450)."""
    schedule = baselines.build_baseline(resolve_topology("h100"), "nccl_nvls", coll, chunks=chunks)
    assert verify(schedule) == [] and schedule.switch_count
    _check_valid_schedule(schedule)


def test_a_reducing_switch_lifts_the_allreduce_bound_to_the_exchange_bound():
    """in-network.md 4.2: every GPU sends and receives M (busbw 2(n-1)/n x 450 = 787.5 on h100),
    and with sums that replace, (n^2-2)/(n(n-1)) M (711.3, docs/bounds.md); allgather and
    reduce-scatter gain nothing (450)."""
    h100 = resolve_topology("h100")
    assert lower_bounds(h100, allreduce(8)).busbw_gbps == pytest.approx(787.5 * 56 / 62)
    assert lower_bounds(h100, allgather(8)).busbw_gbps == pytest.approx(450.0)
    assert lower_bounds(h100, reduce_scatter(8)).busbw_gbps == pytest.approx(450.0)
    plain = replace(h100, switches=())
    assert lower_bounds(plain, allreduce(8)).busbw_gbps == pytest.approx(450.0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=valid_schedules())
def test_random_valid_schedules_respect_the_bounds(schedule):
    _check_valid_schedule(schedule)


def test_bounds_is_frozen():
    b = lower_bounds(uring4(), allgather(4))
    assert isinstance(b, Bounds)
    with pytest.raises(AttributeError):
        b.steps = 1  # type: ignore[misc]


def test_ranks_sharing_a_nic_need_their_receptions_counted_together():
    """Two GPUs behind one NIC: each needs its own copy of every chunk, and both copies
    arrive over links into the pair, so the pair's ingress bounds the time (a cut does not)."""
    from synth.core.library import resolve_topology

    topo = resolve_topology("dgx2x2")
    bounds = lower_bounds(topo, allgather(32))
    # per pair: 2 x 31 receptions over 2 x 125 GB/s of switch ports + one 12.5 GB/s NIC
    assert bounds.algbw_gbps == pytest.approx(32 * 262.5 / 62, rel=1e-6)
    assert "receptions" in bounds.binding


def test_latency_floor_counts_the_nic_alpha_every_crossing_pays():
    from synth.baselines import registry
    from synth.baselines.common import BaselineNotApplicable
    from synth.bounds.steps import latency_floor
    from synth.core.collectives import make_collective
    from synth.core.library import resolve_topology
    from synth.cost import step_time_us

    topo = resolve_topology("dgx2x2")
    coll = make_collective("allgather", topo.ranks)
    nic_alpha = max(l.alpha for l in topo.links)
    assert latency_floor(topo, coll) == nic_alpha  # one NIC hop, more than steps x alpha_min
    bounds = lower_bounds(topo, coll)
    assert bounds.time_us(1) >= nic_alpha > bounds.steps * bounds.alpha_min
    for entry in registry().values():
        if "allgather" not in entry.collectives:
            continue
        try:
            schedule = entry.build(topo, "allgather", None, None)
        except BaselineNotApplicable:
            continue
        for size in (1, 1024, 1 << 20):
            assert step_time_us(schedule, size) >= bounds.time_us(size) * (1 - 1e-9)


def test_the_port_view_keeps_whole_capacities():
    """h100's port view widens every link to 900 GB/s; rounds still apply at the machine's own
    capacities (a GPU's group carries one chunk a round): allreduce needs 8 rounds per chunk by the
    cut, 62/7 by the exchange bound (each of 8 ranks moves one chunk in and one out a round)."""
    b = lower_bounds(resolve_topology("h100"), allreduce(8))
    assert b.rounds_per_chunk == Fraction(62, 7)


def test_an_allreduce_bound_leaves_its_parts_bounds_computed(monkeypatch):
    """issue 43: the walks over an allreduce's reduce-scatter and allgather parts ask for the bounds
    the allreduce's composition already computed; they are not computed again, and are the same."""
    import synth.bounds.lower_bounds as lb
    from synth.core.library import resolve_topology as resolve

    topo = resolve("torus:2x3")
    lb._LIMITS.clear()
    lower_bounds(topo, allreduce(6))
    fresh = {name: lb._computed_limit(topo, coll, lb.FLOW_LP_LIMIT) for name, coll in
             (("rs", reduce_scatter(6)), ("ag", allgather(6)))}

    def recompute(*_args, **_kwargs):
        raise AssertionError("computed again")

    monkeypatch.setattr(lb, "_computed_limit", recompute)
    assert lower_bounds(topo, reduce_scatter(6)).bandwidth_time_per_byte * 6e3 == pytest.approx(fresh["rs"].full)
    assert lower_bounds(topo, allgather(6)).bandwidth_time_per_byte * 6e3 == pytest.approx(fresh["ag"].full)
