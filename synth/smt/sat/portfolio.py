"""A portfolio: several engines (or seeds) race on one check; the first answer wins.

Each member gets the same work budget; a member that answers SAT or UNSAT stops the others
(Kissat's process is killed, CaDiCaL stops at its next slice of conflicts, ``engines.cadical_slice``,
z3's context is interrupted).
An UNKNOWN comes back only when every member's budget or the clock ran out. Members are sound,
so they never disagree on a verdict: with work budgets, *whether* a check is answered is the
same as in a serial run of the members, and only *which* member's model (schedule) comes first
may differ from run to run. With proofs on, only the members that write DRAT race, and the
winner's UNSAT carries its own proof.

Members run in threads, and search where no member waits on another: z3 (its C API, through
ctypes) releases the GIL inside a check, Kissat runs in a process of its own, and CaDiCaL,
which holds the GIL while it searches, runs each racing check in a forked child
(``synth.smt.sat.forked``). Every member's Python-side feeding is done before the race starts
(``Engine.prepare``). Each z3 member has a context of its own, so interrupting one stops no other.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from synth.smt.sat import PROOF_ENGINES
from synth.smt.sat.answer import TIME_SPENT, Answer, Verdict
from synth.smt.sat.engines import Engine, make_engine
from synth.smt.sat.formula import Formula


def members(first: str, count: int) -> list[tuple[str, int]]:
    """(engine, seed) of ``count`` members: ``first`` with seed 0, a proof engine beside it
    (Kissat beside CaDiCaL, CaDiCaL beside Kissat and z3), then both again with the next seeds
    (seeds matter as much as engines on hard formulas: docs/smt.md, mi250 allgather).

    >>> members("kissat", 3)
    [('kissat', 0), ('cadical', 0), ('kissat', 1)]
    >>> members("z3", 4)
    [('z3', 0), ('cadical', 0), ('z3', 1), ('cadical', 1)]
    """
    partner = "kissat" if first == "cadical" else "cadical"
    order = [first, partner]
    return [(order[i % 2], i // 2) for i in range(count)]


class PortfolioEngine(Engine):
    """``count`` members over one formula (``members``); ``check`` returns the first answer."""

    name = "portfolio"

    def __init__(self, formula: Formula, first: str, count: int, memory_mb: int = 4096) -> None:
        super().__init__(formula, 0, memory_mb)
        self.members = [make_engine(name, formula, seed, memory_mb) for name, seed in members(first, count)]

    def _check(self, assumptions, work, seconds, proof, stop=None) -> Answer:
        racing = [member for member in self.members if not proof or member.name in PROOF_ENGINES]
        for member in racing:
            member.prepare()
        stop = threading.Event()
        answers: list[Answer] = []
        lock = threading.Lock()

        def run(member: Engine) -> None:
            answer = member.check(assumptions, work, seconds, proof, stop=stop)
            with lock:
                answers.append(answer)
                if answer.verdict != Verdict.UNKNOWN:
                    stop.set()

        threads = [threading.Thread(target=run, args=(member,), daemon=True) for member in racing]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return _first_answer(answers)


def _first_answer(answers: Sequence[Answer]) -> Answer:
    """The first SAT/UNSAT answer; else an UNKNOWN (an engine failure first, then a spent budget)."""
    for answer in answers:
        if answer.verdict != Verdict.UNKNOWN:
            return answer
    failed = [answer for answer in answers if answer.error]
    if failed:
        return failed[0]
    spent = [answer for answer in answers if answer.reason != TIME_SPENT]
    return (spent or list(answers))[0]
