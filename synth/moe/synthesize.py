"""Dispatch and combine schedules from a routing: the planner, the router and the two baselines.

``moe_schedule(topology, spec, method)`` with ``spec`` = ``moe_dispatch:FILE`` or
``moe_combine:FILE`` and ``method``:
- ``planner``: levelled carriers (``synth.moe.planner``), even-runs pipelining;
- ``router``: MILP carriers (``synth.moe.router``), equitable pipelining (``synth.moe.equitable``);
  both fall back to the one-shot plan (``direct``'s) where it is faster in the step model;
  where nothing crosses machines (one switch domain, as gb200nvl72) both take the fan-out plan of
  ``synth.moe.fanout`` instead (switch multicasts, or relays), where it is faster than one-shot;
- ``deepep``: DeepEP's scheme: every token crosses to each destination machine once, from its own
  rank to the rank with the same local index there, which forwards it over the machine's links;
  pipelined in even runs, as DeepEP streams;
- ``direct``: what NCCL's all_to_all_v does: one copy per destination rank, straight, one step.
Combine runs the dispatch plan backwards (partial sums at every forwarding and relaying rank;
direct: every output straight to the source). The depth of a pipelined plan is the one the step
model likes best at the routing's size. ``seconds`` is the planning time (arrays), before the
Schedule is built; the caller verifies the schedule.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from synth.core.collectives import make_collective
from synth.core.errors import InputError
from synth.core.routing import Routing, routing_of_spec
from synth.core.schedule import Schedule
from synth.core.topology import Topology
from synth.moe.costing import LinkTable
from synth.moe.equitable import equitable_counts
from synth.moe.fanout import domain_hops
from synth.moe.plan import Carriers, DispatchPlan, Hops, Traffic, reversed_hops, to_schedule
from synth.moe.planner import best_depth, plan_carriers

METHODS = ("planner", "router", "deepep", "direct")
ROUTER_DEPTHS = (1, 2, 4, 8, 16, 32, 64)  # equitable splits halve, so powers of two


@dataclass(frozen=True)
class MoeResult:
    """A plan as a schedule, with the seconds planning took and what it chose."""

    schedule: Schedule
    seconds: float
    details: dict


def moe_schedule(topology: Topology, spec: str, method: str, milp_options=None) -> MoeResult:
    """The ``method`` schedule for ``spec`` on ``topology`` (see the module docstring)."""
    kind = spec.partition(":")[0]
    collective = make_collective(spec, topology.ranks)  # checks the routing against the topology
    routing = routing_of_spec(spec)
    table = LinkTable.of(topology)
    hops, seconds, details = plan_hops(topology, routing, method, milp_options, table)
    if kind == "moe_combine":
        hops = reversed_hops(hops)
    details = {**details, "time_us": table.time_us(hops, routing.token_bytes)}
    meta = {"synthesizer": "moe-" + method if method in ("planner", "router") else "baseline",
            "algorithm": method, "routing": spec.partition(":")[2], **details}
    schedule = to_schedule(hops, topology, collective, meta, table.rounds(hops))
    return MoeResult(schedule, seconds, details)


def plan_hops(topology: Topology, routing: Routing, method: str, milp_options=None,
              table: LinkTable | None = None) -> tuple[Hops, float, dict]:
    """(the dispatch plan of ``method`` as arrays, the seconds planning took, what it chose);
    combine is ``reversed_hops`` of it."""
    if method not in METHODS:
        raise InputError(f"unknown MoE method {method!r}; known: {', '.join(METHODS)}")
    if routing.ranks != topology.ranks:
        raise InputError(f"the routing is for {routing.ranks} ranks but {topology.name} has {topology.ranks}")
    require_links(topology)
    table = table or LinkTable.of(topology)
    started = time.perf_counter()
    hops, details = _plan(topology, routing, method, table, milp_options)
    seconds = time.perf_counter() - started
    return hops, seconds, {**details, "plan_seconds": round(seconds, 4)}


def _plan(topology: Topology, routing, method: str, table: LinkTable, milp_options) -> tuple[Hops, dict]:
    """The dispatch plan of ``method``; the planner and the router take the one-shot (direct) plan
    instead where it is faster (small tokens: one step's latency beats a pipeline's)."""
    traffic = Traffic.of(routing, topology)
    one_shot = Hops(traffic.dest_token, routing.token_source[traffic.dest_token], traffic.dest_rank,
                    np.zeros(len(traffic.dest_token), dtype=np.int64), 1)
    if method == "direct":
        return one_shot, {"depth": 1, "shape": "one-shot"}
    if method != "deepep" and not traffic.crossings:  # one switch domain: fan out where a port needs it
        best = (one_shot, {"depth": 1, "shape": "one-shot"})
        for hops, details in domain_hops(traffic, table):
            if table.time_us(hops, routing.token_bytes) < table.time_us(best[0], routing.token_bytes):
                best = (hops, details)
        return best
    if method == "router":
        from synth.moe.router import route_carriers

        carriers, outcome = route_carriers(traffic, milp_options)
        hops, depth = _equitable_best(DispatchPlan(traffic, carriers), table, routing.token_bytes)
        details = {"depth": depth, "shape": "pipelined", "milp": outcome.message,
                   "milp_objective_us": outcome.objective}
    else:
        carriers = plan_carriers(traffic) if method == "planner" else rail_carriers(traffic)
        hops, depth = best_depth(DispatchPlan(traffic, carriers), table, routing.token_bytes)
        details = {"depth": depth, "shape": "pipelined"}
    if method != "deepep" and table.time_us(one_shot, routing.token_bytes) < table.time_us(hops, routing.token_bytes):
        return one_shot, {**details, "depth": 1, "shape": "one-shot"}
    return hops, details


def rail_carriers(traffic: Traffic) -> Carriers:
    """DeepEP's carriers: the source sends; the rank with its local index on the destination
    machine (modulo that machine's size) receives."""
    machines = traffic.topology.machines or (tuple(range(traffic.topology.ranks)),)
    local = np.zeros(traffic.topology.ranks, dtype=np.int64)
    for members in machines:
        local[list(members)] = np.arange(len(members))
    width = max(map(len, machines))
    table = np.array([[m[i % len(m)] for i in range(width)] for m in machines], dtype=np.int64)
    return Carriers(traffic.source, table[traffic.machine, local[traffic.source]])


def _equitable_best(plan: DispatchPlan, table: LinkTable, chunk_bytes: float) -> tuple[Hops, int]:
    """The plan at the power-of-two depth (with or without a relay prologue) the step model likes
    best, each link's crossings split equitably over the steps (one split at the deepest, summed
    for the others)."""
    src, dst, count = plan.crossing_links
    deepest = equitable_counts(src, dst, count, ROUTER_DEPTHS[-1])
    best = None
    for depth in ROUTER_DEPTHS:
        counts = deepest.reshape(depth, ROUTER_DEPTHS[-1] // depth, -1).sum(axis=1)
        for prologue in (False, True):
            hops = plan.hops(depth, counts, prologue)
            took = table.time_us(hops, chunk_bytes)
            if best is None or took < best[2]:
                best = (hops, depth, took)
    return best[0], best[1]


def missing_links(topology: Topology) -> int:
    """How many ordered rank pairs have no link: the plans here send over direct links only
    (relays and forwards inside a machine, crossings between machines), so they need none missing,
    as on NVSwitch machines joined by a switched network."""
    return topology.ranks * (topology.ranks - 1) - len(topology.links)


def require_links(topology: Topology) -> None:
    """InputError unless every rank has a link to every other rank (``missing_links``)."""
    missing = missing_links(topology)
    if missing > 0:
        raise InputError(f"the MoE plans need a link between every two ranks; {topology.name} lacks {missing} "
                         f"(use a machine with NVSwitch and a switched network, e.g. h100x4)")
