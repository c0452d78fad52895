"""Timing stage of the MILP router: merge runs of consecutive steps where that is cheaper.

Given a valid schedule and a size S, choose a partition of the steps into blocks of
consecutive steps, each block becoming one step, so that the contract step-model time
(DESIGN.md: a step costs the max over links used of alpha_l + n_l*b/bw_l and over groups used
of n_g*b/bw_g; the schedule costs the sum) is least. Merging pays alpha once per link and lets
resources that different steps use overlap.

A block of steps i..j may merge only when the merged step means what the sequence meant.
The rules are pairwise between an earlier step a and a later step c of the block (the steps
themselves are valid, so each is already self-consistent):

- read after write: c sends (src, chunk) that a writes (a's dst, chunk of a copy or reduce).
  Merged, c would read the value from before a, or nothing (``not_held``).
- write after write: a and c both write (rank, chunk) and not both with ``reduce``. Merged,
  the step would write it twice (``conflicting_write``); sequentially the later copy wins or
  the reduce adds into the copied value. Two reduces commute: base + p_a + p_c either way,
  and a double count is caught the same way in both.
- write after read (a sends (r, chunk), c writes (r, chunk), copy or reduce) is fine: a reads
  the state at the block's start in both forms.

Conflicts are pairwise, so legality is hereditary (every sub-block of a legal block is legal)
and one sweep gives ``start[j]``, the first step a block ending at j may start with. The
merged step's sends are the block's sends in step order, its ``rounds`` the sum of the
block's (None if any is None), so link and group capacities still hold. Because the sends
keep their order and nothing in a block reads what it writes, ``simulate_us`` of the merged
schedule equals that of the original; only the step model (and the step count) changes.

Switch entries read their srcs and write their dsts (what lands replaces: a copy), by the same
rules; a multicast's echo (its src among its dsts, planned as a reduction's dual) writes
nothing, but may not share a step with another send of its chunk from its src (run backwards,
both would write there). Multicasts of one chunk from one src through one switch in a merged
step become one entry (``coalesced``): the src's out-port carries the chunk once, and the
dynamic program's loads count it so.

The partition is an exact dynamic program over blocks: dp[j+1] = min over legal i of
dp[i] + cost(i..j), with cost(i..j) grown incrementally as j extends (loads only grow, so
only the resources of step j can raise the max). Ties go to fewer steps. Pruning, both exact:
a block whose dp[i] + cost already exceeds the best complete time found is not extended
(cost only grows), and a start i is skipped when dp[i] plus the cost of merging all the rest
(a lower bound on any completion, since the cost is subadditive) exceeds it. ``max_block``
caps the block length (a heuristic; the answer is then optimal among partitions with blocks
of at most that many steps), for schedules with thousands of mutually independent steps.

>>> from synth.core.collectives import allgather
>>> from synth.core.topology import Link, Topology
>>> t = Topology("pair", 2, (Link(0, 1, 25.0, 0.7), Link(1, 0, 25.0, 0.7)))
>>> s = Schedule(t, allgather(2), (Step((Send(0, 0, 1),)), Step((Send(1, 1, 0),))))
>>> merged = merge_steps_at_size(s, 1024)
>>> len(merged.steps), merged.meta["timing"]
(1, {'merged_from': 2, 'steps': 1, 'size': 1024})
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import chain

import numpy as np

from synth.core.errors import InputError, InvalidScheduleError
from synth.core.orbits import Quotient
from synth.core.schedule import Schedule, Send, Step, SwitchSend, port_loads
from synth.cost import simulate_us, step_time_us
from synth.verify import checked, verify

_REL_TOL = 1e-12  # float noise allowed when comparing two partitions' times


def merge_starts(schedule: Schedule) -> list[int]:
    """``start[j]``: steps i..j may merge into one step exactly when i >= start[j].

    >>> from synth.core.collectives import broadcast
    >>> from synth.core.topology import Link, Topology
    >>> t = Topology("line", 3, (Link(0, 1, 25.0), Link(1, 2, 25.0)))
    >>> relay = Schedule(t, broadcast(3, root=0), (Step((Send(0, 0, 1),)), Step((Send(0, 1, 2),))))
    >>> merge_starts(relay)  # 1 -> 2 reads what 0 -> 1 wrote
    [0, 1]
    """
    seen = _Accesses()
    starts: list[int] = []
    low = 0
    for j, step in enumerate(schedule.steps):
        low = max(low, seen.conflict(step) + 1)
        starts.append(low)
        seen.record(j, step)
    return starts


class _Accesses:
    """The last step that wrote, copied into, sent from, or echoed each (rank, chunk), and the
    latest of them a step conflicts with (module docstring). Switch entries: their srcs read,
    what lands replaces (a copy). An echo (a lone src among its own dsts: a multicast planned as
    a reduction's dual) writes nothing, but run backwards it writes its src's copy: it may not
    share a step with a send of its chunk from its src, nor with an echo of it through another
    switch. Echoes through the same switch may (the merged step makes them one entry)."""

    def __init__(self):
        self.write: dict[tuple[int, int], int] = {}
        self.copy: dict[tuple[int, int], int] = {}
        self.sent: dict[tuple[int, int], int] = {}  # read by a send or an entry without an echo
        self.echo: dict[tuple[int, int], tuple[int, str]] = {}  # (step, switch) of the last echo

    def conflict(self, step: Step) -> int:
        """The last earlier step this one may not share a merged step with (-1: none)."""
        found = -1
        for send in step.sends:
            found = max(found, self.write.get((send.src, send.chunk), -1), self._echoed(send.src, send.chunk),
                        (self.copy if send.op == "reduce" else self.write).get((send.dst, send.chunk), -1))
        for entry in step.switches:
            c = entry.chunk
            found = max([found] + [self.write.get((rank, c), -1) for rank in (*entry.srcs, *_entry_writes(entry))])
            if _echoes(entry):
                found = max(found, self.sent.get((entry.srcs[0], c), -1),
                            self._echoed(entry.srcs[0], c, entry.switch))
            else:
                found = max([found] + [self._echoed(rank, c) for rank in entry.srcs])
        return found

    def _echoed(self, rank: int, chunk: int, switch: str | None = None) -> int:
        """The last step that echoed (rank, chunk), through another switch than ``switch``."""
        step, through = self.echo.get((rank, chunk), (-1, None))
        return -1 if switch is not None and through == switch else step

    def record(self, j: int, step: Step) -> None:
        for send in step.sends:
            self.sent[(send.src, send.chunk)] = j
            self.write[(send.dst, send.chunk)] = j
            if send.op != "reduce":
                self.copy[(send.dst, send.chunk)] = j
        for entry in step.switches:
            if _echoes(entry):
                self.echo[(entry.srcs[0], entry.chunk)] = (j, entry.switch)
            else:
                self.sent.update({(rank, entry.chunk): j for rank in entry.srcs})
            for rank in _entry_writes(entry):
                self.write[(rank, entry.chunk)] = self.copy[(rank, entry.chunk)] = j


def _echoes(entry: SwitchSend) -> bool:
    return len(entry.srcs) == 1 and entry.srcs[0] in entry.dsts


def _entry_writes(entry: SwitchSend) -> tuple[int, ...]:
    """The ranks a switch entry changes: its dsts, less a lone src writing its own value back
    (a multicast's echo, ``synth.milp.multicast``)."""
    if len(entry.srcs) == 1:
        return tuple(r for r in entry.dsts if r != entry.srcs[0])
    return entry.dsts


def merge_steps_at_size(schedule: Schedule, size_bytes: float, max_block: int | None = None,
                quotient: Quotient | None = None) -> Schedule:
    """The schedule with consecutive steps merged to minimise the step-model time at ``size_bytes``.

    Never slower in the step model than ``schedule`` (keeping every step is a candidate). With
    a ``quotient``, ``schedule`` holds the representative sends of a symmetric schedule and the
    times are the full schedule's (a merge is legal in the full schedule exactly when it is in
    the representatives: no image of another chunk reads or writes a representative's place).
    The result is verified; a violation raises RuntimeError (a bug), unless the input itself
    was invalid (InvalidScheduleError).
    """
    if not (isinstance(size_bytes, (int, float)) and size_bytes > 0 and math.isfinite(size_bytes)):
        raise InputError(f"merge_steps_at_size: size must be a positive number of bytes, got {size_bytes!r}")
    if max_block is not None and (not isinstance(max_block, int) or isinstance(max_block, bool) or max_block < 1):
        raise InputError(f"merge_steps_at_size: max_block must be an integer >= 1 or None, got {max_block!r}")
    steps = schedule.steps
    blocks = _best_partition(schedule, size_bytes, merge_starts(schedule), max_block, quotient)
    merged = tuple(_merge_block(steps[i:j]) for i, j in blocks)
    timing = {"merged_from": len(steps), "steps": len(merged), "size": size_bytes}
    result = Schedule(schedule.topology, schedule.collective, merged, {**schedule.meta, "timing": timing})
    if verify(result):
        before = verify(schedule)
        if before:
            raise InvalidScheduleError(f"merge_steps_at_size: the input schedule is invalid: {before[0]}", before)
    return checked(result, "merge_steps_at_size")


@dataclass(frozen=True)
class TimingReport:
    """Before/after figures of a merge at one size (times in microseconds)."""

    size_bytes: float
    steps_before: int
    steps_after: int
    step_time_before_us: float
    step_time_after_us: float
    simulated_before_us: float
    simulated_after_us: float

    @property
    def speedup(self) -> float:
        """Step-model time before / after (>= 1)."""
        if self.step_time_after_us <= 0:
            return 1.0
        return self.step_time_before_us / self.step_time_after_us

    def __str__(self) -> str:
        return (
            f"size {self.size_bytes:g} B: {self.steps_before} -> {self.steps_after} steps, "
            f"step model {self.step_time_before_us:.3f} -> {self.step_time_after_us:.3f} us "
            f"(x{self.speedup:.3f}), simulated {self.simulated_before_us:.3f} -> "
            f"{self.simulated_after_us:.3f} us"
        )


def timing_report(before: Schedule, after: Schedule, size_bytes: float) -> TimingReport:
    """Compare a schedule with its merged form at ``size_bytes``."""
    return TimingReport(
        size_bytes=size_bytes,
        steps_before=len(before.steps),
        steps_after=len(after.steps),
        step_time_before_us=step_time_us(before, size_bytes),
        step_time_after_us=step_time_us(after, size_bytes),
        simulated_before_us=simulate_us(before, size_bytes),
        simulated_after_us=simulate_us(after, size_bytes),
    )


# ---------------------------------------------------------------------------- internals
def _merge_block(block: tuple[Step, ...]) -> Step:
    if len(block) == 1:
        return block[0]
    rounds = None if any(s.rounds is None for s in block) else sum(s.rounds for s in block)
    sends: tuple[Send, ...] = tuple(chain.from_iterable(s.sends for s in block))
    return Step(sends, rounds, coalesced(chain.from_iterable(s.switches for s in block)))


def coalesced(entries) -> tuple[SwitchSend, ...]:
    """Multicasts of one chunk from one src through one switch as one entry to all their dsts
    (in a merged step the src holds the chunk at the start: one pass reaches them all, one
    chunk on its out-port); other entries as they are, in order."""
    out: list[SwitchSend] = []
    where: dict[tuple, int] = {}
    for entry in entries:
        key = (entry.switch, entry.srcs, entry.chunk)
        if len(entry.srcs) != 1 or key not in where:
            if len(entry.srcs) == 1:
                where[key] = len(out)
            out.append(entry)
            continue
        first = out[where[key]]
        dsts = first.dsts + tuple(d for d in entry.dsts if d not in first.dsts)
        out[where[key]] = SwitchSend(first.chunk, first.switch, first.srcs, dsts)
    return tuple(out)


class _Loads:
    """Every step's load as sparse vectors over the resources (links, then groups) it uses.

    ``rows[j] = (idx, cnt, alpha, rate)``: the resources step j uses (unique), its chunks on
    each, and their alpha and bandwidth (bytes per microsecond; groups have alpha 0). With a
    quotient the resources are its link orbits and group classes and the steps hold the
    representative sends: the loads are the full schedule's.
    """

    def __init__(self, schedule: Schedule, size_bytes: float, quotient: Quotient | None = None):
        topo, steps = schedule.topology, schedule.steps
        self.b = size_bytes / schedule.collective.buffer_chunks
        n = topo.ranks
        if quotient is None:
            quotient = Quotient.of(topo, schedule.collective, [])
        res = quotient.resources
        ptr, res_of, mult = res.csr()
        alpha = res.alpha
        rate = res.bandwidth * 1e3
        width = res.count
        orbits = res.orbit_count

        sizes = [len(step.sends) for step in steps]
        total = sum(sizes)
        src = np.fromiter((s.src for step in steps for s in step.sends), dtype=np.int64, count=total)
        dst = np.fromiter((s.dst for step in steps for s in step.sends), dtype=np.int64, count=total)
        step_of = np.repeat(np.arange(len(steps), dtype=np.int64), sizes)
        inside = (src >= 0) & (src < n) & (dst >= 0) & (dst < n)
        lk = np.where(inside, res.link_id[np.where(inside, src * n + dst, 0)], -1)
        if (lk < 0).any():
            bad = int(np.flatnonzero(lk < 0)[0])
            raise InvalidScheduleError(
                f"merge_steps_at_size: step {int(step_of[bad])}: {int(src[bad])}->{int(dst[bad])} "
                f"is not a link of {topo.name}"
            )
        keys, counts = np.unique(step_of * orbits + quotient.link_orbit[lk], return_counts=True)
        l_step, l_orbit = np.divmod(keys, orbits)
        # expand every (step, orbit, count) row to the resources it loads and add them up
        deg = ptr[l_orbit + 1] - ptr[l_orbit]
        rep = np.repeat(np.arange(keys.size), deg)
        within = np.arange(rep.size) - np.repeat(np.cumsum(deg) - deg, deg)
        at = ptr[l_orbit[rep]] + within
        r_keys, inverse = np.unique(l_step[rep] * width + res_of[at], return_inverse=True)
        r_counts = np.bincount(inverse, weights=counts[rep] * mult[at], minlength=r_keys.size)
        all_step, all_res = np.divmod(r_keys, width)
        cuts = np.searchsorted(all_step, np.arange(len(steps) + 1))
        self.rows = []
        for j in range(len(steps)):
            idx = all_res[cuts[j]:cuts[j + 1]]
            self.rows.append((idx, r_counts[cuts[j]:cuts[j + 1]], alpha[idx], rate[idx]))
        self.counts = np.zeros(width, dtype=np.float64)

    def add(self, j: int) -> float:
        """Add step j to the running block; the largest term among the resources it touched."""
        idx, cnt, alpha, rate = self.rows[j]
        if not idx.size:
            return 0.0
        self.counts[idx] += cnt
        # alpha + n*b/bw exactly as cost.step_times_us computes it, so times compare exactly
        return float((alpha + self.counts[idx] * self.b / rate).max())

    def reset(self, touched: list[int]) -> None:
        for j in touched:
            self.counts[self.rows[j][0]] = 0.0


class _EntryLoads:
    """``_Loads`` for a schedule with switch entries (no quotient): links, groups and switch
    ports as ``synth.cost.step_loads`` counts them, with the multicasts of one (switch, src,
    chunk) in a block counted as the one entry ``coalesced`` makes of them: their src's
    out-port (and an echo's in-port) and its group load once per block."""

    def __init__(self, schedule: Schedule, size_bytes: float):
        self.b = size_bytes / schedule.collective.buffer_chunks
        self.index: dict[tuple, int] = {}
        terms: list[tuple[float, float]] = []
        self.rows, self.entries = [], []
        for step in schedule.steps:
            fixed, once = _entry_terms(schedule.topology, step)
            self.rows.append(self._vector(fixed, terms))
            self.entries.append([(key, self._vector(part, terms)[0]) for key, part in once.items()])
        self.alpha = np.array([t[0] for t in terms], dtype=float)
        self.rate = np.array([t[1] for t in terms], dtype=float)
        self.counts = np.zeros(len(terms), dtype=np.float64)
        self.open: set = set()

    def _vector(self, loads: list, terms: list) -> tuple[np.ndarray, np.ndarray]:
        """(resource indices, chunks) of (key, chunks, alpha, bandwidth) loads, numbering new
        resources as they come."""
        load: dict[int, float] = {}
        for key, count, alpha, bandwidth in loads:
            if key not in self.index:
                self.index[key] = len(terms)
                terms.append((alpha, bandwidth * 1e3))
            load[self.index[key]] = load.get(self.index[key], 0.0) + count
        idx = np.array(sorted(load), dtype=np.int64)
        return idx, np.array([load[i] for i in idx.tolist()], dtype=float)

    def add(self, j: int) -> float:
        """Add step j to the running block; the largest term among the resources it touched."""
        idx, cnt = self.rows[j]
        self.counts[idx] += cnt
        touched = [idx]
        for key, res in self.entries[j]:
            if key not in self.open:
                self.open.add(key)
                np.add.at(self.counts, res, 1.0)
                touched.append(res)
        used = np.concatenate(touched)
        if not used.size:
            return 0.0
        return float((self.alpha[used] + self.counts[used] * self.b / self.rate[used]).max())

    def reset(self, touched: list[int]) -> None:
        for j in touched:
            self.counts[self.rows[j][0]] = 0.0
            for _, res in self.entries[j]:
                self.counts[res] = 0.0
        self.open.clear()


def _entry_terms(topo, step: Step) -> tuple[list, dict]:
    """(the loads of ``step_terms`` but for what multicasts put on their srcs' ports, those by
    (switch, src, chunk)): a multicast's out-port and out-group, and with an echo its src's
    in-port and in-group, are paid once per entry however many merge."""
    multicasts = [e for e in step.switches if len(e.srcs) == 1]
    rest = Step(step.sends, step.rounds, tuple(e for e in step.switches if len(e.srcs) != 1))
    fixed = [(key, count, alpha, bandwidth) for key, count, alpha, bandwidth in step_terms(topo, rest)]
    once: dict[tuple, list] = {}
    for entry in multicasts:
        switch = topo.switch(entry.switch)
        if switch is None:
            raise InvalidScheduleError(f"merge_steps_at_size: {topo.name} has no switch {entry.switch!r}")
        src = entry.srcs[0]
        for rank in entry.dsts:
            part = once.setdefault((entry.switch, src, entry.chunk), []) if rank == src else fixed
            part += _port_terms(topo, switch, rank, "in")
        once.setdefault((entry.switch, src, entry.chunk), []).extend(_port_terms(topo, switch, src, "out"))
    return fixed, once


def _port_terms(topo, switch, rank: int, direction: str) -> list:
    """The loads one chunk through ``switch``'s port at ``rank`` puts on the port and its group."""
    out = [(("port", switch.name, rank, direction), 1, switch.alpha, switch.bandwidth)]
    group = switch.out_group(rank) if direction == "out" else switch.in_group(rank)
    if group is not None:
        out.append((("group", group), 1, 0.0, topo.group_map[group].bandwidth))
    return out


def step_terms(topo, step: Step):
    """(resource key, chunks, alpha, bandwidth) of every resource one step loads."""
    per_link: dict[tuple[int, int], int] = {}
    for send in step.sends:
        per_link[(send.src, send.dst)] = per_link.get((send.src, send.dst), 0) + 1
    ports, groups = port_loads(step, topo)
    for key, count in per_link.items():
        link = topo.link(*key)
        if link is None:
            raise InvalidScheduleError(f"merge_steps_at_size: {key[0]}->{key[1]} is not a link of {topo.name}")
        yield ("link", key), count, link.alpha, link.bandwidth
        for group in topo.groups_of_link.get(key, ()):
            groups[group.name] += count
    for (name, rank, direction), count in ports.items():
        switch = topo.switch(name)
        yield ("port", name, rank, direction), count, switch.alpha, switch.bandwidth
    for name, count in groups.items():
        yield ("group", name), count, 0.0, topo.group_map[name].bandwidth


def _best_partition(schedule: Schedule, size_bytes: float, starts: list[int], max_block: int | None,
                    quotient: Quotient | None = None):
    """Blocks [(i, j), ...] (half-open) of least total step-model time; ties to fewer blocks."""
    k = len(schedule.steps)
    if k == 0:
        return []
    if schedule.switch_count and quotient is not None:
        raise InputError("merge_steps_at_size: a schedule with switch entries takes no quotient")
    loads = _EntryLoads(schedule, size_bytes) if schedule.switch_count else _Loads(schedule, size_bytes, quotient)
    single = []
    for j in range(k):
        single.append(loads.add(j))
        loads.reset([j])
    rest_identity = [0.0] * (k + 1)  # time of steps j.. kept as they are
    for j in range(k - 1, -1, -1):
        rest_identity[j] = single[j] + rest_identity[j + 1]
    rest_merged = [0.0] * (k + 1)  # time of steps j.. as one step: a lower bound for them
    running = 0.0
    for j in range(k - 1, -1, -1):
        running = max(running, loads.add(j))
        rest_merged[j] = running
    loads.reset(list(range(k)))

    best = [math.inf] * (k + 1)
    count = [k + 1] * (k + 1)
    came = [0] * (k + 1)
    best[0], count[0] = 0.0, 0
    bound = rest_identity[0]  # best complete time known
    for i in range(k):
        here = best[i]
        bound = min(bound, here + rest_identity[i])
        limit = bound + _REL_TOL * max(1.0, bound)
        if here + rest_merged[i] > limit:
            continue
        end = k if max_block is None else min(k, i + max_block)
        cost = 0.0
        touched: list[int] = []
        j = i
        while j < end and starts[j] <= i:
            term = loads.add(j)
            if term > cost:
                cost = term
            touched.append(j)
            total = here + cost
            if total > limit:
                break
            old = best[j + 1]
            tol = _REL_TOL * max(1.0, abs(old)) if old < math.inf else 0.0
            if total < old - tol or (total <= old + tol and count[i] + 1 < count[j + 1]):
                best[j + 1], count[j + 1], came[j + 1] = total, count[i] + 1, i
                if total + rest_identity[j + 1] < bound:  # a complete time: prune against it
                    bound = total + rest_identity[j + 1]
                    limit = bound + _REL_TOL * max(1.0, bound)
            j += 1
        loads.reset(touched)

    blocks = []
    j = k
    while j > 0:
        blocks.append((came[j], j))
        j = came[j]
    return blocks[::-1]
