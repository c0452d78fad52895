"""Schedules exported as MSCCL++ plans: every plan passes the executor's rules and the replay, for
every committed dgx1 schedule and the ndv2x2 MILP allgather (port channels across machines), in
Simple and LL; a plan whose synchronisation is then broken is caught; bad requests are one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synth.mscclpp.lower import PlanOptions, lower_plan
from synth.mscclpp.plan import read_plan
from synth.mscclpp.replay import replay
from synth.mscclpp.rules import check_plan
from synth.verify import load_schedule
from tests.cli_run import run

ROOT = Path(__file__).resolve().parents[2]
SCHEDULES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "results" / "dgx1").glob("*/schedules/*.json*"))
SCHEDULES += ["results/ndv2x2/allgather/schedules/allgather.ndv2x2.milp-1G.schedule.json"]


def judged(doc: dict):
    plan, problems = read_plan(json.loads(json.dumps(doc)))
    return problems + check_plan(plan), replay(plan)


@pytest.mark.parametrize("protocol", ["Simple", "LL"])
@pytest.mark.parametrize("path", SCHEDULES)
def test_every_exported_plan_loads_and_replays_correct(path, protocol):
    doc = lower_plan(load_schedule(ROOT / path), PlanOptions(protocol=protocol))
    problems, result = judged(doc)
    assert problems == [] and result.correct is True, ([str(p) for p in problems], result.problems)
    ports = {c["channel_type"] for g in doc["gpus"] for c in g["channels"]}
    assert ports == ({"memory", "port"} if "ndv2x2" in path else {"memory"})


def test_breaking_an_exported_plan_is_caught():
    doc = lower_plan(load_schedule(ROOT / SCHEDULES[0]), PlanOptions())
    ops = doc["gpus"][3]["threadblocks"][0]["ops"]
    waits = [i for i, op in enumerate(ops) if op["name"] == "wait"]
    del ops[waits[-1]]
    problems, result = judged(doc)
    assert result.correct is False and any("[R20]" in p or "[R24]" in p for p in result.problems)
    nops = [i for i, op in enumerate(doc["gpus"][3]["threadblocks"][0]["ops"]) if op["name"] == "nop"]
    for index in reversed(nops):
        del doc["gpus"][3]["threadblocks"][0]["ops"][index]
    assert judged(doc)[1].correct is False


def test_export_and_check_a_plan(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    code, _, err = run(capsys, "export", SCHEDULES[0], "--format", "mscclpp-json", "--protocol", "ll",
                       "--mscclpp-version", "0.8", "-o", str(plan))
    assert code == 0 and "plan: " in err
    code, out, _ = run(capsys, "check", str(plan))
    assert code == 0 and "mscclpp  loads" in out and "replay   correct" in out


@pytest.mark.parametrize("args, words", [
    (["--protocol", "ll128"], "MSCCL++ plans run Simple or LL, not LL128"),
    (["--instances", "2"], "--instances does not apply to --format mscclpp-json"),
    (["--runtime", "rccl"], "--runtime does not apply"),
])
def test_bad_plan_requests_are_one_line_and_write_nothing(args, words, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    code, _, err = run(capsys, "export", SCHEDULES[0], "--format", "mscclpp-json", *args, "-o", str(plan))
    assert code == 2 and words in err and not plan.exists()


def test_a_collective_mscclpp_has_no_plan_for_is_refused(tmp_path, capsys):
    from synth.core.io import save_schedule
    from synth.core.library import resolve_topology
    from synth.greedy.pipeline import pipelined

    path = tmp_path / "gather.json"
    save_schedule(path, pipelined(resolve_topology("ring:4"), "gather", 1, 0))
    code, _, err = run(capsys, "export", str(path), "--format", "mscclpp-json", "-o", str(tmp_path / "p.json"))
    assert code == 2 and "not gather" in err
