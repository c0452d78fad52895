"""Switch entries run on real processes (gloo), emulated through each switch op's root, and are
judged against torch's own collective bit for bit: NCCL's NVLS (glres), its reduce-scatter (glre)
and allgather (gstore), the switch planner's allreduce (glres mixed with point-to-point reduces and
gstore), in and out of place, with either executor; an MSCCL++ plan with switch channels runs too;
--backend nccl refuses switch ops in one line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

pytest.importorskip("torch")

from synth.baselines import build_baseline
from synth.core.io import save_schedule
from synth.core.library import resolve_topology
from synth.greedy.switches import switch_plan
from synth.mscclpp.lower import PlanOptions, lower_plan
from synth.runtime.measure import RunOptions
from synth.runtime.order import global_order
from synth.runtime.runnable import runnable_from_plan, runnable_from_schedule
from tests.cli_run import run

H100 = resolve_topology("h100")
QUICK = RunOptions(sizes=(1024, 1 << 20), iters=1, warmup=0, timeout=60)


def nvls(collective: str, pieces: int = 1):
    return build_baseline(H100, "nccl_nvls", collective, chunks=pieces)


@pytest.mark.parametrize("collective, inplace, executor", [
    ("allreduce", False, "threads"), ("allreduce", True, "ordered"), ("reduce_scatter", False, "threads"),
    ("allgather", True, "threads")])
def test_nvls_schedules_run_correct(worlds, collective, inplace, executor):
    runnable = runnable_from_schedule(nvls(collective), f"nvls-{collective}", inplace=inplace)
    assert runnable.program.switch_ops
    result = worlds(8).run(runnable, replace(QUICK, executor=executor))
    assert result.correct, result.fault
    assert [r.correct for r in result.rows] == [True, True]


@pytest.mark.parametrize("machines", [2, 3])
def test_nvlstree_runs_correct(worlds, machines):
    """NCCL's NVLSTree on 2 GPUs per machine: switch reduces and multicasts (glre, gstore) around the
    heads' exchange (2 machines) or tree (3)."""
    from synth.tuner.tune import communicator_topology

    topology = communicator_topology(resolve_topology("h100x3"), machines, 2 * machines)
    schedule = build_baseline(topology, "nccl_nvls_tree", "allreduce", chunks=2)
    result = worlds(2 * machines).run(runnable_from_schedule(schedule, f"nvlstree-{machines}"), QUICK)
    assert result.correct, result.fault


def test_the_switch_planners_allreduce_runs_correct(worlds):
    runnable = runnable_from_schedule(switch_plan(H100, "allreduce", 1 << 20), "planner")
    assert {op.type for g in runnable.program.gpus for tb in g.threadblocks for op in tb.ops if op.switches} == \
        {"glres", "gstore"}
    assert global_order(runnable.program) is None  # the one-thread executor leaves switch ops to threads
    result = worlds(8).run(runnable, QUICK)
    assert result.correct, result.fault


def test_an_mscclpp_plan_with_switch_channels_runs_correct(worlds):
    doc = json.loads(json.dumps(lower_plan(nvls("allreduce", 2), PlanOptions())))
    result = worlds(8).run(runnable_from_plan(doc, "nvls.plan.json"), QUICK)
    assert result.correct, result.fault


def test_synth_run_takes_a_switch_schedule_on_gloo_and_refuses_nccl(tmp_path, capsys):
    path = tmp_path / "nvls.json"
    save_schedule(path, nvls("allreduce"))
    code, out, err = run(capsys, "run", str(path), "--size", "1K", "--iters", "1", "--warmup", "0")
    assert code == 0, out + err
    assert out.splitlines()[-1].split()[-1] == "yes"
    code, out, err = run(capsys, "run", str(path), "--backend", "nccl")
    assert code == 2 and len(err.splitlines()) == 1 and "emulated on gloo only" in err, err
