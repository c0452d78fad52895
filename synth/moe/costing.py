"""The contract step model over a plan's arrays (``synth.cost`` over a Schedule gives the same).

A step lasts as long as its slowest resource: max over links used of alpha + n x b / bandwidth
and over groups of n x b / bandwidth, n the chunks it puts there (a switch entry's chunks too,
on the groups its ports share), and over switch ports used of the switch's alpha + n x b / its
bandwidth; the plan's time is the sum (DESIGN.md, protocol "ideal"). Here the loads of every
step are counted at once with bincount, so planners can compare many plans in the time one
Schedule takes to build.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synth.bounds.cuts import network_of
from synth.bounds.flow import cut_rate
from synth.core.errors import InputError
from synth.core.topology import Topology
from synth.moe.plan import Hops


@dataclass(frozen=True, eq=False)
class LinkTable:
    """A topology's links and groups as arrays: ``link_id[src * ranks + dst]`` (-1: no link) and a
    [links, groups] membership matrix; its switches' ports (``Ports``) for plans with switch
    entries."""

    ranks: int
    link_id: np.ndarray
    alpha: np.ndarray
    bandwidth: np.ndarray
    capacity: np.ndarray
    member: np.ndarray
    group_bandwidth: np.ndarray
    group_capacity: np.ndarray
    ports: "Ports | None" = None

    @classmethod
    def of(cls, topology: Topology) -> "LinkTable":
        """From the bounds' ``Network`` of the topology (links, groups, capacities), plus alphas."""
        net = network_of(topology)
        n = topology.ranks
        link_id = np.full(n * n, -1, dtype=np.int64)
        link_id[net.src * n + net.dst] = np.arange(net.links)
        member = np.zeros((net.links, len(net.group_bandwidth)))
        member[net.group_idx, np.repeat(np.arange(len(net.group_bandwidth)), np.diff(net.group_ptr))] = 1.0
        unknown = np.full(net.links, np.nan), np.full(len(net.group_bandwidth), np.nan)
        return cls(n, link_id, np.array([link.alpha for link in topology.links]), net.bandwidth,
                   unknown[0] if net.capacity is None else net.capacity, member, net.group_bandwidth,
                   unknown[1] if net.group_capacity is None else net.group_capacity,
                   Ports.of(topology, net.group_names) if topology.switches else None)

    def links_of(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Link index of every (src, dst); InputError naming the first pair with no link."""
        link = self.link_id[src * self.ranks + dst]
        if (link < 0).any():
            at = int(np.flatnonzero(link < 0)[0])
            raise InputError(f"no link {int(src[at])}->{int(dst[at])} in the topology")
        return link

    def loads(self, hops: Hops) -> tuple[np.ndarray, np.ndarray]:
        """Chunks per [step, link] and per [step, group] (a switch entry's chunks counted on the
        groups its ports share)."""
        link = self.links_of(hops.src, hops.dst)
        count = len(self.alpha)
        per_link = np.bincount(hops.step * count + link, minlength=hops.steps * count).reshape(hops.steps, count)
        per_group = per_link.astype(float) @ self.member
        if hops.fans is not None and len(hops.fans):
            per_group += self.ports.group_loads(self.port_loads(hops), per_group.shape[1])
        return per_link, per_group

    def port_loads(self, hops: Hops) -> np.ndarray:
        """Chunks per [step, port] of the plan's switch entries (``Ports`` numbers the ports):
        one on the out-port of every src and the in-port of every dst."""
        fans, ports = hops.fans, self.ports
        if fans is None or not len(fans):
            return np.zeros((hops.steps, 0))
        if ports is None:
            raise InputError("a plan with switch entries on a topology without switches")
        sizes = np.diff(fans.ptr)
        leaf_step, leaf_switch = np.repeat(fans.step, sizes), np.repeat(fans.switch, sizes)
        root_many = np.ones(len(fans), dtype=bool) if not hops.reduce else fans.with_root
        root_port = ports.port(fans.switch, fans.root, out=not hops.reduce)
        leaf_port = ports.port(leaf_switch, fans.leaves, out=hops.reduce)
        steps = [fans.step, leaf_step]
        used = [root_port, leaf_port]
        if hops.reduce:  # a root that is also a src puts its partial on its out-port
            steps.append(fans.step[root_many])
            used.append(ports.port(fans.switch[root_many], fans.root[root_many], out=True))
        step, port = np.concatenate(steps), np.concatenate(used)
        if (port < 0).any():
            raise InputError("a switch entry names a rank that is not a port of its switch")
        size = ports.count
        return np.bincount(step * size + port, minlength=hops.steps * size).reshape(hops.steps, size)

    def step_times_us(self, hops: Hops, chunk_bytes: float) -> np.ndarray:
        """Every step's duration in the ideal step model (a switch port is a resource like a
        link: the switch's alpha plus its chunks over the port's bandwidth)."""
        per_link, per_group = self.loads(hops)
        link_time = np.where(per_link > 0, self.alpha + per_link * chunk_bytes / (self.bandwidth * 1e3), 0.0)
        group_time = per_group * chunk_bytes / (self.group_bandwidth * 1e3) if per_group.shape[1] else link_time
        took = np.maximum(link_time.max(axis=1, initial=0.0), group_time.max(axis=1, initial=0.0))
        if hops.fans is not None and len(hops.fans):
            per_port, ports = self.port_loads(hops), self.ports
            port_time = np.where(per_port > 0, ports.alpha + per_port * chunk_bytes / (ports.bandwidth * 1e3), 0.0)
            took = np.maximum(took, port_time.max(axis=1, initial=0.0))
        return took

    def time_us(self, hops: Hops, chunk_bytes: float) -> float:
        return float(self.step_times_us(hops, chunk_bytes).sum())

    def rounds(self, hops: Hops) -> list[int] | None:
        """Per step, the fewest rounds its link and group loads fit in (None: capacities not whole)."""
        if np.isnan(self.capacity).any() or np.isnan(self.group_capacity).any():
            return None
        per_link, per_group = self.loads(hops)
        need = np.ceil(per_link / self.capacity).max(axis=1, initial=1)
        if per_group.shape[1]:
            need = np.maximum(need, np.ceil(per_group / self.group_capacity).max(axis=1, initial=1))
        if hops.fans is not None and len(hops.fans):
            if np.isnan(self.ports.capacity).any():
                return None
            need = np.maximum(need, np.ceil(self.port_loads(hops) / self.ports.capacity).max(axis=1, initial=1))
        return [max(1, int(r)) for r in need]


@dataclass(frozen=True, eq=False)
class Ports:
    """A topology's switch ports as arrays: port ``(switch * ranks + rank) * 2 + (0 out, 1 in)``;
    per port its switch's alpha, bandwidth and capacity (nan: not whole; inf where no port) and the
    group it shares (-1: none); ``index`` -1 where the rank is no port of the switch."""

    ranks: int
    index: np.ndarray
    alpha: np.ndarray
    bandwidth: np.ndarray
    capacity: np.ndarray
    group: np.ndarray

    @classmethod
    def of(cls, topology: Topology, group_names: tuple[str, ...]) -> "Ports":
        n, switches = topology.ranks, topology.switches
        group_of = {name: i for i, name in enumerate(group_names)}
        size = len(switches) * n * 2
        index = np.full(size, -1, dtype=np.int64)
        alpha, bandwidth, capacity, group = (np.zeros(size), np.ones(size), np.full(size, np.inf),
                                             np.full(size, -1, dtype=np.int64))
        for s, switch in enumerate(switches):
            cap = topology.switch_capacity(switch)
            for rank in switch.ranks:
                for direction, name in ((0, switch.out_group(rank)), (1, switch.in_group(rank))):
                    at = (s * n + rank) * 2 + direction
                    index[at] = at
                    alpha[at], bandwidth[at] = switch.alpha, switch.bandwidth
                    capacity[at] = np.nan if cap is None else cap
                    group[at] = group_of.get(name, -1) if name is not None else -1
        return cls(n, index, alpha, bandwidth, capacity, group)

    @property
    def count(self) -> int:
        return len(self.index)

    def port(self, switch: np.ndarray, rank: np.ndarray, out: bool) -> np.ndarray:
        """The port of every (switch, rank) in one direction (-1: no port)."""
        return self.index[(switch * self.ranks + rank) * 2 + (0 if out else 1)]

    def group_loads(self, per_port: np.ndarray, groups: int) -> np.ndarray:
        """[step, group] chunks the ports put on the groups they share."""
        shared = np.flatnonzero(self.group >= 0)
        out = np.zeros((per_port.shape[0], groups))
        np.add.at(out.T, self.group[shared], per_port[:, shared].T)
        return out


def port_bandwidth(topology: Topology, across: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, GB/s it can send and receive over its links to other machines (``across``) or
    to its own machine's ranks: the most rate those links carry under the groups they pass (NICs,
    NVSwitch ports), by the cut code's ``cut_rate``."""
    net = network_of(topology)
    machine_of = np.asarray(topology.machine_of, dtype=np.int64)
    mine = (machine_of[net.src] != machine_of[net.dst]) == across
    out_bw, in_bw = np.zeros(topology.ranks), np.zeros(topology.ranks)
    for rank in range(topology.ranks):
        out_bw[rank] = cut_rate(net, mine & (net.src == rank), net.bandwidth, net.group_bandwidth)[0]
        in_bw[rank] = cut_rate(net, mine & (net.dst == rank), net.bandwidth, net.group_bandwidth)[0]
    return out_bw, in_bw
