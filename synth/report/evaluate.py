"""Every candidate over a size grid in both cost models, each at its best protocol per size (the
numbers ``synth cost --protocol best [--calibration CAL]`` prints), the bound at each size, and
the fastest schedule per size range with its speedup over what NCCL runs and over the best
baseline of any kind.

Under runtime terms (a calibration), NCCL's time at a size is the lower of its schedules under
the same terms as ours (the ``nccl`` candidates) and the runtime model of what NCCL takes
(``synth.measure.runtime``, checked against measured runs): a speedup that either model of NCCL
denies is not claimed.

>>> size_grid("1K..8K")
[1024, 2048, 4096, 8192]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from synth.bounds.lower_bounds import lower_bounds
from synth.core.collectives import make_collective
from synth.core.errors import InputError
from synth.core.topology import Topology
from synth.cost import RuntimeTerms, busbw_gbps, cost_rows, parse_size, parse_sizes
from synth.report.candidates import Candidate

TABLE_SIZES = (1 << 10, 1 << 20, 1 << 30)


@dataclass(frozen=True)
class Evaluation:
    candidate: Candidate
    rows: tuple[dict[str, Any], ...]  # cost_rows over the grid
    table: tuple[dict[str, Any], ...]  # cost_rows at TABLE_SIZES
    blocks: int | None = None  # thread blocks per rank per instance (synth.report.budget.footprint)

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


@dataclass(frozen=True)
class ModelPoint:
    """What NCCL takes at one size in the runtime model, and the option it takes it with;
    ``bound_us``: the lower bound of the same topology at that size, when the model's time is
    below it (a contradiction: the model is then no verdict's measure)."""

    size: int
    time_us: float
    algorithm: str
    protocol: str
    channels: int
    bound_us: float | None = None

    @property
    def label(self) -> str:
        return f"NCCL as modelled ({self.algorithm}/{self.protocol})"

    @property
    def contradicts(self) -> bool:
        """Whether the model's time is below the topology's lower bound."""
        return self.bound_us is not None


def against_bounds(model: list[ModelPoint] | None, bound: list[dict]) -> list[ModelPoint] | None:
    """``model`` with ``bound_us`` set where its time is below the bound row of the same size."""
    if model is None:
        return None
    return [replace(p, bound_us=row["time_us"]) if p.time_us < row["time_us"] * (1 - 1e-9) else p
            for p, row in zip(model, bound)]


SIMULATED_EVENTS = 100_000  # above this many (simulation_events) a schedule is simulated at TABLE_SIZES only


def simulation_events(schedule) -> int:
    """What the event simulation walks: every send, and every port of every switch entry (each
    src's out-port and each dst's in-port)."""
    ports = sum(len(entry.srcs) + len(entry.dsts) for step in schedule.steps for entry in step.switches)
    return schedule.send_count + ports


def bounds_of(topology: Topology, collective, terms: RuntimeTerms | None):
    """The lower bounds every row is measured against (under ``terms``: the runtime's)."""
    if terms is None:
        return lower_bounds(topology, collective)
    from synth.bounds.runtime import runtime_bounds

    return runtime_bounds(topology, collective, terms)


def collective_bounds(topology: Topology, collective: str, terms: RuntimeTerms | None):
    """The bounds of ``collective`` itself (one chunk per rank, as ``make_collective`` builds it):
    the one bound every row at a size is measured against, whatever its own chunking."""
    return bounds_of(topology, make_collective(collective, topology.ranks), terms)


def evaluate(topology: Topology, candidates: list[Candidate], sizes: list[int],
             terms: RuntimeTerms | None = None, collective: str | None = None,
             budget: int | None = None, footprints=None) -> list[Evaluation]:
    """Every candidate's cost rows. ``bound_time_us``/``bound_fraction`` are the collective's
    bound at the size (``collective_bounds``: the same for every row at a size);
    ``own_chunking_bound_time_us``/``own_chunking_bound_fraction`` are the bound of the
    schedule's own chunking (what ``synth cost`` prints), which can be higher.
    ``collective``: its name as given (default: the first candidate's collective's name).
    ``budget``: thread blocks per rank (synth.report.budget): a candidate that cannot fit is left
    out, the others run at most as many instances as fit; every row says its thread blocks."""
    from synth.report.budget import Footprints, capped

    footprints = footprints or Footprints()

    if not candidates:
        return []
    reference = collective_bounds(topology, collective or candidates[0].schedule.collective.name, terms)
    own: dict[Any, Any] = {}
    out = []
    for c in candidates:
        coll = c.schedule.collective
        key = (coll.name, coll.chunks, coll.root)
        if key not in own:
            own[key] = bounds_of(topology, coll, terms)  # as ``synth cost`` does
        blocks = footprints.of(c.schedule, c.kind, budget)
        if blocks is None and budget is not None:
            continue  # cannot run within the budget
        mine = capped(terms, blocks or 1, budget)
        simulated = set(TABLE_SIZES) if simulation_events(c.schedule) > SIMULATED_EVENTS else None
        grid = cost_rows(c.schedule, sizes, reference, "best", mine, simulated)
        rows = _with_blocks(_with_own_bound(grid, own[key]), blocks)
        table = _with_blocks(_with_own_bound(_table_rows(c.schedule, grid, reference, mine), own[key]), blocks)
        out.append(Evaluation(c, tuple(rows), tuple(table), blocks))
    return out


def _table_rows(schedule, grid: list[dict[str, Any]], reference, terms) -> list[dict[str, Any]]:
    """cost_rows at TABLE_SIZES, each simulated: the grid's row where it has one, else new."""
    done = {row["size"]: row for row in grid if row["sim_time_us"] is not None}
    missing = [size for size in TABLE_SIZES if size not in done]
    if missing:
        done.update((row["size"], row) for row in cost_rows(schedule, missing, reference, "best", terms))
    return [done[size] for size in TABLE_SIZES]


def _with_blocks(rows: list[dict[str, Any]], blocks: int | None) -> list[dict[str, Any]]:
    """``rows`` with the thread blocks per rank each runs with (blocks x instances)."""
    if blocks is None:
        return rows
    return [{**row, "threadblocks": blocks * row.get("channels", 1)} for row in rows]


def _with_own_bound(rows: list[dict[str, Any]], own) -> list[dict[str, Any]]:
    """``rows`` with the bound of the schedule's own chunking added beside the collective's."""
    out = []
    for row in rows:
        limit = own.time_us(row["size"])
        step = row["step_time_us"]
        out.append({**row, "own_chunking_bound_time_us": limit,
                    "own_chunking_bound_fraction": limit / step if step > 0 else None})
    return out


MEASURED_COLLECTIVES = ("allreduce", "allgather", "reduce_scatter")


def nccl_model_points(topology: Topology, collective: str, sizes: list[int], calibration,
                      budget: int | None = None) -> list[ModelPoint] | None:
    """What NCCL takes at every size in the runtime model under ``calibration`` (one process per
    GPU); None for a collective the shared runs do not check it on (``MEASURED_COLLECTIVES``:
    allreduce and allgather runs, and reduce-scatter, which runs allgather's ring backwards). Its
    point-to-point alltoall, for one, assumes every peer at the GPU's port rate, which a
    partial mesh such as DGX-1's does not give."""
    from synth.measure.runtime import Launch, describe, nccl_time
    from synth.report.budget import capped_calibration

    if collective not in MEASURED_COLLECTIVES:
        return None
    calibration = capped_calibration(calibration, budget)
    machine = describe(topology)
    launch = Launch("processes")
    points = []
    for size in sizes:
        c = nccl_time(machine, collective, size, calibration, launch, calibration.transport)
        points.append(ModelPoint(size, c.time_us, c.algorithm, c.protocol, c.channels))
    return points


def bound_rows(topology: Topology, collective: str, sizes: list[int],
               terms: RuntimeTerms | None = None) -> list[dict[str, float]]:
    coll = make_collective(collective, topology.ranks)
    bounds = collective_bounds(topology, collective, terms)
    rows = []
    for size in sizes:
        t = bounds.time_us(size)
        rows.append({"size": size, "time_us": t, "busbw_gbps": busbw_gbps(size, t, coll)})
    return rows


def _fastest(evaluations: list[Evaluation], index: int) -> Evaluation | None:
    return min(evaluations, key=lambda e: (e.time_at(index), e.candidate.label)) if evaluations else None


def _span(values: list[float]) -> tuple[float | None, float | None]:
    return (min(values), max(values)) if values else (None, None)


def _nccl_at(nccl: list[Evaluation], model: list[ModelPoint] | None, index: int) -> tuple[str, float] | None:
    """(label, time) of what NCCL takes at grid size ``index``: the fastest of its schedules, or
    the runtime model's figure where that is lower."""
    found = _fastest(nccl, index)
    options = [] if found is None else [(found.candidate.label, found.time_at(index))]
    if model is not None and not model[index].contradicts:
        options.append((model[index].label, model[index].time_us))
    return min(options, key=lambda o: o[1]) if options else None


def winners(evaluations: list[Evaluation], sizes: list[int], model: list[ModelPoint] | None = None) -> list[Winner]:
    """Consecutive grid sizes with the same fastest (schedule, protocol) form one range; a range
    ends just below the next range's first size (the last range has no upper limit)."""
    base = [e for e in evaluations if not e.candidate.synthesized]
    nccl = [e for e in evaluations if e.candidate.nccl]
    picks = []
    for i, size in enumerate(sizes):
        best, best_base, best_nccl = _fastest(evaluations, i), _fastest(base, i), _nccl_at(nccl, model, i)
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
        nlow, nhigh = _span([p[4][1] / best.time_at(j) for j, p in span if p[4] is not None])
        bases = sorted({p[3].candidate.label for _, p in span if p[3] is not None})
        nccls = sorted({p[4][0] for _, p in span if p[4] is not None})
        out.append(Winner(0 if start == 0 else size, upper, best.candidate.label, best.candidate.file_name,
                          best.candidate.synthesized, ", ".join(bases) or None, low, high, protocol,
                          ", ".join(nccls) or None, nlow, nhigh))
        start = i
    return out


def shortfalls(evaluations: list[Evaluation], sizes: list[int],
               model: list[ModelPoint] | None = None) -> list[Shortfall]:
    """Every grid size where the fastest synthesized schedule is slower than what NCCL takes."""
    ours = [e for e in evaluations if e.candidate.synthesized]
    nccl = [e for e in evaluations if e.candidate.nccl]
    out = []
    for i, size in enumerate(sizes):
        mine, theirs = _fastest(ours, i), _nccl_at(nccl, model, i)
        if mine is not None and theirs is not None and mine.time_at(i) > theirs[1] * (1 + 1e-9):
            out.append(Shortfall(size, mine.candidate.label, mine.time_at(i), theirs[0], theirs[1]))
    return out
