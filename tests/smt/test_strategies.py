from dataclasses import replace

import pytest

from tests.smt.stand_in import FeasibleSession


def test_allreduce_frontier_with_jobs_equals_the_serial_one():
    """The reduce-scatter and allgather sweeps in two processes: the same points and schedules."""
    from synth.core.library import resolve_topology
    from synth.smt.strategies import pareto
    from synth.verify import verify

    topo = resolve_topology("ring:4")
    serial = pareto(topo, "allreduce", time_limit=30)
    lines: list[str] = []
    parallel = pareto(topo, "allreduce", time_limit=30, progress=lines.append, jobs=2)
    assert [(p.steps, p.rounds, p.chunks) for p in serial.points] == [(p.steps, p.rounds, p.chunks)
                                                                       for p in parallel.points]
    assert [p.schedule.steps for p in serial.points] == [p.schedule.steps for p in parallel.points]
    assert all(verify(p.schedule) == [] for p in parallel.points)
    assert parallel.complete and any("reduce_scatter" in line for line in lines)


def test_search_symmetries_on_tori_and_hypercubes_act_freely():
    """The restricted search ties routes under a group that fixes no rank (translations), not
    the full automorphism group (whose reflections fix ranks)."""
    from synth.core.collectives import make_collective
    from synth.core.library import resolve_topology
    from synth.core.symmetry import search_symmetries

    for name, order in (("torus:4x4", 16), ("hypercube:4", 16), ("torus:3x3", 9), ("hypercube:3", 8)):
        topo = resolve_topology(name)
        for coll in ("allgather", "alltoall"):
            syms = search_symmetries(topo, make_collective(coll, topo.ranks))
            perms = {s.ranks for s in syms}
            assert len(perms) == order and syms[0].is_identity
            assert all(tuple(a[b[r]] for r in range(topo.ranks)) in perms for a in perms for b in perms)
            assert all(all(p[r] != r for r in range(topo.ranks)) for p in perms if p != syms[0].ranks)
    rooted = search_symmetries(resolve_topology("hypercube:3"), make_collective("broadcast", 8, root=0))
    assert all(s.ranks[0] == 0 for s in rooted)


def test_torus_alltoall_meets_both_bounds_under_translations():
    """torus:4x4 alltoall at (S=4, R=8, C=1), both bounds: the translation-restricted search
    finds it (the full group could not), and the schedule verifies."""
    from synth.core.library import resolve_topology
    from synth.smt.session import SmtSession
    from synth.verify import verify

    result = SmtSession(resolve_topology("torus:4x4"), "alltoall", None).solve(4, 8, 1, time_limit=120)
    assert result.status.value == "solved" and verify(result.schedule) == []
    assert result.schedule.total_rounds == 8 and len(result.schedule.steps) == 4


def test_broadcast_walks_past_eight_chunks_and_says_why_it_stopped():
    """Pipelined collectives default to 16 chunks; the note names where and why the walk ended."""
    from synth.core.library import resolve_topology
    from synth.smt.strategies import default_max_chunks, pareto
    from synth.verify import verify

    assert default_max_chunks("broadcast") == 16 and default_max_chunks("allgather") == 8
    frontier = pareto(resolve_topology("dgx1"), "broadcast", 0, time_limit=60)
    points = {(p.steps, p.rounds, p.chunks) for p in frontier.points}
    assert frontier.complete and all(verify(p.schedule) == [] for p in frontier.points)
    best = {p.steps: p.ratio for p in frontier.points}
    from fractions import Fraction
    assert best.get(3, 1) <= Fraction(5, 12) and best.get(4, 1) <= Fraction(4, 13), points
    assert "the walk stopped at" in frontier.note and "--max-chunks" in frontier.note
    capped = pareto(resolve_topology("ring:4"), "broadcast", 0, max_chunks=2, time_limit=30)
    assert "with at most 2 chunks" in capped.note


# Splitting steps: a schedule (S, R, C) gives one with S + 1 steps (while S < R), which is what
# lets a proof at more steps settle a budget that timed out at fewer.

def _split_step(schedule, index: int, first: int):
    """Step ``index`` (r rounds) as two steps of ``first`` and r - first rounds: each link's
    sends, in turn, dealt round by round (a round takes capacity chunks per link), group by
    group so that every group's share is even too."""
    from synth.core.schedule import Schedule, Step

    step = schedule.steps[index]
    topo = schedule.topology
    groups = topo.groups_of_link
    order = sorted(step.sends, key=lambda s: (tuple(g.name for g in groups.get((s.src, s.dst), ())), s.src, s.dst))
    rounds = step.rounds
    parts = ([], [])
    for position, send in enumerate(order):
        parts[0 if position % rounds < first else 1].append(send)
    steps = (schedule.steps[:index] + (Step(tuple(parts[0]), first), Step(tuple(parts[1]), rounds - first))
             + schedule.steps[index + 1:])
    return Schedule(topo, schedule.collective, steps, schedule.meta)


@pytest.mark.parametrize("topo_name,name,budget", [("dgx1", "allgather", (2, 5, 2)), ("ring:6", "allgather", (3, 7, 2)),
                                                   ("hypercube:3", "alltoall", (3, 6, 1)),
                                                   ("dgx1", "broadcast", (3, 5, 12))])
def test_splitting_a_step_keeps_the_schedule_valid(topo_name, name, budget):
    from synth.core.library import resolve_topology
    from synth.smt.session import SmtSession
    from synth.verify import verify

    session = SmtSession(resolve_topology(topo_name), name, 0 if name == "broadcast" else None)
    assert session.steps_split_freely
    found = session.solve(*budget, time_limit=60)
    assert found.status.value == "solved"
    schedule = found.schedule
    wide = [i for i, step in enumerate(schedule.steps) if step.rounds > 1]
    assert wide, "the budget must leave a step with more than one round"
    for i in wide:
        for first in range(1, schedule.steps[i].rounds):
            split = _split_step(schedule, i, first)
            assert verify(split) == [] and split.total_rounds == schedule.total_rounds
    # the test can fail: all of a wide step's sends in its first round overload a link
    i = max(wide, key=lambda k: len(schedule.steps[k].sends))
    from synth.core.schedule import Schedule, Step
    crammed = (schedule.steps[:i] + (Step(schedule.steps[i].sends, 1), Step((), schedule.steps[i].rounds - 1))
               + schedule.steps[i + 1:])
    assert any(v.kind == "link_capacity" for v in verify(Schedule(schedule.topology, schedule.collective, crammed)))


class _Oracle(FeasibleSession):
    """The stand-in session, where infeasible budgets at ``slow_steps`` answer TIMEOUT (the
    solver ran out of time) instead of INFEASIBLE."""

    def __init__(self, slow_steps: int, splits: bool):
        super().__init__()
        self.slow_steps, self.steps_split_freely = slow_steps, splits

    def solve(self, S, R, C, time_limit, by_splits=True):
        result = super().solve(S, R, C, time_limit, by_splits)
        if result.status.value == "infeasible" and S == self.slow_steps:
            return replace(result, status=type(result.status).TIMEOUT)
        return result


@pytest.mark.parametrize("splits", [True, False])
def test_a_budget_that_timed_out_is_settled_by_a_proof_at_more_steps(splits, monkeypatch):
    """(3, 4, 2) times out; (4, 4, 2) is proven infeasible, so (3, 4, 2) is too when steps split
    freely; without that the frontier stays incomplete."""
    from fractions import Fraction

    from synth.smt import strategies
    from synth.smt.strategies import _search

    monkeypatch.setattr(strategies, "_fewest_steps", lambda point: point)  # the oracle's schedules are stand-ins
    frontier = _search(_Oracle(slow_steps=3, splits=splits), 2, Fraction(2), 2, 10.0, lambda _: None)
    timed_out = [(a.steps, a.rounds, a.chunks) for a in frontier.attempts if a.status.value == "timeout"]
    assert (3, 4, 2) in timed_out and any((a.steps, a.rounds, a.chunks, a.status.value) == (4, 4, 2, "infeasible")
                                          for a in frontier.attempts)
    assert [(p.steps, p.ratio) for p in frontier.points] == [(2, Fraction(5, 2))]
    assert frontier.complete is splits
    assert ("not settled" in frontier.note and "(3, 4, 2)" in frontier.note) is not splits


class _SlowThree(_Oracle):
    """(S, R, C) is feasible iff R >= max(S, 2C + 1), and one round more at 2 steps; at 3 steps
    the solver times out on every budget, but a schedule's windows re-solve to 3 steps."""

    def __init__(self):
        super().__init__(slow_steps=3, splits=True)

    def feasible(self, S, R, C):
        return R >= max(S, 2 * C + 1 + (S == 2))

    def solve(self, S, R, C, time_limit, by_splits=True):
        from types import SimpleNamespace

        from synth.core.schedule import SolveResult, Status

        if S == 3:
            return SolveResult(Status.TIMEOUT, None, 0.0)
        if not self.feasible(S, R, C):
            return SolveResult(Status.INFEASIBLE, None, 0.0)
        return SolveResult(Status.SOLVED, SimpleNamespace(total_rounds=R, budget=(S, R, C)), 0.0)

    def fewer_steps(self, schedule, time_limit):
        from types import SimpleNamespace

        from synth.core.schedule import SolveResult, Status

        S, R, C = schedule.budget
        if S - 1 == 3 and self.feasible(3, R, C):
            return SolveResult(Status.SOLVED, SimpleNamespace(total_rounds=R, budget=(3, R, C)), 0.0)
        return SolveResult(Status.TIMEOUT, None, 0.0)


def test_a_point_found_at_more_steps_settles_the_budget_that_timed_out_one_step_fewer(monkeypatch):
    """(3, 5, 2) times out, (4, 5, 2) is found and its windows re-solve to 3 steps: the point
    is at 3 steps and the frontier is complete ((3, 4, 2) by the proof at 4 steps)."""
    from fractions import Fraction

    from synth.smt import strategies
    from synth.smt.strategies import _search

    monkeypatch.setattr(strategies, "_fewest_steps", lambda point: point)
    frontier = _search(_SlowThree(), 2, Fraction(2), 2, 10.0, lambda _: None)
    assert [(p.steps, p.ratio) for p in frontier.points] == [(2, Fraction(3)), (3, Fraction(5, 2))]
    assert ((3, 5, 2, "timeout") in [(a.steps, a.rounds, a.chunks, a.status.value) for a in frontier.attempts]
            and (3, 5, 2, "solved") in [(a.steps, a.rounds, a.chunks, a.status.value) for a in frontier.attempts])
    assert frontier.complete and "not settled" not in frontier.note


@pytest.mark.parametrize("topo_name,name,budget", [("dgx1", "allgather", (3, 6, 2)), ("ring:6", "broadcast", (5, 9, 3)),
                                                   ("hypercube:3", "allgather", (4, 8, 2)),
                                                   ("dgx1", "reduce_scatter", (3, 6, 2))])
def test_merging_steps_keeps_sends_and_rounds_and_the_schedule_valid(topo_name, name, budget):
    """At more steps than a budget needs the solver may leave steps that forward nothing to
    each other; merged, the schedule must still verify, with the same sends and rounds."""
    from collections import Counter

    from synth.core.library import resolve_topology
    from synth.core.transforms import merge_steps
    from synth.smt.session import SmtSession
    from synth.verify import verify

    found = SmtSession(resolve_topology(topo_name), name, 0 if name == "broadcast" else None).solve(*budget,
                                                                                                    time_limit=60)
    assert found.status.value == "solved"
    merged = merge_steps(found.schedule)
    assert verify(merged) == [] and merged.total_rounds == found.schedule.total_rounds
    assert Counter(s for step in merged.steps for s in step.sends) == Counter(
        s for step in found.schedule.steps for s in step.sends)
    assert len(merged.steps) <= len(found.schedule.steps)


def test_steps_that_forward_are_not_merged():
    from synth.core.collectives import broadcast
    from synth.core.generators import uring
    from synth.core.schedule import Schedule, Send, Step
    from synth.core.transforms import merge_steps

    relay = Schedule(uring(3), broadcast(3, 0), (Step((Send(0, 0, 1),), 1), Step((Send(0, 1, 2),), 1)))
    assert len(merge_steps(relay).steps) == 2


def test_a_session_keeps_only_the_solvers_of_the_step_count_it_is_at():
    """The walks go up in steps; solvers of earlier step counts would pile up (gigabytes each
    on mi250)."""
    from synth.core.library import resolve_topology
    from synth.smt.session import SmtSession

    session = SmtSession(resolve_topology("ring:4"), "allgather", None)
    assert session.solve(2, 2, 1, time_limit=30).status.value == "solved"
    assert session.solve(3, 3, 2, time_limit=30).status.value == "solved"
    assert session._instances or session._symmetric
    assert {key[0] for key in list(session._instances) + list(session._symmetric)} == {3}


@pytest.mark.parametrize("name", ["torus:4x4", "hypercube:4"])
def test_sixteen_rank_allreduce_frontiers_are_unchanged(name):
    """Issue 43: ``synth pareto torus:4x4 allreduce`` took 58 s, most of it the flow LPs behind
    its bounds; solved per orbit of the automorphisms they take well under a second, and the
    frontier, its attempts and its bounds are the ones recorded before."""
    from synth.core.library import resolve_topology
    from synth.smt.strategies import pareto
    from synth.verify import verify

    frontier = pareto(resolve_topology(name), "allreduce", time_limit=120)
    assert frontier.complete and [(p.steps, p.rounds, p.chunks) for p in frontier.points] == [(8, 30, 4)]
    assert all(verify(p.schedule) == [] for p in frontier.points)
    assert [(a.steps, a.rounds, a.chunks, a.status.value) for a in frontier.attempts] == \
        [(4, 8, 1, "solved"), (4, 15, 4, "solved")] * 2
    assert frontier.bounds == {"steps": 4, "rounds_per_chunk": "4", "composition_rounds_per_chunk": "15/2"}
