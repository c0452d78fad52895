"""Inside one switch domain (8 ranks of gb200nvl72), a rank with twice the tokens overloads its
out-port in the direct plan; the planner and the router fan its tokens out (switch multicasts,
or relays through a destination where the switch cannot multicast) and reach the bound. Every
plan verifies, dispatch and combine, and costs what the contract model says."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.bounds.lower_bounds import lower_bounds
from synth.core.library import resolve_topology
from synth.core.subset import sub_topology
from synth.cost import step_time_us
from synth.moe.costing import LinkTable
from synth.moe.fanout import _Loads, domain_hops, relay_of
from synth.moe.generate import make_routing
from synth.moe.plan import Fans, Traffic, plan_valid, reversed_hops
from synth.moe.synthesize import moe_schedule
from synth.verify import verify
from tests.moe.clusters import write_routing

KINDS = ("moe_dispatch", "moe_combine")


def domain(multicast: bool = True, ranks: int = 8):
    topo = sub_topology(resolve_topology("gb200nvl72"), tuple(range(ranks)))
    if not multicast:
        topo = replace(topo, name="gb200-8-nomc", switches=tuple(replace(s, multicast=False) for s in topo.switches))
    return topo


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    """8 ranks, 32 experts, top-4, 14 KB tokens; one rank has twice the mean tokens."""
    routing = make_routing(8, 32, 4, 48, 14336, "uniform", seed=1, imbalance=2.0)
    return routing, write_routing(tmp_path_factory.mktemp("fan") / "r.json", routing)


def _bound(topo, routing, kind):
    collective = routing.collective(kind)
    return lower_bounds(topo, collective).time_us(collective.size_bytes)


def test_the_direct_plan_is_held_back_by_the_busy_source(skewed):
    routing, path = skewed
    topo = domain()
    loads = _Loads(Traffic.of(routing, topo))
    busy = int(np.argmax(routing.tokens_per_rank))
    assert np.flatnonzero(loads.excess > 0).tolist() == [busy]
    direct = moe_schedule(topo, f"moe_dispatch:{path}", "direct").details["time_us"]
    assert direct > 1.5 * _bound(topo, routing, "moe_dispatch")


@pytest.mark.parametrize("multicast", [True, False])
@pytest.mark.parametrize("method", ["planner", "router"])
def test_fanned_out_plans_verify_and_reach_the_bound(skewed, multicast, method):
    routing, path = skewed
    topo = domain(multicast)
    for kind in KINDS:
        result = moe_schedule(topo, f"{kind}:{path}", method)
        schedule = result.schedule
        assert verify(schedule) == []
        took = step_time_us(schedule, schedule.collective.size_bytes)
        assert took == pytest.approx(result.details["time_us"], rel=1e-9)  # the arrays cost as the contract
        bound = _bound(topo, routing, kind)
        direct = moe_schedule(topo, f"{kind}:{path}", "direct").details["time_us"]
        deepep = moe_schedule(topo, f"{kind}:{path}", "deepep").details["time_us"]
        assert took >= bound * (1 - 1e-9)
        assert took * 1.4 < direct and took <= deepep
        if multicast:  # one step, at the bound but for the switch's alpha at most
            assert result.details["shape"] == "multicast" and len(schedule.steps) == 1
            assert schedule.switch_count > 0 and took <= bound + topo.switches[0].alpha
            ops = {(len(e.srcs) > 1, len(e.dsts) > 1) for step in schedule.steps for e in step.switches}
            assert ops == ({(True, False)} if kind == "moe_combine" else {(False, True)})
        else:  # pipelined through relays
            assert result.details["shape"] == "relayed" and schedule.switch_count == 0
            assert took >= 0.9 * bound and len(schedule.steps) > 1


def test_relays_are_destinations_with_room_and_leave_no_source_overloaded(skewed):
    routing, _ = skewed
    topo = domain(multicast=False)
    traffic = Traffic.of(routing, topo)
    loads = _Loads(traffic)
    relay = relay_of(traffic, loads)
    relayed = np.flatnonzero(relay >= 0)
    assert len(relayed) and (routing.token_source[relayed] == int(np.argmax(routing.tokens_per_rank))).all()
    needs = set(zip(traffic.dest_token.tolist(), traffic.dest_rank.tolist()))
    assert all((t, r) in needs for t, r in zip(relayed.tolist(), relay[relayed].tolist()))  # a relay is a delivery
    moved = loads.count[relayed] - 1
    out = loads.out.copy()
    np.subtract.at(out, routing.token_source[relayed], moved)
    np.add.at(out, relay[relayed], moved)
    assert (out <= loads.capacity + 1e-9).all()


def test_a_combine_reduce_must_count_the_roots_own_output(skewed):
    """A source hosting one of its token's experts starts the combine with an output of its own:
    the switch reduce into it replaces its copy, so it must be a src too; without, it is lost."""
    routing, _ = skewed
    topo = domain()
    table = LinkTable.of(topo)
    (hops, details), = domain_hops(Traffic.of(routing, topo), table)
    fans = hops.fans
    assert details["shape"] == "multicast" and fans.root_needs.any()
    combine = reversed_hops(hops)
    collective = routing.collective("moe_combine")
    assert (combine.fans.with_root == fans.root_needs).all()
    assert plan_valid(topo, collective, combine)
    dropped = replace(combine.fans, with_root=np.zeros(len(fans), dtype=bool))
    assert not plan_valid(topo, collective, replace(combine, fans=dropped))
    assert table.time_us(combine, routing.token_bytes) >= table.time_us(hops, routing.token_bytes)


def test_a_multicast_missing_a_leaf_is_caught(skewed):
    routing, _ = skewed
    topo = domain()
    (hops, _), = domain_hops(Traffic.of(routing, topo), LinkTable.of(topo))
    fans = hops.fans
    cut = Fans(fans.chunk, fans.step, fans.switch, fans.root, np.r_[fans.ptr[:-1], fans.ptr[-1] - 1],
               fans.leaves[:-1], fans.root_needs)
    assert plan_valid(topo, routing.collective("moe_dispatch"), hops)
    assert not plan_valid(topo, routing.collective("moe_dispatch"), replace(hops, fans=cut))


def test_fanning_out_is_only_taken_where_it_is_faster(tmp_path):
    """Even tokens per rank: some out-port may still carry more than the busiest in-port (then a
    few multicasts help); with top-1 nothing fans out and the direct plan stays."""
    topo = domain()
    for topk, fans in ((4, None), (1, False)):
        routing = make_routing(8, 32, topk, 48, 14336, "uniform", seed=1)
        path = write_routing(tmp_path / f"even{topk}.json", routing)
        result = moe_schedule(topo, f"moe_dispatch:{path}", "planner")
        direct = moe_schedule(topo, f"moe_dispatch:{path}", "direct").details["time_us"]
        if result.details["shape"] == "one-shot":
            assert result.schedule.switch_count == 0 and result.details["time_us"] == direct
        else:
            assert fans is None and result.details["time_us"] < direct


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 6), st.integers(1, 4), st.integers(1, 8), st.integers(0, 10**6), st.booleans(),
       st.sampled_from(["uniform", "zipf:1.5"]))
def test_random_skewed_routings_give_valid_fan_outs(ranks, topk, tokens, seed, multicast, popularity):
    topo = domain(multicast, ranks)
    routing = make_routing(ranks, 4 * ranks, topk, tokens, 14336, popularity, seed=seed, imbalance=min(ranks, 2.0))
    table = LinkTable.of(topo)
    for hops, _ in domain_hops(Traffic.of(routing, topo), table):
        for kind, plan in zip(KINDS, (hops, reversed_hops(hops))):
            assert plan_valid(topo, routing.collective(kind), plan), kind
