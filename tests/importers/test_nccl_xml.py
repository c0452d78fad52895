"""synth.importers.nccl_xml: the NCCL/RCCL topology XML samples read to what EXPECTED.md says, graph
files and bad inputs are refused in one line, and nothing but InputError ever escapes."""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.core.errors import InputError
from synth.importers.machine import PCIE_LEVELS
from synth.importers.nccl_xml import looks_like, read_nccl_xml
from tests.importers.conftest import samples_root

TOPOLOGIES = ["nccl-topo-h100-ibmcloud-vsi-1.xml", "nccl-topo-a100pcie-2gpu-nccl230-1.xml",
              "nccl-topo-rccl-mi250x-16gcd-1.xml", "nccl-topo-azure-ncv4-curated-1.xml",
              "nccl-topo-hygon-dcu-rccl-v2-1.xml"]
GRAPHS = ["nccl-graph-4gpu-2ch-example-1.xml", "nccl-graph-azure-ncv4-a100pcie-1.xml"]


def read(text: str):
    return read_nccl_xml(text, "topo.xml")


def refused(text) -> str:
    """The one-line message read_nccl_xml refuses the text with."""
    with pytest.raises(InputError) as info:
        read_nccl_xml(text, "topo.xml")
    message = str(info.value)
    assert message.startswith("topo.xml: ") and "\n" not in message
    return message


def gpu_pci(busid: str, dev: int, links: str = "", device: str = "0x2330", extra: str = "") -> str:
    return (f'<pci busid="{busid}" class="0x030200" vendor="0x10de" device="{device}" {extra}>'
            f'<gpu dev="{dev}" sm="90">{links}</gpu></pci>')


def system(*cpus: str) -> str:
    return '<system version="1">' + "".join(f'<cpu numaid="{k}">{c}</cpu>' for k, c in enumerate(cpus)) + "</system>"


# ---- the samples -----------------------------------------------------------------------------

def test_h100_ibmcloud_nvswitch_and_nics(sample):
    d = read(sample("nccl-topo-h100-ibmcloud-vsi-1.xml"))
    assert (d.tool, d.gpus, d.gpu_model) == ("nccl-xml", 8, "10de:2330")
    assert d.switch_links == (18,) * 8
    assert all(p.kind == "pcie" for p in d.pairs.values()) and len(d.pairs) == 28
    assert [n.name for n in d.nics] == [f"mlx5_{k}" for k in range(8)]
    assert all(n.gbps == 200 and n.ports == 1 for n in d.nics)
    assert sorted(n.levels.index("PIX") for n in d.nics) == list(range(8))  # one NIC beside each GPU
    assert d.nics[7].levels == ("PIX", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS")
    assert d.numa == (0,) * 4 + (1,) * 4
    assert d.pcie_gen == (5,) * 8 and d.pcie_width == (None,) * 8  # link_width="0"
    assert d.path(0, 1).level == "NODE" and d.path(0, 4).level == "SYS"
    assert d.notes[0].startswith("NCCL topology XML (system version 1): 8 GPUs (10de:2330), 8 NICs, 18 NVSwitch")


def test_h100_switch_counts_are_read_per_link(sample):
    text = sample("nccl-topo-h100-ibmcloud-vsi-1.xml")
    gpu0 = '<nvlink target="0000:f5:00.0" count="5" tclass="0x068000"/>'
    assert text.count(gpu0) == 8
    d = read(text.replace(gpu0, gpu0.replace('count="5"', 'count="9"'), 1))
    assert d.switch_links == (22,) + (18,) * 7


def test_a100pcie_two_gpus_one_dual_port_nic(sample):
    d = read(sample("nccl-topo-a100pcie-2gpu-nccl230-1.xml"))
    assert (d.gpus, d.gpu_model, d.switch_links) == (2, "10de:20b5", ())
    assert d.path(0, 1).kind == "pcie" and d.path(0, 1).level == "SYS"
    (nic,) = d.nics
    assert (nic.name, nic.ports, nic.gbps, nic.levels) == ("mlx5_0", 2, 100.0, ("NODE", "SYS"))
    assert d.numa == (0, 1) and d.pcie_gen == (4, 4) and d.pcie_width == (16, 16)


def test_mi250x_xgmi_as_listed(sample):
    d = read(sample("nccl-topo-rccl-mi250x-16gcd-1.xml"))
    assert (d.gpus, d.gpu_model, d.switch_links) == (16, "gcn:910", ())
    xgmi = {k: p.links for k, p in d.pairs.items() if p.kind == "xgmi"}
    assert len(xgmi) == 28
    assert (xgmi[(0, 1)], xgmi[(0, 2)], xgmi[(0, 4)], xgmi[(1, 5)], xgmi[(14, 15)]) == (4, 1, 2, 1, 4)
    assert d.path(0, 3).kind == "pcie" and d.path(0, 1).level == "PXB"
    assert d.path(0, 1).where == "<gpu dev=0> <xgmi target=0000:51:00.0>"
    assert len(d.nics) == 8 and all(n.gbps == 200 for n in d.nics)
    assert d.numa == tuple(k // 4 for k in range(16))
    assert not any("says" in n for n in d.notes)  # both ends agree everywhere
    assert d.notes[0].startswith("RCCL topology XML (system version 2): 16 GPUs")


def test_azure_curated_self_targets_ignored(sample):
    d = read(sample("nccl-topo-azure-ncv4-curated-1.xml"))
    assert d.gpus == 4 and d.gpu_model == "10de:20b5"
    assert all(p.kind == "pcie" and p.level == "SYS" for p in d.pairs.values())
    assert sum("own bus id" in n for n in d.notes) == 4
    assert d.pcie_gen == (None,) * 4 and d.pcie_width == (None,) * 4  # link_speed="" link_width="0"
    (nic,) = d.nics
    assert (nic.name, nic.gbps, nic.levels) == ("eth0", 100.0, ("NODE", "SYS", "SYS", "SYS"))


def test_hygon_rccl_version2(sample):
    d = read(sample("nccl-topo-hygon-dcu-rccl-v2-1.xml"))
    assert d.gpus == 8 and "system version 2" in d.notes[0] and "1d94:55b7" in d.notes[0]
    assert d.numa == (3,) * 4 + (7,) * 4
    assert all(p.kind == "pcie" for p in d.pairs.values())
    assert [(n.name, n.ports, n.gbps) for n in d.nics] == [
        ("mlx5_0", 2, 200.0), ("mlx5_2", 2, 10.0), ("mlx5_4", 2, 200.0)]
    assert d.nics[1].levels == ("SYS",) * 8  # the <cpu> that holds only a NIC
    assert d.path(0, 1).level == "PXB" and d.path(0, 4).level == "SYS"


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_every_topology_sample_is_complete(sample, name):
    text = sample(name)
    d = read(text)
    assert looks_like(text)
    assert set(d.pairs) == {(i, j) for i in range(d.gpus) for j in range(i + 1, d.gpus)}
    assert all(p.level in PCIE_LEVELS for p in d.pairs.values())
    assert len(d.numa) == len(d.pcie_gen) == len(d.pcie_width) == d.gpus
    assert all(len(n.levels) == d.gpus for n in d.nics)


@pytest.mark.parametrize("name", GRAPHS)
def test_graph_files_refused(sample, name):
    text = sample(name)
    assert looks_like(text)
    assert "an NCCL graph file (rings and trees), not a topology" in refused(text)


# ---- what the reader makes of the format ---------------------------------------------------

def test_bus_ids_match_case_and_domain_insensitively():
    text = system(gpu_pci("0000:0B:00.0", 0, '<nvlink target="0c:00.0" count="2" tclass="0x030200"/>')
                  + gpu_pci("0000:0c:00.0", 1, '<nvlink target="0000:0b:00.0" count="2"/>'))
    d = read(text)
    assert (d.path(0, 1).kind, d.path(0, 1).links, d.path(0, 1).level) == ("nvlink", 2, "NODE")


def test_disagreeing_counts_keep_the_larger_with_a_note():
    d = read(system(gpu_pci("0000:01:00.0", 0, '<nvlink target="0000:02:00.0" count="2"/>')
                    + gpu_pci("0000:02:00.0", 1, '<nvlink target="0000:01:00.0" count="3"/>')))
    assert d.path(0, 1).links == 3 and any("kept 3" in n for n in d.notes)


def test_switch_by_target_class_and_unknown_targets():
    switch = '<pci busid="0000:f0:00.0" class="0x068000"/>'
    links = '<nvlink target="0000:f0:00.0" count="6"/><nvlink target="0000:99:00.0" count="1"/>'
    d = read(system(gpu_pci("0000:01:00.0", 0, links) + switch))
    assert d.switch_links == (6,) and any("reaches no GPU or NVSwitch" in n for n in d.notes)


def test_levels_from_the_pci_tree():
    bridge = '<pci busid="0000:10:00.0" class="0x060400">{}</pci>'
    inner = bridge.format(gpu_pci("0000:11:00.0", 0) + gpu_pci("0000:12:00.0", 1))
    outer = bridge.replace("10", "20").format(inner + bridge.replace("10", "30").format(gpu_pci("0000:31:00.0", 2)))
    d = read(system(outer + gpu_pci("0000:40:00.0", 3), gpu_pci("0000:50:00.0", 4)))
    assert [d.path(0, j).level for j in range(1, 5)] == ["PIX", "PXB", "NODE", "SYS"]


def test_devs_renumbered_in_order_with_a_note():
    link = '<nvlink target="0000:02:00.0" count="1"/>'
    d = read(system(gpu_pci("0000:02:00.0", 5) + gpu_pci("0000:01:00.0", 2, link)))
    assert d.gpus == 2 and d.path(0, 1).where == "<gpu dev=2> <nvlink target=0000:02:00.0>"
    assert any("not 0..1" in n for n in d.notes)


def test_models_rccl_names_and_disagreement():
    gfx = ('<pci busid="0000:01:00.0" vendor="0x1002" device="0x74a1">'
           '<gpu dev="0" gcn="gfx942:sramecc+:xnack-" arch="38911"/></pci>')
    assert read(system(gfx)).gpu_model == "gfx942"
    mixed = read(system(gpu_pci("0000:01:00.0", 0) + gpu_pci("0000:02:00.0", 1, device="0x2335")))
    assert mixed.gpu_model == "10de:2330" and any("different models" in n for n in mixed.notes)


@pytest.mark.parametrize("speed, gen", [("2.5 GT/s PCIe", 1), ("5 GT/s", 2), ("8.0 GT/s PCIe", 3), ("16", 4),
                                        ("32.0 GT/s PCIe", 5), ("64.0 GT/s PCIe", 6), ("", None), ("fast", None)])
def test_pcie_generation(speed, gen):
    assert read(system(gpu_pci("0000:01:00.0", 0, extra=f'link_speed="{speed}" link_width="8"'))).pcie_gen == (gen,)


def test_looks_like():
    assert looks_like("<!-- header -->\n<system version='2'>") and looks_like("<graphs version=\"1\">")
    assert not looks_like("GPU0\tGPU1\n") and not looks_like("<systemd/>")


# ---- refusals ---------------------------------------------------------------------------------

def test_truncated_sample_names_line_and_column(sample):
    text = sample("nccl-topo-h100-ibmcloud-vsi-1.xml")
    message = refused(text[: len(text) // 2])
    assert "not well-formed XML" in message and ", column " in message and "topo.xml: line " in message


@pytest.mark.parametrize("text, words", [
    ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><system>&a;</system>', "DOCTYPE"),
    ('<system><!ENTITY a "b"></system>', "ENTITY"),
    ("", "empty"), ("   \n", "empty"),
    ("<system><cpu></system>", "line 1, column 16: not well-formed XML (mismatched tag)"),
    ('<system version="1"><cpu numaid="0"/></system>', "no <gpu>"),
    ('<topology><gpu dev="0"/></topology>', "<topology>"),
    ('<system><cpu><pci busid="0000:1b:00.0"><gpu sm="90"/></pci></cpu></system>',
     "<gpu> under <pci busid=0000:1b:00.0> has no dev attribute"),
    ('<system><cpu><pci busid="0000:1b:00.0"><gpu dev="x"/></pci></cpu></system>', 'dev="x"'),
    ('<system><cpu><gpu dev="0"/></cpu></system>', "not inside a <pci>"),
    (system(gpu_pci("0000:01:00.0", 0) + gpu_pci("0000:02:00.0", 0)), "two <gpu dev=0>"),
    (system(gpu_pci("0000:01:00.0", 0, '<nvlink target="0000:02:00.0" count="four"/>')), 'count="four"'),
    (system(gpu_pci("0000:01:00.0", 0, '<nvlink target="0000:02:00.0" count="1e99"/>')), 'count="1e99"'),
    (system(gpu_pci("0000:01:00.0", 0, f'<nvlink target="0000:02:00.0" count="{"9" * 5000}"/>')), "count="),
    (system(gpu_pci("0000:01:00.0", 0, '<nvlink target="0000:02:00.0"/>')), "without a count"),
    (system(gpu_pci("0000:01:00.0", 0) + '<nic><net name="mlx5_0" speed="fast"/></nic>'), 'speed="fast"'),
    ("\x00\x01\x02binary\xff", "not well-formed XML"),
    ("<system>\udc80</system>", "not readable as XML"),
])
def test_bad_inputs_refused_in_one_line(text, words):
    assert words in refused(text)


def test_binary_bytes_refused():
    assert "not well-formed XML" in refused(bytes(range(256)))


# ---- properties -----------------------------------------------------------------------------

def _shuffled(text: str, rng: random.Random) -> str:
    root = ET.fromstring(text)
    for el in root.iter():
        children = list(el)
        rng.shuffle(children)
        el[:] = children
    return ET.tostring(root, encoding="unicode")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(TOPOLOGIES), rng=st.randoms(use_true_random=False))
def test_sibling_order_does_not_matter(name, rng):
    root = samples_root()
    if root is None:
        pytest.skip("shared/topo-samples not found")
    text = (root / name).read_text(encoding="utf-8")
    assert read(_shuffled(text, rng)) == read(text)


XMLISH = st.lists(st.sampled_from(['<system version="1">', "</system>", '<cpu numaid="0">', "</cpu>",
                                   '<pci busid="0000:01:00.0">', '<pci busid="01:00.0" class="0x068000">',
                                   "</pci>", '<gpu dev="0">', '<gpu dev="1"/>', "</gpu>", "<nic>", "</nic>",
                                   '<net name="n" speed="-3"/>', '<nvlink target="0000:01:00.0" count="2"/>',
                                   '<xgmi target="01:00.0" count="x"/>', "<graphs>", "<channel/>", "&amp;",
                                   "&bogus;", "<!-- c -->", "\x00", "<", ">"]), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200).map(lambda b: b.decode("latin-1")), st.text(max_size=200), XMLISH))
def test_nothing_but_input_error_escapes(text):
    try:
        d = read(text)
    except InputError as err:
        assert "\n" not in str(err) and str(err).startswith("topo.xml: ")
    else:
        assert d.gpus >= 1
