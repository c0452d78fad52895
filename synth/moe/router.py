"""The MILP router: how many crossings each rank sends and receives, for every kind of crossing.

Crossings are aggregated twice. By *origin* (source rank s, machine b): ``x[s, b, h]`` of them
leave through rank h of s's machine (h = s: straight; otherwise relayed s -> h first). By *kind*
(machine b, the set D of its ranks that need the token): ``z[q, l]`` of them land on rank l of b
(l in D: a delivery; the others in D get it forwarded from l). Integer counts; every rank's
load on each of its four ports (out of and into the machine, out over and in over the machine's
own links) is at most T times its bandwidth; the objective is T in microseconds, plus 1e-6 us per
relay and forward (fewer hops among equally fast plans). Relays of one token to one rank for two
machines count twice here and once in the plan, so the model never flatters it. The model is
built as sparse arrays and solved by HiGHS through the bounds' LP layer (``synth.bounds.lp``),
to a relative gap (default ``DEFAULT_GAP``) or a time limit, whichever comes first; a run that
ends without a solution is "unknown", never "infeasible".

The plan realises the counts (``realise``); ``synth.moe.equitable`` then spreads every link's
crossings so each port carries an equal share in every step of the pipeline, and the step
model picks the depth.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from synth.bounds.lp import LpRows, solve_mip_solution
from synth.bounds.solver import MilpOptions
from synth.core.errors import InputError, UnknownResultError
from synth.moe.costing import port_bandwidth
from synth.moe.plan import Carriers, Traffic

HOP_PENALTY = 1e-6  # us per relay or forward in the objective
DEFAULT_GAP = 1e-3  # relative MIP gap (HiGHS reaches it in about a second on 64-GPU routings)


@dataclass(frozen=True, eq=False)
class Kinds:
    """The crossings grouped: ``origin[i]`` / ``kind[i]`` the group of crossing i, and per group
    its source rank (origins), its machine and destination mask over the machine's ranks (kinds)."""

    origin: np.ndarray
    origin_source: np.ndarray
    kind: np.ndarray
    kind_machine: np.ndarray
    kind_needs: np.ndarray  # [kinds, ranks] bool: the ranks of D


@dataclass(frozen=True)
class RouterOutcome:
    """What the MIP run said: its objective (us), seconds, whether it closed the gap, in words."""

    objective: float
    seconds: float
    finished: bool
    message: str


def route_carriers(traffic: Traffic, options: MilpOptions | None = None) -> tuple[Carriers, RouterOutcome]:
    """The router's carriers; UnknownResultError when HiGHS stops without a solution.
    ``options`` None: 120 s, relative gap ``DEFAULT_GAP`` (HiGHS only: the model is arrays)."""
    options = options or MilpOptions(time_limit=120.0, gap=DEFAULT_GAP)
    if options.solver != "highs":
        raise InputError(f"the MoE router runs on HiGHS, not {options.solver}")
    if not traffic.crossings:  # nothing crosses: nothing to route
        empty = np.zeros(0, dtype=np.int64)
        return Carriers(empty, empty), RouterOutcome(0.0, 0.0, True, "nothing crosses between machines: no MIP")
    kinds = group_crossings(traffic)
    model = RouterModel.of(traffic, kinds)
    gap = DEFAULT_GAP if options.gap is None else options.gap
    started = time.perf_counter()
    answer = solve_mip_solution(model.cost, model.upper, model.rows.arrays()[:3], *model.rows.arrays()[3:],
                                integer_columns=range(1, len(model.cost)), time_limit=options.time_limit or 1e9,
                                gap=gap)
    seconds = time.perf_counter() - started
    if answer is None:
        raise UnknownResultError(f"the MoE router found no plan in {seconds:.1f} s (HiGHS: no solution)")
    objective, x, finished = answer
    how = f"within relative gap {gap:g}" if finished else "stopped at the time limit"
    outcome = RouterOutcome(objective, seconds, finished, f"highs: {how} after {seconds:.2f} s")
    sends, lands = model.counts(x)
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


@dataclass(frozen=True, eq=False)
class RouterModel:
    """The MIP as arrays: column 0 is T; then x (origin o, rank h of its machine) and z (kind q,
    rank l of its machine), listed in ``x_of``/``z_of`` as (group, rank) per column."""

    cost: np.ndarray
    upper: np.ndarray
    rows: LpRows
    x_of: np.ndarray
    z_of: np.ndarray

    @classmethod
    def of(cls, traffic: Traffic, kinds: Kinds) -> "RouterModel":
        topology = traffic.topology
        members = [np.array(m, dtype=np.int64) for m in (topology.machines or (tuple(range(topology.ranks)),))]
        machine_of = np.asarray(topology.machine_of, dtype=np.int64)
        x_of = _columns(machine_of[kinds.origin_source], members)
        z_of = _columns(kinds.kind_machine, members)
        origin_count = np.bincount(kinds.origin, minlength=len(kinds.origin_source))
        kind_count = np.bincount(kinds.kind, minlength=len(kinds.kind_machine))
        x0, z0 = 1, 1 + len(x_of)
        relayed = x_of[:, 1] != kinds.origin_source[x_of[:, 0]]
        forwards = kinds.kind_needs[z_of[:, 0]].sum(axis=1) - kinds.kind_needs[z_of[:, 0], z_of[:, 1]]
        cost = np.concatenate(([1.0], HOP_PENALTY * relayed, HOP_PENALTY * forwards))
        upper = np.concatenate(([np.inf], origin_count[x_of[:, 0]], kind_count[z_of[:, 0]])).astype(float)
        rows = LpRows()
        for first, of, count in ((x0, x_of, origin_count), (z0, z_of, kind_count)):  # every crossing placed
            rows.add(of[:, 0], first + np.arange(len(of)), np.ones(len(of)), count.astype(float), count.astype(float))
        _port_rows(rows, traffic, kinds, x_of, z_of, relayed, forwards, kind_count)
        return cls(cost, upper, rows, x_of, z_of)

    def counts(self, x: np.ndarray) -> tuple[list[dict[int, int]], list[dict[int, int]]]:
        """Per origin {rank: crossings it sends}, per kind {rank: crossings landing there}."""
        values = np.rint(x).astype(np.int64)
        split = 1 + len(self.x_of)
        return _table(self.x_of, values[1:split]), _table(self.z_of, values[split:])


def _columns(group_machine: np.ndarray, members: list[np.ndarray]) -> np.ndarray:
    """(group, rank) for every rank of every group's machine, group by group."""
    sizes = np.array([len(members[m]) for m in group_machine.tolist()], dtype=np.int64)
    ranks = np.concatenate([members[m] for m in group_machine.tolist()]) if len(sizes) else sizes
    return np.column_stack((np.repeat(np.arange(len(group_machine)), sizes), ranks))


def _table(of: np.ndarray, values: np.ndarray) -> list[dict[int, int]]:
    groups = int(of[:, 0].max()) + 1 if len(of) else 0
    out: list[dict[int, int]] = [{} for _ in range(groups)]
    for (group, rank), value in zip(of.tolist(), values.tolist()):
        out[group][rank] = value
    return out


def _port_rows(rows: LpRows, traffic: Traffic, kinds: Kinds, x_of, z_of, relayed, forwards, kind_count) -> None:
    """Every rank's four ports: scale/bandwidth x (load) <= T, i.e. load - bandwidth/scale x T <= -fixed."""
    topology = traffic.topology
    n = topology.ranks
    out_bw, in_bw = port_bandwidth(topology, across=True)
    inner_out, inner_in = port_bandwidth(topology, across=False)
    scale = traffic.routing.token_bytes / 1e3  # chunks x bytes / (GB/s x 1e3) = us
    local_out, local_in = _local_loads(traffic)
    x_col, z_col = 1 + np.arange(len(x_of)), 1 + len(x_of) + np.arange(len(z_of))
    source = kinds.origin_source[x_of[:, 0]]
    need_q, need_r = np.nonzero(kinds.kind_needs)  # (kind, destination) pairs
    lands_at = {(q, r): c for q, r, c in zip(z_of[:, 0].tolist(), z_of[:, 1].tolist(), z_col.tolist())}
    need_col = np.array([lands_at[(q, r)] for q, r in zip(need_q.tolist(), need_r.tolist())], dtype=np.int64)
    terms = {  # port -> (rank of each term, column, coefficient), fixed load per rank, bandwidth per rank
        "out": ((x_of[:, 1], x_col, np.ones(len(x_col))), np.zeros(n), out_bw),
        "in": ((z_of[:, 1], z_col, np.ones(len(z_col))), np.zeros(n), in_bw),
        "inner_out": ((np.r_[source[relayed], z_of[:, 1]], np.r_[x_col[relayed], z_col],
                       np.r_[np.ones(int(relayed.sum())), forwards]), local_out.astype(float), inner_out),
        "inner_in": ((np.r_[x_of[relayed, 1], need_r], np.r_[x_col[relayed], need_col],
                      np.r_[np.ones(int(relayed.sum())), -np.ones(len(need_r))]),
                     local_in + np.bincount(need_r, weights=kind_count[need_q], minlength=n), inner_in),
    }
    for (rank, col, val), fixed, bandwidth in terms.values():
        used = np.flatnonzero((bandwidth > 0) & ((np.bincount(rank, minlength=n) > 0) | (fixed > 0)))
        index = np.full(n, -1, dtype=np.int64)
        index[used] = np.arange(len(used))
        keep = index[rank] >= 0
        rows.add(np.r_[index[rank[keep]], np.arange(len(used))], np.r_[col[keep], np.zeros(len(used), dtype=np.int64)],
                 np.r_[val[keep], -bandwidth[used] / scale], np.full(len(used), -np.inf), -fixed[used])


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
