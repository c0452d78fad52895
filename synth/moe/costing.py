"""The contract step model over a plan's arrays (``synth.cost`` over a Schedule gives the same).

A step lasts as long as its slowest resource: max over links used of alpha + n x b / bandwidth
and over groups of n x b / bandwidth, n the chunks it puts there; the plan's time is the sum
(DESIGN.md, protocol "ideal"). Here the loads of every step are counted at once with bincount,
so planners can compare many plans in the time one Schedule takes to build.
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
    [links, groups] membership matrix."""

    ranks: int
    link_id: np.ndarray
    alpha: np.ndarray
    bandwidth: np.ndarray
    capacity: np.ndarray
    member: np.ndarray
    group_bandwidth: np.ndarray
    group_capacity: np.ndarray

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
                   unknown[1] if net.group_capacity is None else net.group_capacity)

    def links_of(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Link index of every (src, dst); InputError naming the first pair with no link."""
        link = self.link_id[src * self.ranks + dst]
        if (link < 0).any():
            at = int(np.flatnonzero(link < 0)[0])
            raise InputError(f"no link {int(src[at])}->{int(dst[at])} in the topology")
        return link

    def loads(self, hops: Hops) -> tuple[np.ndarray, np.ndarray]:
        """Chunks per [step, link] and per [step, group]."""
        link = self.links_of(hops.src, hops.dst)
        count = len(self.alpha)
        per_link = np.bincount(hops.step * count + link, minlength=hops.steps * count).reshape(hops.steps, count)
        return per_link, per_link.astype(float) @ self.member

    def step_times_us(self, hops: Hops, chunk_bytes: float) -> np.ndarray:
        """Every step's duration in the ideal step model."""
        per_link, per_group = self.loads(hops)
        link_time = np.where(per_link > 0, self.alpha + per_link * chunk_bytes / (self.bandwidth * 1e3), 0.0)
        group_time = per_group * chunk_bytes / (self.group_bandwidth * 1e3) if per_group.shape[1] else link_time
        return np.maximum(link_time.max(axis=1, initial=0.0), group_time.max(axis=1, initial=0.0))

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
        return [max(1, int(r)) for r in need]


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
