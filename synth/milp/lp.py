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
    rows, cols, vals = (np.asarray(a) for a in coo)
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    if len(rows) > 1:  # repeated (row, column) entries add up (HiGHS refuses duplicates)
        first = np.concatenate(([True], (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])))
        if not first.all():
            vals = np.add.reduceat(np.asarray(vals, dtype=float), np.flatnonzero(first))
            rows, cols = rows[first], cols[first]
    col_upper = np.asarray(col_upper, dtype=float)
    row_lower = np.asarray(row_lower, dtype=float)
    row_upper = np.asarray(row_upper, dtype=float)
    if solver == "cbc":
        return _solve_with_pulp(cost, col_upper, rows, cols, vals, row_lower, row_upper, time_limit)
    try:
        import highspy
    except ImportError:  # pragma: no cover - highspy is a dependency
        return _solve_with_pulp(cost, col_upper, rows, cols, vals, row_lower, row_upper, time_limit)
    starts = np.searchsorted(rows, np.arange(len(row_lower) + 1))
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(cost), len(row_lower)
    lp.col_cost_ = np.asarray(cost, dtype=float)
    lp.col_lower_ = np.zeros(len(cost))
    lp.col_upper_ = np.where(np.isinf(col_upper), inf, col_upper).astype(float)
    lp.row_lower_ = np.where(np.isinf(row_lower), -inf, row_lower).astype(float)
    lp.row_upper_ = np.where(np.isinf(row_upper), inf, row_upper).astype(float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = starts.astype(np.int32)
    lp.a_matrix_.index_ = cols.astype(np.int32)
    lp.a_matrix_.value_ = vals.astype(float)
    highs = _new_highs(highspy)
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("random_seed", 0)
    highs.setOptionValue("time_limit", float(time_limit))
    # interior point is far faster than simplex on the big, degenerate flow LPs
    highs.setOptionValue("solver", method or ("ipm" if len(cost) > 5000 else "simplex"))
    highs.passModel(lp)
    highs.run()
    if highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    x = np.asarray(highs.getSolution().col_value, dtype=float)
    return float(highs.getInfo().objective_function_value), x


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
    """The same LP through PuLP and CBC (``--solver cbc``), statuses mapped by synth.milp.solver."""
    import pulp

    from synth.milp.solver import MilpOptions, MilpStatus, solve

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
