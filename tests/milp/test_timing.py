"""Timing stage: merging consecutive steps. The rules are checked against the verifier (a
merge the rules allow verifies and ends in the same state; each kind of merge they forbid is
shown to break a valid schedule), the partition against brute force, and the result as a
property on random valid schedules."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.core.collective import Collective
from synth.core.collectives import allgather, broadcast, reduce
from synth.core.errors import InputError, InvalidScheduleError
from synth.core.schedule import Schedule, Send, Step, rounds_needed
from synth.core.topology import Group, Link, Topology
from synth.cost import simulate_us, step_time_us, step_times_us
from synth.milp.timing import TimingReport, merge_starts, merge_steps_at_size, timing_report
from synth.verify import verify
from tests.schedule_strategies import valid_schedules

REL = 1e-9


# ---------------------------------------------------------------------------- helpers
def mesh(n: int, bandwidth: float = 25.0, alpha: float = 0.7, groups=()) -> Topology:
    links = tuple(Link(a, b, bandwidth, alpha) for a in range(n) for b in range(n) if a != b)
    return Topology(f"mesh{n}", n, links, tuple(groups))


def sched(topo: Topology, coll: Collective, *steps: list[Send], rounds=None) -> Schedule:
    return Schedule(topo, coll, tuple(Step(tuple(sends), rounds) for sends in steps))


def merged_by_hand(schedule: Schedule, i: int, j: int) -> Schedule:
    """Steps i..j (inclusive) as one step, everything else untouched."""
    steps = schedule.steps
    block = steps[i : j + 1]
    rounds = None if any(s.rounds is None for s in block) else sum(s.rounds for s in block)
    one = Step(tuple(send for step in block for send in step.sends), rounds)
    return Schedule(schedule.topology, schedule.collective, steps[:i] + (one,) + steps[j + 1 :])


def final_state(schedule: Schedule, seed: int = 11) -> dict:
    """Replay data: random contributions summed by reduces, tokens moved by copies."""
    coll = schedule.collective
    rng = random.Random(seed)
    value: dict[tuple[int, int], tuple[int, int]] = {}
    for c, pre in enumerate(coll.pre):
        for r in pre:
            value[(r, c)] = (rng.getrandbits(60), 1 << r) if coll.combining else (c, 0)
    for step in schedule.steps:
        incoming: dict[tuple[int, int], list] = {}
        for s in step.sends:
            incoming.setdefault((s.dst, s.chunk), []).append((s.op, value[(s.src, s.chunk)]))
        landed = {}
        for key, writes in incoming.items():
            copies = [v for op, v in writes if op == "copy"]
            total, mask = copies[-1] if copies else value.get(key, (0, 0))
            for op, (v, m) in writes:
                if op == "reduce":
                    total, mask = total + v, mask | m
            landed[key] = (total, mask)
        value.update(landed)
    return value


def kinds(schedule: Schedule) -> set[str]:
    return {v.kind for v in verify(schedule)}


def flat(schedule: Schedule) -> list[Send]:
    return [send for step in schedule.steps for send in step.sends]


def brute_force_best(schedule: Schedule, size: float, max_block: int | None) -> float:
    """Least step-model time over every partition whose blocks merge_starts allows."""
    k = len(schedule.steps)
    starts = merge_starts(schedule)
    cost = {}
    for i in range(k):
        for j in range(i, k):
            if starts[j] <= i and (max_block is None or j - i + 1 <= max_block):
                cost[(i, j)] = sum(step_times_us(merged_by_hand(schedule, i, j), size)[i : i + 1])
    best = float("inf")
    for cuts in itertools.product((False, True), repeat=max(k - 1, 0)):
        bounds = [0] + [n + 1 for n, cut in enumerate(cuts) if cut] + [k]
        blocks = [(a, b - 1) for a, b in zip(bounds, bounds[1:])]
        if all(block in cost for block in blocks):
            best = min(best, sum(cost[block] for block in blocks))
    return best


# ---------------------------------------------------------------------------- the rules vs the verifier
def test_read_after_write_relay_never_merges():
    line = Topology("line4", 4, tuple(Link(i, i + 1, 25.0, 0.7) for i in range(3)))
    relay = sched(line, broadcast(4, root=0), [Send(0, 0, 1)], [Send(0, 1, 2)], [Send(0, 2, 3)])
    assert verify(relay) == []
    assert merge_starts(relay) == [0, 1, 2]
    for size in (1, 1 << 10, 1 << 30):
        assert merge_steps_at_size(relay, size).steps == relay.steps
    assert "not_held" in kinds(merged_by_hand(relay, 0, 1))  # the verifier agrees it is wrong


def test_copy_then_copy_to_same_place_does_not_merge():
    pair = mesh(2)
    twice = sched(pair, allgather(2), [Send(0, 0, 1)], [Send(0, 0, 1), Send(1, 1, 0)])
    assert verify(twice) == []
    assert merge_starts(twice) == [0, 1]
    assert len(merge_steps_at_size(twice, 1).steps) == 2
    assert "conflicting_write" in kinds(merged_by_hand(twice, 0, 1))


def _reduce5(middle: list[Send]) -> Schedule:
    """reduce to root 0 on 5 ranks: root and rank 2 collect, then ``middle`` at ranks 1/3/4."""
    return sched(
        mesh(5), reduce(5, root=0),
        [Send(0, 1, 0, "reduce"), Send(0, 4, 0, "reduce"), Send(0, 3, 2, "reduce")],
        [Send(0, 2, 0, "reduce"), middle[0]],
        middle[1:],
    )


def test_copy_then_reduce_to_same_place_does_not_merge():
    s = _reduce5([Send(0, 4, 1, "copy"), Send(0, 3, 1, "reduce")])
    assert verify(s) == []
    assert merge_starts(s)[2] == 2  # only the write-write pair (1, 2) conflicts
    assert "conflicting_write" in kinds(merged_by_hand(s, 1, 2))
    assert len(merge_steps_at_size(s, 1).steps) == 3


def test_reduce_then_copy_to_same_place_does_not_merge():
    s = _reduce5([Send(0, 3, 1, "reduce"), Send(0, 2, 1, "copy")])
    assert verify(s) == []
    assert merge_starts(s)[2] == 2
    assert "conflicting_write" in kinds(merged_by_hand(s, 1, 2))


def test_reduce_then_reduce_to_same_place_merges():
    star = Topology("star3", 3, (Link(1, 0, 25.0, 0.7), Link(2, 0, 25.0, 0.7), Link(2, 1, 25.0, 0.7)))
    s = sched(star, reduce(3, root=0), [Send(0, 1, 0, "reduce")], [Send(0, 2, 0, "reduce")])
    assert verify(s) == []
    assert merge_starts(s) == [0, 0]
    merged = merge_steps_at_size(s, 1)
    assert len(merged.steps) == 1 and final_state(merged) == final_state(s)


def test_write_after_read_merges_for_copy_and_reduce():
    # copy: 1 sends c1 to 0, then 2 (which got c1 earlier) rewrites 1's c1
    copy_war = sched(mesh(3), allgather(3), [Send(1, 1, 2), Send(0, 0, 1), Send(2, 2, 0)],
                     [Send(1, 1, 0), Send(0, 0, 2)], [Send(1, 2, 1), Send(2, 2, 1)])
    # reduce: 1 sends its partial to root 0, then 2 reduces into 1
    star = Topology("star3", 3, (Link(1, 0, 25.0, 0.7), Link(2, 0, 25.0, 0.7), Link(2, 1, 25.0, 0.7)))
    reduce_war = sched(star, reduce(3, root=0), [Send(0, 1, 0, "reduce")], [Send(0, 2, 1, "reduce")],
                       [Send(0, 2, 0, "reduce")])
    for s, (i, j) in ((copy_war, (1, 2)), (reduce_war, (0, 2))):
        assert verify(s) == []
        assert merge_starts(s)[j] <= i
        by_hand = merged_by_hand(s, i, j)
        assert verify(by_hand) == [] and final_state(by_hand) == final_state(s)
    assert len(merge_steps_at_size(reduce_war, 1).steps) == 1


# ---------------------------------------------------------------------------- partitions
def test_independent_steps_on_disjoint_resources_cost_the_max():
    nic = Group("nic", ((0, 1),), 10.0)
    pair = Topology("pair", 2, (Link(0, 1, 50.0, 0.7), Link(1, 0, 25.0, 2.0)), (nic,))
    s = sched(pair, allgather(2, chunks=2), [Send(0, 0, 1), Send(1, 0, 1)], [Send(2, 1, 0), Send(3, 1, 0)],
              rounds=2)
    for size in (1 << 10, 1 << 20, 1 << 30):
        merged = merge_steps_at_size(s, size)
        assert len(merged.steps) == 1 and merged.steps[0].rounds == 4
        times = step_times_us(s, size)
        assert step_time_us(merged, size) == pytest.approx(max(times), rel=REL)
        assert step_time_us(merged, size) < sum(times)


def test_alpha_bound_independent_sequence_merges_fully():
    coll = allgather(4)
    direct = [[Send(c, c, d)] for c in range(4) for d in range(4) if d != c]
    s = sched(mesh(4), coll, *direct, rounds=1)
    merged = merge_steps_at_size(s, 1)
    assert len(merged.steps) == 1 and merged.steps[0].rounds == 12
    assert merged.meta["timing"] == {"merged_from": 12, "steps": 1, "size": 1}
    capped = merge_steps_at_size(s, 1, max_block=5)
    assert sorted(len(step.sends) for step in capped.steps) == [2, 5, 5]  # ties: any order


def test_dynamic_program_beats_greedy_blocks():
    # step 2 reads what step 0 wrote: blocks [0,1][2] or [0][1,2]; the second is cheaper
    coll = Collective("custom", 4, False, ({0}, {2}, {2}, {1}), ({0, 1, 2}, {2, 3}, {2, 3}, {1, 2}), 4)
    s = sched(mesh(4), coll, [Send(0, 0, 1)], [Send(1, 2, 3), Send(2, 2, 3)], [Send(0, 1, 2), Send(3, 1, 2)])
    assert verify(s) == [] and merge_starts(s) == [0, 0, 1]
    merged = merge_steps_at_size(s, 1 << 20)
    assert [len(step.sends) for step in merged.steps] == [1, 4]
    assert step_time_us(merged, 1 << 20) == pytest.approx(brute_force_best(s, 1 << 20, None), rel=REL)


def test_rounds_none_and_empty_steps():
    s = Schedule(mesh(2), allgather(2), (Step((), 1), Step((Send(0, 0, 1),), None), Step((Send(1, 1, 0),), 2)))
    merged = merge_steps_at_size(s, 1)
    assert len(merged.steps) == 1 and merged.steps[0].rounds is None
    nothing = Collective("noop", 2, False, ({0},), ({0},), 1)
    empty = Schedule(mesh(2), nothing, (), {"synthesizer": "test"})
    out = merge_steps_at_size(empty, 1 << 20)
    assert out.steps == () and out.meta == {"synthesizer": "test",
                                            "timing": {"merged_from": 0, "steps": 0, "size": 1 << 20}}


def test_bad_arguments_and_invalid_input():
    s = sched(mesh(2), allgather(2), [Send(0, 0, 1), Send(1, 1, 0)])
    for size in (0, -1, float("nan"), "1M"):
        with pytest.raises(InputError):
            merge_steps_at_size(s, size)
    for cap in (0, -2, 1.5, True):
        with pytest.raises(InputError):
            merge_steps_at_size(s, 1024, max_block=cap)
    not_held = sched(mesh(3), allgather(3), [Send(0, 1, 2)], [Send(1, 1, 2)])
    with pytest.raises(InvalidScheduleError):
        merge_steps_at_size(not_held, 1024)
    no_link = sched(Topology("one", 2, (Link(0, 1, 25.0),)), allgather(2), [Send(1, 1, 0)])
    with pytest.raises(InvalidScheduleError, match="not a link"):
        merge_steps_at_size(no_link, 1024)


def test_timing_report():
    coll = allgather(4)
    s = sched(mesh(4), coll, *[[Send(c, c, d)] for c in range(4) for d in range(4) if d != c])
    merged = merge_steps_at_size(s, 4096)
    report = timing_report(s, merged, 4096)
    assert isinstance(report, TimingReport)
    assert (report.steps_before, report.steps_after) == (12, 1)
    assert report.step_time_after_us < report.step_time_before_us and report.speedup > 1
    assert report.simulated_after_us == pytest.approx(report.simulated_before_us, rel=REL)
    assert "12 -> 1 steps" in str(report)
    with pytest.raises(AttributeError):
        report.steps_after = 3  # frozen


# ---------------------------------------------------------------------------- properties
@st.composite
def split_schedules(draw) -> Schedule:
    """A random copy-only schedule with every step cut into consecutive pieces: still valid
    (a piece reads what its step read, and copies never take data away), and full of steps
    that may merge again."""
    base = draw(valid_schedules(combining=False))
    steps = []
    for step in base.steps:
        sends = list(step.sends)
        cuts = sorted(draw(st.sets(st.integers(1, max(len(sends) - 1, 1)), max_size=3)))
        pieces = [sends[a:b] for a, b in zip([0] + cuts, cuts + [len(sends)]) if sends[a:b]]
        for piece in pieces or [sends]:
            steps.append(Step(tuple(piece), rounds_needed(base.topology, piece)))
    return Schedule(base.topology, base.collective, tuple(steps))


SIZES = st.integers(1 << 10, 1 << 30)
CAPS = st.none() | st.integers(1, 4)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_schedules() | split_schedules(), SIZES, CAPS)
def test_merge_is_valid_equivalent_and_never_slower(schedule, size, cap):
    assert verify(schedule) == []
    merged = merge_steps_at_size(schedule, size, max_block=cap)
    assert verify(merged) == []
    assert final_state(merged) == final_state(schedule)
    assert flat(merged) == flat(schedule)  # same sends, same order: blocks of consecutive steps
    assert merged.total_rounds == schedule.total_rounds
    before, after = step_time_us(schedule, size), step_time_us(merged, size)
    assert after <= before * (1 + REL)
    assert simulate_us(merged, size) == pytest.approx(simulate_us(schedule, size), rel=REL)
    assert merged.meta["timing"] == {"merged_from": len(schedule.steps), "steps": len(merged.steps), "size": size}
    if len(schedule.steps) <= 9:
        assert after == pytest.approx(brute_force_best(schedule, size, cap), rel=REL)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_schedules() | split_schedules())
def test_every_block_the_rules_allow_verifies_and_keeps_the_outcome(schedule):
    starts = merge_starts(schedule)
    expected = final_state(schedule)
    for j in range(len(schedule.steps)):
        assert 0 <= starts[j] <= j and (j == 0 or starts[j] >= starts[j - 1])
        for i in range(starts[j], j):
            by_hand = merged_by_hand(schedule, i, j)
            assert verify(by_hand) == [], (i, j)
            assert final_state(by_hand) == expected, (i, j)
