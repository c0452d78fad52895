"""Checks on a report.json that several end-to-end tests share."""

from __future__ import annotations

from pathlib import Path

from synth.verify import load_schedule, verify


def assert_verified_synthesized(report: dict, folder: Path) -> None:
    """The report holds at least one synthesized schedule, and each verifies."""
    synthesized = [s for s in report["schedules"] if s["kind"] not in ("nccl", "baseline")]
    assert synthesized, "no synthesized schedule in the report"
    for entry in synthesized:
        assert verify(load_schedule(folder / entry["file"])) == []


def assert_at_least_ncclS_ring(report: dict) -> None:
    """At every size the fastest synthesized schedule takes at most NCCL's ring's time."""
    rows = {s["label"]: s["rows"] for s in report["schedules"]}
    ours = [s["rows"] for s in report["schedules"] if s["kind"] not in ("nccl", "baseline")]
    for k, ring in enumerate(rows["nccl_ring"]):
        best = min(r[k]["step_time_us"] for r in ours)
        assert best <= ring["step_time_us"] * (1 + 1e-9), \
            f"at {ring['size']} bytes: {best} us against nccl_ring {ring['step_time_us']} us"
