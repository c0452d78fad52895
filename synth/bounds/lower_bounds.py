"""Lower bounds, computed before any synthesis (an LP at most).

- ``steps``: the farthest hop a chunk must travel. Non-combining: max over chunks c and ranks
  d in post[c] - pre[c] of the distance from the nearest holder. Combining: max over c,
  d in post[c], h in pre[c] of dist(h, d) (every contribution must reach d).
- Bandwidth (time per byte of S, with b = S / buffer_chunks bytes per chunk), the larger of:
  (a) the flow LP (SCCL's multi-commodity relaxation): chunks with equal (pre, post) form a
      class; each class routes a unit flow to every rank that needs it (combining: from every
      contributor to every destination); a class's use of a link covers all its flows (copies
      are free); links and groups carry at most bandwidth x T. Solved when it has at most
      ``max_flow_vars`` flow variables (20k; dgx1, rings of 16) and within 10 s, else skipped.
  (b) cuts, always: for a rank set S the chunks that must leave S (non-combining: pre inside
      S, post not; combining: pre meets S, post not inside S) over the most rate links and
      groups allow out of S. Candidates: each rank and its complement; each machine, unions of
      machines (all when <= 8 machines, else the first k) and complements; on one machine, the
      prefixes 0..k-1 and their complements (bisections of rings and meshes).
- ``rounds_per_chunk``: the same LP and cuts with capacities in chunks per round, divided by
  chunks_per_rank (k-synchronous model); None when capacities are not whole.
- Combining collectives. Every chunk's post a single rank (reduce_scatter, reduce): the bound
  of the dual (``dual_collective``) on ``topology.reversed()``, which equals the direct
  relaxation (every contribution must reach the destination).
  Allreduce (pre = post = all ranks) reports the *conventional* limit of nccl-tests busbw and
  ForestColl: reduce-scatter + allgather, i.e. the RS bound plus the AG bound for the same
  chunking with chunk c owned by rank c // chunks_per_rank (rounds add too), or the proven
  bound below if larger. It is exact for schedules that are an RS followed by an AG, but it
  is NOT a bound for every allreduce: a rank that reduces for others (a hub, in-network
  reduction) lets a pipelined reduce-then-broadcast beat it (on a 4-rank star, 5 chunk-times
  against the composition's 6). ``Bounds.proven`` then holds the proven bound: the direct
  relaxation (every contribution to every rank, one shared link use per chunk) and cuts.
  Use ``proven`` to prune searches; report the conventional figure beside nccl-tests.
- ``time_us(S)`` = max(steps x alpha_min + T_links(S), T_bw(S), latency floor), with T_links the bound from
  links alone: a step costs at least alpha_min plus its heaviest link, but a group term
  carries no alpha, so alpha is only added to the link-only bound.

>>> from synth.core.collectives import allgather
>>> from synth.core.topology import Topology, Link
>>> ring = Topology("uring4", 4, tuple(Link(i, (i + 1) % 4, 25.0, 0.7) for i in range(4)))
>>> b = lower_bounds(ring, allgather(4))
>>> b.steps, b.rounds_per_chunk, round(b.busbw_gbps, 6)
(3, Fraction(3, 1), 25.0)
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from synth.bounds.flow import Demand, Network, cut_rate, flow_lp, flow_variables
from synth.core.collective import Collective
from synth.core.transforms import dual_collective
from synth.core.topology import Topology

_LP = "flow LP (multi-commodity relaxation)"
FLOW_LP_LIMIT = 20_000  # flow variables; HiGHS needs ~0.4 s at 14k, 10-20 s at 50k
_REL = 1e-7


@dataclass(frozen=True)
class Bounds:
    """Lower bounds for one collective on one topology.

    Times in microseconds; ``*_time_per_byte`` are us per byte of the nccl-tests size S.
    ``proven`` is None when these bounds are proven; for allreduce, whose reported figures
    are the reduce-scatter + allgather convention, it holds the proven bounds.
    """

    topology: str
    collective: str
    steps: int
    rounds_per_chunk: Fraction | None
    bandwidth_time_per_byte: float  # us per byte of S, links and groups
    alpha_min: float
    busbw_factor: float = 1.0
    link_time_per_byte: float = 0.0  # us per byte of S, links only
    binding: str = ""
    rounds_binding: str | None = None
    method: str = ""
    proven: Bounds | None = None  # set when this bound is a convention (allreduce)

    latency_floor: float = 0.0  # us: the alpha-cheapest path the farthest demand must take

    def time_us(self, size_bytes: float) -> float:
        """No schedule in the step model takes less time at this size."""
        return max(
            self.steps * self.alpha_min + self.link_time_per_byte * size_bytes,
            self.bandwidth_time_per_byte * size_bytes,
            self.latency_floor,
        )

    @property
    def algbw_gbps(self) -> float:
        """S / T_bw in GB/s (independent of S); inf when nothing has to move."""
        t = self.bandwidth_time_per_byte
        return math.inf if t <= 0 else 1e-3 / t

    @property
    def busbw_gbps(self) -> float:
        return self.algbw_gbps * self.busbw_factor

    def to_dict(self, size: int | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "topology": self.topology,
            "collective": self.collective,
            "steps": self.steps,
            "rounds_per_chunk": None if self.rounds_per_chunk is None else _fraction_text(self.rounds_per_chunk),
            "algbw_gbps": _finite(self.algbw_gbps),
            "busbw_gbps": _finite(self.busbw_gbps),
            "binding": self.binding,
            "rounds_binding": self.rounds_binding,
            "method": self.method,
            "size": size,
            "time_us": None if size is None else self.time_us(size),
        }
        if self.proven is not None:
            doc["proven"] = {k: v for k, v in self.proven.to_dict(size).items() if k not in ("topology", "collective", "size")}
        return doc


@dataclass(frozen=True)
class _Limit:
    """Bandwidth limits as x = chunk loads per unit of capacity (see synth.bounds.flow)."""

    full: float
    links: float
    rounds: float | None
    binding: str
    rounds_binding: str | None
    method: str


def lower_bounds(topology: Topology, collective: Collective, max_flow_vars: int = FLOW_LP_LIMIT) -> Bounds:
    """Steps, rounds and bandwidth bounds; raises CollectiveError when it cannot run at all."""
    collective.check_on(topology)
    steps = steps_bound(topology, collective)
    if not _is_allreduce(collective):
        return _bounds(topology, collective, steps, _limit(topology, collective, max_flow_vars), None)
    direct = _direct_limit(topology, collective, max_flow_vars)
    composed = _best(_composition(topology, collective, max_flow_vars), direct)
    return _bounds(topology, collective, steps, composed, _bounds(topology, collective, steps, direct, None))


def _bounds(topo: Topology, coll: Collective, steps: int, limit: _Limit, proven: Bounds | None) -> Bounds:
    rounds = None if limit.rounds is None else _to_fraction(limit.rounds / coll.chunks_per_rank)
    scale = 1.0 / (coll.buffer_chunks * 1e3)  # x (per GB/s per chunk) -> us per byte of S
    return Bounds(
        topology=topo.name,
        collective=coll.name,
        steps=steps,
        rounds_per_chunk=rounds,
        bandwidth_time_per_byte=limit.full * scale,
        alpha_min=min((l.alpha for l in topo.links), default=0.0),
        latency_floor=latency_floor(topo, coll),
        busbw_factor=coll.busbw_factor,
        link_time_per_byte=limit.links * scale,
        binding=limit.binding,
        rounds_binding=limit.rounds_binding,
        method=limit.method,
        proven=proven,
    )


def latency_floor(topology: Topology, collective: Collective) -> float:
    """The least total alpha on the path of the farthest demand (us).

    Every hop of a chunk (or of a contribution on its way to a reduction) happens in its own
    step, and a step lasts at least the alpha of each link it uses, so a schedule lasts at least
    the alpha-cheapest path from a holder to each rank that needs the chunk (combining: from every
    contributor). On dgx2x2 a chunk of the other machine crosses a 2.6 us NIC link, while
    ``steps x alpha_min`` only knows the 0.35 us NVSwitch alpha.

    >>> from synth.core.generators import ring
    >>> from synth.core.collectives import allgather
    >>> latency_floor(ring(4), allgather(4)) == 2 * ring(4).links[0].alpha
    True
    """
    dist = _alpha_distances(topology)
    best = 0.0
    for pre, post in set(zip(collective.pre, collective.post)):
        holders = sorted(pre)
        if collective.combining:
            targets = sorted(post)
            if targets and holders:
                best = max(best, float(dist[np.ix_(holders, targets)].max()))
        elif post - pre:
            best = max(best, float(dist[np.ix_(holders, sorted(post - pre))].min(axis=0).max()))
    return best if math.isfinite(best) else 0.0


def _alpha_distances(topology: Topology) -> np.ndarray:
    """[src, dst]: least sum of link alphas over paths (Dijkstra from every rank)."""
    import heapq

    out = np.full((topology.ranks, topology.ranks), math.inf)
    for start in range(topology.ranks):
        row = out[start]
        row[start] = 0.0
        heap = [(0.0, start)]
        while heap:
            d, node = heapq.heappop(heap)
            if d > row[node]:
                continue
            for link in topology.out_links[node]:
                nd = d + link.alpha
                if nd < row[link.dst]:
                    row[link.dst] = nd
                    heapq.heappush(heap, (nd, link.dst))
    return out


def steps_bound(topology: Topology, collective: Collective) -> int:
    """The largest hop distance some chunk has to cover."""
    dist = np.array(topology.hop_distances)
    best = 0.0
    for pre, post in set(zip(collective.pre, collective.post)):
        holders = sorted(pre)
        if collective.combining:
            best = max(best, float(dist[np.ix_(holders, sorted(post))].max()))
        elif post - pre:
            best = max(best, float(dist[np.ix_(holders, sorted(post - pre))].min(axis=0).max()))
    return int(best)


# ---------------------------------------------------------------------------- dispatch
def _is_allreduce(coll: Collective) -> bool:
    everyone = frozenset(range(coll.ranks))
    return coll.combining and coll.ranks > 1 and all(p == everyone for p in coll.pre + coll.post)


def _limit(topo: Topology, coll: Collective, max_flow_vars: int) -> _Limit:
    if coll.combining and all(len(p) == 1 for p in coll.post):
        dual = _direct_limit(topo.reversed(), dual_collective(coll), max_flow_vars)
        return _Limit(dual.full, dual.links, dual.rounds, _flip(dual.binding),
                      _flip(dual.rounds_binding), f"{dual.method}, for the dual on the reversed topology")
    return _direct_limit(topo, coll, max_flow_vars)


def _composition(topo: Topology, coll: Collective, max_flow_vars: int) -> _Limit:
    """Reduce-scatter then allgather, chunk c owned by rank c // chunks_per_rank."""
    n, per = coll.ranks, coll.chunks_per_rank
    owners = [c // per if coll.chunks == n * per else c % n for c in range(coll.chunks)]
    singles = tuple(frozenset({o}) for o in owners)
    everyone = (frozenset(range(n)),) * coll.chunks
    rs = Collective("reduce_scatter", n, True, everyone, singles, coll.buffer_chunks, None, per)
    ag = Collective("allgather", n, False, singles, everyone, coll.buffer_chunks, None, per)
    first, second = _limit(topo, rs, max_flow_vars), _limit(topo, ag, max_flow_vars)
    rounds = None if first.rounds is None or second.rounds is None else first.rounds + second.rounds
    return _Limit(
        first.full + second.full,
        first.links + second.links,
        rounds,
        f"reduce-scatter + allgather (allgather: {second.binding})",
        None if rounds is None else f"reduce-scatter + allgather (allgather: {second.rounds_binding})",
        "reduce-scatter + allgather composition",
    )


def _direct_limit(topo: Topology, coll: Collective, max_flow_vars: int) -> _Limit:
    cuts = _cut_limit(topo, coll)
    classes = Counter(zip(coll.pre, coll.post))
    demands = [_demands(pre, post, coll.combining) for pre, post in classes]
    net = _network(topo)
    size = flow_variables(sum(map(len, demands)), net)
    if size > max_flow_vars:
        return replace(cuts, method=f"cuts (flow LP skipped: ~{size} variables)")
    mult = list(classes.values())
    full = flow_lp(net, demands, mult, net.bandwidth, net.group_bandwidth)
    if full is None:
        return replace(cuts, method="cuts (flow LP: no optimum within the time limit)")
    links = full if not topo.groups else flow_lp(net, demands, mult, net.bandwidth, None)
    rounds = None
    if net.capacity is not None:
        if _proportional(topo):
            rounds = full * topo.min_link_bandwidth
        else:
            rounds = flow_lp(net, demands, mult, net.capacity, net.group_capacity)
    lp = _Limit(full, cuts.links if links is None else links, rounds, _LP, _LP, "flow LP + cuts")
    return _best(lp, cuts)


def _demands(pre: frozenset[int], post: frozenset[int], combining: bool) -> list[Demand]:
    if combining:
        return [Demand(frozenset({h}), d) for h in sorted(pre) for d in sorted(post) if h != d]
    return [Demand(pre, d) for d in sorted(post - pre)]


def _proportional(topo: Topology) -> bool:
    """Capacities all derived from bandwidths, so rounds = bandwidth LP x min bandwidth."""
    return all(l.capacity is None for l in topo.links) and all(g.capacity is None for g in topo.groups)


def _best(primary: _Limit, cuts: _Limit) -> _Limit:
    """Largest of each value; a cut names the binding constraint unless the primary is larger."""
    full_wins = primary.full > cuts.full * (1 + _REL)
    rounds, rounds_binding = primary.rounds, primary.rounds_binding
    if cuts.rounds is not None and (rounds is None or rounds <= cuts.rounds * (1 + _REL)):
        rounds, rounds_binding = max(cuts.rounds, rounds or 0.0), cuts.rounds_binding
    return _Limit(
        max(primary.full, cuts.full),
        max(primary.links, cuts.links),
        rounds,
        primary.binding if full_wins else cuts.binding,
        rounds_binding,
        primary.method,
    )


# ---------------------------------------------------------------------------- cuts
_NETWORKS: dict[int, tuple[Topology, Network]] = {}


def _network(topo: Topology) -> Network:
    hit = _NETWORKS.get(id(topo))
    if hit is None or hit[0] is not topo:
        if len(_NETWORKS) > 16:
            _NETWORKS.clear()
        hit = _NETWORKS[id(topo)] = (topo, Network.of(topo))
    return hit[1]


def _cut_limit(topo: Topology, coll: Collective) -> _Limit:
    net = _network(topo)
    names, masks = _candidates(topo)
    classes = Counter(zip(coll.pre, coll.post))
    mult = np.array(list(classes.values()), dtype=float)
    pre = _membership([p for p, _ in classes], coll.ranks)
    post = _membership([q for _, q in classes], coll.ranks)
    inside = masks.T.astype(float)  # ranks x candidates; float products use BLAS
    outside = 1.0 - inside
    post_inside = (post @ outside) == 0
    if coll.combining:
        leaves = (pre @ inside > 0) & ~post_inside
    else:
        leaves = ((pre @ outside) == 0) & ~post_inside
    crossing = mult @ leaves
    best = {"full": (0.0, ""), "links": (0.0, ""), "rounds": (0.0, "")}
    variants = [("full", net.bandwidth, net.group_bandwidth), ("links", net.bandwidth, None)]
    scaled = net.capacity is not None and _proportional(topo)
    if net.capacity is not None and not scaled:
        variants.append(("rounds", net.capacity, net.group_capacity))
    for i in np.flatnonzero(crossing > 0):
        in_s = masks[i]
        cut = in_s[net.src] & ~in_s[net.dst]
        for key, values, groups in variants:
            rate, group = cut_rate(net, cut, values, groups)
            x = math.inf if rate <= 0 else crossing[i] / rate
            if x > best[key][0] * (1 + _REL):
                best[key] = (x, names[i] + (f" ({group})" if group else ""))
    if not coll.combining:
        for name, mask, need in _reception_sets(topo, coll):
            into = mask[net.dst]
            for key, values, groups in variants:
                rate, group = cut_rate(net, into, values, groups)
                x = math.inf if rate <= 0 else need / rate
                if x > best[key][0] * (1 + _REL):
                    best[key] = (x, name + (f" ({group})" if group else ""))
    if scaled:  # capacities are bandwidth / min bandwidth: the same cuts, rescaled
        best["rounds"] = (best["full"][0] * topo.min_link_bandwidth, best["full"][1])
    rounds = None if net.capacity is None else best["rounds"][0]
    rounds_name = None if net.capacity is None else best["rounds"][1]
    return _Limit(best["full"][0], best["links"][0], rounds, best["full"][1], rounds_name, "cuts")


def _reception_sets(topo: Topology, coll: Collective):
    """Ranks that share one incoming group (e.g. two GPUs behind one NIC), with how many chunk
    receptions they need together: every needed copy arrives over some link into one of them
    (internal links included), so time >= receptions / (all links into the set, under groups).
    Cuts miss this: a copy that entered the set once is free for a cut, not for a reception."""
    need = np.zeros(topo.ranks)
    for (pre, post), count in Counter(zip(coll.pre, coll.post)).items():
        for rank in post - pre:
            need[rank] += count
    seen: set[frozenset[int]] = set()
    for group in topo.groups:
        ranks = frozenset(dst for _, dst in group.links)
        if len(ranks) < 2 or len(ranks) == topo.ranks or ranks in seen:
            continue
        seen.add(ranks)
        mask = np.zeros(topo.ranks, dtype=bool)
        mask[list(ranks)] = True
        listed = sorted(ranks)
        shown = _names(listed) if len(listed) <= 4 else f"{listed[0]}..{listed[-1]} ({len(listed)} ranks)"
        yield f"receptions of ranks {shown}, the destinations of {group.name}", mask, float(need[mask].sum())


def _membership(sets: list[frozenset[int]], ranks: int) -> np.ndarray:
    out = np.zeros((len(sets), ranks))
    for i, s in enumerate(sets):
        out[i, list(s)] = 1.0
    return out


def _candidates(topo: Topology) -> tuple[list[str], np.ndarray]:
    """Rank sets to cut: (names, masks[candidate, rank]); each name says which way data leaves."""
    n = topo.ranks
    found: dict[bytes, str] = {}
    masks: list[np.ndarray] = []

    def add(name: str, ranks) -> None:
        mask = np.zeros(n, dtype=bool)
        mask[list(ranks)] = True
        if 0 < mask.sum() < n and mask.tobytes() not in found:
            found[mask.tobytes()] = name
            masks.append(mask)

    machines = topo.machines or ()
    m = len(machines)
    for i, machine in enumerate(machines if m > 1 else ()):
        add(f"machine {i} out-bandwidth", machine)
        add(f"machine {i} in-bandwidth", set(range(n)) - set(machine))
    for r in range(n):
        add(f"rank {r} out-bandwidth", {r})
        add(f"rank {r} in-bandwidth", set(range(n)) - {r})
    if 2 < m <= 8:
        for size in range(2, m - 1):
            for chosen in itertools.combinations(range(m), size):
                add(f"machines {_names(chosen)} out-bandwidth", set().union(*(machines[c] for c in chosen)))
    elif m > 8:
        for k in range(2, m - 1):
            chosen = set().union(*machines[:k])
            add(f"machines 0-{k - 1} out-bandwidth", chosen)
            add(f"machines 0-{k - 1} in-bandwidth", set(range(n)) - chosen)
    for k in range(2, n - 1) if m <= 1 else ():  # bisections of rings and meshes
        add(f"ranks 0-{k - 1} out-bandwidth", range(k))
        add(f"ranks 0-{k - 1} in-bandwidth", range(k, n))
    return list(found.values()), np.array(masks, dtype=bool).reshape(len(masks), n)


def _names(chosen) -> str:
    return ",".join(map(str, chosen))


# ---------------------------------------------------------------------------- helpers
def _flip(text: str | None) -> str | None:
    """Swap in/out in a cut name (a bound on the reversed topology, read on the original)."""
    if text is None:
        return None
    return text.replace(" out-bandwidth", " \0").replace(" in-bandwidth", " out-bandwidth").replace(" \0", " in-bandwidth")


def _to_fraction(value: float) -> Fraction:
    """Nearest simple fraction when it matches the LP value, else rounded down to 1e-6."""
    near = Fraction(value).limit_denominator(1000)
    if abs(float(near) - value) <= 1e-7 * max(1.0, abs(value)):
        return near
    return Fraction(math.floor(value * 1e6 + 1e-6), 10**6)


def _fraction_text(value: Fraction) -> str:
    return str(value)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
