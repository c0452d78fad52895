"""Checks in a forked child (a racing CaDiCaL): the child's answer comes back whole, a stop
kills it, and a child that fails or dies gives an error answer, never a verdict."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from synth.smt.sat.answer import STOPPED, Answer, Verdict
from synth.smt.sat.engines import make_engine
from synth.smt.sat.forked import answer_in_child, can_fork
from tests.sat.test_engines import _pigeons

pytestmark = pytest.mark.skipif(not can_fork(), reason="no fork on this platform")


def test_the_childs_answer_comes_back_whole():
    model = np.arange(300_000) % 3 == 0  # bigger than a pipe's buffer
    answer = answer_in_child(lambda: Answer(Verdict.SAT, "cadical", model=model), "cadical", threading.Event())
    assert answer.verdict == Verdict.SAT and np.array_equal(answer.model, model)


def test_a_failing_or_dying_child_is_an_error_not_a_verdict():
    def fails():
        raise MemoryError("out of memory")

    failed = answer_in_child(fails, "cadical", threading.Event())
    assert failed.verdict == Verdict.UNKNOWN and failed.error and "out of memory" in failed.reason
    died = answer_in_child(lambda: os._exit(3), "cadical", threading.Event())
    assert died.verdict == Verdict.UNKNOWN and died.error


def test_a_racing_cadical_is_stopped_and_its_engine_still_answers():
    formula = _pigeons(12)
    engine = make_engine("cadical", formula)
    stop = threading.Event()
    stop.set()
    stopped = engine.check([], seconds=600, stop=stop)
    assert stopped.verdict == Verdict.UNKNOWN and stopped.reason == STOPPED
    first_pigeon_nowhere = [-(h + 1) for h in range(12)]
    assert engine.check(first_pigeon_nowhere, seconds=600, stop=threading.Event()).verdict == Verdict.UNSAT
    assert engine.check(first_pigeon_nowhere, seconds=600).verdict == Verdict.UNSAT
