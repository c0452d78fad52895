"""report.md, report.csv, report.json and selection.json from an evaluated report."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Any

from synth.cost import format_size, speedup_text
from synth.exporters.selection import SELECTION_FORMAT
from synth.report.budget import budget_markdown
from synth.report.evaluate import TABLE_SIZES, Evaluation, ModelPoint, Shortfall, Winner
from synth.report.tuning import tuning_markdown


@dataclass(frozen=True)
class SizePoint:
    """At one grid size: the selected schedule (the fastest of all, as selection.json picks it)
    and what NCCL takes there (the lower of its schedules and the runtime model, as "vs NCCL")."""

    size: int
    selected: str
    protocol: str
    selected_us: float
    nccl: str | None
    nccl_us: float | None

    @property
    def speedup(self) -> float | None:
        """NCCL's time over the selection's (> 1: the selection is faster)."""
        return None if self.nccl_us is None else self.nccl_us / self.selected_us


def size_points(doc: dict[str, Any]) -> list[SizePoint]:
    """One SizePoint per grid size of a report document (report.json), the same figures as its
    "fastest" ranges: ties go to the first label, as ``evaluate.winners`` breaks them."""
    model = doc.get("nccl_model")
    out = []
    for i, size in enumerate(doc["sizes"]):
        best = min(doc["schedules"], key=lambda e: (e["rows"][i]["step_time_us"], e["label"]))
        out.append(SizePoint(size, best["label"], best["rows"][i]["protocol"], best["rows"][i]["step_time_us"],
                             *_nccl_point(doc["schedules"], None if model is None else model[i], i)))
    return out


def _nccl_point(schedules: list[dict], model: dict | None, index: int) -> tuple[str | None, float | None]:
    """(label, time) of NCCL's fastest schedule at ``index``, or the runtime model's where lower."""
    nccl = [e for e in schedules if e["kind"] == "nccl"]
    options = []
    if nccl:
        best = min(nccl, key=lambda e: (e["rows"][index]["step_time_us"], e["label"]))
        options.append((best["label"], best["rows"][index]["step_time_us"]))
    if model is not None and model.get("below_bound_us") is None:
        options.append((ModelPoint(**{k: v for k, v in model.items() if k != "below_bound_us"}).label,
                        model["time_us"]))
    return min(options, key=lambda o: o[1]) if options else (None, None)


def verdict_sizes(sizes: list[int]) -> list[int]:
    """The table sizes (1K, 1M, 1G) on the grid; else its smallest and largest size."""
    on_grid = [s for s in TABLE_SIZES if s in sizes]
    return on_grid or sorted({sizes[0], sizes[-1]})


def costing_text(calibration: str | None) -> str:
    """Which model the times are under, as the verdict names it."""
    if calibration is None:
        return "contract model"
    return "default calibration" if calibration == "default" else f"calibration {calibration}"


def verdict(topology_name: str, collective: str, points: list[SizePoint], calibration: str | None) -> str:
    """One line: the selection against NCCL at the verdict sizes, e.g. ``dgx1 allgather: synth's
    selection is 1.32x faster than NCCL at 1K, 1.13x faster at 1M, level at 1G (default
    calibration)``; sizes where nothing stands for NCCL are left out."""
    wanted = verdict_sizes([p.size for p in points])
    parts = [(p.size, speedup_text(p.speedup)) for p in points if p.size in wanted and p.speedup is not None]
    head = f"{topology_name} {collective}: "
    tail = f" ({costing_text(calibration)})"
    if not parts:
        return head + "no NCCL schedule to compare synth's selection with" + tail
    (size, first), rest = parts[0], parts[1:]
    lead = "level with NCCL" if first == "level" else f"{first} than NCCL"
    words = [f"{lead} at {format_size(size)}"] + [f"{text} at {format_size(s)}" for s, text in rest]
    return head + "synth's selection is " + ", ".join(words) + tail


def _us(x: float) -> str:
    return f"{x:.2f}" if x < 1e5 else f"{x:.0f}"


def _speed(low: float | None, high: float | None) -> str:
    if low is None:
        return "-"
    return f"{low:.2f}x" if abs(high - low) < 0.005 else f"{low:.2f}x-{high:.2f}x"


def _span_text(low: int, high: int | None) -> str:
    return f"{format_size(low)}..{'' if high is None else format_size(high + 1)}"


def _model_text(bounds: dict[str, Any], costing: dict[str, Any]) -> str:
    """The sentence that says which model the report's times come from."""
    label = costing.get("calibration")
    if label is None:
        return (f"busbw <= {bounds['busbw_gbps']:.1f} GB/s. Times are the contract step model (DESIGN.md) with "
                "protocol factors only")
    return (f"busbw <= {bounds['busbw_gbps']:.1f} GB/s at line rate, <= {bounds['runtime_busbw_gbps']:.1f} GB/s at "
            f"the rates the runtime reaches. Times are the step model under the runtime terms of calibration "
            f"`{label}` (docs/cost-model.md, \"The runtime model\": link efficiency, thread blocks per link, "
            f"latencies, launch floor; the same for every schedule)")


def markdown(topology_name: str, collective: str, bounds: dict[str, Any], evaluations: list[Evaluation],
             picks: list[Winner], sizes: list[int], short: list[Shortfall] = (),
             costing: dict[str, Any] | None = None, verdict_line: str | None = None) -> str:
    """report.md: the verdict line, the model and bounds, how to read the columns (once), the
    schedules, the fastest schedule by size and where synthesis is slower than NCCL."""
    costing = costing or {}
    lines = [f"# {collective} on {topology_name}", ""]
    if verdict_line:
        lines += [f"**{verdict_line}**", ""]
    lines.append(f"Lower bounds: steps >= {bounds['steps']}, rounds per chunk >= {bounds['rounds_per_chunk']}, "
                 f"{_model_text(bounds, costing)}, every schedule at its fastest protocol per size (Simple, LL128 "
                 f"or LL), named beside each time; the event simulation is in report.csv. "
                 f"Sizes: {format_size(sizes[0])}..{format_size(sizes[-1])}, log-spaced. Kinds: smt/milp are "
                 f"synthesized, nccl is what NCCL runs (its fastest at a size is the `nccl` baseline), "
                 f"baseline is a classic algorithm.")
    lines += ["", *reading_notes(costing.get("nccl_model") is not None)]
    lines += ["", "## Schedules", ""]
    head = "| schedule | kind | S | R | C | " + " | ".join(f"time @{format_size(s)} us" for s in TABLE_SIZES)
    head += (f" | busbw @{format_size(TABLE_SIZES[-1])} GB/s | % of bound @{format_size(TABLE_SIZES[-1])} "
             "| solve s | file |")
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    order = {"smt": 0, "milp": 0, "file": 0, "nccl": 1, "baseline": 2}
    for e in sorted(evaluations, key=lambda e: (order.get(e.candidate.kind, 3), e.candidate.label)):
        c = e.candidate
        times = " | ".join(f"{_us(r['step_time_us'])} {r['protocol']}" for r in e.table)
        big = e.table[-1]
        frac = big["bound_fraction"]
        solve = "-" if c.solve_seconds is None else f"{c.solve_seconds:.2f}"
        lines.append(f"| {c.label} | {c.kind} | {_dash(c.steps)} | {_dash(c.rounds)} | {_dash(c.chunks)} | {times} | "
                     f"{big['busbw_gbps']:.1f} | {'-' if frac is None else f'{100 * frac:.1f}%'} | {solve} | "
                     f"`schedules/{c.file_name}` |")
    lines += ["", "## Fastest schedule by size", "",
              "| sizes | fastest | protocol | vs NCCL | NCCL runs there | vs best baseline | best baseline there |",
              "|---|---|---|---|---|---|---|"]
    for w in picks:
        lines.append(f"| {_span_text(w.min_bytes, w.max_bytes)} | {w.label} | {w.protocol} | "
                     f"{_speed(w.nccl_speedup, w.nccl_speedup_max)} | {w.nccl or '-'} | "
                     f"{_speed(w.speedup, w.speedup_max)} | {w.best_baseline or '-'} |")
    lines += ["", "Ranges are [low, high); a speedup is the other schedule's time over the fastest one's, least "
              "to most over the range's grid sizes (1.00x: it is the fastest itself); \"NCCL\" as in *How to "
              "read this report*; \"best baseline\" is the fastest non-synthesized schedule of any kind.", ""]
    if any(e.candidate.synthesized for e in evaluations):
        lines += ["## Where synthesis is slower than NCCL", ""]
        if short:
            lines += ["| size | fastest synthesized | us | NCCL | us | ours / NCCL |", "|---|---|---|---|---|---|"]
            lines += [f"| {format_size(s.size)} | {s.synthesized} | {_us(s.synthesized_us)} | {s.nccl} | "
                      f"{_us(s.nccl_us)} | {1 / s.ratio:.2f}x slower |" for s in short]
        else:
            lines.append("Nowhere on the grid: at every size a synthesized schedule is at least as fast as NCCL.")
        lines.append("")
    lines += contradiction_markdown(costing.get("nccl_model"))
    if costing.get("nccl_tuning"):
        lines += tuning_markdown(costing["nccl_tuning"], topology_name, collective)
    if costing.get("budget_curve"):
        lines += budget_markdown(costing["budget_curve"], costing.get("max_threadblocks"), evaluations)
    label = costing.get("calibration")
    flag = "" if label is None else f" --calibration {label}"
    budget = "" if not costing.get("max_threadblocks") else f" --max-threadblocks {costing['max_threadblocks']}"
    lines += [f"Reproduce any number: `synth cost schedules/FILE --sizes 1K,1M,1G --protocol best{flag}`; the whole "
              f"report: `synth report {topology_name} {collective}" + (" --calibration none" if label is None else
                                                                      "" if label == "default" else flag)
              + budget + "`.", ""]
    return "\n".join(lines)


def reading_notes(modelled: bool) -> list[str]:
    """What each column of report.md means, said once (``modelled``: the runtime model of NCCL is
    part of "NCCL")."""
    nccl = ("the lower of the fastest schedule NCCL runs at that size (ring, tree, PAT or point-to-point, its "
            "channels and protocol included) and what the runtime model fitted to measured nccl-tests runs says "
            "NCCL takes there (\"NCCL as modelled\")" if modelled else
            "the fastest schedule NCCL runs at that size (ring, tree, PAT or point-to-point, its channels and "
            "protocol included)")
    return [
        "## How to read this report", "",
        "- **time** (\"step time\", `step_time_us` in report.csv): the alpha-beta step model, each step as long "
        "as its busiest link; every table, speedup and pick uses it. **sim time** (`sim_time_us`, report.csv "
        "only): the event-driven simulation, where a transfer starts as soon as its data and link are ready "
        "instead of at a step boundary; never above the step time, and not used to pick (a schedule of more "
        "than 100,000 events, its sends and the ports of its switch entries, is simulated at 1K, 1M and 1G only; "
        "its other rows leave the column empty).",
        "- **% of bound**: the collective's lower-bound time at that size over the schedule's time. Every row at "
        "a size is measured against the same bound, whatever its chunking (report.csv's "
        "`own_chunking_bound_*` columns hold the bound of a schedule's own chunking). At small sizes the time is "
        "almost all per-step latency, while the bound charges only the fewest possible steps at the cheapest "
        "link latency and one call's latency (or the launch floor), so a schedule of several steps sits well "
        "below 100% there even when it is the fastest: compare times, not % of bound, below about 1M.",
        "- **S / R / C**: steps; rounds (each step's length in chunk transfer times, summed: a step of r rounds "
        "moves up to r chunks over a link); chunks per rank. In `nccl_*` labels, `pieces=N` is NCCL's "
        "pipelining depth (pieces per channel), not C.",
        f"- **NCCL** (\"vs NCCL\", the verdict, speedup.png): {nccl}. A speedup is NCCL's time over ours "
        "(> 1: ours is faster).",
    ]


def _dash(x) -> str:
    return "-" if x is None else str(x)


def csv_text(evaluations: list[Evaluation]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["schedule", "kind", "file", "size", "protocol", "step_time_us", "sim_time_us", "algbw_gbps",
                     "busbw_gbps", "bound_time_us", "bound_fraction", "own_chunking_bound_time_us",
                     "own_chunking_bound_fraction"])
    for e in evaluations:
        for r in e.rows:
            writer.writerow([e.candidate.label, e.candidate.kind, e.candidate.file_name, r["size"], r["protocol"],
                             *(_num(r.get(key)) for key in CSV_NUMBERS)])
    return out.getvalue()


CSV_NUMBERS = ("step_time_us", "sim_time_us", "algbw_gbps", "busbw_gbps", "bound_time_us", "bound_fraction",
               "own_chunking_bound_time_us", "own_chunking_bound_fraction")


def contradiction_markdown(model: list[ModelPoint] | None) -> list[str]:
    """Where the runtime model puts NCCL below this topology's lower bound: one section naming
    those sizes (no comparison is drawn with the model there); nothing when there are none."""
    below = [p for p in model or () if p.contradicts]
    if not below:
        return []
    lines = ["## Where the runtime model contradicts this topology", "",
             "At these sizes NCCL as modelled would be faster than the lower bound of the topology the report "
             "is computed on: the model or the topology misses something the machine does (NVLS? SHARP?). "
             "No verdict is drawn against the model at these sizes.", "",
             "| size | NCCL as modelled | us | lower bound us |", "|---|---|---|---|"]
    lines += [f"| {format_size(p.size)} | {p.algorithm}/{p.protocol} | {_us(p.time_us)} | {_us(p.bound_us)} |"
              for p in below]
    return lines + [""]


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.6f}"


def json_doc(topology_name: str, collective: str, bounds: dict[str, Any], evaluations: list[Evaluation],
             picks: list[Winner], sizes: list[int], bound: list[dict], short: list[Shortfall] = (),
             costing: dict[str, Any] | None = None, ranks: int | None = None) -> dict[str, Any]:
    """report.json; ``per_size`` and ``verdict`` are derived from the rest (``with_verdict``)."""
    costing = costing or {}
    model = costing.get("nccl_model")
    return with_verdict({
        "format": "synth.report", "version": 1,
        "topology": topology_name, "collective": collective, "ranks": ranks, "sizes": sizes, "bounds": bounds,
        "calibration": costing.get("calibration"),
        "nccl_model": None if model is None else [
            {"size": p.size, "time_us": p.time_us, "algorithm": p.algorithm, "protocol": p.protocol,
             "channels": p.channels, **({"below_bound_us": p.bound_us} if p.contradicts else {})}
            for p in model],
        "bound": bound,
        "schedules": [{
            "label": e.candidate.label, "kind": e.candidate.kind, "file": f"schedules/{e.candidate.file_name}",
            "threadblocks_per_instance": e.blocks,
            "steps": e.candidate.steps, "rounds": e.candidate.rounds, "chunks": e.candidate.chunks,
            "solve_seconds": e.candidate.solve_seconds, "rows": list(e.rows),
        } for e in evaluations],
        "fastest": [_winner(w) for w in picks],
        "nccl_tuning": costing.get("nccl_tuning"),
        "max_threadblocks": costing.get("max_threadblocks"),
        "budget_curve": costing.get("budget_curve"),
        "slower_than_nccl": [{"size": s.size, "synthesized": s.synthesized, "synthesized_us": s.synthesized_us,
                              "nccl": s.nccl, "nccl_us": s.nccl_us} for s in short],
    })


def with_verdict(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with ``per_size`` (the selection and NCCL at every grid size, ``size_points``) and
    ``verdict`` (the one line) added."""
    points = size_points(doc)
    per_size = [{"size": p.size, "selected": p.selected, "protocol": p.protocol, "selected_us": p.selected_us,
                 "nccl": p.nccl, "nccl_us": p.nccl_us, "nccl_speedup": p.speedup} for p in points]
    line = verdict(doc["topology"], doc["collective"], points, doc.get("calibration"))
    return {**doc, "per_size": per_size, "verdict": line}


def selection_doc(topology_name: str, collective: str, picks: list[Winner]) -> dict[str, Any]:
    """Size ranges -> schedule file and protocol: MSCCL minBytes/maxBytes (inclusive; null =
    unbounded); ``synth export selection.json --format msccl-xml -o DIR`` writes one XML per range."""
    return {"format": SELECTION_FORMAT, "version": 1, "topology": topology_name, "collective": collective,
            "ranges": [{"min_bytes": w.min_bytes, "max_bytes": w.max_bytes,
                        "schedule": f"schedules/{w.file_name}", "label": w.label, "protocol": w.protocol}
                       for w in picks]}


def _winner(w: Winner) -> dict[str, Any]:
    return {"min_bytes": w.min_bytes, "max_bytes": w.max_bytes, "label": w.label,
            "file": f"schedules/{w.file_name}", "synthesized": w.synthesized,
            "best_baseline": w.best_baseline, "speedup": w.speedup, "speedup_max": w.speedup_max,
            "protocol": w.protocol, "nccl": w.nccl, "nccl_speedup": w.nccl_speedup,
            "nccl_speedup_max": w.nccl_speedup_max}
