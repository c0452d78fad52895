"""synth.importers.rocm_smi: the two rocm-smi --showtopo samples, pasted variants, bad inputs."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.core.errors import InputError
from synth.importers.machine import GpuPath
from synth.importers.rocm_smi import looks_like, read_rocm_smi

MI300A = "rocm-mi300a-1.txt"
MI50 = "rocm-mi50-4gpu-pcie-1.txt"
ALL_PAIRS = [(i, j) for i in range(4) for j in range(i + 1, 4)]


def refused(text: str, where: str = "x.txt") -> str:
    """The one-line InputError message read_rocm_smi gives for ``text``."""
    with pytest.raises(InputError) as caught:
        read_rocm_smi(text, where)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{where}: "), message
    return message


def edit_row(text: str, section: str, row: int, edit) -> str:
    """Apply ``edit(cells) -> cells`` to row GPU<row> of the matrix under the ruler naming ``section``."""
    lines = text.split("\n")
    start = next(k for k, line in enumerate(lines) if line.startswith("=") and section in line)
    k = next(k for k in range(start + 1, len(lines)) if re.match(rf"GPU{row}\s", lines[k]))
    cells = lines[k].split()[1:]
    lines[k] = "   ".join([f"GPU{row}", *edit(cells)])
    return "\n".join(lines)


def set_cell(text: str, section: str, row: int, col: int, value: str) -> str:
    return edit_row(text, section, row, lambda cells: cells[:col] + [value] + cells[col + 1:])


def drop_section(text: str, section: str) -> str:
    return re.sub(rf"=+ {section} =+\n(.*\n)*?\n", "", text)


def test_mi300a_xgmi_all_to_all(sample):
    desc = read_rocm_smi(sample(MI300A), MI300A)
    assert desc.tool == "rocm-smi" and desc.gpus == 4 and desc.gpu_model is None and desc.nics == ()
    assert sorted(desc.pairs) == ALL_PAIRS
    assert all(p.kind == "xgmi" and p.links == 1 for p in desc.pairs.values())
    assert desc.pairs[(0, 1)].where == "Link Type, row GPU0, column GPU1 (weight 15, hops 1)"
    assert desc.numa == (0, 1, 2, 3)
    assert desc.notes == ("rocm-smi --showtopo: 4 GPUs, XGMI all-to-all",)


def test_mi50_pcie_one_numa_node(sample):
    desc = read_rocm_smi(sample(MI50), MI50)
    assert desc.gpus == 4 and sorted(desc.pairs) == ALL_PAIRS
    assert all(p == GpuPath("pcie", level="NODE", where=p.where) for p in desc.pairs.values())
    assert desc.path(3, 2).where == "Link Type, row GPU2, column GPU3 (weight 40, hops 2)"
    assert desc.numa == (0, 0, 0, 0)
    assert "PCIe only" in desc.notes[0]


def test_looks_like(sample):
    assert looks_like(sample(MI300A)) and looks_like(sample(MI50))
    assert looks_like(drop_section(sample(MI50), "Link Type between two GPUs"))  # still says ROCm SMI
    assert not looks_like(sample("nvsmi-t4-4gpu-pcie-1.txt")) and not looks_like("")


@pytest.mark.parametrize("name", [MI300A, MI50])
def test_crlf_and_prompt_line(sample, name):
    text = sample(name)
    plain = read_rocm_smi(text, name)
    assert read_rocm_smi(text.replace("\n", "\r\n"), name) == plain
    assert read_rocm_smi("$ rocm-smi --showtopo\n" + text, name) == plain


@pytest.mark.parametrize("name", [MI300A, MI50])
def test_ruler_widths_tabs_and_padding(sample, name):
    text = sample(name)
    widths = iter(range(3, 200, 7))
    rulers = re.sub(r"^=+ (.*?) =+ *$", lambda m: f"{'=' * next(widths)} {m.group(1)} {'=' * 4}",
                    text, flags=re.MULTILINE)
    tabs = re.sub(r"(?<=\S)  +(?=\S)", "\t", rulers)  # matrix gaps and NUMA padding -> one tab
    padded = re.sub(r"(?m)$", "   \t", tabs.replace("\t", " \t  "))
    plain = read_rocm_smi(text, name)
    for variant in (rulers, tabs, padded):
        assert read_rocm_smi(variant, name) == plain


def test_numa_differs_or_unknown(sample):
    text = sample(MI50).replace("GPU[2]          : (Topology) Numa Node: 0",
                                "GPU[2]          : (Topology) Numa Node: 1")
    desc = read_rocm_smi(text, MI50)
    assert desc.numa == (0, 0, 1, 0)
    assert desc.path(0, 1).level == "NODE" and desc.path(0, 2).level == "SYS"
    desc = read_rocm_smi(drop_section(sample(MI50) + "\n", "Numa Nodes"), MI50)
    assert desc.numa == (None,) * 4 and {p.level for p in desc.pairs.values()} == {None}


def count_section(rows: list[list[str]]) -> str:
    body = "\n".join("   ".join([f"GPU{i}", *row]) for i, row in enumerate(rows))
    return "==== Link count between two GPUs ====\n       GPU0 GPU1 GPU2 GPU3\n" + body + "\n\n"


COUNTS = [["0", "2", "1", "3"], ["2", "0", "1", "1"], ["1", "1", "0", "4"], ["3", "1", "4", "0"]]


def test_link_count_section(sample):
    desc = read_rocm_smi(sample(MI300A) + count_section(COUNTS), MI300A)
    assert [desc.path(i, j).links for i, j in ALL_PAIRS] == [2, 1, 3, 1, 1, 4]
    titled = sample(MI300A) + count_section(COUNTS).replace("Link count", "Number of links")
    assert read_rocm_smi(titled, MI300A) == desc


def test_na_link_type_is_no_path(sample):
    text = set_cell(set_cell(sample(MI300A), "Link Type", 0, 3, "N/A"), "Link Type", 3, 0, "N/A")
    desc = read_rocm_smi(text, MI300A)
    assert (0, 3) not in desc.pairs and len(desc.pairs) == 5
    assert "not reported" in desc.notes[0]


def test_no_link_type_section(sample):
    expected = "x.txt: no 'Link Type between two GPUs' section: not rocm-smi --showtopo output"
    assert refused(drop_section(sample(MI300A), "Link Type between two GPUs")) == expected
    assert refused("") == expected
    assert refused(bytes(range(256)).decode("latin-1") * 3) == expected


HOPS_3 = "=== Hops between two GPUs ===\n  GPU0 GPU1 GPU2\nGPU0 0 1 1\nGPU1 1 0 1\nGPU2 1 1 0\n\n"
BAD_COUNTS = [["0", "2", "1", "3"], ["2", "0", "1", "1"], ["1", "1", "0", "4"], ["3", "2", "4", "0"]]
ZERO_COUNTS = [["0", "0", "1", "1"], ["0", "0", "1", "1"], ["1", "1", "0", "1"], ["1", "1", "1", "0"]]


@pytest.mark.parametrize("edit, words", [
    (lambda t: t.replace("GPU3   XGMI         XGMI         XGMI         0", ""),
     ["Link Type: matrix stops after 3 of 4 rows (no row GPU3)"]),
    (lambda t: edit_row(t, "Link Type", 2, lambda c: c[:-1]), ["Link Type, row GPU2: 3 columns, expected 4"]),
    (lambda t: set_cell(t, "Link Type", 1, 3, "FOO"),
     ["Link Type, row GPU1, column GPU3: unknown link type 'FOO'"]),
    (lambda t: set_cell(t, "Link Type", 0, 1, "PCIE"),
     ["Link Type, row GPU0, column GPU1 is 'PCIE' but Link Type, row GPU1, column GPU0 is 'XGMI'"]),
    (lambda t: set_cell(t, "Link Type", 2, 2, "XGMI"), ["Link Type, row GPU2, column GPU2", "diagonal"]),
    (lambda t: set_cell(t, "Weight", 1, 2, "heavy"), ["Weight, row GPU1, column GPU2", "'heavy'"]),
    (lambda t: t + count_section(BAD_COUNTS),
     ["Link count, row GPU1, column GPU3 is '1' but Link count, row GPU3, column GPU1 is '2'"]),
    (lambda t: t + count_section(ZERO_COUNTS), ["Link count, row GPU0, column GPU1 is 0"]),
    (lambda t: drop_section(t, "Hops between two GPUs") + HOPS_3, ["Hops has 3 GPUs but Link Type has 4"]),
    (lambda t: t + "==== Link Type between two GPUs ====\n", ["two 'Link Type' sections"]),
    (lambda t: t.replace("GPU[3]\t\t: (Topology) Numa Node: 3", "GPU[7]\t\t: (Topology) Numa Node: 3"),
     ["Numa Nodes: GPU[7]"]),
    (lambda t: t.replace("       GPU0         GPU1         GPU2         GPU3\nGPU0   0            XGMI",
                         "GPU0   0            XGMI"), ["Link Type: header should read 'GPU0 GPU1 ...'"]),
    (lambda t: t.replace("GPU1   XGMI         0", "GPU2   XGMI         0"), ["Link Type: expected row GPU1"]),
])
def test_bad_inputs(sample, edit, words):
    text = re.sub(r" +$", "", sample(MI300A), flags=re.MULTILINE)
    message = refused(edit(text))
    for word in words:
        assert word in message, message


# ---- property tests: any rendering of a random machine reads back to it; nothing else escapes


@st.composite
def machines(draw):
    n = draw(st.integers(1, 6))
    kinds = {(i, j): draw(st.sampled_from(["XGMI", "PCIE", "N/A"])) for i in range(n) for j in range(i + 1, n)}
    numa = draw(st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=n, max_size=n))
    return n, kinds, numa


def render(draw, n, kinds, numa) -> str:
    """rocm-smi-like text with random ruler widths, cell padding (spaces/tabs) and line endings."""
    def gap():
        return draw(st.sampled_from([" ", "  ", "\t", " \t ", "            "]))

    def ruler(title):
        return "=" * draw(st.integers(3, 60)) + f" {title} " + "=" * draw(st.integers(3, 60))

    def cell(i, j):
        return "0" if i == j else kinds[(min(i, j), max(i, j))]

    lines = ["", ruler("ROCm System Management Interface"), "", ruler("Link Type between two GPUs"),
             gap() + gap().join(f"GPU{j}" for j in range(n)) + gap()]
    lines += [f"GPU{i}" + gap() + gap().join(cell(i, j) for j in range(n)) + draw(st.sampled_from(["", "  "]))
              for i in range(n)]
    lines += ["", ruler("Numa Nodes")]
    lines += [f"GPU[{i}]{gap()}: (Topology) Numa Node: {node}" for i, node in enumerate(numa) if node is not None]
    lines += [ruler("End of ROCm SMI Log"), ""]
    return draw(st.sampled_from(["\n", "\r\n"])).join(lines)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines(), st.data())
def test_any_rendering_reads_back(machine, data):
    n, kinds, numa = machine
    desc = read_rocm_smi(render(data.draw, n, kinds, numa), "r.txt")
    assert desc.gpus == n and desc.numa == tuple(numa)
    assert {pair: desc.pairs[pair].kind for pair in desc.pairs} == {
        pair: kind.lower() for pair, kind in kinds.items() if kind != "N/A"}
    for (i, j), path in desc.pairs.items():
        assert path.where == f"Link Type, row GPU{i}, column GPU{j}"
        if path.kind == "pcie":
            known = numa[i] is not None and numa[j] is not None
            assert path.level == (None if not known else "NODE" if numa[i] == numa[j] else "SYS")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines(), st.data())
def test_damaged_text_raises_only_input_error(machine, data):
    text = render(data.draw, *machine)
    for _ in range(data.draw(st.integers(1, 4))):  # cut, duplicate or overwrite a random stretch
        a = data.draw(st.integers(0, len(text)))
        b = data.draw(st.integers(a, min(len(text), a + 12)))
        text = text[:a] + data.draw(st.sampled_from(["", text[a:b] * 2, data.draw(st.text(max_size=6)),
                                                     "=== Weight between two GPUs ===\n"])) + text[b:]
    try:
        read_rocm_smi(text, "d.txt")
    except InputError as error:
        assert str(error).startswith("d.txt: ") and "\n" not in str(error)
