"""The verifier: contract examples, hand-made violations, and property tests against an
independent data-level replay (tests/reference_replay.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.core.collectives import allgather, allreduce, broadcast, reduce_scatter
from synth.core.io import read_json
from synth.core.schedule import Schedule, Send, Step
from synth.core.topology import Group, Link, Topology
from synth.verify import verify
from tests.reference_replay import reference_valid
from tests.schedule_strategies import MUTATIONS, mutate, valid_schedules

DATA = Path(__file__).parent / "data"


def load(name: str) -> Schedule:
    return Schedule.from_dict(read_json(DATA / name))


def kinds(schedule: Schedule) -> list[str]:
    return [v.kind for v in verify(schedule)]


def uring(n: int = 4) -> Topology:
    return Topology(f"uring{n}", n, tuple(Link(i, (i + 1) % n, 25.0, 0.7) for i in range(n)))


# ---------------------------------------------------------------- contract examples
def test_ring_examples_are_valid():
    assert verify(load("schedule-uring4-allgather-ring.json")) == []
    assert verify(load("schedule-uring4-allreduce-ring.json")) == []


def test_double_count_example_reports_capacity_and_double_count():
    found = verify(load("schedule-uring4-allreduce-double-count.json"))
    assert [(v.step, v.kind) for v in found] == [(1, "link_capacity"), (1, "double_count")]
    assert "3->0" in found[0].message
    assert "rank 0 chunk 3" in found[1].message and "3" in found[1].message


def test_no_link_example_reports_all_three_problems():
    found = verify(load("schedule-uring4-allgather-no-link.json"))
    assert (0, "no_link") in [(v.step, v.kind) for v in found]
    assert (0, "not_held") in [(v.step, v.kind) for v in found]
    post = [v for v in found if v.kind == "postcondition"]
    assert len(post) == 1 and "ranks 1, 2, 3" in post[0].message and "chunk 0" in post[0].message


# ---------------------------------------------------------------- hand-made violations
def ring_allgather(n: int = 4) -> list[Step]:
    return [Step(tuple(Send((i - k) % n, i, (i + 1) % n) for i in range(n)), 1) for k in range(n - 1)]


def test_two_copies_into_one_rank_conflict_but_two_reduces_do_not():
    topo = Topology("full3", 3, tuple(Link(a, b, 25.0) for a in range(3) for b in range(3) if a != b))
    copies = Schedule(topo, broadcast(3, 0), (Step((Send(0, 0, 1),)), Step((Send(0, 0, 2), Send(0, 1, 2)))))
    assert "conflicting_write" in kinds(copies)
    rs = reduce_scatter(3)
    reduces = Schedule(topo, rs, (Step(tuple(Send(c, r, c, "reduce") for c in range(3) for r in range(3) if r != c)),))
    assert verify(reduces) == []


def test_reduce_on_plain_collective_is_rejected():
    steps = ring_allgather()
    steps[0] = Step((Send(0, 0, 1, "reduce"),) + steps[0].sends[1:], 1)
    assert "reduce_not_combining" in kinds(Schedule(uring(), allgather(4), tuple(steps)))


def test_group_capacity_is_enforced_and_rounds_relax_it():
    links = (Link(0, 1, 25.0), Link(0, 2, 25.0), Link(1, 0, 25.0), Link(2, 0, 25.0))
    topo = Topology("fan", 3, links, (Group("port0", ((0, 1), (0, 2)), 25.0),))
    one_round = Schedule(topo, broadcast(3, 0), (Step((Send(0, 0, 1), Send(0, 0, 2)), 1),))
    assert kinds(one_round) == ["group_capacity"]
    two_rounds = Schedule(topo, broadcast(3, 0), (Step((Send(0, 0, 1), Send(0, 0, 2)), 2),))
    assert verify(two_rounds) == []
    no_rounds = Schedule(topo, broadcast(3, 0), (Step((Send(0, 0, 1), Send(0, 0, 2)), None),))
    assert verify(no_rounds) == []


def test_partial_reduction_is_a_postcondition_failure():
    topo = uring(3)
    schedule = Schedule(topo, allreduce(3), (Step((Send(0, 0, 1, "reduce"),)),))
    found = verify(schedule)
    assert any("without every contribution" in v.message for v in found)


def test_bad_ranks_chunks_and_rounds():
    schedule = Schedule(uring(), allgather(4), (Step((Send(9, 0, 1), Send(0, 0, 7)), 0),))
    assert set(kinds(schedule)) >= {"bad_chunk", "bad_rank", "bad_rounds", "postcondition"}


def test_sends_read_the_state_at_step_start():
    # 0->1 and 1->2 of chunk 0 in the same step: rank 1 does not hold it yet
    schedule = Schedule(uring(3), broadcast(3, 0), (Step((Send(0, 0, 1), Send(0, 1, 2))),))
    assert "not_held" in kinds(schedule)


# ---------------------------------------------------------------- properties
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(valid_schedules())
def test_random_valid_schedules_pass(schedule):
    assert reference_valid(schedule)
    assert verify(schedule) == []


@SETTINGS
@given(valid_schedules(), st.sampled_from(MUTATIONS), st.integers(0, 2**32 - 1))
def test_mutations_are_caught_exactly_when_invalid(schedule, kind, seed):
    mutated = mutate(schedule, kind, random.Random(seed))
    found = verify(mutated)
    assert (found == []) == reference_valid(mutated), [str(v) for v in found]


@SETTINGS
@given(valid_schedules(combining=True), st.integers(0, 2**32 - 1))
def test_duplicated_reduce_is_always_caught(schedule, seed):
    # a combining schedule reduces every rank's contribution up a tree (2+ ranks): there is
    # always a reduce to duplicate, so the mutation always applies
    assert any(send.op == "reduce" for step in schedule.steps for send in step.sends)
    mutated = mutate(schedule, "duplicate_reduce", random.Random(seed))
    assert mutated is not schedule and mutated.send_count == schedule.send_count + 1
    assert not reference_valid(mutated)
    assert verify(mutated) != []


@SETTINGS
@given(valid_schedules(combining=False), st.integers(0, 2**32 - 1))
def test_dropping_a_needed_send_is_caught(schedule, seed):
    # needed: every send that delivers chunk c to a rank that must end with it and lacks it at
    # the start; dropping all of them leaves that rank without c, whatever else the flood sends
    coll = schedule.collective
    needed = sorted({(s.chunk, s.dst) for step in schedule.steps for s in step.sends
                     if s.dst in coll.post[s.chunk] and s.dst not in coll.pre[s.chunk]})
    assert needed  # every non-combining collective moves some chunk to a rank that needs it
    chunk, dst = random.Random(seed).choice(needed)
    mutated = Schedule(schedule.topology, coll, tuple(
        Step(tuple(s for s in step.sends if (s.chunk, s.dst) != (chunk, dst)), step.rounds)
        for step in schedule.steps))
    assert not reference_valid(mutated)
    found = verify(mutated)
    # the end's "ranks A, B never receive chunk C" names dst
    never = {int(rank) for v in found if v.step is None and v.kind == "postcondition"
             and v.message.endswith(f" never receive chunk {chunk}")
             for rank in v.message.removeprefix("ranks ").split(" never receive ")[0].split(", ")}
    assert dst in never, [str(v) for v in found]


@pytest.mark.parametrize("n", [2, 3, 5])
def test_ring_allgather_is_valid_for_any_size(n):
    assert verify(Schedule(uring(n), allgather(n), tuple(ring_allgather(n)))) == []
