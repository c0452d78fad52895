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
    symmetry: np.ndarray | None = None,
) -> float | None:
    """Least ``x`` such that the chunk classes can be routed (None when the solver fails).

    Class k (``multiplicity[k]`` chunks) routes a unit flow f^{k,j} for each of its demands j;
    its link use u_{k,l} >= f^{k,j}_l (copies are free); every link carries
    sum_k m_k u_{k,l} <= value_l * x, every group the same summed over its links.

    ``symmetry``: a group of rank permutations [element, rank] (closed under composition). Its
    elements that map links, groups (with their values) and classes (with their multiplicities)
    onto alike ones leave the LP unchanged, and the LP is then solved on one commodity per orbit
    (``_symmetric_rows``, docs/bounds.md): the same optimum, far fewer variables.
    """
    if not any(demands) or not net.links:
        return 0.0  # nothing has to move (reachability is checked by the caller)
    reduced = None
    if symmetry is not None and len(symmetry) > 1:
        reduced = _symmetric_rows(net, demands, multiplicity, link_values, group_values, symmetry)
    rows, columns = reduced or _whole_rows(net, demands, multiplicity, link_values, group_values)
    r, c, v, lower, upper = rows.arrays()
    cost = np.zeros(columns)
    cost[0] = 1.0
    return solve_lp(cost, np.full(columns, np.inf), (r, c, v), lower, upper)


def _whole_rows(net: Network, demands: Sequence[Sequence[Demand]], multiplicity: Sequence[int],
                link_values: np.ndarray, group_values: np.ndarray | None) -> tuple[LpRows, int]:
    """The flow LP's rows and column count (column 0 is x), every class and demand its own."""
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
            _conservation(rows, net, demand, links, flow)
            _covered(rows, flow, use[k, links])
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
    return rows, columns


def _conservation(rows: LpRows, net: Network, demand: Demand, links: np.ndarray, flow: np.ndarray) -> None:
    """in - out = [rank == sink] at every rank outside the demand's sources, over ``links``
    (flow column ``flow[i]`` on link ``links[i]``)."""
    ones = np.ones(len(links))
    node_row = np.full(net.ranks, -1, dtype=np.int64)
    inside = [v for v in range(net.ranks) if v not in demand.sources]
    node_row[inside] = np.arange(len(inside))
    rhs = np.zeros(len(inside))
    rhs[node_row[demand.sink]] = 1.0
    heads, tails = node_row[net.dst[links]], node_row[net.src[links]]
    keep = tails >= 0
    rows.add(np.concatenate((heads, tails[keep])), np.concatenate((flow, flow[keep])),
             np.concatenate((ones, -ones[keep])), rhs, rhs.copy())


def _covered(rows: LpRows, flow: np.ndarray, use: np.ndarray) -> None:
    """f - u <= 0: column ``flow[i]`` at most column ``use[i]`` (a class's use covers its flows)."""
    r = np.arange(len(flow))
    ones = np.ones(len(flow))
    rows.add(np.concatenate((r, r)), np.concatenate((flow, use)), np.concatenate((ones, -ones)),
             np.full(len(flow), -np.inf), np.zeros(len(flow)))


@dataclass(frozen=True, eq=False)
class _Action:
    """A group G acting on one flow LP: per element, the image of every link, group, source
    set and class (indices into the LP's own; -1 where an element has none)."""

    perms: np.ndarray        # [element, rank]
    links: np.ndarray        # [element, link]
    groups: np.ndarray       # [element, group]
    sets: np.ndarray         # [element, source set]
    classes: np.ndarray      # [element, class]

    def keep(self, ok: np.ndarray) -> "_Action":
        return _Action(self.perms[ok], self.links[ok], self.groups[ok], self.sets[ok], self.classes[ok])


def _symmetric_rows(net: Network, demands: Sequence[Sequence[Demand]], multiplicity: Sequence[int],
                    link_values: np.ndarray, group_values: np.ndarray | None,
                    symmetry: np.ndarray) -> tuple[LpRows, int] | None:
    """The flow LP over orbits (as ``_whole_rows``), or None when no element but the identity is
    a symmetry of this LP, or the given permutations are not a group.

    G: the elements of ``symmetry`` that map every link onto a link of equal value, every group
    onto a group of equal value and every class onto a class of equal multiplicity (a subgroup).
    Per orbit of classes, one representative k0 with stabiliser H; its use u_{k0,l} is one
    column per H-orbit of links, and only one demand per H-orbit of its demands gets a flow
    (the others are its images under H, which the u columns cover alike). Class g(k0) uses
    link g(l) as k0 uses l, so every link's load is the same across its G-orbit: one capacity
    row per orbit of links and per orbit of groups. Any solution of this LP is one of the full
    LP (images of the flows), and averaging a full solution over G gives one of this LP with
    the same x: the optima are equal.
    """
    n = net.ranks
    keep = [k for k, d in enumerate(demands) if d]
    demands = [list(demands[k]) for k in keep]
    mult = np.array([multiplicity[k] for k in keep], dtype=float)
    source_sets = sorted({d.sources for ds in demands for d in ds}, key=sorted)
    set_of = {s: i for i, s in enumerate(source_sets)}
    codes = [np.sort([set_of[d.sources] * n + d.sink for d in ds]) for ds in demands]  # a class: its demands
    members = [np.sort(net.group_idx[net.group_ptr[g]:net.group_ptr[g + 1]])
               for g in range(0 if group_values is None else len(group_values))]
    act = _action(net, np.asarray(symmetry, dtype=np.int64), link_values, group_values, members,
                  [np.array(sorted(s), dtype=np.int64) for s in source_sets], codes, mult)
    if act is None:
        return None
    rows = LpRows()
    columns = 1  # column 0 is x
    rep_class = act.classes.min(axis=0)  # orbit representative of each class (the group is closed)
    use: dict[int, np.ndarray] = {}      # rep class -> column of u per link (-1: unused)
    for k0 in np.unique(rep_class).tolist():
        stab = act.classes[:, k0] == k0
        orbit = act.links[stab].min(axis=0)  # H-orbit label of every link
        code = codes[k0]
        ds = [demands[k0][j] for j in np.argsort([set_of[d.sources] * n + d.sink for d in demands[k0]])]
        images = act.sets[stab][:, code // n] * n + act.perms[stab][:, code % n]  # in ``code``: H fixes k0
        labels = np.searchsorted(code, images).min(axis=0)  # H-orbit label of every demand
        reps = [j for j in range(len(ds)) if labels[j] == j]
        masks = [_allowed(net, ds[j]) for j in reps]
        used = np.unique(orbit[np.logical_or.reduce(masks)])
        column = np.full(net.links, -1, dtype=np.int64)
        column[used] = np.arange(columns, columns + len(used))
        columns += len(used)
        use[k0] = column[orbit]
        for j, mask in zip(reps, masks):
            on = np.flatnonzero(mask)
            flow = np.arange(columns, columns + len(on))
            columns += len(on)
            _conservation(rows, net, ds[j], on, flow)
            _covered(rows, flow, use[k0][on])
    _orbit_capacity(rows, act, use, rep_class, mult, link_values, group_values, members)
    return rows, columns


def _action(net: Network, perms: np.ndarray, link_values: np.ndarray, group_values: np.ndarray | None,
            members: list[np.ndarray], source_sets: list[np.ndarray], codes: list[np.ndarray],
            mult: np.ndarray) -> _Action | None:
    """The elements of ``perms`` that are symmetries of the LP, and how they act on it; None when
    only the identity is, or they are no group, or two groups (classes) share their links
    (demands), so that an image would be ambiguous."""
    n = net.ranks
    link_id = np.full(n * n, -1, dtype=np.int64)
    link_id[net.src * n + net.dst] = np.arange(net.links)
    image = link_id[perms[:, net.src] * n + perms[:, net.dst]]  # [element, link]
    ok = (image >= 0).all(axis=1)
    ok[ok] = (link_values[image[ok]] == link_values[None, :]).all(axis=1)
    group_image = _set_images(members, lambda m: image[:, m], len(perms))
    set_image = _set_images(source_sets, lambda m: perms[:, m], len(perms))
    if group_image is None or set_image is None:
        return None
    class_image = _set_images(
        codes, lambda c: np.where(set_image[:, c // n] >= 0, set_image[:, c // n] * n + perms[:, c % n], -1),
        len(perms))
    if class_image is None:
        return None
    if members:
        ok &= (group_image >= 0).all(axis=1)
        ok[ok] = (group_values[group_image[ok]] == group_values[None, :]).all(axis=1)
    ok &= (class_image >= 0).all(axis=1)
    ok[ok] = (mult[class_image[ok]] == mult[None, :]).all(axis=1)
    act = _Action(perms, image, group_image, set_image, class_image).keep(ok)
    return act if len(act.perms) > 1 and _is_group(act.perms) else None


def _orbit_capacity(rows: LpRows, act: _Action, use: dict[int, np.ndarray], rep_class: np.ndarray,
                    mult: np.ndarray, link_values: np.ndarray, group_values: np.ndarray | None,
                    members: list[np.ndarray]) -> None:
    """One capacity row per G-orbit of links and of groups. The load of link l is
    sum_k m_k u_{k0, g_k^-1 l}, g_k an element taking k's representative k0 to k."""
    links = act.links.shape[1]
    inverse = np.empty_like(act.links)
    np.put_along_axis(inverse, act.links, np.arange(links)[None, :].repeat(len(act.links), 0), axis=1)
    coset = [int(np.argmax(act.classes[:, rep_class[k]] == k)) for k in range(len(rep_class))]
    rep_links = np.flatnonzero(act.links.min(axis=0) == np.arange(links))
    sets = [np.array([l]) for l in rep_links.tolist()]
    values = [link_values[rep_links]]
    if members:
        rep_groups = np.flatnonzero(act.groups.min(axis=0) == np.arange(len(members)))
        sets += [members[g] for g in rep_groups.tolist()]
        values.append(group_values[rep_groups])
    r_idx, c_idx, v_idx = [], [], []
    for i, on in enumerate(sets):
        for k in range(len(rep_class)):
            col = use[int(rep_class[k])][inverse[coset[k], on]]
            col = col[col >= 0]
            r_idx.append(np.full(len(col), i))
            c_idx.append(col)
            v_idx.append(np.full(len(col), mult[k]))
    bound = np.concatenate(values)
    rows.add(np.concatenate(r_idx + [np.arange(len(sets))]), np.concatenate(c_idx + [np.zeros(len(sets), np.int64)]),
             np.concatenate(v_idx + [-bound]), np.full(len(sets), -np.inf), np.zeros(len(sets)))


def _set_images(sets: list[np.ndarray], image_of, elements: int) -> np.ndarray | None:
    """[element, i]: the index in ``sets`` (sorted int arrays) of the image of set i, -1 where it
    is none of them; ``image_of(a)`` maps an array [..., k] of members to their images
    [element, ..., k] (-1 for none). None when two of the sets are equal."""
    out = np.full((elements, len(sets)), -1, dtype=np.int64)
    for size in sorted({len(s) for s in sets}):
        which = [i for i, s in enumerate(sets) if len(s) == size]
        known = np.array([sets[i] for i in which], dtype=np.int64).reshape(len(which), size)
        images = np.sort(np.asarray(image_of(known), dtype=np.int64), axis=-1)  # [element, set, size]
        both = np.concatenate((known, images.reshape(-1, size)))
        _, inverse = np.unique(both, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        if len(np.unique(inverse[:len(which)])) < len(which):
            return None
        index = np.full(int(inverse.max()) + 1, -1, dtype=np.int64)
        index[inverse[:len(which)]] = np.array(which)
        found = index[inverse[len(which):]].reshape(images.shape[:2])
        found[(images < 0).any(axis=-1)] = -1
        out[:, which] = found
    return out


def _is_group(perms: np.ndarray) -> bool:
    """Whether the permutations [element, rank] are closed under composition (and so a group):
    the group that generators drawn from them make, one at a time, is the set itself."""
    have = {p.tobytes() for p in perms}
    identity = np.arange(perms.shape[1], dtype=perms.dtype)
    if identity.tobytes() not in have:
        return False
    group, gens = [identity], []
    seen = {identity.tobytes()}
    for p in perms:
        if p.tobytes() in seen:
            continue
        gens.append(p)
        frontier = list(group)
        while frontier:
            nxt = []
            for g in frontier:
                for gen in gens:
                    h = gen[g]
                    key = h.tobytes()
                    if key in seen:
                        continue
                    if key not in have:
                        return False
                    seen.add(key)
                    group.append(h)
                    nxt.append(h)
            frontier = nxt
    return len(seen) == len(have)


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
