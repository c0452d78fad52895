"""Inputs, torch's own answer, and the bit-for-bit comparison (synth.runtime; needs torch).

Inputs are integer-valued and small enough that every sum over the ranks is exact in the dtype,
whatever order the additions happen in, so a correct program matches torch.distributed's own
collective bit for bit. ``reference`` runs that collective on the same inputs
(``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_reduce``, ``all_to_all_single``
(alltoallv: with its split sizes), ``broadcast``, ``reduce``, ``gather``, ``scatter``). A
mixture-of-experts dispatch or combine has no torch collective; ``moe_reference`` builds its answer
on each rank from every rank's input (``pattern`` is a function of the rank) with torch indexing and
``index_add``, and ``moe_torch`` is how torch alone would run it (``all_to_all_single``, what NCCL's
all_to_all_v does), for timing.

>>> import torch
>>> x = pattern(1, 6, torch.float32, ranks=8)
>>> bool((x == x.round()).all()), x.dtype
(True, torch.float32)
>>> first_difference(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 3.0]))
(1, 3.0, 2.0)
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist

from synth.core.errors import InputError

DTYPES = {
    "float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
    "float64": torch.float64, "double": torch.float64, "fp64": torch.float64,
    "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "int32": torch.int32, "int": torch.int32, "int64": torch.int64, "long": torch.int64,
    "int8": torch.int8, "uint8": torch.uint8,
}
# nccl-tests' names, for the table
SHORT = {torch.float32: "float", torch.float64: "double", torch.float16: "half", torch.bfloat16: "bfloat16",
         torch.int32: "int32", torch.int64: "int64", torch.int8: "int8", torch.uint8: "uint8"}
# largest integer every value and partial sum must stay within to be exact
_EXACT = {torch.float32: 1 << 24, torch.float64: 1 << 53, torch.float16: 1 << 11, torch.bfloat16: 1 << 8,
          torch.int32: (1 << 31) - 1, torch.int64: (1 << 63) - 1, torch.int8: 127, torch.uint8: 255}
_BITS = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16,
         torch.bfloat16: torch.int16}


def dtype_of(name: str) -> torch.dtype:
    """torch dtype from a name (``float32``, ``bf16``...); InputError for unknown names."""
    found = DTYPES.get(str(name).lower())
    if found is None:
        raise InputError(f"unknown dtype {name!r}; known: {', '.join(sorted(set(SHORT.values()) | set(DTYPES)))}")
    return found


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def pattern(rank: int, numel: int, dtype: torch.dtype, ranks: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """Rank ``rank``'s input: integers that differ from rank to rank and element to element, bounded
    so that a sum over ``ranks`` contributions is exact in ``dtype``."""
    limit = _EXACT[dtype] // max(1, ranks)
    signed = dtype != torch.uint8
    span = max(2, min(limit * 2 if signed else limit, 1 << 20))
    index = torch.arange(numel, dtype=torch.int64, device=device)
    values = (index * 40503 + (rank + 1) * 2654435761) % span
    if signed:
        values = values - span // 2
        values = values.clamp(-limit, limit)
    return values.to(dtype)


def poison(dtype: torch.dtype) -> float | int:
    """What unwritten buffer elements hold: NaN for floats, the most negative integer otherwise."""
    return float("nan") if dtype.is_floating_point else (0 if dtype == torch.uint8 else torch.iinfo(dtype).min)


def first_difference(got: torch.Tensor, expected: torch.Tensor) -> tuple[int, float | int, float | int] | None:
    """(index, expected, got) of the first element that differs bit for bit, or None."""
    a, b = got.reshape(-1), expected.reshape(-1)
    if a.numel() != b.numel():
        return (min(a.numel(), b.numel()), float("nan"), float("nan"))
    bits = _BITS.get(a.dtype)
    same = (a.view(bits) == b.view(bits)) if bits is not None else (a == b)
    if bool(same.all()):
        return None
    k = int((~same).nonzero()[0])
    return k, b[k].item(), a[k].item()


def reference(collective: str, inp: torch.Tensor, out_numel: int, rank: int, ranks: int, root: int | None,
              splits: Sequence[Sequence[int]] | None, chunk: int, group=None) -> torch.Tensor | None:
    """torch.distributed's own answer for this rank (None where the collective defines no output
    here: a reduce or gather off the root). ``chunk``: elements per chunk (alltoallv splits)."""
    x = inp.clone()
    out = torch.empty(out_numel, dtype=inp.dtype, device=inp.device)
    if collective == "allgather":  # all_gather_single: the newer name of the same call
        getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out, x, group=group)
    elif collective == "reduce_scatter":
        getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(out, x, group=group)
    elif collective == "allreduce":
        dist.all_reduce(x, group=group)
        out = x
    elif collective == "alltoall":
        dist.all_to_all_single(out, x, group=group)
    elif collective == "alltoallv":
        send = [splits[rank][d] * chunk for d in range(ranks)]
        recv = [splits[s][rank] * chunk for s in range(ranks)]
        dist.all_to_all_single(out, x, output_split_sizes=recv, input_split_sizes=send, group=group)
    elif collective == "broadcast":
        dist.broadcast(x, src=_global(root, group), group=group)
        out = x
    elif collective == "reduce":
        dist.reduce(x, dst=_global(root, group), group=group)
        out = x if rank == root else None
    elif collective == "gather":
        parts = list(out.chunk(ranks)) if rank == root else None
        dist.gather(x, gather_list=parts, dst=_global(root, group), group=group)
        out = out if rank == root else None
    elif collective == "scatter":
        parts = list(x.chunk(ranks)) if rank == root else None
        dist.scatter(out, scatter_list=parts, src=_global(root, group), group=group)
    else:
        raise InputError(f"no torch.distributed collective for {collective!r}")
    return out


def _global(rank: int, group) -> int:
    return rank if group is None else dist.get_global_rank(group, rank)


def moe_inputs(tokens, chunk: int, dtype: torch.dtype, device: str | torch.device = "cpu") -> torch.Tensor:
    """Every rank's input (``pattern``), rank after rank, as rows of ``chunk`` elements: dispatch,
    row t is token t (tokens are numbered rank by rank); combine, each rank's rows are the tokens
    routed to it, in token order (synth.runtime.moe.MoeTokens)."""
    n = tokens.ranks
    parts = [pattern(r, len(tokens.input_tokens(r)) * chunk, dtype, n, device) for r in range(n)]
    return torch.cat(parts).view(-1, chunk)


def moe_reference(tokens, rank: int, chunk: int, dtype: torch.dtype,
                  device: str | torch.device = "cpu") -> torch.Tensor:
    """Rank ``rank``'s output, flat. Dispatch: every input concatenated, indexed at the tokens
    routed to ``rank``. Combine: zeros, to which ``index_add`` adds, for every destination pair
    (token t of ``rank``, destination d), d's row of t."""
    every = moe_inputs(tokens, chunk, dtype, device)
    if tokens.kind == "moe_dispatch":
        return every[torch.tensor(tokens.received(rank), dtype=torch.int64, device=device)].reshape(-1)
    first_row, rows = {}, 0
    for d in range(tokens.ranks):  # where each rank's rows start in ``every``
        first_row[d] = rows
        rows += len(tokens.received(d))
    position = {(t, d): first_row[d] + k for d in range(tokens.ranks) for k, t in enumerate(tokens.received(d))}
    own = tokens.own(rank)
    pairs = [(t, d) for t, d in tokens.pairs() if tokens.sources[t] == rank]
    out = torch.zeros(len(own), chunk, dtype=dtype, device=device)
    if pairs:
        local = torch.tensor([t - own[0] for t, _ in pairs], dtype=torch.int64, device=device)
        picked = every[torch.tensor([position[p] for p in pairs], dtype=torch.int64, device=device)]
        out.index_add_(0, local, picked)
    return out.reshape(-1)


def moe_torch(tokens, rank: int, chunk: int, data: torch.Tensor, group=None):
    """A call that runs rank ``rank``'s part of the dispatch or combine with torch alone, one
    ``all_to_all_single`` (rows gathered per destination before it, summed with ``index_add``
    after it for combine), and returns the output; its index tensors are built once, here."""
    n, device = tokens.ranks, data.device
    own = tokens.own(rank)
    if tokens.kind == "moe_dispatch":  # send per destination rank, receive per source rank, in token order
        rows = [k for d in range(n) for k, t in enumerate(own) if d in tokens.destinations[t]]
        send_rows = torch.tensor(rows, dtype=torch.int64, device=device)
        sends = [sum(d in tokens.destinations[t] for t in own) * chunk for d in range(n)]
        recvs = [sum(tokens.sources[t] == s for t in tokens.received(rank)) * chunk for s in range(n)]
        out = torch.empty(sum(recvs), dtype=data.dtype, device=device)

        def dispatch() -> torch.Tensor:
            send = data.view(-1, chunk).index_select(0, send_rows).reshape(-1)
            dist.all_to_all_single(out, send, output_split_sizes=recvs, input_split_sizes=sends, group=group)
            return out
        return dispatch
    sends = [sum(tokens.sources[t] == s for t in tokens.received(rank)) * chunk for s in range(n)]
    back = [[k for k, t in enumerate(own) if d in tokens.destinations[t]] for d in range(n)]
    recvs = [len(b) * chunk for b in back]
    index = torch.tensor([k for b in back for k in b], dtype=torch.int64, device=device)
    landed = torch.empty(sum(recvs), dtype=data.dtype, device=device)
    out = torch.zeros(len(own), chunk, dtype=data.dtype, device=device)

    def combine() -> torch.Tensor:
        dist.all_to_all_single(landed, data.reshape(-1), output_split_sizes=recvs, input_split_sizes=sends,
                               group=group)
        out.zero_().index_add_(0, index, landed.view(-1, chunk))
        return out.reshape(-1)
    return combine
