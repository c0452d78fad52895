"""Schedules with switch entries on the command line: verify (exit 4 naming the violation, exit 2
for a malformed entry), the nccl_nvls baseline, cost under Simple only, and exporters that cannot
carry switch entries saying so in one line without writing anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from synth.baselines import build_baseline
from synth.core.library import resolve_topology
from tests.cli_run import run

ROOT = Path(__file__).resolve().parents[2]


def nvls_doc(collective: str = "allreduce") -> dict:
    schedule = build_baseline(resolve_topology("h100"), "nccl_nvls", collective, chunks=2)
    return json.loads(json.dumps(schedule.to_dict()))


def write(path: Path, doc: dict) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def assert_one_line_error(code: int, out: str, err: str, name: str, expected_code: int = 2) -> None:
    lines = err.splitlines()
    assert code == expected_code, err
    assert len(lines) == 1 and lines[0].startswith("synth: error: "), err
    assert "Traceback" not in err and "internal error" not in err
    assert name in lines[0]
    assert out == ""


def _rename(doc):
    doc["steps"][0]["sends"][0]["switch"] = "ghost"


def _shrink(doc):
    doc["steps"][1]["rounds"] -= 1


def _no_multicast(doc):
    doc["topology"]["switches"][0]["multicast"] = False


def _lost_src(doc):
    doc["steps"][0]["sends"][0]["srcs"] = doc["steps"][0]["sends"][0]["srcs"][1:]


VIOLATIONS = [(_rename, "no_switch"), (_shrink, "switch_capacity"), (_no_multicast, "switch_capability"),
              (_lost_src, "postcondition")]


@pytest.mark.parametrize("change, kind", VIOLATIONS)
def test_verify_names_a_switch_violation_and_exits_4(tmp_path, capsys, change, kind):
    doc = nvls_doc()
    change(doc)
    code, out, err = run(capsys, "verify", write(tmp_path / "bad.json", doc))
    assert code == 4, out + err
    assert "INVALID" in out and f": {kind}: " in out, out
    assert "Traceback" not in err


MALFORMED = [
    ("srcs", []), ("srcs", "0, 1"), ("dsts", [3, 3]), ("chunk", "zero"), ("switch", 5),
]


@pytest.mark.parametrize("field, value", MALFORMED)
def test_verify_of_a_malformed_switch_entry_is_one_line_and_exit_2(tmp_path, capsys, field, value):
    doc = nvls_doc()
    doc["steps"][1]["sends"][2][field] = value
    code, out, err = run(capsys, "verify", write(tmp_path / "malformed.json", doc))
    assert_one_line_error(code, out, err, "malformed.json")
    assert f"'{field}'" in err and "step 1" in err


def test_verify_of_a_v1_file_with_a_switch_entry_is_one_line_and_exit_2(tmp_path, capsys):
    doc = nvls_doc("allgather")
    doc["version"] = 1
    code, out, err = run(capsys, "verify", write(tmp_path / "old.json", doc))
    assert_one_line_error(code, out, err, "old.json")
    assert "version 2" in err


def test_a_malformed_entry_from_a_real_process_has_no_traceback(tmp_path):
    doc = nvls_doc("reduce_scatter")
    doc["steps"][0]["sends"][0]["dsts"] = []
    path = write(tmp_path / "proc.json", doc)
    done = subprocess.run([sys.executable, "-m", "synth", "verify", path], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert_one_line_error(done.returncode, done.stdout, done.stderr, "proc.json")


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reduce_scatter"])
def test_the_nvls_baseline_writes_a_v2_file_that_verify_accepts(tmp_path, capsys, collective):
    path = tmp_path / f"nvls-{collective}.json"
    code, _, err = run(capsys, "baseline", "h100", collective, "--algo", "nccl_nvls", "-o", str(path))
    assert code == 0, err
    doc = json.loads(path.read_text())
    assert doc["version"] == 2 and doc["topology"]["version"] == 2
    assert any(s["op"] == "switch" for step in doc["steps"] for s in step["sends"])
    code, out, err = run(capsys, "verify", str(path))
    assert code == 0, out + err
    assert out.startswith("valid") and "switch entries" in out


@pytest.mark.parametrize("fmt", ["msccl-xml"])  # MSCCL XML has no switch operation
def test_export_of_a_switch_schedule_is_refused_in_one_line_and_writes_nothing(tmp_path, capsys, fmt):
    source = write(tmp_path / "nvls.json", nvls_doc())
    target = tmp_path / "out.xml"
    code, out, err = run(capsys, "export", source, "--format", fmt, "-o", str(target))
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("synth: error: "), err
    assert "switch" in err and "Traceback" not in err
    assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nvls.json"]  # no temp file either


def test_mscclpp_export_of_a_switch_schedule_refuses_or_computes_the_collective(tmp_path, capsys):
    source = write(tmp_path / "nvls.json", nvls_doc())
    target = tmp_path / "plan.json"
    code, _, err = run(capsys, "export", source, "--format", "mscclpp-json", "-o", str(target))
    if code == 2:  # refused, as msccl-xml is: one line, nothing written
        assert len(err.splitlines()) == 1 and "switch" in err, err
        assert not target.exists()
        return
    assert code == 0, err  # or written: then the plan must compute the allreduce
    code, out, err = run(capsys, "check", str(target))
    assert code == 0, out + err


def test_cost_of_a_switch_schedule_picks_simple_and_refuses_ll(tmp_path, capsys):
    source = write(tmp_path / "nvls.json", nvls_doc())
    code, out, err = run(capsys, "cost", source, "--sizes", "1K,1G", "--protocol", "best")
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("1K", "1G"))]
    assert [row[1] for row in rows] == ["simple", "simple"], out
    code, out, err = run(capsys, "cost", source, "--protocol", "ll")
    assert_one_line_error(code, out, err, "simple")


def test_solve_across_machines_with_stats_writes_a_file_verify_accepts(tmp_path, capsys):
    """The rail allgather on h100x2 through the command line: the summary line, the stats line
    (wall time and peak memory), and a file that verifies."""
    import re

    out_file = tmp_path / "ag.json"
    code, _, err = run(capsys, "solve", "h100x2", "allgather", "--backend", "greedy", "--size", "1G",
                       "-o", str(out_file), "--stats")
    assert code == 0, err
    lines = err.splitlines()
    assert lines[0].startswith("h100x2 allgather greedy: ") and "% of the bound" in lines[0]
    assert re.fullmatch(r"stats: \d+\.\d s wall \(synthesis \d+\.\d s\), peak memory \d+\.\d\d GB", lines[-1]), lines
    code, out, err = run(capsys, "verify", str(out_file))
    assert code == 0 and out.startswith("valid allgather on h100x2"), err
