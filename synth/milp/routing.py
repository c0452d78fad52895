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
  its in-port in T rounds, and the machine's intra traffic through its out-ports (where a
  multicast switch joins the machine's ranks, a chunk leaves one port once to reach all of
  them: the out-port row counts chunks, not receptions).

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

from synth.bounds.solver import MilpOptions, MilpStatus, as_status, solve, value
from synth.core.collective import Collective
from synth.core.errors import InputError
from synth.core.orbits import Quotient, orbit_representatives
from synth.core.schedule import Status
from synth.core.topology import Topology
from synth.milp.sketch import Sketch


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
          options: MilpOptions | None = None, quotient: Quotient | None = None,
          multicast: frozenset[int] = frozenset()) -> RoutePlan:
    """The routing MILP (see the module docstring); never raises on a solver timeout.

    ``quotient``: the symmetry group to tie variables by and to write constraints for one
    representative each (by default the sketch's rotation, or none); the plan is invariant
    under it. ``multicast``: machines whose ranks a multicast switch joins: a chunk leaves one
    of their ports once to reach every rank there that needs it, so their out-port row counts
    chunks, not receptions.
    """
    started = time.perf_counter()
    if topology.machine_count < 2:
        return RoutePlan(Status.SOLVED, (0,) * len(topology.links), 0.0, 0.0, 0,
                         "one machine: the ordering stage routes over its links step by step", planned=False)
    options = options or MilpOptions()
    if quotient is None:
        quotient = _rotation_quotient(topology, collective, sketch)
    return _RoutingModel(topology, collective, sketch, quotient, multicast).solve(options, started)


class _RoutingModel:
    """The routing MILP of one instance: its data, its variables and one method per constraint
    family, added in a fixed order (so the model, its row names and its plan are reproducible).

    Variables: ``T`` (rounds); ``y`` per orbit of allowed cross links (integer copies it
    carries); ``x`` per orbit of (origin, cross link) (first entries of the origin's chunks
    into the link's target machine, made on first use by ``_x_vars``); ``direct_b`` per
    representative rank b (copies landing on b that it needs).
    """

    def __init__(self, topology: Topology, collective: Collective, sketch: Sketch, quotient: Quotient,
                 multicast: frozenset[int] = frozenset()):
        self.topology, self.sketch, self.multicast = topology, sketch, multicast
        self.links, self.machine_of = topology.links, topology.machine_of
        self.machine = np.array(topology.machine_of, dtype=np.int64)
        self.origin = np.array([min(pre) for pre in collective.pre], dtype=np.int64)
        self.need = np.zeros((topology.ranks, collective.chunks), dtype=bool)  # rank a needs chunk c
        for c, (pre, post) in enumerate(zip(collective.pre, collective.post)):
            self.need[list(set(post) - set(pre)), c] = True
        self.cross = [i for i, l in enumerate(self.links) if self.machine_of[l.src] != self.machine_of[l.dst]
                      and sketch.allowed_crossing(topology, l.src, l.dst)]
        self.canon = _Canon(quotient)
        self.link_rep = self.canon.links(self.cross, self.links)  # cross link -> its orbit's key
        self._origins()
        self._cross_lists()
        self.prob = pulp.LpProblem("routing", pulp.LpMinimize)
        self.T = self.prob.add_variable("T", lowBound=0)
        self.y_of: dict[tuple[int, int], pulp.LpVariable] = {}  # orbit key -> its copies
        for i in self.cross:
            rep = self.link_rep[i]
            if rep not in self.y_of:
                self.y_of[rep] = _var(self.prob, f"y_{rep[0]}_{rep[1]}", cat="Integer")
        self.y = {i: self.y_of[self.link_rep[i]] for i in self.cross}
        self.x_orbit: dict[tuple, pulp.LpVariable] = {}
        self.intra_load: dict[int, pulp.LpAffineExpression] = {}

    def _origins(self) -> None:
        """Who needs which origin's chunks: per rank, all it needs and what it needs from other
        machines; ``needs_origin[a, o]``; the origins of each machine; ``wanted`` (origin,
        machine) pairs, machine needing some chunk of origin o (not its own machine)."""
        machine, origin, need = self.machine, self.origin, self.need
        origins = np.unique(origin).tolist()
        remote = need & (machine[:, None] != machine[origin][None, :])
        self.remote_need = remote.sum(axis=1).astype(float)
        self.total_need = need.sum(axis=1).astype(float)
        self.needs_origin = np.zeros((self.topology.ranks, self.topology.ranks), dtype=bool)
        for o in origins:
            self.needs_origin[:, o] = need[:, origin == o].any(axis=1)
        self.origins_of_machine: dict[int, list[int]] = {}
        for o in origins:
            self.origins_of_machine.setdefault(int(machine[o]), []).append(o)
        self.wanted = {(o, m) for o in origins for m in np.unique(machine[self.needs_origin[:, o]]).tolist()
                       if m != machine[o]}

    def _cross_lists(self) -> None:
        """Cross links by (source machine, target machine), by target rank and by source rank."""
        self.into_machine: dict[tuple[int, int], list[int]] = {}
        self.into: dict[int, list[int]] = {}
        self.out_of: dict[int, list[int]] = {}
        for i in self.cross:
            l = self.links[i]
            self.into_machine.setdefault((self.machine_of[l.src], self.machine_of[l.dst]), []).append(i)
            self.into.setdefault(l.dst, []).append(i)
            self.out_of.setdefault(l.src, []).append(i)

    def _demand(self) -> dict[tuple[int, int], int]:
        """(o, m) -> chunks of origin o (a representative rank) needed somewhere in machine m,
        another machine than o's."""
        machine, origin = self.machine, self.origin
        demand: dict[tuple[int, int], int] = {}
        for c in np.nonzero(np.isin(origin, self.canon.rep_ranks))[0]:
            o = int(origin[c])
            for m in np.unique(machine[self.need[:, c]]).tolist():
                if m != machine[o]:
                    demand[(o, m)] = demand.get((o, m), 0) + 1
        return demand

    def _x_vars(self, i: int) -> dict[int, pulp.LpVariable]:
        """origin -> the variable of its first entries over cross link i (origins of the link's
        source machine whose chunks its target machine wants and the link may carry)."""
        l = self.links[i]
        out = {}
        for o in self.origins_of_machine.get(self.machine_of[l.src], ()):
            if ((o, self.machine_of[l.dst]) not in self.wanted
                    or not self.sketch.may_carry_link(self.topology, l.src, l.dst, o)):
                continue
            key = self.canon.triple(o, l.src, l.dst)
            if key not in self.x_orbit:
                self.x_orbit[key] = _var(self.prob, f"x_{key[0]}_{key[1]}_{key[2]}")
            out[o] = self.x_orbit[key]
        return out

    def _demand_rows(self) -> None:
        """Demand: sum of x[o, i] over links i from o's machine into m >= the chunks of origin o
        needed in machine m (every needed chunk enters each machine at least once)."""
        for (o, m), count in sorted(self._demand().items()):
            terms = [v for i in self.into_machine.get((self.machine_of[o], m), ())
                     for og, v in self._x_vars(i).items() if og == o]
            if not terms:
                raise InputError(f"sketch: no link it allows may carry rank {o}'s chunks into machine {m} "
                                 "(relay mode / carries), but ranks there need them")
            self.prob += pulp.lpSum(terms) >= count

    def _link_rows(self) -> None:
        """Per orbit of cross links i (its first link): y[i] >= sum over origins of x[o, i] (the
        copies carry the first entries; no row where the link carries none), then the link's
        capacity y[i] <= capacity x T."""
        for i in self.canon.first_of_each(self.cross, self.link_rep):
            first = list(self._x_vars(i).values())
            if first:
                self.prob += self.y[i] >= pulp.lpSum(first)
            self.prob += self.y[i] <= self.topology.link_capacity(self.links[i]) * self.T

    def _group_rows(self) -> None:
        """NIC groups: sum of y over a group's cross links <= group capacity x T, one row per
        distinct (orbit keys, capacity) (the same row up to the symmetry is written once)."""
        cross_index = {self.links[i].key: i for i in self.cross}
        seen_rows: set = set()
        for g in self.topology.groups:
            members = [cross_index[k] for k in g.links if k in cross_index]
            if members:
                row = (tuple(sorted(self.link_rep[i] for i in members)), self.topology.group_capacity(g))
                if row in seen_rows:
                    continue  # the same constraint, up to the symmetry
                seen_rows.add(row)
                self.prob += pulp.lpSum(self.y[i] for i in members) <= self.topology.group_capacity(g) * self.T

    def _in_port_rows(self, in_cap: np.ndarray) -> None:
        """Per representative rank b: direct_b (0 <= direct_b <= chunks b needs from other
        machines) <= the copies on cross links into b (0 without one); its intra load, what it
        needs less direct_b plus the first entries it only relays (origins it does not need),
        <= in-port capacity x T."""
        for b in self.canon.rep_ranks.tolist():
            direct = _var(self.prob, f"direct_{b}", up=float(self.remote_need[b]))
            if self.into.get(b):
                self.prob += direct <= pulp.lpSum(self.y[i] for i in self.into[b])
            else:
                self.prob += direct <= 0
            relay = [v for i in self.out_of.get(b, ()) for o, v in self._x_vars(i).items()
                     if o != b and not self.needs_origin[b, o]]
            self.intra_load[b] = float(self.total_need[b]) - direct + pulp.lpSum(relay)
            self.prob += self.intra_load[b] <= in_cap[b] * self.T

    def _out_port_rows(self, out_cap: np.ndarray) -> None:
        """Per machine: the intra loads of its ranks (each its representative's) <= the sum of
        their out-port capacities x T; in a ``multicast`` machine, the chunks that must leave
        one of its ports at least once (``_multicast_load``) instead of the loads."""
        for m in range(self.topology.machine_count):
            members = [b for b in range(self.topology.ranks) if self.machine_of[b] == m]
            capacity = sum(out_cap[b] for b in members) * self.T
            if m in self.multicast:
                self.prob += self._multicast_load(m) <= capacity
                continue
            self.prob += pulp.lpSum(self.intra_load[self.canon.rank_rep(b)] for b in members) <= capacity

    def _multicast_load(self, m: int) -> float:
        """Chunks some rank of machine m receives inside it whatever the NICs do: those two or
        more of its ranks need, and those of its own origins one other rank of it needs."""
        needers = self.need[self.machine == m].sum(axis=0)
        own = self.machine[self.origin] == m
        return float(((needers >= 2) | (own & (needers == 1))).sum())

    def _objective(self) -> None:
        """Minimise T, ties broken towards fewer copies (1e-4 per copy orbit)."""
        self.prob += self.T + 1e-4 * pulp.lpSum(self.y_of.values())

    def build(self) -> pulp.LpProblem:
        """The whole model: the constraint families in order, then the objective."""
        self._demand_rows()
        self._link_rows()
        self._group_rows()
        in_cap, out_cap = _port_capacities(self.topology)
        self._in_port_rows(in_cap)
        self._out_port_rows(out_cap)
        self._objective()
        return self.prob

    def solve(self, options: MilpOptions, started: float) -> RoutePlan:
        """Build and solve; the plan (copies per link index, T), or no plan without an incumbent."""
        outcome = solve(self.build(), options)
        seconds = time.perf_counter() - started
        count = len(self.y_of) + len(self.x_orbit) + len(self.intra_load) + 1
        if not outcome.has_incumbent:
            return RoutePlan(as_status(outcome.status), (0,) * len(self.links), 0.0, seconds, count,
                             f"routing MILP: {outcome.status.value} ({outcome.message})", planned=False)
        copies = [0] * len(self.links)
        for i in self.cross:
            copies[i] = int(round(value(self.y[i])))
        status = Status.SOLVED if outcome.status == MilpStatus.SOLVED else Status.TIMEOUT
        return RoutePlan(status, tuple(copies), float(value(self.T)), seconds, count, outcome.message)


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
