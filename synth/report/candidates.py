"""The schedules a report compares: synthesized (SMT frontier or MILP router), what NCCL runs,
classic baselines, files.

Each candidate carries a stable file name so the report can name it and ``synth cost`` can
reproduce its numbers. One machine of at most ``SMT_RANKS`` ranks gets the SMT Pareto frontier;
bigger or multi-machine topologies get the MILP router at ``ROUTER_SIZES`` (each size its own
derived sketch: chunking and block length depend on it). ``nccl_candidates`` holds every
variant of NCCL's algorithms (``synth.baselines.nccl.OPTIONS``) that NCCL would run somewhere on
the size grid (a tree's piece count, a chain's pieces depend on the size), so the fastest of
them at a size is the ``nccl`` baseline there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from synth.baselines import registry
from synth.baselines.common import BaselineNotApplicable
from synth.core.errors import InputError
from synth.core.io import read_json, schedule_file_name
from synth.core.schedule import Schedule
from synth.core.topology import Topology
from synth.cost import format_size
from synth.verify import load_schedule

SMT_RANKS = 16
FRONTIER_CALLS = 10  # a report's SMT frontier walk gets this many --time-limit's in all (per walk)
PIPELINED_CHUNKS = (64, 384)  # greedy pipelined extras on one machine: many pieces amortise alpha
PIPELINED_CELLS = 8192  # ranks x chunks per rank beyond which a pipelined extra is not built
PIPELINED_COLLECTIVES = ("allgather", "reduce_scatter", "allreduce", "broadcast", "reduce")
ROUTER_SIZES = (1 << 16, 1 << 20, 1 << 30)  # latency-bound (chunk_up 1), middle, bandwidth-bound
GREEDY_WITHIN = (1, PIPELINED_CHUNKS[0])  # greedy chunks per rank where the router plans none in a budget
BIG_FILE_RANKS = 32  # schedules of topologies this big are stored gzip-compressed

Say = Callable[[str], None]


@dataclass(frozen=True)
class Candidate:
    """A schedule in the report: ``kind`` is smt, milp, greedy or file (synthesized), nccl (what
    NCCL runs) or baseline (classic algorithms)."""

    label: str
    kind: str
    schedule: Schedule
    file_name: str
    solve_seconds: float | None = None
    steps: int | None = None
    rounds: int | None = None
    chunks: int | None = None

    @property
    def synthesized(self) -> bool:
        return self.kind not in ("baseline", "nccl")

    @property
    def nccl(self) -> bool:
        return self.kind == "nccl"


def synthesized(topology: Topology, collective: str, time_limit: float, say: Say, jobs: int = 1,
                sat: str = "auto") -> list[Candidate]:
    """SMT frontier points on one small machine with whole capacities, else MILP router results
    at ROUTER_SIZES (with ``jobs`` > 1 those run side by side, each in its own process: the same
    results). The choice and its reason are said first. ``sat``: the SMT search's SAT engine."""
    backend, why = synthesis_backend(topology)
    say(f"{topology.name} {collective}: synthesizing with {backend} ({why})")
    if backend == "smt":
        return _smt(topology, collective, time_limit, say, jobs, sat)
    return _milp(topology, collective, time_limit, say, jobs)


def synthesis_backend(topology: Topology) -> tuple[str, str]:
    """The backend a report synthesizes with, and why: the SMT frontier where k-synchronous
    rounds apply on one machine of at most SMT_RANKS ranks, else the MILP router."""
    from synth import synthesizers

    if topology.machine_count > 1:
        return "milp", f"{topology.machine_count} machines"
    if topology.ranks > SMT_RANKS:
        return "milp", f"{topology.ranks} ranks, more than the SMT frontier's {SMT_RANKS}"
    why = synthesizers.get("smt").scope(topology)
    if why is not None:
        return "milp", f"{why}; the router plans on rounded capacities"
    return "smt", f"one machine of {topology.ranks} ranks with whole capacities: the exact frontier"


def pipelined_extras(topology: Topology, collective: str, say: Say) -> list[Candidate]:
    """Greedy pipelined schedules with many chunks on one machine. The SMT frontier stops at a
    few chunks and steps; at large sizes pipelining many pieces wins in the step model (a
    broadcast pays alpha once per step, not per piece). The report keeps an extra only where it
    is the fastest synthesized schedule at some size (``runner.prune_extras``). Beyond
    ``PIPELINED_CELLS`` ranks x chunks the extra is not built (its sends grow as ranks^2 x chunks)."""
    from synth import synthesizers

    if topology.machine_count > 1 or collective not in PIPELINED_COLLECTIVES:
        return []
    out = []
    for chunks in PIPELINED_CHUNKS:
        if topology.ranks * chunks > PIPELINED_CELLS:
            say(f"{topology.name} {collective} greedy (C={chunks}): not built, {topology.ranks} ranks x {chunks} "
                f"chunks is beyond {PIPELINED_CELLS}")
            continue
        result = synthesizers.synthesize(synthesizers.Problem(topology, collective, chunks=chunks), backend="greedy")
        schedule, seconds = result.schedule, result.seconds
        say(f"{topology.name} {collective} greedy (C={chunks}): {len(schedule.steps)} steps, {seconds:.2f} s")
        out.append(Candidate(f"greedy C={chunks}", "greedy", schedule, _file(collective, topology, f"greedy-c{chunks}"),
                             seconds, len(schedule.steps), schedule.total_rounds, chunks))
    return out


def switch_extras(topology: Topology, collective: str, sizes: list[int], terms, say: Say) -> list[Candidate]:
    """The switch planner's schedules (``synth.greedy.switches``) where the machine's switch
    reduces and multicasts over every rank: the variant fastest at each size of the grid (under
    ``terms``), each distinct one once. Pruned like the pipelined extras."""
    from synth.greedy.switches import applies, switch_plans

    if applies(topology, collective) is not None:
        return []
    out: dict[str, Candidate] = {}
    for schedule in switch_plans(topology, collective, sizes, terms).values():
        label = _switch_label(schedule)
        if label not in out:
            what = label.replace(" pieces=", "-C").replace(" p2p=", "-p2p").replace("/", "of").replace(" S=", "-S")
            what = what.replace(" @", "-").replace(" extras=", "-x").replace(" shares=", "-r")
            what = what.replace(" ", "-")
            out[label] = Candidate(label, "greedy", schedule, _file(collective, topology, what), None,
                                   len(schedule.steps), schedule.total_rounds, schedule.collective.chunks_per_rank)
    say(f"{topology.name} {collective}: {len(out)} switch plan(s) ({', '.join(out)})")
    return list(out.values())


def _switch_label(schedule) -> str:
    """A switch plan's report label: its pipeline and depth (and point-to-point share; a rail
    allgather its extras, a rail allreduce its rail shares; a shaped pipeline also the size it
    was shaped for)."""
    meta = schedule.meta
    if meta.get("pipeline") == "shaped":
        return f"switch shaped S={len(schedule.steps)} @{format_size(meta['shaped_for_bytes'])}"
    return (f"switch pieces={meta['pieces']}" + (f" p2p={meta['p2p_share']}" if meta.get("p2p_share") else "")
            + (f" extras={meta['extras']}" if meta.get("extras") else "")
            + (f" shares={meta['shares']}" if meta.get("shares") else ""))


def _smt(topology: Topology, collective: str, time_limit: float, say: Say, jobs: int = 1,
         sat: str = "auto") -> list[Candidate]:
    from synth.smt.encoding import SmtOptions
    from synth.smt.sat.choice import resolve_sat
    from synth.smt.strategies import pareto

    resolve_sat(sat)  # unknown or not installed: one line before the search
    frontier = pareto(topology, collective, time_limit=time_limit, progress=say, jobs=jobs,
                      options=SmtOptions(sat=sat),
                      budget=FRONTIER_CALLS * time_limit)
    if not frontier.complete:
        say(f"{topology.name} {collective}: the frontier is incomplete ({frontier.note}); the report goes on "
            "with the points found")
    out = []
    for point in frontier.points:
        name = schedule_file_name(collective, topology.name, point.steps, point.rounds, point.chunks)
        out.append(Candidate(f"smt S={point.steps} R={point.rounds} C={point.chunks}", "smt", point.schedule,
                             name, point.solve_seconds, point.steps, point.rounds, point.chunks))
    return out


def _milp(topology: Topology, collective: str, time_limit: float, say: Say, jobs: int = 1) -> list[Candidate]:
    if jobs > 1:
        from synth.parallel.pool import Job, run_jobs

        work = [Job(format_size(size), "synth.report.candidates:router_schedule",
                    (topology, collective, size, time_limit)) for size in ROUTER_SIZES]
        results = []
        for size, outcome in zip(ROUTER_SIZES, run_jobs(work, workers=jobs)):
            if not outcome.ok:
                raise RuntimeError(f"MILP router at {format_size(size)}: {outcome.error}")
            schedule, lines = outcome.value
            for line in lines:
                say(line)
            results.append((size, schedule))
    else:
        results = [(size, router_schedule(topology, collective, size, time_limit, say)[0]) for size in ROUTER_SIZES]
    out: list[Candidate] = []
    for size, schedule in results:
        if any(c.schedule.steps == schedule.steps for c in out):
            continue  # the same schedule wins at both sizes
        seconds = sum(schedule.meta.get("stage_seconds", {}).values())
        chunks = schedule.collective.chunks_per_rank
        out.append(Candidate(f"milp @{format_size(size)} C={chunks}", "milp", schedule,
                             _file(collective, topology, f"milp-{format_size(size)}"), seconds,
                             len(schedule.steps), schedule.total_rounds, chunks))
    return out


def router_schedule(topology: Topology, collective: str, size: int, time_limit: float,
                    say: Say | None = None, max_peers: int | None = None) -> tuple[Schedule, list[str]]:
    """The MILP router's schedule for ``size`` (the derived sketch; with ``max_peers``, derived on
    the links kept for that budget) and its progress lines (a job of a parallel report: the lines
    come back with the result)."""
    from synth import synthesizers
    from synth.milp.sketch import default_sketch

    lines: list[str] = []

    def keep(line: str) -> None:
        lines.append(line)
        if say is not None:
            say(line)

    sketch = None if max_peers is not None else default_sketch(topology, collective, size)[0]
    options = synthesizers.Options(time_limit=time_limit, sketch=sketch, progress=keep)
    problem = synthesizers.Problem(topology, collective, size=size, max_peers=max_peers)
    result = synthesizers.synthesize(problem, options, "milp")
    return result.schedule, ([] if say is not None else lines)


def within_budget(topology: Topology, collective: str, budget: int, time_limit: float, say: Say) -> list[Candidate]:
    """Schedules planned for ``budget`` thread blocks per rank. A schedule of p peers each way
    runs ``budget // p`` instances, so every peer count p in ``peer_counts(budget)`` below the
    machine's own is planned: the MILP router at ROUTER_SIZES on the links ``synth.milp.peers``
    keeps, and where it plans none (a budget too small to keep every machine connected inside)
    the greedy scheduler on them at GREEDY_WITHIN chunks (one piece for small sizes, many to
    pipeline large ones; ``runner.prune_extras`` keeps those that win somewhere)."""
    from synth.milp.peers import peer_degree

    out: list[Candidate] = []
    for peers in peer_counts(budget):
        if peers >= peer_degree(topology):
            continue
        found = _router_within(topology, collective, peers, time_limit, say) or \
            [_greedy_within(topology, collective, peers, chunks, time_limit, say) for chunks in GREEDY_WITHIN]
        out += [c for c in found if not any(c.schedule.steps == o.schedule.steps for o in out)]
    return out


def peer_counts(budget: int) -> list[int]:
    """The peer counts a budget of thread blocks plans for: the powers of two below it, and it.

    >>> peer_counts(6)
    [1, 2, 4, 6]
    """
    return sorted({budget, *(1 << k for k in range(budget.bit_length()) if 1 << k < budget)})


def _router_within(topology: Topology, collective: str, peers: int, time_limit: float, say: Say) -> list[Candidate]:
    from synth.core.errors import InfeasibleError, UnknownResultError

    out: list[Candidate] = []
    for size in ROUTER_SIZES:
        try:
            schedule = router_schedule(topology, collective, size, time_limit, say, max_peers=peers)[0]
        except (InfeasibleError, UnknownResultError) as exc:
            say(f"{topology.name} {collective} milp within {peers} peers at {format_size(size)}: {exc}")
            continue
        if any(c.schedule.steps == schedule.steps for c in out):
            continue
        chunks = schedule.collective.chunks_per_rank
        out.append(Candidate(f"milp <={peers} peers @{format_size(size)} C={chunks}", "milp", schedule,
                             _file(collective, topology, f"milp-{format_size(size)}-{peers}peers"),
                             sum(schedule.meta.get("stage_seconds", {}).values()), len(schedule.steps),
                             schedule.total_rounds, chunks))
    return out


def _greedy_within(topology: Topology, collective: str, peers: int, chunks: int, time_limit: float,
                   say: Say) -> Candidate:
    from synth import synthesizers

    problem = synthesizers.Problem(topology, collective, chunks=chunks, max_peers=peers)
    result = synthesizers.synthesize(problem, synthesizers.Options(time_limit=time_limit, progress=say), "greedy")
    schedule = result.schedule
    say(f"{topology.name} {collective} greedy within {peers} peers (C={chunks}): {len(schedule.steps)} steps, "
        f"{result.seconds:.2f} s")
    return Candidate(f"greedy <={peers} peers C={chunks}", "greedy", schedule,
                     _file(collective, topology, f"greedy-c{chunks}-{peers}peers"), result.seconds,
                     len(schedule.steps), schedule.total_rounds, chunks)


def baselines(topology: Topology, collective: str) -> list[Candidate]:
    """Every applicable classic baseline, by name (what NCCL runs is in ``nccl_candidates``)."""
    from synth.baselines.nccl import OPTIONS

    nccl_family = {"nccl", *(name for names in OPTIONS.values() for name in names if name.startswith("nccl"))}
    nccl_here = set(OPTIONS.get(collective.partition(":")[0], ()))
    out = []
    for name, entry in sorted(registry().items()):
        if collective.partition(":")[0] not in entry.collectives or name in nccl_family or name in nccl_here:
            continue
        try:
            schedule = entry.make(topology, collective)
        except BaselineNotApplicable:
            continue
        out.append(Candidate(name, "baseline", schedule, _file(collective, topology, name), None,
                             len(schedule.steps), schedule.total_rounds, schedule.collective.chunks_per_rank))
    return out


def nccl_candidates(topology: Topology, collective: str, sizes: list[int], modelled: bool = False) -> list[Candidate]:
    """Every schedule NCCL would run somewhere on ``sizes`` (``synth.baselines.nccl.variants``); with
    ``modelled`` (the runtime model prices NCCL too) less those it prices alone (NVLSTree:
    ``synth.tuner.choice.MODEL_PRICED``)."""
    from synth.baselines.nccl import variants
    from synth.tuner.choice import model_priced_baselines

    out: list[Candidate] = []
    for label, schedule in variants(topology, collective, sizes, model_priced_baselines() if modelled else ()):
        what = label.replace(" pieces=", "-C")  # the file names of earlier reports
        out.append(Candidate(label, "nccl", schedule, _file(collective, topology, what), None,
                             len(schedule.steps), schedule.total_rounds, schedule.collective.chunks_per_rank))
    return out


def from_frontier_dir(folder: str | Path, topology: Topology, collective: str) -> list[Candidate]:
    """Candidates from a ``synth pareto -o DIR`` folder (its frontier.json and schedule files)."""
    path = Path(folder) / "frontier.json"
    doc = read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("points"), list):
        raise InputError(f"{path}: not a frontier file (an object with a 'points' list, as 'synth pareto' writes)")
    if doc.get("collective") != collective or doc.get("topology") != topology.name:
        raise InputError(f"{path} is for {doc.get('collective')} on {doc.get('topology')}, "
                         f"not {collective} on {topology.name}")
    out = []
    for index, point in enumerate(doc["points"]):
        if not isinstance(point, dict) or not isinstance(point.get("schedule"), str) or not all(
                type(point.get(key)) is int for key in ("steps", "rounds", "chunks")):
            raise InputError(f"{path}: points[{index}] needs 'schedule' (a file name) and integer 'steps', "
                             "'rounds' and 'chunks'")
        schedule = load_schedule(path.parent / point["schedule"])
        out.append(Candidate(f"smt S={point['steps']} R={point['rounds']} C={point['chunks']}", "smt", schedule,
                             point["schedule"], point.get("solve_seconds"), point["steps"], point["rounds"],
                             point["chunks"]))
    return out


def _file(collective: str, topology: Topology, what: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in topology.name)
    gz = ".gz" if topology.ranks >= BIG_FILE_RANKS else ""
    return f"{collective}.{safe}.{what}.schedule.json{gz}"
