"""The synthetic routing generator's promises, and the MoE cut bounds against the generic ones."""

from __future__ import annotations

import numpy as np
import pytest

from synth.bounds import lower_bounds as generic
from synth.bounds.lower_bounds import lower_bounds
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.moe.generate import make_routing
from tests.moe.clusters import cluster


def test_the_generator_is_seeded_and_keeps_its_promises():
    a = make_routing(16, 64, 4, 50, 128, "zipf:1.2", seed=7, imbalance=2.0)
    b = make_routing(16, 64, 4, 50, 128, "zipf:1.2", seed=7, imbalance=2.0)
    assert np.array_equal(a.expert_ids, b.expert_ids) and np.array_equal(a.token_source, b.token_source)
    per = a.tokens_per_rank
    assert per.sum() == 16 * 50 and per.max() == 100
    ids = a.expert_ids.reshape(-1, 4)
    assert (np.sort(ids, axis=1)[:, 1:] != np.sort(ids, axis=1)[:, :-1]).all()  # distinct experts per token
    c = make_routing(16, 64, 4, 50, 128, "zipf:1.2", seed=8, imbalance=2.0)
    assert not np.array_equal(a.expert_ids, c.expert_ids)


def test_node_limited_routing_keeps_tokens_on_few_machines():
    r = make_routing(32, 128, 8, 64, 128, "uniform", seed=1, max_machines=2, machine_ranks=8)
    machine = (r.experts[r.expert_ids] // 8).reshape(-1, 8)
    assert max(len(set(row)) for row in machine.tolist()) <= 2
    free = make_routing(32, 128, 8, 64, 128, "uniform", seed=1)
    assert max(len(set(row)) for row in (free.experts[free.expert_ids] // 8).reshape(-1, 8).tolist()) > 2


def test_zipf_makes_hot_experts():
    hot = make_routing(8, 64, 2, 400, 64, "zipf:1.5", seed=1)
    flat = make_routing(8, 64, 2, 400, 64, "uniform", seed=1)
    share = lambda r: np.bincount(r.expert_ids, minlength=64).max() / r.tokens  # noqa: E731
    assert share(hot) > 3 * share(flat)


@pytest.mark.parametrize("options, words", [
    ({"topk": 9}, "--topk 9"), ({"imbalance": 0.5}, "--imbalance"), ({"popularity": "zipf:-1"}, "--popularity"),
    ({"popularity": "pareto"}, "--popularity"), ({"max_machines": 1, "topk": 9}, "--topk"),
])
def test_impossible_options_are_one_line(options, words):
    base = dict(ranks=8, experts=8, topk=2, tokens=4, token_bytes=64, popularity="uniform")
    with pytest.raises(InputError, match=words.replace("-", r"\-")):
        make_routing(**{**base, **options})


@pytest.mark.parametrize("topology", ["h100x2", "cluster"])
@pytest.mark.parametrize("kind", ["moe_dispatch", "moe_combine"])
def test_moe_cuts_equal_the_generic_cut_bound(topology, kind):
    topo = cluster(3, 2) if topology == "cluster" else resolve_topology(topology)
    routing = make_routing(topo.ranks, 2 * topo.ranks, 3, 12, 256, "zipf:1.2", seed=4, imbalance=1.5)
    coll = routing.collective(kind)
    fast = lower_bounds(topo, coll)
    slow = generic._bounds(topo, coll, fast.steps, generic._limit(topo, coll, 0), None)  # cuts, no flow LP
    assert fast.bandwidth_time_per_byte == pytest.approx(slow.bandwidth_time_per_byte, rel=1e-9)
    assert fast.steps == generic.steps_bound(topo, coll)
    assert fast.latency_floor == pytest.approx(generic.latency_floor(topo, coll))
