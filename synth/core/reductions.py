"""Reductions: a problem a backend does not solve as it stands becomes parts it does, and the
parts' schedules map back to one for the problem.

- ``Dual``: a combining collective whose every chunk ends on one rank (reduce_scatter, reduce)
  is its non-combining dual (allgather, broadcast) on the reversed topology, run backwards.
  ``apply`` gives that one part; ``invert`` runs the part's schedule backwards with every send
  flipped into a reduce (valid for tree-shaped schedules: ``synth.core.transforms.dual_schedule``)
  and every switch entry a -> D turned into the reduce entry D + [a] -> [a]
  (``dual_switch_schedule``).
- ``Composition``: allreduce is reduce_scatter then allgather at the same chunks per rank.
  ``apply`` gives the two parts; ``invert`` runs their schedules one after the other.

``reduction_for`` says which one a collective needs (None: none). ``solve_reduced`` is the one
driver every backend goes through: it applies reductions until every part is one the backend
solves itself (by default: non-combining), solves those with the backend's ``solve_part`` in
order, stops at the first that has no answer (None), and maps the answers back up with ``join``
(by default each reduction's ``invert``). A backend with a direct encoding (SMT's direct
allreduce) says so with ``solves``.

>>> from synth.core.library import resolve_topology
>>> from synth.core.collectives import allreduce
>>> from synth.greedy.pipeline import greedy_schedule
>>> from synth.verify import verify
>>> parts = []
>>> def solve(part):
...     parts.append(part.label)
...     return greedy_schedule(part.topology, part.collective)
>>> schedule = solve_reduced(resolve_topology("ring:4"), allreduce(4), solve)
>>> parts, schedule.collective.name, verify(schedule)
(['reduce_scatter as reversed allgather', 'allgather'], 'allreduce', [])
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, TypeVar

from synth.core.collective import Collective
from synth.core.collectives import allgather, allreduce, reduce_scatter
from synth.core.errors import InputError
from synth.core.schedule import Schedule, Send, Step, SwitchSend
from synth.core.topology import Topology
from synth.core.transforms import compose, dual_collective, dual_schedule

Result = TypeVar("Result")


@dataclass(frozen=True)
class Part:
    """A problem to solve: ``collective`` on ``topology``. ``label`` says where it came from
    ("reduce_scatter as reversed allgather"); ``reversed``: ``topology`` is the original
    problem's topology reversed."""

    topology: Topology
    collective: Collective
    label: str
    reversed: bool = False

    @classmethod
    def of(cls, topology: Topology, collective: Collective) -> "Part":
        return cls(topology, collective, collective.name)


class Reduction(Protocol):
    """A way to turn a part into parts, and their schedules back into the part's."""

    name: str

    def applies(self, collective: Collective) -> bool: ...

    def apply(self, part: Part) -> tuple[Part, ...]: ...

    def invert(self, part: Part, schedules: Sequence[Schedule], collective: Collective | None = None) -> Schedule:
        """The schedule for ``part`` (labelled ``collective`` when given, e.g. a quotient's
        representative collective) from the schedules of ``apply(part)``'s parts, in order."""
        ...


class Dual:
    """A combining collective as its non-combining dual on the reversed topology, run backwards."""

    name = "dual"

    def applies(self, collective: Collective) -> bool:
        return collective.combining

    def apply(self, part: Part) -> tuple[Part, ...]:
        dual = dual_collective(part.collective)  # InputError when some chunk ends on several ranks
        return (Part(part.topology.reversed(), dual, f"{part.label} as reversed {dual.name}", not part.reversed),)

    def invert(self, part: Part, schedules: Sequence[Schedule], collective: Collective | None = None) -> Schedule:
        (forward,) = schedules
        backwards = dual_schedule(forward) if not forward.switch_count else dual_switch_schedule(forward)
        return Schedule(part.topology, collective or part.collective, backwards.steps, backwards.meta)


class Composition:
    """Allreduce as reduce_scatter then allgather, at the same chunks per rank."""

    name = "reduce_scatter+allgather"

    def applies(self, collective: Collective) -> bool:
        return collective == allreduce(collective.ranks, collective.chunks_per_rank)

    def apply(self, part: Part) -> tuple[Part, ...]:
        n, chunks = part.collective.ranks, part.collective.chunks_per_rank
        return (Part(part.topology, reduce_scatter(n, chunks), "reduce_scatter", part.reversed),
                Part(part.topology, allgather(n, chunks), "allgather", part.reversed))

    def invert(self, part: Part, schedules: Sequence[Schedule], collective: Collective | None = None) -> Schedule:
        first, second = schedules
        return compose(first, second, collective or part.collective)


def dual_switch_schedule(schedule: Schedule) -> Schedule:
    """A tree-shaped non-combining schedule with switch entries, run backwards as a reduction on
    the reversed topology (``dual_schedule`` for the sends, the same rules).

    Steps run in reverse order. A send a -> b becomes the reduce b -> a; the entry a -> D through
    switch w becomes the reduce entry D + [a] -> [a] through w: what lands at a replaces its copy,
    so a keeps its own partial only as one of the srcs. Srcs (of sends and entries) are only the
    ranks that hold a partial of the chunk when the step begins (its contributors, and ranks a
    reduce reached in an earlier step); an entry left with a alone, or nothing, moves nothing and
    is dropped. The reduce entry needs ``reduce`` in the original (``multicast`` in the dual view,
    what the dual encoding uses: ``synth.smt.switch_sends``)."""
    _check_tree(schedule)
    original = dual_collective(schedule.collective)
    holds = {(rank, c) for c, pre in enumerate(original.pre) for rank in pre}
    steps = []
    for step in reversed(schedule.steps):
        sends = [Send(s.chunk, s.dst, s.src, "reduce") for s in step.sends if (s.dst, s.chunk) in holds]
        entries = [entry for entry in (_reduce_entry(e, holds) for e in step.switches) if entry is not None]
        holds |= {(s.dst, s.chunk) for s in sends} | {(e.dsts[0], e.chunk) for e in entries}
        steps.append(Step(tuple(sorted(sends)), step.rounds, tuple(sorted(entries))))
    return Schedule(schedule.topology.reversed(), original, tuple(steps), dict(schedule.meta))


def _reduce_entry(entry: SwitchSend, holds: set) -> SwitchSend | None:
    """The dual's entry a -> D as the original's reduce entry (srcs: D and a, those that hold a
    partial; dst: a); None when it would move nothing."""
    (head,) = entry.srcs
    srcs = tuple(sorted(r for r in (*entry.dsts, head) if (r, entry.chunk) in holds))
    if not srcs or srcs == (head,):
        return None
    return SwitchSend(entry.chunk, entry.switch, srcs, (head,))


def _check_tree(schedule: Schedule) -> None:
    """InputError unless ``schedule`` is a non-combining tree with one-src entries: every
    (rank, chunk) written at most once (by a send or an entry) and never where it starts."""
    coll = schedule.collective
    if coll.combining:
        raise InputError("a dual schedule is run backwards from a non-combining schedule")
    received: Counter = Counter()
    for step in schedule.steps:
        received.update((send.dst, send.chunk) for send in step.sends)
        for entry in step.switches:
            if len(entry.srcs) != 1:
                raise InputError(f"switch entry {entry} has several srcs: it has no dual")
            received.update((dst, entry.chunk) for dst in entry.dsts)
    for (rank, chunk), count in received.items():
        if count > 1 or rank in coll.pre[chunk]:
            raise InputError(f"schedule is not a tree: rank {rank} receives chunk {chunk} more than once "
                             "or already holds it, so it cannot be run backwards as a reduction")


DUAL = Dual()
COMPOSITION = Composition()
REDUCTIONS: tuple[Reduction, ...] = (COMPOSITION, DUAL)  # the first that applies is used


def reduction_for(collective: Collective) -> Reduction | None:
    """The reduction ``collective`` needs before a non-combining backend can solve it (None: none).

    >>> from synth.core.collectives import reduce, allgather
    >>> reduction_for(allreduce(4, 2)).name, reduction_for(reduce(4, 0)).name, reduction_for(allgather(4))
    ('reduce_scatter+allgather', 'dual', None)
    """
    return next((r for r in REDUCTIONS if r.applies(collective)), None)


def non_combining(collective: Collective) -> bool:
    return not collective.combining


def invert_parts(reduction: Reduction, part: Part, schedules: Sequence[Schedule]) -> Schedule:
    """The default join: the reduction's ``invert``."""
    return reduction.invert(part, schedules)


def solve_reduced(
    topology: Topology,
    collective: Collective,
    solve_part: Callable[[Part], Result | None],
    join: Callable[[Reduction, Part, Sequence[Result]], Result] = invert_parts,
    solves: Callable[[Collective], bool] = non_combining,
) -> Result | None:
    """``collective`` on ``topology`` solved part by part: reductions applied until ``solves``
    holds for a part, each such part answered by ``solve_part`` (None: no answer, and the parts
    after it are not tried), the answers joined back up by ``join``."""
    return _fold(Part.of(topology, collective), solve_part, join, solves)


def _fold(part: Part, solve_part, join, solves):
    reduction = None if solves(part.collective) else reduction_for(part.collective)
    if reduction is None:
        return solve_part(part)
    answers = []
    for sub in reduction.apply(part):
        answer = _fold(sub, solve_part, join, solves)
        if answer is None:
            return None
        answers.append(answer)
    return join(reduction, part, answers)
