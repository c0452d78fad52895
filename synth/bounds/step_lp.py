"""A rounds lower bound for a *given number of steps*: the time-expanded flow relaxation.

The rounds bound of ``synth.bounds.lower_bounds`` ignores how many steps a schedule has. With S steps fixed,
every unit of a chunk's data must reach each destination along a path of at most S links,
moving one link per step (waiting is free), and step s carries at most capacity x r_s chunks
per link and group, r_s >= 1. The least sum of r_s over fractional flows is a lower bound on
the rounds R of any k-synchronous schedule with S steps and the collective's chunking; the
strategies use it to skip (S, R, C) budgets that cannot work before calling a solver.

The relaxation is built once per (topology, chunk classes, S) and shared by every chunk count:
when every class has the same number of chunks m (allgather, alltoall, broadcast, ...), a
split r_1..r_S is feasible for m chunks exactly when r / m is for one, so the model is built
for one chunk per class and the rounds are scaled. Every solve also yields a *cut*: LP duality
gives weights w >= 0 on the capacity rows such that any feasible rounds vector satisfies
sum_t a_t r_t >= m * beta (a_t = sum of w x capacity over step t's rows, beta the flows' part of
the dual objective). A split that violates a known cut is ruled out without solving; this is
what makes ruling out every split of a budget cheap (mi250 allgather, S=5, R=8, C=3: 35
splits, a handful of LP solves instead of 35).

With ``pooled`` one step stands for any number of steps, its rounds pooled and free (>= 0), its
data moving any number of hops: every schedule with at least ``steps - 1`` steps fits, so the
least total of (1 step, pooled, 1 step) is a rounds floor for every step count at once
(``least_rounds_any_steps``). What it adds to the global rounds bound is the end of the
schedule: data that first reaches a set of ranks in the last step must enter each of them
over the set's in-links.

Only non-combining collectives (the solver runs combining ones as their duals).

>>> from synth.core.generators import uring
>>> from synth.core.collectives import allgather
>>> round(step_rounds_bound(uring(4), allgather(4), 3), 6)
3.0
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from synth.bounds.lp import LpRows, solve_lp_with_duals, solve_mip_bound
from synth.core.collective import Collective
from synth.core.topology import Topology

MAX_COLUMNS = 400_000
LP_SECONDS = 60.0  # one relaxation solve; over it the bound is skipped (never guessed)
MIP_SECONDS = 10.0  # the whole-rounds floor; its dual bound at the limit is still a bound
TOLERANCE = 1e-7  # relative: a load above 1 + this (a cut violated by more) rules a split out


@dataclass(frozen=True)
class SplitCut:
    """A valid inequality on the rounds of any feasible split, per chunk: sum_t weights[t] * r_t
    >= floor * chunks_per_class."""

    weights: tuple[float, ...]
    floor: float

    def rules_out(self, rounds_per_step: tuple[int, ...], scale: int) -> bool:
        lhs = sum(w * r for w, r in zip(self.weights, rounds_per_step))
        return lhs < scale * self.floor * (1 - TOLERANCE) - TOLERANCE


@dataclass(frozen=True)
class _Steps:
    """The step axis: ``steps`` steps of one hop each, except the ``pooled`` one (1-based, or
    None), which stands for any number of steps (zero included): inside it data moves any
    number of hops, each link carrying at most capacity x its rounds in all."""

    steps: int
    pooled: int | None

    def before(self, t: int) -> float:
        """Hops data can have made before step t (every step one hop, the pooled one any)."""
        return math.inf if self.pooled is not None and self.pooled < t else t - 1

    def after(self, t: int) -> float:
        """Hops data can still make after step t."""
        return math.inf if self.pooled is not None and self.pooled > t else self.steps - t

    def inside(self, t: int) -> float:
        """Hops data can make in step t besides the link it crosses: any in the pooled step."""
        return math.inf if t == self.pooled else 0

    def departs(self, t: int) -> int:
        """When data crossing a link in step t left the link's source: t - 1, or t in the pooled
        step (data entering it can move on in it)."""
        return t if t == self.pooled else t - 1


@dataclass(frozen=True)
class _Destination:
    """One commodity: chunk class ``k`` (holders ``pre``) to destination ``d``, with its flow
    columns by (link index, step) and its hold columns by (rank, step)."""

    k: int
    pre: frozenset
    d: int
    flow: dict[tuple[int, int], int]
    hold: dict[tuple[int, int], int]


@dataclass(frozen=True)
class _Index:
    """The model's columns: the commodities' flows and holds, the uses (class, link, step) ->
    column, and how many columns there are (the tail's columns follow)."""

    destinations: tuple[_Destination, ...]
    use: dict[tuple[int, int, int], int]
    columns: int


_NO_ROWS = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0))


@dataclass(frozen=True)
class _Parts:
    """The built LP of a StepRelaxation, less the tail (the rounds columns, added per solve).

    Two flags, one meaning each. ``applies``: the relaxation gives a bound here (False: a link
    or group capacity that is not whole, or over MAX_COLUMNS columns; callers fall back).
    ``unreachable``: some destination is farther than the steps allow from every holder of
    its chunk, so no schedule exists (the bound is inf; no solve is needed). When either says
    so (``applies`` False or ``unreachable`` True), the arrays are empty.
    """

    applies: bool
    unreachable: bool
    representatives: tuple[int, ...]  # one chunk class per orbit of the group: those with flows
    columns: int  # flow, hold and use columns
    flow_coo: tuple[np.ndarray, ...]  # conservation and use rows: (rows, cols, vals, lower, upper)
    flow_rhs: np.ndarray  # their right-hand sides (the cut's floor is the duals' product with it)
    capacity: tuple[np.ndarray, ...]  # the capacity rows' flows part: (rows, cols, vals)
    cap_of_row: np.ndarray  # each capacity row's capacity
    step_of_row: np.ndarray  # and its step, 0-based

    @property
    def flow_rows(self) -> int:
        return len(self.flow_rhs)

    @classmethod
    def no_bound(cls, representatives: tuple[int, ...] = ()) -> _Parts:
        """The relaxation does not apply: no arrays."""
        return cls._empty(False, False, representatives)

    @classmethod
    def no_schedule(cls, representatives: tuple[int, ...]) -> _Parts:
        """A destination is out of reach: no arrays, no solve needed."""
        return cls._empty(True, True, representatives)

    @classmethod
    def _empty(cls, applies: bool, unreachable: bool, representatives: tuple[int, ...]) -> _Parts:
        return cls(applies, unreachable, representatives, 0, _NO_ROWS, np.zeros(0), _NO_ROWS[:3], np.zeros(0),
                   np.zeros(0, dtype=np.int64))


def _build(topology: Topology, classes, axis: _Steps, group) -> _Parts:
    """The model: columns, then the flows' rows (conservation and uses), then the capacity
    rows; no bound where a capacity is not whole."""
    caps = [topology.link_capacity(l) for l in topology.links]
    if any(c is None for c in caps) or any(topology.group_capacity(g) is None for g in topology.groups):
        return _Parts.no_bound()
    representatives = _representatives(classes, group)
    index = _columns(topology, classes, representatives, axis)
    if isinstance(index, _Parts):
        return index
    flow_coo, flow_rhs = _flow_rows(topology.links, index, axis)
    capacity, cap_of_row, step_of_row = _capacity_rows(topology, caps, group, index, classes, axis.steps)
    return _Parts(True, False, representatives, index.columns, flow_coo, flow_rhs, capacity, cap_of_row,
                  step_of_row)


def _representatives(classes, group) -> tuple[int, ...]:
    """The classes that get flows: the first of each orbit under the group (class k's images
    (g(pre), g(post)) for every g in the group)."""
    index_of_class = {(pre, post): k for k, (pre, post, _) in enumerate(classes)}
    found = []
    for k, (pre, post, _) in enumerate(classes):
        images = [index_of_class[(frozenset(g[r] for r in pre), frozenset(g[r] for r in post))] for g in group]
        if min(images) == k:
            found.append(k)
    return tuple(found)


def _columns(topology: Topology, classes, representatives, axis: _Steps) -> _Index | _Parts:
    """Variables, numbered in this order per representative class k and destination d (post
    less pre, ascending): d's flow and hold columns (``_destination_columns``), then a use
    column u_{k,l,t} for each (link, step) d flows on that no earlier destination of k did.
    A destination farther from every holder than the steps allow: the unreachable model;
    over MAX_COLUMNS (counted after each destination's flows and holds): no bound."""
    dist = topology.hop_distances
    destinations: list[_Destination] = []
    use: dict[tuple[int, int, int], int] = {}
    col = 0
    for k in representatives:
        pre, post, _ = classes[k]
        near = [min(dist[h][r] for h in pre) for r in range(topology.ranks)]
        for d in sorted(post - pre):
            if near[d] > axis.before(axis.steps + 1):
                return _Parts.no_schedule(representatives)
            flow, hold, col = _destination_columns(topology, pre, near, d, axis, col)
            if col > MAX_COLUMNS:
                return _Parts.no_bound(representatives)
            for i, t in flow:
                if (k, i, t) not in use:
                    use[(k, i, t)] = col
                    col += 1
            destinations.append(_Destination(k, pre, d, flow, hold))
    return _Index(tuple(destinations), use, col)


def _destination_columns(topology: Topology, pre: frozenset, near: list, d: int, axis: _Steps, col: int):
    """One destination's columns, step by step, numbered from ``col``: a flow on link l in step
    t (from (src, departs(t)) to (dst, t)) unless l enters a holder, or its source is farther
    from the holders (``near``) or d from its end than the hops made before t / left after t
    allow (plus the pooled step's own); a hold of rank r from t - 1 to t for a non-holder the
    data can have reached and d can still be reached from. (flow, hold, next column)."""
    dist = topology.hop_distances
    flow: dict[tuple[int, int], int] = {}
    hold: dict[tuple[int, int], int] = {}
    for t in range(1, axis.steps + 1):
        before, after, inside = axis.before(t), axis.after(t), axis.inside(t)
        for i, l in enumerate(topology.links):
            if l.dst in pre or near[l.src] > before + inside or dist[l.dst][d] > after + inside:
                continue
            flow[(i, t)] = col
            col += 1
        for r in range(topology.ranks):
            if r not in pre and near[r] <= before and dist[r][d] <= after + inside:
                hold[(r, t)] = col
                col += 1
    return flow, hold, col


def _flow_rows(links, index: _Index, axis: _Steps) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The flows' rows, per destination its conservation rows then its use rows, as one COO
    block (rows, cols, vals, lower, upper), and their right-hand sides."""
    rows = LpRows()
    rhs: list[np.ndarray] = []
    for dest in index.destinations:
        block = _conservation(links, dest, axis)
        rows.add(*block)
        rhs.append(block[3])
        if dest.flow:
            rows.add(*_use_rows(dest, index.use))
        rhs.append(np.zeros(len(dest.flow)))
    coo = rows.arrays() if rows.parts else _NO_ROWS
    return coo, (np.concatenate(rhs) if rhs else np.zeros(0))


def _conservation(links, dest: _Destination, axis: _Steps) -> tuple[np.ndarray, ...]:
    """Flow conservation at each (rank, time) node the destination's columns touch, holders
    excluded (they are the sources): inflow - outflow = 1 at (d, S), else 0; a node's rows in
    sorted order. A flow in step t enters (dst, t) and leaves (src, departs(t)); a hold
    enters (r, t) and leaves (r, t - 1)."""
    node_terms: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for (i, t), c in dest.flow.items():
        l = links[i]
        node_terms.setdefault((l.dst, t), []).append((c, 1.0))
        if l.src not in dest.pre:
            node_terms.setdefault((l.src, axis.departs(t)), []).append((c, -1.0))
    for (r, t), c in dest.hold.items():
        node_terms.setdefault((r, t), []).append((c, 1.0))
        node_terms.setdefault((r, t - 1), []).append((c, -1.0))
    node_terms.setdefault((dest.d, axis.steps), [])
    r_idx, c_idx, v_idx, rhs = [], [], [], []
    for n, (node, terms) in enumerate(sorted(node_terms.items())):
        for c, v in terms:
            r_idx.append(n)
            c_idx.append(c)
            v_idx.append(v)
        rhs.append(1.0 if node == (dest.d, axis.steps) else 0.0)
    return (np.array(r_idx, dtype=np.int64), np.array(c_idx, dtype=np.int64), np.array(v_idx),
            np.array(rhs), np.array(rhs))


def _use_rows(dest: _Destination, use: dict[tuple[int, int, int], int]) -> tuple[np.ndarray, ...]:
    """u_{k,l,t} >= each flow of the destination on (l, t), one row per flow column: copies
    are free, so one send serves every destination of the class."""
    r_idx, c_idx, v_idx = [], [], []
    for n, ((i, t), c) in enumerate(dest.flow.items()):
        r_idx += [n, n]
        c_idx += [c, use[(dest.k, i, t)]]
        v_idx += [1.0, -1.0]
    count = len(dest.flow)
    return (np.array(r_idx, dtype=np.int64), np.array(c_idx, dtype=np.int64), np.array(v_idx),
            np.full(count, -np.inf), np.zeros(count))


def _pulled_links(links, group) -> list[list[int]]:
    """[g][link] -> index of g^-1(link), for every g in the group."""
    index = {l.key: i for i, l in enumerate(links)}
    inverse = [tuple(sorted(range(len(g)), key=g.__getitem__)) for g in group]
    return [[index[(h[l.src], h[l.dst])] for l in links] for h in inverse]


def _capacity_rows(topology: Topology, caps, group, index: _Index, classes, steps: int):
    """Capacity rows' flows part: sum_k m_k u_{k,l,t} (m_k the class's chunks) <= cap x (the
    tail) per step, for each link, then each group, one per orbit (its first member; same
    capacity): class g(k) on link l is class k on g^-1(l), so the row sums k's uses of every
    g^-1(l). Rows with no uses are left out. ((rows, cols, vals), cap_of_row, step_of_row)."""
    links = topology.links
    position = {l.key: i for i, l in enumerate(links)}
    pulled = _pulled_links(links, group)
    by_link_step: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for (k, i, t), c in index.use.items():
        by_link_step.setdefault((i, t), []).append((c, classes[k][2]))
    sets = [([i], caps[i]) for i in range(len(links))]
    sets += [([position[key] for key in g.links], topology.group_capacity(g)) for g in topology.groups]
    seen_sets: set = set()
    r_idx, c_idx, v_idx, cap_of_row, step_of_row = [], [], [], [], []
    for members, cap in sets:
        key = min(tuple(sorted(row[i] for i in members)) for row in pulled)  # the orbit's name
        if (key, cap) in seen_sets:
            continue
        seen_sets.add((key, cap))
        for t in range(1, steps + 1):
            terms = [term for row in pulled for i in members for term in by_link_step.get((row[i], t), [])]
            if not terms:
                continue
            r_idx += [len(cap_of_row)] * len(terms)
            c_idx += [c for c, _ in terms]
            v_idx += [float(m) for _, m in terms]
            cap_of_row.append(float(cap))
            step_of_row.append(t - 1)
    capacity = (np.array(r_idx, dtype=np.int64), np.array(c_idx, dtype=np.int64), np.array(v_idx))
    return capacity, np.array(cap_of_row), np.array(step_of_row, dtype=np.int64)


class StepRelaxation:
    """The time-expanded flow LP of one (topology, chunk classes, steps), with its cuts.

    Columns: per class and destination a flow on each (link, step) and a hold on each
    (rank, step) transition; per class a use u >= every flow of the class on a (link, step)
    (copies are free). Rows: conservation per destination, u >= f, and the capacity rows
    sum_k m_k u_{k,l,t} <= cap_l * r_t for links and groups (the tail, r or x, added per solve).
    The built rows are ``parts`` (``_Parts``; ``_build``).
    """

    def __init__(self, topology: Topology, classes: tuple[tuple[frozenset, frozenset, int], ...], steps: int,
                 group: tuple[tuple[int, ...], ...] = (), pooled: int | None = None):
        """``group``: rank permutations (a group, identity included) that preserve the topology
        and map the classes onto each other with no class fixed by an element but the identity.
        Some optimal solution is invariant under it, so only one class per orbit gets flows and
        only one link (group) per orbit a capacity row: class g(k)'s use of link l is class
        k's use of g^-1(l). The rounds vectors the model allows, and so its bound and its
        cuts, are the full model's.

        ``pooled`` (1-based): that step stands for *any number* of steps (zero included), with
        their rounds pooled (>= 0): inside it data moves any number of hops, each link carrying
        at most capacity x its rounds in all. Every schedule with at least ``steps - 1`` steps
        then fits the model (its first steps, its middle pooled, its last steps), so the least
        total is a rounds bound for every step count at once (``least_rounds_any_steps``)."""
        self.steps = steps
        self.pooled = pooled
        self.cuts: list[SplitCut] = []
        self._loads: dict[tuple[tuple[int, ...], int], float | None] = {}
        self.parts = _build(topology, classes, _Steps(steps, pooled), group or (tuple(range(topology.ranks)),))

    @property
    def applies(self) -> bool:
        """The relaxation gives a bound here (``_Parts.applies``)."""
        return self.parts.applies

    @property
    def unreachable(self) -> bool:
        """No schedule with these steps exists (``_Parts.unreachable``)."""
        return self.parts.unreachable

    @property
    def columns(self) -> int:
        return self.parts.columns

    def _model(self, tail_coo, cost_tail, lower_tail):
        """The LP: the built rows, the capacity rows with the given tail columns (after the
        built ones), and the objective: the tail's costs (the built columns cost nothing).
        (cost, column lower bounds, COO, row lower, row upper)."""
        p = self.parts
        n_cap = len(p.cap_of_row)
        rows = LpRows()
        rows.add(*p.flow_coo)
        r_idx, c_idx, v_idx = p.capacity
        t_rows, t_cols, t_vals = tail_coo
        rows.add(np.concatenate([r_idx, t_rows]), np.concatenate([c_idx, t_cols + p.columns]),
                 np.concatenate([v_idx, t_vals]), np.full(n_cap, -np.inf), np.zeros(n_cap))
        cost = np.concatenate([np.zeros(p.columns), cost_tail])
        col_lower = np.concatenate([np.zeros(p.columns), lower_tail])
        r, c, v, lo, up = rows.arrays()
        return cost, col_lower, (r, c, v), lo, up

    def _solve(self, tail_coo, cost_tail, lower_tail):
        """Solve with the tail; (objective, cut, tail column values) or None."""
        cost, col_lower, coo, lo, up = self._model(tail_coo, cost_tail, lower_tail)
        solved = solve_lp_with_duals(cost, np.full(len(cost), np.inf), coo, lo, up, LP_SECONDS, col_lower=col_lower)
        if solved is None:
            return None
        objective, row_duals, values = solved
        p = self.parts
        weights = -row_duals[p.flow_rows:p.flow_rows + len(p.cap_of_row)]  # >= 0 on the capacity rows
        a = np.bincount(p.step_of_row, weights=np.maximum(weights, 0.0) * p.cap_of_row, minlength=self.steps)
        beta = float(row_duals[:p.flow_rows] @ p.flow_rhs)
        return objective, SplitCut(tuple(float(x) for x in a), beta), values[p.columns:]

    def _least_rounds_per_step(self) -> np.ndarray:
        """1 per step, 0 for the pooled one (it may stand for no steps at all)."""
        least = np.ones(self.steps)
        if self.pooled is not None:
            least[self.pooled - 1] = 0.0
        return least

    def _rounds_tail(self, scale: float):
        """Capacity rows' tail for one column of rounds per step (per chunk unit: r_t / scale)."""
        p = self.parts
        return np.arange(len(p.cap_of_row)), p.step_of_row, -p.cap_of_row / scale

    def least_total(self, scale: int) -> float | None:
        """min sum_t r_t (per chunk unit times ``scale``) subject to r_t >= 1."""
        if self.unreachable:
            return math.inf
        S = self.steps
        solved = self._solve(self._rounds_tail(1.0), np.ones(S), self._least_rounds_per_step() / scale)
        if solved is None:
            return None
        objective, cut, optimum = solved
        self._keep(cut, (tuple(optimum), 1, None))  # the optimum itself must satisfy the cut
        return objective * scale

    def least_whole_total(self, scale: int) -> float | None:
        """min sum_t r_t over *whole* rounds per step r_t >= 1 (a MIP over the S step columns
        only; its dual bound, so a time limit still leaves a valid bound). Tighter than the
        LP: mi250 allgather at 5 steps, 3 chunks: LP 8, whole rounds 9."""
        if self.unreachable:
            return math.inf
        S = self.steps
        cost, col_lower, coo, lo, up = self._model(self._rounds_tail(float(scale)), np.ones(S),
                                                   self._least_rounds_per_step())
        return solve_mip_bound(cost, col_lower, np.full(len(cost), np.inf), coo, lo, up,
                               range(self.columns, self.columns + S), MIP_SECONDS)

    def load(self, rounds_per_step: tuple[int, ...], scale: int) -> float | None:
        """Least x with rounds x * r_t per step feasible (fractionally); > 1: ruled out."""
        if self.unreachable:
            return math.inf
        key = (tuple(rounds_per_step), scale)
        if key not in self._loads:
            self._loads[key] = self._load(*key)
        return self._loads[key]

    def _load(self, rounds_per_step: tuple[int, ...], scale: int) -> float | None:
        p = self.parts
        n_cap = len(p.cap_of_row)
        per_unit = np.array(rounds_per_step, dtype=float)[p.step_of_row] / scale
        tail = (np.arange(n_cap), np.zeros(n_cap, dtype=np.int64), -p.cap_of_row * per_unit)
        solved = self._solve(tail, np.ones(1), np.zeros(1))
        if solved is None:
            return None
        objective, cut, _ = solved
        self._keep(cut, (rounds_per_step, scale, objective))
        return objective

    def _keep(self, cut: SplitCut, check) -> None:
        """Keep a cut when it is consistent with the solve it came from (duals are floats):
        ``check`` = (rounds of that solve, scale, its load), or (its optimum per chunk unit, 1,
        None) for the least-total solve, whose optimum lies on its cut."""
        split, scale, objective = check
        lhs = sum(w * r for w, r in zip(cut.weights, split)) / scale
        if objective is None:  # least_total: the optimum (per chunk unit) lies on the cut
            if abs(lhs - cut.floor) > 1e-6 * max(1.0, cut.floor):
                return
        elif abs(lhs - 1.0) > 1e-6 or abs(cut.floor - objective) > 1e-6 * max(1.0, objective):
            return
        if all(w >= 0 for w in cut.weights) and cut.floor > 0:
            self.cuts.append(cut)

    def cut_rules_out(self, rounds_per_step: tuple[int, ...], scale: int) -> bool:
        """True when a known cut shows no schedule has exactly these rounds per step."""
        if self.unreachable:
            return True
        return any(cut.rules_out(rounds_per_step, scale) for cut in self.cuts)

    def open_splits(self, rounds: int, scale: int, max_solves: int = 24,
                    enough: int = 3, seconds: float | None = None) -> list[tuple[int, ...]] | None:
        """The splits of ``rounds`` over the steps (each >= 1) the relaxation does not rule out:
        every split is checked against the known cuts at once; then, balanced first, LPs are
        solved for splits still open (each infeasible one adds a cut, which may close many)
        until every open split is decided, ``enough`` are known feasible, ``max_solves``
        solves are spent, or (``seconds``) that much time has gone. LP-feasible splits come first, by load,
        then the undecided ones.
        None when there are too many splits to list."""
        splits = compositions(rounds, self.steps)
        if splits is None:
            return None
        if self.unreachable:
            return []
        alive = self._cut_survivors(splits, scale)
        solves = 0
        started = time.perf_counter()
        while solves < max_solves and (seconds is None or time.perf_counter() - started < seconds):
            unknown = [row for row in map(tuple, alive.tolist()) if (row, scale) not in self._loads]
            if not unknown or len(alive) - len(unknown) >= enough:
                break
            before = len(self.cuts)
            self.load(unknown[0], scale)
            solves += 1
            if len(self.cuts) > before or (self._loads[(unknown[0], scale)] or 0) > 1 + TOLERANCE:
                alive = self._cut_survivors(alive, scale)
                alive = (alive[[not self._known_out(tuple(row), scale) for row in alive.tolist()]]
                         if len(alive) else alive)
        rows = [tuple(row) for row in alive.tolist()]

        def order(split):
            value = self._loads.get((split, scale), None)
            return (value is None, value if value is not None else 0.0, max(split) - min(split), split)

        return sorted(rows, key=order)

    def _known_out(self, split: tuple[int, ...], scale: int) -> bool:
        value = self._loads.get((split, scale))
        return value is not None and value > 1 + TOLERANCE

    def _cut_survivors(self, splits: np.ndarray, scale: int) -> np.ndarray:
        if not self.cuts or not len(splits):
            return splits
        weights = np.array([cut.weights for cut in self.cuts])
        floors = np.array([cut.floor for cut in self.cuts]) * scale
        lhs = splits @ weights.T
        keep = (lhs >= floors * (1 - TOLERANCE) - TOLERANCE).all(axis=1)
        return splits[keep]

    def rules_out(self, rounds_per_step: tuple[int, ...], scale: int) -> bool:
        """True when no schedule has exactly these rounds per step (a cut, else a solve)."""
        if self.cut_rules_out(rounds_per_step, scale):
            return True
        value = self.load(rounds_per_step, scale)
        return value is not None and value > 1 + TOLERANCE


COMPOSITION_LIMIT = 200_000


@lru_cache(maxsize=64)
def _compositions(rounds: int, steps: int) -> np.ndarray | None:
    if rounds < steps or math.comb(rounds - 1, steps - 1) > COMPOSITION_LIMIT:
        return None
    from itertools import combinations

    if steps == 1:
        return np.array([[rounds]], dtype=np.int64)
    cuts = np.array(list(combinations(range(1, rounds), steps - 1)), dtype=np.int64).reshape(-1, steps - 1)
    edges = np.hstack([np.zeros((len(cuts), 1), dtype=np.int64), cuts, np.full((len(cuts), 1), rounds)])
    found = np.diff(edges, axis=1)
    spread = found.max(axis=1) - found.min(axis=1)
    return found[np.argsort(spread, kind="stable")]


def compositions(rounds: int, steps: int) -> np.ndarray | None:
    """Every way to give each of ``steps`` steps >= 1 round, ``rounds`` in all, as rows, the
    most balanced first (None when more than COMPOSITION_LIMIT).

    >>> compositions(4, 2).tolist()
    [[2, 2], [1, 3], [3, 1]]
    """
    found = _compositions(rounds, steps)
    return None if found is None else found.copy()


def _classes(collective: Collective) -> tuple[tuple[tuple[frozenset, frozenset, int], ...], int]:
    """Chunk classes (pre, post, count) in first-seen order, and the common count (1 if unequal)."""
    counts: dict[tuple[frozenset, frozenset], int] = {}
    for key in zip(collective.pre, collective.post):
        counts[key] = counts.get(key, 0) + 1
    sizes = set(counts.values())
    scale = sizes.pop() if len(sizes) == 1 else 1
    return tuple((pre, post, count // scale) for (pre, post), count in counts.items()), scale


@lru_cache(maxsize=256)
def relaxation(topology: Topology, classes: tuple, steps: int, pooled: int | None = None) -> StepRelaxation:
    return StepRelaxation(topology, classes, steps, class_symmetry(topology, classes), pooled)


@lru_cache(maxsize=64)
def class_symmetry(topology: Topology, classes: tuple) -> tuple[tuple[int, ...], ...]:
    """The search symmetries (``search_symmetries``) when they form a group that moves every
    class (so the orbit model is exact), else the identity alone.

    >>> from synth.core.generators import torus
    >>> from synth.core.collectives import allgather
    >>> len(class_symmetry(torus((4, 4)), _classes(allgather(16))[0]))
    16
    """
    from synth.core.symmetry import search_symmetries

    identity = (tuple(range(topology.ranks)),)
    pre = tuple(c[0] for c in classes)
    post = tuple(c[1] for c in classes)
    perms = [s.ranks for s in
             search_symmetries(topology, Collective("classes", topology.ranks, False, pre, post, len(pre)))]
    group = set(perms)
    if any(tuple(a[b[r]] for r in range(topology.ranks)) not in group for a in perms for b in perms):
        return identity
    keys = set(zip(pre, post))
    for g in perms:
        if g == identity[0]:
            continue
        for p, q in keys:
            if (frozenset(g[r] for r in p), frozenset(g[r] for r in q)) == (p, q):
                return identity
    return tuple(sorted(perms, key=lambda g: g != identity[0]))


def _relaxation_for(topology: Topology, collective: Collective, steps: int) -> tuple[StepRelaxation, int]:
    classes, scale = _classes(collective)
    return relaxation(topology, classes, steps), scale


def step_rounds_bound(topology: Topology, collective: Collective, steps: int) -> float | None:
    """Least total rounds of any S-step schedule (fractional relaxation); None if too big/failed.

    Returns math.inf when some destination is farther than ``steps`` hops from every holder.
    """
    if collective.combining:
        return None
    return _least_total(topology, collective, steps)


@lru_cache(maxsize=1024)
def _least_total(topology: Topology, collective: Collective, steps: int) -> float | None:
    relax, scale = _relaxation_for(topology, collective, steps)
    return relax.least_total(scale) if relax.applies else None


def _model(topology: Topology, collective: Collective, steps: int) -> tuple[StepRelaxation, int] | None:
    """The relaxation and its chunk scale, or None where it does not apply (combining
    collectives, capacities that are not whole)."""
    if collective.combining:
        return None
    relax, scale = _relaxation_for(topology, collective, steps)
    return (relax, scale) if relax.applies else None


def distribution_load(
    topology: Topology, collective: Collective, rounds_per_step: tuple[int, ...]
) -> float | None:
    """Least scale x such that rounds x * r_s per step suffice (fractionally); > 1: infeasible.

    A value above 1 proves that no schedule with exactly these rounds per step exists.
    """
    found = _model(topology, collective, len(rounds_per_step))
    if found is None:
        return None
    relax, scale = found
    return relax.load(tuple(rounds_per_step), scale)


def open_splits(topology: Topology, collective: Collective, rounds: int, steps: int,
                max_solves: int = 24, seconds: float | None = None) -> list[tuple[int, ...]] | None:
    """``StepRelaxation.open_splits`` for this collective; every split, balanced first, where
    the relaxation does not apply (combining collectives, fractional capacities); None when
    there are too many splits to list."""
    every = compositions(rounds, steps)
    if every is None:
        return None
    found = _model(topology, collective, steps)
    if found is None:
        return [tuple(row) for row in every.tolist()]
    relax, scale = found
    return relax.open_splits(rounds, scale, max_solves, seconds=seconds)


def split_ruled_out(topology: Topology, collective: Collective, rounds_per_step: tuple[int, ...],
                    solve: bool = True) -> bool:
    """True when the relaxation proves no schedule has exactly these rounds per step: a known
    cut, else (``solve``) an LP solve, which adds its cut for the next splits."""
    found = _model(topology, collective, len(rounds_per_step))
    if found is None:
        return False
    relax, scale = found
    if not solve:
        return relax.cut_rules_out(tuple(rounds_per_step), scale)
    return relax.rules_out(tuple(rounds_per_step), scale)


@lru_cache(maxsize=1024)
def least_rounds(topology: Topology, collective: Collective, steps: int) -> int:
    """Smallest whole R the relaxation allows with whole rounds in every step (``steps`` when
    no bound is available): the LP's bound, raised by the MIP over the rounds per step."""
    value = step_rounds_bound(topology, collective, steps)
    if value is None:
        return steps
    if value == math.inf:
        return math.inf  # type: ignore[return-value]
    floor = max(steps, math.ceil(value - 1e-6))
    relax, scale = _relaxation_for(topology, collective, steps)
    if floor > steps and not _whole_at_floor(relax, scale, floor):
        whole = relax.least_whole_total(scale)
        if whole is not None:
            floor = max(floor, math.ceil(whole - 1e-6))
    return floor


HEAD_STEPS = 1  # exact steps before the pooled middle of the any-steps relaxation
TAIL_STEPS = 1  # and after it (the last steps are where forwarding ends: data that first
# reaches a set of ranks in the last step must reach each of them over the set's in-links)


@lru_cache(maxsize=1024)
def least_rounds_any_steps(topology: Topology, collective: Collective) -> int | None:
    """Fewest whole rounds of any schedule with at least HEAD_STEPS + TAIL_STEPS steps, however
    many: the relaxation with the middle steps pooled (``StepRelaxation(pooled=)``). None
    where the relaxation does not apply.

    It rules out a (rounds, chunks) budget at every step count at once (mi250 allgather:
    19 rounds for 8 chunks, 12 for 5, where the rounds bound allows 19 and 12), where the
    per-step LPs would each have to be solved, and at 17+ steps each takes over a minute.
    (The MIP over whole rounds per step, which raises the per-step floors, adds nothing
    here: the pooled step's rounds are free.)
    """
    if collective.combining:
        return None
    classes, scale = _classes(collective)
    relax = relaxation(topology, classes, HEAD_STEPS + 1 + TAIL_STEPS, HEAD_STEPS + 1)
    if not relax.applies:
        return None
    if relax.unreachable:
        return math.inf  # type: ignore[return-value]
    value = relax.least_total(scale)
    return None if value is None else math.ceil(value - 1e-6)


def _whole_at_floor(relax: StepRelaxation, scale: int, floor: int) -> bool:
    """True when some split of ``floor`` rounds is known feasible without a MIP: the most
    balanced one, when its LP says so (then the MIP could not raise the floor)."""
    S = relax.steps
    split = tuple(floor // S + (1 if t < floor % S else 0) for t in range(S))
    if relax.cut_rules_out(split, scale):
        return False
    value = relax.load(split, scale)
    return value is not None and value <= 1 + TOLERANCE
