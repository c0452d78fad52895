"""Every real sample in shared/topo-samples imports and ``synth report SAMPLE allreduce`` completes
on it with at least one synthesized schedule, each verified; on PCIe-only boxes the fastest
synthesized schedule is at least as fast as NCCL's ring at every size, in the model."""

from __future__ import annotations

import json

import pytest

from synth.cli.main import main
from tests.importers.conftest import samples_root
from tests.importers.test_import import GPU, _import
from tests.report_checks import assert_at_least_ncclS_ring, assert_verified_synthesized

ROOT = samples_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="shared/topo-samples not found (set SYNTH_TOPO_SAMPLES)")

QUICK = {"nvsmi-t4-4gpu-pcie-1.txt", "nvsmi-rtx3090-2gpu-nvbridge-nv4-1.txt", "nccl-topo-a100pcie-2gpu-nccl230-1.xml"}
SIZES = "1K,1M,1G"
TIME_LIMIT = "20"  # seconds per solver call, and for the router's exact stage at each size


def _cases() -> list:
    return [pytest.param(name, marks=() if name in QUICK else (pytest.mark.slow,), id=name) for name in sorted(GPU)]


@pytest.mark.parametrize("name", _cases())
def test_every_sample_reports_with_a_verified_synthesized_schedule(tmp_path, name):
    topo = _import(tmp_path, name)
    folder = tmp_path / "report"
    assert main(["report", str(tmp_path / f"{name}.topo.json"), "allreduce", "--sizes", SIZES,
                 "--time-limit", TIME_LIMIT, "-o", str(folder)]) == 0
    report = json.loads((folder / "report.json").read_text())
    assert_verified_synthesized(report, folder)
    if all(link.kind == "pcie" for link in topo.links):
        assert_at_least_ncclS_ring(report)
