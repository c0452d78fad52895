"""Processes for ``synth run``: a world of one worker per rank, or a rank of someone else's launch.

``World(ranks)`` starts one process per rank (torch.multiprocessing; forked from a forkserver that
has torch imported, where the platform has one) and keeps them for as many jobs as the caller
runs. The parent hosts the TCP store the workers' process group is built on, so the store outlives
any worker. The parent supervises every job: it collects each rank's per-size report, notices a
worker that dies or faults (and stops the others after a short grace), and stops every worker when
none has shown progress (a finished execution) within the timeout plus a grace. After a job that faulted
the workers are gone
(a process group that timed out or lost a peer cannot be trusted) and the next job starts a new
world.

``run_joined`` is for ``torchrun`` launches (RANK / WORLD_SIZE / MASTER_ADDR in the environment): this
process is one rank; rank 0 gathers the reports through the launch's store.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from multiprocessing.connection import wait

from synth.core.errors import InputError
from synth.parallel.pool import exit_text
from synth.runtime.measure import Agreement, RunOptions, SizeReport, run_rank
from synth.runtime.runnable import Runnable, run_sizes

GRACE = 5.0  # seconds past a timeout before the parent stops a worker that has not answered
DEATH_GRACE = 2.0  # seconds the others get to report after a worker died or a rank faulted


@dataclass(frozen=True)
class SizeRow:
    """One size over all ranks: time is the slowest rank's mean; ``fault`` says why not correct."""

    size: int
    count: int
    time_us: float | None
    torch_us: float | None
    correct: bool
    fault: str = ""


@dataclass(frozen=True)
class RunResult:
    """Rows in size order; ``fault``: the one line saying what went wrong (empty when all correct)."""

    rows: tuple[SizeRow, ...]
    fault: str = ""
    broken: bool = False  # a rank was stuck, failed, died or went silent: its process group cannot be trusted

    @property
    def correct(self) -> bool:
        return not self.fault and bool(self.rows) and all(r.correct for r in self.rows)


def merge(size_reports: list[SizeReport], ranks: int, size_index_label: str = "") -> SizeRow:
    """One SizeRow from every rank's report of one size (missing ranks count as silent)."""
    got = {r.rank: r for r in size_reports}
    first = size_reports[0]
    problems = [p for r in sorted(got) for p in got[r].problems]
    stuck = next((got[r].stuck for r in sorted(got) if got[r].stuck), ())
    failed = next((got[r].failed for r in sorted(got) if got[r].failed), ())
    silent = sorted(set(s for r in got.values() for s in r.silent) | (set(range(ranks)) - set(got)))
    fault = ""
    if stuck:  # first: a peer's timeout closes connections, so the others then fail
        shown = "; ".join(stuck[:4]) + (f"; ... ({len(stuck)} thread blocks in all)" if len(stuck) > 4 else "")
        fault = f"stuck (deadlock or a peer that never sends): {shown}"
    elif failed:
        fault = f"failed: {failed[0]}"
    elif silent:
        fault = f"rank(s) {_ranks(silent)} never reported within the timeout"
    elif problems:
        fault = problems[0]
    else:
        wrong = next(((r, got[r].wrong) for r in sorted(got) if got[r].wrong), None)
        if wrong:
            rank, (index, expected, value) = wrong
            at = got[rank].wrong_at or f"element {index} (chunk {index // max(1, first.chunk)})"
            fault = f"wrong result: rank {rank} output {at}: expected {_num(expected)}, got {_num(value)}"
    times = [r.time_us for r in got.values() if r.time_us is not None]
    torch_times = [r.torch_us for r in got.values() if r.torch_us is not None]
    correct = not fault and len(got) == ranks and all(r.correct for r in got.values())
    return SizeRow(first.size, first.count, max(times) if len(times) == ranks else None,
                   max(torch_times) if len(torch_times) == ranks else None, correct, fault)


def _num(x) -> str:
    return str(int(x)) if isinstance(x, float) and x == x and x == int(x) else str(x)


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (" ..." if len(ranks) > 8 else "")


# ---------------------------------------------------------------------- a world of workers
def _worker(rank: int, ranks: int, port: int, backend: str, timeout: float, conn) -> None:
    """A worker's life: join the process group, then run jobs until told to stop or a job faults."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
        device = torch.device("cpu")
        if backend == "nccl":
            device = torch.device("cuda", rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
        dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=rank, world_size=ranks,
                                timeout=timedelta(seconds=max(timeout, 120.0)))
        conn.send(("ready", rank, None))
    except Exception as exc:  # noqa: BLE001
        conn.send(("error", rank, f"{type(exc).__name__}: {exc}"))
        os._exit(0)
    while True:
        message = conn.recv()
        if message[0] == "stop":
            break
        _, job, runnable, options = message
        faulted = False
        last = [time.monotonic()]

        def beat() -> None:  # at most two a second: the parent only needs to know we move
            now = time.monotonic()
            if now - last[0] > 0.5:
                last[0] = now
                conn.send(("beat", job, None))

        try:
            for report in run_rank(runnable, rank, options, Agreement(store, f"synth/{job}", rank, ranks), device,
                                   beat=beat):
                conn.send(("size", job, report))
                faulted = faulted or report.faulted
        except Exception as exc:  # noqa: BLE001 - reported as this rank's failure, the parent decides
            conn.send(("error", rank, f"{type(exc).__name__}: {exc}"))
            faulted = True
        conn.send(("done", job, None))
        if faulted:
            os._exit(0)  # the process group is broken: do not run its destructors
    try:
        dist.destroy_process_group()
    finally:
        os._exit(0)


class World:
    """``ranks`` worker processes joined in one process group (gloo or nccl), reused across jobs.

    >>> # with World(8) as world: result = world.run(runnable, RunOptions(sizes=(1024,)))
    """

    def __init__(self, ranks: int, backend: str = "gloo", timeout: float = 60.0):
        self.ranks, self.backend, self.timeout = ranks, backend, timeout
        self.procs: list = []
        self.conns: list = []
        self.gone: set[int] = set()  # ranks whose process ended (reported once)
        self.jobs = 0
        self.grace = GRACE

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return bool(self.procs) and all(p.is_alive() for p in self.procs)

    def start(self) -> None:
        import torch.distributed as dist
        import torch.multiprocessing as mp

        self.close()
        ctx = _context(mp)
        self.store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                   timeout=timedelta(seconds=60))
        for rank in range(self.ranks):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(rank, self.ranks, self.store.port, self.backend, self.timeout,
                                                     child), daemon=True, name=f"synth-rank{rank}")
            proc.start()
            child.close()
            self.procs.append(proc)
            self.conns.append(parent)
        deadline = time.monotonic() + 120
        ready = set()
        while len(ready) < self.ranks:
            for rank, kind, detail in self._messages(deadline):
                if kind == "error":
                    self.close()
                    raise InputError(f"rank {rank} could not join the {self.backend} process group: {detail}")
                if kind == "dead":
                    self.close()
                    raise InputError(f"rank {rank} died while starting ({detail})")
                if kind == "timeout":
                    self.close()
                    raise InputError(f"the {self.ranks} worker processes did not start within 120 s")
                ready.add(rank)

    def _messages(self, deadline: float):
        """(rank, kind, payload) as they come: messages, "dead" for a process that ended, or one
        (None, "timeout", None) when nothing came before ``deadline``."""
        watch = {}
        for rank, (proc, conn) in enumerate(zip(self.procs, self.conns)):
            if conn is not None:
                watch[conn] = rank
            if rank not in self.gone:
                watch[proc.sentinel] = rank
        ready = wait(list(watch), timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            yield None, "timeout", None
            return
        for item in ready:
            rank = watch[item]
            if item is self.procs[rank].sentinel:
                if self.conns[rank] is not None and self.conns[rank].poll():
                    continue  # read what it said before it ended
                self.procs[rank].join(0.1)
                self.gone.add(rank)
                self.conns[rank] = None
                yield rank, "dead", exit_text(self.procs[rank].exitcode)
                continue
            try:
                kind, _, payload = item.recv()
            except (EOFError, OSError):
                self.conns[rank] = None
                continue
            yield rank, kind, payload

    def run(self, runnable: Runnable, options: RunOptions) -> RunResult:
        """Run ``runnable`` at every size of ``options`` (a runnable with a fixed size: at that size,
        InputError for another; runnable.run_sizes); the world restarts if a job faulted before."""
        if runnable.ranks != self.ranks:
            raise InputError(f"the program has {runnable.ranks} ranks; this world has {self.ranks}")
        options = replace(options, sizes=run_sizes(runnable, options.sizes))
        if not self.alive or any(c is None for c in self.conns):
            self.start()
        self.jobs += 1
        for conn in self.conns:
            conn.send(("job", self.jobs, runnable, options))
        by_size: dict[int, list[SizeReport]] = {}
        done, dead, errors = set(), {}, {}
        deadline = time.monotonic() + options.timeout + self.grace
        cut = None  # once a rank died or faulted: when to stop waiting for the others
        timed_out = False
        while len(done | set(dead)) < self.ranks:
            limit = deadline if cut is None else min(deadline, cut)
            if time.monotonic() >= limit:
                timed_out = cut is None
                break
            for rank, kind, payload in self._messages(limit):
                if kind == "timeout":
                    break
                if kind == "beat":
                    deadline = time.monotonic() + options.timeout + self.grace  # progress: a new execution's clock
                elif kind == "size":
                    by_size.setdefault(payload.size, []).append(payload)
                    deadline = time.monotonic() + options.timeout + self.grace
                    if payload.faulted:
                        cut = cut or time.monotonic() + DEATH_GRACE
                elif kind == "done":
                    done.add(rank)
                elif kind == "dead" and rank not in done:
                    dead[rank] = payload
                    cut = cut or time.monotonic() + DEATH_GRACE
                elif kind == "error":
                    errors[rank] = payload
                    cut = cut or time.monotonic() + DEATH_GRACE
        rows = [merge(reports, self.ranks) for _, reports in sorted(by_size.items())]
        fault = next((r.fault for r in rows if r.fault), "")
        stopped = sorted(set(range(self.ranks)) - done - set(dead))
        if dead:
            first = min(dead)
            fault = (f"rank {first} died ({dead[first]}) during the run"
                     + (f"; ranks {_ranks(stopped)} were stopped" if stopped else "")
                     + (f"; {fault}" if fault else ""))
        elif errors:
            first = min(errors)
            fault = f"rank {first} failed: {errors[first]}"
        elif timed_out:
            fault = fault or (f"rank(s) {_ranks(stopped)} did not finish within the {options.timeout:g} s timeout; "
                              "stopped")
        broken = bool(dead or errors or timed_out or stopped) or any(r.faulted for rs in by_size.values() for r in rs)
        if fault or stopped or broken:
            self.close()
        return RunResult(tuple(rows), fault, broken)

    def close(self) -> None:
        """Stop every worker (politely, then by force) and forget them."""
        for conn in self.conns:
            if conn is not None:
                try:
                    conn.send(("stop",))
                except (OSError, BrokenPipeError):
                    pass
        end = time.monotonic() + 1.0
        for proc in self.procs:
            proc.join(max(0.0, end - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join(2.0)
        for conn in self.conns:
            if conn is not None:
                conn.close()
        self.procs, self.conns = [], []
        self.gone = set()
        self.store = None


def _context(mp):
    """forkserver where the platform has it: workers are forked from a clean single-threaded server
    that has torch imported already (cheap, and safe although this process runs threads: the store's
    server, a caller's); spawn elsewhere."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "torch.distributed", "synth.runtime.measure"])
        return ctx
    return mp.get_context("spawn")


# ---------------------------------------------------------------------- joining torchrun
def launched_by_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def run_joined(runnable: Runnable, options: RunOptions) -> tuple[int, RunResult]:
    """Run as one rank of an existing launch; (this rank, the merged result every rank agrees on)."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != runnable.ranks:
        raise InputError(f"{runnable.source}: the program has {runnable.ranks} ranks but WORLD_SIZE is {world}")
    options = replace(options, sizes=run_sizes(runnable, options.sizes))
    device = torch.device("cpu")
    if options.backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank))
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(options.backend, timeout=timedelta(seconds=max(options.timeout, 1.0)))
    store = dist.distributed_c10d._get_default_store()
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "run")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    prefix = f"synth/{run_id}/{restart}"
    rows = []
    faulted = False
    agreement = Agreement(store, prefix, rank, world)
    for index, report in enumerate(run_rank(runnable, rank, options, agreement, device)):
        reports, silent = agreement.sub(f"report/{index}").exchange(
            "size", report, time.monotonic() + options.timeout + GRACE)
        got = [r for r in reports if r is not None]
        rows.append(merge(got, world))
        faulted = faulted or report.faulted or bool(silent)
        if faulted:
            break
    fault = next((r.fault for r in rows if r.fault), "")
    return rank, RunResult(tuple(rows), fault, faulted)


def leave_joined(result: RunResult, code: int) -> None:
    """End this rank of a torchrun launch: after a clean run every rank meets once more and the
    process group is destroyed (a rank that exits first would otherwise close connections under
    the others); after a fault the process exits at once with ``code`` (a broken group's
    destructors can abort the process)."""
    import sys

    import torch.distributed as dist

    if not result.broken:
        dist.barrier()
        dist.destroy_process_group()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
