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
      From ``SYMMETRIC_FLOW_MIN`` flow variables on it is solved per orbit of the topology's
      automorphisms: the same optimum, far fewer variables (docs/bounds.md).
  (b) cuts, always: for a rank set S the chunks that must leave S (non-combining: pre inside
      S, post not; combining: pre meets S, post not inside S) over the most rate links and
      groups allow out of S. Candidates: each rank and its complement; each machine, unions of
      machines (all when <= 8 machines, else the first k) and complements; on one machine, the
      prefixes 0..k-1 and their complements (bisections of rings and meshes).
- ``rounds_per_chunk``: the same LP and cuts with capacities in chunks per round, divided by
  chunks_per_rank (k-synchronous model); None when capacities are not whole.
- Combining collectives. Every chunk's post a single rank (reduce_scatter, reduce): the bound
  of the dual (``synth.core.reductions.DUAL``) on ``topology.reversed()``, which equals the direct
  relaxation (every contribution must reach the destination).
  Allreduce (pre = post = all ranks) reports the *conventional* limit of nccl-tests busbw and
  ForestColl: reduce-scatter + allgather, i.e. the RS bound plus the AG bound for the same
  chunking with chunk c owned by rank c // chunks_per_rank (rounds add too), or the proven
  bound below if larger. It is exact for schedules that are an RS followed by an AG, but it
  is NOT a bound for every allreduce: a rank that reduces for others (a hub, in-network
  reduction) lets a pipelined reduce-then-broadcast beat it (on a 4-rank star, 5 chunk-times
  against the composition's 6). ``Bounds.proven`` then holds the proven bound: the direct
  relaxation (every contribution to every rank, one shared link use per chunk), cuts, and
  across machines the machines' exchange (``synth.bounds.machine_exchange``: without a fabric
  that sums, every chunk crosses between M machines 2(M-1) times).
  Use ``proven`` to prune searches; report the conventional figure beside nccl-tests.
- Mixture-of-experts dispatch and combine (one chunk a token, 10^5 chunks and more): the rank
  and machine cuts over arrays (``synth.bounds.moe_cuts``); no flow LP.
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

import math
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from synth.bounds.cuts import REL, Limit, cut_limit, network_of, proportional
from synth.bounds.flow import Demand, flow_lp, flow_variables
from synth.bounds.machine_exchange import machine_exchange_limit
from synth.bounds.moe_cuts import MOE_NAMES, moe_bounds
from synth.bounds.steps import latency_floor, steps_bound
from synth.bounds.switches import exchange_limit, port_view, reducing
from synth.core.collective import Collective
from synth.core.reductions import DUAL, Part
from synth.core.symmetry import AUTOMORPHISM_LIMIT, automorphisms, rotation_group
from synth.core.topology import Topology

_LP = "flow LP (multi-commodity relaxation)"
FLOW_LP_LIMIT = 20_000  # flow variables; HiGHS needs ~0.4 s at 14k, 10-20 s at 50k
# flow variables from which the LP is solved per orbit of the topology's automorphisms: the same
# optimum (docs/bounds.md); torus:4x4 allgather 15360 variables, 4.5 s whole, 0.04 s per orbit
SYMMETRIC_FLOW_MIN = 5_000


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
            doc["proven"] = {k: v for k, v in self.proven.to_dict(size).items()
                             if k not in ("topology", "collective", "size")}
        return doc


def lower_bounds(topology: Topology, collective: Collective, max_flow_vars: int = FLOW_LP_LIMIT,
                 symmetry: np.ndarray | None = None) -> Bounds:
    """Steps, rounds and bandwidth bounds; raises CollectiveError when it cannot run at all.

    ``symmetry``: rank permutations [element, rank] that are automorphisms of the topology,
    preserve the collective and act freely (a ``synth.core.orbits.Quotient``'s ``ranks``); cut
    candidates that are images of one another are then evaluated once. The bounds are the same.
    """
    started = time.perf_counter()
    try:
        return _lower_bounds(topology, collective, max_flow_vars, symmetry)
    finally:
        _SPENT[0] += time.perf_counter() - started


_SPENT = [0.0]  # seconds inside lower_bounds, in this process


def bound_seconds() -> float:
    """Seconds ``lower_bounds`` has taken in this process (what a benchmark reports as its bound
    time: cuts, flow LPs and the automorphisms they use; not the step LPs of a search)."""
    return _SPENT[0]


def _lower_bounds(topology: Topology, collective: Collective, max_flow_vars: int,
                  symmetry: np.ndarray | None) -> Bounds:
    if collective.name in MOE_NAMES:  # one chunk a token: counted over arrays, not per chunk
        return moe_bounds(topology, collective)
    collective.check_on(topology)
    if topology.switches:
        return _switch_bounds(topology, collective)
    steps = steps_bound(topology, collective)
    if not _is_allreduce(collective):
        return _bounds(topology, collective, steps, _limit(topology, collective, max_flow_vars, symmetry), None)
    direct = _with_exchanges(_direct_limit(topology, collective, max_flow_vars, symmetry),
                             (machine_exchange_limit(topology, collective),))
    composed = _best(_composition(topology, collective, max_flow_vars, symmetry), direct)
    return _bounds(topology, collective, steps, composed, _bounds(topology, collective, steps, direct, None))


def _switch_bounds(topology: Topology, collective: Collective) -> Bounds:
    """Bounds on a topology with switches: cuts on the port view (``synth.bounds.switches``)."""
    view = port_view(topology)
    steps = steps_bound(view, collective)
    note = "cuts over links and switch ports (flow LP skipped: a switch entry is a hyperedge)"
    if not _is_allreduce(collective):
        limit = _limit(view, collective, 0)
        return replace(_bounds(view, collective, steps, replace(limit, links=0.0, method=note), None),
                       topology=topology.name)
    cuts = replace(_direct_limit(view, collective, 0), links=0.0, method=note)
    direct = replace(_with_exchanges(cuts, (exchange_limit(topology, collective, view),
                                            machine_exchange_limit(topology, collective, view))), links=0.0)
    proven = replace(_bounds(view, collective, steps, direct, None), topology=topology.name)
    if reducing(topology):
        names = [s.name for s in topology.switches if s.reduce or s.reduce_multicast]
        switches = ", ".join(names) if len(names) <= 3 else f"{names[0]} .. {names[-1]} ({len(names)} switches)"
        claim = "; every rank sends and receives the buffer" if direct.binding == cuts.binding else ""
        return replace(proven, binding=f"{proven.binding}{claim} (in-switch reduction: {switches})")
    composed = _best(_composition(view, collective, 0), direct)
    return replace(_bounds(view, collective, steps, replace(composed, links=0.0, method=note), proven),
                   topology=topology.name)


def _bounds(topo: Topology, coll: Collective, steps: int, limit: Limit, proven: Bounds | None) -> Bounds:
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


# ---------------------------------------------------------------------------- dispatch
def _is_allreduce(coll: Collective) -> bool:
    everyone = frozenset(range(coll.ranks))
    return coll.combining and coll.ranks > 1 and all(p == everyone for p in coll.pre + coll.post)


# (id(topology), collective, ...) -> (topology, its limit), least recently used first
_LIMITS: OrderedDict[tuple, tuple[Topology, Limit]] = OrderedDict()
LIMITS_KEPT = 32


def _limit(topo: Topology, coll: Collective, max_flow_vars: int, symmetry=None) -> Limit:
    """``_computed_limit``, once per (topology, collective, flow-LP size cap, symmetry) in a process:
    an allreduce's bound computes its reduce-scatter and allgather parts, which the walks over
    those parts then ask for again (issue 43: the flow LP is most of a frontier's time)."""
    key = (id(topo), coll, max_flow_vars, None if symmetry is None else np.asarray(symmetry).tobytes())
    hit = _LIMITS.get(key)
    if hit is not None and hit[0] is topo:
        _LIMITS.move_to_end(key)
        return hit[1]
    limit = _computed_limit(topo, coll, max_flow_vars, symmetry)
    _LIMITS[key] = (topo, limit)
    while len(_LIMITS) > LIMITS_KEPT:
        _LIMITS.popitem(last=False)
    return limit


def _computed_limit(topo: Topology, coll: Collective, max_flow_vars: int, symmetry=None) -> Limit:
    if coll.combining and all(len(p) == 1 for p in coll.post):
        (part,) = DUAL.apply(Part.of(topo, coll))
        dual = _direct_limit(part.topology, part.collective, max_flow_vars, symmetry)
        return Limit(dual.full, dual.links, dual.rounds, _flip(dual.binding),
                      _flip(dual.rounds_binding), f"{dual.method}, for the dual on the reversed topology")
    return _direct_limit(topo, coll, max_flow_vars, symmetry)


def _composition(topo: Topology, coll: Collective, max_flow_vars: int, symmetry=None) -> Limit:
    """Reduce-scatter then allgather, chunk c owned by rank c // chunks_per_rank."""
    n, per = coll.ranks, coll.chunks_per_rank
    owners = [c // per if coll.chunks == n * per else c % n for c in range(coll.chunks)]
    singles = tuple(frozenset({o}) for o in owners)
    everyone = (frozenset(range(n)),) * coll.chunks
    rs = Collective("reduce_scatter", n, True, everyone, singles, coll.buffer_chunks, None, per)
    ag = Collective("allgather", n, False, singles, everyone, coll.buffer_chunks, None, per)
    first, second = _limit(topo, rs, max_flow_vars, symmetry), _limit(topo, ag, max_flow_vars, symmetry)
    rounds = None if first.rounds is None or second.rounds is None else first.rounds + second.rounds
    return Limit(
        first.full + second.full,
        first.links + second.links,
        rounds,
        f"reduce-scatter + allgather (allgather: {second.binding})",
        None if rounds is None else f"reduce-scatter + allgather (allgather: {second.rounds_binding})",
        "reduce-scatter + allgather composition",
    )


def _direct_limit(topo: Topology, coll: Collective, max_flow_vars: int, symmetry=None) -> Limit:
    cuts = cut_limit(topo, coll, symmetry)
    classes = Counter(zip(coll.pre, coll.post))
    demands = [_demands(pre, post, coll.combining) for pre, post in classes]
    net = network_of(topo)
    size = flow_variables(sum(map(len, demands)), net)
    if size > max_flow_vars:
        return replace(cuts, method=f"cuts (flow LP skipped: ~{size} variables)")
    mult = list(classes.values())
    group = _flow_symmetry(topo) if size >= SYMMETRIC_FLOW_MIN else None
    full = flow_lp(net, demands, mult, net.bandwidth, net.group_bandwidth, group)
    if full is None:
        return replace(cuts, method="cuts (flow LP: no optimum within the time limit)")
    links = full if not topo.groups else flow_lp(net, demands, mult, net.bandwidth, None, group)
    rounds = None
    if net.capacity is not None:
        if proportional(topo):
            rounds = full * topo.min_link_bandwidth
        else:
            rounds = flow_lp(net, demands, mult, net.capacity, net.group_capacity, group)
    lp = Limit(full, cuts.links if links is None else links, rounds, _LP, _LP, "flow LP + cuts")
    return _best(lp, cuts)


def _flow_symmetry(topo: Topology) -> np.ndarray | None:
    """A group of automorphisms for the flow LP to solve per orbit (None: the identity alone):
    all of them when there are fewer than ``AUTOMORPHISM_LIMIT`` (found once per topology and its
    reversal, and shared with the step LP and the searches), else its rank rotations."""
    perms = automorphisms(topo, AUTOMORPHISM_LIMIT)
    if len(perms) >= AUTOMORPHISM_LIMIT:  # a truncated list is no group
        perms = rotation_group(topo)
    return np.array(perms, dtype=np.int64) if len(perms) > 1 else None


def _demands(pre: frozenset[int], post: frozenset[int], combining: bool) -> list[Demand]:
    if combining:
        return [Demand(frozenset({h}), d) for h in sorted(pre) for d in sorted(post) if h != d]
    return [Demand(pre, d) for d in sorted(post - pre)]


def _with_exchanges(direct: Limit, exchanges) -> Limit:
    """``direct`` (the proven allreduce limit: cuts, and the flow LP where it runs) raised by the
    exchange bounds that apply (None: does not): the switches' (``exchange_limit``) and the
    machines' (``machine_exchange_limit``); the method names each one used."""
    for exchange in exchanges:
        if exchange is not None:
            direct = replace(_best(exchange, direct), method=f"{direct.method}; {exchange.method}")
    return direct


def _best(primary: Limit, cuts: Limit) -> Limit:
    """Largest of each value; a cut names the binding constraint unless the primary is larger."""
    full_wins = primary.full > cuts.full * (1 + REL)
    rounds, rounds_binding = primary.rounds, primary.rounds_binding
    if cuts.rounds is not None and (rounds is None or rounds <= cuts.rounds * (1 + REL)):
        rounds, rounds_binding = max(cuts.rounds, rounds or 0.0), cuts.rounds_binding
    return Limit(
        max(primary.full, cuts.full),
        max(primary.links, cuts.links),
        rounds,
        primary.binding if full_wins else cuts.binding,
        rounds_binding,
        primary.method,
    )


# ---------------------------------------------------------------------------- helpers
def _flip(text: str | None) -> str | None:
    """Swap in/out in a cut name (a bound on the reversed topology, read on the original)."""
    if text is None:
        return None
    return (text.replace(" out-bandwidth", " \0").replace(" in-bandwidth", " out-bandwidth")
            .replace(" \0", " in-bandwidth"))


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
