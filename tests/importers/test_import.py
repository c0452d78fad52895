"""``synth topo import`` on every real sample (shared/topo-samples/EXPECTED.md): what each must
become, the library machines it must match, and bad input as one line with nothing written."""

from __future__ import annotations

import json

import networkx as nx
import pytest

from synth.cli.main import main
from synth.core.library import resolve_topology
from synth.core.topology import Topology
from tests.importers.conftest import samples_root

ROOT = samples_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="shared/topo-samples not found (set SYNTH_TOPO_SAMPLES)")

GPU = {  # EXPECTED.md's --gpu column; None: the file says
    "nvsmi-dgx1-v100-microway-1.txt": "v100", "nvsmi-v100-8gpu-vm-phb-1.txt": "v100",
    "nvsmi-traverse-power9-v100-1.txt": "v100", "nvsmi-della-a100pcie-2gpu-1.txt": "a100",
    "nvsmi-adroit-a100pcie-4gpu-1.txt": "a100", "nvsmi-della-a100sxm-4gpu-nv4-1.txt": "a100",
    "nvsmi-dgxa100-nv12-10nic-1.txt": "a100", "nvsmi-a100pcie-4gpu-nvbridge-nv12-1.txt": "a100",
    "nvsmi-h100-sglang-8nic-1.txt": "h100", "nvsmi-b300-sglang-ansi-1.txt": "b300",
    "nvsmi-rtx4090-8gpu-pcie-1.txt": "rtx4090", "nvsmi-rtx3090-2gpu-nvbridge-nv4-1.txt": "rtx3090",
    "nvsmi-t4-4gpu-pcie-1.txt": "t4", "nvsmi-nv4-4gpu-cgroup-emptyaffinity-1.txt": "a100",
    "nccl-topo-h100-ibmcloud-vsi-1.xml": None, "nccl-topo-a100pcie-2gpu-nccl230-1.xml": None,
    "nccl-topo-rccl-mi250x-16gcd-1.xml": None, "nccl-topo-azure-ncv4-curated-1.xml": None,
    "nccl-topo-hygon-dcu-rccl-v2-1.xml": None, "rocm-mi300a-1.txt": "mi300a", "rocm-mi50-4gpu-pcie-1.txt": "mi50",
}
RANKS = {"nvsmi-traverse-power9-v100-1.txt": 4, "nvsmi-della-a100pcie-2gpu-1.txt": 2,
         "nvsmi-adroit-a100pcie-4gpu-1.txt": 4, "nvsmi-della-a100sxm-4gpu-nv4-1.txt": 4,
         "nvsmi-a100pcie-4gpu-nvbridge-nv12-1.txt": 4, "nvsmi-rtx3090-2gpu-nvbridge-nv4-1.txt": 2,
         "nvsmi-t4-4gpu-pcie-1.txt": 4, "nvsmi-nv4-4gpu-cgroup-emptyaffinity-1.txt": 4,
         "nccl-topo-a100pcie-2gpu-nccl230-1.xml": 2, "nccl-topo-rccl-mi250x-16gcd-1.xml": 16,
         "nccl-topo-azure-ncv4-curated-1.xml": 4, "rocm-mi300a-1.txt": 4, "rocm-mi50-4gpu-pcie-1.txt": 4}


def _import(tmp_path, name: str, *extra: str) -> Topology:
    out = tmp_path / f"{name}.topo.json"
    argv = ["topo", "import", str(ROOT / name), "-o", str(out), *extra]
    if GPU[name]:
        argv += ["--gpu", GPU[name]]
    assert main(argv) == 0
    return Topology.from_dict(json.loads(out.read_text()), where=str(out))


@pytest.mark.parametrize("name", sorted(GPU))
def test_every_sample_imports_and_validates(tmp_path, name):
    topo = _import(tmp_path, name)
    assert topo.ranks == RANKS.get(name, 8)
    assert all(link.kind in ("nvlink", "xgmi", "pcie") for link in topo.links)
    assert topo.sources and any("imported from" in s for s in topo.sources)
    graph = nx.DiGraph([(l.src, l.dst) for l in topo.links])
    assert graph.number_of_nodes() == topo.ranks and nx.is_strongly_connected(graph)


def _fast(topo: Topology) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(topo.ranks))
    for l in topo.links:
        if l.kind in ("nvlink", "xgmi"):
            g.add_edge(l.src, l.dst, bw=l.bandwidth)
    return g


@pytest.mark.parametrize("name", ["nvsmi-dgx1-v100-microway-1.txt", "nvsmi-v100-8gpu-vm-phb-1.txt"])
def test_dgx1_samples_are_the_library_dgx1_up_to_renumbering(tmp_path, name):
    topo = _import(tmp_path, name)
    library = resolve_topology("dgx1")
    assert len(topo.links) == len(library.links) and not topo.groups  # NVLink only, nothing shared
    assert nx.is_isomorphic(_fast(topo), _fast(library), edge_match=lambda a, b: a["bw"] == b["bw"])
    assert len(topo.nics) == (4 if "microway" in name else 0)


def _switch_like(topo: Topology, library: Topology) -> None:
    assert sorted((l.src, l.dst, l.bandwidth, l.kind) for l in topo.links) == \
        sorted((l.src, l.dst, l.bandwidth, l.kind) for l in library.links)
    assert sorted((g.name, g.links, g.bandwidth) for g in topo.groups) == \
        sorted((g.name, g.links, g.bandwidth) for g in library.groups)
    assert topo.switches == library.switches  # h100: the NVLS switch; a100: none


def test_dgx_a100_and_hgx_h100_match_the_library_inside_the_machine(tmp_path):
    a100 = _import(tmp_path, "nvsmi-dgxa100-nv12-10nic-1.txt")
    _switch_like(a100, resolve_topology("a100"))
    assert sorted(n.ranks for n in a100.nics) == [(g,) for g in range(8)]  # NIC8/9 serve no GPU
    assert {n.bandwidth for n in a100.nics} == {25.0}
    h100 = _import(tmp_path, "nvsmi-h100-sglang-8nic-1.txt")
    _switch_like(h100, resolve_topology("h100"))
    assert [(n.ranks, n.bandwidth) for n in h100.nics] == [((g,), 50.0) for g in range(8)]
    dump = _import(tmp_path, "nccl-topo-h100-ibmcloud-vsi-1.xml")
    _switch_like(dump, resolve_topology("h100"))
    assert {n.bandwidth for n in dump.nics} == {25.0} and len(dump.nics) == 8  # 200 Gb/s from the file


def test_b300_ports_and_bridges_and_meshes(tmp_path):
    b300 = _import(tmp_path, "nvsmi-b300-sglang-ansi-1.txt")
    assert {g.bandwidth for g in b300.groups} == {900.0}
    bridge = _import(tmp_path, "nvsmi-rtx3090-2gpu-nvbridge-nv4-1.txt")
    assert [(l.src, l.dst, l.bandwidth) for l in bridge.links] == [(0, 1, 56.25), (1, 0, 56.25)]
    for name in ("nvsmi-della-a100sxm-4gpu-nv4-1.txt", "nvsmi-nv4-4gpu-cgroup-emptyaffinity-1.txt"):
        mesh = _import(tmp_path, name)
        assert len(mesh.links) == 12 and {l.bandwidth for l in mesh.links} == {100.0} and not mesh.groups
    pairs = _import(tmp_path, "nvsmi-a100pcie-4gpu-nvbridge-nv12-1.txt")
    nv = {(l.src, l.dst) for l in pairs.links if l.kind == "nvlink"}
    assert {pairs.link(a, b).bandwidth for a, b in nv} == {300.0} and len(nv) == 4
    assert all(l.kind == "pcie" for l in pairs.links if (l.src, l.dst) not in nv)
    power9 = _import(tmp_path, "nvsmi-traverse-power9-v100-1.txt")
    assert power9.link(0, 1).bandwidth == 75.0 and power9.link(2, 3).bandwidth == 75.0
    assert power9.link(0, 2).kind == "pcie"


def test_pcie_machines_show_their_sharing(tmp_path):
    two = _import(tmp_path, "nvsmi-della-a100pcie-2gpu-1.txt")
    assert {l.kind for l in two.links} == {"pcie"} and {g.name for g in two.groups} >= {"cpu0-to-cpu1", "cpu1-to-cpu0"}
    adroit = _import(tmp_path, "nvsmi-adroit-a100pcie-4gpu-1.txt")
    assert any(g.name.startswith("cpu") for g in adroit.groups)
    assert {l.bandwidth for l in adroit.links} == {31.5}  # gen4 x16
    rtx = _import(tmp_path, "nvsmi-rtx4090-8gpu-pcie-1.txt")
    assert len(rtx.links) == 56 and {l.kind for l in rtx.links} == {"pcie"}
    crossing = {g.name: len(g.links) for g in rtx.groups if g.name.startswith("cpu")}
    assert crossing == {"cpu0-to-cpu1": 16, "cpu1-to-cpu0": 16}  # SYS everywhere, but NUMA says two CPUs
    mi50 = _import(tmp_path, "rocm-mi50-4gpu-pcie-1.txt")
    assert {l.kind for l in mi50.links} == {"pcie"}
    mi300a = _import(tmp_path, "rocm-mi300a-1.txt")
    assert len(mi300a.links) == 12 and {(l.kind, l.bandwidth) for l in mi300a.links} == {("xgmi", 64.0)}


def test_amd_dumps(tmp_path):
    mi250 = _import(tmp_path, "nccl-topo-rccl-mi250x-16gcd-1.xml")
    assert {l.kind for l in mi250.links} == {"xgmi"} and len(mi250.nics) == 8
    two = _import(tmp_path, "nccl-topo-a100pcie-2gpu-nccl230-1.xml")
    assert len(two.nics) == 1 and {l.kind for l in two.links} == {"pcie"}


@pytest.mark.parametrize("name", ["nccl-graph-4gpu-2ch-example-1.xml", "nccl-graph-azure-ncv4-a100pcie-1.xml"])
def test_an_nccl_graph_file_is_refused(tmp_path, capsys, name):
    out = tmp_path / "out.json"
    assert main(["topo", "import", str(ROOT / name), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "graph" in err and name in err
    assert not out.exists()


def _broken(name: str, edit) -> str:
    return edit((ROOT / name).read_text())


BAD = {
    "truncated-matrix": ("nvsmi-h100-sglang-8nic-1.txt", lambda t: "\n".join(t.splitlines()[:5]) + "\n", "GPU"),
    "missing-column": ("nvsmi-dgx1-v100-microway-1.txt",
                       lambda t: t.replace("GPU3\tNV2\tNV1\tNV2\t X \t", "GPU3\tNV2\tNV1\t X \t", 1), "GPU3"),
    "unknown-code": ("nvsmi-dgx1-v100-microway-1.txt",
                     lambda t: t.replace("GPU2\tNV1\tNV2", "GPU2\tNVX\tNV2", 1), "NVX"),
    "asymmetric": ("nvsmi-dgx1-v100-microway-1.txt",
                   lambda t: t.replace("GPU1\tNV1\t X ", "GPU1\tNV2\t X ", 1), "asymmetric"),
    "xml-not-well-formed": ("nccl-topo-h100-ibmcloud-vsi-1.xml", lambda t: t[: len(t) // 2], "line"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, case):
    name, edit, must = BAD[case]
    bad = tmp_path / f"bad-{name}"
    bad.write_text(_broken(name, edit))
    out = tmp_path / "out.json"
    argv = ["topo", "import", str(bad), "-o", str(out)] + (["--gpu", GPU[name]] if GPU[name] else [])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and bad.name in err and must in err, err
    assert not out.exists()


def test_unknown_gpu_and_missing_gpu_are_one_line(tmp_path, capsys):
    assert main(["topo", "import", str(ROOT / "nvsmi-h100-sglang-8nic-1.txt"), "--gpu", "Z80"]) == 2
    assert "unknown GPU model" in capsys.readouterr().err
    assert main(["topo", "import", str(ROOT / "nvsmi-h100-sglang-8nic-1.txt")]) == 2  # NV18: H100 or B300?
    err = capsys.readouterr().err
    assert "--gpu" in err and len(err.strip().splitlines()) == 1


def test_nodes_compose_like_the_library(tmp_path):
    topo = _import(tmp_path, "nvsmi-h100-sglang-8nic-1.txt", "--nodes", "2")
    library = resolve_topology("h100x2")
    assert topo.ranks == 16 and topo.machines == library.machines
    assert sorted((l.src, l.dst, l.bandwidth) for l in topo.links) == \
        sorted((l.src, l.dst, l.bandwidth) for l in library.links)
    assert topo.switches == library.switches


def test_the_imported_dgx1_gives_the_library_frontier(tmp_path):
    _import(tmp_path, "nvsmi-dgx1-v100-microway-1.txt")
    topo = tmp_path / "nvsmi-dgx1-v100-microway-1.txt.topo.json"
    assert main(["pareto", str(topo), "allgather", "-o", str(tmp_path / "fr")]) == 0
    frontier = json.loads((tmp_path / "fr" / "frontier.json").read_text())
    assert frontier["complete"] and {(p["steps"], p["rounds"], p["chunks"]) for p in frontier["points"]} == \
        {(2, 3, 2), (3, 7, 6)}


def test_an_imported_h100_pair_of_machines_synthesizes_and_reports(tmp_path):
    from synth.verify import load_schedule

    _import(tmp_path, "nvsmi-h100-sglang-8nic-1.txt", "--nodes", "2")
    topo = str(tmp_path / "nvsmi-h100-sglang-8nic-1.txt.topo.json")
    assert main(["solve", topo, "allgather", "--backend", "milp", "-o", str(tmp_path / "ag.json")]) == 0
    load_schedule(tmp_path / "ag.json")  # verified on load
    assert main(["report", topo, "allgather", "-o", str(tmp_path / "report"), "--sizes", "64K,1M,1G"]) == 0
    assert (tmp_path / "report" / "report.md").is_file() and (tmp_path / "report" / "selection.json").is_file()


@pytest.mark.parametrize("content, message", [
    (b"", "not nvidia-smi topo -m"), (bytes(range(256)) * 8, "binary"), ("DIRECTORY", "is a directory"),
    ("MISSING", "no such file"), (b"hello\nworld\n", "not nvidia-smi topo -m"),
])
def test_unreadable_files_are_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "input.txt"
    if content == "DIRECTORY":
        path.mkdir()
    elif content != "MISSING":
        path.write_bytes(content)
    out = tmp_path / "out.json"
    assert main(["topo", "import", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "input.txt" in err
    assert not out.exists()


def test_detect_runs_the_tool_that_is_present(tmp_path, capsys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    assert main(["topo", "detect"]) == 2
    err = capsys.readouterr().err
    assert "no topology tool" in err and "nvidia-smi: not found" in err
    fake = bin_dir / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\nexec /bin/cat '{ROOT / 'nvsmi-h100-sglang-8nic-1.txt'}'\n")
    fake.chmod(0o755)
    out = tmp_path / "here.json"
    assert main(["topo", "detect", "--gpu", "h100", "-o", str(out)]) == 0
    topo = Topology.from_dict(json.loads(out.read_text()))
    assert topo.ranks == 8 and topo.name == "detected"
