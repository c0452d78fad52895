"""``synth run`` as a user types it: the nccl-tests table, exit codes, one-line errors."""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import time
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torch")

from synth.baselines import build_baseline
from synth.cli.main import main
from synth.core.generators import ring
from synth.core.io import save_schedule
from synth.program.document import program_to_dict

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.fixture
def ring4(tmp_path):
    path = tmp_path / "allgather.ring4.schedule.json"
    save_schedule(path, build_baseline(ring(4), "ring", "allgather", None, None))
    return str(path)


def test_table_follows_nccl_tests(ring4, capsys):
    assert main(["run", ring4, "--size", "1K,64K", "--iters", "2", "--warmup", "1", "--vs-torch"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = next(line for line in out if "algbw" in line).split()
    assert header[:4] == ["#", "size", "count", "type"] and header[-1] == "correct" and "torch/ours" in header
    rows = [line.split() for line in out if line and not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [1024, 65536] and all(r[-1] == "yes" for r in rows)
    assert all(r[2] == "float" and float(r[3]) > 0 for r in rows)
    assert int(rows[0][1]) == 256  # elements


def test_json_rows(ring4, capsys):
    assert main(["run", ring4, "--size", "4K", "--iters", "1", "--json", "--dtype", "bf16"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["correct"] and doc["checker"] == "correct" and doc["rows"][0]["size"] == 4096


def test_forced_deadlock_ends_in_time_with_one_line(tmp_path, capsys):
    from synth.runtime.runnable import load_runnable

    program = load_runnable(str(GOLDEN / "ring4_allgather.program.json")).program
    gpu = program.gpus[3]
    tb = gpu.threadblocks[0]
    tb = replace(tb, ops=tuple(op for op in tb.ops if op.type != "s"))
    broken = replace(program, gpus=program.gpus[:3] + (replace(gpu, threadblocks=(tb,) + gpu.threadblocks[1:]),))
    path = tmp_path / "broken.program.json"
    path.write_text(json.dumps(program_to_dict(broken)))
    before = _workers()  # the session's shared worlds (conftest), when other tests started them first
    assert main(["run", str(path), "--iters", "0"]) == 4  # refused by our checker
    refused = capsys.readouterr().err.strip().splitlines()
    assert len(refused) == 1 and "our checker finds the program wrong" in refused[0]
    start = time.monotonic()
    assert main(["run", str(path), "--force", "--timeout", "3", "--iters", "0"]) == 4
    assert time.monotonic() - start < 15
    captured = capsys.readouterr()
    errors = [l for l in captured.err.splitlines() if l.startswith("synth")]
    assert len(errors) == 1 and "stuck" in errors[0] and "waits for data from rank 3" in errors[0]
    assert "--force" in captured.out
    assert _workers() <= before


def _workers() -> set[int]:
    return {p.pid for p in multiprocessing.active_children() if p.name.startswith("synth-rank")}


def test_without_torch_the_command_says_how_to_install_it(ring4, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(["run", ring4]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs PyTorch" in err and "synth[torch]" in err and "\n" not in err


@pytest.mark.parametrize("argv, message", [
    (["--backend", "nccl"], "CUDA"),
    (["--timeout", "0"], "--timeout"),
    (["--iters", "-1"], "--iters"),
    (["--size", "1Q"], "bad size"),
    (["--dtype", "complex7"], "unknown dtype"),
    (["--size", "1T"], "GiB"),
])
def test_bad_options(ring4, capsys, argv, message):
    import torch

    if argv[:2] == ["--backend", "nccl"] and torch.cuda.is_available():
        pytest.skip("GPUs are present")
    assert main(["run", ring4, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
