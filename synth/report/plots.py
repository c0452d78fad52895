"""busbw.png, time.png and speedup.png of a report, drawn from its report.json document
(matplotlib, no display); ``replot`` redraws them for an existing report folder.

Every schedule is a thin, light line in its kind's style (synthesized: solid, warm colours;
NCCL's schedules and its runtime model: dashed, blues; classic algorithms: dotted, greys and
greens), no two with the same colour and dash. Drawn on top, thick and labelled as such: the
selected schedule at each size (selection.json), NCCL's best at each size (the figure "vs NCCL"
compares with: its schedules and the runtime model) and the collective's lower bound. The
legend sits outside the axes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth.core.errors import InputError
from synth.cost import LEVEL, format_size, speedup_text
from synth.report.render import SizePoint, costing_text, size_points

PLOTS = ("busbw.png", "time.png", "speedup.png", "threadblocks.png")  # the last where the doc has budget_curve
SYNTHESIZED, NCCL, CLASSIC = "synthesized", "nccl", "classic"
PALETTES = {  # one hue family per kind; PROMINENT colours appear in none of them
    SYNTHESIZED: ("#e6550d", "#f0a030", "#d62728", "#e7298a", "#a63603", "#fd8d3c"),
    NCCL: ("#1f77b4", "#6baed6", "#17becf", "#3182bd", "#7fb2e5", "#4eb3d3", "#2b8cbe"),
    CLASSIC: ("#7f7f7f", "#2ca02c", "#9467bd", "#bcbd22", "#8c564b", "#74c476", "#525252"),
}
DASHES = {  # per kind; a kind's palette is cycled once per dash
    SYNTHESIZED: ("-", (0, (6, 1, 1, 1)), (0, (8, 2))),
    NCCL: ("--", "-.", (0, (3, 1, 1, 1, 1, 1))),
    CLASSIC: (":", (0, (1, 2)), (0, (2, 3))),
}
SELECTED_COLOR, NCCL_BEST_COLOR, BOUND_COLOR = "#b2182b", "#08306b", "black"


@dataclass(frozen=True)
class Style:
    """How one line is drawn."""

    color: str
    dash: Any  # a matplotlib linestyle
    width: float
    alpha: float
    marker: str | None = None
    zorder: int = 2


@dataclass(frozen=True)
class Series:
    """One line: a label, its family (a kind of schedule, or a prominent line) and times per size."""

    label: str
    family: str
    times_us: tuple[float, ...]


PROMINENT = {  # family -> style of the lines drawn on top
    "selected": Style(SELECTED_COLOR, "-", 3.0, 0.95, "o", 6),
    "nccl_best": Style(NCCL_BEST_COLOR, "-", 3.0, 0.9, "s", 5),
    "bound": Style(BOUND_COLOR, "--", 1.6, 0.9, None, 4),
    "nccl_model": Style(NCCL_BEST_COLOR, ":", 2.2, 0.9, "^", 4),
}


def family_of(kind: str) -> str:
    """A schedule kind's family: nccl, classic (baseline) or synthesized (smt, milp, greedy, file)."""
    return NCCL if kind == "nccl" else CLASSIC if kind == "baseline" else SYNTHESIZED


def assign_styles(series: list[Series]) -> dict[str, Style]:
    """label -> Style: thin and light in the family's palette and dash, the n-th series of a
    family at colour n mod palette size and the next dash each time the palette wraps round;
    prominent families get their own style. Raises ValueError when a family has more series than
    distinct (colour, dash) pairs."""
    styles: dict[str, Style] = {}
    count: dict[str, int] = {}
    for s in series:
        if s.family in PROMINENT:
            styles[s.label] = PROMINENT[s.family]
            continue
        n = count.get(s.family, 0)
        count[s.family] = n + 1
        palette, dashes = PALETTES[s.family], DASHES[s.family]
        if n >= len(palette) * len(dashes):
            raise ValueError(f"{n + 1} {s.family} series: more than the {len(palette) * len(dashes)} distinct styles")
        styles[s.label] = Style(palette[n % len(palette)], dashes[n // len(palette)], 1.1, 0.75)
    return styles


def bound_label(doc: dict[str, Any]) -> str:
    """The bound line's legend: for allreduce on point-to-point machines it is the reduce-scatter
    + allgather composition, which schedules that reduce in flight (trees) can pass; where the
    machine's switch reduces it is the proven bound (``bounds.convention`` false)."""
    if doc.get("collective") == "allreduce" and doc.get("bounds", {}).get("convention", True):
        return "lower bound (RS + AG; trees may pass it)"
    if doc.get("collective") == "allreduce":
        return "lower bound (proven, with the switch's reduction: docs/bounds.md)"
    return "lower bound (collective)"


def series_of(doc: dict[str, Any]) -> list[Series]:
    """The lines of a report document: every schedule (synthesized, then NCCL's, then classic),
    NCCL's runtime model, then the bound, NCCL's best and the selection (drawn last, on top)."""
    order = {SYNTHESIZED: 0, NCCL: 1, CLASSIC: 2}
    ranked = sorted(doc["schedules"], key=lambda e: (order[family_of(e["kind"])], natural_key(e["label"])))
    out = [Series(e["label"], family_of(e["kind"]), tuple(r["step_time_us"] for r in e["rows"])) for e in ranked]
    if doc.get("nccl_model"):  # a point below the bound is a contradiction, not a time: left out
        times = tuple(math.nan if p.get("below_bound_us") is not None else p["time_us"] for p in doc["nccl_model"])
        out.append(Series("NCCL as modelled (runtime model)", "nccl_model", times))
    points = size_points(doc)
    out.append(Series(bound_label(doc), "bound", tuple(b["time_us"] for b in doc["bound"])))
    if all(p.nccl_us is not None for p in points):
        out.append(Series(nccl_best_label(doc), "nccl_best", tuple(p.nccl_us for p in points)))
    out.append(Series("selected schedule (selection.json)", "selected", tuple(p.selected_us for p in points)))
    return out


def natural_key(label: str) -> tuple:
    """Sorts ``pieces=2`` before ``pieces=16``: digit runs compare as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", label))


def nccl_best_label(doc: dict[str, Any]) -> str:
    """The legend's name for NCCL's best per size."""
    return "NCCL's best (schedules or runtime model)" if doc.get("nccl_model") else "NCCL's best schedule"


def busbw_factor(doc: dict[str, Any]) -> float:
    """busbw / algbw of the collective, read off the document's rows (1.0 when none says)."""
    for e in doc["schedules"]:
        for r in e["rows"]:
            if r["algbw_gbps"] > 0:
                return r["busbw_gbps"] / r["algbw_gbps"]
    return 1.0


def busbw_of(sizes: list[int], times_us: tuple[float, ...], factor: float) -> list[float]:
    """Bus bandwidth in GB/s (bytes per microsecond / 1e3, times the collective's factor)."""
    return [factor * size / t / 1e3 for size, t in zip(sizes, times_us)]


def title_of(doc: dict[str, Any]) -> str:
    gpus = f" ({doc['ranks']} GPUs)" if doc.get("ranks") else ""
    return f"{doc['collective']} on {doc['topology']}{gpus}, {costing_text(doc.get('calibration'))}"


def _size_axis(ax, sizes: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ticks = sizes[:: max(1, len(sizes) // 9)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(s) for s in ticks])
    ax.set_xlabel("collective size S (bytes, nccl-tests convention)")
    ax.grid(True, which="major", alpha=0.3)


def _legend(ax) -> None:
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


def _lines_figure(doc: dict[str, Any], busbw: bool):
    """busbw (log axis) or time against size: every series in its style, prominent ones on top."""
    import matplotlib.pyplot as plt

    sizes, series = doc["sizes"], series_of(doc)
    styles, factor = assign_styles(series), busbw_factor(doc)
    fig, ax = plt.subplots(figsize=(11, 5.8), dpi=110)
    for s in series:
        st = styles[s.label]
        ys = busbw_of(sizes, s.times_us, factor) if busbw else list(s.times_us)
        ax.plot(sizes, ys, linestyle=st.dash, color=st.color, linewidth=st.width, alpha=st.alpha,
                marker=st.marker, markersize=4 if st.marker else 0, zorder=st.zorder, label=s.label)
    _size_axis(ax, sizes)
    ax.set_yscale("log")
    _focus(ax, sizes, [s for s in series if s.family in PROMINENT], factor if busbw else None)
    ax.set_ylabel("bus bandwidth (GB/s, log scale)" if busbw else "time (us, step model, log scale)")
    ax.set_title(title_of(doc))
    _legend(ax)
    fig.tight_layout()
    return fig


def _focus(ax, sizes: list[int], prominent: list[Series], factor: float | None) -> None:
    """Limit the y axis to a decade around the prominent lines, so slow outliers do not squash them."""
    values = [v for s in prominent for v in (busbw_of(sizes, s.times_us, factor) if factor else s.times_us)]
    if values:
        ax.set_ylim(min(values) / 3, max(values) * 3)


def _speedup_figure(doc: dict[str, Any]):
    """The selection's speedup over NCCL's best against size; 1.0 marked, markers coloured by
    the schedule selected there."""
    import matplotlib.pyplot as plt

    points = [p for p in size_points(doc) if p.speedup is not None]
    fig, ax = plt.subplots(figsize=(11, 5.0), dpi=110)
    if points:
        _speedup_lines(ax, points)
    else:
        ax.text(0.5, 0.5, "no NCCL figure to compare with", transform=ax.transAxes, ha="center")
    _size_axis(ax, doc["sizes"])
    ax.set_ylabel("speedup over NCCL's best (x)")
    ax.set_title(f"{title_of(doc)}: selected schedule vs {nccl_best_label(doc)}", fontsize=10)
    _legend(ax)
    fig.tight_layout()
    return fig


def _speedup_lines(ax, points: list[SizePoint]) -> None:
    sizes = [p.size for p in points]
    speed = [p.speedup for p in points]
    low, high = min(min(speed), 1 / (1 + LEVEL)) * 0.9, max(max(speed), 1 + LEVEL) * 1.1
    ax.axhspan(1.0, high, color="#d9f0d3", alpha=0.5, zorder=0, label="synth faster")
    ax.axhspan(low, 1.0, color="#fde0dd", alpha=0.5, zorder=0, label="NCCL faster")
    ax.axhspan(1 / (1 + LEVEL), 1 + LEVEL, color="#bdbdbd", alpha=0.5, zorder=0,
               label=f"level (within {100 * LEVEL:.0f}%)")
    ax.axhline(1.0, color="black", linewidth=1.4, zorder=1, label="1.0 = level with NCCL")
    ax.plot(sizes, speed, color="#444444", linewidth=1.2, zorder=2)
    labels = list(dict.fromkeys(p.selected for p in points))
    colors = dict(zip(labels, _distinct_colors(len(labels))))
    for label in labels:
        mine = [p for p in points if p.selected == label]
        ax.scatter([p.size for p in mine], [p.speedup for p in mine], s=36, color=colors[label], zorder=3,
                   edgecolors="black", linewidths=0.5, label=f"selected: {label}")
    for p in points:
        if p.size in (1 << 10, 1 << 20, 1 << 30):
            ax.annotate(speedup_text(p.speedup), (p.size, p.speedup), textcoords="offset points", xytext=(0, 9),
                        ha="center", fontsize=8)
    ax.set_ylim(low, high)


def _distinct_colors(n: int) -> list[str]:
    """``n`` colours of the tab10/tab20 cycle, no two alike."""
    import matplotlib

    base = list(matplotlib.colormaps["tab10"].colors) + list(matplotlib.colormaps["tab20"].colors[1::2])
    return [matplotlib.colors.to_hex(base[i % len(base)]) for i in range(n)]


def figures(doc: dict[str, Any]) -> dict[str, Any]:
    """file name -> matplotlib Figure, for each of PLOTS (not yet saved)."""
    import matplotlib

    matplotlib.use("Agg")
    out = {"busbw.png": _lines_figure(doc, True), "time.png": _lines_figure(doc, False),
           "speedup.png": _speedup_figure(doc)}
    if doc.get("budget_curve"):
        out["threadblocks.png"] = _budget_figure(doc)
    return out


def _budget_figure(doc: dict[str, Any]):
    """Time against thread blocks per rank at the table sizes: the fastest synthesized schedule
    (solid) and NCCL (dashed) within each budget; "none" (no budget) at the right."""
    import matplotlib.pyplot as plt

    from synth.cost import format_size

    curve = doc["budget_curve"]
    budgets = sorted({row["budget"] for row in curve if row["budget"] is not None})
    unbounded = 2 * budgets[-1] if budgets else 1
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, size in enumerate(sorted({row["size"] for row in curve})):
        rows = sorted((r for r in curve if r["size"] == size), key=lambda r: r["budget"] or unbounded)
        xs = [r["budget"] or unbounded for r in rows]
        colour = f"C{i}"
        ax.plot(xs, [r["synthesized_us"] for r in rows], "-o", color=colour,
                label=f"synthesized @{format_size(size)}")
        ax.plot(xs, [r["nccl_us"] for r in rows], "--s", color=colour, label=f"NCCL @{format_size(size)}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(budgets + [unbounded], [str(b) for b in budgets] + ["none"])
    ax.set_xlabel("thread blocks per rank (budget)")
    ax.set_ylabel("time (us)")
    ax.set_title(f"{doc['collective']} on {doc['topology']}: time within a thread-block budget")
    ax.legend(fontsize=8)
    return fig


def plot(doc: dict[str, Any], folder: Path) -> list[Path]:
    """Write PLOTS into ``folder`` (each to a temp file, then renamed); returns their paths."""
    import matplotlib.pyplot as plt

    paths = []
    for name, fig in figures(doc).items():
        path = Path(folder) / name
        tmp = Path(folder) / f".{name}.tmp.png"
        fig.savefig(tmp, metadata={"Software": None}, bbox_inches="tight")
        plt.close(fig)
        tmp.replace(path)
        paths.append(path)
    return paths


def replot(folder: str | Path, out: str | Path | None = None) -> list[Path]:
    """Redraw the plots of the report in ``folder`` from its report.json, into ``out`` (default:
    the same folder). A report.json written before ``per_size`` and ``ranks`` existed works too."""
    from synth.core.io import read_json

    path = Path(folder) / "report.json"
    if not path.exists():
        raise InputError(f"{path}: no such report (run 'synth report' first)")
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("format") != "synth.report":
        raise InputError(f"{path}: not a synth.report document")
    target = Path(out) if out is not None else Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    return plot(doc, target)
