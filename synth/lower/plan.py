"""Lowering, step 2: walk the schedule, track where values live, plan transfers and scratch (synth.lower.lowering)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from synth.core.errors import InputError
from synth.core.schedule import Schedule
from synth.lower.layout import Layout, Loc
from synth.lower.switches import SwitchMove, switch_moves
from synth.msccl.profiles import MAX_COUNT

_FOREVER = 1 << 60
MAX_OPS_PER_STEP = 7  # per connection and step: NCCL's 8 FIFO slots, one spare for a fused receive
SWITCH_SEQ = 1 << 40  # switch transfers' sequence numbers: after every send of their step



@dataclass(frozen=True)
class Transfer:
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
class SwitchTransfer:
    """One switch operation of a step, ``count`` chunks from ``chunk`` on: each src reads its
    ``reads`` location, each dst writes its ``writes`` one (rank -> Loc, in srcs / dsts order);
    ``seq`` orders it after the step's sends (SWITCH_SEQ + its index)."""

    step: int
    seq: int
    chunk: int
    count: int
    srcs: tuple[int, ...]
    dsts: tuple[int, ...]
    reads: tuple[tuple[int, Loc], ...]
    writes: tuple[tuple[int, Loc], ...]
    switch: str
    fused: bool = False


@dataclass(frozen=True)
class FinalCopy:
    rank: int
    seq: int
    src: Loc
    dst: Loc
    count: int


@dataclass(frozen=True)
class PlanConfig:
    cap: int  # channels per pair at most
    pair_all: bool  # pair every receive connection with a send connection
    spread: int  # >1: each pair's steps rotate over this many channels


def _nxt(loc: Loc | None) -> Loc | None:
    return None if loc is None else (loc[0], loc[1] + 1)


def _follows(run: list, item: tuple) -> bool:
    """Whether a switch move continues a run: same ranks and fusion, the next chunk, and on
    every rank the next place (below MAX_COUNT chunks)."""
    (m, reads, writes), (n, next_reads, next_writes) = run[-1], item
    if len(run) >= MAX_COUNT or (n.srcs, n.dsts, n.fused, n.chunk) != (m.srcs, m.dsts, m.fused, m.chunk + 1):
        return False
    return all(b == (a[0], _nxt(a[1])) for a, b in zip(reads + writes, next_reads + next_writes))


class Planner:
    """Walks the steps, placing every received value; yields transfers and final copies."""

    def __init__(self, schedule: Schedule, layout: Layout, cfg: PlanConfig, policy: str):
        self.schedule, self.layout, self.cfg, self.policy = schedule, layout, cfg, policy
        self.topo = schedule.topology
        self.events: dict[tuple[int, int], list[tuple[int, int, str]]] = defaultdict(list)
        self.moves = switch_moves(schedule)
        for t, step in enumerate(schedule.steps):
            for s in step.sends:
                self.events[(s.src, s.chunk)].append((t, 0, "read"))
                self.events[(s.dst, s.chunk)].append((t, 1, s.op))
            for m in self.moves[t]:
                for r in m.srcs:
                    self.events[(r, m.chunk)].append((t, 0, "read"))
                for r in m.dsts:
                    self.events[(r, m.chunk)].append((t, 1, "copy"))  # replaces: the old value is dead
        for items in self.events.values():
            items.sort()
        self.loc: dict[tuple[int, int], Loc] = dict(layout.inputs)
        self.busy: dict[tuple[int, Loc], int] = {}  # when the value held there is last read
        self.occupant: dict[tuple[int, Loc], int] = {}  # the chunk whose value is held there
        for (r, c), where in layout.inputs.items():
            self.busy[(r, where)] = self.last_use(r, c, -1)
            self.occupant[(r, where)] = c
        self.scratch = [0] * schedule.collective.ranks
        self.transfers: list[Transfer] = []
        self.switches: list[SwitchTransfer] = []
        self.copies: list[FinalCopy] = []

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

    def run(self) -> "Planner":
        for t, step in enumerate(self.schedule.steps):
            self._step(t, step.sends, self.moves[t])
        self._final_copies()
        return self

    def _free(self, rank: int, where: Loc, step: int, claimed: set, same_step: bool) -> bool:
        """Can a receive of ``step`` write there? ``same_step``: also when the old value is
        still sent in this step (the write then waits for those sends)."""
        until = self.busy.get((rank, where), -1)
        return (rank, where) not in claimed and (until <= 2 * step if same_step else until < 2 * step)

    def _step(self, t: int, sends, moves: list[SwitchMove] = ()) -> None:
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
        self._switch_step(t, moves, claimed, targets)
        for (rank, chunk), target in targets.items():
            self.loc[(rank, chunk)] = target
            self.busy[(rank, target)] = self.last_use(rank, chunk, t)
            self.occupant[(rank, target)] = chunk

    def _switch_step(self, t: int, moves: list[SwitchMove], claimed: set, targets: dict) -> None:
        """Place the step's switch operations: each src reads where its value lives at the
        step's start, each dst's result lands as a receive's would (``_target``); consecutive
        chunks with the same ranks and consecutive places on every rank merge."""
        runs: list[list] = []
        for m in sorted(moves, key=lambda m: (m.srcs, m.dsts, m.chunk)):
            reads = tuple((r, self.loc[(r, m.chunk)]) for r in m.srcs)
            writes = []
            for r in m.dsts:
                targets[(r, m.chunk)] = self._target(t, r, m.chunk, None, 1, claimed)
                writes.append((r, targets[(r, m.chunk)]))
            item = (m, reads, tuple(writes))
            if runs and _follows(runs[-1], item):
                runs[-1].append(item)
            else:
                runs.append([item])
        for run in runs:
            m, reads, writes = run[0]
            self.switches.append(SwitchTransfer(t, SWITCH_SEQ + len(self.switches), m.chunk, len(run), m.srcs,
                                                m.dsts, reads, writes, m.switch, m.fused))

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
                    self.transfers.append(Transfer(t, len(self.transfers), src, dst, channel, count,
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
                self.copies.append(FinalCopy(rank, len(self.copies), head[0], head[1], count))
                if move is not None:
                    head, count = move, 1
