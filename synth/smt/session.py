"""One (topology, collective) under the SMT backend: instance caching and reuse, the rounds
splits the LP allows, the symmetric-first then exact search, and a combining collective as
its dual (``synth.core.reductions.DUAL``: applied to what the solver sees, inverted on the way out).

On a topology whose switches compute, the encoding has switch entries (``synth.smt.switch_sends``)
and the session refutes with nothing that reasons point to point: no step LP floors, split
prunes or LP certificates (a multicast puts one chunk on many ports in one round, so a
point-to-point refutation can be wrong there), no restricted symmetric search and no window
re-solve; the floor is the steps bound over links and switch hops (R >= S), and every
INFEASIBLE is the SAT engine's answer about the encoding with switch entries.

Every SOLVED answer is verified here before it leaves (a failure is a bug and raises).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from synth.bounds.step_lp import (
    HEAD_STEPS,
    TAIL_STEPS,
    compositions,
    least_rounds,
    least_rounds_any_steps,
    open_splits,
    split_ruled_out,
)
from synth.core.collective import Collective
from synth.core.collectives import make_collective
from synth.core.errors import InputError
from synth.core.planning import PLANNERS_HINT, rounds_problem
from synth.core.reductions import DUAL, Part
from synth.core.schedule import Schedule, SolveResult, Status
from synth.core.symmetry import schedule_invariant, search_symmetries
from synth.core.topology import Topology
from synth.smt import windows
from synth.smt.clock import Clock
from synth.smt.direct_allreduce import DirectAllreduceInstance
from synth.smt.encoding import WORK_START, SmtInstance, SmtOptions
from synth.smt.switch_sends import fewest_steps
from synth.verify import checked


class SmtSession:
    """Builds and caches SMT instances for one (topology, collective kind): solver reuse."""

    def __init__(self, topology: Topology, name: str, root: int | None, options: SmtOptions = SmtOptions(),
                 direct: bool = False):
        """``direct``: allreduce with the direct encoding (overlapping reduce and copy trees)."""
        base = make_collective(name, topology.ranks, root=root, chunks=1)
        base.check_on(topology)
        if not topology.rounds_apply:
            raise InputError(f"{topology.name}: {rounds_problem(topology)}: {PLANNERS_HINT}")
        self.name, self.root, self.options = name, root, options
        self.original = topology
        self.direct = direct
        if name == "allreduce" and not direct:
            raise InputError("allreduce is solved as reduce_scatter + allgather (solve_allreduce) or directly")
        # other combining collectives run as their non-combining dual on the reversed topology
        self.combining = base.combining and not direct
        self._seen: dict[int, Collective] = {}  # chunks -> the collective the solver sees
        self.topology = self._part(base).topology
        self.switched = bool(self.topology.switches)  # switch entries: no point-to-point refutation
        self._instances: dict[tuple[int, int], SmtInstance] = {}
        self._symmetric: dict[tuple[int, int], SmtInstance | None] = {}
        self._floors: dict[int, dict[int, float]] = {}  # chunks -> steps -> rounds_floor
        self._build_seconds: dict[tuple[int, int], float] = {}  # (steps, chunks) -> exact build estimate
        self._found: dict[tuple, Schedule] = {}  # combining: a found schedule's key -> the solver's dual one
        self._chunk_unit = base.chunks  # chunks of the collective per chunk of a budget

    def collective(self, chunks: int) -> Collective:
        """The collective the solver sees at ``chunks``: the dual one for a combining collective."""
        if chunks not in self._seen:
            self._seen[chunks] = self._part(self._original_collective(chunks)).collective
        return self._seen[chunks]

    def _original_collective(self, chunks: int) -> Collective:
        return make_collective(self.name, self.original.ranks, root=self.root, chunks=chunks)

    def _part(self, collective: Collective) -> Part:
        """``collective`` as the solver sees it (``synth.core.reductions``: the dual, when combining)."""
        part = Part.of(self.original, collective)
        return DUAL.apply(part)[0] if self.combining else part

    def rounds_floor(self, steps: int, chunks: int) -> float:
        """Fewest rounds any ``steps``-step schedule needs (time-expanded LP; inf: too few steps).

        Floors never rise with the steps past the step count itself: in the relaxation a step
        of r >= 2 rounds splits into steps of a and r - a rounds with its flows shared out, so
        floor(S) <= max(floor(S0), S) for S0 < S. With the any-steps floor A below every one,
        once floor(S0) <= max(A, S), floor(S) is max(A, S) without an LP (on mi250 allgather
        each took 17-45 s at 7 to 11 steps, and all are the any-steps floor, 17 for 7 chunks)."""
        if self.switched:
            return self._switch_floor(steps, chunks)
        known = self._floors.setdefault(chunks, {})
        if steps >= self.ANY_STEPS_FROM:
            settled = [floor for fewer, floor in known.items() if self.ANY_STEPS_FROM <= fewer < steps]
            if settled:
                least = max(self.rounds_floor_any_steps(chunks), steps)
                if min(settled) <= least:
                    return least
        if steps not in known:
            known[steps] = least_rounds(self.topology, self.collective(chunks), steps)
        return known[steps]

    def _switch_floor(self, steps: int, chunks: int) -> float:
        """The floor with switch entries: ``steps`` rounds (each step takes one), inf when the
        hops over links and switches need more steps (``synth.smt.switch_sends.fewest_steps``)."""
        return steps if fewest_steps(self.topology, self.collective(chunks)) <= steps else math.inf

    ANY_STEPS_FROM = HEAD_STEPS + TAIL_STEPS  # ``rounds_floor_any_steps`` holds from here on

    def rounds_floor_any_steps(self, chunks: int) -> int:
        """Fewest rounds any schedule with at least ``ANY_STEPS_FROM`` steps needs, whatever its
        step count (the pooled relaxation; 0 where it does not apply, and with switch entries)."""
        if self.switched:
            return 0
        return least_rounds_any_steps(self.topology, self.collective(chunks)) or 0

    @property
    def steps_split_freely(self) -> bool:
        """True when a step of r rounds can always be split into steps of a and r - a rounds
        (every link in at most one group: each link's and group's sends share out evenly), so
        a schedule (S, R, C) gives one with S + 1 steps and the same R and C while S < R:
        a budget infeasible at S steps is infeasible at every fewer step count. Never with switch
        entries: an entry loads several ports and groups at once."""
        return not self.switched and all(len(groups) <= 1 for groups in self.topology.groups_of_link.values())

    def _keep_instances_of(self, steps: int) -> None:
        """Drop the cached solvers of other step counts: the walks go up in steps and never
        come back, and on the big machines each holds gigabytes (mi250 allgather with 7
        chunks: z3 ran out of memory at 11 steps with those of 5 to 10 kept)."""
        for cache in (self._instances, self._symmetric):
            for key in [key for key in cache if key[0] != steps]:
                del cache[key]

    def _instance(self, steps: int, chunks: int, max_rounds: int) -> SmtInstance:
        key = (steps, chunks)
        inst = self._instances.get(key)
        if inst is None or inst.max_rounds < max_rounds:
            kind = DirectAllreduceInstance if self.direct else SmtInstance
            inst = kind(self.topology, self.collective(chunks), steps, max_rounds, self.options, dual=self.combining)
            self._instances[key] = inst
        return inst

    def solve(self, steps: int, rounds: int, chunks: int, time_limit: float | None,
              by_splits: bool = True) -> SolveResult:
        """Is (steps, rounds, chunks) feasible? A SOLVED result carries a verified schedule.

        First the search restricted to topology symmetries (two thirds of the time: on the hard
        machines it finds what exists in seconds where the exact search takes minutes, but its
        UNSAT proves nothing), then the exact search. Both go split by split when the
        ways to spread the rounds over the steps are few: splits a known cut of the step LP
        rules out are never tried, and a split the solver does not settle at the first budget
        gets its LP solved (ruled out, or kept; each solve's cut may rule out later splits).
        """
        clock = Clock(time_limit)
        self._keep_instances_of(steps)
        lp_seconds = None if time_limit is None else time_limit * LP_SHARE
        splits = (self._open_splits(steps, rounds, chunks, solve_lps=False, seconds=clock.at_most(lp_seconds))
                  if by_splits else None)
        if splits == [] and not self.options.certify:
            return SolveResult(Status.INFEASIBLE, None, clock.elapsed(),
                               "every split of the rounds over the steps is ruled out by the LP bound")
        collective = self.collective(chunks)
        prune = (lambda split: split_ruled_out(self.topology, collective, split)) \
            if by_splits and not self.switched else None
        result = None
        symmetric = self._symmetric_instance(steps, chunks, rounds) if splits != [] else None
        if symmetric is not None:
            # the LP solves above count against the attempt's time (at 8+ steps on mi250 they
            # took 100 s of a 120 s limit, and the attempt ran 170 s)
            # the work cap follows the limit, not the clock, so it is the same on any machine
            cap = None if time_limit is None else time_limit * SYMMETRIC_SHARE
            result = _run(symmetric, rounds, splits, clock.share(SYMMETRIC_SHARE), max_budget=cap, prune=prune,
                          finding=True)
        if result is None or result.status != Status.SOLVED:
            # the exact search: only splits the LP allows (the others are proven impossible),
            # and only with the time to build its encoding left after the LPs (mi250 at 9 steps
            # ran 150 s against 120 s when the LPs were not counted)
            build = 0.0 if (steps, chunks) in self._instances else self._exact_build_seconds(steps, chunks)
            known: dict = {}
            if by_splits and self.options.certify:
                splits, prune, known = self._certified_splits(rounds, steps, splits, collective)
                if splits is not None and len(known) == len(splits):  # the LP refutes every split
                    result = SolveResult(Status.INFEASIBLE, None, clock.elapsed(),
                                         details={"refutations": tuple(known[split] for split in splits)})
                    return self._checked(self._certified(result, steps, rounds, chunks), clock, steps, chunks)
            elif by_splits and clock.has(build):
                splits = self._open_splits(steps, rounds, chunks, seconds=clock.at_most(lp_seconds, reserve=build))
                if splits == []:
                    return SolveResult(Status.INFEASIBLE, None, clock.elapsed(),
                                       "every split of the rounds over the steps is ruled out by the LP bound")
            if not clock.has(build):
                return SolveResult(Status.TIMEOUT, None, clock.elapsed(), "no time left to build the exact encoding")
            exact = self._instance(steps, chunks, rounds)  # its build counts (~30 s at 8 steps on mi250)
            result = _run(exact, rounds, splits, clock.share(1.0), prune=prune, known=known)
            result = self._certified(result, steps, rounds, chunks)
        return self._checked(result, clock, steps, chunks)

    def _certified_splits(self, rounds: int, steps: int, open_splits, collective: Collective):
        """A certified search's splits (every one; None: the whole budget at once), its prune
        (an exact LP certificate), and the certificates of the splits the LP already rules out
        (made first: a certificate costs one LP, an engine's proof a search)."""
        every, refute = _every_split(rounds, steps, open_splits), self._lp_refutation(collective)
        if every is None:
            return None, refute, {}
        leave = set(open_splits or [])
        known = {split: part for split in every if split not in leave and (part := refute(split)) is not None}
        return every, refute, known

    def _lp_refutation(self, collective: Collective):
        """prune(split) for a certified search: the split's exact LP certificate, or None
        (then the engine must refute the split)."""
        from synth.bounds.lp_certificate import split_certificate
        from synth.smt.certificates import LpRefutation

        def refute(split: tuple[int, ...]):
            if self.switched:  # the step LP reasons point to point
                return None
            certificate = split_certificate(self.topology, collective, split)
            return None if certificate is None else LpRefutation(tuple(split), certificate)
        return refute

    def _certified(self, result: SolveResult, steps: int, rounds: int, chunks: int) -> SolveResult:
        """A certified search's INFEASIBLE with its BudgetCertificate (details["certificate"])."""
        if not self.options.certify or result.status != Status.INFEASIBLE:
            return result
        from synth.smt.certificates import BudgetCertificate

        parts = result.details.get("refutations")
        if parts is None and "refutation" in result.details:
            parts = (result.details["refutation"],)
        if not parts:
            return SolveResult(Status.ERROR, None, result.seconds, "a certified search proved infeasibility "
                               "without a certificate (a bug in synth)")
        certificate = BudgetCertificate(self.name, self.root, self.direct, steps, rounds, chunks, tuple(parts))
        return SolveResult(Status.INFEASIBLE, None, result.seconds, result.message,
                           details={"certificate": certificate})

    def fewer_steps(self, schedule: Schedule, time_limit: float | None) -> SolveResult:
        """The same rounds and chunks in one step fewer than ``schedule`` (a point this session
        found), by re-solving windows of its steps (``synth.smt.windows``). SOLVED carries a
        verified schedule; TIMEOUT says no window gave one, and proves nothing.

        The window search runs on the restricted encoding when the schedule is invariant under
        its symmetries (the restricted search's are), else on an exact one without the chunk
        order (the schedule's chunks need not follow it)."""
        clock = Clock(time_limit)
        internal = self._found.get(_key(schedule)) if self.combining else schedule
        steps, chunks = len(schedule.steps) - 1, schedule.collective.chunks // self._chunk_unit
        if internal is None or self.direct or steps < 1 or self.switched:
            return SolveResult(Status.TIMEOUT, None, 0.0, "no window to re-solve")
        self._keep_instances_of(steps)
        rounds = internal.total_rounds
        inst = self._symmetric_instance(steps, chunks, rounds)
        if inst is None or not schedule_invariant(internal, inst.symmetries):
            key = (steps, chunks, "unordered")
            inst = self._instances.get(key)
            if inst is None or inst.max_rounds < rounds:
                inst = SmtInstance(self.topology, self.collective(chunks), steps, rounds,
                                   replace(self.options, order_interchangeable_chunks=False))
                self._instances[key] = inst
        result = windows.fewer_steps(inst, internal, min(windows.WIDTH, steps), clock.share(1.0))
        return self._checked(result, clock, steps, chunks)

    def _checked(self, result: SolveResult, clock: Clock, steps: int, chunks: int) -> SolveResult:
        """A solver's result as the session gives it: a schedule back on the original topology
        (duals run backwards), verified; a failure to verify is a bug and raises."""
        seconds = clock.elapsed()
        if result.status != Status.SOLVED:
            return SolveResult(result.status, None, seconds, result.message, details=result.details)
        schedule = result.schedule
        internal = schedule
        if self.combining:
            schedule = DUAL.invert(Part.of(self.original, self._original_collective(chunks)), [schedule])
        schedule = schedule.with_meta(synthesizer="smt", solve_seconds=round(seconds, 4),
                                      steps=steps, rounds=schedule.total_rounds, chunks=chunks)
        check_schedule(schedule)
        if self.combining:
            self._found[_key(schedule)] = internal
        return SolveResult(Status.SOLVED, schedule, seconds, result.message)

    def _open_splits(self, steps: int, rounds: int, chunks: int, solve_lps: bool = True,
                     seconds: float | None = None) -> list[tuple[int, ...]] | None:
        """Splits of the rounds over the steps the step LP does not rule out, LP-feasible ones
        first ([]: every split is ruled out, a proof; None: too many to go split by split).
        ``solve_lps`` False: when few splits are open (FEW_SPLITS), known cuts only (the
        restricted search settles those quickly; the first pass's prune solves what it leaves).
        ``seconds``: the most time its LP solves may take (the splits they leave undecided
        stay open). None with switch entries: the step LP reasons point to point."""
        if self.switched:
            return None
        if not solve_lps:
            few = open_splits(self.topology, self.collective(chunks), rounds, steps, max_solves=0)
            if few is not None and len(few) <= FEW_SPLITS:
                return few
        found = open_splits(self.topology, self.collective(chunks), rounds, steps, seconds=seconds)
        if found is None or len(found) > MAX_SPLITS:
            return None
        return found

    def _symmetric_instance(self, steps: int, chunks: int, rounds: int) -> SmtInstance | None:
        if self.direct or self.switched:
            return None
        key = (steps, chunks)
        inst = self._symmetric.get(key)
        if key not in self._symmetric or (inst is not None and inst.max_rounds < rounds):
            collective = self.collective(chunks)
            syms = tuple(search_symmetries(self.topology, collective))
            began = time.perf_counter()
            inst = (SmtInstance(self.topology, collective, steps, rounds, self.options, syms)
                    if len(syms) > 1 else None)
            self._symmetric[key] = inst
            self._build_seconds[key] = (time.perf_counter() - began) * len(syms)
        return inst

    def _exact_build_seconds(self, steps: int, chunks: int) -> float:
        """About how long the exact encoding takes to build: the restricted one's build times
        its group's order (one variable an orbit; mi250 at 8 steps: 6.4 s x 4, measured ~30 s);
        0 when unknown."""
        return self._build_seconds.get((steps, chunks), 0.0)


SYMMETRIC_SHARE = 2 / 3  # of an attempt's time left (and work cap) for the restricted search
LP_SHARE = 1 / 4  # of an attempt's time limit, the most each pass's split LP solves may take


def _run(inst: SmtInstance, rounds: int, splits, time_limit: float | None,
         max_budget: float | None = None, prune=None, finding: bool = False, known: dict | None = None) -> SolveResult:
    """Exact for ``inst``: split by split with growing work budgets (an easy split first), or
    the whole rounds budget at once when there are too many splits.

    The budgets are work seconds (``synth.smt.sat.engines``: each engine's own deterministic count), not
    seconds, so which split answers first, and with which schedule, is the same on a loaded machine as
    on an idle one (a sweep on many cores gives the serial run's schedules); ``time_limit`` stays the
    wall-clock safety net (TIMEOUT, "unknown", when it runs out). ``max_budget``: stop with TIMEOUT
    rather than try a pass with a bigger budget than this. ``prune(split)``: truthy when the split is
    proven impossible (asked, after the pass of its first try, of each split the solver left open);
    what it returns, when not just True, is the split's refutation.

    In a pass with budget B the i-th open split gets B / (i + 1), and at least the first
    pass's budget: the splits come most promising first, and a feasible one is usually among
    the first, so the work goes there rather than evenly (mi250 allgather (5, 19, 7): the
    first split needs ~6 work seconds, the fifteen together would have spent ~15 times that first).

    ``finding`` (a search whose "no" proves nothing: only a schedule is worth its time): past
    the first FEW_SPLITS, a split waits for the pass in which its share reaches the first
    pass's budget. Else every pass costs that budget times the splits: with the 164 splits of
    (5, 19, 7) each pass took 40 s, and the first split, whose schedule takes ~12 work seconds (z3),
    never got them within the attempt. A proof needs every split, so there every split is
    tried in the first pass (the cheap ones are ruled out there).

    An INFEASIBLE carries, when every split's refutation is known (an engine's, with proofs
    on, or prune's), details["refutations"]: one per split, in the order of ``splits``.
    ``known``: splits refuted already (split -> refutation): never tried."""
    if splits is None:
        return inst.solve(rounds, time_limit)
    clock = Clock(time_limit)
    refuted: dict = dict(known or {})  # split -> its refutation (or True: ruled out without one)
    pending, budget = [split for split in splits if split not in refuted], WORK_START
    tried: set = set()  # splits that had their first try (and, then, their prune)
    while pending:
        if max_budget is not None and budget > max_budget:
            return SolveResult(Status.TIMEOUT, None, clock.elapsed(), "work budget")
        still, first_tries = [], []
        for position, split in enumerate(pending):
            share = budget / (position + 1)
            if finding and share < WORK_START and position >= FEW_SPLITS:
                still.append(split)  # its turn comes in a later pass
                continue
            if not clock.has(0.01):
                return SolveResult(Status.TIMEOUT, None, clock.elapsed(), "time limit")
            result = inst.solve_split(split, clock.left(), work=max(WORK_START, share))
            if result.status in (Status.SOLVED, Status.ERROR):
                return result
            if result.status == Status.INFEASIBLE:
                refuted[split] = _with_split(result.details.get("refutation"), split)
            else:
                still.append(split)
                if split not in tried:
                    first_tries.append(split)
        tried.update(first_tries)
        if prune is not None and first_tries:
            # while time is left: an LP solve takes seconds on the big machines
            for split in first_tries:
                verdict = prune(split) if clock.has(0.0) else None
                if verdict:
                    refuted[split] = verdict
            still = [split for split in still if split not in refuted]
        pending = still
        budget *= 4
    parts = [refuted[split] for split in splits]
    details = {"refutations": tuple(parts)} if all(part not in (None, True) for part in parts) else {}
    return SolveResult(Status.INFEASIBLE, None, clock.elapsed(), details=details)


def _with_split(refutation, split: tuple[int, ...]):
    """A SatRefutation with the split it refutes (None stays None)."""
    return None if refutation is None else replace(refutation, split=tuple(split))


def _every_split(rounds: int, steps: int, first: list | None) -> list[tuple[int, ...]] | None:
    """Every split of ``rounds`` over ``steps`` for a certified search, ``first`` (the ones the LP
    leaves open, most promising first) leading; None (the whole budget at once) past MAX_SPLITS."""
    every = compositions(rounds, steps)
    if every is None or len(every) > MAX_SPLITS:
        return None
    lead = list(first or [])
    return lead + [split for split in map(tuple, every.tolist()) if split not in set(lead)]


MAX_SPLITS = 200
FEW_SPLITS = 12


def _key(schedule: Schedule) -> tuple:
    """What identifies a found schedule among a session's: its sends, step by step."""
    return tuple((step.rounds, step.sends) for step in schedule.steps)


def check_schedule(schedule: Schedule) -> None:
    checked(schedule, "the SMT solver")


class PointToPointFirst:
    """A session on a machine whose switches compute that asks the machine without its switches
    first: where point-to-point sends reach (steps, rounds, chunks), that schedule is the answer
    (a switch entry gains nothing in rounds there, and a schedule of plain sends runs under
    every protocol, LL included, where one with switch entries runs Simple only); where they do
    not (or time out), the encoding with switch entries decides. An INFEASIBLE is always the
    switched encoding's: a point-to-point schedule is one of its schedules too. Everything else
    (floors, splits, collectives) is the switched session's, whose floors hold for both."""

    def __init__(self, topology: Topology, name: str, root: int | None, options: SmtOptions, direct: bool = False):
        self.switched_session = SmtSession(topology, name, root, options, direct)
        self.plain = SmtSession(replace(topology, switches=()), name, root, options, direct)

    def __getattr__(self, attribute: str):
        return getattr(self.switched_session, attribute)

    def solve(self, steps: int, rounds: int, chunks: int, time_limit: float | None,
              by_splits: bool = True) -> SolveResult:
        """The plain session's SOLVED (on the switched topology), else the switched session's answer."""
        clock = Clock(time_limit)
        plain = self.plain.solve(steps, rounds, chunks, clock.share(0.5), by_splits)
        if plain.status is Status.SOLVED:
            return replace(plain, schedule=self._on_machine(plain.schedule), seconds=clock.elapsed())
        switched = self.switched_session.solve(steps, rounds, chunks, clock.at_most(None), by_splits)
        return replace(switched, seconds=clock.elapsed())

    def fewer_steps(self, schedule: Schedule, time_limit: float | None) -> SolveResult:
        """The plain session's window re-solve for a schedule of plain sends (the switched
        session has none)."""
        if schedule.switch_count:
            return self.switched_session.fewer_steps(schedule, time_limit)
        result = self.plain.fewer_steps(replace(schedule, topology=self.plain.original), time_limit)
        return result if result.schedule is None else replace(result, schedule=self._on_machine(result.schedule))

    def _on_machine(self, schedule: Schedule) -> Schedule:
        """``schedule`` (plain sends) on the machine with its switches, verified there."""
        return checked(replace(schedule, topology=self.switched_session.original), "smt")


def open_session(topology: Topology, name: str, root: int | None, options: SmtOptions = SmtOptions(),
                 direct: bool = False):
    """The session for ``topology``: ``PointToPointFirst`` where its switches compute, else a
    plain ``SmtSession``."""
    if any(s.reduce or s.multicast or s.reduce_multicast for s in topology.switches):
        return PointToPointFirst(topology, name, root, options, direct)
    return SmtSession(topology, name, root, options, direct)
