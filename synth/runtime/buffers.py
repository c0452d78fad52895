"""A rank's Program buffers as flat tensors, and the caller's packed tensors in and out of them.

Backing buffers are named as synth.program.buffers.Layout names them (``i``, ``o``, ``s``; an
in-place view aliases another buffer) and hold ``chunk`` elements per chunk. ``allocate`` poisons
what the caller does not provide (NaN, or the dtype's minimum), so a program that reads memory
nothing wrote shows up in its result; tensors the caller provides are used as they are (zero copy).
``place`` / ``take`` copy the caller's packed input into the input view and the output view out,
chunk by chunk where a Binding reorders them (alltoallv), as one slice otherwise.

>>> import torch
>>> from synth.program.ir import Program, RankProgram
>>> from synth.program.buffers import Layout
>>> p = Program("x", "allgather", 2, "Simple", 2, False, True, 1, (RankProgram(0, 1, 2, 0, ()),) * 2)
>>> lay = Layout(p, 1, inplace=False)
>>> bufs = allocate(lay, 3, torch.float32, "cpu")
>>> place(bufs, lay, (0,), torch.ones(3), 3)
>>> bufs["i"].tolist(), bufs["o"].isnan().all().item()
([1.0, 1.0, 1.0], True)
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from synth.runtime.data import poison


def allocate(layout, chunk: int, dtype: torch.dtype, device, given: Mapping[str, torch.Tensor] | None = None,
             cache: dict | None = None) -> dict[str, torch.Tensor]:
    """Backing buffer name -> flat tensor: ``given`` ones as they are, the others new (or reused from
    ``cache``, keyed by name, size, dtype and device) and poisoned."""
    out = {}
    for name, n in layout.sizes.items():
        if given and name in given:
            out[name] = given[name]
            continue
        key = (name, n * chunk, dtype, str(device))
        tensor = cache.get(key) if cache is not None else None
        if tensor is None:
            tensor = torch.full((n * chunk,), poison(dtype), dtype=dtype, device=device)
            if cache is not None:
                cache[key] = tensor
        out[name] = tensor
    return out


def place(buffers: dict, layout, chunks: Sequence[int], data: torch.Tensor, chunk: int) -> None:
    """Copy the packed ``data`` into the input view: its k-th chunk to offset ``chunks[k]``."""
    name, base, size = layout.view["i"]
    target = buffers[name]
    if tuple(chunks) == tuple(range(size)):
        piece = target[base * chunk:(base + size) * chunk]
        if piece.data_ptr() != data.data_ptr():
            piece.copy_(data.reshape(-1))
        return
    flat = data.reshape(-1)
    for k, c in enumerate(chunks):
        target[(base + c) * chunk:(base + c + 1) * chunk].copy_(flat[k * chunk:(k + 1) * chunk])


def take(buffers: dict, layout, chunks: Sequence[int], chunk: int, into: torch.Tensor | None = None) -> torch.Tensor:
    """The packed output: output-view chunks ``chunks`` in order (copied into ``into`` when given)."""
    name, base, size = layout.view["o"]
    source = buffers[name]
    if tuple(chunks) == tuple(range(size)):
        piece = source[base * chunk:(base + size) * chunk]
    elif chunks:
        piece = torch.cat([source[(base + c) * chunk:(base + c + 1) * chunk] for c in chunks])
    else:
        piece = source[:0]
    if into is None:
        return piece.clone()
    if into.data_ptr() != piece.data_ptr():
        into.reshape(-1).copy_(piece)
    return into
