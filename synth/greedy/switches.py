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
- **allreduce, shaped pipeline.** The pipeline above idles half a port at its ends (its first
  step only reduces: ports send; its last only multicasts: ports receive). Here a small LP
  (``synth.greedy.shaped``) chooses, for each step count and the size, how much of the buffer
  each step reduces through the switch or point to point and spreads by multicast or point to
  point, at the rates and alphas of the ports, groups and links (under ``terms`` when given);
  whatever the switch sums goes back out by multicast. With one rate everywhere and no alpha
  that is the geometric pipeline: step 0 reduces point to point, then each piece is (n-2)/(n-1)
  of the one before, every step balanced, approaching the exchange bound (docs/bounds.md).
- **allreduce across machines** (each machine one such switch domain of G ranks, rank g of
  every machine joined to rank g of every other by the fabric: NCCL's rails). Per slice set,
  four steps, pipelined so set t's step i runs with set t-1's step i+1: the switch reduces each
  machine's slices to their rank g (every port out, one in); rank g of every machine
  reduce-scatters its slices over the rail directly (one step, (N-1)/N of them out of its NIC);
  the rail allgathers them directly; rank g multicasts them into its machine. NVLink ports and
  NICs work side by side; each NIC moves 2(N-1)/N of a G-th of the buffer each way (NCCL's
  NVLSTree moves twice a G-th through a tree). Where the fabric aggregates (``NAMExK+sharp``:
  a switch with reduce_multicast over every rail rank), the rail's two steps are one switch
  entry per slice instead (srcs and dsts the rail): a G-th each way, CollNet's traffic. A slice
  is cut into r rail shares, each reduced at one rail rank (its owner): r = N (every rail rank
  owns one share of every slice), or N/2, N/4 where an owner's NIC still keeps up (owners then
  rotate): fewer chunks per set, so more sets within the chunk budget and a shorter fill
  (``synth.greedy.rails.rail_allreduce``; gb200nvl72x20: r = 10, 22 sets, 81.6% of the bound
  at 1 GiB where r = N allows 11 sets, 73.6%).
- **allgather across machines** (``synth.greedy.rails.rail_allgather``): every rank multicasts
  its piece into its machine and sends it over its rail; the next step multicasts what the rail
  brought, and rail peers send each other *extras* (pieces of their own machine) so the NIC
  takes load off the port until both finish together (gb200nvl72x20: 97.1% of the bound at 1 GiB).
- **allgather.** Every rank multicasts its shard to every other rank in one step: each port
  receives (n-1)/n of the buffer, the allgather bound, in one step (NCCL's NVLS writes the
  shard to its own port too: M in).

``switch_plan`` times every variant (pieces 1, 2, 4, ... and the shares 0 and 1/(n-1); across
machines also the rail shares and the extras; the shaped pipeline at 3 to 32 steps, shaped for
the size) and keeps the fastest at the size in the step model (under ``terms`` when given),
built and verified.

>>> from synth.core.library import resolve_topology
>>> plan = switch_plan(resolve_topology("h100"), "allreduce", 1 << 30)
>>> plan.meta["algorithm"], plan.meta["p2p_share"]
('switch', '1/7')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from synth.core import collectives
from synth.core.errors import InputError
from synth.core.schedule import SEND_ORDER, Schedule, Send, Step, SwitchSend, rounds_needed
from synth.core.topology import Switch, Topology
from synth.greedy.rails import balanced_extras, fabric_switch, rail_allgather, rail_allreduce, shares_tried
from synth.greedy.shaped import Rates, pipeline_shape, slot_plan
from synth.verify import checked

PIECES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
SHAPED_STEPS = (3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 18, 20, 24, 32)  # steps of the shaped pipelines timed
SHAPED_SLOTS = 64  # chunks per rank per step of a shaped pipeline (fewer where MAX_TOTAL_CHUNKS says so)
MAX_TOTAL_CHUNKS = 1 << 14  # chunks of the whole collective a variant may have (ranks x chunks per rank)
COLLECTIVES = ("allreduce", "allgather")
EXTRAS_AROUND = 2  # rail allgather: extras timed on each side of the balance (synth.greedy.rails)


def domain_switch(topology: Topology, ranks=None) -> Switch | None:
    """The switch with reduce and multicast whose ports are exactly ``ranks`` (default: every
    rank); None when there is none."""
    wanted = set(range(topology.ranks) if ranks is None else ranks)
    for switch in topology.switches:
        if switch.reduce and switch.multicast and set(switch.ranks) == wanted:
            return switch
    return None


def machine_switches(topology: Topology) -> tuple[Switch, ...] | None:
    """One such switch per machine, when the machines are alike (G ranks each) and rank g of
    every machine has a link to rank g of every other (the rails); None otherwise."""
    machines = topology.machines or ()
    if len(machines) < 2 or len({len(m) for m in machines}) != 1:
        return None
    found = tuple(domain_switch(topology, machine) for machine in machines)
    if any(s is None for s in found):
        return None
    for g in range(len(machines[0])):
        rail = [machine[g] for machine in machines]
        if not all(topology.has_link(a, b) for a in rail for b in rail if a != b):
            return None
    return found


def applies(topology: Topology, collective: str) -> str | None:
    """Why ``switch_plan`` does not apply (None when it does)."""
    if collective not in COLLECTIVES:
        return f"plans {', '.join(COLLECTIVES)} through a switch, not {collective}"
    if topology.machine_count > 1:
        if machine_switches(topology) is not None:
            return None
        return ("across machines it plans allreduce and allgather, with one switch with reduce and multicast "
                "per machine and rails between them")
    if domain_switch(topology) is None:
        return "needs one switch with reduce and multicast over every rank (NVLS)"
    return None


def switch_plan(topology: Topology, collective: str, size: float, terms=None) -> Schedule:
    """The fastest variant at ``size`` (see the module); InputError where it does not apply."""
    return switch_plans(topology, collective, [size], terms)[size]


def switch_plans(topology: Topology, collective: str, sizes, terms=None) -> dict:
    """{size: the fastest variant there} for every size. Each family's time at every depth comes
    from one small built member (``stretched``: a pipeline's middle steps are alike); only the
    variants chosen are built in full, each once, and verified."""
    why = applies(topology, collective)
    if why is not None:
        raise InputError(f"switch plan on {topology.name}: {why}")
    best: dict = {}
    for family in families(topology, collective):
        for pieces, loads in family.loads():
            for size in sizes:
                took = _time(loads, size, terms)
                if size not in best or took < best[size][0]:
                    best[size] = (took, family, pieces)
    built = {(id(f), k): checked(f.build(k), "the switch planner") for _, f, k in best.values()}
    plans = {size: built[(id(f), k)] for size, (_, f, k) in best.items()}
    if shaped_applies(topology, collective):
        from synth.cost import step_loads

        for size in sizes:
            shaped = _shaped_plan(topology, size, terms)
            if _time(step_loads(shaped), size, terms) < best[size][0]:
                plans[size] = checked(shaped, "the switch planner")
    return plans


def _time(loads, size: float, terms) -> float:
    """A schedule's time at ``size``: the contract model, or its best protocol under ``terms``."""
    return loads.time_us(size) if terms is None else loads.best(size, terms)[1]


def shaped_applies(topology: Topology, collective: str) -> bool:
    """Whether the shaped pipeline is planned: allreduce on one switch domain of n > 2 ranks, every
    two of them linked (its point-to-point shares need the links)."""
    return (collective == "allreduce" and topology.machine_count <= 1 and topology.ranks > 2
            and domain_switch(topology) is not None and _full_mesh(topology))


def _shaped_plan(topology: Topology, size: float, terms=None) -> Schedule:
    """The shaped pipeline whose LP is fastest at ``size`` over ``SHAPED_STEPS`` (see the module)."""
    switch = domain_switch(topology)
    rates = port_rates(topology, switch, size, terms)
    shapes = [pipeline_shape(topology.ranks, steps, rates, size) for steps in SHAPED_STEPS]
    shape = min(shapes, key=lambda s: s.time_us)
    return _shaped_allreduce(topology, switch, shape, size)


@dataclass(frozen=True)
class Family:
    """Pipelined variants alike but for their depth: ``build(pieces)`` makes one; ``lag`` is
    how many steps a slice set's last step trails its first (set t runs in steps t..t+lag);
    a member has ``pieces x slices`` chunks per rank (a fraction for the rail allreduce: r / N)."""

    build: Callable[[int], Schedule]
    lag: int
    pieces: tuple[int, ...]
    slices: int | Fraction = 1

    def loads(self):
        """(pieces, StepLoads) for every depth, from members of at most lag + 1 pieces."""
        from synth.cost import step_loads

        reference = self.lag + 1
        model = step_loads(self.build(reference)) if max(self.pieces) > reference else None
        for pieces in self.pieces:
            yield pieces, (step_loads(self.build(pieces)) if pieces <= reference
                           else stretched(model, self.lag, reference, pieces))


def stretched(loads, lag: int, reference: int, pieces: int):
    """The StepLoads of the ``pieces``-deep member from the ``reference``-deep one (reference =
    lag + 1): the same ramp-up and ramp-down steps, its one middle step repeated pieces - lag
    times, chunks reference / pieces as large."""
    from synth.cost import StepLoads

    def repeat(rows):
        return rows[:lag] + rows[lag:lag + 1] * (pieces - lag) + rows[lag + 1:]

    return StepLoads(loads.buffer_chunks * pieces // reference, repeat(loads.links), repeat(loads.groups),
                     loads.protocols)


def families(topology: Topology, collective: str) -> list[Family]:
    """The variant families ``switch_plans`` chooses from besides the shaped pipeline, which is
    shaped for each size (see the module)."""
    n = topology.ranks
    depths = tuple(k for k in PIECES if k * n <= MAX_TOTAL_CHUNKS)
    if topology.machine_count > 1:
        switches = machine_switches(topology)
        if collective == "allgather":
            return [Family(lambda k, x=x: rail_allgather(topology, switches, k, x), 1, depths)
                    for x in _extras_tried(topology, switches)]
        if fabric_switch(topology) is not None:
            return [Family(lambda k: rail_allreduce(topology, switches, k), 2, depths)]
        count = len(switches)
        return [Family(lambda k, r=r: rail_allreduce(topology, switches, k, r), 3, _set_depths(n, r, count),
                       Fraction(r, count)) for r in shares_tried(topology, switches)]
    switch = domain_switch(topology)
    if collective == "allgather":
        return [Family(lambda k: _allgather(topology, switch), 0, (1,))]
    shares = [(1, 0)] + ([(n - 1, 1)] if n > 2 and _full_mesh(topology) else [])
    out = [Family(lambda k, s=slices, p=p2p: _allreduce(topology, switch, k, s, p), 1,
                  tuple(k for k in depths if k * slices * n <= MAX_TOTAL_CHUNKS), slices)
           for slices, p2p in shares]
    return out


def _set_depths(n: int, shares: int, machines: int) -> tuple[int, ...]:
    """Set counts of the rail allreduce with ``shares`` per slice: multiples of machines / shares
    (whole chunks per rank), doubling, and the most the chunk budget allows (where the pipeline's
    fill costs more than its steps' alphas, as on NVL72 racks, the deepest wins)."""
    step, sets = machines // shares, (MAX_TOTAL_CHUNKS * machines) // (n * shares)
    most = sets - sets % step
    return tuple(sorted({step * k for k in PIECES if step * k <= most} | ({most} if most else set())))


def _extras_tried(topology: Topology, switches) -> list[int]:
    """The extras per rank and piece timed for the rail allgather: around the balance of NIC and
    port, and none."""
    machines = topology.machines
    most = (len(machines) - 1) * (len(machines[0]) - 1)
    balance = math.floor(balanced_extras(topology, switches))
    return sorted({0} | {x for x in range(balance - EXTRAS_AROUND + 1, balance + EXTRAS_AROUND + 1) if 0 <= x <= most})


def variants(topology: Topology, collective: str, chunks: int | None = None):
    """Every variant ``switch_plans`` chooses from (with ``chunks``: those of that many chunks
    per rank), built (not yet verified), one at a time."""
    for family in families(topology, collective):
        for pieces in family.pieces:
            if chunks is None or pieces * family.slices == chunks:
                yield family.build(pieces)


def _full_mesh(topology: Topology) -> bool:
    n = topology.ranks
    return all(topology.has_link(a, b) for a in range(n) for b in range(n) if a != b)


def _allgather(topology: Topology, switch: Switch) -> Schedule:
    n = topology.ranks
    entries = tuple(SwitchSend(r, switch.name, (r,), tuple(d for d in range(n) if d != r)) for r in range(n))
    step = Step((), rounds_needed(topology, (), entries), entries)
    meta = {"synthesizer": "greedy", "algorithm": "switch", "switch": switch.name, "pieces": 1}
    return Schedule(topology, collectives.allgather(n), (step,), meta)


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
    steps = tuple(Step(tuple(sorted(s, key=SEND_ORDER)), rounds_needed(topology, s, e), tuple(e))
                  for s, e in zip(sends, entries))
    meta = {"synthesizer": "greedy", "algorithm": "switch", "switch": switch.name, "pieces": pieces,
            "p2p_share": f"{p2p}/{slices}" if p2p else "0"}
    return Schedule(topology, collectives.allreduce(n, pieces * slices), steps, meta)


def port_rates(topology: Topology, switch: Switch, size: float, terms=None) -> Rates:
    """The slowest rank's port, group and link rates on ``switch``, and the port's and links'
    alphas, at ``size`` as the step model charges them (``synth.cost.rates_of``): the contract
    model's, or under ``terms`` Simple's (switch plans run Simple only). A rank without a group:
    its port and links together."""
    from synth.cost import protocol_of, rates_of, switch_kind

    rates = rates_of(protocol_of("ideal" if terms is None else "simple"), terms, size)
    kind = switch_kind(switch)
    groups = {g.name: g for g in topology.groups}
    port = rates.link_bandwidth(switch.bandwidth, kind)
    link = min(rates.link_bandwidth(l.bandwidth, l.kind) for l in topology.links)
    per_rank = []
    for rank in switch.ranks:
        named = [groups[name] for name in (switch.out_group(rank), switch.in_group(rank)) if name in groups]
        own = [rates.group_bandwidth(g.bandwidth, topology.group_kind(g)) for g in named]
        per_rank.append(min(own) if own else port + link * (topology.ranks - 1))
    return Rates(port, min(per_rank), link, rates.alpha(switch.alpha, kind),
                 max(rates.alpha(l.alpha, l.kind) for l in topology.links))


def shaped_slots(ranks: int, steps: int) -> int:
    """Chunks per rank of a ``steps``-step shaped pipeline on ``ranks`` ranks."""
    return min(SHAPED_SLOTS * steps, MAX_TOTAL_CHUNKS // ranks)


def _shaped_allreduce(topology: Topology, switch: Switch, shape, size: float) -> Schedule:
    """The shaped pipeline of ``shape`` (see the module): slot i is chunk h*K + i of every head
    h (K slots: a head's slots are contiguous, so the slots one step treats alike lower to one
    transfer of several chunks), reduced and spread as ``slot_plan`` says."""
    n = topology.ranks
    everyone = tuple(range(n))
    plan = slot_plan(shape, shaped_slots(n, len(shape.steps)))
    last = max(spread for _, _, spread, _ in plan)
    sends: list[list[Send]] = [[] for _ in range(last + 1)]
    entries: list[list[SwitchSend]] = [[] for _ in range(last + 1)]
    for slot, (reduced, how, spread, spread_how) in enumerate(plan):
        for head in everyone:
            chunk, others = head * len(plan) + slot, tuple(r for r in everyone if r != head)
            if how == "p2p":
                sends[reduced] += [Send(chunk, r, head, "reduce") for r in others]
            else:
                entries[reduced].append(SwitchSend(chunk, switch.name, everyone, (head,)))
            if spread_how == "p2p":
                sends[spread] += [Send(chunk, head, r) for r in others]
            else:
                entries[spread].append(SwitchSend(chunk, switch.name, (head,), others))
    built = tuple(Step(tuple(sorted(s, key=SEND_ORDER)), rounds_needed(topology, s, e), tuple(e))
                  for s, e in zip(sends, entries) if s or e)
    meta = {"synthesizer": "greedy", "algorithm": "switch", "switch": switch.name, "pieces": len(built),
            "pipeline": "shaped", "shaped_for_bytes": int(size)}
    return Schedule(topology, collectives.allreduce(n, len(plan)), built, meta)
