"""Search strategies over k-synchronous instances: solve one, least steps, the Pareto frontier.

Flow: bounds -> reductions (``synth.core.reductions``: a combining collective as its dual on the
reversed topology, in the session; allreduce as reduce_scatter + allgather, its steps and rounds
shared out between the parts here) -> SMT backend -> verify. Only INFEASIBLE prunes; a
TIMEOUT is reported and marks a frontier incomplete, never "infeasible".
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable

from synth.bounds.lower_bounds import lower_bounds
from synth.core.collective import Collective
from synth.core.collectives import make_collective
from synth.core.errors import InputError
from synth.core.reductions import COMPOSITION, Part, Reduction, solve_reduced
from synth.core.schedule import Schedule, SolveResult, Status
from synth.core.topology import Topology
from synth.core.transforms import merge_steps
from synth.smt.encoding import SmtOptions
from synth.smt.session import SmtSession, check_schedule, open_session

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class Attempt:
    """One solver call: the instance, how it ended, and how long it took; a certified search's
    INFEASIBLE carries its ``certificate`` (``synth.smt.certificates.BudgetCertificate``)."""

    steps: int
    rounds: int
    chunks: int
    status: Status
    seconds: float
    certificate: Any = None


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


PIPELINED = ("broadcast", "reduce")  # one root's data split into many chunks: deep pipelines win
MAX_CHUNKS = 8
BLIND_PROBES = 8  # step counts in a row whose probe timed out, with nothing found yet, before the walk gives up
MAX_CHUNKS_PIPELINED = 16


def default_max_chunks(name: str) -> int:
    """The chunk cap of a frontier walk: 16 for broadcast and reduce, whose points keep
    improving with pipeline depth (dgx1 broadcast: (3,5,12) and (4,4,13) beat every point
    with at most 8 chunks), 8 for the rest."""
    return MAX_CHUNKS_PIPELINED if name in PIPELINED else MAX_CHUNKS


def pareto(
    topology: Topology,
    name: str,
    root: int | None = None,
    max_chunks: int | None = None,
    time_limit: float | None = 60.0,
    progress: Progress = _quiet,
    options: SmtOptions = SmtOptions(),
    direct_allreduce: bool = False,
    jobs: int = 1,
    budget: float | None = None,
) -> Frontier:
    """Walk steps upward from the steps bound; for each, the least rounds/chunk below the best so far.

    Stops when a point meets both bounds, or when no (R, C) with R >= S, C <= max_chunks can
    beat the best ratio found; the frontier's note says which. Ctrl-C returns what was found
    so far (complete=False). ``max_chunks`` None: ``default_max_chunks(name)``.
    ``jobs`` > 1: the independent sweeps (allreduce's reduce_scatter and allgather frontiers)
    run side by side, each in its own process (the same frontier: the search's budgets are
    work units, not seconds). ``budget``: seconds each walk may take in all (None: no limit); a
    walk that spends it stops incomplete and its note says so.
    """
    if max_chunks is None:
        max_chunks = default_max_chunks(name)
    if name == "allreduce":
        return pareto_allreduce(topology, max_chunks, time_limit, progress, direct=direct_allreduce, jobs=jobs,
                                budget=budget, options=options)
    session = open_session(topology, name, root, options)
    bounds = lower_bounds(topology, make_collective(name, topology.ranks, root=root, chunks=1))
    return _search(session, max(1, bounds.steps), bounds.rounds_per_chunk, max_chunks, time_limit, progress,
                   budget=budget)


def _search(
    session: SmtSession,
    steps_lb: int,
    ratio_lb: Fraction | None,
    max_chunks: int,
    time_limit: float | None,
    progress: Progress,
    known: tuple[FrontierPoint, ...] = (),
    max_steps: int | None = None,
    budget: float | None = None,
) -> Frontier:
    """The frontier walk (``_Walk``). ``known`` points (found another way) only raise the bar: a
    step count is searched for ratios below every known point with no more steps. ``max_steps``
    caps S."""
    config = _WalkConfig(session, steps_lb, ratio_lb, max_chunks, time_limit, progress, known, max_steps, budget)
    return _Walk(config).run()


@dataclass(frozen=True)
class _WalkConfig:
    """What a frontier walk is given: the session, the bounds it starts from and stops at, the
    chunk cap, the per-call time limit, where progress lines go, points known already, a steps cap."""

    session: SmtSession
    steps_lb: int
    ratio_lb: Fraction | None
    max_chunks: int
    time_limit: float | None
    progress: Progress
    known: tuple[FrontierPoint, ...] = ()
    max_steps: int | None = None
    budget: float | None = None  # seconds for the whole walk (None: no limit)


@dataclass
class _Walk:
    """The frontier walk: step counts S upward from the steps bound; at each, the least
    rounds/chunk below the bar (the best found so far, and every known point with no more steps).

    One method per rule: ``_open_at`` and ``_go_on`` (the stop test), ``_probe`` (a first ceiling),
    ``_sweep`` and ``_pruned`` (the candidates at S and the ones a bound rules out), ``_attempt``
    and ``_shorten`` (solve one budget, re-solve a point in a step fewer), ``_record`` (keep the
    step count's point), ``_finish`` (settle timeouts, write the note, build the frontier).
    Only INFEASIBLE prunes; a TIMEOUT leaves its budget unsettled.
    """

    config: _WalkConfig
    points: list[FrontierPoint] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    best: Fraction | None = None  # the least rounds/chunk recorded
    complete: bool = True
    note: str = ""
    S: int = 0  # the step count being searched (after the walk: the first one not searched)
    incumbent: FrontierPoint | None = None  # the best point found at S so far
    unsettled: list[tuple[int, int, int]] = field(default_factory=list)  # candidate budgets that timed out
    proofs: list[tuple[int, int, int]] = field(default_factory=list)  # budgets proven infeasible
    blind: int = 0  # step counts in a row, with nothing to beat, whose probe timed out
    deadline: float | None = None  # perf_counter() when the walk's budget is spent
    spent: bool = False  # the walk stopped because its budget was spent

    def run(self) -> Frontier:
        """Search S = steps_lb, steps_lb + 1, ... while ``_go_on``; stop early once a point meets
        the rounds bound. Ctrl-C ends the walk incomplete ("interrupted"), keeping the point
        found at S so far if it beats the bar (maybe not the least at S)."""
        self.S = self.config.steps_lb
        if self.config.budget is not None:
            self.deadline = time.perf_counter() + self.config.budget
        try:
            while self._go_on():
                self._step()
                if self._record() and self._meets_rounds_bound():
                    break  # meets the rounds bound: more steps cannot help
                self.S += 1
        except KeyboardInterrupt:
            self.complete = False
            self.note = "interrupted"
            if self._beats_bar(self.incumbent):
                self.points.append(self.incumbent)
        return self._finish()

    def _step(self) -> None:
        """Search step count S: with no bar, a probe gives the first ceiling; under a ceiling,
        the candidates are swept for the least rounds/chunk."""
        self.incumbent = None
        ceiling = self._bar(self.S)
        if ceiling is None:
            ceiling = self._probe(self.S)
        if ceiling is not None:
            self._sweep(self.S, ceiling)

    # the bar and the stop test

    def _bar(self, S: int) -> Fraction | None:
        """The ratio a point with S steps must beat: the least of the best found so far and of
        every known point with at most S steps (None: nothing to beat yet)."""
        ratios = [p.ratio for p in self.config.known if p.steps <= S] + ([self.best] if self.best is not None else [])
        return min(ratios) if ratios else None

    def _least(self, S: int, C: int) -> int:
        """Fewest rounds a budget with C chunks can have at S steps or more by the bounds
        that cost nothing (the rounds bound, R >= S)."""
        return max(S, math.ceil((self.config.ratio_lb or 0) * C))

    def _any_steps_floor(self, S: int, C: int) -> int:
        """The any-steps relaxation's floor (an LP, cached per chunk count), asked only of
        budgets the free bounds leave open."""
        session = self.config.session
        return session.rounds_floor_any_steps(C) if S >= session.ANY_STEPS_FROM else 0

    def _open_at(self, S: int) -> bool:
        """Can a budget with S or more steps still beat the bar? Yes with no bar; else some C up
        to max_chunks must have both its free floor and its any-steps floor below the bar."""
        ceiling = self._bar(S)
        return ceiling is None or any(
            Fraction(self._least(S, C), C) < ceiling
            and Fraction(max(self._least(S, C), self._any_steps_floor(S, C)), C) < ceiling
            for C in range(1, self.config.max_chunks + 1))

    def _go_on(self) -> bool:
        """The stop test: search S while it is open and within the steps cap."""
        max_steps = self.config.max_steps
        return (self._open_at(self.S) and (max_steps is None or self.S <= max_steps)
                and self.blind < BLIND_PROBES and not self._budget_spent())

    def _budget_spent(self) -> bool:
        """Past the walk's deadline (a clock: the one rule here that depends on it)."""
        self.spent = self.deadline is not None and time.perf_counter() >= self.deadline
        return self.spent

    # solving

    def _attempt(self, S: int, R: int, C: int, by_splits: bool = True) -> SolveResult:
        """One solver call on (S, R, C): recorded as an attempt and reported as a progress line."""
        config = self.config
        session = config.session
        result = session.solve(S, R, C, config.time_limit, by_splits)
        self.attempts.append(Attempt(S, R, C, result.status, result.seconds, result.details.get("certificate")))
        label = f"{session.name} (direct)" if session.direct else session.name
        config.progress(f"{session.original.name} {label} (S={S}, R={R}, C={C}): "
                        f"{result.status.value} {result.seconds:.2f}s")
        return result

    def _probe(self, S: int) -> Fraction | None:
        """Any schedule with S steps at all? One chunk with ample rounds: twice the floor first
        (a small encoding: alltoall's ample cap is steps x n^2 rounds), then the cap that
        certainly suffices. A schedule found becomes S's incumbent and its ratio the ceiling;
        a probe that neither finds nor proves infeasibility makes the walk incomplete."""
        session = self.config.session
        R = _rounds_cap(session, S, 1)
        near = max(S, 2 * session.rounds_floor(S, 1))
        result = self._attempt(S, near, 1, by_splits=False) if near < R else None
        if result is None or result.status != Status.SOLVED:
            result = self._attempt(S, R, 1, by_splits=False)
        self.blind = 0 if result.status in (Status.SOLVED, Status.INFEASIBLE) else self.blind + 1
        if result.status == Status.SOLVED:
            self.incumbent = _fewest_steps(FrontierPoint(S, result.schedule.total_rounds, 1, result.schedule,
                                                         result.seconds))
            return self.incumbent.ratio
        if result.status != Status.INFEASIBLE:
            self.complete = False
        return None

    def _sweep(self, S: int, ceiling: Fraction) -> None:
        """The candidates (R, C) at S below the ceiling, by increasing rounds/chunk: the first
        one solved is the least (shortened if it can be) and ends the sweep; an infeasible one
        prunes every budget with its C and no more rounds; a timeout is left unsettled."""
        infeasible_up_to: dict[int, int] = {}
        lows = {C: self._least(S, C) for C in range(1, self.config.max_chunks + 1)}
        for R, C in _candidates(lows, ceiling):
            if self._pruned(S, R, C, infeasible_up_to):
                continue
            result = self._attempt(S, R, C)
            if result.status == Status.SOLVED:
                found = self._shorten(_fewest_steps(FrontierPoint(S, result.schedule.total_rounds, C,
                                                                  result.schedule, result.seconds)))
                if self.incumbent is None or found.ratio < self.incumbent.ratio:
                    self.incumbent = found
                break  # candidates come in increasing rounds/chunk: this is the least
            if result.status == Status.INFEASIBLE:
                infeasible_up_to[C] = max(infeasible_up_to.get(C, 0), R)
                self.proofs.append((S, R, C))
            else:
                self.unsettled.append((S, R, C))

    def _pruned(self, S: int, R: int, C: int, infeasible_up_to: dict[int, int]) -> bool:
        """A candidate no solver call is needed for: no more rounds than a budget with its C
        proven infeasible at S; below the any-steps floor (past the first step count: cheaper
        than the S-step LP, whose size grows with S; at the first step count that one is the
        smaller); or below the time-expanded LP's floor at S steps."""
        if R <= infeasible_up_to.get(C, 0):
            return True
        if self.config.session.options.certify:
            return self._certified_floor(S, R, C, infeasible_up_to)
        if S > self.config.steps_lb and R < self._any_steps_floor(S, C):
            return True
        return R < self.config.session.rounds_floor(S, C)

    def _certified_floor(self, S: int, R: int, C: int, infeasible_up_to: dict[int, int]) -> bool:
        """A certified walk prunes below the floors only with a certificate: the budget just
        below the floor at S, (S, floor - 1, C), or (S, R, C) itself when no rounds suffice at
        S (an infinite floor), is attempted (its splits get exact LP certificates, or proofs),
        and, proven, it prunes every budget with its C and no more rounds (fewer rounds never
        help)."""
        floor = self.config.session.rounds_floor(S, C)
        if S > self.config.steps_lb:
            floor = max(floor, self._any_steps_floor(S, C))
        if R >= floor:
            return False
        below = R if floor == math.inf else floor - 1
        if self._attempt(S, below, C).status != Status.INFEASIBLE:
            return False
        infeasible_up_to[C] = max(infeasible_up_to.get(C, 0), below)
        self.proofs.append((S, below, C))
        return True

    def _shorten(self, point: FrontierPoint) -> FrontierPoint:
        """While a budget with one step fewer and no fewer rounds (same chunks) timed out, try
        the point's schedule in one step fewer by re-solving windows of its steps: a schedule
        settles that budget (mi250 allgather: the 12-step (17, 7) went to 9 steps this way,
        where whole-budget searches at 9 to 11 steps timed out)."""
        config = self.config
        session = config.session
        while any(S_ == point.steps - 1 and C_ == point.chunks and R_ >= point.rounds
                  for S_, R_, C_ in self.unsettled):
            result = session.fewer_steps(point.schedule, config.time_limit)
            fewer = point.steps - 1
            self.attempts.append(Attempt(fewer, point.rounds, point.chunks, result.status, result.seconds))
            config.progress(f"{session.original.name} {session.name} (S={fewer}, R={point.rounds}, "
                            f"C={point.chunks}): {result.status.value} {result.seconds:.2f}s "
                            f"(windows of the {point.steps}-step schedule re-solved)")
            if result.status != Status.SOLVED:
                break
            point = _fewest_steps(FrontierPoint(fewer, result.schedule.total_rounds, point.chunks, result.schedule,
                                                point.solve_seconds + result.seconds))
        return point

    # recording and the end

    def _beats_bar(self, point: FrontierPoint | None) -> bool:
        """A point is kept only when it beats the bar at S (or there is none)."""
        if point is None:
            return False
        bar = self._bar(self.S)
        return bar is None or point.ratio < bar

    def _record(self) -> bool:
        """Keep S's incumbent as a point when it beats the bar; it becomes the best. Whether kept."""
        if not self._beats_bar(self.incumbent):
            return False
        self.points.append(self.incumbent)
        self.best = self.incumbent.ratio
        return True

    def _meets_rounds_bound(self) -> bool:
        """The best ratio meets the rounds bound: more steps cannot help."""
        ratio_lb = self.config.ratio_lb
        return ratio_lb is not None and self.best <= ratio_lb

    def _still_unsettled(self) -> list[tuple[int, int, int]]:
        """The budgets that timed out and stay open: one at S steps is settled by a proof at no
        fewer steps and rounds (when steps split freely), or by a point found with no more steps
        and no worse a ratio."""
        settles = self.config.session.steps_split_freely
        return [(S_, R, C) for S_, R, C in self.unsettled
                if not (settles and any(S2 >= S_ and R2 >= R and C2 == C for S2, R2, C2 in self.proofs))
                and not any(p.steps <= S_ and p.ratio <= Fraction(R, C) for p in self.points)]

    def _finish(self) -> Frontier:
        """The frontier: its non-dominated points, complete only if nothing stays unsettled (and
        no probe timed out, no Ctrl-C, the budget not spent); the note says why the walk stopped
        (not when points were known), then lists up to six unsettled budgets."""
        config = self.config
        unsettled = self._still_unsettled()
        complete = self.complete and not unsettled and not self.spent
        note = self.note
        if self.spent:
            note = f"the walk stopped: its budget of {config.budget:g} s was spent before {self.S} steps"
        elif self.blind >= BLIND_PROBES:
            note = (f"the walk stopped: the probes at {self.S - BLIND_PROBES}..{self.S - 1} steps all timed out "
                    "with nothing found (a longer --time-limit may find one)")
        if not note and not config.known:
            note = _stop_reason(self.S, self.best, config.ratio_lb, config.max_chunks, config.max_steps)
        if unsettled:
            shown = ", ".join(f"({a}, {b}, {c})" for a, b, c in unsettled[:6]) + (" ..." if len(unsettled) > 6 else "")
            note = (note + "; " if note else "") + f"not settled (timed out, a longer --time-limit may): {shown}"
        ratio_lb = config.ratio_lb
        return Frontier(config.session.original, config.session.name, tuple(_non_dominated(self.points)), complete,
                        tuple(self.attempts), note,
                        {"steps": config.steps_lb, "rounds_per_chunk": str(ratio_lb) if ratio_lb is not None else None})


def _fewest_steps(point: FrontierPoint) -> FrontierPoint:
    """The point with its schedule's steps merged where nothing is forwarded between them
    (``merge_steps``): the same rounds and chunks in fewer steps. A solver at more steps
    than a budget needs can leave such slack, so a budget that timed out at fewer steps
    may be found this way."""
    merged = merge_steps(point.schedule)
    if len(merged.steps) >= point.steps:
        return point
    merged = merged.with_meta(steps=len(merged.steps))
    check_schedule(merged)
    return FrontierPoint(len(merged.steps), point.rounds, point.chunks, merged, point.solve_seconds)


def _stop_reason(S: int, best: Fraction | None, ratio_lb: Fraction | None, max_chunks: int,
                 max_steps: int | None) -> str:
    """Why the walk ended at step count S (the first one not searched)."""
    if best is not None and ratio_lb is not None and best <= ratio_lb:
        return f"the walk stopped: rounds/chunk {best} meets the rounds bound"
    if max_steps is not None and S > max_steps:
        return f"the walk stopped at {max_steps} steps, the cap it was given; best rounds/chunk found: {best}"
    bound = f"the rounds bound {ratio_lb} is not reached" if ratio_lb is not None else "no rounds bound"
    if best is not None and Fraction(S, max_chunks) < best:
        why = (f"every budget below {best} with {S} or more steps needs more rounds than the "
               f"any-steps relaxation allows")
    else:
        why = f"{S} steps need at least {S} rounds and {S}/{max_chunks} is no better"
    return (f"{bound} with at most {max_chunks} chunks; best rounds/chunk found: {best}; the walk stopped "
            f"at {S - 1} steps: {why} (raise --max-chunks to search on)")


def _candidates(lows: dict[int, int], ceiling: Fraction) -> list[tuple[int, int]]:
    """(R, C) with R >= lows[C] and R/C < ceiling, by increasing R/C then C."""
    out = []
    for C, low in lows.items():
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
    """Points no other point beats in both steps and rounds/chunk (ties: fewest chunks).

    In order of steps, a point is kept only when its ratio is below every kept one.
    """
    out: list[FrontierPoint] = []
    for p in sorted(points, key=lambda p: (p.steps, p.ratio, p.chunks)):
        if not out or p.ratio < out[-1].ratio:
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
    options: SmtOptions = SmtOptions(),
) -> tuple[SolveResult, tuple[Attempt, ...]]:
    """Fewest steps S with rounds S + extra_rounds; starts where both bounds allow, stops at a cap."""
    if name == "allreduce":
        return _least_steps_allreduce(topology, chunks, extra_rounds, max_steps, time_limit, progress, options)
    session = open_session(topology, name, root, options)
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
        progress(f"{topology.name} {name} (S={S}, R={S + extra_rounds}, C={chunks}): "
                 f"{result.status.value} {result.seconds:.2f}s")
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
    direct: bool = False,
    options: SmtOptions = SmtOptions(),
) -> SolveResult:
    """One instance; allreduce as the best-balanced reduce_scatter + allgather split that fits,
    or with ``direct`` by the direct encoding (reduction in flight)."""
    if direct and name != "allreduce":
        raise InputError(f"the direct encoding is for allreduce, not {name}")
    if name == "allreduce" and not direct:
        return _solve_allreduce(topology, steps, rounds, chunks, time_limit, progress, options)
    result = open_session(topology, name, root, options, direct=direct).solve(steps, rounds, chunks, time_limit)
    progress(f"{topology.name} {name} (S={steps}, R={rounds}, C={chunks}): {result.status.value} {result.seconds:.2f}s")
    return result


def _solve_allreduce(topology, steps, rounds, chunks, time_limit, progress, options) -> SolveResult:
    """The composition (``_solve_composition``); where it has no schedule and a switch reduces
    and multicasts, the direct encoding with switch entries (``synth.smt.switch_trees``): there
    one chunk's reduce entry and another's multicast share a step, which a composition cannot
    (h100, 3 steps: 13 rounds, where every point-to-point schedule and every composition needs
    14). Its status when it finds none: the composition's, the direct search's said beside it."""
    result = _solve_composition(topology, steps, rounds, chunks, time_limit, progress, options)
    if result.status == Status.SOLVED or not any(s.reduce and s.multicast for s in topology.switches):
        return result
    direct = open_session(topology, "allreduce", None, options, direct=True).solve(steps, rounds, chunks, time_limit)
    progress(f"{topology.name} allreduce (direct, switch entries) (S={steps}, R={rounds}, C={chunks}): "
             f"{direct.status.value} {direct.seconds:.2f}s")
    if direct.status == Status.SOLVED:
        return direct
    status = Status.INFEASIBLE if Status.INFEASIBLE == result.status == direct.status else Status.TIMEOUT
    return SolveResult(status, None, result.seconds + direct.seconds,
                       f"{result.message}; the direct encoding with switch entries: {direct.status.value}")


def _solve_composition(topology, steps, rounds, chunks, time_limit, progress, options) -> SolveResult:
    """The allreduce composition (``synth.core.reductions``) with the steps and rounds shared out
    between its parts, most balanced share first; the first share both parts solve wins."""
    whole = make_collective("allreduce", topology.ranks, chunks=chunks)
    parts = COMPOSITION.apply(Part.of(topology, whole))
    sessions = {part.label: open_session(topology, part.label, None, options) for part in parts}
    first, second = (max(1, lower_bounds(topology, make_collective(part.label, topology.ranks)).steps)
                     for part in parts)
    shares = [(s1, r1) for s1 in range(first, steps - second + 1) for r1 in range(s1, rounds - (steps - s1) + 1)]
    shares.sort(key=lambda sr: (abs(2 * sr[0] - steps), abs(2 * sr[1] - rounds)))
    started = time.perf_counter()
    missed: list[Status] = []
    for s1, r1 in shares:
        share = {parts[0].label: (s1, r1), parts[1].label: (steps - s1, rounds - r1)}

        def solve_part(part: Part, share=share) -> Schedule | None:
            part_steps, part_rounds = share[part.label]
            result = sessions[part.label].solve(part_steps, part_rounds, chunks, time_limit)
            progress(f"{topology.name} {part.label} (S={part_steps}, R={part_rounds}, C={chunks}): "
                     f"{result.status.value} {result.seconds:.2f}s")
            missed.extend([] if result.status == Status.SOLVED else [result.status])
            return result.schedule

        schedule = solve_reduced(topology, whole, solve_part, _join_allreduce, _session_solves)
        if schedule is not None:
            return SolveResult(Status.SOLVED, schedule, time.perf_counter() - started)
    status = Status.TIMEOUT if any(m != Status.INFEASIBLE for m in missed) else Status.INFEASIBLE
    return SolveResult(status, None, time.perf_counter() - started,
                       "as a reduce_scatter + allgather composition (a direct allreduce might fit)")


def _session_solves(collective: Collective) -> bool:
    """What an SmtSession solves itself: every collective but allreduce (combining ones as duals)."""
    return not COMPOSITION.applies(collective)


def _join_allreduce(reduction: Reduction, part: Part, schedules) -> Schedule:
    """The allreduce composition of two part schedules, with the meta its file carries, verified."""
    rs, ag = schedules
    schedule = reduction.invert(part, schedules).with_meta(
        synthesizer="smt", composition=reduction.name,
        steps=len(rs.steps) + len(ag.steps), rounds=(rs.total_rounds or 0) + (ag.total_rounds or 0),
        chunks=part.collective.chunks_per_rank,
        solve_seconds=round(rs.meta.get("solve_seconds", 0) + ag.meta.get("solve_seconds", 0), 4),
    )
    check_schedule(schedule)
    return schedule


def _compose_allreduce(topology: Topology, rs: Schedule, ag: Schedule, chunks: int) -> Schedule:
    whole = make_collective("allreduce", topology.ranks, chunks=chunks)
    return _join_allreduce(COMPOSITION, Part.of(topology, whole), (rs, ag))


def pareto_allreduce(
    topology: Topology,
    max_chunks: int = 8,
    time_limit: float | None = 60.0,
    progress: Progress = _quiet,
    direct: bool = False,
    direct_chunks: int = 3,
    jobs: int = 1,
    budget: float | None = None,
    options: SmtOptions = SmtOptions(),
) -> Frontier:
    """Allreduce frontier: compositions of the reduce_scatter and allgather frontiers (equal C);
    with ``direct``, the direct encoding is also searched (C <= direct_chunks, steps up to the
    composition's largest) for points the compositions do not reach. ``jobs`` > 1: the two
    frontiers are searched side by side."""
    rs, ag = _part_frontiers(topology, max_chunks, time_limit, progress, jobs, budget, options)
    composed = _compositions(topology, rs, ag)
    bounds = lower_bounds(topology, make_collective("allreduce", topology.ranks))
    proven = bounds.proven or bounds
    note = "reduce_scatter + allgather compositions at equal chunks"
    found = Frontier(topology, "allreduce", (), True)
    if direct:
        found = _search(open_session(topology, "allreduce", None, options, direct=True), max(1, proven.steps),
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


def _part_frontiers(topology: Topology, max_chunks: int, time_limit: float | None, progress: Progress,
                    jobs: int, budget: float | None = None,
                    options: SmtOptions = SmtOptions()) -> tuple[Frontier, Frontier]:
    """The frontiers of the allreduce composition's parts (reduce_scatter, allgather), one after
    the other, or with ``jobs`` > 1 in two processes (their progress lines passed on once both are
    done)."""
    labels = [part.label for part in COMPOSITION.apply(Part.of(topology, make_collective("allreduce", topology.ranks)))]
    if jobs <= 1:
        rs, ag = (pareto(topology, label, None, max_chunks, time_limit, progress, options=options, budget=budget)
                  for label in labels)
        return rs, ag
    from synth.parallel.pool import Job, run_jobs

    found_two = run_jobs([Job(label, "synth.smt.strategies:frontier_job",
                              (topology, label, max_chunks, time_limit, budget, options))
                          for label in labels], workers=jobs)
    for outcome in found_two:
        if not outcome.ok:
            raise RuntimeError(f"{outcome.key} frontier: {outcome.error}")
        for line in outcome.value[1]:
            progress(line)
    rs, ag = (outcome.value[0] for outcome in found_two)
    return rs, ag


def _compositions(topology: Topology, rs: Frontier, ag: Frontier) -> list[FrontierPoint]:
    """The non-dominated allreduce points composed of a reduce_scatter point and an allgather
    point with equal chunks: steps, rounds and solve times add."""
    composed = []
    for a in rs.points:
        for b in ag.points:
            if a.chunks == b.chunks:
                schedule = _compose_allreduce(topology, a.schedule, b.schedule, a.chunks)
                composed.append(FrontierPoint(a.steps + b.steps, a.rounds + b.rounds, a.chunks, schedule,
                                              a.solve_seconds + b.solve_seconds))
    return _non_dominated(composed)


def frontier_job(topology: Topology, name: str, max_chunks: int, time_limit: float | None,
                 budget: float | None = None, options: SmtOptions = SmtOptions()) -> tuple[Frontier, list[str]]:
    """``pareto`` as a job in its own process: the frontier and its progress lines."""
    lines: list[str] = []
    return pareto(topology, name, None, max_chunks, time_limit, lines.append, options=options, budget=budget), lines


def _sum_ratio(a: dict, b: dict) -> str | None:
    if a.get("rounds_per_chunk") is None or b.get("rounds_per_chunk") is None:
        return None
    return str(Fraction(a["rounds_per_chunk"]) + Fraction(b["rounds_per_chunk"]))


def _least_steps_allreduce(topology, chunks, extra_rounds, max_steps, time_limit, progress, options):
    """Least-steps reduce_scatter then least-steps allgather (each with half the extra rounds),
    composed (``synth.core.reductions``)."""
    extras = {"reduce_scatter": extra_rounds // 2, "allgather": extra_rounds - extra_rounds // 2}
    attempts: list[Attempt] = []
    outcome: list[SolveResult] = []

    def solve_part(part: Part) -> Schedule | None:
        result, tried = least_steps(topology, part.label, None, chunks, extras[part.label], max_steps, time_limit,
                                    progress, options)
        attempts.extend(tried)
        outcome.append(result)
        return result.schedule

    whole = make_collective("allreduce", topology.ranks, chunks=chunks)
    schedule = solve_reduced(topology, whole, solve_part, _join_allreduce, _session_solves)
    if schedule is None:
        return outcome[-1], tuple(attempts)
    return SolveResult(Status.SOLVED, schedule, sum(r.seconds for r in outcome)), tuple(attempts)
