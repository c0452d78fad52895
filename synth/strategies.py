"""Search strategies over k-synchronous instances: solve one, least steps, the Pareto frontier.

Flow: bounds -> reductions (combining collectives run as their duals on the reversed topology;
allreduce as reduce_scatter + allgather) -> SMT backend -> verify. Only INFEASIBLE prunes; a
TIMEOUT is reported and marks a frontier incomplete, never "infeasible".
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

from synth.backends.smt import SmtInstance, SmtOptions
from synth.backends.smt_allreduce import DirectAllreduceInstance
from synth.bounds import lower_bounds
from synth.bounds_steps import distribution_load, least_rounds
from synth.collective import Collective
from synth.collectives import make_collective
from synth.errors import InputError
from synth.reductions import compose, dual_collective, dual_schedule
from synth.schedule import Schedule, SolveResult, Status
from synth.symmetry import collective_symmetries
from synth.topology import Topology
from synth.verify import verify

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class Attempt:
    """One solver call: the instance, how it ended, and how long it took."""

    steps: int
    rounds: int
    chunks: int
    status: Status
    seconds: float


@dataclass(frozen=True)
class FrontierPoint:
    steps: int
    rounds: int
    chunks: int
    schedule: Schedule
    solve_seconds: float

    @property
    def ratio(self) -> Fraction:
        return Fraction(self.rounds, self.chunks)


@dataclass(frozen=True)
class Frontier:
    """Non-dominated (steps, rounds/chunk) points; ``complete`` only if nothing timed out."""

    topology: Topology
    collective: str
    points: tuple[FrontierPoint, ...]
    complete: bool
    attempts: tuple[Attempt, ...] = ()
    note: str = ""
    bounds: dict = field(default_factory=dict)


class SmtSession:
    """Builds and caches SMT instances for one (topology, collective kind): solver reuse."""

    def __init__(self, topology: Topology, name: str, root: int | None, options: SmtOptions = SmtOptions(),
                 direct: bool = False):
        """``direct``: allreduce with the direct encoding (overlapping reduce and copy trees)."""
        base = make_collective(name, topology.ranks, root=root, chunks=1)
        base.check_on(topology)
        if not topology.rounds_apply:
            raise InputError(
                f"{topology.name}: link/group capacities are not whole multiples of the slowest link, "
                "so k-synchronous rounds do not apply (use the MILP backend)"
            )
        self.name, self.root, self.options = name, root, options
        self.original = topology
        self.direct = direct
        if name == "allreduce" and not direct:
            raise InputError("allreduce is solved as reduce_scatter + allgather (solve_allreduce) or directly")
        # other combining collectives run as their non-combining dual on the reversed topology
        self.combining = base.combining and not direct
        self.topology = topology.reversed() if self.combining else topology
        self._instances: dict[tuple[int, int], SmtInstance] = {}
        self._symmetric: dict[tuple[int, int], SmtInstance | None] = {}

    def collective(self, chunks: int) -> Collective:
        coll = make_collective(self.name, self.original.ranks, root=self.root, chunks=chunks)
        return dual_collective(coll) if self.combining else coll

    def rounds_floor(self, steps: int, chunks: int) -> float:
        """Fewest rounds any ``steps``-step schedule needs (time-expanded LP; inf: too few steps)."""
        return least_rounds(self.topology, self.collective(chunks), steps)

    def _instance(self, steps: int, chunks: int, max_rounds: int) -> SmtInstance:
        key = (steps, chunks)
        inst = self._instances.get(key)
        if inst is None or inst.max_rounds < max_rounds:
            kind = DirectAllreduceInstance if self.direct else SmtInstance
            inst = kind(self.topology, self.collective(chunks), steps, max_rounds, self.options)
            self._instances[key] = inst
        return inst

    def solve(self, steps: int, rounds: int, chunks: int, time_limit: float | None,
              by_splits: bool = True) -> SolveResult:
        """Is (steps, rounds, chunks) feasible? A SOLVED result carries a verified schedule.

        First the search restricted to topology symmetries (a third of the time: a fast SAT,
        but its UNSAT proves nothing), then the exact search. Both go split by split when the
        ways to spread the rounds over the steps are few (each split the LP does not rule out).
        """
        started = time.perf_counter()
        every = _splits(rounds, steps) if by_splits else None
        if every is not None:
            every.sort(key=lambda split: (max(split) - min(split), split))  # balanced first
        result = None
        symmetric = self._symmetric_instance(steps, chunks, rounds)
        if symmetric is not None:
            share = None if time_limit is None else time_limit / 3
            result = _run(symmetric, rounds, every, share)
        if result is None or result.status != Status.SOLVED:
            # the exact search: only splits the LP allows (the others are proven impossible)
            splits = self._feasible_splits(steps, rounds, chunks) if by_splits else None
            if splits == []:
                return SolveResult(Status.INFEASIBLE, None, time.perf_counter() - started,
                                   "every split of the rounds over the steps is ruled out by the LP bound")
            left = None if time_limit is None else max(0.05, time_limit - (time.perf_counter() - started))
            result = _run(self._instance(steps, chunks, rounds), rounds, splits, left)
        seconds = time.perf_counter() - started
        if result.status != Status.SOLVED:
            return SolveResult(result.status, None, seconds, result.message)
        schedule = result.schedule
        if self.combining:
            dual = dual_schedule(schedule)
            schedule = Schedule(self.original, dual.collective, dual.steps, dual.meta)
        schedule = schedule.with_meta(synthesizer="smt", solve_seconds=round(seconds, 4),
                                      steps=steps, rounds=schedule.total_rounds, chunks=chunks)
        _check(schedule)
        return SolveResult(Status.SOLVED, schedule, seconds)

    def _feasible_splits(self, steps: int, rounds: int, chunks: int) -> list[tuple[int, ...]] | None:
        """Splits of the rounds over the steps that the LP allows, most slack first (None: too many)."""
        splits = _splits(rounds, steps)
        if splits is None:
            return None
        coll = self.collective(chunks)
        loads = [(distribution_load(self.topology, coll, split), split) for split in splits]
        ordered = sorted(loads, key=lambda ls: (ls[0] if ls[0] is not None else 1.0, ls[1]))
        return [split for load, split in ordered if load is None or load <= 1 + 1e-7]

    def _symmetric_instance(self, steps: int, chunks: int, rounds: int) -> SmtInstance | None:
        if self.direct:
            return None
        key = (steps, chunks)
        inst = self._symmetric.get(key)
        if key not in self._symmetric or (inst is not None and inst.max_rounds < rounds):
            syms = tuple(collective_symmetries(self.topology, self.collective(chunks), limit=64))
            inst = (SmtInstance(self.topology, self.collective(chunks), steps, rounds, self.options, syms)
                    if len(syms) > 1 else None)
            self._symmetric[key] = inst
        return inst


def _run(inst: SmtInstance, rounds: int, splits, time_limit: float | None) -> SolveResult:
    """Exact for ``inst``: split by split with growing time budgets (an easy split first),
    or the whole rounds budget at once when there are too many splits."""
    if splits is None:
        return inst.solve(rounds, time_limit)
    started = time.perf_counter()
    pending, budget = list(splits), 0.25
    while pending:
        still = []
        for split in pending:
            left = None if time_limit is None else time_limit - (time.perf_counter() - started)
            if left is not None and left <= 0.01:
                return SolveResult(Status.TIMEOUT, None, time.perf_counter() - started, "time limit")
            result = inst.solve_split(split, budget if left is None else min(budget, left))
            if result.status in (Status.SOLVED, Status.ERROR):
                return result
            if result.status == Status.TIMEOUT:
                still.append(split)
        pending = still
        budget *= 4
    return SolveResult(Status.INFEASIBLE, None, time.perf_counter() - started)


MAX_SPLITS = 200


def _splits(rounds: int, steps: int) -> list[tuple[int, ...]] | None:
    """Every way to give each step >= 1 round, summing to ``rounds`` (None when too many)."""
    if math.comb(rounds - 1, steps - 1) > MAX_SPLITS:
        return None
    out: list[tuple[int, ...]] = []

    def extend(prefix: tuple[int, ...], left: int, slots: int) -> None:
        if slots == 1:
            out.append(prefix + (left,))
            return
        for first in range(1, left - slots + 2):
            extend(prefix + (first,), left - first, slots - 1)

    extend((), rounds, steps)
    return out


def _check(schedule: Schedule) -> None:
    violations = verify(schedule)
    if violations:
        raise RuntimeError(f"solver returned an invalid schedule (a bug in synth): {violations[0]}")


def pareto(
    topology: Topology,
    name: str,
    root: int | None = None,
    max_chunks: int = 8,
    time_limit: float | None = 60.0,
    progress: Progress = _quiet,
    options: SmtOptions = SmtOptions(),
    direct_allreduce: bool = False,
) -> Frontier:
    """Walk steps upward from the steps bound; for each, the least rounds/chunk below the best so far.

    Stops when a point meets both bounds, or when no (R, C) with R >= S, C <= max_chunks can
    beat the best ratio found. Ctrl-C returns what was found so far (complete=False).
    """
    if name == "allreduce":
        return pareto_allreduce(topology, max_chunks, time_limit, progress, direct=direct_allreduce)
    session = SmtSession(topology, name, root, options)
    bounds = lower_bounds(topology, make_collective(name, topology.ranks, root=root, chunks=1))
    return _search(session, max(1, bounds.steps), bounds.rounds_per_chunk, max_chunks, time_limit, progress)


def _search(
    session: SmtSession,
    steps_lb: int,
    ratio_lb: Fraction | None,
    max_chunks: int,
    time_limit: float | None,
    progress: Progress,
    known: tuple[FrontierPoint, ...] = (),
    max_steps: int | None = None,
) -> Frontier:
    """The frontier walk. ``known`` points (found another way) only raise the bar: a step count
    is searched for ratios below every known point with no more steps. ``max_steps`` caps S."""
    topology, name = session.original, session.name
    points: list[FrontierPoint] = []
    attempts: list[Attempt] = []
    best: Fraction | None = None
    complete = True
    note = ""

    def attempt(S: int, R: int, C: int, by_splits: bool = True) -> SolveResult:
        result = session.solve(S, R, C, time_limit, by_splits)
        attempts.append(Attempt(S, R, C, result.status, result.seconds))
        label = f"{name} (direct)" if session.direct else name
        progress(f"{topology.name} {label} (S={S}, R={R}, C={C}): {result.status.value} {result.seconds:.2f}s")
        return result

    def bar(S: int) -> Fraction | None:
        ratios = [p.ratio for p in known if p.steps <= S] + ([best] if best is not None else [])
        return min(ratios) if ratios else None

    S = steps_lb
    incumbent: FrontierPoint | None = None
    try:
        while (bar(S) is None or S < bar(S) * max_chunks) and (max_steps is None or S <= max_steps):
            incumbent = None
            ceiling = bar(S)
            if ceiling is None:
                # any schedule with S steps at all? (ample rounds); its rounds cap the search
                R = _rounds_cap(session, S, 1)
                result = attempt(S, R, 1, by_splits=False)  # a probe: any rounds will do
                if result.status == Status.SOLVED:
                    incumbent = FrontierPoint(S, result.schedule.total_rounds, 1, result.schedule, result.seconds)
                    ceiling = incumbent.ratio
                elif result.status != Status.INFEASIBLE:
                    complete = False
            if ceiling is not None:
                infeasible_up_to: dict[int, int] = {}
                for R, C in _candidates(S, ratio_lb, ceiling, max_chunks):
                    if R <= infeasible_up_to.get(C, 0):
                        continue  # fewer rounds than a proven-infeasible budget
                    if R < session.rounds_floor(S, C):
                        continue  # the time-expanded LP rules it out: no solver call needed
                    result = attempt(S, R, C)
                    if result.status == Status.SOLVED:
                        found = FrontierPoint(S, result.schedule.total_rounds, C, result.schedule, result.seconds)
                        if incumbent is None or found.ratio < incumbent.ratio:
                            incumbent = found
                        break  # candidates come in increasing rounds/chunk: this is the least
                    if result.status == Status.INFEASIBLE:
                        infeasible_up_to[C] = max(infeasible_up_to.get(C, 0), R)
                    else:
                        complete = False
            if incumbent is not None and (bar(S) is None or incumbent.ratio < bar(S)):
                points.append(incumbent)
                best = incumbent.ratio
                if ratio_lb is not None and best <= ratio_lb:
                    break  # meets the rounds bound: more steps cannot help
            S += 1
    except KeyboardInterrupt:
        complete = False
        note = "interrupted"
        if incumbent is not None and (bar(S) is None or incumbent.ratio < bar(S)):
            points.append(incumbent)  # the best found for this step count so far (maybe not least)
    if not note and ratio_lb is not None and (best is None or best > ratio_lb) and not known:
        note = (f"the rounds bound {ratio_lb} is not reached with at most {max_chunks} chunks; "
                f"best rounds/chunk found: {best}")
    frontier = _non_dominated(points)
    return Frontier(topology, name, tuple(frontier), complete, tuple(attempts), note,
                    {"steps": steps_lb, "rounds_per_chunk": str(ratio_lb) if ratio_lb is not None else None})


def _candidates(S: int, ratio_lb, ceiling: Fraction, max_chunks: int) -> list[tuple[int, int]]:
    """(R, C) with R >= S, R/C in [ratio bound, ceiling), by increasing R/C then C."""
    out = []
    for C in range(1, max_chunks + 1):
        low = max(S, math.ceil((ratio_lb or 0) * C))
        R = low
        while Fraction(R, C) < ceiling:
            out.append((R, C))
            R += 1
    return sorted(out, key=lambda rc: (Fraction(rc[0], rc[1]), rc[1]))


def _rounds_cap(session: SmtSession, steps: int, chunks: int) -> int:
    """Rounds that certainly suffice for ``steps`` (every chunk on one link in one step)."""
    coll = session.collective(chunks)
    return steps * max(1, coll.chunks)


def _non_dominated(points: list[FrontierPoint]) -> list[FrontierPoint]:
    out = []
    for p in sorted(points, key=lambda p: (p.steps, p.ratio, p.chunks)):
        if not any(q.steps <= p.steps and q.ratio <= p.ratio and q is not p and (q.steps, q.ratio) != (p.steps, p.ratio) for q in points):
            if all((q.steps, q.ratio) != (p.steps, p.ratio) for q in out):
                out.append(p)
    return out


def least_steps(
    topology: Topology,
    name: str,
    root: int | None = None,
    chunks: int = 1,
    extra_rounds: int = 0,
    max_steps: int | None = None,
    time_limit: float | None = 60.0,
    progress: Progress = _quiet,
) -> tuple[SolveResult, tuple[Attempt, ...]]:
    """Fewest steps S with rounds S + extra_rounds; starts where both bounds allow, stops at a cap."""
    if name == "allreduce":
        return _least_steps_allreduce(topology, chunks, extra_rounds, max_steps, time_limit, progress)
    session = SmtSession(topology, name, root)
    bounds = lower_bounds(topology, make_collective(name, topology.ranks, root=root, chunks=1))
    start = max(1, bounds.steps)
    if bounds.rounds_per_chunk is not None:
        start = max(start, math.ceil(bounds.rounds_per_chunk * chunks) - extra_rounds)
    cap = max_steps if max_steps is not None else start + 2 * topology.ranks * chunks
    attempts: list[Attempt] = []
    unknown = False
    for S in range(start, cap + 1):
        if S + extra_rounds < session.rounds_floor(S, chunks):
            progress(f"{topology.name} {name} (S={S}, R={S + extra_rounds}, C={chunks}): "
                     "infeasible by the time-expanded LP bound")
            attempts.append(Attempt(S, S + extra_rounds, chunks, Status.INFEASIBLE, 0.0))
            continue
        result = session.solve(S, S + extra_rounds, chunks, time_limit)
        attempts.append(Attempt(S, S + extra_rounds, chunks, result.status, result.seconds))
        progress(f"{topology.name} {name} (S={S}, R={S + extra_rounds}, C={chunks}): {result.status.value} {result.seconds:.2f}s")
        if result.status == Status.SOLVED:
            return result, tuple(attempts)
        if result.status != Status.INFEASIBLE:
            unknown = True
    if start > cap:
        return SolveResult(Status.INFEASIBLE, None, 0.0,
                           f"no schedule with at most {cap} steps: the bounds need at least {start}"), ()
    status = Status.TIMEOUT if unknown else Status.INFEASIBLE
    message = (
        f"no schedule with {start}..{cap} steps ({extra_rounds} extra rounds, {chunks} chunks)"
        + (": some attempts timed out, so more steps may or may not be needed" if unknown else "")
    )
    return SolveResult(status, None, sum(a.seconds for a in attempts), message), tuple(attempts)


def solve_instance(
    topology: Topology,
    name: str,
    root: int | None,
    steps: int,
    rounds: int,
    chunks: int,
    time_limit: float | None = 60.0,
    progress: Progress = _quiet,
) -> SolveResult:
    """One instance; allreduce as the best-balanced reduce_scatter + allgather split that fits."""
    if name == "allreduce":
        return _solve_allreduce(topology, steps, rounds, chunks, time_limit, progress)
    result = SmtSession(topology, name, root).solve(steps, rounds, chunks, time_limit)
    progress(f"{topology.name} {name} (S={steps}, R={rounds}, C={chunks}): {result.status.value} {result.seconds:.2f}s")
    return result


def _solve_allreduce(topology, steps, rounds, chunks, time_limit, progress) -> SolveResult:
    rs, ag = SmtSession(topology, "reduce_scatter", None), SmtSession(topology, "allgather", None)
    lb_rs = lower_bounds(topology, make_collective("reduce_scatter", topology.ranks)).steps
    lb_ag = lower_bounds(topology, make_collective("allgather", topology.ranks)).steps
    splits = [
        (s1, r1)
        for s1 in range(max(1, lb_rs), steps - max(1, lb_ag) + 1)
        for r1 in range(s1, rounds - (steps - s1) + 1)
    ]
    splits.sort(key=lambda sr: (abs(2 * sr[0] - steps), abs(2 * sr[1] - rounds)))
    started = time.perf_counter()
    unknown = False
    for s1, r1 in splits:
        s2, r2 = steps - s1, rounds - r1
        first = rs.solve(s1, r1, chunks, time_limit)
        progress(f"{topology.name} reduce_scatter (S={s1}, R={r1}, C={chunks}): {first.status.value} {first.seconds:.2f}s")
        if first.status != Status.SOLVED:
            unknown |= first.status != Status.INFEASIBLE
            continue
        second = ag.solve(s2, r2, chunks, time_limit)
        progress(f"{topology.name} allgather (S={s2}, R={r2}, C={chunks}): {second.status.value} {second.seconds:.2f}s")
        if second.status != Status.SOLVED:
            unknown |= second.status != Status.INFEASIBLE
            continue
        return SolveResult(Status.SOLVED, _compose_allreduce(topology, first.schedule, second.schedule, chunks),
                           time.perf_counter() - started)
    status = Status.TIMEOUT if unknown else Status.INFEASIBLE
    return SolveResult(status, None, time.perf_counter() - started,
                       "as a reduce_scatter + allgather composition (a direct allreduce might fit)")


def _compose_allreduce(topology: Topology, rs: Schedule, ag: Schedule, chunks: int) -> Schedule:
    coll = make_collective("allreduce", topology.ranks, chunks=chunks)
    schedule = compose(rs, ag, coll).with_meta(
        synthesizer="smt", composition="reduce_scatter+allgather",
        steps=len(rs.steps) + len(ag.steps), rounds=(rs.total_rounds or 0) + (ag.total_rounds or 0), chunks=chunks,
        solve_seconds=round(rs.meta.get("solve_seconds", 0) + ag.meta.get("solve_seconds", 0), 4),
    )
    _check(schedule)
    return schedule


def pareto_allreduce(
    topology: Topology,
    max_chunks: int = 8,
    time_limit: float | None = 60.0,
    progress: Progress = _quiet,
    direct: bool = False,
    direct_chunks: int = 3,
) -> Frontier:
    """Allreduce frontier: compositions of the reduce_scatter and allgather frontiers (equal C);
    with ``direct``, the direct encoding is also searched (C <= direct_chunks, steps up to the
    composition's largest) for points the compositions do not reach."""
    rs = pareto(topology, "reduce_scatter", None, max_chunks, time_limit, progress)
    ag = pareto(topology, "allgather", None, max_chunks, time_limit, progress)
    composed = []
    for a in rs.points:
        for b in ag.points:
            if a.chunks == b.chunks:
                schedule = _compose_allreduce(topology, a.schedule, b.schedule, a.chunks)
                composed.append(FrontierPoint(a.steps + b.steps, a.rounds + b.rounds, a.chunks, schedule,
                                              a.solve_seconds + b.solve_seconds))
    composed = _non_dominated(composed)
    bounds = lower_bounds(topology, make_collective("allreduce", topology.ranks))
    proven = bounds.proven or bounds
    note = "reduce_scatter + allgather compositions at equal chunks"
    found = Frontier(topology, "allreduce", (), True)
    if direct:
        found = _search(SmtSession(topology, "allreduce", None, direct=True), max(1, proven.steps),
                        proven.rounds_per_chunk, min(max_chunks, direct_chunks), time_limit, progress,
                        known=tuple(composed), max_steps=max((p.steps for p in composed), default=None))
        note += f", and the direct encoding (chunks <= {min(max_chunks, direct_chunks)})"
    points = _non_dominated(composed + list(found.points))
    wins = [p for p in found.points if p in points]
    if wins:
        note += "; direct beats composition at " + ", ".join(f"(S={p.steps}, R={p.rounds}, C={p.chunks})" for p in wins)
    if "interrupted" in (rs.note, ag.note, found.note):
        note = "interrupted"
    return Frontier(topology, "allreduce", tuple(points), rs.complete and ag.complete and found.complete,
                    rs.attempts + ag.attempts + found.attempts, note,
                    {"steps": proven.steps, "rounds_per_chunk": str(proven.rounds_per_chunk)
                     if proven.rounds_per_chunk is not None else None,
                     "composition_rounds_per_chunk": _sum_ratio(rs.bounds, ag.bounds)})


def _sum_ratio(a: dict, b: dict) -> str | None:
    if a.get("rounds_per_chunk") is None or b.get("rounds_per_chunk") is None:
        return None
    return str(Fraction(a["rounds_per_chunk"]) + Fraction(b["rounds_per_chunk"]))


def _least_steps_allreduce(topology, chunks, extra_rounds, max_steps, time_limit, progress):
    """Least-steps reduce_scatter then least-steps allgather (each with half the extra rounds)."""
    first_extra = extra_rounds // 2
    rs, rs_attempts = least_steps(topology, "reduce_scatter", None, chunks, first_extra, max_steps, time_limit, progress)
    if rs.schedule is None:
        return rs, rs_attempts
    ag, ag_attempts = least_steps(topology, "allgather", None, chunks, extra_rounds - first_extra, max_steps,
                                  time_limit, progress)
    if ag.schedule is None:
        return ag, rs_attempts + ag_attempts
    schedule = _compose_allreduce(topology, rs.schedule, ag.schedule, chunks)
    return SolveResult(Status.SOLVED, schedule, rs.seconds + ag.seconds), rs_attempts + ag_attempts
