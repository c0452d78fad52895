"""Run independent jobs on a local pool of processes; a job that fails or times out is reported and
the others go on.

A ``Job`` names a function by import path (``"synth.report.runner:report_files"``) and its
arguments, so it can run in a fresh process (or, later, on another machine); its return value
comes back pickled. ``run_jobs(jobs, workers=1)`` runs them in this process, one after the other
(the serial reference); with ``workers > 1`` (or a ``timeout``) each job runs in its own process,
at most ``workers`` at a time, and a job past ``timeout`` seconds is killed. Outcomes come back in
the order of ``jobs`` whatever order they finish in, so a parallel run reads like the serial one.

>>> [o.value for o in run_jobs([Job("a", "math:factorial", (5,)), Job("b", "math:sqrt", (16.0,))])]
[120, 4.0]
>>> run_jobs([Job("bad", "math:sqrt", (-1.0,))])[0].error
'ValueError: math domain error'
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, Callable, Mapping, Sequence


@dataclass(frozen=True)
class Job:
    """``target``: "package.module:function"; called with ``args`` and ``kwargs``."""

    key: str
    target: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What became of a job: ``ok`` with its ``value``, or ``error`` (one line); ``seconds`` it ran."""

    key: str
    ok: bool
    value: Any = None
    error: str = ""
    seconds: float = 0.0


def _call(job: Job) -> Any:
    module, _, name = job.target.partition(":")
    return getattr(importlib.import_module(module), name)(*job.args, **dict(job.kwargs))


def _describe(exc: BaseException) -> str:
    from synth.core.errors import SynthError

    text = " ".join(str(exc).split())
    return text if isinstance(exc, SynthError) else f"{type(exc).__name__}: {text}"


def _child(job: Job, conn) -> None:
    try:
        conn.send(("ok", _call(job)))
    except BaseException as exc:  # noqa: BLE001 - every failure is reported to the parent
        conn.send(("error", _describe(exc)))
    finally:
        conn.close()


def run_jobs(jobs: Sequence[Job], workers: int = 1, timeout: float | None = None,
             done: Callable[[Outcome], None] | None = None, ray: str | None = None) -> list[Outcome]:
    """Every job's Outcome, in the order given; ``done`` is called as each one ends. ``ray``: run
    them on the Ray cluster at that address instead (synth.parallel.ray_pool)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if ray is not None:
        from synth.parallel.ray_pool import run_jobs_on_ray

        return run_jobs_on_ray(jobs, ray, timeout, done)
    done = done or (lambda outcome: None)
    if workers == 1 and timeout is None:
        out = []
        for job in jobs:
            start = time.monotonic()
            try:
                outcome = Outcome(job.key, True, _call(job), seconds=time.monotonic() - start)
            except Exception as exc:  # noqa: BLE001 - reported, the others go on
                outcome = Outcome(job.key, False, error=_describe(exc), seconds=time.monotonic() - start)
            done(outcome)
            out.append(outcome)
        return out
    return _in_processes(list(jobs), workers, timeout, done)


def _in_processes(jobs: list[Job], workers: int, timeout: float | None, done) -> list[Outcome]:
    import multiprocessing as mp

    ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    results: dict[int, Outcome] = {}
    running: dict[int, tuple] = {}  # index -> (process, connection, start)
    waiting = list(range(len(jobs)))
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                index = waiting.pop(0)
                parent, child = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(jobs[index], child), daemon=True,
                                   name=f"synth-job-{jobs[index].key}"[:60])
                proc.start()
                child.close()
                running[index] = (proc, parent, time.monotonic())
            now = time.monotonic()
            limit = min((start + timeout for _, _, start in running.values()), default=now) if timeout else None
            ready = wait([c for _, c, _ in running.values()] + [p.sentinel for p, _, _ in running.values()],
                         timeout=None if limit is None else max(0.0, limit - now))
            for index, (proc, conn, start) in list(running.items()):
                seconds = time.monotonic() - start
                outcome = None
                if conn in ready or proc.sentinel in ready:
                    try:
                        kind, payload = conn.recv() if conn.poll() else ("error", None)
                    except (EOFError, OSError):
                        kind, payload = "error", None
                    if kind == "ok":
                        outcome = Outcome(jobs[index].key, True, payload, seconds=seconds)
                    else:
                        proc.join(1.0)
                        why = payload or f"the job's process ended ({exit_text(proc.exitcode)}) without a result"
                        outcome = Outcome(jobs[index].key, False, error=why, seconds=seconds)
                elif timeout is not None and seconds >= timeout:
                    proc.kill()
                    outcome = Outcome(jobs[index].key, False, error=f"timed out after {timeout:g} s; stopped",
                                      seconds=seconds)
                if outcome is not None:
                    proc.join(5.0)
                    conn.close()
                    del running[index]
                    results[index] = outcome
                    done(outcome)
    finally:
        for proc, conn, _ in running.values():
            proc.kill()
            proc.join(2.0)
            conn.close()
    return [results[i] for i in range(len(jobs))]


def exit_text(code: int | None) -> str:
    """A process's exit code in words (``killed by SIGKILL``, ``exit code 1``)."""
    import signal

    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
