"""The MILP router's routing and ordering stages and the end-to-end pipeline (synth.router)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from synth.bounds import solver as milp_backend
from synth.bounds.lower_bounds import lower_bounds
from synth.bounds.solver import MilpOptions, MilpOutcome, MilpStatus
from synth.cli.main import main
from synth.core.collectives import make_collective
from synth.core.errors import InputError
from synth.core.generators import full, ring
from synth.core.library import resolve_topology
from synth.cost import step_time_us
from synth.milp.ordering import OrderingRules, order_sends
from synth.milp.routing import route
from synth.milp.sketch import default_sketch, parse_sketch
from synth.milp.synthesize import synthesize
from synth.verify import verify

SOLVERS = milp_backend.available_solvers()


@pytest.fixture(scope="module")
def ndv2x2():
    return resolve_topology("ndv2x2")


def _sketch(topo, **fields):
    doc = {"format": "synth.sketch", "version": 1, **fields}
    return parse_sketch(doc, topo)


# ------------------------------------------------------------------ ordering
@pytest.mark.parametrize("name", ["allgather", "alltoall", "broadcast", "gather", "scatter"])
def test_ordering_verifies_on_sparse_topologies(name):
    for topo in (ring(5), full(4), resolve_topology("hypercube:3")):
        coll = make_collective(name, topo.ranks, chunks=2)
        schedule = order_sends(topo, coll, OrderingRules.of(topo))
        assert verify(schedule) == []
        assert all(step.rounds == 1 for step in schedule.steps)


def test_ordering_never_uses_a_forbidden_link():
    topo = full(4)
    allowed = np.array([not (l.src == 0 and l.dst in (1, 2)) for l in topo.links])
    rules = OrderingRules(allowed, (None,) * len(topo.links))
    schedule = order_sends(topo, make_collective("allgather", 4, chunks=3), rules)
    assert verify(schedule) == []
    used = {(s.src, s.dst) for step in schedule.steps for s in step.sends}
    assert (0, 1) not in used and (0, 2) not in used


def test_ordering_respects_carries(ndv2x2):
    coll = make_collective("allgather", 16, chunks=1)
    machine = ndv2x2.machine_of
    carries = tuple(frozenset({l.src}) if machine[l.src] != machine[l.dst] else None for l in ndv2x2.links)
    rules = OrderingRules(np.ones(len(ndv2x2.links), dtype=bool), carries)
    schedule = order_sends(ndv2x2, coll, rules)
    assert verify(schedule) == []
    for step in schedule.steps:
        for s in step.sends:
            if machine[s.src] != machine[s.dst]:
                assert min(coll.pre[s.chunk]) == s.src  # only its own chunk crosses


def test_ordering_few_peers_limits_distinct_destinations():
    topo = resolve_topology("dgx2")
    rules = replace(OrderingRules.of(topo), peers=2)
    schedule = order_sends(topo, make_collective("allgather", 16, chunks=1), rules)
    assert verify(schedule) == []
    for step in schedule.steps:
        for r in range(16):
            assert len({s.dst for s in step.sends if s.src == r}) <= 2


def test_ordering_rejects_combining():
    with pytest.raises(InputError):
        order_sends(ring(4), make_collective("reduce_scatter", 4), OrderingRules.of(ring(4)))


def test_ordering_last_step_is_shortened_by_the_finishing_milp():
    topo = resolve_topology("dgx2")
    coll = make_collective("allgather", 16, chunks=3)
    schedule = order_sends(topo, coll, OrderingRules.of(topo))
    # 45 chunks to receive per GPU through a port of 10 per round: 4.5 rounds of port time;
    # the last step carries only what is left, so the step model pays about 4.5 rounds, not 5
    size = 1 << 30
    one_round = size / coll.buffer_chunks / (125.0 * 1e3) * 10
    assert step_time_us(schedule, size) < 4.9 * one_round


# ------------------------------------------------------------------ routing
@pytest.mark.parametrize("solver", SOLVERS)
def test_routing_plan_enters_every_machine(ndv2x2, solver):
    coll = make_collective("allgather", 16, chunks=2)
    plan = route(ndv2x2, coll, default_sketch(ndv2x2)[0], MilpOptions(solver=solver, time_limit=30))
    assert plan.status == "solved"
    machine = ndv2x2.machine_of
    into = [0, 0]
    for link, copies in zip(ndv2x2.links, plan.copies):
        if machine[link.src] != machine[link.dst]:
            into[machine[link.dst]] += copies
        else:
            assert copies == 0
    assert min(into) >= 8 * 2  # every chunk of the other machine enters at least once
    # no plan beats the NIC: 16 chunks over the machine's NIC capacity per round
    assert plan.rounds >= 16 / 2 - 1e-9


def test_routing_plan_is_invariant_under_the_sketch_symmetry():
    topo = resolve_topology("dgx2x2")
    sketch = default_sketch(topo)[0]
    plan = route(topo, make_collective("allgather", 32, chunks=2), sketch)
    perm = sketch.rank_rotation(topo)
    index = {l.key: i for i, l in enumerate(topo.links)}
    for i, link in enumerate(topo.links):
        image = index[(perm[link.src], perm[link.dst])]
        assert plan.copies[i] == plan.copies[image]


def test_routing_follows_rail_relay():
    topo = resolve_topology("h100x4")
    sketch = _sketch(topo, relay={"mode": "rail"}, chunk_up=1)
    plan = route(topo, make_collective("allgather", topo.ranks), sketch)
    machine = topo.machine_of
    for link, copies in zip(topo.links, plan.copies):
        if copies:
            assert machine[link.src] != machine[link.dst]
            assert link.src % 8 == link.dst % 8


def test_routing_reports_a_sketch_that_blocks_every_route(ndv2x2):
    sketch = _sketch(ndv2x2, relay={"mode": "any", "carries": {"0": [0]}})
    with pytest.raises(InputError, match="carry"):
        route(ndv2x2, make_collective("allgather", 16), sketch)


def test_routing_timeout_without_incumbent_is_unknown_and_the_router_still_answers(ndv2x2, monkeypatch):
    def no_answer(problem, options=None):
        return MilpOutcome(MilpStatus.TIMEOUT, None, 0.0, "highs", False, False, None, "time limit")

    monkeypatch.setattr("synth.milp.routing.solve", no_answer)
    sketch = replace(default_sketch(ndv2x2)[0], chunk_up=1)
    plan = route(ndv2x2, make_collective("allgather", 16), sketch)
    assert plan.status == "timeout" and not plan.usable and not plan.planned
    result = synthesize(ndv2x2, "allgather", sketch)
    assert result.status == "timeout"
    assert verify(result.schedule) == []


# ------------------------------------------------------------------ end to end
@pytest.mark.parametrize("name", ["allgather", "reduce_scatter", "allreduce", "alltoall"])
def test_synthesize_verifies_and_never_beats_the_bound(ndv2x2, name):
    sketch = replace(default_sketch(ndv2x2, name)[0], chunk_up=2)
    result = synthesize(ndv2x2, name, sketch)
    assert verify(result.schedule) == []
    assert result.schedule.collective.name == name
    bound = lower_bounds(ndv2x2, result.schedule.collective).time_us(sketch.size)
    assert result.bound_us == pytest.approx(bound)
    assert result.time_us >= bound * (1 - 1e-9)
    assert result.simulated_us <= result.time_us * (1 + 1e-9)
    assert result.schedule.meta["synthesizer"] == "milp"


@pytest.mark.parametrize("solver", SOLVERS)
def test_synthesize_with_each_solver(solver):
    topo = resolve_topology("ndv2x2")
    sketch = replace(default_sketch(topo)[0], chunk_up=1)
    result = synthesize(topo, "allgather", sketch, MilpOptions(solver=solver, time_limit=30))
    assert verify(result.schedule) == []
    assert result.status == "solved"


def test_synthesize_alltoallv_from_a_skewed_matrix(tmp_path):
    topo = resolve_topology("h100x2")
    matrix = [[0 if s == d else 1 + 3 * (d % 8 == 0) for d in range(16)] for s in range(16)]
    path = tmp_path / "zipf.json"
    path.write_text(json.dumps(matrix))
    sketch = replace(default_sketch(topo)[0], chunk_up=1)
    result = synthesize(topo, f"alltoallv:{path}", sketch)
    assert verify(result.schedule) == []
    with pytest.raises(InputError, match="chunk_up"):
        synthesize(topo, f"alltoallv:{path}", replace(sketch, chunk_up=2))


# ------------------------------------------------------------------ CLI
def test_cli_solve_milp_writes_a_verified_schedule(tmp_path, capsys):
    out = tmp_path / "ag.json"
    assert main(["solve", "ndv2x2", "allgather", "--backend", "milp", "--chunks", "2", "--size", "1M",
                 "-o", str(out)]) == 0
    err = capsys.readouterr().err
    for stage in ("sketch: derived default", "routing (allgather)", "ordering (allgather)", "timing:",
                  "% of the bound"):
        assert stage in err
    assert main(["verify", str(out)]) == 0


def test_cli_solve_milp_with_a_sketch_file(tmp_path, capsys):
    sketch = tmp_path / "s.json"
    sketch.write_text(json.dumps({"format": "synth.sketch", "version": 1, "relay": {"mode": "any"},
                                  "chunk_up": 2, "size": "64M"}))
    out = tmp_path / "ag.json"
    assert main(["solve", "ndv2x2", "allgather", "--backend", "milp", "--sketch", str(sketch), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["collective"]["buffer_chunks"] == 32
    assert main(["solve", "ndv2x2", "allgather", "--backend", "milp", "--sketch", str(sketch),
                 "--chunks", "3", "-o", str(out)]) == 2
    assert "chunk_up" in capsys.readouterr().err


@pytest.mark.parametrize("args", [
    ["solve", "ndv2", "allgather", "--backend", "milp", "--sketch", "/nonexistent.json"],
    ["solve", "ndv2", "allgather", "--steps", "2", "--sketch", "x.json"],
    ["solve", "ndv2", "allgather", "--backend", "milp", "--steps", "2"],
    ["solve", "ndv2", "allgather", "--backend", "milp", "--solver", "gurobi"],
    ["solve", "ndv2", "allgather", "--backend", "milp", "--time-limit", "0"],
])
def test_cli_milp_bad_input_is_one_line_exit_2(args, tmp_path, capsys):
    out = tmp_path / "never.json"
    assert main(args + ["-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("synth: error:")
    assert not out.exists()
