"""Collective: per-chunk pre/post rank sets and a combining flag.

``pre[c]`` are the ranks holding chunk c at the start (combining: each holds its own
contribution); ``post[c]`` the ranks that must hold it at the end (combining: fully reduced).
``buffer_chunks`` is how many chunks make up the nccl-tests size S of the collective.
``chunk_bytes`` fixes the bytes of one chunk where the collective itself says it (a mixture-of-
experts routing: one chunk is one token); S is then ``buffer_chunks x chunk_bytes`` (``size_bytes``).

>>> from synth.core.collectives import allgather
>>> ag = allgather(4)
>>> ag.chunks, ag.buffer_chunks, sorted(ag.post[0])
(4, 4, [0, 1, 2, 3])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synth.core.errors import CollectiveError
from synth.core.topology import MAX_RANKS


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _all_ints(values: list) -> bool:
    """``all(map(_is_int, values))``, with the types of a long list collected in C first."""
    return set(map(type, values)) <= {int} or all(map(_is_int, values))


def busbw_factor(name: str, ranks: int) -> float:
    """nccl-tests busbw factor of collective ``name`` on ``ranks`` ranks (1.0 where it names none).

    >>> busbw_factor("allreduce", 8), busbw_factor("broadcast", 8)
    (1.75, 1.0)
    """
    from synth.core.collectives import kind_of  # the facts live on the collective kinds

    kind = kind_of(name)
    return 1.0 if kind is None else kind.busbw(ranks)


@dataclass(frozen=True)
class Collective:
    """What a collective must achieve; validated on construction."""

    name: str
    ranks: int
    combining: bool
    pre: tuple[frozenset[int], ...]
    post: tuple[frozenset[int], ...]
    buffer_chunks: int
    root: int | None = None
    chunks_per_rank: int = 1
    chunk_bytes: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "pre", tuple(frozenset(p) for p in self.pre))
        object.__setattr__(self, "post", tuple(frozenset(p) for p in self.post))
        where = f"collective {self.name!r}"
        if not _is_int(self.ranks) or self.ranks < 1:
            raise CollectiveError(f"{where}: 'ranks' must be a positive integer, got {self.ranks!r}")
        if self.ranks > MAX_RANKS:
            raise CollectiveError(f"{where}: 'ranks' is {self.ranks}; synth handles at most {MAX_RANKS} ranks")
        if len(self.pre) != len(self.post):
            raise CollectiveError(
                f"{where}: 'pre' has {len(self.pre)} chunks but 'post' has {len(self.post)}"
            )
        if not self.pre:
            raise CollectiveError(f"{where}: has no chunks")
        if not all(self.pre):
            c = next(c for c, pre in enumerate(self.pre) if not pre)
            raise CollectiveError(f"{where}: chunk {c} is held by no rank at the start")
        if not all(self.post):
            c = next(c for c, post in enumerate(self.post) if not post)
            raise CollectiveError(f"{where}: chunk {c} is needed by no rank at the end")
        named = set().union(*self.pre, *self.post)  # every rank named, checked once
        bad = [rank for rank in named if not _is_int(rank) or not 0 <= rank < self.ranks]
        if bad:
            c = next(c for c, sets in enumerate(zip(self.pre, self.post)) if not sets[0].union(sets[1]).isdisjoint(bad))
            rank = next(r for r in sorted(self.pre[c] | self.post[c], key=repr) if r in bad)
            raise CollectiveError(f"{where}: chunk {c} names rank {rank!r}, out of range 0..{self.ranks - 1}")
        if not _is_int(self.buffer_chunks) or self.buffer_chunks < 1:
            raise CollectiveError(f"{where}: 'buffer_chunks' must be a positive integer")
        if self.root is not None and (not _is_int(self.root) or not 0 <= self.root < self.ranks):
            raise CollectiveError(f"{where}: root {self.root!r} out of range 0..{self.ranks - 1}")
        if not _is_int(self.chunks_per_rank) or self.chunks_per_rank < 1:
            raise CollectiveError(f"{where}: chunks per rank must be an integer >= 1, got {self.chunks_per_rank!r}")
        if self.chunk_bytes is not None and (not _is_int(self.chunk_bytes) or self.chunk_bytes < 1):
            raise CollectiveError(f"{where}: 'chunk_bytes' must be a positive integer, got {self.chunk_bytes!r}")

    @property
    def chunks(self) -> int:
        return len(self.pre)

    @property
    def size_bytes(self) -> int | None:
        """The size S the collective fixes (``chunk_bytes`` given), else None: any size."""
        return None if self.chunk_bytes is None else self.chunk_bytes * self.buffer_chunks

    @property
    def busbw_factor(self) -> float:
        """nccl-tests busbw factor (1.0 for collectives nccl-tests does not name)."""
        return busbw_factor(self.name, self.ranks)

    def unreachable(self, topology) -> list[tuple[int, int]]:
        """(chunk, rank) pairs whose postcondition no path in the topology can satisfy."""
        import numpy as np

        reach = np.isfinite(np.array(topology.hop_distances, dtype=float))
        verdicts: dict[tuple[frozenset[int], frozenset[int]], list[int]] = {}
        bad = []
        for c, key in enumerate(zip(self.pre, self.post)):
            if key not in verdicts:  # chunks alike in pre and post (a class) share one verdict
                pre, post = key
                targets = sorted(post)
                rows = reach[np.ix_(sorted(pre), targets)]
                ok = rows.all(axis=0) if self.combining else rows.any(axis=0)
                verdicts[key] = [r for r, fine in zip(targets, ok.tolist()) if not fine]
            bad.extend((c, rank) for rank in verdicts[key])
        return bad

    def check_on(self, topology) -> None:
        """Raise CollectiveError when the collective cannot run on the topology."""
        if topology.ranks != self.ranks:
            raise CollectiveError(
                f"collective {self.name!r} has {self.ranks} ranks but topology "
                f"{topology.name!r} has {topology.ranks}"
            )
        bad = self.unreachable(topology)
        if bad:
            ranks = sorted({rank for _, rank in bad})
            chunks = sorted({c for c, _ in bad})
            shown = ", ".join(map(str, ranks[:16])) + (" ..." if len(ranks) > 16 else "")
            raise CollectiveError(
                f"{self.name} is impossible on {topology.name}: ranks {shown} cannot be reached "
                f"from the holders of {len(chunks)} chunk(s) (first: chunk {chunks[0]})"
            )

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "ranks": self.ranks,
            "combining": self.combining,
            "buffer_chunks": self.buffer_chunks,
            "pre": [sorted(p) for p in self.pre],
            "post": [sorted(p) for p in self.post],
        }
        if self.root is not None:
            doc["root"] = self.root
        if self.chunks_per_rank != 1:
            doc["chunks_per_rank"] = self.chunks_per_rank
        if self.chunk_bytes is not None:
            doc["chunk_bytes"] = self.chunk_bytes
        return doc

    @classmethod
    def from_dict(cls, doc: Any, where: str = "collective") -> "Collective":
        if not isinstance(doc, dict):
            raise CollectiveError(f"{where}: expected a JSON object")
        missing = [k for k in ("name", "ranks", "pre", "post") if k not in doc]
        if missing:
            raise CollectiveError(f"{where}: missing field(s) {', '.join(missing)}")
        for key in ("pre", "post"):
            value = doc[key]
            if not isinstance(value, list) or not all(isinstance(v, list) and _all_ints(v) for v in value):
                raise CollectiveError(f"{where}: {key!r} must be a list of lists of rank numbers")
        combining = doc.get("combining", False)
        if not isinstance(combining, bool):
            raise CollectiveError(f"{where}: 'combining' must be true or false")
        name = str(doc["name"])
        try:
            return cls(
                name=name,
                ranks=doc["ranks"],
                combining=combining,
                pre=tuple(frozenset(p) for p in doc["pre"]),
                post=tuple(frozenset(p) for p in doc["post"]),
                buffer_chunks=doc.get("buffer_chunks", len(doc["pre"])),
                root=doc.get("root"),
                chunks_per_rank=doc.get("chunks_per_rank", 1),
                chunk_bytes=doc.get("chunk_bytes"),
            )
        except CollectiveError as exc:  # name the file, not just the collective
            detail = str(exc).removeprefix(f"collective {name!r}: ")
            raise CollectiveError(f"{where}: {detail}") from None
