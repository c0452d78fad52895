"""busbw and time vs size, one line per schedule, the bound dashed (matplotlib, no display)."""

from __future__ import annotations

from pathlib import Path

from synth.cost import format_size
from synth.report.evaluate import Evaluation


def plot(evaluations: list[Evaluation], bound: list[dict], title: str, folder: Path) -> list[Path]:
    """Write busbw.png and time.png into ``folder``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [row["size"] for row in bound]
    paths = []
    for name, key, bound_key, ylabel, logy in (
        ("busbw.png", "busbw_gbps", "busbw_gbps", "bus bandwidth (GB/s)", False),
        ("time.png", "step_time_us", "time_us", "time (us, step model)", True),
    ):
        fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
        for e in evaluations:
            style = "-" if e.candidate.synthesized else ":"
            marker = "o" if e.candidate.synthesized else "."
            ax.plot(sizes, [r[key] for r in e.rows], style, marker=marker, markersize=3, linewidth=1.4,
                    label=e.candidate.label)
        ax.plot(sizes, [r[bound_key] for r in bound], "k--", linewidth=1.2, label="lower bound")
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ticks = sizes[:: max(1, len(sizes) // 8)]
        ax.set_xticks(ticks)
        ax.set_xticklabels([format_size(s) for s in ticks])
        ax.set_xlabel("collective size S (bytes, nccl-tests convention)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="best", ncol=2)
        fig.tight_layout()
        path = folder / name
        tmp = folder / f".{name}.tmp.png"
        fig.savefig(tmp, metadata={"Software": None})
        plt.close(fig)
        tmp.replace(path)
        paths.append(path)
    return paths
