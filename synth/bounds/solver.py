"""The MILP backend's solver layer: run a ``pulp.LpProblem`` and say what the run proved.

Solvers (open source only): ``"highs"`` is ``pulp.HiGHS`` (highspy, in process) and ``"cbc"``
``pulp.PULP_CBC_CMD`` (the CBC binary bundled with PuLP). ``solve`` leaves the variables set,
so the caller reads them with ``value(var)``:

>>> import pulp
>>> prob = pulp.LpProblem("demo", pulp.LpMaximize)
>>> x = prob.add_variable("x", 0, 10, cat="Integer")
>>> y = prob.add_variable("y", 0, 10, cat="Integer")
>>> prob += x + 2 * y
>>> prob += 2 * x + 3 * y <= 12
>>> out = solve(prob, MilpOptions(solver="highs"))
>>> out.status.name, out.objective, out.proven_optimal, value(x), value(y)
('SOLVED', 8.0, True, 0.0, 4.0)

Status table: PuLP reports ``(prob.status, prob.sol_status)``; ``STATUS_TABLE`` maps the pair.

  status      sol_status          -> MilpStatus  incumbent  who says it (PuLP 3.3.2's source)
  Optimal     Optimal                SOLVED      yes        HiGHS kOptimal; CBC "Optimal ..." (also
                                                            "Optimal (within gap tolerance)")
  Optimal     Solution Found         TIMEOUT     yes        HiGHS kTimeLimit / kIterationLimit /
                                                            kInterrupt / kObjectiveBound|Target
                                                            with a finite objective; CBC "Stopped
                                                            on time - objective value X"
  Not Solved  No Solution Found      TIMEOUT     no         HiGHS kTimeLimit / kIterationLimit with
                                                            objective +inf; CBC "Stopped on time (no
                                                            integer solution - continuous used)"
  Not Solved  No Solution Exists     TIMEOUT     no         PuLP's default pairing for Not Solved
  Infeasible  No Solution Exists     INFEASIBLE  no         HiGHS kInfeasible; CBC "Infeasible"
  Infeasible  No Solution Found      INFEASIBLE  no         CBC "Integer infeasible"
  Unbounded   Solution is Unbounded  UNBOUNDED   no         HiGHS kUnbounded; CBC "Unbounded"
  Undefined   No Solution Found      ERROR       no         CBC: a first word PuLP does not know
  Undefined   No Solution Exists     ERROR       no         PuLP's default pairing for Undefined
  any other pair                     ERROR       no

Then, because PuLP flattens what the solvers say:
- HiGHS: PuLP maps kUnboundedOrInfeasible (what HiGHS's MIP presolve says of an unbounded MIP)
  to Infeasible. That is no proof, so the model is run once more with a zero objective (in the
  time left): infeasible -> INFEASIBLE, feasible -> UNBOUNDED, stopped -> TIMEOUT. PuLP also
  maps HiGHS's error statuses (kNotset, kSolveError, ...) to Not Solved: those become ERROR, so
  TIMEOUT from HiGHS always means a limit was hit.
- Any claimed solution is checked against bounds, integrality and constraints (tolerance 1e-6,
  relative): CBC's "Stopped on iterations - objective value" and HiGHS's simplex iterate at an LP
  time limit can be infeasible. A failed SOLVED becomes ERROR, a failed incumbent a TIMEOUT
  without one.
- Without an incumbent every variable is reset to None: a timeout never leaves an LP relaxation
  behind to be read as a schedule.

UNBOUNDED is never a proof either way: CBC says it when the LP relaxation is unbounded even if
the MIP is infeasible. synth's models are bounded, so it means a modelling bug. Only INFEASIBLE
may prune a search (DESIGN.md: timeouts are not proofs).

Gap: with ``gap=None`` (or 0) both solvers must prove optimality (HiGHS's default 1e-4 relative
gap is set to 0), and SOLVED comes with ``proven_optimal=True, gap=0.0``. With ``gap=g > 0`` a
solver may stop once its incumbent is within g of the bound, and reports that as optimal; SOLVED
then comes with ``proven_optimal=False, gap=g`` (a guarantee, not a measurement: PuLP does not
tell whether the gap was closed anyway).

PuLP 3.3 deprecates PULP_CBC_CMD (its warning is silenced here); once PuLP drops it, "cbc" is
simply reported unavailable.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

import pulp
from pulp import constants as C

from synth.core.errors import InputError
from synth.core.schedule import Status

SOLVERS = MappingProxyType({"highs": "HiGHS", "cbc": "PULP_CBC_CMD"})  # our name -> pulp class
_TOL = 1e-6
_MAX_SEED = 2**31 - 1


class MilpStatus(Enum):
    SOLVED = "solved"  # optimal, or within the requested gap
    INFEASIBLE = "infeasible"  # proven: no solution exists
    UNBOUNDED = "unbounded"  # no finite optimum reported: a modelling bug for synth
    TIMEOUT = "timeout"  # stopped at a limit; maybe an incumbent, nothing proven
    ERROR = "error"  # the solver failed, or said something we cannot trust


_S = MilpStatus


def as_status(status: MilpStatus) -> Status:
    """The project's one status vocabulary for a solver status (unbounded: an error for synth)."""
    return Status.ERROR if status is MilpStatus.UNBOUNDED else Status(status.value)


STATUS_TABLE = MappingProxyType({  # (pulp status, pulp sol_status) -> (status, has incumbent)
    (C.LpStatusOptimal, C.LpSolutionOptimal): (_S.SOLVED, True),
    (C.LpStatusOptimal, C.LpSolutionIntegerFeasible): (_S.TIMEOUT, True),
    (C.LpStatusNotSolved, C.LpSolutionNoSolutionFound): (_S.TIMEOUT, False),
    (C.LpStatusNotSolved, C.LpSolutionInfeasible): (_S.TIMEOUT, False),
    (C.LpStatusInfeasible, C.LpSolutionInfeasible): (_S.INFEASIBLE, False),
    (C.LpStatusInfeasible, C.LpSolutionNoSolutionFound): (_S.INFEASIBLE, False),
    (C.LpStatusUnbounded, C.LpSolutionUnbounded): (_S.UNBOUNDED, False),
    (C.LpStatusUndefined, C.LpSolutionNoSolutionFound): (_S.ERROR, False),
    (C.LpStatusUndefined, C.LpSolutionInfeasible): (_S.ERROR, False),
})
_SUMMARY = MappingProxyType({
    (_S.SOLVED, True): "optimal",
    (_S.TIMEOUT, True): "stopped at a limit with an incumbent, not proven optimal",
    (_S.TIMEOUT, False): "stopped at a limit without a solution: unknown, not infeasible",
    (_S.INFEASIBLE, False): "infeasible",
    (_S.UNBOUNDED, False): "unbounded: no finite optimum, check the model",
    (_S.ERROR, False): "solver error",
})
_HIGHS_LIMITS = frozenset(
    "kTimeLimit kIterationLimit kInterrupt kHighsInterrupt kSolutionLimit kMemoryLimit "
    "kObjectiveBound kObjectiveTarget".split()
)


def classify(status: int, sol_status: int) -> tuple[MilpStatus, bool]:
    """``STATUS_TABLE`` with ERROR for pairs it does not list.

    >>> classify(pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible)
    (<MilpStatus.TIMEOUT: 'timeout'>, True)
    """
    return STATUS_TABLE.get((status, sol_status), (_S.ERROR, False))


def available_solvers() -> tuple[str, ...]:
    """Our names of the solvers PuLP can run here, e.g. ``('highs', 'cbc')``."""
    return tuple(name for name in SOLVERS if _solver(name, msg=False).available())


@dataclass(frozen=True)
class MilpOptions:
    """How to run the solver; checked on construction (InputError, one line).

    ``seed`` 0 keeps each solver's own fixed default seed; ``verbose`` sends the solver's log to
    stderr (never stdout, which carries data).
    """

    solver: str = "highs"
    time_limit: float | None = 60.0  # seconds
    gap: float | None = None  # relative MIP gap; None: prove optimality
    threads: int | None = None
    seed: int = 0
    verbose: bool = False

    def __post_init__(self):
        if self.solver not in SOLVERS:
            known = ", ".join(SOLVERS)
            raise InputError(f"unknown MILP solver {self.solver!r}; known: {known}")
        if self.time_limit is not None and not (_number(self.time_limit) and self.time_limit > 0):
            raise InputError(f"time limit must be > 0 seconds, got {self.time_limit!r}")
        if self.gap is not None and not (_number(self.gap) and self.gap >= 0):
            raise InputError(f"MIP gap must be a number >= 0, got {self.gap!r}")
        if self.threads is not None and not (_integer(self.threads) and self.threads >= 1):
            raise InputError(f"threads must be an integer >= 1, got {self.threads!r}")
        if not (_integer(self.seed) and 0 <= self.seed <= _MAX_SEED):
            raise InputError(f"seed must be an integer in 0..{_MAX_SEED}, got {self.seed!r}")
        if not isinstance(self.verbose, bool):
            raise InputError(f"verbose must be true or false, got {self.verbose!r}")
        available = available_solvers()
        if self.solver not in available:
            raise InputError(
                f"MILP solver {self.solver!r} is not available here; available: "
                f"{', '.join(available) or 'none (install highspy)'}"
            )


@dataclass(frozen=True)
class MilpOutcome:
    """What one solve proved. ``gap``: 0.0 proven optimal, g within gap g, None unknown."""

    status: MilpStatus
    objective: float | None
    seconds: float
    solver: str
    has_incumbent: bool
    proven_optimal: bool
    gap: float | None
    message: str


def value(var) -> float:
    """A variable's value after ``solve``: near-integers rounded, no value read as 0.0.

    >>> prob = pulp.LpProblem("p")
    >>> v = prob.add_variable("v")
    >>> v.varValue = 2.9999999
    >>> value(v), value(prob.add_variable("w"))
    (3.0, 0.0)
    """
    x = var.value()
    if x is None:
        return 0.0
    r = round(x)
    return float(r) if abs(x - r) <= _TOL else float(x)


def solve(problem: pulp.LpProblem, options: MilpOptions | None = None) -> MilpOutcome:
    """Run ``problem`` under ``options``; the variables keep the incumbent's values, if any."""
    options = options or MilpOptions()
    solver = _solver(options.solver, **_solver_args(options))
    start = time.perf_counter()
    with _solver_output(options.verbose):
        status, incumbent, note = _run(problem, solver, options, start)
    seconds = time.perf_counter() - start
    if incumbent and (bad := _violation(problem)):
        status = _S.ERROR if status is _S.SOLVED else status
        incumbent, note = False, "; ".join(filter(None, [note, f"values rejected: {bad}"]))
    if not incumbent:
        for var in problem.variables():
            var.varValue = None
    proven = status is _S.SOLVED and not options.gap
    tail = f" [{note}]" if note else ""
    summary = _SUMMARY[status, incumbent] if status is not _S.SOLVED or proven else (
        f"within relative gap {options.gap:g}"
    )
    return MilpOutcome(
        status=status,
        objective=_objective(problem) if incumbent else None,
        seconds=seconds,
        solver=options.solver,
        has_incumbent=incumbent,
        proven_optimal=proven,
        gap=0.0 if proven else (options.gap if status is _S.SOLVED else None),
        message=f"{options.solver}: {summary} after {seconds:.2f} s{tail}",
    )


def _run(problem, solver, options, start) -> tuple[MilpStatus, bool, str]:
    """Solve, classify with the table, then refine (HiGHS): status, has incumbent, a note."""
    if options.solver == "highs" and options.threads is not None:
        import highspy  # threads is global in HiGHS: a new count needs a new scheduler

        highspy.Highs.resetGlobalScheduler(True)
    try:
        problem.solve(solver)
    except Exception as exc:  # the solver's failure is an outcome, not a crash of ours
        return _S.ERROR, False, f"{type(exc).__name__}: {exc}".splitlines()[0]
    status, incumbent = classify(problem.status, problem.sol_status)
    note = f"PuLP status {problem.status}/{problem.sol_status}" if status is _S.ERROR else ""
    if options.solver == "highs":
        return _refine_highs(problem, status, incumbent, note, options, start)
    return status, incumbent, note


def _solver_args(options: MilpOptions) -> dict:
    args = dict(msg=options.verbose, timeLimit=options.time_limit, threads=options.threads)
    args["gapRel"] = options.gap or 0.0
    if options.solver == "highs":
        args["random_seed"] = options.seed
    elif options.seed:  # CBC reads seed 0 as "time of day"; its defaults are fixed
        args["options"] = [f"randomSeed {options.seed}", f"randomCbcSeed {options.seed}"]
    return args


def _solver(name: str, **args):
    cls = getattr(pulp, SOLVERS[name], None)
    if cls is None:  # PuLP 4 drops PULP_CBC_CMD
        return _Missing()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "PULP_CBC_CMD is deprecated", DeprecationWarning)
        return cls(**args)


class _Missing:
    def available(self):
        return False


def _refine_highs(problem, status, incumbent, note, options, start):
    """Use HiGHS's own model status where PuLP's pair hides it (see the module docstring)."""
    import highspy

    model = getattr(problem, "solverModel", None)
    if model is None:
        return status, incumbent, note
    raw = model.getModelStatus()
    note = model.modelStatusToString(raw)
    if raw == highspy.HighsModelStatus.kUnboundedOrInfeasible:
        if options.time_limit is not None:
            left = options.time_limit - (time.perf_counter() - start)
            if left <= 0:
                return _S.TIMEOUT, False, f"{note}; no time left to tell which"
            model.setOptionValue("time_limit", left)
        n = model.getNumCol()
        model.changeColsCost(n, list(range(n)), [0.0] * n)
        model.run()
        raw = model.getModelStatus()
        if raw == highspy.HighsModelStatus.kInfeasible:
            return _S.INFEASIBLE, False, f"{note}; infeasible"
        feasible = highspy.SolutionStatus.kSolutionStatusFeasible
        if model.getInfo().primal_solution_status == feasible:
            return _S.UNBOUNDED, False, f"{note}; feasible, so unbounded"
        if raw.name in _HIGHS_LIMITS:
            return _S.TIMEOUT, False, f"{note}; stopped before telling which"
        return _S.ERROR, False, f"{note}; then {model.modelStatusToString(raw)}"
    if status is _S.TIMEOUT and raw.name not in _HIGHS_LIMITS:
        return _S.ERROR, False, note
    return status, incumbent, note


def _violation(problem) -> str | None:
    """The first bound, integrality or constraint the variable values break, or None."""
    for var in problem.variables():
        x = var.varValue
        if x is None:
            return f"{var.name} has no value"
        lo, hi = var.lowBound, var.upBound
        if (lo is not None and x < lo - _TOL * (1 + abs(lo))) or (
            hi is not None and x > hi + _TOL * (1 + abs(hi))
        ):
            return f"{var.name} = {x} outside [{lo}, {hi}]"
        if var.cat == C.LpInteger and abs(x - round(x)) > _TOL:
            return f"{var.name} = {x} is not an integer"
    for con in _constraints(problem):
        lhs = con.value()
        terms = (abs(a * v.varValue) for v, a in con.items())
        scale = 1 + abs(con.constant) + max(terms, default=0.0)
        slack = lhs * con.sense if con.sense != C.LpConstraintEQ else -abs(lhs)
        if slack < -_TOL * scale:
            return f"constraint {con.name} off by {abs(slack):.3g}"
    return None


def _objective(problem) -> float:
    """The objective at the values the caller reads (``value``), so it matches them exactly."""
    obj = problem.objective
    if obj is None:
        return 0.0
    return float(sum(coef * value(var) for var, coef in obj.items()) + obj.constant)


def _constraints(problem) -> list:
    cons = problem.constraints  # PuLP >= 3.3: call it for a list; before: a dict
    return cons() if callable(cons) else list(cons.values())


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _integer(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@contextmanager
def _solver_output(verbose: bool):
    """Send fd 1 (HiGHS's C output, CBC's child process) to stderr, or nowhere: stdout is data."""
    sys.stdout.flush()
    saved = os.dup(1)
    target = os.dup(2) if verbose else os.open(os.devnull, os.O_WRONLY)
    os.dup2(target, 1)
    try:
        yield
    finally:
        _flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(target)


def _flush_c_stdio() -> None:
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C runtime handle (Windows): nothing to flush
        pass
