"""One rank's part of ``synth run``: per size, a checked run, torch's answer, then timed runs.

For every size: the rank allocates the Program's buffers (poisoned), writes its integer-valued input,
executes once with chunk-level tracking, and tells every other rank how it went (through the
process group's store, which outlives a broken connection). Only when every rank finished cleanly do
they all call torch.distributed's own collective on the same input (a moe dispatch or combine: build
its answer locally, synth.runtime.data.moe_reference) and compare bit for bit; then
``warmup`` untimed and ``iters`` timed executions (and, with ``vs_torch``, the same loop of torch's
collective), each within the timeout. A rank that finds any rank stuck or failed stops: its process group
cannot be trusted
after that, and the caller tears the world down.

>>> chunk_elements(1 << 20, 48, 4)
5461
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Iterator

import torch
import torch.distributed as dist

from synth.runtime.buffers import allocate, place, take
from synth.runtime.data import first_difference, moe_reference, moe_torch, pattern, reference
from synth.runtime.executor import RankExecutor
from synth.runtime.runnable import Runnable
from synth.runtime.transport import Transport


@dataclass(frozen=True)
class RunOptions:
    """What to run: sizes in bytes (nccl-tests S), dtype name, timing loop, per-size timeout (s)."""

    sizes: tuple[int, ...] = (1024, 1 << 20)
    dtype: str = "float32"
    iters: int = 10
    warmup: int = 2
    timeout: float = 60.0
    vs_torch: bool = False
    backend: str = "gloo"
    executor: str = "threads"  # "threads" (a thread per thread block) or "ordered" (one thread, synth.runtime.order)


@dataclass(frozen=True)
class SizeReport:
    """One rank's figures for one size. ``wrong``: (index, expected, got) of its first wrong output
    element, ``wrong_at``: where that is in tokens (moe: row, token, element; empty otherwise);
    ``stuck``/``failed``/``problems`` as in executor.Outcome; times in microseconds."""

    rank: int
    size: int
    count: int
    chunk: int
    correct: bool | None = None
    wrong: tuple | None = None
    wrong_at: str = ""
    problems: tuple[str, ...] = ()
    stuck: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    silent: tuple[int, ...] = ()  # ranks that never said how their run went
    time_us: float | None = None
    torch_us: float | None = None

    @property
    def faulted(self) -> bool:
        return bool(self.stuck or self.failed or self.silent)


def chunk_elements(size: int, size_chunks: int, element: int) -> int:
    """Elements per chunk for an S-byte call (at least one: tiny sizes round up)."""
    return max(1, size // (size_chunks * element))


def bytes_needed(runnable: Runnable, size: int, element: int) -> int:
    """About how much memory one size takes on all ranks together: every rank's buffers, its input
    and torch's answer (a moe answer: built from every rank's input), and as much again for messages
    in flight."""
    chunk = chunk_elements(size, runnable.size_chunks, element)
    binding = runnable.binding
    every = sum(len(binding.input_chunks(r)) for r in range(runnable.ranks)) if binding.tokens is not None else 0
    total = 0
    for rank in range(runnable.ranks):
        chunks = sum(runnable.layout(rank).sizes.values()) + len(binding.input_chunks(rank)) \
            + len(binding.output_chunks(rank)) + every
        total += 2 * chunks * chunk * element
    return total


class Agreement:
    """Cross-rank status exchange through the process group's TCP store."""

    def __init__(self, store, prefix: str, rank: int, ranks: int):
        self.store, self.prefix, self.rank, self.ranks = store, prefix, rank, ranks

    def sub(self, name: str) -> "Agreement":
        """The same exchange under a longer key prefix (one per size, one per phase of a launch)."""
        return Agreement(self.store, f"{self.prefix}/{name}", self.rank, self.ranks)

    def exchange(self, phase: str, status, deadline: float) -> tuple[list, list[int]]:
        """Every rank's ``status`` for ``phase`` (None for ranks silent past the deadline), and those ranks."""
        key = f"{self.prefix}/{phase}"
        self.store.set(f"{key}/{self.rank}", pickle.dumps(status))
        out, silent = [], []
        for r in range(self.ranks):
            left = max(0.05, deadline - time.monotonic())
            try:
                self.store.wait([f"{key}/{r}"], timedelta(seconds=left))
                out.append(pickle.loads(self.store.get(f"{key}/{r}")))
            except Exception:  # noqa: BLE001 - a store timeout or a closed store: that rank is silent
                out.append(None)
                silent.append(r)
        return out, silent


def run_rank(runnable: Runnable, rank: int, options: RunOptions, agreement: Agreement,
             device: torch.device, group=None, beat: Callable[[], None] = lambda: None) -> Iterator[SizeReport]:
    """Yield this rank's SizeReport for each size, stopping after the first size any rank faulted on.
    ``beat`` is called after every execution (a supervisor's sign of progress)."""
    from synth.runtime.data import dtype_of, element_size

    dtype = dtype_of(options.dtype)
    program = runnable.program
    layout = runnable.layout(rank)
    transport = Transport(options.backend, program.channels, group)
    order = None
    if options.executor == "ordered":
        from synth.runtime.order import global_order

        found = global_order(program)
        order = found[rank] if found is not None else None
    executor = RankExecutor(program, rank, layout, transport, order=order)
    try:
        for index, size in enumerate(options.sizes):
            report = _one_size(runnable, rank, options, agreement.sub(str(index)), executor, layout, dtype,
                               element_size(dtype), size, device, group, beat)
            yield report
            if report.faulted:
                return
    finally:
        executor.close()


def _one_size(runnable, rank, options, agreement, executor, layout, dtype, element, size, device, group,
              beat) -> SizeReport:
    chunk = chunk_elements(size, runnable.size_chunks, element)
    count = chunk * runnable.size_chunks
    base = SizeReport(rank, count * element, count, chunk)
    deadline = time.monotonic() + options.timeout
    binding = runnable.binding
    inputs = binding.input_chunks(rank)
    outputs = binding.output_chunks(rank)
    data = pattern(rank, len(inputs) * chunk, dtype, runnable.ranks, device)
    buffers = allocate(layout, chunk, dtype, device)
    place(buffers, layout, inputs, data, chunk)
    outcome = executor.run(buffers, chunk, deadline, track=True)
    statuses, silent = agreement.exchange("checked", (outcome.clean, outcome.stuck, outcome.failed), deadline + 2)
    stuck = tuple(s for st in statuses if st for s in st[1])
    failed = tuple(s for st in statuses if st for s in st[2])
    if silent or not all(st and st[0] for st in statuses):
        return _with(base, problems=outcome.problems, stuck=stuck, failed=failed, silent=tuple(silent))
    ours = take(buffers, layout, outputs, chunk)
    try:
        want = _answer(runnable, data, len(outputs) * chunk, rank, chunk, group)
    except Exception as exc:  # noqa: BLE001 - torch refusing (a dtype gloo lacks): one line, not a traceback
        return _with(base, problems=outcome.problems + (f"torch's own collective failed: {exc}",), failed=(str(exc),))
    wrong = None if want is None else first_difference(ours, want)
    correct = wrong is None and not outcome.problems
    wrong_at = binding.tokens.where(rank, wrong[0], chunk) if wrong and binding.tokens is not None else ""
    report = _with(base, correct=correct, wrong=wrong, wrong_at=wrong_at, problems=outcome.problems)
    if options.iters <= 0:
        return report
    timed = _time(lambda: executor.run(buffers, chunk, time.monotonic() + options.timeout, track=False), options,
                  group, beat)
    if isinstance(timed, str):
        return _with(report, failed=(f"rank {rank}: a timed run did not finish cleanly: {timed}",))
    torch_us = None
    if options.vs_torch:
        torch_us = _time(_torch_call(runnable, data, len(outputs) * chunk, rank, chunk, group), options, group, beat)
    return _with(report, time_us=timed, torch_us=torch_us if not isinstance(torch_us, str) else None)


def _answer(runnable: Runnable, data: torch.Tensor, out_numel: int, rank: int, chunk: int, group):
    """What this rank's output must be: torch.distributed's own collective on the same inputs, or,
    for a moe dispatch or combine, the answer built from every rank's input (moe_reference)."""
    binding = runnable.binding
    if binding.tokens is not None:
        return moe_reference(binding.tokens, rank, chunk, data.dtype, data.device)
    return reference(runnable.collective, data, out_numel, rank, runnable.ranks, runnable.root, binding.splits,
                     chunk, group)


def _torch_call(runnable: Runnable, data: torch.Tensor, out_numel: int, rank: int, chunk: int,
                group) -> Callable:
    """One call of what torch runs instead (``--vs-torch``): its collective, or for a moe dispatch or
    combine its ``all_to_all_single`` (moe_torch)."""
    binding = runnable.binding
    if binding.tokens is not None:
        return moe_torch(binding.tokens, rank, chunk, data, group)
    return lambda: reference(runnable.collective, data, out_numel, rank, runnable.ranks, runnable.root,
                             binding.splits, chunk, group)


def _time(call: Callable, options: RunOptions, group, beat: Callable[[], None]) -> float | str:
    """Mean microseconds of ``iters`` calls after ``warmup``, between barriers; a string on a fault.
    Every execution has the whole timeout (a long timing loop is not a stuck one)."""
    for _ in range(options.warmup):
        result = call()
        beat()
        if getattr(result, "clean", True) is False:
            return "; ".join((result.stuck + result.failed)[:2])
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(options.iters):
        result = call()
        beat()
        if getattr(result, "clean", True) is False:
            return "; ".join((result.stuck + result.failed)[:2])
    if torch.cuda.is_available() and options.backend == "nccl":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / options.iters * 1e6


def _with(report: SizeReport, **changes) -> SizeReport:
    from dataclasses import replace

    return replace(report, **changes)
