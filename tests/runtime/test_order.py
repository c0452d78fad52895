"""The single-threaded executor's order (synth.runtime.order): every transfer once, program order
and dependencies kept, the k-th send of a connection before its k-th receive; None for a cycle."""

from __future__ import annotations

from pathlib import Path

import pytest

from synth.baselines import build_baseline
from synth.core.library import resolve_topology
from synth.lower.lowering import LoweringOptions, lower
from synth.program.deps import connections, release, transfers
from synth.program.ir import Op, Program, RankProgram, Threadblock
from synth.runtime.order import global_order

ROOT = Path(__file__).resolve().parents[2]


def _check(program: Program, order) -> None:
    folded = [[transfers(tb) for tb in g.threadblocks] for g in program.gpus]
    global_rank = {}
    for rank, seq in enumerate(order):
        for index, key in enumerate(seq):
            global_rank[(rank,) + key] = index
    everything = {(r, b, k) for r, blocks in enumerate(folded) for b, ts in enumerate(blocks) for k in range(len(ts))}
    assert set(global_rank) == everything and sum(map(len, order)) == len(everything)  # each transfer once
    for g in program.gpus:
        ids = {tb.id: i for i, tb in reversed(list(enumerate(g.threadblocks)))}
        for b, blocks in enumerate(folded[g.rank]):
            for k, t in enumerate(blocks):
                here = global_rank[(g.rank, b, k)]
                if k:
                    assert global_rank[(g.rank, b, k - 1)] < here  # program order
                for dep_tb, dep_step in t.waits:
                    target = ids[dep_tb]
                    assert global_rank[(g.rank, target, release(folded[g.rank][target], dep_step))] < here


@pytest.mark.parametrize("coll, algo", [("allgather", "ring"), ("allreduce", "nccl_ring"),
                                        ("alltoall", "bruck"), ("broadcast", "nccl_ring")])
def test_lowered_programs_have_a_valid_order(coll, algo):
    sched = build_baseline(resolve_topology("dgx1"), algo, coll, 0 if coll == "broadcast" else None, None)
    program = lower(sched, LoweringOptions())
    order = global_order(program)
    assert order is not None
    _check(program, order)
    # every receive comes after its send in a run of the order, rank by rank in lockstep: simulate
    sent, taken = {}, {}
    cursor = [0] * program.ranks
    folded = [[transfers(tb) for tb in g.threadblocks] for g in program.gpus]
    progress = True
    while progress:
        progress = False
        for rank, seq in enumerate(order):
            while cursor[rank] < len(seq):
                b, k = seq[cursor[rank]]
                tb = program.gpus[rank].threadblocks[b]
                ops = [tb.ops[p] for p in folded[rank][b][k].ops]
                if ops[0].receives:
                    key = (tb.recv, rank, tb.channel)
                    if sent.get(key, 0) <= taken.get(key, 0):
                        break  # would block: wait for the sender
                    taken[key] = taken.get(key, 0) + 1
                if any(op.sends for op in ops):
                    key = (rank, tb.send, tb.channel)
                    sent[key] = sent.get(key, 0) + 1
                cursor[rank] += 1
                progress = True
    assert cursor == [len(seq) for seq in order]  # nobody blocked forever


def test_a_cycle_has_no_order():
    # each rank receives before it sends: the classic deadlock
    def rank(r):
        return RankProgram(r, 1, 2, 0, (Threadblock(0, 1 - r, 1 - r, 0, (Op("r", "i", 0, "o", 1 - r, 1),
                                                                            Op("s", "i", 0, "o", r, 1))),))
    program = Program("dead", "allgather", 2, "Simple", 2, False, True, 1, (rank(0), rank(1)))
    assert global_order(program) is None
    assert connections(program)  # it is well-formed otherwise


def test_a_wait_nothing_releases_has_no_order():
    tb = Threadblock(0, -1, -1, 0, (Op("cpy", "i", 0, "o", 0, 1, dep_tb=7, dep_op=0),))
    program = Program("x", "allreduce", 1, "Simple", 1, False, True, 1, (RankProgram(0, 1, 1, 0, (tb,)),))
    assert global_order(program) is None
