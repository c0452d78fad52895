"""SAT engines under the encoding: the same verdicts from every engine, models that satisfy
every clause, budgets that proves nothing, and proofs an independent checker accepts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.core.collectives import allgather, make_collective
from synth.core.library import resolve_topology
from synth.core.schedule import Status
from synth.smt.encoding import SmtInstance, SmtOptions
from synth.smt.sat import ENGINES, PROOF_ENGINES
from synth.smt.sat.answer import WORK_SPENT, Verdict
from synth.smt.sat.engines import available, make_engine
from synth.smt.sat.formula import Formula
from synth.smt.sat.proofs import check_drat
from synth.verify import verify

INSTALLED = [name for name in ENGINES if available(name)]


def _satisfies(formula: Formula, model) -> bool:
    return all(any(model[abs(lit)] == (lit > 0) for lit in clause) for clause in formula.clauses_from(0))


@st.composite
def small_formulas(draw):
    """Random 3-CNF near the threshold (both verdicts occur) and some assumptions."""
    n = draw(st.integers(3, 12))
    clauses = draw(st.lists(st.lists(st.integers(1, n).flatmap(lambda v: st.sampled_from([v, -v])),
                                     min_size=1, max_size=3), min_size=1, max_size=int(4.5 * n)))
    assumptions = draw(st.lists(st.integers(1, n).flatmap(lambda v: st.sampled_from([v, -v])), max_size=3))
    formula = Formula()
    for _ in range(n):
        formula.new_var()
    for clause in clauses:
        formula.add_clause(clause)
    return formula, assumptions


@settings(max_examples=60, deadline=None)
@given(small_formulas())
def test_every_engine_gives_the_same_verdict_and_sound_models(case):
    formula, assumptions = case
    answers = {name: make_engine(name, formula).check(assumptions) for name in INSTALLED}
    assert len({answer.verdict for answer in answers.values()}) == 1, answers
    for answer in answers.values():
        if answer.verdict == Verdict.SAT:
            assert _satisfies(formula, answer.model)
            assert all(answer.value(lit) for lit in assumptions)


@settings(max_examples=40, deadline=None)
@given(small_formulas())
def test_an_unsat_answer_comes_with_a_proof_the_checker_accepts(case):
    formula, assumptions = case
    for name in [e for e in PROOF_ENGINES if e in INSTALLED]:
        answer = make_engine(name, formula).check(assumptions, proof=True)
        if answer.verdict == Verdict.UNSAT:
            assert check_drat(formula.dimacs(assumptions), answer.proof) is None
            # the same proof does not refute the formula without the assumptions when that one is SAT
            if make_engine(name, formula).check([]).verdict == Verdict.SAT:
                assert check_drat(formula.dimacs(), answer.proof) is not None


def test_incremental_engines_read_clauses_added_after_a_check():
    formula = Formula()
    a, b = formula.new_var(), formula.new_var()
    formula.add_clause([a, b])
    engines = [make_engine(name, formula) for name in INSTALLED]
    assert all(e.check([-a]).verdict == Verdict.SAT for e in engines)
    formula.add_clause([-b])
    assert all(e.check([-a]).verdict == Verdict.UNSAT for e in engines)
    assert all(e.check([]).verdict == Verdict.SAT for e in engines)


@pytest.mark.parametrize("engine", INSTALLED)
def test_a_spent_work_budget_is_unknown_and_the_engine_still_answers(engine):
    """dgx1 allgather (3, 7, 6) is feasible; a tiny budget proves nothing on any machine."""
    inst = SmtInstance(resolve_topology("dgx1"), allgather(8, 6), 3, 7, SmtOptions(sat=engine))
    spent = inst.check([inst.total_literal(7)], work=0.0001)
    assert spent.status == Status.TIMEOUT and spent.message == WORK_SPENT
    solved = inst.check([inst.total_literal(7)], work=30.0)
    assert solved.status == Status.SOLVED and verify(solved.schedule) == []


@pytest.mark.parametrize("topo, name, root, steps, chunks", [
    ("uring:4", "allgather", None, 3, 2), ("line:4", "broadcast", 0, 3, 2), ("hypercube:2", "alltoall", None, 2, 1),
    ("ring:4", "scatter", 1, 2, 2)])
def test_every_engine_gives_each_budget_the_same_verdict(topo, name, root, steps, chunks):
    topology = resolve_topology(topo)
    coll = make_collective(name, topology.ranks, root=root, chunks=chunks)
    verdicts = {}
    for engine in INSTALLED:
        inst = SmtInstance(topology, coll, steps, 3 * steps, SmtOptions(sat=engine))
        verdicts[engine] = []
        for rounds in range(steps, 3 * steps + 1):
            result = inst.solve(rounds, time_limit=60)
            assert result.schedule is None or verify(result.schedule) == []
            verdicts[engine].append(result.status)
    assert len({tuple(v) for v in verdicts.values()}) == 1, verdicts
    assert Status.SOLVED in verdicts[INSTALLED[0]]


def test_z3_refuses_to_prove():
    formula = Formula()
    formula.add_clause([formula.new_var()])
    with pytest.raises(ValueError, match="DRAT"):
        make_engine("z3", formula).check([], proof=True)


@settings(max_examples=30, deadline=None)
@given(small_formulas(), st.sampled_from(["cadical", "kissat"]), st.integers(2, 4))
def test_a_portfolio_answers_as_its_members_do(case, first, count):
    from synth.smt.sat.portfolio import PortfolioEngine

    formula, assumptions = case
    alone = make_engine("cadical", formula).check(assumptions).verdict
    raced = PortfolioEngine(formula, first, count).check(assumptions, proof=True)
    assert raced.verdict == alone
    if raced.verdict == Verdict.SAT:
        assert _satisfies(formula, raced.model) and all(raced.value(lit) for lit in assumptions)
    else:
        assert check_drat(formula.dimacs(assumptions), raced.proof) is None


def test_a_portfolio_with_a_spent_budget_proves_nothing():
    from synth.smt.sat.portfolio import PortfolioEngine

    inst = SmtInstance(resolve_topology("dgx1"), allgather(8, 6), 3, 7, SmtOptions(sat="cadical", portfolio=3))
    assert isinstance(inst.engine, PortfolioEngine)
    spent = inst.check([inst.total_literal(7)], work=0.0001)
    assert spent.status == Status.TIMEOUT
    solved = inst.check([inst.total_literal(7)], work=30.0)
    assert solved.status == Status.SOLVED and verify(solved.schedule) == []


@given(st.integers(0, 10_000_000), st.integers(0, 10_000_000), st.booleans())
def test_cadical_slices_shrink_as_the_formula_grows_within_bounds(small, large, racing):
    """A slice is never longer on a bigger formula, never below MIN_SLICE, never above the cap;
    small formulas keep the full cap, so their answers are the ones measured before."""
    from synth.smt.sat.engines import CADICAL_SLICE, MIN_SLICE, PORTFOLIO_SLICE, cadical_slice
    small, large = sorted((small, large))
    cap = PORTFOLIO_SLICE if racing else CADICAL_SLICE
    assert MIN_SLICE <= cadical_slice(large, racing) <= cadical_slice(small, racing) <= cap
    assert cadical_slice(50_000, racing) == cap
    assert cadical_slice(450_000, racing=False) < CADICAL_SLICE


def _pigeons(holes: int) -> Formula:
    """holes + 1 pigeons, ``holes`` holes, every pigeon in a hole, no two in one: UNSAT, and
    exponential for resolution, so no engine settles it quickly at a dozen holes."""
    formula = Formula()
    var = {(p, h): formula.new_var() for p in range(holes + 1) for h in range(holes)}
    for p in range(holes + 1):
        formula.add_clause([var[p, h] for h in range(holes)])
    for h in range(holes):
        for p in range(holes + 1):
            for q in range(p):
                formula.add_clause([-var[p, h], -var[q, h]])
    return formula


def test_a_stopped_z3_check_says_so_and_the_engine_still_answers():
    """The race's stop reaches z3 (its context is interrupted), the answer is STOPPED, not a
    timeout or Ctrl-C, and the next check on the same engine is answered."""
    import threading

    from synth.smt.sat.answer import STOPPED

    formula = _pigeons(12)
    engine = make_engine("z3", formula)
    stop = threading.Event()
    stop.set()
    stopped = engine.check([], seconds=600, stop=stop)
    assert stopped.verdict == Verdict.UNKNOWN and stopped.reason == STOPPED
    first_pigeon_nowhere = [-(h + 1) for h in range(12)]
    assert engine.check(first_pigeon_nowhere, seconds=600).verdict == Verdict.UNSAT


@settings(max_examples=20, deadline=None)
@given(small_formulas(), st.integers(2, 4))
def test_a_portfolio_led_by_z3_answers_as_its_members_do(case, count):
    """z3 races its seeds beside CaDiCaL; asked for a proof, only the proof engines race."""
    from synth.smt.sat.portfolio import PortfolioEngine

    formula, assumptions = case
    alone = make_engine("cadical", formula).check(assumptions).verdict
    raced = PortfolioEngine(formula, "z3", count)
    assert raced.check(assumptions).verdict == alone
    proved = raced.check(assumptions, proof=True)
    assert proved.verdict == alone and proved.engine != "z3"
    if proved.verdict == Verdict.UNSAT:
        assert check_drat(formula.dimacs(assumptions), proved.proof) is None


def test_threads_writing_one_formulas_dimacs_at_once_each_get_it_whole():
    """A portfolio's Kissat members write the formula from threads at once: each text is the
    formula's, with its clause count (two threads extending the cached text would double it)."""
    from concurrent.futures import ThreadPoolExecutor

    def texts():
        formula = Formula()
        for _ in range(3000):
            formula.new_var()
        for v in range(1, 3000):
            formula.add_clause([v, -(v + 1), (v * 7) % 3000 + 1])
        with ThreadPoolExecutor(8) as pool:
            return formula, list(pool.map(lambda k: formula.dimacs([k + 1]), range(8)))

    for _ in range(20):
        formula, written = texts()
        for k, text in enumerate(written):
            assert text.count(b"\n") == 1 + formula.num_clauses + 1
            assert text.endswith(f"{k + 1} 0\n".encode())
