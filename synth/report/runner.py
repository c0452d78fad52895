"""One report (``synth report TOPO COLL``) and the committed set (``synth report --all``).

>>> [f"{t} {c}" for t, c in ALL_REPORTS][:2]
['dgx1 allgather', 'dgx1 reduce_scatter']
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path
from typing import Callable

from synth.bounds.lower_bounds import lower_bounds
from synth.core.collectives import make_collective
from synth.core.errors import InputError
from synth.core.io import dumps, read_json, save_schedule, write_text_atomic
from synth.core.library import resolve_topology
from synth.report import candidates as cand
from synth.report.budget import Footprints, budget_curve, capped_calibration
from synth.report.evaluate import (
    against_bounds,
    bound_rows,
    evaluate,
    nccl_model_points,
    shortfalls,
    size_grid,
    winners,
)
from synth.report.plots import plot
from synth.report.render import csv_text, json_doc, markdown, selection_doc
from synth.report.tuning import nccl_tuning

DEFAULT_SIZES = "1K..4G"
DEFAULT_CALIBRATION = "default"  # reports cost under the runtime model's default terms
CONTRACT = "none"  # --calibration none: the contract model (protocol factors only)
ALL_REPORTS = (
    ("dgx1", "allgather"), ("dgx1", "reduce_scatter"), ("dgx1", "allreduce"), ("dgx1", "alltoall"),
    ("dgx1", "broadcast"),
    ("ndv2x2", "allgather"), ("ndv2x2", "allreduce"), ("ndv2x2", "alltoall"),
    ("dgx2x2", "allgather"), ("dgx2x2", "allreduce"), ("dgx2x2", "alltoall"),
    ("h100", "allreduce"), ("h100", "allgather"), ("h100", "reduce_scatter"),
    ("h100x16", "allgather"), ("h100x16", "allreduce"),
    ("b200", "allreduce"), ("gb200nvl72", "allreduce"), ("gb200nvl72x2", "allgather"),
)
Say = Callable[[str], None]


def report(topology: str, collective: str, out: str | Path, sizes: str = DEFAULT_SIZES,
           from_dir: str | None = None, time_limit: float = 120.0, say: Say | None = None,
           jobs: int = 1, calibration: str = DEFAULT_CALIBRATION, max_threadblocks: int | None = None,
           sat: str = "auto") -> dict:
    """Synthesize (or read), add baselines and bounds, evaluate and write the report folder.
    ``jobs`` > 1: the MILP router's size variants run side by side (the same report).
    ``max_threadblocks``: at most that many thread blocks per rank (synth.report.budget).
    ``calibration``: a synth.calibration file, ``default`` (the built-in terms) or ``none`` (the
    contract model, protocol factors only). ``sat``: the SMT search's SAT engine (``--sat``)."""
    from synth.measure.calibration import load_calibration

    say = say or (lambda line: None)
    topo = resolve_topology(topology)
    make_collective(collective, topo.ranks).check_on(topo)
    grid = size_grid(sizes)
    cal = None if calibration == CONTRACT else load_calibration(calibration).on(topo.arch)
    terms = None if cal is None else cal.terms(calibration)
    folder = Path(out)
    found = (cand.from_frontier_dir(from_dir, topo, collective) if from_dir
             else cand.synthesized(topo, collective, time_limit, say, jobs, sat))
    try:  # only now: bad input leaves no folder behind
        (folder / "schedules").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{folder}: cannot create folder: {exc.strerror or exc}") from None
    found += cand.pipelined_extras(topo, collective, say)
    found += cand.switch_extras(topo, collective, grid, terms, say)
    if max_threadblocks is not None:
        found += cand.within_budget(topo, collective, max_threadblocks, time_limit, say)
    nccl = cand.nccl_candidates(topo, collective, grid, modelled=cal is not None)
    candidates = found + nccl + cand.baselines(topo, collective)
    say(f"{topo.name} {collective}: {len(found)} synthesized, {len(nccl)} NCCL, "
        f"{len(candidates) - len(found) - len(nccl)} classic baselines; evaluating over {len(grid)} sizes")
    footprints = Footprints()
    evaluations = prune_extras(evaluate(topo, candidates, grid, terms, collective, max_threadblocks, footprints))
    if not evaluations:
        raise InputError(f"no schedule runs within {max_threadblocks} thread blocks per rank")
    for e in evaluations:
        save_schedule(folder / "schedules" / e.candidate.file_name, e.candidate.schedule)
    bound = bound_rows(topo, collective, grid, terms)
    model = None if cal is None else nccl_model_points(topo, collective, grid, cal, max_threadblocks)
    model = against_bounds(model, bound)
    picks = winners(evaluations, grid, model)
    short = shortfalls(evaluations, grid, model)
    b = lower_bounds(topo, make_collective(collective, topo.ranks))
    bounds = {"steps": b.steps,
              "rounds_per_chunk": None if b.rounds_per_chunk is None else str(Fraction(b.rounds_per_chunk)),
              "algbw_gbps": b.algbw_gbps, "busbw_gbps": b.busbw_gbps, "convention": b.proven is not None}
    if terms is not None:
        bounds["runtime_busbw_gbps"] = bound_rows(topo, collective, grid[-1:], terms)[0]["busbw_gbps"]
    costing = {"calibration": None if terms is None else terms.label, "nccl_model": model,
               "nccl_tuning": nccl_tuning(topo, collective, grid, capped_calibration(cal, max_threadblocks)),
               "max_threadblocks": max_threadblocks,
               "budget_curve": budget_curve(topo, collective, candidates, terms, cal, footprints)}
    doc = json_doc(topo.name, collective, bounds, evaluations, picks, grid, bound, short, costing, topo.ranks)
    write_text_atomic(folder / "report.md", markdown(topo.name, collective, bounds, evaluations, picks, grid, short,
                                                     costing, doc["verdict"]))
    write_text_atomic(folder / "report.csv", csv_text(evaluations))
    write_text_atomic(folder / "report.json", dumps(doc))
    write_text_atomic(folder / "selection.json", dumps(selection_doc(topo.name, collective, picks)))
    plot(doc, folder)
    return doc


def prune_extras(evaluations: list) -> list:
    """Drop greedy extras that are never the fastest synthesized schedule on the grid."""
    ours = [e for e in evaluations if e.candidate.synthesized]
    if not ours:
        return evaluations
    winners = {id(min(ours, key=lambda e: (e.time_at(i), e.candidate.label))) for i in range(len(ours[0].rows))}
    return [e for e in evaluations if e.candidate.kind != "greedy" or id(e) in winners]


def report_all(root: str | Path = "results", force: bool = False, time_limit: float = 120.0,
               say: Say | None = None, jobs: int = 1, job_timeout: float | None = None,
               reports=ALL_REPORTS, sizes: str = DEFAULT_SIZES, ray: str | None = None,
               calibration: str = DEFAULT_CALIBRATION) -> tuple[Path, list[str]]:
    """Every report of ``reports`` under ``root``; finished ones are kept unless ``force`` (so an
    interrupted run resumes), then ``root/README.md`` indexes them. With ``jobs`` > 1 the reports
    run side by side, each in its own process (synth.parallel.pool), and their files are written
    here as each one ends; a report that fails or passes ``job_timeout`` is reported and the others
    go on; with ``ray`` (an address) they run on that Ray cluster instead. The numbers are those of
    a serial run; a schedule file may hold another schedule of the
    same (steps, rounds, chunks) where the SMT search's time-budgeted splits finish in another
    order under load. Returns (the index, one line per failed report)."""
    from tqdm import tqdm

    from synth.parallel.pool import Job, run_jobs

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    pending = [(t, c) for t, c in reports if force or not (root / t / c / "report.json").exists()]
    bar = tqdm(total=len(pending), desc="reports", unit="report", file=sys.stderr)
    failed: list[str] = []

    def finished(outcome) -> None:
        topology, collective = outcome.key.split(" ", 1)
        if outcome.ok:
            _write_files(root / topology / collective, outcome.value)
        else:
            failed.append(f"{outcome.key}: {outcome.error}")
            bar.write(f"{outcome.key}: FAILED: {outcome.error}", file=sys.stderr)
        bar.update(1)

    work = [Job(f"{t} {c}", "synth.report.runner:report_files", (t, c, time_limit, sizes, calibration))
            for t, c in pending]
    run_jobs(work, workers=jobs, timeout=job_timeout, done=finished, ray=ray)
    bar.close()
    write_text_atomic(root / "README.md", index(root, reports))
    return root / "README.md", failed


def report_files(topology: str, collective: str, time_limit: float = 120.0,
                 sizes: str = DEFAULT_SIZES, calibration: str = DEFAULT_CALIBRATION) -> dict[str, bytes]:
    """One report made in a private folder: relative path -> bytes (what a job sends back)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="synth-report-") as tmp:
        say = lambda line: print(f"[{topology} {collective}] {line}", file=sys.stderr, flush=True)  # noqa: E731
        report(topology, collective, tmp, sizes, None, time_limit, say, calibration=calibration)
        return {str(p.relative_to(tmp)): p.read_bytes() for p in sorted(Path(tmp).rglob("*")) if p.is_file()}


def _write_files(folder: Path, files: dict[str, bytes]) -> None:
    """Write a report's files into ``folder``, each atomically (temp file, then rename)."""
    import os
    import tempfile

    for rel, data in files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)


def index(root: Path, reports=ALL_REPORTS) -> str:
    """results/README.md: one row per report, with the winner at 1 KB, 1 MB and 1 GB."""
    lines = ["# Results", "",
             "Regenerate with `synth report --all` (resumes: finished reports are kept; `--force` redoes them).",
             "Each folder has report.md (tables), report.csv / report.json, busbw.png, time.png, speedup.png, "
             "threadblocks.png,",
             "selection.json",
             "and schedules/ (every schedule named in the report; `synth cost` reproduces its numbers).", "",
             "Times are the step model under the runtime terms of the default calibration (docs/cost-model.md), each",
             "schedule at its best protocol; \"vs NCCL\" is the fastest synthesized schedule against what NCCL "
             "takes at",
             "that size: the faster of its schedules under the same terms and the runtime model fitted to measured",
             "nccl-tests runs (> 1: synthesis is faster).", "",
             "| topology | collective | fastest @1K | fastest @1M | fastest @1G | synthesized vs NCCL @1K / 1M / 1G "
             "| synthesized vs best baseline @1G |",
             "|---|---|---|---|---|---|---|"]
    for topology, collective in reports:
        path = root / topology / collective / "report.json"
        if not path.exists():
            continue
        doc = read_json(path)
        cells = [_fastest_at(doc, size) for size in (1 << 10, 1 << 20, 1 << 30)]
        nccl = " / ".join(_versus_nccl(doc, size) for size in (1 << 10, 1 << 20, 1 << 30))
        lines.append(f"| {topology} | [{collective}]({topology}/{collective}/report.md) | " + " | ".join(cells)
                     + f" | {nccl} | {_versus(doc, 1 << 30)} |")
    return "\n".join(lines) + "\n"


def _time(entry: dict, size: int) -> float | None:
    for row in entry["rows"]:
        if row["size"] == size:
            return row["step_time_us"]
    return None


def _fastest_at(doc: dict, size: int) -> str:
    times = [(t, e["label"]) for e in doc["schedules"] if (t := _time(e, size)) is not None]
    return "-" if not times else min(times)[1]


def _synthesized(entry: dict) -> bool:
    return entry["kind"] not in ("baseline", "nccl")


def _versus_nccl(doc: dict, size: int) -> str:
    synth = [t for e in doc["schedules"] if _synthesized(e) and (t := _time(e, size)) is not None]
    nccl = [t for e in doc["schedules"] if e["kind"] == "nccl" and (t := _time(e, size)) is not None]
    nccl += [p["time_us"] for p in doc.get("nccl_model") or () if p["size"] == size and p.get("below_bound_us") is None]
    return f"{min(nccl) / min(synth):.2f}x" if synth and nccl else "-"


def _versus(doc: dict, size: int) -> str:
    synth = [t for e in doc["schedules"] if _synthesized(e) and (t := _time(e, size)) is not None]
    base = [(t, e["label"]) for e in doc["schedules"] if not _synthesized(e) and (t := _time(e, size)) is not None]
    if not synth or not base:
        return "-"
    best_base = min(base)
    return f"{best_base[0] / min(synth):.2f}x vs {best_base[1]}"
