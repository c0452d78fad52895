"""Join K copies of a one-machine topology through their NICs (the ``NAMExK`` syntax).

Copy m holds ranks m*G .. m*G+G-1 (G = ranks of the base). Its links, groups (renamed ``mM-...``),
NICs (``mM-nicI``) and switches (``mM-NAME``, ports and port groups renumbered) are copied. The
copies are then joined by a non-blocking fabric: for every
ordered pair of NICs a, b on different copies there is a link from every rank a serves to every
rank b serves, with bandwidth min(a, b), alpha max(a, b) and kind ``net``. The NICs are the
bottleneck: group ``mM-nicI-out`` holds every fabric link leaving through a NIC, ``mM-nicI-in``
every one arriving through it, each with the NIC's bandwidth.

Where that full mesh would exceed ``MAX_LINKS`` (``gb200nvl72x20``: 1.97M fabric links), the
fabric is rail-aligned instead (NVIDIA's rail-optimized reference design): NIC I of every copy
links only to NIC I of every other copy (``fabric="rails"`` asks for it at any size). Traffic
between rails relays over the copy's own links first, as NCCL's PXN does. The NICs, their
groups and bandwidths are the same in both, so every per-NIC and per-machine cut is too; the
``sources`` line of the result names the fabric it got. With ``sharp`` the fabric's
switches reduce and multicast in one pass (InfiniBand SHARP, NCCL's CollNet): one switch ``sharp``
whose port for each rank behind a NIC runs at the NIC's bandwidth and shares its ``-out`` /
``-in`` groups (``reduce_multicast`` only: the aggregation trees of SHARP).

>>> from synth.core.topology import Link, Nic, Topology
>>> pair = Topology("pair", 2, (Link(0, 1, 25.0), Link(1, 0, 25.0)), machines=((0, 1),),
...                 nics=(Nic("nic0", (0, 1), 12.5, 2.6),))
>>> t = compose_machines(pair, 2)
>>> t.name, t.ranks, t.machines, t.link(0, 3).bandwidth, t.link(0, 3).kind
('pairx2', 4, ((0, 1), (2, 3)), 12.5, 'net')
"""

from __future__ import annotations

from dataclasses import replace

from synth.core.errors import TopologyError
from synth.core.topology import Group, Link, Nic, Switch, Topology

MAX_LINKS = 2_000_000  # refuse compositions whose link list would be this long (h100x128: 1.05M)

# Library machines without NICs, and the library machine that adds them.
_NIC_HINTS = {"dgx1": "ndv2"}


def compose_machines(base: Topology, k: int, sharp: bool = False, fabric: str | None = None) -> Topology:
    """K copies of ``base`` joined through their NICs; named ``f"{base.name}x{k}"`` (with
    ``+sharp`` when the fabric's switches aggregate, see the module). ``fabric``: ``"full"``
    (every NIC pair), ``"rails"`` (NIC I to NIC I), or None: full unless that exceeds MAX_LINKS.

    Raises TopologyError when k < 2, when the base has no NICs or spans several machines, when
    the result would be too large, or when a fabric link would duplicate another link.
    """
    if not isinstance(k, int) or isinstance(k, bool):
        raise TopologyError(f"compose {base.name}: copy count must be an integer, got {k!r}")
    if k < 2:
        raise TopologyError(f"compose {base.name}: needs at least 2 copies, got {k}")
    if not base.nics:
        hint = _NIC_HINTS.get(base.name)
        advice = f"; use {hint}" if hint else "; add 'nics' to its topology file"
        raise TopologyError(f"{base.name} has no NICs to join copies through{advice}")
    if base.machine_count > 1:
        raise TopologyError(
            f"compose {base.name}: the base must be one machine, it has {base.machine_count}"
        )
    size = base.ranks
    rails, fabric_source = _fabric_kind(base, k, fabric)
    links, groups, nics, switches = _copies(base, k)
    seen = {l.key for l in links}
    fabric_links: list[Link] = []
    out_keys: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(nics))}
    in_keys: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(nics))}
    per_copy = len(base.nics)
    for ia, a in enumerate(nics):
        for ib, b in enumerate(nics):
            if ia // per_copy == ib // per_copy or (rails and ia % per_copy != ib % per_copy):
                continue
            bandwidth = min(a.bandwidth, b.bandwidth)
            alpha = max(a.alpha, b.alpha)
            keys = [(r, s) for r in a.ranks for s in b.ranks]
            for key in keys:
                if key in seen:
                    raise TopologyError(
                        f"compose {base.name}x{k}: fabric link {key[0]}->{key[1]} (NIC {a.name} to "
                        f"{b.name}) duplicates another link; does a rank sit behind two NICs?"
                    )
                seen.add(key)
            fabric_links += [Link(r, s, bandwidth, alpha, kind="net") for r, s in keys]
            out_keys[ia] += keys
            in_keys[ib] += keys
    for i, nic in enumerate(nics):
        groups.append(Group(f"{nic.name}-out", tuple(out_keys[i]), nic.bandwidth))
        groups.append(Group(f"{nic.name}-in", tuple(in_keys[i]), nic.bandwidth))

    machines = tuple(tuple(range(m * size, (m + 1) * size)) for m in range(k))
    sources = tuple(base.sources) + (f"composed: {k} copies of {base.name} joined by {fabric_source}; "
                                     "fabric link = min of the two NIC bandwidths, max of their alphas "
                                     "(synth.core.compose)",)
    if sharp:
        switches.append(sharp_switch(nics))
        sources += (SHARP_SOURCE,)
    name = f"{base.name}x{k}" + ("+sharp" if sharp else "")
    return Topology(name, size * k, tuple(links + fabric_links), tuple(groups), machines,
                    tuple(nics), sources, tuple(switches), base.arch)


FABRICS = ("full", "rails")


def _fabric_kind(base: Topology, k: int, fabric: str | None) -> tuple[bool, str]:
    """(rail-aligned?, the fabric as the ``sources`` line names it): the one asked for, else the
    full mesh where it fits MAX_LINKS and the rails where it does not; TopologyError when the
    fabric chosen does not fit either."""
    if fabric is not None and fabric not in FABRICS:
        raise TopologyError(f"compose {base.name}: fabric must be one of {', '.join(FABRICS)}, got {fabric!r}")
    copies = k * len(base.links)
    full = k * (k - 1) * sum(len(nic.ranks) for nic in base.nics) ** 2
    rails = fabric == "rails" or (fabric is None and full + copies > MAX_LINKS)
    count = k * (k - 1) * sum(len(nic.ranks) ** 2 for nic in base.nics) if rails else full
    if count + copies > MAX_LINKS:
        raise TopologyError(f"compose {base.name}x{k}: would have {count + copies} links, "
                            f"more than the {MAX_LINKS} allowed")
    if not rails:
        return False, "a non-blocking fabric through their NICs"
    why = ("" if fabric == "rails" else f"; a full mesh between every NIC pair would make {full + copies} links, "
           f"more than the {MAX_LINKS} allowed")
    return True, ("a rail-aligned fabric through their NICs: NIC I of every copy to NIC I of every other "
                  "(NVIDIA's rail-optimized design; traffic between rails relays inside a copy first, as "
                  f"NCCL's PXN does){why}")


def _copies(base: Topology, k: int) -> tuple[list[Link], list[Group], list[Nic], list[Switch]]:
    """The links, groups, NICs and switches of the K copies, renamed and renumbered."""
    size = base.ranks
    links: list[Link] = []
    groups: list[Group] = []
    nics: list[Nic] = []
    switches: list[Switch] = []
    for m in range(k):
        off = m * size
        links += [Link(l.src + off, l.dst + off, l.bandwidth, l.alpha, l.capacity, l.kind) for l in base.links]
        groups += [
            Group(f"m{m}-{g.name}", tuple((s + off, d + off) for s, d in g.links), g.bandwidth, g.capacity)
            for g in base.groups
        ]
        nics += [
            Nic(f"m{m}-{n.name}", tuple(r + off for r in n.ranks), n.bandwidth, n.alpha) for n in base.nics
        ]
        switches += [_copied_switch(s, m, off) for s in base.switches]
    return links, groups, nics, switches


SHARP_SOURCE = ("sharp: the fabric aggregates in its switches (InfiniBand SHARP through NCCL's CollNet "
                "plugin): one switch whose port per rank runs at its NIC's bandwidth and shares the NIC's "
                "groups; reduce_multicast (every member sends M up and receives M down; "
                "reference/in-network.md sections 2.5 and 4.3)")


def _copied_switch(switch: Switch, m: int, off: int) -> Switch:
    def renamed(names):
        return None if names is None else tuple(None if g is None else f"m{m}-{g}" for g in names)

    return replace(switch, name=f"m{m}-{switch.name}", ranks=tuple(r + off for r in switch.ranks),
                   out_groups=renamed(switch.out_groups), in_groups=renamed(switch.in_groups))


def sharp_switch(nics: list[Nic]) -> Switch:
    """The SHARP switch over every rank behind a NIC (see the module)."""
    port_nic = {rank: nic for nic in nics for rank in nic.ranks}
    ranks = tuple(sorted(port_nic))
    return Switch("sharp", ranks, min(nic.bandwidth for nic in nics), max(nic.alpha for nic in nics),
                  reduce_multicast=True, out_groups=tuple(f"{port_nic[r].name}-out" for r in ranks),
                  in_groups=tuple(f"{port_nic[r].name}-in" for r in ranks), kind="net")
