"""The modelling choices of synth.importers.build on small hand-made descriptions (no samples)."""

from __future__ import annotations

import pytest

from synth.core.errors import InputError
from synth.importers.build import build_topology
from synth.importers.machine import GpuPath, MachineDescription, Nic


def _pcie(level):
    return GpuPath("pcie", level=level)


def test_pcie_sharing_follows_the_path_types():
    # GPU0-1 behind one switch, GPU2 on the same host bridge, GPU3 elsewhere on the CPU, GPU4 on the other CPU
    levels = {(0, 1): "PIX", (0, 2): "PHB", (1, 2): "PHB", (0, 3): "NODE", (1, 3): "NODE", (2, 3): "NODE"}
    pairs = {k: _pcie(v) for k, v in levels.items()} | {(i, 4): _pcie("SYS") for i in range(4)}
    desc = MachineDescription("test", 5, pairs, numa=(0, 0, 0, 0, 1))
    topo = build_topology(desc, "box", "box.txt", gpu="a100")
    groups = {g.name: g for g in topo.groups}
    assert set(groups["pcieswitch0-up"].links) == {(a, b) for a in (0, 1) for b in (2, 3, 4)}
    assert set(groups["hostbridge0-up"].links) == {(a, b) for a in (0, 1, 2) for b in (3, 4)}
    assert set(groups["cpu0-to-cpu1"].links) == {(a, 4) for a in range(4)} and groups["cpu0-to-cpu1"].bandwidth == 10.0
    assert {l.bandwidth for l in topo.links} == {31.5} and {l.kind for l in topo.links} == {"pcie"}
    amd = build_topology(desc, "box", "box.txt", gpu="a100", cpu="amd")
    assert {g.bandwidth for g in amd.groups if g.name.startswith("cpu")} == {16.0}


def test_nvlink_islands_are_joined_over_pcie_only():
    pairs = {(0, 1): GpuPath("nvlink", links=12), (2, 3): GpuPath("nvlink", links=12)}
    pairs |= {(a, b): _pcie("SYS") for a in (0, 1) for b in (2, 3)}
    topo = build_topology(MachineDescription("test", 4, pairs, numa=(0, 0, 1, 1)), "pairs", "p.txt", gpu="a100")
    assert topo.link(0, 1).bandwidth == 300.0 and topo.link(0, 1).kind == "nvlink"
    assert topo.link(1, 2).kind == "pcie" and topo.link(0, 1).kind == "nvlink"


def test_a_switch_board_and_a_mesh():
    def every(n, k):
        return {(i, j): GpuPath("nvlink", links=k) for i in range(n) for j in range(i + 1, n)}

    board = build_topology(MachineDescription("test", 8, every(8, 18)), "b", "b.txt", gpu="b200")
    assert {g.bandwidth for g in board.groups} == {900.0} and len(board.groups) == 16
    mesh = build_topology(MachineDescription("test", 4, every(4, 4)), "m", "m.txt", gpu="a100")
    assert not mesh.groups and {l.bandwidth for l in mesh.links} == {100.0}


def test_nics_are_dealt_to_their_nearest_gpus_without_overlap():
    pairs = {(i, j): GpuPath("nvlink", links=12) for i in range(4) for j in range(i + 1, 4)}
    nics = (Nic("a", ("PXB", "PXB", "SYS", "SYS"), gbps=200), Nic("b", ("PXB", "PXB", "SYS", "SYS"), gbps=200),
            Nic("c", ("SYS", "SYS", "PIX", "PHB"), gbps=100), Nic("storage", ("SYS",) * 4))
    topo = build_topology(MachineDescription("test", 4, pairs, nics=nics), "n", "n.txt", gpu="a100")
    served = [(n.name, n.ranks, n.bandwidth) for n in topo.nics]
    assert served == [("a", (0,), 25.0), ("b", (1,), 25.0), ("c", (2,), 12.5)]
    assert any("storage" in s for s in topo.sources)
    faster = build_topology(MachineDescription("test", 4, pairs, nics=nics), "n", "n.txt", gpu="a100", nic_gbps=400)
    assert {n.bandwidth for n in faster.nics} == {50.0}


def test_the_generation_is_asked_for_when_the_pattern_is_ambiguous():
    pairs = {(i, j): GpuPath("nvlink", links=18) for i in range(8) for j in range(i + 1, 8)}
    with pytest.raises(InputError, match="give --gpu"):
        build_topology(MachineDescription("test", 8, pairs), "x", "x.txt")
    inferred = {(i, j): GpuPath("nvlink", links=12) for i in range(8) for j in range(i + 1, 8)}
    assert {g.bandwidth for g in build_topology(MachineDescription("t", 8, inferred), "x", "x.txt").groups} == {300.0}
    pcie_known = MachineDescription("t", 2, {(0, 1): _pcie("SYS")}, pcie_gen=(5, 5), pcie_width=(16, 8))
    assert build_topology(pcie_known, "x", "x.txt").link(0, 1).bandwidth == 31.5  # gen5 x8 on one side
