"""The verifier's rules for switch entries (DESIGN.md, "In-network reduction and multicast"):
hand-made cases on small machines, each rule broken alone giving exactly its violation kind,
and property tests against an independent data-level replay (tests/switch_strategies.py)."""

from __future__ import annotations

import functools
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.baselines import build_baseline
from synth.core.collectives import allgather, allreduce, reduce_scatter
from synth.core.library import resolve_topology
from synth.core.schedule import Schedule, Send, Step, SwitchSend
from synth.verify import verify
from tests.switch_strategies import (
    SWITCH_MUTATIONS,
    box,
    fewest_rounds,
    make_steps,
    mutate_switches,
    reference_valid,
    switch_schedules,
)

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MUTATION_SETTINGS = settings(SETTINGS, max_examples=300)
SW = "nvs"


def kinds(schedule: Schedule) -> list[str]:
    return [v.kind for v in verify(schedule)]


def entry(chunk: int, srcs, dsts, switch: str = SW) -> SwitchSend:
    return SwitchSend(chunk, switch, tuple(srcs), tuple(dsts))


def nvls_raw(n: int, include_head: bool = True) -> list[tuple[list, list]]:
    """Allreduce of n chunks, chunk c's head c: every port reduced to c, then multicast from c."""
    everyone = range(n)
    return [([], [entry(c, everyone, [c]) for c in everyone]),
            ([], [entry(c, [c], [r for r in everyone if include_head or r != c]) for c in everyone])]


def nvls(topo, include_head: bool = True) -> Schedule:
    n = topo.ranks
    return Schedule(topo, allreduce(n), make_steps(topo, nvls_raw(n, include_head)))


def multicast_allgather_raw(n: int) -> list[tuple[list, list]]:
    return [([], [entry(c, [c], [r for r in range(n) if r != c]) for c in range(n)])]


def with_steps(schedule: Schedule, raw, before: bool = False) -> Schedule:
    """``schedule`` with the steps of ``raw`` (fewest rounds) appended (or put first)."""
    added = make_steps(schedule.topology, raw)
    steps = added + schedule.steps if before else schedule.steps + added
    return Schedule(schedule.topology, schedule.collective, steps)


# ---------------------------------------------------------------- valid schedules
@pytest.mark.parametrize("include_head", [True, False])
def test_nvls_allreduce_verifies_with_the_head_in_or_out_of_the_multicast(include_head):
    schedule = nvls(box(4), include_head)
    # by hand: every out-port carries 4 chunks in step 0 (and its gpuR-out group); the in-ports
    # 4 (3 without the head) in step 1
    assert [step.rounds for step in schedule.steps] == [4, 4 if include_head else 3]
    assert verify(schedule) == []
    assert reference_valid(schedule)


def test_ports_on_some_ranks_with_point_to_point_for_the_others_verify():
    topo = box(4, ports=(0, 1, 2))
    coll = allreduce(4)
    raw = [([Send(c, 3, 0, "reduce") for c in range(4)], []),
           ([], [entry(c, (0, 1, 2), [c % 3]) for c in range(4)]),
           ([], [entry(c, [c % 3], (0, 1, 2)) for c in range(4)]),
           ([Send(c, 1, 3) for c in range(4)], [])]
    assert verify(Schedule(topo, coll, make_steps(topo, raw))) == []


def test_one_src_one_dst_needs_no_capability():
    topo = box(3, reduce=False, multicast=False)
    raw = [([], [entry(c, [c], [d]) for c in range(3) for d in range(3) if d != c])]
    assert verify(Schedule(topo, allgather(3), make_steps(topo, raw))) == []


def test_reduce_multicast_in_one_entry_verifies_on_a_switch_that_has_it():
    topo = box(4, reduce=False, multicast=False, reduce_multicast=True)
    raw = [([], [entry(c, range(4), range(4)) for c in range(4)])]
    assert verify(Schedule(topo, allreduce(4), make_steps(topo, raw))) == []


def test_nvls_within_machines_and_sharp_between_them_verify_on_h100x2_sharp():
    topo = resolve_topology("h100x2+sharp")
    m0, m1 = tuple(range(8)), tuple(range(8, 16))
    heads = {c: (c % 8, 8 + c % 8) for c in range(16)}
    raw = [([], [e for c in range(16) for e in (entry(c, m0, [heads[c][0]], "m0-nvswitch"),
                                                 entry(c, m1, [heads[c][1]], "m1-nvswitch"))]),
           ([], [entry(c, heads[c], heads[c], "sharp") for c in range(16)]),
           ([], [e for c in range(16) for e in (entry(c, [heads[c][0]], m0, "m0-nvswitch"),
                                                 entry(c, [heads[c][1]], m1, "m1-nvswitch"))])]
    schedule = Schedule(topo, allreduce(16), make_steps(topo, raw))
    assert verify(schedule) == [] and reference_valid(schedule)


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reduce_scatter"])
@pytest.mark.parametrize("chunks", [1, 2])
def test_the_nccl_nvls_baseline_verifies(collective, chunks):
    schedule = build_baseline(resolve_topology("h100"), "nccl_nvls", collective, chunks=chunks)
    assert schedule.switch_count and schedule.send_count == 0
    assert verify(schedule) == [] and reference_valid(schedule)
    for step in schedule.steps:  # its rounds are the fewest that fit (counted here independently)
        assert step.rounds == fewest_rounds(schedule.topology, step.sends, step.switches)


# ---------------------------------------------------------------- each rule broken alone
def test_an_unknown_switch_is_no_switch():
    found = verify(with_steps(nvls(box(4)), [([], [entry(0, [0], [1], "ghost")])]))
    assert [(v.step, v.kind) for v in found] == [(2, "no_switch")]
    assert "ghost" in found[0].message and "nvs" in found[0].message


def test_renaming_a_needed_entry_is_no_switch_and_the_chunk_is_missed():
    schedule = nvls(box(4))
    steps = list(schedule.steps)
    steps[1] = replace(steps[1], switches=(replace(steps[1].switches[0], switch="ghost"), *steps[1].switches[1:]))
    assert sorted(set(kinds(replace(schedule, steps=tuple(steps))))) == ["no_switch", "postcondition"]


@pytest.mark.parametrize("srcs, dsts", [([0], [3]), ([3], [0]), ([0], [1, 3])])
def test_a_rank_that_is_not_a_port_is_not_a_port(srcs, dsts):
    topo = box(4, ports=(0, 1, 2))
    raw = [([], [entry(c, [c], [r for r in range(3) if r != c]) for c in range(3)]),
           ([Send(c, c % 3, 3) for c in range(3)] + [Send(3, 3, r) for r in range(3)], [])]
    base = Schedule(topo, allgather(4), make_steps(topo, raw))
    assert verify(base) == []
    found = verify(with_steps(base, [([], [entry(0, srcs, dsts)])]))
    assert [v.kind for v in found] == ["not_a_port"] and "3" in found[0].message


def test_a_multicast_on_a_switch_without_multicast_is_switch_capability():
    found = verify(nvls(box(4, multicast=False)))
    assert [(v.step, v.kind) for v in found] == [(1, "switch_capability")] * 4
    assert "multicast" in found[0].message


def test_a_reduce_on_a_switch_with_only_multicast_is_switch_capability():
    found = verify(nvls(box(4, reduce=False)))
    assert [(v.step, v.kind) for v in found] == [(0, "switch_capability")] * 4
    assert "reduce" in found[0].message


def test_several_srcs_and_dsts_without_reduce_multicast_is_switch_capability():
    topo = box(4, reduce=True, multicast=True, reduce_multicast=False)
    raw = [([], [entry(c, range(4), range(4)) for c in range(4)])]
    found = verify(Schedule(topo, allreduce(4), make_steps(topo, raw)))
    assert [v.kind for v in found] == ["switch_capability"] * 4 and "reduce_multicast" in found[0].message


def test_several_srcs_in_allgather_is_reduce_not_combining():
    topo = box(4)
    raw = [([Send(0, 0, 1)], [entry(c, [c], [r for r in range(4) if r != c]) for c in (1, 2, 3)]),
           ([], [entry(0, [0, 1], [2]), entry(0, [0], [3])])]
    assert kinds(Schedule(topo, allgather(4), make_steps(topo, raw))) == ["reduce_not_combining"]


def test_a_src_that_does_not_hold_the_chunk_is_not_held():
    topo = box(4)
    base = Schedule(topo, allgather(4), make_steps(topo, multicast_allgather_raw(4)))
    found = verify(with_steps(base, [([], [entry(0, [1], [2])])], before=True))
    assert [(v.step, v.kind) for v in found] == [(0, "not_held")] and "rank 1" in found[0].message


def test_overlapping_contributions_are_double_count():
    topo = box(4)
    raw = [([Send(0, 1, 0, "reduce")], []),  # rank 0 now holds contributions {0, 1} of chunk 0
           ([], [entry(0, range(4), [3]),  # {0, 1} + {1} + ...: rank 1's counted twice at rank 3
                 entry(0, (0, 2, 3), [2])] + [entry(c, range(4), [c]) for c in (1, 2, 3)]),
           ([], [entry(0, [2], (0, 1, 3))] + [entry(c, [c], [r for r in range(4) if r != c]) for c in (1, 2, 3)])]
    # rank 3's doubled sum is replaced in the last step, so the end state is right
    assert [(v.step, v.kind) for v in verify(Schedule(topo, allreduce(4), make_steps(topo, raw)))] == \
        [(1, "double_count")]


@pytest.mark.parametrize("op", ["copy", "reduce"])
def test_a_switch_entry_and_a_send_writing_one_place_are_conflicting_write(op):
    topo = box(4)
    raw = nvls_raw(4)
    raw[1][0].append(Send(0, 1, 2, op))  # rank 2's chunk 0 is also written by chunk 0's multicast
    found = verify(Schedule(topo, allreduce(4), make_steps(topo, raw)))
    assert [(v.step, v.kind) for v in found] == [(1, "conflicting_write")]
    assert "rank 2 chunk 0" in found[0].message


def test_two_switch_entries_writing_one_place_are_conflicting_write():
    topo = box(4)
    raw = nvls_raw(4)
    raw[1][1].append(entry(0, [0], [2]))  # the same value, but two writes
    found = verify(Schedule(topo, allreduce(4), make_steps(topo, raw)))
    assert [(v.step, v.kind) for v in found] == [(1, "conflicting_write")]


@pytest.mark.parametrize("step, direction", [(0, "out"), (1, "in")])
def test_too_many_chunks_on_a_port_for_the_rounds_is_switch_capacity(step, direction):
    schedule = nvls(box(4, groups=False))
    steps = list(schedule.steps)
    steps[step] = replace(steps[step], rounds=3)  # every such port carries 4 chunks
    found = verify(replace(schedule, steps=tuple(steps)))
    assert [(v.step, v.kind) for v in found] == [(step, "switch_capacity")] * 4
    assert f"({direction})" in found[0].message


def test_a_bigger_switch_capacity_lets_the_ports_carry_more():
    assert verify(replace(nvls(box(4, groups=False, capacity=4)), steps=tuple(
        replace(step, rounds=1) for step in nvls(box(4, groups=False)).steps))) == []


def test_a_ports_group_overloaded_by_entries_is_group_capacity():
    schedule = nvls(box(4, capacity=4))  # the ports fit in one round, their gpuR groups do not
    found = verify(replace(schedule, steps=tuple(replace(step, rounds=1) for step in schedule.steps)))
    assert sorted({(v.step, v.kind) for v in found}) == [(0, "group_capacity"), (1, "group_capacity")]
    assert {v.message.split("'")[1] for v in found} == {f"gpu{r}-{d}" for r in range(4) for d in ("out", "in")}


@pytest.mark.parametrize("port_groups, expected", [(True, ["group_capacity"]), (False, [])])
def test_a_port_and_a_link_share_the_ranks_group(port_groups, expected):
    topo = box(4, capacity=4, port_groups=port_groups)
    first = Step((Send(0, 0, 3),), 1, (entry(0, [0], [1, 2]),))  # gpu0-out: one link chunk + one port chunk
    rest = make_steps(topo, [([], [entry(c, [c], [r for r in range(4) if r != c]) for c in (1, 2, 3)])])
    found = verify(Schedule(topo, allgather(4), (first, *rest)))
    assert [v.kind for v in found] == expected
    if expected:
        assert "gpu0-out" in found[0].message


def test_a_port_in_group_counts_links_into_the_rank():
    topo = box(4, capacity=4)
    first = Step((Send(2, 2, 0),), 1, (entry(1, [1], [0]),))  # gpu0-in: one link chunk + one port chunk
    found = verify(Schedule(topo, allgather(4), (first,)))
    assert [v.kind for v in found if v.step == 0] == ["group_capacity"] and "gpu0-in" in found[0].message


@pytest.mark.parametrize("collective", ["allreduce", "allgather"])
def test_a_missing_entry_is_postcondition(collective):
    topo = box(4)
    raw = nvls_raw(4) if collective == "allreduce" else multicast_allgather_raw(4)
    raw[-1][1].pop(2)
    coll = allreduce(4) if collective == "allreduce" else allgather(4)
    found = verify(Schedule(topo, coll, make_steps(topo, raw)))
    assert [(v.step, v.kind) for v in found] == [(None, "postcondition")] and "chunk 2" in found[0].message


def test_a_dst_not_among_the_srcs_loses_its_own_contribution():
    """The sum *replaces* the dst's copy: reducing ranks 0-2 into rank 3 drops rank 3's part."""
    topo = box(4)
    raw = nvls_raw(4)
    raw[0][1][3] = entry(3, (0, 1, 2), [3])
    found = verify(Schedule(topo, allreduce(4), make_steps(topo, raw)))
    assert [(v.step, v.kind) for v in found] == [(None, "postcondition")]
    assert "chunk 3 without every contribution" in found[0].message


def test_a_dst_not_among_the_srcs_is_right_when_its_part_went_in_first():
    topo = box(4)
    raw = nvls_raw(4)
    raw[0][1][3] = entry(3, (0, 1, 2), [3])
    raw.insert(0, ([Send(3, 3, 1, "reduce")], []))
    assert verify(Schedule(topo, allreduce(4), make_steps(topo, raw))) == []


def test_reduce_scatter_to_a_rank_outside_the_srcs_misses_its_part():
    topo = box(3)
    raw = [([], [entry(c, [r for r in range(3) if r != c or c == 0], [c]) for c in range(3)])]
    found = verify(Schedule(topo, reduce_scatter(3), make_steps(topo, raw)))
    assert [v.kind for v in found] == ["postcondition", "postcondition"]


@pytest.mark.parametrize("bad", [entry(0, [], [1]), entry(0, [0], []), entry(0, [0, 0], [1]), entry(0, [0], [1, 1])])
def test_empty_or_repeated_ranks_are_bad_switch_entry(bad):
    base = nvls(box(4))
    extra = Step((), 2, (bad,))  # two rounds: a repeated rank fits its port
    assert kinds(replace(base, steps=(*base.steps, extra))) == ["bad_switch_entry"]


@pytest.mark.parametrize("bad, kind", [(entry(0, [0], [9]), "bad_rank"), (entry(0, [-1], [1]), "bad_rank"),
                                       (entry(7, [0], [1]), "bad_chunk")])
def test_ranks_and_chunks_out_of_range(bad, kind):
    topo = box(4)
    base = Schedule(topo, allgather(4), make_steps(topo, multicast_allgather_raw(4)))
    assert kinds(with_steps(base, [([], [bad])])) == [kind]


# ---------------------------------------------------------------- property tests
@SETTINGS
@given(switch_schedules())
def test_random_valid_switch_schedules_verify(schedule):
    assert reference_valid(schedule)  # the generator's own check, independent of synth.verify
    assert verify(schedule) == []


@MUTATION_SETTINGS
@given(switch_schedules(), st.sampled_from(SWITCH_MUTATIONS), st.integers(0, 2**32 - 1))
def test_mutations_of_random_switch_schedules_are_caught_exactly_when_they_break_it(schedule, kind, seed):
    mutated = mutate_switches(schedule, kind, random.Random(seed))
    found = verify(mutated)
    assert (found == []) == reference_valid(mutated), (kind, found)


@SETTINGS
@given(switch_schedules(), st.sampled_from(["pre_reduce", "squeeze"]), st.integers(0, 2**32 - 1))
def test_a_double_count_and_a_round_short_are_named(schedule, kind, seed):
    mutated = mutate_switches(schedule, kind, random.Random(seed))
    if mutated is schedule:
        return
    found = set(kinds(mutated))
    if kind == "pre_reduce":
        assert "double_count" in found
    else:
        assert found & {"switch_capacity", "group_capacity", "link_capacity"}, found


NVLS_CASES = [(c, k) for c in ("allreduce", "allgather", "reduce_scatter") for k in (1, 2)]
# every entry of the baseline is needed, every step's rounds are the fewest, every entry uses every port
ALWAYS_BREAK = ("drop_entry", "drop_src", "rename_switch", "change_chunk", "shrink_rounds", "squeeze", "pre_reduce",
                "drop_port")


@functools.cache
def nvls_baseline(collective: str, chunks: int) -> Schedule:
    return build_baseline(resolve_topology("h100"), "nccl_nvls", collective, chunks=chunks)


@SETTINGS
@given(st.sampled_from(NVLS_CASES), st.sampled_from(SWITCH_MUTATIONS), st.integers(0, 2**32 - 1))
def test_mutations_of_the_nccl_nvls_baseline_are_caught(case, kind, seed):
    base = nvls_baseline(*case)
    mutated = mutate_switches(base, kind, random.Random(seed))
    found = verify(mutated)
    assert (found == []) == reference_valid(mutated), (kind, found)
    if kind in ALWAYS_BREAK and mutated is not base:
        assert found, kind
