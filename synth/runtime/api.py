"""Calling a schedule from training code, the way torch.distributed's collectives are called.

Load a schedule, synth.program or MSCCL XML file once; every rank of the process group calls the
method named like torch's own collective, with torch's arguments, on its tensors::

    import synth.runtime
    ag = synth.runtime.load("allgather.dgx1.s3-r7-c6.schedule.json")   # checked by our replay
    ag.all_gather_into_tensor(output, input)                          # group=None: the default group

The same executor as ``synth run`` runs underneath (one thread per thread block, point-to-point
operations per connection), on the group's ranks in group order. Tensors the layout allows are used
in place (no copy); others are packed in and out. A call that cannot finish within ``timeout``
seconds raises ``CollectiveTimeout`` naming where each rank's thread blocks were stuck; the group's
connections cannot be trusted after that (as after any timeout in torch.distributed).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from synth.core.errors import InvalidScheduleError
from synth.runtime.buffers import allocate, place, take
from synth.runtime.executor import RankExecutor
from synth.runtime.runnable import Runnable, load_runnable, precheck
from synth.runtime.transport import Transport

_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "prod", dist.ReduceOp.MIN: "min",
        dist.ReduceOp.MAX: "max", dist.ReduceOp.AVG: "sum"}


class CollectiveTimeout(RuntimeError):
    """A call did not finish within the timeout (a deadlock, or a rank that stopped calling)."""


def load(path: str, inplace: bool | None = None, root: int | None = None, force: bool = False,
         timeout: float = 300.0, executor: str = "threads") -> "ScheduledCollective":
    """The collective in ``path``, checked by our replay (a program it finds wrong raises
    InvalidScheduleError unless ``force``). ``executor``: "threads" (a thread per thread block) or
    "ordered" (one thread, synth.runtime.order), as ``synth run --executor``."""
    if executor not in ("threads", "ordered"):
        raise ValueError(f"executor must be 'threads' or 'ordered', got {executor!r}")
    runnable = load_runnable(path, inplace=inplace, root=root)
    checked = precheck(runnable)
    if checked.correct is False and not force:
        raise InvalidScheduleError(f"{path}: our checker finds the program wrong: {checked.first_problem}")
    return ScheduledCollective(runnable, timeout, executor)


class ScheduledCollective:
    """One loaded program; its method for the program's collective behaves like torch's.

    Methods (each raises ValueError when the program computes another collective):
    ``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_reduce``, ``all_to_all_single``,
    ``broadcast``, ``reduce``, ``gather``, ``scatter``, ``moe_dispatch``, ``moe_combine``.
    ``async_op=True`` is not supported.
    """

    def __init__(self, runnable: Runnable, timeout: float = 300.0, executor: str = "threads"):
        self.runnable = runnable
        self.order = None
        if executor == "ordered":
            from synth.runtime.order import global_order

            self.order = global_order(runnable.program)
        self.collective = runnable.collective
        self.timeout = timeout
        self._executors: dict = {}
        self._scratch: dict = {}

    def __repr__(self) -> str:
        return f"ScheduledCollective({self.runnable.source!r}: {self.runnable.describe()})"

    # -- the torch-shaped entry points
    def all_gather_into_tensor(self, output_tensor, input_tensor, group=None, async_op=False):
        self._expect("allgather", async_op)
        self._run(input_tensor, output_tensor, group, "sum")

    def reduce_scatter_tensor(self, output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        self._expect("reduce_scatter", async_op)
        self._run(input, output, group, _op(op))
        _average(output, op, group)

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        self._expect("allreduce", async_op)
        self._run(tensor, tensor, group, _op(op))
        _average(tensor, op, group)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                          async_op=False):
        if self.collective == "alltoallv":
            self._expect("alltoallv", async_op)
            self._check_splits(input, output, output_split_sizes, input_split_sizes, group)
        else:
            self._expect("alltoall", async_op)
            if output_split_sizes is not None or input_split_sizes is not None:
                raise ValueError("this program is an even alltoall; split sizes need an alltoallv schedule")
        self._run(input, output, group, "sum")

    def broadcast(self, tensor, src, group=None, async_op=False):
        self._expect("broadcast", async_op)
        self._check_root(src, group)
        self._run(tensor, tensor, group, "sum")

    def reduce(self, tensor, dst, op=dist.ReduceOp.SUM, group=None, async_op=False):
        self._expect("reduce", async_op)
        self._check_root(dst, group)
        rank = dist.get_rank(group)
        scratch = tensor if rank == self.runnable.root else torch.empty_like(tensor)
        self._run(tensor, scratch, group, _op(op))
        if rank == self.runnable.root:
            _average(tensor, op, group)

    def gather(self, tensor, gather_list=None, dst=0, group=None, async_op=False):
        self._expect("gather", async_op)
        self._check_root(dst, group)
        n = dist.get_world_size(group)
        out = torch.empty(n * tensor.numel(), dtype=tensor.dtype, device=tensor.device)
        self._run(tensor, out, group, "sum")
        if dist.get_rank(group) == self.runnable.root:
            if gather_list is None or len(gather_list) != n:
                raise ValueError(f"gather on the root needs gather_list of {n} tensors")
            for part, piece in zip(gather_list, out.chunk(n)):
                part.reshape(-1).copy_(piece)

    def scatter(self, tensor, scatter_list=None, src=0, group=None, async_op=False):
        self._expect("scatter", async_op)
        self._check_root(src, group)
        n = dist.get_world_size(group)
        if dist.get_rank(group) == self.runnable.root:
            if scatter_list is None or len(scatter_list) != n:
                raise ValueError(f"scatter on the root needs scatter_list of {n} tensors")
            data = torch.cat([t.reshape(-1) for t in scatter_list])
        else:
            data = torch.empty(n * tensor.numel(), dtype=tensor.dtype, device=tensor.device)
        self._run(data, tensor, group, "sum")

    def moe_dispatch(self, output, input, group=None, async_op=False):
        """Every token of this rank (``input``: its rows, in order) to the ranks of its experts;
        ``output``: one row per token routed to this rank, in global token order. A row is the
        routing's token_bytes (synth.runtime.moe)."""
        self._expect("moe_dispatch", async_op)
        self._run(input, output, group, "sum")

    def moe_combine(self, output, input, group=None, async_op=False):
        """Every token's expert outputs, summed, back on its rank: ``input``: one row per token routed
        to this rank, in global token order; ``output``: one row per token of this rank, the sum of
        its rows on its destinations."""
        self._expect("moe_combine", async_op)
        self._run(input, output, group, "sum")

    def __call__(self, *args, **kwargs):
        """The program's own collective, with that method's arguments."""
        method = {"allgather": self.all_gather_into_tensor, "reduce_scatter": self.reduce_scatter_tensor,
                  "allreduce": self.all_reduce, "alltoall": self.all_to_all_single,
                  "alltoallv": self.all_to_all_single, "broadcast": self.broadcast, "reduce": self.reduce,
                  "gather": self.gather, "scatter": self.scatter, "moe_dispatch": self.moe_dispatch,
                  "moe_combine": self.moe_combine}[self.collective]
        return method(*args, **kwargs)

    # -- checks
    def _expect(self, name: str, async_op: bool) -> None:
        if self.collective != name:
            raise ValueError(f"{self.runnable.source} computes {self.collective}, not {name}")
        if async_op:
            raise ValueError("async_op=True is not supported: the call returns when the collective is done")

    def _check_root(self, root: int, group) -> None:
        if root != self.runnable.root:
            raise ValueError(f"{self.runnable.source} is a {self.collective} rooted at rank {self.runnable.root}, "
                             f"not {root}")

    def _check_splits(self, input, output, output_splits, input_splits, group) -> None:
        rank, chunk = dist.get_rank(group), self._chunk(input, output, group)
        splits = self.runnable.binding.splits
        n = len(splits)
        want_in = [splits[rank][d] * chunk for d in range(n)]
        want_out = [splits[s][rank] * chunk for s in range(n)]
        if input_splits is not None and list(input_splits) != want_in or \
                output_splits is not None and list(output_splits) != want_out:
            raise ValueError(f"split sizes differ from the traffic matrix the schedule was made for: rank {rank} "
                             f"sends {want_in} and receives {want_out} elements at {chunk} per chunk")

    def _chunk(self, input, output, group) -> int:
        """Elements per chunk, from the input (or, for a rank that sends nothing, the output); a moe
        token is the routing's token_bytes, whatever rows this rank has (it may only relay)."""
        rank = dist.get_rank(group)
        binding = self.runnable.binding
        if binding.tokens is not None and self.runnable.fixed_size:
            return self._token_elements(input, output, rank)
        for tensor, chunks, what in ((input, len(binding.input_chunks(rank)), "input"),
                                     (output, len(binding.output_chunks(rank)), "output")):
            if chunks:
                if tensor.numel() % chunks or tensor.numel() == 0:
                    raise ValueError(f"rank {rank}'s {what} of {tensor.numel()} elements does not split into the "
                                     f"program's {chunks} {what} chunks")
                return tensor.numel() // chunks
        raise ValueError(f"rank {rank} neither sends nor receives anything in {self.runnable.source}")

    def _token_elements(self, input, output, rank: int) -> int:
        """Elements per token: token_bytes / element size; ValueError unless the tensors are this
        rank's rows of that many elements."""
        binding = self.runnable.binding
        token_bytes = self.runnable.fixed_size // self.runnable.size_chunks
        if token_bytes % input.element_size():
            raise ValueError(f"a token of {token_bytes} bytes is not a whole number of {input.dtype} elements")
        chunk = token_bytes // input.element_size()
        for tensor, rows, what in ((input, len(binding.input_chunks(rank)), "input"),
                                   (output, len(binding.output_chunks(rank)), "output")):
            if tensor.numel() != rows * chunk:
                raise ValueError(f"rank {rank}'s {what} has {tensor.numel()} elements, not its {rows} rows of "
                                 f"{chunk} ({token_bytes}-byte tokens)")
        return chunk

    # -- the run
    def _executor(self, group, op: str, device: torch.device) -> tuple[RankExecutor, object]:
        key = (id(group), op, device.type)
        found = self._executors.get(key)
        if found is None:
            size = dist.get_world_size(group)
            if size != self.runnable.ranks:
                raise ValueError(f"{self.runnable.source} is for {self.runnable.ranks} ranks; the group has {size}")
            rank = dist.get_rank(group)
            layout = self.runnable.layout(rank)
            backend = "nccl" if device.type == "cuda" else "gloo"
            if backend == "nccl" and group is not None:
                raise ValueError("with CUDA tensors a ScheduledCollective runs on the default group only: it "
                                 "creates a communicator per channel and direction, which every rank must join")
            if backend == "nccl" and self.runnable.program.switch_ops:
                raise ValueError(f"{self.runnable.source}: switch ops run emulated on gloo (CPU tensors) only")
            transport = Transport(backend, self.runnable.program.channels, group)
            order = self.order[rank] if self.order is not None else None
            found = (RankExecutor(self.runnable.program, rank, layout, transport, op, order), layout)
            self._executors[key] = found
        return found

    def _run(self, input: torch.Tensor, output: torch.Tensor, group, op: str) -> None:
        executor, layout = self._executor(group, op, input.device)
        rank = dist.get_rank(group)
        chunk = self._chunk(input, output, group)
        binding = self.runnable.binding
        given = _zero_copy(layout, input, output, chunk, binding.identity, executor.read_only)
        buffers = allocate(layout, chunk, input.dtype, input.device, given, self._scratch)
        place(buffers, layout, binding.input_chunks(rank), input, chunk)
        outcome = executor.run(buffers, chunk, time.monotonic() + self.timeout, track=False)
        if not outcome.clean:
            raise CollectiveTimeout(f"{self.runnable.source}: rank {rank} did not finish within {self.timeout:g} s: "
                                    + "; ".join((outcome.stuck + outcome.failed)[:4]))
        take(buffers, layout, binding.output_chunks(rank), chunk, into=output)


def _zero_copy(layout, input, output, chunk: int, identity: bool, read_only) -> dict:
    """The caller's tensors as backing buffers where the layout lets them be (contiguous, same size;
    an out-of-place input only when the program never writes its input buffer)."""
    if not identity or not input.is_contiguous() or not output.is_contiguous():
        return {}
    name_i, base_i, size_i = layout.view["i"]
    name_o, base_o, size_o = layout.view["o"]
    given = {}
    if name_i == name_o:  # in place: one buffer holds both views
        if input.data_ptr() == output.data_ptr() and layout.sizes[name_o] * chunk == output.numel():
            given[name_o] = output.reshape(-1)
        return given
    if base_i == 0 and layout.sizes[name_i] == size_i and input.numel() == size_i * chunk and name_i in read_only:
        given[name_i] = input.reshape(-1)
    if base_o == 0 and layout.sizes[name_o] == size_o and output.numel() == size_o * chunk \
            and output.data_ptr() != input.data_ptr():
        given[name_o] = output.reshape(-1)
    return given


def _op(op) -> str:
    found = _OPS.get(op)
    if found is None:
        raise ValueError(f"reduction {op} is not supported (SUM, PRODUCT, MIN, MAX, AVG are)")
    return found


def _average(tensor, op, group) -> None:
    if op == dist.ReduceOp.AVG:
        tensor.div_(dist.get_world_size(group))
