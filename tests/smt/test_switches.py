"""SMT synthesis with switch entries (``synth.smt.switch_sends``, ``synth.smt.switch_trees``):
every schedule is checked with the verifier; where the switch is strictly better the same
budget is proven infeasible on the same topology without its switches."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from synth.core.collective import Collective
from synth.core.collectives import broadcast, make_collective
from synth.core.library import resolve_topology
from synth.core.reductions import DUAL, Part, dual_switch_schedule
from synth.core.schedule import Schedule, Status, Step, SwitchSend
from synth.core.subset import sub_topology
from synth.core.topology import Switch
from synth.smt.direct_allreduce import DirectAllreduceInstance
from synth.smt.encoding import SmtInstance, SmtOptions
from synth.smt.session import SmtSession
from synth.smt.strategies import least_steps, pareto, solve_instance
from synth.synthesizers import Options, Problem, synthesize
from synth.verify import verify


def h100():
    return resolve_topology("h100")


def bare(topology):
    """The same topology without its switches."""
    return replace(topology, switches=())


def uring_with_switch():
    """uring:4 (one link a rank, no groups) and a reduce + multicast switch over its 4 ranks."""
    ring = resolve_topology("uring:4")
    return replace(ring, switches=(Switch("sw", (0, 1, 2, 3), ring.links[0].bandwidth, reduce=True, multicast=True),))


def solve(topology, name, steps, rounds, root=None, chunks=1, direct=False):
    return solve_instance(topology, name, root, steps, rounds, chunks, time_limit=60, direct=direct)


def assert_switch_wins(topology, name, steps, rounds, root=None, chunks=1, direct=False):
    """SAT with switch entries (a verified schedule that has some), proven INFEASIBLE without."""
    found = solve(topology, name, steps, rounds, root, chunks, direct)
    assert found.status == Status.SOLVED
    assert verify(found.schedule) == [] and found.schedule.switch_count > 0
    assert found.schedule.topology == topology and found.schedule.collective.name == name
    assert solve(bare(topology), name, steps, rounds, root, chunks, direct).status == Status.INFEASIBLE
    return found.schedule


def test_broadcast_multicasts_in_one_step_and_round():
    schedule = assert_switch_wins(h100(), "broadcast", 1, 1, root=3)
    (entry,) = schedule.steps[0].switches
    assert entry.srcs == (3,) and entry.dsts == (0, 1, 2, 4, 5, 6, 7)


def test_two_chunks_broadcast_pipelines_through_the_switch():
    assert_switch_wins(h100(), "broadcast", 2, 2, root=0, chunks=2)


def test_reduce_through_the_dual_is_one_reduce_entry_that_keeps_the_root_s_partial():
    schedule = assert_switch_wins(h100(), "reduce", 1, 1, root=5)
    (entry,) = schedule.steps[0].switches
    assert entry.dsts == (5,) and entry.srcs == tuple(range(8))  # the root is a src: replace keeps its own


def test_reduce_scatter_through_the_dual_verifies():
    assert_switch_wins(uring_with_switch(), "reduce_scatter", 1, 4)
    assert_switch_wins(uring_with_switch(), "reduce_scatter", 2, 3)


def test_allgather_multicasts_beside_the_ring():
    assert_switch_wins(uring_with_switch(), "allgather", 1, 2)


def test_allreduce_composes_switch_parts():
    schedule = assert_switch_wins(uring_with_switch(), "allreduce", 2, 6)
    assert schedule.meta["composition"] == "reduce_scatter+allgather"


def test_h100_allreduce_overlaps_reduce_and_multicast_below_every_point_to_point_schedule():
    """14 rounds is the point-to-point bound; the composition needs 7 + 7 with or without the
    switch, so the direct encoding with switch entries is what finds 13 in 3 steps."""
    schedule = assert_switch_wins(h100(), "allreduce", 3, 13)
    assert schedule.meta.get("encoding") == "direct-allreduce"


def test_infeasible_with_switches_is_the_engine_s_answer():
    session = SmtSession(h100(), "allgather", None)
    assert session.rounds_floor(1, 1) == 1 and session.rounds_floor_any_steps(1) == 0
    assert session._open_splits(2, 12, 1) is None and not session.steps_split_freely
    assert session.solve(1, 6, 1, time_limit=60).status == Status.INFEASIBLE  # 7 chunks into every in-port
    assert session.solve(1, 7, 1, time_limit=60).status == Status.SOLVED


def test_certified_infeasibility_with_switches_carries_drat_proofs_only():
    session = SmtSession(h100(), "broadcast", 0, SmtOptions(sat="cadical", certify=True))
    result = session.solve(1, 1, 2, time_limit=60)
    assert result.status == Status.INFEASIBLE
    assert all(type(part).__name__ == "SatRefutation" for part in result.details["certificate"].parts)


def test_least_steps_with_a_switch_is_one_multicast_step():
    result, _ = least_steps(h100(), "broadcast", 0, chunks=1, time_limit=60)
    assert result.status == Status.SOLVED and len(result.schedule.steps) == 1
    assert verify(result.schedule) == []


def test_the_backend_says_no_point_to_point_line_and_plans_the_switch():
    lines: list[str] = []
    result = synthesize(Problem(h100(), "broadcast", root=0, steps=1, rounds=1), Options(progress=lines.append),
                        backend="smt")
    assert result.status == Status.SOLVED and result.schedule.switch_count == 1
    assert not any("point-to-point" in line for line in lines)


def test_a_dual_multicast_runs_backwards_as_a_reduce_entry_that_keeps_the_dst_s_partial():
    """The dual's 0 -> [1, 2, 4, 5, 6, 7] then 2 -> [3]: backwards, 3's partial reaches 2 first
    (2 a src of its own entry), then 0 sums every other rank's partial and its own."""
    topology = h100()
    forward = Schedule(topology.reversed(), broadcast(8, 0), (
        Step((), 1, (SwitchSend(0, "nvswitch", (0,), (1, 2, 4, 5, 6, 7)),)),
        Step((), 1, (SwitchSend(0, "nvswitch", (2,), (3,)),)),
    ))
    assert verify(forward) == []
    backwards = dual_switch_schedule(forward)
    assert [step.switches for step in backwards.steps] == [
        (SwitchSend(0, "nvswitch", (2, 3), (2,)),), (SwitchSend(0, "nvswitch", (0, 1, 2, 4, 5, 6, 7), (0,)),)]
    part = Part.of(topology, make_collective("reduce", 8, root=0))
    assert verify(DUAL.invert(part, [forward])) == []


# Fingerprints of the formulas the encodings built before switch entries (commit 8d5c8f8): a
# topology without switches gets exactly the same formula, so the same answers.
BEFORE = {
    ("uring:4", "allgather", None, 3, 4, 2): "adc77b06f30c2ecc",
    ("ring:4", "broadcast", 1, 2, 3, 2): "a871fa69b781b001",
    ("dgx1", "allgather", None, 2, 3, 1): "59c5d122242e3e1e",
}


def _fingerprint(inst, rounds: int) -> str:
    inst.total_literal(rounds)
    return hashlib.sha256(inst.formula.dimacs()).hexdigest()[:16]


@pytest.mark.parametrize("case", sorted(BEFORE, key=str))
def test_without_switches_the_formula_is_the_one_before(case):
    name, collective, root, steps, rounds, chunks = case
    topology = resolve_topology(name)
    inst = SmtInstance(topology, make_collective(collective, topology.ranks, root=root, chunks=chunks), steps, rounds)
    assert inst.switch_vars is None and _fingerprint(inst, rounds) == BEFORE[case]


def test_without_switches_the_dual_and_direct_formulas_are_the_ones_before():
    ring = resolve_topology("ring:4")
    part = DUAL.apply(Part.of(ring, make_collective("reduce_scatter", 4, chunks=1)))[0]
    assert _fingerprint(SmtInstance(part.topology, part.collective, 3, 4, dual=True), 4) == "081cad87e8eab3e9"
    direct = DirectAllreduceInstance(resolve_topology("ring:3"), make_collective("allreduce", 3, chunks=1), 3, 4)
    assert _fingerprint(direct, 4) == "b5b89a614eedc529"


def test_a_restricted_search_does_not_take_switch_entries():
    from synth.core.symmetry import search_symmetries

    topology = h100()
    collective = make_collective("allgather", 8)
    with pytest.raises(ValueError, match="switch"):
        SmtInstance(topology, collective, 1, 7, symmetries=tuple(search_symmetries(topology, collective)))


def _solved_duals(topology, collective, budgets):
    """Every budget's answer for ``collective`` (combining) solved as its dual with switch entries
    and run backwards: the schedules, each verified."""
    part = Part.of(topology, collective)
    (dual,) = DUAL.apply(part)
    found = []
    for steps, rounds in budgets:
        result = SmtInstance(dual.topology, dual.collective, steps, rounds, dual=True).solve(rounds, time_limit=60)
        if result.status == Status.SOLVED:
            schedule = DUAL.invert(part, [result.schedule])
            assert verify(schedule) == [], (steps, rounds)
            found.append(schedule)
    return found


def test_a_gather_like_reduction_with_relays_that_hold_nothing_verifies():
    """Chunk 0 sums ranks 1 and 2 into 0, chunk 1 ranks 0 and 2 into 3: ranks 3 (chunk 0) and 1
    (chunk 1) contribute nothing and may only relay; every budget solved verifies backwards."""
    collective = Collective("sum_two", 4, True, (frozenset({1, 2}), frozenset({0, 2})),
                            (frozenset({0}), frozenset({3})), 2)
    budgets = [(steps, rounds) for steps in (1, 2, 3) for rounds in range(steps, steps + 3)]
    found = _solved_duals(uring_with_switch(), collective, budgets)
    assert found and any(schedule.switch_count for schedule in found)
    assert _solved_duals(h100_part(), make_collective("reduce", 4, root=1), [(1, 1), (2, 2)])


def h100_part():
    """The first 4 ranks of h100 with their switch ports (a small machine with its groups)."""
    return sub_topology(h100(), (0, 1, 2, 3))


def test_frontier_walks_run_on_a_switch_machine():
    for name, root, point in (("allgather", None, (1, 7, 1)), ("broadcast", 0, (1, 1, 1))):
        frontier = pareto(h100(), name, root, max_chunks=2, time_limit=30)
        assert frontier.complete and [(p.steps, p.rounds, p.chunks) for p in frontier.points] == [point]
        assert all(verify(p.schedule) == [] for p in frontier.points)


def test_a_certified_walk_on_a_switch_machine_writes_proofs_check_proof_accepts(tmp_path):
    """h100x2 reduce: (1, 1, 1) is refuted by a DRAT proof about the dual encoding with switch
    entries, which ``synth check-proof`` rebuilds from the file (the dual's rules included)."""
    from synth.cli.main import main

    folder = tmp_path / "h100x2"
    assert main(["pareto", "h100x2", "reduce", "--root", "0", "--certify", "--max-chunks", "2", "--time-limit", "30",
                 "-o", str(folder)]) == 0
    assert list((folder / "certificates").glob("*.json"))
    assert main(["check-proof", str(folder)]) == 0


def test_a_switch_that_only_multicasts_serves_broadcast_but_not_its_dual():
    """Without ``reduce`` a switch entry can only copy, and a copy into a rank that holds a
    partial replaces it: the dual leaves such a switch out, so reduce is as without it."""
    ring = resolve_topology("uring:4")
    topology = replace(ring, switches=(Switch("mc", (0, 1, 2, 3), ring.links[0].bandwidth, multicast=True),))
    assert solve(topology, "broadcast", 1, 1, root=0).schedule.switch_count == 1
    assert solve(topology, "reduce", 1, 1, root=0).status == Status.INFEASIBLE
    assert solve(bare(topology), "reduce", 2, 2, root=0).status == solve(topology, "reduce", 2, 2, root=0).status


def test_the_backend_says_in_one_line_that_a_reduce_multicast_pass_goes_unused():
    topology = resolve_topology("h100x2+sharp")
    lines: list[str] = []
    result = synthesize(Problem(topology, "broadcast", root=0, steps=2, rounds=2), Options(progress=lines.append),
                        backend="smt")
    assert result.status == Status.SOLVED and verify(result.schedule) == []
    assert [line for line in lines if "reduce_multicast" in line] == [
        "smt: the reduce_multicast pass of sharp goes unused (no tree-shaped dual); their reduce and multicast, "
        "if any, are used"]


def test_where_point_to_point_sends_reach_the_budget_the_answer_has_no_switch_entry():
    """h100 allgather in 1 step and 7 rounds: plain sends reach it, so the answer is theirs (it
    runs under LL as well), on the machine with its switch; broadcast in 1 round needs the switch."""
    plain = solve_instance(h100(), "allgather", None, 1, 7, 1, 30.0)
    assert plain.status is Status.SOLVED and not plain.schedule.switch_count
    assert plain.schedule.topology.switches and verify(plain.schedule) == []
    needs = solve_instance(h100(), "broadcast", 0, 1, 1, 1, 30.0)
    assert needs.status is Status.SOLVED and needs.schedule.switch_count == 1
