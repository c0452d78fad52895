"""nvidia-smi rows whose last link cell runs into the CPU Affinity column (``PHB0-115``,
``X0-15``, ``NV120-63``): split where the matrix's symmetry says, refused in one line when it
cannot, and every truncation of such an output one line or a smaller valid matrix.

Fixtures (written for these tests): ``curated/nvsmi-runtogether-8gpu-nv18.txt`` (8 GPUs all NV18,
4 NICs, the last NIC cell of every GPU row run into the affinity) and
``curated/nvsmi-runtogether-4gpu-nv12.txt`` (two NV12 bridged pairs, no NICs: ``NV1264-127``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.cli.main import main
from synth.core.errors import InputError
from synth.importers.nvidia_smi import looks_like, read_nvidia_smi
from synth.importers.reader import import_text
from tests.importers.test_nvidia_smi import Style, machines, render

HERE = Path(__file__).resolve().parent / "curated"
NV18 = HERE / "nvsmi-runtogether-8gpu-nv18.txt"
NV12 = HERE / "nvsmi-runtogether-4gpu-nv12.txt"
JOINED_NOTE = "with no separator"


def read(text: str):
    return read_nvidia_smi(text, "topo.txt")


def fails(text: str) -> str:
    with pytest.raises(InputError) as info:
        read(text)
    message = str(info.value)
    assert message.startswith("topo.txt: ") and "\n" not in message
    return message


def separate(text: str, gpus: int, nics: int) -> str:
    """``text`` with the CPU Affinity split off the last link cell of every GPU row, by hand."""
    width = gpus + nics
    out = []
    for line in text.split("\n"):
        cells = line.split("\t")
        if cells[0].startswith("GPU") and len(cells) > width:
            last = cells[width]
            cut = 1 if last.lstrip().startswith("X") else len(last.rstrip("0123456789,-")) if "-" in last else len(last)
            if last.lstrip().startswith("NV"):
                cut = len("NV12")  # the fixtures' NVLink codes all have two digits
            cells[width:width + 1] = [last.lstrip()[:cut], last.lstrip()[cut:]]
        out.append("\t".join(cells))
    return "\n".join(out)


def without_joined_note(m):
    return dataclasses.replace(m, notes=tuple(n for n in m.notes if JOINED_NOTE not in n))


# ---- the fixtures -----------------------------------------------------------------------------

def test_nic_cells_run_into_the_affinity():
    text = NV18.read_text()
    d = read(text)
    assert d.gpus == 8 and {p.links for p in d.pairs.values()} == {18}
    assert [n.levels for n in d.nics][3] == ("SYS",) * 4 + ("NODE", "NODE", "PIX", "PIX")
    assert d.numa == (0,) * 4 + (1,) * 4
    assert any(JOINED_NOTE in n and "row GPU0" in n and "SYS + 0-55,112-167" in n for n in d.notes)
    plain = read(separate(text, 8, 4))
    assert without_joined_note(d) == plain and not any(JOINED_NOTE in n for n in plain.notes)


def test_nvlink_cells_split_by_symmetry():
    d = read(NV12.read_text())
    assert {k: (p.kind, p.links, p.level) for k, p in d.pairs.items()} == {
        (0, 1): ("nvlink", 12, None), (0, 2): ("pcie", 0, "SYS"), (0, 3): ("pcie", 0, "SYS"),
        (1, 2): ("pcie", 0, "SYS"), (1, 3): ("pcie", 0, "SYS"), (2, 3): ("nvlink", 12, None)}
    assert d.numa == (0, 0, 1, 1)
    assert any(n.startswith("nvidia-smi topo -m: 4 GPU row(s)") and "'SYS0-63'): read as SYS + 0-63" in n
               for n in d.notes)


@pytest.mark.parametrize("transposed, links", [("NV12", 12), ("NV1", 1)])
def test_the_transposed_cell_picks_the_reading(transposed, links):
    text = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
            f"GPU0\t X \tNV120-63\t0\nGPU1\t{transposed}\t X0-63\t0\n")
    assert read(text).path(0, 1).links == links


def test_an_ambiguous_cell_the_transposed_cell_does_not_settle_is_refused():
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV120-63\t0\nGPU1\tSYS\t X0-63\t0\n"
    message = fails(text)
    assert "row GPU0, column GPU1: 'NV120-63'" in message and "NV1 + 20-63 or NV12 + 0-63" in message


def test_a_plain_cell_is_not_split():
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV12\t\t0\nGPU1\tNV12\t X \t\t0\n"
    d = read(text)
    assert d.path(0, 1).links == 12 and not any(JOINED_NOTE in n for n in d.notes)
    assert "asymmetric" in fails(text.replace("GPU1\tNV12", "GPU1\tNV1", 1))  # NV12 is not NV1 + affinity 2


@pytest.mark.parametrize("row, numa", [("GPU0\tX0-15\t0\n", (0,)), ("GPU0\tX0-15\n", (None,)),
                                       ("GPU0\tXN/A\tN/A\n", (None,))])
def test_a_single_gpu_whose_diagonal_runs_into_the_affinity(row, numa):
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\n" + row
    assert looks_like(text)
    d = read(text)
    assert d.gpus == 1 and d.numa == numa


@pytest.mark.parametrize("cell", ["PHX0-15", "PHB0-15x", "NV0-15"])
def test_no_reading_is_an_unknown_code(cell):
    text = f"\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \t{cell}\nGPU1\tPHB\t X0-15\n"
    assert "unknown link code" in fails(text)


def test_without_affinity_columns_nothing_is_split():
    assert "unknown link code 'PHB0-15'" in fails("\tGPU0\tGPU1\nGPU0\t X \tPHB0-15\nGPU1\tPHB\t X \n")


# ---- properties -------------------------------------------------------------------------------

def run_together(text: str, gpus: int, nics: int) -> str:
    """A tab rendering with each GPU row's last link cell and a non-empty CPU Affinity joined."""
    out = []
    for line in text.split("\n"):
        cells = line.split("\t")
        if cells[0].startswith("GPU") and len(cells) > gpus + nics + 1 and cells[gpus + nics + 1]:
            cells[gpus + nics:gpus + nics + 2] = [cells[gpus + nics].rstrip() + cells[gpus + nics + 1]]
        out.append("\t".join(cells))
    return "\n".join(out)


tab_styles = st.builds(Style, st.just(True), st.just((2,)), st.booleans(), st.booleans(), st.booleans(),
                       st.booleans(), st.booleans(), st.integers(0, 3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines(), tab_styles)
def test_joined_renderings_read_as_the_separated_ones(machine, style):
    text = render(machine, style)
    if style.crlf:
        text = text.replace("\r\n", "\n")
    joined = run_together(text, machine.gpus, len(machine.nics))
    assert without_joined_note(read(joined)) == read(text)


@pytest.mark.parametrize("path, gpu", [(NV18, "h100"), (NV12, "a100")])
def test_every_prefix_is_one_line_or_a_valid_matrix(path, gpu):
    text = path.read_text()
    last_row = text.index(f"GPU{7 if path == NV18 else 3}\t")
    for cut in range(len(text) + 1):
        prefix = text[:cut]
        try:
            topo = import_text(prefix, "cut.txt", gpu=gpu)
        except InputError as err:
            assert str(err).startswith("cut.txt: ") and "\n" not in str(err)
        else:
            assert cut > last_row and topo.ranks == (8 if path == NV18 else 4)


def test_truncated_run_together_output_exits_2_and_writes_nothing(tmp_path, capsys):
    text = NV18.read_text()
    for cut in (10, text.index("GPU3\t") + 20, text.index("GPU7\t") + 3):
        path, out = tmp_path / "cut.txt", tmp_path / "out.json"
        path.write_text(text[:cut])
        assert main(["topo", "import", str(path), "--gpu", "h100", "-o", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "cut.txt" in err and not out.exists()
    path.write_text(text)
    assert main(["topo", "import", str(path), "--gpu", "h100", "-o", str(out)]) == 0 and out.exists()


def test_a_cell_valid_by_itself_is_split_only_when_other_rows_run_together():
    head = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
    joined = head + "GPU0\t X \tNV120\t0\nGPU1\tNV12\t X0\t0\n"  # X0: this output runs cells together
    d = read(joined)
    assert d.path(0, 1).links == 12 and d.numa == (0, 0)
    alone = head + "GPU0\t X \tNV120\t0\nGPU1\tNV12\t X \t0\t0\n"
    assert "asymmetric" in fails(alone)
