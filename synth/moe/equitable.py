"""Equitable step counts: a multigraph's edges split over 2^m steps so that every vertex has
floor or ceil of its degree / 2^m edges in every step.

The split is Euler's: halve every edge multiplicity; the edges left over (odd multiplicities)
form a simple bipartite graph; join each odd-degree vertex to a dummy on the other side (and the
two dummies to each other when both end odd) so every degree is even, walk Euler circuits (all
of even length, the graph being bipartite) and give their edges alternately to the two halves.
Each vertex then gets half of its leftover edges, so its degree halves to floor or ceil; halving
again keeps floor and ceil of the quarter, and so on. Links are the edges: a sender's ports on
one side, a receiver's on the other, so every NIC carries an equal share in every step.

>>> counts = equitable_counts(np.array([0, 0, 1]), np.array([0, 1, 1]), np.array([3, 1, 2]), 2)
>>> counts.tolist()
[[2, 0, 1], [1, 1, 1]]
"""

from __future__ import annotations

import networkx as nx
import numpy as np


def equitable_counts(src: np.ndarray, dst: np.ndarray, count: np.ndarray, depth: int) -> np.ndarray:
    """[depth, edges] multiplicities summing to ``count`` per edge, equitable at every src and dst
    vertex; ``depth`` a power of two. Edges are (src[i], dst[i]), distinct."""
    if depth < 1 or depth & (depth - 1):
        raise ValueError(f"depth must be a power of two, got {depth}")
    parts = [np.asarray(count, dtype=np.int64)]
    while len(parts) < depth:
        parts = [half for part in parts for half in _halves(src, dst, part)]
    return np.array(parts, dtype=np.int64).reshape(depth, len(count))


def _halves(src: np.ndarray, dst: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    half = count // 2
    odd = np.flatnonzero(count % 2)
    first = half.copy()
    first[odd] += _alternate(src[odd], dst[odd])
    return first, count - first


def _alternate(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """1 or 0 per edge of a simple bipartite graph, so every vertex has half its edges at 1
    (floor or ceil)."""
    graph = nx.MultiGraph()
    for i, (a, b) in enumerate(zip(src.tolist(), dst.tolist())):
        graph.add_edge(("s", a), ("d", b), key=i)
    odd_src = [v for v, d in graph.degree() if d % 2 and v[0] == "s"]
    odd_dst = [v for v, d in graph.degree() if d % 2 and v[0] == "d"]
    for v in odd_src:
        graph.add_edge(v, ("d", None), key=-1)
    for v in odd_dst:
        graph.add_edge(("s", None), v, key=-1)
    if len(odd_src) % 2:  # then len(odd_dst) is odd too: the dummies join
        graph.add_edge(("s", None), ("d", None), key=-1)
    side = np.zeros(len(src), dtype=np.int64)
    for component in nx.connected_components(graph):
        circuit = nx.eulerian_circuit(graph.subgraph(component), keys=True)
        for position, (_, _, key) in enumerate(circuit):
            if key >= 0:
                side[key] = position % 2
    return side
