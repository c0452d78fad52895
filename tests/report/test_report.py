"""synth report: candidates, evaluation, winners, files, resume (synth.report)."""

from __future__ import annotations

import csv
import json

import pytest

from synth.bounds.lower_bounds import lower_bounds
from synth.bounds.runtime import runtime_bounds
from synth.cli.main import main
from synth.cost import cost_rows
from synth.measure.calibration import Calibration
from synth.report import runner
from synth.report.evaluate import size_grid
from synth.verify import load_schedule


@pytest.fixture(scope="module")
def full4_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "full4"
    doc = runner.report("full:4", "allgather", out, sizes="1K..1G", time_limit=30)
    return out, doc


def test_report_writes_every_file(full4_report):
    out, doc = full4_report
    for name in ("report.md", "report.csv", "report.json", "busbw.png", "time.png", "selection.json"):
        assert (out / name).stat().st_size > 0
    assert (out / "busbw.png").read_bytes()[:4] == b"\x89PNG"
    kinds = {s["kind"] for s in doc["schedules"]}
    assert "smt" in kinds and "baseline" in kinds and "nccl" in kinds
    text = (out / "report.md").read_text()
    assert "vs NCCL" in text and "## Where synthesis is slower than NCCL" in text


def test_every_number_is_what_synth_cost_gives_for_the_named_file(full4_report):
    out, doc = full4_report
    for entry in doc["schedules"]:
        schedule = load_schedule(out / entry["file"])
        terms = Calibration().terms()  # reports cost under the default calibration
        assert doc["calibration"] == "default"
        rows = cost_rows(schedule, doc["sizes"], runtime_bounds(schedule.topology, schedule.collective, terms),
                         "best", terms)
        assert [r["step_time_us"] for r in rows] == pytest.approx([r["step_time_us"] for r in entry["rows"]])
        assert [r["protocol"] for r in rows] == [r["protocol"] for r in entry["rows"]]
        assert [r["sim_time_us"] for r in rows] == pytest.approx([r["sim_time_us"] for r in entry["rows"]])
    with open(out / "report.csv") as handle:
        lines = list(csv.DictReader(handle))
    assert len(lines) == len(doc["schedules"]) * len(doc["sizes"])


def test_fastest_ranges_cover_all_sizes_and_name_the_minimum(full4_report):
    out, doc = full4_report
    ranges = json.loads((out / "selection.json").read_text())["ranges"]
    assert ranges[0]["min_bytes"] == 0 and ranges[-1]["max_bytes"] is None
    for a, b in zip(ranges, ranges[1:]):
        assert a["max_bytes"] + 1 == b["min_bytes"]
    for i, size in enumerate(doc["sizes"]):
        best = min(doc["schedules"], key=lambda e: (e["rows"][i]["step_time_us"], e["label"]))
        covering = [r for r in ranges if r["min_bytes"] <= size and (r["max_bytes"] is None or size <= r["max_bytes"])]
        assert len(covering) == 1 and covering[0]["label"] == best["label"]
        assert covering[0]["protocol"] == best["rows"][i]["protocol"]


def test_nccl_column_and_shortfalls_follow_the_rows(full4_report):
    _, doc = full4_report
    ours = [e for e in doc["schedules"] if e["kind"] not in ("baseline", "nccl")]
    nccl = [e for e in doc["schedules"] if e["kind"] == "nccl"]
    slower = {s["size"] for s in doc["slower_than_nccl"]}
    for i, size in enumerate(doc["sizes"]):
        mine = min(e["rows"][i]["step_time_us"] for e in ours)
        theirs = min(min(e["rows"][i]["step_time_us"] for e in nccl), doc["nccl_model"][i]["time_us"])
        assert doc["nccl_model"][i]["size"] == size
        assert doc["nccl_tuning"][i]["time_us"] == pytest.approx(theirs, rel=1e-12)  # what synth tune writes
        assert (size in slower) == (mine > theirs * (1 + 1e-9))
        covering = [w for w in doc["fastest"]
                    if w["min_bytes"] <= size and (w["max_bytes"] is None or size <= w["max_bytes"])]
        fastest = min(e["rows"][i]["step_time_us"] for e in doc["schedules"])
        assert covering[0]["nccl_speedup"] <= theirs / fastest * (1 + 1e-9) <= \
            covering[0]["nccl_speedup_max"] * (1 + 1e-9)


def test_the_runtime_model_stands_for_nccl_only_where_runs_check_it():
    from synth.core.library import resolve_topology
    from synth.report.evaluate import nccl_model_points

    dgx1 = resolve_topology("dgx1")
    assert nccl_model_points(dgx1, "alltoall", [1024], Calibration()) is None
    assert nccl_model_points(dgx1, "broadcast", [1024], Calibration()) is None
    (point,) = nccl_model_points(dgx1, "allreduce", [1 << 30], Calibration())
    assert point.algorithm == "ring" and point.protocol == "simple" and point.channels == 32


def test_the_contract_model_is_still_there(tmp_path):
    doc = runner.report("ring:4", "allgather", tmp_path / "rep", sizes="1K,1M", time_limit=30, calibration="none")
    assert doc["calibration"] is None and doc["nccl_model"] is None
    schedule = load_schedule(tmp_path / "rep" / doc["schedules"][0]["file"])
    rows = cost_rows(schedule, [1024, 1 << 20], lower_bounds(schedule.topology, schedule.collective), "best")
    assert [r["step_time_us"] for r in rows] == pytest.approx([r["step_time_us"] for r in doc["schedules"][0]["rows"]])
    assert "--calibration none" in (tmp_path / "rep" / "report.md").read_text()


def test_synthesized_never_beat_the_bound(full4_report):
    _, doc = full4_report
    for entry in doc["schedules"]:
        for row, bound in zip(entry["rows"], doc["bound"]):
            assert row["step_time_us"] >= bound["time_us"] * (1 - 1e-9)


def test_report_from_a_pareto_folder(tmp_path):
    assert main(["pareto", "ring:4", "allgather", "-o", str(tmp_path / "fr")]) == 0
    doc = runner.report("ring:4", "allgather", tmp_path / "rep", sizes="1K,1M", from_dir=str(tmp_path / "fr"))
    assert any(s["kind"] == "smt" for s in doc["schedules"])
    assert main(["report", "ring:5", "allgather", "--from", str(tmp_path / "fr"), "-o", str(tmp_path / "x")]) == 2


def test_size_grid():
    assert size_grid("1K..4K") == [1024, 2048, 4096]
    assert size_grid("1M,1K") == [1024, 1 << 20]


@pytest.mark.parametrize("args", [
    ["report", "nosuchtopo", "allgather"],
    ["report", "ring:4", "allgather", "--sizes", "4K..1K"],
    ["report", "ring:4"],
    ["report", "--all", "ring:4", "allgather"],
])
def test_report_bad_input_is_one_line_exit_2(args, tmp_path, capsys):
    assert main(args + ["-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("synth: error:")


SMALL = (("ring:4", "allgather"), ("ring:4", "broadcast"))


def test_report_all_resumes_and_indexes(tmp_path, monkeypatch):
    calls = []
    real = runner.report

    def counting(topology, collective, out, *args, **kwargs):
        calls.append((topology, collective))
        return real(topology, collective, out, *args, **kwargs)

    monkeypatch.setattr(runner, "report", counting)
    index, failed = runner.report_all(tmp_path, time_limit=30, reports=SMALL, sizes="1K,1M")
    assert len(calls) == 2 and failed == []
    text = index.read_text()
    assert "[allgather](ring:4/allgather/report.md)" in text and "broadcast" in text
    runner.report_all(tmp_path, time_limit=30, reports=SMALL, sizes="1K,1M")  # everything is there: nothing redone
    assert len(calls) == 2
    runner.report_all(tmp_path, force=True, time_limit=30, reports=SMALL, sizes="1K,1M")
    assert len(calls) == 4


def _numbers(folder):
    """Every report's JSON without the wall-clock fields, and every schedule file, under ``folder``."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if "seconds" not in k}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    reports = {str(p.relative_to(folder)): strip(json.loads(p.read_text())) for p in folder.rglob("report.json")}
    schedules = {str(p.relative_to(folder)): strip(json.loads(p.read_text()))
                 for p in folder.rglob("schedules/*.json")}
    return reports, schedules


def test_report_all_on_two_processes_equals_the_serial_run(tmp_path):
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    _, failed = runner.report_all(serial, time_limit=30, reports=SMALL, sizes="1K,1M")
    assert failed == []
    _, failed = runner.report_all(parallel, time_limit=30, reports=SMALL, sizes="1K,1M", jobs=2)
    assert failed == []
    reports, schedules = _numbers(serial)
    assert reports == _numbers(parallel)[0] and reports  # every figure of every report
    assert set(schedules) == set(_numbers(parallel)[1])  # the same schedules (by name: S, R, C or algorithm)
    assert (parallel / "README.md").read_text() == (serial / "README.md").read_text()


def test_a_failing_report_is_reported_and_the_others_go_on(tmp_path):
    reports = (("ring:4", "allgather"), ("ring:4", "nonsense"))
    _, failed = runner.report_all(tmp_path, time_limit=30, reports=reports, sizes="1K", jobs=2)
    assert len(failed) == 1 and failed[0].startswith("ring:4 nonsense:")
    assert (tmp_path / "ring:4" / "allgather" / "report.json").is_file()


def test_greedy_extras_are_kept_only_where_they_win(full4_report):
    _, doc = full4_report
    ours = [e for e in doc["schedules"] if e["kind"] not in ("baseline", "nccl")]
    for entry in (e for e in ours if e["kind"] == "greedy"):
        assert any(entry["rows"][i]["step_time_us"] == min(e["rows"][i]["step_time_us"] for e in ours)
                   for i in range(len(doc["sizes"])))


def test_router_size_variants_as_jobs_equal_the_serial_ones():
    """One report's MILP size variants side by side (jobs=2) give the serial run's schedules."""
    from synth.core.compose import compose_machines
    from synth.core.topology import Link, Nic, Topology
    from synth.report.candidates import _milp

    pair = Topology("pair", 2, (Link(0, 1, 25.0, 0.7), Link(1, 0, 25.0, 0.7)), machines=((0, 1),),
                    nics=(Nic("nic0", (0, 1), 12.5, 2.6),))
    topo = compose_machines(pair, 2)
    serial = _milp(topo, "allgather", 30.0, lambda line: None)
    lines: list[str] = []
    parallel = _milp(topo, "allgather", 30.0, lines.append, jobs=2)
    assert [c.label for c in serial] == [c.label for c in parallel]
    assert [c.schedule.steps for c in serial] == [c.schedule.steps for c in parallel]
    assert any(line.startswith("routing") for line in lines)  # the jobs' progress comes back


def test_the_simulation_is_sized_by_its_events_and_big_schedules_run_at_table_sizes_only(monkeypatch):
    """A switch entry costs the simulator one event per port: nccl_nvls on h100 has reductions
    (8 srcs, 1 dst) and multicasts (1 src, 8 dsts), 9 ports each; above SIMULATED_EVENTS only TABLE_SIZES are simulated,
    and the table's rows are the grid's where the grid has them."""
    from synth.baselines import registry
    from synth.core.library import resolve_topology
    from synth.report import evaluate as ev
    from synth.report.candidates import Candidate

    h100 = resolve_topology("h100")
    nvls = registry()["nccl_nvls"].make(h100, "allreduce")
    ports = sum(len(e.srcs) + len(e.dsts) for step in nvls.steps for e in step.switches)
    assert ev.simulation_events(nvls) == nvls.send_count + ports and ports == 9 * nvls.switch_count
    candidate = Candidate("nvls", "nccl", nvls, "nvls.json")
    sizes = size_grid("1K..1G")
    monkeypatch.setattr(ev, "SIMULATED_EVENTS", ev.simulation_events(nvls) - 1)
    (big,) = ev.evaluate(h100, [candidate], sizes)
    assert [row["size"] for row in big.rows if row["sim_time_us"] is not None] == list(ev.TABLE_SIZES)
    assert [row["sim_time_us"] for row in big.table] == \
        [row["sim_time_us"] for row in big.rows if row["size"] in ev.TABLE_SIZES]
    monkeypatch.setattr(ev, "SIMULATED_EVENTS", ev.simulation_events(nvls))
    (small,) = ev.evaluate(h100, [candidate], sizes)
    assert all(row["sim_time_us"] is not None for row in small.rows)
