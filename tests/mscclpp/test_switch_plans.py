"""Switch entries in MSCCL++ plans: NCCL's NVLS allreduce exports to switch channels and glres that
synth check passes, in and out of place; the switch planner's and NVLS's allgather too (gstore);
breaking such a plan (a glres dropped, a wrong index, channels out of order, a release or GPU that
lacks the op) is caught; what the format cannot say is refused in one line; random switch schedules
either export to a plan that checks and replays correct, or are refused in one line."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from synth.baselines import build_baseline
from synth.core import collectives
from synth.core.errors import InputError
from synth.core.io import save_schedule
from synth.core.library import resolve_topology
from synth.core.schedule import Schedule, SwitchSend
from synth.greedy.switches import switch_plan
from synth.mscclpp.lower import PlanOptions, lower_plan
from synth.mscclpp.plan import read_plan
from synth.mscclpp.replay import replay
from synth.mscclpp.rules import check_plan
from synth.verify import verify
from tests.cli_run import run
from tests.switch_strategies import box, make_steps, switch_schedules

H100 = resolve_topology("h100")


def nvls(collective: str = "allreduce", pieces: int = 2):
    return build_baseline(H100, "nccl_nvls", collective, chunks=pieces)


def judged(doc: dict):
    plan, problems = read_plan(json.loads(json.dumps(doc)))
    return [str(p) for p in problems + check_plan(plan)], replay(plan)


def ops_named(doc: dict, name: str) -> list[tuple[int, int, int]]:
    return [(g["id"], b["id"], i) for g in doc["gpus"] for b in g["threadblocks"]
            for i, op in enumerate(b["ops"]) if op["name"] == name]


@pytest.mark.parametrize("inplace", [False, True])
def test_the_nvls_allreduce_exports_to_switch_channels_and_glres_that_check(inplace):
    doc = lower_plan(nvls(), PlanOptions(inplace=inplace))
    problems, result = judged(doc)
    assert problems == [] and result.correct is True, (problems, result.problems)
    switch = [c for c in doc["gpus"][0]["channels"] if c["channel_type"] == "switch"]
    assert {c["buffer_type"] for c in switch} == ({"i"} if inplace else {"i", "o"})
    assert all(c["rank_groups"] == [{"size": 8, "ranks": list(range(8))}] for c in switch)
    assert len(ops_named(doc, "glres")) == 16 and not ops_named(doc, "gstore")
    assert doc["requires"]["sm"] == 90 and doc["requires"]["nvls"] is True


@pytest.mark.parametrize("make", [
    lambda: switch_plan(H100, "allreduce", 1 << 20), lambda: switch_plan(H100, "allgather", 1 << 20),
    lambda: nvls("allgather", 1)], ids=["planner-allreduce", "planner-allgather", "nvls-allgather"])
def test_the_switch_planner_and_nvls_allgather_export_with_gstore(make):
    doc = lower_plan(make(), PlanOptions())
    problems, result = judged(doc)
    assert problems == [] and result.correct is True, (problems, result.problems)
    assert ops_named(doc, "gstore")


def test_cli_export_and_check_of_the_nvls_baseline(tmp_path, capsys):
    schedule, plan = tmp_path / "nvls.json", tmp_path / "plan.json"
    code, _, err = run(capsys, "baseline", "h100", "allreduce", "--algo", "nccl_nvls", "--chunks", "2", "-o",
                       str(schedule))
    assert code == 0, err
    code, _, err = run(capsys, "export", str(schedule), "--format", "mscclpp-json", "-o", str(plan))
    assert code == 0, err
    code, out, err = run(capsys, "check", str(plan))
    assert code == 0 and "mscclpp  loads" in out and "replay   correct" in out, out + err
    assert "(mscclpp >= 0.8, sm_90+ with NVLS)" in out and "run on sm_90+ GPUs with NVLS only" in out, out


def _mutated(doc: dict, how: str) -> dict:
    doc = copy.deepcopy(doc)
    rank, block, index = ops_named(doc, "glres")[3]
    ops = doc["gpus"][rank]["threadblocks"][block]["ops"]
    if how == "drop-glres":
        del ops[index]
    elif how == "wrong-index":
        ops[index]["dst_buff"][0]["index"] = (ops[index]["dst_buff"][0]["index"] + 1) % 16
    elif how == "wrong-channel":
        ops[index]["src_buff"][0]["switch_channel_id"] = 1
    elif how == "old-release":
        doc["requires"]["mscclpp"] = "0.7"
    elif how == "old-gpu":
        doc["requires"]["sm"] = 80
    elif how == "channel-order":
        channels = doc["gpus"][2]["channels"]
        channels[1], channels[2] = channels[2], channels[1]
    elif how == "group-missing":
        doc["gpus"][4]["channels"] = [c for c in doc["gpus"][4]["channels"] if c.get("buffer_type") != "o"]
    elif how == "no-sync":
        for block_doc in doc["gpus"][5]["threadblocks"]:
            block_doc["ops"] = [op for op in block_doc["ops"] if op["name"] != "wait"]
    return doc


@pytest.mark.parametrize("how", ["drop-glres", "wrong-index", "wrong-channel", "old-release", "old-gpu",
                                 "channel-order", "group-missing", "no-sync"])
def test_a_broken_nvls_plan_is_caught(how, tmp_path, capsys):
    doc = _mutated(lower_plan(nvls(), PlanOptions()), how)
    problems, result = judged(doc)
    assert problems or result.correct is False, how
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    code, out, _ = run(capsys, "check", str(path))
    assert code == 4 and ("does not load" in out or "INCORRECT" in out), out


def test_a_gstore_needs_release_0_10_and_glres_runs_from_0_8():
    with pytest.raises(InputError, match=r"gstore needs mscclpp >= 0.10; the plan is for 0.9"):
        lower_plan(switch_plan(H100, "allgather", 1 << 20), PlanOptions(version="0.9"))
    doc = lower_plan(nvls(), PlanOptions(version="0.8"))
    assert doc["requires"]["mscclpp"] == "0.8" and judged(doc)[0] == []
    doc = lower_plan(switch_plan(H100, "allreduce", 1 << 20), PlanOptions())
    assert doc["requires"]["mscclpp"] == "0.10"  # the first release with gstore
    doc["requires"]["mscclpp"] = "0.8"
    assert any("gstore needs mscclpp >= 0.10" in p for p in judged(doc)[0])


@pytest.mark.parametrize("schedule, options, words", [
    (lambda: nvls("reduce_scatter", 1), PlanOptions(), "glre, which the executor does not parse"),
    (lambda: nvls(), PlanOptions(protocol="LL"), "runs Simple"),
])
def test_what_the_format_cannot_say_is_refused_in_one_line(schedule, options, words):
    with pytest.raises(InputError, match=words) as info:
        lower_plan(schedule(), options)
    assert "\n" not in str(info.value)


def test_an_infiniband_sharp_switch_is_no_switch_channel():
    topo = box(3, reduce=False, multicast=False, reduce_multicast=True)
    topo = replace(topo, switches=(replace(topo.switches[0], kind="net"),))
    raw = [([], [SwitchSend(c, "nvs", (0, 1, 2), (0, 1, 2)) for c in range(3)])]
    schedule = Schedule(topo, collectives.allreduce(3, 1), make_steps(topo, raw), {})
    assert verify(schedule) == []
    with pytest.raises(InputError, match="is a net switch"):
        lower_plan(schedule, PlanOptions())


def test_cli_refusals_write_nothing(tmp_path, capsys):
    source, target = tmp_path / "rs.json", tmp_path / "plan.json"
    save_schedule(source, nvls("reduce_scatter", 1))
    code, _, err = run(capsys, "export", str(source), "--format", "mscclpp-json", "-o", str(target))
    assert code == 2 and len(err.splitlines()) == 1 and "glre" in err and not target.exists()
    source = tmp_path / "ag.json"
    save_schedule(source, switch_plan(H100, "allgather", 1 << 20))
    code, _, err = run(capsys, "export", str(source), "--format", "mscclpp-json", "--mscclpp-version", "0.8", "-o",
                       str(target))
    assert code == 2 and len(err.splitlines()) == 1 and "gstore needs mscclpp >= 0.10" in err
    assert not target.exists()


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(switch_schedules(), st.booleans())
def test_random_switch_schedules_export_to_correct_plans_or_are_refused_in_one_line(schedule, inplace):
    assume(verify(schedule) == [])
    try:
        doc = lower_plan(schedule, PlanOptions(inplace=inplace))
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    problems, result = judged(doc)
    assert problems == [] and result.correct is True, (problems, result.problems[:3])
