"""Every candidate over a size grid in both cost models (the same numbers ``synth cost`` prints),
the bound at each size, and the fastest schedule per size range.

>>> size_grid("1K..8K")
[1024, 2048, 4096, 8192]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synth.bounds.lower_bounds import lower_bounds
from synth.core.collectives import make_collective
from synth.cost import busbw_gbps, cost_rows, parse_size, parse_sizes
from synth.core.errors import InputError
from synth.report.candidates import Candidate
from synth.core.topology import Topology

TABLE_SIZES = (1 << 10, 1 << 20, 1 << 30)


@dataclass(frozen=True)
class Evaluation:
    candidate: Candidate
    rows: tuple[dict[str, Any], ...]  # cost_rows over the grid
    table: tuple[dict[str, Any], ...]  # cost_rows at TABLE_SIZES

    def time_at(self, index: int) -> float:
        return self.rows[index]["step_time_us"]


@dataclass(frozen=True)
class Winner:
    """The fastest schedule (step model) from ``min_bytes`` to ``max_bytes`` (None: no limit)."""

    min_bytes: int
    max_bytes: int | None
    label: str
    file_name: str
    synthesized: bool
    best_baseline: str | None
    speedup: float | None  # best baseline's time / winner's time, least over the range's grid sizes
    speedup_max: float | None = None  # and most


def size_grid(text: str) -> list[int]:
    """``A..B``: powers of two from A to B (log-spaced, as nccl-tests); else a comma list."""
    if ".." in text:
        low, _, high = text.partition("..")
        a, b = parse_size(low), parse_size(high)
        if a < 1 or b < a:
            raise InputError(f"size range {text!r}: need 1 <= A <= B")
        sizes, s = [], a
        while s <= b:
            sizes.append(s)
            s *= 2
        return sizes
    sizes = parse_sizes(text)
    if not sizes:
        raise InputError("no sizes given")
    return sorted(set(sizes))


def evaluate(topology: Topology, candidates: list[Candidate], sizes: list[int]) -> list[Evaluation]:
    out = []
    for c in candidates:
        bounds = lower_bounds(topology, c.schedule.collective)  # as ``synth cost`` does
        out.append(Evaluation(c, tuple(cost_rows(c.schedule, sizes, bounds)),
                              tuple(cost_rows(c.schedule, TABLE_SIZES, bounds))))
    return out


def bound_rows(topology: Topology, collective: str, sizes: list[int]) -> list[dict[str, float]]:
    coll = make_collective(collective, topology.ranks)
    bounds = lower_bounds(topology, coll)
    rows = []
    for size in sizes:
        t = bounds.time_us(size)
        rows.append({"size": size, "time_us": t, "busbw_gbps": busbw_gbps(size, t, coll)})
    return rows


def winners(evaluations: list[Evaluation], sizes: list[int]) -> list[Winner]:
    """Consecutive grid sizes with the same fastest schedule form one range; a range ends just
    below the next range's first size (the last range has no upper limit)."""
    picks = []
    for i, size in enumerate(sizes):
        best = min(evaluations, key=lambda e: (e.time_at(i), e.candidate.label))
        base = [e for e in evaluations if not e.candidate.synthesized]
        best_base = min(base, key=lambda e: (e.time_at(i), e.candidate.label)) if base else None
        speed = None if best_base is None else best_base.time_at(i) / best.time_at(i)
        picks.append((size, best, best_base, speed))
    out: list[Winner] = []
    start = 0
    for i in range(1, len(picks) + 1):
        if i < len(picks) and picks[i][1] is picks[start][1]:
            continue
        size, best, best_base, _ = picks[start]
        upper = picks[i][0] - 1 if i < len(picks) else None
        speeds = [p[3] for p in picks[start:i] if p[3] is not None]
        bases = sorted({p[2].candidate.label for p in picks[start:i] if p[2] is not None})
        out.append(Winner(0 if start == 0 else size, upper, best.candidate.label, best.candidate.file_name,
                          best.candidate.synthesized, ", ".join(bases) or None,
                          min(speeds) if speeds else None, max(speeds) if speeds else None))
        start = i
    return out
