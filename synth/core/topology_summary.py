"""Human-readable description of a Topology (for ``synth topo show``): links, groups, NICs and
the switches that compute (topology v2), with what each can do and which groups its ports share.

>>> from synth.core.topology import Topology, Link
>>> print(describe(Topology("pair", 2, (Link(0, 1, 25.0, 0.7), Link(1, 0, 25.0, 0.7)))).splitlines()[0])
pair: 2 ranks, 2 directed links, 0 groups, 1 machine(s), diameter 1
"""

from __future__ import annotations

import math
import re
from collections import Counter

from synth.core.subset import rank_ranges
from synth.core.topology import Switch, Topology

MAX_SWITCH_LINES = 8  # more switch lines than this: alike switches (NAMExK's copies) share one line
CAPABILITY_LEGEND = ("reduce: several ports summed into one; multicast: one port written to several; "
                     "reduce_multicast: both in one pass")


def diameter(topology: Topology) -> float:
    return max(max(row) for row in topology.hop_distances)


def describe(topology: Topology, max_links: int = 64) -> str:
    """Summary line, machines, per-rank degree, links (or a histogram when many), groups, NICs."""
    lines = [
        f"{topology.name}: {topology.ranks} ranks, {len(topology.links)} directed links, "
        f"{len(topology.groups)} groups, {topology.machine_count} machine(s), {_switch_count(topology)}"
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
    lines += switch_lines(topology)
    for source in topology.sources:
        lines.append(f"source: {source}")
    return "\n".join(lines)


def _switch_count(topology: Topology) -> str:
    """'1 switch (reduce + multicast), ' for the summary line; '' without switches."""
    if not topology.switches:
        return ""
    kinds = []
    for switch in topology.switches:
        if capabilities_text(switch) not in kinds:
            kinds.append(capabilities_text(switch))
    count = len(topology.switches)
    return f"{count} switch{'es' if count != 1 else ''} ({'; '.join(kinds)}), "


def capabilities_text(switch: Switch) -> str:
    """What ``switch`` can do: 'reduce + multicast', 'reduce_multicast', or 'no operation'."""
    return " + ".join(switch.capabilities) or "no operation"


def switch_note(topology: Topology, description: str) -> str:
    """What a one-line ``description`` of ``topology`` (``synth topo list``) leaves out of its
    switches: '; switch NAME: CAPABILITIES' for each switch whose capabilities it does not name
    ('' when it names them all, or there is no switch).

    >>> from synth.core.library import resolve_topology
    >>> switch_note(resolve_topology("h100"), "8 GPUs"), switch_note(resolve_topology("h100"), "reduce + multicast")
    ('; switch nvswitch: reduce + multicast', '')
    """
    missing = [switch for switch in topology.switches if capabilities_text(switch) not in description]
    return "".join(f"; switch {switch.name}: {capabilities_text(switch)}" for switch in missing)


def switch_lines(topology: Topology) -> list[str]:
    """The switches: a heading with what each capability means, then one line per switch (name,
    ports, per-port bandwidth, alpha and capacity, capabilities, kind, the groups its ports share);
    beyond ``MAX_SWITCH_LINES`` switches, one line per set of alike switches (see ``_shape``).

    >>> from synth.core.library import resolve_topology
    >>> for part in switch_lines(resolve_topology("h100"))[1].split("; "):
    ...     print(part)
      nvswitch: 8 ports (ranks 0-7), 450 GB/s, alpha 0.7 us, cap 1 per port
    reduce + multicast
    kind nvlink
    port groups gpuN-out / gpuN-in (one per port)
    """
    if not topology.switches:
        return []
    lines = [f"switches ({CAPABILITY_LEGEND}):"]
    if len(topology.switches) <= MAX_SWITCH_LINES:
        return lines + [f"  {switch.name}: {_switch_ports(switch)}, {_switch_terms(topology, switch)}"
                        for switch in topology.switches]
    alike: dict[tuple, list[Switch]] = {}
    for switch in topology.switches:
        alike.setdefault(_shape(switch), []).append(switch)
    for members in alike.values():
        lines.append(f"  {_names(members)}: {_switch_ports(members[0], members)}, "
                     f"{_switch_terms(topology, members[0])}")
    return lines


def _shape(switch: Switch) -> tuple:
    """What alike switches share: everything but their name, ranks and the numbers in group names
    (the copies of one machine's switch in ``NAMExK``)."""
    return (len(switch.ranks), switch.bandwidth, switch.alpha, switch.capacity, switch.capabilities, switch.kind,
            port_groups_text(switch))


def _names(members: list[Switch]) -> str:
    if len(members) == 1:
        return members[0].name
    return f"{len(members)} switches {members[0].name} .. {members[-1].name}"


def _switch_ports(switch: Switch, members: list[Switch] | None = None) -> str:
    """'8 ports (ranks 0-7)'; for alike switches '8 ports each (ranks 0-127 together)'."""
    count = f"{len(switch.ranks)} port{'s' if len(switch.ranks) != 1 else ''}"
    if not members or len(members) == 1:
        return f"{count} (ranks {_ranges(switch.ranks)})"
    return f"{count} each (ranks {_ranges({rank for member in members for rank in member.ranks})} together)"


def _switch_terms(topology: Topology, switch: Switch) -> str:
    capacity = topology.switch_capacity(switch)
    return (f"{switch.bandwidth:g} GB/s, alpha {switch.alpha:g} us, "
            f"cap {capacity if capacity is not None else 'not whole'} per port; {capabilities_text(switch)}; "
            f"kind {switch.kind or 'not given'}; {port_groups_text(switch)}")


def port_groups_text(switch: Switch) -> str:
    """Which groups the ports share with ordinary links, numbers written as N: 'port groups
    gpuN-out / gpuN-in (one per port)' (out / in), 'port groups out nicN-out (1 for 8 ports), in
    none', 'no port groups'. Ports of one switch in one group share its capacity."""
    sides = {side: _group_names(names) for side, names in (("out", switch.out_groups), ("in", switch.in_groups))}
    if sides["out"] is None and sides["in"] is None:
        return "no port groups"
    if sides["out"] and sides["in"] and sides["out"][1] == sides["in"][1]:
        return f"port groups {sides['out'][0]} / {sides['in'][0]} ({sides['out'][1]})"
    return "port groups " + ", ".join(f"{side} {f'{text[0]} ({text[1]})' if text else 'none'}"
                                      for side, text in sides.items())


def _group_names(names: tuple[str | None, ...] | None) -> tuple[str, str] | None:
    """('gpuN-out', 'one per port') / ('nicN-out', '2 for 8 ports; 3 ports without'); None: no group."""
    named = [name for name in names or () if name is not None]
    if not named:
        return None
    patterns = " | ".join(dict.fromkeys(re.sub(r"\d+", "N", name) for name in named))
    distinct = len(set(named))
    sharing = "one per port" if distinct == len(named) else f"{distinct} for {len(named)} ports"
    without = len(names) - len(named)
    return patterns, sharing + (f"; {without} port{'s' if without != 1 else ''} without" if without else "")


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
    order = {group.name: index for index, group in enumerate(topology.groups)}
    for rank in range(topology.ranks):
        links = {(l.src, l.dst): l for l in topology.out_links[rank] if keep(l)}
        if not links:
            continue
        touched: dict[str, tuple[list, object]] = {}  # each group that holds one of the links: those it holds
        for key in links:
            for group in topology.groups_of_link.get(key, ()):
                touched.setdefault(group.name, ([], group))[0].append(key)
        groups = [(frozenset(keys), group) for keys, group in sorted(touched.values(), key=lambda t: order[t[1].name])]
        value, binding = _usable(links, groups)
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
    Otherwise the smallest single cut: all links, or one group plus the links outside it.
    Which group holds which is found through the links (a group is inside another only if that
    one holds its first link), so a rank with thousands of one-link groups (the other ranks'
    in-ports) costs a pass over them, not their square."""
    holding: dict = {}  # link -> the groups holding it
    position = {id(entry): index for index, entry in enumerate(groups)}
    for entry in groups:
        for key in entry[0]:
            holding.setdefault(key, []).append(entry)
    outer = [(ls, g) for ls, g in groups if not any(ls < other for other, _ in holding[next(iter(ls))])]
    owner: dict = {}
    if any(_other(owner.setdefault(key, ls), ls) for ls, _ in outer for key in ls):  # outermost groups overlap
        total = sum(l.bandwidth for l in links.values())
        cuts = [(g.bandwidth + sum(l.bandwidth for k, l in links.items() if k not in ls), [g]) for ls, g in groups]
        return min([(total, [])] + cuts, key=lambda c: c[0])
    value, binding, covered = 0.0, [], set()
    for ls, g in {ls: (ls, g) for ls, g in sorted(outer, key=lambda o: o[1].bandwidth)}.values():
        inside = {id(entry): entry for key in ls for entry in holding[key] if entry[0] < ls}
        inner = sorted(inside.values(), key=lambda entry: position[id(entry)])
        inner_value, inner = _usable({k: links[k] for k in ls}, inner)
        if g.bandwidth < inner_value:
            value, binding = value + g.bandwidth, binding + [g]
        else:
            value, binding = value + inner_value, binding + inner
        covered |= ls
    return value + sum(l.bandwidth for k, l in links.items() if k not in covered), binding


def _other(a: frozenset, b: frozenset) -> bool:
    return a is not b and a != b


def _group_label(topology: Topology, group) -> str:
    """How a capping group reads: 'NIC', 'NVSwitch port' (an NVLink GPU port group), else its name
    with numbers as N (one label for every rank's group of one kind)."""
    kinds = {topology.link(*key).kind for key in group.links}
    if "nic" in group.name.lower() or kinds == {"net"}:
        return "NIC"
    if kinds == {"nvlink"} and "gpu" in group.name.lower():
        return "NVSwitch port"
    return "group " + re.sub(r"\d+", "N", group.name)


def _num(value: float) -> str:
    return "inf (not strongly connected)" if value == math.inf else str(int(value))


def _ranges(ranks) -> str:
    return rank_ranges(sorted(ranks))
