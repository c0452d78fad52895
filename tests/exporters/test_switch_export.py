"""Exporting schedules with switch entries: MSCCL XML (no switch operation) refuses in one line and
writes nothing, for a single file and a selection range; program-json writes the switch ops
(synth.program version 2) and synth check reads them back: every MSCCL runtime refuses the file,
the replay finds it correct."""

from __future__ import annotations

import json

import pytest

from synth.baselines import build_baseline
from synth.core.io import save_schedule
from synth.core.library import resolve_topology
from tests.cli_run import run


@pytest.fixture()
def nvls_file(tmp_path):
    path = tmp_path / "nvls.json"
    save_schedule(path, build_baseline(resolve_topology("h100"), "nccl_nvls", "allreduce", chunks=2))
    return path


@pytest.mark.parametrize("runtime", [None, "legacy", "rccl"])
def test_msccl_xml_refuses_a_switch_schedule_in_one_line_and_writes_nothing(nvls_file, tmp_path, capsys, runtime):
    target = tmp_path / "out.xml"
    extra = ["--runtime", runtime] if runtime else []
    code, _, err = run(capsys, "export", str(nvls_file), "--format", "msccl-xml", *extra, "-o", str(target))
    assert code == 2 and len(err.splitlines()) == 1 and "MSCCL has no switch operation" in err, err
    assert not target.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["nvls.json"]


def test_program_json_writes_switch_ops_and_check_reads_them(nvls_file, tmp_path, capsys):
    target = tmp_path / "nvls.program.json"
    code, _, err = run(capsys, "export", str(nvls_file), "--format", "program-json", "-o", str(target))
    assert code == 0 and "16 switch ops" in err, err
    doc = json.loads(target.read_text())
    assert doc["version"] == 2
    glres = [op for g in doc["gpus"] for tb in g["threadblocks"] for op in tb["ops"] if op["type"] == "glres"]
    assert len(glres) == 16 * 8 and all(op["srcs"] and op["dsts"] for op in glres)  # one per participant
    code, out, _ = run(capsys, "check", str(target))
    assert code == 4, out  # no MSCCL runtime runs switch ops
    assert out.count("MSCCL has no switch operation") == 3 and "replay    correct" in out, out


def test_program_json_for_an_msccl_runtime_refuses(nvls_file, tmp_path, capsys):
    target = tmp_path / "p.json"
    code, _, err = run(capsys, "export", str(nvls_file), "--format", "program-json", "--runtime", "executor", "-o",
                       str(target))
    assert code == 2 and "MSCCL has no switch operation" in err and not target.exists()
