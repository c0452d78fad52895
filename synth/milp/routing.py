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
>>> plan.status.value, plan.rounds >= 2 * 8 / 2  # 16 chunks enter each machine over 1 NIC of capacity 2
('solved', True)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pulp

from synth.milp.solver import MilpOptions, MilpStatus, as_status, solve, value
from synth.core.collective import Collective
from synth.core.schedule import Status
from synth.core.errors import InputError
from synth.core.orbits import Quotient, orbit_representatives
from synth.milp.sketch import Sketch
from synth.core.topology import Topology


@dataclass(frozen=True)
class RoutePlan:
    """Planned copies per link index (0 for links the plan does not use) and the estimate T."""

    status: Status  # SOLVED (optimal, or nothing to route), TIMEOUT (maybe an incumbent), ERROR, INFEASIBLE
    copies: tuple[int, ...]
    rounds: float
    seconds: float
    variables: int
    message: str = ""
    planned: bool = True  # the MILP gave a plan (False: nothing to route, or no incumbent)

    @property
    def usable(self) -> bool:
        return self.planned


def route(topology: Topology, collective: Collective, sketch: Sketch,
          options: MilpOptions | None = None, quotient: Quotient | None = None) -> RoutePlan:
    """The routing MILP (see the module docstring); never raises on a solver timeout.

    ``quotient``: the symmetry group to tie variables by and to write constraints for one
    representative each (by default the sketch's rotation, or none); the plan is invariant
    under it.
    """
    started = time.perf_counter()
    machine_of = topology.machine_of
    links = topology.links
    if topology.machine_count < 2:
        return RoutePlan(Status.SOLVED, (0,) * len(links), 0.0, 0.0, 0,
                         "one machine: the ordering stage routes over its links step by step", planned=False)
    options = options or MilpOptions()
    if quotient is None:
        quotient = _rotation_quotient(topology, collective, sketch)
    ranks, chunks = topology.ranks, collective.chunks
    machine = np.array(machine_of, dtype=np.int64)
    origin = np.array([min(pre) for pre in collective.pre], dtype=np.int64)
    need = np.zeros((ranks, chunks), dtype=bool)
    for c, (pre, post) in enumerate(zip(collective.pre, collective.post)):
        need[list(set(post) - set(pre)), c] = True
    cross = [i for i, l in enumerate(links) if machine_of[l.src] != machine_of[l.dst]
             and sketch.allowed_crossing(topology, l.src, l.dst)]
    canon = _Canon(quotient)
    link_rep = canon.links(cross, links)  # cross link -> its orbit's key

    # demand: chunks of origin o needed somewhere in machine j (o a representative rank)
    rep_ranks = canon.rep_ranks
    demand: dict[tuple[int, int], int] = {}
    for c in np.nonzero(np.isin(origin, rep_ranks))[0]:
        o = int(origin[c])
        for m in np.unique(machine[need[:, c]]).tolist():
            if m != machine[o]:
                demand[(o, m)] = demand.get((o, m), 0) + 1
    remote = need & (machine[:, None] != machine[origin][None, :])
    remote_need = remote.sum(axis=1).astype(float)
    total_need = need.sum(axis=1).astype(float)
    needs_origin = np.zeros((ranks, ranks), dtype=bool)  # rank a needs chunks of origin o
    for o in np.unique(origin).tolist():
        needs_origin[:, o] = need[:, origin == o].any(axis=1)
    origins_of_machine: dict[int, list[int]] = {}
    for o in np.unique(origin).tolist():
        origins_of_machine.setdefault(int(machine[o]), []).append(o)
    wanted = {(o, m) for o in np.unique(origin).tolist() for m in np.unique(machine[needs_origin[:, o]]).tolist()
              if m != machine[o]}

    prob = pulp.LpProblem("routing", pulp.LpMinimize)
    T = prob.add_variable("T", lowBound=0)
    y_of: dict[tuple[int, int], pulp.LpVariable] = {}
    for i in cross:
        rep = link_rep[i]
        if rep not in y_of:
            y_of[rep] = _var(prob, f"y_{rep[0]}_{rep[1]}", cat="Integer")
    y = {i: y_of[link_rep[i]] for i in cross}
    x_orbit: dict[tuple, pulp.LpVariable] = {}

    def x_vars(i: int) -> dict[int, pulp.LpVariable]:
        """origin -> the variable of its first entries over cross link i."""
        l = links[i]
        out = {}
        for o in origins_of_machine.get(machine_of[l.src], ()):
            if (o, machine_of[l.dst]) not in wanted or not sketch.may_carry_link(topology, l.src, l.dst, o):
                continue
            key = canon.triple(o, l.src, l.dst)
            if key not in x_orbit:
                x_orbit[key] = _var(prob, f"x_{key[0]}_{key[1]}_{key[2]}")
            out[o] = x_orbit[key]
        return out

    into_machine: dict[tuple[int, int], list[int]] = {}  # (source machine, target machine) -> cross links
    into: dict[int, list[int]] = {}
    out_of: dict[int, list[int]] = {}
    for i in cross:
        l = links[i]
        into_machine.setdefault((machine_of[l.src], machine_of[l.dst]), []).append(i)
        into.setdefault(l.dst, []).append(i)
        out_of.setdefault(l.src, []).append(i)
    for (o, m), count in sorted(demand.items()):
        terms = [v for i in into_machine.get((machine_of[o], m), ()) for og, v in x_vars(i).items() if og == o]
        if not terms:
            raise InputError(f"sketch: no link it allows may carry rank {o}'s chunks into machine {m} "
                             "(relay mode / carries), but ranks there need them")
        prob += pulp.lpSum(terms) >= count
    for i in canon.first_of_each(cross, link_rep):
        first = list(x_vars(i).values())
        if first:
            prob += y[i] >= pulp.lpSum(first)
        prob += y[i] <= topology.link_capacity(links[i]) * T
    cross_index = {links[i].key: i for i in cross}
    seen_rows: set = set()
    for g in topology.groups:
        members = [cross_index[k] for k in g.links if k in cross_index]
        if members:
            row = (tuple(sorted(link_rep[i] for i in members)), topology.group_capacity(g))
            if row in seen_rows:
                continue  # the same constraint, up to the symmetry
            seen_rows.add(row)
            prob += pulp.lpSum(y[i] for i in members) <= topology.group_capacity(g) * T
    in_cap, out_cap = _port_capacities(topology)
    intra_load = {}
    for b in rep_ranks.tolist():
        direct = _var(prob, f"direct_{b}", up=float(remote_need[b]))
        if into.get(b):
            prob += direct <= pulp.lpSum(y[i] for i in into[b])
        else:
            prob += direct <= 0
        relay = [v for i in out_of.get(b, ()) for o, v in x_vars(i).items() if o != b and not needs_origin[b, o]]
        intra_load[b] = float(total_need[b]) - direct + pulp.lpSum(relay)
        prob += intra_load[b] <= in_cap[b] * T
    for m in range(topology.machine_count):
        members = [b for b in range(ranks) if machine_of[b] == m]
        prob += pulp.lpSum(intra_load[canon.rank_rep(b)] for b in members) <= sum(out_cap[b] for b in members) * T
    prob += T + 1e-4 * pulp.lpSum(y_of.values())
    outcome = solve(prob, options)
    seconds = time.perf_counter() - started
    count = len(y_of) + len(x_orbit) + len(intra_load) + 1
    if not outcome.has_incumbent:
        return RoutePlan(as_status(outcome.status), (0,) * len(links), 0.0, seconds, count,
                         f"routing MILP: {outcome.status.value} ({outcome.message})", planned=False)
    copies = [0] * len(links)
    for i in cross:
        copies[i] = int(round(value(y[i])))
    status = Status.SOLVED if outcome.status == MilpStatus.SOLVED else Status.TIMEOUT
    return RoutePlan(status, tuple(copies), float(value(T)), seconds, count, outcome.message)


class _Canon:
    """Orbit keys under a quotient's group: each rank's representative (its orbit's smallest
    rank) and the element taking it there, so a tuple of ranks is keyed by its image under
    the element that takes its first rank to its representative (G acts freely: one such)."""

    def __init__(self, quotient: Quotient):
        self._ranks = quotient.ranks
        self._least, self._to_rep = orbit_representatives(quotient.ranks)
        self.rep_ranks = np.unique(self._least)

    def rank_rep(self, r: int) -> int:
        return int(self._least[r])

    def triple(self, a: int, b: int, c: int) -> tuple[int, int, int]:
        e = self._to_rep[a]
        row = self._ranks[e]
        return int(row[a]), int(row[b]), int(row[c])

    def links(self, cross: list[int], links) -> dict[int, tuple[int, int]]:
        """cross link index -> key of its orbit (the image of the link with its source at a
        representative rank)."""
        src = np.array([links[i].src for i in cross], dtype=np.int64)
        dst = np.array([links[i].dst for i in cross], dtype=np.int64)
        e = self._to_rep[src]
        a = self._ranks[e, src].tolist()
        b = self._ranks[e, dst].tolist()
        return {i: (x, y) for i, x, y in zip(cross, a, b)}

    @staticmethod
    def first_of_each(cross: list[int], key: dict[int, tuple[int, int]]) -> list[int]:
        seen: set = set()
        out = []
        for i in cross:
            if key[i] not in seen:
                seen.add(key[i])
                out.append(i)
        return out


def _rotation_quotient(topology: Topology, collective: Collective, sketch: Sketch) -> Quotient:
    """The group of the sketch's rotation (trivial without one, or where it does not apply)."""
    perm = sketch.rank_rotation(topology)
    if perm is not None:
        try:
            return Quotient.of(topology, collective, [perm])
        except InputError:
            pass
    return Quotient.of(topology, collective, [])


def _var(prob: pulp.LpProblem, name: str, cat: str = "Continuous", up: float | None = None) -> pulp.LpVariable:
    return prob.add_variable(name, lowBound=0, upBound=up, cat=cat)


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
