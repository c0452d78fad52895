"""``synth baseline --algo nccl --calibration CAL`` and ``synth tune``: one choice (``NcclOptions``),
two commands; where NCCL runs NVLSTree the baseline is the nccl_nvls_tree schedule, verified."""

from __future__ import annotations

import json

import pytest

from synth.baselines.nccl import MODEL_NAMES
from synth.core.library import resolve_topology
from synth.measure.calibration import load_calibration
from synth.tuner.choice import NcclOptions
from synth.tuner.config import read_lines
from synth.tuner.rules import lookup
from synth.verify import load_schedule, verify
from tests.cli_run import run

MIB = 1 << 20
SIZES = [1 << 10, 64 << 10, MIB, 8 * MIB, 32 * MIB, 64 * MIB, 256 * MIB, 1 << 30, 4 << 30]


def tuned_lines(capsys, tmp_path, name: str):
    conf = tmp_path / f"{name}.conf"
    code, _, _ = run(capsys, "tune", name, "--collectives", "allreduce", "-o", str(conf))
    assert code == 0
    lines, notes = read_lines(conf.read_text())
    assert notes == []
    return lines


def test_h100x2_256m_is_nvlstree_verified_and_what_tune_writes(capsys, tmp_path):
    out = tmp_path / "nccl.json"
    code, _, err = run(capsys, "baseline", "h100x2", "allreduce", "--algo", "nccl", "--size", "256M",
                       "--calibration", "default", "-o", str(out))
    assert code == 0, err
    schedule = load_schedule(out)  # verified on load
    assert verify(schedule) == [] and schedule.switch_count > 0
    meta = schedule.meta
    assert (meta["nccl_algorithm"], meta["protocol"], meta["calibration"]) == ("nccl_nvls_tree", "simple", "default")
    assert json.loads(out.read_text())["meta"]["algorithm"] == "nccl"
    line = lookup(tuned_lines(capsys, tmp_path, "h100x2"), "allreduce", 256 * MIB, 2, 16)
    assert (line.algorithm, line.protocol) == ("nvls_tree", "simple")


@pytest.mark.parametrize("name", ["h100x2", pytest.param("h100x4", marks=pytest.mark.slow)])
def test_baseline_and_tune_pick_the_same_algorithm_at_every_size(name, capsys, tmp_path):
    topology = resolve_topology(name)
    lines = tuned_lines(capsys, tmp_path, name)
    options = NcclOptions(topology, "allreduce", load_calibration("default"))
    seen = set()
    for size in SIZES:
        schedule = options.schedule(size)
        line = lookup(lines, "allreduce", size, topology.machine_count, topology.ranks)
        picked = (MODEL_NAMES[schedule.meta["nccl_algorithm"]], schedule.meta["protocol"])
        assert picked == (line.algorithm, line.protocol), size
        seen.add(picked[0])
        if picked[0] == "nvls_tree":
            assert verify(schedule) == [] and schedule.meta["algorithm"] == "nccl"
    assert "nvls_tree" in seen and seen & {"tree", "ring"}  # NVLSTree wins somewhere, not everywhere


def test_without_a_calibration_nccl_is_the_contract_models_choice(capsys, tmp_path):
    out = tmp_path / "nccl.json"
    assert run(capsys, "baseline", "h100x2", "allreduce", "--algo", "nccl", "--size", "1G", "-o", str(out))[0] == 0
    meta = json.loads(out.read_text())["meta"]
    assert "calibration" not in meta and meta["nccl_algorithm"] in MODEL_NAMES


def test_a_calibration_with_chunks_or_another_algorithm_is_one_line(capsys):
    for extra in (["--algo", "nccl", "--chunks", "2"], ["--algo", "nccl_nvls_tree"]):
        code, _, err = run(capsys, "baseline", "h100x2", "allreduce", "--calibration", "default", *extra)
        assert code == 2 and err.count("\n") == 1
