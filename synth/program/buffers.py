"""The buffers a replay works on, and what they must hold at the end (synth.program.replay).

``Layout``: each rank's real buffer sizes for the collective (msccl-format.md section 3: input
N/ngpus chunks for allgather, output N/ngpus for reduce-scatter, gather output / scatter input
n x N (their size multiplier is 1: N cuts one rank's share), N otherwise) and MSCCL's in-place
aliasing (in-place allgather input = output chunks rank*N/ngpus..; in-place reduce-scatter output
= input chunks rank*N/ngpus..; otherwise input is output). Values are sets of contributions
``rank * stride + input chunk``; ``postcondition`` says which final chunks differ from what the
collective promises.

>>> from synth.program.ir import Program, RankProgram
>>> p = Program("ag", "allgather", 2, "LL", 2, True, False, 1,
...             (RankProgram(0, 0, 2, 0, ()), RankProgram(1, 0, 2, 0, ())))
>>> Layout(p, 1, inplace=True).view["i"]
('o', 1, 1)
"""

from __future__ import annotations

from functools import partial

from synth.program.ir import Program

JUDGED = ("allreduce", "reduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "gather", "scatter")
ROOTED = ("reduce", "broadcast", "gather", "scatter")


class Bad:
    """A chunk value that is already wrong (garbage read, double count); ``why`` says how."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why


class Layout:
    """Real buffer sizes and in-place aliasing: letter -> (buffer name, base offset, size)."""

    def __init__(self, program: Program, rank: int, inplace: bool):
        n, big = program.ranks, program.chunks_per_loop
        g = program.gpus[rank]
        coll = program.collective
        split = big // n if n and big % n == 0 else None
        if coll in ("gather", "scatter") and big > 0:
            # size multiplier 1 (executor msccl_parser): nchunksperloop cuts ONE rank's share
            ins = big if coll == "gather" else n * big
            outs = n * big if coll == "gather" else big
        elif coll in JUDGED and big > 0 and (split or coll not in ("allgather", "reduce_scatter")):
            ins = split if coll == "allgather" else big
            outs = split if coll == "reduce_scatter" else big
        else:
            ins, outs = max(g.input_chunks, 0), max(g.output_chunks, 0)
        self.input_size, self.output_size = ins, outs
        scratch = ("s", 0, max(g.scratch_chunks, 0))
        if not inplace:
            self.view = {"i": ("i", 0, ins), "o": ("o", 0, outs), "s": scratch}
            self.sizes = {"i": ins, "o": outs, "s": scratch[2]}
        elif coll in ("allgather", "gather"):
            self.view = {"i": ("o", rank * ins, ins), "o": ("o", 0, outs), "s": scratch}
            self.sizes = {"o": outs, "s": scratch[2]}
        elif coll in ("reduce_scatter", "scatter"):
            self.view = {"i": ("i", 0, ins), "o": ("i", rank * outs, outs), "s": scratch}
            self.sizes = {"i": ins, "s": scratch[2]}
        else:
            size = max(ins, outs)
            self.view = {"i": ("i", 0, size), "o": ("i", 0, size), "s": scratch}
            self.sizes = {"i": size, "s": scratch[2]}
        for name, base, size in self.view.values():  # a backing buffer holds every view of it
            self.sizes[name] = max(self.sizes[name], base + size)


def initial_buffers(layout: Layout, rank: int, stride: int) -> dict[str, list]:
    """Backing buffers of one rank: input chunk k holds {rank * stride + k}; the rest is unwritten (None)."""
    buffers = {name: [None] * size for name, size in layout.sizes.items()}
    name, base, size = layout.view["i"]
    for k in range(size):
        buffers[name][base + k] = frozenset((rank * stride + k,))
    return buffers


def _expected(program: Program, layout_of, stride: int):
    """(rank, buffer name, base, chunk count, function chunk -> expected set) per checked region, or None."""
    coll, n, big = program.collective, program.ranks, program.chunks_per_loop
    everyone = range(n)
    regions = []
    summed: dict[int, frozenset] = {}

    def total(k: int) -> frozenset:  # every rank's contribution to input chunk k (shared by all ranks)
        if k not in summed:
            summed[k] = frozenset(q * stride + k for q in everyone)
        return summed[k]

    for r in everyone:
        layout = layout_of(r)
        name, base, size = layout.view["o"]
        if coll in ("allreduce", "reduce"):
            f = total
        elif coll in ("allgather", "gather"):
            f = partial(_want_gathered, block=layout.input_size, stride=stride)
        elif coll in ("reduce_scatter",):
            f = partial(_want_reduced, total=total, offset=r * size)
        elif coll == "alltoall":
            f = partial(_want_exchanged, rank=r, block=big // n if n else 0, stride=stride)
        elif coll == "broadcast":
            f = partial(_want_broadcast, stride=stride)
        elif coll == "scatter":
            f = partial(_want_scattered, rank=r, size=size, stride=stride)
        else:
            return None
        regions.append((r, name, base, size, f))
    return regions


def _want_gathered(k: int, block: int, stride: int) -> frozenset:
    """Output chunk k of an allgather: input chunk k % block of rank k // block."""
    return frozenset((k // block * stride + k % block,))


def _want_reduced(k: int, total, offset: int) -> frozenset:
    """Output chunk k of a reduce-scatter: every rank's input chunk offset + k."""
    return total(offset + k)


def _want_exchanged(k: int, rank: int, block: int, stride: int) -> frozenset:
    """Output chunk k of an alltoall on ``rank``: block k // block's sender's chunk for ``rank``."""
    return frozenset(((k // block) * stride + rank * block + k % block,))


def _want_broadcast(k: int, root: int, stride: int) -> frozenset:
    """Output chunk k of a broadcast: the root's input chunk k."""
    return frozenset((root * stride + k,))


def _want_scattered(k: int, root: int, rank: int, size: int, stride: int) -> frozenset:
    """Output chunk k of a scatter on ``rank``: the root's input chunk rank * size + k."""
    return frozenset((root * stride + rank * size + k,))


def postcondition(program: Program, layouts: list[Layout], buffers: list[dict], stride: int) -> list[str]:
    """Why the final buffers are not what the collective promises (empty list = correct)."""
    regions = _expected(program, lambda r: layouts[r], stride)
    coll = program.collective

    def mismatches(r, name, base, size, f, root=None) -> list[str]:
        out = []
        for k in range(size):
            got = buffers[r][name][base + k]
            want = f(k) if root is None else f(k, root)
            if got != want:
                out.append(f"rank {r} output chunk {k}: {_describe(got, want, stride)}")
        return out

    if coll in ROOTED:
        roots = range(program.ranks)
        if coll in ("reduce", "gather"):  # only the root's output is defined; some rank must be the root
            for r, name, base, size, f in regions:
                if not mismatches(r, name, base, size, f):
                    return []
            return [f"no rank ends with the {coll} result; rank 0: "
                    + "; ".join(mismatches(*regions[0])[:2])] if regions else []
        for root in roots:  # broadcast / scatter: every rank gets the root's data
            bad = [m for r, name, base, size, f in regions for m in mismatches(r, name, base, size, f, root)]
            if not bad:
                return []
        return [f"no root makes the outputs a {coll}; with root 0: " + "; ".join(
            [m for reg in regions for m in mismatches(*reg, 0)][:2])]
    return [m for reg in regions for m in mismatches(*reg)]


def _describe(got, want, stride) -> str:
    if got is None:
        return "never written"
    if isinstance(got, Bad):
        return got.why
    missing, extra = sorted(want - got), sorted(got - want)

    def show(xs: list[int]) -> str:
        return ", ".join(f"r{x // stride}c{x % stride}" for x in xs[:4]) + (" ..." if len(xs) > 4 else "")

    parts = ([f"missing {show(missing)}"] if missing else []) + ([f"unexpected {show(extra)}"] if extra else [])
    return "; ".join(parts)
