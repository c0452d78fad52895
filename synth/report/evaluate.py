"""Every candidate over a size grid in both cost models, each at its best protocol per size (the
numbers ``synth cost --protocol best`` prints), the bound at each size, and the fastest schedule
per size range with its speedup over what NCCL runs (the ``nccl`` baseline: the fastest of the
NCCL candidates at that size) and over the best baseline of any kind.

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
    """The fastest schedule (step model, at ``protocol``) from ``min_bytes`` to ``max_bytes``
    (None: no limit)."""

    min_bytes: int
    max_bytes: int | None
    label: str
    file_name: str
    synthesized: bool
    best_baseline: str | None
    speedup: float | None  # best baseline's time / winner's time, least over the range's grid sizes
    speedup_max: float | None = None  # and most
    protocol: str = "simple"
    nccl: str | None = None  # the NCCL candidates that are fastest somewhere in the range
    nccl_speedup: float | None = None  # nccl's time / winner's time, least over the range
    nccl_speedup_max: float | None = None  # and most


@dataclass(frozen=True)
class Shortfall:
    """Grid sizes where the fastest synthesized schedule is slower than NCCL (ratio < 1)."""

    size: int
    synthesized: str
    synthesized_us: float
    nccl: str
    nccl_us: float

    @property
    def ratio(self) -> float:
        return self.nccl_us / self.synthesized_us


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
        out.append(Evaluation(c, tuple(cost_rows(c.schedule, sizes, bounds, "best")),
                              tuple(cost_rows(c.schedule, TABLE_SIZES, bounds, "best"))))
    return out


def bound_rows(topology: Topology, collective: str, sizes: list[int]) -> list[dict[str, float]]:
    coll = make_collective(collective, topology.ranks)
    bounds = lower_bounds(topology, coll)
    rows = []
    for size in sizes:
        t = bounds.time_us(size)
        rows.append({"size": size, "time_us": t, "busbw_gbps": busbw_gbps(size, t, coll)})
    return rows


def _fastest(evaluations: list[Evaluation], index: int) -> Evaluation | None:
    return min(evaluations, key=lambda e: (e.time_at(index), e.candidate.label)) if evaluations else None


def _span(values: list[float]) -> tuple[float | None, float | None]:
    return (min(values), max(values)) if values else (None, None)


def winners(evaluations: list[Evaluation], sizes: list[int]) -> list[Winner]:
    """Consecutive grid sizes with the same fastest (schedule, protocol) form one range; a range
    ends just below the next range's first size (the last range has no upper limit)."""
    base = [e for e in evaluations if not e.candidate.synthesized]
    nccl = [e for e in evaluations if e.candidate.nccl]
    picks = []
    for i, size in enumerate(sizes):
        best, best_base, best_nccl = _fastest(evaluations, i), _fastest(base, i), _fastest(nccl, i)
        picks.append((size, best, best.rows[i]["protocol"], best_base, best_nccl))
    out: list[Winner] = []
    start = 0
    for i in range(1, len(picks) + 1):
        if i < len(picks) and picks[i][1] is picks[start][1] and picks[i][2] == picks[start][2]:
            continue
        size, best, protocol, _, _ = picks[start]
        span = [(j, p) for j, p in enumerate(picks[start:i], start)]
        upper = picks[i][0] - 1 if i < len(picks) else None
        low, high = _span([p[3].time_at(j) / best.time_at(j) for j, p in span if p[3] is not None])
        nlow, nhigh = _span([p[4].time_at(j) / best.time_at(j) for j, p in span if p[4] is not None])
        bases = sorted({p[3].candidate.label for _, p in span if p[3] is not None})
        nccls = sorted({p[4].candidate.label for _, p in span if p[4] is not None})
        out.append(Winner(0 if start == 0 else size, upper, best.candidate.label, best.candidate.file_name,
                          best.candidate.synthesized, ", ".join(bases) or None, low, high, protocol,
                          ", ".join(nccls) or None, nlow, nhigh))
        start = i
    return out


def shortfalls(evaluations: list[Evaluation], sizes: list[int]) -> list[Shortfall]:
    """Every grid size where the fastest synthesized schedule is slower than NCCL's fastest."""
    ours = [e for e in evaluations if e.candidate.synthesized]
    nccl = [e for e in evaluations if e.candidate.nccl]
    out = []
    for i, size in enumerate(sizes):
        mine, theirs = _fastest(ours, i), _fastest(nccl, i)
        if mine is not None and theirs is not None and mine.time_at(i) > theirs.time_at(i) * (1 + 1e-9):
            out.append(Shortfall(size, mine.candidate.label, mine.time_at(i), theirs.candidate.label, theirs.time_at(i)))
    return out
