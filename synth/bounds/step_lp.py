"""A rounds lower bound for a *given number of steps*: the time-expanded flow relaxation.

The rounds bound of ``synth.bounds.lower_bounds`` ignores how many steps a schedule has. With S steps fixed,
every unit of a chunk's data must reach each destination along a path of at most S links,
moving one link per step (waiting is free), and step s carries at most capacity x r_s chunks
per link and group, r_s >= 1. The least sum of r_s over fractional flows is a lower bound on
the rounds R of any k-synchronous schedule with S steps and the collective's chunking; the
strategies use it to skip (S, R, C) budgets that cannot work before calling a solver.

Only non-combining collectives (the solver runs combining ones as their duals).

>>> from synth.core.generators import uring
>>> from synth.core.collectives import allgather
>>> round(step_rounds_bound(uring(4), allgather(4), 3), 6)
3.0
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from synth.milp.lp import LpRows, solve_lp
from synth.core.collective import Collective
from synth.core.topology import Topology

MAX_COLUMNS = 400_000


def step_rounds_bound(topology: Topology, collective: Collective, steps: int) -> float | None:
    """Least total rounds of any S-step schedule (fractional relaxation); None if too big/failed.

    Returns math.inf when some destination is farther than ``steps`` hops from every holder.
    """
    if collective.combining:
        return None
    return _bound(topology, collective, steps, None)


def distribution_load(
    topology: Topology, collective: Collective, rounds_per_step: tuple[int, ...]
) -> float | None:
    """Least scale x such that rounds x * r_s per step suffice (fractionally); > 1: infeasible.

    A value above 1 proves that no schedule with exactly these rounds per step exists.
    """
    if collective.combining:
        return None
    return _bound(topology, collective, len(rounds_per_step), tuple(rounds_per_step))


@lru_cache(maxsize=1024)
def _bound(topology: Topology, collective: Collective, steps: int, fixed: tuple[int, ...] | None) -> float | None:
    dist = topology.hop_distances
    links = topology.links
    caps = [topology.link_capacity(l) for l in links]
    if any(c is None for c in caps) or any(topology.group_capacity(g) is None for g in topology.groups):
        return None
    classes: dict[tuple[frozenset, frozenset], int] = {}
    for key in zip(collective.pre, collective.post):
        classes[key] = classes.get(key, 0) + 1
    S = steps
    rows = LpRows()
    col = S + 1  # columns 0..S-1 are r_1..r_S; column S is the scale x of a fixed distribution
    use: dict[tuple[int, int, int], int] = {}  # (class, link, step) -> column of u
    multiplicity: list[int] = []
    for k, ((pre, post), count) in enumerate(classes.items()):
        multiplicity.append(count)
        near = [min(dist[h][r] for h in pre) for r in range(topology.ranks)]
        for d in sorted(post - pre):
            if near[d] > S:
                return math.inf
            flow: dict[tuple[int, int], int] = {}  # (link index, step) -> column
            hold: dict[tuple[int, int], int] = {}  # (rank, step) -> column: (r, t-1) -> (r, t)
            for t in range(1, S + 1):
                for i, l in enumerate(links):
                    if l.dst in pre or near[l.src] > t - 1 or dist[l.dst][d] > S - t:
                        continue
                    flow[(i, t)] = col
                    col += 1
                for r in range(topology.ranks):
                    if r not in pre and near[r] <= t - 1 and dist[r][d] <= S - t:
                        hold[(r, t)] = col
                        col += 1
            if col > MAX_COLUMNS:
                return None
            # conservation at (r, t) for non-holders: inflow - outflow = [r == d and t == S]
            node_terms: dict[tuple[int, int], list[tuple[int, float]]] = {}
            for (i, t), c in flow.items():
                l = links[i]
                node_terms.setdefault((l.dst, t), []).append((c, 1.0))
                if l.src not in pre:
                    node_terms.setdefault((l.src, t - 1), []).append((c, -1.0))
            for (r, t), c in hold.items():
                node_terms.setdefault((r, t), []).append((c, 1.0))
                node_terms.setdefault((r, t - 1), []).append((c, -1.0))
            node_terms.setdefault((d, S), [])
            r_idx, c_idx, v_idx, rhs = [], [], [], []
            for n, ((r, t), terms) in enumerate(sorted(node_terms.items())):
                for c, v in terms:
                    r_idx.append(n)
                    c_idx.append(c)
                    v_idx.append(v)
                rhs.append(1.0 if (r, t) == (d, S) else 0.0)
            rows.add(np.array(r_idx, dtype=np.int64), np.array(c_idx, dtype=np.int64), np.array(v_idx),
                     np.array(rhs), np.array(rhs))
            # u_{k,l,t} >= f
            r_idx, c_idx, v_idx = [], [], []
            for n, ((i, t), c) in enumerate(flow.items()):
                key = (k, i, t)
                if key not in use:
                    use[key] = col
                    col += 1
                r_idx += [n, n]
                c_idx += [c, use[key]]
                v_idx += [1.0, -1.0]
            if flow:
                rows.add(np.array(r_idx, dtype=np.int64), np.array(c_idx, dtype=np.int64), np.array(v_idx),
                         np.full(len(flow), -np.inf), np.zeros(len(flow)))
    # capacity rows: sum_k m_k u_{k,l,t} - cap_l r_t <= 0 (links, then groups)
    index = {l.key: i for i, l in enumerate(links)}
    sets = [([i], caps[i]) for i in range(len(links))]
    sets += [([index[key] for key in g.links], topology.group_capacity(g)) for g in topology.groups]
    by_link_step: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for (k, i, t), c in use.items():
        by_link_step.setdefault((i, t), []).append((c, multiplicity[k]))
    r_idx, c_idx, v_idx = [], [], []
    n = 0
    for members, cap in sets:
        for t in range(1, S + 1):
            terms = [term for i in members for term in by_link_step.get((i, t), [])]
            if not terms:
                continue
            for c, m in terms:
                r_idx.append(n)
                c_idx.append(c)
                v_idx.append(float(m))
            r_idx.append(n)
            c_idx.append(t - 1)
            v_idx.append(-float(cap))
            n += 1
    if n:
        rows.add(np.array(r_idx, dtype=np.int64), np.array(c_idx, dtype=np.int64), np.array(v_idx),
                 np.full(n, -np.inf), np.zeros(n))
    cost = np.zeros(col)
    upper = np.full(col, np.inf)
    if fixed is None:
        cost[:S] = 1.0
        rows.add(np.arange(S), np.arange(S), np.ones(S), np.ones(S), np.full(S, np.inf))  # r_t >= 1
    else:
        cost[S] = 1.0  # r_t = fixed_t * x
        rows.add(np.repeat(np.arange(S), 2), np.ravel([[t, S] for t in range(S)]),
                 np.ravel([[1.0, -float(f)] for f in fixed]), np.zeros(S), np.zeros(S))
    r, c, v, lower, upper_rows = rows.arrays()
    return solve_lp(cost, upper, (r, c, v), lower, upper_rows)


def least_rounds(topology: Topology, collective: Collective, steps: int) -> int:
    """Smallest whole R the relaxation allows (``steps`` when no bound is available)."""
    value = step_rounds_bound(topology, collective, steps)
    if value is None:
        return steps
    if value == math.inf:
        return math.inf  # type: ignore[return-value]
    return max(steps, math.ceil(value - 1e-6))
