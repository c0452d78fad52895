"""A worker killed mid-run ends the others with one clear line, within the timeout; no worker is
left behind."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

pytest.importorskip("torch")

from synth.baselines import build_baseline
from synth.core.library import resolve_topology
from synth.runtime.launcher import World
from synth.runtime.measure import RunOptions
from synth.runtime.runnable import runnable_from_schedule


def test_killing_one_worker_mid_run_stops_the_others():
    sched = build_baseline(resolve_topology("full:4"), "ring", "allreduce", None, None)
    runnable = runnable_from_schedule(sched, "ar")
    options = RunOptions(sizes=(1 << 16,), iters=100_000, warmup=0, timeout=20)
    with World(4, "gloo", 20) as world:
        world.start()
        pids = [p.pid for p in world.procs]
        victim = world.procs[2].pid
        threading.Timer(2.0, os.kill, (victim, signal.SIGKILL)).start()
        start = time.monotonic()
        result = world.run(runnable, options)
        elapsed = time.monotonic() - start
        assert elapsed < options.timeout
        assert not result.correct
        assert result.fault.startswith("rank 2 died (killed by SIGKILL) during the run"), result.fault
        assert not world.procs  # the world closed itself
    time.sleep(0.2)
    for pid in pids:  # every worker is gone (reaped: no zombie either)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_timing_loop_longer_than_the_timeout_is_not_stuck():
    sched = build_baseline(resolve_topology("full:4"), "ring", "allreduce", None, None)
    runnable = runnable_from_schedule(sched, "ar")
    with World(4, "gloo", 1) as world:
        world.grace = 0.5
        probe = world.run(runnable, RunOptions(sizes=(1024,), iters=20, warmup=0, timeout=1))
        per_iteration = probe.rows[0].time_us * 1e-6
        options = RunOptions(sizes=(1024,), iters=max(20, int(3.0 / per_iteration)), warmup=0, timeout=1)
        start = time.monotonic()
        result = world.run(runnable, options)
        elapsed = time.monotonic() - start
    assert result.correct, result.fault
    assert elapsed > options.timeout + world.grace  # the loop outlasted the parent's watchdog; no execution did
