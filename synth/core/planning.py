"""Whole capacities for the planners on machines whose bandwidths are not whole multiples.

The MILP router and the greedy scheduler plan in rounds: in one round a link or group carries
``capacity`` chunks. Real machines rarely have bandwidths that are whole multiples of the
slowest link (PCIe 15.75 GB/s beside a 10 GB/s CPU interconnect, NVLink bridges beside PCIe), so
``Topology.rounds_apply`` is false there and rounds are undefined. ``planning_view`` gives the
planners a copy with an explicit whole capacity on every link and group: ``round(bandwidth /
unit)``, at least 1, with the unit the slowest link or group divided by the smallest
``d`` in ``SUBDIVISIONS`` that keeps every capacity within ``TOLERANCE`` of its exact ratio (the
most accurate ``d`` when none does). Bandwidths, latencies and kinds are unchanged, so every cost
computed on the view equals the cost on the machine itself.

A schedule planned on the view is put back on the machine with ``on_machine``: the same steps
and sends, with ``rounds`` dropped (rounds mean nothing where capacities are not whole), and
verified there.

>>> from synth.core.topology import Group, Link, Topology
>>> t = Topology("box", 2, (Link(0, 1, 15.75), Link(1, 0, 15.75)), (Group("cpu", ((0, 1),), 10.0),))
>>> t.rounds_apply, planning_view(t).rounds_apply
(False, True)
>>> view = planning_view(t)
>>> [view.link_capacity(l) for l in view.links], view.group_capacity(view.groups[0])
([3, 3], 2)
"""

from __future__ import annotations

from dataclasses import replace

from synth.core.schedule import Schedule, Step
from synth.core.topology import Topology

SUBDIVISIONS = (1, 2, 3, 4, 6, 8)
TOLERANCE = 0.1  # largest relative error of a rounded capacity the smallest subdivision may leave


def planning_view(topology: Topology) -> Topology:
    """``topology`` itself when its capacities are whole, else the copy with whole capacities
    described in the module docstring (its sources say so)."""
    if topology.rounds_apply:
        return topology
    rates = [link.bandwidth for link in topology.links] + [group.bandwidth for group in topology.groups]
    unit = _unit(rates)
    links = tuple(replace(link, capacity=link.capacity or _capacity(link.bandwidth, unit))
                  for link in topology.links)
    groups = tuple(replace(group, capacity=group.capacity or _capacity(group.bandwidth, unit))
                   for group in topology.groups)
    note = (f"planning view: bandwidths are not whole multiples of each other; synthesis plans in "
            f"whole chunks per round of {unit:.4g} GB/s and costs at the real bandwidths")
    return replace(topology, links=links, groups=groups, sources=topology.sources + (note,))


def not_whole(topology: Topology) -> str:
    """Why rounds do not apply, naming the first link or group whose rate is not a whole multiple
    of the slowest link ("" when they apply).

    >>> from synth.core.topology import Group, Link, Topology
    >>> not_whole(Topology("box", 2, (Link(0, 1, 15.75), Link(1, 0, 15.75)), (Group("cpu", ((0, 1),), 10.0),)))
    "group 'cpu' runs at 10 GB/s, 0.635 x the slowest link's 15.75 GB/s (not a whole multiple)"
    """
    unit = topology.min_link_bandwidth
    for link in topology.links:
        if topology.link_capacity(link) is None:
            return (f"link {link.src}->{link.dst} runs at {link.bandwidth:g} GB/s, {link.bandwidth / unit:.3g} x "
                    f"the slowest link's {unit:g} GB/s (not a whole multiple)")
    for group in topology.groups:
        if topology.group_capacity(group) is None:
            return (f"group {group.name!r} runs at {group.bandwidth:g} GB/s, {group.bandwidth / unit:.3g} x "
                    f"the slowest link's {unit:g} GB/s (not a whole multiple)")
    return ""


PLANNERS_HINT = ("use --backend milp or greedy (without --steps/--rounds), which plan on rounded capacities "
                 "and cost at the real bandwidths")


def rounds_problem(topology: Topology) -> str | None:
    """Why k-synchronous rounds (what SMT synthesis counts) do not apply on ``topology``; None
    when they do."""
    if topology.rounds_apply:
        return None
    return f"{not_whole(topology)}, so k-synchronous rounds (what SMT synthesis counts) do not apply"


def on_machine(schedule: Schedule, topology: Topology) -> Schedule:
    """``schedule`` (planned on ``planning_view(topology)``) as a schedule on ``topology``."""
    if schedule.topology is topology:
        return schedule
    steps = tuple(Step(step.sends, None) for step in schedule.steps)
    return Schedule(topology, schedule.collective, steps, schedule.meta)


def _capacity(bandwidth: float, unit: float) -> int:
    return max(1, round(bandwidth / unit))


def _unit(rates: list[float]) -> float:
    """The slowest rate over the smallest subdivision within TOLERANCE (else the most accurate)."""
    slowest = min(rates)
    best = None
    for d in SUBDIVISIONS:
        unit = slowest / d
        error = max(abs(_capacity(rate, unit) * unit - rate) / rate for rate in rates)
        if error <= TOLERANCE:
            return unit
        if best is None or error < best[0] - 1e-12:
            best = (error, unit)
    return best[1]
