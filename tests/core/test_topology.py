"""Topology validation, JSON round trip, capacities, reversal."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings

from synth.core.errors import TopologyError
from synth.core.io import read_json
from synth.core.topology import Group, Link, Topology
from tests.schedule_strategies import topologies
from tests.test_verify import DATA

URING4 = read_json(DATA / "topology-uring4.json")


def doc_with(**changes):
    doc = copy.deepcopy(URING4)
    doc.update(changes)
    return doc


def test_example_topology_loads():
    topo = Topology.from_dict(URING4)
    assert topo.ranks == 4 and topo.has_link(3, 0) and not topo.has_link(0, 3)
    assert topo.hop_distances[0][3] == 3 and topo.rounds_apply


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"format": "synth.schedule"}, "'format' must be"),
        ({"version": 3}, "unsupported synth.topology version 3"),
        ({"ranks": 0}, "positive integer"),
        ({"links": [{"src": 0, "dst": 0, "bandwidth": 25.0}]}, "self-loop"),
        ({"links": [{"src": 0, "dst": 1, "bandwidth": 25.0}, {"src": 0, "dst": 1, "bandwidth": 25.0}]},
         "duplicate link 0->1"),
        ({"links": [{"src": 0, "dst": 9, "bandwidth": 25.0}]}, "out of range"),
        ({"links": [{"src": 0, "dst": 1, "bandwidth": 0}]}, "positive number"),
        ({"links": [{"src": 0, "dst": 1, "bandwidth": -5}]}, "positive number"),
        ({"links": [{"src": 0, "dst": 1}]}, "missing 'bandwidth'"),
        ({"links": [{"src": 0, "dst": 1, "bandwidth": 25.0, "alpha": -1}]}, "alpha"),
        ({"groups": [{"name": "g", "links": [[1, 0]], "bandwidth": 25.0}]}, "not a link"),
        ({"machines": [[0, 1], [1, 2, 3]]}, "two machines"),
        ({"machines": [[0, 1]]}, "in no machine"),
        ({"links": "nope"}, "'links' must be a list"),
        ({"links": [{"src": 0, "dst": 1, "bandwidth": 25.0, "kind": "infiniband"}]}, "link 0->1: kind must be one of"),
        ({"links": [{"src": 0, "dst": 1, "bandwidth": 25.0, "kind": 3}]}, "link 0->1: kind must be one of"),
        ({"links": [{"src": 0, "dst": 1, "bandwidth": 25.0, "kind": "NVLink"}]}, "got 'NVLink'"),
    ],
)
def test_bad_topologies_are_rejected_with_one_clear_line(changes, message):
    with pytest.raises(TopologyError) as err:
        Topology.from_dict(doc_with(**changes))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_capacity_is_relative_to_the_slowest_link_and_may_be_fractional():
    topo = Topology("t", 2, (Link(0, 1, 50.0), Link(1, 0, 25.0)), (Group("g", ((0, 1),), 75.0),))
    assert topo.link_capacity(topo.link(0, 1)) == 2 and topo.group_capacity(topo.groups[0]) == 3
    odd = Topology("t", 2, (Link(0, 1, 30.0), Link(1, 0, 25.0)))
    assert odd.link_capacity(odd.link(0, 1)) is None and not odd.rounds_apply
    explicit = Topology("t", 2, (Link(0, 1, 30.0, capacity=1), Link(1, 0, 25.0)))
    assert explicit.rounds_apply


@settings(max_examples=60, deadline=None)
@given(topologies())
def test_round_trip_and_double_reversal(topo):
    assert Topology.from_dict(topo.to_dict()) == topo
    assert topo.reversed().reversed() == topo
    rev = topo.reversed()
    assert all(rev.has_link(l.dst, l.src) for l in topo.links)


# ------------------------------------------------------------------ link kind
@pytest.mark.parametrize("kind", ["nvlink", "xgmi", "pcie", "net"])
def test_link_kind_is_read_and_written_back(kind):
    doc = copy.deepcopy(URING4)
    doc["links"][0]["kind"] = kind
    topo = Topology.from_dict(doc)
    assert topo.link(0, 1).kind == kind and topo.link(1, 2).kind is None
    assert topo.to_dict()["links"][0]["kind"] == kind and "kind" not in topo.to_dict()["links"][1]
    assert Topology.from_dict(topo.to_dict()) == topo


def test_a_file_without_kinds_writes_back_identically():
    assert Topology.from_dict(URING4).to_dict() == URING4
    assert all("kind" not in link for link in Topology.from_dict(URING4).to_dict()["links"])


def test_unknown_kind_in_the_constructor_names_the_link():
    with pytest.raises(TopologyError,
                       match=r"^topology 't': link 1->0: kind must be one of nvlink, xgmi, pcie, net, got 'wire'$"):
        Topology("t", 2, (Link(0, 1, 25.0, kind="net"), Link(1, 0, 25.0, kind="wire")))


def test_reversal_keeps_kinds():
    topo = Topology("t", 3, (Link(0, 1, 25.0, kind="nvlink"), Link(1, 2, 12.5, 2.6, kind="net"), Link(2, 0, 25.0)))
    rev = topo.reversed()
    assert (rev.link(1, 0).kind, rev.link(2, 1).kind, rev.link(0, 2).kind) == ("nvlink", "net", None)
