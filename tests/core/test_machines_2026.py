"""The 2026 library machines (h200, b200, b300, gb200nvl72, gb300nvl72, mi325x, mi355x) and the cloud
shapes built from them (issue 42, items 1 and 2): each loads, validates, cites machines-2026.md, has
the per-GPU rates of the reference, composes with its switch per machine; bad names and copy counts
are one line, exit 2."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from synth.bounds.lower_bounds import lower_bounds
from synth.core.collectives import allreduce
from synth.core.library import (
    CLOUD_SHAPES,
    library_names,
    list_topologies,
    load_library,
    machine_names,
    resolve_topology,
    shape_names,
)
from synth.core.topology import MAX_RANKS, Topology
from tests.cli_run import run

# per machine, from machines-2026.md: ranks, GB/s per link and direction, links per GPU, NIC GB/s per GPU,
# whether an NVLS switch spans the machine
REFERENCE = {
    "h200": (8, 450.0, 7, 50.0, True),  # section 1: 450 GB/s per GPU through NVSwitch, 8 x 400 Gb/s
    "b200": (8, 900.0, 7, 50.0, True),  # section 2: 900 GB/s per GPU, 8 x 400 Gb/s
    "b300": (8, 900.0, 7, 100.0, True),  # section 3: 900 GB/s per GPU, 8 x 800 Gb/s
    "gb200nvl72": (72, 900.0, 71, 50.0, True),  # section 4: 72 GPUs, 900 GB/s, one 400 Gb/s NIC per GPU
    "gb300nvl72": (72, 900.0, 71, 100.0, True),  # section 5: 2 x 400 Gb/s per GPU (OCI)
    "mi325x": (8, 64.0, 7, 50.0, False),  # section 6: the MI300X mesh, 64 GB/s per link
    "mi355x": (8, 76.8, 7, 50.0, False),  # section 7: 76.8 GB/s per link, 8 x 400 GbE
}
SECTION = {"h200": 1, "b200": 2, "b300": 3, "gb200nvl72": 4, "gb300nvl72": 5, "mi325x": 6, "mi355x": 7}

# per shape: base, NIC GB/s per GPU (machines-2026.md section 8), transport
SHAPES = {
    "a3-mega": ("h100", 25.0, "tcp"), "a3-ultra": ("h200", 50.0, "roce"), "a4": ("b200", 50.0, "roce"),
    "p5": ("h100", 50.0, "efa"), "p5e": ("h200", 50.0, "efa"), "p5en": ("h200", 50.0, "efa"),
    "p6-b200": ("b200", 50.0, "efa"), "nd-h100-v5": ("h100", 50.0, "ib"), "nd-h200-v5": ("h200", 50.0, "ib"),
    "nd-mi300x-v5": ("mi300x", 50.0, "ib"), "oci-b300": ("b300", 100.0, "roce"),
    "oci-gb200-v3.4": ("gb200nvl72", 100.0, "roce"), "oci-gb300": ("gb300nvl72", 100.0, "roce"),
}


def nic_rate_per_gpu(t: Topology) -> set[float]:
    """The NIC GB/s each rank behind a NIC gets (a NIC's rate over the ranks it serves)."""
    return {nic.bandwidth / len(nic.ranks) for nic in t.nics}


# ---------------------------------------------------------------- library machines
def test_every_new_machine_is_in_the_library():
    assert set(REFERENCE) <= set(library_names())


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_rates_match_the_reference(name):
    ranks, link, per_gpu_links, nic, _ = REFERENCE[name]
    t = load_library(name)
    assert t.ranks == ranks and len(t.links) == ranks * (ranks - 1)
    assert {l.bandwidth for l in t.links} == {link} and {l.alpha for l in t.links} == {0.7}
    assert all(len(t.out_links[r]) == per_gpu_links for r in range(ranks))
    assert [n.ranks for n in t.nics] == [(r,) for r in range(ranks)]
    assert nic_rate_per_gpu(t) == {nic}
    assert t.machines == (tuple(range(ranks)),)
    assert t.rounds_apply and max(max(row) for row in t.hop_distances) == 1


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_sources_cite_the_reference_section(name):
    t = load_library(name)
    cited = [s for s in t.sources if "machines-2026.md" in s]
    assert cited and any(f"section {SECTION[name]}," in s for s in cited)
    for line in cited:  # every section cited with its source tags, e.g. "section 2, [V6]"
        for match in re.finditer(r"(?:machines-2026\.md|;) section \d+(.{0,3})", line):
            assert match.group(1) == ", [", line
    assert sum(s.startswith("NICs:") for s in t.sources) == 1
    assert any(s.startswith("link kind:") for s in t.sources)


@pytest.mark.parametrize("name", sorted(n for n in REFERENCE if REFERENCE[n][4]))
def test_nvidia_machines_have_one_nvls_switch_on_the_port_groups(name):
    t = load_library(name)
    ranks, port = t.ranks, REFERENCE[name][1]
    groups = {g.name: g for g in t.groups}
    assert len(groups) == 2 * ranks and {g.bandwidth for g in groups.values()} == {port}
    assert t.group_capacity(groups["gpu5-out"]) == 1 and len(groups["gpu5-out"].links) == ranks - 1
    (switch,) = t.switches
    assert switch.name == "nvswitch" and switch.ranks == tuple(range(ranks)) and switch.kind == "nvlink"
    assert (switch.reduce, switch.multicast, switch.reduce_multicast) == (True, True, False)
    assert (switch.bandwidth, switch.alpha) == (port, 0.7)
    assert switch.out_groups == tuple(f"gpu{r}-out" for r in range(ranks))
    assert switch.in_groups == tuple(f"gpu{r}-in" for r in range(ranks))


def test_b200_says_its_two_switch_chips_are_one_domain():
    assert any("2 NVLink5 switch chips" in s and "one switch domain" in s for s in load_library("b200").sources)


@pytest.mark.parametrize("name", ["mi325x", "mi355x"])
def test_amd_meshes_have_no_switch(name):
    t = load_library(name)
    assert not t.switches and not t.groups
    assert sum(l.bandwidth for l in t.out_links[0]) == pytest.approx(7 * REFERENCE[name][1])


def test_mi325x_is_the_mi300x_fabric():
    mi325x, mi300x = load_library("mi325x"), load_library("mi300x")
    assert (mi325x.links, mi325x.nics) == (mi300x.links, mi300x.nics)


@pytest.mark.parametrize("name", ["b200", "gb200nvl72"])
def test_allreduce_bound_is_above_point_to_point(name):
    t = load_library(name)
    busbw = lower_bounds(t, allreduce(t.ranks)).to_dict(1 << 30)["busbw_gbps"]
    point_to_point = REFERENCE[name][1]  # a GPU's port: what allreduce busbw is held to without the switch
    if t.ranks <= 8:  # the switchless bound itself (seconds at 72 ranks, so checked on the 8-GPU board)
        plain = replace(t, switches=())
        point_to_point = lower_bounds(plain, allreduce(t.ranks)).to_dict(1 << 30)["busbw_gbps"]
        assert point_to_point == pytest.approx(REFERENCE[name][1])
    assert busbw > 1.5 * point_to_point


# ---------------------------------------------------------------- cloud shapes
def test_the_shape_table_is_complete():
    assert shape_names() == sorted(SHAPES)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shape_is_its_base_with_the_providers_nics(name):
    base_name, per_gpu, transport = SHAPES[name]
    t, base = resolve_topology(name), load_library(base_name)
    assert t.name == name and CLOUD_SHAPES[name].transport == transport
    assert (t.ranks, t.links, t.groups, t.switches, t.machines) == (
        base.ranks, base.links, base.groups, base.switches, base.machines)
    assert [n.ranks for n in t.nics] == [n.ranks for n in base.nics]
    assert [n.alpha for n in t.nics] == [n.alpha for n in base.nics]
    assert nic_rate_per_gpu(t) == {per_gpu}
    nic_lines = [s for s in t.sources if s.startswith("NICs:")]
    assert len(nic_lines) == 1 and f"{per_gpu:g} GB/s per GPU" in nic_lines[0]
    assert any("machines-2026.md section 8" in s for s in t.sources)
    assert Topology.from_dict(t.to_dict()) == t


def test_multi_rail_shapes_say_how_they_are_modelled():
    for name in ("p5", "p5en", "oci-gb200-v3.4"):
        assert CLOUD_SHAPES[name].nics_per_gpu > 1
        assert any("summed rate" in s for s in resolve_topology(name).sources)


def test_no_name_reads_as_a_composition_of_another():
    names = machine_names()
    assert len(names) == len(set(names))
    for name in names:
        match = re.fullmatch(r"(.+)x(\d+)", name)
        assert not (match and match.group(1) in names), name


# ---------------------------------------------------------------- composition
@pytest.mark.parametrize("spec, ranks, nic", [
    ("b200x4", 32, 50.0), ("gb200nvl72x2", 144, 50.0), ("mi355xx2", 16, 50.0), ("h200x2", 16, 50.0),
    ("b300x2", 16, 100.0), ("a3-megax2", 16, 25.0), ("p5enx3", 24, 50.0), ("oci-gb200-v3.4x2", 144, 100.0),
])
def test_compositions_keep_a_switch_per_machine(spec, ranks, nic):
    t = resolve_topology(spec)
    base = resolve_topology(spec[: spec.rindex("x")])
    assert t.name == spec and t.ranks == ranks and t.machine_count == ranks // base.ranks
    assert len(t.switches) == len(base.switches) * t.machine_count
    for switch in t.switches:
        assert {t.machine_of[r] for r in switch.ranks} == {t.machine_of[switch.ranks[0]]}
    fabric = [l for l in t.links if t.machine_of[l.src] != t.machine_of[l.dst]]
    assert {(l.bandwidth, l.kind) for l in fabric} == {(nic, "net")}
    assert len(fabric) == t.machine_count * (t.machine_count - 1) * base.ranks ** 2


# ---------------------------------------------------------------- topo list and bad input
def test_topo_list_names_every_machine_and_shape(capsys):
    code, out, _ = run(capsys, "topo", "list")
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert code == 0 and set(machine_names()) <= set(lines)
    for name, (base, per_gpu, transport) in SHAPES.items():
        assert f": {base} with {per_gpu:g} GB/s of NICs per GPU" in lines[name] and transport in lines[name]
    assert "not 50 GB/s as on h100" in lines["a3-mega"]
    assert "reduce + multicast" in lines["gb200nvl72"] and "reduce + multicast" in lines["a4"]
    assert [name for name, _ in list_topologies()].count("p5") == 1


@pytest.mark.parametrize("spec, text", [
    ("b20", "close names: b200"),
    ("a3-meg", "close names: a3-mega"),
    ("gb200x2", "close machine names:"),
    ("gb200nvl72x0", "needs at least 2 copies, got 0"),
    ("b200x1", "needs at least 2 copies, got 1"),
    (f"gb200nvl72x{MAX_RANKS // 72 + 1}", f"at most gb200nvl72x{MAX_RANKS // 72}"),
    ("h100x" + "9" * 5000, "(5000 digits): more than the"),
    ("dgx1x2", "dgx1 has no NICs"),
])
def test_bad_names_and_counts_are_one_line_exit_2(capsys, spec, text):
    code, out, err = run(capsys, "topo", "show", spec)
    assert code == 2 and out == "" and text in err and err.count("\n") == 1, err
