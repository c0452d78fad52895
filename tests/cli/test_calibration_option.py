"""``--calibration`` on every command that costs: cost, bounds, baseline, solve, report, export
(doctor's own tests are in tests/measure)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from synth.cli.main import main
from synth.core.library import resolve_topology
from synth.cost import step_time_us
from synth.measure.calibration import DEFAULTS, Calibration
from synth.verify import load_schedule


@pytest.fixture()
def nccl_file(tmp_path):
    """NCCL's ring/tree allreduce on h100 at 1M, on the machine without its NVSwitch's NVLS (so the
    schedule is point to point and exports to MSCCL XML)."""
    machine, path = tmp_path / "h100-p2p.json", tmp_path / "nccl.json"
    machine.write_text(json.dumps(replace(resolve_topology("h100"), switches=()).to_dict()))
    assert main(["baseline", str(machine), "allreduce", "--algo", "nccl", "--size", "1M", "-o", str(path)]) == 0
    return path


@pytest.fixture()
def calibration(tmp_path):
    path = tmp_path / "cal.json"
    cal = Calibration({"efficiency_nvlink": 0.5, "launch_process_us": 30.0})
    path.write_text(json.dumps(cal.to_doc()))
    return path


def test_cost_under_a_calibration_is_its_terms(nccl_file, calibration, capsys):
    capsys.readouterr()
    assert main(["cost", str(nccl_file), "--sizes", "1K,1G", "--calibration", str(calibration), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    schedule = load_schedule(nccl_file)
    terms = Calibration({"efficiency_nvlink": 0.5, "launch_process_us": 30.0}).terms()
    assert rows[0]["step_time_us"] == pytest.approx(30.0)  # the launch floor at 1K
    big = rows[1]
    assert big["step_time_us"] == pytest.approx(step_time_us(schedule, 1 << 30, big["protocol"], terms))
    assert big["channels"] == 32 and 0 < big["bound_fraction"] <= 1
    # NVLink at 0.5 of line rate against the default: about default / 0.5 times the time at 1 GiB
    assert main(["cost", str(nccl_file), "--sizes", "1G", "--calibration", "default", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)[0]["step_time_us"]
    slower = DEFAULTS["efficiency_nvlink"] / 0.5
    assert 0.95 * slower < big["step_time_us"] / default < 1.02 * slower


def test_cost_text_names_the_calibration_and_instances(nccl_file, capsys):
    capsys.readouterr()
    assert main(["cost", str(nccl_file), "--sizes", "64K", "--calibration", "default"]) == 0
    out = capsys.readouterr().out
    assert "calibration default" in out and "instances" in out


def test_ideal_with_a_calibration_is_refused(nccl_file, capsys):
    assert main(["cost", str(nccl_file), "--protocol", "ideal", "--calibration", "default"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ideal" in err


def test_bounds_under_a_calibration_are_at_the_reachable_rates(calibration, capsys):
    capsys.readouterr()
    assert main(["bounds", "h100", "allgather", "--size", "1G", "--json"]) == 0
    ideal = json.loads(capsys.readouterr().out)
    assert main(["bounds", "h100", "allgather", "--size", "1G", "--json", "--calibration", str(calibration)]) == 0
    runtime = json.loads(capsys.readouterr().out)
    assert runtime["busbw_gbps"] == pytest.approx(ideal["busbw_gbps"] * 0.5)
    assert runtime["time_us"] > 1.9 * ideal["time_us"] and runtime["calibration"] == str(calibration)


def test_baseline_picks_nccls_option_under_the_calibration(tmp_path, capsys):
    """At 64K NCCL's ring runs LL, with or without NVLS (a call through the switch takes at least
    NVLS's 25 us, as the measured runs show); at 1G NVLS as a schedule is the fastest NCCL
    option, Simple only."""
    out, machine = tmp_path / "b.json", tmp_path / "h100-p2p.json"
    machine.write_text(json.dumps(replace(resolve_topology("h100"), switches=()).to_dict()))
    assert main(["baseline", str(machine), "allreduce", "--algo", "nccl", "--size", "64K", "--calibration",
                 "default", "-o", str(out)]) == 0
    meta = json.loads(out.read_text())["meta"]
    assert meta["calibration"] == "default" and meta["protocol"] == "ll"
    assert main(["baseline", "h100", "allreduce", "--algo", "nccl", "--size", "64K", "--calibration", "default",
                 "-o", str(out)]) == 0
    meta = json.loads(out.read_text())["meta"]
    assert meta["nccl_algorithm"] == "nccl_ring" and meta["protocol"] == "ll"
    assert main(["baseline", "h100", "allreduce", "--algo", "nccl", "--size", "1G", "--calibration", "default",
                 "-o", str(out)]) == 0
    meta = json.loads(out.read_text())["meta"]
    assert meta["nccl_algorithm"] == "nccl_nvls" and meta["protocol"] == "simple"
    assert main(["baseline", "h100", "allreduce", "--algo", "ring", "--calibration", "default"]) == 2
    assert "--algo nccl" in capsys.readouterr().err


def test_solve_reports_the_runtime_time(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["solve", "ring:4", "allgather", "--steps", "3", "--calibration", "default", "--size", "1M",
                 "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert re.search(r"under calibration default at 1M: [\d.]+ us \((simple|ll128|ll), \d+ instances\)", err)


def test_export_chooses_protocol_and_instances_by_size(nccl_file, tmp_path, capsys):
    small, large = tmp_path / "small.xml", tmp_path / "large.xml"
    assert main(["export", str(nccl_file), "--format", "msccl-xml", "--calibration", "default", "--size", "4K",
                 "-o", str(small)]) == 0
    assert main(["export", str(nccl_file), "--format", "msccl-xml", "--calibration", "default", "--size", "1G",
                 "-o", str(large)]) == 0
    err = capsys.readouterr().err
    assert 'proto="LL"' in small.read_text() and 'proto="Simple"' in large.read_text()
    assert "LL, 1 instance(s)" in err and "Simple, 32 instance(s)" in err
    kept = tmp_path / "kept.xml"
    assert main(["export", str(nccl_file), "--format", "msccl-xml", "--calibration", "default", "--size", "1G",
                 "--protocol", "ll", "--instances", "2", "-o", str(kept)]) == 0
    assert 'proto="LL"' in kept.read_text() and "LL, 2 instance(s)" in capsys.readouterr().err


@pytest.mark.parametrize("command", [
    ["cost", "{schedule}"],
    ["bounds", "h100", "allgather"],
    ["baseline", "h100", "allgather", "--algo", "nccl", "-o", "{out}"],
    ["solve", "ring:4", "allgather", "--steps", "3", "-o", "{out}"],
    ["export", "{schedule}", "--format", "msccl-xml", "-o", "{out}"],
    ["report", "ring:4", "allgather", "-o", "{out}"],
])
def test_a_bad_calibration_is_one_line_and_nothing_is_written(command, nccl_file, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "synth.calibration", "version": 1,
                               "parameters": {"efficiency_nvlink": -1}}))
    out = tmp_path / "out"
    args = [a.format(schedule=nccl_file, out=out) for a in command] + ["--calibration", str(bad)]
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "Traceback" not in err
    assert not out.exists()


def test_greedy_plans_the_switch_under_the_calibration(tmp_path, capsys):
    """With --calibration the switch planner picks its plan under those terms (the shaped pipeline
    at 1 GiB on h100, within 95% of the runtime bound), not the contract model's pick."""
    out = tmp_path / "s.json"
    assert main(["solve", "h100", "allreduce", "--backend", "greedy", "--size", "1G", "--calibration", "default",
                 "-o", str(out)]) == 0
    line = re.search(r"under calibration default at 1G: [\d.]+ us .* = ([\d.]+)% of the runtime bound",
                     capsys.readouterr().err)
    assert line and float(line.group(1)) >= 95.0
    assert json.loads(out.read_text())["meta"]["pipeline"] == "shaped"
