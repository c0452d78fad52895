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
from synth.core.io import save_schedule
from synth.core.library import resolve_topology

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
    save_schedule(folder / "allreduce2.json", build_baseline(resolve_topology("full:2"), "ring", "allreduce", None, None))


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
