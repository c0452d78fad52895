"""The rail-aligned fabric of ``NAMExK`` (synth.core.compose): NIC I of every copy to NIC I of
every other, built where the full mesh between every NIC pair would pass MAX_LINKS (or when
asked); the links and groups it makes, the line that says so, and bounds that stay lower bounds
on it (schedules synthesized on it never beat them)."""

from __future__ import annotations

import pytest

import synth.core.compose as compose
from synth.bounds.lower_bounds import lower_bounds
from synth.core.collectives import allgather, allreduce
from synth.core.compose import compose_machines
from synth.core.errors import TopologyError
from synth.core.library import load_machine
from synth.cost import step_time_us
from synth.greedy.pipeline import pipelined
from synth.greedy.switches import machine_switches, switch_plan
from synth.verify import verify

SIZES = (1 << 20, 1 << 30)


def fabric(t):
    return [l for l in t.links if t.machine_of[l.src] != t.machine_of[l.dst]]


def nic_index(t, rank: int) -> int:
    """Which NIC of its copy serves ``rank`` (the NICs of copy m are listed m-th, in order)."""
    per_copy = len(t.nics) // t.machine_count
    return next(i for i, nic in enumerate(t.nics) if rank in nic.ranks) % per_copy


@pytest.mark.parametrize("name,k", [("h100", 3), ("dgx2", 2)])
def test_rails_join_nic_i_to_nic_i_only(name, k):
    base = load_machine(name)
    t = compose_machines(base, k, fabric="rails")
    links = fabric(t)
    assert len(links) == k * (k - 1) * sum(len(nic.ranks) ** 2 for nic in base.nics)
    assert all(nic_index(t, l.src) == nic_index(t, l.dst) for l in links)
    assert {l.kind for l in links} == {"net"}
    full = compose_machines(base, k, fabric="full")
    assert {l.key for l in links} < {l.key for l in fabric(full)}
    assert len(t.links) - len(links) == k * len(base.links)  # the copies keep their own links


def test_every_rail_link_is_in_its_nics_out_and_in_groups():
    t = compose_machines(load_machine("dgx2"), 3, fabric="rails")
    groups = t.group_map
    for nic in t.nics:
        out, into = groups[f"{nic.name}-out"], groups[f"{nic.name}-in"]
        assert out.bandwidth == into.bandwidth == nic.bandwidth
        assert len(out.links) == len(into.links) == 2 * len(nic.ranks) ** 2  # two other copies
        assert {a for a, _ in out.links} == set(nic.ranks) and {b for _, b in into.links} == set(nic.ranks)
    for link in fabric(t):
        assert {g.name.rsplit("-", 1)[1] for g in t.groups_of_link[link.key]} == {"out", "in"}


def test_the_full_mesh_stays_below_the_limit_and_the_rails_take_over_beyond(monkeypatch):
    base = load_machine("h100")
    below = compose_machines(base, 3)
    assert len(fabric(below)) == 3 * 2 * 8 * 8
    assert "non-blocking fabric" in below.sources[-1] and "rail-aligned" not in below.sources[-1]
    monkeypatch.setattr(compose, "MAX_LINKS", len(below.links) - 1)
    beyond = compose_machines(base, 3)
    assert len(fabric(beyond)) == 3 * 2 * 8
    assert "rail-aligned fabric" in beyond.sources[-1] and f"more than the {len(below.links) - 1}" in beyond.sources[-1]
    asked = compose_machines(load_machine("h100"), 2, fabric="rails")
    assert "rail-aligned fabric" in asked.sources[-1] and "more than" not in asked.sources[-1]


def test_gb200nvl72x20_composes_on_rails():
    """The largest public nccl-tests run: 20 NVL72 racks (1440 GPUs); a full mesh would be 2.07M links."""
    from synth.core.library import resolve_topology

    t = resolve_topology("gb200nvl72x20")
    assert t.ranks == 1440 and t.machine_count == 20 and len(t.switches) == 20
    assert len(fabric(t)) == 20 * 19 * 72
    assert "rail-aligned fabric" in t.sources[-1] and "2072160 links" in t.sources[-1]
    assert machine_switches(t) is not None  # rank g of every rack reaches rank g of every other


def test_a_fabric_beyond_the_limit_either_way_and_an_unknown_fabric_are_refused(monkeypatch):
    with pytest.raises(TopologyError, match="fabric must be one of full, rails"):
        compose_machines(load_machine("h100"), 2, fabric="fat-tree")
    monkeypatch.setattr(compose, "MAX_LINKS", 100)
    with pytest.raises(TopologyError, match="more than the 100 allowed"):
        compose_machines(load_machine("h100"), 2)


@pytest.mark.parametrize("collective", [allgather(24), allreduce(24)])
def test_bounds_on_rails_are_no_lower_than_on_the_full_mesh(collective):
    """The rails are a subset of the full mesh's links: every cut carries less, so the bound is
    at least as high (and here equal: one NIC per GPU, the per-rank and per-machine cuts bind)."""
    base = load_machine("h100")
    rails, full = compose_machines(base, 3, fabric="rails"), compose_machines(base, 3, fabric="full")
    for size in SIZES:
        on_rails, on_full = lower_bounds(rails, collective).time_us(size), lower_bounds(full, collective).time_us(size)
        assert on_rails >= on_full * (1 - 1e-9)


def _never_below_the_bound(schedule):
    assert verify(schedule) == []
    bound = lower_bounds(schedule.topology, schedule.collective)
    for size in SIZES:
        assert step_time_us(schedule, size) >= bound.time_us(size) * (1 - 1e-9)


@pytest.mark.parametrize("collective", ["allgather", "allreduce"])
def test_switch_plans_on_rails_verify_and_never_beat_the_bound(collective):
    t = compose_machines(load_machine("h100"), 3, fabric="rails")
    for size in SIZES:
        _never_below_the_bound(switch_plan(t, collective, size))


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter"])
def test_point_to_point_pipelines_on_rails_verify_and_never_beat_the_bound(collective):
    """dgx2 (two GPUs behind each NIC, no switch): traffic between rails relays inside a copy."""
    t = compose_machines(load_machine("dgx2"), 2, fabric="rails")
    _never_below_the_bound(pipelined(t, collective, 2))
