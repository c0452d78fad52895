"""A check run in a forked child, so that an engine that holds the GIL races beside others.

python-sat's CaDiCaL keeps the GIL while it searches, and releases it only between slices of
conflicts; any other thread of the process (a z3 member reading its model, a Kissat member
reading its output, the race's bookkeeping) then waits a slice for every switch. In a child,
CaDiCaL searches on its own copy of the solver (fork copies the learnt state too) while the
parent's thread waits in ``select`` without the GIL; a stop kills the child. What the child
learns is dropped with it: the parent's solver stays as it was before the check.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import threading
from collections.abc import Callable

from synth.smt.sat.answer import STOPPED, Answer, Verdict

POLL_SECONDS = 0.05  # how often a waiting parent looks at the stop flag


def can_fork() -> bool:
    return hasattr(os, "fork")


def answer_in_child(check: Callable[[], Answer], engine: str, stop: threading.Event) -> Answer:
    """``check()`` in a forked child; its Answer, or UNKNOWN (STOPPED) when ``stop`` is set
    first (the child is killed), or an error Answer when the child dies without one."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, write it, and leave without the parent's exit handlers
        os.close(read_end)
        _answer_and_exit(check, engine, write_end)
    os.close(write_end)
    try:
        payload = _read_until(read_end, stop)
    finally:
        os.close(read_end)
        _end(pid)
    if payload is None:
        return Answer(Verdict.UNKNOWN, engine, reason=STOPPED)
    if not payload:
        return Answer(Verdict.UNKNOWN, engine, reason=f"{engine} failed: its process ended without an answer",
                      error=True)
    return pickle.loads(payload)


def _answer_and_exit(check: Callable[[], Answer], engine: str, write_end: int) -> None:
    try:
        answer = check()
    except BaseException as exc:  # noqa: BLE001 - whatever happens, the parent gets one answer
        answer = Answer(Verdict.UNKNOWN, engine, reason=f"{engine} failed: {exc}", error=True)
    try:
        data = memoryview(pickle.dumps(answer))
        while data:
            data = data[os.write(write_end, data):]
    finally:
        os._exit(0)


def _read_until(read_end: int, stop: threading.Event) -> bytes | None:
    """Everything the child writes (b"" when it wrote nothing); None when ``stop`` is set
    before the child has finished writing."""
    chunks = []
    while True:
        ready, _, _ = select.select([read_end], [], [], POLL_SECONDS)
        if not ready:
            if stop.is_set():
                return None
            continue
        data = os.read(read_end, 1 << 20)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def _end(pid: int) -> None:
    """Reap the child, killing it first when it still runs."""
    done, _ = os.waitpid(pid, os.WNOHANG)
    if done == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
