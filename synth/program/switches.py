"""A Program's switch ops, gathered across ranks (synth.program.ir: one op per participant).

Every switch op is one rendezvous: an op with its ``switch_id`` on every rank in ``srcs`` or
``dsts``, all of them agreeing on the type, the ranks and the count. ``switch_groups`` collects
them; ``switch_problems`` names every break of those rules (a participant missing or doubled,
participants that disagree, a type that does not match the counts, a src without a read
location or a dst without a write one). A switch op that breaks them never runs: the replay
reports its participants as waiting forever.

>>> from synth.program.ir import Op, Program, RankProgram, Threadblock
>>> op = lambda r: Op("glres", "i", 0, "i", 0, 1, switch_id=7, srcs=(0, 1), dsts=(0, 1))
>>> p = Program("x", "allreduce", 2, "Simple", 1, True, False, 1,
...             tuple(RankProgram(r, 1, 1, 0, (Threadblock(0, -1, -1, 0, (op(r),)),)) for r in (0, 1)))
>>> groups, problems = switch_groups(p)
>>> groups[7].members, problems
({0: (0, 0), 1: (0, 0)}, [])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from synth.program.deps import Problem
from synth.program.ir import Op, Program, switch_type


@dataclass(frozen=True)
class SwitchGroup:
    """One switch op: its description (from the first participant seen) and, per participant
    rank, (thread block index, op position)."""

    id: int
    op: Op
    members: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def participants(self) -> tuple[int, ...]:
        """Every rank that takes part: srcs and dsts, each once, in that order."""
        return tuple(dict.fromkeys((*self.op.srcs, *self.op.dsts)))

    @property
    def complete(self) -> bool:
        """Every participant has its op (the rendezvous can happen)."""
        return set(self.members) == set(self.participants)


_CACHE: dict[int, tuple[Program, dict, list]] = {}


def switch_groups(program: Program) -> tuple[dict[int, SwitchGroup], list[Problem]]:
    """{switch_id: its group} and every problem with them (see the module)."""
    hit = _CACHE.get(id(program))
    if hit is not None and hit[0] is program:
        return hit[1], list(hit[2])
    if len(_CACHE) > 8:
        _CACHE.clear()
    groups: dict[int, SwitchGroup] = {}
    problems: list[Problem] = []
    for g in program.gpus:
        for index, tb in enumerate(g.threadblocks):
            for pos, op in enumerate(tb.ops):
                if op.switches:
                    problems += _one(groups, g.rank, index, tb.id, pos, op, program.ranks)
    for group in groups.values():
        missing = [r for r in group.participants if r not in group.members]
        if missing:
            problems.append(Problem("switch", f"switch op {group.id} ({group.op.type}) has no op on rank(s) "
                                    f"{', '.join(map(str, missing))}: its participants wait forever"))
    _CACHE[id(program)] = (program, groups, problems)
    return groups, list(problems)


def _one(groups: dict, rank: int, index: int, tb_id: int, pos: int, op: Op, ranks: int) -> list[Problem]:
    """Record one participant's op; the problems it has on its own or against the group."""
    def say(text: str) -> list[Problem]:
        return [Problem("switch", f"switch op {op.switch_id}: {text}", "misbehaves", rank, tb_id, pos)]

    if op.switch_id < 0:
        return say(f"a {op.type} without a switch_id")
    if not op.srcs or not op.dsts or len(set(op.srcs)) < len(op.srcs) or len(set(op.dsts)) < len(op.dsts):
        return say("srcs and dsts must be non-empty, no rank twice")
    if not all(0 <= r < ranks for r in (*op.srcs, *op.dsts)):
        return say(f"a rank of srcs {list(op.srcs)} or dsts {list(op.dsts)} is outside 0..{ranks - 1}")
    if op.type != switch_type(len(op.srcs), len(op.dsts)):
        return say(f"{len(op.srcs)} src(s) and {len(op.dsts)} dst(s) make a "
                   f"{switch_type(len(op.srcs), len(op.dsts))}, not a {op.type}")
    if rank not in op.srcs and rank not in op.dsts:
        return say(f"rank {rank} is neither a src nor a dst of it")
    if op.count < 1 or (rank in op.srcs and op.src_off < 0) or (rank in op.dsts and op.dst_off < 0):
        return say("a participant needs count >= 1, a read offset as a src and a write offset as a dst")
    group = groups.setdefault(op.switch_id, SwitchGroup(op.switch_id, op))
    first = group.op
    if (op.type, op.srcs, op.dsts, op.count) != (first.type, first.srcs, first.dsts, first.count):
        return say(f"rank {rank} describes it as {op.type} {list(op.srcs)}->{list(op.dsts)} x{op.count}, another "
                   f"participant as {first.type} {list(first.srcs)}->{list(first.dsts)} x{first.count}")
    if rank in group.members:
        return say(f"rank {rank} has it twice")
    group.members[rank] = (index, pos)
    return []
