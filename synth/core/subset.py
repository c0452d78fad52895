"""A machine cut down to some of its ranks (a run on 12 of a DGX-2's 16 GPUs).

The ranks are renumbered 0..k-1 in the order given; links, groups and NICs keep only what lies
between kept ranks, and machines keep their kept ranks (machines left empty disappear).

>>> from synth.core.library import resolve_topology
>>> t = sub_topology(resolve_topology("dgx2"), parse_ranks("0-11", 16))
>>> t.ranks, t.name, len(t.links)
(12, 'dgx2[0-11]', 132)
"""

from __future__ import annotations

import re
from dataclasses import replace

from synth.core.errors import InputError
from synth.core.topology import Group, Link, Nic, Switch, Topology


def parse_ranks(text: str, total: int) -> tuple[int, ...]:
    """Ranks from a list like ``0-11`` or ``0,2,4-7``: each in [0, total), none repeated.

    >>> parse_ranks("0,2,4-6", 8)
    (0, 2, 4, 5, 6)
    """
    ranks: list[int] = []
    for part in str(text).split(","):
        match = re.fullmatch(r"\s*(\d{1,6})\s*(?:-\s*(\d{1,6})\s*)?", part)
        if not match:
            raise InputError(f"--ranks {text!r}: expected a list like 0-11 or 0,2,4-7")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            raise InputError(f"--ranks {text!r}: range {low}-{high} runs backwards")
        ranks.extend(range(low, high + 1))
    bad = [r for r in ranks if r >= total]
    if bad:
        raise InputError(f"--ranks {text!r}: rank {bad[0]} is not in a topology of {total} ranks")
    if len(set(ranks)) != len(ranks):
        raise InputError(f"--ranks {text!r}: a rank is named twice")
    return tuple(ranks)


def sub_topology(topology: Topology, ranks: tuple[int, ...]) -> Topology:
    """``topology`` restricted to ``ranks``, renumbered in that order (see the module)."""
    if tuple(ranks) == tuple(range(topology.ranks)):
        return topology
    new = {old: index for index, old in enumerate(ranks)}
    links = tuple(Link(new[l.src], new[l.dst], l.bandwidth, l.alpha, l.capacity, l.kind)
                  for l in topology.links if l.src in new and l.dst in new)
    groups = []
    for group in topology.groups:
        kept = tuple((new[s], new[d]) for s, d in group.links if s in new and d in new)
        if kept:
            groups.append(Group(group.name, kept, group.bandwidth, group.capacity))
    nics = tuple(Nic(n.name, tuple(new[r] for r in n.ranks if r in new), n.bandwidth, n.alpha)
                 for n in topology.nics if any(r in new for r in n.ranks))
    machines = None
    if topology.machines is not None:
        machines = tuple(m for m in (tuple(new[r] for r in machine if r in new) for machine in topology.machines) if m)
    name = f"{topology.name}[{rank_ranges(ranks)}]"
    kept_groups = {group.name for group in groups}
    switches = tuple(kept for switch in topology.switches
                     if (kept := _sub_switch(switch, new, kept_groups)) is not None)
    return Topology(name, len(ranks), links, tuple(groups), machines, nics, topology.sources, switches,
                    topology.arch)


def _sub_switch(switch: Switch, new: dict[int, int], groups: set[str]) -> Switch | None:
    """``switch`` with only the ports of kept ranks (renumbered), and port groups that are gone
    set to None; None when no port is left."""
    ports = [index for index, rank in enumerate(switch.ranks) if rank in new]
    if not ports:
        return None

    def kept(names):
        return None if names is None else tuple(names[i] if names[i] in groups else None for i in ports)

    return replace(switch, ranks=tuple(new[switch.ranks[i]] for i in ports),
                   out_groups=kept(switch.out_groups), in_groups=kept(switch.in_groups))


def rank_ranges(ranks) -> str:
    """``0-11`` style text for a rank list, in its order (consecutive runs joined with '-').

    >>> rank_ranges([0, 1, 2, 5, 7, 8])
    '0-2,5,7-8'
    """
    ranks = list(ranks)
    parts, start = [], None
    for i, rank in enumerate(ranks):
        if start is None:
            start = rank
        if i + 1 == len(ranks) or ranks[i + 1] != rank + 1:
            parts.append(str(start) if start == rank else f"{start}-{rank}")
            start = None
    return ",".join(parts)
