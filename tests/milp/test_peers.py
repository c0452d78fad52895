"""Peer budgets: the links the peer MILP keeps, and synthesis within them on every backend."""

from __future__ import annotations

import json

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth import synthesizers
from synth.core.collectives import make_collective
from synth.core.errors import InfeasibleError, InputError
from synth.core.generators import line
from synth.core.library import resolve_topology
from synth.milp.peers import choose_peers, peer_degree, peer_view, rank_loads
from synth.milp.sketch import default_sketch
from synth.report.budget import fewest_blocks, footprint
from synth.report.candidates import peer_counts, within_budget
from synth.verify import verify
from tests.cli_run import run

TOPOLOGIES = ("dgx1", "h100", "mi300x", "full:6", "torus:3x3", "ring:5")
COLLECTIVES = ("allgather", "reduce_scatter", "allreduce", "alltoall", "broadcast")


def _graph(links) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_edges_from(links)
    return g


def _reaches_all(topology, collective: str, links) -> bool:
    """Every (source, destination) pair the collective moves data between has a path."""
    coll = make_collective(collective, topology.ranks)
    g = _graph(links)
    g.add_nodes_from(range(topology.ranks))
    for pre, post in zip(coll.pre, coll.post):
        sources = pre if coll.combining else {min(pre)}
        for s in sources:
            for d in post - {s}:
                if not nx.has_path(g, s, d):
                    return False
    return True


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(TOPOLOGIES), st.sampled_from(COLLECTIVES), st.integers(1, 4), st.booleans())
def test_a_choice_keeps_the_budget_and_reaches_every_rank(name, collective, limit, bandwidth_first):
    topology = resolve_topology(name)
    generators = default_sketch(topology, collective, 1 << 30)[0].symmetry_generators(topology)
    try:
        choice = choose_peers(topology, collective, limit, 1 << 30 if bandwidth_first else 1 << 10, generators)
    except InfeasibleError:
        assert limit == 1  # every machine here has a ring of links; more peers always connect
        return
    assert max(choice.degrees()) <= limit
    assert choice.links <= {link.key for link in topology.links}
    assert _reaches_all(topology, collective, choice.links)
    view = peer_view(topology, choice)
    assert peer_degree(view) <= limit and view.ranks == topology.ranks


def test_a_choice_keeps_the_symmetry_it_is_given():
    topology = resolve_topology("h100")
    generators = default_sketch(topology, "allgather", 1 << 30)[0].symmetry_generators(topology)
    assert generators
    choice = choose_peers(topology, "allgather", 2, 1 << 30, generators)
    for perm in generators:
        assert {(perm[a], perm[b]) for a, b in choice.links} == choice.links


def test_a_switch_box_keeps_more_peers_than_a_ring_when_they_shorten_paths():
    """On an NVSwitch box every single peer gets the whole port, so a ring already has the full
    bandwidth; with two peers the choice must still use both (shorter paths), not the ring."""
    topology = resolve_topology("h100")
    generators = default_sketch(topology, "allgather", 1 << 30)[0].symmetry_generators(topology)
    ring = choose_peers(topology, "allgather", 1)
    two = choose_peers(topology, "allgather", 2, 1 << 30, generators)
    assert len(ring.links) == 8 and len(two.links) == 16
    assert two.theta == pytest.approx(ring.theta, rel=0.01)
    assert two.distance < ring.distance


def test_a_kept_symmetry_is_named_when_it_leaves_no_choice():
    topology = resolve_topology("dgx1")
    generators = default_sketch(topology, "allgather", 1 << 30)[0].symmetry_generators(topology)
    assert generators and choose_peers(topology, "allgather", 1, generators=generators).limit == 1
    with pytest.raises(InfeasibleError, match="invariant under the sketch's symmetry"):
        choose_peers(topology, "allgather", 1, generators=generators, keep_symmetry=True)


def test_no_ring_on_a_line_or_star_is_infeasible_not_unknown():
    with pytest.raises(InfeasibleError, match="at most 1 send and 1 receive"):
        choose_peers(line(4), "allgather", 1)
    assert max(choose_peers(line(4), "allgather", 2).degrees()) == 2
    star = resolve_topology("star:4")  # the hub is every leaf's only peer
    with pytest.raises(InfeasibleError):
        choose_peers(star, "allgather", peer_degree(star) - 1)


def test_a_budget_must_be_a_positive_integer():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InputError, match="peer budget"):
            choose_peers(resolve_topology("dgx1"), "allgather", bad)


def test_rank_loads():
    n = 4
    assert rank_loads(make_collective("allgather", n)) == ([3.0] * n, [1.0] * n)
    assert rank_loads(make_collective("reduce_scatter", n)) == ([1.0] * n, [3.0] * n)  # the dual of allgather
    assert rank_loads(make_collective("allreduce", n)) == ([4.0] * n, [4.0] * n)
    recv, send = rank_loads(make_collective("broadcast", n, root=1))
    assert recv == [1.0, 0.0, 1.0, 1.0] and send == [0.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize("name, collective, backend, limit, extra", [
    ("dgx1", "allreduce", "milp", 2, {"size": 1 << 20}),
    ("dgx1", "allgather", "smt", 1, {"steps": 7}),
    ("h100", "allgather", "greedy", 1, {"chunks": 4}),
    ("h100x2", "allgather", "milp", 2, {"size": 1 << 16}),
])
def test_every_backend_plans_within_the_budget(name, collective, backend, limit, extra):
    topology = resolve_topology(name)
    problem = synthesizers.Problem(topology, collective, max_peers=limit, **extra)
    result = synthesizers.synthesize(problem, synthesizers.Options(time_limit=60), backend)
    schedule = result.schedule
    assert schedule.topology is topology and not verify(schedule)
    assert fewest_blocks(schedule) <= limit
    assert footprint(schedule, "milp", limit) is not None  # lowers within the budget
    assert schedule.meta["max_peers"] == limit


def test_a_budget_above_every_rank_s_peers_changes_nothing():
    topology = resolve_topology("dgx1")
    free = synthesizers.synthesize(synthesizers.Problem(topology, "allgather", chunks=2), backend="greedy")
    within = synthesizers.synthesize(synthesizers.Problem(topology, "allgather", chunks=2, max_peers=8),
                                     backend="greedy")
    assert within.schedule.steps == free.schedule.steps


def test_peer_counts():
    assert peer_counts(1) == [1]
    assert peer_counts(8) == [1, 2, 4, 8]


def test_report_candidates_within_a_budget_fit_it():
    topology = resolve_topology("h100")
    found = within_budget(topology, "allgather", 2, 30.0, lambda line: None)
    assert found and all(fewest_blocks(c.schedule) <= 2 for c in found)
    assert {c.schedule.meta["max_peers"] for c in found} == {1, 2}


def test_solve_cli(capsys, tmp_path):
    out = tmp_path / "s.json"
    code, _, err = run(capsys, "solve", "h100", "allgather", "--max-threadblocks", "2", "--size", "1M", "-o", str(out))
    assert code == 0 and "within 2 send and receive peers per rank" in err
    from synth.verify import load_schedule

    assert fewest_blocks(load_schedule(str(out))) <= 2
    code, _, err = run(capsys, "solve", "h100", "allgather", "--max-threadblocks", "0", "-o", str(tmp_path / "x.json"))
    assert code == 2 and err.strip() == "synth: error: a peer budget must be an integer >= 1, got 0"
    assert not (tmp_path / "x.json").exists()


def test_mscclpp_export_within_a_budget(capsys, tmp_path):
    schedule = tmp_path / "s.json"
    assert run(capsys, "solve", "h100", "allgather", "--backend", "greedy", "--chunks", "16", "--max-threadblocks",
               "1", "-o", str(schedule))[0] == 0
    plan = tmp_path / "p.json"
    code, _, _ = run(capsys, "export", str(schedule), "--format", "mscclpp-json", "--max-threadblocks", "32",
                     "-o", str(plan))
    blocks = max(len(g["threadblocks"]) for g in json.loads(plan.read_text())["gpus"])
    assert code == 0 and 1 < blocks <= 32  # a long program: its blocks run one after another, all resident
    small = tmp_path / "small.json"
    code, _, err = run(capsys, "export", str(schedule), "--format", "mscclpp-json", "--max-threadblocks",
                       str(blocks - 1), "-o", str(small))
    assert code == 2 and f"takes {blocks} thread blocks" in err and err.count("\n") == 1
    assert not small.exists()
