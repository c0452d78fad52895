"""synth.measure.logs: the real nccl-tests / rccl-tests outputs in shared/nccl-tests-logs, tables
generated in the printed format, and malformed text (always one InputError line, never a traceback)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.core.errors import InputError
from synth.measure.logs import NO_ROWS, Row, Run, collective_name, nccl_version, parse_runs, read_runs
from tests.shared_data import shared_folder

ROOT = Path(__file__).resolve().parents[2]


def _logs_root() -> Path | None:
    return shared_folder("nccl-tests-logs", "SOURCES.md", "SYNTH_NCCL_TESTS_LOGS")


LOGS = _logs_root()
needs_logs = pytest.mark.skipif(LOGS is None, reason="shared/nccl-tests-logs not found (set SYNTH_NCCL_TESTS_LOGS)")
FILES = sorted(p.name for p in LOGS.glob("*.txt")) if LOGS else []
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A data row as a person would spot it: integer, integer, a lower-case word; nothing else.
DATA_LINE = re.compile(r"^\s*\d+\s+\d+\s+[a-z]\w*\s")


# --- the real files ------------------------------------------------------------------------------

# What each file holds, read off the file by hand: per run (rows, first (size, time), last (size, time)).
EXPECTED_ROWS = {
    "a100-8gpu-allreduce-1.txt": [(30, (8, 40.12), (4294967296, 32336.0))],
    "a100-8gpu-allreduce-2.txt": [(30, (8, 20.26), (4294967296, 32285.0))],
    "a100-8gpu-and-2node-allreduce-oci-ubuntu.txt": [(1, (10737418240, 80922.0), (10737418240, 80922.0)),
                                                     (1, (10737418240, 104989.0), (10737418240, 104989.0))],
    "a100-8gpu-and-2node-allreduce-oci.txt": [(1, (10737418240, 80646.8), (10737418240, 80646.8)),
                                              (1, (10737418240, 90330.0), (10737418240, 90330.0))],
    "b200-8gpu-allreduce-symmetric-R2-1.txt": [(31, (8, 12.44), (8589934592, 18421.0))],
    "b200-gcp-a4-2node-16gpu-allgather-1.txt": [(24, (1024, 280.4), (8589934592, 30970.0))],
    "b200-gcp-a4-8gpu-allreduce-abbrev-1.txt": [(12, (8388608, 80.32), (17179869184, 35561.0))],
    "b300-8gpu-allreduce-oci-excerpt-1.txt": [(1, (8589934592, 18006.0), (8589934592, 18006.0))],
    "dgx1-v100-8gpu-allreduce-1.txt": [(25, (8, 48.46), (134217728, 1818.8))],
    "dgx2-v100-12gpu-allgather-1.txt": [(31, (0, 57.30), (8589934560, 106773.0))],
    "dgx2-v100-12gpu-allreduce-1.txt": [(31, (8, 61.03), (8589934592, 127453.0))],
    "gb200-nvl72-128gpu-2rack-allreduce-oci-1.txt": [(33, (8, 183.82), (34359738368, 99744.6))],
    "gb200-nvl72-4gpu-1node-allreduce-oci-excerpt-1.txt": [(2, (4294967296, 9801.3), (8589934592, 19424.0))],
    "gb200-nvl72-72gpu-allreduce-1.txt": [(5, (536870912, 1806.7), (8589934592, 20299.0))],
    "gb300-nvl72-4gpu-1node-allreduce-nvls-oci-excerpt-1.txt": [(2, (8589934592, 18920.0), (17179869184, 37610.0))],
    "gb300-nvl72-64gpu-16node-allreduce-nvls-oci-excerpt-1.txt": [(2, (8589934592, 18842.0),
                                                                  (17179869184, 36350.0))],
    "h100-2gpu-allreduce-nvls-forced-1.txt": [(6, (268435456, 1346.49), (8589934592, 41508.1))],
    "h100-2gpu-allreduce-ring-1.txt": [(6, (268435456, 892.85), (8589934592, 24713.4))],
    "h100-2node-16gpu-allreduce-1.txt": [(31, (8, 135.8), (8589934592, 47535.0))],
    "h100-2node-16gpu-allreduce-2.txt": [(32, (8, 172.7), (17179869184, 68195.0))],
    "h100-4gpu-allreduce-auto-ring-1.txt": [(6, (268435456, 1185.5), (8589934592, 35294.0))],
    "h100-4gpu-allreduce-nvls-forced-1.txt": [(6, (268435456, 1121.71), (8589934592, 34229.8))],
    "h100-4gpu-allreduce-ring-1.txt": [(6, (268435456, 1186.34), (8589934592, 35308.1))],
    "h100-8gpu-allgather-nvlsenabled-1.txt": [(31, (0, 0.94), (8589934592, 20927.3))],
    "h100-8gpu-allreduce-default-excerpt-1.txt": [(6, (1024, 34.57), (32768, 33.56))],
    "h100-8gpu-allreduce-1.txt": [(31, (8, 34.98), (8589934592, 40838.9))],
    "h100-8gpu-allreduce-nvls-1.txt": [(31, (8, 36.22), (8589934592, 31372.3))],
    "h100-8gpu-allreduce-ring-1.txt": [(31, (8, 37.33), (8589934592, 40848.8))],
    "h200-2node-16gpu-allreduce-default-R0-1.txt": [(24, (4, 30.21), (33554432, 259.98))],
    "h200-2node-16gpu-allreduce-roce-1.txt": [(25, (1024, 45.06), (17179869184, 66326.9))],
    "h200-8gpu-allreduce-default-R0-1.txt": [(24, (4, 33.02), (33554432, 197.64))],
    "h200-8gpu-allreduce-default-symnowin0-1.txt": [(24, (4, 42.74), (33554432, 198.3))],
    "h200-8gpu-allreduce-symmetric-R2-1.txt": [(24, (4, 31.45), (33554432, 131.28))],
    "h200-8gpu-allreduce-symmetric-R2-graph-1.txt": [(24, (128, 5.78), (1073741824, 3895.25))],
    "h200-8gpu-nccl-allreduce-ring-nonvls-1.txt": [(24, (128, 5.4), (1073741824, 6506.91))],
    "h200-8gpu-nccl-alltoall-fair-1.txt": [(24, (128, 6.23), (1073741824, 2713.68))],
    "mi250-16gcd-allreduce-excerpt.txt": [(8, (8, 25.06), (1024, 31.25))],
    "mi300x-2node-16gpu-allreduce-1.txt": [(32, (8, 256.5), (17179869184, 90115.0))],
    "mi300x-8gpu-allreduce-1.txt": [(25, (8, 45.92), (134217728, 801.4))],
    "mi300x-8gpu-allreduce-2.txt": [(31, (8, 19.28), (8589934592, 47617.0))],
    "mi355x-2node-16gpu-allreduce-1.txt": [(31, (8, 41.16), (8589934592, 43643.0))],
    "mi355x-8gpu-allreduce-oci-pollara-excerpt-1.txt": [(2, (8589934592, 36863.0), (17179869184, 73544.0))],
}

# Per run: (launch, threads, gpus_per_thread, ranks, processes, machines, version, collective, redop, root).
EXPECTED_RUNS = {
    "a100-8gpu-allreduce-1.txt": [("threads", 1, 8, 8, 1, 1, None, "allreduce", "sum", -1)],
    "a100-8gpu-allreduce-2.txt": [("processes", 1, 1, 8, 8, 1, None, "allreduce", "sum", -1)],
    "a100-8gpu-and-2node-allreduce-oci-ubuntu.txt": [("processes", 1, 1, 8, 8, 1, None, "allreduce", "sum", -1),
                                                     ("processes", 1, 1, 16, 16, 2, None, "allreduce", "sum", -1)],
    "a100-8gpu-and-2node-allreduce-oci.txt": [("processes", 1, 1, 8, 8, 1, "nccl 2.25.1", "allreduce", "sum", -1),
                                              ("processes", 1, 1, 16, 16, 2, None, "allreduce", "sum", -1)],
    # the text names the test only as "-t all_gather" / not at all: no collective
    "b200-gcp-a4-2node-16gpu-allgather-1.txt": [("processes", 1, 1, 16, 16, 2, "nccl 2.26.6", None, "none", -1)],
    # no device lines, no launch command: only the header's prose (the thread's recipe) and the rows
    "b200-8gpu-allreduce-symmetric-R2-1.txt": [("processes", 1, 1, None, None, None, None, "allreduce", "sum", -1)],
    "h100-8gpu-allreduce-default-excerpt-1.txt": [("processes", 1, 1, None, None, None, None, None, "sum", -1)],
    # device lines without "on HOST": ranks and processes, no host
    "b200-gcp-a4-8gpu-allreduce-abbrev-1.txt": [("threads", 1, 8, 8, 1, None, None, None, "sum", -1)],
    "b300-8gpu-allreduce-oci-excerpt-1.txt": [("threads", 1, 8, None, None, None, "nccl 2.28.9", "allreduce", "sum",
                                               -1)],
    "dgx1-v100-8gpu-allreduce-1.txt": [("threads", 1, 8, 8, 1, 1, None, "allreduce", "sum", None)],
    "dgx2-v100-12gpu-allgather-1.txt": [("threads", 1, 12, 12, 1, 1, None, "allgather", None, None)],
    "dgx2-v100-12gpu-allreduce-1.txt": [("threads", 1, 12, 12, 1, 1, None, "allreduce", "sum", None)],
    # trimmed device listings (only "Rank 127", "Rank 71"; ranks 0, 1, ..., 62, 63): ranks, hosts unknown
    "gb200-nvl72-128gpu-2rack-allreduce-oci-1.txt": [("processes", 1, 1, 128, None, None, "nccl 2.29.2", "allreduce",
                                                      "sum", -1)],
    "gb200-nvl72-4gpu-1node-allreduce-oci-excerpt-1.txt": [("processes", 1, 1, 4, 1, 1, None, "allreduce", "sum", -1)],
    "gb200-nvl72-72gpu-allreduce-1.txt": [("processes", 1, 1, 72, None, None, None, "allreduce", "sum", -1)],
    "gb300-nvl72-4gpu-1node-allreduce-nvls-oci-excerpt-1.txt": [("processes", 1, 1, 4, 4, 1, "nccl 2.28.7", "allreduce",
                                                                 "sum", -1)],
    "gb300-nvl72-64gpu-16node-allreduce-nvls-oci-excerpt-1.txt": [("processes", 1, 1, 64, None, None, "nccl 2.28.7",
                                                                   "allreduce", "sum", -1)],
    "h100-2gpu-allreduce-nvls-forced-1.txt": [("threads", 1, 2, 2, 1, 1, "nccl 2.29.2", "allreduce", "sum", -1)],
    "h100-2gpu-allreduce-ring-1.txt": [("threads", 1, 2, 2, 1, 1, "nccl 2.29.2", "allreduce", "sum", -1)],
    "h100-2node-16gpu-allreduce-1.txt": [("processes", 1, 1, 16, 16, 2, None, "allreduce", "sum", -1)],
    "h100-2node-16gpu-allreduce-2.txt": [("threads", 1, 8, 16, 2, 2, None, "allreduce", "sum", -1)],
    "h100-4gpu-allreduce-auto-ring-1.txt": [("threads", 1, 4, 4, 1, 1, "nccl 2.29.2", "allreduce", "sum", -1)],
    "h100-4gpu-allreduce-nvls-forced-1.txt": [("threads", 1, 4, 4, 1, 1, "nccl 2.29.2", "allreduce", "sum", -1)],
    "h100-4gpu-allreduce-ring-1.txt": [("threads", 1, 4, 4, 1, 1, "nccl 2.29.2", "allreduce", "sum", -1)],
    "h100-8gpu-allgather-nvlsenabled-1.txt": [("threads", 1, 8, 8, 1, 1, "nccl 2.26.2", "allgather", "none", -1)],
    "h100-8gpu-allreduce-1.txt": [("threads", 1, 8, 8, 1, 1, "nccl 2.26.2", "allreduce", "sum", -1)],
    "h100-8gpu-allreduce-nvls-1.txt": [("threads", 1, 8, 8, 1, 1, "nccl 2.26.2", "allreduce", "sum", -1)],
    "h100-8gpu-allreduce-ring-1.txt": [("threads", 1, 8, 8, 1, 1, "nccl 2.26.2", "allreduce", "sum", -1)],
    "h200-2node-16gpu-allreduce-roce-1.txt": [("threads", 1, 8, 16, 2, 2, "nccl 2.30.4", "allreduce", "sum", -1)],
    "h200-2node-16gpu-allreduce-default-R0-1.txt": [("processes", 1, 1, 16, 16, 2, "nccl 2.30.4", "allreduce", "sum",
                                                     -1)],
    "h200-8gpu-allreduce-default-R0-1.txt": [("threads", 1, 8, 8, 1, 1, "nccl 2.30.4", "allreduce", "sum", -1)],
    "h200-8gpu-allreduce-default-symnowin0-1.txt": [("threads", 1, 8, 8, 1, 1, "nccl 2.30.4", "allreduce", "sum",
                                                     -1)],
    "h200-8gpu-allreduce-symmetric-R2-1.txt": [("threads", 1, 8, 8, 1, 1, "nccl 2.30.4", "allreduce", "sum", -1)],
    "h200-8gpu-allreduce-symmetric-R2-graph-1.txt": [("threads", 1, 8, 8, 1, 1, "nccl 2.30.4", "allreduce", "sum",
                                                      -1)],
    "h200-8gpu-nccl-allreduce-ring-nonvls-1.txt": [("threads", 1, 8, 8, 1, 1, "nccl 2.30.4", "allreduce", "sum",
                                                    -1)],
    "h200-8gpu-nccl-alltoall-fair-1.txt": [("threads", 1, 8, 8, 1, 1, "nccl 2.30.4", "alltoall", "none", -1)],
    "mi250-16gcd-allreduce-excerpt.txt": [("processes", 1, 1, 16, 16, None, None, "allreduce", "sum", None)],
    "mi300x-2node-16gpu-allreduce-1.txt": [("processes", 1, 1, 16, 16, 2, "rccl 2.22.3", "allreduce", "sum", -1)],
    "mi300x-8gpu-allreduce-1.txt": [("threads", 1, 8, 8, 1, 1, None, "allreduce", "sum", -1)],
    "mi300x-8gpu-allreduce-2.txt": [("processes", 1, 1, 8, 8, 1, None, "allreduce", "sum", -1)],
    "mi355x-2node-16gpu-allreduce-1.txt": [("processes", 1, 1, 16, 16, 2, "rccl 2.26.6", "allreduce", "sum", -1)],
    "mi355x-8gpu-allreduce-oci-pollara-excerpt-1.txt": [("processes", 1, 1, None, None, None, None, "allreduce",
                                                         "sum", -1)],
}

# What each file says NCCL was allowed to do (NCCL_ALGO / NCCL_NVLS_ENABLE / NCCL_COLLNET_ENABLE as its
# header or commands state them, the first statement in prose winning; None: stated unset), and per
# file the algorithms NCCL's per-call lines name. Files that state nothing are absent.
EXPECTED_SETTINGS = {
    "gb200-nvl72-72gpu-allreduce-1.txt": {"NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "0"},
    "gb300-nvl72-4gpu-1node-allreduce-nvls-oci-excerpt-1.txt": {"NCCL_NVLS_ENABLE": "1"},
    "gb300-nvl72-64gpu-16node-allreduce-nvls-oci-excerpt-1.txt": {"NCCL_NVLS_ENABLE": "1"},
    "h100-2gpu-allreduce-nvls-forced-1.txt": {"NCCL_ALGO": "NVLS"},
    "h100-2gpu-allreduce-ring-1.txt": {"NCCL_ALGO": "Ring"},
    "h100-4gpu-allreduce-auto-ring-1.txt": {"NCCL_ALGO": None},
    "h100-4gpu-allreduce-nvls-forced-1.txt": {"NCCL_ALGO": "NVLS"},
    "h100-4gpu-allreduce-ring-1.txt": {"NCCL_ALGO": "Ring"},
    "h100-8gpu-allgather-nvlsenabled-1.txt": {"NCCL_ALGO": None, "NCCL_NVLS_ENABLE": "1", "NCCL_COLLNET_ENABLE": "0"},
    "h100-8gpu-allreduce-1.txt": {"NCCL_ALGO": "Ring"},  # "NCCL_ALGO=Ring presumably", says its header
    # the companion file's "NCCL_ALGO=RING NCCL_NVLS_ENABLE=0" comes later in the header: the first statement wins
    "h100-8gpu-allreduce-nvls-1.txt": {"NCCL_ALGO": None, "NCCL_NVLS_ENABLE": "1", "NCCL_COLLNET_ENABLE": "0"},
    "h100-8gpu-allreduce-ring-1.txt": {"NCCL_ALGO": "RING", "NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "0"},
    "mi355x-2node-16gpu-allreduce-1.txt": {"NCCL_ALGO": None},
    "h200-8gpu-allreduce-default-symnowin0-1.txt": {"NCCL_SYM_NOWIN_ENABLE": "0"},
    # its notes' "with and without NCCL_NVLS_ENABLE=0" names other runs: no statement
    "h200-8gpu-nccl-allreduce-ring-nonvls-1.txt": {"NCCL_ALGO": "Ring", "NCCL_NVLS_ENABLE": "0"},
}
# Per file: (graph launches, nccl-tests -R) as the header, a command or the prose's quoted test
# command states them (None: never stated). Files absent: (0, None).
EXPECTED_MODES = {
    "b200-8gpu-allreduce-symmetric-R2-1.txt": (100, 2),  # the thread's recipe, quoted in the header's prose
    "h200-2node-16gpu-allreduce-default-R0-1.txt": (0, 0),
    "h200-8gpu-allreduce-default-R0-1.txt": (0, 0),
    "h200-8gpu-allreduce-symmetric-R2-1.txt": (0, 2),
    "h200-8gpu-allreduce-symmetric-R2-graph-1.txt": (10, 2),
    "h200-8gpu-nccl-allreduce-ring-nonvls-1.txt": (10, 2),
    "h200-8gpu-nccl-alltoall-fair-1.txt": (10, 2),
}
EXPECTED_CALLS = {
    "h100-2gpu-allreduce-nvls-forced-1.txt": {("nvls", "simple")},
    "h100-2gpu-allreduce-ring-1.txt": {("ring", "simple")},
    "h100-4gpu-allreduce-auto-ring-1.txt": {("ring", "simple")},
    "h100-4gpu-allreduce-nvls-forced-1.txt": {("nvls", "simple")},
    "h100-4gpu-allreduce-ring-1.txt": {("ring", "simple")},
}


def _runs(name: str) -> list[Run]:
    return read_runs(LOGS / name)


def _data_lines(name: str) -> list[tuple[int, list[str]]]:
    text = (LOGS / name).read_text(encoding="utf-8")
    return [(n, line.split()) for n, line in enumerate(text.split("\n"), start=1) if DATA_LINE.match(line)]


@needs_logs
def test_every_file_listed_here_is_shared():
    """The folder grows (SOURCES.md): files listed here must be there; a new one is read by the
    generic tests below until it is listed."""
    assert sorted(EXPECTED_ROWS) == sorted(EXPECTED_RUNS)
    assert set(EXPECTED_ROWS) | set(EXPECTED_SETTINGS) | set(EXPECTED_CALLS) | set(EXPECTED_MODES) <= set(FILES)


@needs_logs
@pytest.mark.parametrize("name", FILES)
def test_every_shared_file_reads(name):
    """Every shared file, listed or new: runs of rows with sizes, times and a launch mode."""
    runs = _runs(name)
    assert runs and all(r.rows and r.graph >= 0 and r.registration in (None, 0, 1, 2) for r in runs)
    assert all(row.time_us >= 0 for r in runs for row in r.rows)


@needs_logs
@pytest.mark.parametrize("name", FILES)
def test_launch_modes(name):
    assert {(r.graph, r.registration) for r in _runs(name)} == {EXPECTED_MODES.get(name, (0, None))}


@needs_logs
@pytest.mark.parametrize("name", FILES)
def test_nccl_settings_and_calls(name):
    """What each run let NCCL do, and the algorithm NCCL logged per size (one per row where it did)."""
    for run in _runs(name):
        assert run.nccl_settings == EXPECTED_SETTINGS.get(name, {})
        assert {(c.algorithm, c.protocol) for c in run.calls} == EXPECTED_CALLS.get(name, set())
        if run.calls:
            assert sorted(c.size_bytes for c in run.calls) == [r.size_bytes for r in run.rows]


@needs_logs
@pytest.mark.parametrize("name", FILES)
def test_rows_are_the_files_data_lines(name):
    """Every line that looks like data is one row, in order, with the values printed on it (files
    with in-place columns have a check column, so out-of-place time is the 8th field from the end,
    in-place time the 4th; the one abbreviated file has out-of-place time, algbw and busbw last)."""
    rows = [row for run in _runs(name) for row in run.rows]
    lines = _data_lines(name)
    assert [row.line for row in rows] == [n for n, _ in lines]
    for row, (_, fields) in zip(rows, lines):
        assert (row.size_bytes, row.count, row.dtype) == (int(fields[0]), int(fields[1]), fields[2])
        if row.inplace_time_us is None:
            assert (row.time_us, row.algbw_gbps, row.busbw_gbps) == tuple(float(f) for f in fields[-3:])
            continue
        assert (row.time_us, row.algbw_gbps, row.busbw_gbps) == tuple(float(f) for f in fields[-8:-5])
        assert (row.inplace_time_us, row.inplace_algbw_gbps, row.inplace_busbw_gbps) == tuple(
            float(f) for f in fields[-4:-1])


@needs_logs
@pytest.mark.parametrize("name", FILES)
def test_runs_rows_and_ends(name):
    runs = _runs(name)
    got = [(len(r.rows), (r.rows[0].size_bytes, r.rows[0].time_us), (r.rows[-1].size_bytes, r.rows[-1].time_us))
           for r in runs]
    assert got == EXPECTED_ROWS.get(name, got)
    assert [r.index for r in runs] == list(range(len(runs)))
    assert all(r.source == str(LOGS / name) for r in runs)


@needs_logs
@pytest.mark.parametrize("name", FILES)
def test_runs_launch(name):
    got = [(r.launch, r.threads, r.gpus_per_thread, r.ranks, r.processes, r.machines, r.version, r.collective,
            r.rows[0].redop, r.rows[0].root) for r in _runs(name)]
    assert got == EXPECTED_RUNS.get(name, got)


@needs_logs
def test_h100_single_node():
    [run] = _runs("h100-8gpu-allreduce-1.txt")
    assert len(run.rows) == 31 and run.rows[0].size_bytes == 8 and run.rows[0].time_us == 34.98
    assert run.rows[-1] == Row(8589934592, 2147483648, "float", "sum", -1, 40838.9, 210.34, 368.09,
                               40780.5, 210.64, 368.62, 55)
    assert (run.launch, run.ranks, run.machines, run.version, run.collective) == (
        "threads", 8, 1, "nccl 2.26.2", "allreduce")
    assert run.hosts == ("gpu-dp-2jvzl-pqq7p",) and run.devices == ("NVIDIA H100 80GB HBM3",) * 8


@needs_logs
def test_a100_processes_skip_the_openmpi_lines():
    [run] = _runs("a100-8gpu-allreduce-2.txt")
    assert (run.launch, run.ranks, run.processes, len(run.rows)) == ("processes", 8, 8, 30)
    text = (LOGS / "a100-8gpu-allreduce-2.txt").read_text(encoding="utf-8").split("\n")
    stray = [n for n, line in enumerate(text, start=1) if "help-mtl-ofi" in line]
    assert len(stray) == 2 and not {row.line for row in run.rows} & set(stray)
    assert run.rows[-1].line == stray[-1] + 1 and run.rows[-2].line == stray[-1] - 1


@needs_logs
def test_oci_two_runs_one_and_two_machines():
    one, two = _runs("a100-8gpu-and-2node-allreduce-oci.txt")
    assert (len(one.rows), len(two.rows)) == (1, 1)
    assert (one.ranks, one.machines, two.ranks, two.machines) == (8, 1, 16, 2)
    assert two.hosts == ("inst-gpu-master", "inst-gpu-slave")
    assert one.version == "nccl 2.25.1" and two.version is None  # run 2 is a new command; it prints no version


@needs_logs
def test_mi300x_two_nodes():
    [run] = _runs("mi300x-2node-16gpu-allreduce-1.txt")
    assert (run.ranks, run.machines, run.hosts, run.version) == (16, 2, ("gpu-53", "gpu-56"), "rccl 2.22.3")


@needs_logs
def test_old_allgather_without_redop_and_root_keeps_size_zero_rows():
    [run] = _runs("dgx2-v100-12gpu-allgather-1.txt")
    assert run.collective == "allgather" and run.ranks == 12 and run.launch == "threads"
    assert [r.size_bytes for r in run.rows[:4]] == [0, 0, 0, 48]
    assert all(r.redop is None and r.root is None for r in run.rows)
    assert run.rows[3] == Row(48, 1, "float", None, None, 57.46, 0.0, 0.0, 57.40, 0.0, 0.0, run.rows[3].line)


@needs_logs
def test_two_nodes_one_process_per_gpu():
    [run] = _runs("h100-2node-16gpu-allreduce-1.txt")
    assert (run.processes, run.machines, run.ranks, run.launch) == (16, 2, 16, "processes")


@needs_logs
def test_rccl_excerpt_without_device_lines_takes_ranks_from_mpirun():
    [run] = _runs("mi250-16gcd-allreduce-excerpt.txt")
    assert (run.ranks, run.processes, run.hosts, run.devices, run.machines) == (16, 16, (), (), None)


# Without their device lines, the files whose launch command is printed on a line of its own:
# per run (ranks, processes, hosts) from the command (mpirun -np/-n/-H, the test's -g).
FROM_COMMAND = {
    "a100-8gpu-allreduce-2.txt": [(8, 8, ("localhost",))],
    "a100-8gpu-and-2node-allreduce-oci.txt": [(8, 8, ()), (16, 16, ("inst-gpu-master", "inst-gpu-slave"))],
    "a100-8gpu-and-2node-allreduce-oci-ubuntu.txt": [(8, 8, ()), (16, 16, ())],
    "h100-2node-16gpu-allreduce-1.txt": [(16, 16, ())],
    "h100-2node-16gpu-allreduce-2.txt": [(16, 2, ())],
    "dgx2-v100-12gpu-allgather-1.txt": [(None, None, ())],  # no launcher: the process count is not printed
}


@needs_logs
@pytest.mark.parametrize("name", sorted(FROM_COMMAND))
def test_without_device_lines_the_command_gives_the_ranks(name):
    text = "\n".join(line for line in (LOGS / name).read_text(encoding="utf-8").split("\n")
                     if not re.match(r"#\s*Rank\s", line))
    runs = parse_runs(text, name)
    assert [(r.ranks, r.processes, r.hosts) for r in runs] == FROM_COMMAND[name]
    assert all(r.devices == () for r in runs)


@needs_logs
def test_text_argument_replaces_the_files_content():
    [run] = read_runs(LOGS / "no-such-file.txt", text=(LOGS / "h100-8gpu-allreduce-1.txt").read_text())
    assert run.source.endswith("no-such-file.txt") and len(run.rows) == 31


@needs_logs
def test_a_truncated_row_in_a_real_file_names_its_line():
    lines = (LOGS / "h100-8gpu-allreduce-1.txt").read_text(encoding="utf-8").split("\n")
    n = next(i for i, line in enumerate(lines) if line.split()[:1] == ["1048576"])
    lines[n] = " ".join(lines[n].split()[:7])
    with pytest.raises(InputError, match=rf"^x.txt: line {n + 1}: truncated row \(7 of 13 columns\)$"):
        parse_runs("\n".join(lines), "x.txt")


# --- read_runs errors ----------------------------------------------------------------------------


def test_missing_file_directory_and_non_text(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_runs(tmp_path / "absent.txt")
    with pytest.raises(InputError, match="is a directory"):
        read_runs(tmp_path)
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(InputError, match=rf"^{re.escape(str(binary))}: not text \(byte \d+ is not UTF-8\)$"):
        read_runs(binary)


@pytest.mark.parametrize("text", ["", "\n\n", "hello world\n", "# nThread 1 nGpus 8 minBytes 8\n#\n",
                                  "\x00\x01\x02 binary-ish", "#  size count type time algbw busbw\n"])
def test_no_rows_is_one_line(tmp_path, text):
    path = tmp_path / "f.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_runs(path)
    assert str(info.value) == f"{path}: {NO_ROWS}"


HEADER13 = "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n"
ROW13 = "  8  2  float  sum  -1  {t}  0.00  0.00  0  34.52  0.00  0.00  0\n"


@pytest.mark.parametrize("time, message", [
    ("-1.5", "time -1.5 is not a finite non-negative number"),
    ("1e999", "time 1e999 is not a finite non-negative number"),
    ("nan", "time 'nan' is not a number"),
    ("inf", "time 'inf' is not a number"),
    ("1,5", "time '1,5' is not a number"),
    ("1_0", "time '1_0' is not a number"),
])
def test_bad_numbers_name_the_line(time, message):
    with pytest.raises(InputError, match=rf"^f: line 2: {re.escape(message)}$"):
        parse_runs(HEADER13 + ROW13.format(t=time), "f")


def test_more_columns_than_the_header_names_the_line():
    with pytest.raises(InputError, match=r"^f: line 3: 14 columns, but the table has 13$"):
        parse_runs(HEADER13 + ROW13.format(t="1.0") + ROW13.format(t="1.0").rstrip() + " 7\n", "f")


def test_bad_integers():
    with pytest.raises(InputError, match=r"^f: line 2: size 1{20} is too large"):
        parse_runs(HEADER13 + ROW13.format(t="1").replace("  8  ", "  " + "1" * 20 + "  ", 1), "f")
    with pytest.raises(InputError, match=r"^f: line 2: root 'x' is not an integer$"):
        parse_runs(HEADER13 + ROW13.format(t="1").replace("-1", "x", 1), "f")


def test_rows_without_header_fit_no_layout():
    with pytest.raises(InputError, match=r"^f: line 1: a row of 10 columns fits no nccl-tests table"):
        parse_runs("8 2 float 1 2 3 4 5 6 7\n", "f")
    with pytest.raises(InputError, match=r"^f: line 1: truncated row \(5 of at least 7 columns\)$"):
        parse_runs("8 2 float 1.0 2.0\n", "f")


def test_malformed_header_lines():
    with pytest.raises(InputError, match=r"^f: line 1: malformed header"):
        parse_runs("# nThread 1 nGpus\n" + HEADER13 + ROW13.format(t="1"), "f")
    with pytest.raises(InputError, match=r"^f: line 1: graph count 'x' is not a non-negative integer"):
        parse_runs("# nThread 1 nGpus 8 minBytes 8 graph: x unalign: 0\n" + HEADER13 + ROW13.format(t="1"), "f")
    with pytest.raises(InputError, match=r"^f: line 1: -R 3: nccl-tests registers buffers with -R 0"):
        parse_runs("./build/all_reduce_perf -b 8 -e 1G -R 3\n" + HEADER13 + ROW13.format(t="1"), "f")
    with pytest.raises(InputError, match=r"^f: line 1: graph count '-1'"):
        parse_runs("# ran: all_reduce_perf -G -1 -g 8\n" + HEADER13 + ROW13.format(t="1"), "f")


def test_device_lines_shortened_by_hand_are_read():
    """Public posts shorten device lines: no Pid, a note after the model, ``...`` for elided ranks,
    a line cut short. The rows are what matter; a line not read keeps its rank and is named."""
    text = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 graph: 10\n"
            "#  Rank  0 Group  0 on node1 device  0 [0x07] NVIDIA H100 80GB HBM3 (GPU 0 of 8)\n"
            "#  Rank  1 Group  0 Pid  54740 on\n"
            "#  ...\n"
            "#  Rank  7 Group  0 Pid  1 on node1 device  7 [0x07] NVIDIA H100 80GB HBM3 <- last\n" + HEADER13
            + ROW13.format(t="1"))
    [run] = parse_runs(text, "f")
    assert (run.ranks, run.processes, run.hosts, run.graph, len(run.rows)) == (8, None, (), 10, 1)
    assert run.devices == ("NVIDIA H100 80GB HBM3",) * 2
    assert run.skipped == ("line 3: device line not read ('#  Rank  1 Group  0 Pid  54740 on')",)
    [whole] = parse_runs(text.replace("#  Rank  1 Group  0 Pid  54740 on", "#  Rank  1 device 1 NVIDIA H100"), "f")
    assert whole.skipped == () and whole.ranks == 8


def test_launch_mode_from_command_header_and_prose():
    table = HEADER13 + ROW13.format(t="1")
    [run] = parse_runs("mpirun -np 8 ./build/all_reduce_perf -b 8 -e 1G -R 2 -G 20\n" + table, "f")
    assert (run.graph, run.registration, run.buffers) == (20, 2, "symmetric")
    # the header's "graph: N" is what ran; prose states only what nothing else did
    [run] = parse_runs("# Launch: all_reduce_perf -R 1 -G 5\n# nThread 1 nGpus 1 minBytes 8 graph: 0\n" + table, "f")
    assert (run.graph, run.registration, run.buffers) == (0, 1, "local")
    [run] = parse_runs(table, "f")
    assert (run.graph, run.registration, run.buffers) == (0, None, "none")
    # prose that names another run's command (after a contrast word) states nothing for this one
    [run] = parse_runs("# plain buffers, unlike the pair's all_reduce_perf -R 2 -G 10\n" + table, "f")
    assert (run.graph, run.registration) == (0, None)


# --- runs: boundaries, context, commands -----------------------------------------------------------


def _table(*sizes: int) -> str:
    return "".join(f"{s} {s // 4} float sum -1 1.0 0.0 0.0 0 1.0 0.0 0.0 0\n" for s in sizes)


def test_sizes_going_down_begin_a_new_run_that_keeps_the_setup():
    text = ("# nThread 1 nGpus 8 minBytes 8\n#  Rank  0 Group  0 Pid 1 on h device  0 [0x07] GPU\n"
            + HEADER13 + _table(8, 16, 16, 32) + _table(8, 64))
    first, second = parse_runs(text, "f")
    assert [r.size_bytes for r in first.rows] == [8, 16, 16, 32] and [r.size_bytes for r in second.rows] == [8, 64]
    assert (second.index, second.gpus_per_thread, second.ranks, second.hosts) == (1, 8, 1, ("h",))


def test_header_without_rows_is_skipped_and_starting_plus_header_is_one_run():
    text = ("# nThread 1 nGpus 1 minBytes 8\n#\n"  # crashed: nothing printed
            "# Collective test starting: all_gather_perf\n# nThread 1 nGpus 2 minBytes 8\n" + HEADER13 + _table(8)
            + "# Collective test concluded: all_gather_perf\n"
            "# Collective test starting: reduce_scatter_perf\n# nThread 1 nGpus 4 minBytes 8\n" + HEADER13 + _table(8))
    runs = parse_runs(text, "f")
    assert [(r.index, r.collective, r.gpus_per_thread) for r in runs] == [(0, "allgather", 2), (1, "reduce_scatter", 4)]


def test_what_is_printed_between_tables_belongs_to_the_second():
    text = ("$ mpirun -np 2 ./build/broadcast_perf -g 4\n"
            "# nccl-tests version 2.13.8 nccl-headers=2708 nccl-library=2708\n# nThread 1 nGpus 4\n"
            + HEADER13 + _table(8)
            + "$ mpirun -np 3 ./build/alltoall_perf -g 1\n"
            + "host:1:1 [0] NCCL INFO NCCL version 2.18.3+cuda12.2\n" + HEADER13 + _table(8))
    one, two = parse_runs(text, "f")
    assert (one.collective, one.version, one.ranks, one.processes) == ("broadcast", "nccl 2.7.8", 8, 2)
    assert (two.collective, two.version, two.ranks, two.processes) == ("alltoall", "nccl 2.18.3", 3, 3)


def test_comments_that_quote_a_version_are_not_a_printed_version():
    text = "# NCCL version: 2.26.2 (nccl-library=22602)\n# RCCL version : 2.20.5\n" + HEADER13 + _table(8)
    assert parse_runs(text, "f")[0].version is None


@pytest.mark.parametrize("command, ranks, processes, hosts", [
    ("mpirun -np 16 ./build/all_reduce_perf -g 1", 16, 16, ()),
    ("mpirun.mpich -np 16 -env X=1 ./build/all_reduce_perf -b 8 -e 1M -f 2 -g 1 -n 250", 16, 16, ()),
    ("mpirun -H gpu-53:8,gpu-56:8 ./build/all_reduce_perf -g 1", 16, 16, ("gpu-53", "gpu-56")),
    ("mpirun -H a,b -npernode 8 ./build/all_reduce_perf", 16, 16, ("a", "b")),
    ("mpirun --host a,b -N 4 ./build/all_reduce_perf -g 2", 16, 8, ("a", "b")),
    ("mpirun -x LD_LIBRARY_PATH -n 2 ./build/all_reduce_perf -b 8 -e 16G -f 2 -g 8 -n 30", 16, 2, ()),
    ("mpirun --np=4 ./build/all_reduce_perf -t 2 -g 2", 16, 4, ()),
    ("srun -N 2 --ntasks-per-node=8 ./build/all_reduce_perf", 16, 16, ()),
    ("user@box:~$ mpiexec -n 8 -hosts x:4,y:4 ./all_reduce_perf -g 1", 8, 8, ("x", "y")),
    ("$ cd ~/nccl-tests && NCCL_DEBUG=WARN mpirun -np 4 ./build/all_reduce_perf -g 2", 8, 4, ()),
    ("Running: CUDA_VISIBLE_DEVICES=0,1 ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8", None, None, ()),
    ("mpirun --hostfile h ./build/all_reduce_perf -g 8", None, None, ()),
])
def test_ranks_from_the_command_when_there_are_no_device_lines(command, ranks, processes, hosts):
    [run] = parse_runs(command + "\n" + HEADER13 + _table(8, 16), "f")
    assert (run.ranks, run.processes, run.hosts, run.collective, run.devices) == (
        ranks, processes, hosts, "allreduce", ())


def test_mpi_messages_naming_mpirun_are_not_commands():
    text = ("mpirun -np 2 ./build/all_reduce_perf -g 4\n#  Rank  0 Pid 1 on h device  0 [0x07] GPU\n" + HEADER13
            + _table(8) + "mpirun noticed that process rank 1 with PID 7 on node h exited on signal 9 (Killed).\n"
            + _table(16))
    [run] = parse_runs(text, "f")
    assert (len(run.rows), run.ranks, run.gpus_per_thread) == (2, 1, 4)


def test_a_quoted_command_continued_over_lines():
    text = ("> mpirun \\\n>    -v --hostfile ~/hostfile -np 16 \\\n>    -npernode 8 \\\n"
            ">    /opt/nccl-tests/build/sendrecv_perf -b 8 -e 8G -f 2 -g 1\n\n" + HEADER13 + _table(8))
    [run] = parse_runs(text, "f")
    assert (run.ranks, run.processes, run.collective, run.launch) == (16, 16, "sendrecv", "processes")


def test_threads_and_gpus_from_the_command_when_no_header():
    [run] = parse_runs("mpirun -np 2 ./build/all_reduce_perf -t 2 -g 4\n" + HEADER13 + _table(8), "f")
    assert (run.threads, run.gpus_per_thread, run.ranks, run.launch) == (2, 4, 16, "threads")


def test_versions_and_names():
    assert nccl_version(22602) == "2.26.2" and nccl_version(2708) == "2.7.8" and nccl_version(22501) == "2.25.1"
    assert [collective_name(t + "_perf") for t in ("all_reduce", "all_gather", "reduce_scatter", "alltoall",
                                                     "broadcast", "reduce", "gather", "scatter", "sendrecv",
                                                     "hypercube")] == [
        "allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce", "gather", "scatter",
        "sendrecv", "hypercube"]
    text = "RCCL version : 2.22.3-HEAD:7d8d67c\n" + HEADER13 + _table(8)
    assert parse_runs(text, "f")[0].version == "rccl 2.22.3"
    assert parse_runs(HEADER13 + _table(8), "f")[0].collective is None


# --- generated tables ----------------------------------------------------------------------------

STRAY = ["", "$", "#", "8 more processes have sent help message help-mtl-ofi.txt / OFI call fail",
         "1 more process has sent help message help-mtl-ofi.txt / OFI call fail", "[node1:04211] warning: x 3",
         "# Out of bounds values : 0 OK", "Hostname     : gpu-53", "rccl-tests: Version develop:a7809b3"]
TESTS = {"all_reduce_perf": "allreduce", "all_gather_perf": "allgather", "reduce_scatter_perf": "reduce_scatter",
         "alltoall_perf": "alltoall", "broadcast_perf": "broadcast", "reduce_perf": "reduce",
         "gather_perf": "gather", "scatter_perf": "scatter", "sendrecv_perf": "sendrecv"}


@dataclass(frozen=True)
class Table:
    """A generated nccl-tests run: its text lines and what the reader must return for it."""

    lines: tuple[str, ...]
    rows: tuple[Row, ...]  # line numbers counted from the table's first line (1-based)
    with_header: bool
    collective: str
    threads: int
    gpus: int
    ranks: int
    hosts: tuple[str, ...]
    processes: int
    devices: tuple[str, ...]
    version: str | None

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def run(self, source: str, index: int, offset: int) -> Run:
        """The Run expected when this table starts after ``offset`` lines of other text."""
        rows = tuple(replace(r, line=r.line + offset) for r in self.rows)
        return Run(source, index, self.collective, self.gpus, self.threads, self.ranks, self.hosts, self.processes,
                   self.devices, self.version, rows)


@st.composite
def measures(draw) -> tuple[str, str, str]:
    """time, algbw, busbw as nccl-tests prints them (%.2f, %.1f, %.0f) or as a tool might (%g, %.2e)."""
    style = draw(st.sampled_from([".2f", ".1f", ".0f", ".2e", "g"]))
    return tuple(format(draw(st.floats(0, 1e6, allow_nan=False)), style) for _ in range(3))


@st.composite
def tables(draw) -> Table:
    has_redop, has_root, inplace, with_header = (draw(st.booleans()) for _ in range(4))
    check = draw(st.sampled_from(["#wrong", "error"]))
    threads, gpus, processes = draw(st.integers(1, 2)), draw(st.integers(1, 8)), draw(st.integers(1, 4))
    test = draw(st.sampled_from(sorted(TESTS)))
    version = draw(st.none() | st.sampled_from([(22602, "nccl 2.26.2"), (2708, "nccl 2.7.8")]))
    lines = [f"$ mpirun -np {processes} ./build/{test} -b 8 -e 1G -f 2 -t {threads} -g {gpus}"]
    if version:
        lines.append(f"# nccl-tests version 2.17.9 nccl-headers={version[0]} nccl-library={version[0]}")
    if draw(st.booleans()):
        lines.append(f"# nThread {threads} nGpus {gpus} minBytes 8 maxBytes 1073741824 step: 2(factor)")
    hosts = draw(st.lists(st.sampled_from(["a", "node-2", "gpu-53"]), max_size=4))
    group = draw(st.sampled_from(["", " Group  0"]))  # old and new device lines
    if hosts:
        lines.append("# Using devices")
    for rank, host in enumerate(hosts):
        lines.append(f"#  Rank {rank:2d}{group} Pid {1000 + rank} on {host:>10} device {rank:2d} [0x07] GPU Model X")
    names = ["size", "count", "type"] + ["redop"] * has_redop + ["root"] * has_root
    names += ["time", "algbw", "busbw", check] * (1 + inplace)
    if with_header:
        lines.append("#" + "".join(f"{n:>10}" for n in names))
        lines.append("#        (B)    (elements)       (us)  (GB/s)  (GB/s)")
    rows = []
    for size in sorted(draw(st.lists(st.integers(0, 1 << 36), min_size=1, max_size=8))):
        lines += draw(st.lists(st.sampled_from(STRAY), max_size=2))
        dtype = draw(st.sampled_from(["float", "half", "bfloat16", "int8", "double", "uint64"]))
        redop = draw(st.sampled_from(["sum", "prod", "max", "min", "avg", "none"])) if has_redop else None
        root = draw(st.integers(-1, 15)) if has_root else None
        out, inp = draw(measures()), (draw(measures()) if inplace else None)
        mark = draw(st.sampled_from(["0", "N/A"] if check == "#wrong" else ["2e-07", "0e+00"]))
        fields = [str(size), str(size // 4), dtype] + [redop] * has_redop + [str(root)] * has_root
        fields += [*out, mark] + ([*inp, mark] if inp else [])
        lines.append("  ".join(f"{f:>8}" for f in fields))
        values = [float(v) for v in out] + ([float(v) for v in inp] if inp else [None] * 3)
        rows.append(Row(size, size // 4, dtype, redop, root, *values, len(lines)))
    if draw(st.booleans()):
        lines.append("# Avg bus bandwidth    : 1.0")
    return Table(tuple(lines), tuple(rows), with_header, TESTS[test], threads, gpus,
                 len(hosts) or processes * threads * gpus, tuple(dict.fromkeys(hosts)),
                 len(hosts) or processes, ("GPU Model X",) * len(hosts), version and version[1])


@FAST
@given(tables())
def test_a_generated_table_reads_back(table):
    assert parse_runs(table.text(), "gen.txt") == [table.run("gen.txt", 0, 0)]


@FAST
@given(st.lists(tables(), min_size=1, max_size=3))
def test_generated_tables_one_after_another_are_separate_runs(tables_):
    """Each table starts with its own command line, so each is its own run whatever its sizes."""
    offsets = [sum(len(t.lines) for t in tables_[:i]) for i in range(len(tables_))]
    expected = [t.run("gen.txt", i, offset) for i, (t, offset) in enumerate(zip(tables_, offsets))]
    assert parse_runs("".join(t.text() for t in tables_), "gen.txt") == expected


@FAST
@given(tables(), st.data())
def test_a_truncated_row_is_an_error_naming_its_line(table, data):
    candidates = table.rows if table.with_header else table.rows[1:]  # without a header the first row sets the width
    if not candidates:
        return
    row = data.draw(st.sampled_from(candidates))
    lines = list(table.lines)
    fields = lines[row.line - 1].split()
    keep = data.draw(st.integers(3, len(fields) - 1))
    lines[row.line - 1] = "   ".join(fields[:keep])
    with pytest.raises(InputError) as info:
        parse_runs("\n".join(lines), "gen.txt")
    assert str(info.value) == f"gen.txt: line {row.line}: truncated row ({keep} of {len(fields)} columns)"


# --- anything else: a list of runs or one InputError line ----------------------------------------


def _runs_or_input_error(text: str) -> None:
    try:
        runs = parse_runs(text, "fuzz.txt")
    except InputError as exc:
        message = str(exc)
        assert message.startswith("fuzz.txt: ") and "\n" not in message
    else:
        assert runs and all(isinstance(r, Run) and r.rows for r in runs)


TOKENS = ["8", "16", "0", "-1", "float", "sum", "1.5", "1e999", "nan", "#", "# nThread 1 nGpus 8", "size", "count",
          "type", "time", "algbw", "busbw", "#wrong", "\n", "  ", "\t", "Rank", "Pid", "on", "device", "[0x1]",
          "mpirun", "-np", "-H", "a:8,b:x", "all_reduce_perf", "-g", "\\", ">", "RCCL version :", "2.3.4", "\r",
          "99999999999999999999999", "\u0663", "\uff11", "1_0", "\ufeff", "\x0c", "\u2028"]


@FAST
@given(st.text())
def test_arbitrary_text(text):
    _runs_or_input_error(text)


@FAST
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map(" ".join))
def test_arbitrary_token_soup(text):
    _runs_or_input_error(text)


@needs_logs
@FAST
@given(st.data())
def test_truncated_and_damaged_real_files(data):
    text = (LOGS / data.draw(st.sampled_from(FILES))).read_text(encoding="utf-8")
    _runs_or_input_error(text[:data.draw(st.integers(0, len(text)))])
    lines = text.split("\n")
    for _ in range(data.draw(st.integers(1, 4))):
        i, j = data.draw(st.integers(0, len(lines) - 1)), data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["drop", "copy", "swap", "cut"]))
        if action == "drop":
            del lines[i]
        elif action == "copy":
            lines.insert(j, lines[i])
        elif action == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines[i] = lines[i][:data.draw(st.integers(0, len(lines[i])))]
        if not lines:
            lines = [""]
    _runs_or_input_error("\n".join(lines))
