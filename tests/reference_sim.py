"""The event simulation as a plain loop, one hold at a time, for tests only: what
``synth.core.event_sim`` (every step's holds at once) must agree with."""

from __future__ import annotations


def reference_makespan(steps, collective, costs, switch_costs=None) -> float:
    ready = {(r, c): 0.0 for c, pre in enumerate(collective.pre) for r in pre}
    free: dict = {}
    last = 0.0
    for index, step in enumerate(steps):
        landed: dict = {}
        for send, (key, alpha, took, groups) in zip(step.sends, costs(index, step)):
            start = ready[(send.src, send.chunk)]
            served = free[key] = max(start, free.get(key, 0.0)) + took
            arrival = served + alpha
            for group, group_took in groups:
                free[group] = max(start, free.get(group, 0.0)) + group_took
                arrival = max(arrival, free[group])
            landed.setdefault((send.dst, send.chunk), []).append((arrival, send.op))
            last = max(last, arrival)
        for entry in step.switches:
            start = max(ready[(src, entry.chunk)] for src in entry.srcs)
            alpha, ports, groups = switch_costs(entry)
            served = _hold(start, ports, free)
            arrival = max(served + alpha, _hold(start, groups, free))
            for dst in entry.dsts:
                landed.setdefault((dst, entry.chunk), []).append((arrival, "copy"))
            last = max(last, arrival)
        for place, writes in landed.items():
            when = max(t for t, _ in writes)
            before = ready.get(place)
            if before is None:
                ready[place] = when
            elif all(op == "reduce" for _, op in writes):
                ready[place] = max(before, when)
            elif not collective.combining:
                ready[place] = min(before, when)
            else:
                ready[place] = when
    return last


def _hold(start: float, resources, free: dict) -> float:
    done = start
    for key, took in resources:
        free[key] = max(start, free.get(key, 0.0)) + took
        done = max(done, free[key])
    return done
