"""Step and latency bounds from distances: the farthest hop a chunk must travel, and the
alpha-cheapest path of the farthest demand.

>>> from synth.core.generators import line
>>> from synth.core.collectives import broadcast
>>> steps_bound(line(4), broadcast(4, root=0))
3
"""

from __future__ import annotations

import math

import numpy as np

from synth.core.collective import Collective
from synth.core.topology import Topology


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
    dist = alpha_distances(topology)
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


DIJKSTRA_RANKS = 128  # above this many ranks the alpha distances come from a vectorised Floyd-Warshall


def alpha_distances(topology: Topology) -> np.ndarray:
    """[src, dst]: least sum of link alphas over paths (Dijkstra from every rank; on more than
    DIJKSTRA_RANKS ranks, Floyd-Warshall over numpy rows: n^2 work per rank instead of a heap
    walk over every link, the same distances up to the order the alphas are added in)."""
    import heapq

    n = topology.ranks
    if n > DIJKSTRA_RANKS:
        dist = np.full((n, n), math.inf)
        np.fill_diagonal(dist, 0.0)
        for link in topology.links:
            if link.alpha < dist[link.src, link.dst]:
                dist[link.src, link.dst] = link.alpha
        for k in range(n):
            np.minimum(dist, dist[:, k, None] + dist[None, k, :], out=dist)
        return dist
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
