"""Lowering schedules to Programs: structure rules, data-level replay, channels, instances, limits.

``replay`` below is a small, independent program simulator (thread blocks as threads, one FIFO per
(sender, receiver, channel), dependency flags, vector-clock race detection) used until the
project's program checker covers the same ground.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict, deque

import pytest

from synth.baselines import BaselineNotApplicable, registry
from synth.core.collectives import allgather, allreduce, alltoall, broadcast
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.schedule import Schedule, Send, Step
from synth.core.topology import Link, Topology
from synth.lower.lowering import LoweringOptions, buffer_layout, lower
from synth.msccl.profiles import MAX_COUNT, MAX_DEP_TB, PROFILES
from synth.program.ir import READS_SRC, WRITES_DST, Program
from synth.verify import verify

TOPOLOGIES = ("dgx1", "ndv2x2", "ring:8")
COLLECTIVES = ("allgather", "reduce_scatter", "allreduce", "alltoall", "broadcast")


# ---------------------------------------------------------------------- structure
def check_structure(program: Program) -> None:
    """The rules section 15 of the format reference lists that a program alone must satisfy."""
    assert len(program.gpus) == program.ranks
    for rank, gpu in enumerate(program.gpus):
        assert gpu.rank == rank and gpu.threadblocks, f"rank {rank} has no thread block"
        assert [tb.id for tb in gpu.threadblocks] == list(range(len(gpu.threadblocks)))
        owners = Counter()
        for tb in gpu.threadblocks:
            assert 0 <= tb.channel < program.channels
            assert tb.send != rank and tb.recv != rank
            if tb.send >= 0:
                owners[("send", tb.send, tb.channel)] += 1
            if tb.recv >= 0:
                owners[("recv", tb.recv, tb.channel)] += 1
            for pos, op in enumerate(tb.ops):
                where = f"rank {rank} tb {tb.id} step {pos} ({op.type})"
                assert op.type != "ra"
                if op.type == "nop":
                    assert op.dep_tb >= 0, where
                else:
                    assert 1 <= op.count <= MAX_COUNT, where
                    assert not op.sends or tb.send >= 0, where
                    assert not op.receives or tb.recv >= 0, where
                    for used, buf, off in ((op.type in READS_SRC, op.src_buf, op.src_off),
                                           (op.type in WRITES_DST, op.dst_buf, op.dst_off)):
                        if used:
                            assert 0 <= off and off + op.count <= gpu.buffer_chunks(buf), where
                if op.dep_tb >= 0:
                    assert op.dep_tb != tb.id and op.dep_tb <= MAX_DEP_TB, where
                    target = gpu.threadblocks[op.dep_tb]
                    assert target.ops[op.dep_op].has_dep, where
                if pos and tb.ops[pos - 1].type == "nop":
                    assert op.type == "nop" or op.dep_tb >= 0, f"{where}: nops before a step without a dependency"
        assert max(owners.values(), default=1) == 1, f"rank {rank}: a connection has two owners"


# ---------------------------------------------------------------------- replay
class ReplayError(AssertionError):
    pass


def replay(program: Program, collective, fifo: int | None = None, seed: int | None = None) -> None:
    """Run ``program`` on symbolic data and check the collective's postcondition.

    Values: a non-combining chunk part is ("c", chunk, part); a combining one is the sorted tuple
    of (chunk, part, rank) contributions summed into it, so double counts show. Raises ReplayError
    on a deadlock, a data race (two accesses of one slot not ordered by program order, dependency
    flags or messages), a count mismatch, a write to the input out of place, or a wrong result.
    """
    layout = buffer_layout(collective, program.inplace)
    k = program.chunks_per_loop // layout.chunks_per_loop
    combining = collective.combining
    mem: dict[tuple[int, str, int], object] = {}
    for (rank, chunk), (buf, off) in layout.inputs.items():
        for part in range(k):
            mem[(rank, buf, off * k + part)] = (((chunk, part, rank),) if combining else ("c", chunk, part))
    threads = [(g.rank, tb.id) for g in program.gpus for tb in g.threadblocks]
    tbs = {(g.rank, tb.id): tb for g in program.gpus for tb in g.threadblocks}
    pc = dict.fromkeys(threads, 0)
    published = dict.fromkeys(threads, -1)
    snapshot: dict = {t: {} for t in threads}
    vc: dict = {t: {} for t in threads}
    fifos: dict[tuple[int, int, int], deque] = defaultdict(deque)
    last_write: dict = {}
    reads_since: dict = defaultdict(list)

    def ordered(thread, access) -> bool:
        return vc[thread].get(access[0], 0) >= access[1]

    def access(thread, rank, buf, off, count, write):
        if write and buf == "i" and not program.inplace:
            raise ReplayError(f"rank {rank} writes its input buffer out of place")
        stamp = (thread, vc[thread][thread])
        for slot in range(off, off + count):
            key = (rank, buf, slot)
            prior = last_write.get(key)
            if prior is not None and not ordered(thread, prior):
                raise ReplayError(f"race on rank {rank} {buf}[{slot}]: tb {thread[1]} vs write by tb "
                                  f"{prior[0][1]}")
            if write:
                for reader in reads_since[key]:
                    if not ordered(thread, reader):
                        raise ReplayError(f"race on rank {rank} {buf}[{slot}]: tb {thread[1]} "
                                          f"overwrites a read by tb {reader[0][1]}")
                last_write[key], reads_since[key] = stamp, []
            else:
                reads_since[key].append(stamp)

    def load(rank, buf, off, count):
        values = []
        for slot in range(off, off + count):
            if (rank, buf, slot) not in mem:
                raise ReplayError(f"rank {rank} reads {buf}[{slot}] before anything was written there")
            values.append(mem[(rank, buf, slot)])
        return values

    def combine(a, b):
        if not combining:
            raise ReplayError("a reduction in a non-combining collective")
        return tuple(sorted(a + b))

    def merge(into, other):
        for key, value in other.items():
            if value > into.get(key, 0):
                into[key] = value

    def step(thread) -> bool:
        rank, tb_id = thread
        tb = tbs[thread]
        op = tb.ops[pc[thread]]
        if op.dep_tb >= 0 and published[(rank, op.dep_tb)] < op.dep_op:
            return False
        recv_key = (tb.recv, rank, tb.channel)
        send_key = (rank, tb.send, tb.channel)
        if op.receives and not fifos[recv_key]:
            return False
        if op.sends and fifo is not None and len(fifos[send_key]) >= fifo:
            return False
        if op.dep_tb >= 0:
            merge(vc[thread], snapshot[(rank, op.dep_tb)])
        vc[thread][thread] = vc[thread].get(thread, 0) + 1
        incoming = None
        if op.receives:
            count, incoming, sender_vc = fifos[recv_key].popleft()
            if count != op.count:
                raise ReplayError(f"rank {rank} tb {tb_id} receives cnt {op.count}, the sender sent {count}")
            merge(vc[thread], sender_vc)
        t = op.type
        outgoing = None
        if t in ("s", "cpy", "re", "rrc", "rrs", "rrcs"):
            access(thread, rank, op.src_buf, op.src_off, op.count, False)
            local = load(rank, op.src_buf, op.src_off, op.count)
        if t == "s":
            outgoing = local
        elif t in ("r", "rcs"):
            value = incoming
            outgoing = incoming if t == "rcs" else None
        elif t in ("rrc", "rrs", "rrcs"):
            value = [combine(a, b) for a, b in zip(local, incoming)]
            outgoing = value if t != "rrc" else None
        elif t == "cpy":
            value = local
        elif t == "re":
            access(thread, rank, op.dst_buf, op.dst_off, op.count, False)
            value = [combine(a, b) for a, b in zip(local, load(rank, op.dst_buf, op.dst_off, op.count))]
        if t in WRITES_DST:
            access(thread, rank, op.dst_buf, op.dst_off, op.count, True)
            for j, v in enumerate(value):
                mem[(rank, op.dst_buf, op.dst_off + j)] = v
        if op.sends:
            fifos[send_key].append((op.count, outgoing, dict(vc[thread])))
        if op.has_dep:
            published[thread] = pc[thread]
            snapshot[thread] = dict(vc[thread])
        pc[thread] += 1
        return True

    rng = random.Random(seed)
    live = [t for t in threads if tbs[t].ops]
    while live:
        order = list(live)
        if seed is not None:
            rng.shuffle(order)
        progressed = False
        for thread in order:
            while pc[thread] < len(tbs[thread].ops) and step(thread):
                progressed = True
                if seed is not None and rng.random() < 0.5:
                    break
        live = [t for t in live if pc[t] < len(tbs[t].ops)]
        if live and not progressed:
            stuck = ", ".join(f"rank {r} tb {b} at step {pc[(r, b)]}" for r, b in live[:4])
            raise ReplayError(f"deadlock: {stuck}")
    leftover = [key for key, queue in fifos.items() if queue]
    if leftover:
        raise ReplayError(f"messages never received on {leftover[:3]}")
    for (rank, chunk), (buf, off) in layout.outputs.items():
        want = tuple(sorted((chunk, 0, r) for r in collective.pre[chunk]))
        for part in range(k):
            got = mem.get((rank, buf, off * k + part))
            expected = tuple((c, part, r) for c, _, r in want) if combining else ("c", chunk, part)
            if got != expected:
                raise ReplayError(f"rank {rank} {buf}[{off * k + part}] holds {got}, expected {expected}")


def lowered_ok(schedule: Schedule, options: LoweringOptions = LoweringOptions(), fifo=None, seed=None) -> Program:
    program = lower(schedule, options)
    check_structure(program)
    replay(program, schedule.collective, fifo=fifo, seed=seed)
    return program


# ---------------------------------------------------------------------- baselines
def _baseline_cases():
    cases = []
    for topo in TOPOLOGIES:
        for name, entry in sorted(registry().items()):
            for coll in COLLECTIVES:
                if coll in entry.collectives:
                    cases.append((topo, name, coll))
    return cases


@pytest.fixture(scope="module")
def topologies():
    return {name: resolve_topology(name) for name in TOPOLOGIES}


@pytest.mark.parametrize("topo,algo,coll", _baseline_cases())
def test_every_baseline_lowers_and_replays(topologies, topo, algo, coll):
    try:
        schedule = registry()[algo].build(topologies[topo], coll, None, None)
    except BaselineNotApplicable:
        pytest.skip("not applicable")
    for runtime, inplace in (("legacy", False), ("executor", False), ("executor", True)):
        program = lowered_ok(schedule, LoweringOptions(runtime=runtime, inplace=inplace))
        profile = PROFILES[runtime]
        assert program.max_ops_per_threadblock <= profile.max_steps
        assert program.threadblocks_per_rank <= profile.max_threadblocks
    replay(program, schedule.collective, fifo=8, seed=3)


@pytest.mark.parametrize("coll", ["allgather", "allreduce", "alltoall", "broadcast", "reduce_scatter"])
def test_inplace_variants_replay(topologies, coll):
    algo = {"alltoall": "direct", "broadcast": "binomial_tree"}.get(coll, "ring")
    schedule = registry()[algo].build(topologies["dgx1"], coll, None, None)
    program = lowered_ok(schedule, LoweringOptions(inplace=True))
    assert program.inplace and not program.outofplace
    untouched = "i" if coll == "allgather" else "o"
    assert all(g.buffer_chunks(untouched) == 0 for g in program.gpus)
    assert all(op.src_buf != untouched and op.dst_buf != untouched
               for g in program.gpus for tb in g.threadblocks for op in tb.ops if op.type != "nop")


def test_ring_allreduce_fuses_like_msccl(topologies):
    schedule = registry()["ring"].build(topologies["ring:8"], "allreduce", None, None)
    program = lowered_ok(schedule, LoweringOptions(channel_policy="one"))
    types = Counter(op.type for g in program.gpus for tb in g.threadblocks for op in tb.ops)
    assert types["rrs"] and types["rrcs"] and types["rcs"]
    assert not types["nop"] and not types["rrc"]


def test_bounded_fifos_and_shuffled_orders(topologies):
    """At most 7 ops per connection and step: NCCL's 8 FIFO slots never deadlock the program."""
    for algo, coll in (("ring", "allreduce"), ("bruck", "alltoall"), ("double_binary_tree", "allreduce")):
        schedule = registry()[algo].build(topologies["ndv2x2"], coll, None, None)
        program = lower(schedule)
        for seed in range(3):
            replay(program, schedule.collective, fifo=8, seed=seed)
    ring = registry()["ring"].build(topologies["dgx1"], "allreduce", None, None)
    replay(lower(ring), ring.collective, fifo=2, seed=1)  # one op per step: 2 slots are enough
    with pytest.raises(ReplayError, match="deadlock"):
        replay(lower(ring), ring.collective, fifo=1)  # rcs needs a free slot to forward into


@pytest.mark.parametrize("coll,steps,rounds,chunks", [("allgather", 2, 3, 2), ("reduce_scatter", 2, 3, 2),
                                                      ("allreduce", 4, 6, 2)])
def test_smt_schedules_lower_and_replay(topologies, coll, steps, rounds, chunks):
    from synth.smt.strategies import solve_instance

    result = solve_instance(topologies["dgx1"], coll, None, steps, rounds, chunks, 60.0)
    assert result.schedule is not None
    for runtime in PROFILES:
        program = lowered_ok(result.schedule, LoweringOptions(runtime=runtime), fifo=8, seed=5)
        assert program.threadblocks_per_rank <= PROFILES[runtime].max_threadblocks


def _strip_dependencies(program: Program) -> Program:
    from dataclasses import replace

    gpus = []
    for g in program.gpus:
        tbs = tuple(replace(tb, ops=tuple(replace(op, dep_tb=-1, dep_op=-1, has_dep=False)
                                          for op in tb.ops if op.type != "nop")) for tb in g.threadblocks)
        gpus.append(replace(g, threadblocks=tbs))
    return replace(program, gpus=tuple(gpus))


def test_replay_catches_missing_dependencies_and_reordering(topologies):
    schedule = registry()["double_binary_tree"].build(topologies["dgx1"], "allreduce", None, None)
    program = lowered_ok(schedule)
    assert any(op.dep_tb >= 0 for g in program.gpus for tb in g.threadblocks for op in tb.ops)
    with pytest.raises(ReplayError, match="race|holds|before anything"):
        replay(_strip_dependencies(program), schedule.collective)
    from dataclasses import replace

    gpu = program.gpus[0]
    tb = next(tb for tb in gpu.threadblocks if sum(op.receives for op in tb.ops) >= 2)
    ops = list(tb.ops)
    first, second = [i for i, op in enumerate(ops) if op.receives][:2]
    ops[first], ops[second] = ops[second], ops[first]
    swapped = replace(gpu, threadblocks=tuple(replace(t, ops=tuple(ops)) if t is tb else t for t in gpu.threadblocks))
    with pytest.raises(AssertionError):
        broken = replace(program, gpus=(swapped,) + program.gpus[1:])
        check_structure(broken)
        replay(broken, schedule.collective)


# ---------------------------------------------------------------------- layout
def test_buffer_layout_follows_msccl():
    lay = buffer_layout(alltoall(3, 2))
    assert (lay.chunks_per_loop, lay.input_chunks, lay.output_chunks) == (6, 6, 6)
    # chunk (s=1 -> d=2, i=1) = (1*3 + 2)*2 + 1 = 11: input 2*2+1 on rank 1, output 1*2+1 on rank 2
    assert lay.inputs[(1, 11)] == ("i", 5) and lay.outputs[(2, 11)] == ("o", 3)
    inplace = buffer_layout(allgather(4), inplace=True)
    assert inplace.inputs[(2, 2)] == inplace.outputs[(2, 2)] == ("o", 2) and inplace.input_chunks == 0
    assert buffer_layout(allreduce(4), inplace=True).outputs[(3, 1)] == ("i", 1)
    from synth.core.collectives import gather

    lay = buffer_layout(gather(4, root=1, chunks=2))  # the runtimes cut one rank's share
    assert (lay.chunks_per_loop, lay.input_chunks, lay.output_chunks) == (2, 2, 8)
    assert lay.inputs[(3, 7)] == ("i", 1) and lay.outputs[(1, 7)] == ("o", 7)


def test_layout_refuses_unknown_numbering():
    coll = broadcast(4, root=1)
    bad = type(coll)("allgather", 4, False, coll.pre * 4, coll.post * 4, 4)
    with pytest.raises(InputError, match="chunk 0 must go from ranks"):
        buffer_layout(bad)
    from synth.core.collectives import alltoallv

    with pytest.raises(InputError, match="no buffer layout"):
        buffer_layout(alltoallv([[0, 1], [1, 0]]))


# ---------------------------------------------------------------------- channels and instances
def test_channel_policies(topologies):
    schedule = registry()["ring"].build(topologies["dgx1"], "allgather", None, 4)
    one = lowered_ok(schedule, LoweringOptions(channel_policy="one"))
    link = lowered_ok(schedule, LoweringOptions(channel_policy="link"))
    most = lowered_ok(schedule, LoweringOptions(channel_policy="max", channels=2))
    assert one.channels == 1
    assert {tb.channel for g in one.gpus for tb in g.threadblocks} == {0}
    assert link.channels <= 2 and most.channels == 2
    direct = registry()["direct"].build(topologies["dgx1"], "alltoall", None, None)
    lowered = lowered_ok(direct, LoweringOptions(channel_policy="max", channels=4))
    assert lowered.channels == 4  # dgx1's direct alltoall puts several chunks on a pair per step


@pytest.mark.parametrize("k", [2, 3])
def test_instances_scale_chunks_and_channels(topologies, k):
    schedule = registry()["ring"].build(topologies["ring:8"], "allreduce", None, None)
    base = lowered_ok(schedule, LoweringOptions(channel_policy="one"))
    many = lowered_ok(schedule, LoweringOptions(channel_policy="one", instances=k))
    assert many.chunks_per_loop == k * base.chunks_per_loop
    assert many.channels == k * base.channels
    assert many.threadblocks_per_rank == k * base.threadblocks_per_rank
    assert many.gpus[0].input_chunks == k * base.gpus[0].input_chunks


def test_instances_with_mixed_counts_replay(topologies):
    schedule = registry()["bruck"].build(topologies["dgx1"], "alltoall", None, None)
    lowered_ok(schedule, LoweringOptions(instances=2, channel_policy="max", channels=2))


# ---------------------------------------------------------------------- limits
def test_max_threadblocks_trades_parallelism(topologies):
    schedule = registry()["direct"].build(topologies["dgx1"], "alltoall", None, None)
    wide = lowered_ok(schedule, LoweringOptions(channel_policy="max", channels=4))
    narrow = lowered_ok(schedule, LoweringOptions(channel_policy="max", channels=4, max_threadblocks=4))
    assert narrow.threadblocks_per_rank <= 4 < wide.threadblocks_per_rank
    assert narrow.channels < wide.channels


def test_max_threadblocks_refuses_clearly(topologies):
    schedule = registry()["direct"].build(topologies["dgx1"], "alltoall", None, None)
    with pytest.raises(InputError, match=r"thread blocks, the --max-threadblocks limit is 2"):
        lower(schedule, LoweringOptions(max_threadblocks=2))


def test_steps_per_block_spread_over_channels():
    topo = resolve_topology("ring:40")
    schedule = registry()["ring"].build(topo, "allreduce", None, None)
    legacy = lower(schedule, LoweringOptions(runtime="legacy", channel_policy="one"))
    assert legacy.max_ops_per_threadblock > PROFILES["executor"].max_steps
    executor = lower(schedule, LoweringOptions(runtime="executor", channel_policy="one"))
    assert executor.max_ops_per_threadblock <= PROFILES["executor"].max_steps
    assert executor.channels > 1
    check_structure(executor)
    replay(executor, schedule.collective)
    with pytest.raises(InputError, match="allows 64"):
        lower(schedule, LoweringOptions(runtime="rccl", channel_policy="one", max_threadblocks=2))


def test_bad_options_are_one_line_errors(topologies):
    schedule = registry()["ring"].build(topologies["ring:8"], "allgather", None, None)
    for options, pattern in ((LoweringOptions(runtime="nccl"), "unknown runtime"),
                             (LoweringOptions(protocol="ll"), "unknown protocol"),
                             (LoweringOptions(channel_policy="one", channels=2), "'max' channel policy"),
                             (LoweringOptions(instances=0), "instances must be"),
                             (LoweringOptions(min_bytes=10, max_bytes=5), "max bytes"),
                             (LoweringOptions(name='a"b'), "program name")):
        with pytest.raises(InputError, match=pattern) as info:
            lower(schedule, options)
        assert "\n" not in str(info.value)


# ---------------------------------------------------------------------- hand-made schedules
def _pair_topology(n: int) -> Topology:
    return Topology(f"full{n}", n, tuple(Link(a, b, 25.0) for a in range(n) for b in range(n) if a != b))


def test_scratch_reuse_and_forwarding():
    """Chunks relayed through a rank that does not keep them go through (reused) scratch."""
    topo = _pair_topology(3)
    coll = broadcast(3, root=0, chunks=3)
    coll = type(coll)("custom", 3, False, coll.pre, tuple(frozenset({2}) for _ in coll.post), 3)
    steps = [Step((Send(0, 0, 1),)), Step((Send(0, 1, 2), Send(1, 0, 1))),
             Step((Send(1, 1, 2), Send(2, 0, 1))), Step((Send(2, 1, 2),))]
    schedule = Schedule(topo, coll, steps)
    assert verify(schedule) == []
    program = lowered_ok(schedule, LoweringOptions(channel_policy="one"))
    relay = program.gpus[1]
    assert relay.scratch_chunks == 2  # chunk 2 reuses chunk 0's slot, dead once forwarded
    assert [op.type for tb in relay.threadblocks for op in tb.ops] == ["rcs"] * 3
    assert [op.dst_off for tb in relay.threadblocks for op in tb.ops] == [0, 1, 0]


def test_swapped_homes_go_through_scratch():
    """In-place alltoall: an incoming chunk whose home still holds an outgoing one waits in scratch."""
    topo = _pair_topology(2)
    coll = alltoall(2)
    # step 0: 1 -> 0 lands on rank 0's i[1], which still holds 0's chunk for 1 (sent in step 1)
    schedule = Schedule(topo, coll, [Step((Send(2, 1, 0),)), Step((Send(1, 0, 1),))])
    assert verify(schedule) == []
    program = lowered_ok(schedule, LoweringOptions(inplace=True))
    assert program.gpus[0].scratch_chunks == 1
    ops = [op.type for tb in program.gpus[0].threadblocks for op in tb.ops]
    assert "cpy" in ops


def test_more_peers_than_a_channel_holds_is_refused_before_planning(monkeypatch):
    import synth.lower.lowering as lowering

    crowded = registry()["direct"].build(_pair_topology(34), "alltoall", None, None)
    fits = registry()["direct"].build(_pair_topology(33), "alltoall", None, None)
    assert lowered_ok(fits, LoweringOptions()).threadblocks_per_rank >= 32
    with pytest.raises(InputError, match="rank 0 has 33 send peers on channel 0, MSCCL allows 32"):
        lower(crowded, LoweringOptions(runtime="executor"))  # the planner's own verdict, after its arrangements

    def no_planning(*args, **kwargs):
        raise AssertionError("planned a schedule that cannot fit")

    monkeypatch.setattr(lowering, "Planner", no_planning)
    with pytest.raises(InputError, match="rank 0 has 33 send peers on channel 0, MSCCL allows 32") as info:
        lower(crowded, LoweringOptions())
    assert "\n" not in str(info.value)
