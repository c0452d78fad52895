"""``synth calibrate`` and ``synth doctor``: the cost model against nccl-tests output."""

from __future__ import annotations

import dataclasses
import json
import math
import sys

from synth.core.errors import InputError

# what the runtime model covers (synth.measure.runtime.COLLECTIVES; spelled out so the parser imports nothing)
COLLECTIVE_CHOICES = ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce")
TRANSPORT_HELP = "the network between machines: ib (InfiniBand), roce, tcp (TCP-class, e.g. GPUDirect-TCPX); default ib"


def add_measure_parsers(sub) -> None:
    """Add ``calibrate`` and ``doctor`` to ``sub``."""
    p = sub.add_parser("calibrate", help="fit the runtime terms of the cost model to nccl-tests output")
    p.add_argument("logs", nargs="+", metavar="LOG")
    _machine_options(p)
    p.add_argument("--base", help="a synth.calibration file to refine (e.g. NVLink from a 1-machine run)")
    p.add_argument("-o", "--output", required=True, help="synth.calibration file to write")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("doctor", help="measured vs expected per size, and what is most likely wrong")
    p.add_argument("log", metavar="LOG")
    _machine_options(p)
    p.add_argument("--calibration", help="a synth.calibration file (default: the default parameters)")
    p.add_argument("--schedules", metavar="DIR", help="also cost the synth.schedule files in DIR (e.g. a report's "
                                                      "schedules/ folder) beside the classic algorithms")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_doctor)


def _machine_options(p) -> None:
    p.add_argument("--topology", required=True, help="the machine the run was made on (library name, NAMExK, file)")
    p.add_argument("--ranks", help="the topology's ranks the run used, e.g. 0-11 (12 of a DGX-2's 16 GPUs)")
    p.add_argument("--transport", default="ib", choices=("ib", "roce", "tcp"), help=TRANSPORT_HELP)
    p.add_argument("--nvls", choices=("on", "off"), help="NVLS (NVLink SHARP) on or off, whatever the log says "
                                                         "(default: the log's NCCL_NVLS_ENABLE, else NCCL's default: "
                                                         "on where the topology has an NVLS switch)")
    p.add_argument("--collnet", choices=("on", "off"), help="CollNet (InfiniBand SHARP) on or off, whatever the log "
                                                            "says (default: the log's NCCL_COLLNET_ENABLE, else on "
                                                            "where the topology has a SHARP switch)")
    p.add_argument("--collective", choices=COLLECTIVE_CHOICES,
                   help="the collective the run timed, where the log does not name its test (e.g. a table without "
                        "its all_gather_perf command line)")
    p.add_argument("--nccl-algo", metavar="VALUE", help="NCCL_ALGO as the run had it, whatever the log says "
                                                        "(e.g. Ring, ^NVLS, allreduce:tree;allgather:ring)")
    p.add_argument("--launch", metavar="MODE", help="how the calls were issued, where the log does not say: processes "
                                                    "(one per GPU), threads:G (one thread driving G GPUs, -g G), "
                                                    "graph (replayed from CUDA graphs, -G N)")
    p.add_argument("--buffers", choices=("none", "local", "symmetric"),
                   help="the buffers' registration, where the log does not say (nccl-tests -R 0 / 1 / 2)")


def measured_runs(paths: list[str], args) -> list:
    """Every run in the logs as a Measured on the topology; InputError when one does not fit it."""
    from synth.core.library import resolve_topology
    from synth.core.subset import parse_ranks, sub_topology
    from synth.measure.fit import Measured, allowed_for, setup_of
    from synth.measure.logs import read_runs
    from synth.measure.runtime import COLLECTIVES, Launch, describe, parse_launch

    topology = resolve_topology(args.topology)
    if args.ranks:
        topology = sub_topology(topology, parse_ranks(args.ranks, topology.ranks))
    machine = describe(topology)
    out = []
    for path in paths:
        for run in read_runs(path):
            where = f"{path}: run {run.index + 1}"
            if run.collective is not None and run.collective not in COLLECTIVES:
                raise InputError(f"{where} is {run.collective}; the runtime model covers {', '.join(COLLECTIVES)}")
            if run.ranks is not None and run.ranks != machine.ranks:
                raise InputError(f"{where} has {run.ranks} ranks, topology {topology.name} has {machine.ranks} "
                                 "(--ranks names the GPUs of a partial run, e.g. --ranks 0-11)")
            if run.machines is not None and run.machines != machine.machines and not _one_domain(run, machine):
                raise InputError(f"{where} ran on {run.machines} machine(s), topology {topology.name} has "
                                 f"{machine.machines}")
            rows = tuple((float(r.size_bytes), r.time_us) for r in run.rows)
            given = getattr(args, "collective", None)
            if given and run.collective and given != run.collective:
                raise InputError(f"{where} is {run.collective}, not {given} (--collective)")
            collective = run.collective or given or "allreduce"
            allowed, chosen = allowed_for(run, collective, machine, overrides(args), where)
            launch = parse_launch(getattr(args, "launch", None)) or \
                Launch(run.launch, run.gpus_per_thread, run.graph > 0)
            setup = setup_of(run)
            if getattr(args, "buffers", None):
                setup = dataclasses.replace(setup, registration=args.buffers)
            out.append(Measured(f"{path}#{run.index}", collective, machine, launch, args.transport, rows, allowed,
                                chosen, setup, run.skipped))
    return out


def _one_domain(run, machine) -> bool:
    """Whether a run's hosts are trays of the topology's NVLink domains (MNNVL: an NVL72 rack is
    one node to NCCL): each machine of the topology one NVLS domain of more GPUs than one host
    holds (``HOST_GPUS``: NVL32 / NVL72 racks; DGX-2's 16 GPUs share one host and no NVLS), its
    hosts a multiple of the topology's machines, and each host's GPUs a whole part of one machine."""
    rack = machine.nvls_ranks == machine.per_machine > HOST_GPUS
    if not machine.direct or not rack or run.machines % machine.machines:
        return False
    if machine.ranks % run.machines:
        return False
    return machine.per_machine % (machine.ranks // run.machines) == 0


HOST_GPUS = 8  # the most GPUs one host holds (HGX boards; NVL72 trays hold 4)


def overrides(args) -> dict:
    """The NCCL settings the command line sets whatever a log says (--nvls, --collnet, --nccl-algo)."""
    given = {"NCCL_NVLS_ENABLE": _enable(getattr(args, "nvls", None)),
             "NCCL_COLLNET_ENABLE": _enable(getattr(args, "collnet", None)),
             "NCCL_ALGO": getattr(args, "nccl_algo", None)}
    return {name: value for name, value in given.items() if value is not None}


def _enable(value: str | None) -> str | None:
    return None if value is None else ("1" if value == "on" else "0")


def cmd_calibrate(args) -> int:
    from synth.core.io import dumps, write_text_atomic
    from synth.measure.calibration import load_calibration
    from synth.measure.fit import fit

    runs = measured_runs(args.logs, args)
    base = load_calibration(args.base)
    cal = fit(runs, base, topology=runs[0].machine.name)
    cal = dataclasses.replace(cal, sources=tuple(base.sources) + cal.sources)
    write_text_atomic(args.output, dumps(cal.to_doc()))
    ratios = [row["model_over_measured"] for row in cal.fit]
    within = sum(1 for r in ratios if 1 / 1.3 <= r <= 1.3)
    print(f"fitted {len(cal.parameters)} parameters to {len(ratios)} rows of {len(runs)} run(s): "
          f"{within} of {len(ratios)} within 1.3x, geo-mean model/measured {_geo(ratios):.2f}")
    for name, value in sorted(cal.parameters.items()):
        print(f"  {name} = {value:.4g}")
    for row in cal.excluded:
        print(f"  left out (far slower than the rest): {row['file']} {row['size_bytes']} B: "
              f"{row['measured_us']} us measured, {row['model_us']} modelled")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_doctor(args) -> int:
    from synth.core.library import resolve_topology
    from synth.core.subset import parse_ranks, sub_topology
    from synth.cost import format_size
    from synth.measure import doctor
    from synth.measure.calibration import load_calibration
    cal = load_calibration(args.calibration)
    runs = measured_runs([args.log], args)
    topology = resolve_topology(args.topology)
    if args.ranks:
        topology = sub_topology(topology, parse_ranks(args.ranks, topology.ranks))
    docs = []
    for run in runs:
        bound, ideal, rated = doctor_bounds(topology, run.collective, cal, run)
        table = doctor.rows(run, cal, bound, alternatives(topology, run.collective, args.schedules), ideal, rated)
        found = doctor.regions(table, run.machine.machines)
        docs.append({"run": run.source, "collective": run.collective, "launch": launch_name(run.launch),
                     "buffers": run.setup.registration, "skipped": list(run.skipped),
                     "rows": [_row_doc(r) for r in table], "regions": [_region_doc(r) for r in found],
                     "inversions": [_inversion_doc(i) for i in doctor.inversions(table)],
                     "summary": doctor.summary(table)})
        if not args.json:
            _print_run(run, table, found, format_size)
    if args.json:
        out = docs[0] if len(docs) == 1 else {"runs": docs}
        sys.stdout.write(json.dumps(out, indent=1) + "\n")
    return 0


_ONCE: dict = {}  # (what, id(topology), collective, id(cal), extra) -> (topology, cal, result)


def _once(what: str, topology, collective: str, cal, make, extra=()):
    """``make()``, once per topology, collective and calibration (the same objects) and ``extra``
    in this process: the runs of one log share their bounds and alternatives (on 1440 GPUs, many
    seconds each)."""
    key = (what, id(topology), collective, id(cal), extra)
    hit = _ONCE.get(key)
    if hit is None or hit[0] is not topology or hit[1] is not cal:
        if len(_ONCE) > 16:
            _ONCE.clear()
        hit = _ONCE[key] = (topology, cal, make())
    return hit[2]


def doctor_bounds(topology, collective: str, cal, run=None):
    """(bound, line_rate, rated) callables, us by size. The bound doctor prints holds for any run
    in the run's launch mode (a ``synth.measure.fit.Measured``): the runtime bound
    (``synth.bounds.runtime``) with every link at its line rate, the launch mode's latencies and
    the least per-call latency any modelled kernel pays there, without the launch floor (the
    calibration's typical CPU cost, which a run may beat). ``line_rate`` is the contract model's
    bound (is a row below the topology itself?); ``rated`` the runtime bound at the calibration's
    efficiencies (a row below it beats the calibration's rates: recalibrate). A 0-byte row has
    no bound (None): nccl-tests >= 2.17 times no call there."""
    from synth.bounds.lower_bounds import lower_bounds
    from synth.bounds.runtime import runtime_bounds
    from synth.core.collectives import make_collective
    from synth.measure.runtime import symmetric_capable

    made = make_collective(collective, topology.ranks)
    graph = bool(run and run.launch.graph)
    symmetric = bool(run and symmetric_capable(run.machine, collective, cal.on(topology.arch).nccl_version))
    terms = cal.on(topology.arch).terms(graph=graph, symmetric=symmetric)
    line_rates = dataclasses.replace(terms, efficiency=dict.fromkeys(terms.efficiency, 1.0))
    runtime = _once("runtime bound", topology, collective, cal, lambda: runtime_bounds(topology, made, line_rates),
                    (graph, symmetric))
    rated = _once("rated bound", topology, collective, cal, lambda: runtime_bounds(topology, made, terms),
                  (graph, symmetric))
    ideal = _once("line-rate bound", topology, collective, None, lambda: lower_bounds(topology, made))
    return (lambda size: runtime.bounds.time_us(size) + runtime.call_us if size > 0 else None), \
        (lambda size: ideal.time_us(size) if size > 0 else None), \
        (lambda size: rated.bounds.time_us(size) + rated.call_us if size > 0 else None)


def alternatives(topology, collective: str, folder: str | None) -> list:
    """(label, StepLoads) of every classic algorithm that builds ``collective`` on ``topology``, and
    of every schedule file in ``folder`` for that collective and rank count (others are skipped;
    a file comes first, so it wins a tie). Each is built once (its loads serve every size); rings
    are counted, not built (``synth.baselines.baseline_loads``: the same loads, without the
    millions of sends of a ring on a thousand GPUs)."""
    if folder is not None:  # files may change between calls: read them each time
        return _alternatives(topology, collective, folder)
    return list(_once("alternatives", topology, collective, None, lambda: _alternatives(topology, collective, None)))


def _alternatives(topology, collective: str, folder: str | None) -> list:
    from pathlib import Path

    from synth.baselines import BaselineNotApplicable, baseline_loads, registry
    from synth.cost import step_loads
    from synth.verify import load_schedule

    out = []
    if folder is not None:  # first: a file ties with a classic algorithm as its name
        where = Path(folder)
        if not where.is_dir():
            raise InputError(f"--schedules {folder}: not a folder")
        for path in sorted(where.glob("*.json")):
            schedule = load_schedule(path)
            if schedule.collective.name == collective and schedule.topology.ranks == topology.ranks:
                out.append((path.name, step_loads(schedule)))
    for name, entry in sorted(registry().items()):
        if collective in entry.collectives and name != "nccl":
            try:
                out.append((name, baseline_loads(entry, topology, collective)))
            except (BaselineNotApplicable, InputError):
                continue
    return out


def launch_name(launch) -> str:
    """``processes``, ``threads:G`` or ``graph``: how a run's calls were issued."""
    if launch.graph:
        return "graph"
    return f"threads:{launch.gpus_per_thread}" if launch.mode == "threads" else "processes"


def _print_run(run, table, found, format_size) -> None:
    from synth.measure import doctor

    version = ".".join(map(str, run.setup.version)) if run.setup.version else "not printed"
    print(f"{run.source}: {run.collective} on {run.machine.name} ({run.machine.ranks} ranks, "
          f"{run.machine.machines} machine(s), {launch_name(run.launch)}, {run.transport}; buffers "
          f"{run.setup.registration}, NCCL {version})")
    for note in run.skipped:
        print(f"skipped {note}")
    print(f"{'size':>8} {'measured us':>12} {'expected us':>12} {'NCCL choice':>22} {'bound us':>10} "
          f"{'meas/exp':>9}  {'verdict':<15} fastest schedule in the model")
    for r in table:
        choice = f"{r.choice.algorithm}/{r.choice.protocol}/{r.choice.channels}ch" + \
            ("" if r.choice.measured else " (unmeasured)")
        bound = f"{r.bound_us:10.2f}" if r.bound_us is not None else f"{'-':>10}"
        alt = "-" if r.alternative is None else \
            f"{r.alternative.label} {r.alternative.protocol} {r.alternative.time_us:.2f} us"
        print(f"{format_size(r.size_bytes):>8} {r.measured_us:12.2f} {r.expected_us:12.2f} {choice:>22} {bound} "
              f"{r.ratio:9.2f}  {r.verdict:<15} {alt}")
    for region in found:
        print(region.line())
    for inversion in doctor.inversions(table):
        print(inversion.line())
    print(doctor.summary(table))


def _row_doc(r) -> dict:
    return {"size_bytes": r.size_bytes, "measured_us": r.measured_us, "expected_us": round(r.expected_us, 3),
            "choice": {"algorithm": r.choice.algorithm, "protocol": r.choice.protocol, "channels": r.choice.channels,
                       "measured": r.choice.measured},
            "bound_us": None if r.bound_us is None else round(r.bound_us, 3),
            "measured_over_expected": round(r.ratio, 4), "verdict": r.verdict,
            "fastest_schedule": None if r.alternative is None else {
                "label": r.alternative.label, "protocol": r.alternative.protocol,
                "time_us": round(r.alternative.time_us, 3)}}


def _inversion_doc(i) -> dict:
    return {"smaller_bytes": i.smaller.size_bytes, "larger_bytes": i.larger.size_bytes,
            "ratio": round(i.ratio, 4), "first_row": i.first, "line": i.line()}


def _region_doc(r) -> dict:
    return {"first_bytes": r.first, "last_bytes": r.last, "verdict": r.verdict,
            "measured_over_expected": round(r.ratio, 4), "cause": r.cause, "line": r.line()}


def _geo(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")
