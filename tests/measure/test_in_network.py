"""The runtime model's switch algorithms (NVLS, NVLSTree, CollNet), what a run allowed, NCCL's own
model of them, doctor's rows below the bound, and the model against the runtime bound."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.baselines.nccl_model import Setup, algbw_gbps, applies, latency_us, nvls_graph, with_nvls
from synth.bounds.runtime import runtime_bounds
from synth.cli.main import main
from synth.core.collectives import make_collective
from synth.core.io import dumps
from synth.core.library import resolve_topology
from synth.core.subset import sub_topology
from synth.measure.calibration import Calibration
from synth.measure.fit import Measured, fit, fitted_names, model_us
from synth.measure.nccl_env import Allowed
from synth.measure.runtime import Launch, available, describe, nccl_options, nccl_time

LOGS = Path(__file__).resolve().parents[3] / "shared" / "nccl-tests-logs"
needs_logs = pytest.mark.skipif(not LOGS.is_dir(), reason="shared nccl-tests logs not present")
SWITCHED = ("nvls", "nvls_tree", "collnet_direct", "collnet_chain")


def _h100(ranks: int):
    return sub_topology(resolve_topology("h100"), tuple(range(ranks))) if ranks < 8 else resolve_topology("h100")


def _without_switches(name: str):
    return dataclasses.replace(resolve_topology(name), switches=())


# --- which algorithms exist where ------------------------------------------------------------------

MACHINES = ("h100", "h100x2", "h100x4", "h100x2+sharp", "dgx1", "dgx2", "a100", "a100x2", "ndv2x2", "dgx2x2",
            "mi300x", "mi300xx2")


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(MACHINES), collective=st.sampled_from(["allreduce", "allgather", "reduce_scatter"]),
       nvls=st.sampled_from([None, False, True]), collnet=st.sampled_from([None, False, True]),
       excluded=st.sets(st.sampled_from(SWITCHED), max_size=2))
def test_switch_algorithms_exist_only_where_the_switch_is_and_the_run_allowed_them(name, collective, nvls,
                                                                                  collnet, excluded):
    topology = resolve_topology(name)
    machine = describe(topology)
    allowed = Allowed(excluded=frozenset(excluded), nvls=nvls, collnet=collnet)
    got = {c.algorithm for c in nccl_options(machine, collective, 1 << 28, Calibration(), Launch("processes"),
                                             allowed=allowed)}
    has_nvls = any(s.reduce and s.multicast and s.kind == "nvlink" for s in topology.switches)
    has_sharp = any(s.reduce_multicast and s.kind == "net" for s in topology.switches)
    several = topology.machine_count > 1
    assert ("nvls" in got) == (has_nvls and nvls is not False and "nvls" not in excluded
                               and (not several or (has_sharp and collnet is not False and collective == "allreduce")))
    assert ("nvls_tree" in got) == (has_nvls and several and collective == "allreduce" and nvls is not False
                                    and "nvls_tree" not in excluded)
    for algorithm in ("collnet_direct", "collnet_chain"):
        assert (algorithm in got) == (has_sharp and several and collective == "allreduce" and collnet is not False
                                      and algorithm not in excluded)
    assert all(c.protocol == "simple" for c in nccl_options(machine, collective, 1 << 28, Calibration(),
                                                             Launch("processes"), allowed=allowed)
               if c.algorithm in SWITCHED)


def test_nvls_needs_a_switch_spanning_the_machine():
    assert describe(_without_switches("h100")).nvls_domains == 0
    assert "nvls" not in available(describe(_without_switches("h100")), "allreduce")
    assert describe(_h100(2)).nvls_ranks == 2 and "nvls" in available(describe(_h100(2)), "allreduce")
    assert available(describe(resolve_topology("h100")), "broadcast") == ("ring",)


@settings(max_examples=40, deadline=None)
@given(ranks=st.sampled_from([2, 4, 8]), exponent=st.integers(3, 34), forced=st.booleans())
def test_nvls_off_never_picks_nvls(ranks, exponent, forced):
    """NCCL_NVLS_ENABLE=0 (or NCCL_ALGO without NVLS) leaves only point-to-point algorithms."""
    allowed = Allowed(frozenset({"ring"})) if forced else Allowed(nvls=False)
    choice = nccl_time(describe(_h100(ranks)), "allreduce", 2**exponent, Calibration(), Launch("threads", ranks),
                       allowed=allowed)
    assert choice.algorithm == "ring" if forced else choice.algorithm in ("ring", "tree")


def test_nvls_wins_from_four_gpus_and_loses_at_two():
    """in-network.md section 7: NVLS / Ring = 2e(n-1)/(n+1); at 2 GPUs Ring wins, at 8 NVLS does."""
    cal, size = Calibration(), 1 << 30
    assert nccl_time(describe(_h100(2)), "allreduce", size, cal, Launch("processes")).algorithm == "ring"
    assert nccl_time(describe(_h100(8)), "allreduce", size, cal, Launch("processes")).algorithm == "nvls"
    assert nccl_time(describe(_h100(8)), "allgather", size, cal, Launch("processes")).algorithm == "ring"


def test_two_h100_machines_run_nvlstree_at_large_sizes_and_its_head_cap_holds():
    machine, cal = describe(resolve_topology("h100x2")), Calibration()
    choice = nccl_time(machine, "allreduce", 8 << 30, cal, Launch("processes"))
    assert choice.algorithm == "nvls_tree"
    capped = cal.with_parameters(nvls_tree_channel_gbps=10.0)
    slow = nccl_time(machine, "allreduce", 8 << 30, capped, Launch("processes"),
                     allowed=Allowed(frozenset({"nvls_tree"})))
    busbw = (8 << 30) / (slow.time_us * 1e3) * 30 / 16
    assert busbw <= 8 * 10.0 * 1.001


def test_sharp_fabric_offers_collnet_and_multi_node_nvls():
    machine = describe(resolve_topology("h100x4+sharp"))
    got = {c.algorithm for c in nccl_options(machine, "allreduce", 1 << 30, Calibration(), Launch("processes"))}
    assert {"nvls", "nvls_tree", "collnet_direct", "collnet_chain"} <= got


# --- NCCL's own model ------------------------------------------------------------------------------

@pytest.mark.parametrize("ranks, algbw", [(2, 102.0), (4, 160.0), (8, 272.0)])
def test_nccls_nvls_rows_are_what_nccl_printed(ranks, algbw):
    """NCCL 2.29.2 printed AllReduce NVLS 25.0 / 102.0 and 160.0 at 2 and 4 H100s (the #> lines of the
    shared nvls-forced logs); 272 is its 8-GPU figure (in-network.md section 5.3)."""
    setup = with_nvls(Setup("allreduce", ranks, 1, 16, 20.0, "nvlink"))
    assert algbw_gbps(setup, "nvls", "simple") == pytest.approx(algbw)
    assert latency_us(setup, "nvls", "simple", 1) == 25.0
    assert not applies(setup, "nvls", "ll") and not applies(setup, "nvls_tree", "simple")


def test_nccls_nvls_allgather_and_nvlstree_cap():
    allgather = with_nvls(Setup("allgather", 4, 1, 16, 20.0, "nvlink"))
    assert algbw_gbps(allgather, "nvls", "simple") == pytest.approx(114.75)  # printed: 25.0 / 114.8
    two = with_nvls(Setup("allreduce", 16, 2, 16, 20.0, "nvlink"), nic_gbps=50.0)
    assert algbw_gbps(two, "nvls_tree", "simple") * 30 / 16 == pytest.approx(8 * 57.7)
    assert latency_us(two, "nvls_tree", "simple", 1) == pytest.approx(25 + 2 * 20.9)
    assert not applies(two, "nvls", "simple") and applies(dataclasses.replace(two, collnet=True), "nvls", "simple")
    assert nvls_graph(8) == (40.0, 60.0) and nvls_graph(4) == (60.0, 60.0)


# --- the model never beats the runtime bound ---------------------------------------------------------

SIZES = [2**k for k in range(0, 35, 2)] + [3 * 2**20, 48 * 2**20]
FAST_TOPOLOGIES = ("dgx2x2", "ndv2x2", "dgx1", "h100", "h100x2", "h100x2+sharp", "h100x4+sharp", "a100x2", "a100x4",
                   "dgx2", "ndv2", "mi300x", "mi300xx2")
SLOW_TOPOLOGIES = ("a100", "mi250", "h100x16", "h100x16+sharp")


def _never_below_the_bound(name: str, cal: Calibration, sizes=SIZES) -> None:
    topology = resolve_topology(name)
    machine = describe(topology)
    for collective in ("allreduce", "allgather", "reduce_scatter"):
        bound = runtime_bounds(topology, make_collective(collective, topology.ranks), cal.terms())
        for size in sizes:
            for option in nccl_options(machine, collective, size, cal, Launch("processes"), cal.transport):
                assert option.time_us >= bound.time_us(size) * (1 - 1e-9), (name, collective, size, option)


@pytest.mark.parametrize("name", FAST_TOPOLOGIES)
def test_every_modelled_option_is_at_or_above_the_runtime_bound(name):
    """What NCCL takes in the model (every algorithm and protocol it considers, not only its pick)
    is never faster than the runtime bound of the same topology under the same calibration."""
    _never_below_the_bound(name, Calibration())


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_TOPOLOGIES)
def test_every_modelled_option_is_at_or_above_the_runtime_bound_on_big_machines(name):
    _never_below_the_bound(name, Calibration())


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(["h100", "h100x2", "h100x2+sharp", "dgx2x2", "a100x2"]),
       efficiency=st.floats(0.3, 1.0), nvls=st.floats(0.3, 1.0), net=st.floats(0.3, 1.0),
       scale=st.floats(0.5, 3.0), nvls_latency=st.floats(0.01, 100.0), tree=st.floats(1.0, 100.0),
       hop=st.floats(0.1, 100.0), launch=st.floats(0.1, 50.0))
def test_the_bound_holds_under_any_calibration(name, efficiency, nvls, net, scale, nvls_latency, tree, hop, launch):
    """Also where the terms are far from the defaults (NVLS faster than NVLink's share, latencies
    below NCCL's, a fast network): the model's rates and latencies are the bound's or worse."""
    cal = Calibration({"efficiency_nvlink": efficiency, "efficiency_nvls": nvls, "efficiency_net": net,
                       "latency_scale": scale, "nvls_latency_us": nvls_latency, "tree_channel_gbps": tree,
                       "network_hop_us_ib": hop, "launch_process_us": launch})
    _never_below_the_bound(name, cal, sizes=[1, 2**12, 2**20, 2**26, 2**32])


# --- doctor: rows below the bound ------------------------------------------------------------------

TABLE = "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n"


def _log(tmp_path, rows, lead="") -> str:
    path = tmp_path / "run.txt"
    path.write_text(lead + "# Collective test starting: all_reduce_perf\n# nThread 1 nGpus 8\n" + TABLE + "".join(
        f"{s} {s // 4} float sum -1 {t} 0.0 0.0 0 {t} 0.0 0.0 0\n" for s, t in rows))
    return str(path)


def _doctor(capsys, *args) -> dict:
    capsys.readouterr()
    assert main(["doctor", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_doctor_flags_a_row_below_the_line_rate_bound(tmp_path, capsys):
    """A 1 GiB allreduce in 1 ms on 8 H100s is beyond what any schedule on the topology can do."""
    doc = _doctor(capsys, _log(tmp_path, [(1 << 20, 60.0), (1 << 30, 1000.0)]), "--topology", "h100")
    fast = doc["rows"][-1]
    assert fast["verdict"] == "below the bound" and fast["measured_us"] < fast["bound_us"]
    assert "does not describe" in doc["regions"][-1]["cause"] and "NVLS" in doc["regions"][-1]["cause"]
    assert "1 below the bound (1G), 1 of them below the line-rate bound" in doc["summary"]


def test_doctor_tells_a_row_below_only_the_calibrated_bound(tmp_path, capsys):
    """Between the line-rate bound and the bound at the calibration's rates: not below the bound
    (a bound holds for any run), but the links beat the calibration, which recalibrating fixes."""
    topology, size = resolve_topology("h100"), 1 << 30
    coll = make_collective("allreduce", 8)
    from synth.bounds.lower_bounds import lower_bounds

    line_rate = lower_bounds(topology, coll).time_us(size)
    calibrated = runtime_bounds(topology, coll, Calibration().terms()).bounds.time_us(size)
    took = round((line_rate + calibrated) / 2, 2)
    doc = _doctor(capsys, _log(tmp_path, [(size, took)]), "--topology", "h100")
    row = doc["rows"][0]
    assert row["verdict"] != "below the bound" and row["measured_us"] >= row["bound_us"]
    assert "none below the bound; 1 faster than the calibration's link rates allow (1G)" in doc["summary"]
    assert "recalibrate" in doc["summary"]


@needs_logs
def test_the_nvls_run_is_below_the_bound_of_an_h100_without_its_switch(tmp_path, capsys):
    """479.9 GB/s busbw is beyond point-to-point on 8 x 450 GB/s ports: doctor on an H100 described
    without the NVSwitch's NVLS says so, and NVLS is no option there."""
    path = tmp_path / "h100-noswitch.json"
    path.write_text(dumps(_without_switches("h100").to_dict()))
    doc = _doctor(capsys, str(LOGS / "h100-8gpu-allreduce-nvls-1.txt"), "--topology", str(path))
    below = [r for r in doc["rows"] if r["verdict"] == "below the bound"]
    assert below and min(r["size_bytes"] for r in below) >= 64 << 20
    assert {r["choice"]["algorithm"] for r in doc["rows"]} <= {"ring", "tree"}
    assert "does not describe" in doc["summary"]


# --- what a log allowed, through the command line ----------------------------------------------------

@needs_logs
def test_nvls_off_logs_and_flags_never_pick_nvls(capsys):
    ring = _doctor(capsys, str(LOGS / "h100-8gpu-allreduce-ring-1.txt"), "--topology", "h100")
    assert {r["choice"]["algorithm"] for r in ring["rows"]} == {"ring"}  # NCCL_ALGO=RING NCCL_NVLS_ENABLE=0
    off = _doctor(capsys, str(LOGS / "h100-8gpu-allreduce-nvls-1.txt"), "--topology", "h100", "--nvls", "off")
    on = _doctor(capsys, str(LOGS / "h100-8gpu-allreduce-nvls-1.txt"), "--topology", "h100")
    assert "nvls" not in {r["choice"]["algorithm"] for r in off["rows"]}
    assert on["rows"][-1]["choice"]["algorithm"] == "nvls"
    auto = _doctor(capsys, str(LOGS / "h100-4gpu-allreduce-auto-ring-1.txt"), "--topology", "h100", "--ranks", "0-3")
    assert {r["choice"]["algorithm"] for r in auto["rows"]} == {"ring"}  # NCCL logged Algo RING at every size


@needs_logs
@pytest.mark.parametrize("args, words", [
    (["h100-2gpu-allreduce-nvls-forced-1.txt", "--topology", "h100", "--ranks", "0-1", "--nvls", "off"], "nvls"),
    (["h100-2gpu-allreduce-nvls-forced-1.txt", "--topology", "dgx2", "--ranks", "0-1"], "nvls"),
    (["h100-8gpu-allreduce-1.txt", "--topology", "h100", "--nccl-algo", "Warp"], "not an algorithm"),
])
def test_what_the_topology_cannot_run_is_one_line(capsys, args, words):
    capsys.readouterr()
    assert main(["doctor", str(LOGS / args[0]), *args[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err


# --- the figures the issue asks for ------------------------------------------------------------------

DONE_WHEN = [("h100-2gpu-allreduce-nvls-forced-1.txt", ["--ranks", "0-1"]),
             ("h100-2gpu-allreduce-ring-1.txt", ["--ranks", "0-1"]),
             ("h100-4gpu-allreduce-nvls-forced-1.txt", ["--ranks", "0-3"]),
             ("h100-4gpu-allreduce-ring-1.txt", ["--ranks", "0-3"]),
             ("h100-4gpu-allreduce-auto-ring-1.txt", ["--ranks", "0-3"]),
             ("h100-8gpu-allreduce-nvls-1.txt", []), ("h100-8gpu-allreduce-ring-1.txt", []),
             ("h100-8gpu-allreduce-1.txt", []), ("h200-2node-16gpu-allreduce-roce-1.txt", ["--topology", "h100x2"])]


@needs_logs
def test_doctor_explains_the_nvls_and_ring_runs(capsys):
    """No row below the bound; 85% of rows within 1.15x; NVLS from 64 MiB up within 1.15x on
    geometric mean; the two-machine H200 run is NVLSTree at large sizes."""
    rows, nvls = [], []
    for name, args in DONE_WHEN:
        topology = [] if "--topology" in args else ["--topology", "h100"]
        doc = _doctor(capsys, str(LOGS / name), *topology, *args)
        assert all(r["bound_us"] is None or r["measured_us"] >= r["bound_us"] for r in doc["rows"]), name
        rows += doc["rows"]
        if "nvls" in name:
            nvls += [r["measured_over_expected"] for r in doc["rows"] if r["size_bytes"] >= 64 << 20]
        if name.startswith("h200"):
            assert {r["choice"]["algorithm"] for r in doc["rows"] if r["size_bytes"] >= 64 << 20} == {"nvls_tree"}
    within = sum(1 for r in rows if 1 / 1.15 <= r["measured_over_expected"] <= 1.15)
    assert within >= 0.85 * len(rows)
    assert 1 / 1.15 <= math.exp(sum(map(math.log, nvls)) / len(nvls)) <= 1.15


# --- the fit ---------------------------------------------------------------------------------------

def test_fit_recovers_nvls_efficiency_from_nvls_rows():
    truth = Calibration({"efficiency_nvls": 0.55})
    runs = []
    for ranks in (2, 4, 8):
        base = Measured("synthetic", "allreduce", describe(_h100(ranks)), Launch("threads", ranks), "ib", (),
                        Allowed(frozenset({"nvls"})))
        rows = tuple((float(2**k), model_us(base, 2**k, truth)) for k in range(26, 34))
        runs.append(dataclasses.replace(base, rows=rows))
    assert {"efficiency_nvls", "nvls_latency_us"} <= set(fitted_names(runs))
    assert "efficiency_nvls" not in fitted_names([dataclasses.replace(r, allowed=Allowed(nvls=False)) for r in runs])
    assert fit(runs, Calibration()).get("efficiency_nvls") == pytest.approx(0.55, rel=0.03)
