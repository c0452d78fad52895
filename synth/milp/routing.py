"""Routing stage: how many chunk copies cross each NIC link, by a MILP over machine-level loads.

Across machines the scarce resource is the NIC; inside a machine it is the GPU's port (or its
links). The routing MILP decides, for every allowed cross-machine link, how many copies it
carries (an integer), and for every chunk origin how its chunks first enter each other machine,
so that the slowest resource finishes earliest (T, in rounds of the k-synchronous model):

- every chunk that some rank of machine j needs enters j at least once, over links that may
  carry it (the sketch's relay mode and ``carries``);
- each cross link carries at most ``capacity x T`` copies, each NIC group likewise;
- a copy landing on a rank that needs it saves that rank one reception inside its machine
  (a second copy of a chunk into the same machine is worth sending when NICs are idle);
- what a rank still has to receive inside its machine, plus what it only relays, fits through
  its in-port in T rounds, and the machine's intra traffic through its out-ports.

Chunks cross straight from their origin machine (the fabric is one hop between any two
machines, so a second-hand relay across machines never pays). With a symmetry in the sketch,
the copies on rotated links are one variable (the plan is invariant under the rotation).
The result is a plan the ordering stage follows: only planned links cross, and a link behind
its planned share is favoured.

>>> from synth.core.library import resolve_topology
>>> from synth.core.collectives import allgather
>>> from synth.milp.sketch import default_sketch
>>> topo = resolve_topology("ndv2x2")
>>> plan = route(topo, allgather(16, 2), default_sketch(topo)[0])
>>> plan.status, plan.rounds >= 2 * 8 / 2  # 16 chunks enter each machine over 1 NIC of capacity 2
('solved', True)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pulp

from synth.milp.solver import MilpOptions, MilpStatus, solve, value
from synth.core.collective import Collective
from synth.core.errors import InputError
from synth.milp.sketch import Sketch
from synth.core.topology import Topology


@dataclass(frozen=True)
class RoutePlan:
    """Planned copies per link index (0 for links the plan does not use) and the estimate T."""

    status: str  # "solved" | "timeout" (incumbent, not proven) | "single-machine" | "unknown" | "error"
    copies: tuple[int, ...]
    rounds: float
    seconds: float
    variables: int
    message: str = ""

    @property
    def usable(self) -> bool:
        return self.status in ("solved", "timeout")


def route(topology: Topology, collective: Collective, sketch: Sketch,
          options: MilpOptions | None = None) -> RoutePlan:
    """The routing MILP (see the module docstring); never raises on a solver timeout."""
    started = time.perf_counter()
    machine = topology.machine_of
    links = topology.links
    if topology.machine_count < 2:
        return RoutePlan("single-machine", (0,) * len(links), 0.0, 0.0, 0,
                         "one machine: the ordering stage routes over its links step by step")
    options = options or MilpOptions()
    ranks, chunks = topology.ranks, collective.chunks
    origin = [min(pre) for pre in collective.pre]
    need = np.zeros((ranks, chunks), dtype=bool)
    for c, (pre, post) in enumerate(zip(collective.pre, collective.post)):
        need[list(set(post) - set(pre)), c] = True
    cross = [i for i, l in enumerate(links) if machine[l.src] != machine[l.dst]
             and sketch.allowed_crossing(topology, l.src, l.dst)]
    orbit = _orbits(topology, sketch, [links[i].key for i in cross])

    # demand: chunks of origin o needed somewhere in machine j
    demand: dict[tuple[int, int], int] = {}
    for c in range(chunks):
        o = origin[c]
        for m in {machine[r] for r in np.nonzero(need[:, c])[0]}:
            if m != machine[o]:
                demand[(o, m)] = demand.get((o, m), 0) + 1
    remote_need = np.zeros(ranks)
    total_need = need.sum(axis=1).astype(float)
    for c in range(chunks):
        for r in np.nonzero(need[:, c])[0]:
            if machine[r] != machine[origin[c]]:
                remote_need[r] += 1
    needs_origin = np.zeros((ranks, ranks), dtype=bool)  # rank a needs chunks of origin o
    for c in range(chunks):
        needs_origin[need[:, c], origin[c]] = True

    prob = pulp.LpProblem("routing", pulp.LpMinimize)
    T = prob.add_variable("T", lowBound=0)
    y_of: dict[int, pulp.LpVariable] = {}
    for i in cross:
        rep = orbit[links[i].key]
        if rep not in y_of:
            y_of[rep] = _var(prob, f"y_{rep[0]}_{rep[1]}", cat="Integer")
    y = {i: y_of[orbit[links[i].key]] for i in cross}
    x: dict[tuple[int, int], pulp.LpVariable] = {}
    x_orbit: dict[tuple, pulp.LpVariable] = {}
    perm = sketch.rank_rotation(topology)
    for i in cross:
        l = links[i]
        for o in {origin[c] for c in range(chunks)}:
            if machine[o] != machine[l.src] or (o, machine[l.dst]) not in demand:
                continue
            if not sketch.may_carry_link(topology, l.src, l.dst, o):
                continue
            key = _orbit_rep((o, l.src, l.dst), perm)
            if key not in x_orbit:
                x_orbit[key] = _var(prob, f"x_{key[0]}_{key[1]}_{key[2]}")
            x[(o, i)] = x_orbit[key]
    for (o, m), count in sorted(demand.items()):
        terms = [x[(o, i)] for i in cross if (o, i) in x and machine[links[i].dst] == m]
        if not terms:
            raise InputError(f"sketch: no link it allows may carry rank {o}'s chunks into machine {m} "
                             "(relay mode / carries), but ranks there need them")
        prob += pulp.lpSum(terms) >= count
    for i in cross:
        first = [v for (o, j), v in x.items() if j == i]
        if first:
            prob += y[i] >= pulp.lpSum(first)
        prob += y[i] <= topology.link_capacity(links[i]) * T
    for g in topology.groups:
        members = [i for i in cross if links[i].key in set(g.links)]
        if members:
            prob += pulp.lpSum(y[i] for i in members) <= topology.group_capacity(g) * T
    in_cap, out_cap = _port_capacities(topology)
    into: dict[int, list[int]] = {}
    out_of: dict[int, list[int]] = {}
    for i in cross:
        into.setdefault(links[i].dst, []).append(i)
        out_of.setdefault(links[i].src, []).append(i)
    intra_load = {}
    for b in range(ranks):
        direct = _var(prob, f"direct_{b}", up=float(remote_need[b]))
        if into.get(b):
            prob += direct <= pulp.lpSum(y[i] for i in into[b])
        else:
            prob += direct <= 0
        relay = [v for (o, i), v in x.items() if links[i].src == b and o != b and not needs_origin[b, o]]
        intra_load[b] = float(total_need[b]) - direct + pulp.lpSum(relay)
        prob += intra_load[b] <= in_cap[b] * T
    for m in range(topology.machine_count):
        members = [b for b in range(ranks) if machine[b] == m]
        prob += pulp.lpSum(intra_load[b] for b in members) <= sum(out_cap[b] for b in members) * T
    prob += T + 1e-4 * pulp.lpSum(y_of.values())
    outcome = solve(prob, options)
    seconds = time.perf_counter() - started
    count = len(y_of) + len(x_orbit) + ranks + 1
    if not outcome.has_incumbent:
        status = "unknown" if outcome.status == MilpStatus.TIMEOUT else outcome.status.value
        return RoutePlan(status, (0,) * len(links), 0.0, seconds, count,
                         f"routing MILP: {outcome.status.value} ({outcome.message})")
    copies = [0] * len(links)
    for i in cross:
        copies[i] = int(round(value(y[i])))
    status = "solved" if outcome.status == MilpStatus.SOLVED else "timeout"
    return RoutePlan(status, tuple(copies), float(value(T)), seconds, count, outcome.message)


def _var(prob: pulp.LpProblem, name: str, cat: str = "Continuous", up: float | None = None) -> pulp.LpVariable:
    return prob.add_variable(name, lowBound=0, upBound=up, cat=cat)


def _orbits(topology: Topology, sketch: Sketch, keys: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[int, int]]:
    """Each link's orbit representative under the sketch's rotation (itself without one)."""
    perm = sketch.rank_rotation(topology)
    return {key: _orbit_rep(key, perm) for key in keys}


def _orbit_rep(item: tuple[int, ...], perm: tuple[int, ...] | None) -> tuple[int, ...]:
    """The smallest image of a tuple of ranks under the powers of ``perm``."""
    if perm is None:
        return item
    best = item
    current = item
    while True:
        current = tuple(perm[r] for r in current)
        if current == item:
            return best
        best = min(best, current)


def _port_capacities(topology: Topology) -> tuple[np.ndarray, np.ndarray]:
    """Per rank: chunks per round it can receive / send inside its machine (its port group when
    one group holds all its intra links that way, else the sum of its intra link capacities)."""
    machine = topology.machine_of
    ranks = topology.ranks
    in_cap = np.zeros(ranks)
    out_cap = np.zeros(ranks)
    intra_in: dict[int, set] = {}
    intra_out: dict[int, set] = {}
    for l in topology.links:
        if machine[l.src] == machine[l.dst]:
            in_cap[l.dst] += topology.link_capacity(l)
            out_cap[l.src] += topology.link_capacity(l)
            intra_in.setdefault(l.dst, set()).add(l.key)
            intra_out.setdefault(l.src, set()).add(l.key)
    for g in topology.groups:
        keys = set(g.links)
        for r, mine in intra_in.items():
            if mine <= keys:
                in_cap[r] = min(in_cap[r], topology.group_capacity(g))
        for r, mine in intra_out.items():
            if mine <= keys:
                out_cap[r] = min(out_cap[r], topology.group_capacity(g))
    return in_cap, out_cap
