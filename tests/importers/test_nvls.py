"""NVLS on imported machines (synth.importers.build.nvls_switch): an NVSwitch board of Hopper or
newer GPUs gets the library h100's switch (reduce + multicast, kind nvlink, ports at the GPU's
NVLink port bandwidth in its gpuI-out / gpuI-in groups); older GPUs, AMD and boards without an
NVSwitch get none and stay synth.topology version 1; ``--nvls on|off`` overrides, and ``on``
without an NVSwitch is one line, exit 2, nothing written."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.cli.main import main
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.topology import Topology
from synth.importers.gpus import GENERATIONS, MODELS, NVLS_SOURCE, model
from synth.importers.reader import import_text
from tests.importers.conftest import samples_root

ROOT = samples_root()
CURATED = Path(__file__).resolve().parent / "curated"
NV18 = "nvsmi-h100-sglang-8nic-1.txt"
NVLINK_MODELS = [m.name for m in MODELS if m.kind == "nvlink"]
needs_samples = pytest.mark.skipif(ROOT is None, reason="shared/topo-samples not found (set SYNTH_TOPO_SAMPLES)")


def matrix(n: int, cells: dict[tuple[int, int], str]) -> str:
    """A tab-separated ``nvidia-smi topo -m`` matrix of ``n`` GPUs, pair (i, j) showing ``cells``."""
    header = "\t" + "\t".join(f"GPU{j}" for j in range(n)) + "\tCPU Affinity\tNUMA Affinity"
    rows = [f"GPU{i}\t" + "\t".join(" X " if i == j else cells[(min(i, j), max(i, j))] for j in range(n))
            + "\t0-15\t0" for i in range(n)]
    return "\n".join([header, *rows]) + "\n"


def nvswitch_of(topo: Topology):
    (switch,) = topo.switches
    return switch


def assert_like_the_library_h100(topo: Topology, port_gbs: float) -> None:
    """The switch is the library h100's, at ``port_gbs``, over every rank, in the GPUs' port groups."""
    switch = nvswitch_of(topo)
    assert (switch.name, switch.ranks, switch.bandwidth, switch.alpha, switch.kind) == \
        ("nvswitch", tuple(range(topo.ranks)), port_gbs, 0.7, "nvlink")
    assert switch.capabilities == ("reduce", "multicast")
    assert switch.out_groups == tuple(f"gpu{i}-out" for i in range(topo.ranks))
    assert switch.in_groups == tuple(f"gpu{i}-in" for i in range(topo.ranks))
    assert {topo.group_map[g].bandwidth for g in switch.out_groups + switch.in_groups} == {port_gbs}
    assert topo.to_dict()["version"] == 2 and any("NVLink SHARP" in s for s in topo.sources)


def assert_no_switch(topo: Topology) -> None:
    assert topo.switches == () and topo.to_dict()["version"] == 1 and "switches" not in topo.to_dict()


# ---------------------------------------------------------------- the GPU table's Hopper+ flag

def test_the_flag_is_hopper_or_newer_with_nvlink():
    newer = {name for generation, names in GENERATIONS if generation in ("Hopper", "Blackwell") for name in names}
    assert {m.name for m in MODELS if m.nvls} == {name for name in newer if model(name).kind == "nvlink"}
    for name in ("h100", "h200", "b200", "b300", "gb200", "gb300", "H800", "h20"):
        assert model(name).nvls, name
    for name in ("v100", "a100", "a800", "l40s", "rtx5090", "mi300x", "mi355x"):
        assert not model(name).nvls, name
    assert "sm_90" in NVLS_SOURCE and "search.cc" in NVLS_SOURCE


# ---------------------------------------------------------------- random NV matrices

@st.composite
def nv_boards(draw):
    """(GPUs, cells): every pair the same NV# (an NVSwitch board when more than 4 GPUs), or a mix
    of NV# and PCIe path types."""
    n = draw(st.integers(2, 8))
    pairs = list(itertools.combinations(range(n), 2))
    if draw(st.booleans()):
        code = draw(st.sampled_from(["NV1", "NV2", "NV4", "NV6", "NV8", "NV12", "NV18"]))
        return n, {pair: code for pair in pairs}
    codes = st.sampled_from(["NV1", "NV2", "NV12", "NV18", "PIX", "PHB", "SYS"])
    return n, {pair: draw(codes) for pair in pairs}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nv_boards(), st.sampled_from(NVLINK_MODELS), st.sampled_from([None, "on", "off"]))
def test_a_random_matrix_gets_nvls_exactly_on_a_hopper_or_newer_nvswitch_board(board, gpu, nvls):
    n, cells = board
    codes = set(cells.values())
    switched = n > 4 and len(codes) == 1 and next(iter(codes)).startswith("NV")
    text = matrix(n, cells)
    if nvls == "on" and not switched:
        with pytest.raises(InputError, match="--nvls on") as refused:
            import_text(text, "box.txt", gpu=gpu, nvls=nvls)
        assert "\n" not in str(refused.value) and str(refused.value).startswith("box.txt: ")
        return
    topo = import_text(text, "box.txt", gpu=gpu, nvls=nvls)
    if switched and (nvls == "on" or (nvls is None and model(gpu).nvls)):
        assert_like_the_library_h100(topo, int(next(iter(codes))[2:]) * model(gpu).link_gbs)
    else:
        assert_no_switch(topo)
    assert Topology.from_dict(topo.to_dict()) == topo  # v1 or v2, it reads back the same


# ---------------------------------------------------------------- the real samples

NVLS_SAMPLES = {NV18: ("h100", 450.0), "nvsmi-b300-sglang-ansi-1.txt": ("b300", 900.0),
                "nccl-topo-h100-ibmcloud-vsi-1.xml": (None, 450.0)}  # the dump names its H100s (10de:2330)
OTHERS = {"nvsmi-dgx1-v100-microway-1.txt": "v100", "nvsmi-dgxa100-nv12-10nic-1.txt": "a100",
          "nvsmi-della-a100sxm-4gpu-nv4-1.txt": "a100", "nvsmi-rtx4090-8gpu-pcie-1.txt": "rtx4090",
          "nvsmi-t4-4gpu-pcie-1.txt": "t4", "nccl-topo-rccl-mi250x-16gcd-1.xml": None, "rocm-mi300a-1.txt": "mi300a",
          "nccl-topo-a100pcie-2gpu-nccl230-1.xml": None}


@needs_samples
@pytest.mark.parametrize("name", sorted(NVLS_SAMPLES))
def test_hopper_and_blackwell_nvswitch_samples_get_nvls(name):
    gpu, port = NVLS_SAMPLES[name]
    assert_like_the_library_h100(import_text((ROOT / name).read_text(), name, gpu=gpu), port)


@needs_samples
@pytest.mark.parametrize("name", sorted(OTHERS))
def test_older_amd_and_pcie_samples_get_none_and_stay_version_1(name):
    topo = import_text((ROOT / name).read_text(), name, gpu=OTHERS[name])
    assert_no_switch(topo)
    if name == "nvsmi-dgxa100-nv12-10nic-1.txt":  # an NVSwitch board, but Ampere: the source says why not
        assert any("without NVLS (A100, older than Hopper" in s for s in topo.sources)


@needs_samples
def test_an_nccl_dump_naming_an_older_gpu_gets_none():
    a100 = (ROOT / "nccl-topo-h100-ibmcloud-vsi-1.xml").read_text().replace('device="0x2330"', 'device="0x20b0"')
    assert 'device="0x20b0"' in a100
    topo = import_text(a100, "a100-dump.xml")
    assert_no_switch(topo)
    assert any("GPU model A100" in s for s in topo.sources) and topo.groups  # still an NVSwitch board


def test_class_only_files_follow_the_same_rule():
    path = CURATED / "nd-h100-v5-shape.xml"
    hopper = import_text(path.read_text(), path.name, gpu="h100", nvlink="switch")
    assert_like_the_library_h100(hopper, 450.0)
    assert_no_switch(import_text(path.read_text(), path.name, gpu="a100", nvlink="switch"))
    with pytest.raises(InputError, match="--nvls on"):
        import_text(path.read_text(), path.name, gpu="h100", nvlink="none", nvls="on")


# ---------------------------------------------------------------- the command line

def cli(tmp_path, capsys, *argv: str) -> tuple[int, str, dict | None]:
    """Exit code, stderr and the document written (None when nothing was written)."""
    out = tmp_path / "out.json"
    if out.exists():
        out.unlink()
    code = main([*argv, "-o", str(out)])
    err = capsys.readouterr().err.strip()
    return code, err, json.loads(out.read_text()) if out.exists() else None


@needs_samples
def test_nvls_off_and_on_override_the_rule(tmp_path, capsys):
    code, err, doc = cli(tmp_path, capsys, "topo", "import", str(ROOT / NV18), "--gpu", "h100", "--nvls", "off")
    assert code == 0 and doc["version"] == 1 and "switches" not in doc
    assert any("--nvls off" in s for s in doc["sources"]) and "switch" not in err.splitlines()[-1]
    code, err, doc = cli(tmp_path, capsys, "topo", "import", str(ROOT / "nvsmi-dgxa100-nv12-10nic-1.txt"),
                         "--gpu", "a100", "--nvls", "on")
    topo = Topology.from_dict(doc)
    assert code == 0 and "1 switch (reduce + multicast)" in err
    assert_like_the_library_h100(topo, 300.0)
    assert any("--nvls on (the user's word: A100 is older than Hopper)" in s for s in topo.sources)


@needs_samples
@pytest.mark.parametrize("name, gpu", [("nvsmi-della-a100sxm-4gpu-nv4-1.txt", "a100"),
                                       ("nvsmi-rtx4090-8gpu-pcie-1.txt", "rtx4090"),
                                       ("rocm-mi300a-1.txt", "mi300a"),
                                       ("nccl-topo-rccl-mi250x-16gcd-1.xml", None)])
def test_nvls_on_without_an_nvswitch_is_one_line(tmp_path, capsys, name, gpu):
    code, err, doc = cli(tmp_path, capsys, "topo", "import", str(ROOT / name), "--nvls", "on",
                         *(["--gpu", gpu] if gpu else []))
    assert code == 2 and doc is None
    assert len(err.splitlines()) == 1 and "--nvls on" in err and name in err and "no NVSwitch" in err, err


@needs_samples
def test_a_bad_nvls_value_is_one_line(tmp_path, capsys):
    code, err, doc = cli(tmp_path, capsys, "topo", "import", str(ROOT / NV18), "--gpu", "h100", "--nvls", "yes")
    assert code == 2 and doc is None and len(err.splitlines()) == 1 and "--nvls" in err


@needs_samples
@pytest.mark.parametrize("gpu, has", [("l40s", "neither (PCIe only)"), ("mi300x", "xGMI")])
def test_a_model_without_the_files_links_is_one_line(tmp_path, capsys, gpu, has):
    code, err, doc = cli(tmp_path, capsys, "topo", "import", str(ROOT / NV18), "--gpu", gpu)
    assert code == 2 and doc is None and len(err.splitlines()) == 1
    assert "shows NVLink links" in err and has in err and "H100" in err, err


@needs_samples
def test_nodes_keep_each_machines_switch_as_the_library(tmp_path, capsys):
    code, _, doc = cli(tmp_path, capsys, "topo", "import", str(ROOT / NV18), "--gpu", "h100", "--nodes", "2")
    assert code == 0
    ours, library = Topology.from_dict(doc).switches, resolve_topology("h100x2").switches
    assert [s.name for s in ours] == ["m0-nvswitch", "m1-nvswitch"]
    assert ours == library


@needs_samples
def test_detect_follows_the_same_rule(tmp_path, capsys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\nexec /bin/cat '{ROOT / NV18}'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    code, _, doc = cli(tmp_path, capsys, "topo", "detect", "--gpu", "b200")
    assert code == 0
    assert_like_the_library_h100(Topology.from_dict(doc), 900.0)
    code, _, doc = cli(tmp_path, capsys, "topo", "detect", "--gpu", "b200", "--nvls", "off")
    assert code == 0 and doc["version"] == 1


# ---------------------------------------------------------------- round trips

@needs_samples
def test_an_imported_v2_topology_round_trips_through_show_json(tmp_path, capsys):
    code, _, doc = cli(tmp_path, capsys, "topo", "import", str(ROOT / NV18), "--gpu", "h100")
    assert code == 0 and doc["version"] == 2
    assert main(["topo", "show", str(tmp_path / "out.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc
    library = resolve_topology("h100")
    assert Topology.from_dict(doc).switches == library.switches  # the same switch as the library's


@needs_samples
def test_an_imported_a100_is_written_as_version_1(tmp_path, capsys):
    code, _, doc = cli(tmp_path, capsys, "topo", "import", str(ROOT / "nvsmi-dgxa100-nv12-10nic-1.txt"),
                       "--gpu", "a100")
    assert code == 0 and doc["version"] == 1 and "switches" not in doc
    assert main(["topo", "show", str(tmp_path / "out.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc


def test_a_version_1_file_still_reads_and_is_written_as_version_1(tmp_path, capsys):
    doc = resolve_topology("a100").to_dict()
    assert doc["version"] == 1
    path = tmp_path / "a100.json"
    path.write_text(json.dumps(doc))
    assert main(["topo", "show", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc
