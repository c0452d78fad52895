"""Mixture-of-experts dispatch and combine run on real processes (gloo) and are checked bit for bit
against the reference built with torch indexing and ``index_add`` (synth.runtime.moe, data.py):
8 ranks on one h100, 16 ranks on h100x2 (relays, crossings and forwards), planner and deepep plans;
a wrong program is named by rank, row, token and element; bad input is one line, exit 2."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

pytest.importorskip("torch")

import torch

from synth.cli.main import main
from synth.core.errors import InputError
from synth.core.io import save_schedule, write_json_atomic
from synth.core.library import resolve_topology
from synth.core.schedule import Schedule, Send, Step
from synth.moe.generate import make_routing
from synth.moe.synthesize import moe_schedule
from synth.runtime.data import moe_reference, pattern
from synth.runtime.measure import RunOptions
from synth.runtime.moe import MoeTokens
from synth.runtime.runnable import run_sizes, runnable_from_program, runnable_from_schedule
from synth.verify import verify

TOKEN_BYTES = 64  # what runs: 16 float32 elements a token
PLAN_BYTES = 1 << 16  # what the plans are made for: below ~64 KiB the planner takes the one-shot plan
WORLDS = {8: ("h100", 2), 16: ("h100x2", 4)}  # ranks -> (topology, experts a token)
QUICK = RunOptions(sizes=(), iters=0, warmup=0, timeout=30)


@pytest.fixture(scope="module")
def routing_files(tmp_path_factory):
    """ranks -> a routing file: 4 tokens a rank on average, one rank with twice that, zipf experts."""
    folder = tmp_path_factory.mktemp("moe")
    files = {}
    for ranks, (_, topk) in WORLDS.items():
        routing = make_routing(ranks, 4 * ranks, topk, 4, PLAN_BYTES, "zipf:1.2", seed=ranks, imbalance=2.0)
        files[ranks] = folder / f"routing{ranks}.json"
        write_json_atomic(files[ranks], routing.to_doc())
    return files


@pytest.fixture(scope="module")
def schedules(routing_files):
    """(ranks, kind, method) -> the verified schedule, with tokens of TOKEN_BYTES. A plan does not
    depend on the token size it runs at, so it is made at PLAN_BYTES (where the planner pipelines
    through relays) and run with small tokens (fast)."""
    made: dict = {}

    def get(ranks: int, kind: str, method: str) -> Schedule:
        key = (ranks, kind, method)
        if key not in made:
            topology = resolve_topology(WORLDS[ranks][0])
            schedule = moe_schedule(topology, f"{kind}:{routing_files[ranks]}", method).schedule
            schedule = replace(schedule, collective=replace(schedule.collective, chunk_bytes=TOKEN_BYTES))
            assert verify(schedule) == []
            made[key] = schedule
        return made[key]

    return get


def _shape(schedule: Schedule) -> tuple[int, int, int]:
    """A dispatch plan's (relays, forwards, crossings): sends from a token's rank to a rank of its
    machine that is no destination, sends inside a machine from a rank the token reached, and
    sends between machines."""
    machine = {r: m for m, ranks in enumerate(schedule.topology.machines) for r in ranks}
    coll = schedule.collective
    sends = [s for step in schedule.steps for s in step.sends]
    inside = [s for s in sends if machine[s.src] == machine[s.dst]]
    return (sum(1 for s in inside if s.src in coll.pre[s.chunk] and s.dst not in coll.post[s.chunk]),
            sum(1 for s in inside if s.src not in coll.pre[s.chunk]), len(sends) - len(inside))


def _landings(schedule: Schedule) -> int:
    """Combine sends that reduce into a rank holding nothing of the token (neither an expert's
    output nor the token's own rank): the sum starts there."""
    coll = schedule.collective
    return sum(1 for step in schedule.steps for s in step.sends
               if s.op == "reduce" and s.dst not in coll.pre[s.chunk] and s.dst not in coll.post[s.chunk])


@pytest.mark.parametrize("ranks", [8, 16])
@pytest.mark.parametrize("kind", ["moe_dispatch", "moe_combine"])
@pytest.mark.parametrize("method", ["planner", "deepep"])
def test_dispatch_and_combine_run_correct(worlds, schedules, ranks, kind, method):
    schedule = schedules(ranks, kind, method)
    if ranks == 16:  # two machines: the plans cross between them, forward and relay inside one
        assert len(schedule.steps) > 1
        if kind == "moe_dispatch":
            relays, forwards, crossings = _shape(schedule)
            assert forwards and crossings and (relays or method == "deepep")
        else:
            assert _landings(schedule) > 0
    runnable = runnable_from_schedule(schedule, f"{kind}.{method}")
    result = worlds(ranks).run(runnable, replace(QUICK, dtype="int32" if kind == "moe_combine" else "float32"))
    assert result.correct, result.fault
    assert [r.size for r in result.rows] == [schedule.collective.size_bytes]


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_sums_are_exact_in_small_types(worlds, schedules, dtype):
    runnable = runnable_from_schedule(schedules(16, "moe_combine", "planner"), "combine")
    result = worlds(16).run(runnable, replace(QUICK, dtype=dtype))
    assert result.correct, result.fault


def test_synth_run_checks_and_times_against_torch(schedules, tmp_path, capsys):
    schedule = schedules(16, "moe_combine", "deepep")
    path = tmp_path / "combine.schedule.json"
    save_schedule(path, schedule)
    size = schedule.collective.size_bytes
    code = main(["run", str(path), "--size", str(size), "--iters", "1", "--warmup", "0", "--vs-torch", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc["fault"]
    assert doc["collective"] == "moe_combine" and doc["correct"]
    row = doc["rows"][0]
    assert row["size"] == size and row["count"] == size // 4 and row["time_us"] > 0 and row["torch_us"] > 0


@pytest.mark.parametrize("argv, message", [
    (["--size", "1K"], "give --size"),
    (["--inplace"], "out of place only"),
    (["--root", "0"], "--root applies to rooted collectives"),
])
def test_bad_options_are_one_line(schedules, tmp_path, capsys, argv, message):
    path = tmp_path / "dispatch.schedule.json"
    save_schedule(path, schedules(8, "moe_dispatch", "deepep"))
    assert main(["run", str(path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_the_size_is_the_routings(schedules):
    runnable = runnable_from_schedule(schedules(8, "moe_dispatch", "planner"), "d")
    size = runnable.fixed_size
    assert size == runnable.size_chunks * TOKEN_BYTES
    assert run_sizes(runnable, None) == run_sizes(runnable, (size, size)) == (size,)
    with pytest.raises(InputError, match=f"fixes, {size} bytes .* not {size * 2}; give --size {size}"):
        run_sizes(runnable, (size, size * 2))


def test_layout_is_the_callers_rows(schedules):
    """Rank r's input view is its rows, its output view the rows it ends with: the binding is the
    identity and the program's buffers are exactly that long."""
    for kind in ("moe_dispatch", "moe_combine"):
        schedule = schedules(16, kind, "deepep")
        runnable = runnable_from_schedule(schedule, kind)
        tokens = MoeTokens.of(schedule.collective, kind)
        assert runnable.binding.identity and runnable.binding.tokens == tokens
        for r in range(16):
            view = runnable.layout(r).view
            assert (view["i"][2], view["o"][2]) == (len(tokens.input_tokens(r)), len(tokens.output_tokens(r)))


def test_reference_by_hand():
    """Two ranks, three tokens: token 0 (rank 0) goes to ranks 0 and 1, token 1 (rank 0) to rank 1,
    token 2 (rank 1) to rank 0."""
    from synth.core.collective import Collective

    chunk = 3
    dispatch = MoeTokens.of(Collective("moe_dispatch", 2, False, [{0}, {0}, {1}], [{0, 1}, {1}, {0}], 2), "d")
    x0, x1 = pattern(0, 2 * chunk, torch.float32, 2).view(2, chunk), pattern(1, chunk, torch.float32, 2).view(1, chunk)
    assert torch.equal(moe_reference(dispatch, 0, chunk, torch.float32), torch.cat([x0[0], x1[0]]))
    assert torch.equal(moe_reference(dispatch, 1, chunk, torch.float32), torch.cat([x0[0], x0[1]]))
    combine = MoeTokens.of(Collective("moe_combine", 2, True, [{0, 1}, {1}, {0}], [{0}, {0}, {1}], 2), "c")
    y0 = pattern(0, 2 * chunk, torch.float32, 2).view(2, chunk)  # rank 0's rows: tokens 0, 2
    y1 = pattern(1, 2 * chunk, torch.float32, 2).view(2, chunk)  # rank 1's rows: tokens 0, 1
    assert torch.equal(moe_reference(combine, 0, chunk, torch.float32), torch.cat([y0[0] + y1[0], y1[1]]))
    assert torch.equal(moe_reference(combine, 1, chunk, torch.float32), y0[1])


def _edited(runnable, rank: int, pick, **changes):
    """``runnable`` with the first op on ``rank`` that ``pick`` accepts changed, and that op."""
    program = runnable.program
    gpu = program.gpus[rank]
    for b, tb in enumerate(gpu.threadblocks):
        for j, op in enumerate(tb.ops):
            if pick(op):
                ops = tb.ops[:j] + (replace(op, **changes),) + tb.ops[j + 1:]
                blocks = gpu.threadblocks[:b] + (replace(tb, ops=ops),) + gpu.threadblocks[b + 1:]
                gpus = program.gpus[:rank] + (replace(gpu, threadblocks=blocks),) + program.gpus[rank + 1:]
                return replace(runnable, program=replace(program, gpus=gpus)), op
    raise AssertionError(f"no such op on rank {rank}")


def _summed_into_output(op) -> bool:
    return op.type == "rrc" and op.dst_buf == "o"


def test_a_dropped_partial_sum_is_named_by_rank_token_and_element(worlds, schedules):
    good = runnable_from_schedule(schedules(8, "moe_combine", "planner"), "combine")
    rank = next(r for r in range(8) if any(map(_summed_into_output, (op for tb in good.program.gpus[r].threadblocks
                                                                     for op in tb.ops))))
    bad, op = _edited(good, rank, _summed_into_output, type="r")  # keeps what arrives, drops its own partial
    result = worlds(8).run(bad, QUICK)
    assert not result.correct
    token = good.binding.tokens.output_tokens(rank)[op.dst_off]
    assert result.fault.startswith(f"wrong result: rank {rank} output row {op.dst_off} (token {token}: rank {rank} "
                                   "token "), result.fault
    assert ", element 0: expected" in result.fault and "got" in result.fault


def test_a_row_landing_in_the_wrong_place_is_caught(worlds, schedules):
    good = runnable_from_schedule(schedules(8, "moe_dispatch", "deepep"), "dispatch")
    rank = max(range(8), key=lambda r: len(good.binding.tokens.output_tokens(r)))
    rows = len(good.binding.tokens.output_tokens(rank))
    landing = next(op for tb in good.program.gpus[rank].threadblocks for op in tb.ops
                   if op.type == "r" and op.dst_buf == "o" and op.count == 1)
    bad, _ = _edited(good, rank, lambda op: op == landing, dst_off=(landing.dst_off + 1) % rows)
    result = worlds(8).run(bad, QUICK)
    assert not result.correct and result.fault.startswith(f"wrong result: rank {rank} output row "), result.fault


def test_tokens_out_of_rank_order_are_refused(schedules):
    schedule = schedules(8, "moe_dispatch", "deepep")
    coll = schedule.collective
    last = coll.chunks - 1
    flipped = replace(coll, pre=coll.pre[::-1], post=coll.post[::-1])
    steps = tuple(Step(tuple(Send(last - s.chunk, s.src, s.dst, s.op) for s in step.sends), step.rounds)
                  for step in schedule.steps)
    renumbered = replace(schedule, collective=flipped, steps=steps)
    assert verify(renumbered) == []
    with pytest.raises(InputError, match="tokens must be numbered rank by rank"):
        runnable_from_schedule(renumbered, "flipped")


def test_a_moe_program_file_is_refused(schedules):
    program = runnable_from_schedule(schedules(8, "moe_dispatch", "deepep"), "d").program
    with pytest.raises(InputError, match="from a synth.schedule file"):
        runnable_from_program(program, "moe.program.json", "program")
