"""report.md, report.csv, report.json and selection.json from an evaluated report."""

from __future__ import annotations

import csv
import io
from typing import Any

from synth.cost import format_size
from synth.report.evaluate import TABLE_SIZES, Evaluation, Winner

SELECTION_FORMAT = "synth.selection"


def _us(x: float) -> str:
    return f"{x:.2f}" if x < 1e5 else f"{x:.0f}"


def markdown(topology_name: str, collective: str, bounds: dict[str, Any], evaluations: list[Evaluation],
             picks: list[Winner], sizes: list[int]) -> str:
    lines = [f"# {collective} on {topology_name}", ""]
    lines.append(f"Lower bounds: steps >= {bounds['steps']}, rounds per chunk >= {bounds['rounds_per_chunk']}, "
                 f"busbw <= {bounds['busbw_gbps']:.1f} GB/s. Times are the contract step model "
                 f"(DESIGN.md); the event simulation is in report.csv. Sizes: {format_size(sizes[0])}.."
                 f"{format_size(sizes[-1])}, log-spaced.")
    lines += ["", "## Schedules", ""]
    head = "| schedule | kind | S | R | C | " + " | ".join(f"time @{format_size(s)} us" for s in TABLE_SIZES)
    head += f" | busbw @{format_size(TABLE_SIZES[-1])} GB/s | % of bound @{format_size(TABLE_SIZES[-1])} | solve s | file |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for e in sorted(evaluations, key=lambda e: (not e.candidate.synthesized, e.candidate.label)):
        c = e.candidate
        times = " | ".join(_us(r["step_time_us"]) for r in e.table)
        big = e.table[-1]
        frac = big["bound_fraction"]
        solve = "-" if c.solve_seconds is None else f"{c.solve_seconds:.2f}"
        lines.append(f"| {c.label} | {c.kind} | {_dash(c.steps)} | {_dash(c.rounds)} | {_dash(c.chunks)} | {times} | "
                     f"{big['busbw_gbps']:.1f} | {'-' if frac is None else f'{100 * frac:.1f}%'} | {solve} | "
                     f"`schedules/{c.file_name}` |")
    lines += ["", "## Fastest schedule by size", "",
              "| sizes | fastest | best baseline there | speedup over it |", "|---|---|---|---|"]
    for w in picks:
        span = f"{format_size(w.min_bytes)}..{'' if w.max_bytes is None else format_size(w.max_bytes + 1)}"
        speed = "-" if w.speedup is None else (f"{w.speedup:.2f}x" if abs(w.speedup_max - w.speedup) < 0.005
                                                else f"{w.speedup:.2f}x-{w.speedup_max:.2f}x")
        lines.append(f"| {span} | {w.label} | {w.best_baseline or '-'} | {speed} |")
    lines += ["", "Ranges are [low, high) in bytes; the speedup is the fastest baseline's time over the fastest "
              "schedule's, least to most over the range's grid sizes (1.00x: a baseline is the fastest).",
              "", "Reproduce any number: `synth cost schedules/FILE --sizes 1K,1M,1G`; the whole report: "
              f"`synth report {topology_name} {collective}`.", ""]
    return "\n".join(lines)


def _dash(x) -> str:
    return "-" if x is None else str(x)


def csv_text(evaluations: list[Evaluation]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["schedule", "kind", "file", "size", "step_time_us", "sim_time_us", "algbw_gbps",
                     "busbw_gbps", "bound_time_us", "bound_fraction"])
    for e in evaluations:
        for r in e.rows:
            writer.writerow([e.candidate.label, e.candidate.kind, e.candidate.file_name, r["size"],
                             f"{r['step_time_us']:.6f}", f"{r['sim_time_us']:.6f}", f"{r['algbw_gbps']:.6f}",
                             f"{r['busbw_gbps']:.6f}", f"{r['bound_time_us']:.6f}", f"{r['bound_fraction']:.6f}"])
    return out.getvalue()


def json_doc(topology_name: str, collective: str, bounds: dict[str, Any], evaluations: list[Evaluation],
             picks: list[Winner], sizes: list[int], bound: list[dict]) -> dict[str, Any]:
    return {
        "format": "synth.report", "version": 1,
        "topology": topology_name, "collective": collective, "sizes": sizes, "bounds": bounds,
        "bound": bound,
        "schedules": [{
            "label": e.candidate.label, "kind": e.candidate.kind, "file": f"schedules/{e.candidate.file_name}",
            "steps": e.candidate.steps, "rounds": e.candidate.rounds, "chunks": e.candidate.chunks,
            "solve_seconds": e.candidate.solve_seconds, "rows": list(e.rows),
        } for e in evaluations],
        "fastest": [_winner(w) for w in picks],
    }


def selection_doc(topology_name: str, collective: str, picks: list[Winner]) -> dict[str, Any]:
    """Size ranges -> schedule file: MSCCL minBytes/maxBytes (inclusive; null = unbounded)."""
    return {"format": SELECTION_FORMAT, "version": 1, "topology": topology_name, "collective": collective,
            "ranges": [{"min_bytes": w.min_bytes, "max_bytes": w.max_bytes,
                        "schedule": f"schedules/{w.file_name}", "label": w.label} for w in picks]}


def _winner(w: Winner) -> dict[str, Any]:
    return {"min_bytes": w.min_bytes, "max_bytes": w.max_bytes, "label": w.label,
            "file": f"schedules/{w.file_name}", "synthesized": w.synthesized,
            "best_baseline": w.best_baseline, "speedup": w.speedup, "speedup_max": w.speedup_max}
