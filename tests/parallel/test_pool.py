"""The local job pool: outcomes in submission order, failures and timeouts reported while the others
go on, and nothing left running."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from synth.parallel.pool import Job, run_jobs


def test_parallel_outcomes_come_back_in_submission_order():
    jobs = [Job(f"sleep{k}", "time:sleep", (0.3 - 0.1 * k,)) for k in range(3)]
    jobs += [Job("sum", "builtins:sum", ([1, 2, 3],))]
    finished = []
    outcomes = run_jobs(jobs, workers=3, done=lambda o: finished.append(o.key))
    assert [o.key for o in outcomes] == ["sleep0", "sleep1", "sleep2", "sum"]
    assert outcomes[-1].value == 6 and all(o.ok for o in outcomes)
    assert sorted(finished) == sorted(o.key for o in outcomes)  # each reported once, in whatever order it ended


def test_a_failure_and_a_timeout_do_not_stop_the_others():
    jobs = [Job("slow", "time:sleep", (60,)), Job("bad", "math:sqrt", (-1.0,)), Job("good", "math:factorial", (4,)),
            Job("missing", "no_such_module:f")]
    start = time.monotonic()
    slow, bad, good, missing = run_jobs(jobs, workers=2, timeout=1.5)
    assert time.monotonic() - start < 15
    assert not slow.ok and "timed out after 1.5 s" in slow.error
    assert not bad.ok and bad.error == "ValueError: math domain error"
    assert good.ok and good.value == 24
    assert not missing.ok and "ModuleNotFoundError" in missing.error
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("synth-job")]


def test_serial_runs_in_this_process():
    (outcome,) = run_jobs([Job("pid", "os:getpid")])
    import os

    assert outcome.value == os.getpid()
    with pytest.raises(ValueError):
        run_jobs([], workers=0)


@pytest.mark.slow
@pytest.mark.skipif(__import__("importlib").util.find_spec("ray") is None, reason="needs the ray extra")
def test_a_small_sweep_on_a_local_ray_instance(tmp_path):
    from synth.report import runner

    jobs = [Job("good", "math:factorial", (5,)), Job("bad", "math:sqrt", (-1.0,)), Job("slow", "time:sleep", (60,))]
    good, bad, slow = run_jobs(jobs, ray="local", timeout=8)
    assert good.ok and good.value == 120
    assert not bad.ok and bad.error == "ValueError: math domain error"
    assert not slow.ok and "timed out" in slow.error
    small = (("ring:4", "allgather"),)
    _, failed = runner.report_all(tmp_path / "ray", time_limit=30, reports=small, sizes="1K,1M", ray="local")
    _, serial_failed = runner.report_all(tmp_path / "serial", time_limit=30, reports=small, sizes="1K,1M")
    assert failed == serial_failed == []
    from tests.report.test_report import _numbers

    assert _numbers(tmp_path / "ray")[0] == _numbers(tmp_path / "serial")[0]
