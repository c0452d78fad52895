"""The step model and simulator under a runtime's terms (synth.cost.RuntimeTerms), and the
runtime lower bound (synth.bounds.runtime)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.baselines import build_baseline
from synth.bounds.runtime import effective_topology, runtime_bounds
from synth.core.collectives import allgather
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.schedule import Schedule, Send, Step
from synth.core.topology import Link, Topology
from synth.cost import RUNTIME_PROTOCOLS, best_protocol, cost_rows, simulate_us, step_loads, step_time_us
from synth.measure.calibration import Calibration
from synth.measure.runtime import Launch, describe, nccl_time
from tests.schedule_strategies import valid_schedules

TERMS = Calibration().terms()
SIZES = (1024, 64 * 1024, 1 << 20, 16 << 20, 256 << 20, 1 << 30)


def _pair(kind: str = "nvlink", bandwidth: float = 100.0, alpha: float = 1.0) -> Schedule:
    topo = Topology("pair", 2, (Link(0, 1, bandwidth, alpha, kind=kind), Link(1, 0, bandwidth, alpha, kind=kind)))
    return Schedule(topo, allgather(2), (Step((Send(0, 0, 1), Send(1, 1, 0))),))


def test_one_step_by_hand_under_simple():
    """alpha x latency_scale x hop factor + b / min(bw x efficiency, C x channel rate) + base + fill."""
    cal = Calibration()
    s, size = _pair(), 1 << 30
    hop = 3.4 / 0.6  # Simple over LL on NVLink
    channels = min(size // cal.get("channel_bytes_simple"), cal.get("max_channels"))
    rate = min(100.0 * cal.get("efficiency_nvlink"), channels * cal.get("channel_gbps_simple"))
    expected = (cal.get("latency_scale") * (1.0 * hop + 8.4) + (size / 2) / (rate * 1e3)
                + cal.get("fill_us"))
    assert step_time_us(s, size, "simple", TERMS) == pytest.approx(expected)


def test_few_thread_blocks_cap_a_fast_link_at_mid_sizes():
    """At 64 KiB under LL the call spreads over 2 channels: the link moves at 2 x 23.6 GB/s, not 100 x share."""
    s, size = _pair(bandwidth=400.0), 64 * 1024
    cal = Calibration()
    channels = TERMS.channels(size, "ll")
    assert channels == size // cal.get("channel_bytes_ll")
    loads = step_loads(s)
    took = loads.step_times_us(size, "ll", TERMS)[0]
    assert took == pytest.approx(cal.get("latency_scale") * 1.0
                                 + (size / 2) / (channels * cal.get("channel_gbps_ll") * 1e3))


def test_the_launch_floor_is_a_floor_not_a_sum():
    s = _pair(alpha=0.0)
    assert step_time_us(s, 1, "ll", TERMS) == pytest.approx(TERMS.launch_us)
    big = step_time_us(s, 1 << 30, "simple", TERMS)
    assert big > TERMS.launch_us and big == pytest.approx(step_time_us(s, 1 << 30, "simple", TERMS))


def test_network_links_pay_the_transports_hop():
    ib = Calibration().terms()
    roce = Calibration(transport="roce").terms()
    s = _pair(kind="net", bandwidth=50.0)
    gap = step_time_us(s, 1024, "ll", roce) - step_time_us(s, 1024, "ll", ib)
    assert gap == pytest.approx(roce.net_hop_us - ib.net_hop_us)


def test_terms_do_not_apply_to_the_ideal_contract():
    with pytest.raises(InputError, match="not 'ideal'"):
        step_time_us(_pair(), 1024, "ideal", TERMS)


@pytest.mark.parametrize("name", ["h100", "a100", "mi300x", "dgx1"])
def test_nccls_ring_schedule_under_the_terms_agrees_with_the_runtime_model(name):
    """Two independent derivations of what NCCL's ring takes on one machine: its schedule under
    the terms, and the runtime model fitted to measured runs; within 15% at every size."""
    topo = resolve_topology(name)
    machine = describe(topo)
    for size in SIZES:
        schedule = build_baseline(topo, "nccl_ring", "allgather", size=size)
        ours = best_protocol(schedule, size, TERMS)[1]
        theirs = nccl_time(machine, "allgather", size, Calibration(), Launch("processes")).time_us
        assert 1 / 1.15 <= ours / theirs <= 1.15, (name, size, ours, theirs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=valid_schedules(), size=st.sampled_from(SIZES), protocol=st.sampled_from(RUNTIME_PROTOCOLS))
def test_simulation_stays_within_the_step_model_under_terms(schedule, size, protocol):
    assert simulate_us(schedule, size, protocol, TERMS) <= step_time_us(schedule, size, protocol, TERMS) * (1 + 1e-9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=valid_schedules(), size=st.sampled_from(SIZES))
def test_the_runtime_bound_is_below_every_protocol(schedule, size):
    bound = runtime_bounds(schedule.topology, schedule.collective, TERMS).time_us(size)
    for protocol in RUNTIME_PROTOCOLS:
        assert bound <= step_time_us(schedule, size, protocol, TERMS) * (1 + 1e-9)


@pytest.mark.parametrize("algo", ["nccl_ring", "ring", "recursive_doubling"])
def test_the_runtime_bound_is_below_classic_schedules_and_above_the_ideal_bound(algo):
    topo = resolve_topology("dgx1")
    schedule = build_baseline(topo, algo, "allgather")
    runtime = runtime_bounds(topo, schedule.collective, TERMS)
    for row in cost_rows(schedule, SIZES, runtime, "best", TERMS):
        assert row["bound_fraction"] <= 1 + 1e-9
        assert row["channels"] == TERMS.channels(row["size"], row["protocol"])
    from synth.bounds.lower_bounds import lower_bounds

    ideal = lower_bounds(topo, schedule.collective)
    assert all(runtime.time_us(s) > ideal.time_us(s) for s in SIZES)
    assert runtime.busbw_gbps == pytest.approx(ideal.busbw_gbps * Calibration().get("efficiency_nvlink"))


def test_effective_topology_scales_each_kind_by_its_efficiency():
    topo = resolve_topology("ndv2x2")
    scaled = effective_topology(topo, TERMS)
    for before, after in zip(topo.links, scaled.links):
        assert after.bandwidth == pytest.approx(before.bandwidth * TERMS.efficiency_of(before.kind))
        extra = TERMS.net_hop_us if before.kind == "net" else 0.0
        assert after.alpha == pytest.approx(before.alpha * TERMS.latency_scale + extra)
    assert len(scaled.groups) == len(topo.groups)


def test_group_kind_is_the_kind_its_links_share():
    topo = resolve_topology("ndv2x2")
    kinds = {topo.group_kind(g) for g in topo.groups}
    assert kinds <= {None, "nvlink", "net", "pcie"} and kinds - {None}


def test_calibration_terms_follow_the_parameters():
    cal = Calibration({"efficiency_nvlink": 0.5, "launch_process_us": 20.0, "max_channels": 4.0})
    terms = cal.terms("x.json")
    assert terms.label == "x.json" and terms.efficiency_of("nvlink") == 0.5
    assert terms.efficiency_of(None) == 0.5  # untyped links take NVLink's row
    assert terms.launch_us == 20.0 and terms.channels(1 << 40, "simple") == 4
