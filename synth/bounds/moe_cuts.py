"""Lower bounds for ``moe_dispatch`` / ``moe_combine``, counted over arrays.

Dispatch (combine is the same with every direction reversed). A token t of rank s with
destinations D must:
- leave s once if D has a rank other than s (rank out-cut), and enter every r in D - {s} through
  r's own links (rank in-cut: each rank receives every token it needs);
- leave s's machine once if D reaches another machine (machine out-cut), and enter every other
  machine holding part of D once, through that machine's NICs (machine in-cut: copies are
  free inside a machine, so one crossing per token and machine is all a cut can demand).
Each cut's count over the most rate the links and groups allow across it (``cut_rate``, the
generic cut code's) is a time per byte; the largest is the bandwidth bound. The flow LP is not
tried (a routing of 262K tokens would give it ~10^8 variables). Steps: the farthest hop a token
must make; latency floor: the alpha-cheapest path of the farthest (source, destination) pair.
The same cuts as ``synth.bounds.cuts`` finds among its rank and machine candidates, over
bincounts instead of per-chunk classes.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from synth.bounds.cuts import REL, network_of
from synth.bounds.flow import cut_rate
from synth.bounds.steps import alpha_distances
from synth.core.collective import Collective
from synth.core.errors import CollectiveError
from synth.core.topology import Topology

MOE_NAMES = ("moe_dispatch", "moe_combine")  # the collectives these bounds are for


def moe_bounds(topology: Topology, collective: Collective):
    """Bounds (``synth.bounds.lower_bounds.Bounds``) of a dispatch or combine collective
    (CollectiveError when a token cannot arrive)."""
    from synth.bounds.lower_bounds import Bounds

    return Bounds(**_figures(topology, collective))


def _figures(topology: Topology, collective: Collective) -> dict:
    source, dest_token, dest_rank = _pairs(collective)
    _check_reachable(topology, collective, source, dest_token, dest_rank)
    counts = _cut_counts(topology, source, dest_token, dest_rank)
    best = {"full": (0.0, ""), "links": (0.0, ""), "rounds": (0.0, "")}
    net = network_of(topology)
    for name, in_s, count, outward in counts:
        if count <= 0:
            continue
        if collective.combining:  # every flow reversed: what leaves S in dispatch enters it
            outward = not outward
        cut = (in_s[net.src] & ~in_s[net.dst]) if outward else (~in_s[net.src] & in_s[net.dst])
        for key, values, groups in (("full", net.bandwidth, net.group_bandwidth), ("links", net.bandwidth, None),
                                    ("rounds", net.capacity, net.group_capacity)):
            if values is None:
                continue
            rate, group = cut_rate(net, cut, values, groups)
            x = math.inf if rate <= 0 else count / rate
            if x > best[key][0] * (1 + REL):
                side = "out" if outward else "in"
                best[key] = (x, f"{name} {side}-bandwidth" + (f" ({group})" if group else ""))
    return _figures_of(topology, collective, source, dest_token, dest_rank, best, net.capacity is not None)


def _pairs(collective: Collective) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source per token, token and rank of every destination other than the source)."""
    ones, many = (collective.post, collective.pre) if collective.combining else (collective.pre, collective.post)
    if any(len(s) != 1 for s in ones):
        raise CollectiveError(f"{collective.name}: every token has one source rank")
    source = np.fromiter((next(iter(s)) for s in ones), dtype=np.int64, count=len(ones))
    sizes = np.fromiter(map(len, many), dtype=np.int64, count=len(many))
    rank = np.fromiter((r for s in many for r in s), dtype=np.int64, count=int(sizes.sum()))
    token = np.repeat(np.arange(len(many), dtype=np.int64), sizes)
    keep = rank != source[token]
    return source, token[keep], rank[keep]


def _check_reachable(topology, collective, source, dest_token, dest_rank) -> None:
    reach = np.isfinite(np.array(topology.hop_distances, dtype=float))
    a, b = (dest_rank, source[dest_token]) if collective.combining else (source[dest_token], dest_rank)
    bad = np.flatnonzero(~reach[a, b])
    if len(bad):
        raise CollectiveError(f"{collective.name} is impossible on {topology.name}: token {int(dest_token[bad[0]])} "
                              f"cannot get from rank {int(a[bad[0]])} to rank {int(b[bad[0]])}")


def _cut_counts(topology: Topology, source, dest_token, dest_rank):
    """(name, rank mask, tokens that must cross, whether they leave the set) of every candidate."""
    n = topology.ranks
    machine_of = np.asarray(topology.machine_of, dtype=np.int64)
    machines = topology.machine_count
    senders = np.bincount(source[np.unique(dest_token)], minlength=n)
    receives = np.bincount(dest_rank, minlength=n)
    remote = machine_of[dest_rank] != machine_of[source[dest_token]]
    leaving = np.bincount(machine_of[source[np.unique(dest_token[remote])]], minlength=machines)
    crossing_key = np.unique(dest_token[remote] * machines + machine_of[dest_rank[remote]])
    entering = np.bincount(crossing_key % machines, minlength=machines)
    for r in range(n):
        mask = np.zeros(n, dtype=bool)
        mask[r] = True
        yield f"rank {r}", mask, float(senders[r]), True
        yield f"rank {r}", mask, float(receives[r]), False
    if machines > 1:
        for m in range(machines):
            mask = machine_of == m
            yield f"machine {m}", mask, float(leaving[m]), True
            yield f"machine {m}", mask, float(entering[m]), False


def _figures_of(topology, collective, source, dest_token, dest_rank, best, has_rounds) -> dict:
    hops = np.array(topology.hop_distances, dtype=float)
    alphas = alpha_distances(topology)
    a, b = (dest_rank, source[dest_token]) if collective.combining else (source[dest_token], dest_rank)
    steps = int(hops[a, b].max()) if len(a) else 0
    floor = float(alphas[a, b].max()) if len(a) else 0.0
    scale = 1.0 / (collective.buffer_chunks * 1e3)
    rounds = best["rounds"][0] if has_rounds else None
    return dict(
        topology=topology.name, collective=collective.name, steps=steps,
        rounds_per_chunk=None if rounds is None else Fraction(rounds).limit_denominator(1 << 20),
        bandwidth_time_per_byte=best["full"][0] * scale,
        alpha_min=min((link.alpha for link in topology.links), default=0.0),
        busbw_factor=collective.busbw_factor, link_time_per_byte=best["links"][0] * scale,
        binding=best["full"][1], rounds_binding=best["rounds"][1] if has_rounds else None,
        method="cuts over ranks and machines (flow LP not tried for a routing)",
        latency_floor=floor if math.isfinite(floor) else 0.0,
    )
