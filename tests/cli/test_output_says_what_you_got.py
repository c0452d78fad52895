"""Issue 25, "the output says what you got": cost verdicts, column notes, the bound a frontier is
judged against, bounds without rounds, check by the targeted runtime, protocol names in any case,
the per-rank bandwidth a GPU can use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synth.cli.evaluate import _ratio_phrase
from synth.cli.main import main

T4_SAMPLE = Path("/work/shared/topo-samples/nvsmi-t4-4gpu-pcie-1.txt")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def schedules(tmp_path_factory):
    """dgx1 allgather: ring and nccl_ring; dgx1 allreduce: nccl_ring (baselines, fast)."""
    folder = tmp_path_factory.mktemp("schedules")
    for topo, coll, algo in (("dgx1", "allgather", "ring"), ("dgx1", "allgather", "nccl_ring"),
                             ("dgx1", "allreduce", "nccl_ring")):
        assert main(["baseline", topo, coll, "--algo", algo, "-o", str(folder / f"{coll}-{algo}.json")]) == 0
    return folder


# ---------------------------------------------------------------------- 1. a verdict when comparing
def test_cost_of_two_files_ends_with_a_verdict(schedules, capsys):
    first, other = schedules / "allgather-ring.json", schedules / "allgather-nccl_ring.json"
    code, out, _ = run(capsys, "cost", first, other, "--sizes", "1K,1M,1G", "--protocol", "best")
    lines = out.splitlines()
    assert code == 0
    assert sum(line.startswith("allgather on dgx1:") for line in lines) == 2  # both tables
    verdict = lines[-1]
    assert verdict.startswith("ring: ") and " nccl_ring at 1K, " in verdict and " at 1G (" in verdict
    assert verdict.endswith("(step time, protocol best per size, contract model, no calibration)")
    code, out, _ = run(capsys, "cost", first, other, "--sizes", "1K,1M,1G", "--protocol", "best", "--json")
    doc = json.loads(out)
    assert doc["verdict"]["text"] == verdict
    mine, theirs = doc["files"][0]["rows"], doc["files"][1]["rows"]
    ratios = doc["verdict"]["comparisons"][0]["ratios"]
    assert [r["size"] for r in ratios] == [1024, 1 << 20, 1 << 30]
    for r, a, b in zip(ratios, mine, theirs):
        assert r["ratio"] == pytest.approx(b["step_time_us"] / a["step_time_us"])
        assert _ratio_phrase(r["ratio"], None) in verdict


def test_ratio_phrases_level_faster_slower():
    assert _ratio_phrase(1.019, "x") == "level with x" and _ratio_phrase(0.981, None) == "level"
    assert _ratio_phrase(1.32, "nccl_ring") == "1.32x faster than nccl_ring"
    assert _ratio_phrase(0.5, None) == "2.00x slower"


def test_cost_of_one_file_is_unchanged_json(schedules, capsys):
    code, out, _ = run(capsys, "cost", schedules / "allgather-ring.json", "--sizes", "1K", "--json")
    rows = json.loads(out)
    assert code == 0 and isinstance(rows, list) and rows[0]["size"] == 1024


def test_cost_of_different_collectives_is_one_line(schedules, capsys):
    code, out, err = run(capsys, "cost", schedules / "allgather-ring.json", schedules / "allreduce-nccl_ring.json")
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("synth: error: ")
    assert "allreduce-nccl_ring.json: allreduce on 8 ranks" in err and "one collective and rank count" in err


# ---------------------------------------------------------------------- 2. columns explained once
def test_columns_are_explained_once_per_command(schedules, capsys):
    first, other = schedules / "allgather-ring.json", schedules / "allgather-nccl_ring.json"
    code, out, _ = run(capsys, "cost", first, other, "--sizes", "1K,1G", "--protocol", "best")
    assert code == 0
    assert out.count("step time: the DESIGN cost model (each step lasts as long as its slowest link or group); "
                     "sim time: the event simulator (each send starts when its data and its link are ready)") == 1
    bound = [line for line in out.splitlines() if line.startswith("% of bound")]
    assert len(bound) == 1
    assert bound[0].startswith("% of bound: the lower bound's time / step time; at 1K the bound is 1.406 us, "
                               "mostly 2 steps x the smallest link alpha 0.7 us: it leaves out the per-call "
                               "protocol latency every schedule pays (simple 8.4, ll128 14, ll 6.6 us) and the "
                               "protocols' larger alphas, so it is low at small sizes")


def test_least_steps_explains_s_r_c(capsys):
    code, _, err = run(capsys, "least-steps", "ring:4", "allgather", "--time-limit", "30")
    assert code == 0 and "least steps: (S=2, R=2, C=1)" in err
    assert "S = steps, R = rounds (a step of r rounds carries up to r chunks per unit of link capacity), " \
           "C = chunks per rank" in err


# ---------------------------------------------------------------------- 3. the bound a frontier is judged against
def test_pareto_allreduce_is_judged_against_the_composition_bound(tmp_path, capsys):
    code, out, _ = run(capsys, "pareto", "dgx1", "allreduce", "--max-chunks", "6", "--time-limit", "60",
                       "-o", tmp_path / "fr")
    assert code == 0, out
    assert "bounds: steps >= 2, rounds/chunk >= 7/3 (reduce_scatter + allgather composition bound" in out
    assert "frontier complete (no attempt timed out; best rounds/chunk 7/3 meets the bound 7/3)" in out
    assert out.count("S = steps, R = rounds") == 1
    assert (json.loads((tmp_path / "fr" / "frontier.json").read_text())["bounds"]["composition_rounds_per_chunk"]
            == "7/3")


def test_pareto_says_when_the_best_point_is_above_the_bound(tmp_path, capsys):
    code, out, _ = run(capsys, "pareto", "dgx1", "allgather", "--max-chunks", "2", "-o", tmp_path / "fr")
    assert code == 0
    assert "bounds: steps >= 2, rounds/chunk >= 7/6 (the proven bound)" in out
    assert "best rounds/chunk 3/2 is above the bound 7/6: none within --max-chunks reaches it" in out


# ---------------------------------------------------------------------- 4. bounds without rounds
@pytest.mark.skipif(not T4_SAMPLE.exists(), reason="shared topology sample absent")
def test_bounds_without_whole_capacities_says_why_there_are_no_rounds(tmp_path, capsys):
    topo = tmp_path / "t4.json"
    assert main(["topo", "import", str(T4_SAMPLE), "--gpu", "t4", "-o", str(topo)]) == 0
    code, out, _ = run(capsys, "bounds", topo, "allreduce")
    assert code == 0 and "None" not in out
    assert "  rounds per chunk   >= n/a (capacities are not whole numbers: no rounds)" in out
    assert ("the proven limit is busbw <= 15 GB/s (no rounds-per-chunk limit: capacities are not whole numbers, "
            "so rounds do not apply))") in out


# ---------------------------------------------------------------------- 5. check judges the targeted runtime
@pytest.fixture(scope="module")
def wide_xml(schedules, tmp_path_factory):
    """96 thread blocks per rank: more than RCCL's 64, fine for the executor it is written for."""
    path = tmp_path_factory.mktemp("xml") / "wide.xml"
    assert main(["export", str(schedules / "allreduce-nccl_ring.json"), "--format", "msccl-xml",
                 "--instances", "16", "-o", str(path)]) == 0
    return path


def test_check_judges_the_runtime_the_file_was_written_for(wide_xml, capsys):
    assert wide_xml.read_text().splitlines()[0] == "<!-- synth export: written for the executor runtime -->"
    code, out, _ = run(capsys, "check", wide_xml)
    assert code == 0
    assert "  executor  loads\n" in out and "  rccl      does not load (not targeted)\n" in out
    assert "  legacy    loads (not targeted)\n" in out
    assert out.splitlines()[-1] == "  judged for executor: the file says it was written for it (--runtime overrides)"
    code, out, _ = run(capsys, "check", wide_xml, "--runtime", "RCCL", "--json")
    doc = json.loads(out)
    assert code == 4 and doc["targets"] == ["rccl"] and list(doc["profiles"]) == ["legacy", "executor", "rccl"]


def test_check_of_an_unmarked_file_judges_every_runtime(wide_xml, tmp_path, capsys):
    bare = tmp_path / "bare.xml"
    bare.write_text("".join(wide_xml.read_text().splitlines(keepends=True)[1:]))
    code, out, _ = run(capsys, "check", bare)
    assert code == 4
    assert out.splitlines()[-1] == "  judged for every runtime: the file does not say which it was written for"


def test_check_of_an_rccl_export_judges_rccl(schedules, tmp_path, capsys):
    path = tmp_path / "r.xml"
    assert main(["export", str(schedules / "allreduce-nccl_ring.json"), "--format", "msccl-xml",
                 "--runtime", "RCCL", "-o", str(path)]) == 0
    code, out, _ = run(capsys, "check", path, "--json")
    assert code == 0 and json.loads(out)["targets"] == ["rccl"]


# ---------------------------------------------------------------------- 6. protocol names in any case
@pytest.mark.parametrize("given, canonical", [("LL128", "ll128"), ("Simple", "simple"), ("LL", "ll"),
                                              ("IDEAL", "ideal")])
def test_cost_takes_protocols_in_any_case(schedules, capsys, given, canonical):
    code, out, _ = run(capsys, "cost", schedules / "allgather-ring.json", "--sizes", "1K", "--protocol", given)
    assert code == 0 and out.splitlines()[2].split()[1] == canonical


def test_cost_best_in_any_case_and_unknown_is_one_line(schedules, capsys):
    code, out, _ = run(capsys, "cost", schedules / "allgather-ring.json", "--sizes", "1G", "--protocol", "Best")
    assert code == 0 and out.splitlines()[2].split()[1] == "simple"
    code, out, err = run(capsys, "cost", schedules / "allgather-ring.json", "--protocol", "LL64")
    assert code == 2 and out == "" and err.count("\n") == 1 and "unknown protocol 'LL64'" in err


# ---------------------------------------------------------------------- 7. per-rank bandwidth a GPU can use
@pytest.mark.parametrize("topo, line", [
    ("h100x2", "per-rank out-bandwidth a GPU can use: 450 GB/s inside a machine (NVSwitch port), "
               "50 GB/s across machines (NIC)"),
    ("h100", "per-rank out-bandwidth a GPU can use: 450 GB/s (NVSwitch port)"),
    ("dgx1", "per-rank out-bandwidth a GPU can use: 150 GB/s (its links)"),
    ("ndv2x2", "per-rank out-bandwidth a GPU can use: 150 GB/s inside a machine (its links), "
               "12.5 GB/s across machines (NIC)"),
])
def test_topo_show_prints_usable_out_bandwidth(capsys, topo, line):
    code, out, _ = run(capsys, "topo", "show", topo)
    assert code == 0 and line in out.splitlines() and "3550" not in out
