"""Small NVSwitch-style clusters for MoE tests: every rank linked to every other, NVLink inside a
machine (450 GB/s ports), one 50 GB/s NIC per rank across machines (as h100xK, smaller)."""

from __future__ import annotations

import json
from pathlib import Path

from synth.core.routing import Routing
from synth.core.topology import Group, Link, Topology


def cluster(machines: int, per: int) -> Topology:
    n = machines * per
    machine = [r // per for r in range(n)]
    links, groups = [], []
    for a in range(n):
        for b in range(n):
            if a != b:
                inner = machine[a] == machine[b]
                links.append(Link(a, b, 450.0 if inner else 50.0, 0.7 if inner else 2.0, None,
                                  "nvlink" if inner else "net"))
    for r in range(n):
        for inner, bandwidth, tag in ((True, 450.0, "nvl"), (False, 50.0, "nic")):
            out = tuple((r, b) for b in range(n) if b != r and (machine[b] == machine[r]) == inner)
            into = tuple((a, r) for a in range(n) if a != r and (machine[a] == machine[r]) == inner)
            if out:
                groups.append(Group(f"r{r}-{tag}-out", out, bandwidth))
                groups.append(Group(f"r{r}-{tag}-in", into, bandwidth))
    return Topology(f"cluster{machines}x{per}", n, tuple(links), tuple(groups),
                    tuple(tuple(range(m * per, (m + 1) * per)) for m in range(machines)))


def write_routing(path: Path, routing: Routing) -> str:
    """Write ``routing`` and return its path as a string."""
    path.write_text(json.dumps(routing.to_doc()))
    return str(path)
