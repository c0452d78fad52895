"""Allreduce through switches as a pipeline of pieces (NCCL's NVLS shape).

Through a switch, reduce-scatter and allgather load opposite port directions: a switch
reduction puts a chunk on every src's out-port and one in-port, a multicast one out-port and
every dst's in-port. Run one after the other, each waits on its busy direction; run side by
side on different pieces of the buffer, each uses what the other leaves idle. So the router
plans one piece (one chunk per rank) once: its reduce-scatter (the dual, switch reductions
inside machines and NIC sends between them) and its allgather (multicast back); piece j of P
is the same schedule with chunk r (rank r's piece) renamed r x P + j, the chunk layout of
``allreduce(n, P)``. Slot k runs piece k's reduce-scatter beside piece k - 1's allgather, step
by step; the pieces touch disjoint chunks, so any interleaving means what the sequence meant,
and every step's rounds are recounted for what it holds. More generally piece j starts ``lag``
steps after piece j - 1: lag 1 runs every phase of a piece (reductions inside machines, NIC
sends, multicasts back) beside other pieces' other phases.

>>> from synth.core.library import resolve_topology
>>> from synth.core.collectives import allgather, reduce_scatter
>>> from synth.core.schedule import Schedule, Step, SwitchSend
>>> from synth.verify import verify
>>> h100 = resolve_topology("h100")
>>> ranks = tuple(range(8))
>>> scatter = Schedule(h100, reduce_scatter(8), (Step((), 8, tuple(SwitchSend(r, "nvswitch", ranks, (r,))
...                                                              for r in ranks)),))
>>> gather = Schedule(h100, allgather(8), (Step((), 7, tuple(SwitchSend(r, "nvswitch", (r,),
...                                                           tuple(d for d in ranks if d != r)) for r in ranks)),))
>>> whole = pipelined(Piece(scatter, gather), 4)
>>> len(whole.steps), whole.collective.name, verify(whole)
(5, 'allreduce', [])
>>> len(pipelined(Piece(scatter, gather), 4, lag=2).steps)
8
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.core.collectives import allreduce
from synth.core.errors import InputError
from synth.core.schedule import Schedule, Send, Step, SwitchSend, rounds_needed


@dataclass(frozen=True)
class Piece:
    """One piece's schedules on one topology: ``scatter`` a reduce_scatter and ``gather`` an
    allgather, each of one chunk per rank (chunk r: rank r's)."""

    scatter: Schedule
    gather: Schedule


def pipelined(piece: Piece, pieces: int, lag: int | None = None) -> Schedule:
    """``allreduce(n, pieces)`` on the piece's topology: piece j's steps (its reduce-scatter's,
    then its allgather's) start at step j x ``lag``, beside the other pieces' steps there
    (default lag: the reduce-scatter's steps, so piece j's reduce-scatter runs beside piece
    j - 1's allgather; lag 1 overlaps every phase of the piece with others)."""
    n = piece.scatter.collective.ranks
    lag = len(piece.scatter.steps) if lag is None else lag
    if not isinstance(pieces, int) or pieces < 1 or not isinstance(lag, int) or lag < 1:
        raise InputError(f"pipeline: pieces and lag must be positive integers, got {pieces!r} and {lag!r}")
    if piece.scatter.collective.chunks != n or piece.gather.collective.chunks != n:
        raise InputError("pipeline: a piece has one chunk per rank")
    topology = piece.scatter.topology
    sequence = piece.scatter.steps + piece.gather.steps
    slots: list[list[Step]] = [[] for _ in range((pieces - 1) * lag + len(sequence))]
    for j in range(pieces):
        for i, step in enumerate(sequence):
            slots[j * lag + i].append(_renamed(step, pieces, j))
    meta = {"synthesizer": "milp", "pipeline": {"pieces": pieces, "lag": lag,
                                                "scatter_steps": len(piece.scatter.steps),
                                                "gather_steps": len(piece.gather.steps)}}
    steps = tuple(_side_by_side(topology, parts) for parts in slots if parts)
    return Schedule(topology, allreduce(n, pieces), steps, meta)


def _renamed(step: Step, pieces: int, j: int) -> Step:
    """The step of piece 0 as piece j's: chunk r becomes r x pieces + j."""
    sends = tuple(Send(s.chunk * pieces + j, s.src, s.dst, s.op) for s in step.sends)
    entries = tuple(SwitchSend(e.chunk * pieces + j, e.switch, e.srcs, e.dsts) for e in step.switches)
    return Step(sends, step.rounds, entries)


def _side_by_side(topology, parts: list[Step]) -> Step:
    """One step running ``parts`` (steps on disjoint chunks) together, its rounds recounted."""
    sends = tuple(sorted(s for part in parts for s in part.sends))
    entries = tuple(sorted(e for part in parts for e in part.switches))
    return Step(sends, rounds_needed(topology, sends, entries), entries)
