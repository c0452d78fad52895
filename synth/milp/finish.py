"""The last ordering step as a MILP: meet every remaining need in one step, shortest step first.

Used by ``synth.milp.ordering`` when everything left fits one round; its LP relaxation is
tried first, so the MILP only runs when a one-round finish is possible at all.
"""

from __future__ import annotations

import numpy as np
import pulp

from synth.bounds.lp import solve_lp_solution
from synth.bounds.solver import MilpOptions, solve, value

FINISH_SECONDS = 20.0
_INF = np.inf


def finish_assignment(links, chunks, write_key, needed_key, cap, group_rows, group_cap,
                      solver: str) -> tuple[np.ndarray, float] | None:
    """Meet every need in one step with the shortest step: min t (in rounds) such that each
    needed (rank, chunk) gets exactly one write and every link and group carries at most
    capacity x t. Returns (which candidates to take, t), or None if the MILP found nothing."""
    keep = np.isin(write_key, needed_key)
    index = np.nonzero(keep)[0]
    if _finish_relaxation(links[index], write_key[index], cap, group_rows, group_cap, solver) > 1.0 + 1e-9:
        return None  # not even fractionally within one round
    prob = pulp.LpProblem("finish", pulp.LpMinimize)
    t = prob.add_variable("t", lowBound=0)
    x = [prob.add_variable(f"x{i}", cat="Binary") for i in range(len(index))]
    prob += t
    by_link: dict[int, list] = {}
    by_group: dict[int, list] = {}
    by_need: dict[int, list] = {}
    for var, i in zip(x, index):
        l = int(links[i])
        by_link.setdefault(l, []).append(var)
        for g in group_rows[l]:
            by_group.setdefault(int(g), []).append(var)
        by_need.setdefault(int(write_key[i]), []).append(var)
    for l, vars_ in by_link.items():
        prob += pulp.lpSum(vars_) <= float(cap[l]) * t
    for g, vars_ in by_group.items():
        prob += pulp.lpSum(vars_) <= float(group_cap[g]) * t
    for vars_ in by_need.values():
        prob += pulp.lpSum(vars_) == 1
    outcome = solve(prob, MilpOptions(solver=solver, time_limit=FINISH_SECONDS, gap=0.01))
    if not outcome.has_incumbent:
        return None
    take = np.zeros(len(links), dtype=bool)
    for var, i in zip(x, index):
        if value(var) > 0.5:
            take[i] = True
    chosen = links[take]
    rounds = float((np.bincount(chosen, minlength=len(cap)) / cap).max()) if len(chosen) else 0.0
    group_index, _ = groups_of(chosen, group_rows)
    if len(group_index):
        rounds = max(rounds, float((np.bincount(group_index, minlength=len(group_cap)) / group_cap).max()))
    return take, rounds


def _finish_relaxation(links, write_key, cap, group_rows, group_cap, solver: str) -> float:
    """The LP relaxation of ``finish_assignment``: a lower bound on the last step's rounds."""
    n = len(links)
    t_col = n
    rows, cols, vals = [], [], []
    link_ids, link_row = np.unique(links, return_inverse=True)
    rows += [link_row, np.arange(len(link_ids))]
    cols += [np.arange(n), np.full(len(link_ids), t_col)]
    vals += [np.ones(n), -cap[link_ids]]
    offset = len(link_ids)
    group_index, position = groups_of(links, group_rows)
    if len(group_index):
        g_ids, g_row = np.unique(group_index, return_inverse=True)
        rows += [g_row + offset, np.arange(len(g_ids)) + offset]
        cols += [position, np.full(len(g_ids), t_col)]
        vals += [np.ones(len(group_index)), -group_cap[g_ids]]
        offset += len(g_ids)
    need_ids, need_row = np.unique(write_key, return_inverse=True)
    rows.append(need_row + offset)
    cols.append(np.arange(n))
    vals.append(np.ones(n))
    lower = np.concatenate([np.full(offset, -_INF), np.ones(len(need_ids))])
    upper = np.concatenate([np.zeros(offset), np.ones(len(need_ids))])
    cost = np.zeros(n + 1)
    cost[t_col] = 1.0
    col_upper = np.concatenate([np.ones(n), [_INF]])
    solution = solve_lp_solution(cost, col_upper, (np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)),
                                 lower, upper, solver=solver)
    return _INF if solution is None else solution[0]


def groups_of(links: np.ndarray, group_rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(group index, position in ``links``) for every group of every listed link."""
    sizes = np.array([len(group_rows[l]) for l in range(len(group_rows))], dtype=np.int64)
    flat = np.concatenate(group_rows) if len(group_rows) and sizes.sum() else np.zeros(0, dtype=np.int64)
    ptr = np.concatenate(([0], np.cumsum(sizes)))
    counts = sizes[links]
    position = np.repeat(np.arange(len(links)), counts)
    starts = np.repeat(ptr[links], counts)
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return flat[starts + within].astype(np.int64), position
