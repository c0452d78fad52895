"""The contract step model over a plan's arrays (``synth.cost`` over a Schedule gives the same).

A step lasts as long as its slowest resource: max over links used of alpha + n x b / bandwidth
and over groups of n x b / bandwidth, n the chunks it puts there; the plan's time is the sum
(DESIGN.md, protocol "ideal"). Here the loads of every step are counted at once with bincount,
so planners can compare many plans in the time one Schedule takes to build.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
        n = topology.ranks
        link_id = np.full(n * n, -1, dtype=np.int64)
        for i, link in enumerate(topology.links):
            link_id[link.src * n + link.dst] = i
        member = np.zeros((len(topology.links), len(topology.groups)))
        for g, group in enumerate(topology.groups):
            for a, b in group.links:
                if 0 <= a < n and 0 <= b < n and link_id[a * n + b] >= 0:
                    member[link_id[a * n + b], g] = 1.0
        capacity = [topology.link_capacity(link) for link in topology.links]
        group_capacity = [topology.group_capacity(group) for group in topology.groups]
        return cls(n, link_id, np.array([link.alpha for link in topology.links]),
                   np.array([link.bandwidth for link in topology.links]),
                   np.array([np.nan if c is None else c for c in capacity], dtype=float), member,
                   np.array([group.bandwidth for group in topology.groups]),
                   np.array([np.nan if c is None else c for c in group_capacity], dtype=float))

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
    to its own machine's ranks: the links' sum, capped by the narrowest group they pass (a NIC,
    an NVSwitch port)."""
    machine_of = topology.machine_of
    out_bw, in_bw = np.zeros(topology.ranks), np.zeros(topology.ranks)
    out_cap, in_cap = np.full(topology.ranks, np.inf), np.full(topology.ranks, np.inf)
    for link in topology.links:
        if (machine_of[link.src] != machine_of[link.dst]) == across:
            out_bw[link.src] += link.bandwidth
            in_bw[link.dst] += link.bandwidth
            for group in topology.groups_of_link.get(link.key, ()):
                out_cap[link.src] = min(out_cap[link.src], group.bandwidth)
                in_cap[link.dst] = min(in_cap[link.dst], group.bandwidth)
    return np.minimum(out_bw, out_cap), np.minimum(in_bw, in_cap)
