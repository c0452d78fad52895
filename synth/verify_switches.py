"""The verifier's rules for switch entries (DESIGN.md, "In-network reduction and multicast").

Kinds of violation, beside ``synth.verify``'s:

  no_switch            the entry names a switch the topology does not have
  not_a_port           a src or dst is not a port of that switch
  bad_switch_entry     empty or repeated srcs or dsts
  switch_capability    the entry needs a capability the switch lacks (several srcs and one dst:
                       reduce; one src and several dsts: multicast; several of both:
                       reduce_multicast)
  switch_capacity      a port carries more than capacity x rounds chunks in a step

and, as for sends: bad_rank, bad_chunk, not_held, reduce_not_combining (several srcs in a
collective that does not combine), double_count (the srcs' contributions overlap),
conflicting_write (a (rank, chunk) a switch entry writes is written by any other entry of the
step) and group_capacity (a port's chunks count on the groups in ``out_groups`` /
``in_groups``). What lands at every dst replaces its copy: the union of the srcs'
contributions.
"""

from __future__ import annotations

from typing import Callable

from synth.core.schedule import Schedule, SwitchSend, port_loads


def check_entry(index: int, entry: SwitchSend, schedule: Schedule, state, violation: Callable) -> list:
    """Every rule one entry breaks on its own, read against the state at the step's start."""
    topo, coll = schedule.topology, schedule.collective
    label = f"switch {entry.switch!r} chunk {entry.chunk} {list(entry.srcs)}->{list(entry.dsts)}"
    switch = topo.switch(entry.switch)
    if switch is None:
        known = ", ".join(s.name for s in topo.switches) or "none"
        return [violation(index, "no_switch", f"{label}: no such switch (the topology has: {known})")]
    ranks = (*entry.srcs, *entry.dsts)
    if not all(isinstance(r, int) and 0 <= r < topo.ranks for r in ranks):
        return [violation(index, "bad_rank", f"{label}: rank out of range 0..{topo.ranks - 1}")]
    if not 0 <= entry.chunk < coll.chunks:
        return [violation(index, "bad_chunk", f"{label}: chunk out of range 0..{coll.chunks - 1}")]
    out = []
    if not entry.srcs or not entry.dsts or len(set(entry.srcs)) < len(entry.srcs) \
            or len(set(entry.dsts)) < len(entry.dsts):
        out.append(violation(index, "bad_switch_entry", f"{label}: srcs and dsts must be non-empty, no rank twice"))
    strangers = sorted({r for r in ranks if r not in switch.port_index})
    if strangers:
        out.append(violation(index, "not_a_port", f"{label}: rank(s) {', '.join(map(str, strangers))} "
                                                  f"not a port of {switch.name!r}"))
    lacking = switch.allows(len(entry.srcs), len(entry.dsts))
    if lacking:
        out.append(violation(index, "switch_capability", f"{label}: needs {lacking}, which "
                                                         f"{switch.name!r} cannot do"))
    if len(entry.srcs) > 1 and not coll.combining:
        out.append(violation(index, "reduce_not_combining", f"{label}: several srcs reduce, in "
                                                            f"non-combining {coll.name}"))
    for src in entry.srcs:
        if (src, entry.chunk) not in state:
            out.append(violation(index, "not_held", f"{label}: rank {src} does not hold chunk {entry.chunk}"))
    return out


def capacity_violations(index: int, step, topology, violation: Callable) -> list:
    """Ports carrying more than the switch's capacity x rounds chunks in the step."""
    out = []
    ports, _ = port_loads(step, topology)
    for (name, rank, direction), count in sorted(ports.items()):
        capacity = topology.switch_capacity(topology.switch(name))
        if capacity is not None and count > capacity * step.rounds:
            out.append(violation(index, "switch_capacity",
                                 f"switch {name!r} port {rank} ({direction}) carries {count} chunks, capacity "
                                 f"{capacity} x {step.rounds} round(s) = {capacity * step.rounds}"))
    return out


def landed(index: int, entries: list[SwitchSend], combining: bool, state, violation: Callable):
    """What the step's valid switch entries write: ({(rank, chunk): (mask, doubled)}, violations);
    the value at every dst is the union of the srcs' contributions (a sum replaces)."""
    writes, out = {}, []
    for entry in entries:
        mask, doubled = 0, False
        for src in entry.srcs:
            partial, partial_doubled = state[(src, entry.chunk)]
            overlap = mask & partial
            if overlap and combining:
                out.append(violation(index, "double_count",
                                     f"switch {entry.switch!r} chunk {entry.chunk}: the srcs' contributions "
                                     f"overlap (rank {src} adds one already counted)"))
            mask, doubled = mask | partial, doubled or partial_doubled or bool(overlap and combining)
        for dst in entry.dsts:
            writes.setdefault((dst, entry.chunk), []).append((mask, doubled))
    return writes, out
