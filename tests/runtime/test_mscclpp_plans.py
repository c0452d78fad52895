"""MSCCL++ plans on torch.distributed (gloo): every committed dgx1 schedule's plan and the ndv2x2
MILP allgather's (16 ranks, port channels), in Simple and LL, and the shared corpus plans our
replay calls correct, run correct at 1K and 1M; a plan the replay finds wrong is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from synth.core.errors import InputError
from synth.mscclpp.lower import PlanOptions, lower_plan
from synth.runtime.measure import RunOptions
from synth.runtime.runnable import load_runnable
from synth.verify import load_schedule
from tests.shared_data import shared_folder

ROOT = Path(__file__).resolve().parents[2]
QUICK = RunOptions(sizes=(1024, 1 << 20), iters=0, warmup=0, timeout=60)
CORPUS = shared_folder("corpus", "SOURCES.md", "SYNTH_CORPUS")
STALE = "test__execution-files__allreduce_pipeline.json"


def plan_file(tmp_path: Path, schedule: Path, protocol: str) -> str:
    path = tmp_path / f"{schedule.name}.{protocol}.json"
    path.write_text(json.dumps(lower_plan(load_schedule(schedule), PlanOptions(protocol=protocol))))
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["Simple", "LL"])
def test_every_dgx1_plan_runs_correct(worlds, tmp_path, protocol):
    files = sorted((ROOT / "results" / "dgx1").glob("*/schedules/*.schedule.json"))
    wrong = {}
    for path in files:
        result = worlds(8).run(load_runnable(plan_file(tmp_path, path, protocol)), QUICK)
        if not result.correct or len(result.rows) != 2:
            wrong[path.name] = result.fault
    assert wrong == {}


@pytest.mark.parametrize("name", ["allreduce/schedules/allreduce.dgx1.s6-r14-c6.schedule.json",
                                  "allgather/schedules/allgather.dgx1.s3-r7-c6.schedule.json",
                                  "broadcast/schedules/broadcast.dgx1.s3-r5-c12.schedule.json"])
@pytest.mark.parametrize("protocol", ["Simple", "LL"])
def test_synthesized_dgx1_plans_run_correct(worlds, tmp_path, name, protocol):
    result = worlds(8).run(load_runnable(plan_file(tmp_path, ROOT / "results" / "dgx1" / name, protocol)), QUICK)
    assert result.correct and len(result.rows) == 2, result.fault


def test_the_ndv2x2_milp_allgather_plan_runs_correct_on_16_ranks(worlds, tmp_path):
    path = ROOT / "results" / "ndv2x2" / "allgather" / "schedules" / "allgather.ndv2x2.milp-1G.schedule.json"
    result = worlds(16).run(load_runnable(plan_file(tmp_path, path, "Simple")), QUICK)
    assert result.correct and len(result.rows) == 2, result.fault


@pytest.mark.skipif(CORPUS is None, reason="shared corpus not found")
def test_the_corpus_plans_our_replay_calls_correct_run_correct(worlds):
    folder = CORPUS / "mscclpp-json" / "microsoft__mscclpp"
    ran = []
    for path in sorted(folder.glob("*.json")):
        if path.name == STALE:
            with pytest.raises(InputError, match="would not load it"):
                load_runnable(str(path))
            continue
        runnable = load_runnable(str(path))
        result = worlds(runnable.ranks).run(runnable, RunOptions(sizes=(1024, 1 << 20), iters=0, warmup=0,
                                                                timeout=60))
        assert result.correct, (path.name, result.fault)
        ran.append(path.name)
    assert len(ran) == 10
