"""Reductions as objects (synth.core.reductions): which one a collective needs, what apply gives,
that invert maps verified part schedules to a verified schedule for the whole, and the driver's
order, stop and ``solves`` rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.core.collective import Collective
from synth.core.collectives import allgather, allreduce, broadcast, make_collective, reduce, reduce_scatter
from synth.core.errors import InputError
from synth.core.generators import full, line, ring, star, uring
from synth.core.reductions import COMPOSITION, DUAL, Part, reduction_for, solve_reduced
from synth.greedy.pipeline import greedy_schedule
from synth.verify import verify


def greedy_part(part: Part):
    return greedy_schedule(part.topology, part.collective)


def test_each_collective_gets_the_reduction_it_needs():
    assert reduction_for(allreduce(4, 3)) is COMPOSITION
    assert reduction_for(reduce_scatter(4)) is DUAL
    assert reduction_for(reduce(4, 2)) is DUAL
    assert reduction_for(allgather(4)) is None and reduction_for(broadcast(4, 1)) is None


def test_a_combining_collective_that_is_not_allreduce_is_not_composed():
    everyone = frozenset(range(3))
    odd = Collective("allreduce", 3, True, (everyone, everyone), (everyone, everyone), 2)  # named so, 2 chunks
    assert reduction_for(odd) is DUAL
    with pytest.raises(InputError, match="has no dual"):
        solve_reduced(ring(3), odd, greedy_part)


def test_the_dual_is_the_non_combining_collective_on_the_reversed_topology():
    topology = uring(4)
    (part,) = DUAL.apply(Part.of(topology, reduce(4, 1)))
    assert part.topology == topology.reversed() and part.reversed
    assert part.collective == broadcast(4, 1)
    assert part.label == "reduce as reversed broadcast"


def test_the_composition_is_reduce_scatter_then_allgather_at_the_same_chunks():
    parts = COMPOSITION.apply(Part.of(ring(4), allreduce(4, 3)))
    assert [p.collective for p in parts] == [reduce_scatter(4, 3), allgather(4, 3)]
    assert [p.label for p in parts] == ["reduce_scatter", "allgather"]


def test_the_driver_solves_the_parts_in_order_and_stops_at_the_first_without_an_answer():
    seen = []

    def nothing(part):
        seen.append(part.label)
        return None

    assert solve_reduced(uring(4), allreduce(4), nothing) is None
    assert seen == ["reduce_scatter as reversed allgather"]  # the allgather part is never tried


def test_solves_stops_the_reductions_where_the_backend_takes_over():
    seen = []

    def record(part):
        seen.append((part.label, part.collective.name, part.reversed))
        return greedy_schedule(part.topology, make_collective("allgather", 4)) if not part.collective.combining \
            else None

    solve_reduced(ring(4), allreduce(4), record, solves=lambda c: not COMPOSITION.applies(c))
    assert seen == [("reduce_scatter", "reduce_scatter", False)]


def test_invert_labels_the_schedule_with_the_collective_given():
    part = Part.of(ring(4), reduce_scatter(4))
    (dual,) = DUAL.apply(part)
    forward = greedy_part(dual)
    assert DUAL.invert(part, [forward]).collective == reduce_scatter(4)
    other = reduce_scatter(4, 1)
    assert DUAL.invert(part, [forward], other).collective is other


TOPOLOGIES = {"ring": ring, "uring": uring, "line": line, "full": full, "star": star}
COLLECTIVES = {
    "allreduce": lambda n, c: allreduce(n, c),
    "reduce_scatter": lambda n, c: reduce_scatter(n, c),
    "reduce": lambda n, c: reduce(n, n - 1, c),
    "allgather": lambda n, c: allgather(n, c),
}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(TOPOLOGIES)), st.integers(3, 6), st.sampled_from(sorted(COLLECTIVES)),
       st.integers(1, 3))
def test_every_reduced_schedule_verifies_on_the_original_problem(kind, ranks, name, chunks):
    if kind == "line" and name == "allreduce" and ranks > 5:
        ranks = 5
    topology, collective = TOPOLOGIES[kind](ranks), COLLECTIVES[name](ranks, chunks)
    schedule = solve_reduced(topology, collective, greedy_part)
    assert schedule.topology == topology and schedule.collective == collective
    assert verify(schedule) == []
