"""Joining a torchrun launch: ``synth run`` as one rank per process, and the Python API that
training code calls (tests/runtime/api_worker.py), both under ``torchrun --nproc-per-node 4``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from synth.baselines import build_baseline
from synth.core.io import save_schedule, write_json_atomic
from synth.core.library import resolve_topology
from synth.moe.generate import make_routing

ROOT = Path(__file__).resolve().parents[2]


def _torchrun(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
           *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def _schedules(folder: Path) -> None:
    full4 = resolve_topology("full:4")
    matrix = [[0, 2, 1, 3], [1, 0, 2, 0], [2, 2, 0, 1], [1, 1, 1, 0]]
    (folder / "m.json").write_text(json.dumps(matrix))
    plans = {"allgather": ("allgather", "ring", None), "reduce_scatter": ("reduce_scatter", "ring", None),
             "allreduce": ("allreduce", "recursive_doubling", None), "alltoall": ("alltoall", "bruck", None),
             "alltoallv": (f"alltoallv:{folder / 'm.json'}", "direct", None),
             "broadcast": ("broadcast", "binomial_tree", 2), "reduce": ("reduce", "binomial_tree", 1),
             "gather": ("gather", "direct", 3), "scatter": ("scatter", "direct", 0)}
    for name, (coll, algo, root) in plans.items():
        save_schedule(folder / f"{name}.json", build_baseline(full4, algo, coll, root, None))
    save_schedule(folder / "allreduce2.json",
                  build_baseline(resolve_topology("full:2"), "ring", "allreduce", None, None))
    routing = make_routing(4, 8, 2, 3, 64, "uniform", seed=0, imbalance=2.0)  # 64-byte tokens, rank 0 has 6
    write_json_atomic(folder / "routing.json", routing.to_doc())
    for kind in ("moe_dispatch", "moe_combine"):
        save_schedule(folder / f"{kind}.json", build_baseline(full4, "direct", f"{kind}:{folder / 'routing.json'}",
                                                              None, None))


def test_the_api_matches_torch_for_every_collective(tmp_path):
    _schedules(tmp_path)
    done = _torchrun(str(ROOT / "tests" / "runtime" / "api_worker.py"), str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "API OK" in done.stdout


def test_synth_run_joins_a_torchrun_launch(tmp_path):
    _schedules(tmp_path)
    done = _torchrun("-m", "synth", "run", str(tmp_path / "allreduce.json"), "--size", "1K,64K", "--iters", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [l.split() for l in done.stdout.splitlines() if l and not l.startswith("#")]
    assert len(rows) == 2 and all(r[-1] == "yes" for r in rows)  # one table, printed by rank 0 only


def test_a_stuck_program_under_torchrun_ends_with_one_line(tmp_path):
    import time
    from dataclasses import replace

    from synth.program.document import program_to_dict
    from synth.runtime.runnable import load_runnable

    program = load_runnable(str(ROOT / "tests" / "golden" / "ring4_allgather.program.json")).program
    gpu = program.gpus[3]
    tb = replace(gpu.threadblocks[0], ops=tuple(op for op in gpu.threadblocks[0].ops if op.type != "s"))
    broken = replace(program, gpus=program.gpus[:3] + (replace(gpu, threadblocks=(tb,) + gpu.threadblocks[1:]),))
    path = tmp_path / "broken.program.json"
    path.write_text(json.dumps(program_to_dict(broken)))
    start = time.monotonic()
    done = _torchrun("-m", "synth", "run", str(path), "--force", "--timeout", "3", "--iters", "0", timeout=120)
    assert time.monotonic() - start < 90
    assert done.returncode != 0
    lines = [l for l in done.stderr.splitlines() if l.startswith("synth: error:")]
    assert len(lines) == 1 and "stuck" in lines[0] and "waits for data from rank 3" in lines[0]
