"""Synthesis on machines whose bandwidths are not whole multiples (PCIe boxes, bridges beside
PCIe): the router and the greedy scheduler plan on whole capacities and return schedules that
run on the machine itself, verified there; SMT says why it does not apply; reports pick the router."""

from __future__ import annotations

import pytest

from synth.baselines import registry
from synth.bounds.lower_bounds import lower_bounds
from synth.cli.main import main
from synth.core.errors import InputError
from synth.core.io import write_json_atomic
from synth.core.topology import Group, Link, Topology
from synth.cost import step_time_us
from synth.greedy.pipeline import pipelined
from synth.milp.sketch import default_sketch
from synth.milp.synthesize import synthesize
from synth.report.candidates import synthesis_backend
from synth.verify import load_schedule, verify

PCIE_GBS, QPI_GBS = 15.75, 10.0


def pcie_box(ranks: int = 4) -> Topology:
    """GPUs on two CPUs, every pair joined over PCIe: each GPU's own link is shared by its
    sends (and its receives), and the CPU interconnect by every pair across."""
    half = ranks // 2
    links = tuple(Link(i, j, PCIE_GBS, 1.2, kind="pcie") for i in range(ranks) for j in range(ranks) if i != j)
    groups = [Group(f"gpu{r}-pcie-{way}", tuple((r, j) if way == "out" else (j, r) for j in range(ranks) if j != r),
                    PCIE_GBS) for r in range(ranks) for way in ("out", "in")]
    for a, b, name in ((range(half), range(half, ranks), "cpu0-to-cpu1"),
                       (range(half, ranks), range(half), "cpu1-to-cpu0")):
        groups.append(Group(name, tuple((i, j) for i in a for j in b), QPI_GBS))
    return Topology("pcie-box", ranks, links, tuple(groups), machines=(tuple(range(ranks)),))


@pytest.fixture(scope="module")
def box() -> Topology:
    topo = pcie_box()
    assert not topo.rounds_apply
    return topo


@pytest.mark.parametrize("name", ["allgather", "reduce_scatter", "allreduce", "alltoall", "broadcast"])
def test_the_router_gives_a_verified_schedule_on_the_machine(box, name):
    sketch, _ = default_sketch(box, name, 1 << 30)
    result = synthesize(box, name, sketch)
    assert result.schedule.topology is box
    assert verify(result.schedule) == []
    assert all(step.rounds is None for step in result.schedule.steps)
    bound = lower_bounds(box, result.schedule.collective).time_us(1 << 30)
    assert result.bound_us == pytest.approx(bound)
    assert step_time_us(result.schedule, 1 << 30) >= bound * (1 - 1e-9)
    assert result.schedule.meta["planning"]


@pytest.mark.parametrize("size", [1 << 10, 1 << 20, pytest.param(1 << 30, marks=pytest.mark.slow)])
def test_the_router_is_at_least_as_fast_as_ncclS_ring_on_a_pcie_box(box, size):
    ring = registry()["nccl_ring"].make(box, "allreduce")
    sketch, _ = default_sketch(box, "allreduce", size)
    ours = synthesize(box, "allreduce", sketch).schedule
    assert step_time_us(ours, size) <= step_time_us(ring, size) * (1 + 1e-9)


@pytest.mark.parametrize("name", ["allgather", "reduce_scatter", "allreduce", "broadcast"])
def test_the_greedy_scheduler_runs_on_the_machine(box, name):
    schedule = pipelined(box, name, 4, root=0 if name == "broadcast" else None)
    assert schedule.topology is box
    assert verify(schedule) == []


def test_ncclS_ring_crosses_a_cpu_interconnect_slower_than_one_link(box):
    ring = registry()["nccl_ring"].make(box, "allgather")
    assert verify(ring) == []


def test_smt_says_why_rounds_do_not_apply(box):
    from synth.smt.strategies import solve_instance

    with pytest.raises(InputError, match=r"group 'cpu0-to-cpu1' runs at 10 GB/s.*--backend milp"):
        solve_instance(box, "allgather", None, 2, 2, 1, 10.0, None)


def test_a_report_synthesizes_with_the_router_where_rounds_do_not_apply(box):
    from synth.core.library import resolve_topology

    assert synthesis_backend(box)[0] == "milp"
    assert "do not apply" in synthesis_backend(box)[1] and "rounded capacities" in synthesis_backend(box)[1]
    assert synthesis_backend(resolve_topology("dgx1"))[0] == "smt"
    assert synthesis_backend(resolve_topology("ndv2x2"))[0] == "milp"


def test_the_sketch_describes_a_pcie_machine(box):
    _, reasons = default_sketch(box, "allreduce", 1 << 20)
    intra = next(r for r in reasons if r.startswith("intra"))
    assert "PCIe" in intra and "NVSwitch" not in intra


def test_cli_solve_picks_the_router_without_steps(box, tmp_path, capsys):
    path = tmp_path / "box.json"
    write_json_atomic(path, box.to_dict())
    out = tmp_path / "s.json"
    assert main(["solve", str(path), "allgather", "--size", "1M", "-o", str(out)]) == 0
    schedule = load_schedule(out)
    assert schedule.meta["synthesizer"] == "milp" and verify(schedule) == []
    assert main(["solve", str(path), "allgather", "--steps", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("synth: error:") and "--backend milp" in err[-1]
