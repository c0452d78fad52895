"""NCCL 2.27-2.30 as it runs: symmetric-memory kernels (which, when, what they take), copy-engine
collectives, CUDA-graph launch, the bound in every launch mode, and doctor on the shared runs."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.bounds.runtime import runtime_bounds
from synth.cli.main import main
from synth.core.collectives import make_collective
from synth.core.library import resolve_topology
from synth.measure.calibration import Calibration
from synth.measure.runtime import Launch, describe, launch_us, nccl_options, nccl_time, symmetric_capable
from synth.measure.symmetric import Setup, eligible, pick, version_tuple
from tests.measure.test_logs import LOGS, needs_logs

V230 = (2, 30, 4)
REG = Setup("symmetric")


def _machine(name: str, ranks: str | None = None):
    from synth.core.subset import parse_ranks, sub_topology

    topology = resolve_topology(name)
    return describe(sub_topology(topology, parse_ranks(ranks, topology.ranks)) if ranks else topology)


def _crossovers(machine, collective: str) -> list[tuple[int, str]]:
    """(size, kernel) where NCCL's pick changes, sizes 8 B .. 1 GiB (allgather / reduce-scatter: per rank)."""
    kernels = eligible(machine, collective, REG, V230, True)
    out, last = [], None
    for k in range(3, 31):
        size = (1 << k) * (1 if collective == "allreduce" else machine.ranks)
        name = pick(kernels, size, machine.ranks, machine.arch).kernel.name
        if name != last:
            out.append((1 << k, name))
            last = name
    return out


# --- NCCL's choice: its own cost model, the reference's crossovers -------------------------------------

@pytest.mark.parametrize("machine, collective, expected", [
    ("h100", "allreduce", [(8, "AllReduce_AGxLLMC_R"), (32768, "AllReduce_RSxLDMC_AGxSTMC")]),
    ("h100", "allgather", [(8, "AllGather_LLMC"), (16384, "AllGather_STMC")]),
    ("h100", "reduce_scatter", [(8, "ReduceScatter_LL"), (16384, "ReduceScatter_LDMC")]),
    ("b200", "allreduce", [(8, "AllReduce_AGxLLMC_R"), (65536, "AllReduce_RSxLDMC_AGxSTMC")]),
    ("b200", "allgather", [(8, "AllGather_LLMC"), (32768, "AllGather_STMC")]),
    ("b200", "reduce_scatter", [(8, "ReduceScatter_LL"), (8192, "ReduceScatter_LDMC")]),
])
def test_nccl_picks_its_kernels_where_its_source_says(machine, collective, expected):
    """reference/nccl-symmetric.md: the crossovers its formulas give on 8 ranks with multicast."""
    assert _crossovers(_machine(machine), collective) == expected


def test_nccl_estimates_what_its_source_says():
    """5.0 / 11.5 us at 1 KiB and 9.4 / 20.3 us at 1 MiB (Hopper / Blackwell), from NCCL's constants."""
    for name, small, large in (("h100", 5.0, 9.4), ("b200", 11.5, 20.3)):
        m = _machine(name)
        kernels = eligible(m, "allreduce", REG, V230, True)
        assert pick(kernels, 1024, 8, m.arch).nccl_us == pytest.approx(small, abs=0.1)
        assert pick(kernels, 1 << 20, 8, m.arch).nccl_us == pytest.approx(large, rel=0.03)


def test_without_multicast_two_shot_load_store_takes_over():
    m = _machine("h200")
    names = {name for _, name in _crossovers(m, "allreduce")}
    assert names == {"AllReduce_RSxLDMC_AGxSTMC", "AllReduce_AGxLLMC_R"}
    kernels = eligible(m, "allreduce", REG, V230, nvls_allowed=False)
    assert {k.name for k in kernels} == {"AllReduce_AGxLL_R", "AllReduce_RSxLD_AGxST"}
    assert pick(kernels, 1 << 30, 8, m.arch).kernel.name == "AllReduce_RSxLD_AGxST"
    assert pick(kernels, 1024, 8, m.arch).kernel.name == "AllReduce_AGxLL_R"


# --- when NCCL runs them -----------------------------------------------------------------------------

@pytest.mark.parametrize("name, ranks, collective, setup, version, expected", [
    ("h100", None, "allreduce", REG, V230, 4),
    ("h100", None, "alltoall", REG, V230, 0),  # no symmetric alltoall kernel
    ("h100", None, "allreduce", REG, (2, 26, 2), 0),  # before 2.27
    ("h100", None, "allreduce", Setup("none"), V230, 0),  # not registered, NOWIN off (its default)
    ("h100", None, "allreduce", Setup("local"), V230, 0),  # -R 1: legacy registration only
    ("h100", None, "allreduce", Setup("none", nowin=True), V230, 2),  # NOWIN: the LL kernels
    ("h100", None, "allreduce", Setup("none", nowin=True), (2, 28, 9), 0),  # NOWIN is 2.29.2's
    ("h100", "0-1", "allreduce", REG, V230, 2),  # 2 ranks: no multicast kernel
    ("dgx1", None, "allreduce", REG, V230, 0),  # hybrid cube mesh: not every pair on NVLink
    ("mi300x", None, "allreduce", REG, V230, 0),  # RCCL
    ("h100x2", None, "allreduce", REG, V230, 0),  # across machines: no allreduce kernel
    ("gb200nvl72", None, "allgather", REG, V230, 4),  # one MNNVL rack is one LSA team
])
def test_when_nccl_runs_a_symmetric_kernel(name, ranks, collective, setup, version, expected):
    assert len(eligible(_machine(name, ranks), collective, setup, version, True)) == expected


def test_nowin_needs_one_gpu_per_process_and_an_ll_classic_pick():
    m, cal = _machine("h100"), Calibration()
    nowin = Setup("none", nowin=True, version=V230)
    small = nccl_time(m, "allreduce", 1024, cal, Launch("processes"), setup=nowin)
    assert small.algorithm == "symmetric" and small.protocol.startswith("AGx")
    assert nccl_time(m, "allreduce", 1024, cal, Launch("threads", 8), setup=nowin).algorithm != "symmetric"
    large = nccl_time(m, "allreduce", 1 << 30, cal, Launch("processes"), setup=nowin)
    assert large.algorithm == "nvls"  # Simple wins there: the classic path


def test_registered_call_never_reaches_the_tuner():
    """With a symmetric window NCCL takes its kernel even where the classic algorithm models faster
    (the H200 ring run: two-shot at 289 GB/s busbw against NVLS's 480)."""
    m, cal = _machine("h200"), Calibration()
    options = nccl_options(m, "allreduce", 1 << 30, cal, Launch("processes"), setup=Setup("symmetric", version=V230))
    assert [o.algorithm for o in options] == ["symmetric"]
    classic = nccl_time(m, "allreduce", 1 << 30, cal, Launch("processes"))
    from synth.measure.nccl_env import Allowed

    ring = nccl_time(m, "allreduce", 1 << 30, cal, Launch("processes"), allowed=Allowed(nvls=False),
                     setup=Setup("symmetric", version=V230))
    assert ring.protocol == "RSxLD_AGxST" and ring.time_us > classic.time_us


def test_copy_engines_are_marked_unmeasured():
    m, cal = _machine("b200"), Calibration()
    zero = Setup("symmetric", version=V230, cta_policy_zero=True)
    choice = nccl_time(m, "allgather", 1 << 20, cal, Launch("processes"), setup=zero)
    assert (choice.algorithm, choice.measured) == ("copy_engine", False)
    implicit = nccl_time(m, "allgather", 8 * (1 << 30), cal, Launch("processes"), setup=Setup("symmetric"))
    assert implicit.algorithm == "copy_engine"  # Blackwell, more than 8 Mi elements per rank
    assert nccl_time(_machine("h100"), "allgather", 8 * (1 << 30), cal, Launch("processes"),
                     setup=Setup("symmetric")).algorithm != "copy_engine"


def test_versions_read_as_numbers():
    assert version_tuple("nccl 2.30.4") == (2, 30, 4) and version_tuple("2.28") == (2, 28, 0)
    assert version_tuple("rccl 2.26.6") is None and version_tuple(None) is None


# --- launch modes ----------------------------------------------------------------------------------------

def test_a_graph_replay_has_no_cpu_floor():
    cal = Calibration()
    assert launch_us(Launch("threads", 8, graph=True), cal) == cal.get("launch_graph_us")
    assert launch_us(Launch("threads", 8, graph=True), cal) < launch_us(Launch("processes"), cal)
    m = _machine("h200")
    eager = nccl_time(m, "alltoall", 1024, cal, Launch("threads", 8)).time_us
    graph = nccl_time(m, "alltoall", 1024, cal, Launch("threads", 8, graph=True)).time_us
    assert graph < eager / 3


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["h200", "b200", "gb200nvl72", "h100x2", "a100"]),
       collective=st.sampled_from(["allreduce", "allgather", "reduce_scatter"]),
       exponent=st.integers(3, 34), graph=st.booleans(), registration=st.sampled_from(["none", "symmetric"]),
       nowin=st.booleans())
def test_no_modelled_nccl_time_beats_its_bound(name, collective, exponent, graph, registration, nowin):
    """What the model says NCCL takes, in any launch mode and with any buffers, is never below the
    runtime bound computed on the same terms (doctor's bound: no launch floor)."""
    topology = resolve_topology(name)
    machine, cal = describe(topology), Calibration().on(topology.arch)
    size = float(1 << exponent)
    setup = Setup(registration, nowin=nowin)
    took = nccl_time(machine, collective, size, cal, Launch("processes", 1, graph), setup=setup).time_us
    capable = symmetric_capable(machine, collective, cal.nccl_version)
    bounds = runtime_bounds(topology, make_collective(collective, topology.ranks),
                            cal.terms(graph=graph, symmetric=capable))
    assert took >= bounds.bounds.time_us(size) + bounds.call_us - 1e-9


def test_a_calibration_names_the_nccl_it_models():
    doc = Calibration().to_doc()
    assert doc["nccl"] == "2.30.4"
    old = Calibration.from_doc({**doc, "nccl": "2.26.2"}, "x")
    assert old.nccl_version == (2, 26, 2)
    m = _machine("h100")
    took = nccl_time(m, "allreduce", 1024, old, Launch("processes"), setup=Setup("symmetric"))
    assert took.algorithm != "symmetric"  # 2.26 has no symmetric kernels
    from synth.core.errors import InputError

    with pytest.raises(InputError, match="'nccl' is 'new'"):
        Calibration.from_doc({**doc, "nccl": "new"}, "x")


# --- doctor on the shared 2.27-2.30 runs --------------------------------------------------------------

def _doctor(capsys, *args) -> dict:
    code = main(["doctor", "--json", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


NEW_RUNS = [
    ("h200-8gpu-allreduce-symmetric-R2-graph-1.txt", "--topology", "h200"),
    ("h200-8gpu-nccl-allreduce-ring-nonvls-1.txt", "--topology", "h200"),
    ("h200-8gpu-allreduce-default-R0-1.txt", "--topology", "h200"),
    ("h200-8gpu-allreduce-symmetric-R2-1.txt", "--topology", "h200"),
    ("h200-8gpu-allreduce-default-symnowin0-1.txt", "--topology", "h200"),
    ("h200-8gpu-nccl-alltoall-fair-1.txt", "--topology", "h200"),
    ("b200-8gpu-allreduce-symmetric-R2-1.txt", "--topology", "b200"),
    ("h100-8gpu-allreduce-default-excerpt-1.txt", "--topology", "h100", "--collective", "allreduce",
     "--launch", "threads:8"),
]


@needs_logs
@pytest.mark.parametrize("spec", NEW_RUNS, ids=lambda s: s[0])
def test_doctor_meets_the_2_27_to_2_30_runs(capsys, spec):
    """At least 80% of rows within 1.3x of the default model, none below the bound."""
    doc = _doctor(capsys, str(LOGS / spec[0]), *spec[1:])
    ratios = [row["measured_over_expected"] for row in doc["rows"]]
    assert sum(1 for r in ratios if 1 / 1.3 <= r <= 1.3) >= 0.8 * len(ratios)
    assert all(row["bound_us"] is None or row["measured_us"] >= row["bound_us"] for row in doc["rows"])


@needs_logs
def test_doctor_says_which_kernel_nccl_most_likely_ran(capsys):
    doc = _doctor(capsys, str(LOGS / "h200-8gpu-allreduce-symmetric-R2-graph-1.txt"), "--topology", "h200")
    kernels = [(row["size_bytes"], row["choice"]["protocol"]) for row in doc["rows"]]
    assert kernels[0] == (128, "AGxLLMC_R") and kernels[-1] == (1 << 30, "RSxLDMC_AGxSTMC")
    assert doc["launch"] == "graph" and doc["buffers"] == "symmetric"


def test_a_run_over_trays_of_one_rack_is_read_against_the_rack(tmp_path, capsys):
    """MNNVL: 16 GPUs on 4 trays of one GB300 rack are one NVLink domain; 4 hosts of an HGX pair are not."""
    lines = ["# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 2(factor) graph: 0"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {100 + r} on tray{r // 4} device {r % 4} [0x01] NVIDIA GB300"
              for r in range(16)]
    lines += ["#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
              "algbw   busbw #wrong", "  1073741824  268435456 float sum -1 3000.0 0.0 0.0 0 3000.0 0.0 0.0 0"]
    log = tmp_path / "trays.txt"
    log.write_text("\n".join(lines) + "\n")
    doc = _doctor(capsys, str(log), "--topology", "gb300nvl72", "--ranks", "0-15")
    assert doc["rows"][0]["choice"]["algorithm"] == "nvls"
    assert main(["doctor", str(log), "--topology", "h100x2"]) == 2
    assert "ran on 4 machine(s), topology h100x2 has 2" in capsys.readouterr().err


@needs_logs
def test_launch_option_is_checked(capsys):
    log = str(LOGS / "h100-8gpu-allreduce-default-excerpt-1.txt")
    assert main(["doctor", log, "--topology", "h100", "--launch", "threads:0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--launch 'threads:0'" in err[0]


def test_graph_terms_keep_everything_else():
    cal = Calibration()
    eager, graph = cal.terms(), cal.terms(graph=True)
    assert replace(graph, launch_us=eager.launch_us, call_floor_us=None, latency_scale=eager.latency_scale) == eager
    assert graph.latency_scale == cal.get("latency_scale_graph") < eager.latency_scale
    assert graph.fastest_call_us == 0.0 and eager.fastest_call_us > cal.terms(symmetric=True).fastest_call_us


# --- bad and hand-shortened logs, through the command line ---------------------------------------------

ROWS = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
        "busbw #wrong\n     1048576        262144     float     sum      -1    30.00    0.0    0.0      0    "
        "30.00    0.0    0.0      0\n")


@pytest.mark.parametrize("lead, words", [
    ("./build/all_reduce_perf -b 8 -e 1G -R 7 -g 1\n", "-R 7: nccl-tests registers buffers"),
    ("# nThread 1 nGpus 1 minBytes 8 maxBytes 1G step: 2(factor) graph: ten unalign: 0\n", "graph count 'ten'"),
])
def test_an_unknown_launch_mode_is_one_line(tmp_path, capsys, lead, words):
    log = tmp_path / "bad.txt"
    log.write_text(lead + ROWS)
    assert main(["doctor", str(log), "--topology", "h100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "line 1" in err[0]


def test_doctor_reads_device_lines_shortened_by_hand_and_says_what_it_skipped(tmp_path, capsys):
    head = "# nThread 1 nGpus 1 minBytes 8 maxBytes 1G step: 2(factor) graph: 0\n"
    devices = "".join(f"#  Rank {r} device {r} NVIDIA H100 80GB HBM3 (from the post)\n" for r in range(7))
    log = tmp_path / "short.txt"
    log.write_text(head + devices + "#  ...\n#  Rank  7 Group  0 Pid\n" + ROWS)
    assert main(["doctor", str(log), "--topology", "h100"]) == 0
    out = capsys.readouterr().out
    assert "skipped line 10: device line not read" in out and "1 rows within" not in out.splitlines()[0]


def test_synth_bounds_takes_the_launch_mode(capsys):
    """Under a calibration, a graph's calls pay no CPU floor: the bound at 1 KiB falls from the
    eager launch floor to the graph's kernel-node floor, still under every graph row measured."""
    def time_at(*extra) -> float:
        assert main(["bounds", "h200", "allreduce", "--size", "1K", "--calibration", "default", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["time_us"]

    eager, graph = time_at(), time_at("--launch", "graph")
    assert graph < eager and graph <= 3.06  # B200's fastest graph row
    assert main(["bounds", "h200", "allreduce", "--launch", "graph"]) == 2
    assert "give --calibration" in capsys.readouterr().err


def test_doctor_marks_a_copy_engine_choice_unmeasured(tmp_path, capsys):
    log = tmp_path / "ce.txt"
    log.write_text("# ./build/all_gather_perf -b 1M -e 1G -R 2 -g 1\n# NCCL_CTA_POLICY=ZERO\n" + ROWS)
    doc = _doctor(capsys, str(log), "--topology", "b200")
    assert doc["collective"] == "allgather" and doc["buffers"] == "symmetric"
    assert doc["rows"][0]["choice"] == {"algorithm": "copy_engine", "protocol": "memcpy", "channels": 0,
                                        "measured": False}
