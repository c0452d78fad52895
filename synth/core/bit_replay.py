"""The bit-set replay: ``verify``'s rules, with who holds a chunk kept as one integer per chunk.

For schedules with switch entries at scale (``gb200nvl72x20``: 1440 ranks, a quarter of a million
multicasts of 70 destinations each) a replay by (rank, chunk) pairs keeps tens of millions of
them in a dict. Here every chunk has a bit set of the ranks that hold it; a multicast sets the
bits of its destinations at once. For a combining collective a rank's copy of a chunk is one of
few values: its own contribution, untouched (the chunk's ``fresh`` bit set), or one of the sums
the steps made (``sums[chunk]``: contribution bit set -> the ranks holding that sum). Every rule
of ``synth.verify`` is checked in the same order of reads and writes; ``bits_valid`` answers
True exactly when ``verify`` would find nothing, and ``verify`` replays pair by pair only when
it says False, for the messages. Imports core only (the verifier is a second opinion).

>>> from synth.core.collectives import allgather
>>> from synth.core.topology import Topology, Link
>>> from synth.core.schedule import Schedule, Step, Send
>>> t = Topology("pair", 2, (Link(0, 1, 25.0), Link(1, 0, 25.0)))
>>> bits_valid(Schedule(t, allgather(2), (Step((Send(0, 0, 1), Send(1, 1, 0))),)))
True
>>> bits_valid(Schedule(t, allgather(2), (Step((Send(0, 0, 1),)),)))
False
"""

from __future__ import annotations

from collections import Counter

from synth.core.schedule import OPS, Schedule, port_loads


def bits_valid(schedule: Schedule) -> bool | None:
    """True exactly when ``synth.verify.verify(schedule)`` finds nothing; None when a send's op
    is neither ``copy`` nor ``reduce`` (the pair replay decides those)."""
    topo, coll = schedule.topology, schedule.collective
    if topo.ranks != coll.ranks:
        return False
    if any(s.op not in OPS for step in schedule.steps for s in step.sends):
        return None
    replay = _Replay(schedule)
    return all(replay.step(step) for step in schedule.steps) and replay.post_holds()


class _Replay:
    """Who holds what, one bit set per chunk (see the module)."""

    def __init__(self, schedule: Schedule) -> None:
        self.topo, self.coll = schedule.topology, schedule.collective
        self.bit = [1 << r for r in range(self.topo.ranks)]
        self.masks: dict[tuple[int, ...], int] = {}  # rank tuple -> its bit set
        self.holders = [self.mask_of(tuple(pre)) for pre in self.coll.pre]
        self.fresh = list(self.holders)  # combining: ranks holding their own contribution alone
        self.sums: list[dict[int, int]] = [{} for _ in self.coll.pre]  # contributions -> ranks
        self.shapes: dict[tuple, bool] = {}  # (switch, srcs, dsts) -> whether such an entry is well formed

    def mask_of(self, ranks: tuple[int, ...]) -> int:
        mask = self.masks.get(ranks)
        if mask is None:
            bit = self.bit
            mask = self.masks[ranks] = sum(bit[r] for r in set(ranks))
        return mask

    def value(self, rank: int, chunk: int) -> int:
        """The contributions rank's copy of chunk holds (it holds one)."""
        if self.fresh[chunk] >> rank & 1:
            return self.bit[rank]
        for contributions, ranks in self.sums[chunk].items():
            if ranks >> rank & 1:
                return contributions
        raise AssertionError("a holder without a value")  # pragma: no cover

    def step(self, step) -> bool:
        """Check one step against the state at its start and land its writes; False at the first
        rule it breaks."""
        rounds = step.rounds
        if rounds is not None and (not isinstance(rounds, int) or rounds < 1):
            return False
        if not (self.sends_ok(step.sends) and self.entries_ok(step.switches)):
            return False
        if rounds is not None and not self.fits(step, rounds):
            return False
        writes = self.entry_writes(step.switches)
        if writes is None:
            return False
        sends = self.send_writes(step.sends, writes)
        if sends is None:
            return False
        self.land(writes + sends)
        return True

    def sends_ok(self, sends) -> bool:
        n, chunks, holders, topo = self.topo.ranks, self.coll.chunks, self.holders, self.topo
        combining = self.coll.combining
        for s in sends:
            if not (0 <= s.src < n and 0 <= s.dst < n and 0 <= s.chunk < chunks):
                return False
            if s.src == s.dst or not topo.has_link(s.src, s.dst) or (s.op == "reduce" and not combining):
                return False
            if not holders[s.chunk] >> s.src & 1:
                return False
        return True

    def entries_ok(self, entries) -> bool:
        chunks, holders, shapes = self.coll.chunks, self.holders, self.shapes
        for e in entries:
            if not 0 <= e.chunk < chunks:
                return False
            shape = (e.switch, e.srcs, e.dsts)
            ok = shapes.get(shape)
            if ok is None:
                ok = shapes[shape] = self.shape_ok(e)
            if not ok or ~holders[e.chunk] & self.mask_of(e.srcs):
                return False
        return True

    def shape_ok(self, e) -> bool:
        """The rules an entry's switch, srcs and dsts break or not whatever the chunk (checked once
        per distinct entry shape)."""
        switch, n = self.topo.switch(e.switch), self.topo.ranks
        if switch is None:
            return False
        ranks = (*e.srcs, *e.dsts)
        if not all(isinstance(r, int) and 0 <= r < n for r in ranks):
            return False
        if not e.srcs or not e.dsts or len(set(e.srcs)) < len(e.srcs) or len(set(e.dsts)) < len(e.dsts):
            return False
        ports = switch.port_index
        if not all(r in ports for r in ranks) or switch.allows(len(e.srcs), len(e.dsts)):
            return False
        return len(e.srcs) == 1 or self.coll.combining

    def fits(self, step, rounds: int) -> bool:
        """Every link, port and group carries at most capacity x rounds chunks."""
        topo = self.topo
        per_link = Counter((s.src, s.dst) for s in step.sends)
        for key, count in per_link.items():
            capacity = topo.link_capacity(topo.link(*key))
            if capacity is not None and count > capacity * rounds:
                return False
        ports, per_group = port_loads(step, topo)
        for (name, _, _), count in ports.items():
            capacity = topo.switch_capacity(topo.switch(name))
            if capacity is not None and count > capacity * rounds:
                return False
        groups_of = topo.groups_of_link
        for key, count in per_link.items():
            for group in groups_of.get(key, ()):
                per_group[group.name] += count
        group_map = topo.group_map
        for name, count in per_group.items():
            capacity = topo.group_capacity(group_map[name])
            if capacity is not None and count > capacity * rounds:
                return False
        return True

    def entry_writes(self, entries) -> list[tuple[int, int, int]] | None:
        """(chunk, contributions, ranks written) per entry, read before anything lands; None when
        two entries write one place or an entry's srcs overlap (combining)."""
        written: dict[int, int] = {}
        out = []
        combining = self.coll.combining
        for e in entries:
            dsts = self.mask_of(e.dsts)
            if written.get(e.chunk, 0) & dsts:
                return None
            written[e.chunk] = written.get(e.chunk, 0) | dsts
            total = 0
            srcs = self.mask_of(e.srcs)
            if combining and self.fresh[e.chunk] & srcs == srcs:
                total = srcs  # every src holds its own contribution alone: disjoint, their union
            elif combining:
                for src in e.srcs:
                    part = self.value(src, e.chunk)
                    if total & part:
                        return None
                    total |= part
            out.append((e.chunk, total, dsts))
        return out

    def send_writes(self, sends, entry_writes) -> list[tuple[int, int, int]] | None:
        """(chunk, contributions, the one rank written) per place the sends write; None when a
        place is written twice not all by reduce, or also by an entry, or a reduce counts a
        contribution twice."""
        by_entries: dict[int, int] = {}
        for chunk, _, dsts in entry_writes:
            by_entries[chunk] = by_entries.get(chunk, 0) | dsts
        places: dict[tuple[int, int], list] = {}
        for s in sends:
            places.setdefault((s.dst, s.chunk), []).append(s)
        out = []
        for (dst, chunk), group in places.items():
            if by_entries.get(chunk, 0) >> dst & 1:
                return None
            if len(group) > 1 and any(s.op != "reduce" for s in group):
                return None
            if not self.coll.combining:
                out.append((chunk, 0, self.bit[dst]))
                continue
            copies = [s for s in group if s.op == "copy"]
            if copies:
                total = self.value(copies[-1].src, chunk)
            else:
                total = self.value(dst, chunk) if self.holders[chunk] >> dst & 1 else 0
            for s in group:
                if s.op == "reduce":
                    part = self.value(s.src, chunk)
                    if total & part:
                        return None
                    total |= part
            out.append((chunk, total, self.bit[dst]))
        return out

    def land(self, writes) -> None:
        """Every write replaces the copies of its ranks (all read before, see ``step``)."""
        combining = self.coll.combining
        for chunk, total, ranks in writes:
            self.holders[chunk] |= ranks
            if not combining:
                continue
            self.fresh[chunk] &= ~ranks
            sums = self.sums[chunk]
            for key in [k for k, held in sums.items() if held & ranks]:
                left = sums[key] & ~ranks
                if left:
                    sums[key] = left
                else:
                    del sums[key]
            sums[total] = sums.get(total, 0) | ranks

    def post_holds(self) -> bool:
        """Every rank of post holds the chunk, and in a combining collective exactly every
        contribution of pre, once."""
        for c, post in enumerate(self.coll.post):
            want = self.mask_of(tuple(post))
            if want & ~self.holders[c]:
                return False
            if self.coll.combining:
                every = self.mask_of(tuple(self.coll.pre[c]))
                right = self.sums[c].get(every, 0)
                if len(self.coll.pre[c]) == 1:
                    right |= self.fresh[c] & every
                if want & ~right:
                    return False
        return True
