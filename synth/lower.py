"""Lowering: a verified Schedule -> a Program (thread blocks of MSCCL steps), ready to export.

Design (rules from shared/reference/msccl-format.md, semantics from DESIGN.md):

* Buffers (``buffer_layout``): every (rank, chunk) maps to MSCCL buffer locations as the runtimes
  lay them out (section 3): an input location where the rank holds the chunk at the start and an
  output location, its *home*, where it must hold it at the end. In place, allgather is written in
  terms of ``o`` and allreduce/broadcast/reduce/alltoall/reduce_scatter in terms of ``i``.
* Values: walking the steps, each rank tracks where its current value of each chunk lives. A
  received chunk lands at its home when that is free, else where the chunk already lives (when
  writable), else in a scratch slot (slots are reused once their value is dead); forwarding sends
  from where the value landed. Out of place the input buffer is never written. At the end a
  ``cpy`` moves every value that is not at its home there.
* Transfers: a send is ``s`` on the sender and ``r`` (copy) or ``rrc`` (reduce; local operand in
  ``src``) on the receiver. A step's sends between one pair on one channel merge into ops of
  ``cnt`` <= 71 where both ends' ranges are contiguous.
* Channels: ``one`` (all on 0), ``link`` (as many channels per pair as the link's capacity, each
  step's chunks split evenly), ``max`` (up to ``channels`` per pair, default 8). When a block would
  exceed the runtime's steps per block, the steps of each pair rotate over more channels.
* Thread blocks: one per (send peer, receive peer, channel), one owner per (peer, direction,
  channel). A receive connection shares a block with the send connection its chunks flow on to
  (max-weight matching), so that r+s fuse into ``rcs``/``rrcs``/``rrs``. ``max_threadblocks``
  first pairs every connection, then uses fewer channels, then refuses.
* Order: every op has a key (step, phase, sequence, instance): sends read the state at the start of
  their step (phase 0), receives land after (phase 1), final copies come last. Blocks run their
  ops in key order; an op depends on the last writer of what it reads and on the last writer and
  readers of what it writes (same rank, other blocks; redundant ones dropped with vector clocks;
  the first on the op, the others on nops before it). Every edge, including send -> receive, goes
  forward in key order, so the program cannot deadlock; connections carry their ops in the same
  order at both ends. A receive fuses with the next op of its block only when no other op waits
  on it earlier than that op. With FIFOs of B slots the same argument holds while a connection
  carries fewer than B ops per step, so at most 7 do (NCCL has 8 slots); the rest spill onto
  extra channels.
* Instances (section 8.2): each op runs k times, instance i on channels ``i*C..``, each range
  (off, cnt) of every buffer becoming (off*k + i*cnt, cnt), so chunk counts scale by k.

>>> from synth.baselines import registry
>>> from synth.library import resolve_topology
>>> ring = registry()["ring"].build(resolve_topology("ring:4"), "allgather", None, None)
>>> p = lower(ring, LoweringOptions(runtime="executor"))
>>> p.chunks_per_loop, p.threadblocks_per_rank, p.channels, p.max_ops_per_threadblock
(8, 2, 1, 5)
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from synth.errors import InputError
from synth.msccl.profiles import (MAX_COUNT, MAX_DEP_TB, MAX_ELEMENTS_PER_RANK, MAX_OFFSET,
                                  MAX_PEERS_PER_CHANNEL, PROFILES, Profile)
from synth.program import PROTOCOLS, Op, Program, RankProgram, Threadblock
from synth.schedule import Schedule

Loc = tuple[str, int]
CHANNEL_POLICIES = ("one", "link", "max")
DEFAULT_MAX_CHANNELS = 8
NAME_RE = re.compile(r"[A-Za-z0-9_.+-]{1,63}")
_FOREVER = 1 << 60
MAX_OPS_PER_STEP = 7  # per connection and step: NCCL's 8 FIFO slots, one spare for a fused receive


@dataclass(frozen=True)
class LoweringOptions:
    """How to lower. ``runtime`` (legacy/executor/rccl) sets the limits to respect (None: only
    the limits every MSCCL runtime shares); ``channels`` is the cap of the ``max`` policy;
    ``max_bytes`` None = unbounded (inclusive bound otherwise)."""

    runtime: str | None = None
    protocol: str = "Simple"
    channel_policy: str = "link"
    channels: int | None = None
    instances: int = 1
    inplace: bool = False
    max_threadblocks: int | None = None
    min_bytes: int = 0
    max_bytes: int | None = None
    name: str | None = None


# ---------------------------------------------------------------------- buffer layout
@dataclass(frozen=True)
class Layout:
    """Where each chunk lives in MSCCL's buffers: (rank, chunk) -> (buffer letter, offset).

    >>> from synth.collectives import allgather
    >>> lay = buffer_layout(allgather(4, 2))
    >>> lay.chunks_per_loop, lay.input_chunks, lay.output_chunks, lay.inputs[(1, 3)], lay.outputs[(0, 3)]
    (8, 2, 8, ('i', 1), ('o', 3))
    """

    chunks_per_loop: int
    input_chunks: int
    output_chunks: int
    inputs: Mapping[tuple[int, int], Loc]  # where a rank in pre[c] holds c at the start
    outputs: Mapping[tuple[int, int], Loc]  # where a rank in post[c] must hold c at the end (home)
    inplace: bool


_COMBINING = {"allreduce": True, "reduce": True, "reduce_scatter": True, "allgather": False,
              "gather": False, "scatter": False, "broadcast": False, "alltoall": False}


def buffer_layout(coll, inplace: bool = False) -> Layout:
    """MSCCL's buffer layout for ``coll`` (section 3 of the format reference); InputError when
    the collective has none or its chunks are not numbered as synth.collectives numbers them."""
    n, k, name = coll.ranks, coll.chunks, coll.name
    everyone = frozenset(range(n))
    root = frozenset({coll.root if coll.root is not None else min(coll.pre[0])})
    ins: dict[tuple[int, int], Loc] = {}
    outs: dict[tuple[int, int], Loc] = {}
    io = "i" if inplace else "o"

    def bad(why: str) -> InputError:
        return InputError(f"cannot lower {name} ({n} ranks, {k} chunks): {why}")

    if name in _COMBINING and _COMBINING[name] != coll.combining:
        raise bad("its 'combining' flag does not match the collective")
    if name in ("allgather", "gather", "reduce_scatter", "scatter"):
        if k % n:
            raise bad(f"{k} chunks do not split evenly over {n} ranks")
        per = k // n
        gathering = name in ("allgather", "gather")
        for c in range(k):
            owner = frozenset({c // per})
            if gathering:
                want = (owner, everyone if name == "allgather" else root)
            else:
                want = (everyone if name == "reduce_scatter" else root, owner)
            if (coll.pre[c], coll.post[c]) != want:
                raise bad(f"chunk {c} must go from ranks {sorted(want[0])} to {sorted(want[1])}")
            if gathering:
                ins[(c // per, c)] = ("o", c) if inplace else ("i", c % per)
                outs.update({(r, c): ("o", c) for r in coll.post[c]})
            else:
                ins.update({(r, c): ("i", c) for r in coll.pre[c]})
                outs[(c // per, c)] = ("i", c) if inplace else ("o", c % per)
        sizes = (0 if inplace else per, k) if gathering else (k, 0 if inplace else per)
        # The runtimes cut count x ngpus elements into nchunksperloop chunks for allgather and
        # reduce_scatter but only count (one rank's share) for gather and scatter.
        return Layout(k if name in ("allgather", "reduce_scatter") else per, *sizes, ins, outs, inplace)
    if name == "alltoall":
        per = k // (n * n)
        if per * n * n != k:
            raise bad(f"alltoall needs ranks^2 x C chunks, got {k}")
        for c in range(k):
            s, d, i = c // (n * per), (c // per) % n, c % per
            if (coll.pre[c], coll.post[c]) != ({s}, {d}):
                raise bad(f"chunk {c} must go from rank {s} to rank {d}")
            ins[(s, c)] = ("i", d * per + i)
            outs[(d, c)] = (io, s * per + i)
        return Layout(n * per, n * per, 0 if inplace else n * per, ins, outs, inplace)
    if name in ("allreduce", "broadcast", "reduce", "custom"):
        want = {"allreduce": (everyone, everyone), "broadcast": (root, everyone),
                "reduce": (everyone, root)}.get(name)
        for c in range(k):
            if want is not None and (coll.pre[c], coll.post[c]) != want:
                raise bad(f"chunk {c} must go from ranks {sorted(want[0])} to {sorted(want[1])}")
            ins.update({(r, c): ("i", c) for r in coll.pre[c]})
            outs.update({(r, c): (io, c) for r in coll.post[c]})
        return Layout(k, k, 0 if inplace else k, ins, outs, inplace)
    raise bad("MSCCL has no buffer layout for it (lowerable: allgather, reduce_scatter, allreduce, "
              "alltoall, broadcast, reduce, gather, scatter, custom)")


# ---------------------------------------------------------------------- planning: values -> transfers
@dataclass(frozen=True)
class _Transfer:
    """One merged send of a step: ``count`` chunks from ``send`` on src to ``target`` on dst."""

    step: int
    seq: int
    src: int
    dst: int
    channel: int
    count: int
    send: Loc
    kind: str  # "r" or "rrc"
    target: Loc
    operand: Loc | None  # rrc: the receiver's local operand


@dataclass(frozen=True)
class _Copy:
    rank: int
    seq: int
    src: Loc
    dst: Loc
    count: int


@dataclass(frozen=True)
class _Config:
    cap: int  # channels per pair at most
    pair_all: bool  # pair every receive connection with a send connection
    spread: int  # >1: each pair's steps rotate over this many channels


def _nxt(loc: Loc | None) -> Loc | None:
    return None if loc is None else (loc[0], loc[1] + 1)


class _Planner:
    """Walks the steps, placing every received value; yields transfers and final copies."""

    def __init__(self, schedule: Schedule, layout: Layout, cfg: _Config, policy: str):
        self.schedule, self.layout, self.cfg, self.policy = schedule, layout, cfg, policy
        self.topo = schedule.topology
        self.events: dict[tuple[int, int], list[tuple[int, int, str]]] = defaultdict(list)
        for t, step in enumerate(schedule.steps):
            for s in step.sends:
                self.events[(s.src, s.chunk)].append((t, 0, "read"))
                self.events[(s.dst, s.chunk)].append((t, 1, s.op))
        for items in self.events.values():
            items.sort()
        self.loc: dict[tuple[int, int], Loc] = dict(layout.inputs)
        self.busy: dict[tuple[int, Loc], int] = {}  # when the value held there is last read
        self.occupant: dict[tuple[int, Loc], int] = {}  # the chunk whose value is held there
        for (r, c), where in layout.inputs.items():
            self.busy[(r, where)] = self.last_use(r, c, -1)
            self.occupant[(r, where)] = c
        self.scratch = [0] * schedule.collective.ranks
        self.transfers: list[_Transfer] = []
        self.copies: list[_Copy] = []

    def last_use(self, rank: int, chunk: int, step: int) -> int:
        """When the value of ``chunk`` written on ``rank`` at ``step`` is last read, in half
        steps: 2t for a send in step t (phase 0), 2t+1 for a reduce's local operand (phase 1)."""
        last = 2 * step + 1
        for t, _, kind in self.events.get((rank, chunk), ()):
            if t <= step:
                continue
            if kind == "read":
                last = 2 * t
            elif kind == "reduce":
                return 2 * t + 1
            else:
                return last
        return _FOREVER if (rank, chunk) in self.layout.outputs else last

    def run(self) -> "_Planner":
        for t, step in enumerate(self.schedule.steps):
            self._step(t, step.sends)
        self._final_copies()
        return self

    def _free(self, rank: int, where: Loc, step: int, claimed: set, same_step: bool) -> bool:
        """Can a receive of ``step`` write there? ``same_step``: also when the old value is
        still sent in this step (the write then waits for those sends)."""
        until = self.busy.get((rank, where), -1)
        return (rank, where) not in claimed and (until <= 2 * step if same_step else until < 2 * step)

    def _step(self, t: int, sends) -> None:
        reads = {s: self.loc[(s.src, s.chunk)] for s in sends}
        buckets: dict[tuple[int, int], list] = defaultdict(list)
        for s in sends:
            buckets[(s.src, s.dst)].append(s)
        claimed: set[tuple[int, Loc]] = set()
        targets: dict[tuple[int, int], Loc] = {}
        for (src, dst) in sorted(buckets, key=lambda p: (p[1], p[0])):
            ordered = sorted(buckets[(src, dst)], key=lambda s: (reads[s], s.chunk))
            merged: list[tuple[int, tuple]] = []
            for channel, group in self._split(t, src, dst, ordered):
                items, prev = [], None
                for i, s in enumerate(group):
                    key = (dst, s.chunk)
                    first = key not in targets
                    if first:
                        targets[key] = self._target(t, dst, s.chunk, prev, len(group) - i, claimed)
                    target, current = targets[key], self.loc.get(key)
                    if s.op == "reduce" and (not first or current is not None):
                        items.append((reads[s], "rrc", target, current if first else target))
                    else:
                        items.append((reads[s], "r", target, None))
                    prev = target
                merged.extend((channel, run) for run in self._merge(items))
            self._emit(t, src, dst, merged)
        for (rank, chunk), target in targets.items():
            self.loc[(rank, chunk)] = target
            self.busy[(rank, target)] = self.last_use(rank, chunk, t)
            self.occupant[(rank, target)] = chunk

    def _split(self, t: int, src: int, dst: int, sends: list) -> list[tuple[int, list]]:
        if self.cfg.spread > 1:
            return [((t + src) % self.cfg.spread, sends)]
        if self.policy == "one":
            m = 1
        elif self.policy == "link":
            m = self.topo.link_capacity(self.topo.link(src, dst)) or 1
        else:
            m = len(sends)
        groups = max(1, min(m, self.cfg.cap, len(sends)))
        base, extra = divmod(len(sends), groups)
        out, start = [], 0
        for g in range(groups):
            size = base + (1 if g < extra else 0)
            out.append((g, sends[start:start + size]))
            start += size
        return out

    def _target(self, t: int, rank: int, chunk: int, prev: Loc | None, want: int, claimed: set) -> Loc:
        home = self.layout.outputs.get((rank, chunk))
        current = self.loc.get((rank, chunk))
        if current is not None and self.occupant.get((rank, current)) != chunk:
            current = None  # another chunk took the place once this value was dead
        if home is not None and (home == current or self._free(rank, home, t, claimed, True)):
            pick = home
        elif (current is not None and (current[0] != "i" or self.layout.inplace)
              and (rank, current) not in claimed):
            pick = current
        else:
            pick = self._scratch_slot(t, rank, prev, want, claimed)
        claimed.add((rank, pick))
        return pick

    def _scratch_slot(self, t: int, rank: int, prev: Loc | None, want: int, claimed: set) -> Loc:
        size = self.scratch[rank]

        def free(slot: int) -> bool:
            return slot >= size or self._free(rank, ("s", slot), t, claimed, False)

        if prev is not None and prev[0] == "s" and free(prev[1] + 1):
            slot = prev[1] + 1
        else:
            run, slot = 0, None
            for candidate in range(size):
                run = run + 1 if free(candidate) else 0
                if run == want:
                    slot = candidate - want + 1
                    break
            if slot is None:
                slot = size - run
        self.scratch[rank] = max(size, slot + 1)
        return ("s", slot)

    @staticmethod
    def _merge(items: list) -> list[tuple]:
        """Runs of items contiguous at both ends (and in the operand): (send, kind, target, operand, count)."""
        runs, run = [], []
        for item in items + [None]:
            if run and item is not None and len(run) < MAX_COUNT:
                last = run[-1]
                if (item[0] == _nxt(last[0]) and item[1] == last[1] and item[2] == _nxt(last[2])
                        and item[3] == _nxt(last[3])):
                    run.append(item)
                    continue
            if run:
                runs.append(run[0] + (len(run),))
            run = [item]
        return runs

    def _emit(self, t: int, src: int, dst: int, merged: list[tuple[int, tuple]]) -> None:
        """Record the pair's transfers of step t; a channel never carries more than
        MAX_OPS_PER_STEP of them (the rest spill onto extra channels)."""
        per_channel: dict[int, list[tuple]] = defaultdict(list)
        for channel, run in merged:
            per_channel[channel].append(run)
        spill = 1 + max(per_channel)
        for channel in sorted(per_channel):
            runs = per_channel[channel]
            for start in range(0, len(runs), MAX_OPS_PER_STEP):
                if start:
                    channel, spill = spill, spill + 1
                for send, kind, target, operand, count in runs[start:start + MAX_OPS_PER_STEP]:
                    self.transfers.append(_Transfer(t, len(self.transfers), src, dst, channel, count,
                                                    send, kind, target, operand))

    def _final_copies(self) -> None:
        """Move every value that is not at its home there (through scratch to break swaps)."""
        pending: dict[int, dict[int, tuple[Loc, Loc]]] = defaultdict(dict)
        for (rank, chunk), home in sorted(self.layout.outputs.items()):
            where = self.loc.get((rank, chunk))
            if where is None:
                raise InputError(f"schedule leaves rank {rank} without chunk {chunk}")
            if where != home:
                pending[rank][chunk] = (where, home)
        for rank, remaining in sorted(pending.items()):
            at = {where: chunk for chunk, (where, _) in remaining.items()}
            moves: list[tuple[Loc, Loc]] = []
            while remaining:
                progress = False
                for chunk in sorted(remaining):
                    where, home = remaining[chunk]
                    if at.get(home, chunk) == chunk:
                        moves.append((where, home))
                        del remaining[chunk], at[where]
                        progress = True
                if not progress:  # a cycle of swaps: park one value in a fresh scratch slot
                    chunk = min(remaining)
                    where, home = remaining[chunk]
                    slot = ("s", self.scratch[rank])
                    self.scratch[rank] += 1
                    moves.append((where, slot))
                    del at[where]
                    at[slot], remaining[chunk] = chunk, (slot, home)
            head, count = moves[0], 1
            for move in moves[1:] + [None]:
                if move is not None and count < MAX_COUNT and move == (
                        (head[0][0], head[0][1] + count), (head[1][0], head[1][1] + count)) and not (
                        head[0][0] == head[1][0] and abs(head[0][1] - head[1][1]) <= count):
                    count += 1
                    continue
                self.copies.append(_Copy(rank, len(self.copies), head[0], head[1], count))
                if move is not None:
                    head, count = move, 1


# ---------------------------------------------------------------------- ops, blocks, dependencies
@dataclass(eq=False, slots=True)
class _Op:
    key: tuple
    type: str
    src: Loc
    dst: Loc
    count: int
    peer: int  # the send peer of s, the receive peer of r/rrc, -1 for cpy
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


@dataclass(eq=False)
class _Block:
    send: int
    recv: int
    channel: int
    ops: list = field(default_factory=list)
    id: int = -1


class _Overflow(Exception):
    """A configuration exceeds a limit; the driver may retry with another one."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _expand(loc: Loc, count: int, k: int, i: int) -> Loc:
    return (loc[0], loc[1] * k + i * count) if loc[1] >= 0 else loc


def _slots(loc: Loc | None, count: int):
    return () if loc is None else ((loc[0], loc[1] + j) for j in range(count))


def _build_ops(plan: _Planner, k: int, channels: int, steps: int) -> dict[int, list[_Op]]:
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
    for cp in plan.copies:
        for i in range(k):
            src, dst = _expand(cp.src, cp.count, k, i), _expand(cp.dst, cp.count, k, i)
            ops[cp.rank].append(_Op((steps, 2, cp.seq, i), "cpy", src, dst, cp.count, -1,
                                    i * channels, src, dst))
    return ops


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


def _assign_blocks(rank_ops: list[_Op], pair_all: bool, base_channel) -> list[_Block]:
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


def _dependencies(rank_ops: list[_Op]) -> None:
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


def _fuse(blocks: list[_Block], rank_ops: list[_Op]) -> None:
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


def _reduce_dependencies(blocks: list[_Block]) -> None:
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


def _emit_rank(rank: int, blocks: list[_Block]) -> tuple[Threadblock, ...]:
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
            raise _Overflow("blocks", f"rank {rank} needs dependency target thread block id {tb_id}, "
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
                            dep_op, op.has_dep))
        out.append(Threadblock(block.id, block.send, block.recv, block.channel, tuple(steps)))
    return tuple(out)


# ---------------------------------------------------------------------- driver
def _check_options(options: LoweringOptions) -> Profile | None:
    def positive(value: Any, what: str) -> None:
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise InputError(f"{what} must be a positive integer, got {value!r}")

    if options.runtime is not None and options.runtime not in PROFILES:
        raise InputError(f"unknown runtime {options.runtime!r}; known: {', '.join(PROFILES)}")
    if options.protocol not in PROTOCOLS:
        raise InputError(f"unknown protocol {options.protocol!r}; known: {', '.join(PROTOCOLS)}")
    if options.channel_policy not in CHANNEL_POLICIES:
        raise InputError(f"unknown channel policy {options.channel_policy!r}; known: {', '.join(CHANNEL_POLICIES)}")
    if options.channels is not None and options.channel_policy != "max":
        raise InputError("a channel count applies to the 'max' channel policy only")
    positive(options.channels, "channels")
    positive(options.instances, "instances")
    positive(options.max_threadblocks, "max threadblocks")
    if not isinstance(options.min_bytes, int) or options.min_bytes < 0:
        raise InputError(f"min bytes must be an integer >= 0, got {options.min_bytes!r}")
    if options.max_bytes is not None and (not isinstance(options.max_bytes, int)
                                          or options.max_bytes < options.min_bytes):
        raise InputError(f"max bytes must be an integer >= min bytes ({options.min_bytes}), got {options.max_bytes!r}")
    if options.name is not None and not NAME_RE.fullmatch(options.name):
        raise InputError(f"program name {options.name!r}: use 1-63 characters among A-Z a-z 0-9 _ . + -")
    return None if options.runtime is None else PROFILES[options.runtime]


def _default_name(schedule: Schedule) -> str:
    algo = schedule.meta.get("algorithm") or schedule.meta.get("synthesizer") or "synth"
    raw = f"{algo}_{schedule.collective.name}_{schedule.topology.name}_s{len(schedule.steps)}"
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", raw)[:63]


def lower(schedule: Schedule, options: LoweringOptions = LoweringOptions()) -> Program:
    """The Program for ``schedule`` under ``options``; InputError (one line) when it cannot be
    lowered within the runtime's limits or ``max_threadblocks``."""
    profile = _check_options(options)
    layout = buffer_layout(schedule.collective, options.inplace)
    k = options.instances
    channel_limit = (profile.max_channels if profile else 1 << 30) // k
    if channel_limit < 1:
        raise InputError(f"{k} instances need {k} channels; {profile.name} allows {profile.max_channels}")
    if options.channel_policy == "one":
        cap = 1
    elif options.channel_policy == "link":
        cap = max((schedule.topology.link_capacity(l) or 1 for l in schedule.topology.links), default=1)
    else:
        cap = options.channels or DEFAULT_MAX_CHANNELS
    queue = [_Config(max(1, min(cap, channel_limit)), False, 0)]
    tried: set[_Config] = set()
    errors: list[_Overflow] = []
    while queue:
        cfg = queue.pop(0)
        if cfg in tried:
            continue
        tried.add(cfg)
        try:
            return _lower_with(schedule, layout, options, profile, cfg)
        except _Overflow as exc:
            errors.append(exc)
            if exc.kind == "steps" and cfg.spread < channel_limit:
                queue.insert(0, replace(cfg, spread=max(2, cfg.spread + 1)))
            elif exc.kind in ("blocks", "channels") and not cfg.pair_all:
                queue.insert(0, replace(cfg, pair_all=True))
            elif exc.kind in ("blocks", "channels") and cfg.spread > 1:
                queue.insert(0, replace(cfg, spread=cfg.spread - 1 if cfg.spread > 2 else 0))
            elif exc.kind in ("blocks", "channels") and cfg.cap > 1:
                queue.insert(0, replace(cfg, cap=cfg.cap - 1))
    tail = "" if len(errors) == 1 else f" (after {len(errors)} channel/thread-block arrangements)"
    raise InputError(f"cannot lower {schedule.collective.name} on {schedule.topology.name}: {errors[-1]}{tail}")


def _lower_with(schedule: Schedule, layout: Layout, options: LoweringOptions, profile: Profile | None,
                cfg: _Config) -> Program:
    plan = _Planner(schedule, layout, cfg, options.channel_policy).run()
    k, n = options.instances, schedule.collective.ranks
    used = 1 + max([t.channel for t in plan.transfers] + [0])
    channels = used * k
    if profile is not None and channels > profile.max_channels:
        raise _Overflow("channels", f"needs {channels} channels, {profile.name} allows {profile.max_channels}")
    sizes = (layout.chunks_per_loop * k, layout.input_chunks * k, layout.output_chunks * k, max(plan.scratch) * k)
    if max(sizes) > MAX_OFFSET + 1:
        raise InputError(f"{max(sizes)} chunks per buffer exceed MSCCL's int16 offsets ({MAX_OFFSET + 1})")
    per_rank = _build_ops(plan, k, used, len(schedule.steps))
    gpus = []
    for rank in range(n):
        rank_ops = per_rank.get(rank, [])
        blocks = _assign_blocks(rank_ops, cfg.pair_all, lambda c: c // used)
        _dependencies(rank_ops)
        _fuse(blocks, rank_ops)
        _reduce_dependencies(blocks)
        tbs = _emit_rank(rank, blocks)
        _check_rank(rank, tbs, n, options, profile)
        gpus.append(RankProgram(rank, layout.input_chunks * k, layout.output_chunks * k, plan.scratch[rank] * k, tbs))
    meta = {"schedule": {"collective": schedule.collective.name, "topology": schedule.topology.name,
                         "steps": len(schedule.steps), "synthesizer": schedule.meta.get("synthesizer", "")},
            "lowering": {"runtime": options.runtime or "", "channel_policy": options.channel_policy,
                         "channels_per_pair": cfg.cap, "spread": cfg.spread, "paired_all": cfg.pair_all,
                         "instances": k}}
    return Program(options.name or _default_name(schedule), schedule.collective.name, n, options.protocol,
                   layout.chunks_per_loop * k, options.inplace, not options.inplace, channels, tuple(gpus),
                   options.min_bytes, options.max_bytes, meta)


def _check_rank(rank: int, tbs: tuple[Threadblock, ...], n: int, options: LoweringOptions,
                profile: Profile | None) -> None:
    limits = [(options.max_threadblocks, "--max-threadblocks")]
    if profile is not None:
        limits.append((profile.max_threadblocks, f"{profile.name} runtime"))
    for limit, source in limits:
        if limit is not None and len(tbs) > limit:
            raise _Overflow("blocks", f"rank {rank} needs {len(tbs)} thread blocks, the {source} limit is {limit}")
    for direction in ("send", "recv"):
        peers: dict[int, set] = defaultdict(set)
        for tb in tbs:
            if getattr(tb, direction) >= 0:
                peers[tb.channel].add(getattr(tb, direction))
        for channel, group in peers.items():
            if len(group) > MAX_PEERS_PER_CHANNEL:
                raise _Overflow("blocks", f"rank {rank} has {len(group)} {direction} peers on channel {channel}, "
                                          f"MSCCL allows {MAX_PEERS_PER_CHANNEL}")
    if profile is None:
        return
    longest = max(tbs, key=lambda tb: len(tb.ops))
    if len(longest.ops) > profile.max_steps:
        raise _Overflow("steps", f"rank {rank} thread block (send {longest.send}, recv {longest.recv}, "
                                 f"channel {longest.channel}) has {len(longest.ops)} steps, {profile.name} "
                                 f"allows {profile.max_steps}")
    elements = 1 + n + len(tbs) + sum(len(tb.ops) for tb in tbs)
    if elements > MAX_ELEMENTS_PER_RANK:
        raise _Overflow("elements", f"rank {rank} needs {elements} XML elements, MSCCL stores {MAX_ELEMENTS_PER_RANK}")
