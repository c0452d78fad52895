"""Builders for the standard collectives, plus alltoallv (traffic matrix) and custom files.

Chunk numbering (C = chunks per rank, n = ranks):
- allgather / gather: chunk r*C+i starts on rank r;  reduce_scatter / scatter: chunk r*C+i ends on r;
- allreduce: n*C chunks, each reduced over all ranks;  broadcast / reduce: C chunks;
- alltoall: chunk (s*n + d)*C + i goes from s to d;   alltoallv: the matrix's chunks, row-major;
- moe_dispatch / moe_combine: one chunk per token of the routing file (synth.core.routing).

>>> make_collective("broadcast", 4, root=2).pre[0]
frozenset({2})
>>> sorted(make_collective("reduce_scatter", 4).post[1])
[1]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

from synth.core.collective import Collective
from synth.core.errors import CollectiveError, InputError
from synth.core.io import read_json

COLLECTIVE_FORMAT = "synth.collective"
TRAFFIC_FORMAT = "synth.traffic"
MAX_TRAFFIC_CHUNKS = 1 << 20  # chunks an alltoallv matrix may move in all


def allgather(n: int, chunks: int = 1) -> Collective:
    everyone = frozenset(range(n))
    pre = tuple(frozenset({c // chunks}) for c in range(n * chunks))
    return Collective("allgather", n, False, pre, (everyone,) * (n * chunks), n * chunks, None, chunks)


def reduce_scatter(n: int, chunks: int = 1) -> Collective:
    everyone = frozenset(range(n))
    post = tuple(frozenset({c // chunks}) for c in range(n * chunks))
    return Collective("reduce_scatter", n, True, (everyone,) * (n * chunks), post, n * chunks, None, chunks)


def allreduce(n: int, chunks: int = 1) -> Collective:
    everyone = frozenset(range(n))
    total = n * chunks
    return Collective("allreduce", n, True, (everyone,) * total, (everyone,) * total, total, None, chunks)


def alltoall(n: int, chunks: int = 1) -> Collective:
    pre, post = [], []
    for src in range(n):
        for dst in range(n):
            for _ in range(chunks):
                pre.append(frozenset({src}))
                post.append(frozenset({dst}))
    return Collective("alltoall", n, False, tuple(pre), tuple(post), n * chunks, None, chunks)


def broadcast(n: int, root: int = 0, chunks: int = 1) -> Collective:
    _check_root(n, root)
    everyone = frozenset(range(n))
    return Collective("broadcast", n, False, (frozenset({root}),) * chunks, (everyone,) * chunks, chunks, root, chunks)


def reduce(n: int, root: int = 0, chunks: int = 1) -> Collective:
    _check_root(n, root)
    everyone = frozenset(range(n))
    return Collective("reduce", n, True, (everyone,) * chunks, (frozenset({root}),) * chunks, chunks, root, chunks)


def gather(n: int, root: int = 0, chunks: int = 1) -> Collective:
    _check_root(n, root)
    pre = tuple(frozenset({c // chunks}) for c in range(n * chunks))
    return Collective("gather", n, False, pre, (frozenset({root}),) * (n * chunks), n * chunks, root, chunks)


def scatter(n: int, root: int = 0, chunks: int = 1) -> Collective:
    _check_root(n, root)
    post = tuple(frozenset({c // chunks}) for c in range(n * chunks))
    return Collective("scatter", n, False, (frozenset({root}),) * (n * chunks), post, n * chunks, root, chunks)


def alltoallv(matrix: list[list[int]], where: str = "alltoallv") -> Collective:
    """Alltoall with per-pair chunk counts: ``matrix[s][d]`` chunks go from s to d.

    S (nccl-tests size) is the largest rank's send buffer, so one chunk is S / max row sum.
    At most MAX_TRAFFIC_CHUNKS chunks in all (checked before any is built).
    """
    n = len(matrix)
    if n == 0 or any(not isinstance(row, list) or len(row) != n for row in matrix):
        raise CollectiveError(f"{where}: the traffic matrix must be square (n rows of n counts)")
    for src, row in enumerate(matrix):
        for dst, count in enumerate(row):
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise CollectiveError(
                    f"{where}: matrix[{src}][{dst}] must be a non-negative integer chunk count, got {count!r}"
                )
    total = sum(map(sum, matrix))
    if total == 0:
        raise CollectiveError(f"{where}: the traffic matrix moves no data (all counts are 0)")
    if total > MAX_TRAFFIC_CHUNKS:
        raise CollectiveError(f"{where}: the traffic matrix moves {total} chunks; at most {MAX_TRAFFIC_CHUNKS}")
    pre, post = [], []
    for src, row in enumerate(matrix):
        for dst, count in enumerate(row):
            pre += [frozenset({src})] * count
            post += [frozenset({dst})] * count
    buffer = max(sum(row) for row in matrix)
    return Collective("alltoallv", n, False, tuple(pre), tuple(post), buffer)


def _check_root(n: int, root: int) -> None:
    if not isinstance(root, int) or not 0 <= root < n:
        raise CollectiveError(f"root {root} out of range 0..{n - 1}")


def _all_but_one(n: int) -> float:
    return (n - 1) / n


def _twice_all_but_one(n: int) -> float:
    return 2 * (n - 1) / n


def _one(n: int) -> float:
    return 1.0


@dataclass(frozen=True)
class CollectiveKind:
    """One kind of collective and every fact about it: how to build it (``builder``; None: from a
    file), whether it has a root, whether it reduces, nccl-tests' busbw factor on n ranks, and
    how runtimes spell it where they differ from ``name`` (``runtime_names``: runtime -> spelling).

    >>> KINDS["reduce_scatter"].spelled_for("rccl"), KINDS["reduce_scatter"].busbw(8)
    ('reducescatter', 0.875)
    """

    name: str
    builder: Callable[..., Collective] | None
    rooted: bool
    description: str
    combining: bool
    busbw: Callable[[int], float]
    runtime_names: Mapping[str, str] = field(default_factory=dict)

    def spelled_for(self, runtime: str) -> str:
        return self.runtime_names.get(runtime, self.name)


FILE_KINDS = {
    "alltoallv": "alltoallv:FILE - per-pair chunk counts from a traffic matrix (MoE dispatch)",
    "custom": "custom:FILE - explicit pre/post from a synth.collective JSON file",
    "moe_dispatch": "moe_dispatch:FILE - every token to the ranks of its experts (a synth.routing JSON file)",
    "moe_combine": "moe_combine:FILE - the experts' outputs of every token, summed, back to its rank (synth.routing)",
}
_REDUCESCATTER = MappingProxyType({"executor": "reducescatter", "rccl": "reducescatter",  # MSCCL's runtimes
                                   "nccl-tuner": "reducescatter", "nccl-env": "reducescatter"})  # NCCL's tuning
_NCCL_TESTS = "nccl-tests"  # its binaries are called SPELLING_perf
REGISTRY: dict[str, CollectiveKind] = {  # the kinds built from a name
    kind.name: kind
    for kind in (
        CollectiveKind("allgather", allgather, False, "every rank's chunks end on every rank", False, _all_but_one,
                       MappingProxyType({_NCCL_TESTS: "all_gather"})),
        CollectiveKind("reduce_scatter", reduce_scatter, False, "chunk r*C+i, reduced over all ranks, ends on rank r",
                       True, _all_but_one, _REDUCESCATTER),
        CollectiveKind("allreduce", allreduce, False, "every chunk reduced over all ranks, on every rank", True,
                       _twice_all_but_one, MappingProxyType({_NCCL_TESTS: "all_reduce"})),
        CollectiveKind("alltoall", alltoall, False, "chunk (s,d) goes from rank s to rank d", False, _all_but_one),
        CollectiveKind("broadcast", broadcast, True, "the root's chunks end on every rank", False, _one),
        CollectiveKind("reduce", reduce, True, "every chunk reduced over all ranks, on the root", True, _one),
        CollectiveKind("gather", gather, True, "every rank's chunks end on the root", False, _all_but_one),
        CollectiveKind("scatter", scatter, True, "the root's chunk r*C+i ends on rank r", False, _all_but_one),
    )
}
KINDS: dict[str, CollectiveKind] = {  # every kind with facts: the named ones and alltoallv from a file
    **REGISTRY,
    "alltoallv": CollectiveKind("alltoallv", None, False, FILE_KINDS["alltoallv"], False, _all_but_one),
    "moe_dispatch": CollectiveKind("moe_dispatch", None, False, FILE_KINDS["moe_dispatch"], False, _one),
    "moe_combine": CollectiveKind("moe_combine", None, False, FILE_KINDS["moe_combine"], True, _one),
}


def kind_of(name: str) -> CollectiveKind | None:
    """The kind called ``name`` (None: a custom collective, which has no facts beyond its file)."""
    return KINDS.get(name)


def known_names() -> list[str]:
    return sorted(REGISTRY) + sorted(FILE_KINDS)


def make_collective(spec: str, ranks: int, root: int | None = None, chunks: int = 1) -> Collective:
    """Build a collective from a name (``allgather``), ``alltoallv:FILE``, ``custom:FILE`` or a path."""
    if not isinstance(chunks, int) or chunks < 1:
        raise CollectiveError(f"chunks per rank must be a positive integer, got {chunks!r}")
    kind, _, path = spec.partition(":")
    if kind in FILE_KINDS and path:
        return _from_file(kind, Path(path), ranks)
    if spec.endswith(".json") and Path(spec).exists():
        return _from_file("custom", Path(spec), ranks)
    if spec in FILE_KINDS:
        raise InputError(f"{spec} needs a file: {FILE_KINDS[spec]}")
    entry = REGISTRY.get(spec)
    if entry is None:
        raise InputError(f"unknown collective {spec!r}; known: {', '.join(known_names())}")
    if entry.rooted:
        return entry.builder(ranks, 0 if root is None else root, chunks)
    if root is not None:
        raise InputError(f"{spec} has no root; --root applies to "
                         f"{', '.join(n for n, k in REGISTRY.items() if k.rooted)}")
    return entry.builder(ranks, chunks)


def _from_file(kind: str, path: Path, ranks: int) -> Collective:
    """The collective of an alltoallv traffic file, a routing or a custom collective file, for
    ``ranks`` ranks."""
    if kind in ("moe_dispatch", "moe_combine"):
        from synth.core.routing import moe_collective

        return moe_collective(kind, path, ranks)
    coll = alltoallv(_load_matrix(path), where=str(path)) if kind == "alltoallv" else load_custom(path)
    if coll.ranks != ranks:
        raise CollectiveError(f"{path}: {coll.name} is for {coll.ranks} ranks but the topology has {ranks}")
    return coll


def _load_matrix(path: Path) -> list[list[int]]:
    """A traffic matrix: a JSON list of rows, or {"format": "synth.traffic", "version": 1, "chunks": rows}."""
    doc = read_json(path)
    if isinstance(doc, dict):
        _check_header(doc, TRAFFIC_FORMAT, path)
        doc = doc.get("chunks")
    if not isinstance(doc, list):
        raise InputError(f"{path}: a traffic matrix must be a list of rows of chunk counts")
    return doc


def _check_header(doc: dict, fmt: str, path: Path) -> None:
    """InputError unless ``doc`` says it is ``fmt`` version 1 (the integer 1: not true, 1.0 or "1")."""
    version = doc.get("version")
    if doc.get("format") != fmt or type(version) is not int or version != 1:
        raise InputError(f"{path}: expected format {fmt!r} version 1, got format {doc.get('format')!r} "
                         f"version {version!r}")


def load_custom(path: Path) -> Collective:
    doc = read_json(path)
    if isinstance(doc, dict) and "format" in doc:
        _check_header(doc, COLLECTIVE_FORMAT, path)
    return Collective.from_dict(doc, where=str(path))
