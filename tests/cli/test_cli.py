"""The command line as a user runs it: outputs, exit codes, one-line errors, no partial files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from synth.baselines import registry
from synth.baselines.common import BaselineNotApplicable
from synth.cli.main import main
from synth.core.library import library_names, load_library, resolve_topology
from synth.core.topology import Topology
from synth.verify import load_schedule, verify
from tests.test_cost import SHARED_EXAMPLES
from tests.test_verify import DATA


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_topo_list_and_show_json_is_a_valid_document(capsys):
    code, out, _ = run(capsys, "topo", "list")
    assert code == 0 and "dgx1" in out and "torus:AxB" in out and "NAMExK" in out
    assert "kind nvlink" in out.splitlines()[-1] and "kind net" in out.splitlines()[-1]
    code, out, _ = run(capsys, "topo", "show", "ndv2x2", "--json")
    topo = Topology.from_dict(json.loads(out))
    assert code == 0 and topo.ranks == 16 and topo.machine_count == 2
    code, out, _ = run(capsys, "topo", "show", "hypercube:3")
    assert code == 0 and "diameter 3" in out


def test_coll_list_and_show(capsys):
    code, out, _ = run(capsys, "coll", "list")
    assert code == 0 and "alltoallv" in out and "custom" in out
    code, out, _ = run(capsys, "coll", "show", "reduce", "-n", "4", "--root", "2", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["post"] == [[2]] and doc["combining"] is True


def test_bounds_dgx1_allgather(capsys):
    code, out, _ = run(capsys, "bounds", "dgx1", "allgather", "--json")
    doc = json.loads(out)
    assert code == 0
    assert doc["steps"] == 2 and doc["rounds_per_chunk"] == "7/6"
    assert doc["busbw_gbps"] == pytest.approx(150.0)


def test_verify_exit_codes(capsys, tmp_path):
    code, out, _ = run(capsys, "verify", str(DATA / "schedule-uring4-allgather-ring.json"))
    assert code == 0 and out.startswith("valid")
    code, out, _ = run(capsys, "verify", str(DATA / "schedule-uring4-allreduce-double-count.json"))
    assert code == 4 and "double_count" in out and "link_capacity" in out
    code, out, _ = run(capsys, "verify", "--json", str(DATA / "schedule-uring4-allgather-no-link.json"))
    doc = json.loads(out)
    assert code == 4 and {v["kind"] for v in doc["violations"]} == {"no_link", "not_held", "postcondition"}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, out, err = run(capsys, "verify", str(bad))
    assert code == 2 and err.count("\n") == 1 and "not valid JSON" in err and "Traceback" not in err
    code, _, err = run(capsys, "verify", str(tmp_path / "absent.json"))
    assert code == 2 and "no such file" in err


def test_cost_agrees_with_the_contract_formula(capsys):
    code, out, _ = run(capsys, "cost", str(DATA / "schedule-uring4-allgather-ring.json"), "--sizes", "1M", "--json")
    rows = json.loads(out)
    assert code == 0 and rows[0]["size"] == 1048576
    assert rows[0]["step_time_us"] == pytest.approx(3 * (0.7 + 262144 / 25e3), abs=1e-4)
    assert rows[0]["sim_time_us"] <= rows[0]["step_time_us"] + 1e-9
    code, out, _ = run(capsys, "cost", str(DATA / "schedule-uring4-allreduce-ring.json"), "--sizes", "1M", "--json")
    assert json.loads(out)[0]["step_time_us"] == pytest.approx(67.1146, abs=1e-4)
    code, out, _ = run(capsys, "cost", str(DATA / "schedule-uring4-allgather-ring.json"))
    assert code == 0 and "% of bound" in out
    code, _, err = run(capsys, "cost", str(DATA / "schedule-uring4-allgather-no-link.json"))
    assert code == 4 and "invalid schedule" in err


@pytest.mark.parametrize("protocol, expected", [
    ("ideal", 3 * (0.7 + 262144 / 25e3)),
    ("simple", 8.4 + 3 * (0.7 * 3.4 / 0.6 + 262144 / (25e3 * 1.0))),
    ("ll128", 14.0 + 3 * (0.7 * 1.9 / 0.6 + 262144 / (25e3 * 0.9375))),
    ("ll", 6.6 + 3 * (0.7 + 262144 / (25e3 * 0.5))),
    ("best", 8.4 + 3 * (0.7 * 3.4 / 0.6 + 262144 / (25e3 * 1.0))),  # simple at 1 MiB
])
def test_cost_protocol_json_keeps_every_field_and_names_the_protocol(capsys, protocol, expected):
    path = str(SHARED_EXAMPLES / "schedule-uring4-allgather-ring.json")
    code, out, err = run(capsys, "cost", path, "--sizes", "1M", "--protocol", protocol, "--json")
    (row,) = json.loads(out)
    assert code == 0 and set(row) == {"size", "protocol", "step_time_us", "sim_time_us", "algbw_gbps",
                                      "busbw_gbps", "bound_time_us", "bound_fraction"}
    assert row["protocol"] == ("simple" if protocol == "best" else protocol)
    assert row["step_time_us"] == pytest.approx(expected, rel=1e-9)
    assert row["sim_time_us"] <= row["step_time_us"] + 1e-9
    assert row["algbw_gbps"] == pytest.approx(1048576 / (expected * 1e3))
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 3 / 4)
    assert row["bound_fraction"] == pytest.approx(row["bound_time_us"] / expected)
    if protocol == "ideal":
        assert err == ""
    else:  # the example's links have no kind: said once, never silent
        assert err == "note: 4 of 4 links of uring4 have no kind; costed with NCCL's nvlink latency row\n"


def test_cost_protocol_text_has_a_protocol_column(capsys):
    path = str(SHARED_EXAMPLES / "schedule-uring4-allgather-ring.json")
    code, out, _ = run(capsys, "cost", path, "--sizes", "1K,1G", "--protocol", "best")
    header, small, large = out.splitlines()[1:4]  # then the two lines explaining the columns
    assert code == 0 and header.split()[:2] == ["size", "protocol"]
    assert small.split()[:3] == ["1K", "ll", f"{6.6 + 3 * (0.7 + 256 / (25e3 * 0.5)):.4f}"]
    assert large.split()[:2] == ["1G", "simple"]
    code, out, _ = run(capsys, "cost", path, "--sizes", "1M", "--protocol", "ll128")
    assert code == 0 and out.splitlines()[2].split()[:2] == ["1M", "ll128"]


def test_cost_of_a_library_schedule_needs_no_note(capsys, tmp_path):
    out_file = tmp_path / "ring.json"
    assert run(capsys, "baseline", "ndv2x2", "allgather", "--algo", "ring", "-o", str(out_file))[0] == 0
    code, out, err = run(capsys, "cost", str(out_file), "--sizes", "1K", "--protocol", "simple", "--json")
    assert code == 0 and err == "" and json.loads(out)[0]["protocol"] == "simple"


def test_baseline_writes_a_verified_file(capsys, tmp_path):
    out_file = tmp_path / "ring.json"
    code, _, _ = run(capsys, "baseline", "ndv2x2", "allreduce", "--algo", "ring", "-o", str(out_file))
    schedule = load_schedule(out_file)
    assert code == 0 and schedule.meta["algorithm"] == "ring"
    code, out, _ = run(capsys, "baseline", "dgx1", "allgather", "--algo", "list")
    assert code == 0 and "ring" in out and "hierarchical" in out and "n/a" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("bounds", "dgx9", "allgather"), "dgx1"),
        (("bounds", "dgx1", "allgatherr"), "allgather"),
        (("bounds", "dgx1", "broadcast", "--root", "9"), "root 9"),
        (("baseline", "dgx1", "allgather", "--algo", "spiral"), "recursive_doubling"),
        (("baseline", "ring:8", "allreduce", "--algo", "recursive_halving"), "no link 0->2"),
        (("baseline", "full:6", "allgather", "--algo", "recursive_doubling"), "power-of-two"),
        (("bounds", "ring:1", "allgather"), "ring"),
        (("cost", "x.json", "--sizes", "12Q"), "size"),
        (("cost", "x.json", "--protocol", "LL256"), "unknown protocol 'LL256'"),
        (("bounds", "dgx1"), "required"),
        (("frobnicate",), "invalid choice"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, needle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.json").write_text((DATA / "schedule-uring4-allgather-ring.json").read_text())
    code, _, err = run(capsys, *argv)
    assert code == 2, err
    assert err.startswith("synth: error:") and err.count("\n") == 1 and needle in err


def oneway_topology(tmp_path):
    """Rank 2 can send to 0 but nothing reaches rank 2: allgather is impossible."""
    topo = {"format": "synth.topology", "version": 1, "name": "oneway", "ranks": 3,
            "links": [{"src": 0, "dst": 1, "bandwidth": 25.0}, {"src": 1, "dst": 0, "bandwidth": 25.0},
                      {"src": 2, "dst": 0, "bandwidth": 25.0}]}
    path = tmp_path / "oneway.json"
    path.write_text(json.dumps(topo))
    return path


def test_impossible_collective_names_unreachable_ranks(capsys, tmp_path):
    path = oneway_topology(tmp_path)
    out_file = tmp_path / "never.json"
    code, _, err = run(capsys, "baseline", str(path), "allgather", "--algo", "ring", "-o", str(out_file))
    assert code == 2 and "ranks 2" in err and not out_file.exists()


def test_bad_topology_files(capsys, tmp_path):
    doc = {"format": "synth.topology", "version": 1, "name": "t", "ranks": 2,
           "links": [{"src": 0, "dst": 1, "bandwidth": 25.0}, {"src": 0, "dst": 1, "bandwidth": 25.0}]}
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(doc))
    code, _, err = run(capsys, "topo", "show", str(path))
    assert code == 2 and "duplicate link 0->1" in err


# the 72-rank racks are slow here (the NVLS baselines build and verify nine 72-rank candidates, ~35 s each)
ALL_TOPOLOGIES = [name if load_library(name).ranks <= 16 else pytest.param(name, marks=pytest.mark.slow)
                  for name in library_names()] + ["ring:8", "hypercube:3", "torus:4x4", "ndv2x2"]


@pytest.mark.parametrize("topology", ALL_TOPOLOGIES)
def test_every_applicable_baseline_verifies(topology):
    topo = resolve_topology(topology)
    built = 0
    for name, entry in registry().items():
        for collective in sorted(entry.collectives - {"alltoallv"}):
            try:
                schedule = entry.build(topo, collective, None, None)
            except BaselineNotApplicable:
                continue
            assert verify(schedule) == [], (name, collective)
            built += 1
    assert built >= 14


def test_python_dash_m_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "synth", "coll", "list"], capture_output=True, text=True)
    assert done.returncode == 0 and "allgather" in done.stdout


# ---------------------------------------------------------------- synthesis commands
def test_solve_outcomes_have_their_own_exit_codes(capsys, tmp_path):
    out_file = tmp_path / "s.json"
    code, _, err = run(capsys, "solve", "ring:4", "allgather", "--steps", "2", "--rounds", "3", "-o", str(out_file))
    assert code == 0 and verify(load_schedule(out_file)) == []
    code, _, err = run(capsys, "solve", "ring:4", "allgather", "--steps", "1", "-o", str(tmp_path / "no.json"))
    assert code == 3 and "infeasible" in err and "proven" in err and not (tmp_path / "no.json").exists()
    # a feasible instance (it solves in well under a second) with 1 ms: the restricted search's work
    # cap (1 ms x 2/3 x 10M units/s, under the first pass's 2.5M) stops it before any solver call,
    # and the exact search is refused once building the encodings took more than the limit
    timed = ["solve", "dgx1", "alltoall", "--steps", "3", "--rounds", "9", "--chunks", "3"]
    code, _, err = run(capsys, *timed, "--time-limit", "0.001", "-o", str(tmp_path / "t.json"))
    assert code == 5 and not (tmp_path / "t.json").exists()
    assert "synth: unknown:" in err and "timed out" in err and "nothing was proven" in err
    assert "infeasible" not in err
    code, _, err = run(capsys, *timed, "-o", str(tmp_path / "t.json"))
    assert code == 0 and verify(load_schedule(tmp_path / "t.json")) == []
    code, _, err = run(capsys, "solve", "mi250x2", "allgather", "--steps", "3")
    assert code == 2 and "rounds" in err and "do not apply" in err and "--backend milp" in err


def test_pareto_writes_frontier_and_schedules(capsys, tmp_path):
    code, out, _ = run(capsys, "pareto", "ring:4", "allgather", "--max-chunks", "2", "-o", str(tmp_path / "f"))
    doc = json.loads((tmp_path / "f" / "frontier.json").read_text())
    assert code == 0 and doc["complete"] is True and "complete" in out
    for point in doc["points"]:
        assert verify(load_schedule(tmp_path / "f" / point["schedule"])) == []


def test_pareto_refuses_a_chunk_cap_below_one(capsys, tmp_path):
    code, _, err = run(capsys, "pareto", "ring:4", "broadcast", "--max-chunks", "0", "-o", str(tmp_path / "f"))
    assert code == 2 and "--max-chunks must be at least 1, got 0" in err
    assert not (tmp_path / "f").exists()


def test_least_steps_gives_up_at_the_cap(capsys, tmp_path):
    code, _, err = run(capsys, "least-steps", "line:4", "broadcast", "--max-steps", "2")
    assert code == 3 and "no schedule with" in err


def test_solve_on_an_impossible_collective_names_the_ranks(capsys, tmp_path):
    path = oneway_topology(tmp_path)
    code, _, err = run(capsys, "pareto", str(path), "allgather", "-o", str(tmp_path / "f"))
    assert code == 2 and "impossible" in err and "ranks 2" in err
    assert not (tmp_path / "f").exists()
