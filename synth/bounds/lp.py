"""A sparse LP solved by HiGHS (highspy), or by PuLP/CBC on request: the LP layer the bounds and the router share.

Solver objects never leave this module; callers pass numpy arrays and get numbers back.
``LpRows`` collects constraint rows in COO form block by block.

>>> rows = LpRows()
>>> rows.add([0], [0], [1.0], [1.0], [np.inf])
>>> round(solve_lp([1.0], [np.inf], rows.arrays()[:3], *rows.arrays()[3:]), 6)
1.0
"""

from __future__ import annotations

import math
import os

import numpy as np

LP_SECONDS = 10.0
_quiet_done = False


class LpRows:
    """Constraint rows in COO form, appended block by block."""

    def __init__(self) -> None:
        self.count = 0
        self.parts: list[tuple[np.ndarray, ...]] = []

    def add(self, rows, cols, vals, lower, upper) -> None:
        self.parts.append((np.asarray(rows) + self.count, cols, vals, lower, upper))
        self.count += len(lower)

    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(np.concatenate([part[i] for part in self.parts]) for i in range(5))


def solve_lp(cost, col_upper, coo, row_lower, row_upper, time_limit: float = LP_SECONDS) -> float | None:
    """Minimise cost.x over 0 <= x <= col_upper, row_lower <= A x <= row_upper (A in COO).

    Returns the optimal objective, or None when the solver does not report optimality (a
    timeout included: callers then fall back to a weaker bound, never to a guess).
    """
    solution = solve_lp_solution(cost, col_upper, coo, row_lower, row_upper, time_limit)
    return None if solution is None else solution[0]


def solve_lp_solution(cost, col_upper, coo, row_lower, row_upper, time_limit: float = LP_SECONDS,
                      solver: str = "highs", method: str | None = None) -> tuple[float, np.ndarray] | None:
    """Like ``solve_lp`` but returns (objective, x); ``solver`` is "highs" or "cbc" (through PuLP);
    ``method`` picks HiGHS's algorithm ("simplex", "ipm"; default: ipm for big LPs).

    >>> obj, x = solve_lp_solution([-1.0, -2.0], [1.0, 1.0], ([0, 0], [0, 1], [1.0, 1.0]), [-np.inf], [1.0])
    >>> round(obj, 6), [abs(round(float(v), 6)) for v in x]
    (-2.0, [0.0, 1.0])
    """
    if solver == "cbc":
        rows, cols, vals, col_upper, row_lower, row_upper = _canonical(coo, col_upper, row_lower, row_upper)
        return _solve_with_pulp(cost, col_upper, rows, cols, vals, row_lower, row_upper, time_limit)
    highs = _run_highs(cost, None, col_upper, coo, row_lower, row_upper, time_limit, method)
    if highs is None:
        return None
    x = np.asarray(highs.getSolution().col_value, dtype=float)
    return float(highs.getInfo().objective_function_value), x


def solve_lp_with_duals(cost, col_upper, coo, row_lower, row_upper, time_limit: float = LP_SECONDS,
                        col_lower=None) -> tuple[float, np.ndarray, np.ndarray] | None:
    """(objective, row duals, column values) of the LP, HiGHS's sign convention (a <= row of a
    minimisation that binds has a dual <= 0); None unless optimal. ``col_lower`` defaults to zeros.

    >>> obj, duals, x = solve_lp_with_duals([1.0], [np.inf], ([0], [0], [1.0]), [2.0], [np.inf])
    >>> round(obj, 6), round(float(duals[0]), 6), round(float(x[0]), 6)
    (2.0, 1.0, 2.0)
    """
    highs = _run_highs(cost, col_lower, col_upper, coo, row_lower, row_upper, time_limit, None)
    if highs is None:
        return None
    solution = highs.getSolution()
    return (float(highs.getInfo().objective_function_value), np.asarray(solution.row_dual, dtype=float),
            np.asarray(solution.col_value, dtype=float))


def solve_mip_bound(cost, col_lower, col_upper, coo, row_lower, row_upper, integer_columns,
                    time_limit: float = LP_SECONDS) -> float | None:
    """A proven lower bound on min cost.x with the given columns integral: HiGHS's MIP dual
    bound (the optimum when it finishes, still a bound when time runs out); None when the
    model is infeasible or HiGHS reports no bound.

    >>> round(solve_mip_bound([1.0], [0.0], [np.inf], ([0], [0], [2.0]), [3.0], [np.inf], [0]), 6)
    2.0
    """
    import highspy

    integrality = np.zeros(len(cost), dtype=bool)
    integrality[list(integer_columns)] = True
    highs = _run_highs(cost, col_lower, col_upper, coo, row_lower, row_upper, time_limit, None,
                       integrality=integrality, require_optimal=False)
    status = highs.getModelStatus()
    if status == highspy.HighsModelStatus.kOptimal:
        return float(highs.getInfo().mip_dual_bound)
    if status == highspy.HighsModelStatus.kTimeLimit:
        bound = float(highs.getInfo().mip_dual_bound)
        return bound if math.isfinite(bound) else None
    return None


def solve_mip_solution(cost, col_upper, coo, row_lower, row_upper, integer_columns, time_limit: float,
                       gap: float) -> tuple[float, np.ndarray, bool] | None:
    """(objective, x, finished) of the best solution HiGHS finds with the given columns integral,
    stopping once it is within relative ``gap`` of the dual bound (``finished``) or at the time
    limit (not finished); None when it has none (infeasible, or no solution in time).

    >>> obj, x, done = solve_mip_solution([-1.0], [np.inf], ([0], [0], [2.0]), [-np.inf], [3.0], [0], 10, 0.0)
    >>> round(obj, 6), round(float(x[0]), 6), done
    (-1.0, 1.0, True)
    """
    import highspy

    integrality = np.zeros(len(cost), dtype=bool)
    integrality[list(integer_columns)] = True
    highs = _run_highs(cost, None, col_upper, coo, row_lower, row_upper, time_limit, None,
                       integrality=integrality, require_optimal=False, mip_gap=gap)
    status = highs.getModelStatus()
    has_solution = highs.getInfo().primal_solution_status == 2  # kSolutionStatusFeasible
    if status not in (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kTimeLimit) or not has_solution:
        return None
    x = np.asarray(highs.getSolution().col_value, dtype=float)
    return float(highs.getInfo().objective_function_value), x, status == highspy.HighsModelStatus.kOptimal


def _canonical(coo, col_upper, row_lower, row_upper):
    """COO sorted by (row, column) with repeated entries added up (HiGHS refuses duplicates)."""
    rows, cols, vals = (np.asarray(a) for a in coo)
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    if len(rows) > 1:
        first = np.concatenate(([True], (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])))
        if not first.all():
            vals = np.add.reduceat(np.asarray(vals, dtype=float), np.flatnonzero(first))
            rows, cols = rows[first], cols[first]
    return (rows, cols, vals, np.asarray(col_upper, dtype=float), np.asarray(row_lower, dtype=float),
            np.asarray(row_upper, dtype=float))


def _run_highs(cost, col_lower, col_upper, coo, row_lower, row_upper, time_limit, method,
               integrality=None, require_optimal: bool = True, mip_gap: float | None = None):
    """A solved Highs object, or None unless the status is optimal (``require_optimal``).
    ``integrality``: a boolean per column (a MIP; its gap is closed to less than one unit, the
    objective being integral where it is used; with ``mip_gap``, to that relative gap instead)."""
    rows, cols, vals, col_upper, row_lower, row_upper = _canonical(coo, col_upper, row_lower, row_upper)
    import highspy

    starts = np.searchsorted(rows, np.arange(len(row_lower) + 1))
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(cost), len(row_lower)
    lp.col_cost_ = np.asarray(cost, dtype=float)
    lp.col_lower_ = np.zeros(len(cost)) if col_lower is None else np.asarray(col_lower, dtype=float)
    lp.col_upper_ = np.where(np.isinf(col_upper), inf, col_upper).astype(float)
    lp.row_lower_ = np.where(np.isinf(row_lower), -inf, row_lower).astype(float)
    lp.row_upper_ = np.where(np.isinf(row_upper), inf, row_upper).astype(float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = starts.astype(np.int32)
    lp.a_matrix_.index_ = cols.astype(np.int32)
    lp.a_matrix_.value_ = vals.astype(float)
    if integrality is not None:
        lp.integrality_ = [highspy.HighsVarType.kInteger if flag else highspy.HighsVarType.kContinuous
                           for flag in integrality]
    highs = _new_highs(highspy)
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("random_seed", 0)
    highs.setOptionValue("time_limit", float(time_limit))
    if integrality is None:
        # interior point is far faster than simplex on the big, degenerate flow LPs
        highs.setOptionValue("solver", method or ("ipm" if len(cost) > 5000 else "simplex"))
    elif mip_gap is None:
        highs.setOptionValue("mip_rel_gap", 0.0)
        highs.setOptionValue("mip_abs_gap", 0.5)
    else:
        highs.setOptionValue("mip_rel_gap", float(mip_gap))
        highs.setOptionValue("mip_abs_gap", 0.0)
    highs.passModel(lp)
    highs.run()
    if require_optimal and highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return highs


def _new_highs(highspy):
    """A Highs object; the first one in a process prints a banner on fd 1, which we hide."""
    global _quiet_done
    if _quiet_done:
        return highspy.Highs()
    saved = os.dup(1)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
        return highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        _quiet_done = True


def _solve_with_pulp(cost, col_upper, rows, cols, vals, row_lower, row_upper, time_limit=LP_SECONDS):
    """The same LP through PuLP and CBC (``--solver cbc``), statuses mapped by synth.bounds.solver."""
    import pulp

    from synth.bounds.solver import MilpOptions, MilpStatus, solve

    prob = pulp.LpProblem("lp", pulp.LpMinimize)
    xs = [prob.add_variable(f"x{i}", lowBound=0, upBound=None if math.isinf(u) else float(u))
          for i, u in enumerate(col_upper)]
    prob += pulp.LpAffineExpression([(x, float(c)) for c, x in zip(cost, xs) if c])
    exprs: list[list] = [[] for _ in row_lower]
    for r, c, v in zip(rows, cols, vals):
        exprs[r].append((xs[c], float(v)))
    for i, terms in enumerate(exprs):
        expr = pulp.LpAffineExpression(terms)
        if row_lower[i] == row_upper[i]:
            prob += expr == float(row_lower[i])
            continue
        if not math.isinf(row_lower[i]):
            prob += expr >= float(row_lower[i])
        if not math.isinf(row_upper[i]):
            prob += expr <= float(row_upper[i])
    outcome = solve(prob, MilpOptions(solver="cbc", time_limit=time_limit))
    if outcome.status != MilpStatus.SOLVED:
        return None
    x = np.array([x.value() or 0.0 for x in xs], dtype=float)
    return float(outcome.objective or 0.0), x
