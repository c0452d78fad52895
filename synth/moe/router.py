"""The MILP router: how many crossings each rank sends and receives, for every kind of crossing.

Crossings are aggregated twice. By *origin* (source rank s, machine b): ``x[s, b, h]`` of them
leave through rank h of s's machine (h = s: straight; otherwise relayed s -> h first). By *kind*
(machine b, the set D of its ranks that need the token): ``z[q, l]`` of them land on rank l of b
(l in D: a delivery; the others in D get it forwarded from l). Integer counts; every rank's
load on each of its four ports (out of and into the machine, out over and in over the machine's
own links) is at most T times its bandwidth; the objective is T in microseconds, plus 1e-6 us per
relay and forward (fewer hops among equally fast plans). Relays of one token to one rank for two
machines count twice here and once in the plan, so the model never flatters it.

The plan realises the counts (``realise``); ``synth.moe.equitable`` then spreads every link's
crossings so each port carries an equal share in every step of the pipeline, and the step
model picks the depth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pulp

from synth.bounds.solver import MilpOptions, MilpOutcome, MilpStatus, solve, value
from synth.core.errors import UnknownResultError
from synth.core.topology import Topology
from synth.moe.costing import port_bandwidth
from synth.moe.plan import Carriers, Traffic

HOP_PENALTY = 1e-6  # us per relay or forward in the objective


@dataclass(frozen=True, eq=False)
class Kinds:
    """The crossings grouped: ``origin[i]`` / ``kind[i]`` the group of crossing i, and per group
    its source rank (origins), its machine and destination mask over the machine's ranks (kinds)."""

    origin: np.ndarray
    origin_source: np.ndarray
    kind: np.ndarray
    kind_machine: np.ndarray
    kind_needs: np.ndarray  # [kinds, ranks] bool: the ranks of D


def route_carriers(traffic: Traffic, options: MilpOptions) -> tuple[Carriers, MilpOutcome]:
    """The router's carriers; UnknownResultError when the solver stops without a solution."""
    if not traffic.crossings:  # nothing crosses: nothing to route
        empty = np.zeros(0, dtype=np.int64)
        return Carriers(empty, empty), MilpOutcome(MilpStatus.SOLVED, 0.0, 0.0, options.solver, True, True, 0.0,
                                                   "nothing crosses between machines: no MILP")
    kinds = group_crossings(traffic)
    model = _Model(traffic.topology, traffic, kinds)
    outcome = solve(model.problem, options)
    if not outcome.has_incumbent:
        raise UnknownResultError(f"the MoE router found no plan: {outcome.message}")
    sends, lands = model.counts()
    return realise(traffic, kinds, sends, lands), outcome


def group_crossings(traffic: Traffic) -> Kinds:
    """The crossings by origin (source rank, machine) and by kind (machine, destinations there)."""
    key = traffic.source * traffic.topology.machine_count + traffic.machine
    origins, origin = np.unique(key, return_inverse=True)
    crossing, rank = traffic.candidates
    needs = np.zeros((traffic.crossings, traffic.topology.ranks), dtype=bool)
    needs[crossing, rank] = True
    signature = np.packbits(needs, axis=1)
    machine = np.ascontiguousarray(traffic.machine, dtype=np.int64).view(np.uint8).reshape(traffic.crossings, 8)
    rows = np.column_stack((machine, signature))
    _, first, kind = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    return Kinds(origin, origins // traffic.topology.machine_count, kind.reshape(-1),
                 traffic.machine[first], needs[first])


class _Model:
    """The MILP (see the module docstring) over one traffic."""

    def __init__(self, topology: Topology, traffic: Traffic, kinds: Kinds):
        self.machines = [np.array(m, dtype=np.int64) for m in (topology.machines or (tuple(range(topology.ranks)),))]
        machine_of = np.asarray(topology.machine_of, dtype=np.int64)
        self.problem = pulp.LpProblem("moe_router", pulp.LpMinimize)
        self.time = self.problem.add_variable("T", 0)
        origin_count = np.bincount(kinds.origin, minlength=len(kinds.origin_source))
        kind_count = np.bincount(kinds.kind, minlength=len(kinds.kind_machine))
        self.x = [{int(h): self.problem.add_variable(f"x_{o}_{h}", 0, int(origin_count[o]), cat="Integer")
                   for h in self.machines[machine_of[s]]} for o, s in enumerate(kinds.origin_source.tolist())]
        self.z = [{int(l): self.problem.add_variable(f"z_{q}_{l}", 0, int(kind_count[q]), cat="Integer")
                   for l in self.machines[b]} for q, b in enumerate(kinds.kind_machine.tolist())]
        for o, count in enumerate(origin_count.tolist()):
            self.problem += pulp.lpSum(self.x[o].values()) == count
        for q, count in enumerate(kind_count.tolist()):
            self.problem += pulp.lpSum(self.z[q].values()) == count
        hops = self._ports(topology, traffic, kinds, kind_count)
        self.problem += self.time + HOP_PENALTY * hops

    def _ports(self, topology, traffic, kinds, kind_count):
        """Every port's load within T x bandwidth; returns the relays and forwards (an expression)."""
        out_bw, in_bw = port_bandwidth(topology, across=True)
        inner_out, inner_in = port_bandwidth(topology, across=False)
        scale = traffic.routing.token_bytes / 1e3  # chunks x bytes / (GB/s x 1e3) = us
        local_out, local_in = _local_loads(traffic)
        terms = {name: [[] for _ in range(topology.ranks)] for name in ("out", "in", "inner_out", "inner_in")}
        hops = []
        for o, s in enumerate(kinds.origin_source.tolist()):
            for h, var in self.x[o].items():
                terms["out"][h].append(var)
                if h != s:
                    terms["inner_out"][s].append(var)
                    terms["inner_in"][h].append(var)
                    hops.append(var)
        for q in range(len(self.z)):
            need = np.flatnonzero(kinds.kind_needs[q])
            for l, var in self.z[q].items():
                terms["in"][l].append(var)
                forwards = len(need) - int(kinds.kind_needs[q, l])
                if forwards:
                    terms["inner_out"][l].append(forwards * var)
                    hops.append(forwards * var)
            for d in need.tolist():  # d gets it over the machine's links unless it lands there
                terms["inner_in"][d].append(int(kind_count[q]) - self.z[q][d])
        for name, bandwidth, fixed in (("out", out_bw, None), ("in", in_bw, None),
                                       ("inner_out", inner_out, local_out), ("inner_in", inner_in, local_in)):
            for r in range(topology.ranks):
                load = pulp.lpSum(terms[name][r]) + (0 if fixed is None else int(fixed[r]))
                if bandwidth[r] > 0 and (terms[name][r] or (fixed is not None and fixed[r])):
                    self.problem += scale / bandwidth[r] * load <= self.time
        return pulp.lpSum(hops)

    def counts(self) -> tuple[list[dict[int, int]], list[dict[int, int]]]:
        read = lambda table: [{k: int(round(value(v))) for k, v in row.items()} for row in table]  # noqa: E731
        return read(self.x), read(self.z)


def realise(traffic: Traffic, kinds: Kinds, sends: list[dict[int, int]], lands: list[dict[int, int]]) -> Carriers:
    """Carriers with exactly the counted senders per origin and receivers per kind: in each origin
    the source sends first; in each kind the destinations receive first."""
    sender = _deal(kinds.origin, [sorted(row.items(), key=lambda kv: (kv[0] != int(s), kv[0]))
                                  for row, s in zip(sends, kinds.origin_source.tolist())])
    receiver = _deal(kinds.kind, [sorted(row.items(), key=lambda kv: (not kinds.kind_needs[q, kv[0]], kv[0]))
                                  for q, row in enumerate(lands)])
    return Carriers(sender, receiver)


def _deal(group: np.ndarray, counts: list[list[tuple[int, int]]]) -> np.ndarray:
    """Per item, a rank: group g's items, in order, get each (rank, count) of ``counts[g]`` in turn."""
    ranks = np.array([r for row in counts for r, c in row for _ in range(c)], dtype=np.int64)
    order = np.argsort(group, kind="stable")
    out = np.empty(len(group), dtype=np.int64)
    out[order] = ranks
    return out


def _local_loads(traffic: Traffic) -> tuple[np.ndarray, np.ndarray]:
    """Tokens each rank sends to and receives from its own machine as a source's local deliveries."""
    local = traffic.dest_crossing < 0
    source = traffic.routing.token_source[traffic.dest_token[local]]
    ranks = traffic.topology.ranks
    return np.bincount(source, minlength=ranks), np.bincount(traffic.dest_rank[local], minlength=ranks)
