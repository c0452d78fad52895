"""Topology: ranks joined by directed links, with shared-capacity groups.

Units: bandwidth in GB/s (10^9 bytes/s, one direction), alpha in microseconds.

>>> t = Topology.from_dict({"format": "synth.topology", "version": 1, "name": "pair",
...     "ranks": 2, "links": [{"src": 0, "dst": 1, "bandwidth": 25.0, "alpha": 0.7},
...                           {"src": 1, "dst": 0, "bandwidth": 25.0, "alpha": 0.7}]})
>>> t.link(0, 1).bandwidth, t.link_capacity(t.link(0, 1))
(25.0, 1)
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Iterable, Mapping

from synth.core.errors import TopologyError

TOPOLOGY_FORMAT = "synth.topology"
TOPOLOGY_VERSION = 1  # written when a topology has no switches (v1 files stay as they were)
TOPOLOGY_SWITCH_VERSION = 2  # ``switches`` (DESIGN.md, "In-network reduction and multicast")
TOPOLOGY_VERSIONS = (TOPOLOGY_VERSION, TOPOLOGY_SWITCH_VERSION)

MAX_RANKS = 65536  # bigger machines are refused before anything per rank is built
LINK_KINDS = ("nvlink", "xgmi", "pcie", "net")  # what a link is made of (optional ``kind``)
# The GPUs' architecture generation (optional ``arch``), as NCCL and RCCL key their tables: the
# runtime terms a calibration defaults to depend on it (synth.measure.calibration.ARCH_DEFAULTS).
ARCHS = ("volta", "turing", "ampere", "ada", "hopper", "blackwell", "gcn5", "cdna1", "cdna2", "cdna3", "cdna4")
_WHOLE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Link:
    """One direction of a physical connection.

    ``kind`` says what it is made of (one of ``LINK_KINDS``; None when unknown): protocol-aware
    costs (``synth.cost``) scale its alpha by NCCL's per-hop latency for that kind.
    """

    src: int
    dst: int
    bandwidth: float
    alpha: float = 0.0
    capacity: int | None = None
    kind: str | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.src, self.dst)


@dataclass(frozen=True)
class Group:
    """Links that share one capacity (a switch port, a NIC, a PCIe switch)."""

    name: str
    links: tuple[tuple[int, int], ...]
    bandwidth: float
    capacity: int | None = None


@dataclass(frozen=True)
class Nic:
    """A network interface of one machine, used to join machines (``dgx1x2``).

    ``ranks`` are the GPUs that reach the fabric through it.
    """

    name: str
    ranks: tuple[int, ...]
    bandwidth: float
    alpha: float = 0.0


SWITCH_CAPABILITIES = ("reduce", "multicast", "reduce_multicast")


@dataclass(frozen=True)
class Switch:
    """A switch that computes: one port per rank in ``ranks`` (DESIGN.md, topology v2).

    ``reduce``: several ports' chunks summed and delivered to one port (NVLS ld_reduce);
    ``multicast``: one port's chunk written to several ports (NVLS multimem.st);
    ``reduce_multicast``: both in one pass (InfiniBand SHARP aggregation). ``bandwidth`` and
    ``alpha`` hold per port and direction; ``out_groups[i]`` / ``in_groups[i]`` name the
    topology groups the port of ``ranks[i]`` shares with ordinary links (None: none).
    ``kind`` (optional) is what the ports are made of (``nvlink`` for NVSwitch, ``net`` for an
    InfiniBand switch): runtime terms pick the switch's efficiency and latency by it.
    """

    name: str
    ranks: tuple[int, ...]
    bandwidth: float
    alpha: float = 0.0
    capacity: int | None = None
    reduce: bool = False
    multicast: bool = False
    reduce_multicast: bool = False
    out_groups: tuple[str | None, ...] | None = None
    in_groups: tuple[str | None, ...] | None = None
    kind: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranks", tuple(self.ranks))
        for field_name in ("out_groups", "in_groups"):
            value = getattr(self, field_name)
            if value is not None:
                object.__setattr__(self, field_name, tuple(value))

    @cached_property
    def port_index(self) -> Mapping[int, int]:
        """rank -> its position in ``ranks``."""
        return {rank: index for index, rank in enumerate(self.ranks)}

    def out_group(self, rank: int) -> str | None:
        """The group the out-direction of ``rank``'s port shares (None: none)."""
        return None if self.out_groups is None else self.out_groups[self.port_index[rank]]

    def in_group(self, rank: int) -> str | None:
        """The group the in-direction of ``rank``'s port shares (None: none)."""
        return None if self.in_groups is None else self.in_groups[self.port_index[rank]]

    @property
    def capabilities(self) -> tuple[str, ...]:
        """The names of what it can do, in ``SWITCH_CAPABILITIES`` order."""
        return tuple(name for name in SWITCH_CAPABILITIES if getattr(self, name))

    def allows(self, sources: int, destinations: int) -> str | None:
        """The capability an operation with that many srcs and dsts needs that this switch lacks
        (None when it may run it), as DESIGN.md puts it: several srcs and one dst need
        ``reduce``, one src and several dsts ``multicast``, several of both
        ``reduce_multicast``."""
        if sources > 1 and destinations > 1:
            return None if self.reduce_multicast else "reduce_multicast"
        if sources > 1:
            return None if self.reduce else "reduce"
        if destinations > 1:
            return None if self.multicast else "multicast"
        return None


def _whole(value: float) -> int | None:
    nearest = round(value)
    if nearest >= 1 and abs(value - nearest) <= _WHOLE_TOLERANCE * max(1.0, value):
        return int(nearest)
    return None


@dataclass(frozen=True)
class Topology:
    """A machine description, validated on construction (raises TopologyError)."""

    name: str
    ranks: int
    links: tuple[Link, ...]
    groups: tuple[Group, ...] = ()
    machines: tuple[tuple[int, ...], ...] | None = None
    nics: tuple[Nic, ...] = ()
    sources: tuple[str, ...] = ()
    switches: tuple[Switch, ...] = ()
    arch: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "links", tuple(self.links))
        object.__setattr__(self, "switches", tuple(self.switches))
        object.__setattr__(self, "groups", tuple(self.groups))
        object.__setattr__(self, "nics", tuple(self.nics))
        object.__setattr__(self, "sources", tuple(self.sources))
        if self.machines is not None:
            object.__setattr__(self, "machines", tuple(tuple(m) for m in self.machines))
        self._validate()

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        where = f"topology {self.name!r}"
        if not isinstance(self.ranks, int) or isinstance(self.ranks, bool) or self.ranks < 1:
            raise TopologyError(f"{where}: 'ranks' must be a positive integer, got {self.ranks!r}")
        if self.ranks > MAX_RANKS:
            raise TopologyError(f"{where}: 'ranks' is {self.ranks}; synth handles at most {MAX_RANKS} ranks")
        if not self.links and self.ranks > 1:
            raise TopologyError(f"{where}: has {self.ranks} ranks but no links")
        if self.arch is not None and self.arch not in ARCHS:
            raise TopologyError(f"{where}: 'arch' is {self.arch!r}; known: {', '.join(ARCHS)}")
        seen: set[tuple[int, int]] = set()
        for link in self.links:
            self._check_rank(link.src, f"link {link.src}->{link.dst}")
            self._check_rank(link.dst, f"link {link.src}->{link.dst}")
            if link.src == link.dst:
                raise TopologyError(f"{where}: self-loop link {link.src}->{link.dst}")
            if link.key in seen:
                raise TopologyError(f"{where}: duplicate link {link.src}->{link.dst}")
            seen.add(link.key)
            _check_positive(link.bandwidth, f"{where}: link {link.src}->{link.dst} bandwidth")
            if not _is_number(link.alpha) or link.alpha < 0 or not math.isfinite(link.alpha):
                raise TopologyError(
                    f"{where}: link {link.src}->{link.dst} alpha must be a number >= 0, got {link.alpha!r}"
                )
            _check_capacity(link.capacity, f"{where}: link {link.src}->{link.dst}")
            _check_kind(link.kind, f"{where}: link {link.src}->{link.dst}")
        names: set[str] = set()
        for group in self.groups:
            if group.name in names:
                raise TopologyError(f"{where}: duplicate group name {group.name!r}")
            names.add(group.name)
            if not group.links:
                raise TopologyError(f"{where}: group {group.name!r} has no links")
            for key in group.links:
                if key not in seen:
                    raise TopologyError(
                        f"{where}: group {group.name!r} names {key[0]}->{key[1]}, which is not a link"
                    )
            if len(set(group.links)) != len(group.links):
                raise TopologyError(f"{where}: group {group.name!r} lists a link twice")
            _check_positive(group.bandwidth, f"{where}: group {group.name!r} bandwidth")
            _check_capacity(group.capacity, f"{where}: group {group.name!r}")
        if self.machines is not None:
            placed: set[int] = set()
            for machine in self.machines:
                if not machine:
                    raise TopologyError(f"{where}: an empty machine in 'machines'")
                for rank in machine:
                    self._check_rank(rank, "machines")
                    if rank in placed:
                        raise TopologyError(f"{where}: rank {rank} is in two machines")
                    placed.add(rank)
            if len(placed) != self.ranks:
                missing = sorted(set(range(self.ranks)) - placed)
                raise TopologyError(f"{where}: ranks {_short(missing)} are in no machine")
        for nic in self.nics:
            if not nic.ranks:
                raise TopologyError(f"{where}: NIC {nic.name!r} serves no rank")
            for rank in nic.ranks:
                self._check_rank(rank, f"NIC {nic.name!r}")
            _check_positive(nic.bandwidth, f"{where}: NIC {nic.name!r} bandwidth")
        switch_names: set[str] = set()
        for switch in self.switches:
            if switch.name in switch_names:
                raise TopologyError(f"{where}: duplicate switch name {switch.name!r}")
            switch_names.add(switch.name)
            self._check_switch(switch, names)

    def _check_switch(self, switch: Switch, group_names: set[str]) -> None:
        where = f"topology {self.name!r}: switch {switch.name!r}"
        if not switch.ranks:
            raise TopologyError(f"{where}: 'ranks' is empty")
        seen: set[int] = set()
        for rank in switch.ranks:
            if not isinstance(rank, int) or isinstance(rank, bool):
                raise TopologyError(f"{where}: 'ranks' entries must be integers, got {_json(rank)}")
            if not 0 <= rank < self.ranks:
                raise TopologyError(f"{where}: 'ranks' names {rank}, out of range 0..{self.ranks - 1}")
            if rank in seen:
                raise TopologyError(f"{where}: rank {rank} is named twice in 'ranks'")
            seen.add(rank)
        _check_positive(switch.bandwidth, f"{where}: bandwidth")
        if not _is_number(switch.alpha) or switch.alpha < 0 or not math.isfinite(switch.alpha):
            raise TopologyError(f"{where}: alpha must be a number >= 0, got {switch.alpha!r}")
        _check_capacity(switch.capacity, where)
        for name in SWITCH_CAPABILITIES:
            if not isinstance(getattr(switch, name), bool):
                raise TopologyError(f"{where}: {name!r} must be true or false, got {_json(getattr(switch, name))}")
        for field_name in ("out_groups", "in_groups"):
            groups = getattr(switch, field_name)
            if groups is None:
                continue
            if len(groups) != len(switch.ranks):
                raise TopologyError(f"{where}: {field_name!r} has {len(groups)} entries for "
                                    f"{len(switch.ranks)} ports (one per rank, in order, or null)")
            for group in groups:
                if group is not None and group not in group_names:
                    raise TopologyError(f"{where}: {field_name!r} names {group!r}, which is not a group")
        _check_kind(switch.kind, where)

    def _check_rank(self, rank: Any, what: str) -> None:
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < self.ranks:
            raise TopologyError(
                f"topology {self.name!r}: {what}: rank {rank!r} out of range 0..{self.ranks - 1}"
            )

    # ------------------------------------------------------------------ queries
    @cached_property
    def _link_map(self) -> dict[tuple[int, int], Link]:
        return {link.key: link for link in self.links}

    def link(self, src: int, dst: int) -> Link | None:
        """The link src->dst, or None."""
        return self._link_map.get((src, dst))

    def has_link(self, src: int, dst: int) -> bool:
        return (src, dst) in self._link_map

    @cached_property
    def out_links(self) -> tuple[tuple[Link, ...], ...]:
        out: list[list[Link]] = [[] for _ in range(self.ranks)]
        for link in self.links:
            out[link.src].append(link)
        return tuple(tuple(ls) for ls in out)

    @cached_property
    def in_links(self) -> tuple[tuple[Link, ...], ...]:
        into: list[list[Link]] = [[] for _ in range(self.ranks)]
        for link in self.links:
            into[link.dst].append(link)
        return tuple(tuple(ls) for ls in into)

    @cached_property
    def groups_of_link(self) -> Mapping[tuple[int, int], tuple[Group, ...]]:
        found: dict[tuple[int, int], list[Group]] = {}
        for group in self.groups:
            for key in group.links:
                found.setdefault(key, []).append(group)
        return {key: tuple(gs) for key, gs in found.items()}

    @cached_property
    def min_link_bandwidth(self) -> float:
        return min((link.bandwidth for link in self.links), default=1.0)

    @cached_property
    def _switch_map(self) -> dict[str, Switch]:
        return {switch.name: switch for switch in self.switches}

    def switch(self, name: str) -> Switch | None:
        """The switch called ``name``, or None."""
        return self._switch_map.get(name)

    @cached_property
    def group_map(self) -> Mapping[str, Group]:
        """Every group by name."""
        return {group.name: group for group in self.groups}

    def switch_capacity(self, switch: Switch) -> int | None:
        """Chunks per round through one port of ``switch``; None when not a whole number."""
        if switch.capacity is not None:
            return switch.capacity
        return _whole(switch.bandwidth / self.min_link_bandwidth)

    def link_capacity(self, link: Link) -> int | None:
        """Chunks per round on a link; None when bandwidth is not a whole multiple."""
        if link.capacity is not None:
            return link.capacity
        return _whole(link.bandwidth / self.min_link_bandwidth)

    def group_kind(self, group: Group) -> str | None:
        """The kind every link of ``group`` has (None when they differ or have none)."""
        kinds = {link.kind for key in group.links if (link := self.link(*key)) is not None}
        return kinds.pop() if len(kinds) == 1 else None

    def group_capacity(self, group: Group) -> int | None:
        """Chunks per round through a group; None when not a whole number."""
        if group.capacity is not None:
            return group.capacity
        return _whole(group.bandwidth / self.min_link_bandwidth)

    @cached_property
    def rounds_apply(self) -> bool:
        """True when every link and group has a whole capacity (k-synchronous model)."""
        return (all(self.link_capacity(l) is not None for l in self.links)
                and all(self.group_capacity(g) is not None for g in self.groups)
                and all(self.switch_capacity(s) is not None for s in self.switches))

    @cached_property
    def machine_of(self) -> tuple[int, ...]:
        """Machine index of every rank (all 0 without ``machines``)."""
        owner = [0] * self.ranks
        for index, machine in enumerate(self.machines or ()):
            for rank in machine:
                owner[rank] = index
        return tuple(owner)

    @property
    def machine_count(self) -> int:
        return len(self.machines) if self.machines else 1

    def distances_from(self, start: int) -> tuple[float, ...]:
        """Fewest links from ``start`` to every rank (math.inf when unreachable): one BFS."""
        dist = [math.inf] * self.ranks
        dist[start] = 0
        queue = deque([start])
        while queue:
            node = queue.popleft()
            for link in self.out_links[node]:
                if dist[link.dst] == math.inf:
                    dist[link.dst] = dist[node] + 1
                    queue.append(link.dst)
        return tuple(dist)

    @cached_property
    def hop_distances(self) -> tuple[tuple[float, ...], ...]:
        """dist[a][b]: fewest links from a to b (math.inf when unreachable).

        Breadth first from every rank at once: one boolean matrix product per hop, so a
        thousand ranks over a million links take a second, not a BFS per rank in Python."""
        import numpy as np  # here, not at module level: importing the model stays free of numpy

        n = self.ranks
        adjacency = np.zeros((n, n), dtype=np.float32)
        if self.links:
            src = np.fromiter((l.src for l in self.links), dtype=np.int64, count=len(self.links))
            dst = np.fromiter((l.dst for l in self.links), dtype=np.int64, count=len(self.links))
            adjacency[src, dst] = 1.0
        dist = np.full((n, n), -1, dtype=np.int64)
        np.fill_diagonal(dist, 0)
        frontier = np.eye(n, dtype=np.float32)
        hops = 0
        while frontier.any():
            hops += 1
            reached = (frontier @ adjacency > 0) & (dist < 0)
            dist[reached] = hops
            frontier = reached.astype(np.float32)
        return tuple(tuple(math.inf if d < 0 else d for d in row) for row in dist.tolist())

    def reversed(self) -> "Topology":
        """The same machine with every link and group pointing the other way (made once per
        topology, and its own reverse is this topology: baselines and duals ask for it again and
        again, and on a thousand GPUs each costs a second)."""
        return self._reverse

    @cached_property
    def _reverse(self) -> "Topology":
        made = self._reversed_copy()
        made.__dict__["_reverse"] = self
        return made

    def _reversed_copy(self) -> "Topology":
        return Topology(
            name=self.name[: -len("-reversed")] if self.name.endswith("-reversed") else f"{self.name}-reversed",
            ranks=self.ranks,
            links=tuple(
                Link(l.dst, l.src, l.bandwidth, l.alpha, l.capacity, l.kind) for l in self.links
            ),
            groups=tuple(
                Group(g.name, tuple((d, s) for s, d in g.links), g.bandwidth, g.capacity)
                for g in self.groups
            ),
            machines=self.machines,
            nics=self.nics,
            sources=self.sources,
            switches=tuple(_reversed_switch(s) for s in self.switches),
            arch=self.arch,
        )

    def renamed(self, name: str) -> "Topology":
        return replace(self, name=name)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": TOPOLOGY_FORMAT,
            "version": TOPOLOGY_SWITCH_VERSION if self.switches else TOPOLOGY_VERSION,
            "name": self.name,
            "ranks": self.ranks,
        }
        if self.arch is not None:
            doc["arch"] = self.arch
        doc["links"] = [_link_dict(l) for l in self.links]
        if self.groups:
            doc["groups"] = [_group_dict(g) for g in self.groups]
        if self.machines is not None:
            doc["machines"] = [list(m) for m in self.machines]
        if self.nics:
            doc["nics"] = [
                {"name": n.name, "ranks": list(n.ranks), "bandwidth": n.bandwidth, "alpha": n.alpha}
                for n in self.nics
            ]
        if self.sources:
            doc["sources"] = list(self.sources)
        if self.switches:
            doc["switches"] = [_switch_dict(s) for s in self.switches]
        return doc

    @classmethod
    def from_dict(cls, doc: Any, where: str = "topology") -> "Topology":
        """Parse a synth.topology v1 or v2 document; raises TopologyError with one clear line."""
        if not isinstance(doc, dict):
            raise TopologyError(f"{where}: expected a JSON object")
        if doc.get("format") != TOPOLOGY_FORMAT:
            raise TopologyError(
                f"{where}: 'format' must be {TOPOLOGY_FORMAT!r}, got {doc.get('format')!r}"
            )
        version = doc.get("version")
        if type(version) is not int or version not in TOPOLOGY_VERSIONS:
            raise TopologyError(
                f"{where}: unsupported {TOPOLOGY_FORMAT} version {doc.get('version')!r} "
                f"(this synth reads versions {TOPOLOGY_VERSION} and {TOPOLOGY_SWITCH_VERSION})"
            )
        if "switches" in doc and version < TOPOLOGY_SWITCH_VERSION:
            raise TopologyError(f"{where}: 'switches' needs {TOPOLOGY_FORMAT} version "
                                f"{TOPOLOGY_SWITCH_VERSION}, the file says version {version}")
        name = doc.get("name", "unnamed")
        if not isinstance(name, str):
            raise TopologyError(f"{where}: 'name' must be a string")
        ranks = _require(doc, "ranks", where)
        links_doc = _require(doc, "links", where)
        if not isinstance(links_doc, list):
            raise TopologyError(f"{where}: 'links' must be a list")
        links = tuple(_parse_link(item, where) for item in links_doc)
        groups = tuple(_parse_group(item, where) for item in _list_field(doc, "groups", where))
        machines_doc = doc.get("machines")
        machines = None
        if machines_doc is not None:
            if not isinstance(machines_doc, list) or not all(isinstance(m, list) for m in machines_doc):
                raise TopologyError(f"{where}: 'machines' must be a list of rank lists")
            machines = tuple(tuple(m) for m in machines_doc)
        nics = tuple(_parse_nic(item, where) for item in _list_field(doc, "nics", where))
        sources = _list_field(doc, "sources", where)
        if not all(isinstance(s, str) for s in sources):
            raise TopologyError(f"{where}: 'sources' must be a list of strings")
        switches = tuple(_parse_switch(item, where) for item in _list_field(doc, "switches", where))
        arch = doc.get("arch")
        if arch is not None and not isinstance(arch, str):
            raise TopologyError(f"{where}: 'arch' must be a string (one of {', '.join(ARCHS)})")
        try:
            return cls(name, ranks, links, groups, machines, nics, tuple(sources), switches, arch)
        except TopologyError as exc:  # name the file, not just the topology
            detail = str(exc).removeprefix(f"topology {name!r}: ")
            raise TopologyError(f"{where}: {detail}") from None


# ---------------------------------------------------------------------- helpers
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json(value: Any) -> str:
    """``value`` as JSON spells it (null, true, "0"), for messages about a file."""
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _check_positive(value: Any, what: str) -> None:
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        raise TopologyError(f"{what} must be a positive number, got {value!r}")


def _check_capacity(value: Any, what: str) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TopologyError(f"{what}: capacity must be a positive integer, got {value!r}")


def _short(items: Iterable[Any], limit: int = 12) -> str:
    items = list(items)
    text = ", ".join(str(i) for i in items[:limit])
    return text + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def _check_kind(value: Any, what: str) -> None:
    if value is not None and (not isinstance(value, str) or value not in LINK_KINDS):
        raise TopologyError(f"{what}: kind must be one of {', '.join(LINK_KINDS)}, got {value!r}")


def _require(doc: dict, key: str, where: str) -> Any:
    if key not in doc:
        raise TopologyError(f"{where}: missing field {key!r}")
    return doc[key]


def _list_field(doc: dict, key: str, where: str) -> list:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise TopologyError(f"{where}: {key!r} must be a list")
    return value


def _parse_link(item: Any, where: str) -> Link:
    if not isinstance(item, dict):
        raise TopologyError(f"{where}: every link must be an object")
    for key in ("src", "dst", "bandwidth"):
        if key not in item:
            raise TopologyError(f"{where}: a link is missing {key!r}: {item}")
    alpha = item.get("alpha", 0.0)
    return Link(item["src"], item["dst"], item["bandwidth"], alpha, item.get("capacity"), item.get("kind"))


def _parse_group(item: Any, where: str) -> Group:
    if not isinstance(item, dict):
        raise TopologyError(f"{where}: every group must be an object")
    for key in ("name", "links", "bandwidth"):
        if key not in item:
            raise TopologyError(f"{where}: a group is missing {key!r}")
    pairs = item["links"]
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 for p in pairs
    ):
        raise TopologyError(f"{where}: group {item['name']!r}: 'links' must be [src, dst] pairs")
    return Group(str(item["name"]), tuple((p[0], p[1]) for p in pairs), item["bandwidth"], item.get("capacity"))


def _parse_nic(item: Any, where: str) -> Nic:
    if not isinstance(item, dict) or not {"name", "ranks", "bandwidth"} <= set(item):
        raise TopologyError(f"{where}: every NIC needs 'name', 'ranks' and 'bandwidth'")
    if not isinstance(item["ranks"], list):
        raise TopologyError(f"{where}: NIC {item['name']!r}: 'ranks' must be a list")
    return Nic(str(item["name"]), tuple(item["ranks"]), item["bandwidth"], item.get("alpha", 0.0))


def _link_dict(link: Link) -> dict[str, Any]:
    out: dict[str, Any] = {"src": link.src, "dst": link.dst, "bandwidth": link.bandwidth, "alpha": link.alpha}
    if link.capacity is not None:
        out["capacity"] = link.capacity
    if link.kind is not None:
        out["kind"] = link.kind
    return out


def _group_dict(group: Group) -> dict[str, Any]:
    out: dict[str, Any] = {"name": group.name, "links": [list(k) for k in group.links], "bandwidth": group.bandwidth}
    if group.capacity is not None:
        out["capacity"] = group.capacity
    return out


def _parse_switch(item: Any, where: str) -> Switch:
    if not isinstance(item, dict):
        raise TopologyError(f"{where}: every switch must be an object")
    for key in ("name", "ranks", "bandwidth"):
        if key not in item:
            raise TopologyError(f"{where}: a switch is missing {key!r}")
    name = item["name"]
    if not isinstance(name, str):
        raise TopologyError(f"{where}: a switch's 'name' must be a string, got {name!r}")
    if not isinstance(item["ranks"], list):
        raise TopologyError(f"{where}: switch {name!r}: 'ranks' must be a list of ranks")
    port_groups = {}
    for key in ("out_groups", "in_groups"):
        value = item.get(key)
        if value is not None and (not isinstance(value, list)
                                  or not all(g is None or isinstance(g, str) for g in value)):
            raise TopologyError(f"{where}: switch {name!r}: {key!r} must be a list of group names "
                                f"(or null), got {_json(value)[:80]}")
        port_groups[key] = None if value is None else tuple(value)
    flags = {key: item.get(key, False) for key in SWITCH_CAPABILITIES}
    return Switch(name, tuple(item["ranks"]), item["bandwidth"], item.get("alpha", 0.0),
                  item.get("capacity"), **flags, **port_groups, kind=item.get("kind"))


def _switch_dict(switch: Switch) -> dict[str, Any]:
    out: dict[str, Any] = {"name": switch.name, "ranks": list(switch.ranks), "bandwidth": switch.bandwidth,
                           "alpha": switch.alpha}
    if switch.capacity is not None:
        out["capacity"] = switch.capacity
    out.update({name: getattr(switch, name) for name in SWITCH_CAPABILITIES})
    for key in ("out_groups", "in_groups"):
        if getattr(switch, key) is not None:
            out[key] = list(getattr(switch, key))
    if switch.kind is not None:
        out["kind"] = switch.kind
    return out


def _reversed_switch(switch: Switch) -> Switch:
    """The switch with data flowing the other way: out- and in-groups trade places, and so do
    reduce (many to one) and multicast (one to many)."""
    return replace(switch, reduce=switch.multicast, multicast=switch.reduce,
                   out_groups=switch.in_groups, in_groups=switch.out_groups)
