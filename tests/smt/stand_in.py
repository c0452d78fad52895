"""A stand-in SMT session for the frontier walk's tests: answers from a rule, no solver."""

from types import SimpleNamespace

from synth.core.schedule import SolveResult, Status
from synth.smt.encoding import SmtOptions


class FeasibleSession:
    """A stand-in session: (S, R, C) is feasible iff R >= max(S, 2C + 1); ``interrupt_at``: the
    solver call that raises KeyboardInterrupt (Ctrl-C)."""

    ANY_STEPS_FROM = 2
    name = "allgather"
    direct = False
    steps_split_freely = True
    options = SmtOptions()

    def __init__(self, interrupt_at: int | None = None):
        from synth.core.generators import uring

        self.original = uring(2)
        self.interrupt_at, self.calls = interrupt_at, 0

    def solve(self, S, R, C, time_limit, by_splits=True):
        self.calls += 1
        if self.calls == self.interrupt_at:
            raise KeyboardInterrupt
        if R >= max(S, 2 * C + 1):
            return SolveResult(Status.SOLVED, SimpleNamespace(total_rounds=max(S, 2 * C + 1)), 0.0)
        return SolveResult(Status.INFEASIBLE, None, 0.0)

    def fewer_steps(self, schedule, time_limit):
        return SolveResult(Status.TIMEOUT, None, 0.0)

    def rounds_floor(self, S, C):
        return S

    def rounds_floor_any_steps(self, C):
        return 0

    def collective(self, chunks):
        return SimpleNamespace(chunks=2 * chunks)
