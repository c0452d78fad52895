"""The event simulation's engine (``synth.cost.event_makespan``): every resource is a FIFO
server, and a step's holds of them are resolved together.

Within a step every start is known when the step begins (a value written in the step is ready
only after it), so each resource's holds form a chain in the order the step takes them: the
k-th finishes at ``f_k = max(s_k, f_(k-1)) + d_k``, from the time the resource was free before.
Unrolled, ``f_k = D_k + max(free, max over j <= k of (s_j - D_(j-1)))`` with ``D`` the running sum
of the hold times, which numpy evaluates for every chain of a big step at once; a small step
takes the same recurrence one hold at a time (``SMALL_STEP``), where numpy's per-call cost would
dominate. The two agree to rounding (tests/test_event_sim.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synth.core.errors import InputError

SMALL_STEP = 48  # holds below which a step is resolved one hold at a time


class Resources:
    """The free time of every resource, by key (as the costs name them), grown as keys appear."""

    def __init__(self) -> None:
        self.ids: dict = {}
        self.free = np.zeros(64)

    def id_of(self, key) -> int:
        found = self.ids.get(key)
        if found is None:
            found = self.ids[key] = len(self.ids)
            if found >= len(self.free):
                self.free = np.concatenate([self.free, np.zeros(len(self.free))])
        return found


def resolve(resources: Resources, res: np.ndarray, start: np.ndarray, took: np.ndarray) -> np.ndarray:
    """Each hold's finish; holds of one resource are taken in array order, each from when both
    its start and the resource allow; the resources' free times move on. The k-th holds of all
    chains are taken together, k = 0, 1, ... (the recurrence itself, so rounding is the loop's)."""
    if len(res) < SMALL_STEP:
        return _one_by_one(resources.free, res, start, took)
    order = np.argsort(res, kind="stable")
    r, s, d = res[order], start[order], took[order]
    first = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    lengths = np.diff(np.r_[first, len(r)])
    position = np.arange(len(r)) - np.repeat(first, lengths)
    by_position = np.argsort(position, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(position))]
    finish = np.empty(len(r))
    finish[first] = np.maximum(s[first], resources.free[r[first]]) + d[first]
    for a, b in zip(bounds[1:-1].tolist(), bounds[2:].tolist()):
        at = by_position[a:b]
        finish[at] = np.maximum(s[at], finish[at - 1]) + d[at]
    last = first + lengths - 1
    resources.free[r[last]] = finish[last]
    out = np.empty_like(finish)
    out[order] = finish
    return out


def _one_by_one(free: np.ndarray, res: np.ndarray, start: np.ndarray, took: np.ndarray) -> np.ndarray:
    out = np.empty(len(res))
    for i, (key, begin, length) in enumerate(zip(res.tolist(), start.tolist(), took.tolist())):
        out[i] = free[key] = max(begin, free[key]) + length
    return out


class Ready:
    """When each (rank, chunk) is ready (NaN: not held)."""

    def __init__(self, collective) -> None:
        self.time = np.full((collective.ranks, len(collective.pre)), np.nan)
        for chunk, holders in enumerate(collective.pre):
            self.time[list(holders), chunk] = 0.0
        self.combining = collective.combining

    def starts(self, index: int, ranks: np.ndarray, chunks: np.ndarray, what: str) -> np.ndarray:
        """Ready times; InputError naming the first (rank, chunk) not held."""
        found = self.time[ranks, chunks]
        missing = np.flatnonzero(np.isnan(found))
        if len(missing):
            i = int(missing[0])
            raise InputError(f"simulate: step {index}: {what.format(rank=int(ranks[i]), chunk=int(chunks[i]))} "
                             "(verify the schedule first)")
        return found

    def land(self, ranks: np.ndarray, chunks: np.ndarray, arrival: np.ndarray, reduce: np.ndarray) -> None:
        """A step's writes: each written (rank, chunk) is ready when its last write lands; a
        value held before stays as early where every write re-sends the same data (not
        combining), and where every write is a reduce the rank's own partial is waited for."""
        if not len(ranks):
            return
        keys = ranks * self.time.shape[1] + chunks
        places, where = np.unique(keys, return_inverse=True)
        last = np.full(len(places), -np.inf)
        np.maximum.at(last, where, arrival)
        all_reduce = np.ones(len(places), dtype=bool)
        np.logical_and.at(all_reduce, where, reduce)
        flat = self.time.reshape(-1)
        before = flat[places]
        held = ~np.isnan(before)
        merged = np.where(all_reduce, np.maximum(before, last),
                          last if self.combining else np.minimum(before, last))
        flat[places] = np.where(held, merged, last)


def makespan(steps, collective, costs, switch_costs=None) -> float:
    """``synth.cost.event_makespan`` (its docstring says what is simulated)."""
    resources, ready, known, links = Resources(), Ready(collective), {}, _Links()
    last = 0.0
    for index, step in enumerate(steps):
        if step.sends or step.switches:
            last = max(last, _step(index, step, costs, switch_costs, resources, ready, known, links))
    return last


def _step(index: int, step, costs, switch_costs, resources: Resources, ready: Ready, known: dict,
          links: "_Links") -> float:
    """One step's holds resolved and its writes landed; its last arrival."""
    sends = _Sends(index, step, costs, resources, ready, links)
    entries = _Entries(index, step.switches, switch_costs, resources, ready, known)
    finish = resolve(resources, np.concatenate([sends.res, entries.res]),
                     np.concatenate([sends.start, entries.start]), np.concatenate([sends.took, entries.took]))
    owner = np.concatenate([sends.owner, entries.owner + len(step.sends)])
    group = np.concatenate([sends.group, entries.group])
    served = np.concatenate([np.full(len(step.sends), -np.inf), entries.begin])
    done = served.copy()
    np.maximum.at(served, owner[~group], finish[~group])
    np.maximum.at(done, owner[group], finish[group])
    arrival = np.maximum(served + np.concatenate([sends.alpha, entries.alpha]), done)
    ready.land(np.concatenate([sends.dst, entries.dst]), np.concatenate([sends.chunk, entries.chunk]),
               np.concatenate([arrival[:len(step.sends)], arrival[len(step.sends):][entries.writer]]),
               np.concatenate([sends.reduce, np.zeros(len(entries.dst), dtype=bool)]))
    return float(arrival.max())


class _Sends:
    """A step's sends as holds: each its link, then its groups, from when its src holds the chunk."""

    def __init__(self, index: int, step, costs, resources: Resources, ready: Ready, links: "_Links") -> None:
        sends, k = step.sends, len(step.sends)
        src = np.fromiter((s.src for s in sends), np.int64, k)
        self.dst = np.fromiter((s.dst for s in sends), np.int64, k)
        self.chunk = np.fromiter((s.chunk for s in sends), np.int64, k)
        self.reduce = np.fromiter((s.op == "reduce" for s in sends), bool, k)
        begin = ready.starts(index, src, self.chunk, "rank {rank} sends chunk {chunk}, which it does not hold") \
            if k else np.zeros(0)
        row = np.fromiter((links.row(t, resources) for t in costs(index, step)), np.int64, k) if k else \
            np.zeros(0, dtype=np.int64)
        links = links.tables()
        self.alpha = links.alpha[row]
        res, took, owner = [links.resource[row]], [links.took[row]], [np.arange(k)]
        for j in range(links.group_resource.shape[1]):
            crosses = np.flatnonzero(links.groups[row] > j)
            res.append(links.group_resource[row[crosses], j])
            took.append(links.group_took[row[crosses], j])
            owner.append(crosses)
        crossed = np.concatenate(owner[1:]) if len(owner) > 1 else np.zeros(0, dtype=np.int64)
        by_send = np.r_[np.arange(k), k + np.argsort(crossed, kind="stable")]  # each resource in the sends' order
        self.res, self.took = np.concatenate(res)[by_send], np.concatenate(took)[by_send]
        self.owner = np.concatenate(owner)[by_send]
        self.start = begin[self.owner] if k else np.zeros(0)
        self.group = np.arange(len(self.res)) >= k


class _Links:
    """Each send cost's terms (``SendCost``) once per resource key, as table rows; ``tables``
    turns the rows into arrays again only when rows were added since."""

    def __init__(self) -> None:
        self.rows: dict = {}
        self._resource: list[int] = []
        self._alpha: list[float] = []
        self._took: list[float] = []
        self._groups: list[list[tuple[int, float]]] = []
        self._built = 0
        self.group_resource = np.zeros((0, 0), dtype=np.int64)
        self.group_took = np.zeros((0, 0))
        self.resource = self.groups = np.zeros(0, dtype=np.int64)
        self.alpha = self.took = np.zeros(0)

    def row(self, cost, resources: Resources) -> int:
        found = self.rows.get(cost[0])
        if found is None:
            key, alpha, took, groups = cost
            found = self.rows[key] = len(self._resource)
            self._resource.append(resources.id_of(key))
            self._alpha.append(alpha)
            self._took.append(took)
            self._groups.append([(resources.id_of(group), group_took) for group, group_took in groups])
        return found

    def tables(self) -> "_Links":
        """Arrays by row: resource, alpha, took, groups, and (rows x widest) group resources and
        times; the rows added since the last call are appended."""
        done, rows = self._built, len(self._resource)
        if done == rows:
            return self
        self._built = rows
        fresh = self._groups[done:]
        width = max([len(g) for g in fresh] + [self.group_resource.shape[1]])
        block = np.zeros((rows - done, width), dtype=np.int64)
        times = np.zeros((rows - done, width))
        for i, groups in enumerate(fresh):
            for j, (group, group_took) in enumerate(groups):
                block[i, j], times[i, j] = group, group_took
        widen = ((0, 0), (0, width - self.group_resource.shape[1]))
        self.group_resource = np.vstack([np.pad(self.group_resource, widen), block])
        self.group_took = np.vstack([np.pad(self.group_took, widen), times])
        self.resource = np.r_[self.resource, np.array(self._resource[done:], dtype=np.int64)]
        self.alpha = np.r_[self.alpha, np.array(self._alpha[done:], dtype=float)]
        self.took = np.r_[self.took, np.array(self._took[done:], dtype=float)]
        self.groups = np.r_[self.groups, np.array([len(g) for g in fresh], dtype=np.int64)]
        return self


class _Entries:
    """A step's switch entries as holds: each its ports, then its groups, from when every src
    holds the chunk; ``writer`` maps each (dst, chunk) write to its entry."""

    def __init__(self, index: int, entries, switch_costs, resources: Resources, ready: Ready, known: dict) -> None:
        parts = [_entry_holds(entry, switch_costs, resources, known) for entry in entries]
        begin = []
        for entry, part in zip(entries, parts):
            found = ready.time[part.srcs, entry.chunk]
            if np.isnan(found).any():
                raise InputError(f"simulate: step {index}: a src of switch entry {entry.switch!r} chunk "
                                 f"{entry.chunk} does not hold it (verify the schedule first)")
            begin.append(found.max())
        self.begin = np.array(begin, dtype=float)
        self.alpha = np.array([part.alpha for part in parts], dtype=float)
        self.res = _joined([part.res for part in parts], np.int64)
        self.took = _joined([part.took for part in parts], float)
        self.group = _joined([part.group for part in parts], bool)
        self.owner = np.repeat(np.arange(len(parts)), [len(part.res) for part in parts])
        self.start = self.begin[self.owner]
        writes = [len(part.dsts) for part in parts]
        self.writer = np.repeat(np.arange(len(parts)), writes)
        self.dst = _joined([part.dsts for part in parts], np.int64)
        self.chunk = np.repeat(np.array([e.chunk for e in entries], dtype=np.int64), writes)


@dataclass(frozen=True)
class _EntryHolds:
    """What one switch entry holds: its srcs and dsts, its alpha, and per hold (ports, then the
    groups they share) the resource id, the time and whether it is a group."""

    srcs: np.ndarray
    dsts: np.ndarray
    alpha: float
    res: np.ndarray
    took: np.ndarray
    group: np.ndarray


def _entry_holds(entry, switch_costs, resources: Resources, known: dict) -> _EntryHolds:
    """``_EntryHolds`` of a switch entry, once per (switch, srcs, dsts)."""
    key = (entry.switch, entry.srcs, entry.dsts)
    if key not in known:
        alpha, ports, groups = switch_costs(entry)
        holds = list(ports) + list(groups)
        known[key] = _EntryHolds(np.array(entry.srcs, dtype=np.int64), np.array(entry.dsts, dtype=np.int64), alpha,
                                 np.array([resources.id_of(k) for k, _ in holds], dtype=np.int64),
                                 np.array([t for _, t in holds], dtype=float), np.arange(len(holds)) >= len(ports))
    return known[key]


def _joined(arrays: list, dtype) -> np.ndarray:
    return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype=dtype)
