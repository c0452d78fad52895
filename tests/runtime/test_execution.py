"""Programs run on real processes (gloo) and are judged against torch's own collectives: every
collective the runtime supports runs correct, and a program that computes the wrong thing, reads
memory nothing wrote or deadlocks is reported (rank, index, expected, got / stuck blocks)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torch")

from synth.baselines import build_baseline
from synth.core.library import resolve_topology
from synth.runtime.measure import RunOptions
from synth.runtime.runnable import load_runnable, runnable_from_program, runnable_from_schedule

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
QUICK = RunOptions(sizes=(1024, 1 << 20), iters=1, warmup=0, timeout=30)


def _run(worlds, runnable, options=QUICK):
    return worlds(runnable.ranks).run(runnable, options)


@pytest.mark.parametrize("executor", ["threads", "ordered"])
@pytest.mark.parametrize("coll, algo, root", [
    ("allgather", "ring", None), ("reduce_scatter", "ring", None), ("allreduce", "ring", None),
    ("allreduce", "recursive_doubling", None), ("alltoall", "direct", None), ("alltoall", "bruck", None),
    ("broadcast", "binomial_tree", 2), ("reduce", "binomial_tree", 1), ("gather", "direct", 3),
    ("scatter", "direct", 0),
])
def test_every_collective_runs_correct(worlds, coll, algo, root, executor):
    sched = build_baseline(resolve_topology("full:4"), algo, coll, root, None)
    result = _run(worlds, runnable_from_schedule(sched, f"{coll}.{algo}"), replace(QUICK, executor=executor))
    assert result.correct, result.fault
    assert [r.size for r in result.rows] and all(r.time_us and r.time_us > 0 for r in result.rows)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "float64"])
def test_dtypes_are_exact(worlds, dtype):
    sched = build_baseline(resolve_topology("full:4"), "ring", "allreduce", None, None)
    result = _run(worlds, runnable_from_schedule(sched, "ar"), replace(QUICK, dtype=dtype))
    assert result.correct, result.fault


def test_inplace_and_xml_programs(worlds):
    for name in ("ring4_allreduce_inplace.executor.xml", "full4_alltoall.legacy.xml", "ring4_reduce_scatter.rccl.xml"):
        result = _run(worlds, load_runnable(str(GOLDEN / name)))
        assert result.correct, (name, result.fault)


def test_alltoallv_from_a_skewed_matrix_on_8_ranks(worlds, tmp_path):
    matrix = [[0 if s == d else 1 + (7 * s + 3 * d) % 9 // (1 + (d - s) % 8 // 2) for d in range(8)] for s in range(8)]
    matrix[0] = [0, 9, 7, 5, 3, 2, 1, 1]
    traffic = tmp_path / "skew.json"
    traffic.write_text(json.dumps(matrix))
    sched = build_baseline(resolve_topology("dgx1"), "direct", f"alltoallv:{traffic}", None, None)
    result = _run(worlds, runnable_from_schedule(sched, "a2av"))
    assert result.correct, result.fault


def _ring4_allgather():
    return load_runnable(str(GOLDEN / "ring4_allgather.program.json"))


def _edit_op(runnable, rank, tb_index, op_index, **changes):
    """``runnable`` with one op changed, as a hand-edited file would be."""
    program = runnable.program
    gpu = program.gpus[rank]
    tb = gpu.threadblocks[tb_index]
    ops = list(tb.ops)
    if changes.get("delete"):
        del ops[op_index]
    else:
        ops[op_index] = replace(ops[op_index], **changes)
    blocks = list(gpu.threadblocks)
    blocks[tb_index] = replace(tb, ops=tuple(ops))
    gpus = list(program.gpus)
    gpus[rank] = replace(gpu, threadblocks=tuple(blocks))
    return runnable_from_program(replace(program, gpus=tuple(gpus)), "edited", "program")


def _find(runnable, rank, kind):
    for i, tb in enumerate(runnable.program.gpus[rank].threadblocks):
        for j, op in enumerate(tb.ops):
            if op.type == kind:
                return i, j, op
    raise AssertionError(f"no {kind} on rank {rank}")


def test_a_wrong_result_names_rank_index_expected_and_got(worlds):
    good = _ring4_allgather()
    i, j, op = _find(good, 2, "r")
    wrong_slot = (op.dst_off + 1) % good.program.gpus[2].output_chunks
    bad = _edit_op(good, 2, i, j, dst_off=wrong_slot)  # rank 2 lands a received chunk in the wrong place
    result = _run(worlds, bad)
    assert not result.correct
    assert "wrong result: rank 2 output element" in result.fault and "expected" in result.fault
    assert "got" in result.fault


def test_reading_unwritten_scratch_is_reported(worlds):
    good = _ring4_allgather()
    i, j, op = _find(good, 1, "s")
    gpu = good.program.gpus[1]
    program = replace(good.program, gpus=good.program.gpus[:1] + (replace(gpu, scratch_chunks=1),)
                      + good.program.gpus[2:])
    bad = _edit_op(replace(good, program=program), 1, i, j, src_buf="s", src_off=0)
    result = _run(worlds, bad)
    assert not result.correct
    assert "rank 1" in result.fault and "reads s[0] before anything was written there" in result.fault


def test_a_deadlock_ends_within_the_timeout_naming_the_stuck_blocks(worlds):
    good = _ring4_allgather()
    i, j, _ = _find(good, 0, "s")
    bad = _edit_op(good, 0, i, j, delete=True)  # rank 0 never sends: its successor waits forever
    start = time.monotonic()
    result = _run(worlds, bad, replace(QUICK, timeout=3))
    assert time.monotonic() - start < 3 + 10
    assert not result.correct and result.fault.startswith("stuck")
    assert "waits for data from rank 0" in result.fault
    # the world is rebuilt for the next job and works
    assert _run(worlds, good).correct
