"""Regular topologies built from a few parameters (ring, line, full mesh, star, hypercube, torus).

Every link is 25 GB/s with alpha 0.7 us and kind ``nvlink`` (one NVLink2 per direction; see
``SOURCES``), so every link has capacity 1 chunk per round. All ranks form one machine.

>>> t = ring(4)
>>> t.ranks, len(t.links), t.link(3, 0).bandwidth, t.link(3, 0).kind
(4, 8, 25.0, 'nvlink')
"""

from __future__ import annotations

from itertools import product
from typing import Iterable, Sequence

from synth.core.errors import TopologyError
from synth.core.topology import Link, Topology

BANDWIDTH = 25.0  # GB/s per direction: one NVLink2 (hardware.md, msccl-tools dgx1)
ALPHA = 0.7  # us per message: TE-CCL's NVLink alpha (hardware.md)
KIND = "nvlink"  # what protocol-aware costs take these links to be (synth.cost)
MAX_RANKS = 1024  # generators refuse bigger machines: link lists grow too large to be useful

SOURCES = (
    "generated: every link 25.0 GB/s per direction (one NVLink2 link, msccl-tools dgx1 / "
    "hardware.md), alpha 0.7 us (TE-CCL NVLink alpha, hardware.md), kind nvlink",
)


def _build(name: str, ranks: int, pairs: Iterable[tuple[int, int]]) -> Topology:
    """A Topology from directed (src, dst) pairs, dropping repeats, links sorted."""
    unique = sorted(set(pairs))
    links = tuple(Link(s, d, BANDWIDTH, ALPHA, kind=KIND) for s, d in unique)
    return Topology(name, ranks, links, machines=(tuple(range(ranks)),), sources=SOURCES)


def _both(pairs: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for a, b in pairs:
        out += [(a, b), (b, a)]
    return out


def _check_count(kind: str, n: object, minimum: int = 2) -> int:
    if not isinstance(n, int) or isinstance(n, bool):
        raise TopologyError(f"{kind}: rank count must be an integer, got {n!r}")
    if n < minimum:
        raise TopologyError(f"{kind}: needs at least {minimum} ranks, got {n}")
    if n > MAX_RANKS:
        raise TopologyError(f"{kind}: at most {MAX_RANKS} ranks, got {n}")
    return n


def ring(n: int) -> Topology:
    """Bidirectional ring 0-1-...-(n-1)-0.

    >>> sorted(l.key for l in ring(3).links)
    [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    """
    _check_count("ring", n)
    return _build(f"ring{n}", n, _both((i, (i + 1) % n) for i in range(n)))


def uring(n: int) -> Topology:
    """One-way ring: links i -> i+1 (mod n) only.

    >>> [l.key for l in uring(3).links]
    [(0, 1), (1, 2), (2, 0)]
    """
    _check_count("uring", n)
    return _build(f"uring{n}", n, ((i, (i + 1) % n) for i in range(n)))


def line(n: int) -> Topology:
    """Bidirectional path 0-1-...-(n-1) (a ring without the closing link).

    >>> len(line(4).links)
    6
    """
    _check_count("line", n)
    return _build(f"line{n}", n, _both((i, i + 1) for i in range(n - 1)))


def full(n: int) -> Topology:
    """Every ordered pair of ranks joined by a link.

    >>> len(full(4).links)
    12
    """
    _check_count("full", n)
    return _build(f"full{n}", n, ((a, b) for a in range(n) for b in range(n) if a != b))


def star(n: int) -> Topology:
    """Rank 0 is the hub; spokes 0<->i for i in 1..n-1.

    >>> len(star(5).out_links[0]), len(star(5).out_links[3])
    (4, 1)
    """
    _check_count("star", n)
    return _build(f"star{n}", n, _both((0, i) for i in range(1, n)))


def hypercube(d: int) -> Topology:
    """2**d ranks; rank i is joined to i ^ (1 << k) for every k < d.

    >>> t = hypercube(3)
    >>> t.ranks, sorted(l.dst for l in t.out_links[0])
    (8, [1, 2, 4])
    """
    if not isinstance(d, int) or isinstance(d, bool):
        raise TopologyError(f"hypercube: dimension must be an integer, got {d!r}")
    if d < 1:
        raise TopologyError(f"hypercube: dimension must be >= 1, got {d}")
    if 2**d > MAX_RANKS:
        raise TopologyError(f"hypercube: at most {MAX_RANKS} ranks, got 2**{d}")
    n = 2**d
    return _build(f"hypercube{d}", n, ((i, i ^ (1 << k)) for i in range(n) for k in range(d)))


def torus(dims: Sequence[int]) -> Topology:
    """Wrap-around mesh with the given sizes (row-major ranks), e.g. ``torus((4, 4))``.

    Needs two or more dimensions (use ``ring`` for one), each of size >= 2; a dimension of size 2
    gets one link per direction, not two.

    >>> t = torus((4, 4))
    >>> t.name, t.ranks, sorted(l.dst for l in t.out_links[0])
    ('torus4x4', 16, [1, 3, 4, 12])
    """
    dims = tuple(dims)
    if len(dims) < 2:
        raise TopologyError(f"torus: needs 2 or more dimensions (use ring:N for one), got {len(dims)}")
    for size in dims:
        if not isinstance(size, int) or isinstance(size, bool):
            raise TopologyError(f"torus: dimension sizes must be integers, got {size!r}")
        if size < 2:
            raise TopologyError(f"torus: every dimension needs size >= 2, got {'x'.join(map(str, dims))}")
    n = 1
    for size in dims:
        n *= size
    if n > MAX_RANKS:
        raise TopologyError(f"torus: at most {MAX_RANKS} ranks, got {n}")
    strides = [1] * len(dims)
    for axis in range(len(dims) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * dims[axis + 1]

    def rank(coord: Sequence[int]) -> int:
        return sum(c * s for c, s in zip(coord, strides))

    pairs = []
    for coord in product(*(range(size) for size in dims)):
        here = rank(coord)
        for axis, size in enumerate(dims):
            for step in (1, -1):
                moved = list(coord)
                moved[axis] = (coord[axis] + step) % size
                pairs.append((here, rank(moved)))
    return _build("torus" + "x".join(map(str, dims)), n, pairs)
