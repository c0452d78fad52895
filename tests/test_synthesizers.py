"""One conformance suite over every registered synthesis backend (as PuLP runs one suite over
every solver): each backend either refuses a problem with a reason, or answers it in the one
status vocabulary with a schedule that verifies."""

from __future__ import annotations

import pytest

from synth import synthesizers
from synth.core.errors import EXIT_INTERNAL, InputError
from synth.core.library import resolve_topology
from synth.core.schedule import Schedule, Status
from synth.verify import verify
from tests.milp.test_any_bandwidth import pcie_box

CASES = [  # (topology, collective, root, steps for an instance)
    ("ring:4", "allgather", None, 3),
    ("full:4", "reduce_scatter", None, 1),
    ("uring:4", "allreduce", None, 6),
    ("ring:4", "broadcast", 0, 2),
    ("pcie-box", "allgather", None, 1),
]


def _topology(name: str):
    return pcie_box() if name == "pcie-box" else resolve_topology(name)


def _problem(backend: str, case) -> synthesizers.Problem:
    topo, coll, root, steps = case
    if backend == "smt":
        return synthesizers.Problem(_topology(topo), coll, root, chunks=1, steps=steps)
    return synthesizers.Problem(_topology(topo), coll, root, chunks=2, size=1 << 20)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
@pytest.mark.parametrize("name", synthesizers.names())
def test_every_backend_refuses_with_a_reason_or_answers_verified(name, case):
    backend = synthesizers.get(name)
    assert backend.available()
    problem = _problem(name, case)
    why = backend.accepts(problem)
    assert (why is None) == (name != "smt" or case[0] != "pcie-box"), why  # only smt refuses, and only there
    if why is not None:
        with pytest.raises(InputError, match=f"--backend {name}: "):
            synthesizers.synthesize(problem, backend=name)
        return
    result = synthesizers.synthesize(problem, synthesizers.Options(time_limit=30), backend=name)
    assert result.backend == name
    assert result.status in (Status.SOLVED, Status.TIMEOUT)
    assert result.schedule is not None and verify(result.schedule) == []
    assert result.schedule.topology is problem.topology
    assert result.schedule.collective.name == problem.collective


def test_the_registry_lists_the_three_backends_in_auto_order():
    assert synthesizers.names() == ("smt", "milp", "greedy")
    with pytest.raises(InputError, match="unknown synthesis backend 'sat'"):
        synthesizers.get("sat")


def test_auto_answers_an_instance_with_smt_and_a_size_with_the_router():
    ring = resolve_topology("ring:4")
    assert synthesizers.choose(synthesizers.Problem(ring, "allgather", steps=3)).name == "smt"
    assert synthesizers.choose(synthesizers.Problem(ring, "allgather", size=1 << 20)).name == "milp"


def test_auto_takes_the_switch_pipeline_for_allreduce_in_one_nvls_domain():
    """Greedy's shaped pipeline meets the exchange bound there; the router's pieces do not."""
    h100, h100x2 = resolve_topology("h100"), resolve_topology("h100x2")
    assert synthesizers.choose(synthesizers.Problem(h100, "allreduce", size=1 << 30)).name == "greedy"
    assert synthesizers.choose(synthesizers.Problem(h100, "allgather", size=1 << 30)).name == "milp"
    assert synthesizers.choose(synthesizers.Problem(h100x2, "allreduce", size=1 << 30)).name == "milp"
    result = synthesizers.synthesize(synthesizers.Problem(h100, "allreduce", size=1 << 30))
    assert result.details["percent_of_bound"] >= 99.0


def test_the_router_compares_its_two_plans_under_the_calibration():
    """On Blackwell the switch's ports run below NVLink (efficiency_nvls < efficiency_nvlink): the
    plan through the switch ties point to point in the step model but loses under the terms."""
    from synth.cost import best_protocol
    from synth.measure.calibration import load_terms

    b300 = resolve_topology("b300")
    terms = load_terms("default", b300.arch)
    problem = synthesizers.Problem(b300, "allgather", size=1 << 30)
    plain = synthesizers.synthesize(problem, synthesizers.Options(), "milp").schedule
    judged = synthesizers.synthesize(problem, synthesizers.Options(terms=terms), "milp").schedule
    assert plain.switch_count > 0 and judged.switch_count == 0
    assert best_protocol(judged, 1 << 30, terms)[1] < best_protocol(plain, 1 << 30, terms)[1]


def test_smt_refuses_a_machine_without_whole_capacities_and_names_the_rate():
    problem = synthesizers.Problem(pcie_box(), "allgather", steps=2)
    assert synthesizers.get("smt").scope(problem.topology) is not None
    with pytest.raises(InputError, match=r"smt: group 'cpu0-to-cpu1' runs at 10 GB/s.*--backend milp"):
        synthesizers.choose(problem)


def test_an_infeasible_instance_is_an_answer_not_an_error():
    result = synthesizers.synthesize(synthesizers.Problem(resolve_topology("ring:4"), "allgather", steps=1))
    assert result.status is Status.INFEASIBLE and result.schedule is None and result.backend == "smt"


def test_a_schedule_that_does_not_verify_is_a_bug_at_the_one_check(monkeypatch):
    ring = resolve_topology("ring:4")
    problem = synthesizers.Problem(ring, "allgather", chunks=1)

    def broken(self, problem, options):
        from synth.core.collectives import make_collective
        from synth.core.schedule import SolveResult

        return SolveResult(Status.SOLVED, Schedule(ring, make_collective("allgather", 4), ()))

    monkeypatch.setattr(synthesizers.Greedy, "solve", broken)
    with pytest.raises(synthesizers.SynthesisBug, match="greedy backend returned a schedule that does not verify") \
            as caught:
        synthesizers.synthesize(problem, backend="greedy")
    assert caught.value.exit_code == EXIT_INTERNAL


def test_smt_takes_allreduce_directly_as_an_option_and_composed_by_default():
    problem = synthesizers.Problem(resolve_topology("ring:4"), "allreduce", steps=4)
    direct = synthesizers.synthesize(problem, synthesizers.Options(time_limit=30, direct=True), backend="smt")
    composed = synthesizers.synthesize(problem, synthesizers.Options(time_limit=30), backend="smt")
    assert direct.status is Status.SOLVED and verify(direct.schedule) == []
    assert "composition" not in direct.schedule.meta
    assert composed.schedule.meta["composition"] == "reduce_scatter+allgather"
    assert any(send.op == "reduce" for step in direct.schedule.steps for send in step.sends)
    with pytest.raises(InputError, match="direct encoding is for allreduce"):
        synthesizers.synthesize(synthesizers.Problem(problem.topology, "allgather", steps=3),
                                synthesizers.Options(direct=True), backend="smt")


def test_an_unsolved_result_raises_the_error_its_status_names():
    from synth.core.errors import EXIT_INFEASIBLE, EXIT_UNKNOWN, InfeasibleError, SolverError, UnknownResultError
    from synth.core.schedule import SolveResult

    cases = [(Status.INFEASIBLE, InfeasibleError, EXIT_INFEASIBLE, "infeasible", r"^x: too few steps \(proven\)$"),
             (Status.TIMEOUT, UnknownResultError, EXIT_UNKNOWN, "unknown", r"timed out on x after 2\.0 s"),
             (Status.ERROR, SolverError, EXIT_INTERNAL, "error", r"the solver failed on x: too few steps")]
    for status, error, code, verdict, words in cases:
        with pytest.raises(error, match=words) as caught:
            SolveResult(status, None, 2.0, "too few steps").schedule_or_raise("x")
        assert caught.value.exit_code == code and caught.value.verdict == verdict
    schedule = Schedule(resolve_topology("ring:4"), synthesizers_allgather(), ())
    assert SolveResult(Status.TIMEOUT, schedule).schedule_or_raise("x") is schedule  # an incumbent is kept


def synthesizers_allgather():
    from synth.core.collectives import allgather

    return allgather(4)
