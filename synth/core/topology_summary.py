"""Human-readable description of a Topology (for ``synth topo show``).

>>> from synth.core.topology import Topology, Link
>>> print(describe(Topology("pair", 2, (Link(0, 1, 25.0, 0.7), Link(1, 0, 25.0, 0.7)))).splitlines()[0])
pair: 2 ranks, 2 directed links, 0 groups, 1 machine(s), diameter 1
"""

from __future__ import annotations

import math
import re
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
    lines.append(usable_out_bandwidth_line(topology))
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


def usable_out_bandwidth_line(topology: Topology) -> str:
    """What one GPU can send at once, alone: the sum of its out links capped by the groups that
    bound them (switch ports, NICs); inside a machine and across machines separately when the
    topology has several machines.

    >>> from synth.core.topology import Group, Link
    >>> t = Topology("p", 3, (Link(0, 1, 25.0, 0.7), Link(0, 2, 25.0, 0.7), Link(1, 0, 25.0, 0.7),
    ...     Link(2, 0, 25.0, 0.7)), groups=(Group("gpu0-out", ((0, 1), (0, 2)), 30.0),))
    >>> usable_out_bandwidth_line(t)
    'per-rank out-bandwidth a GPU can use: 25-30 GB/s (group gpuN-out / its links)'
    """
    head = "per-rank out-bandwidth a GPU can use: "
    if topology.machines and topology.machine_count > 1:
        machine_of = {r: i for i, m in enumerate(topology.machines) for r in m}
        inside = _usable_over_ranks(topology, lambda l: machine_of.get(l.src) == machine_of.get(l.dst))
        across = _usable_over_ranks(topology, lambda l: machine_of.get(l.src) != machine_of.get(l.dst))
        return head + f"{inside[0]} inside a machine ({inside[1]}), {across[0]} across machines ({across[1]})"
    amount, caps = _usable_over_ranks(topology, lambda l: True)
    return head + f"{amount} ({caps})"


def _usable_over_ranks(topology: Topology, keep) -> tuple[str, str]:
    """('450 GB/s', 'NVSwitch port'): the range over ranks of usable out-bandwidth on the links
    ``keep`` accepts, and what caps it ('its links' when no group does)."""
    values, labels = [], []
    for rank in range(topology.ranks):
        links = {(l.src, l.dst): l for l in topology.out_links[rank] if keep(l)}
        if not links:
            continue
        groups = [(frozenset(g.links).intersection(links), g) for g in topology.groups]
        value, binding = _usable(links, [(ls, g) for ls, g in groups if ls])
        values.append(value)
        for label in [_group_label(topology, g) for g in binding] or ["its links"]:
            if label not in labels:
                labels.append(label)
    if not values:
        return "none", "no such links"
    low, high = min(values), max(values)
    amount = f"{low:g} GB/s" if math.isclose(low, high) else f"{low:g}-{high:g} GB/s"
    return amount, " / ".join(labels)


def _usable(links: dict, groups: list) -> tuple[float, list]:
    """(max rate out of ``links`` under ``groups``' shared capacities, the groups that cap it).

    Exact when the groups, restricted to these links, nest or are disjoint (laminar: switch
    ports, NICs): each outermost group carries min(its bandwidth, what its members carry).
    Otherwise the smallest single cut: all links, or one group plus the links outside it."""
    outer = [(ls, g) for ls, g in groups if not any(ls < other for other, _ in groups)]
    if any(a & b and a != b for i, (a, _) in enumerate(outer) for b, _ in outer[i + 1:]):
        total = sum(l.bandwidth for l in links.values())
        cuts = [(g.bandwidth + sum(l.bandwidth for k, l in links.items() if k not in ls), [g]) for ls, g in groups]
        return min([(total, [])] + cuts, key=lambda c: c[0])
    value, binding, covered = 0.0, [], set()
    for ls, g in {ls: (ls, g) for ls, g in sorted(outer, key=lambda o: o[1].bandwidth)}.values():
        inner_value, inner = _usable({k: links[k] for k in ls}, [(o, h) for o, h in groups if o < ls])
        if g.bandwidth < inner_value:
            value, binding = value + g.bandwidth, binding + [g]
        else:
            value, binding = value + inner_value, binding + inner
        covered |= ls
    return value + sum(l.bandwidth for k, l in links.items() if k not in covered), binding


def _group_label(topology: Topology, group) -> str:
    """How a capping group reads: 'NIC', 'NVSwitch port' (an NVLink GPU port group), else its name
    with numbers as N (one label for every rank's group of one kind)."""
    kinds = {l.kind for l in topology.links if (l.src, l.dst) in set(group.links)}
    if "nic" in group.name.lower() or kinds == {"net"}:
        return "NIC"
    if kinds == {"nvlink"} and "gpu" in group.name.lower():
        return "NVSwitch port"
    return "group " + re.sub(r"\d+", "N", group.name)


def _num(value: float) -> str:
    return "inf (not strongly connected)" if value == math.inf else str(int(value))


def _ranges(ranks) -> str:
    return rank_ranges(sorted(ranks))
