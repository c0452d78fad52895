"""Thread blocks per rank: a schedule's footprint, the report within a budget, and the curve of
time against budget that threadblocks.png draws."""

from __future__ import annotations

import pytest

from synth.baselines import BaselineNotApplicable, registry
from synth.core.library import resolve_topology
from synth.measure.calibration import load_calibration
from synth.report import runner
from synth.report.budget import Footprints, fewest_blocks, footprint
from synth.report.candidates import baselines, nccl_candidates
from synth.report.evaluate import evaluate


def test_a_ring_takes_one_block_and_a_mesh_schedule_as_many_as_its_peers():
    ring = registry()["ring"].make(resolve_topology("uring:4"), "allgather")
    doubling = registry()["recursive_doubling"].make(resolve_topology("dgx1"), "allgather")
    assert fewest_blocks(ring) == 1 and footprint(ring, "baseline", 1) == 1
    assert fewest_blocks(doubling) == 3 and footprint(doubling, "baseline", 2) is None
    assert footprint(doubling, "baseline", 3) == 3 < footprint(doubling, "baseline")  # pairs connections to fit


def test_a_budget_leaves_out_what_cannot_fit_and_never_makes_a_schedule_faster():
    dgx1 = resolve_topology("dgx1")
    terms = load_calibration("default").terms()
    candidates = nccl_candidates(dgx1, "allreduce", [1 << 10, 1 << 20, 1 << 30]) + baselines(dgx1, "allreduce")
    sizes = [1 << 10, 1 << 20, 1 << 30]
    footprints = Footprints()
    free = {e.candidate.label: e for e in evaluate(dgx1, candidates, sizes, terms, "allreduce", None, footprints)}
    for budget in (1, 2, 4):
        kept = evaluate(dgx1, candidates, sizes, terms, "allreduce", budget, footprints)
        assert {e.candidate.label for e in kept} == {e.candidate.label for e in free.values()
                                                     if footprints.of(e.candidate.schedule, e.candidate.kind,
                                                                      budget) is not None}
        for e in kept:
            assert all(row["threadblocks"] <= budget for row in e.rows), e.candidate.label
            assert all(a["step_time_us"] >= b["step_time_us"] - 1e-9
                       for a, b in zip(e.rows, free[e.candidate.label].rows))
    assert {e.candidate.label for e in evaluate(dgx1, candidates, sizes, terms, "allreduce", 1, footprints)} >= \
        {"nccl_ring"}


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory):
    out = tmp_path_factory.mktemp("budget") / "full4"
    return out, runner.report("full:4", "allgather", out, sizes="1K..1G", time_limit=30, max_threadblocks=2)


def test_a_report_within_a_budget_says_so_and_draws_the_curve(budgeted):
    out, doc = budgeted
    assert doc["max_threadblocks"] == 2 and (out / "threadblocks.png").stat().st_size > 0
    for schedule in doc["schedules"]:
        assert schedule["threadblocks_per_instance"] <= 2
        assert all(row["threadblocks"] <= 2 for row in schedule["rows"])
    assert "**2 thread blocks per rank**" in (out / "report.md").read_text()


def test_the_curve_never_gets_slower_with_more_blocks(budgeted):
    _, doc = budgeted
    for size in {row["size"] for row in doc["budget_curve"]}:
        rows = [r for r in doc["budget_curve"] if r["size"] == size]
        order = sorted(rows, key=lambda r: r["budget"] or 1 << 30)
        ours = [r["synthesized_us"] for r in order if r["synthesized_us"] is not None]
        theirs = [r["nccl_us"] for r in order]
        assert all(a >= b - 1e-9 for a, b in zip(ours, ours[1:]))
        assert all(a >= b - 1e-9 for a, b in zip(theirs, theirs[1:]))


def test_fewest_blocks_counts_switch_roots_and_no_lowering_takes_fewer():
    from synth.lower.lowering import lower

    h100 = resolve_topology("h100")
    nvls = registry()["nccl_nvls"].make(h100, "allreduce")
    assert fewest_blocks(nvls) == 8  # a block per root: every rank roots a reduction and a multicast
    for name in ("nccl_nvls", "ring", "recursive_doubling", "direct"):
        for collective in ("allreduce", "allgather", "alltoall"):
            entry = registry()[name]
            if collective not in entry.collectives:
                continue
            try:
                schedule = entry.make(h100, collective)
            except BaselineNotApplicable:
                continue
            assert fewest_blocks(schedule) <= lower(schedule).threadblocks_per_rank, (name, collective)
    footprints = Footprints()
    assert footprints.of(nvls, "greedy", 7) is None and footprints.of(nvls, "greedy", 8) == 8
