"""The numeric side of the bounds: the multi-commodity flow LP and the cut rate.

Every bound here is a value ``x`` in *chunk loads per unit of capacity*: with capacities in
GB/s, the collective needs at least ``x * b`` seconds-per-GB (b = chunk bytes); with
capacities in chunks per round it needs at least ``x`` rounds. The LP is solved by
``synth.bounds.lp`` (HiGHS); no solver object reaches this module.

``Demand`` is one unit flow a chunk class must route: from any rank in ``sources`` to ``sink``.

>>> from synth.core.topology import Topology, Link
>>> t = Topology("pair", 2, (Link(0, 1, 25.0), Link(1, 0, 25.0)))
>>> net = Network.of(t)
>>> round(flow_lp(net, [[Demand(frozenset({0}), 1)]], [2], net.bandwidth, net.group_bandwidth), 6)
0.08
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from synth.bounds.lp import LpRows, solve_lp
from synth.core.topology import Topology

_TOL = 1e-9


@dataclass(frozen=True)
class Demand:
    """A unit flow from any rank of ``sources`` to ``sink``."""

    sources: frozenset[int]
    sink: int


@dataclass(frozen=True, eq=False)
class Network:
    """A topology as numpy arrays: link ends, link and group values, group membership (CSR)."""

    ranks: int
    src: np.ndarray
    dst: np.ndarray
    bandwidth: np.ndarray
    capacity: np.ndarray | None
    group_names: tuple[str, ...]
    group_ptr: np.ndarray
    group_idx: np.ndarray
    group_bandwidth: np.ndarray
    group_capacity: np.ndarray | None

    @classmethod
    def of(cls, topo: Topology) -> "Network":
        index = {link.key: i for i, link in enumerate(topo.links)}
        sizes = [len(g.links) for g in topo.groups]
        idx = [index[key] for g in topo.groups for key in g.links]
        caps = gcaps = None
        if topo.rounds_apply:
            caps = np.array([topo.link_capacity(l) for l in topo.links], dtype=float)
            gcaps = np.array([topo.group_capacity(g) for g in topo.groups], dtype=float)
        return cls(
            ranks=topo.ranks,
            src=np.array([l.src for l in topo.links], dtype=np.int64),
            dst=np.array([l.dst for l in topo.links], dtype=np.int64),
            bandwidth=np.array([l.bandwidth for l in topo.links], dtype=float),
            capacity=caps,
            group_names=tuple(g.name for g in topo.groups),
            group_ptr=np.concatenate(([0], np.cumsum(sizes, dtype=np.int64))).astype(np.int64),
            group_idx=np.array(idx, dtype=np.int64),
            group_bandwidth=np.array([g.bandwidth for g in topo.groups], dtype=float),
            group_capacity=gcaps,
        )

    @property
    def links(self) -> int:
        return len(self.src)


# ---------------------------------------------------------------------------- flow LP
def flow_lp(
    net: Network,
    demands: Sequence[Sequence[Demand]],
    multiplicity: Sequence[int],
    link_values: np.ndarray,
    group_values: np.ndarray | None,
) -> float | None:
    """Least ``x`` such that the chunk classes can be routed (None when the solver fails).

    Class k (``multiplicity[k]`` chunks) routes a unit flow f^{k,j} for each of its demands j;
    its link use u_{k,l} >= f^{k,j}_l (copies are free); every link carries
    sum_k m_k u_{k,l} <= value_l * x, every group the same summed over its links.
    """
    if not any(demands) or not net.links:
        return 0.0  # nothing has to move (reachability is checked by the caller)
    rows = LpRows()
    columns = 1  # column 0 is x
    use = np.full((len(demands), net.links), -1, dtype=np.int64)  # column of u_{k,l}
    for k, class_demands in enumerate(demands):
        masks = [_allowed(net, d) for d in class_demands]
        used = np.flatnonzero(np.logical_or.reduce(masks)) if masks else np.zeros(0, np.int64)
        use[k, used] = np.arange(columns, columns + len(used))
        columns += len(used)
        for demand, mask in zip(class_demands, masks):
            links = np.flatnonzero(mask)
            flow = np.arange(columns, columns + len(links))
            columns += len(links)
            ones = np.ones(len(links))
            # conservation at every rank outside the sources: in - out = [rank == sink]
            node_row = np.full(net.ranks, -1, dtype=np.int64)
            inside = [v for v in range(net.ranks) if v not in demand.sources]
            node_row[inside] = np.arange(len(inside))
            rhs = np.zeros(len(inside))
            rhs[node_row[demand.sink]] = 1.0
            heads, tails = node_row[net.dst[links]], node_row[net.src[links]]
            keep = tails >= 0
            rows.add(
                np.concatenate((heads, tails[keep])),
                np.concatenate((flow, flow[keep])),
                np.concatenate((ones, -ones[keep])),
                rhs,
                rhs.copy(),
            )
            # f - u <= 0
            r = np.arange(len(links))
            rows.add(np.concatenate((r, r)), np.concatenate((flow, use[k, links])),
                     np.concatenate((ones, -ones)), np.full(len(links), -np.inf), np.zeros(len(links)))
    mult = np.asarray(multiplicity, dtype=float)
    # capacity: sum_k m_k u_{k,l} - value_l x <= 0 for every link, then for every group
    sets = [np.array([l]) for l in range(net.links)]
    values = [link_values]
    if group_values is not None and len(group_values):
        sets += [net.group_idx[net.group_ptr[g]:net.group_ptr[g + 1]] for g in range(len(group_values))]
        values.append(group_values)
    r_idx, c_idx, v_idx = [], [], []
    for i, members in enumerate(sets):
        ks, js = np.nonzero(use[:, members] >= 0)
        r_idx.append(np.full(len(ks) + 1, i))
        c_idx.append(np.concatenate((use[ks, members[js]], [0])))
        v_idx.append(np.concatenate((mult[ks], [0.0])))
    bound = np.concatenate(values)
    vals = np.concatenate(v_idx)
    ends = np.cumsum([len(v) for v in v_idx]) - 1
    vals[ends] = -bound  # the x coefficient of every row
    rows.add(np.concatenate(r_idx), np.concatenate(c_idx), vals, np.full(len(sets), -np.inf), np.zeros(len(sets)))
    r, c, v, lower, upper = rows.arrays()
    cost = np.zeros(columns)
    cost[0] = 1.0
    return solve_lp(cost, np.full(columns, np.inf), (r, c, v), lower, upper)


def _allowed(net: Network, demand: Demand) -> np.ndarray:
    """Links worth flowing on: never into a source, never out of the sink."""
    into_source = np.zeros(net.ranks, dtype=bool)
    into_source[list(demand.sources)] = True
    return ~into_source[net.dst] & (net.src != demand.sink)


def flow_variables(demand_count: int, net: Network) -> int:
    """Upper estimate of the flow LP's variables (to choose LP or cuts)."""
    return demand_count * net.links


# ---------------------------------------------------------------------------- cuts
def cut_rate(net: Network, mask: np.ndarray, link_values: np.ndarray, group_values) -> tuple[float, str]:
    """Most total rate out of the links in ``mask`` under link and group limits.

    Exact: groups that cannot bind are dropped; if no link is then in two groups the answer
    is closed-form, otherwise a small packing LP. Returns (rate, name of a limiting group or "").
    """
    link_sum = float(link_values[mask].sum())
    if group_values is None or not len(group_values) or link_sum == 0.0:
        return link_sum, ""
    on_cut = mask[net.group_idx]
    load = np.add.reduceat(np.where(on_cut, link_values[net.group_idx], 0.0), net.group_ptr[:-1])
    binding = np.flatnonzero(load > group_values * (1 + _TOL))
    if not len(binding):
        return link_sum, ""
    worst = net.group_names[binding[np.argmin(group_values[binding] / load[binding])]]
    members = [net.group_idx[net.group_ptr[g]:net.group_ptr[g + 1]] for g in binding]
    members = [m[mask[m]] for m in members]
    counts = np.bincount(np.concatenate(members), minlength=net.links)
    if counts.max() <= 1:
        return link_sum - float((load[binding] - group_values[binding]).sum()), worst
    exact = _sandwich(mask, link_values, members, group_values[binding], link_sum)
    if exact is not None:
        return exact, worst
    shared = np.flatnonzero(counts)
    column = np.full(net.links, -1, dtype=np.int64)
    column[shared] = np.arange(len(shared))
    rows = np.concatenate([np.full(len(m), i) for i, m in enumerate(members)])
    cols = column[np.concatenate(members)]
    value = solve_lp(
        -np.ones(len(shared)),
        link_values[shared],
        (rows, cols, np.ones(len(cols))),
        np.full(len(members), -np.inf),
        group_values[binding],
    )
    if value is None:  # keep a valid (over-)estimate of the rate
        return link_sum - float((load[binding] - group_values[binding]).max()), worst
    return link_sum - float(link_values[shared].sum()) - value, worst


def _sandwich(mask: np.ndarray, link_values: np.ndarray, members: list[np.ndarray], caps: np.ndarray,
              link_sum: float) -> float | None:
    """The packing LP's optimum when a feasible rate meets a valid limit, else None.

    Feasible: every link scaled down by its tightest group's cap / load (each group then
    carries at most its cap). Limits: the link sum, and for a family of disjoint groups, their
    caps plus the links outside them. On uniform fabrics (every NIC to every NIC, as in
    composed machines) the two meet, and the LP over tens of thousands of links is skipped.
    """
    scale = np.ones(len(link_values))
    for m, cap in zip(members, caps):
        share = cap / float(link_values[m].sum())
        np.minimum.at(scale, m, share)
    feasible = float((link_values[mask] * scale[mask]).sum())
    best = link_sum
    remaining = list(range(len(members)))
    for _ in range(2):  # two greedy families of disjoint groups
        taken = np.zeros(len(link_values), dtype=bool)
        family, rest = [], []
        for g in remaining:
            if taken[members[g]].any():
                rest.append(g)
            else:
                taken[members[g]] = True
                family.append(g)
        if not family:
            break
        best = min(best, float(caps[family].sum()) + float(link_values[mask & ~taken].sum()))
        remaining = rest
    return feasible if feasible >= best * (1 - 1e-12) else None
