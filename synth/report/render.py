"""report.md, report.csv, report.json and selection.json from an evaluated report."""

from __future__ import annotations

import csv
import io
from typing import Any

from synth.cost import format_size
from synth.exporters.selection import SELECTION_FORMAT
from synth.report.evaluate import TABLE_SIZES, Evaluation, Shortfall, Winner



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
             costing: dict[str, Any] | None = None) -> str:
    costing = costing or {}
    lines = [f"# {collective} on {topology_name}", ""]
    lines.append(f"Lower bounds: steps >= {bounds['steps']}, rounds per chunk >= {bounds['rounds_per_chunk']}, "
                 f"{_model_text(bounds, costing)}, every schedule at its fastest protocol per size (Simple, LL128 "
                 f"or LL), named beside each time; the event simulation is in report.csv. "
                 f"Sizes: {format_size(sizes[0])}..{format_size(sizes[-1])}, log-spaced. Kinds: smt/milp are "
                 f"synthesized, nccl is what NCCL runs (its fastest at a size is the `nccl` baseline), "
                 f"baseline is a classic algorithm.")
    lines += ["", "## Schedules", ""]
    head = "| schedule | kind | S | R | C | " + " | ".join(f"time @{format_size(s)} us" for s in TABLE_SIZES)
    head += f" | busbw @{format_size(TABLE_SIZES[-1])} GB/s | % of bound @{format_size(TABLE_SIZES[-1])} | solve s | file |"
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
    lines += ["", "Ranges are [low, high) in bytes; a speedup is the other schedule's time over the fastest "
              "one's, least to most over the range's grid sizes (1.00x: it is the fastest itself). "
              "\"vs NCCL\" compares with the fastest schedule NCCL runs at that size (ring, tree, PAT or "
              "point-to-point, channels and protocol included)"
              + ("" if costing.get("nccl_model") is None else
                 ", or with what the runtime model fitted to measured nccl-tests runs says NCCL takes there "
                 "(\"NCCL as modelled\") where that is less")
              + "; \"best baseline\" with the fastest non-synthesized schedule of any kind.", ""]
    if any(e.candidate.synthesized for e in evaluations):
        lines += ["## Where synthesis is slower than NCCL", ""]
        if short:
            lines += ["| size | fastest synthesized | us | NCCL | us | ours / NCCL |", "|---|---|---|---|---|---|"]
            lines += [f"| {format_size(s.size)} | {s.synthesized} | {_us(s.synthesized_us)} | {s.nccl} | "
                      f"{_us(s.nccl_us)} | {1 / s.ratio:.2f}x slower |" for s in short]
        else:
            lines.append("Nowhere on the grid: at every size a synthesized schedule is at least as fast as NCCL.")
        lines.append("")
    label = costing.get("calibration")
    flag = "" if label is None else f" --calibration {label}"
    lines += [f"Reproduce any number: `synth cost schedules/FILE --sizes 1K,1M,1G --protocol best{flag}`; the whole "
              f"report: `synth report {topology_name} {collective}" + (" --calibration none" if label is None else
                                                                      "" if label == "default" else flag) + "`.", ""]
    return "\n".join(lines)


def _dash(x) -> str:
    return "-" if x is None else str(x)


def csv_text(evaluations: list[Evaluation]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["schedule", "kind", "file", "size", "protocol", "step_time_us", "sim_time_us", "algbw_gbps",
                     "busbw_gbps", "bound_time_us", "bound_fraction"])
    for e in evaluations:
        for r in e.rows:
            writer.writerow([e.candidate.label, e.candidate.kind, e.candidate.file_name, r["size"], r["protocol"],
                             f"{r['step_time_us']:.6f}", f"{r['sim_time_us']:.6f}", f"{r['algbw_gbps']:.6f}",
                             f"{r['busbw_gbps']:.6f}", f"{r['bound_time_us']:.6f}", f"{r['bound_fraction']:.6f}"])
    return out.getvalue()


def json_doc(topology_name: str, collective: str, bounds: dict[str, Any], evaluations: list[Evaluation],
             picks: list[Winner], sizes: list[int], bound: list[dict], short: list[Shortfall] = (),
             costing: dict[str, Any] | None = None) -> dict[str, Any]:
    costing = costing or {}
    model = costing.get("nccl_model")
    return {
        "format": "synth.report", "version": 1,
        "topology": topology_name, "collective": collective, "sizes": sizes, "bounds": bounds,
        "calibration": costing.get("calibration"),
        "nccl_model": None if model is None else [
            {"size": p.size, "time_us": p.time_us, "algorithm": p.algorithm, "protocol": p.protocol,
             "channels": p.channels} for p in model],
        "bound": bound,
        "schedules": [{
            "label": e.candidate.label, "kind": e.candidate.kind, "file": f"schedules/{e.candidate.file_name}",
            "steps": e.candidate.steps, "rounds": e.candidate.rounds, "chunks": e.candidate.chunks,
            "solve_seconds": e.candidate.solve_seconds, "rows": list(e.rows),
        } for e in evaluations],
        "fastest": [_winner(w) for w in picks],
        "slower_than_nccl": [{"size": s.size, "synthesized": s.synthesized, "synthesized_us": s.synthesized_us,
                              "nccl": s.nccl, "nccl_us": s.nccl_us} for s in short],
    }


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
