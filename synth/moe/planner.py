"""The fast planner: who carries each machine crossing, by levelling, in array operations.

Senders: every machine's crossings are shared among its ranks in proportion to their bandwidth
out of the machine (``port_bandwidth``); a rank keeps its own tokens' crossings up to its share
and hands the rest (relayed over the machine's own links) to the ranks below theirs.
Receivers: a crossing first goes to the destination on its machine that the fewest crossings
compete for (each crossing counted 1/|destinations| at each); then every machine's incoming
crossings are levelled the same way, the excess landing on ranks below their share, which
forward it. Both levellings are exact (every rank within one token of its share) and no step
loops over tokens. ``best_depth`` then pipelines the plan at the depth the step model likes best.
"""

from __future__ import annotations

import numpy as np

from synth.moe.costing import LinkTable, port_bandwidth
from synth.moe.plan import Carriers, DispatchPlan, Hops, Traffic

PIPELINE_DEPTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # crossing steps best_depth tries, in order


def plan_carriers(traffic: Traffic) -> Carriers:
    """Levelled senders and receivers for every crossing (see the module docstring)."""
    if not traffic.crossings:  # one machine, or every token stays on its own
        return Carriers(traffic.source, traffic.source)
    topology = traffic.topology
    machine_of = np.asarray(topology.machine_of, dtype=np.int64)
    out_weight, in_weight = port_bandwidth(topology, across=True)
    sender = level(traffic.source, machine_of, out_weight, traffic.token)
    first = _least_contended(traffic)
    receiver = level(first, machine_of, in_weight, traffic.token)
    return Carriers(sender, receiver)


def best_depth(plan: DispatchPlan, table: LinkTable, chunk_bytes: float) -> tuple[Hops, int]:
    """The plan at the depth in ``PIPELINE_DEPTHS`` with the least step-model time, and that depth."""
    best: tuple[Hops, int, float] | None = None
    for depth in PIPELINE_DEPTHS:
        hops = plan.hops(depth)
        took = table.time_us(hops, chunk_bytes)
        if best is None or took < best[2]:
            best = (hops, depth, took)
    return best[0], best[1]


def level(choice: np.ndarray, pool_of: np.ndarray, weight: np.ndarray, tiebreak: np.ndarray) -> np.ndarray:
    """``choice`` (a rank per item) with each pool's items shared in proportion to ``weight``: a
    rank keeps its items up to its share (largest remainders make the shares whole) and the rest,
    those last by ``tiebreak``, move to the ranks below their shares in the same pool."""
    ranks = len(pool_of)
    count = np.bincount(choice, minlength=ranks)
    target = _shares(count, pool_of, weight)
    order = np.lexsort((tiebreak, choice))
    sorted_choice = choice[order]
    starts = np.searchsorted(sorted_choice, np.arange(ranks))
    position = np.arange(len(order)) - starts[sorted_choice]
    excess = order[position >= target[sorted_choice]]
    if not len(excess):
        return choice
    excess = excess[np.argsort(pool_of[choice[excess]], kind="stable")]
    by_pool = np.argsort(pool_of, kind="stable")
    slots = np.repeat(by_pool, np.maximum(target - count, 0)[by_pool])
    moved = choice.copy()
    moved[excess] = slots
    return moved


def _shares(count: np.ndarray, pool_of: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Whole per-rank targets: each pool's total split by weight, largest remainders rounded up."""
    pools = int(pool_of.max()) + 1
    total = np.bincount(pool_of, weights=count, minlength=pools)
    mass = np.bincount(pool_of, weights=weight, minlength=pools)
    exact = np.where(mass[pool_of] > 0, total[pool_of] * weight / np.where(mass[pool_of] > 0, mass[pool_of], 1), 0)
    target = np.floor(exact + 1e-9).astype(np.int64)
    short = (total - np.bincount(pool_of, weights=target, minlength=pools)).round().astype(np.int64)
    order = np.lexsort((-(exact - target), pool_of))  # per pool, largest remainder first
    rank_in_pool = np.arange(len(order)) - np.searchsorted(pool_of[order], pool_of[order])
    target[order[rank_in_pool < short[pool_of[order]]]] += 1
    return target


def _least_contended(traffic: Traffic) -> np.ndarray:
    """Per crossing, the destination on its machine with the least contention (the crossings
    that may land there, each counted 1/its destinations on the machine); ties by rank."""
    crossing, rank = traffic.candidates  # sorted by crossing
    per = np.bincount(crossing, minlength=traffic.crossings)
    contention = np.bincount(rank, weights=1.0 / per[crossing], minlength=traffic.topology.ranks)
    by_contention = np.lexsort((np.arange(len(contention)), contention))  # ranks, least contended first
    place = np.empty_like(by_contention)
    place[by_contention] = np.arange(len(by_contention))
    starts = np.flatnonzero(np.r_[True, crossing[1:] != crossing[:-1]])
    return by_contention[np.minimum.reduceat(place[rank], starts)]
