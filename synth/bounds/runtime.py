"""Lower bounds under a runtime's terms (``synth.cost.RuntimeTerms``): what no schedule run by
that runtime can beat.

The bound is the ideal model's bound (``lower_bounds``) on the effective topology, where every
link, group and switch port moves at its line rate times its kind's efficiency (a switch's
ports: ``synth.cost.switch_kind``) and every alpha is scaled by
the runtime's latency factor (plus the network hop on network links), plus the smallest
per-call latency of the runtime's protocols, and never below the launch floor. Every protocol's
alpha factor is at least LL's (1) and its payload share at most 1, so each term is at most what
any protocol pays: the result bounds the step model under the terms, every protocol included.

>>> from synth.core.collectives import allgather
>>> from synth.core.topology import Topology, Link
>>> from synth.measure.calibration import Calibration
>>> ring = Topology("uring4", 4, tuple(Link(i, (i + 1) % 4, 25.0, 0.7, kind="nvlink") for i in range(4)))
>>> b = runtime_bounds(ring, allgather(4), Calibration().terms())
>>> round(b.busbw_gbps, 3)  # 25 GB/s x efficiency_nvlink
19.42
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from synth.bounds.lower_bounds import Bounds, lower_bounds
from synth.core.collective import Collective
from synth.core.topology import Topology
from synth.cost import RuntimeTerms, switch_kind


@dataclass(frozen=True)
class RuntimeBounds:
    """``bounds`` on the effective topology and the runtime terms that sit on top of them."""

    bounds: Bounds
    terms: RuntimeTerms

    @property
    def call_us(self) -> float:
        """The smallest per-call latency any modelled kernel pays in the terms' launch mode
        (``RuntimeTerms.fastest_call_us``)."""
        return self.terms.fastest_call_us

    def time_us(self, size_bytes: float) -> float:
        """No schedule run under the terms takes less time at this size."""
        return max(self.terms.launch_us, self.bounds.time_us(size_bytes) + self.call_us)

    @property
    def busbw_gbps(self) -> float:
        """The bus bandwidth limit at effective link rates (independent of S)."""
        return self.bounds.busbw_gbps

    def to_dict(self, size: int | None = None) -> dict[str, Any]:
        doc = self.bounds.to_dict(size)
        doc["time_us"] = None if size is None else self.time_us(size)
        doc["calibration"] = self.terms.label
        return doc


def effective_topology(topology: Topology, terms: RuntimeTerms) -> Topology:
    """``topology`` at the rates and latencies a runtime reaches (see the module)."""
    links = tuple(replace(link, bandwidth=link.bandwidth * terms.efficiency_of(link.kind),
                          alpha=link.alpha * terms.latency_scale + (terms.net_hop_us if link.kind == "net" else 0.0))
                  for link in topology.links)
    groups = tuple(replace(group, bandwidth=group.bandwidth * terms.efficiency_of(topology.group_kind(group)))
                   for group in topology.groups)
    switches = tuple(replace(switch, bandwidth=switch.bandwidth * terms.efficiency_of(switch_kind(switch)),
                             alpha=switch.alpha * terms.latency_scale)
                     for switch in topology.switches)
    return replace(topology, links=links, groups=groups, switches=switches)


def runtime_bounds(topology: Topology, collective: Collective, terms: RuntimeTerms) -> RuntimeBounds:
    """The lower bounds of ``collective`` on ``topology`` under ``terms``."""
    return RuntimeBounds(lower_bounds(effective_topology(topology, terms), collective), terms)
