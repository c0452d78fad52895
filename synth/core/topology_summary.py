"""Human-readable description of a Topology (for ``synth topo show``).

>>> from synth.core.topology import Topology, Link
>>> print(describe(Topology("pair", 2, (Link(0, 1, 25.0, 0.7), Link(1, 0, 25.0, 0.7)))).splitlines()[0])
pair: 2 ranks, 2 directed links, 0 groups, 1 machine(s), diameter 1
"""

from __future__ import annotations

import math
from collections import Counter

from synth.core.subset import rank_ranges
from synth.core.topology import Topology


def diameter(topology: Topology) -> float:
    return max(max(row) for row in topology.hop_distances)


def describe(topology: Topology, max_links: int = 64) -> str:
    """Summary line, machines, per-rank degree, links (or a histogram when many), groups, NICs."""
    lines = [
        f"{topology.name}: {topology.ranks} ranks, {len(topology.links)} directed links, "
        f"{len(topology.groups)} groups, {topology.machine_count} machine(s), "
        f"diameter {_num(diameter(topology))}"
    ]
    caps = "whole (k-synchronous rounds apply)" if topology.rounds_apply else "not whole (no rounds)"
    lines.append(f"capacities in units of {topology.min_link_bandwidth:g} GB/s: {caps}")
    if topology.machines:
        for index, machine in enumerate(topology.machines):
            lines.append(f"machine {index}: ranks {_ranges(machine)}")
    out_bw = [sum(l.bandwidth for l in topology.out_links[r]) for r in range(topology.ranks)]
    lines.append(f"per-rank link out-bandwidth: min {min(out_bw):g}, max {max(out_bw):g} GB/s")
    if len(topology.links) <= max_links:
        lines.append("links (src->dst bandwidth GB/s, alpha us, capacity, kind):")
        for link in topology.links:
            lines.append(
                f"  {link.src:>3}->{link.dst:<3} {link.bandwidth:>8g} GB/s  {link.alpha:g} us  "
                f"cap {topology.link_capacity(link)}  {link.kind or 'no kind'}"
            )
    else:
        histogram = Counter((l.bandwidth, l.alpha, l.kind or "no kind") for l in topology.links)
        lines.append("links by (bandwidth, alpha, kind):")
        for (bw, alpha, kind), count in sorted(histogram.items()):
            lines.append(f"  {count:>6} x {bw:g} GB/s, {alpha:g} us, {kind}")
    if topology.groups:
        shown = topology.groups[:16]
        lines.append("groups (shared capacity):")
        for group in shown:
            lines.append(
                f"  {group.name}: {len(group.links)} links, {group.bandwidth:g} GB/s, "
                f"cap {topology.group_capacity(group)}"
            )
        if len(topology.groups) > len(shown):
            lines.append(f"  ... {len(topology.groups) - len(shown)} more")
    for nic in topology.nics[:16]:
        lines.append(f"NIC {nic.name}: ranks {_ranges(nic.ranks)}, {nic.bandwidth:g} GB/s, alpha {nic.alpha:g} us")
    if len(topology.nics) > 16:
        lines.append(f"... {len(topology.nics) - 16} more NICs")
    for source in topology.sources:
        lines.append(f"source: {source}")
    return "\n".join(lines)


def _num(value: float) -> str:
    return "inf (not strongly connected)" if value == math.inf else str(int(value))


def _ranges(ranks) -> str:
    return rank_ranges(sorted(ranks))
