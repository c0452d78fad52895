"""The cost model and the event simulation of a symmetric schedule, from its representatives.

``orbit_step_loads(quotient, rep)`` equals ``synth.cost.step_loads(quotient.expand(rep))`` term for
term (every link and group of an orbit carries the same load, so the distinct terms are those
of the orbits' representatives); ``orbit_simulate_us(quotient, rep, size)`` equals
``synth.cost.simulate_us(quotient.expand(rep), size)``: ``expand`` orders each step's sends
representative-major, so every link and group serves its sends in the same order as every
other of its orbit and the images of a send start, and land, at the same time as it does. That
needs each group to hold at most one link of any orbit; otherwise the full schedule is
expanded and simulated. Both cost the representatives only: thousands of sends where the full
schedule has millions.

>>> from synth.core.library import resolve_topology
>>> from synth.core.collectives import allgather
>>> from synth.core.orbits import Quotient
>>> from synth.core.schedule import Schedule, Send, Step
>>> from synth.cost import simulate_us as full_simulate, step_time_us
>>> topo = resolve_topology("ring:4")
>>> q = Quotient.of(topo, allgather(4), [tuple((r + 1) % 4 for r in range(4))])
>>> rep = Schedule(topo, q.rep_collective, tuple(Step((Send(0, h, h + 1),)) for h in range(3)))
>>> full = q.expand(rep)
>>> orbit_step_loads(q, rep).time_us(1 << 20) == step_time_us(full, 1 << 20)
True
>>> orbit_simulate_us(q, rep, 1 << 20) == full_simulate(full, 1 << 20)
True
"""

from __future__ import annotations

from synth.core.orbits import Quotient
from synth.core.schedule import Schedule
from synth.cost import StepLoads, effective_link, event_makespan, protocol_of
from synth.cost import simulate_us as full_simulate_us


def orbit_step_loads(quotient: Quotient, rep: Schedule) -> StepLoads:
    """The full schedule's StepLoads, counted on its representative sends."""
    res = quotient.resources
    links, groups = [], []
    for step in rep.steps:
        used, counts = quotient.loads(quotient.link_indices(step.sends)) if step.sends else ((), ())
        link_terms: dict = {}
        group_terms: dict = {}
        for r, k in zip(list(used), list(counts)):
            k = int(k)
            if res.is_group[r]:
                group_terms[(k, float(res.bandwidth[r]), res.kind[r])] = None
            else:
                link_terms[(float(res.alpha[r]), res.kind[r], k, float(res.bandwidth[r]))] = None
        links.append(tuple(link_terms))
        groups.append(tuple(group_terms))
    return StepLoads(rep.collective.buffer_chunks, tuple(links), tuple(groups))


def orbit_simulate_us(quotient: Quotient, rep: Schedule, size_bytes: float, protocol: str = "ideal") -> float:
    """The event simulation of the full schedule (see the module docstring)."""
    res = quotient.resources
    if any(mult > 1 for row in res.of_orbit for _, mult in row):
        return full_simulate_us(quotient.expand(rep), size_bytes, protocol)
    proto = protocol_of(protocol)
    b = size_bytes / rep.collective.buffer_chunks
    bwf = proto.bandwidth_factor
    links = quotient.topology.links
    cost: dict[int, tuple] = {}

    def costs(index, step):
        for o in quotient.link_orbit[quotient.link_indices(step.sends)].tolist() if step.sends else []:
            terms = cost.get(o)
            if terms is None:
                alpha, bandwidth = effective_link(links[int(quotient.orbit_link[o])], proto)
                terms = cost[o] = (o, alpha, b / (bandwidth * 1e3),
                                   tuple((r, b / (float(res.bandwidth[r]) * bwf * 1e3))
                                         for r, _ in res.of_orbit[o] if res.is_group[r]))
            yield terms

    return event_makespan(rep.steps, rep.collective, costs) + proto.base_us
