"""Mixture-of-experts routing documents (``synth.routing`` v1) and the collectives they define.

A routing says which rank hosts each expert (``experts[e]``) and, for every rank's tokens, the
experts each token is routed to (``tokens[s][i]``). Tokens are numbered globally, rank by rank:
token ``offsets[s] + i`` is rank s's token i; in a schedule one chunk is one token, of
``token_bytes`` bytes.

- ``moe_dispatch``: token t starts on its source rank and must end on every rank hosting one of
  its experts, once per rank (its *destinations*); any rank may relay.
- ``moe_combine``: each destination holds one output of the token; their sum must end on the
  source (a combining collective; partial sums may be formed anywhere).

S (the size costs are taken at) is ``buffer_chunks x token_bytes`` with ``buffer_chunks`` the most
tokens any rank has: one rank's dispatch input (combine output), as nccl-tests' alltoallv.

Everything a document says is checked, each failure one line naming the field and the token
(``tokens[2][17][3]``): wrong format or version, ``ranks`` or ``token_bytes`` not a positive
integer, an expert placed on a rank that does not exist, a token with an expert id out of range
or the same expert twice, a token with no expert.

>>> r = Routing.of(2, 64, [0, 1], [[[0, 1], [1]], [[0]]])
>>> r.tokens, r.destination_pairs()[1].tolist()
(3, [0, 1, 1, 0])
>>> sorted(r.collective("moe_combine").pre[0]), r.collective("moe_dispatch").size_bytes
([0, 1], 128)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from synth.core.collective import Collective
from synth.core.errors import CollectiveError, InputError
from synth.core.io import read_json

ROUTING_FORMAT = "synth.routing"
ROUTING_VERSION = 1
MOE_KINDS = ("moe_dispatch", "moe_combine")
MAX_TOKENS = 1 << 22  # tokens a routing may hold in all (checked before any is built)


@dataclass(frozen=True, eq=False)
class Routing:
    """A validated routing, as arrays: ``token_source[t]`` the rank token t starts on, its
    experts ``expert_ids[expert_ptr[t]:expert_ptr[t + 1]]``, ``experts[e]`` the rank of expert e."""

    ranks: int
    token_bytes: int
    experts: np.ndarray
    token_source: np.ndarray
    expert_ptr: np.ndarray
    expert_ids: np.ndarray

    @classmethod
    def of(cls, ranks: Any, token_bytes: Any, experts: Any, tokens: Any, where: str = "routing") -> "Routing":
        """A routing from its document's fields, checked (CollectiveError, one line, otherwise)."""
        _check_count(ranks, "ranks", where)
        _check_count(token_bytes, "token_bytes", where)
        placed = _expert_ranks(experts, ranks, where)
        source, lengths, flat = _token_lists(tokens, ranks, where)
        ptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        _check_experts(flat, ptr, source, len(placed), where)
        return cls(ranks, token_bytes, placed, source, ptr, flat)

    @property
    def tokens(self) -> int:
        return len(self.token_source)

    @property
    def offsets(self) -> np.ndarray:
        """First global token of every rank (length ranks + 1)."""
        counts = np.bincount(self.token_source, minlength=self.ranks)
        return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)

    @property
    def tokens_per_rank(self) -> np.ndarray:
        return np.bincount(self.token_source, minlength=self.ranks)

    def destination_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(token, rank) of every destination, once per rank, sorted by token then rank."""
        token = np.repeat(np.arange(self.tokens, dtype=np.int64), np.diff(self.expert_ptr))
        key = np.sort(token * self.ranks + self.experts[self.expert_ids])
        key = key[np.r_[True, key[1:] != key[:-1]]]
        return key // self.ranks, key % self.ranks

    def collective(self, kind: str) -> Collective:
        """The ``moe_dispatch`` or ``moe_combine`` collective of this routing (one chunk a token)."""
        token, rank = self.destination_pairs()
        starts = np.searchsorted(token, np.arange(self.tokens + 1))
        ranks = rank.tolist()
        targets = tuple(frozenset(ranks[a:b]) for a, b in zip(starts[:-1].tolist(), starts[1:].tolist()))
        sources = tuple(frozenset((s,)) for s in self.token_source.tolist())
        buffer = int(self.tokens_per_rank.max())
        if kind == "moe_dispatch":
            return Collective(kind, self.ranks, False, sources, targets, buffer, chunk_bytes=self.token_bytes)
        if kind == "moe_combine":
            return Collective(kind, self.ranks, True, targets, sources, buffer, chunk_bytes=self.token_bytes)
        raise InputError(f"unknown mixture-of-experts collective {kind!r}; known: {', '.join(MOE_KINDS)}")

    def to_doc(self) -> dict[str, Any]:
        offsets = self.offsets.tolist()
        ptr, ids = self.expert_ptr.tolist(), self.expert_ids.tolist()
        tokens = [[ids[ptr[t]:ptr[t + 1]] for t in range(offsets[s], offsets[s + 1])] for s in range(self.ranks)]
        return {"format": ROUTING_FORMAT, "version": ROUTING_VERSION, "ranks": self.ranks,
                "token_bytes": self.token_bytes, "experts": self.experts.tolist(), "tokens": tokens}


def load_routing(path: str | Path) -> Routing:
    """Read and check a ``synth.routing`` v1 file (InputError/CollectiveError: one line)."""
    doc = read_json(path)
    return routing_from_doc(doc, str(path))


def routing_from_doc(doc: Any, where: str) -> Routing:
    if not isinstance(doc, dict):
        raise InputError(f"{where}: a routing document must be a JSON object")
    version = doc.get("version")
    if doc.get("format") != ROUTING_FORMAT or type(version) is not int or version != ROUTING_VERSION:
        raise InputError(f"{where}: expected format {ROUTING_FORMAT!r} version {ROUTING_VERSION}, got format "
                         f"{doc.get('format')!r} version {version!r}")
    missing = [key for key in ("ranks", "token_bytes", "experts", "tokens") if key not in doc]
    if missing:
        raise InputError(f"{where}: missing field(s) {', '.join(missing)}")
    return Routing.of(doc["ranks"], doc["token_bytes"], doc["experts"], doc["tokens"], where)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_count(value: Any, field: str, where: str) -> None:
    if not _is_int(value) or value < 1:
        raise CollectiveError(f"{where}: {field!r} must be a positive integer, got {value!r}")


def _expert_ranks(experts: Any, ranks: int, where: str) -> np.ndarray:
    """``experts`` as an array of ranks, each in range."""
    if not isinstance(experts, list) or not experts:
        raise CollectiveError(f"{where}: 'experts' must be a non-empty list of ranks (the rank of each expert)")
    for e, rank in enumerate(experts):
        if not _is_int(rank) or not 0 <= rank < ranks:
            raise CollectiveError(f"{where}: experts[{e}]: expert {e} is placed on rank {rank!r}, "
                                  f"which does not exist (ranks 0..{ranks - 1})")
    return np.array(experts, dtype=np.int64)


def _token_lists(tokens: Any, ranks: int, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source rank per token, experts per token, every expert id in order), shapes checked."""
    if not isinstance(tokens, list) or len(tokens) != ranks:
        got = f"{len(tokens)} lists" if isinstance(tokens, list) else type(tokens).__name__
        raise CollectiveError(f"{where}: 'tokens' must be one list per rank ({ranks}), got {got}")
    lengths: list[int] = []
    for s, rank_tokens in enumerate(tokens):
        if not isinstance(rank_tokens, list):
            raise CollectiveError(f"{where}: tokens[{s}] must be a list of tokens (each a list of expert ids)")
        for i, token in enumerate(rank_tokens):
            if not isinstance(token, list) or not token:
                raise CollectiveError(f"{where}: tokens[{s}][{i}]: a token must be a non-empty list of expert ids")
        lengths.extend(map(len, rank_tokens))
        if len(lengths) > MAX_TOKENS:
            raise CollectiveError(f"{where}: more than {MAX_TOKENS} tokens")
    if not lengths:
        raise CollectiveError(f"{where}: 'tokens' holds no token")
    counts = [len(rank_tokens) for rank_tokens in tokens]
    source = np.repeat(np.arange(ranks, dtype=np.int64), counts)
    flat = [e for rank_tokens in tokens for token in rank_tokens for e in token]
    if not all(map(_is_int, flat)):
        at = next(k for k, e in enumerate(flat) if not _is_int(e))
        raise CollectiveError(f"{where}: {_place(at, lengths, source, counts)}: expert ids are integers, "
                              f"got {flat[at]!r}")
    return source, np.array(lengths, dtype=np.int64), np.array(flat, dtype=np.int64)


def _check_experts(flat: np.ndarray, ptr: np.ndarray, source: np.ndarray, experts: int, where: str) -> None:
    """Every expert id in range and listed once per token."""
    lengths = np.diff(ptr)
    counts = np.bincount(source, minlength=int(source.max()) + 1).tolist()
    bad = np.flatnonzero((flat < 0) | (flat >= experts))
    if len(bad):
        at = int(bad[0])
        raise CollectiveError(f"{where}: {_place(at, lengths.tolist(), source, counts)}: expert id {int(flat[at])} "
                              f"out of range 0..{experts - 1}")
    token = np.repeat(np.arange(len(lengths)), lengths)
    order = np.lexsort((flat, token))
    twice = np.flatnonzero((token[order][1:] == token[order][:-1]) & (flat[order][1:] == flat[order][:-1]))
    if len(twice):
        at = int(order[twice[0] + 1])
        raise CollectiveError(f"{where}: {_place(at, lengths.tolist(), source, counts)}: expert {int(flat[at])} "
                              f"listed twice for one token")


def _place(at: int, lengths: list[int], source: np.ndarray, counts: list[int]) -> str:
    """``tokens[s][i][k]`` of the ``at``-th expert id in document order."""
    ptr = np.cumsum(lengths)
    token = int(np.searchsorted(ptr, at, side="right"))
    rank = int(source[token])
    first = int(np.sum(counts[:rank]))
    k = at - (int(ptr[token - 1]) if token else 0)
    return f"tokens[{rank}][{token - first}][{k}]"


def routing_of_spec(spec: str) -> Routing:
    """The routing behind ``moe_dispatch:FILE`` / ``moe_combine:FILE`` (read once per file
    version: commands build the collective from its name many times)."""
    kind, _, path = spec.partition(":")
    if kind not in MOE_KINDS or not path:
        names = " or ".join(f"{k}:FILE" for k in MOE_KINDS)
        raise InputError(f"{spec!r} is not a mixture-of-experts collective ({names})")
    return _cached_routing(*_file_version(Path(path)))


def moe_collective(kind: str, path: Path, ranks: int | None = None) -> Collective:
    """The collective of ``kind`` for the routing file at ``path``; with ``ranks``, CollectiveError
    unless the routing is for that many ranks."""
    routing = _cached_routing(*_file_version(path))
    if ranks is not None and routing.ranks != ranks:
        raise CollectiveError(f"{path}: 'ranks' is {routing.ranks} but the topology has {ranks} ranks")
    return _cached_collective(kind, *_file_version(path))


def is_moe(spec: str) -> bool:
    """Whether a collective spec names a mixture-of-experts collective."""
    return isinstance(spec, str) and spec.partition(":")[0] in MOE_KINDS


def _file_version(path: Path) -> tuple[str, int, int]:
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return str(path), stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=4)
def _cached_routing(path: str, mtime_ns: int, size: int) -> Routing:
    return load_routing(path)


@lru_cache(maxsize=4)
def _cached_collective(kind: str, path: str, mtime_ns: int, size: int) -> Collective:
    return _cached_routing(path, mtime_ns, size).collective(kind)
