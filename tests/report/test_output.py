"""What a report says: the verdict line, sizes as K/M/G, one bound per size, labels that match
their columns, and plots a person can read (synth.report.render, plots, runner; synth report)."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import replace

import pytest

from synth.baselines import registry
from synth.cli.main import main
from synth.cli.report import span_text
from synth.core.library import resolve_topology
from synth.measure.calibration import Calibration
from synth.report import runner
from synth.report.candidates import Candidate
from synth.report.evaluate import bound_rows, evaluate
from synth.report.plots import PROMINENT, Series, assign_styles, figures, plot
from synth.report.render import SizePoint, csv_text, size_points, verdict


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("small") / "ring4"
    doc = runner.report("ring:4", "allgather", out, sizes="1K..1G", time_limit=30)
    return out, doc


# ---------------------------------------------------------------------------- verdict
def _point(size: int, speedup: float | None) -> SizePoint:
    return SizePoint(size, "smt S=3 R=3 C=1", "ll", 10.0, None if speedup is None else "nccl_ring",
                     None if speedup is None else 10.0 * speedup)


def test_verdict_names_each_size_faster_level_or_slower():
    points = [_point(1 << 10, 1.318), _point(1 << 15, 3.0), _point(1 << 20, 1.13), _point(1 << 30, 0.995)]
    assert verdict("dgx1", "allgather", points, "default") == (
        "dgx1 allgather: synth's selection is 1.32x faster than NCCL at 1K, 1.13x faster at 1M, level at 1G "
        "(default calibration)")
    slower = [_point(1 << 10, 1.01), _point(1 << 30, 0.75)]
    assert verdict("h", "allreduce", slower, None) == (
        "h allreduce: synth's selection is level with NCCL at 1K, 1.33x slower at 1G (contract model)")


def test_verdict_without_nccl_or_table_sizes():
    assert "no NCCL schedule" in verdict("t", "alltoall", [_point(1 << 10, None)], "default")
    line = verdict("t", "allgather", [_point(4096, 2.0), _point(8192, 0.5)], "mine.json")
    assert line == ("t allgather: synth's selection is 2.00x faster than NCCL at 4K, 2.00x slower at 8K "
                    "(calibration mine.json)")


def test_verdict_of_a_small_report_follows_its_rows(small):
    out, doc = small
    words = {}
    for i, size in enumerate(doc["sizes"]):
        mine = min(e["rows"][i]["step_time_us"] for e in doc["schedules"])
        nccl = min([e["rows"][i]["step_time_us"] for e in doc["schedules"] if e["kind"] == "nccl"]
                   + [doc["nccl_model"][i]["time_us"]])
        ratio = nccl / mine
        words[size] = "level" if 1 / 1.02 <= ratio <= 1.02 else (
            f"{ratio:.2f}x faster" if ratio > 1 else f"{1 / ratio:.2f}x slower")
        assert doc["per_size"][i]["nccl_speedup"] == pytest.approx(ratio)
    line = doc["verdict"]
    assert line.startswith(f"{doc['topology']} allgather: synth's selection is ") and \
        line.endswith("(default calibration)")
    for size, name in ((1 << 10, "1K"), (1 << 20, "1M"), (1 << 30, "1G")):
        assert re.search(rf"{re.escape(words[size])}( than NCCL| with NCCL)? at {name}\b", line), (words[size], line)
    text = (out / "report.md").read_text().splitlines()
    assert text[2] == f"**{line}**"


def test_per_size_is_the_figure_the_tables_compare_with(small):
    _, doc = small
    for point in size_points(doc):
        (w,) = [w for w in doc["fastest"]
                if w["min_bytes"] <= point.size and (w["max_bytes"] is None or point.size <= w["max_bytes"])]
        assert point.selected == w["label"]
        assert w["nccl_speedup"] * (1 - 1e-9) <= point.speedup <= w["nccl_speedup_max"] * (1 + 1e-9)


# ---------------------------------------------------------------------------- sizes
def test_span_text_is_k_m_g():
    assert span_text(33554432, 268435455) == "32M..256M"
    assert span_text(0, 1023) == "0..1K"
    assert span_text(1 << 30, None) == "1G.."


def test_stdout_prints_sizes_as_k_m_g_and_ends_with_the_verdict(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", "ring:4", "allgather", "--sizes", "1K..4M", "-o", str(out), "--time-limit", "30"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    ranges = [line for line in lines if re.match(r"^\S*\.\.\S*: ", line)]
    assert ranges and all(re.match(r"^(0|[0-9.]+[KMGT])\.\.([0-9.]+[KMGT])?: ", line) for line in ranges), ranges
    assert not any(re.search(r"\b\d{4,}\b", line.split("(")[0]) for line in lines), lines
    assert lines[-1].startswith("ring4 allgather: synth's selection is ")
    md = (out / "report.md").read_text()
    assert "## How to read this report" in md and "S / R / C" in md and "step time" in md
    fastest = md.split("## Fastest schedule by size")[1].split("\n\n")[1]
    assert not re.search(r"\| \d{4,}\.\.", fastest)


# ---------------------------------------------------------------------------- bounds and labels
def test_every_row_at_a_size_has_the_collectives_bound():
    """double_binary_tree's own chunking on h100x2 (point to point: the switches taken out, so the
    bound is the chunking-dependent RS + AG convention) has a higher bound than the collective's;
    its rows are still measured against the collective's, and the own one is named as such."""
    topology, terms = replace(resolve_topology("h100x2"), switches=()), Calibration().terms()
    made = [(name, registry()[name].make(topology, "allreduce")) for name in ("double_binary_tree", "ring")]
    candidates = [Candidate(name, "baseline", s, f"{name}.json") for name, s in made]
    sizes = [1 << 10, 1 << 20, 1 << 30]
    evaluations = evaluate(topology, candidates, sizes, terms, "allreduce")
    reference = bound_rows(topology, "allreduce", sizes, terms)
    rows = list(csv.DictReader(io.StringIO(csv_text(evaluations))))
    for size, bound in zip(sizes, reference):
        at = [r for r in rows if int(r["size"]) == size]
        assert len(at) == 2
        assert {r["bound_time_us"] for r in at} == {f"{bound['time_us']:.6f}"}
    tree_1g = [r for r in rows if r["schedule"] == "double_binary_tree" and int(r["size"]) == 1 << 30][0]
    assert float(tree_1g["own_chunking_bound_time_us"]) > float(tree_1g["bound_time_us"]) * 1.1


def test_report_csv_has_one_bound_per_size(small):
    out, _ = small
    with open(out / "report.csv") as handle:
        rows = list(csv.DictReader(handle))
    by_size: dict[str, set[str]] = {}
    for r in rows:
        by_size.setdefault(r["size"], set()).add(r["bound_time_us"])
    assert by_size and all(len(v) == 1 for v in by_size.values()), by_size


def test_nccl_labels_say_pieces_not_chunks():
    from synth.report.candidates import nccl_candidates

    topo = resolve_topology("h100x2")
    found = {c.label: c for c in nccl_candidates(topo, "allreduce", [1 << 10, 1 << 20, 1 << 30])}
    trees = [label for label in found if label.startswith("nccl_tree")]
    assert trees and all(" pieces=" in label and "C=" not in label for label in trees)
    for label in trees:
        pieces = label.split("pieces=")[1]
        assert found[label].file_name.endswith(f"nccl_tree-C{pieces}.schedule.json")
        assert found[label].chunks == found[label].schedule.collective.chunks_per_rank


# ---------------------------------------------------------------------------- plots
def test_styles_are_distinct_and_kinds_share_a_dash():
    series = ([Series(f"milp {i}", "synthesized", (1.0,)) for i in range(3)]
              + [Series(f"nccl_tree pieces={1 << i}", "nccl", (1.0,)) for i in range(9)]
              + [Series(f"base {i}", "classic", (1.0,)) for i in range(8)]
              + [Series(name, name, (1.0,)) for name in PROMINENT])
    styles = assign_styles(series)
    pairs = [(st.color, str(st.dash)) for st in styles.values()]
    assert len(set(pairs)) == len(series)
    assert {str(styles[f"milp {i}"].dash) for i in range(3)} == {"-"}
    assert styles["base 0"].dash == ":" and styles["nccl_tree pieces=1"].dash == "--"
    assert all(styles[s.label].width < styles["selected"].width for s in series if s.family not in PROMINENT)
    with pytest.raises(ValueError):
        assign_styles([Series(f"n{i}", "nccl", (1.0,)) for i in range(100)])


def test_plots_draw_the_selection_nccls_best_and_a_readable_legend(small, tmp_path):
    import matplotlib.pyplot as plt

    _, doc = small
    figs = figures(doc)
    assert set(figs) == {"busbw.png", "time.png", "speedup.png", "threadblocks.png"}  # the last: budget curve
    try:
        for name in ("busbw.png", "time.png"):
            ax = figs[name].axes[0]
            lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
            labels = [line.get_label() for line in lines]
            assert "selected schedule (selection.json)" in labels
            assert "NCCL's best (schedules or runtime model)" in labels and "NCCL as modelled (runtime model)" in labels
            assert len({(line.get_color(), line.get_linestyle()) for line in lines}) == len(lines)
            assert ax.get_yscale() == "log"
            best = lines[labels.index("NCCL's best (schedules or runtime model)")]
            expected = [p.nccl_us for p in size_points(doc)]
            if name == "time.png":
                assert list(best.get_ydata()) == pytest.approx(expected)
            figs[name].canvas.draw()
            legend = ax.get_legend().get_window_extent()
            assert legend.x0 >= ax.get_window_extent().x1  # outside the axes: it covers no data
        speed = figs["speedup.png"].axes[0]
        ones = [line for line in speed.get_lines() if list(line.get_ydata()) == [1.0, 1.0]]
        assert ones, "1.0 is marked"
    finally:
        for fig in figs.values():
            plt.close(fig)
    paths = plot(doc, tmp_path)
    assert sorted(p.name for p in paths) == ["busbw.png", "speedup.png", "threadblocks.png", "time.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


def test_replot_redraws_from_report_json(small, tmp_path):
    out, _ = small
    assert main(["report", "--replot", str(out), "-o", str(tmp_path / "again")]) == 0
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == ["busbw.png", "speedup.png", "threadblocks.png",
                                                                       "time.png"]
    assert main(["report", "--replot", str(tmp_path / "nothing")]) == 2
