"""Lowering, step 1: where every (rank, chunk) lives in MSCCL's input/output buffers (synth.lower.lowering)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from synth.core.collectives import kind_of
from synth.core.errors import InputError

Loc = tuple[str, int]  # (buffer letter, chunk offset)



@dataclass(frozen=True)
class Layout:
    """Where each chunk lives in MSCCL's buffers: (rank, chunk) -> (buffer letter, offset).

    >>> from synth.core.collectives import allgather
    >>> lay = buffer_layout(allgather(4, 2))
    >>> lay.chunks_per_loop, lay.input_chunks, lay.output_chunks, lay.inputs[(1, 3)], lay.outputs[(0, 3)]
    (8, 2, 8, ('i', 1), ('o', 3))
    """

    chunks_per_loop: int
    input_chunks: int
    output_chunks: int
    inputs: Mapping[tuple[int, int], Loc]  # where a rank in pre[c] holds c at the start
    outputs: Mapping[tuple[int, int], Loc]  # where a rank in post[c] must hold c at the end (home)
    inplace: bool


def buffer_layout(coll, inplace: bool = False) -> Layout:
    """MSCCL's buffer layout for ``coll`` (section 3 of the format reference); InputError when
    the collective has none or its chunks are not numbered as synth.core.collectives numbers them."""
    n, k, name = coll.ranks, coll.chunks, coll.name
    everyone = frozenset(range(n))
    root = frozenset({coll.root if coll.root is not None else min(coll.pre[0])})
    ins: dict[tuple[int, int], Loc] = {}
    outs: dict[tuple[int, int], Loc] = {}
    io = "i" if inplace else "o"

    def bad(why: str) -> InputError:
        return InputError(f"cannot lower {name} ({n} ranks, {k} chunks): {why}")

    kind = kind_of(name)
    if kind is not None and kind.combining != coll.combining:
        raise bad("its 'combining' flag does not match the collective")
    if name in ("allgather", "gather", "reduce_scatter", "scatter"):
        if k % n:
            raise bad(f"{k} chunks do not split evenly over {n} ranks")
        per = k // n
        gathering = name in ("allgather", "gather")
        for c in range(k):
            owner = frozenset({c // per})
            if gathering:
                want = (owner, everyone if name == "allgather" else root)
            else:
                want = (everyone if name == "reduce_scatter" else root, owner)
            if (coll.pre[c], coll.post[c]) != want:
                raise bad(f"chunk {c} must go from ranks {sorted(want[0])} to {sorted(want[1])}")
            if gathering:
                ins[(c // per, c)] = ("o", c) if inplace else ("i", c % per)
                outs.update({(r, c): ("o", c) for r in coll.post[c]})
            else:
                ins.update({(r, c): ("i", c) for r in coll.pre[c]})
                outs[(c // per, c)] = ("i", c) if inplace else ("o", c % per)
        sizes = (0 if inplace else per, k) if gathering else (k, 0 if inplace else per)
        # The runtimes cut count x ngpus elements into nchunksperloop chunks for allgather and
        # reduce_scatter but only count (one rank's share) for gather and scatter.
        return Layout(k if name in ("allgather", "reduce_scatter") else per, *sizes, ins, outs, inplace)
    if name == "alltoall":
        per = k // (n * n)
        if per * n * n != k:
            raise bad(f"alltoall needs ranks^2 x C chunks, got {k}")
        for c in range(k):
            s, d, i = c // (n * per), (c // per) % n, c % per
            if (coll.pre[c], coll.post[c]) != ({s}, {d}):
                raise bad(f"chunk {c} must go from rank {s} to rank {d}")
            ins[(s, c)] = ("i", d * per + i)
            outs[(d, c)] = (io, s * per + i)
        return Layout(n * per, n * per, 0 if inplace else n * per, ins, outs, inplace)
    if name in ("allreduce", "broadcast", "reduce", "custom"):
        want = {"allreduce": (everyone, everyone), "broadcast": (root, everyone),
                "reduce": (everyone, root)}.get(name)
        for c in range(k):
            if want is not None and (coll.pre[c], coll.post[c]) != want:
                raise bad(f"chunk {c} must go from ranks {sorted(want[0])} to {sorted(want[1])}")
            ins.update({(r, c): ("i", c) for r in coll.pre[c]})
            outs.update({(r, c): (io, c) for r in coll.post[c]})
        return Layout(k, k, 0 if inplace else k, ins, outs, inplace)
    raise bad("MSCCL has no buffer layout for it (lowerable: allgather, reduce_scatter, allreduce, "
              "alltoall, broadcast, reduce, gather, scatter, custom)")
