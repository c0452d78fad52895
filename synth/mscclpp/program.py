"""An MSCCL++ plan as a program ``synth run`` executes on torch.distributed.

MSCCL++ moves data by stores into and loads from peer memory; torch.distributed (gloo) has sends
and receives. The replay (``synth.mscclpp.replay``) runs the plan's ops in an order its own
synchronisation allows and records each data op with the elements it reads and writes. This module
turns that record into a ``synth.program`` Program, one element a chunk. Every element an op reads
on another rank is sent from that rank and received where the op computes. A copy goes from each
source element to each destination. A sum starts at its first destination and adds each source
there: locally with ``re``, from a peer with ``rrc``. The results then go to the op's other
destinations.

Each rank's steps keep the record's order: a rank has a thread block per peer it sends to, one per
peer it receives from and one for local work, and every step depends on the rank's step before it.
So the run follows one order the plan allows. Every byte still crosses the process group between
the ranks' processes, and ``synth run`` compares the outputs bit for bit with torch's own
collective. What the order does not exercise, the races and missing signals of other orders, is
the replay's job, and it runs first.

>>> from synth.baselines import registry
>>> from synth.core.library import resolve_topology
>>> from synth.mscclpp.lower import PlanOptions, lower_plan
>>> from synth.mscclpp.plan import read_plan
>>> doc = lower_plan(registry()["ring"].make(resolve_topology("ring:4"), "allgather"), PlanOptions())
>>> program = program_of(read_plan(doc)[0])
>>> program.collective, program.chunks_per_loop, program.gpus[0].output_chunks
('allgather', 8, 8)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from synth.core.errors import InputError
from synth.mscclpp.plan import Plan
from synth.mscclpp.replay import replay
from synth.program.ir import Op, Program, RankProgram, Threadblock

SYNTH_NAMES = {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
               "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce"}
COPIES = frozenset({"put", "pws", "pwsf", "get", "copy", "ppkt", "rppkt", "cpkt", "upkt"})
BROADCASTS = frozenset({"gstore", "gstorepkt"})  # one source element to every member of a switch group


def program_of(plan: Plan) -> Program:
    """The Program that runs ``plan`` (see the module); InputError when the plan cannot run: the
    replay's first problem, or a collective torch has no counterpart for."""
    if plan.schema != "current":
        raise InputError("a legacy MSCCL++ plan (mscclpp 0.5-0.7) does not run here")
    collective = SYNTH_NAMES.get(plan.collective)
    if collective is None:
        raise InputError(f"collective {plan.collective!r}: synth run compares allreduce, allgather, reducescatter, "
                         "alltoall, broadcast and reduce with torch")
    result = replay(plan)
    if result.problems:
        raise InputError(f"the replay finds the plan wrong: {result.problems[0]}")
    builder = _Builder(plan.ranks)
    for rank, op, sources, targets in result.trace:
        builder.add(rank, op.name, sources, targets)
    p = result.pieces
    gpus = tuple(RankProgram(r, g.input_chunks * p, g.output_chunks * p, g.scratch_chunks * p,
                             builder.blocks(r)) for r, g in enumerate(plan.gpus))
    per = {"allgather": plan.gpus[0].output_chunks, "reduce_scatter": plan.gpus[0].input_chunks}
    chunks = per.get(collective, plan.gpus[0].input_chunks) * p
    return Program(plan.name, collective, plan.ranks, plan.protocol, chunks, plan.inplace, not plan.inplace,
                   1, gpus, plan.min_size, None if plan.max_size >= 2**63 else plan.max_size,
                   {"source": "mscclpp plan"})


class _Builder:
    """Per rank, the steps in order, each with the peer it sends to and the one it receives from."""

    def __init__(self, ranks: int):
        self.steps: dict[int, list[tuple[Op, int, int]]] = defaultdict(list)
        self.ranks = ranks

    def add(self, rank: int, name: str, sources: list, targets: list) -> None:
        if name == "glres":
            self._group_sum(rank, sources[0], targets[0])
        elif name in BROADCASTS:
            for src, members in zip(sources[0], targets[0]):
                for m in members:
                    self._move((*src, 1), (*m, 1))
        elif name in COPIES:
            for target in targets:
                self._move(_run(sources[0]), _run(target))
        else:
            first, rest = _run(targets[0]), [_run(t) for t in targets[1:]]
            self._sum([_run(s) for s in sources], first)
            for target in rest:
                self._move(first, target)

    def _move(self, src, dst) -> None:
        """``dst`` gets ``src`` (runs: (rank, buffer, first element, count))."""
        (a, abuf, aoff, n), (b, bbuf, boff, _) = src, dst
        if a == b:
            if (abuf, aoff) != (bbuf, boff):
                self.steps[a].append((Op("cpy", abuf, aoff, bbuf, boff, n), -1, -1))
            return
        self.steps[a].append((Op("s", abuf, aoff, "", -1, n), b, -1))
        self.steps[b].append((Op("r", "", -1, bbuf, boff, n), -1, a))

    def _sum(self, sources: list, dst) -> None:
        """``dst`` gets the sum of ``sources`` (on dst's rank: the first source there, then the others)."""
        rank, buf, off, n = dst
        ordered = sorted(sources, key=lambda s: (s[1:3] != (buf, off) or s[0] != rank))
        self._move(ordered[0], dst)
        for src in ordered[1:]:
            if src[0] == rank:
                self.steps[rank].append((Op("re", src[1], src[2], buf, off, n), -1, -1))
            else:
                self.steps[src[0]].append((Op("s", src[1], src[2], "", -1, n), rank, -1))
                self.steps[rank].append((Op("rrc", buf, off, buf, off, n), -1, src[0]))

    def _group_sum(self, rank: int, sources: list, targets: list) -> None:
        """glres: per element, every member's value summed where the op runs, stored on every member."""
        for members_in, members_out in zip(sources, targets):
            mine = next((loc for loc in members_in if loc[0] == rank), members_in[0])
            runs_in = [(m[0], m[1], m[2], 1) for m in members_in]
            self._sum(runs_in, (mine[0], mine[1], mine[2], 1))
            for m in members_out:
                self._move((mine[0], mine[1], mine[2], 1), (m[0], m[1], m[2], 1))

    def blocks(self, rank: int) -> tuple[Threadblock, ...]:
        """The rank's steps in thread blocks by role, each step after the rank's step before it."""
        keys: dict[tuple[int, int], int] = {}
        ops: list[list[Op]] = []
        previous: tuple[int, int] | None = None
        for op, send, recv in self.steps[rank]:
            key = (send, recv)
            if key not in keys:
                keys[key] = len(ops)
                ops.append([])
            block = keys[key]
            if previous is not None and previous[0] != block:
                tb, index = previous
                ops[tb][index] = replace(ops[tb][index], has_dep=True)
                op = replace(op, dep_tb=tb, dep_op=index)
            ops[block].append(op)
            previous = (block, len(ops[block]) - 1)
        return tuple(Threadblock(i, send, recv, 0, tuple(block_ops))
                     for (send, recv), i in sorted(keys.items(), key=lambda kv: kv[1])
                     for block_ops in [ops[i]])


def _run(locations: list) -> tuple[int, str, int, int]:
    """A reference's elements as (rank, buffer, first element, count): they are consecutive."""
    rank, buf, first = locations[0]
    return rank, buf, first, len(locations)
