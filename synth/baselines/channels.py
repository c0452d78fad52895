"""NCCL-style channels: several rings over all ranks that together use every link unit and NIC.

A *unit* is the topology's smallest link bandwidth; a link or group of bandwidth B offers
``floor(B / unit)`` units (a group slower than the unit, such as a CPU interconnect between
PCIe GPUs, still offers one: the ring crosses it at its own rate), and every ring uses one unit of each
link and group on its hops, so
the rings of a plan share the machine fairly and each carries the same share of the data.

- One machine: a packing of directed Hamiltonian cycles in that capacity multigraph, each
  cycle tried with its reverse first (NCCL runs rings both ways), by a depth-first search
  with a budget that stops when every rank's in/out units are used. On a DGX-1 that is 6
  rings covering every NVLink unit once; on an NVSwitch machine the port groups allow one.
- Several identical machines: rail-aligned rings. Each channel enters a machine on some GPU
  and leaves it through a NIC on a GPU such that the next machine is entered on the same
  rail. NICs that serve several GPUs pair them (enter on one, leave on the other: DGX-2);
  NICs that serve one GPU shift the rail every machine (enter on rail c, leave on rail c+1,
  back on the next machine), so every NIC sends and receives for exactly one channel.
  Inside a machine the channel follows a Hamiltonian path between the two GPUs.

>>> from synth.core.library import resolve_topology
>>> plan = plan_channels(resolve_topology("dgx1"))
>>> len(plan.rings), plan.method
(6, 'packed Hamiltonian cycles')
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from synth.baselines.common import BaselineNotApplicable
from synth.core.topology import Topology

SEARCH_BUDGET = 50_000  # node expansions for the whole packing search


@dataclass(frozen=True)
class ChannelPlan:
    """Rings (each a cyclic order of all ranks, hop i = order[i] -> order[i+1]) and how they were found."""

    rings: tuple[tuple[int, ...], ...]
    method: str
    note: str = ""


class _Capacity:
    """Remaining units of every link and group; a ring takes one unit per hop of each."""

    def __init__(self, topology: Topology, ranks: Sequence[int] | None = None) -> None:
        unit = topology.min_link_bandwidth
        inside = set(range(topology.ranks) if ranks is None else ranks)
        self.topology = topology
        self.links = {l.key: int(math.floor(l.bandwidth / unit + 1e-9)) for l in topology.links
                      if l.src in inside and l.dst in inside}
        self.groups = Counter({g.name: max(1, int(math.floor(g.bandwidth / unit + 1e-9))) for g in topology.groups})
        self.groups_of = {key: tuple(g.name for g in gs) for key, gs in topology.groups_of_link.items()}
        self.succ: dict[int, list[int]] = {r: [] for r in inside}
        for src, dst in self.links:
            self.succ[src].append(dst)
        self._at: tuple[dict, dict] | None = None

    def ring_limit(self) -> int:
        """Most rings that could fit: every rank's out- and in-units (links, capped by any group
        that holds all of them, such as a switch port)."""
        units = [self.units(self.keys_at(rank, side)) for side in (0, 1) for rank in self.succ]
        return min(units, default=0)

    def keys_at(self, rank: int, side: int) -> list[tuple[int, int]]:
        """The links out of ``rank`` (side 0) or into it (side 1)."""
        if self._at is None:
            self._at = ({r: [] for r in self.succ}, {r: [] for r in self.succ})
            for key in self.links:
                self._at[0][key[0]].append(key)
                self._at[1][key[1]].append(key)
        return self._at[side][rank]

    def units(self, keys: Sequence[tuple[int, int]]) -> int:
        """Units the links ``keys`` offer together: their sum, capped by every group holding all of them."""
        total = sum(self.links[k] for k in keys)
        shared = set.intersection(*(set(self.groups_of.get(k, ())) for k in keys)) if keys else set()
        return min([total] + [self.groups[name] for name in shared])

    def free(self, a: int, b: int) -> int:
        left = self.links.get((a, b), 0)
        for name in self.groups_of.get((a, b), ()):
            left = min(left, self.groups[name])
        return left

    def take(self, hops: Sequence[tuple[int, int]], amount: int = 1) -> None:
        for a, b in hops:
            self.links[(a, b)] -= amount
            for name in self.groups_of.get((a, b), ()):
                self.groups[name] -= amount

    def fits(self, hops: Sequence[tuple[int, int]]) -> bool:
        need = Counter(hops)
        group_need: Counter = Counter()
        for key, count in need.items():
            if self.links.get(key, 0) < count:
                return False
            for name in self.groups_of.get(key, ()):
                group_need[name] += count
        return all(self.groups[name] >= count for name, count in group_need.items())


def plan_channels(topology: Topology) -> ChannelPlan:
    """The channels NCCL would build on ``topology`` (see the module docstring)."""
    if topology.ranks < 2:
        raise BaselineNotApplicable("a ring needs at least 2 ranks")
    if topology.machine_count > 1:
        return _rail_aligned(topology)
    rings = _pack_cycles(topology)
    if not rings:
        raise BaselineNotApplicable(f"{topology.name} has no Hamiltonian cycle of links (NCCL rings need one)")
    return ChannelPlan(tuple(rings), "packed Hamiltonian cycles")


# ---------------------------------------------------------------------------- one machine
def _hops(order: Sequence[int]) -> list[tuple[int, int]]:
    return list(zip(order, list(order[1:]) + [order[0]]))


def _pack_cycles(topology: Topology) -> list[tuple[int, ...]]:
    """Most directed Hamiltonian cycles that fit the link and group units together."""
    capacity = _Capacity(topology)
    limit = capacity.ring_limit()
    best: list[tuple[int, ...]] = []
    budget = [SEARCH_BUDGET]

    def search(chosen: list[tuple[int, ...]]) -> bool:
        nonlocal best
        if len(chosen) > len(best):
            best = list(chosen)
        if len(best) >= limit:
            return True
        for cycle in _cycles(capacity, budget):
            pair = [cycle]
            reverse = (cycle[0],) + tuple(reversed(cycle[1:]))
            if capacity.fits(_hops(cycle) + _hops(reverse)) and len(chosen) + 2 <= limit:
                pair.append(reverse)
            hops = [h for ring in pair for h in _hops(ring)]
            capacity.take(hops)
            done = search(chosen + pair)
            capacity.take(hops, -1)
            if done or budget[0] <= 0:
                return done
        return False

    search([])
    return best


def _cycles(capacity: _Capacity, budget: list[int]):
    """Hamiltonian cycles in the remaining capacity, starting at the smallest rank, widest hops first."""
    nodes = sorted(capacity.succ)
    start, n = nodes[0], len(nodes)
    path, seen = [start], {start}

    def extend():
        if budget[0] <= 0:
            return
        budget[0] -= 1
        node = path[-1]
        if len(path) == n:
            if capacity.free(node, start) > 0:
                yield tuple(path)
            return
        options = [d for d in capacity.succ[node] if d not in seen and capacity.free(node, d) > 0]
        for nxt in sorted(options, key=lambda d: (-capacity.free(node, d), d)):
            path.append(nxt)
            seen.add(nxt)
            yield from extend()
            seen.discard(path.pop())

    yield from extend()


# ---------------------------------------------------------------------------- several machines
def _rail_aligned(topology: Topology) -> ChannelPlan:
    machines = topology.machines
    sizes = {len(m) for m in machines}
    if len(sizes) != 1:
        raise BaselineNotApplicable("rail-aligned rings need machines of equal size")
    size = sizes.pop()
    rails = _local_rails(topology)
    ends, note = _channel_ends(rails, size, len(machines))
    rings: list[tuple[int, ...]] = []
    most = min(len(ends), _machine_ring_limit(_Capacity(topology), machines))
    for start in range(len(ends)):  # the path search is greedy: try each channel first once
        found = _fit_channels(topology, ends[start:] + ends[:start])
        if len(found) > len(rings):
            rings = found
        if len(rings) >= most:  # no later start can fit more: the first best is kept either way
            break
    if not rings:
        raise BaselineNotApplicable(f"no rail-aligned ring fits {topology.name} (no Hamiltonian path between NIC GPUs)")
    return ChannelPlan(tuple(rings), "rail-aligned rings", note)


def _fit_channels(topology: Topology, ends: list[list[tuple[int, int]]]) -> list[tuple[int, ...]]:
    """Rings for the channels ``ends`` in order, each where a path fits the remaining units."""
    machines = topology.machines
    capacity = _Capacity(topology)
    rings = []
    for channel in ends:
        order: list[int] = []
        for m, (enter, leave) in enumerate(channel):
            machine = machines[m]
            path = _path(capacity, list(machine), machine[enter], machine[leave])
            if path is None:
                break
            order += path
        else:
            hops = _hops(order)
            if all(topology.has_link(a, b) for a, b in hops) and capacity.fits(hops):
                capacity.take(hops)
                rings.append(tuple(order))
    return rings


def _machine_ring_limit(capacity: _Capacity, machines: Sequence[Sequence[int]]) -> float:
    """Most rail-aligned rings that could fit: a ring crosses a machine of k GPUs on a path, k-1
    hops between its GPUs, so rings x (k-1) is at most the units its GPUs can send to (and
    receive from) each other; a GPU's units there are its links' inside the machine, capped by
    any group that holds all of them (its switch port). Machines of one GPU bound nothing."""
    best = math.inf
    for machine in machines:
        if len(machine) < 2:
            continue
        inside = set(machine)
        for side in (0, 1):
            units = sum(capacity.units([k for k in capacity.keys_at(rank, side) if k[1 - side] in inside])
                        for rank in machine)
            best = min(best, units // (len(machine) - 1))
    return best


def _local_rails(topology: Topology) -> list[list[int]]:
    """Per NIC of machine 0, the local indices of the GPUs it serves (the rails)."""
    first = topology.machines[0]
    local = {rank: i for i, rank in enumerate(first)}
    rails = [sorted(local[r] for r in nic.ranks if r in local) for nic in topology.nics]
    rails = [r for r in rails if r]
    if not rails:
        raise BaselineNotApplicable(f"{topology.name} says no NICs: cannot tell which GPUs reach the fabric")
    return rails


def _channel_ends(rails: list[list[int]], size: int, machines: int) -> tuple[list[list[tuple[int, int]]], str]:
    """Per channel, per machine: (local GPU entered, local GPU left)."""
    if size == 1:
        return [[(0, 0)] * machines], ""
    if all(len(r) == 1 for r in rails):  # one GPU per NIC: shift the rail every machine
        gpus = [r[0] for r in rails]
        count = len(gpus)
        if count == 1:
            return [[(gpus[0], gpus[0])] * machines], "one NIC GPU: enters and leaves on it"
        shift = [m % 2 for m in range(machines)]
        note = ""
        if machines % 2:
            if count >= 3:
                shift[-1] = 2
            else:
                note = "odd machine count with 2 rails: the closing hop changes rail"
        channels = []
        for c in range(count):
            ends = []
            for m in range(machines):
                enter = gpus[(c + shift[m]) % count]
                leave = gpus[(c + shift[(m + 1) % machines]) % count]
                if leave == enter:
                    leave = gpus[(c + shift[m] + 1) % count]
                ends.append((enter, leave))
            channels.append(ends)
        return channels, note
    channels = []  # NICs shared by several GPUs: enter on one, leave on the next, same rail
    for rail in rails:
        for i in range(0, len(rail) - 1, 2):
            channels.append([(rail[i], rail[i + 1])] * machines)
    return channels, ""


def _path(capacity: _Capacity, nodes: list[int], start: int, end: int) -> list[int] | None:
    """A Hamiltonian path start -> end through ``nodes`` in the remaining capacity (DFS, budget).
    Next hops are tried fewest onward choices first (Warnsdorff: unvisited successors inside
    ``nodes``, kept as counts that change as the path grows), then most units left, then rank."""
    if len(nodes) == 1:
        return [start]
    inside = set(nodes)
    local = {v: [d for d in capacity.succ[v] if d in inside] for v in nodes}
    into: dict[int, list[int]] = {v: [] for v in nodes}
    for v in nodes:
        for d in local[v]:
            into[d].append(v)
    onward = {v: len(local[v]) for v in nodes}
    budget = [20_000]
    path, seen = [start], set()

    def visit(v: int, step: int) -> None:
        if step > 0:
            seen.add(v)
        else:
            seen.discard(v)
        for p in into[v]:
            onward[p] -= step

    def extend() -> bool:
        budget[0] -= 1
        if budget[0] < 0:
            return False
        node = path[-1]
        if len(path) == len(nodes) - 1:
            if capacity.free(node, end) > 0:
                path.append(end)
                return True
            return False
        options = []
        for d in local[node]:
            if d not in seen and d != end:
                units = capacity.free(node, d)
                if units > 0:
                    options.append((onward[d], -units, d))
        for _, _, nxt in sorted(options):
            path.append(nxt)
            visit(nxt, 1)
            if extend():
                return True
            visit(path.pop(), -1)
        return False

    visit(start, 1)
    return list(path) if extend() else None
