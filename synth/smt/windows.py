"""One step fewer at the same rounds: re-solve a window of a schedule's steps (a large-
neighbourhood search on the SMT encoding).

Every send outside a window of ``width`` consecutive steps is kept (as assumptions on an
encoding with one step fewer: the steps after the window move up by one, with their rounds);
the window's data must move in ``width - 1`` steps, with whatever sends and rounds the solver
picks, within the same total. The solver may add sends outside the window too. Every window
is an exact question about that neighbourhood, and each answer is cheap where the whole
budget is not: on mi250 allgather with 7 chunks, the restricted search did not find 10 steps
and 17 rounds in 13 min, while windows of 5 steps took a 12-step schedule to 11, 10 and 9
steps in 6-35 s a step. A "no" for every window proves nothing about the budget.

>>> from synth.core.generators import uring
>>> from synth.core.collectives import allgather
>>> from synth.smt.encoding import SmtInstance
>>> slow = SmtInstance(uring(4), allgather(4), steps=4, max_rounds=4).solve_split((1, 1, 1, 1)).schedule
>>> shorter = fewer_steps(SmtInstance(uring(4), allgather(4), steps=3, max_rounds=4), slow, width=2,
...                       time_limit=10)
>>> shorter.status.value, len(shorter.schedule.steps) if shorter.schedule else None
('solved', 3)
"""

from __future__ import annotations

from synth.core.schedule import Schedule, SolveResult, Status
from synth.smt.clock import Clock
from synth.smt.encoding import WORK_START, SmtInstance

WIDTH = 5  # steps re-solved as WIDTH - 1 (mi250 allgather: 3 never fit, 7 timed out, 5 took 12 -> 9)


def window_assumptions(inst: SmtInstance, schedule: Schedule, start: int, width: int) -> list | None:
    """Literals that keep every send and step rounds of ``schedule`` outside steps start ..
    start + width - 1 (1-based) in ``inst`` (one step fewer; later steps move up by one).
    None when some kept send cannot happen that early (its chunk is too far away) or is not
    in the encoding (pruned, or not invariant under its symmetries)."""
    literals = [inst.total_literal(schedule.total_rounds)]
    for number, step in enumerate(schedule.steps, 1):
        if start <= number < start + width:
            continue
        moved = number if number < start else number - 1
        rounds = inst.step_rounds_literals(moved, step.rounds)
        if rounds is None:
            return None
        literals += rounds
        for send in step.sends:
            literal = inst.send_literal(send.chunk, send.src, send.dst, moved)
            if literal is None:
                return None
            literals.append(literal)
    return literals


def fewer_steps(inst: SmtInstance, schedule: Schedule, width: int = WIDTH,
                time_limit: float | None = None) -> SolveResult:
    """A schedule with one step fewer than ``schedule`` and no more rounds, from ``inst`` (its
    steps one fewer, its rounds at least the schedule's), or TIMEOUT: no window gave one (a
    window's "no" is about that neighbourhood only, never a proof about the budget).

    The windows go in passes: each open window gets WORK_START work seconds in the first, four
    times more in each next one; a window the solver proves impossible drops out."""
    clock = Clock(time_limit)
    if len(schedule.steps) != inst.steps + 1 or width < 2 or width > inst.steps:
        return SolveResult(Status.TIMEOUT, None, 0.0, "no window to re-solve")
    windows = {}
    for start in range(1, len(schedule.steps) - width + 2):
        literals = window_assumptions(inst, schedule, start, width)
        if literals is not None:
            windows[start] = literals
    budget = WORK_START
    while windows:
        for start, literals in list(windows.items()):
            if not clock.has(0.01):
                return SolveResult(Status.TIMEOUT, None, clock.elapsed(), "time limit")
            result = inst.check(literals, clock.left(), budget)
            if result.status == Status.SOLVED:
                return SolveResult(Status.SOLVED, result.schedule, clock.elapsed(),
                                   f"steps {start}..{start + width - 1} re-solved as {width - 1}")
            if result.status == Status.INFEASIBLE:
                del windows[start]
            elif result.status == Status.ERROR:
                return result
        budget *= 4
    return SolveResult(Status.TIMEOUT, None, clock.elapsed(),
                       "no window of the schedule fits in one step fewer")
