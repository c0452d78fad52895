"""Problem transformations that map schedules back: duality and composition.

- ``dual_collective(c)``: a single-source non-combining collective (allgather, broadcast) becomes
  the combining collective that runs it backwards (reduce_scatter, reduce): pre and post swap.
- ``dual_schedule(s)``: a schedule for c on topology T, run backwards with every send flipped
  and turned into a ``reduce``, is a schedule for dual(c) on T.reversed(). Valid when every
  rank receives each chunk at most once and never receives a chunk it starts with (a tree).
- ``compose(first, second, collective)``: run two schedules one after the other (allreduce as
  reduce_scatter then allgather).

>>> from synth.core.collectives import allgather
>>> dual_collective(allgather(3)).combining
True
"""

from __future__ import annotations

from collections import Counter

from synth.core.collective import Collective
from synth.core.errors import InputError
from synth.core.schedule import Schedule, Send, Step, refuse_switches

DUAL_NAMES = {
    "allgather": "reduce_scatter",
    "reduce_scatter": "allgather",
    "broadcast": "reduce",
    "reduce": "broadcast",
    "gather": "scatter_reduce",
}


def dual_collective(coll: Collective) -> Collective:
    """Swap pre and post and flip ``combining``; requires one holder per chunk on the source side."""
    source = coll.post if coll.combining else coll.pre
    if any(len(s) != 1 for s in source):
        raise InputError(f"{coll.name} has no dual: some chunk has several single-side holders")
    return Collective(
        name=DUAL_NAMES.get(coll.name, f"dual_{coll.name}"),
        ranks=coll.ranks,
        combining=not coll.combining,
        pre=coll.post,
        post=coll.pre,
        buffer_chunks=coll.buffer_chunks,
        root=coll.root,
        chunks_per_rank=coll.chunks_per_rank,
        chunk_bytes=coll.chunk_bytes,
    )


def dual_schedule(schedule: Schedule) -> Schedule:
    """Run a tree-shaped non-combining schedule backwards as a reduction on the reversed topology."""
    coll = schedule.collective
    refuse_switches(schedule, "dual_schedule")
    if coll.combining:
        raise InputError("dual_schedule takes a non-combining schedule")
    received: Counter = Counter()
    for step in schedule.steps:
        for send in step.sends:
            received[(send.dst, send.chunk)] += 1
    for (rank, chunk), count in received.items():
        if count > 1 or rank in coll.pre[chunk]:
            raise InputError(
                f"schedule is not a tree: rank {rank} receives chunk {chunk} more than once "
                "or already holds it, so it cannot be run backwards as a reduction"
            )
    steps = tuple(
        Step(tuple(sorted(Send(s.chunk, s.dst, s.src, "reduce") for s in step.sends)), step.rounds)
        for step in reversed(schedule.steps)
    )
    return Schedule(schedule.topology.reversed(), dual_collective(coll), steps, dict(schedule.meta))


def compose(first: Schedule, second: Schedule, collective: Collective) -> Schedule:
    """``first`` then ``second`` on one topology, as a schedule for ``collective``."""
    if first.topology != second.topology:
        raise InputError("compose: the two schedules are for different topologies")
    return Schedule(first.topology, collective, first.steps + second.steps, dict(first.meta))


def merge_steps(schedule: Schedule) -> Schedule:
    """Fewer steps, the same sends and rounds: two consecutive steps become one (their rounds
    added) wherever the later forwards nothing the earlier delivered and the two write no
    (rank, chunk) twice. Each step's sends read the state at its start, so such a pair is
    one step of r + r' rounds, each link carrying at most capacity x (r + r').

    >>> from synth.core.generators import ring
    >>> from synth.core.collectives import broadcast
    >>> from synth.verify import verify
    >>> s = Schedule(ring(3), broadcast(3, 0), (Step((Send(0, 0, 1),), 1), Step((Send(0, 0, 2),), 1)))
    >>> merged = merge_steps(s)  # rank 0 sends both from the start
    >>> [step.rounds for step in merged.steps], verify(merged)
    ([2], [])
    """
    if any(step.rounds is None for step in schedule.steps) or schedule.switch_count:
        return schedule  # switch entries: left as they are (their steps stay apart)
    steps = list(schedule.steps)
    t = 0
    while t + 1 < len(steps):
        first, second = steps[t], steps[t + 1]
        delivered = {(s.dst, s.chunk) for s in first.sends}
        if any((s.src, s.chunk) in delivered or (s.dst, s.chunk) in delivered for s in second.sends):
            t += 1
            continue
        steps[t:t + 2] = [Step(first.sends + second.sends, first.rounds + second.rounds)]
    return Schedule(schedule.topology, schedule.collective, tuple(steps), schedule.meta)
