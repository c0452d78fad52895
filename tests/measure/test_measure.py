"""The runtime model, calibration documents, the fit and doctor (tests that a wrong one fails)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.cli.main import main
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.subset import sub_topology
from synth.measure import doctor
from synth.measure.calibration import DEFAULTS, Calibration
from synth.measure.fit import Measured, fit, model_us
from synth.measure.nccl_env import Allowed
from synth.measure.runtime import Launch, describe, launch_us, nccl_options, nccl_time

LOGS = Path(__file__).resolve().parents[3] / "shared" / "nccl-tests-logs"
needs_logs = pytest.mark.skipif(not LOGS.is_dir(), reason="shared nccl-tests logs not present")


def test_machine_description_reads_the_topology():
    h100, pair = describe(resolve_topology("h100")), describe(resolve_topology("h100x2"))
    assert (h100.ring_gbps, h100.gpu_gbps, h100.nic_gbps, h100.machines) == (450.0, 450.0, 0.0, 1)
    assert (pair.ranks, pair.machines, pair.nic_gbps) == (16, 2, 400.0)
    assert describe(resolve_topology("mi300x")).vendor == "rccl"
    assert (h100.nvls_gbps, h100.nvls_ranks, h100.nvls_domains, h100.sharp) == (450.0, 8, 1, False)
    assert (pair.nvls_ranks, pair.nvls_domains, pair.sharp) == (8, 2, False)
    assert describe(resolve_topology("h100x2+sharp")).sharp and describe(resolve_topology("dgx2")).nvls_domains == 0


def test_nvls_runs_each_port_at_n_plus_one_over_n_of_the_buffer():
    """At 8 GiB NVLS allreduce takes (n+1)/n x S over the port at efficiency_nvls, plus small terms;
    the ring (NVLS off) 2(n-1)/n x S over the bus at efficiency_nvlink."""
    cal, size = Calibration(), 8 * 2**30
    for ranks in (2, 4, 8):
        machine = describe(sub_topology(resolve_topology("h100"), tuple(range(ranks))))
        nvls = [c for c in nccl_options(machine, "allreduce", size, cal, Launch("processes")) if c.algorithm == "nvls"]
        ideal = size * (ranks + 1) / ranks / (450 * cal.get("efficiency_nvls") * 1e3)
        assert len(nvls) == 1 and nvls[0].protocol == "simple" and ideal < nvls[0].time_us < ideal * 1.01


def test_large_sizes_run_at_the_effective_rate():
    """At 8 GiB the ring's time is S x 2(n-1)/n over bus bandwidth x efficiency, plus small terms."""
    cal = Calibration()
    size = 8 * 2**30
    took = nccl_time(describe(resolve_topology("h100")), "allreduce", size, cal, Launch("processes"),
                     allowed=Allowed(nvls=False)).time_us
    ideal = size * 1.75 / (450 * cal.get("efficiency_nvlink") * 1e3)
    assert ideal < took < ideal * 1.01


def test_launch_is_a_floor_that_grows_with_the_gpus_a_thread_drives():
    m, cal = describe(resolve_topology("a100")), Calibration()
    one = nccl_time(m, "allreduce", 8, cal, Launch("processes")).time_us
    eight = nccl_time(m, "allreduce", 8, cal, Launch("threads", 8)).time_us
    assert eight == pytest.approx(8 * DEFAULTS["launch_thread_gpu_us"])
    assert one < eight and launch_us(Launch("threads", 2), cal) < launch_us(Launch("threads", 8), cal)


def test_protocols_trade_latency_for_bandwidth():
    m, cal, off = describe(resolve_topology("h100")), Calibration(), Allowed(nvls=False)
    small = nccl_time(m, "allreduce", 4096, cal, Launch("processes", 1))
    large = nccl_time(m, "allreduce", 2**30, cal, Launch("processes", 1), allowed=off)
    assert small.protocol == "ll" and large.protocol == "simple"
    assert small.channels == 1 and large.channels == DEFAULTS["max_channels"]
    algorithms = {o.algorithm for o in nccl_options(m, "allreduce", 2**20, cal, Launch("processes"))}
    assert algorithms == {"ring", "tree", "nvls"}
    assert {o.algorithm for o in nccl_options(m, "allgather", 2**20, cal, Launch("processes"))} == {"ring", "nvls"}
    assert {o.algorithm for o in nccl_options(m, "allgather", 2**20, cal, Launch("processes"), allowed=off)} == {"ring"}
    dgx1 = describe(resolve_topology("dgx1"))
    assert {o.algorithm for o in nccl_options(dgx1, "allreduce", 2**20, cal, Launch("processes"))} == {"ring", "tree"}


def test_more_efficient_links_are_faster_and_time_grows_with_size():
    m = describe(resolve_topology("dgx1"))
    slow, fast = Calibration({"efficiency_nvlink": 0.5}), Calibration({"efficiency_nvlink": 0.9})
    assert nccl_time(m, "allgather", 2**30, fast, Launch("processes")).time_us < \
        nccl_time(m, "allgather", 2**30, slow, Launch("processes")).time_us
    times = [nccl_time(m, "allreduce", 2**k, Calibration(), Launch("processes")).time_us for k in range(3, 34)]
    assert all(b >= a - 1e-9 for a, b in zip(times, times[1:]))


def test_network_transport_sets_the_small_size_latency_across_machines():
    m, cal = describe(resolve_topology("h100x2")), Calibration()
    ib, tcp = (nccl_time(m, "allreduce", 64, cal, Launch("processes"), t).time_us for t in ("ib", "tcp"))
    assert tcp > ib


def _synthetic(cal: Calibration) -> list[Measured]:
    machine = describe(resolve_topology("a100"))
    runs = []
    for launch in (Launch("threads", 8), Launch("processes")):
        run = Measured("synthetic", "allreduce", machine, launch, "ib", ())
        rows = tuple((float(2**k), model_us(run, 2**k, cal)) for k in range(3, 33))
        runs.append(Measured("synthetic", "allreduce", machine, launch, "ib", rows))
    return runs


def test_fit_recovers_the_terms_that_made_the_rows():
    truth = Calibration({"efficiency_nvlink": 0.6, "launch_thread_gpu_us": 3.0, "fill_us": 80.0})
    fitted = fit(_synthetic(truth), Calibration())
    assert fitted.get("efficiency_nvlink") == pytest.approx(0.6, rel=0.03)
    assert fitted.get("launch_thread_gpu_us") == pytest.approx(3.0, rel=0.05)
    assert all(abs(math.log(r["model_over_measured"])) < 0.05 for r in fitted.fit)


def test_fit_leaves_out_rows_far_slower_than_the_rest():
    runs = _synthetic(Calibration())
    bad = list(runs[1].rows)
    bad[10] = (bad[10][0], bad[10][1] * 20)
    runs[1] = Measured("synthetic", "allreduce", runs[1].machine, runs[1].launch, "ib", tuple(bad))
    fitted = fit(runs, Calibration())
    assert [r["size_bytes"] for r in fitted.excluded] == [int(bad[10][0])]
    assert fitted.get("efficiency_nvlink") == pytest.approx(DEFAULTS["efficiency_nvlink"], rel=0.03)


def test_calibration_document_round_trips():
    cal = Calibration({"efficiency_nvlink": 0.7, "fill_us": 12.5}, "h100", ({"file": "x"},), ({"size_bytes": 8},))
    back = Calibration.from_doc(json.loads(json.dumps(cal.to_doc())), "x.json")
    assert back.values() == cal.values() and back.topology == "h100" and back.sources == cal.sources


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(DEFAULTS)),
       value=st.one_of(st.floats(max_value=0.0), st.just(float("nan")), st.just(float("inf")),
                       st.text(max_size=3), st.booleans(), st.none()))
def test_bad_parameters_are_one_input_error(name, value):
    with pytest.raises(InputError, match="x.json"):
        Calibration.from_doc({"format": "synth.calibration", "version": 1, "parameters": {name: value}}, "x.json")


@pytest.mark.parametrize("doc, words", [
    ({"format": "synth.topology", "version": 1}, "format"),
    ({"format": "synth.calibration", "version": 2}, "version"),
    ({"format": "synth.calibration", "version": True}, "version"),
    ({"format": "synth.calibration", "version": 1, "parameters": {"efficiency_nvlink": 1.5}}, "at most 1"),
    ({"format": "synth.calibration", "version": 1, "parameters": {"warp_speed": 1}}, "unknown"),
    ([], "object"),
])
def test_bad_documents_are_one_input_error(doc, words):
    with pytest.raises(InputError, match=words):
        Calibration.from_doc(doc, "x.json")


@needs_logs
def test_doctor_flags_the_unhealthy_two_dgx_h100_run():
    from synth.cli.measure import measured_runs

    class Args:
        topology, ranks, transport = "h100x2", None, "ib"

    run = measured_runs([str(LOGS / "h100-2node-16gpu-allreduce-2.txt")], Args)[0]
    found = doctor.regions(doctor.rows(run, Calibration()), 2)
    far = [r for r in found if r.verdict == "far slower" and r.first != r.last]
    assert [(r.first, r.last) for r in far] == [(8192, 64 * 2**20)]
    assert found[-1].verdict == "as expected" and found[-1].first == 512 * 2**20 and found[-1].last == 16 * 2**30
    assert "single row" in found[0].cause  # the 8-byte row: 172.7 us among rows of 39-40


@needs_logs
def test_doctor_says_a_healthy_run_is_as_expected_at_large_sizes(capsys):
    assert main(["doctor", str(LOGS / "h100-8gpu-allreduce-1.txt"), "--topology", "h100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["rows"]) == 31 and \
        {"size_bytes", "measured_us", "expected_us", "choice", "bound_us"} <= set(doc["rows"][0])
    assert doc["regions"][-1]["verdict"] == "as expected" and doc["regions"][-1]["last_bytes"] == 8 * 2**30
    assert all(r["bound_us"] <= r["measured_us"] for r in doc["rows"])


@needs_logs
def test_doctor_names_the_fastest_schedule_under_the_same_calibration(tmp_path, capsys):
    """Classic algorithms always; a folder's schedule files too, and one that is faster wins there."""
    folder = tmp_path / "schedules"
    folder.mkdir()
    assert main(["baseline", "h100", "allreduce", "--algo", "nccl_ring", "-o", str(folder / "mine.json")]) == 0
    assert main(["baseline", "h100", "allgather", "--algo", "ring", "-o", str(folder / "other.json")]) == 0
    capsys.readouterr()
    log = str(LOGS / "h100-8gpu-allreduce-1.txt")
    assert main(["doctor", log, "--topology", "h100", "--json"]) == 0
    classic = json.loads(capsys.readouterr().out)["rows"]
    assert all(r["fastest_schedule"]["label"] != "mine.json" for r in classic)
    assert main(["doctor", log, "--topology", "h100", "--json", "--schedules", str(folder)]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    labels = {r["fastest_schedule"]["label"] for r in rows}
    assert "mine.json" in labels and "other.json" not in labels  # allgather files are skipped
    for before, after in zip(classic, rows):
        assert after["fastest_schedule"]["time_us"] <= before["fastest_schedule"]["time_us"] + 1e-6
        assert after["fastest_schedule"]["time_us"] >= 8 * Calibration().get("launch_thread_gpu_us") - 1e-6
    assert main(["doctor", log, "--topology", "h100", "--schedules", str(tmp_path / "nowhere")]) == 2
    assert "not a folder" in capsys.readouterr().err


@needs_logs
def test_calibrate_leaves_out_what_an_unhealthy_machine_measured(tmp_path, capsys):
    """The two-DGX-H100 run's 8 KiB - 64 MiB rows (1-2 ms where 40-380 us is expected) are listed,
    not fitted, so the network terms come from the healthy rows."""
    out = tmp_path / "h100x2.json"
    assert main(["calibrate", str(LOGS / "h100-2node-16gpu-allreduce-2.txt"), "--topology", "h100x2",
                 "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    left = {r["size_bytes"] for r in doc["excluded"]}
    assert {8192, 1 << 20, 32 << 20} <= left and not left & {512 << 20, 1 << 30}
    ratios = [r["model_over_measured"] for r in doc["fit"]]
    assert sum(1 / 1.3 <= r <= 1.3 for r in ratios) >= 0.8 * len(ratios)
    assert 1.0 < doc["parameters"]["network_hop_us_ib"] < 10.0


@needs_logs
def test_calibrate_writes_a_document_that_predicts_its_run(tmp_path, capsys):
    out = tmp_path / "a100.json"
    logs = [str(LOGS / "a100-8gpu-allreduce-1.txt"), str(LOGS / "a100-8gpu-allreduce-2.txt")]
    assert main(["calibrate", *logs, "--topology", "a100", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["format"] == "synth.calibration" and len(doc["sources"]) == 2 and len(doc["fit"]) == 60
    within = [r for r in doc["fit"] if 1 / 1.3 <= r["model_over_measured"] <= 1.3]
    assert len(within) >= 48
    assert main(["doctor", logs[1], "--topology", "a100", "--calibration", str(out)]) == 0


@needs_logs
@pytest.mark.parametrize("args, words", [
    (["h100-8gpu-allreduce-1.txt", "--topology", "a100x2"], "16"),
    (["h100-2node-16gpu-allreduce-1.txt", "--topology", "dgx2"], "machine"),
    (["dgx2-v100-12gpu-allreduce-1.txt", "--topology", "dgx2"], "--ranks"),
    (["dgx2-v100-12gpu-allreduce-1.txt", "--topology", "dgx2", "--ranks", "0-20"], "rank 16"),
])
def test_runs_that_do_not_fit_the_topology_are_refused(tmp_path, capsys, args, words):
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(LOGS / args[0]), *args[1:], "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and not out.exists()


@pytest.mark.parametrize("text, words", [
    ("", "no nccl-tests data rows"),
    ("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time\n"
     "        1024           256     float     sum      -1    39.20    0.03\n", "line 2"),
])
def test_bad_logs_are_one_line_and_write_nothing(tmp_path, capsys, text, words):
    log, out = tmp_path / "run.txt", tmp_path / "cal.json"
    log.write_text(text)
    assert main(["calibrate", str(log), "--topology", "h100", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and not out.exists()


def test_bad_calibration_file_is_refused_by_doctor(tmp_path, capsys):
    log, cal = tmp_path / "run.txt", tmp_path / "cal.json"
    log.write_text("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
                   "  8 2 float sum -1 20.0 0.00 0.00 0 20.0 0.00 0.00 0\n")
    cal.write_text(json.dumps({"format": "synth.calibration", "version": 1, "parameters": {"fill_us": -1}}))
    assert main(["doctor", str(log), "--topology", "h100", "--calibration", str(cal)]) == 2
    assert "fill_us" in capsys.readouterr().err


def _timed(pairs) -> list:
    from synth.measure.runtime import Choice

    return [doctor.Row(size, took, took, Choice("ring", "ll", 1, took), None) for size, took in pairs]


@given(st.lists(st.floats(1.0, 1e5), min_size=1, max_size=12))
def test_a_run_whose_time_never_falls_has_no_inversion(times):
    rising = [sum(times[:i + 1]) for i in range(len(times))]
    assert doctor.inversions(_timed(zip((1 << i for i in range(len(times))), rising))) == []


def test_an_inversion_is_named_and_the_first_row_is_warm_up():
    table = _timed([(8, 200.0), (16, 40.0), (1 << 20, 90.0), (1 << 21, 1750.0), (1 << 22, 930.0), (1 << 23, 1000.0)])
    found = doctor.inversions(list(reversed(table)))  # order of the rows does not matter
    assert [(i.smaller.size_bytes, i.larger.size_bytes, i.first) for i in found] == \
        [(8, 16, True), (1 << 21, 1 << 22, False)]
    assert "warm-up" in found[0].line() and "2M took 1.88x as long as 4M" in found[1].line()
    assert doctor.inversions(_timed([(1 << 21, 1100.0), (1 << 22, 930.0)])) == []  # 1.18x: within noise


@needs_logs
def test_doctor_names_where_the_a4_run_falls_with_size(capsys):
    log = str(LOGS / "b200-gcp-a4-2node-16gpu-allgather-1.txt")
    assert main(["doctor", log, "--topology", "a4x2", "--transport", "roce", "--collective", "allgather",
                 "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["inversions"]
    assert [(i["smaller_bytes"], i["larger_bytes"]) for i in found] == [(2 << 20, 4 << 20)]
