"""Data-level replay of a Program: does it compute its collective, whatever the interleaving?

Every rank's thread blocks run their transfers (synth.program.deps: nops folded, fused reductions,
monotonic flags) against FIFO connections per (sender, receiver, channel). Values are symbolic: a
chunk holds the set of (rank, input chunk) contributions it sums, so a contribution counted twice,
a missing one, an unwritten scratch/output chunk or an out-of-bounds access is caught with its
location. The program runs under several interleavings (round-robin, run-to-block in both block
orders, seeded random) because a race can pass one order, and the first run also tracks happens-
before with vector clocks (synth.program.races), which finds unordered conflicting accesses
whatever the order; a deadlock (nothing can run while some blocks are unfinished) ends a run. A
switch op runs as a rendezvous of its participants (synth.program.meet). The
final buffers are compared with the collective's postcondition, with in-place buffers aliased as
MSCCL does (msccl-format.md section 3).

``correct`` is None when the collective has no checkable postcondition (``custom``, ``send``...)
or the program is too big to replay (see ``MAX_OPS``; beyond ``MAX_CELLS`` chunk-ops or buffer chunks it
is not run at all, so absurd counts in a file cost nothing); problems are still reported.

>>> from synth.program.ir import Op, Program, RankProgram, Threadblock
>>> def rank(r):
...     net = Threadblock(0, 1 - r, 1 - r, 0, (Op("s", "i", 0, "o", r, 1), Op("r", "i", 0, "o", 1 - r, 1)))
...     return RankProgram(r, 1, 2, 0, (net, Threadblock(1, -1, -1, 0, (Op("cpy", "i", 0, "o", r, 1),))))
>>> replay(Program("ag", "allgather", 2, "Simple", 2, False, True, 1, (rank(0), rank(1)))).correct
True
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from synth.program.buffers import JUDGED, Bad, Layout, initial_buffers, postcondition
from synth.program.deps import Problem, release, shared_fifos, transfers
from synth.program.ir import READS_SRC as READS
from synth.program.ir import RECEIVING, SENDING, Program
from synth.program.meet import Rendezvous
from synth.program.races import RaceDetector
from synth.program.switches import switch_groups

MAX_OPS = 400_000  # chunk-ops of one replay; bigger programs are run once, then not judged
MAX_CELLS = 20_000_000  # chunk-ops or buffer chunks beyond which a program is not replayed at all
MAX_PROBLEMS = 40
ORDER_DEPENDENT = ("wrong-result", "deadlock", "unwritten", "double-count", "leftover", "count-mismatch")


@dataclass(frozen=True)
class ReplayResult:
    """``correct``: True / False, or None when not judged; ``problems``: what went wrong, first
    found first; ``orders``: interleavings run; ``note``: why it was not (fully) judged."""

    correct: bool | None
    problems: tuple[Problem, ...] = ()
    orders: int = 0
    note: str = ""


# ---------------------------------------------------------------------- one run
class _Run(Rendezvous):
    """One interleaving. ``order``: "fifo" (round-robin), "depth" / "depth-reversed" (run a block
    until it blocks) or "random" (seeded). Switch ops run as rendezvous (synth.program.meet)."""

    def __init__(self, program: Program, inplace: bool, order: str, seed: int, tag: str, races: bool = False):
        self.p, self.order, self.tag = program, order, tag
        self.rng = random.Random(seed)
        self.problems: list[Problem] = []
        self.seen: set[tuple] = set()
        self.stride = max(1, max((Layout(program, r, inplace).input_size for r in range(program.ranks)), default=1))
        self.layouts = [Layout(program, r, inplace) for r in range(program.ranks)]
        self.buffers = [initial_buffers(self.layouts[r], r, self.stride) for r in range(program.ranks)]
        self.blocks = []  # (rank, tb index, tb, transfers)
        self.ids = []
        for g in program.gpus:
            ids = {}
            for i, tb in enumerate(g.threadblocks):
                ids.setdefault(tb.id, len(self.blocks))
                self.blocks.append((g.rank, i, tb, transfers(tb)))
            self.ids.append(ids)
        self.next = [0] * len(self.blocks)
        self.flag = [-1] * len(self.blocks)
        self.queues: dict[tuple[int, int, int], deque] = {}
        self.waiting_flag: dict[int, list[int]] = {}
        self.waiting_conn: dict[tuple[int, int, int], list[int]] = {}
        self.halted: set[int] = set()
        self.races = RaceDetector(len(self.blocks)) if races else None
        self.current = (0, 0)  # (block, transfer) being executed
        self.setup_switches(switch_groups(program)[0])

    def problem(self, code: str, message: str, rank=None, tb=None, step=None, key=None) -> None:
        if key is not None:
            if key in self.seen:
                return
            self.seen.add(key)
        self.problems.append(Problem(code, message, "misbehaves", rank, tb, step))

    # -- scheduling
    def run(self) -> bool:
        """Run to the end; False on deadlock."""
        ready = [b for b in range(len(self.blocks)) if self.blocks[b][3]]
        if self.order == "depth-reversed":
            ready.reverse()
        queue = deque(ready)
        while queue:
            if self.order == "random":
                k = self.rng.randrange(len(queue))
                queue[k], queue[-1] = queue[-1], queue[k]
                b = queue.pop()
            elif self.order == "fifo":
                b = queue.popleft()
            else:
                b = queue.popleft()
            woken = self.step(b)
            if woken is None:
                continue  # blocked, registered as a waiter
            if self.order in ("depth", "depth-reversed"):
                if self.next[b] < len(self.blocks[b][3]) and b not in self.halted:
                    queue.appendleft(b)
                queue.extend(woken)
            else:
                queue.extend(woken)
                if self.next[b] < len(self.blocks[b][3]) and b not in self.halted:
                    queue.append(b)
        unfinished = [b for b in range(len(self.blocks))
                      if self.next[b] < len(self.blocks[b][3]) and b not in self.halted]
        if unfinished:
            shown = []
            for b in unfinished[:4]:
                rank, _, tb, folded = self.blocks[b]
                shown.append(f"rank {rank} tb {tb.id} step {folded[self.next[b]].ops[0]} ({self.why(b)})")
            rank, _, tb, folded = self.blocks[unfinished[0]]
            self.problem("deadlock",
                         f"deadlock: {len(unfinished)} thread block(s) cannot progress; " + "; ".join(shown),
                         rank, tb.id, folded[self.next[unfinished[0]]].ops[0])
            return False
        for (src, dst, chan), q in self.queues.items():
            if q:
                self.problem("leftover", f"{len(q)} message(s) sent on {src}->{dst} channel {chan} are never received",
                             src)
        return True

    def why(self, b: int) -> str:
        rank, _, tb, folded = self.blocks[b]
        t = folded[self.next[b]]
        for dep_tb, dep_step in t.waits:
            target = self.ids[rank].get(dep_tb)
            if target is None or self.flag[target] < dep_step:
                return f"waits for tb {dep_tb} step {dep_step}"
        first = tb.ops[t.ops[0]]
        if first.switches:
            return self.waiting_for(first)
        return f"waits for data from rank {tb.recv} channel {tb.channel}"

    def releases(self, b: int, t) -> list:
        """(block, transfer) pairs whose publication the transfer's waits rely on."""
        rank = self.blocks[b][0]
        return [(self.ids[rank][dep_tb], release(self.blocks[self.ids[rank][dep_tb]][3], dep_step))
                for dep_tb, dep_step in t.waits]

    def advance(self, b: int, t) -> list[int]:
        """Block b finished transfer t: its next, and the blocks waiting on its flag."""
        self.next[b] += 1
        if t.has_dep:
            self.flag[b] = t.step
            return self.waiting_flag.pop(b, [])
        return []

    def step(self, b: int):
        """Run block b's next transfer; None if it must wait, else the blocks it wakes."""
        rank, index, tb, folded = self.blocks[b]
        t = folded[self.next[b]]
        for dep_tb, dep_step in t.waits:
            target = self.ids[rank].get(dep_tb)
            if target is None or (self.flag[target] < dep_step and release(self.blocks[target][3], dep_step) is None):
                self.waiting_flag.setdefault(-1, []).append(b)  # never released
                return None
            if self.flag[target] < dep_step:
                self.waiting_flag.setdefault(target, []).append(b)
                return None
        first = tb.ops[t.ops[0]]
        if first.switches:
            return self.arrive(b, self.next[b], first)
        conn = (tb.recv, rank, tb.channel)
        if first.type in RECEIVING and tb.recv >= 0:
            q = self.queues.get(conn)
            if not q:
                self.waiting_conn.setdefault(conn, []).append(b)
                return None
        woken: list[int] = []
        k = self.next[b]
        self.current = (b, k)
        if self.races is not None:
            message = self.queues[conn][0][2] if first.type in RECEIVING and tb.recv >= 0 else None
            self.races.begin(b, k, self.releases(b, t), message)
        for pos in t.ops:
            if not self.execute(b, rank, tb, pos, woken):
                self.halted.add(b)
                return woken
        if self.races is not None:
            self.races.end(b, k, t.has_dep)
        return woken + self.advance(b, t)

    # -- data
    def execute(self, b, rank, tb, pos, woken) -> bool:
        op = tb.ops[pos]
        kind = op.type
        where = (rank, tb.id, pos)
        if kind not in ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re"):
            self.problem("step-type", f"step type {kind!r} stops the thread block", *where)
            return False
        incoming = None
        if kind in RECEIVING:
            if tb.recv < 0:
                self.problem("peer", f"{kind!r} without a recv peer stops the thread block", *where)
                return False
            count, incoming, _ = self.queues[(tb.recv, rank, tb.channel)].popleft()
            if count != op.count:
                self.problem("count-mismatch", f"receives {op.count} chunks but the matching send moved {count}",
                             *where)
                incoming = (incoming + (Bad("count mismatch"),) * op.count)[:op.count]
        n = op.count
        src = self.read(rank, op.src_buf, op.src_off, n, where) if kind in READS else None
        if kind in ("s", "cpy"):
            result = src
        elif kind in ("r", "rcs"):
            result = incoming
        elif kind == "re":
            old = self.read(rank, op.dst_buf, op.dst_off, n, where)
            result = tuple(self.combine(a, c, where) for a, c in zip(src, old))
        else:
            result = tuple(self.combine(a, c, where) for a, c in zip(src, incoming))
        if kind in ("r", "rcs", "rrc", "rrcs", "cpy", "re"):
            self.write(rank, op.dst_buf, op.dst_off, result, where)
        if kind in SENDING:
            if tb.send < 0:
                self.problem("peer", f"{kind!r} without a send peer stops the thread block", *where)
                return False
            conn = (rank, tb.send, tb.channel)
            self.queues.setdefault(conn, deque()).append((n, result, self.races and self.races.now))
            woken += self.waiting_conn.pop(conn, [])
        return True

    def locate(self, rank, letter, off, n, where):
        """(backing buffer name, first index) of letter[off..off+n), or None (out of bounds, reported)."""
        layout = self.layouts[rank]
        view = layout.view.get(letter)
        if view is None or off < 0 or off + n > view[2]:
            size = view[2] if view else 0
            self.problem("out-of-bounds", f"accesses {letter}[{off}..{off + n}) but the buffer has {size} chunks",
                         *where, key=("oob",) + where)
            return None
        return view[0], view[1] + off

    def read(self, rank, letter, off, n, where) -> tuple:
        found = self.locate(rank, letter, off, n, where)
        if found is None:
            return (Bad("out-of-bounds read"),) * n
        name, base = found
        values = tuple(self.buffers[rank][name][base:base + n])
        if self.races is not None:
            self.check_races(rank, name, base, n, where, False)
        if None in values:
            k = values.index(None)
            self.problem("unwritten", f"reads {letter}[{off + k}] before anything was written there", *where,
                         key=("unwritten", rank, letter, off + k))
            values = tuple(Bad(f"{letter}[{off + k}] read before written") if v is None else v for v in values)
        return values

    def write(self, rank, letter, off, values, where) -> None:
        found = self.locate(rank, letter, off, len(values), where)
        if found is not None:
            name, base = found
            self.buffers[rank][name][base:base + len(values)] = values
            if self.races is not None:
                self.check_races(rank, name, base, len(values), where, True)

    def check_races(self, rank, name, base, n, where, write) -> None:
        b, k = self.current
        _, tb_id, pos = where
        label = f"tb {tb_id} step {pos} ({self.blocks[b][2].ops[pos].type})"
        for index in range(base, base + n):
            race = self.races.access((rank, name, index), b, k, label, write)
            if race:
                self.problem("data-race", f"data race on rank {rank} {name}[{index}]: {race}", *where,
                             key=("race", b, pos, race))

    def combine(self, a, c, where):
        if isinstance(a, Bad):
            return a
        if isinstance(c, Bad):
            return c
        if a & c:
            self.problem("double-count", "a reduction adds a contribution that is already in the sum", *where,
                         key=("double",) + where)
            return Bad("contribution counted twice")
        return a | c


# ---------------------------------------------------------------------- driver
def replay(program: Program, orders: int = 5, seed: int = 0) -> ReplayResult:
    """Replay ``program`` under ``orders`` interleavings per in-place mode and judge it."""
    problems = list(shared_fifos(program)) + switch_groups(program)[1]
    size = sum(max(op.count, 1) for g in program.gpus for tb in g.threadblocks for op in tb.ops)
    modes = [m for m, on in ((True, program.inplace), (False, program.outofplace)) if on] or [False]
    kinds = ["fifo", "depth", "depth-reversed"] + ["random"] * max(0, orders - 3)
    kinds = kinds[:max(1, orders)]
    cells = max(_buffer_chunks(program, inplace) for inplace in modes)
    if max(size, cells) > MAX_CELLS:
        return ReplayResult(None, tuple(problems[:MAX_PROBLEMS]), 0, f"too big to replay ({size} chunk-ops, "
                            f"{cells} buffer chunks; at most {MAX_CELLS})")
    note = ""
    if size * len(kinds) * len(modes) > MAX_OPS:
        kinds, modes = kinds[:1], modes[:1]
        note = f"{size} chunk-ops: replayed once (round-robin, one in-place mode) instead of {orders} interleavings"
    judged = program.collective in JUDGED and program.chunks_per_loop > 0
    if judged and program.collective not in ("allreduce", "reduce", "broadcast", "gather", "scatter") and (
            program.chunks_per_loop % max(1, program.ranks)):
        problems.append(Problem("chunks", f"nchunksperloop={program.chunks_per_loop} is not a multiple of the "
                                f"{program.ranks} ranks, which {program.collective} needs"))
        judged = False
        note = note or "the buffers cannot be split by rank"
    outcomes, seen, runs = [], set(), 0
    for inplace in modes:
        for i, kind in enumerate(kinds):
            tag = f"{'in-place' if inplace else 'out-of-place'}, {kind}{'' if kind != 'random' else f' #{i}'}"
            run = _Run(program, inplace, kind, seed + i, tag, races=i == 0)
            finished = run.run()
            runs += 1
            found = list(run.problems)
            if finished and judged:
                wrong = postcondition(program, run.layouts, run.buffers, run.stride)
                found += [Problem("wrong-result", m) for m in wrong[:6]]
                if len(wrong) > 6:
                    found.append(Problem("wrong-result", f"{len(wrong)} output chunks are wrong in all"))
            keys = [(p.code, p.message) for p in found]
            outcomes.append((tag, frozenset(key for key in keys if key[0] != "data-race")))
            for p, key in zip(found, keys):
                if key not in seen:
                    seen.add(key)
                    shown_tag = tag if p.code in ORDER_DEPENDENT else tag.split(",")[0] if len(modes) > 1 else ""
                    message = f"{p.message} ({shown_tag})" if shown_tag else p.message
                    problems.append(Problem(p.code, message, p.severity, p.rank, p.tb, p.step))
    differing = {keys for _, keys in outcomes}
    if len(differing) > 1:
        tags = [tag for tag, keys in outcomes if keys != outcomes[0][1]]
        problems.append(Problem("order-dependent", f"the outcome depends on the interleaving: {outcomes[0][0]} "
                                f"differs from {', '.join(tags[:3])} (a data race or a shared FIFO)"))
    shown = problems[:MAX_PROBLEMS]
    if len(problems) > MAX_PROBLEMS:
        shown.append(Problem("more", f"... and {len(problems) - MAX_PROBLEMS} more problems", "note"))
    bad = any(p.severity != "note" for p in problems)
    if not judged:
        verdict = False if any(p.code == "chunks" for p in problems) else None
        return ReplayResult(verdict, tuple(shown), runs,
                            note or f"{program.collective!r} has no checkable postcondition")
    if note and not bad:
        return ReplayResult(None, tuple(shown), runs, note)
    return ReplayResult(not bad, tuple(shown), runs, note)


def _buffer_chunks(program: Program, inplace: bool) -> int:
    """Chunks the replay's buffers would hold, over all ranks (computed before allocating any)."""
    return sum(sum(Layout(program, r, inplace).sizes.values()) for r in range(program.ranks))
