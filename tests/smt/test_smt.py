"""SMT synthesis: every answer is checked with the verifier, never against a frozen schedule."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from synth.bounds.lower_bounds import lower_bounds
from synth.core.collectives import allgather, make_collective
from synth.core.io import write_frontier
from synth.core.library import resolve_topology
from synth.core.schedule import Status
from synth.core.symmetry import collective_symmetries
from synth.smt.encoding import SmtInstance, SmtOptions
from synth.smt.sat.answer import WORK_SPENT
from synth.smt.strategies import least_steps, pareto, solve_instance
from synth.verify import load_schedule, verify
from tests.schedule_strategies import topologies


def test_uring4_allgather_frontier_meets_both_bounds():
    frontier = pareto(resolve_topology("uring:4"), "allgather", max_chunks=2, time_limit=30)
    assert frontier.complete
    assert [(p.steps, p.rounds, p.chunks) for p in frontier.points] == [(3, 3, 1)]
    assert all(verify(p.schedule) == [] for p in frontier.points)


def test_ring4_allgather_frontier_trades_steps_for_rounds():
    frontier = pareto(resolve_topology("ring:4"), "allgather", max_chunks=2, time_limit=30)
    bounds = lower_bounds(resolve_topology("ring:4"), allgather(4))
    assert frontier.complete and frontier.points
    for point in frontier.points:
        assert verify(point.schedule) == []
        assert point.steps >= bounds.steps and point.ratio >= bounds.rounds_per_chunk
        assert point.schedule.total_rounds <= point.rounds
    # non-dominated: steps strictly up, rounds/chunk strictly down
    for a, b in zip(frontier.points, frontier.points[1:]):
        assert a.steps < b.steps and a.ratio > b.ratio
    last = frontier.points[-1]
    assert last.ratio == bounds.rounds_per_chunk  # 3/2 on a bidirectional 4-ring


@pytest.mark.parametrize("name, root", [("reduce_scatter", None), ("reduce", 2), ("gather", 1), ("broadcast", 3)])
def test_duals_and_rooted_collectives_verify(name, root):
    topo = resolve_topology("ring:4")
    result, _ = least_steps(topo, name, root, chunks=1, extra_rounds=2, time_limit=30)
    assert result.status == Status.SOLVED
    assert verify(result.schedule) == []
    assert result.schedule.collective.name == name and result.schedule.topology == topo


def test_allreduce_composition_verifies_and_counts_each_contribution_once():
    result = solve_instance(resolve_topology("ring:4"), "allreduce", None, 4, 6, 1, time_limit=30)
    assert result.status == Status.SOLVED and verify(result.schedule) == []
    assert result.schedule.meta["composition"] == "reduce_scatter+allgather"


def test_below_the_steps_bound_is_infeasible_not_timeout():
    result = solve_instance(resolve_topology("line:4"), "broadcast", 0, 2, 2, 1, time_limit=30)
    assert result.status == Status.INFEASIBLE and result.schedule is None


def test_a_timeout_is_reported_as_timeout():
    # z3's work budget (rlimit) is deterministic: this feasible instance needs ~3.6M units, so
    # 0.01 work seconds (100k units) run out on any machine, however fast; no time limit is involved
    topo = resolve_topology("dgx1")
    inst = SmtInstance(topo, allgather(8, 6), 3, 7, SmtOptions(sat="z3"))
    result = inst.check([inst.total_literal(7)], work=0.01)
    assert result.status == Status.TIMEOUT and result.schedule is None
    assert result.message == WORK_SPENT
    # the instance is feasible: a TIMEOUT there is not a proof, and the solver still answers
    solved = inst.check([inst.total_literal(7)], work=10.0)
    assert solved.status == Status.SOLVED and verify(solved.schedule) == []


def test_symmetric_restriction_gives_symmetric_valid_schedules():
    topo = resolve_topology("ring:4")
    coll = allgather(4, 1)
    syms = tuple(collective_symmetries(topo, coll))
    result = SmtInstance(topo, coll, 2, 4, symmetries=syms).solve(4)
    assert result.status == Status.SOLVED and verify(result.schedule) == []
    # who receives what when is invariant (the decoder may break ties between equal senders)
    arrivals = {(s.chunk, s.dst, i) for i, step in enumerate(result.schedule.steps) for s in step.sends}
    for sym in syms:
        assert {(sym.chunks[c], sym.ranks[b], i) for c, b, i in arrivals} == arrivals


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(max_ranks=4), st.sampled_from(["allgather", "broadcast", "alltoall", "scatter"]))
def test_with_ample_rounds_least_steps_equals_the_hop_bound(topo, name):
    assume(topo.rounds_apply)
    root = 0 if name in ("broadcast", "scatter") else None
    bound = lower_bounds(topo, make_collective(name, topo.ranks, root=root)).steps
    result, _ = least_steps(topo, name, root, chunks=1, extra_rounds=4 * topo.ranks, time_limit=30)
    assert result.status == Status.SOLVED and verify(result.schedule) == []
    assert len(result.schedule.steps) == bound


def test_frontier_files_round_trip(tmp_path):
    frontier = pareto(resolve_topology("uring:3"), "allgather", max_chunks=1, time_limit=30)
    path = write_frontier(tmp_path / "out", frontier)
    import json

    doc = json.loads(path.read_text())
    assert doc["complete"] is True and doc["points"]
    for point in doc["points"]:
        schedule = load_schedule(path.parent / point["schedule"])  # verified on load
        assert len(schedule.steps) == point["steps"]


def test_rounds_bound_is_met_on_hypercube_at_one_chunk():
    frontier = pareto(resolve_topology("hypercube:2"), "allgather", max_chunks=2, time_limit=30)
    bounds = lower_bounds(resolve_topology("hypercube:2"), allgather(4))
    assert frontier.complete
    assert frontier.points[-1].ratio == Fraction(bounds.rounds_per_chunk)


@pytest.mark.parametrize("engine", ["z3", "cadical"])
def test_cnf_cardinality_rows_are_exact(engine):
    import itertools

    from synth.smt.cardinality import CnfBuilder
    from synth.smt.sat.answer import Verdict
    from synth.smt.sat.engines import make_engine

    engines: dict = {}  # id -> (formula kept alive, its one incremental engine)

    def sat(cnf, *lits) -> bool:
        if id(cnf) not in engines or engines[id(cnf)][0] is not cnf:
            engines[id(cnf)] = (cnf, make_engine(engine, cnf.formula))
        return engines[id(cnf)][1].check(list(lits)).verdict == Verdict.SAT

    for n in range(1, 7):
        for k in range(n + 1):
            cnf = CnfBuilder()
            cnf._init_cnf()
            xs = [cnf._var(f"x{i}") for i in range(n)]
            guard = cnf._var("g")
            cnf._at_most(xs, k, (-guard,))
            count = cnf._counter(xs, max(1, k))  # truncated: count[i] <-> at least i + 1
            for values in itertools.product([False, True], repeat=n):
                fixed = [x if v else -x for x, v in zip(xs, values)]
                ones = sum(values)
                assert sat(cnf, guard, *fixed) == (ones <= k)
                for i, out in enumerate(count):
                    wrong = -out if ones >= i + 1 else out
                    assert not sat(cnf, -guard, *fixed, wrong)
    for lengths in [(3,), (2, 3), (3, 1, 2), (1, 2, 2, 1)]:  # sums of unary numbers
        for k in range(sum(lengths) + 1):
            cnf = CnfBuilder()
            cnf._init_cnf()
            rows = [[cnf._var(f"r{i}_{j}") for j in range(n)] for i, n in enumerate(lengths)]
            for row in rows:
                for j in range(1, len(row)):
                    cnf._clause(-row[j], row[j - 1])
            guard = cnf._var("g")
            cnf._at_most_unary_sum(rows, k, (-guard,))
            for values in itertools.product(*[range(n + 1) for n in lengths]):
                fixed = [x if j < v else -x for row, v in zip(rows, values) for j, x in enumerate(row)]
                assert sat(cnf, guard, *fixed) == (sum(values) <= k)


@pytest.mark.parametrize("topo_name, name, root, steps, chunks", [
    ("ring:4", "allgather", None, 2, 2), ("uring:4", "allgather", None, 3, 2), ("line:4", "broadcast", 0, 3, 2),
    ("hypercube:2", "alltoall", None, 2, 1), ("ring:4", "scatter", 1, 2, 2)])
def test_implied_saturation_rows_never_change_a_verdict(topo_name, name, root, steps, chunks):
    """The saturation rows are implied: with and without them every budget gets the same answer."""
    from synth.smt.encoding import SmtOptions

    topo = resolve_topology(topo_name)
    coll = make_collective(name, topo.ranks, root=root, chunks=chunks)
    plain = SmtOptions(saturate=False, out_saturate=False)
    with_rows, without = SmtInstance(topo, coll, steps, 3 * steps), SmtInstance(topo, coll, steps, 3 * steps, plain)
    for rounds in range(steps, 3 * steps + 1):
        a, b = with_rows.solve(rounds, time_limit=30), without.solve(rounds, time_limit=30)
        assert a.status == b.status, rounds
        assert a.schedule is None or verify(a.schedule) == []
    for split in [(1,) * steps, (2,) + (1,) * (steps - 1), (1,) * (steps - 1) + (3,)]:
        a, b = with_rows.solve_split(split, time_limit=30), without.solve_split(split, time_limit=30)
        assert a.status == b.status, split
        assert a.schedule is None or (verify(a.schedule) == [] and [s.rounds for s in a.schedule.steps] == list(split))


def test_a_renewed_solver_keeps_every_constraint():
    inst = SmtInstance(resolve_topology("ring:4"), allgather(4, 2), 2, 6, SmtOptions(sat="z3"))
    before = [inst.solve(r).status for r in range(2, 7)]
    inst.engine.renew()
    assert [inst.solve(r).status for r in range(2, 7)] == before
    result = inst.solve(6)
    assert result.status == Status.SOLVED and verify(result.schedule) == []


def test_renewals_between_checks_keep_rows_added_at_any_time():
    """Rows for a rounds budget are added when it is first asked, before or after a check and a
    renewal (the working solver is a copy of the pristine one): every verdict stays a fresh
    instance's."""
    topology, coll = resolve_topology("uring:4"), allgather(4, 2)
    fresh = [SmtInstance(topology, coll, 3, 7).solve(r).status for r in range(3, 8)]
    assert Status.INFEASIBLE in fresh and Status.SOLVED in fresh
    inst = SmtInstance(topology, coll, 3, 7, SmtOptions(sat="z3"))
    asked = []
    for rounds in (7, 3, 6, 4, 5):
        assert inst.solve(rounds).status == fresh[rounds - 3]  # its rows go to a working solver
        asked.append(rounds)
        inst.engine.renew()  # what a timed-out check does
        assert [inst.solve(r).status for r in asked] == [fresh[r - 3] for r in asked]


def test_a_finding_search_spends_its_work_on_the_first_splits():
    """In a search whose "no" proves nothing, a split far down the list waits for the pass in
    which its share of the budget reaches the first pass's; a proof tries every split at once."""
    from synth.core.schedule import SolveResult
    from synth.smt import session

    class Recorder:
        def __init__(self, answer_at: int):
            self.calls, self.answer_at = [], answer_at

        def solve_split(self, split, time_limit=None, work=None):
            self.calls.append((split, work))
            found = split == (0,) and work >= self.answer_at
            return SolveResult(Status.SOLVED if found else Status.TIMEOUT, None, 0.0)

    splits = [(i,) for i in range(100)]
    needs = 16 * session.WORK_START  # the first split's schedule takes the third pass
    finder = Recorder(needs)
    assert session._run(finder, 0, splits, None, finding=True).status == Status.SOLVED
    tried = {split for split, _ in finder.calls}
    assert len(tried) < len(splits) and (0,) in tried and (99,) not in tried
    assert all(work >= session.WORK_START for _, work in finder.calls)
    prover = Recorder(needs)
    assert session._run(prover, 0, splits, None).status == Status.SOLVED
    assert {split for split, _ in prover.calls} == set(splits)


@pytest.mark.parametrize("topo_name, name, root, chunks", [
    ("dgx1", "allgather", None, 2), ("hypercube:3", "allgather", None, 3), ("ring:6", "allgather", None, 2),
    ("dgx1", "broadcast", 0, 6), ("torus:3x3", "alltoall", None, 1)])
def test_step_floors_past_the_any_steps_floor_are_known_without_an_lp(monkeypatch, topo_name, name, root, chunks):
    """Floors never rise with the steps (a step of r >= 2 rounds splits in the relaxation) and
    never fall below the any-steps floor: once they meet, the session answers without an LP,
    and every answer is the LP's."""
    from synth.bounds.step_lp import least_rounds
    from synth.smt import session as session_module
    from synth.smt.session import SmtSession

    session = SmtSession(resolve_topology(topo_name), name, root)
    direct = [least_rounds(session.topology, session.collective(chunks), steps) for steps in range(1, 9)]
    calls = []
    monkeypatch.setattr(session_module, "least_rounds", lambda *args: calls.append(args) or least_rounds(*args))
    assert [session.rounds_floor(steps, chunks) for steps in range(1, 9)] == direct
    assert len(calls) < 8


def test_direct_allreduce_on_dgx1_verifies():
    from synth.core.collectives import allreduce
    from synth.smt.direct_allreduce import DirectAllreduceInstance

    result = DirectAllreduceInstance(resolve_topology("dgx1"), allreduce(8, 2), 5, 5).solve(5, time_limit=60)
    assert result.status == Status.SOLVED and verify(result.schedule) == []


def test_the_exact_search_gets_its_split_lps_and_its_build_from_one_clock(monkeypatch):
    """The split LPs before the exact search may take only what the build leaves of the limit,
    and with no time left for the build the attempt ends (TIMEOUT, nothing built): mi250 at 9
    steps ran 150 s against 120 s when the LPs were not counted."""
    from synth.smt.session import LP_SHARE, SmtSession

    def session_with(build_seconds: float) -> tuple[SmtSession, list]:
        session = SmtSession(resolve_topology("ring:4"), "allgather", None)
        asked: list = []
        real = session._open_splits

        def recording(steps, rounds, chunks, solve_lps=True, seconds=None):
            asked.append((solve_lps, seconds))
            return real(steps, rounds, chunks, solve_lps, seconds)

        monkeypatch.setattr(session, "_open_splits", recording)
        monkeypatch.setattr(session, "_symmetric_instance", lambda *args: None)  # straight to the exact search
        monkeypatch.setattr(session, "_exact_build_seconds", lambda *args: build_seconds)
        return session, asked

    limit = 40.0
    session, asked = session_with(limit - 1.0)
    result = session.solve(2, 3, 1, limit)
    assert result.status == Status.SOLVED and not verify(result.schedule)
    exact_pass = [seconds for solve_lps, seconds in asked if solve_lps]
    assert exact_pass and exact_pass[0] <= 1.0 < limit * LP_SHARE

    session, asked = session_with(limit + 1.0)
    result = session.solve(2, 3, 1, limit)
    assert result.status == Status.TIMEOUT and "build" in result.message
    assert not session._instances and not [seconds for solve_lps, seconds in asked if solve_lps]
