"""Tree baselines: binomial tree (broadcast, reduce, scatter, gather) and double binary tree."""

from __future__ import annotations

import pytest

from synth.baselines import BaselineNotApplicable
from synth.baselines.trees import (
    BASELINES,
    binomial_phases,
    binomial_tree,
    double_binary_tree,
    double_binary_trees,
    interior,
    tree_levels,
)
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.topology import Link, Topology
from synth.verify import verify


def hand_dgx1() -> Topology:
    """Two fully connected quads joined rank-to-rank (hybrid cube-mesh), some links doubled."""
    doubled = {(0, 3), (1, 2), (4, 7), (5, 6), (0, 4), (2, 6)}
    pairs = [(a, b) for q in (0, 4) for a in range(q, q + 4) for b in range(q, q + 4) if a != b]
    pairs += [(i, i + 4) for i in range(4)] + [(i + 4, i) for i in range(4)]
    links = tuple(
        Link(a, b, 50.0 if (a, b) in doubled or (b, a) in doubled else 25.0, 0.7) for a, b in pairs
    )
    return Topology("hand-dgx1", 8, links)


TOPOLOGIES = ["full:4", "full:8", "ring:8", "uring:4", "hypercube:3", "star:5", "line:5", "ndv2x2"]


def topologies():
    return [resolve_topology(spec) for spec in TOPOLOGIES] + [hand_dgx1()]


@pytest.fixture(scope="module", params=range(len(TOPOLOGIES) + 1), ids=TOPOLOGIES + ["hand-dgx1"])
def topo(request):
    return topologies()[request.param]


@pytest.mark.parametrize("name", ["broadcast", "reduce", "scatter", "gather"])
@pytest.mark.parametrize("chunks", [None, 3])
def test_binomial_verifies(topo, name, chunks):
    for root in (0, topo.ranks - 1):
        schedule = binomial_tree(topo, name, root, chunks)
        assert verify(schedule) == []
        assert schedule.collective.name == name and schedule.collective.root == root
        assert schedule.meta["algorithm"] == "binomial_tree" and schedule.meta["pieces"] == (chunks or 1)
        assert schedule.topology == topo


def test_binomial_broadcast_on_hypercube_uses_only_direct_links():
    cube = resolve_topology("hypercube:3")
    for root in range(8):
        schedule = binomial_tree(cube, "broadcast", root, None)
        assert len(schedule.steps) == 3
        assert schedule.meta["routed_edges"] == 0
        assert schedule.send_count == 7  # every rank but the root receives exactly once
        assert all(step.rounds == 1 for step in schedule.steps)


def test_binomial_pipeline_length():
    cube = resolve_topology("hypercube:3")
    assert len(binomial_tree(cube, "broadcast", 2, 5).steps) == 3 + 5 - 1
    assert len(binomial_tree(cube, "reduce", 2, 5).steps) == 3 + 5 - 1


def test_reduce_rooted_at_3():
    for spec in ("full:8", "ring:8", "star:5"):
        schedule = binomial_tree(resolve_topology(spec), "reduce", 3, None)
        assert verify(schedule) == []
        assert schedule.collective.combining and schedule.collective.post[0] == frozenset({3})
        assert {s.op for step in schedule.steps for s in step.sends} == {"reduce"}


def test_binomial_phases_cover_every_rank_once():
    for n in range(2, 40):
        children = [b for phase in binomial_phases(n) for _, b in phase]
        assert sorted(children) == list(range(1, n))
        assert len(binomial_phases(n)) == (n - 1).bit_length()


def test_double_binary_trees_are_complementary():
    for n in range(2, 70):
        first, second = double_binary_trees(n)
        assert not interior(first) & interior(second), n
        for parents in (first, second):
            assert parents.count(-1) == 1
            assert all(parents.count(p) <= 2 for p in interior(parents))
            assert sum(len(level) for level in tree_levels(parents)) == n - 1


@pytest.mark.parametrize("chunks", [None, 1, 3])
def test_double_binary_tree_verifies(topo, chunks):
    schedule = double_binary_tree(topo, "allreduce", None, chunks)
    assert verify(schedule) == []
    pieces = chunks or 4
    assert schedule.meta["pieces_per_half"] == pieces
    assert schedule.collective.buffer_chunks == 2 * pieces
    assert schedule.meta["interior_overlap"] == []
    parents = schedule.meta["trees"]
    inner = [{p for p in tree if p >= 0} for tree in parents]
    assert not inner[0] & inner[1]


def test_double_binary_tree_on_full_mesh_is_direct():
    schedule = double_binary_tree(resolve_topology("full:8"), "allreduce", None, 2)
    assert schedule.meta["routed_edges"] == 0
    assert schedule.meta["physical_interior_overlap"] == []


@pytest.mark.parametrize("root", [8, -1, "1", True, 2.0])
def test_bad_roots_raise_input_error(root):
    full8 = resolve_topology("full:8")
    for name in ("broadcast", "reduce", "gather"):
        with pytest.raises(InputError):
            binomial_tree(full8, name, root, None)


def test_bad_arguments():
    full4 = resolve_topology("full:4")
    with pytest.raises(InputError):
        binomial_tree(full4, "broadcast", 0, 0)
    with pytest.raises(InputError):
        double_binary_tree(full4, "allreduce", 1, None)
    with pytest.raises(BaselineNotApplicable, match="allgather"):
        binomial_tree(full4, "allgather", None, None)
    with pytest.raises(BaselineNotApplicable):
        double_binary_tree(full4, "broadcast", None, None)
    single = Topology("one", 1, ())
    with pytest.raises(BaselineNotApplicable):
        binomial_tree(single, "broadcast", 0, None)
    split = Topology("split", 3, (Link(0, 1, 25.0), Link(1, 0, 25.0)))
    with pytest.raises(BaselineNotApplicable, match="unreachable"):
        binomial_tree(split, "broadcast", 0, None)
    with pytest.raises(BaselineNotApplicable, match="unreachable"):
        double_binary_tree(split, "allreduce", None, None)


def test_baseline_entries():
    names = {b.name: b for b in BASELINES}
    assert names["binomial_tree"].collectives == {"broadcast", "reduce", "scatter", "gather"}
    assert names["double_binary_tree"].collectives == {"allreduce"}
    schedule = names["binomial_tree"].build(resolve_topology("ring:4"), "broadcast", None, None)
    assert schedule.collective.root == 0
