"""Lowering, step 3: ops, thread blocks, fusion and dependencies from the planned transfers (synth.lower.lowering)."""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from synth.lower.layout import Loc
from synth.lower.plan import Planner, SwitchTransfer
from synth.msccl.profiles import MAX_DEP_TB
from synth.program.ir import Op, Threadblock, switch_type


@dataclass(eq=False, slots=True)
class _Op:
    key: tuple
    type: str
    src: Loc
    dst: Loc
    count: int
    peer: int  # the send peer of s, the receive peer of r/rrc, -1 for cpy and switch ops
    channel: int
    reads: Loc | None
    writes: Loc | None
    deps: Any = None  # set of ops this one must wait for (same rank)
    readers: Any = None  # set of ops that read the value this op wrote
    final: bool = False  # the last writer of an input/output slot
    block: Any = None
    index: int = 0
    pos: int = 0
    has_dep: bool = False
    vc: Any = None  # vector clock: id(block) -> last position known complete
    kept: Any = None  # the dependencies kept after reduction
    switch: Any = None  # switch ops: (switch_id, srcs, dsts)


@dataclass(eq=False)
class _Block:
    send: int
    recv: int
    channel: int
    ops: list = field(default_factory=list)
    id: int = -1


class Overflow(Exception):
    """A configuration exceeds a limit; the driver may retry with another one."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _expand(loc: Loc, count: int, k: int, i: int) -> Loc:
    return (loc[0], loc[1] * k + i * count) if loc[1] >= 0 else loc


def _slots(loc: Loc | None, count: int):
    return () if loc is None else ((loc[0], loc[1] + j) for j in range(count))


def build_ops(plan: Planner, k: int, channels: int, steps: int) -> dict[int, list[_Op]]:
    ops: dict[int, list[_Op]] = defaultdict(list)
    for tr in plan.transfers:
        for i in range(k):
            send, target = _expand(tr.send, tr.count, k, i), _expand(tr.target, tr.count, k, i)
            channel = tr.channel + i * channels
            ops[tr.src].append(_Op((tr.step, 0, tr.seq, i), "s", send, target, tr.count, tr.dst,
                                   channel, send, None))
            if tr.kind == "r":
                ops[tr.dst].append(_Op((tr.step, 1, tr.seq, i), "r", send, target, tr.count, tr.src,
                                       channel, None, target))
            else:
                operand = _expand(tr.operand, tr.count, k, i)
                ops[tr.dst].append(_Op((tr.step, 1, tr.seq, i), "rrc", operand, target, tr.count,
                                       tr.src, channel, operand, target))
    for number, sw in enumerate(plan.switches):
        for i in range(k):
            _switch_ops(ops, sw, number * k + i, k, i, channels)
    for cp in plan.copies:
        for i in range(k):
            src, dst = _expand(cp.src, cp.count, k, i), _expand(cp.dst, cp.count, k, i)
            ops[cp.rank].append(_Op((steps, 2, cp.seq, i), "cpy", src, dst, cp.count, -1,
                                    i * channels, src, dst))
    return ops


def _switch_ops(ops: dict, sw: SwitchTransfer, ident: int, k: int, i: int, channels: int) -> None:
    """Instance i of a switch transfer: one op on every participant, reading where that rank is
    a src and writing where it is a dst (the unused side is -1)."""
    kind = switch_type(len(sw.srcs), len(sw.dsts))
    reads, writes = dict(sw.reads), dict(sw.writes)
    for rank in dict.fromkeys((*sw.srcs, *sw.dsts)):
        read, write = reads.get(rank), writes.get(rank)
        src = _expand(read, sw.count, k, i) if read is not None else ("i", -1)
        dst = _expand(write, sw.count, k, i) if write is not None else ("o", -1)
        ops[rank].append(_Op((sw.step, 0, sw.seq, i), kind, src, dst, sw.count, -1, i * channels,
                             src if read is not None else None, dst if write is not None else None,
                             switch=(ident, sw.srcs, sw.dsts)))


def _root(switch: tuple) -> int:
    """The root of a switch op (synth.program.ir.Op.root) from its (id, srcs, dsts)."""
    _, srcs, dsts = switch
    return switch_root(srcs, dsts)


def switch_root(srcs, dsts) -> int:
    """The rank a switch operation is rooted at: its one src, else its first dst. A rank runs one
    thread block per root of the switch operations it takes part in."""
    return srcs[0] if len(srcs) == 1 else dsts[0]


def _fusion_weights(rank_ops: list[_Op]) -> dict[tuple[int, int, int], int]:
    """(recv peer, send peer, channel) -> how many received ranges are next sent on that pair."""
    sends: dict[tuple, list[tuple[tuple, _Op]]] = defaultdict(list)
    for op in rank_ops:
        if op.type == "s":
            sends[(op.src, op.count, op.channel)].append((op.key, op))
    keys = {}
    for where, items in sends.items():
        items.sort(key=lambda item: item[0])
        keys[where] = [key for key, _ in items]
    weights: dict[tuple[int, int, int], int] = defaultdict(int)
    for op in rank_ops:
        if op.type in ("r", "rrc"):
            items = sends.get((op.dst, op.count, op.channel))
            if items:
                at = bisect_right(keys[(op.dst, op.count, op.channel)], op.key)
                if at < len(items):
                    weights[(op.peer, items[at][1].peer, op.channel)] += 1
    return weights


def assign_blocks(rank_ops: list[_Op], pair_all: bool, base_channel) -> list[_Block]:
    import networkx as nx

    sends = sorted({(op.peer, op.channel) for op in rank_ops if op.type == "s"})
    recvs = sorted({(op.peer, op.channel) for op in rank_ops if op.type in ("r", "rrc")})
    weights = _fusion_weights(rank_ops)
    blocks: dict[tuple[str, int, int], _Block] = {}
    for channel in sorted({c for _, c in sends} | {c for _, c in recvs}):
        graph = nx.Graph()
        for p, c in recvs:
            for q, c2 in sends:
                if c == c2 == channel:
                    w = weights.get((p, q, channel), 0)
                    if w or pair_all:
                        graph.add_edge(("r", p), ("s", q), weight=w + (1 if pair_all else 0))
        for a, b in sorted(nx.max_weight_matching(graph, maxcardinality=pair_all), key=sorted):
            (_, p), (_, q) = (a, b) if a[0] == "r" else (b, a)
            blocks[("r", p, channel)] = blocks[("s", q, channel)] = _Block(q, p, channel)
        for q, c in sends:
            if c == channel and ("s", q, c) not in blocks:
                blocks[("s", q, c)] = _Block(q, -1, c)
        for p, c in recvs:
            if c == channel and ("r", p, c) not in blocks:
                blocks[("r", p, c)] = _Block(-1, p, c)
    unique = sorted({id(b): b for b in blocks.values()}.values(), key=lambda b: (b.channel, b.send, b.recv))
    for op in rank_ops:
        if op.type == "s":
            blocks[("s", op.peer, op.channel)].ops.append(op)
        elif op.switch is not None:
            key = ("w", _root(op.switch), 0)  # a block per root: switch ops through different roots overlap
            if key not in blocks:
                blocks[key] = _Block(-1, -1, 0)
                unique.append(blocks[key])
            blocks[key].ops.append(op)
        elif op.type != "cpy":
            blocks[("r", op.peer, op.channel)].ops.append(op)
    for op in sorted((op for op in rank_ops if op.type == "cpy"), key=lambda o: o.key):
        mine = [b for b in unique if base_channel(b.channel) == base_channel(op.channel)] or unique
        if not mine:
            mine = [_Block(-1, -1, op.channel)]
            unique.append(mine[0])
        min(mine, key=lambda b: len(b.ops)).ops.append(op)
    if not unique:
        unique.append(_Block(-1, -1, 0))
    for block in unique:
        block.ops.sort(key=lambda o: o.key)
    return unique


def add_dependencies(rank_ops: list[_Op]) -> None:
    """RAW, WAR and WAW edges in key order (any block; same-block ones are dropped later)."""
    last_writer: dict[Loc, _Op] = {}
    readers: dict[Loc, list[_Op]] = defaultdict(list)
    for op in sorted(rank_ops, key=lambda o: o.key):
        deps = set()
        for slot in _slots(op.reads, op.count):
            writer = last_writer.get(slot)
            if writer is not None:
                deps.add(writer)
                if writer.readers is None:
                    writer.readers = set()
                writer.readers.add(op)
        for slot in _slots(op.writes, op.count):
            writer = last_writer.get(slot)
            if writer is not None:
                deps.add(writer)
            deps.update(readers.get(slot, ()))
        for slot in _slots(op.reads, op.count):
            readers[slot].append(op)
        for slot in _slots(op.writes, op.count):
            last_writer[slot] = op
            readers[slot] = []
        deps.discard(op)
        op.deps = deps
    for slot, writer in last_writer.items():
        if slot[0] != "s":
            writer.final = True


def fuse(blocks: list[_Block], rank_ops: list[_Op]) -> None:
    """r/rrc + the next op s of the same range -> rcs/rrcs/rrs, when no op waits on the receive
    earlier than on the send (so every dependency still goes forward in key order)."""
    dependents: dict[_Op, set] = defaultdict(set)
    for op in rank_ops:
        for dep in op.deps:
            dependents[dep].add(op)
    for block in blocks:
        out, i = [], 0
        while i < len(block.ops):
            a = block.ops[i]
            b = block.ops[i + 1] if i + 1 < len(block.ops) else None
            if (b is not None and a.type in ("r", "rrc") and b.type == "s" and b.src == a.dst
                    and b.count == a.count and all(x is b or x.key > b.key for x in dependents[a])):
                if a.type == "r":
                    kind, src = "rcs", a.dst
                else:
                    kind = "rrs" if (a.readers or set()) <= {b} and not a.final else "rrcs"
                    src = a.src
                fused = _Op(b.key, kind, src, a.dst, a.count, -1, a.channel, None, None,
                            (a.deps | b.deps) - {a, b})
                for x in dependents[a] | dependents[b]:
                    if x is not b:
                        x.deps = (x.deps - {a, b}) | {fused}
                        dependents[fused].add(x)
                for dep in fused.deps:
                    dependents[dep].add(fused)
                out.append(fused)
                i += 2
            else:
                out.append(a)
                i += 1
        block.ops = out
    for block in blocks:
        for op in block.ops:
            op.block = block


def reduce_dependencies(blocks: list[_Block]) -> None:
    """Keep only dependencies no earlier one implies (vector clocks over this rank's blocks)."""
    for block in blocks:
        for j, op in enumerate(block.ops):
            op.block, op.index = block, j
    for op in sorted((op for b in blocks for op in b.ops), key=lambda o: o.key):
        vc = dict(op.block.ops[op.index - 1].vc) if op.index else {}
        kept = []
        for dep in sorted((d for d in op.deps if d.block is not op.block), key=lambda d: d.key, reverse=True):
            if vc.get(id(dep.block), -1) >= dep.index:
                continue
            kept.append(dep)
            for b, v in dep.vc.items():
                if v > vc.get(b, -1):
                    vc[b] = v
        vc[id(op.block)] = op.index
        op.vc, op.kept = vc, kept
        for dep in kept:
            dep.has_dep = True


def emit_rank(rank: int, blocks: list[_Block]) -> tuple[Threadblock, ...]:
    for block in blocks:
        pos = 0
        for op in block.ops:
            pos += max(0, len(op.kept) - 1)
            op.pos = pos
            pos += 1
    blocks.sort(key=lambda b: (not any(op.has_dep for op in b.ops), b.send, b.recv, b.channel))
    for tb_id, block in enumerate(blocks):
        block.id = tb_id
        if tb_id > MAX_DEP_TB and any(op.has_dep for op in block.ops):
            raise Overflow("blocks", f"rank {rank} needs dependency target thread block id {tb_id}, "
                                      f"above {MAX_DEP_TB} (depid is 8 bits)")
    out = []
    for block in blocks:
        steps: list[Op] = []
        for op in block.ops:
            deps = sorted((d.block.id, d.pos) for d in op.kept)
            for dep_tb, dep_op in deps[1:]:
                steps.append(Op("nop", "i", -1, "o", -1, 0, dep_tb, dep_op, False))
            dep_tb, dep_op = deps[0] if deps else (-1, -1)
            steps.append(Op(op.type, op.src[0], op.src[1], op.dst[0], op.dst[1], op.count, dep_tb,
                            dep_op, op.has_dep, *(op.switch or ())))
        out.append(Threadblock(block.id, block.send, block.recv, block.channel, tuple(steps)))
    return tuple(out)
