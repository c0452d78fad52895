"""Program IR: what a runtime executes, per rank -> thread blocks -> ordered ops.

The IR models MSCCL's execution model exactly (see shared/reference/msccl-format.md), so that
an MSCCL XML file and a ``synth.program`` JSON file map onto it one to one:

- a ``Program`` is one algorithm for one collective, world size and protocol; the collective's
  buffer of T elements is cut into ``chunks_per_loop`` equal chunks;
- each ``RankProgram`` has input, output and scratch buffers sized in chunks and a tuple of
  ``Threadblock`` s; a thread block owns at most one send peer and one receive peer on one
  channel, and runs its ops strictly in order;
- an ``Op`` is one MSCCL step: ``type`` (``OP_TYPES``), a source and a destination location
  (buffer letter and chunk offset; -1 = unused), ``count`` consecutive chunks, at most one
  dependency on an op of another thread block of the same rank (``dep_tb``, ``dep_op``: the
  op's position), and ``has_dep`` (the op publishes its block's progress flag when done).
  Extra dependencies are ``nop`` ops placed right before the op, as in MSCCL.

Op types (MSCCL spelling): ``s`` send, ``r`` recv, ``rcs`` recv-copy-send, ``rrs``
recv-reduce-send, ``rrc`` recv-reduce-copy, ``rrcs`` recv-reduce-copy-send, ``cpy`` local copy,
``re`` local reduce, ``nop``. For receive-with-reduce ops the local operand is ``src``.

Switch ops (``SWITCH_TYPES``, MSCCL++'s names; DESIGN.md, "In-network reduction and multicast")
move data through a switch that computes: ``glre`` (several ``srcs`` summed, written at one dst),
``gstore`` (one src written at every dst: a multicast) and ``glres`` (several srcs summed, written
at every dst: both in one pass, what NVLS does). One switch op is one op on every *participant*
(every rank in ``srcs`` or ``dsts``), all with the same ``switch_id``, type, ``srcs``, ``dsts``
and ``count``; on each, ``src_buf``/``src_off`` is where that rank's contribution is read (-1 when
it is no src) and ``dst_buf``/``dst_off`` where the result lands (-1 when it is no dst). The op
runs once every participant has reached it (a rendezvous): it reads every src, sums, and replaces
every dst's chunks. Thread blocks reach it through their own order and dependencies as usual.

>>> op = Op("s", "i", 0, "o", 0, 1)
>>> tb = Threadblock(0, send=1, recv=-1, channel=0, ops=(op,))
>>> tb.ops[0].sends, tb.ops[0].receives
(True, False)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Mapping

BUFFERS = ("i", "o", "s")
OP_TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")  # MSCCL's step types
SWITCH_TYPES = ("glre", "gstore", "glres")  # switch ops: reduce, multicast, reduce-multicast
SENDING = frozenset({"s", "rcs", "rrs", "rrcs"})
RECEIVING = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})
REDUCING = frozenset({"rrs", "rrc", "rrcs", "re"})
READS_SRC = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})  # local source location used
WRITES_DST = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})  # local destination written
MAX_FUSED_REDUCES = 16  # consecutive re ops the MSCCL kernels fuse into one (their source list's length)
PROTOCOLS = ("Simple", "LL", "LL128")
PROTOCOL_NAMES = ("simple", "ll128", "ll")  # the cost model's names (synth.cost)


def msccl_protocol(name: object) -> str | None:
    """MSCCL's spelling of a protocol named either way, any case (``ll128`` -> ``LL128``); None if unknown.

    >>> msccl_protocol("ll128"), msccl_protocol("SIMPLE"), msccl_protocol("ideal")
    ('LL128', 'Simple', None)
    """
    if not isinstance(name, str):
        return None
    return next((p for p in PROTOCOLS if p.lower() == name.lower()), None)


OP_NAMES = {
    "s": "send", "r": "recv", "rcs": "recv-copy-send", "rrs": "recv-reduce-send",
    "rrc": "recv-reduce-copy", "rrcs": "recv-reduce-copy-send", "cpy": "copy", "re": "reduce",
    "nop": "nop", "glre": "switch-reduce", "gstore": "switch-multicast", "glres": "switch-reduce-multicast",
}


def switch_type(srcs: int, dsts: int) -> str:
    """The switch op that reads ``srcs`` ranks and writes ``dsts``: one src is a multicast
    (``gstore``), several srcs and one dst a reduce (``glre``), several of both ``glres``.

    >>> switch_type(1, 4), switch_type(4, 1), switch_type(4, 4)
    ('gstore', 'glre', 'glres')
    """
    if srcs <= 1:
        return "gstore"
    return "glre" if dsts <= 1 else "glres"


@dataclass(frozen=True)
class Op:
    """One step of a thread block (an MSCCL ``<step>``); ``s`` is its position in the block."""

    type: str
    src_buf: str
    src_off: int
    dst_buf: str
    dst_off: int
    count: int
    dep_tb: int = -1
    dep_op: int = -1
    has_dep: bool = False
    switch_id: int = -1  # switch ops: which one (the same on every participant)
    srcs: tuple[int, ...] = ()  # switch ops: the ranks whose chunks are read (summed)
    dsts: tuple[int, ...] = ()  # switch ops: the ranks whose chunks are replaced

    def __post_init__(self) -> None:
        if type(self.srcs) is not tuple or type(self.dsts) is not tuple:
            object.__setattr__(self, "srcs", tuple(self.srcs))
            object.__setattr__(self, "dsts", tuple(self.dsts))

    @property
    def switches(self) -> bool:
        """A switch op (``SWITCH_TYPES``)."""
        return self.type in SWITCH_TYPES

    @property
    def root(self) -> int:
        """A switch op's root: the rank that sums (its first dst), or the one src of a multicast
        (who then writes every dst); -1 for other ops. What an emulation routes through."""
        if self.type not in SWITCH_TYPES:
            return -1
        return self.srcs[0] if len(self.srcs) == 1 else self.dsts[0]

    @property
    def sends(self) -> bool:
        return self.type in SENDING

    @property
    def receives(self) -> bool:
        return self.type in RECEIVING

    @property
    def reduces(self) -> bool:
        return self.type in REDUCING

    @property
    def dependency(self) -> tuple[int, int] | None:
        return None if self.dep_tb < 0 else (self.dep_tb, self.dep_op)


@dataclass(frozen=True)
class Threadblock:
    """A thread block: send peer, receive peer (-1 = none), channel, ops in program order."""

    id: int
    send: int
    recv: int
    channel: int
    ops: tuple[Op, ...]


@dataclass(frozen=True)
class RankProgram:
    """One rank's buffers (in chunks) and thread blocks (ids 0..k-1 in order)."""

    rank: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    threadblocks: tuple[Threadblock, ...]

    def buffer_chunks(self, letter: str) -> int:
        return {"i": self.input_chunks, "o": self.output_chunks, "s": self.scratch_chunks}[letter]


@dataclass(frozen=True)
class Program:
    """An algorithm a runtime executes. ``collective`` uses synth's names (``reduce_scatter``);
    exporters spell it per runtime. ``max_bytes`` None = no upper bound."""

    name: str
    collective: str
    ranks: int
    protocol: str
    chunks_per_loop: int
    inplace: bool
    outofplace: bool
    channels: int
    gpus: tuple[RankProgram, ...]
    min_bytes: int = 0
    max_bytes: int | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def threadblocks_per_rank(self) -> int:
        """The SM footprint: most thread blocks on any rank."""
        return max((len(g.threadblocks) for g in self.gpus), default=0)

    @property
    def max_ops_per_threadblock(self) -> int:
        return max((len(tb.ops) for g in self.gpus for tb in g.threadblocks), default=0)

    @cached_property
    def switch_ops(self) -> int:
        """How many switch ops the program runs (each counted once, not per participant)."""
        return len({op.switch_id for g in self.gpus for tb in g.threadblocks for op in tb.ops if op.switches})


def with_threadblock(program: Program, rank: int, index: int, **changes: Any) -> Program:
    """``program`` with thread block ``index`` of ``rank`` changed (``dataclasses.replace`` fields).

    >>> p = Program("x", "allgather", 1, "Simple", 1, False, True, 1,
    ...             (RankProgram(0, 1, 1, 0, (Threadblock(0, -1, -1, 0, ()),)),))
    >>> with_threadblock(p, 0, 0, channel=2).gpus[0].threadblocks[0].channel
    2
    """
    gpu = program.gpus[rank]
    blocks = list(gpu.threadblocks)
    blocks[index] = replace(blocks[index], **changes)
    gpus = list(program.gpus)
    gpus[rank] = replace(gpu, threadblocks=tuple(blocks))
    return replace(program, gpus=tuple(gpus))
