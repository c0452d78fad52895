"""The MILP router end to end: sketch -> routing (MILP) -> ordering (LP per step) -> timing.

``synthesize`` runs the three stages for a non-combining collective, reduce_scatter and reduce
by duality (the non-combining dual on the reversed topology, run backwards), and allreduce as
reduce_scatter then allgather. Every stage reports one progress line; the schedule is verified
before it is returned, and the result carries the bound gap at the sketch's size.

With a symmetry in the sketch every stage after routing works on one representative chunk per
orbit of the symmetry group (``synth.core.orbits``): the ordering LPs, the timing merge and the
hoisting see the representatives, with the full schedule's loads; the full schedule is
expanded once at the end and verified whole.

Through switches that compute (``switch_scope`` says where): the same collective is planned a
second time with the switches' multicast as hyperedges in the ordering
(``synth.milp.multicast``), a combining part as its dual with echoed multicasts run backwards
as switch reductions, allreduce as a pipeline of pieces reduced and multicast through the
switches (``synth.milp.pipeline``), ports relieved onto links where that shortens a step
(``synth.milp.relief``); the faster of the two plans at the sketch's size is kept (ties: the
switch plan), and a progress line says which.

Status: ``solved`` when the routing MILP was solved (or there was nothing to route: one
machine); ``timeout`` when the routing MILP stopped at its time limit with an incumbent plan
(the schedule is valid, the plan is not proven optimal), or without one (the ordering then
routes on its own, and the result says so).

>>> from synth.core.library import resolve_topology
>>> from synth.milp.sketch import default_sketch
>>> topo = resolve_topology("ring:4")
>>> result = synthesize(topo, "allgather", default_sketch(topo, "allgather", 1 << 20)[0])
>>> result.status.value, result.percent_of_bound > 50
('solved', True)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from synth.bounds.lower_bounds import lower_bounds
from synth.bounds.solver import MilpOptions
from synth.core.collective import Collective
from synth.core.collectives import allgather, make_collective, reduce_scatter
from synth.core.errors import InputError
from synth.core.orbits import Quotient
from synth.core.planning import on_machine, planning_view
from synth.core.reductions import COMPOSITION, DUAL, Part, Reduction, reduction_for, solve_reduced
from synth.core.schedule import Schedule, Status
from synth.core.symmetry import chunk_permutation
from synth.core.topology import Topology
from synth.cost import format_size, simulate_us, step_time_us
from synth.milp.exact import best_exact
from synth.milp.hoist import hoist_sends
from synth.milp.multicast import Hyperedges, dual_with_switches
from synth.milp.orbit_cost import orbit_simulate_us, orbit_step_loads
from synth.milp.ordering import OrderingRules, order_sends
from synth.milp.pipeline import Piece, pipelined
from synth.milp.relief import multicast_fanouts, relieve_ports
from synth.milp.routing import RoutePlan, route
from synth.milp.sketch import Sketch
from synth.milp.timing import merge_steps_at_size
from synth.verify import checked

Progress = Callable[[str], None]
BLOCKS = (1, 2, 3)  # rounds per block the ordering tries, in order, while longer blocks pay (order_sends)


@dataclass(frozen=True)
class StageTimes:
    routing: float
    ordering: float
    timing: float
    exact: float = 0.0  # the time-expanded MILP on one small machine
    verify: float = 0.0  # expanding a symmetric schedule and verifying it whole


@dataclass(frozen=True)
class RouterResult:
    schedule: Schedule
    status: Status  # SOLVED: every routing MILP solved (or nothing to route); TIMEOUT: an incumbent plan
    stages: StageTimes
    size: int
    time_us: float
    simulated_us: float
    bound_us: float
    plans: tuple[RoutePlan, ...]

    @property
    def percent_of_bound(self) -> float:
        return 100.0 * self.bound_us / self.time_us if self.time_us > 0 else 100.0


def synthesize(topology: Topology, collective: str, sketch: Sketch, options: MilpOptions | None = None,
               root: int | None = None, progress: Progress | None = None,
               judge: Callable[[Schedule], float] | None = None) -> RouterResult:
    """Route, order and time ``collective`` on ``topology`` as the sketch says (module docstring).
    ``judge``: the time (us) by which the plan through the switches and the point-to-point one are
    compared (a runtime's terms at the size, where the switch's ports run at another efficiency
    than the links); None: the step model at the sketch's size."""
    options = options or MilpOptions()
    say = progress or (lambda line: None)
    if not topology.rounds_apply:
        view = planning_view(topology)
        say(view.sources[-1])
        return _on_machine(synthesize(view, collective, sketch, options, root, progress, judge), topology)
    clock = _StageClock()
    coll = _collective(topology, collective, root, sketch)
    planned = _plan(topology, coll, collective, sketch, options, root, say, clock, switches=False)
    why = switch_scope(topology, coll)
    if why is None:
        planned = _fanned_out(planned, topology, sketch.size, say)
        through = _plan(topology, coll, collective, sketch, options, root, say, clock, switches=True)
        a, b = (through.took, planned.took) if judge is None else (judge(through.timed), judge(planned.timed))
        kept = a <= b * (1 + 1e-9)
        say(f"switch: through the switch(es) {a:.1f} us, point to point {b:.1f} us at {format_size(sketch.size)}"
            f"{'' if judge is None else ' under the runtime terms'}: "
            f"{'the switch plan' if kept else _p2p_name(planned)} kept")
        planned = through if kept else planned
    elif topology.switches:
        say(f"switch: not used: {why}")
    return _result(topology, planned.draft, planned.timed, sketch, options, clock, planned.took, planned.simulated)


MAX_SWITCH_CELLS = 8192  # ranks x chunks the ordering plans through switches, in full (h100x4: 2048)


def switch_scope(topology: Topology, coll: Collective) -> str | None:
    """Why the router does not also plan ``coll`` through ``topology``'s switches (None: it
    does): it needs a switch that multicasts inside one machine (on the reversed topology for
    a combining collective's dual: one that reduces), and it plans the full schedule (no
    symmetry), so at most MAX_SWITCH_CELLS ranks x chunks (an allreduce plans one piece of
    one chunk per rank)."""
    if not topology.switches:
        return "the machine has no switch"
    seen = topology.reversed() if coll.combining and reduction_for(coll) is DUAL else topology
    if Hyperedges.of(seen) is None:
        ability = "reduces" if seen is not topology else "multicasts"
        return f"no switch {ability} inside one machine (the router uses switch multicast and its dual, reduce)"
    chunks = coll.ranks if reduction_for(coll) is COMPOSITION else coll.chunks
    if coll.ranks * chunks > MAX_SWITCH_CELLS:
        return (f"{coll.ranks} ranks x {chunks} chunks: through switches the router plans the full schedule, "
                f"without the symmetry, up to {MAX_SWITCH_CELLS}")
    return None


def _p2p_name(planned: "_Planned") -> str:
    return "point to point" + (" (fan-outs as multicasts)" if planned.timed.switch_count else "")


def _fanned_out(planned: "_Planned", topology: Topology, size: int, say: Progress) -> "_Planned":
    """The point-to-point plan with its fan-outs through multicast switches made entries where
    no step gets slower (``synth.milp.relief.multicast_fanouts``), when that makes the plan
    faster at the size."""
    hyper = Hyperedges.of(topology)
    if hyper is None:
        return planned
    fanned = multicast_fanouts(planned.timed, size, hyper.switches)
    took = step_time_us(fanned, size)
    if fanned is planned.timed or took >= planned.took * (1 - 1e-9):
        return planned  # kept only when faster: the same time point to point stays plain
    say(f"point to point, fan-outs as multicasts: {fanned.switch_count} entries, {planned.took:.1f} -> "
        f"{took:.1f} us at {format_size(size)}")
    return replace(planned, timed=fanned, took=took, simulated=simulate_us(fanned, size))


@dataclass(frozen=True)
class _Planned:
    """One plan, timed: its draft, its schedule (full), and its step-model and simulated times."""

    draft: "_Draft"
    timed: Schedule
    took: float
    simulated: float


def _plan(topology, coll, collective, sketch, options, root, say, clock, switches: bool) -> _Planned:
    """Route, order and time ``coll``; ``switches``: through the machine's switches too (no
    exact stage then: it plans point to point), with port relief after the timing."""
    if switches and reduction_for(coll) is COMPOSITION:
        draft = _pipelined_draft(topology, coll, sketch, options, say, clock)
    else:
        draft = _route_and_order(topology, coll, sketch, options, say, clock, switches)
    exact_line = None
    if not switches and _exact_applies(topology, collective):
        draft, exact_line = _exact_stage(draft, topology, collective, sketch, options, root, clock)
    before = _time_us(draft.joined, draft.quotient, sketch.size)
    started = time.perf_counter()
    # verified (the representatives, with one)
    timed = merge_steps_at_size(draft.joined, sketch.size, quotient=draft.quotient)
    if switches:
        timed = relieve_ports(timed, sketch.size)
    clock.timing += time.perf_counter() - started
    took = _time_us(timed, draft.quotient, sketch.size)
    simulated = (simulate_us(timed, sketch.size) if draft.quotient is None
                 else orbit_simulate_us(draft.quotient, timed, sketch.size))
    if exact_line is not None:
        say(exact_line)
    moved = f", {timed.meta['relieved_ports']} deliveries moved from switch ports to links" \
        if "relieved_ports" in timed.meta else ""
    say(f"timing{' (through switches)' if switches else ''}: {len(draft.joined.steps)} -> {len(timed.steps)} steps "
        f"at {format_size(sketch.size)}: {before:.1f} -> {took:.1f} us (event simulation {simulated:.1f} us)"
        f"{moved}, {clock.timing:.2f} s")
    if draft.quotient is not None:
        timed = _expanded(timed, draft, say, clock)
    return _Planned(draft, timed, took, simulated)


def _pipelined_draft(topology, coll, sketch, options, say, clock) -> "_Draft":
    """Allreduce through switches as a pipeline of ``coll.chunks_per_rank`` pieces
    (``synth.milp.pipeline``): one piece's allgather, and its reduce-scatter two ways (as the
    ordering chooses, and inside machines by switch reductions alone where a switch covers
    every machine), each planned at the piece's size; the pipeline faster at the sketch's size
    is kept."""
    pieces = coll.chunks_per_rank
    piece_sketch = replace(sketch, size=max(1, sketch.size // pieces))
    gather, gather_plan = _switch_part(topology, piece_sketch, options, say, clock, reverse=False)
    best = None
    reducing = Hyperedges.of(topology.reversed())
    for inside in (True, False) if reducing is not None and reducing.covers_machines() else (True,):
        scatter, plan = _switch_part(topology, piece_sketch, options, say, clock, reverse=True, inside=inside)
        piece = Piece(scatter, gather)
        for lag in range(1, len(scatter.steps) + len(gather.steps) + 1):
            whole = pipelined(piece, pieces, lag)
            took = step_time_us(relieve_ports(merge_steps_at_size(whole, sketch.size), sketch.size), sketch.size)
            if best is None or took < best[0] - 1e-9:
                best = (took, whole, (plan, gather_plan))
        say(f"pipeline (allreduce, {pieces} pieces, reduce_scatter {'with' if inside else 'without'} links inside "
            f"machines, lags 1..{len(scatter.steps) + len(gather.steps)}): best so far {best[0]:.1f} us at "
            f"{format_size(sketch.size)}, lag {best[1].meta['pipeline']['lag']}")
    return _Draft(Schedule(topology, coll, best[1].steps, best[1].meta), coll, None, best[2])


def _switch_part(topology, sketch, options, say, clock, reverse: bool, inside: bool = True):
    """One piece (one chunk per rank) through the switches: its allgather, or (``reverse``) its
    reduce_scatter as the echoed allgather on the reversed topology run backwards; ``inside``:
    links inside machines allowed (else switch entries carry everything inside a machine)."""
    n = topology.ranks
    if not reverse:
        schedule, plan, _ = _forward(topology, allgather(n), sketch, options, say, clock,
                                     "allgather piece, through switches", (), Hyperedges.of(topology))
        return schedule, plan
    seen = topology.reversed()
    label = f"reduce_scatter piece as reversed allgather, through switches{'' if inside else ' alone'}"
    forward, plan, _ = _forward(seen, allgather(n), _ReversedSketch(sketch, topology), options, say, clock, label,
                                (), Hyperedges.of(seen, echo=True), links_inside=inside)
    return dual_with_switches(forward, topology, reduce_scatter(n)), plan


@dataclass(frozen=True)
class _Draft:
    """The schedule so far (representatives when ``quotient`` is set), its collective, and the
    routing plans it came from."""

    joined: Schedule
    coll: Collective
    quotient: Quotient | None
    plans: tuple[RoutePlan, ...]


@dataclass(frozen=True)
class _Routed:
    """A part routed and ordered: its schedule (representatives when ``quotient`` is set) and
    the routing plans it came from."""

    schedule: Schedule
    plans: tuple[RoutePlan, ...]
    quotient: Quotient | None


def _route_and_order(topology, coll, sketch, options, say, clock, switches: bool = False) -> _Draft:
    """Routing and ordering of every non-combining part ``synth.core.reductions`` makes of
    ``coll`` (a combining collective as its dual on the reversed topology, allreduce as
    reduce_scatter then allgather), joined back with their quotients. ``switches``: each part
    also through its topology's multicast switches (``synth.milp.multicast``; with the echo
    in a dual part, so it runs backwards as switch reductions), without a quotient."""
    generators = sketch.symmetry_generators(topology)

    def solve_part(part: Part) -> _Routed:
        part_sketch = _ReversedSketch(sketch, topology) if part.reversed else sketch
        hyper = Hyperedges.of(part.topology, echo=part.reversed) if switches else None
        label = part.label if hyper is None else f"{part.label}, {hyper.through}"
        schedule, plan, quotient = _forward(part.topology, part.collective, part_sketch, options, say, clock,
                                            label, () if hyper is not None else generators, hyper)
        return _Routed(schedule, (plan,), quotient)

    routed = solve_reduced(topology, coll, solve_part, _join_routed)
    return _Draft(routed.schedule, coll, routed.quotient, routed.plans)


def _join_routed(reduction: Reduction, part: Part, answers) -> _Routed:
    """The parts' schedules mapped back to ``part``: with quotients, as representatives of
    ``part``'s quotient by the same generators (one for both halves of the allreduce
    composition, else the halves in full)."""
    plans = tuple(plan for answer in answers for plan in answer.plans)
    if reduction is DUAL:
        (forward,) = answers
        if forward.schedule.switch_count:
            return _Routed(dual_with_switches(forward.schedule, part.topology, part.collective), plans, None)
        if forward.quotient is None:
            return _Routed(reduction.invert(part, [forward.schedule]), plans, None)
        quotient = Quotient.of(part.topology, part.collective, [tuple(g) for g in forward.quotient.generators])
        if not np.array_equal(quotient.reps, forward.quotient.reps):
            raise RuntimeError("the dual's representatives differ from the collective's (a bug)")
        return _Routed(reduction.invert(part, [forward.schedule], quotient.rep_collective), plans, quotient)
    first, second = answers
    if first.quotient is None or second.quotient is None:
        schedules = [_full(answer.schedule, answer.quotient) for answer in answers]
        return _Routed(reduction.invert(part, schedules), plans, None)
    # chunk c is reduced at, then gathered from, its owner: one quotient for the whole
    gens = [tuple(g) for g in first.quotient.generators]
    rs_coll = first.quotient.collective
    quotient = Quotient.of(part.topology, part.collective, gens, [chunk_permutation(rs_coll, g) for g in gens])
    return _Routed(reduction.invert(part, [first.schedule, second.schedule], quotient.rep_collective), plans,
                   quotient)


def _exact_stage(draft: _Draft, topology, collective, sketch, options, root, clock) -> tuple[_Draft, str]:
    """The time-expanded MILP over C and S on one small machine; its schedule replaces the
    draft when it is faster at the size. Returns the draft kept and the stage's line."""
    started = time.perf_counter()
    found = best_exact(topology, collective, sketch.size, max_chunks=sketch.chunk_up,
                       time_limit=options.time_limit or 60.0, solver=options.solver, root=root,
                       progress=lambda line: None, rotation=sketch.rank_rotation(topology),
                       budget=options.time_limit or 60.0)
    clock.exact += time.perf_counter() - started
    line = _exact_line(found, clock.exact)
    if found.schedule is None or found.time_us >= _time_us(draft.joined, draft.quotient, sketch.size) - 1e-9:
        return draft, line + ": the pipelined ordering stays (faster or equal)"
    coll = (draft.coll if found.schedule.collective.chunks_per_rank == draft.coll.chunks_per_rank
            else found.schedule.collective)
    joined = Schedule(topology, coll, found.schedule.steps, found.schedule.meta)
    plans = tuple(replace(p, status=Status.SOLVED, planned=False, message="the exact stage's schedule is kept")
                  for p in draft.plans)
    return _Draft(joined, joined.collective, None, plans), line + ": kept (faster than the pipelined ordering)"


def _expanded(timed: Schedule, draft: _Draft, say: Progress, clock: _StageClock) -> Schedule:
    """The full schedule the representatives stand for, verified whole."""
    quotient = draft.quotient
    started = time.perf_counter()
    if timed.send_count * quotient.order > PROGRESS_SENDS:
        say(f"expanding {timed.send_count} representative sends x {quotient.order} rotations and verifying ...")
    full = checked(quotient.expand(timed, draft.coll), "the router's expansion of its representatives")
    clock.verify += time.perf_counter() - started
    say(f"expanded: {len(quotient.reps)} representative chunks x {quotient.order} rotations -> "
        f"{full.send_count} sends, verified whole, {clock.verify:.2f} s")
    return full


def _result(topology, draft: _Draft, timed: Schedule, sketch, options, clock, took: float,
            simulated: float) -> RouterResult:
    """The router's result: SOLVED when every routing MILP was solved (or nothing was routed),
    the bound at the sketch's size, and the meta every schedule file carries."""
    status = Status.SOLVED if all(p.status is Status.SOLVED for p in draft.plans) else Status.TIMEOUT
    symmetry = None if draft.quotient is None else draft.quotient.ranks
    bound = lower_bounds(topology, draft.coll, symmetry=symmetry).time_us(sketch.size)
    meta = {
        "synthesizer": "milp",
        "status": status.value,
        "solver": options.solver,
        "sketch": sketch.to_dict(),
        "chunks_per_rank": draft.coll.chunks_per_rank,
        "stage_seconds": {"routing": round(clock.routing, 3), "ordering": round(clock.ordering, 3),
                          "timing": round(clock.timing, 3), "exact": round(clock.exact, 3),
                          "verify": round(clock.verify, 3)},
        "size": sketch.size,
        "time_us": round(took, 4),
        "bound_us": round(bound, 4),
        "percent_of_bound": round(100.0 * bound / took, 2) if took > 0 else 100.0,
    }
    meta.update({key: timed.meta[key] for key in ("pipeline", "relieved_ports") if key in timed.meta})
    schedule = Schedule(topology, draft.coll, timed.steps, meta)
    times = StageTimes(clock.routing, clock.ordering, clock.timing, clock.exact, clock.verify)
    return RouterResult(schedule, status, times, sketch.size, took, simulated, bound, draft.plans)


def _on_machine(result: RouterResult, topology: Topology) -> RouterResult:
    """A result planned on ``planning_view(topology)`` put back on the machine, verified there;
    times are the view's (the same bandwidths), the bound is the machine's own."""
    schedule = checked(on_machine(result.schedule, topology), "the router (planned with whole capacities)")
    bound = lower_bounds(topology, schedule.collective).time_us(result.size)
    percent = round(100.0 * bound / result.time_us, 2) if result.time_us > 0 else 100.0
    schedule = schedule.with_meta(bound_us=round(bound, 4), percent_of_bound=percent,
                                  planning="capacities rounded to whole chunks per round")
    return replace(result, schedule=schedule, bound_us=bound)


PROGRESS_SECONDS = 5.0  # a stage running longer than this reports how far it is, this often
PROGRESS_SENDS = 200_000  # full schedules this big announce their expansion and verification


class _Ticker:
    """The ordering's progress callback: a line every PROGRESS_SECONDS, none for short runs."""

    def __init__(self, say: Progress, label: str, scale: int):
        self.say, self.label, self.scale = say, label, scale
        self.started = self.last = time.perf_counter()

    def __call__(self, rounds: int, needs_left: int) -> None:
        now = time.perf_counter()
        if now - self.last >= PROGRESS_SECONDS:
            self.last = now
            self.say(f"{self.label}: round {rounds}, {needs_left * self.scale} deliveries left, "
                     f"{now - self.started:.0f} s")


@dataclass
class _StageClock:
    routing: float = 0.0
    ordering: float = 0.0
    timing: float = 0.0
    exact: float = 0.0
    verify: float = 0.0


def _time_us(schedule: Schedule, quotient: Quotient | None, size: int) -> float:
    """Step-model time of ``schedule``, or of the full schedule its representatives stand for."""
    return step_time_us(schedule, size) if quotient is None else orbit_step_loads(quotient, schedule).time_us(size)


def _full(schedule: Schedule, quotient: Quotient | None) -> Schedule:
    return schedule if quotient is None else quotient.expand(schedule)


def _quotient(topology: Topology, coll: Collective, generators, say: Progress, label: str,
              rotation=None) -> Quotient | None:
    """The quotient by the sketch's symmetry group, or by its rotation alone when the group is
    too big: where some element maps a group (a NIC shared by several GPUs) onto itself, a step
    would have to carry the send and its image through it together, which one round may not
    fit. None (with a line saying why) when neither applies to this collective."""
    if not generators:
        return None
    tries = [list(generators)]
    if rotation is not None and [tuple(rotation)] != tries[0]:
        tries.append([tuple(rotation)])
    why = None
    for gens in tries:
        try:
            quotient = Quotient.of(topology, coll, gens)
        except InputError as exc:
            why = str(exc)
            continue
        if quotient.resources.max_multiplicity <= 1:
            return quotient
        why = "an element of the symmetry group maps a group of links onto itself"
    say(f"symmetry ({label}): not used by the ordering: {why}")
    return None


def _collective(topology: Topology, spec: str, root: int | None, sketch: Sketch) -> Collective:
    kind = spec.partition(":")[0]
    if kind in ("alltoallv", "custom") or spec.endswith(".json"):
        if sketch.chunk_up != 1:
            raise InputError(f"sketch: chunk_up {sketch.chunk_up} does not apply to {kind}: its chunks "
                             "come from the file (use chunk_up 1)")
        return make_collective(spec, topology.ranks, root=root)
    return make_collective(spec, topology.ranks, root=root, chunks=sketch.chunk_up)


def _forward(topology, coll, sketch, options, say, clock, label, generators=(),
             hyper: Hyperedges | None = None, links_inside: bool = True) -> tuple[Schedule, RoutePlan, Quotient | None]:
    """Routing and ordering of a non-combining collective on ``topology``: one ordering per block
    length in BLOCKS, each merged by the timing stage, the fastest at the sketch's size kept.
    With a quotient (the sketch's symmetry) the schedule returned holds its representatives;
    with ``hyper`` the steps also hold switch multicast entries (``links_inside`` False: and
    only they move chunks inside a machine)."""
    started = time.perf_counter()
    quotient = _quotient(topology, coll, list(generators), say, label, sketch.rank_rotation(topology))
    plan = route(topology, coll, sketch, options, quotient, frozenset() if hyper is None else hyper.machines())
    clock.routing += time.perf_counter() - started
    say(_plan_line(label, plan, options))
    rules = _rules(topology, coll, sketch, plan, quotient)
    if not links_inside:
        machine = topology.machine_of
        rules = replace(rules, allowed=rules.allowed & np.array([machine[l.src] != machine[l.dst]
                                                                  for l in topology.links], dtype=bool))
    best = None
    tried = []
    for block in BLOCKS:
        started = time.perf_counter()
        ticker = _Ticker(say, f"ordering ({label}, block {block})", 1 if quotient is None else quotient.order)
        schedule = order_sends(topology, coll, rules, solver=options.solver, block=block, quotient=quotient,
                               progress=ticker, hyperedges=hyper)
        clock.ordering += time.perf_counter() - started
        started = time.perf_counter()
        merged = merge_steps_at_size(schedule, sketch.size, quotient=quotient)
        hoisted = hoist_sends(merged, sketch.size, quotient)
        if hoisted is not merged:  # sends moved earlier: steps may merge further
            merged = merge_steps_at_size(hoisted, sketch.size, quotient=quotient)
            merged = merged.with_meta(hoisted=hoisted.meta["hoisted"])
        clock.timing += time.perf_counter() - started
        took = _time_us(merged, quotient, sketch.size)
        tried.append(f"block {block}: {len(schedule.steps)} rounds -> {len(merged.steps)} steps, {took:.1f} us")
        if best is not None and took >= best[0] - 1e-9:
            break  # longer blocks stopped paying: alpha is no longer what the schedule waits on
        best = (took, block, schedule, merged)
    took, block, schedule, merged = best
    sends = schedule.traffic_text if quotient is None else (
        f"{schedule.send_count} representative sends x {quotient.order} rotations")
    say(f"ordering ({label}): one LP per round, rounds in blocks that merge into one step "
        f"({'; '.join(tried)}): block {block} kept, {sends}, {clock.ordering:.2f} s")
    return merged, plan, quotient


class _ReversedSketch:
    """The sketch seen from the reversed topology, where the dual runs: link a->b there is b->a
    here, and a chunk crossing it is a partial reduced by b towards the chunk's owner, so the
    relay rules apply to b as the sender (``carries``: whose chunks b may carry out)."""

    def __init__(self, sketch: Sketch, topology: Topology):
        self._sketch = sketch
        self._topology = topology
        self.symmetry = sketch.symmetry
        self.intra = sketch.intra
        self.size = sketch.size

    def allowed_crossing(self, reversed_topology, src, dst) -> bool:
        return self._sketch.allowed_crossing(self._topology, dst, src)

    @property
    def carries_anything(self) -> bool:
        return self._sketch.carries_anything

    def may_carry_link(self, reversed_topology, src, dst, origin) -> bool:
        return self._sketch.may_carry(self._topology, dst, origin)

    def rank_rotation(self, reversed_topology):
        return self._sketch.rank_rotation(self._topology)

    def symmetry_generators(self, reversed_topology):
        return self._sketch.symmetry_generators(self._topology)  # automorphisms of both directions


def _rules(topology: Topology, coll: Collective, sketch, plan: RoutePlan,
           quotient: Quotient | None = None) -> OrderingRules:
    machine = topology.machine_of
    origins = sorted({min(pre) for pre in coll.pre})
    allowed = np.ones(len(topology.links), dtype=bool)
    carries: list[frozenset[int] | None] = []
    for i, link in enumerate(topology.links):
        crossing = machine[link.src] != machine[link.dst]
        if crossing:
            allowed[i] = sketch.allowed_crossing(topology, link.src, link.dst)
            if sketch.carries_anything:
                carries.append(None)
                continue
            may = frozenset(o for o in origins if sketch.may_carry_link(topology, link.src, link.dst, o))
            carries.append(None if len(may) == len(origins) else may)
        else:
            carries.append(None)
    planned = np.array(plan.copies, dtype=float) if plan.usable else None
    if planned is not None and quotient is not None:  # the plan's share per link of an orbit, alike on all
        per_orbit = np.bincount(quotient.link_orbit, weights=planned) / np.bincount(quotient.link_orbit)
        planned = per_orbit[quotient.link_orbit]
    return OrderingRules(allowed, tuple(carries), peers=sketch.intra.peer_limit, planned=planned)


def _exact_applies(topology: Topology, collective: str) -> bool:
    """The exact time-expanded MILP joins in on one small machine, for named collectives."""
    from synth.milp.sketch import EXACT_RANKS

    named = ":" not in collective and not collective.endswith(".json")
    return named and topology.machine_count == 1 and topology.ranks <= EXACT_RANKS


def _exact_line(found, seconds: float) -> str:
    counts: dict[str, int] = {}
    for attempt in found.attempts:
        counts[attempt.label] = counts.get(attempt.label, 0) + 1
    tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    if found.schedule is None:
        return f"exact (time-expanded MILP): no schedule ({tally}), {seconds:.2f} s"
    best = (f"best C={found.schedule.collective.chunks_per_rank} with {len(found.schedule.steps)} steps, "
            f"{found.time_us:.3f} us")
    return (f"exact (time-expanded MILP over C and S): {len(found.attempts)} instances ({tally}), {best}, "
            f"{seconds:.2f} s")


def _plan_line(label: str, plan: RoutePlan, options: MilpOptions) -> str:
    if plan.status is Status.SOLVED and not plan.planned:
        return f"routing ({label}): {plan.message}"
    if not plan.usable:
        return (f"routing ({label}): MILP ({options.solver}) gave no plan: {plan.message}; "
                "the ordering routes step by step on its own")
    flag = "" if plan.status is Status.SOLVED else " [TIMEOUT: incumbent, not proven optimal]"
    return (f"routing ({label}): MILP ({options.solver}, {plan.variables} variables) {plan.status} in "
            f"{plan.seconds:.2f} s: {sum(plan.copies)} crossing copies on "
            f"{sum(1 for c in plan.copies if c)} links, NIC-bound estimate {plan.rounds:.2f} rounds{flag}")
