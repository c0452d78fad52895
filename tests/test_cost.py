"""The contract cost model, the simulator (never above it), bandwidth figures and sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.bounds.lower_bounds import lower_bounds
from synth.core.collectives import allgather, alltoall, broadcast
from synth.core.errors import InputError
from synth.core.io import read_json
from synth.core.schedule import Schedule, Send, Step
from synth.core.topology import Group, Link, Topology
from synth.cost import (
    PROTOCOLS,
    RUNTIME_PROTOCOLS,
    algbw_gbps,
    best_protocol,
    busbw_gbps,
    cost_rows,
    effective_link,
    format_size,
    parse_size,
    parse_sizes,
    protocol_of,
    simulate_us,
    step_loads,
    step_time_us,
    step_times_us,
    untyped_links,
)
from tests.schedule_strategies import valid_schedules

DATA = Path(__file__).parent / "data"
# the contract examples: ../shared/examples beside the repository when it is there, else the
# byte-identical copies in tests/data (so these checks run on a bare checkout too)
SHARED_EXAMPLES = next((p for p in (Path(__file__).resolve().parents[2] / "shared" / "examples",
                                    Path.cwd().resolve().parent / "shared" / "examples")
                        if (p / "schedule-uring4-allgather-ring.json").is_file()), DATA)
MIB = 1 << 20
SIZES = (1, 1000, 4096, MIB, 1 << 30)


def example(name: str) -> Schedule:
    return Schedule.from_dict(read_json(DATA / name))


def line(n: int, bandwidth: float = 25.0, alpha: float = 0.7, groups=()) -> Topology:
    links = []
    for i in range(n - 1):
        links += [Link(i, i + 1, bandwidth, alpha), Link(i + 1, i, bandwidth, alpha)]
    return Topology(f"line{n}", n, tuple(links), tuple(groups))


def chain_broadcast(topo: Topology) -> Schedule:
    """0 -> 1 -> 2 -> ...: one send per step, each needing the one before."""
    steps = tuple(Step((Send(0, i, i + 1),), 1) for i in range(topo.ranks - 1))
    return Schedule(topo, broadcast(topo.ranks, root=0), steps)


def hand_made() -> list[Schedule]:
    """Schedules with several sends per link and step, groups, and independent work."""
    pair = line(2)
    nic = Group("nic", ((0, 1), (1, 2)), 10.0)
    grouped = line(3, bandwidth=50.0, groups=(nic,))
    out = [
        # two chunks on one link in one step, then nothing depends on anything
        Schedule(pair, allgather(2, chunks=2),
                 (Step((Send(0, 0, 1), Send(1, 0, 1), Send(2, 1, 0), Send(3, 1, 0)), 2),)),
        # independent steps: the simulator overlaps them
        Schedule(pair, allgather(2), (Step((Send(0, 0, 1),), 1), Step((Send(1, 1, 0),), 1))),
        # a slow shared NIC under two faster links
        Schedule(grouped, broadcast(3, root=0, chunks=2), (
            Step((Send(0, 0, 1),), None),
            Step((Send(1, 0, 1), Send(0, 1, 2)), None),
            Step((Send(1, 1, 2),), None),
        )),
        # alltoall on a line: relays wait for their data
        Schedule(line(3), alltoall(3), (
            Step((Send(1, 0, 1), Send(2, 0, 1), Send(5, 1, 2), Send(3, 1, 0), Send(6, 2, 1), Send(7, 2, 1)), 2),
            Step((Send(2, 1, 2), Send(6, 1, 0)), 1),
        )),
    ]
    return out


# ------------------------------------------------------------------ the contract figures
def test_uring4_examples_match_the_readme():
    assert step_time_us(example("schedule-uring4-allgather-ring.json"), MIB) == pytest.approx(33.5573, abs=1e-4)
    assert step_time_us(example("schedule-uring4-allreduce-ring.json"), MIB) == pytest.approx(67.1146, abs=1e-4)


def test_step_durations():
    times = step_times_us(example("schedule-uring4-allgather-ring.json"), MIB)
    assert times == pytest.approx([0.7 + 262144 / 25e3] * 3)


def test_link_pays_alpha_once_per_step_and_groups_pay_none():
    pair_two = hand_made()[0]  # 4 chunks of S / 4 bytes
    b = 2 * MIB / 4 / 1e3  # chunk bytes / 1e3: us at 1 GB/s
    assert step_time_us(pair_two, 2 * MIB) == pytest.approx(0.7 + 2 * b / 25.0)
    grouped = hand_made()[2]  # 2 chunks of S / 2 bytes
    b = 2 * MIB / 2 / 1e3
    # middle step: two links, one chunk each, but the NIC (10 GB/s) carries both
    assert step_times_us(grouped, 2 * MIB)[1] == pytest.approx(2 * b / 10.0)


def test_empty_steps_cost_nothing():
    s = Schedule(line(2), allgather(2), (Step((), 1), Step((Send(0, 0, 1), Send(1, 1, 0)), 1)))
    assert step_times_us(s, MIB)[0] == 0.0


def test_a_send_on_no_link_is_an_input_error():
    bad = example("schedule-uring4-allgather-no-link.json")
    with pytest.raises(InputError, match="not a link"):
        step_time_us(bad, MIB)
    with pytest.raises(InputError):
        simulate_us(bad, MIB)


# ------------------------------------------------------------------ simulator
def _sim_not_above_step(schedule: Schedule, protocol: str = "ideal") -> None:
    for size in SIZES:
        sim, step = simulate_us(schedule, size, protocol), step_time_us(schedule, size, protocol)
        assert sim <= step * (1 + 1e-12) + 1e-9


@pytest.mark.parametrize("name", ["schedule-uring4-allgather-ring.json", "schedule-uring4-allreduce-ring.json"])
def test_simulator_on_the_rings_equals_the_step_model(name):
    s = example(name)
    _sim_not_above_step(s)
    assert simulate_us(s, MIB) == pytest.approx(step_time_us(s, MIB))


@pytest.mark.parametrize("index", range(len(hand_made())))
def test_simulator_never_above_the_step_model(index):
    _sim_not_above_step(hand_made()[index])


def test_simulator_overlaps_independent_steps():
    s = hand_made()[1]
    assert simulate_us(s, MIB) == pytest.approx(step_time_us(s, MIB) / 2)


@pytest.mark.parametrize("groups", [(), (Group("slow", ((1, 2), (2, 3)), 5.0),)])
def test_simulator_equals_step_model_on_a_chain(groups):
    s = chain_broadcast(line(4, groups=groups))
    for size in SIZES:
        assert simulate_us(s, size) == pytest.approx(step_time_us(s, size))


def test_simulator_waits_for_data_and_serializes_links():
    # relay 1 forwards chunk 0 to 2 only after it lands; link 0->1 carries two chunks back to back
    topo = line(3, alpha=1.0)
    s = Schedule(topo, broadcast(3, root=0, chunks=2), (
        Step((Send(0, 0, 1), Send(1, 0, 1)), 2),
        Step((Send(0, 1, 2), Send(1, 1, 2)), 2),
    ))
    t = 1000 / 25e3  # one 1000-byte chunk on 25 GB/s
    assert simulate_us(s, 2000) == pytest.approx(2 * (1.0 + 2 * t) - t)  # second hop starts at 1+t
    assert step_time_us(s, 2000) == pytest.approx(2 * (1.0 + 2 * t))


def test_simulator_rejects_a_send_of_missing_data():
    s = Schedule(line(3), broadcast(3, root=0), (Step((Send(0, 1, 2),), 1),))
    with pytest.raises(InputError, match="does not hold"):
        simulate_us(s, MIB)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=valid_schedules())
def test_random_valid_schedules_simulate_within_the_step_model(schedule):
    _sim_not_above_step(schedule)


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=valid_schedules())
def test_random_valid_schedules_simulate_within_the_step_model_under_every_protocol(protocol, schedule):
    _sim_not_above_step(schedule, protocol)  # random topologies carry every kind, and none


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("index", range(len(hand_made())))
def test_simulator_never_above_the_step_model_under_a_protocol(index, protocol):
    _sim_not_above_step(hand_made()[index], protocol)


# ------------------------------------------------------------------ bandwidth figures
def test_algbw_and_busbw():
    assert algbw_gbps(10**9, 10**6) == pytest.approx(1.0)  # 1 GB in 1 s
    assert algbw_gbps(MIB, 0.0) == float("inf")
    assert busbw_gbps(8, 8e-3, 0.5) == pytest.approx(0.5)
    assert busbw_gbps(4 * MIB, 100.0, allgather(4)) == pytest.approx(4 * MIB / 1e5 * 3 / 4)


def test_cost_rows():
    ring = example("schedule-uring4-allgather-ring.json")
    bounds = lower_bounds(ring.topology, ring.collective)
    rows = cost_rows(ring, [MIB, 1 << 30], bounds)
    assert [r["size"] for r in rows] == [MIB, 1 << 30]
    first = rows[0]
    assert {"size", "step_time_us", "sim_time_us", "algbw_gbps", "busbw_gbps", "bound_fraction"} <= set(first)
    assert first["step_time_us"] == pytest.approx(33.5573, abs=1e-4)
    assert first["busbw_gbps"] == pytest.approx(first["algbw_gbps"] * 3 / 4)
    assert first["bound_fraction"] == pytest.approx(bounds.time_us(MIB) / first["step_time_us"])
    assert rows[1]["bound_fraction"] == pytest.approx(1.0, rel=1e-3)  # the ring meets the bound
    assert cost_rows(ring, [MIB])[0]["bound_fraction"] is None


# ------------------------------------------------------------------ protocols
def shared_example(name: str) -> Schedule:
    return Schedule.from_dict(read_json(SHARED_EXAMPLES / name))


# uring4 ring allgather at 1 MiB: 3 steps of one 262144-byte chunk per 25 GB/s, 0.7 us link; the
# links have no kind, so the NVLink row of NCCL's Ring hwLat (LL 0.6, LL128 1.9, Simple 3.4)
HAND_COMPUTED_1M = {
    "ideal": 3 * (0.7 + 262144 / 25e3),
    "simple": 8.4 + 3 * (0.7 * 3.4 / 0.6 + 262144 / (25e3 * 1.0)),
    "ll128": 14.0 + 3 * (0.7 * 1.9 / 0.6 + 262144 / (25e3 * 120 / 128)),
    "ll": 6.6 + 3 * (0.7 * 0.6 / 0.6 + 262144 / (25e3 * 0.5)),
}


@pytest.mark.parametrize("protocol", list(HAND_COMPUTED_1M))
def test_hand_computed_figure_per_protocol_on_the_uring4_example(protocol):
    ring = shared_example("schedule-uring4-allgather-ring.json")
    assert step_time_us(ring, MIB, protocol) == pytest.approx(HAND_COMPUTED_1M[protocol], rel=1e-12)
    assert simulate_us(ring, MIB, protocol) == pytest.approx(HAND_COMPUTED_1M[protocol], rel=1e-12)  # a chain
    assert HAND_COMPUTED_1M["ideal"] == pytest.approx(33.5573, abs=1e-4)


def test_best_picks_ll_when_small_and_simple_when_large_and_names_it():
    ring = shared_example("schedule-uring4-allgather-ring.json")
    assert best_protocol(ring, 1024) == ("ll", pytest.approx(6.6 + 3 * (0.7 + 256 / (25e3 * 0.5))))
    assert best_protocol(ring, 1 << 30) == ("simple", pytest.approx(8.4 + 3 * (0.7 * 3.4 / 0.6 + (1 << 28) / 25e3)))
    rows = cost_rows(ring, [1024, MIB, 1 << 30], protocol="best")
    assert [r["protocol"] for r in rows] == ["ll", "simple", "simple"]
    for row in rows:
        assert row["step_time_us"] == min(step_time_us(ring, row["size"], p) for p in RUNTIME_PROTOCOLS)
        assert row["sim_time_us"] == simulate_us(ring, row["size"], row["protocol"])


def test_ideal_is_the_default_and_unchanged():
    ring = example("schedule-uring4-allgather-ring.json")
    for size in SIZES:
        assert step_time_us(ring, size, "ideal") == step_time_us(ring, size) == sum(step_times_us(ring, size))
        assert simulate_us(ring, size, "ideal") == simulate_us(ring, size)
    assert [r["protocol"] for r in cost_rows(ring, [MIB])] == ["ideal"]


def test_kinds_pick_the_latency_row():
    ratios = {"nvlink": (1.9 / 0.6, 3.4 / 0.6), "xgmi": (1.9 / 0.6, 3.4 / 0.6),  # xGMI: NVLink row
              "pcie": (2.5 / 1.0, 5.7 / 1.0), "net": (4.0 / 2.7, 14.0 / 2.7), None: (1.9 / 0.6, 3.4 / 0.6)}
    for kind, (ll128, simple) in ratios.items():
        link = Link(0, 1, 40.0, 2.0, kind=kind)
        assert effective_link(link, "ll") == (2.0, 20.0)
        assert effective_link(link, "ll128") == (pytest.approx(2.0 * ll128), 40.0 * 120 / 128)
        assert effective_link(link, "simple") == (pytest.approx(2.0 * simple), 40.0)
        assert effective_link(link) == (2.0, 40.0)


def test_a_step_pays_the_slowest_link_of_its_kind_and_groups_scale_too():
    # 0 -nvlink-> 1 -net-> 2 and 2 -> 0 in one step; a NIC group of 10 GB/s over the net link
    topo = Topology("mixed", 3, (Link(0, 1, 50.0, 0.7, kind="nvlink"), Link(1, 2, 50.0, 2.6, kind="net"),
                                 Link(2, 0, 50.0, 0.7, kind="nvlink")), (Group("nic", ((1, 2),), 10.0),))
    s = Schedule(topo, allgather(3), (Step((Send(0, 0, 1), Send(1, 1, 2), Send(2, 2, 0)), 1),))
    b = 3000 / 3  # bytes per chunk
    assert step_time_us(s, 3000, "simple") == pytest.approx(
        8.4 + max(0.7 * 3.4 / 0.6 + b / 50e3, 2.6 * 14 / 2.7 + b / 50e3, b / 10e3))
    assert step_time_us(s, 3 * MIB, "ll") == pytest.approx(6.6 + MIB / (10e3 * 0.5))  # the NIC binds
    assert untyped_links(topo) == 0 and untyped_links(example("schedule-uring4-allgather-ring.json").topology) == 4


def test_step_loads_are_counted_once_for_every_size_and_protocol():
    for schedule in hand_made():
        loads = step_loads(schedule)
        for size in SIZES:
            for name in PROTOCOLS:
                assert loads.time_us(size, name) == step_time_us(schedule, size, name)
                assert loads.step_times_us(size, name) == step_times_us(schedule, size, name)
            assert loads.best(size) == best_protocol(schedule, size)


def test_unknown_protocols_are_input_errors():
    with pytest.raises(InputError, match="unknown protocol 'fast'; known: ideal, simple, ll128, ll, best"):
        protocol_of("fast")
    with pytest.raises(InputError, match="per size"):
        step_time_us(example("schedule-uring4-allgather-ring.json"), MIB, "best")
    with pytest.raises(InputError, match="unknown protocol"):
        cost_rows(example("schedule-uring4-allgather-ring.json"), [MIB], protocol="LL")


# ------------------------------------------------------------------ sizes
@pytest.mark.parametrize(
    "text, size",
    [("1K", 1024), ("1k", 1024), ("1M", MIB), ("2G", 2 << 30), ("1T", 1 << 40), ("4096", 4096),
     ("1.5K", 1536), (" 8M ", 8 * MIB), ("1MB", MIB), ("1MiB", MIB), ("7", 7)],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "abc", "1X", "-1K", "0", "0.3", "1.0001K", "1 K B"])
def test_parse_size_errors_are_one_line(text):
    with pytest.raises(InputError) as info:
        parse_size(text)
    assert "\n" not in str(info.value) and repr(text) in str(info.value)


def test_parse_sizes():
    assert parse_sizes("1K,1M,1G") == [1024, MIB, 1 << 30]
    assert parse_sizes("64, 1K") == [64, 1024]
    with pytest.raises(InputError):
        parse_sizes(" , ")
    with pytest.raises(InputError):
        parse_sizes("1K,huge")


def test_format_size():
    assert [format_size(s) for s in (1, 1000, 1024, 1536, MIB, 3 * (1 << 30), 1 << 40)] == [
        "1", "1000", "1K", "1.5K", "1M", "3G", "1T"]


@given(st.integers(min_value=1, max_value=1 << 50))
def test_format_size_round_trips(size):
    assert parse_size(format_size(size)) == size
