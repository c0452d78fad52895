"""The exact time-expanded MILP: answers are checked with the verifier and the cost model."""

from __future__ import annotations

import pytest

from synth.baselines import registry
from synth.bounds.lower_bounds import lower_bounds
from synth.core.collectives import make_collective
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.cost import step_time_us
from synth.milp.exact import CUTS, best_exact, count_binaries, exact_schedule
from synth.verify import verify

SIZE = 1 << 20
SOLVERS = ("highs", "cbc")


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("objective", ("rounds", "time"))
@pytest.mark.parametrize("topo", ("ring:4", "full:4"))
@pytest.mark.parametrize("chunks", (1, 2))
def test_solved_schedules_verify_and_beat_the_ring(solver, objective, topo, chunks):
    topology = resolve_topology(topo)
    coll = make_collective("allgather", 4, chunks=chunks)
    steps = lower_bounds(topology, coll).steps
    result = exact_schedule(topology, coll, steps, SIZE, time_limit=20, solver=solver, objective=objective)
    assert result.status == "solved"
    schedule = result.schedule
    assert verify(schedule) == []
    assert result.time_us == pytest.approx(step_time_us(schedule, SIZE))
    assert result.time_us <= result.objective * (1 + 1e-9)  # the objective never undercuts the model
    assert result.time_us >= lower_bounds(topology, coll).time_us(SIZE) * (1 - 1e-9)
    ring = registry()["ring"].build(topology, "allgather", None, None)
    if chunks == ring.collective.chunks_per_rank:  # the (bidirectional) ring halves every chunk
        assert result.time_us <= step_time_us(ring, SIZE) + 1e-9
    assert all(step.sends for step in schedule.steps)
    assert all(list(step.sends) == sorted(step.sends) for step in schedule.steps)
    meta = schedule.meta
    assert meta["synthesizer"] == "milp-exact" and meta["status"] == "solved"
    assert (meta["steps"], meta["chunks"], meta["size"]) == (steps, chunks, SIZE)
    assert meta["solve_seconds"] >= 0


@pytest.mark.parametrize("solver", SOLVERS)
def test_too_few_steps_is_infeasible(solver):
    topology = resolve_topology("ring:4")
    result = exact_schedule(topology, make_collective("allgather", 4), 1, SIZE, 10, solver)
    assert result.status == "infeasible" and result.schedule is None


@pytest.mark.parametrize("solver", SOLVERS)
def test_the_solver_proves_infeasibility(solver):
    # uring:4 allgather needs 3 rounds of one chunk per link: below that no schedule exists;
    # without cuts the proof comes from the solver, not from the model's pruning
    topology = resolve_topology("uring:4")
    coll = make_collective("allgather", 4)
    best = exact_schedule(topology, coll, 3, SIZE, 10, solver, cuts=frozenset())
    assert best.status == "solved"
    below = exact_schedule(topology, coll, 3, SIZE, 10, solver, cuts=frozenset(), cutoff=best.objective)
    assert below.status == "infeasible" and below.schedule is None


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_time_limit_is_a_timeout_never_infeasible(solver):
    topology = resolve_topology("ndv2")
    coll = make_collective("allgather", 8, chunks=3)
    result = exact_schedule(topology, coll, 3, SIZE, time_limit=0.05, solver=solver, cuts=frozenset())
    assert result.status == "timeout"
    if result.schedule is not None:  # an incumbent is a valid schedule, flagged
        assert verify(result.schedule) == [] and result.schedule.meta["status"] == "timeout"


def test_reduce_scatter_runs_as_the_dual():
    topology = resolve_topology("ring:4")
    result = exact_schedule(topology, make_collective("reduce_scatter", 4), 2, SIZE, 10)
    assert result.status == "solved" and verify(result.schedule) == []
    assert result.schedule.collective.name == "reduce_scatter" and result.schedule.topology == topology
    assert all(s.op == "reduce" for step in result.schedule.steps for s in step.sends)


def test_best_exact_allreduce_composes_and_verifies():
    lines = []
    found = best_exact(resolve_topology("ring:4"), "allreduce", SIZE, max_chunks=1, time_limit=10,
                       progress=lines.append)
    assert found.schedule is not None and verify(found.schedule) == []
    assert found.schedule.meta["composition"] == "reduce_scatter+allgather"
    assert found.time_us == pytest.approx(step_time_us(found.schedule, SIZE))
    assert any("reduce_scatter" in line for line in lines) and any("allgather" in line for line in lines)


def test_best_exact_reports_every_attempt_and_the_best():
    lines = []
    topology = resolve_topology("full:4")
    found = best_exact(topology, "allgather", SIZE, max_chunks=2, time_limit=10, progress=lines.append)
    assert found.schedule is not None and verify(found.schedule) == []
    assert found.time_us == pytest.approx(step_time_us(found.schedule, SIZE))
    assert found.time_us >= found.bound_us * (1 - 1e-9)
    assert lines and lines[0].startswith(f"{topology.name} allgather C=1 S=1: solved")
    ring = registry()["ring"].build(topology, "allgather", None, None)
    assert found.time_us <= step_time_us(ring, SIZE)
    solved = [a.time_us for a in found.attempts if a.time_us is not None]
    assert found.time_us == pytest.approx(min(solved))


def test_best_exact_skips_instances_above_the_size_limit():
    lines = []
    found = best_exact(resolve_topology("ring:4"), "allgather", SIZE, max_chunks=1, max_binaries=5,
                       progress=lines.append)
    assert found.schedule is None and {a.status for a in found.attempts} == {"skipped"}
    assert all("skipped" in line for line in lines)


def test_count_binaries_matches_the_model():
    topology = resolve_topology("ring:4")
    coll = make_collective("allgather", 4, chunks=2)
    result = exact_schedule(topology, coll, 3, SIZE, 10)
    assert count_binaries(topology, coll, 3) == result.binaries


def test_bad_arguments_are_one_line_errors():
    topology = resolve_topology("ring:4")
    coll = make_collective("allgather", 4)
    with pytest.raises(InputError, match="solver"):
        exact_schedule(topology, coll, 2, SIZE, solver="gurobi")
    with pytest.raises(InputError, match="objective"):
        exact_schedule(topology, coll, 2, SIZE, objective="fast")
    with pytest.raises(InputError, match="cuts"):
        exact_schedule(topology, coll, 2, SIZE, cuts=CUTS | {"magic"})
    with pytest.raises(InputError, match="allreduce"):
        exact_schedule(topology, make_collective("allreduce", 4), 2, SIZE)


def test_exact_with_a_rotation_is_invariant_under_it():
    from synth.core.library import resolve_topology
    from synth.core.symmetry import chunk_permutation
    from synth.milp.sketch import default_sketch

    topo = resolve_topology("ndv2")
    perm = default_sketch(topo)[0].rank_rotation(topo)
    coll = make_collective("allgather", 8, chunks=2)
    result = exact_schedule(topo, coll, 3, 1 << 20, rotation=perm)
    assert result.status == "solved" and verify(result.schedule) == []
    image = chunk_permutation(coll, perm)
    for step in result.schedule.steps:
        sends = {(s.chunk, s.src, s.dst) for s in step.sends}
        assert {(image[c], perm[a], perm[b]) for c, a, b in sends} == sends


def test_a_spent_budget_skips_the_remaining_instances():
    """The budget bounds the whole search: with none left every instance is skipped (said so),
    with enough the same search finds its schedule."""
    topology = resolve_topology("ring:4")
    lines: list[str] = []
    spent = best_exact(topology, "allgather", SIZE, max_chunks=2, time_limit=10, progress=lines.append, budget=0.0)
    assert spent.schedule is None and spent.attempts
    assert {a.status for a in spent.attempts} == {"skipped"}
    assert all("budget is spent" in line for line in lines)
    found = best_exact(topology, "allgather", SIZE, max_chunks=2, time_limit=10, progress=lambda line: None,
                       budget=60.0)
    assert found.schedule is not None and verify(found.schedule) == []
