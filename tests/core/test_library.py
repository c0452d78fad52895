"""Tests for the topology library (topologies/*.json), synth.core.compose and synth.core.library."""

from __future__ import annotations

import json

import pytest

from synth.core.compose import compose_machines
from synth.core.errors import InputError, TopologyError
from synth.core.library import library_folder, library_names, list_topologies, load_library, resolve_topology
from synth.core.topology import LINK_KINDS, Link, Nic, Topology

LIBRARY = ["a100", "b200", "b300", "dgx1", "dgx2", "gb200nvl72", "gb300nvl72", "h100", "h200", "mi250", "mi300x",
           "mi325x", "mi355x", "ndv2"]


def diameter(t: Topology) -> float:
    return max(max(row) for row in t.hop_distances)


def fabric_links(t: Topology) -> list[Link]:
    return [l for l in t.links if t.machine_of[l.src] != t.machine_of[l.dst]]


# ---------------------------------------------------------------- library files
def test_library_names():
    assert library_names() == LIBRARY


@pytest.mark.parametrize("name", LIBRARY)
def test_library_file_is_valid_and_documented(name):
    t = load_library(name)
    assert t.name == name
    assert t.machines == (tuple(range(t.ranks)),)
    assert t.sources and all(isinstance(s, str) and s for s in t.sources)
    assert t.rounds_apply
    assert diameter(t) < float("inf")
    for link in t.links:  # every connection is modelled in both directions, alike
        back = t.link(link.dst, link.src)
        assert back is not None and (back.bandwidth, back.alpha) == (link.bandwidth, link.alpha)


# which kind every link of a library machine is (NVIDIA NVLink / NVSwitch ports, AMD xGMI)
LIBRARY_KINDS = {"a100": "nvlink", "dgx1": "nvlink", "dgx2": "nvlink", "h100": "nvlink",
                 "mi250": "xgmi", "mi300x": "xgmi", "ndv2": "nvlink",
                 "h200": "nvlink", "b200": "nvlink", "b300": "nvlink", "gb200nvl72": "nvlink",
                 "gb300nvl72": "nvlink", "mi325x": "xgmi", "mi355x": "xgmi"}


@pytest.mark.parametrize("name", LIBRARY)
def test_every_library_link_has_its_kind(name):
    t = load_library(name)
    assert {link.kind for link in t.links} == {LIBRARY_KINDS[name]}
    assert any(s.startswith(f"link kind: {LIBRARY_KINDS[name]}") for s in t.sources)
    text = library_folder().joinpath(f"{name}.json").read_text(encoding="utf-8")
    assert all("kind" in link for link in json.loads(text)["links"])  # in the file, not a default


@pytest.mark.parametrize("spec", ["ndv2x2", "h100x16", "dgx2x2", "mi300xx2"])
def test_composed_links_have_kinds_and_the_fabric_is_net(spec):
    t = resolve_topology(spec)
    assert all(link.kind in LINK_KINDS for link in t.links)
    assert {l.kind for l in fabric_links(t)} == {"net"}
    inside = {l.kind for l in t.links if t.machine_of[l.src] == t.machine_of[l.dst]}
    assert inside == {LIBRARY_KINDS[spec[: spec.rindex("x")]]}


@pytest.mark.parametrize("name", LIBRARY)
def test_library_file_round_trips(name):
    t = load_library(name)
    assert Topology.from_dict(t.to_dict()) == t
    text = library_folder().joinpath(f"{name}.json").read_text(encoding="utf-8")
    assert json.loads(text) == t.to_dict()  # no field of the file is lost on load


def test_dgx1_hybrid_cube_mesh():
    t = load_library("dgx1")
    assert t.ranks == 8 and len(t.links) == 32
    for rank in range(8):
        assert sum(t.link_capacity(l) for l in t.out_links[rank]) == 6
        assert sum(t.link_capacity(l) for l in t.in_links[rank]) == 6
    doubles = {frozenset(l.key) for l in t.links if l.bandwidth == 50.0}
    assert len(doubles) == 8
    assert frozenset((0, 1)) in doubles and frozenset((6, 7)) in doubles
    assert t.link(0, 2).bandwidth == 25.0 and t.link_capacity(t.link(0, 2)) == 1
    assert not t.has_link(0, 5) and not t.has_link(0, 7)
    assert len({frozenset(l.key) for l in t.links}) == 16  # 12 of the 28 pairs are not linked
    assert diameter(t) == 2
    assert {l.alpha for l in t.links} == {0.7}
    assert not t.nics


def test_ndv2_is_dgx1_plus_one_shared_nic():
    t, d = load_library("ndv2"), load_library("dgx1")
    assert t.links == d.links
    assert t.nics == (Nic("nic0", tuple(range(8)), 12.5, 2.6),)


def test_dgx2_switch_ports_and_nics():
    t = load_library("dgx2")
    assert t.ranks == 16 and len(t.links) == 16 * 15
    assert {(l.bandwidth, l.alpha) for l in t.links} == {(125.0, 0.35)}
    groups = {g.name: g for g in t.groups}
    assert len(groups) == 32
    out3 = groups["gpu3-out"]
    assert len(out3.links) == 15 and all(s == 3 for s, _ in out3.links)
    assert t.group_capacity(out3) == 1 and t.group_capacity(groups["gpu3-in"]) == 1
    assert [n.ranks for n in t.nics] == [(2 * i, 2 * i + 1) for i in range(8)]
    assert {(n.bandwidth, n.alpha) for n in t.nics} == {(12.5, 2.6)}


@pytest.mark.parametrize("name, port, nic", [("a100", 300.0, 25.0), ("h100", 450.0, 50.0)])
def test_nvswitch_boxes(name, port, nic):
    t = load_library(name)
    assert t.ranks == 8 and len(t.links) == 56
    assert {l.bandwidth for l in t.links} == {port}
    assert {g.bandwidth for g in t.groups} == {port} and len(t.groups) == 16
    assert [n.ranks for n in t.nics] == [(i,) for i in range(8)]
    assert {n.bandwidth for n in t.nics} == {nic}


def test_mi250_xgmi_multiplicities():
    t = load_library("mi250")
    assert t.ranks == 16
    for rank in range(16):  # 7 xGMI links per GCD, counting multiplicity
        assert sum(l.bandwidth for l in t.out_links[rank]) == 7 * 50.0
        assert t.link(rank, rank ^ 1).bandwidth == 200.0  # the two GCDs of one OAM
    assert {t.link_capacity(l) for l in t.links} == {1, 2, 4}
    assert len(t.nics) == 16 and {n.bandwidth for n in t.nics} == {16.0}
    assert any("ForestColl" in s for s in t.sources)


def test_mi300x_fully_connected():
    t = load_library("mi300x")
    assert len(t.links) == 56 and {l.bandwidth for l in t.links} == {64.0}
    assert all(len(t.out_links[r]) == 7 for r in range(8))
    assert diameter(t) == 1
    assert {n.bandwidth for n in t.nics} == {50.0}


# ---------------------------------------------------------------- composition
def test_ndv2x2():
    t = resolve_topology("ndv2x2")
    assert t.name == "ndv2x2" and t.ranks == 16
    assert t.machines == (tuple(range(8)), tuple(range(8, 16)))
    fabric = fabric_links(t)
    assert len(fabric) == 128
    assert sum(1 for l in fabric if l.src < 8) == 64 and sum(1 for l in fabric if l.src >= 8) == 64
    assert {(l.bandwidth, l.alpha) for l in fabric} == {(12.5, 2.6)}
    groups = {g.name: g for g in t.groups}
    assert set(groups) == {"m0-nic0-out", "m0-nic0-in", "m1-nic0-out", "m1-nic0-in"}
    for group in groups.values():
        assert group.bandwidth == 12.5 and len(group.links) == 64
        assert t.group_capacity(group) == 1
    assert set(groups["m0-nic0-out"].links) == set(groups["m1-nic0-in"].links)
    assert t.link(9, 11).bandwidth == 50.0 and t.link_capacity(t.link(9, 11)) == 4  # 50 / 12.5
    assert [n.name for n in t.nics] == ["m0-nic0", "m1-nic0"]
    assert t.nics[1].ranks == tuple(range(8, 16))
    assert diameter(t) == 2  # every fabric link is one hop; dgx1 itself has diameter 2
    assert Topology.from_dict(t.to_dict()) == t


def test_dgx2x2_copies_groups_and_pairs_nics():
    t = resolve_topology("dgx2x2")
    assert t.ranks == 32 and len(fabric_links(t)) == 2 * 16 * 16
    groups = {g.name: g for g in t.groups}
    assert groups["m1-gpu3-out"].links == tuple((19, d) for d in range(16, 32) if d != 19)
    assert len(groups["m0-nic2-out"].links) == 2 * 16  # 2 GPUs to the 16 GPUs of machine 1
    assert t.rounds_apply and t.group_capacity(groups["m0-gpu0-out"]) == 10  # 125 / 12.5


def test_h100x16_composes():
    base = load_library("h100")
    t = compose_machines(base, 16)  # 128 ranks, 15360 fabric links: must stay fast (the suite is the check)
    assert t.ranks == 128 and t.machine_count == 16
    assert len(fabric_links(t)) == 128 * 120
    assert len(t.groups) == 16 * 16 + 128 * 2
    assert t.link(0, 127).bandwidth == 50.0


@pytest.mark.parametrize("name", [n for n in LIBRARY if n != "dgx1"])
def test_every_nic_machine_composes(name):
    base = load_library(name)
    t = compose_machines(base, 3)
    served = sum(len(n.ranks) for n in base.nics)
    assert len(fabric_links(t)) == 3 * 2 * served * served
    assert len(t.links) == 3 * len(base.links) + 3 * 2 * served * served
    nic_groups = [g for g in t.groups if g.name.endswith(("-out", "-in")) and "-nic" in g.name]
    assert len(nic_groups) == 2 * 3 * len(base.nics)
    assert t.machine_count == 3


def test_compose_dgx1_fails_clearly():
    with pytest.raises(TopologyError, match="dgx1 has no NICs.*ndv2"):
        resolve_topology("dgx1x2")


def test_compose_rejects_bad_counts_and_bases():
    ndv2 = load_library("ndv2")
    for k, text in ((1, "at least 2"), (0, "at least 2"), (2.0, "integer"), (10**4, "links")):
        with pytest.raises(TopologyError, match=text):
            compose_machines(ndv2, k)
    two_boxes = compose_machines(ndv2, 2)
    with pytest.raises(TopologyError, match="one machine"):
        compose_machines(two_boxes, 2)


def test_compose_rejects_rank_behind_two_nics():
    base = Topology("pair", 2, (Link(0, 1, 25.0), Link(1, 0, 25.0)),
                    nics=(Nic("a", (0, 1), 12.5), Nic("b", (1,), 12.5)))
    with pytest.raises(TopologyError, match="duplicates another link"):
        compose_machines(base, 2)


def test_compose_mixed_nics_uses_min_bandwidth_max_alpha():
    base = Topology("pair", 2, (Link(0, 1, 25.0), Link(1, 0, 25.0)),
                    nics=(Nic("fast", (0,), 50.0, 1.0), Nic("slow", (1,), 12.5, 3.0)))
    t = compose_machines(base, 2)
    assert (t.link(0, 2).bandwidth, t.link(0, 2).alpha) == (50.0, 1.0)
    assert (t.link(0, 3).bandwidth, t.link(0, 3).alpha) == (12.5, 3.0)
    assert t.machines == ((0, 1), (2, 3))


# ---------------------------------------------------------------- resolve_topology
@pytest.mark.parametrize(
    "spec, ranks, links",
    [("ring:8", 8, 16), ("uring:4", 4, 4), ("line:5", 5, 8), ("full:4", 4, 12), ("star:5", 5, 8),
     ("hypercube:3", 8, 24), ("torus:4x4", 16, 64), ("torus:2x2x2", 8, 24), ("Ring:3", 3, 6),
     (" dgx1 ", 8, 32), ("DGX2", 16, 240)],
)
def test_resolve_specs(spec, ranks, links):
    t = resolve_topology(spec)
    assert (t.ranks, len(t.links)) == (ranks, links)


def test_resolve_caches_library_files():
    assert resolve_topology("dgx1") is resolve_topology("dgx1")
    assert resolve_topology("ndv2x2") is resolve_topology("ndv2x2")


def test_resolve_path(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(resolve_topology("ring:3").renamed("mine").to_dict()))
    assert resolve_topology(str(path)).name == "mine"
    with pytest.raises(InputError, match="no such file"):
        resolve_topology(str(tmp_path / "absent.json"))
    with pytest.raises(InputError, match="no such file"):
        resolve_topology("absent.json")


@pytest.mark.parametrize(
    "spec, text",
    [
        ("foo", "unknown topology 'foo'; known: a100, b200"),
        ("", "empty topology spec"),
        ("ring", "did you mean ring:N"),
        ("mi300x2", "did you mean mi300xx2"),
        ("ring:", "whole number"),
        ("ring:two", "whole number"),
        ("ring:1", "at least 2"),
        ("torus:4", "like 4x4"),
        ("torus:4x1", "size >= 2"),
        ("mesh:4", "unknown generator 'mesh'"),
        ("ndv2x1", "at least 2 copies"),
        ("foox2", "unknown topology 'foox2'"),
    ],
)
def test_bad_specs(spec, text):
    with pytest.raises(InputError) as info:
        resolve_topology(spec)
    message = str(info.value)
    assert text in message and "\n" not in message


def test_unknown_name_lists_everything():
    with pytest.raises(InputError) as info:
        resolve_topology("dgx3")
    message = str(info.value)
    for item in LIBRARY + ["ring:N", "torus:AxB[xC]", "hypercube:D", "NAMExK"]:
        assert item in message


def test_list_topologies():
    rows = list_topologies()
    names = [name for name, _ in rows]
    for item in LIBRARY + ["ring:N", "uring:N", "line:N", "full:N", "star:N", "hypercube:D",
                           "torus:AxB[xC]", "NAMExK"]:
        assert item in names
    assert all(text and "\n" not in text for _, text in rows)
