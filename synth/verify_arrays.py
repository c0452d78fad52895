"""The verifier's replay over numpy arrays: is a schedule valid? Fast at millions of sends.

``verify`` (synth.verify) replays send by send in Python dictionaries: exact messages, about
7 us a send. For big schedules it asks this module first: the same rules (DESIGN.md; the kinds
synth.verify names), checked a step at a time over arrays of the step's sends, give a yes/no.
A "no" sends ``verify`` back to its own replay for the full list of violations, so every
message still comes from one place; a "yes" skips it.

State: which ranks hold which chunks ([rank, chunk] booleans) and, for combining collectives,
the contributions each holds as a bit set over ranks ([rank, chunk, word] uint64).

>>> from synth.core.collectives import allgather
>>> from synth.core.schedule import Schedule, Send, Step
>>> from synth.core.topology import Link, Topology
>>> t = Topology("pair", 2, (Link(0, 1, 25.0), Link(1, 0, 25.0)))
>>> is_valid(Schedule(t, allgather(2), (Step((Send(0, 0, 1), Send(1, 1, 0))),)))
True
>>> is_valid(Schedule(t, allgather(2), (Step((Send(0, 0, 1), Send(0, 1, 0))),)))  # 1 lacks chunk 0
False
"""

from __future__ import annotations

import numpy as np

from synth.core.schedule import Schedule


def is_valid(schedule: Schedule) -> bool | None:
    """True exactly when ``synth.verify.verify(schedule)`` finds nothing; None when a send's
    ``op`` is neither ``copy`` nor ``reduce`` (the replay decides those)."""
    topo, coll = schedule.topology, schedule.collective
    n, chunks = topo.ranks, coll.chunks
    if n != coll.ranks:
        return False
    tables = _Tables.of(schedule)
    held = np.zeros((n, chunks), dtype=bool)
    ranks, cols = _pairs(coll.pre)
    held[ranks, cols] = True
    words = (n + 63) // 64
    mask = None
    if coll.combining:
        mask = np.zeros((n, chunks, words), dtype=np.uint64)
        np.bitwise_or.at(mask, (ranks, cols, ranks // 64), np.left_shift(np.uint64(1), (ranks % 64).astype(np.uint64)))
    for step in schedule.steps:
        rounds = step.rounds
        if rounds is not None and (not isinstance(rounds, int) or rounds < 1):
            return False
        count = len(step.sends)
        if not count:
            continue
        chunk = np.fromiter((s.chunk for s in step.sends), dtype=np.int64, count=count)
        src = np.fromiter((s.src for s in step.sends), dtype=np.int64, count=count)
        dst = np.fromiter((s.dst for s in step.sends), dtype=np.int64, count=count)
        reduce = np.fromiter((s.op == "reduce" for s in step.sends), dtype=bool, count=count)
        if not reduce.all() and not all(s.op == "copy" for s in step.sends if s.op != "reduce"):
            return None
        if ((src < 0) | (src >= n) | (dst < 0) | (dst >= n) | (chunk < 0) | (chunk >= chunks)).any():
            return False
        link = tables.link_id[src * n + dst]
        if (src == dst).any() or (link < 0).any():
            return False
        if reduce.any() and not coll.combining:
            return False
        if not held[src, chunk].all():
            return False
        if rounds is not None and not tables.fits(link, rounds):
            return False
        key = dst * chunks + chunk
        order = np.argsort(key, kind="stable")
        key_sorted = key[order]
        first = np.concatenate(([True], key_sorted[1:] != key_sorted[:-1]))
        starts = np.flatnonzero(first)
        sizes = np.diff(np.append(starts, count))
        shared = np.repeat(sizes > 1, sizes)
        if (shared & ~reduce[order]).any():
            return False  # a (rank, chunk) written twice, not all by reduce
        if mask is not None:
            partial = mask[src[order], chunk[order]]  # [sends, words], read before any write lands
            place_dst, place_chunk = dst[order][starts], chunk[order][starts]
            is_copy = ~reduce[order][starts]  # a copy is alone at its place (checked above)
            base = np.where((held[place_dst, place_chunk] & ~is_copy)[:, None],
                            mask[place_dst, place_chunk], np.uint64(0))
            merged = np.bitwise_or.reduceat(partial, starts, axis=0)
            summed = np.add.reduceat(_popcount(partial), starts) + _popcount(base)
            if (summed != _popcount(merged | base)).any():
                return False  # a reduce adds a contribution the destination already has
            mask[place_dst, place_chunk] = merged | base
        held[dst, chunk] = True
    ranks, cols = _pairs(coll.post)
    if not held[ranks, cols].all():
        return False
    if mask is not None:
        want = np.zeros((chunks, words), dtype=np.uint64)
        pre_ranks, pre_cols = _pairs(coll.pre)
        np.bitwise_or.at(want, (pre_cols, pre_ranks // 64),
                         np.left_shift(np.uint64(1), (pre_ranks % 64).astype(np.uint64)))
        if not (mask[ranks, cols] == want[cols]).all():
            return False
    return True


def _pairs(sets) -> tuple[np.ndarray, np.ndarray]:
    """(rank, chunk) index arrays of every member of every chunk's rank set."""
    sizes = np.fromiter((len(s) for s in sets), dtype=np.int64, count=len(sets))
    ranks = np.fromiter((r for s in sets for r in s), dtype=np.int64, count=int(sizes.sum()))
    return ranks, np.repeat(np.arange(len(sets)), sizes)


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits per row of a [rows, words] uint64 array."""
    as_bytes = np.ascontiguousarray(words).view(np.uint8).reshape(words.shape[0], -1)
    return np.unpackbits(as_bytes, axis=1).sum(axis=1, dtype=np.int64)


class _Tables:
    """Link lookup and capacities as arrays (links numbered as in the topology; groups after)."""

    def __init__(self, link_id, link_cap, group_ptr, group_of, group_cap):
        self.link_id, self.link_cap = link_id, link_cap
        self.group_ptr, self.group_of, self.group_cap = group_ptr, group_of, group_cap

    @classmethod
    def of(cls, schedule: Schedule) -> "_Tables":
        topo = schedule.topology
        n = topo.ranks
        link_id = np.full(n * n, -1, dtype=np.int64)
        for i, link in enumerate(topo.links):
            link_id[link.src * n + link.dst] = i
        caps = [topo.link_capacity(link) for link in topo.links]
        link_cap = np.array([np.inf if c is None else c for c in caps], dtype=float)
        members: list[list[int]] = [[] for _ in topo.links]
        for g, group in enumerate(topo.groups):
            for a, b in group.links:
                if 0 <= a < n and 0 <= b < n and link_id[a * n + b] >= 0:
                    members[int(link_id[a * n + b])].append(g)
        sizes = np.array([len(m) for m in members], dtype=np.int64)
        group_ptr = np.concatenate(([0], np.cumsum(sizes)))
        group_of = np.array([g for m in members for g in m], dtype=np.int64)
        gcaps = [topo.group_capacity(group) for group in topo.groups]
        group_cap = np.array([np.inf if c is None else c for c in gcaps], dtype=float)
        return cls(link_id, link_cap, group_ptr, group_of, group_cap)

    def fits(self, link: np.ndarray, rounds: int) -> bool:
        """Every link and group carries at most capacity x rounds chunks."""
        used, count = np.unique(link, return_counts=True)
        if (count > self.link_cap[used] * rounds).any():
            return False
        if not len(self.group_cap):
            return True
        degree = self.group_ptr[used + 1] - self.group_ptr[used]
        at = np.repeat(self.group_ptr[used], degree) + (np.arange(degree.sum()) - np.repeat(np.cumsum(degree) - degree, degree))
        load = np.bincount(self.group_of[at], weights=np.repeat(count, degree), minlength=len(self.group_cap))
        return bool((load <= self.group_cap * rounds).all())
