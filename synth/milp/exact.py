"""Exact time-expanded MILP for small instances (one machine, <= 16 ranks, a few chunks).

Given a topology, a non-combining collective, S steps and a size, find the k-synchronous
schedule that minimises the step-model time (DESIGN.md) at that size. Variables: ``send[c, l,
k]`` (chunk c over link l in step k, binary), ``used[k]`` (step k is non-empty, binary) and
``q[k]`` (integer time quanta of step k; 0 = empty). Holdings are not variables: a rank receives
each chunk at most once and never one it starts with (a second copy is useless, so no optimum
is lost), so ``has[c, r, k] = pre[c, r] + sends of c into r before step k`` is a linear
expression (the has-variable model with has monotone, minus its columns). Constraints: a sender
holds c when the step starts; every post rank receives c; one write per (rank, chunk); per link
``L * sum_c send <= ratio_l * q[k]``, per group likewise.

Objectives, with tau = chunk bytes / smallest link bandwidth (one round's time):
- ``"rounds"`` (exact_schedule's default; the k-synchronous approximation): L = 1, ratio =
  capacity, so q[k] = r[k] is the step's rounds; minimise sum alpha_max * used[k] + tau * r[k].
  With whole capacities a round lasts tau on every link and group; alpha is the largest link
  alpha. This is an upper bound on the step-model time, which is computed afterwards with
  ``cost.step_time_us`` and reported (``ExactResult.time_us``).
- ``"time"`` (best_exact's default): the step model itself. Without groups, with equal alphas
  and every bandwidth a whole multiple of the smallest, a step lasts alpha + (tau / L) * q[k]
  with L the lcm of the multiples (ndv2, dgx1: L = 2, half rounds), so the same integer model
  is exact. Otherwise continuous t[k] >= alpha_l * (l used) + load_l * b / bw_l and
  t[k] >= load_g * b / bw_g. A step's ``rounds`` are then the fewest that fit its loads.

Pruning (always): a send only from a rank within k hops of a holder, only into a rank that can
still pass c on to a rank that needs it in the steps left. Valid cuts (``CUTS``; the default
set was measured, see ``DEFAULT_CUTS``): empty steps last; the first steps-bound steps used;
``used[k] >= send``; the global rounds bound ``sum q >= ceil(L * rounds_per_chunk * C)``; the
S-step flow LP of ``bounds_steps`` as ``sum q - sum used >= ceil(L * (LP(S) - S))`` (pad the
schedule to S steps of >= 1 round); objective >= the time bound; interchangeable chunks sorted.

Combining collectives go through ``synth.core.reductions``: reduce_scatter / reduce are the
dual of allgather / broadcast on ``topology.reversed()``; allreduce (``best_exact`` only) is
the best reduce_scatter followed by the best allgather.

>>> from synth.core.generators import ring
>>> from synth.core.collectives import allgather
>>> r = exact_schedule(ring(4), allgather(4), 2, 1 << 20)
>>> r.status.value, len(r.schedule.steps), r.schedule.meta["synthesizer"]
('solved', 2, 'milp-exact')
>>> exact_schedule(ring(4), allgather(4), 1, 1 << 20).status.value  # 2 hops needed
'infeasible'
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import pulp

from synth.bounds.lower_bounds import lower_bounds
from synth.bounds.solver import MilpOptions, MilpOutcome, MilpStatus, solve, value
from synth.bounds.step_lp import step_rounds_bound
from synth.core.collective import Collective
from synth.core.collectives import make_collective
from synth.core.errors import InputError
from synth.core.reductions import COMPOSITION, DUAL, Part, Reduction, solve_reduced
from synth.core.schedule import Schedule, Send, Status, Step
from synth.core.symmetry import chunk_permutation
from synth.core.topology import Topology
from synth.cost import step_time_us
from synth.verify import checked

# Valid cuts; DEFAULT_CUTS are those that paid on ndv2 allgather C=2..6, S=3..4 (HiGHS 1.16):
# "time_bound" (objective >= the time bound) and "order_chunks" (interchangeable chunks sorted)
# made the same instances 3x slower (HiGHS finds the chunk symmetry itself), so they are off.
CUTS = frozenset({"empty_last", "min_steps", "rounds_bound", "steps_lp", "used_send", "time_bound",
                  "order_chunks"})
DEFAULT_CUTS = frozenset({"empty_last", "min_steps", "rounds_bound", "steps_lp", "used_send"})
MAX_BINARIES = 20_000  # best_exact skips larger instances: HiGHS rarely closes them in minutes
OBJECTIVES = ("rounds", "time")


@dataclass(frozen=True)
class ExactResult:
    """status: SOLVED (optimal), TIMEOUT (maybe an incumbent) or INFEASIBLE (proven; with a
    cutoff: nothing faster than the cutoff exists)."""

    status: Status
    schedule: Schedule | None
    objective: float | None
    seconds: float
    time_us: float | None = None  # cost.step_time_us of the schedule at the size
    binaries: int = 0


@dataclass(frozen=True)
class Attempt:
    chunks: int
    steps: int
    status: Status
    seconds: float
    time_us: float | None
    detail: str = ""  # "no better" (infeasible below the cutoff), why an attempt was skipped

    @property
    def label(self) -> str:
        """What the attempt showed, in a word or two ("no better" rather than infeasible)."""
        return "no better" if self.detail == "no better" else self.status.value


@dataclass(frozen=True)
class BestExact:
    """The best verified schedule found by ``best_exact`` (None if none) and every attempt."""

    schedule: Schedule | None
    time_us: float | None
    bound_us: float
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)


# ---------------------------------------------------------------------------- solver seam
def _solve(prob: pulp.LpProblem, options: MilpOptions) -> MilpOutcome:
    """The one place a solver runs: synth.bounds.solver (proves optimality, gap 0, fixed seed)."""
    return solve(prob, options)


# ---------------------------------------------------------------------------- the model
def exact_schedule(
    topology: Topology,
    collective: Collective,
    steps: int,
    size_bytes: float,
    time_limit: float = 60,
    solver: str = "highs",
    objective: str = "rounds",
    cuts: frozenset[str] = DEFAULT_CUTS,
    cutoff: float | None = None,
    rotation: tuple[int, ...] | None = None,
) -> ExactResult:
    """The best S-step schedule at ``size_bytes`` (see the module docstring).

    ``rotation``: a rank permutation (a topology automorphism, e.g. a sketch's symmetry) the
    schedule must be invariant under: each send's image under it is sent in the same step.

    ``cuts``: which of the valid cuts of ``CUTS`` to add (``DEFAULT_CUTS`` unless measuring).
    ``cutoff``: only look for objective values below it ("infeasible" then proves none is).
    A time-limited run is "timeout" (with its incumbent, if any), never "infeasible".
    """
    options = MilpOptions(solver=solver, time_limit=time_limit)  # checks both (InputError)
    if objective not in OBJECTIVES:
        raise InputError(f"unknown objective {objective!r}; use {' or '.join(OBJECTIVES)}")
    unknown = set(cuts) - CUTS
    if unknown:
        raise InputError(f"unknown cuts {sorted(unknown)}; known: {sorted(CUTS)}")
    collective.check_on(topology)
    if collective.combining and not all(len(p) == 1 for p in collective.post):
        raise InputError(f"exact_schedule: {collective.name} has no single dual; use best_exact (allreduce)")
    return solve_reduced(topology, collective,
                         lambda part: _exact_forward(part.topology, part.collective, steps, size_bytes, options,
                                                     objective, cuts, cutoff, rotation),
                         partial(_join_dual, size_bytes=size_bytes))


def _join_dual(reduction: Reduction, part: Part, answers: list[ExactResult], size_bytes: float) -> ExactResult:
    """The dual's result run backwards as reductions (``synth.core.reductions``), verified."""
    (result,) = answers
    if result.schedule is None:
        return result
    back = reduction.invert(part, [result.schedule])
    back = back.with_meta(**{**result.schedule.meta, "dual": "run backwards as reductions"})
    _check(back)
    return ExactResult(result.status, back, result.objective, result.seconds, step_time_us(back, size_bytes),
                       result.binaries)


def _exact_forward(topology, collective, steps, size_bytes, options, objective, cuts, cutoff,
                   rotation) -> ExactResult:
    """The model of a non-combining collective, solved."""
    model = _Model(topology, collective, steps, size_bytes, objective, cuts, cutoff, rotation)
    if model.impossible:
        return ExactResult(Status.INFEASIBLE, None, None, 0.0, None, 0)
    outcome = _solve(model.prob, options)
    if outcome.status not in (MilpStatus.SOLVED, MilpStatus.INFEASIBLE, MilpStatus.TIMEOUT):
        raise RuntimeError(f"milp-exact on {topology.name} {collective.name} S={steps}: {outcome.message}")
    if not outcome.has_incumbent:
        status = Status.INFEASIBLE if outcome.status is MilpStatus.INFEASIBLE else Status.TIMEOUT
        return ExactResult(status, None, None, outcome.seconds, None, model.binaries)
    status = Status.SOLVED if outcome.status is MilpStatus.SOLVED else Status.TIMEOUT
    schedule = model.schedule(status, outcome.seconds)
    return ExactResult(status, schedule, outcome.objective, outcome.seconds,
                       step_time_us(schedule, size_bytes), model.binaries)


class _Model:
    def __init__(self, topo: Topology, coll: Collective, steps: int, size: float, objective: str,
                 cuts: frozenset[str] = DEFAULT_CUTS, cutoff: float | None = None,
                 rotation: tuple[int, ...] | None = None) -> None:
        self.topo, self.coll, self.S, self.size, self.objective = topo, coll, steps, size, objective
        if objective == "rounds" and not topo.rounds_apply:
            raise InputError(f"{topo.name}: capacities are not whole; use objective='time'")
        self.impossible = False
        self.binaries = 0
        self.quanta_per_round: int | None = None
        self.prob = pulp.LpProblem("exact", pulp.LpMinimize)
        keys = _candidate_sends(topo, coll, steps)
        if keys is None:
            self.impossible = True
            return
        self.send = {(c, i, k): self.prob.add_variable(f"x_{c}_{i}_{k}", cat="Binary") for c, i, k in keys}
        self.binaries = len(self.send) + steps
        self.cuts = frozenset(cuts)
        self._constraints()
        if rotation is not None:
            self._tie(rotation)
        if cutoff is not None:  # a margin well above HiGHS's feasibility tolerance (1e-7)
            self.prob += self.prob.objective <= cutoff * (1 - 1e-5), "cutoff"

    def _tie(self, rotation: tuple[int, ...]) -> None:
        """Invariance under ``rotation``: send (c, l, k) equals the send of its image."""
        chunk_image = chunk_permutation(self.coll, rotation)
        if chunk_image is None:
            raise InputError(f"the symmetry does not map {self.coll.name}'s pre/post conditions onto themselves")
        index = {link.key: i for i, link in enumerate(self.topo.links)}
        for (c, i, k), var in self.send.items():
            link = self.topo.links[i]
            image = index.get((rotation[link.src], rotation[link.dst]))
            if image is None:
                raise InputError("the symmetry is not an automorphism of the topology's links")
            twin = self.send.get((chunk_image[c], image, k))
            self.prob += (var == twin) if twin is not None else (var == 0)

    def _constraints(self) -> None:
        topo, coll, S, prob = self.topo, self.coll, self.S, self.prob
        links = topo.links
        into: dict[tuple[int, int], list[tuple[int, pulp.LpVariable]]] = {}  # (c, rank) -> [(k, var)]
        by_link: dict[tuple[int, int], list[pulp.LpVariable]] = {}  # (link, k) -> vars
        per_chunk: dict[int, list[tuple[int, pulp.LpVariable]]] = {}
        for (c, i, k), var in self.send.items():
            into.setdefault((c, links[i].dst), []).append((k, var))
            by_link.setdefault((i, k), []).append(var)
            per_chunk.setdefault(c, []).append((k, var))
        for c, (pre, post) in enumerate(zip(coll.pre, coll.post)):
            for rank in range(topo.ranks):
                if rank in pre:
                    continue
                got = pulp.lpSum(v for _, v in into.get((c, rank), []))
                if rank in post:
                    prob += got == 1, f"post_{c}_{rank}"
                elif into.get((c, rank)):
                    prob += got <= 1, f"once_{c}_{rank}"
        for (c, i, k), var in self.send.items():
            src = links[i].src
            if src in coll.pre[c]:
                continue
            prob += var <= pulp.lpSum(v for kk, v in into.get((c, src), []) if kk < k), f"hold_{c}_{i}_{k}"
        self.used = [self.prob.add_variable(f"used_{k}", cat="Binary") for k in range(S)]
        cuts = self.cuts
        if "empty_last" in cuts:  # an empty step can be moved to the end
            for k in range(1, S):
                prob += self.used[k] <= self.used[k - 1], f"empty_last_{k}"
        if "min_steps" in cuts:  # at least steps-bound non-empty steps, the first ones
            first = lower_bounds(topo, coll).steps
            for k in range(min(first, S)):
                self.used[k].lowBound = 1
        if "used_send" in cuts:  # tightens the LP: a send makes its step used
            for (c, i, k), var in self.send.items():
                prob += self.used[k] >= var, f"used_send_{c}_{i}_{k}"
        bound = lower_bounds(topo, coll)
        quanta = self._quanta()
        if quanta is None:
            self.rounds = None
            self._continuous_time(by_link)
        else:
            self._quantized(by_link, bound, *quanta)
        # the objective is at least the true time, which is at least the time bound
        if "time_bound" in cuts:
            prob += prob.objective >= bound.time_us(self.size) * (1 - 1e-9), "time_bound"
        if "order_chunks" in cuts:
            self._order_chunks(per_chunk)

    def _sets(self):
        """(link indices, capacity, bandwidth, alpha or None) for every link and group."""
        topo = self.topo
        index = {l.key: i for i, l in enumerate(topo.links)}
        sets = [([i], topo.link_capacity(l), l.bandwidth, l.alpha) for i, l in enumerate(topo.links)]
        sets += [([index[key] for key in g.links], topo.group_capacity(g), g.bandwidth, None) for g in topo.groups]
        return sets

    def _quanta(self) -> tuple[int, list[int], float, float] | None:
        """(L, per-set ratio, time of one quantum, alpha) of the integer formulation, or None.

        "rounds": L = 1, ratio = capacity, quantum = tau, alpha = the largest link alpha.
        "time": exact when there are no groups, alphas are equal and every bandwidth is a whole
        multiple of the smallest: a step's bandwidth time is then a whole number of quanta
        tau / L with L the lcm of the multiples (ndv2: tau / 2). Otherwise None (continuous t).
        """
        topo, sets = self.topo, self._sets()
        tau = self.size / self.coll.buffer_chunks / (topo.min_link_bandwidth * 1e3)
        if self.objective == "rounds":
            return 1, [cap for _, cap, _, _ in sets], tau, max(l.alpha for l in topo.links)
        ratios = [bw / topo.min_link_bandwidth for _, _, bw, _ in sets]
        whole = [round(r) for r in ratios]
        if topo.groups or len({l.alpha for l in topo.links}) != 1 or any(
                abs(r - w) > 1e-9 * r or w != cap for r, w, (_, cap, _, _) in zip(ratios, whole, sets)):
            return None
        L = math.lcm(*whole)
        return L, whole, tau / L, topo.links[0].alpha

    def _quantized(self, by_link, bound, L: int, ratios: list[int], quantum: float, alpha: float) -> None:
        """Integer q[k] quanta per step: L * load_set <= ratio_set * q[k]; time alpha*used + quantum*q."""
        prob, S, coll, cuts = self.prob, self.S, self.coll, self.cuts
        sets = self._sets()
        qmax = max(math.ceil(L * len(coll.pre) * len(m) / ratio) for (m, _, _, _), ratio in zip(sets, ratios))
        self.rounds = [self.prob.add_variable(f"q_{k}", 0, qmax, cat="Integer") for k in range(S)]
        self.quanta_per_round = L if self.objective == "rounds" else None
        for k in range(S):
            prob += self.rounds[k] <= qmax * self.used[k], f"q_used_{k}"
            prob += self.rounds[k] >= self.used[k], f"used_q_{k}"
            for j, ((members, _, _, _), ratio) in enumerate(zip(sets, ratios)):
                load = [v for i in members for v in by_link.get((i, k), [])]
                if load:
                    prob += L * pulp.lpSum(load) <= ratio * self.rounds[k], f"cap_{j}_{k}"
        prob += pulp.lpSum(alpha * self.used[k] + quantum * self.rounds[k] for k in range(S))
        total = pulp.lpSum(self.rounds)
        # The flow LPs bound sum over steps of max load / capacity (fractional rounds), which a
        # quantum count q / L never undercuts (capacities here are the bandwidth multiples).
        if bound.rounds_per_chunk is not None and "rounds_bound" in cuts:
            prob += total >= math.ceil(L * bound.rounds_per_chunk * coll.chunks_per_rank - 1e-6), "rounds_bound"
        lp = step_rounds_bound(self.topo, coll, S) if "steps_lp" in cuts else None
        if lp is not None and math.isfinite(lp):
            # pad to S steps of >= 1 round: max(1, q/L) <= q/L + (L-1)/L on a used step, 1 on an empty one
            prob += total - pulp.lpSum(self.used) >= math.ceil(L * (lp - S) - 1e-6), "steps_rounds_bound"

    def _continuous_time(self, by_link) -> None:
        """t[k] >= alpha_l * (l used in k) + load_l * b / bw_l, t[k] >= load_g * b / bw_g."""
        prob, S, links = self.prob, self.S, self.topo.links
        b = self.size / self.coll.buffer_chunks
        uniform = len({l.alpha for l in links}) == 1
        t = [prob.add_variable(f"t_{k}", 0) for k in range(S)]
        for k in range(S):
            prob += self.used[k] * len(self.send) >= pulp.lpSum(
                v for i in range(len(links)) for v in by_link.get((i, k), [])), f"used_{k}"
            for j, (members, _, bw, alpha) in enumerate(self._sets()):
                load = [v for i in members for v in by_link.get((i, k), [])]
                if not load:
                    continue
                term = pulp.lpSum(load) * (b / (bw * 1e3))
                if alpha is None:
                    prob += t[k] >= term, f"time_{j}_{k}"
                elif uniform:
                    prob += t[k] >= alpha * self.used[k] + term, f"time_{j}_{k}"
                else:
                    y = self.prob.add_variable(f"y_{j}_{k}", 0, 1)
                    for n, v in enumerate(load):
                        prob += y >= v, f"y_{j}_{k}_{n}"
                    prob += t[k] >= alpha * y + term, f"time_{j}_{k}"
        prob += pulp.lpSum(t)

    def _order_chunks(self, per_chunk) -> None:
        """Interchangeable chunks sorted by sum over sends of (step + 1): relabelling is free."""
        classes: dict[tuple[frozenset, frozenset], list[int]] = {}
        for c, key in enumerate(zip(self.coll.pre, self.coll.post)):
            if c in per_chunk:
                classes.setdefault(key, []).append(c)
        for members in classes.values():
            for a, b in zip(members, members[1:]):
                weight = lambda c: pulp.lpSum((k + 1) * v for k, v in per_chunk[c])  # noqa: E731
                self.prob += weight(a) <= weight(b), f"order_{a}_{b}"

    def schedule(self, status: Status, seconds: float) -> Schedule:
        topo, S = self.topo, self.S
        per_step: list[list[Send]] = [[] for _ in range(S)]
        for (c, i, k), var in self.send.items():
            if value(var) > 0.5:
                l = topo.links[i]
                per_step[k].append(Send(c, l.src, l.dst))
        steps = []
        for k, sends in enumerate(per_step):
            if not sends:
                continue
            if self.quanta_per_round == 1:
                rounds = int(value(self.rounds[k]))
            else:
                rounds = _least_rounds(topo, sends)
            steps.append(Step(tuple(sorted(sends)), rounds))
        schedule = Schedule(topo, self.coll, tuple(steps), {
            "synthesizer": "milp-exact", "steps": S, "chunks": self.coll.chunks_per_rank,
            "size": self.size, "solve_seconds": round(seconds, 4), "status": status.value,
            "objective": self.objective,
        })
        _check(schedule)
        return schedule


def _least_rounds(topo: Topology, sends: list[Send]) -> int | None:
    if not topo.rounds_apply:
        return None
    per_link: dict[tuple[int, int], int] = {}
    for s in sends:
        per_link[(s.src, s.dst)] = per_link.get((s.src, s.dst), 0) + 1
    need = max(math.ceil(n / topo.link_capacity(topo.link(*key))) for key, n in per_link.items())
    for g in topo.groups:
        n = sum(per_link.get(key, 0) for key in g.links)
        need = max(need, math.ceil(n / topo.group_capacity(g)))
    return need


def _check(schedule: Schedule) -> None:
    checked(schedule, "milp-exact")


# ---------------------------------------------------------------------------- search
def _candidate_sends(topo: Topology, coll: Collective, steps: int) -> list[tuple[int, int, int]] | None:
    """(chunk, link index, step) of every send the pruning keeps; None if some chunk cannot
    reach a rank that needs it within ``steps`` hops."""
    dist, out = topo.hop_distances, []
    for c, (pre, post) in enumerate(zip(coll.pre, coll.post)):
        need = post - pre
        if not need:
            continue
        near = [min(dist[h][r] for h in pre) for r in range(topo.ranks)]
        if max(near[d] for d in need) > steps:
            return None
        reach = [min(dist[r][d] for d in need) for r in range(topo.ranks)]
        out += [(c, i, k) for k in range(steps) for i, l in enumerate(topo.links)
                if l.dst not in pre and near[l.src] <= k and reach[l.dst] <= steps - 1 - k]
    return out


def count_binaries(topology: Topology, collective: Collective, steps: int) -> int:
    """Binaries of the instance (sends after pruning, plus one per step), without building it;
    0 when it is impossible in ``steps`` steps."""
    if collective.combining:
        (part,) = DUAL.apply(Part.of(topology, collective))
        topology, collective = part.topology, part.collective
    keys = _candidate_sends(topology, collective, steps)
    return 0 if keys is None else len(keys) + steps


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def best_exact(
    topology: Topology,
    collective_name: str,
    size_bytes: float,
    max_chunks: int = 6,
    max_steps: int | None = None,
    time_limit: float = 60,
    solver: str = "highs",
    root: int | None = None,
    objective: str = "time",
    max_binaries: int = MAX_BINARIES,
    progress: Callable[[str], None] = _stderr,
    rotation: tuple[int, ...] | None = None,
    budget: float | None = None,
) -> BestExact:
    """The least step-model time at ``size_bytes`` over C = 1..max_chunks chunks per rank and
    S = steps bound .. max_steps (default: steps bound + 2).

    ``time_limit`` bounds each instance; ``budget`` (seconds, None: no limit) the whole search:
    once it is spent the remaining instances are skipped (reported "skipped"), so a machine whose
    instances are hard costs at most the budget, not instances x time_limit.

    Instances with more than ``max_binaries`` binaries are skipped (reported "skipped"). With
    ``objective="time"`` each instance after the first is asked only for schedules faster than
    the best so far (a cutoff), so "no better" is a proof that it cannot win. One progress line
    per attempt on stderr. Allreduce: for each C the best reduce_scatter + the best allgather.
    """
    clock = _Budget(budget)
    if collective_name == "allreduce":
        coll = make_collective("allreduce", topology.ranks)
        bound_us = lower_bounds(topology, coll).time_us(size_bytes)
        best: tuple[float, Schedule] | None = None
        attempts: list[Attempt] = []
        for chunks in range(1, max_chunks + 1):
            def best_part(part: Part, chunks: int = chunks) -> Schedule | None:
                found = _search(topology, part.collective.name, None, size_bytes, [chunks], max_steps, time_limit,
                                solver, objective, max_binaries, progress, attempts, rotation, clock)
                return None if found is None else found[1]

            whole = make_collective("allreduce", topology.ranks, chunks=chunks)
            schedule = solve_reduced(topology, whole, best_part, solves=_not_allreduce)  # parts: their own duals
            if schedule is None:
                continue
            schedule = schedule.with_meta(composition=COMPOSITION.name, steps=len(schedule.steps))
            _check(schedule)
            cost = step_time_us(schedule, size_bytes)
            if best is None or cost < best[0] - 1e-9:
                best = (cost, schedule)
        return BestExact(None if best is None else best[1], None if best is None else best[0], bound_us,
                         tuple(attempts))
    fixed = ":" in collective_name or collective_name.endswith(".json")
    base = make_collective(collective_name, topology.ranks, root=root)
    attempts = []
    found = _search(topology, collective_name, root, size_bytes, [1] if fixed else range(1, max_chunks + 1),
                    max_steps, time_limit, solver, objective, max_binaries, progress, attempts, rotation, clock)
    return BestExact(None if found is None else found[1], None if found is None else found[0],
                     lower_bounds(topology, base).time_us(size_bytes), tuple(attempts))


def _not_allreduce(collective: Collective) -> bool:
    """What ``_search`` solves itself: every collective but allreduce (combining ones as duals)."""
    return not COMPOSITION.applies(collective)


class _Budget:
    """Seconds left of a search's budget (None: unlimited)."""

    def __init__(self, seconds: float | None):
        self.deadline = None if seconds is None else time.perf_counter() + seconds

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.perf_counter()


def _search(topology, name, root, size_bytes, chunk_counts, max_steps, time_limit, solver, objective,
            max_binaries, progress, attempts, rotation=None,
            clock: _Budget | None = None) -> tuple[float, Schedule] | None:
    best: tuple[float, Schedule] | None = None
    floor = lower_bounds(topology, make_collective(name, topology.ranks, root=root)).time_us(size_bytes)
    for chunks in chunk_counts:
        coll = make_collective(name, topology.ranks, root=root, chunks=chunks)
        first = max(1, lower_bounds(topology, coll).steps)
        last = first + 2 if max_steps is None else max_steps
        for steps in range(first, last + 1):
            label = f"{topology.name} {name} C={chunks} S={steps}"
            size = count_binaries(topology, coll, steps)
            if size > max_binaries:
                attempts.append(Attempt(chunks, steps, Status.SKIPPED, 0.0, None, f"{size} binaries"))
                progress(f"{label}: skipped ({size} binaries > {max_binaries})")
                continue
            left = None if clock is None else clock.left()
            if left is not None and left <= 0:
                attempts.append(Attempt(chunks, steps, Status.SKIPPED, 0.0, None, "budget spent"))
                progress(f"{label}: skipped (the search's budget is spent)")
                continue
            cutoff = best[0] if best is not None and objective == "time" else None
            limit = time_limit if left is None else min(time_limit, left)
            result = exact_schedule(topology, coll, steps, size_bytes, limit, solver, objective,
                                    cutoff=cutoff, rotation=rotation)
            below = cutoff is not None and result.status is Status.INFEASIBLE
            attempt = Attempt(chunks, steps, result.status, result.seconds, result.time_us,
                              "no better" if below else "")
            attempts.append(attempt)
            shown = "" if result.time_us is None else f", {result.time_us:.3f} us"
            progress(f"{label}: {attempt.label} {result.seconds:.1f} s{shown}")
            if result.schedule is not None and (best is None or result.time_us < best[0] - 1e-9):
                best = (result.time_us, result.schedule)
            if best is not None and best[0] <= floor * (1 + 1e-9):
                progress(f"{topology.name} {name}: {best[0]:.3f} us meets the bound; search stops")
                return best
    return best
