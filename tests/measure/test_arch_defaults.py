"""A GPU generation's own calibration defaults (issue 42, item 3): a topology's ``arch`` picks the
terms its runtime defaults to (Blackwell's NVLS efficiency, MI355X's xGMI and RoCE stack); a
calibration's own parameters still win; every stage that costs under a calibration applies them; and
``synth doctor`` with the defaults meets the shared runs of the new machines."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synth.core.library import library_names, load_library, resolve_topology
from synth.core.subset import sub_topology
from synth.core.topology import ARCHS, Topology, TopologyError
from synth.measure.calibration import ARCH_DEFAULTS, DEFAULTS, FRACTIONS, Calibration, load_terms
from synth.measure.runtime import NVLS_TREE_MAX_HEADS, Launch, describe, nccl_time
from tests.cli_run import run

LOGS = Path(__file__).resolve().parents[3] / "shared" / "nccl-tests-logs"
needs_logs = pytest.mark.skipif(not LOGS.is_dir(), reason="shared nccl-tests logs not present")
GENERATION = {"a100": "ampere", "b200": "blackwell", "b300": "blackwell", "dgx1": "volta", "dgx2": "volta",
              "gb200nvl72": "blackwell", "gb300nvl72": "blackwell", "h100": "hopper", "h200": "hopper",
              "mi250": "cdna2", "mi300x": "cdna3", "mi325x": "cdna3", "mi355x": "cdna4", "ndv2": "volta"}


def test_every_library_machine_names_its_generation():
    assert set(library_names()) == set(GENERATION)
    for name, arch in GENERATION.items():
        assert load_library(name).arch == arch


@pytest.mark.parametrize("name", ["b200x2", "oci-gb200-v3.4", "oci-gb300x2", "mi355xx2", "a4"])
def test_shapes_compositions_and_subsets_keep_the_generation(name):
    topology = resolve_topology(name)
    assert topology.arch in ("blackwell", "cdna4")
    assert sub_topology(topology, (0, 1)).arch == topology.arch
    assert topology.reversed().arch == topology.arch == topology.renamed("x").arch


def test_generated_topologies_have_no_generation():
    assert resolve_topology("ring:4").arch is None


def test_arch_round_trips_and_a_wrong_one_is_refused():
    h100 = load_library("h100")
    again = Topology.from_dict(json.loads(json.dumps(h100.to_dict())))
    assert again.arch == "hopper" and again == h100
    doc = h100.to_dict() | {"arch": "sm_90"}
    with pytest.raises(TopologyError, match="'arch' is 'sm_90'; known: volta"):
        Topology.from_dict(doc)
    with pytest.raises(TopologyError, match="'arch' must be a string"):
        Topology.from_dict(h100.to_dict() | {"arch": 90})


def test_arch_defaults_name_known_generations_and_parameters():
    assert set(ARCH_DEFAULTS) <= set(ARCHS)
    for terms in ARCH_DEFAULTS.values():
        assert set(terms) <= set(DEFAULTS)
        assert all(0 < v <= 1 for k, v in terms.items() if k in FRACTIONS)


@given(st.sampled_from(sorted(DEFAULTS)), st.sampled_from([None, *ARCHS]), st.floats(0.05, 0.95))
def test_own_parameter_beats_the_generation_which_beats_the_default(name, arch, value):
    mine = Calibration({name: value}).on(arch)
    assert mine.get(name) == value
    fallback = Calibration().on(arch).get(name)
    assert fallback == ARCH_DEFAULTS.get(arch or "", {}).get(name, DEFAULTS[name])


def test_blackwell_nvls_runs_at_its_own_efficiency():
    """The same board costed as Hopper and as Blackwell: NVLS's algbw is the port x efficiency x n/(n+1)."""
    b200 = load_library("b200")
    cal, launch, size = Calibration(), Launch("processes"), float(1 << 34)
    blackwell = nccl_time(describe(b200), "allreduce", size, cal, launch)
    hopper = nccl_time(describe(replace(b200, arch="hopper")), "allreduce", size, cal, launch)
    assert blackwell.algorithm == hopper.algorithm == "nvls"
    ratio = blackwell.time_us / hopper.time_us
    expected = DEFAULTS["efficiency_nvls"] / ARCH_DEFAULTS["blackwell"]["efficiency_nvls"]
    assert ratio == pytest.approx(expected, rel=0.02)


def test_runtime_terms_follow_the_topology():
    assert load_terms("default", "blackwell").efficiency["nvls"] == ARCH_DEFAULTS["blackwell"]["efficiency_nvls"]
    assert load_terms("default", "hopper").efficiency["nvls"] == DEFAULTS["efficiency_nvls"]
    assert load_terms(None, "blackwell") is None


def test_nvlstree_heads_are_capped():
    """An NVLink domain of 64 GPUs leads NVLSTree with NVLS_TREE_MAX_HEADS heads, not 64."""
    two_racks = sub_topology(resolve_topology("oci-gb200-v3.4x2"), tuple(range(64)) + tuple(range(72, 136)))
    machine = describe(two_racks)
    assert machine.nvls_ranks == 64 and machine.nvls_domains == 2
    cal = Calibration().on("blackwell")
    choice = nccl_time(machine, "allreduce", float(1 << 34), cal, Launch("processes"), "roce")
    busbw = (1 << 34) / (choice.time_us * 1e3) * 2 * 127 / 128
    assert busbw <= NVLS_TREE_MAX_HEADS * cal.get("nvls_tree_channel_gbps") * 1.001


def _doctor(capsys, *args) -> dict:
    code, out, err = run(capsys, "doctor", "--json", *args)
    assert code == 0, err
    return json.loads(out)


def _within(doc: dict, limit: float = 1.3) -> float:
    ratios = [row["measured_over_expected"] for row in doc["rows"]]
    return sum(1 for r in ratios if 1 / limit <= r <= limit) / len(ratios)


@needs_logs
@pytest.mark.parametrize("args", [
    ("--topology", "b200", "b200-gcp-a4-8gpu-allreduce-abbrev-1.txt"),
    ("--topology", "oci-b300", "b300-8gpu-allreduce-oci-excerpt-1.txt"),
    ("--topology", "gb200nvl72", "--ranks", "0-3", "gb200-nvl72-4gpu-1node-allreduce-oci-excerpt-1.txt"),
    ("--topology", "oci-gb300", "--ranks", "0-3", "gb300-nvl72-4gpu-1node-allreduce-nvls-oci-excerpt-1.txt"),
    ("--topology", "mi355x", "mi355x-8gpu-allreduce-oci-pollara-excerpt-1.txt"),
    ("--topology", "mi355xx2", "--transport", "roce", "mi355x-2node-16gpu-allreduce-1.txt"),
])
def test_doctor_meets_the_new_machines_runs(capsys, args):
    """Within 1.3x at >= 75% of rows with the default calibration, and no row below the bound."""
    doc = _doctor(capsys, *args[:-1], str(LOGS / args[-1]))
    assert _within(doc) >= 0.75
    assert all(row["bound_us"] is None or row["measured_us"] >= row["bound_us"] for row in doc["rows"])


@needs_logs
def test_collective_names_what_the_log_does_not(capsys):
    log = str(LOGS / "b200-gcp-a4-2node-16gpu-allgather-1.txt")
    doc = _doctor(capsys, "--topology", "a4x2", "--transport", "roce", "--collective", "allgather", log)
    assert doc["collective"] == "allgather"
    assert {row["choice"]["algorithm"] for row in doc["rows"]} == {"ring"}
    other = str(LOGS / "h100-8gpu-allreduce-ring-1.txt")
    code, _, err = run(capsys, "doctor", "--topology", "h100", "--collective", "allgather", other)
    assert code == 2
    err = err.strip().splitlines()
    assert len(err) == 1 and "is allreduce, not allgather (--collective)" in err[0]
