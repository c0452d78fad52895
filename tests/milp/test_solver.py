"""The MILP solver layer: one conformance suite, run against every solver PuLP has here."""

from __future__ import annotations

import itertools
import random

import pulp
import pytest

from synth.bounds import solver as milp
from synth.bounds.solver import MilpOptions, MilpStatus, classify, solve, value
from synth.core.errors import InputError

_HERE = milp.available_solvers()
SOLVER = pytest.mark.parametrize(  # every test below runs on every solver PuLP has here
    "solver",
    [
        pytest.param(name, marks=pytest.mark.skipif(name not in _HERE, reason=f"no {name} here"))
        for name in milp.SOLVERS
    ],
)


def small_milp():
    """max x + 2y + 3z, 2x + 3y + 4z <= 12, x + z <= 3, integers in 0..5 (optimum: brute force)."""
    prob = pulp.LpProblem("small", pulp.LpMaximize)
    x, y, z = (prob.add_variable(n, 0, 5, cat="Integer") for n in "xyz")
    prob += x + 2 * y + 3 * z
    prob += 2 * x + 3 * y + 4 * z <= 12
    prob += x + z <= 3
    return prob, (x, y, z)


def brute_force_optimum():
    best = None
    for x, y, z in itertools.product(range(6), repeat=3):
        if 2 * x + 3 * y + 4 * z <= 12 and x + z <= 3:
            best = max(best or 0, x + 2 * y + 3 * z)
    return best


def market_split(m: int, n: int, seed: int, slack: bool):
    """Cornuejols-Dawande market split: sum_j a_ij x_j = floor(sum_j a_ij / 2), a_ij in 0..99.

    Tiny, yet branch and bound needs a huge tree. With ``slack`` the rows get +/- slacks whose sum
    is minimised: x = 0 is feasible, so solvers find incumbents at once but cannot prove optimality.
    """
    rng = random.Random(seed)
    a = [[rng.randrange(100) for _ in range(n)] for _ in range(m)]
    prob = pulp.LpProblem("market_split", pulp.LpMinimize)
    x = [prob.add_variable(f"x{j}", cat="Binary") for j in range(n)]
    slacks = [prob.add_variable(f"s{i}{pm}", 0) for i in range(m) for pm in "pm"] if slack else []
    prob += pulp.lpSum(slacks) if slack else pulp.lpSum(0 * v for v in x)
    for i in range(m):
        row = pulp.lpSum(a[i][j] * x[j] for j in range(n))
        if slack:
            row += slacks[2 * i] - slacks[2 * i + 1]
        prob += row == sum(a[i]) // 2, f"row{i}"
    return prob


def check_values(prob):
    """Independent check of an incumbent: bounds, integrality, every constraint."""
    for var in prob.variables():
        x = var.value()
        assert x is not None
        assert var.lowBound is None or x >= var.lowBound - 1e-6
        assert var.upBound is None or x <= var.upBound + 1e-6
        if var.cat == pulp.LpInteger:
            assert value(var) == round(x) and abs(x - round(x)) <= 1e-6
    for con in prob.constraints():
        lhs = sum(coef * value(var) for var, coef in con.items()) + con.constant
        if con.sense == pulp.LpConstraintEQ:
            assert abs(lhs) <= 1e-6, con.name
        else:
            assert lhs * con.sense >= -1e-6, con.name


@SOLVER
@pytest.mark.parametrize("threads", [None, 1, 2])
def test_small_milp_optimum(solver, threads):
    prob, xs = small_milp()
    out = solve(prob, MilpOptions(solver=solver, threads=threads, time_limit=120))  # a limit only a hang meets
    assert out.status is MilpStatus.SOLVED and out.proven_optimal and out.gap == 0.0
    assert out.has_incumbent and out.solver == solver
    assert out.objective == brute_force_optimum()
    assert all(abs(v.value() - round(v.value())) <= 1e-6 for v in xs)
    assert value(xs[0]) + 2 * value(xs[1]) + 3 * value(xs[2]) == out.objective
    check_values(prob)


@SOLVER
def test_same_seed_same_answer(solver):
    answers = []
    for _ in range(2):
        prob = market_split(2, 10, 0, slack=True)
        solve(prob, MilpOptions(solver=solver, seed=7, time_limit=10))
        answers.append({v.name: value(v) for v in prob.variables()})
    assert answers[0] == answers[1]


def infeasible_mip():
    prob = pulp.LpProblem("parity", pulp.LpMinimize)
    x, y = (prob.add_variable(n, 0, 10, cat="Integer") for n in "xy")
    prob += x + y
    prob += 2 * x + 2 * y == 3  # LP-feasible, integer-infeasible
    return prob


def infeasible_lp():
    prob = pulp.LpProblem("cap", pulp.LpMinimize)
    x, y = (prob.add_variable(n, 0, 10) for n in "xy")
    prob += x + y
    prob += x + y >= 30
    return prob


def infeasible_with_free_direction():
    """HiGHS's MIP presolve calls this 'infeasible or unbounded'; only a second run can tell."""
    prob = pulp.LpProblem("free", pulp.LpMinimize)
    x = prob.add_variable("x", cat="Integer")
    y = prob.add_variable("y", 0, 5, cat="Integer")
    prob += x
    prob += x <= 3
    prob += 2 * y == 3
    return prob


@SOLVER
@pytest.mark.parametrize("model", [infeasible_mip, infeasible_lp, infeasible_with_free_direction])
def test_infeasible(solver, model):
    prob = model()
    out = solve(prob, MilpOptions(solver=solver))
    if solver == "cbc" and model is infeasible_with_free_direction:
        # CBC answers from the unbounded LP relaxation: UNBOUNDED, which proves nothing (documented)
        assert out.status is MilpStatus.UNBOUNDED
    else:
        assert out.status is MilpStatus.INFEASIBLE
    assert not out.has_incumbent and out.objective is None and not out.proven_optimal
    assert all(v.value() is None for v in prob.variables())


@SOLVER
@pytest.mark.parametrize("cat", ["Continuous", "Integer"])
def test_unbounded(solver, cat):
    prob = pulp.LpProblem("unbounded", pulp.LpMaximize)
    x, y = (prob.add_variable(n, 0, cat=cat) for n in "xy")
    prob += x + y
    prob += x - y <= 1
    out = solve(prob, MilpOptions(solver=solver))
    assert out.status is MilpStatus.UNBOUNDED  # HiGHS says "infeasible or unbounded" for the MIP
    assert not out.has_incumbent and out.objective is None


@SOLVER
@pytest.mark.parametrize("slack", [True, False], ids=["incumbent-likely", "no-incumbent-likely"])
def test_time_limit_is_timeout_never_infeasible(solver, slack):
    """Market split 4 x 40 is far out of reach in 0.05 s for both solvers (checked over 30 seeds,
    also with every CPU busy: always TIMEOUT; the slack form always had an incumbent, the pure one
    never). Whether an incumbent comes back is timing, so both branches are checked."""
    prob = market_split(4, 40, seed=1, slack=slack)
    out = solve(prob, MilpOptions(solver=solver, time_limit=0.05))
    assert out.status is MilpStatus.TIMEOUT, out.message
    assert not out.proven_optimal and out.gap is None
    if out.has_incumbent:
        check_values(prob)
        assert out.objective == pytest.approx(pulp.value(prob.objective))
    else:
        assert out.objective is None
        assert all(v.value() is None for v in prob.variables())


@SOLVER
def test_gap_stop_is_solved_but_not_proven(solver):
    rng = random.Random(3)
    weights = [rng.randint(10, 1000) for _ in range(25)]
    prob = pulp.LpProblem("knapsack", pulp.LpMaximize)
    xs = [prob.add_variable(f"x{j}", cat="Binary") for j in range(len(weights))]
    prob += pulp.lpSum((w + rng.randint(-5, 5)) * x for w, x in zip(weights, xs))
    prob += pulp.lpSum(w * x for w, x in zip(weights, xs)) <= sum(weights) // 2
    exact = solve(prob, MilpOptions(solver=solver, time_limit=10))
    assert exact.status is MilpStatus.SOLVED and exact.proven_optimal
    out = solve(prob, MilpOptions(solver=solver, gap=0.05, time_limit=10))
    assert out.status is MilpStatus.SOLVED and not out.proven_optimal and out.gap == 0.05
    assert exact.objective * 0.95 - 1e-6 <= out.objective <= exact.objective
    check_values(prob)


@SOLVER
@pytest.mark.parametrize("verbose", [False, True])
def test_solver_output_never_on_stdout(solver, verbose, capfd):
    prob, _ = small_milp()
    solve(prob, MilpOptions(solver=solver, verbose=verbose))
    out, err = capfd.readouterr()
    assert out == ""
    assert bool(err.strip()) == verbose


@SOLVER
@pytest.mark.parametrize(
    "pair, expected", [((1, 1), MilpStatus.ERROR), ((1, 2), MilpStatus.TIMEOUT)], ids=["sol", "inc"]
)
def test_reported_values_are_checked(solver, pair, expected, monkeypatch):
    """A solver that claims a solution with broken values is not believed (CBC can do this)."""

    def lying_solve(self, solver=None):
        for var in self.variables():
            var.varValue = 5.0  # breaks 2x + 3y + 4z <= 12
        self.assignStatus(*pair)
        return pair[0]

    prob, _ = small_milp()
    monkeypatch.setattr(pulp.LpProblem, "solve", lying_solve)
    out = solve(prob, MilpOptions(solver=solver))
    assert out.status is expected and not out.has_incumbent and out.objective is None
    assert "values rejected" in out.message
    assert all(v.value() is None for v in prob.variables())


def test_solver_failure_is_an_error_outcome(monkeypatch):
    def failing_solve(self, solver=None):
        raise pulp.PulpSolverError("Pulp: Error while executing cbc")

    prob, _ = small_milp()
    monkeypatch.setattr(pulp.LpProblem, "solve", failing_solve)
    out = solve(prob, MilpOptions(solver=milp.available_solvers()[0]))
    assert out.status is MilpStatus.ERROR and not out.has_incumbent
    assert "Error while executing cbc" in out.message and "\n" not in out.message


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(solver="gurobi"), "known: highs, cbc"),
        (dict(time_limit=0), "time limit"),
        (dict(time_limit=-1.0), "time limit"),
        (dict(time_limit=float("nan")), "time limit"),
        (dict(gap=-0.1), "gap"),
        (dict(threads=0), "threads"),
        (dict(threads=1.5), "threads"),
        (dict(seed=-1), "seed"),
        (dict(verbose="yes"), "verbose"),
    ],
)
def test_bad_options(kwargs, words):
    with pytest.raises(InputError, match=words) as info:
        MilpOptions(**kwargs)
    assert "\n" not in str(info.value)


def test_unavailable_solver_names_the_available_ones(monkeypatch):
    monkeypatch.setattr(milp, "available_solvers", lambda: ("cbc",))
    with pytest.raises(InputError, match="'highs' is not available here; available: cbc"):
        MilpOptions(solver="highs")


def test_status_table_covers_every_pulp_constant():
    """A new PuLP constant must get a decision here; an unknown pair is never a proof."""
    assert {s for s, _ in milp.STATUS_TABLE} == set(pulp.constants.LpStatus)
    assert {q for _, q in milp.STATUS_TABLE} == set(pulp.constants.LpSolution)
    for status, sol in itertools.product(pulp.constants.LpStatus, pulp.constants.LpSolution):
        got, incumbent = classify(status, sol)
        if got is MilpStatus.INFEASIBLE:
            assert status == pulp.LpStatusInfeasible and not incumbent
        if got is MilpStatus.SOLVED:
            assert (status, sol) == (pulp.LpStatusOptimal, pulp.LpSolutionOptimal) and incumbent
        if incumbent:
            assert got in (MilpStatus.SOLVED, MilpStatus.TIMEOUT)
    stopped_with_incumbent = (pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible)
    assert classify(*stopped_with_incumbent) == (MilpStatus.TIMEOUT, True)
    stopped_without = (pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound)
    assert classify(*stopped_without) == (MilpStatus.TIMEOUT, False)
