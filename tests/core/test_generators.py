"""Tests for synth.core.generators: shapes, degrees, diameters, parameter checks."""

from __future__ import annotations

import math

import pytest

from synth.core import generators
from synth.core.errors import InputError, TopologyError
from synth.core.topology import Topology


def degrees(t: Topology) -> set[int]:
    return {len(t.out_links[r]) for r in range(t.ranks)} | {len(t.in_links[r]) for r in range(t.ranks)}


def diameter(t: Topology) -> float:
    return max(max(row) for row in t.hop_distances)


def undirected_pairs(t: Topology) -> set[frozenset[int]]:
    return {frozenset(l.key) for l in t.links}


@pytest.mark.parametrize(
    "topology, ranks, links, degree, diam",
    [
        (generators.ring(8), 8, 16, 2, 4),
        (generators.ring(2), 2, 2, 1, 1),
        (generators.uring(5), 5, 5, 1, 4),
        (generators.line(5), 5, 8, None, 4),
        (generators.full(4), 4, 12, 3, 1),
        (generators.hypercube(3), 8, 24, 3, 3),
        (generators.hypercube(1), 2, 2, 1, 1),
        (generators.torus((4, 4)), 16, 64, 4, 4),
        (generators.torus((2, 2, 2)), 8, 24, 3, 3),
        (generators.torus((3, 4)), 12, 48, 4, 3),
    ],
)
def test_shapes(topology, ranks, links, degree, diam):
    assert topology.ranks == ranks
    assert len(topology.links) == links
    if degree is not None:
        assert degrees(topology) == {degree}
    assert diameter(topology) == diam
    assert topology.machines == (tuple(range(ranks)),)


def test_uring_is_one_way():
    t = generators.uring(4)
    assert t.has_link(0, 1) and not t.has_link(1, 0)
    assert t.hop_distances[1][0] == 3


def test_line_has_no_wrap_and_ends_have_degree_one():
    t = generators.line(5)
    assert not t.has_link(0, 4) and not t.has_link(4, 0)
    assert len(t.out_links[0]) == len(t.out_links[4]) == 1
    assert len(t.out_links[2]) == 2


def test_star_hub_and_spokes():
    t = generators.star(5)
    assert sorted(l.dst for l in t.out_links[0]) == [1, 2, 3, 4]
    assert all([l.dst for l in t.out_links[r]] == [0] for r in range(1, 5))
    assert diameter(t) == 2


def test_hypercube_neighbours_differ_in_one_bit():
    t = generators.hypercube(4)
    for link in t.links:
        assert bin(link.src ^ link.dst).count("1") == 1


def test_torus_2x2_has_no_duplicate_links():
    t = generators.torus((2, 2))
    assert len(t.links) == len({l.key for l in t.links}) == 8
    assert degrees(t) == {2}
    assert len(undirected_pairs(t)) == 4


def test_torus_names_and_wraps():
    t = generators.torus((4, 4))
    assert t.name == "torus4x4"
    assert t.has_link(3, 0) and t.has_link(0, 12) and t.has_link(12, 0)
    assert not t.has_link(3, 4)  # row end does not run into the next row


def test_generated_links_use_documented_constants():
    for t in (generators.ring(4), generators.full(3), generators.torus((2, 3))):
        assert {(l.bandwidth, l.alpha, l.kind) for l in t.links} == {(25.0, 0.7, "nvlink")}
        assert any("25.0 GB/s" in s and "0.7 us" in s and "kind nvlink" in s for s in t.sources)
        assert t.rounds_apply


def test_generated_topologies_round_trip():
    for t in (generators.ring(5), generators.star(3), generators.torus((2, 2, 2))):
        assert Topology.from_dict(t.to_dict()) == t


@pytest.mark.parametrize(
    "make, text",
    [
        (lambda: generators.ring(1), "at least 2"),
        (lambda: generators.uring(0), "at least 2"),
        (lambda: generators.line(-3), "at least 2"),
        (lambda: generators.full(1), "at least 2"),
        (lambda: generators.star(1), "at least 2"),
        (lambda: generators.ring(2.5), "integer"),
        (lambda: generators.ring(True), "integer"),
        (lambda: generators.ring(10**6), "at most"),
        (lambda: generators.hypercube(0), ">= 1"),
        (lambda: generators.hypercube(30), "at most"),
        (lambda: generators.torus((4,)), "2 or more dimensions"),
        (lambda: generators.torus((4, 1)), "size >= 2"),
        (lambda: generators.torus((4, "4")), "integers"),
        (lambda: generators.torus((64, 64)), "at most"),
    ],
)
def test_bad_parameters(make, text):
    with pytest.raises(TopologyError) as info:
        make()
    message = str(info.value)
    assert text in message and "\n" not in message
    assert isinstance(info.value, InputError)


def test_hop_distance_matches_torus_formula():
    dims = (3, 4)
    t = generators.torus(dims)
    for a in range(t.ranks):
        for b in range(t.ranks):
            ca, cb = divmod(a, 4), divmod(b, 4)
            expect = sum(min(abs(x - y), size - abs(x - y)) for x, y, size in zip(ca, cb, dims))
            assert t.hop_distances[a][b] == expect
    assert not any(math.isinf(d) for row in t.hop_distances for d in row)
