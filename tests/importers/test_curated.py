"""Curated NCCL_TOPO_FILEs that list GPUs and NICs as bare ``<pci>`` elements (``--nvlink``), the
``--gpu`` message that names only the models fitting the file, and truncated inputs.

The fixtures in ``curated/`` were written for these tests in the shapes cloud VM images ship:
``nd-a100-v4-shape.xml`` (8 GPUs, 4 NUMA nodes, one bridge per node with 2 GPUs + 2 InfiniBand
NICs, no vendor ids), ``nd-v100-v2-shape.xml`` (8 GPUs directly under 2 ``<cpu>``, one NIC,
vendor/device 0x0000, PCIe gen3), ``nd-h100-v5-shape.xml`` (one bridge per GPU + NIC pair, gen5).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synth.cli.main import main
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.topology import Topology
from synth.importers.build import build_topology, fitting_models
from synth.importers.gpus import MODELS, listed
from synth.importers.machine import GpuPath, MachineDescription
from synth.importers.nccl_xml import read_nccl_xml
from synth.importers.reader import import_text

HERE = Path(__file__).resolve().parent / "curated"
A100_V4, V100_V2, H100_V5 = (HERE / f"nd-{n}-shape.xml" for n in ("a100-v4", "v100-v2", "h100-v5"))


def read(path: Path):
    return read_nccl_xml(path.read_text(), path.name)


def cli(tmp_path, capsys, path: Path, *options: str) -> tuple[int, str, Topology | None]:
    """Exit code, stderr and the topology written (None when nothing was written)."""
    out = tmp_path / "out.json"
    if out.exists():
        out.unlink()
    code = main(["topo", "import", str(path), "-o", str(out), *options])
    err = capsys.readouterr().err.strip()
    topo = Topology.from_dict(json.loads(out.read_text())) if out.exists() else None
    return code, err, topo


def refused(tmp_path, capsys, path: Path, *options: str) -> str:
    code, err, topo = cli(tmp_path, capsys, path, *options)
    assert code == 2 and topo is None
    assert len(err.splitlines()) == 1 and path.name in err, err
    return err


def same_machine_as(topo: Topology, library: Topology) -> None:
    assert sorted((l.src, l.dst, l.bandwidth, l.kind) for l in topo.links) == \
        sorted((l.src, l.dst, l.bandwidth, l.kind) for l in library.links)
    assert sorted((g.name, g.links, g.bandwidth) for g in topo.groups) == \
        sorted((g.name, g.links, g.bandwidth) for g in library.groups)


# ---- reading the three shapes ---------------------------------------------------------------

def test_a100_v4_shape_reads_gpus_and_nics_by_class():
    d = read(A100_V4)
    assert (d.gpus, d.class_only, d.gpu_model, d.switch_links) == (8, True, None, ())
    assert d.numa == (0, 0, 1, 1, 2, 2, 3, 3)
    assert d.pcie_gen == (4,) * 8 and d.pcie_width == (16,) * 8
    assert all(p.kind == "pcie" for p in d.pairs.values())
    assert [d.path(0, j).level for j in (1, 2, 7)] == ["PIX", "SYS", "SYS"]
    assert [n.name for n in d.nics] == [f"ib-{0x101 + g:04x}:00:00.0" for g in range(8)]
    assert d.nics[0].levels == ("PIX", "PIX") + ("SYS",) * 6
    assert d.nics[5].levels == ("SYS",) * 4 + ("PIX", "PIX") + ("SYS",) * 2
    assert all(n.gbps is None and n.ports == 1 for n in d.nics)
    assert "8 GPUs by PCI class only" in d.notes[0] and any("file order" in n for n in d.notes)


def test_v100_v2_shape_endpoints_under_the_cpu():
    d = read(V100_V2)
    assert (d.gpus, d.gpu_model, d.numa) == (8, None, (0,) * 4 + (1,) * 4)  # vendor/device 0x0000: not stated
    assert d.pcie_gen == (3,) * 8
    assert d.path(0, 3).level == "NODE" and d.path(3, 4).level == "SYS"
    (nic,) = d.nics
    assert nic.name == "ib-0009:00:00.0" and nic.levels == ("NODE",) * 4 + ("SYS",) * 4


def test_h100_v5_shape_one_bridge_per_pair():
    d = read(H100_V5)
    assert d.gpus == 8 and d.pcie_gen == (5,) * 8 and d.numa == (0,) * 4 + (1,) * 4
    assert d.path(0, 1).level == "NODE" and d.path(0, 4).level == "SYS"
    assert [n.levels.index("PIX") for n in d.nics] == list(range(8))
    assert all(n.levels.count("PIX") == 1 and n.levels.count("NODE") == 3 for n in d.nics)


def test_gpus_are_numbered_in_file_order_and_vga_is_a_gpu():
    text = ('<system version="1"><cpu numaid="1"><pci busid="0000:09:00.0" class="0x030000" vendor="0x10de" '
            'device="0x20b5" link_speed="16 GT/s" link_width="8"/></cpu><cpu numaid="0">'
            '<pci busid="0000:02:00.0" class="0x030200"/><pci busid="0000:03:00.0" class="0x020000"/>'
            '<pci busid="0000:04:00.0" class="0x060400"/></cpu></system>')
    d = read_nccl_xml(text, "t.xml")
    assert d.gpus == 2 and d.numa == (1, 0) and d.pcie_width == (8, None)
    assert d.gpu_model == "10de:20b5"  # GPU 0 is the first in the file, not the lowest bus id
    assert [(n.name, n.levels) for n in d.nics] == [("eth-0000:03:00.0", ("SYS", "NODE"))]


def test_gpu_files_keep_reading_only_gpu_elements():
    text = ('<system version="1"><cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200">'
            '<gpu dev="0"/></pci><pci busid="0000:02:00.0" class="0x030200"/>'
            '<pci busid="0000:03:00.0" class="0x020700"/></cpu></system>')
    d = read_nccl_xml(text, "t.xml")
    assert (d.gpus, d.class_only, d.nics) == (1, False, ())


@pytest.mark.parametrize("text, words", [
    ('<system version="1"><cpu numaid="0"><pci busid="0000:01:00.0" class="0x020700"/></cpu></system>',
     "no <gpu> element and no <pci> of a GPU class"),
    ('<system><cpu><pci busid="0000:01:00.0" class="0x030200"/><pci busid="01:00.0" class="0x030200"/></cpu>'
     '</system>', "two GPU <pci> elements with busid 01:00.0"),
])
def test_bad_class_only_files_refused_in_one_line(text, words):
    with pytest.raises(InputError) as info:
        read_nccl_xml(text, "t.xml")
    assert words in str(info.value) and "\n" not in str(info.value)


# ---- --nvlink ---------------------------------------------------------------------------------

def test_without_the_choice_one_line_names_both_choices_and_nvidia_smi(tmp_path, capsys):
    for path in (A100_V4, V100_V2, H100_V5):
        err = refused(tmp_path, capsys, path, "--gpu", "a100")
        assert "PCI class only" in err and "no NVLink" in err and "run time" in err
        assert "--nvlink switch" in err and "--nvlink none" in err and "nvidia-smi topo -m" in err


def test_switch_gives_the_models_nvswitch_ports(tmp_path, capsys):
    code, err, a100 = cli(tmp_path, capsys, A100_V4, "--gpu", "a100", "--nvlink", "switch")
    assert code == 0, err
    same_machine_as(a100, resolve_topology("a100"))  # 300 GB/s per GPU port
    assert {g.bandwidth for g in a100.groups} == {300.0}
    assert [(n.ranks, n.bandwidth) for n in a100.nics] == [((g,), 25.0) for g in range(8)]
    assert any(s.startswith("NVSwitch (--nvlink switch") and "12 A100 NVLinks" in s for s in a100.sources)
    code, err, h100 = cli(tmp_path, capsys, H100_V5, "--gpu", "H100", "--nvlink", "switch")
    assert code == 0, err
    same_machine_as(h100, resolve_topology("h100"))
    assert [(n.ranks, n.bandwidth) for n in h100.nics] == [((g,), 50.0) for g in range(8)]


def test_none_gives_pcie_only_with_sharing_and_nic_groups(tmp_path, capsys):
    code, err, topo = cli(tmp_path, capsys, A100_V4, "--gpu", "a100", "--nvlink", "none")
    assert code == 0, err
    assert {(l.kind, l.bandwidth) for l in topo.links} == {("pcie", 31.5)} and len(topo.links) == 56
    groups = {g.name: g for g in topo.groups}
    assert set(groups["pcieswitch0-up"].links) == {(a, b) for a in (0, 1) for b in range(2, 8)}
    assert len([name for name in groups if name.startswith("cpu")]) == 12  # 4 NUMA nodes
    assert [(n.ranks, n.bandwidth) for n in topo.nics] == [((g,), 25.0) for g in range(8)]
    assert any(s.startswith("--nvlink none") for s in topo.sources)
    code, err, v100 = cli(tmp_path, capsys, V100_V2, "--nvlink", "none")  # gen3 from the file: no --gpu needed
    assert code == 0, err
    assert {l.bandwidth for l in v100.links} == {15.75}
    assert [(n.ranks, n.bandwidth) for n in v100.nics] == [((0, 1, 2, 3), 12.5)]


def test_switch_refused_without_nvlink(tmp_path, capsys):
    assert "RTX4090 has no NVLink" in refused(tmp_path, capsys, H100_V5, "--gpu", "rtx4090", "--nvlink", "switch")
    assert "MI300X has no NVLink" in refused(tmp_path, capsys, H100_V5, "--gpu", "mi300x", "--nvlink", "switch")


def test_switch_without_a_model_lists_only_nvlink_models(tmp_path, capsys):
    err = refused(tmp_path, capsys, V100_V2, "--nvlink", "switch")
    assert "give --gpu" in err and "V100" in err and "B300" in err
    assert not any(name in err for name in ("T4", "L40", "RTX4090", "MI300X", "MI50"))


def test_nvlink_is_refused_where_the_file_states_links(tmp_path, capsys):
    smi = tmp_path / "smi.txt"
    smi.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \n")
    err = refused(tmp_path, capsys, smi, "--gpu", "rtx3090", "--nvlink", "none")
    assert "--nvlink is for NCCL topology files that list GPUs by PCI class only" in err
    assert main(["topo", "import", str(smi), "--nvlink", "maybe"]) == 2  # argparse choices


# ---- the --gpu message ------------------------------------------------------------------------

def _all_pairs(n: int, links: int) -> dict:
    return {(i, j): GpuPath("nvlink", links=links) for i in range(n) for j in range(i + 1, n)}


def _gpu_message(desc: MachineDescription) -> str:
    with pytest.raises(InputError) as info:
        build_topology(desc, "x", "x.txt")
    message = str(info.value)
    assert "\n" not in message and "give --gpu" in message
    return message.split("give --gpu", 1)[1]


def test_nv18_board_fits_hopper_and_blackwell_only():
    fits = _gpu_message(MachineDescription("t", 8, _all_pairs(8, 18)))
    assert fits == ", one that fits: Hopper H100/H200/H20, Blackwell B200/B300/GB200"


def test_nv12_and_nv4_bridges_and_meshes():
    bridged = {(0, 1): GpuPath("nvlink", links=12), (2, 3): GpuPath("nvlink", links=12)}
    bridged |= {(a, b): GpuPath("pcie", level="SYS") for a in (0, 1) for b in (2, 3)}
    assert _gpu_message(MachineDescription("t", 4, bridged)) == ", one that fits: A100"
    assert _gpu_message(MachineDescription("t", 2, _all_pairs(2, 4))) == ", one that fits: A30, A40, RTX3090"
    mesh = fitting_models(MachineDescription("t", 4, _all_pairs(4, 4)))  # 12 links per GPU, or 4 to a switch
    assert {m.name for m in mesh} == {"A100", "A30", "A40", "RTX3090"}


def test_pcie_only_fits_every_model_grouped_by_generation():
    fits = _gpu_message(MachineDescription("t", 2, {(0, 1): GpuPath("pcie", level="SYS")}))
    assert fits.startswith(", any model (PCIe only): Volta V100, Turing T4, Ampere ")
    assert all(m.name in fits for m in MODELS) and "Hopper H100/H800/H200/H20" in fits


def test_listed_is_plain_when_short_and_covers_every_model():
    assert listed([MODELS[0], MODELS[1]]) == "V100, A100"
    grouped = listed(MODELS)
    assert sorted(grouped.replace(",", " ").replace("/", " ").split()) == sorted(
        [m.name for m in MODELS] + ["Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell", "GCN5", "CDNA1",
                                    "CDNA2", "CDNA3", "CDNA4"])


# ---- truncation -------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [A100_V4, V100_V2, H100_V5])
def test_every_prefix_of_a_curated_file_is_one_line_or_the_whole(path):
    text = path.read_text()
    whole = text.rstrip()
    for cut in range(len(text) + 1):
        prefix = text[:cut]
        try:
            topo = import_text(prefix, "cut.xml", gpu="a100", nvlink="switch")
        except InputError as err:
            assert str(err).startswith("cut.xml: ") and "\n" not in str(err)
        else:
            assert prefix.rstrip() == whole and topo.ranks == 8


def test_a_truncated_curated_file_exits_2_and_writes_nothing(tmp_path, capsys):
    text = A100_V4.read_text()
    for cut in (0, 30, len(text) // 2, len(text) - 3):
        path = tmp_path / "cut.xml"
        path.write_text(text[:cut])
        refused(tmp_path, capsys, path, "--gpu", "a100", "--nvlink", "switch")
