"""Synthesis backends behind one protocol, and their registry.

A backend (``Synthesizer``) has a ``name``, says whether it can run here (``available``), which
machines it applies to at all (``scope``: the reason it does not, or None) and which problems it
takes (``accepts``), and answers a ``Problem`` with a ``SolveResult`` in the project's one status
vocabulary (``synth.core.schedule.Status``). ``synthesize`` is the one driver every caller goes
through: it picks the backend (``auto``: the first registered one that accepts the problem),
refuses a problem the backend does not take in one line, runs it, and verifies every schedule
that comes back before anyone sees it (``SynthesisBug`` when one does not verify).

Registered, in the order ``auto`` tries them:

- ``smt``: one k-synchronous instance (steps, rounds, chunks) by the SCCL-style encoding: a
  schedule, or a proof that none exists. Needs the steps, and whole capacities. Where switches
  compute it plans switch entries too (multicast; reduce through the dual and the direct
  allreduce encoding: ``synth.smt.switch_sends``), for small instances, where plain sends do
  not reach the budget.
- ``milp``: the sketch-guided router (routing MILP, ordering LPs, timing), for any machine and
  any bandwidths; optimises for a size. Where switches compute it also plans through them
  (multicast entries, switch reductions as their dual, allreduce as a pipeline of both) and
  keeps the faster plan (``synth.milp.synthesize``).
- ``greedy``: pipelined one-round-per-step schedules with many chunks, in seconds at any scale;
  allreduce and allgather through a switch that reduces and multicasts over every rank (NVLS)
  by the switch planner (``synth.greedy.switches``), mixed with point-to-point sends.

>>> from synth.core.library import resolve_topology
>>> names()
('smt', 'milp', 'greedy')
>>> result = synthesize(Problem(resolve_topology("ring:4"), "allgather", steps=3))
>>> result.backend, result.status.value, len(result.schedule.steps)
('smt', 'solved', 3)
>>> synthesize(Problem(resolve_topology("ring:4"), "allgather", size=1 << 20)).backend
'milp'
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Protocol

from synth.core.errors import InputError, SynthesisBug  # noqa: F401 (SynthesisBug: what synthesize raises)

if TYPE_CHECKING:  # the model is imported where a backend runs: building the CLI stays light
    from synth.core.schedule import SolveResult
    from synth.core.topology import Topology

Progress = Callable[[str], None]
DEFAULT_SIZE = 1 << 30  # bytes a size-driven backend optimises for when the problem names none


@dataclass(frozen=True)
class Problem:
    """What to synthesize: a collective (a name, ``alltoallv:FILE`` or ``custom:FILE``) on a
    topology. ``chunks``: chunks per rank (None: the backend's default). ``steps`` / ``rounds``:
    a k-synchronous instance (smt; rounds default to steps). ``size``: the bytes to optimise for
    (milp, greedy; None: 1 GiB). ``max_peers``: at most that many send and receive peers per
    rank, so the schedule lowers within that many thread blocks per rank (``within_peers``;
    None: no budget)."""

    topology: Topology
    collective: str
    root: int | None = None
    chunks: int | None = None
    steps: int | None = None
    rounds: int | None = None
    size: int | None = None
    max_peers: int | None = None

    @property
    def at_size(self) -> int:
        return DEFAULT_SIZE if self.size is None else self.size


@dataclass(frozen=True)
class Options:
    """How to solve: ``time_limit`` seconds per solver call (None: none); smt: ``direct`` (allreduce
    by the direct encoding, reduction in flight, instead of the reduce_scatter + allgather
    composition) and ``smt`` (its SmtOptions, the SAT engine among them; None: the defaults);
    milp: ``solver`` (highs, cbc), ``gap``, ``threads`` and ``sketch`` (a synth.milp Sketch; None:
    derived); greedy: ``terms`` (a runtime's ``synth.cost.RuntimeTerms``: the switch planner picks
    its plan under them; None: the contract model); ``progress``: where progress lines go."""

    time_limit: float | None = 120.0
    direct: bool = False
    solver: str | None = None
    gap: float | None = None
    threads: int | None = None
    sketch: Any = None
    progress: Progress | None = None
    smt: Any = None
    terms: Any = None

    def say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)


class Synthesizer(Protocol):
    """The protocol every backend follows."""

    name: str
    summary: str

    def available(self) -> bool: ...

    def scope(self, topology: Topology) -> str | None: ...

    def accepts(self, problem: Problem) -> str | None: ...

    def solve(self, problem: Problem, options: Options) -> SolveResult: ...


class Smt:
    name = "smt"
    summary = "one k-synchronous instance (steps, rounds, chunks): a schedule or a proof that none exists"

    def available(self) -> bool:
        return _importable("z3")

    def scope(self, topology: Topology) -> str | None:
        """Rounds must apply: every capacity a whole multiple of the slowest link."""
        from synth.core.planning import rounds_problem

        return rounds_problem(topology)

    def accepts(self, problem: Problem) -> str | None:
        if problem.steps is None:
            return "needs the instance's steps (--steps S; or use least-steps / pareto)"
        rounds = problem.steps if problem.rounds is None else problem.rounds
        if problem.steps < 1 or rounds < problem.steps or (problem.chunks or 1) < 1:
            return "needs steps >= 1, rounds >= steps and chunks >= 1"
        from synth.core.planning import PLANNERS_HINT

        why = self.scope(problem.topology)
        return None if why is None else f"{why}: {PLANNERS_HINT}"

    def solve(self, problem: Problem, options: Options) -> SolveResult:
        from synth.smt.strategies import solve_instance

        rounds = problem.steps if problem.rounds is None else problem.rounds
        from synth.smt.encoding import SmtOptions

        _say_unused_passes(problem, options)
        return solve_instance(problem.topology, problem.collective, problem.root, problem.steps, rounds,
                              problem.chunks or 1, options.time_limit, options.progress or _quiet, options.direct,
                              options.smt or SmtOptions())


class _Planner:
    """A backend that plans its own steps for a size, on any machine (whole capacities or not)."""

    def scope(self, topology: Topology) -> str | None:
        return None

    def accepts(self, problem: Problem) -> str | None:
        if problem.steps is not None or problem.rounds is not None:
            return "chooses its own steps and rounds (drop --steps/--rounds)"
        if problem.chunks is not None and problem.chunks < 1:
            return "needs chunks >= 1"
        return None


def _judge(problem: Problem, options: Options):
    """How a backend compares its candidate plans: under ``--calibration``'s terms at the problem's
    size, each at its fastest protocol; None (the step model) without one."""
    if options.terms is None:
        return None
    from synth.cost import best_protocol

    return lambda schedule: best_protocol(schedule, problem.at_size, options.terms)[1]


class Milp(_Planner):
    name = "milp"
    summary = "the sketch-guided router (routing MILP, ordering LPs, timing): any machine, optimised for a size"

    def available(self) -> bool:
        return _importable("pulp")

    def solve(self, problem: Problem, options: Options) -> SolveResult:
        from synth.bounds.solver import MilpOptions
        from synth.core.schedule import SolveResult
        from synth.milp.synthesize import synthesize as route

        if _is_moe(problem):
            return _moe(problem, options, "router")
        milp = MilpOptions(solver=options.solver or "highs", time_limit=options.time_limit, gap=options.gap,
                           threads=options.threads)  # bad options are one line before any work
        sketch = self.sketch(problem, options)
        started = time.perf_counter()
        result = route(problem.topology, problem.collective, sketch, milp, root=problem.root,
                       progress=options.progress, judge=_judge(problem, options))
        details = {"size": result.size, "time_us": result.time_us, "simulated_us": result.simulated_us,
                   "bound_us": result.bound_us, "percent_of_bound": result.percent_of_bound}
        return SolveResult(result.status, result.schedule, time.perf_counter() - started, details=details)

    @staticmethod
    def sketch(problem: Problem, options: Options):
        """The sketch to route with: the given one, else the derived default at the problem's
        size, with the problem's chunks when it names them."""
        from synth.milp.sketch import default_sketch

        if options.sketch is not None:
            return options.sketch
        sketch, reasons = default_sketch(problem.topology, problem.collective, problem.size)
        if problem.chunks is not None:
            sketch = replace(sketch, chunk_up=problem.chunks)
            reasons = [r if not r.startswith("chunk_up") else f"chunk_up: {problem.chunks} (given)" for r in reasons]
        options.say(f"sketch: derived default (see 'synth sketch show {problem.topology.name}'): "
                    + "; ".join(reasons))
        return sketch


class Greedy(_Planner):
    name = "greedy"
    summary = "pipelined one-round-per-step schedules with many chunks, in seconds at any scale"

    def available(self) -> bool:
        return True

    @staticmethod
    def prefers(problem: Problem) -> bool:
        """``auto`` takes greedy for an allreduce in one NVLink domain whose switch reduces and
        multicasts: its shaped switch pipeline meets the exchange bound there (docs/greedy.md),
        where the router's staggered pieces reach about 88% of it."""
        from synth.greedy.switches import applies

        return (problem.collective == "allreduce" and problem.topology.machine_count == 1
                and applies(problem.topology, "allreduce") is None)

    def solve(self, problem: Problem, options: Options) -> SolveResult:
        from synth.bounds.lower_bounds import lower_bounds
        from synth.core.schedule import SolveResult, Status
        from synth.cost import step_time_us
        from synth.greedy.pipeline import pipelined

        if _is_moe(problem):
            return _moe(problem, options, "planner")
        started = time.perf_counter()
        schedule = self._through_switch(problem, options)
        if schedule is None:
            schedule = pipelined(problem.topology, problem.collective, problem.chunks or 1, problem.root)
        seconds = time.perf_counter() - started
        size = problem.at_size
        took = step_time_us(schedule, size)
        bound = lower_bounds(problem.topology, schedule.collective).time_us(size)
        details = {"size": size, "time_us": took, "bound_us": bound, "percent_of_bound": 100.0 * bound / took}
        return SolveResult(Status.SOLVED, schedule, seconds, details=details)


    @staticmethod
    def _through_switch(problem: Problem, options: Options):
        """The switch planner's schedule at the problem's size where it applies (with --chunks:
        its variant of that many chunks per rank, if one exists); None elsewhere."""
        from synth.greedy.switches import applies, switch_plan, variants

        if applies(problem.topology, problem.collective) is not None:
            if problem.topology.switches:
                options.say(f"greedy: point-to-point only on {problem.topology.name}: "
                            f"{applies(problem.topology, problem.collective)}")
            return None
        if problem.chunks is None:
            return switch_plan(problem.topology, problem.collective, problem.at_size, options.terms)
        fitting = list(variants(problem.topology, problem.collective, problem.chunks))
        if not fitting:
            options.say(f"greedy: no switch plan has {problem.chunks} chunks per rank; point-to-point pipeline")
            return None
        from synth.cost import step_time_us

        if options.terms is None:
            return min(fitting, key=lambda s: step_time_us(s, problem.at_size))
        from synth.cost import best_protocol

        return min(fitting, key=lambda s: best_protocol(s, problem.at_size, options.terms)[1])


REGISTRY: dict[str, Synthesizer] = {backend.name: backend for backend in (Smt(), Milp(), Greedy())}
AUTO = "auto"


def names() -> tuple[str, ...]:
    """The registered backends, in the order ``auto`` tries them."""
    return tuple(REGISTRY)


def get(name: str) -> Synthesizer:
    """The backend called ``name``; InputError naming the known ones otherwise."""
    if name not in REGISTRY:
        raise InputError(f"unknown synthesis backend {name!r}; known: {', '.join(names())}")
    return REGISTRY[name]


def choose(problem: Problem, name: str = AUTO) -> Synthesizer:
    """The backend ``name`` if it takes ``problem``, or with ``auto`` the first available one
    that prefers it (``Greedy.prefers``), else the first that takes it; InputError (one line, the
    reason) otherwise."""
    if name != AUTO:
        backend = get(name)
        why = "not installed" if not backend.available() else backend.accepts(problem)
        if why is not None:
            raise InputError(f"--backend {name}: {why}")
        return backend
    for backend in REGISTRY.values():
        if getattr(backend, "prefers", None) and backend.available() and backend.accepts(problem) is None \
                and backend.prefers(problem):
            return backend
    reasons = {}
    for backend in REGISTRY.values():
        why = "not installed" if not backend.available() else backend.accepts(problem)
        if why is None:
            return backend
        reasons[backend.name] = why
    if problem.steps is not None or problem.rounds is not None:  # an instance: only smt answers those
        raise InputError(f"smt: {reasons['smt']}")
    raise InputError("no synthesis backend takes this problem (" +
                     "; ".join(f"{name}: {why}" for name, why in reasons.items()) + ")")


def synthesize(problem: Problem, options: Options | None = None, backend: str = AUTO) -> SolveResult:
    """``problem`` solved by ``backend`` (see ``choose``), every schedule verified here. With a
    peer budget the backend solves on the kept links (``within_peers``)."""
    options = options or Options()
    if problem.max_peers is not None:
        return within_peers(problem, options, backend)
    chosen = choose(problem, backend)
    result = chosen.solve(problem, options)
    return replace(checked(result, chosen.name), backend=chosen.name)


def within_peers(problem: Problem, options: Options, backend: str = AUTO) -> SolveResult:
    """``problem`` under its peer budget N: the backend solves on the links ``choose_peers``
    keeps (invariant under the sketch's symmetry), and the schedule, the same sends, runs on the
    machine itself, verified there; SynthesisBug when a rank would talk to more than N peers.
    A machine whose ranks have at most N peers each way is solved as it is."""
    from synth.bounds.solver import MilpOptions
    from synth.core.planning import on_machine
    from synth.milp.peers import PEER_GAP, PEER_SECONDS, choose_peers, peer_degree, peer_view, schedule_degree

    limit, topology = problem.max_peers, problem.topology
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InputError(f"a peer budget must be an integer >= 1, got {limit!r}")
    bare = replace(problem, max_peers=None)
    if peer_degree(topology) <= limit:
        return synthesize(bare, options, backend)
    chosen = choose(bare, backend).name  # a problem the backend refuses is one line before the peer MILP
    sketch = options.sketch if options.sketch is not None else _derived_sketch(problem)
    generators = [] if sketch is None else sketch.symmetry_generators(topology)
    seconds = min(options.time_limit or PEER_SECONDS, PEER_SECONDS)
    choice = choose_peers(topology, problem.collective, limit, problem.at_size, generators,
                          MilpOptions(time_limit=seconds, gap=PEER_GAP), keep_symmetry=options.sketch is not None,
                          machines_connected=chosen == "milp")
    options.say(choice.message)
    view = peer_view(topology, choice)
    result = synthesize(replace(bare, topology=view), options, chosen)
    if result.schedule is None:
        return result
    schedule = result.schedule.with_meta(max_peers=limit)
    placed = replace(schedule, topology=topology) if topology.rounds_apply else on_machine(schedule, topology)
    if schedule_degree(placed) > limit:
        raise SynthesisBug(f"the {result.backend} backend: a schedule planned within {limit} peers per rank "
                           f"talks to {schedule_degree(placed)}")
    details = {**result.details, "peer_links": len(choice.links), "peer_seconds": round(choice.seconds, 3)}
    if {"bound_us", "size", "time_us"} <= set(details):  # the machine's bound, not the kept links'
        from synth.bounds.lower_bounds import lower_bounds

        details["bound_us"] = lower_bounds(topology, placed.collective).time_us(details["size"])
        details["percent_of_bound"] = 100.0 * details["bound_us"] / details["time_us"]
    return replace(checked(replace(result, schedule=placed), result.backend), details=details,
                   seconds=result.seconds + choice.seconds)


def _derived_sketch(problem: Problem):
    """The router's derived sketch (its symmetry is the one a peer choice keeps); None where
    none derives."""
    from synth.milp.sketch import default_sketch

    try:
        return default_sketch(problem.topology, problem.collective, problem.size)[0]
    except InputError:
        return None


def checked(result: SolveResult, backend: str) -> SolveResult:
    """``result`` once its schedule (if any) verifies; SynthesisBug naming the first violation
    otherwise. The one place a backend's answer is verified before anyone sees it."""
    from synth.verify import checked as verified

    if result.schedule is not None:
        verified(result.schedule, f"the {backend} backend")
    return result


def _is_moe(problem: Problem) -> bool:
    return problem.collective.partition(":")[0] in ("moe_dispatch", "moe_combine")


def _moe(problem: Problem, options: Options, method: str) -> SolveResult:
    """A mixture-of-experts dispatch or combine by the router (milp) or the planner (greedy), at
    the routing's own size (``synth.moe.synthesize``)."""
    from synth.bounds.lower_bounds import lower_bounds
    from synth.bounds.solver import MilpOptions
    from synth.core.schedule import SolveResult, Status
    from synth.moe.router import DEFAULT_GAP
    from synth.moe.synthesize import moe_schedule

    if problem.chunks not in (None, 1) or problem.size is not None or problem.root is not None:
        raise InputError(f"{problem.collective.partition(':')[0]} takes its chunks (one per token) and its size "
                         "(tokens x token_bytes) from the routing; drop --chunks, --size and --root")
    milp = MilpOptions(solver=options.solver or "highs", time_limit=options.time_limit,
                       gap=DEFAULT_GAP if options.gap is None else options.gap, threads=options.threads)
    result = moe_schedule(problem.topology, problem.collective, method, milp)
    schedule = result.schedule
    size = schedule.collective.size_bytes
    took = result.details["time_us"]
    bound = lower_bounds(problem.topology, schedule.collective).time_us(size)
    options.say(f"moe {method}: depth {result.details['depth']}, planned in {result.seconds:.2f} s")
    details = {"size": size, "time_us": took, "bound_us": bound, "percent_of_bound": 100.0 * bound / took,
               "plan_seconds": result.seconds}
    return SolveResult(Status.SOLVED, schedule, result.seconds, details=details)


def _say_unused_passes(problem: Problem, options: Options) -> None:
    """One line where a switch can reduce and multicast in one pass (``reduce_multicast``): the
    smt encodings do not use that pass (many srcs to many dsts has no tree-shaped dual), only the
    switch's ``reduce`` and ``multicast``."""
    names = [s.name for s in problem.topology.switches if s.reduce_multicast]
    if names:
        options.say(f"smt: the reduce_multicast pass of {', '.join(names[:4])}{' ...' if len(names) > 4 else ''} "
                    "goes unused (no tree-shaped dual); their reduce and multicast, if any, are used")


def _importable(module: str) -> bool:
    from importlib.util import find_spec

    return find_spec(module) is not None


def _quiet(line: str) -> None:
    return None
