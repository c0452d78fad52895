"""Switch entries lowered to Program switch ops (glre / gstore / glres): random valid switch
schedules replay to their collective in and out of place; NVLS's reduce + multicast pairs fuse into
glres; the replay catches programs whose switch ops are broken; MSCCL runtimes refuse in one line;
synth.program JSON carries switch ops as version 2 and nothing else changes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from synth.baselines import build_baseline
from synth.core import collectives
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.schedule import Schedule, Send, SwitchSend
from synth.greedy.switches import switch_plan
from synth.lower.lowering import LoweringOptions, lower
from synth.program.document import program_from_dict, program_to_dict
from synth.program.ir import SWITCH_TYPES, Program, with_threadblock
from synth.program.replay import replay
from synth.verify import verify
from tests.switch_strategies import box, make_steps, switch_schedules

H100 = resolve_topology("h100")


def nvls(collective: str = "allreduce", pieces: int = 2):
    return build_baseline(H100, "nccl_nvls", collective, chunks=pieces)


def switch_ops(program: Program) -> list:
    return [(g.rank, i, pos, op) for g in program.gpus for i, tb in enumerate(program.gpus[g.rank].threadblocks)
            for pos, op in enumerate(tb.ops) if op.switches]


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(switch_schedules(), st.booleans())
def test_random_switch_schedules_lower_and_replay_to_their_collective(schedule, inplace):
    assume(verify(schedule) == [])  # the strategy builds valid schedules; keep to what the verifier says
    program = lower(schedule, LoweringOptions(inplace=inplace))
    result = replay(program)
    assert result.correct is True, [str(p) for p in result.problems[:4]]
    entries = schedule.switch_count
    assert program.switch_ops <= entries and (program.switch_ops == 0) == (entries == 0)  # fused or merged: fewer


@pytest.mark.parametrize("inplace", [False, True])
def test_nvls_reduce_and_multicast_pairs_fuse_into_glres(inplace):
    program = lower(nvls("allreduce", 2), LoweringOptions(inplace=inplace))
    ops = switch_ops(program)
    assert {op.type for *_, op in ops} == {"glres"}
    assert program.switch_ops == 2 * 8  # one glres per head and piece; the 16 multicasts are gone
    for _, _, _, op in ops:
        assert set(op.srcs) == set(op.dsts) == set(range(8)) and op.root == op.dsts[0]
    assert replay(program).correct is True


def test_the_switch_planner_lowers_to_glres_and_multicasts_with_their_src():
    schedule = switch_plan(H100, "allreduce", 1 << 20)
    program = lower(schedule)
    types = {op.type for *_, op in switch_ops(program)}
    assert types == {"glres", "gstore"}
    for *_, op in switch_ops(program):
        if op.type == "gstore":
            assert op.srcs[0] in op.dsts  # the planner's multicast skips the head; writing its own copy is free
    assert replay(program).correct is True


def test_a_reduce_without_multicast_stays_a_glre():
    program = lower(nvls("reduce_scatter", 1))
    assert {op.type for *_, op in switch_ops(program)} == {"glre"}
    assert replay(program).correct is True


def _one_switch_op(program: Program, rank: int):
    return next((i, pos, op) for r, i, pos, op in switch_ops(program) if r == rank)


def test_a_switch_op_missing_on_a_participant_deadlocks_the_replay():
    program = lower(nvls("allreduce", 1))
    index, pos, op = _one_switch_op(program, 5)
    ops = list(program.gpus[5].threadblocks[index].ops)
    del ops[pos]
    broken = with_threadblock(program, 5, index, ops=tuple(ops))
    result = replay(broken)
    codes = {p.code for p in result.problems}
    assert result.correct is False and {"switch", "deadlock"} <= codes, [str(p) for p in result.problems]


def test_a_switch_op_reading_the_wrong_place_is_a_wrong_result():
    program = lower(nvls("allreduce", 1))
    index, pos, op = _one_switch_op(program, 2)
    ops = list(program.gpus[2].threadblocks[index].ops)
    ops[pos] = replace(op, src_off=(op.src_off + 1) % 8)
    result = replay(with_threadblock(program, 2, index, ops=tuple(ops)))
    assert result.correct is False and any(p.code in ("wrong-result", "double-count") for p in result.problems)


def test_participants_that_disagree_are_named():
    program = lower(nvls("allreduce", 1))
    index, pos, op = _one_switch_op(program, 1)
    ops = list(program.gpus[1].threadblocks[index].ops)
    ops[pos] = replace(op, dsts=op.dsts[:-1])
    result = replay(with_threadblock(program, 1, index, ops=tuple(ops)))
    assert result.correct is False
    assert any(p.code == "switch" and "describes it as" in p.message for p in result.problems)


def reduce_then_copies() -> Schedule:
    """3 ranks: the switch reduces every chunk to rank 0, which then sends them to 1 and 2."""
    topo = box(3)
    raw = [([], [SwitchSend(c, "nvs", (0, 1, 2), (0,)) for c in range(3)]),
           ([Send(c, 0, r) for c in range(3) for r in (1, 2)], [])]
    return Schedule(topo, collectives.allreduce(3, 1), make_steps(topo, raw), {})


def test_a_send_of_what_a_switch_op_wrote_waits_for_it_or_races():
    program = lower(reduce_then_copies())
    assert replay(program).correct is True
    for i, tb in enumerate(program.gpus[0].threadblocks):
        waiting = [pos for pos, op in enumerate(tb.ops) if op.dep_tb >= 0 and
                   program.gpus[0].threadblocks[op.dep_tb].ops[op.dep_op].switches]
        if waiting:
            ops = list(tb.ops)
            ops[waiting[0]] = replace(ops[waiting[0]], dep_tb=-1, dep_op=-1)
            program = with_threadblock(program, 0, i, ops=tuple(ops))
            break
    else:
        raise AssertionError("no op of rank 0 waits for its switch op")
    result = replay(program)
    assert result.correct is False and any(p.code == "data-race" for p in result.problems), \
        [str(p) for p in result.problems[:3]]


def test_msccl_runtimes_refuse_switch_entries_in_one_line():
    with pytest.raises(InputError, match="MSCCL has no switch operation") as info:
        lower(nvls(), LoweringOptions(runtime="executor"))
    assert "\n" not in str(info.value)


def test_program_json_carries_switch_ops_as_version_2():
    program = lower(nvls("allreduce", 1))
    doc = program_to_dict(program)
    assert doc["version"] == 2
    op = next(o for g in doc["gpus"] for tb in g["threadblocks"] for o in tb["ops"] if o["type"] in SWITCH_TYPES)
    assert set(op) >= {"switch_id", "srcs", "dsts"}
    assert program_from_dict(doc) == program
    doc["version"] = 1
    with pytest.raises(InputError, match="needs synth.program version 2"):
        program_from_dict(doc)
    plain = lower(build_baseline(resolve_topology("ring:4"), "ring", "allgather"))
    assert program_to_dict(plain)["version"] == 1 and "switch_id" not in str(program_to_dict(plain))


def test_switch_fields_on_other_ops_are_refused():
    doc = program_to_dict(lower(build_baseline(resolve_topology("ring:4"), "ring", "allgather")))
    doc["gpus"][0]["threadblocks"][0]["ops"][0]["srcs"] = [0]
    with pytest.raises(InputError, match="'srcs' belongs to switch ops"):
        program_from_dict(doc)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(switch_schedules())
def test_no_lowering_takes_fewer_blocks_than_fewest_blocks(schedule):
    from synth.report.budget import fewest_blocks

    try:
        program = lower(schedule)
    except InputError:
        return
    assert fewest_blocks(schedule) <= program.threadblocks_per_rank
