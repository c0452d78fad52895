"""Doctor at rack scale (issue 49 item 5): the fast paths give the figures the slow ones gave.

- rings' step loads counted without building their sends (``Baseline.loads``) equal the loads
  of the built, verified schedule, and cost the same at every size and protocol;
- the rail-aligned channel search that stops at the machines' ring bound finds the rings that
  trying every first channel finds;
- doctor's rows (``--json``) equal those of the reference path that builds every classic schedule;
- on a generated 1440-GPU log (20 NVL72 racks) doctor answers every row (slow).
"""

from __future__ import annotations

import json
import math

import pytest

from synth.baselines import BaselineNotApplicable, baseline_loads, channels, registry
from synth.cli.main import main
from synth.core.library import resolve_topology
from synth.core.subset import parse_ranks, sub_topology
from synth.cost import RUNTIME_PROTOCOLS, step_loads
from synth.measure.calibration import load_calibration
from tests.measure.synthetic_log import allreduce_log

COUNTED = ("ring", "nccl_ring", "hierarchical")
SHAPES = ("dgx1", "ndv2x2", "dgx2x2", "h100x4", "mi300xx2", "torus:4x4", "ring:5", "line:4")


def _same_terms(counted, built) -> bool:
    """The same buffer, protocols and, step by step, the same set of link and group terms."""
    return (counted.buffer_chunks, counted.protocols) == (built.buffer_chunks, built.protocols) and \
        [set(s) for s in counted.links] == [set(s) for s in built.links] and \
        [set(s) for s in counted.groups] == [set(s) for s in built.groups]


@pytest.mark.parametrize("topology", SHAPES)
def test_counted_ring_loads_are_the_built_schedules(topology):
    topo = resolve_topology(topology)
    terms = load_calibration(None).on(topo.arch).terms()
    for name in COUNTED:
        entry = registry()[name]
        for collective in ("allgather", "reduce_scatter", "allreduce"):
            try:
                built = step_loads(entry.make(topo, collective))
            except BaselineNotApplicable:
                with pytest.raises(BaselineNotApplicable):
                    baseline_loads(entry, topo, collective)
                continue
            counted = entry.loads(topo, collective)
            if counted is None:  # a routed ring: built instead
                assert baseline_loads(entry, topo, collective) == built
                continue
            assert _same_terms(counted, built), (name, collective)
            for size in (8.0, 65536.0, float(1 << 30)):
                for protocol in RUNTIME_PROTOCOLS:
                    assert counted.time_us(size, protocol, terms) == built.time_us(size, protocol, terms)


def test_channel_search_stops_at_the_bound_with_the_same_rings(monkeypatch):
    """16 GPUs per rack, 9 NVLink units each: at most 9 rings of the 16 channels fit, reached
    before the last first channel is tried."""
    full = resolve_topology("oci-gb200-v3.4x2")
    topo = sub_topology(full, parse_ranks("0-15,72-87", full.ranks))
    fast = channels.plan_channels(topo)
    assert len(fast.rings) == channels._machine_ring_limit(channels._Capacity(topo), topo.machines) == 9
    monkeypatch.setattr(channels, "_machine_ring_limit", lambda capacity, machines: math.inf)
    assert channels.plan_channels(topo) == fast


def _build_everything(monkeypatch) -> list[str]:
    """The reference path: every classic schedule built and verified, then counted; returns the
    names it built (filled as doctor runs). Doctor's memo is emptied so nothing is reused."""
    built: list[str] = []

    def build(entry, topo, collective):
        loads = step_loads(entry.make(topo, collective))
        built.append(entry.name)
        return loads

    monkeypatch.setattr("synth.baselines.baseline_loads", build)
    monkeypatch.setattr("synth.cli.measure._ONCE", {})
    return built


def _doctor_json(capsys, path, topology) -> dict:
    assert main(["doctor", str(path), "--topology", topology, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("topology,ranks", [("h100x4", 32), ("ndv2x2", 16)])
def test_doctor_rows_equal_the_path_that_builds_every_schedule(tmp_path, capsys, monkeypatch, topology, ranks):
    log = tmp_path / "run.txt"
    log.write_text(allreduce_log(ranks, per_node=8, floor_us=60.0))
    fast = _doctor_json(capsys, log, topology)
    built = _build_everything(monkeypatch)
    reference = _doctor_json(capsys, log, topology)
    assert fast == reference and set(COUNTED) <= set(built)
    assert {row["fastest_schedule"]["label"] for row in fast["rows"]} & set(COUNTED)


@pytest.mark.slow
def test_doctor_rows_equal_the_reference_on_two_racks(tmp_path, capsys, monkeypatch):
    log = tmp_path / "run.txt"
    log.write_text(allreduce_log(144, floor_us=90.0))
    fast = _doctor_json(capsys, log, "gb200nvl72x2")
    built = _build_everything(monkeypatch)
    assert _doctor_json(capsys, log, "gb200nvl72x2") == fast and set(COUNTED) <= set(built)


@pytest.mark.slow
def test_doctor_on_twenty_racks(tmp_path, capsys):
    log = tmp_path / "run.txt"
    log.write_text(allreduce_log(1440, floor_us=90.0))
    doc = _doctor_json(capsys, log, "gb200nvl72x20")
    assert len(doc["rows"]) == 32
    assert all(row["fastest_schedule"] is not None and row["bound_us"] > 0 for row in doc["rows"])
    labels = {row["fastest_schedule"]["label"] for row in doc["rows"]}
    assert labels & {"nccl_ring", "hierarchical"}
