"""Collectives through one switch that computes, mixed with point-to-point sends so every port
stays busy (reference/in-network.md sections 3 and 4.2).

On one domain of n ranks behind a switch with ``reduce`` and ``multicast`` (NVLS):

- **allreduce.** Each rank is the head of slices of the buffer. A slice is reduced to its head
  either by the switch (one reduce entry: every port sends the slice, the head's port receives
  it once) or point to point (every other rank sends it to the head with ``reduce``: n-1 sends
  out of n-1 ports, n-1 arrivals at the head); then the head multicasts the sum to every other
  rank (one multicast entry; the head already holds it). Per port, a switch slice costs
  1 out + 1/n in for the reduce, a point-to-point slice (n-1)/n out and in; the multicast 1/n
  out and (n-1)/n in. With a share s of the slices point to point a port sends
  1 + 1/n - s/n and receives 1 + s(n-2)/n of the buffer: s = 1/(n-1) balances them at
  (n^2 - 2)/(n(n-1)) (1.107 at n = 8; NCCL's NVLS moves (n+1)/n = 1.125 each way and the
  point-to-point limit is 2(n-1)/n = 1.75). The buffer is cut into ``pieces`` slice sets,
  pipelined: step t reduces set t while set t-1 is multicast.
- **allgather.** Every rank multicasts its shard to every other rank in one step: each port
  receives (n-1)/n of the buffer, the allgather bound, in one step (NCCL's NVLS writes the
  shard to its own port too: M in).

``switch_plan`` builds every variant (pieces 1, 2, 4, ... and the shares 0 and 1/(n-1)) and keeps
the fastest at the size in the step model (under ``terms`` when given), verified.

>>> from synth.core.library import resolve_topology
>>> plan = switch_plan(resolve_topology("h100"), "allreduce", 1 << 30)
>>> plan.meta["algorithm"], plan.meta["p2p_share"]
('switch', '1/7')
"""

from __future__ import annotations

from synth.core import collectives
from synth.core.errors import InputError
from synth.core.schedule import Schedule, Send, Step, SwitchSend, rounds_needed
from synth.core.topology import Switch, Topology
from synth.verify import checked

PIECES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MAX_CHUNKS = 2048  # chunks per rank a variant may have (pieces x slices per head)
COLLECTIVES = ("allreduce", "allgather")


def domain_switch(topology: Topology) -> Switch | None:
    """The switch with reduce and multicast that has every rank as a port (None: none)."""
    for switch in topology.switches:
        if switch.reduce and switch.multicast and len(switch.ranks) == topology.ranks:
            return switch
    return None


def applies(topology: Topology, collective: str) -> str | None:
    """Why ``switch_plan`` does not apply (None when it does)."""
    if collective not in COLLECTIVES:
        return f"plans {', '.join(COLLECTIVES)} through a switch, not {collective}"
    if domain_switch(topology) is None:
        return "needs one switch with reduce and multicast over every rank (NVLS)"
    return None


def switch_plan(topology: Topology, collective: str, size: float, terms=None) -> Schedule:
    """The fastest variant at ``size`` (see the module); InputError where it does not apply."""
    return switch_plans(topology, collective, [size], terms)[size]


def switch_plans(topology: Topology, collective: str, sizes, terms=None) -> dict:
    """{size: the fastest variant there} for every size, each variant built once."""
    from synth.cost import step_loads

    why = applies(topology, collective)
    if why is not None:
        raise InputError(f"switch plan on {topology.name}: {why}")
    best: dict = {}
    for schedule in variants(topology, collective):
        loads = step_loads(schedule)
        for size in sizes:
            took = loads.time_us(size) if terms is None else loads.best(size, terms)[1]
            if size not in best or took < best[size][0]:
                best[size] = (took, schedule)
    return {size: schedule for size, (_, schedule) in best.items()}


def variants(topology: Topology, collective: str):
    """Every variant ``switch_plan`` chooses from, verified, one at a time."""
    switch = domain_switch(topology)
    if collective == "allgather":
        yield _allgather(topology, switch)
        return
    n = topology.ranks
    shares = [(1, 0)] + ([(n - 1, 1)] if n > 2 and _full_mesh(topology) else [])
    for slices, p2p in shares:
        for pieces in PIECES:
            if pieces * slices <= MAX_CHUNKS:
                yield _allreduce(topology, switch, pieces, slices, p2p)


def _full_mesh(topology: Topology) -> bool:
    n = topology.ranks
    return all(topology.has_link(a, b) for a in range(n) for b in range(n) if a != b)


def _allgather(topology: Topology, switch: Switch) -> Schedule:
    n = topology.ranks
    entries = tuple(SwitchSend(r, switch.name, (r,), tuple(d for d in range(n) if d != r)) for r in range(n))
    step = Step((), rounds_needed(topology, (), entries), entries)
    meta = {"synthesizer": "greedy", "algorithm": "switch", "switch": switch.name, "pieces": 1}
    return checked(Schedule(topology, collectives.allgather(n), (step,), meta), "the switch planner")


def _allreduce(topology: Topology, switch: Switch, pieces: int, slices: int, p2p: int) -> Schedule:
    """Chunk (t * n + h) * slices + j is slice j of head h in set t; slices j >= slices - p2p
    are reduced point to point."""
    n = topology.ranks
    everyone = tuple(range(n))
    sends: list[list[Send]] = [[] for _ in range(pieces + 1)]
    entries: list[list[SwitchSend]] = [[] for _ in range(pieces + 1)]
    for t in range(pieces):
        for head in range(n):
            others = tuple(r for r in everyone if r != head)
            for j in range(slices):
                chunk = (t * n + head) * slices + j
                if j >= slices - p2p:
                    sends[t] += [Send(chunk, r, head, "reduce") for r in others]
                else:
                    entries[t].append(SwitchSend(chunk, switch.name, everyone, (head,)))
                entries[t + 1].append(SwitchSend(chunk, switch.name, (head,), others))
    steps = tuple(Step(tuple(sorted(s)), rounds_needed(topology, s, e), tuple(e)) for s, e in zip(sends, entries))
    meta = {"synthesizer": "greedy", "algorithm": "switch", "switch": switch.name, "pieces": pieces,
            "p2p_share": f"{p2p}/{slices}" if p2p else "0"}
    coll = collectives.allreduce(n, pieces * slices)
    return checked(Schedule(topology, coll, steps, meta), "the switch planner")
