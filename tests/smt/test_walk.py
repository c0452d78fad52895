"""The frontier walk's steps (``synth.smt.strategies._Walk``) on a stand-in session."""

from fractions import Fraction

from synth.core.schedule import SolveResult, Status
from tests.smt.stand_in import FeasibleSession as _Feasible


def _walk(session, monkeypatch, lines):
    from synth.smt import strategies

    monkeypatch.setattr(strategies, "_fewest_steps", lambda point: point)  # stand-in schedules
    return strategies._search(session, 2, Fraction(2), 2, 10.0, lines.append)


def test_the_walk_probes_then_sweeps_candidates_by_increasing_ratio(monkeypatch):
    """At 2 steps: the probe (2, 4, 1) gives the ceiling 3; then (2, 1), (4, 2) are infeasible and
    (5, 2) is the least; at 3 and 4 steps only (4, 2) is below 5/2 (infeasible); at 5 steps R >= 5
    leaves nothing below 5/2 with 2 chunks, so the walk stops after 4."""
    lines: list[str] = []
    frontier = _walk(_Feasible(), monkeypatch, lines)
    assert [(a.steps, a.rounds, a.chunks, a.status.value) for a in frontier.attempts] == [
        (2, 4, 1, "solved"), (2, 2, 1, "infeasible"), (2, 4, 2, "infeasible"), (2, 5, 2, "solved"),
        (3, 4, 2, "infeasible"), (4, 4, 2, "infeasible")]
    assert [(p.steps, p.rounds, p.chunks) for p in frontier.points] == [(2, 5, 2)]
    assert frontier.complete and "the walk stopped at 4 steps: 5 steps need at least 5 rounds" in frontier.note
    assert lines[0] == "uring2 allgather (S=2, R=4, C=1): solved 0.00s" and len(lines) == 6


def test_ctrl_c_mid_sweep_keeps_the_point_found_so_far(monkeypatch):
    """Interrupted at the sweep's last call, the walk keeps the probe's point (ratio 3, not the
    least at 2 steps) and says the frontier is incomplete."""
    frontier = _walk(_Feasible(interrupt_at=4), monkeypatch, [])
    assert [(p.steps, p.ratio) for p in frontier.points] == [(2, Fraction(3))]
    assert not frontier.complete and frontier.note == "interrupted"


def test_no_function_in_the_strategies_module_is_long():
    """The walk is named steps, not one long function with closures (issue 26)."""
    import ast
    import inspect

    from synth.smt import strategies

    tree = ast.parse(inspect.getsource(strategies))
    long = [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80]
    assert long == []


def test_a_walk_whose_every_probe_times_out_ends_incomplete(monkeypatch):
    """Nothing found and every probe timing out: the walk stops after BLIND_PROBES step counts
    (it used to climb forever), incomplete, with a note that says so; nothing is called infeasible."""
    from synth.smt import strategies

    class Stuck(_Feasible):
        def solve(self, S, R, C, time_limit, by_splits=True):
            self.calls += 1
            return SolveResult(Status.TIMEOUT, None, 0.0)

    lines: list[str] = []
    frontier = _walk(Stuck(), monkeypatch, lines)
    assert frontier.points == () and not frontier.complete
    assert "timed out with nothing found" in frontier.note
    assert {a.status for a in frontier.attempts} == {Status.TIMEOUT}
    assert max(a.steps for a in frontier.attempts) == 2 + strategies.BLIND_PROBES - 1


def test_a_walk_stops_incomplete_when_its_budget_is_spent(monkeypatch):
    """A budget of 0 s: the walk searches nothing, says why, and claims nothing complete."""
    from synth.smt import strategies

    monkeypatch.setattr(strategies, "_fewest_steps", lambda point: point)
    frontier = strategies._search(_Feasible(), 2, Fraction(2), 2, 10.0, lambda line: None, budget=0.0)
    assert frontier.points == () and frontier.attempts == () and not frontier.complete
    assert "budget of 0 s was spent before 2 steps" in frontier.note
    ample = strategies._search(_Feasible(), 2, Fraction(2), 2, 10.0, lambda line: None, budget=3600.0)
    assert ample.points and ample.complete
