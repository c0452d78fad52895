"""The step LP: orbit reduction, cuts and the whole-rounds floor against the plain relaxation
and against the SMT search."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.bounds import step_lp
from synth.bounds.step_lp import StepRelaxation, class_symmetry, compositions, least_rounds, step_rounds_bound
from synth.core.library import resolve_topology
from synth.smt.session import SmtSession

CASES = [("torus:3x3", "alltoall", 3, 1), ("hypercube:3", "allgather", 3, 2), ("ring:6", "allgather", 5, 2),
         ("dgx1", "allgather", 3, 2), pytest.param("mi250", "allgather", 5, 1, marks=pytest.mark.slow)]


def _plain_and_reduced(topo_name, name, steps, chunks):
    topo = resolve_topology(topo_name)
    session = SmtSession(topo, name, None)
    coll = session.collective(chunks)
    classes, scale = step_lp._classes(coll)
    group = class_symmetry(session.topology, classes)
    return (StepRelaxation(session.topology, classes, steps), StepRelaxation(session.topology, classes, steps, group),
            scale, group)


@pytest.mark.parametrize("topo_name,name,steps,chunks", CASES)
def test_the_orbit_model_gives_the_plain_models_bound_and_loads(topo_name, name, steps, chunks):
    plain, reduced, scale, group = _plain_and_reduced(topo_name, name, steps, chunks)
    assert len(group) > 1 and reduced.columns * len(group) <= plain.columns * 1.01
    assert reduced.least_total(scale) == pytest.approx(plain.least_total(scale), abs=1e-6)
    for split in compositions(steps + 2, steps).tolist()[:6]:
        assert reduced.load(tuple(split), scale) == pytest.approx(plain.load(tuple(split), scale), abs=1e-6)


def test_the_orbit_model_is_used_only_for_groups_that_move_every_class():
    topo = resolve_topology("dgx1")
    broadcast = SmtSession(topo, "broadcast", 0).collective(2)
    assert len(class_symmetry(topo, step_lp._classes(broadcast)[0])) == 1  # every symmetry fixes the root's class


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=10**6))
def test_a_cut_never_rules_out_a_split_the_lp_allows(seed):
    """Cuts come from float duals: whatever a cut rules out, the LP must rule out too."""
    import random

    rng = random.Random(seed)
    topo = resolve_topology(rng.choice(["ring:6", "dgx1", "hypercube:3"]))
    steps = rng.randint(2, 4)
    session = SmtSession(topo, "allgather", None)
    chunks = rng.randint(1, 3)
    coll = session.collective(chunks)
    rounds = rng.randint(steps, steps + 6)
    relax, scale = step_lp._relaxation_for(session.topology, coll, steps)
    relax.least_total(scale)  # its cut too
    for split in compositions(rounds, steps).tolist()[:8]:
        relax.load(tuple(split), scale)  # gather cuts
    for split in compositions(max(steps, rounds + rng.randint(-1, 2)), steps).tolist():
        if relax.cut_rules_out(tuple(split), scale):
            fresh = StepRelaxation(session.topology, step_lp._classes(coll)[0], steps)
            assert fresh.load(tuple(split), scale) > 1 + 1e-9


def test_open_splits_rule_out_mi250_allgather_at_5_steps_8_rounds_3_chunks():
    """The LP proves every split of (S=5, R=8, C=3) impossible (the 35 splits by a few solves)."""
    topo = resolve_topology("mi250")
    coll = SmtSession(topo, "allgather", None).collective(3)
    assert step_rounds_bound(topo, coll, 5) == pytest.approx(8.0)
    assert step_lp.open_splits(topo, coll, 8, 5) == []
    relax, _ = step_lp._relaxation_for(topo, coll, 5)
    assert len(relax._loads) < 12


def test_whole_rounds_raise_the_floor_and_the_solver_agrees():
    """mi250 allgather, 5 steps, 3 chunks: the LP allows 8 rounds, whole rounds per step need 9;
    the SMT search finds no schedule below the floor and one at it."""
    topo = resolve_topology("mi250")
    session = SmtSession(topo, "allgather", None)
    assert least_rounds(topo, session.collective(3), 5) == 9
    assert session.rounds_floor(5, 4) == 11
    found = session.solve(5, 11, 4, time_limit=60)
    assert found.status.value == "solved" and found.schedule.total_rounds == 11


@pytest.mark.parametrize("topo_name,name,steps,chunks", [("ring:4", "allgather", 3, 2),
                                                          ("dgx1", "allgather", 2, 2),
                                                          ("hypercube:3", "alltoall", 3, 1),
                                                          ("ring:5", "broadcast", 3, 3)])
def test_the_floor_is_never_above_what_the_solver_finds(topo_name, name, steps, chunks):
    topo = resolve_topology(topo_name)
    session = SmtSession(topo, name, 0 if name == "broadcast" else None)
    floor = session.rounds_floor(steps, chunks)
    result = None
    for rounds in range(floor, floor + 6):
        result = session.solve(steps, rounds, chunks, time_limit=30)
        if result.status.value == "solved":
            break
    assert result is not None and result.status.value == "solved" and result.schedule.total_rounds >= floor
    if floor > steps:
        below = session.solve(steps, floor - 1, chunks, time_limit=30)
        assert below.status.value == "infeasible"


def test_compositions_are_every_split_once():
    rows = compositions(7, 3).tolist()
    assert len(rows) == 15 and len({tuple(r) for r in rows}) == 15 and all(sum(r) == 7 and min(r) >= 1 for r in rows)
    assert rows[0] == [3, 2, 2] or max(rows[0]) - min(rows[0]) <= 1


# The any-steps relaxation: the middle steps pooled, a rounds floor for every step count.

@pytest.mark.parametrize("topo_name,name,chunks", [("ring:4", "allgather", 2), ("dgx1", "allgather", 2),
                                                   ("hypercube:3", "alltoall", 1), ("ring:5", "broadcast", 3),
                                                   ("torus:3x3", "allgather", 2)])
def test_the_any_steps_floor_is_below_every_step_counts_floor(topo_name, name, chunks):
    """Every S-step schedule fits the pooled model, so its floor is at most each S's (the per-S
    relaxations are exact about the step count) and at least the rounds bound."""
    from synth.bounds.lower_bounds import lower_bounds
    from synth.core.collectives import make_collective

    topo = resolve_topology(topo_name)
    session = SmtSession(topo, name, 0 if name == "broadcast" else None)
    coll = session.collective(chunks)
    anywhere = step_lp.least_rounds_any_steps(session.topology, coll)
    bound = lower_bounds(topo, make_collective(name, topo.ranks, root=0 if name == "broadcast" else None, chunks=1))
    assert anywhere >= math.ceil(bound.rounds_per_chunk * chunks - 1e-9)
    for steps in range(max(2, bound.steps), bound.steps + 5):
        assert anywhere <= session.rounds_floor(steps, chunks)


def test_the_any_steps_floor_is_what_the_solver_reaches_on_a_ring():
    """ring:4 allgather with 2 chunks: 6 rounds whatever the steps; the solver finds 6 at 3 steps
    and proves 5 impossible at 5 steps, the most a 5-round schedule can have."""
    topo = resolve_topology("ring:4")
    session = SmtSession(topo, "allgather", None)
    floor = step_lp.least_rounds_any_steps(topo, session.collective(2))
    assert session.solve(3, floor, 2, time_limit=30).status.value == "solved"
    assert session.solve(floor - 1, floor - 1, 2, time_limit=30).status.value == "infeasible"


def test_the_any_steps_floor_rules_out_mi250_allgather_budgets_the_rounds_bound_allows():
    """mi250 allgather (rounds bound 7/3 a chunk): a pair of GCDs takes 6 chunks a round from
    outside, but data first reaching it in the last step must enter both, 3 a round: 19 rounds
    for 8 chunks and 12 for 5 are ruled out at every step count, 17 for 7 is not."""
    topo = resolve_topology("mi250")
    session = SmtSession(topo, "allgather", None)
    floors = {C: step_lp.least_rounds_any_steps(topo, session.collective(C)) for C in (3, 5, 7, 8)}
    assert floors == {3: 8, 5: 13, 7: 17, 8: 20}


def test_a_pooled_step_with_no_rounds_is_the_model_without_it():
    """The pooled step may stand for no steps: on the bidirectional ring:4, allgather with one
    chunk takes 2 steps of 1 round (the far rank's chunk in step 2), and (1, pooled, 1) must
    allow exactly that; a 3-step model without the pooling needs 3."""
    topo = resolve_topology("ring:4")
    coll = SmtSession(topo, "allgather", None).collective(1)
    classes, scale = step_lp._classes(coll)
    pooled = StepRelaxation(topo, classes, 3, class_symmetry(topo, classes), pooled=2)
    assert pooled.least_total(scale) == pytest.approx(2.0) == least_rounds(topo, coll, 2)
    assert StepRelaxation(topo, classes, 3).least_total(scale) == pytest.approx(3.0)
    assert step_lp.least_rounds_any_steps(topo, coll) == 2
