"""The same jobs on a Ray cluster (``--ray ADDRESS``; the ``ray`` extra): results identical to the
local pool's, in submission order; a job that fails or passes its timeout is reported and the
others go on.

``ADDRESS`` is what ``ray.init`` takes: ``auto`` (the cluster this machine belongs to),
``ray://HOST:10001`` (a remote cluster's client port), or ``local`` (start a private instance on
this machine, as the tests do). Jobs return their results (a report's files as bytes), so nothing
depends on which machine ran them.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

from synth.core.errors import InputError
from synth.parallel.pool import Job, Outcome, _call, _describe

RAY_HINT = "pip install 'synth[ray]'"


def _remote_call(job: Job):
    """Runs on a Ray worker: ("ok", value) or ("error", one line)."""
    try:
        return "ok", _call(job)
    except BaseException as exc:  # noqa: BLE001 - reported to the driver, the others go on
        return "error", _describe(exc)


def run_jobs_on_ray(jobs: Sequence[Job], address: str, timeout: float | None = None,
                    done: Callable[[Outcome], None] | None = None, cpus_per_job: float = 1.0) -> list[Outcome]:
    """Every job's Outcome, in the order given, computed on the Ray cluster at ``address``."""
    try:
        import ray
    except ImportError:
        raise InputError(f"--ray needs Ray, which is not installed: {RAY_HINT}") from None
    done = done or (lambda outcome: None)
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=None if address == "local" else address, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)
        except Exception as exc:  # noqa: BLE001 - a wrong address or an unreachable cluster: one line
            raise InputError(f"--ray {address}: cannot connect: {_describe(exc)}") from None
    try:
        task = ray.remote(num_cpus=cpus_per_job, max_retries=0)(_remote_call)
        slots = max(1, int(ray.cluster_resources().get("CPU", 1) // cpus_per_job))
        waiting = list(range(len(jobs)))
        start: dict = {}
        index: dict = {}
        results: dict[int, Outcome] = {}
        pending: list = []
        while waiting or pending:
            while waiting and len(pending) < slots:  # no more in flight than can run: a timeout is run time
                k = waiting.pop(0)
                ref = task.remote(jobs[k])
                start[ref], index[ref] = time.monotonic(), k
                pending.append(ref)
            ready, pending = ray.wait(pending, num_returns=1, timeout=1.0)
            for ref in ready:
                job = jobs[index[ref]]
                seconds = time.monotonic() - start[ref]
                try:
                    kind, payload = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - the worker died or the task was cancelled
                    kind, payload = "error", _describe(exc)
                outcome = (Outcome(job.key, True, payload, seconds=seconds) if kind == "ok"
                           else Outcome(job.key, False, error=payload, seconds=seconds))
                results[index[ref]] = outcome
                done(outcome)
            if timeout is not None:
                for ref in list(pending):
                    seconds = time.monotonic() - start[ref]
                    if seconds >= timeout:
                        ray.cancel(ref, force=True)
                        pending.remove(ref)
                        outcome = Outcome(jobs[index[ref]].key, False, error=f"timed out after {timeout:g} s; "
                                          "stopped", seconds=seconds)
                        results[index[ref]] = outcome
                        done(outcome)
        return [results[k] for k in range(len(jobs))]
    finally:
        if started_here:
            ray.shutdown()
