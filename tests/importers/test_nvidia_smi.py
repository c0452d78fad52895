"""synth.importers.nvidia_smi: the real samples in shared/topo-samples, bad inputs, and a
render/parse round trip."""

from __future__ import annotations

import dataclasses
import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.core.errors import InputError
from synth.importers.machine import PCIE_LEVELS, GpuPath, MachineDescription, Nic
from synth.importers.nvidia_smi import looks_like, read_nvidia_smi
from tests.importers.conftest import samples_root

_ROOT = samples_root()
NVSMI = sorted(p.name for p in _ROOT.glob("nvsmi-*.txt")) if _ROOT else []
OTHERS = sorted(p.name for p in _ROOT.iterdir() if p.suffix in (".xml", ".txt") and not p.name.startswith("nvsmi-")) \
    if _ROOT else []
TABBED = [name for name in NVSMI if "\t" in (_ROOT / name).read_text(encoding="utf-8", errors="replace")]
SPACED = [name for name in NVSMI if name not in TABBED]

GPUS = {"dgx1-v100-microway": 8, "v100-8gpu-vm-phb": 8, "traverse-power9-v100": 4, "della-a100pcie-2gpu": 2,
        "adroit-a100pcie-4gpu": 4, "della-a100sxm-4gpu-nv4": 4, "dgxa100-nv12-10nic": 8,
        "a100pcie-4gpu-nvbridge-nv12": 4, "nv4-4gpu-cgroup-emptyaffinity": 4, "h100-sglang-8nic": 8,
        "b300-sglang-ansi": 8, "rtx4090-8gpu-pcie": 8, "rtx3090-2gpu-nvbridge-nv4": 2, "t4-4gpu-pcie": 4}

# a small matrix written by hand: NV2 pair, PCIe elsewhere, one NIC, NUMA column
SMALL = ("\tGPU0\tGPU1\tGPU2\tmlx5_0\tCPU Affinity\tNUMA Affinity\n"
         "GPU0\t X \tNV2\tSYS\tPIX\t0-7\t0\n"
         "GPU1\tNV2\t X \tSYS\tPIX\t0-7\t0\n"
         "GPU2\tSYS\tSYS\t X \tSYS\t8-15\t1\n"
         "mlx5_0\tPIX\tPIX\tSYS\t X \t\t\n")

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def short(name: str) -> str:
    return re.sub(r"^nvsmi-|-1\.txt$", "", name)


def read(text: str, where: str = "topo.txt") -> MachineDescription:
    return read_nvidia_smi(text, where)


def nvlinks(m: MachineDescription) -> dict[tuple[int, int], int]:
    return {pair: p.links for pair, p in m.pairs.items() if p.kind == "nvlink"}


def levels(m: MachineDescription) -> dict[tuple[int, int], str]:
    return {pair: p.level for pair, p in m.pairs.items() if p.kind == "pcie"}


def fails(text: str, *parts: str, where: str = "topo.txt") -> str:
    """The one-line InputError message reading ``text`` gives; it must contain every part."""
    with pytest.raises(InputError) as caught:
        read_nvidia_smi(text, where)
    message = str(caught.value)
    assert message.startswith(f"{where}: ") and "\n" not in message
    for part in parts:
        assert part in message, message
    return message


def edit_cell(text: str, row: str, column: int, value: str | None) -> str:
    """``text`` with cell ``column`` (0 = the row label) of the tab row ``row`` replaced (None: removed)."""
    lines = text.split("\n")
    k = next(k for k, line in enumerate(lines) if line.split("\t")[0] == row)
    cells = lines[k].split("\t")
    if value is None:
        del cells[column]
    else:
        cells[column] = value
    lines[k] = "\t".join(cells)
    return "\n".join(lines)


def space_align(text: str) -> str:
    """The tab-separated lines of ``text`` as space-aligned columns (what GitHub renders)."""
    lines = text.split("\n")
    rows = [[cell.strip() for cell in line.split("\t")] for line in lines if "\t" in line]
    widths = [max(len(r[c]) for r in rows if c < len(r)) + 2 for c in range(max(map(len, rows)))]
    out = []
    for line in lines:
        if "\t" in line:
            cells = [cell.strip() for cell in line.split("\t")]
            line = "".join(cell.ljust(widths[c]) for c, cell in enumerate(cells)).rstrip()
        out.append(line)
    return "\n".join(out)


def tab_separate(text: str) -> str:
    """A space-aligned matrix of ``text`` with its cells joined by tabs instead."""
    out = []
    for line in text.split("\n"):
        cells = re.split(r" {2,}", line.strip())
        if re.match(r"(GPU|NIC)\d", line):
            line = "\t".join(cells)
        elif line.strip().startswith("GPU0"):
            line = "\t" + "\t".join(cells)
        out.append(line)
    return "\n".join(out)


# ---------------------------------------------------------------- every sample


def test_the_samples_are_there():
    if _ROOT is None:
        pytest.skip("shared/topo-samples not found beside the repository")
    assert {short(name) for name in NVSMI} >= set(GPUS)


@pytest.mark.parametrize("name", NVSMI)
def test_every_sample_reads(sample, name):
    text = sample(name)
    assert looks_like(text)
    m = read(text, name)
    n = GPUS.get(short(name), m.gpus)
    assert (m.tool, m.gpus) == ("nvidia-smi", n)
    assert set(m.pairs) == {(i, j) for i in range(n) for j in range(i + 1, n)}
    for (i, j), p in m.pairs.items():
        assert p.where == f"row GPU{i}, column GPU{j}"
        assert (p.kind == "nvlink" and p.links > 0 and p.level is None) or \
               (p.kind == "pcie" and p.links == 0 and p.level in PCIE_LEVELS)
    assert len(m.numa) == n
    for nic in m.nics:
        assert len(nic.levels) == n and set(nic.levels) <= set(PCIE_LEVELS) and nic.gbps is None
    assert m.notes[0] == f"nvidia-smi topo -m: {n} GPUs, {len(m.nics)} NIC{'' if len(m.nics) == 1 else 's'}"


@pytest.mark.parametrize("name", NVSMI)
def test_crlf_line_endings_read_the_same(sample, name):
    text = sample(name)
    assert read(text.replace("\n", "\r\n"), name) == read(text, name)


@pytest.mark.parametrize("name", TABBED)
def test_space_aligned_rendering_reads_the_same(sample, name):
    text = sample(name)
    spaced = space_align(text)
    assert "\t" not in spaced and looks_like(spaced)
    assert read(spaced, name) == read(text, name)


@pytest.mark.parametrize("name", SPACED)
def test_tab_separated_rendering_reads_the_same(sample, name):
    text = sample(name)
    tabbed = tab_separate(text)
    assert "\t" in tabbed
    assert read(tabbed, name) == read(text, name)


@pytest.mark.parametrize("name", OTHERS)
def test_other_tools_outputs_are_not_nvidia_smi(sample, name):
    text = sample(name)
    assert not looks_like(text)
    fails(text, "not an nvidia-smi topo -m matrix (no GPU0 column header)", where=name)


# ---------------------------------------------------------------- what each sample holds (EXPECTED.md)

DGX1_NV = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2, (2, 6): 1,
           (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2}


def test_dgx1_hybrid_cube_mesh(sample):
    m = read(sample("nvsmi-dgx1-v100-microway-1.txt"))
    assert nvlinks(m) == DGX1_NV
    for g in range(8):
        mine = {pair: links for pair, links in DGX1_NV.items() if g in pair}
        assert len(mine) == 4 and sum(mine.values()) == 6
    assert set(levels(m).values()) == {"SYS"}
    assert [nic.name for nic in m.nics] == ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]
    near, mid, far = ("PIX", "PIX", "PHB", "PHB"), ("PHB", "PHB", "PIX", "PIX"), ("SYS",) * 4
    assert [nic.levels for nic in m.nics] == [near + far, far + near, mid + far, far + mid]
    assert m.nics[1].where == "column mlx5_2"
    assert m.numa == (0, 0, 0, 0, 1, 1, 1, 1)  # no NUMA column: grouped by CPU Affinity
    assert any("CPU Affinity" in note for note in m.notes)


def test_dgx1_matches_the_library_dgx1_up_to_renumbering(sample):
    from synth.core.library import resolve_topology

    library = {(min(l.src, l.dst), max(l.src, l.dst)): round(l.bandwidth / 25)
               for l in resolve_topology("dgx1").links if l.kind == "nvlink"}
    mine = nvlinks(read(sample("nvsmi-dgx1-v100-microway-1.txt")))
    assert len(library) == len(mine)
    assert any(all(library.get((min(p[i], p[j]), max(p[i], p[j]))) == links for (i, j), links in mine.items())
               for p in itertools.permutations(range(8)))


def test_v100_vm_same_nvlink_graph_as_dgx1_and_phb_elsewhere(sample):
    m = read(sample("nvsmi-v100-8gpu-vm-phb-1.txt"))
    assert nvlinks(m) == DGX1_NV
    assert set(levels(m).values()) == {"PHB"}
    assert m.nics == () and m.numa == (0,) * 8  # NUMA Affinity "0-1": its first node


def test_traverse_nv3_pairs_only(sample):
    m = read(sample("nvsmi-traverse-power9-v100-1.txt"))
    assert nvlinks(m) == {(0, 1): 3, (2, 3): 3}
    assert set(levels(m).values()) == {"SYS"}
    assert m.numa == (0, 0, 8, 8)
    assert [nic.name for nic in m.nics] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert m.nics[0].levels == ("NODE", "NODE", "SYS", "SYS") and m.nics[3].levels == ("SYS", "SYS", "NODE", "NODE")


def test_della_two_gpus_across_sockets(sample):
    m = read(sample("nvsmi-della-a100pcie-2gpu-1.txt"))
    assert m.pairs == {(0, 1): GpuPath("pcie", level="SYS", where="row GPU0, column GPU1")}
    assert [(nic.name, nic.levels) for nic in m.nics] == [("mlx5_0", ("NODE", "SYS")), ("mlx5_1", ("SYS", "NODE"))]
    assert m.numa == (0, 1)


def test_adroit_node_sys_grouping(sample):
    m = read(sample("nvsmi-adroit-a100pcie-4gpu-1.txt"))
    assert nvlinks(m) == {}
    assert levels(m) == {(0, 1): "NODE", (2, 3): "NODE", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS", (1, 3): "SYS"}
    assert [(nic.name, nic.levels) for nic in m.nics] == [("mlx5_0", ("NODE", "NODE", "SYS", "SYS"))]
    assert m.numa == (0, 0, 1, 1)


def test_della_sxm_nv4_mesh(sample):
    m = read(sample("nvsmi-della-a100sxm-4gpu-nv4-1.txt"))
    assert nvlinks(m) == {(i, j): 4 for i in range(4) for j in range(i + 1, 4)}
    assert [nic.name for nic in m.nics] == ["mlx5_0"] and m.numa == (0, 0, 1, 1)


def test_dgxa100_nv12_and_ten_nics(sample):
    m = read(sample("nvsmi-dgxa100-nv12-10nic-1.txt"))
    assert set(nvlinks(m).values()) == {12} and len(nvlinks(m)) == 28
    assert [nic.name for nic in m.nics] == [f"mlx5_{k}" for k in range(10)]
    for k in range(8):  # NIC pairs sit on each GPU pair's switch
        assert [g for g, level in enumerate(m.nics[k].levels) if level == "PXB"] == [k // 2 * 2, k // 2 * 2 + 1]
    assert m.nics[8].levels == m.nics[9].levels == ("SYS",) * 8  # the storage pair hangs off no GPU
    assert m.numa == (3, 3, 1, 1, 7, 7, 5, 5)


def test_a100pcie_nvlink_bridges(sample):
    m = read(sample("nvsmi-a100pcie-4gpu-nvbridge-nv12-1.txt"))
    assert nvlinks(m) == {(0, 1): 12, (2, 3): 12}
    assert set(levels(m).values()) == {"SYS"} and m.nics == () and m.numa == (0, 0, 1, 1)


def test_cgroup_empty_affinity_tolerated(sample):
    m = read(sample("nvsmi-nv4-4gpu-cgroup-emptyaffinity-1.txt"))
    assert nvlinks(m) == {(i, j): 4 for i in range(4) for j in range(i + 1, 4)}
    assert [nic.name for nic in m.nics] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert all(nic.levels == ("NODE",) * 4 for nic in m.nics)
    assert m.numa == (0, 0, 1, 1)


def test_h100_space_aligned(sample):
    m = read(sample("nvsmi-h100-sglang-8nic-1.txt"))
    assert set(nvlinks(m).values()) == {18} and len(m.pairs) == 28
    assert [nic.name for nic in m.nics] == [f"mlx5_{k}" for k in range(8)]
    for k, nic in enumerate(m.nics):
        assert nic.levels[k] == "PIX" and nic.levels.count("PIX") == 1
    assert m.numa == (0, 0, 0, 0, 1, 1, 1, 1)


def test_b300_ansi_remnants_ignored(sample):
    text = sample("nvsmi-b300-sglang-ansi-1.txt")
    assert "[4m" in text and "[0m" in text
    m = read(text)
    assert set(nvlinks(m).values()) == {18} and len(m.pairs) == 28
    assert [nic.name for nic in m.nics] == [f"mlx5_{k}" for k in range(10, 18)] + ["mlx5_bond_0"]
    assert m.nics[8].levels == ("SYS",) * 4 + ("NODE",) * 4
    assert m.numa == (0, 0, 0, 0, 1, 1, 1, 1)
    escaped = text.replace("[4m", "\x1b[4m").replace("[0m", "\x1b[0m")
    assert read(escaped) == m


def test_rtx4090_every_pair_sys(sample):
    m = read(sample("nvsmi-rtx4090-8gpu-pcie-1.txt"))
    assert levels(m) == {(i, j): "SYS" for i in range(8) for j in range(i + 1, 8)}
    assert [nic.name for nic in m.nics] == ["NIC0", "NIC1"]  # no NIC Legend: the column headers
    assert all(nic.levels == ("SYS",) * 6 + ("PHB", "SYS") for nic in m.nics)


def test_rtx3090_bridge(sample):
    m = read(sample("nvsmi-rtx3090-2gpu-nvbridge-nv4-1.txt"))
    assert nvlinks(m) == {(0, 1): 4} and m.nics == () and m.numa == (0, 0)


def test_t4_old_format_without_numa_column(sample):
    m = read(sample("nvsmi-t4-4gpu-pcie-1.txt"))
    assert nvlinks(m) == {}
    assert levels(m) == {(0, 1): "SYS", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "NODE", (1, 3): "NODE", (2, 3): "NODE"}
    assert m.nics == () and m.numa == (0, 1, 1, 1)


# ---------------------------------------------------------------- small inputs and format variants


def test_small_matrix():
    m = read(SMALL)
    assert nvlinks(m) == {(0, 1): 2} and levels(m) == {(0, 2): "SYS", (1, 2): "SYS"}
    assert [(nic.name, nic.levels, nic.where) for nic in m.nics] == [("mlx5_0", ("PIX", "PIX", "SYS"), "column mlx5_0")]
    assert m.numa == (0, 0, 1)


def test_no_affinity_columns_and_soc():
    m = read("\tGPU0\tGPU1\nGPU0\t X \tSOC\nGPU1\tSOC\t X")
    assert m.pairs[(0, 1)].level == "SYS" and m.numa == (None, None)


def test_numa_n_a_and_empty_cpu_affinity():
    m = read("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
             "GPU0\t X \tPHB\t0-3\tN/A\nGPU1\tPHB\t X \t\t\n")
    assert m.numa == (None, None)
    m = read("\tGPU0\tGPU1\tGPU2\tCPU Affinity\nGPU0\t X \tPHB\tSYS\t4-7\n"
             "GPU1\tPHB\t X \tSYS\t\nGPU2\tSYS\tSYS\t X \t0-3\n")
    assert m.numa == (0, None, 1)


def test_nic_rows_that_disagree_leave_a_note():
    text = SMALL.replace("mlx5_0\tPIX\tPIX\tSYS", "mlx5_0\tPIX\tPHB\tSYS")
    m = read(text)
    assert m.nics == read(SMALL).nics  # the GPU rows win
    assert any("row mlx5_0, column GPU1 is PHB" in note for note in m.notes)


def test_nic_rows_may_be_short_or_missing():
    assert read(SMALL.replace("mlx5_0\tPIX\tPIX\tSYS\t X \t\t\n", "mlx5_0\tPIX\n")).nics == read(SMALL).nics
    assert read(SMALL.replace("mlx5_0\tPIX\tPIX\tSYS\t X \t\t\n", "")).nics == read(SMALL).nics


def test_text_around_the_matrix_is_ignored():
    text = "$ nvidia-smi topo -m\n" + SMALL + LEGEND + "\nNIC Legend:\n\n  NIC7: not-a-column\n$ exit\n"
    assert read(text) == read(SMALL)


def test_nic_legend_names_the_columns():
    text = SMALL.replace("mlx5_0", "NIC0") + "\nNIC Legend:\n\n  NIC0: mlx5_bond_0\n"
    assert [nic.name for nic in read(text).nics] == ["mlx5_bond_0"]


def test_looks_like():
    assert looks_like(SMALL) and looks_like(space_align(SMALL))
    assert not looks_like("") and not looks_like("GPU0 is hot\n") and not looks_like(SMALL.split("\n")[0])
    assert not looks_like("<system version=\"1\"><cpu/></system>")


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("text", ["", "\n\n", "   \r\n", "GPU0", "hello world\n",
                                  bytes(range(256)).decode("latin-1"), "\x00\xff\ufffd" * 50,
                                  SMALL.replace("GPU0", "GPUO")])
def test_not_a_matrix(text):
    fails(text, "not an nvidia-smi topo -m matrix (no GPU0 column header)")


def test_truncated_matrix(sample):
    text = sample("nvsmi-dgx1-v100-microway-1.txt")
    cut = text[: text.index("\nGPU5\t")]
    fails(cut, "row GPU5 is missing: the matrix is cut off", where="dgx1.txt")
    fails(text[: text.index("\nGPU7\t") + 20], "row GPU7: ", "cells where the header has 12 columns")
    fails(edit_cell(SMALL, "GPU1", 0, "GPU9"), "row GPU9")


def test_a_gpu_row_missing_in_the_middle():
    fails(SMALL.replace("GPU1\tNV2\t X \tSYS\tPIX\t0-7\t0\n", ""), "row GPU1 is missing")


def test_row_with_a_missing_column(sample):
    text = edit_cell(sample("nvsmi-dgx1-v100-microway-1.txt"), "GPU3", 5, None)
    fails(text, "row GPU3: 11 cells where the header has 12 columns (GPU0..GPU7, mlx5_0..mlx5_3)")
    fails(edit_cell(SMALL, "GPU2", 4, None), "row GPU2: 3 cells where the header has 4 columns")


def test_row_with_a_missing_column_space_aligned(sample):
    text = sample("nvsmi-h100-sglang-8nic-1.txt")
    line = next(line for line in text.split("\n") if line.startswith("GPU3"))
    fails(text.replace(line, line.replace("NV18    ", "", 1)), "row GPU3: 15 cells where the header has 16 columns")


def test_unknown_link_code(sample):
    text = edit_cell(sample("nvsmi-dgx1-v100-microway-1.txt"), "GPU2", 6, "NVX")
    fails(text, "row GPU2, column GPU5: unknown link code 'NVX'")
    fails(edit_cell(SMALL, "GPU0", 2, "NV0"), "row GPU0, column GPU1: unknown link code 'NV0'")
    fails(edit_cell(SMALL, "GPU0", 3, "XYZ"), "row GPU0, column GPU2: unknown link code 'XYZ'")
    fails(edit_cell(SMALL, "GPU0", 4, "NV1"), "row GPU0, column mlx5_0: 'NV1' is not a PCIe path type")


def test_x_only_on_the_diagonal():
    fails(edit_cell(SMALL, "GPU1", 2, "NV2"), "row GPU1, column GPU1: the diagonal cell is 'NV2', expected X")
    fails(edit_cell(SMALL, "GPU0", 3, "X"), "row GPU0, column GPU2: 'X' (self) off the diagonal")


def test_asymmetric_nvlink_entry(sample):
    text = edit_cell(sample("nvsmi-dgx1-v100-microway-1.txt"), "GPU0", 2, "NV2")
    fails(text, "rows GPU0/GPU1: asymmetric entry: GPU0->GPU1 is NV2 but GPU1->GPU0 is NV1")


def test_nvlink_versus_pcie_asymmetry(sample):
    text = edit_cell(sample("nvsmi-dgx1-v100-microway-1.txt"), "GPU0", 6, "NV1")
    fails(text, "rows GPU0/GPU5: asymmetric entry: GPU0->GPU5 is NV1 but GPU5->GPU0 is SYS")
    fails(edit_cell(SMALL, "GPU2", 1, "PHB"),
          "rows GPU0/GPU2: asymmetric entry: GPU0->GPU2 is SYS but GPU2->GPU0 is PHB")


def test_duplicate_row_and_misordered_header():
    fails(SMALL.replace("GPU2\tSYS\tSYS", "GPU1\tSYS\tSYS"), "row GPU1 appears twice")
    fails(SMALL.replace("\tGPU2\t", "\tGPU3\t"), "header: column GPU3 is out of order")


# ---------------------------------------------------------------- round trip and robustness

CPU_NOTE = "no NUMA Affinity column"


@dataclasses.dataclass(frozen=True)
class Style:
    tabs: bool
    gaps: tuple[int, ...]  # spaces after each column (space-aligned)
    legend: bool
    nic_legend: bool
    gpu_numa_id: bool
    soc: bool
    crlf: bool
    nic_trailing: int  # empty tab fields after NIC rows


def render(m: MachineDescription, style: Style) -> str:
    """An ``nvidia-smi topo -m`` rendering of ``m``."""
    n, cpu_mode = m.gpus, any(CPU_NOTE in note for note in m.notes)
    nic_cols = [f"NIC{k}" for k in range(len(m.nics))] if style.nic_legend else [nic.name for nic in m.nics]

    def code(i, j):
        if i == j:
            return " X " if style.tabs else " X"
        p = m.path(i, j)
        text = f"NV{p.links}" if p.kind == "nvlink" else p.level
        return "SOC" if style.soc and text == "SYS" else text

    extra = ["CPU Affinity"] + ([] if cpu_mode else ["NUMA Affinity"]) + (["GPU NUMA ID"] if style.gpu_numa_id else [])
    rows = [[""] + [f"GPU{j}" for j in range(n)] + nic_cols + extra]
    for i in range(n):
        numa = m.numa[i]
        cpu = "" if numa is None else f"{16 * numa}-{16 * numa + 15}"
        tail = [cpu] if cpu_mode else [cpu, "N/A" if numa is None else str(numa)]
        if style.gpu_numa_id:
            tail += ["", "N/A"] if style.tabs else ["N/A"]
        rows.append([f"GPU{i}"] + [code(i, j) for j in range(n)] + [nic.levels[i] for nic in m.nics] + tail)
    for k, nic in enumerate(m.nics):
        nic_nic = [(" X " if style.tabs else " X") if k == l else "PHB" for l in range(len(m.nics))]
        rows.append([nic_cols[k]] + list(nic.levels) + nic_nic + [""] * (style.nic_trailing if style.tabs else 0))
    if style.tabs:
        lines = ["\t".join(row) for row in rows]
    else:
        widths = [max(len(row[c]) for row in rows if c < len(row)) for c in range(max(map(len, rows)))]
        lines = ["".join(cell.ljust(widths[c] + style.gaps[c % len(style.gaps)]) for c, cell in enumerate(row)).rstrip()
                 for row in rows]
    text = "\n".join(lines) + "\n"
    if style.legend:
        text += LEGEND
    if style.nic_legend and m.nics:
        text += "\nNIC Legend:\n\n" + "".join(f"  NIC{k}: {nic.name}\n" for k, nic in enumerate(m.nics))
    return text.replace("\n", "\r\n") if style.crlf else text


styles = st.builds(Style, st.booleans(), st.lists(st.integers(2, 4), min_size=1, max_size=6).map(tuple),
                   st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.integers(0, 4))
CODES = [f"NV{k}" for k in (1, 2, 3, 4, 12, 18)] + list(PCIE_LEVELS)
NIC_NAMES = [f"mlx5_{k}" for k in range(18)] + ["mlx5_bond_0", "ibp12s0", "eth0", "bnxt_re0"]


@st.composite
def machines(draw) -> MachineDescription:
    n = draw(st.integers(1, 8))
    pairs = {}
    for i, j in itertools.combinations(range(n), 2):
        c = draw(st.sampled_from(CODES))
        at = f"row GPU{i}, column GPU{j}"
        pairs[(i, j)] = GpuPath("nvlink", links=int(c[2:]), where=at) if c.startswith("NV") else \
            GpuPath("pcie", level=c, where=at)
    names = draw(st.lists(st.sampled_from(NIC_NAMES), max_size=5, unique=True))
    nics = tuple(Nic(name, tuple(draw(st.lists(st.sampled_from(PCIE_LEVELS), min_size=n, max_size=n))),
                     where=f"column {name}") for name in names)
    numa = tuple(draw(st.lists(st.one_of(st.none(), st.integers(0, 9)), min_size=n, max_size=n)))
    notes = (f"nvidia-smi topo -m: {n} GPU{'s' if n > 1 else ''}, {len(nics)} NIC{'' if len(nics) == 1 else 's'}",)
    if draw(st.booleans()):  # CPU Affinity only: NUMA ids are numbered by first appearance
        ids: dict[int, int] = {}
        numa = tuple(None if v is None else ids.setdefault(v, len(ids)) for v in numa)
        notes += ("nvidia-smi topo -m: no NUMA Affinity column; NUMA nodes numbered by distinct CPU Affinity",)
    return MachineDescription("nvidia-smi", n, pairs, nics=nics, numa=numa, notes=notes)


def without_nic_where(m: MachineDescription) -> MachineDescription:
    return dataclasses.replace(m, nics=tuple(dataclasses.replace(nic, where="") for nic in m.nics))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines(), styles, styles)
def test_rendering_a_parsed_matrix_parses_back_the_same(machine, first, second):
    parsed = read(render(machine, first))
    if first.nic_legend:  # the NIC columns are then called NIC0, NIC1, ...
        machine = dataclasses.replace(machine, nics=tuple(dataclasses.replace(nic, where=f"column NIC{k}")
                                                          for k, nic in enumerate(machine.nics)))
    assert parsed == machine
    again = read(render(parsed, second))
    assert without_nic_where(again) == without_nic_where(parsed)
    if first.nic_legend == second.nic_legend:
        assert again == parsed


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_text_reads_or_fails_in_one_line(data):
    base = data.draw(st.sampled_from([SMALL, space_align(SMALL), SMALL + LEGEND]))
    text = data.draw(st.one_of(
        st.text(max_size=200),
        st.builds(lambda at, cut, junk: base[:at] + junk + base[at + cut:],
                  st.integers(0, len(base)), st.integers(0, 12),
                  st.text(alphabet=st.sampled_from("\t \r\nXNV0129SYSPIXGPUNIC:-[m\x1b\x00é"), max_size=6))))
    try:
        m = read(text)
    except InputError as error:
        assert str(error).startswith("topo.txt: ") and "\n" not in str(error) and "\r" not in str(error)
    else:
        assert isinstance(m, MachineDescription) and len(m.numa) == m.gpus
    looks_like(text)
