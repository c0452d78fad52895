"""One (topology, collective) under the SMT backend: instance caching and reuse, the rounds
splits the LP allows, the symmetric-first then exact search, duals back to the original.

Every SOLVED answer is verified here before it leaves (a failure is a bug and raises).
"""

from __future__ import annotations

import math
import time

from synth.smt.encoding import SmtInstance, SmtOptions
from synth.smt.direct_allreduce import DirectAllreduceInstance
from synth.bounds.step_lp import distribution_load, least_rounds
from synth.core.collective import Collective
from synth.core.collectives import make_collective
from synth.core.errors import InputError
from synth.core.transforms import dual_collective, dual_schedule
from synth.core.schedule import Schedule, SolveResult, Status
from synth.core.symmetry import collective_symmetries
from synth.core.topology import Topology
from synth.verify import verify


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
            cap = None if share is None else int(share * RLIMIT_PER_SECOND)
            result = _run(symmetric, rounds, every, share, max_budget=cap)
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
        check_schedule(schedule)
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


RLIMIT_START = 2_500_000  # z3 work units of a split's first try (about 0.25 s here: ~10M units a second)
RLIMIT_PER_SECOND = 10_000_000  # to turn a time share into a work budget, deterministically


def _run(inst: SmtInstance, rounds: int, splits, time_limit: float | None,
         max_budget: int | None = None) -> SolveResult:
    """Exact for ``inst``: split by split with growing work budgets (an easy split first), or
    the whole rounds budget at once when there are too many splits.

    The budgets are z3 work units (rlimit), not seconds, so which split answers first, and
    with which schedule, is the same on a loaded machine as on an idle one (a sweep on many
    cores gives the serial run's schedules); ``time_limit`` stays the wall-clock safety net
    (TIMEOUT, "unknown", when it runs out). ``max_budget``: stop with TIMEOUT rather than try
    a pass with a bigger budget than this."""
    if splits is None:
        return inst.solve(rounds, time_limit)
    started = time.perf_counter()
    pending, budget = list(splits), RLIMIT_START
    while pending:
        if max_budget is not None and budget > max_budget:
            return SolveResult(Status.TIMEOUT, None, time.perf_counter() - started, "work budget")
        still = []
        for split in pending:
            left = None if time_limit is None else time_limit - (time.perf_counter() - started)
            if left is not None and left <= 0.01:
                return SolveResult(Status.TIMEOUT, None, time.perf_counter() - started, "time limit")
            result = inst.solve_split(split, left, rlimit=budget)
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


def check_schedule(schedule: Schedule) -> None:
    violations = verify(schedule)
    if violations:
        raise RuntimeError(f"solver returned an invalid schedule (a bug in synth): {violations[0]}")
