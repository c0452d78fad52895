"""One rank of a Program, executed with real tensors (synth.runtime; needs torch).

As in MSCCL, every thread block of the rank runs concurrently (here: a thread each, started once
and reused across calls) and executes its transfers strictly in order (synth.program.deps folds nops
into dependencies and fuses ``re`` chains exactly as the checker does). A transfer first waits for
the progress flags it depends on (monotonic: a wait for step K is met by any published step >= K),
then runs its ops: a receive takes the next message of its connection (posted ahead into a private
tensor, as a FIFO slot; synth.runtime.transport), a send posts a private copy of the data (the FIFO
write), reductions are tensor operations, and ``cpy``/``re`` are local. Buffers are
the Program's input, output and scratch buffers as flat tensors of ``chunk`` elements per chunk,
with in-place views aliased as MSCCL aliases them (synth.program.buffers.Layout). A switch op
runs emulated with messages through its root (synth.runtime.switch_ops).

What goes wrong is recorded, never hung on: every wait has the call's deadline; a block that cannot
go on says where it is (``rank r tb t step s (op): waits for ...``); the first read of a chunk
nothing has written yet, and the first out-of-bounds access, are recorded with their location
(tracked per chunk in checked runs). Unwritten elements hold NaN (the dtype's minimum for
integers), so a wrong program also shows up in the result.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch

from synth.program.deps import release, transfers
from synth.program.ir import OP_NAMES, READS_SRC, RECEIVING, SENDING, WRITES_DST, Program
from synth.runtime.switch_ops import run_switch
from synth.runtime.transport import PeerFailure, Stuck, Transport

REDUCERS = {
    "sum": torch.add,
    "prod": torch.mul,
    "min": torch.minimum,
    "max": torch.maximum,
}


class BlockFault(Exception):
    """The op cannot run (out of bounds, no peer, unknown type): the block stops, as MSCCL's would."""


@dataclass(frozen=True)
class Outcome:
    """How one execution went on one rank: ``stuck`` (where each unfinished block stopped),
    ``problems`` (first unwritten read, out-of-bounds access...), ``failed`` (torch errors)."""

    stuck: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        return not (self.stuck or self.failed)


class RankExecutor:
    """Executes ``program``'s part for ``rank``. ``layout``: a synth.program.buffers.Layout of the
    variant that runs; ``reducer``: one of REDUCERS."""

    def __init__(self, program: Program, rank: int, layout, transport: Transport, reducer: str = "sum",
                 order: list[tuple[int, int]] | None = None):
        self.program, self.rank, self.layout, self.transport = program, rank, layout, transport
        self.order = order
        self.reduce = REDUCERS[reducer]
        gpu = program.gpus[rank]
        self.blocks = gpu.threadblocks
        self.folded = [transfers(tb) for tb in self.blocks]
        self.index = {}
        for i, tb in enumerate(self.blocks):
            self.index.setdefault(tb.id, i)
        written = {layout.view[op.dst_buf][0] for tb in self.blocks for op in tb.ops
                   if (op.type in WRITES_DST or op.switches and op.dst_off >= 0) and op.dst_buf in layout.view}
        self.read_only = {name for name in layout.sizes if name not in written}
        self._threads: list[threading.Thread] = []
        self._go = threading.Condition()
        self._generation = 0
        self._done = threading.Semaphore(0)
        self._closed = False

    # -- one execution
    def run(self, buffers: dict[str, torch.Tensor], chunk: int, deadline: float, track: bool) -> Outcome:
        """Execute once on ``buffers`` (backing buffer name -> flat tensor of size x chunk elements)."""
        self.buffers, self.chunk, self.deadline, self.track = buffers, chunk, deadline, track
        self.flags = [-1] * len(self.blocks)
        self.flag_cv = threading.Condition()
        self.where = ["not started"] * len(self.blocks)
        self.finished = [False] * len(self.blocks)
        self.problems: list[str] = []
        self.failed: list[str] = []
        self.switch_sent: list[list[tuple[int, int]]] = [[] for _ in self.blocks]
        if track:
            self.written = {name: bytearray(t.numel() // max(1, chunk)) for name, t in buffers.items()}
            name, base, size = self.layout.view["i"]
            self.written[name][base:base + size] = b"\x01" * size
        self.transport.reset(unbounded=self.order is not None)
        if self.order is not None:
            self._run_ordered()
        else:
            if not self._threads:
                self._start_threads()
            with self._go:
                self._generation += 1
                self._go.notify_all()
            for _ in self.blocks:
                self._done.acquire()
        stuck = tuple(f"rank {self.rank} tb {tb.id} {self.where[i]}" for i, tb in enumerate(self.blocks)
                      if not self.finished[i])
        return Outcome(stuck, tuple(self.problems), tuple(self.failed))

    def close(self) -> None:
        with self._go:
            self._closed = True
            self._go.notify_all()

    def _start_threads(self) -> None:
        for b in range(len(self.blocks)):
            t = threading.Thread(target=self._loop, args=(b,), name=f"synth-tb{self.blocks[b].id}", daemon=True)
            t.start()
            self._threads.append(t)

    def _loop(self, b: int) -> None:
        seen = 0
        while True:
            with self._go:
                while self._generation == seen and not self._closed:
                    self._go.wait()
                if self._closed:
                    return
                seen = self._generation
            try:
                self._run_block(b)
            except BaseException as exc:  # noqa: BLE001 - a block must always report back
                self.failed.append(f"rank {self.rank} tb {self.blocks[b].id}: {type(exc).__name__}: {exc}")
            finally:
                self._done.release()

    # -- one thread block
    def _announce(self, b: int) -> bool:
        """Post the block's first receives (its FIFO slots); False if torch failed."""
        tb = self.blocks[b]
        if tb.recv < 0:
            return True
        sizes = [op.count * self.chunk for op in tb.ops if op.type in RECEIVING]
        any_buffer = next(iter(self.buffers.values()))
        try:
            self.transport.expect(tb.recv, tb.channel, sizes, any_buffer.dtype, any_buffer.device)
        except PeerFailure as exc:
            self.where[b] = f"before its first step: {exc}"
            self.failed.append(f"rank {self.rank} tb {tb.id}: {exc}")
            return False
        return True

    def _run_block(self, b: int) -> None:
        if not self._announce(b):
            return
        for k in range(len(self.folded[b])):
            if not self._transfer(b, k, wait=True):
                return
        self._finish(b)

    def _run_ordered(self) -> None:
        """Every transfer of the rank in the deadlock-free global order (synth.runtime.order), in
        this thread; a block's flags need no waiting (the order honours every dependency)."""
        if not all(self._announce(b) for b in range(len(self.blocks))):
            return
        for b, k in self.order:
            if not self._transfer(b, k, wait=False):
                for other in range(len(self.blocks)):
                    if self.where[other] == "not started":
                        self.where[other] = "not reached (an earlier transfer of this rank is stuck)"
                return
        for b in range(len(self.blocks)):
            if not self._finish(b):
                return

    def _transfer(self, b: int, k: int, wait: bool) -> bool:
        """Run transfer k of block b; False when the block cannot go on (recorded)."""
        tb = self.blocks[b]
        t = self.folded[b][k]
        label = f"step {t.ops[0]} ({tb.ops[t.ops[0]].type})"
        try:
            if wait:
                for dep_tb, dep_step in t.waits:
                    self.where[b] = f"{label}: waits for tb {dep_tb} step {dep_step}"
                    self._wait_flag(dep_tb, dep_step)
            for pos in t.ops:
                self.where[b] = f"step {pos} ({tb.ops[pos].type}): running"
                self._execute(b, pos)
        except Stuck as exc:
            self.where[b] = f"{label}: {exc}"
            return False
        except PeerFailure as exc:
            self.where[b] = f"{label}: {exc}"
            self.failed.append(f"rank {self.rank} tb {tb.id} {label}: {exc}")
            return False
        except BlockFault as exc:
            self.where[b] = f"{label}: stopped: {exc}"
            self.problems.append(f"rank {self.rank} tb {tb.id} {label}: {exc}")
            return False
        if t.has_dep and wait:
            with self.flag_cv:
                self.flags[b] = t.step
                self.flag_cv.notify_all()
        return True

    def _finish(self, b: int) -> bool:
        """Wait until the block's sends have been taken; mark it finished."""
        tb = self.blocks[b]
        try:
            if tb.send >= 0:
                self.where[b] = f"after its last step: waits for rank {tb.send} to take its messages"
                self.transport.drain(tb.send, tb.channel, self.deadline)
            for peer, channel in self.switch_sent[b]:
                self.where[b] = f"after its last step: waits for rank {peer} to take its switch op messages"
                self.transport.drain(peer, channel, self.deadline)
        except (Stuck, PeerFailure) as exc:
            self.where[b] = f"after its last step: {exc}"
            if isinstance(exc, PeerFailure):
                self.failed.append(f"rank {self.rank} tb {tb.id}: {exc}")
            return False
        self.where[b] = "finished"
        self.finished[b] = True
        return True

    def _wait_flag(self, dep_tb: int, dep_step: int) -> None:
        target = self.index.get(dep_tb)
        never = target is None or release(self.folded[target], dep_step) is None
        with self.flag_cv:
            while target is None or self.flags[target] < dep_step:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    why = " (which no step of it ever publishes)" if never else ""
                    raise Stuck(f"waits for tb {dep_tb} step {dep_step}{why}")
                self.flag_cv.wait(left)

    # -- one op
    def _region(self, letter: str, off: int, n: int, where: str, reading: bool, writing: bool) -> torch.Tensor:
        view = self.layout.view.get(letter)
        if view is None or off < 0 or n < 0 or off + n > view[2]:
            size = view[2] if view else 0
            raise BlockFault(f"{where} accesses {letter}[{off}..{off + n}) but the buffer has {size} chunks")
        name, base, _ = view
        first = base + off
        if self.track:
            marks = self.written[name]
            if reading:
                k = marks.find(0, first, first + n)
                if k >= 0 and len(self.problems) < 8:
                    self.problems.append(f"rank {self.rank} {where} reads {letter}[{k - base}] before anything "
                                         "was written there")
            if writing:
                marks[first:first + n] = b"\x01" * n
        c = self.chunk
        return self.buffers[name][first * c:(first + n) * c]

    def _execute(self, b: int, pos: int) -> None:
        tb = self.blocks[b]
        op = tb.ops[pos]
        kind = op.type
        where = f"tb {tb.id} step {pos} ({kind})"
        if kind not in OP_NAMES or kind == "nop":
            raise BlockFault(f"step type {kind!r} stops the thread block")
        if op.switches:
            self._switch(b, op, where)
            return
        receives = kind in ("r", "rcs", "rrs", "rrc", "rrcs")
        sends = kind in SENDING
        if receives and tb.recv < 0 or sends and tb.send < 0:
            raise BlockFault(f"{kind!r} without a {'recv' if receives and tb.recv < 0 else 'send'} peer")
        n = op.count
        src = self._region(op.src_buf, op.src_off, n, where, True, False) if kind in READS_SRC else None
        dst = None
        if kind in WRITES_DST:
            dst = self._region(op.dst_buf, op.dst_off, n, where, kind == "re", True)
        payload = None
        if kind in ("r", "rcs"):
            payload = self.transport.recv(tb.recv, tb.channel, n * self.chunk, self.deadline)
            dst.copy_(payload)
        elif kind in ("rrs", "rrc", "rrcs"):
            incoming = self.transport.recv(tb.recv, tb.channel, n * self.chunk, self.deadline)
            payload = self.reduce(src, incoming)
            if dst is not None:
                dst.copy_(payload)
        elif kind == "s":
            name = self.layout.view[op.src_buf][0]
            payload = src if name in self.read_only else src.clone()
        elif kind == "cpy":
            dst.copy_(src.clone() if _overlaps(src, dst) else src)
        elif kind == "re":
            dst.copy_(self.reduce(src, dst))
        if sends:
            self.transport.send(tb.send, tb.channel, payload, self.deadline)


    def _switch(self, b: int, op, where: str) -> None:
        """This rank's part of a switch op (synth.runtime.switch_ops: emulated through its root)."""
        n = op.count
        src = self._region(op.src_buf, op.src_off, n, where, True, False) if self.rank in op.srcs else None
        dst = self._region(op.dst_buf, op.dst_off, n, where, False, True) if self.rank in op.dsts else None
        if src is None and dst is None:
            raise BlockFault(f"{where}: rank {self.rank} is neither a src nor a dst of switch op {op.switch_id}")
        run_switch(op, self.rank, src, dst, self.transport, self.deadline, self.reduce, self.switch_sent[b])


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    a0, b0 = a.storage_offset(), b.storage_offset()
    return a0 < b0 + b.numel() and b0 < a0 + a.numel()
