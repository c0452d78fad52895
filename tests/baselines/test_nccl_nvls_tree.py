"""nccl_nvls_tree: NCCL's NVLSTree allreduce (the switch reduces to per-GPU heads, the heads combine
across machines, the switch multicasts back), verified, and refused where NCCL cannot run it."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.baselines import BaselineNotApplicable, build_baseline, registry
from synth.baselines.nccl_nvls_tree import MAX_HEADS, build, domains
from synth.core.library import resolve_topology
from synth.core.topology import Topology
from synth.cost import best_protocol, simulate_us, step_time_us
from synth.tuner.tune import communicator_topology
from synth.verify import verify
from tests.cli_run import run

H100X2 = resolve_topology("h100x2")


def entries(schedule):
    return [e for step in schedule.steps for e in step.switches]


def test_two_domains_exchange_between_heads_one_per_gpu():
    s = build(H100X2, "allreduce", None, 1)
    assert verify(s) == []
    assert s.meta["heads"] == [[g, 8 + g] for g in range(8)] and s.meta["machine_trees"] == []
    reduce_step, exchange, multicast = s.steps
    assert all(len(e.srcs) == 8 and len(e.dsts) == 1 for e in reduce_step.switches) and not reduce_step.sends
    assert Counter((x.src, x.dst, x.op) for x in exchange.sends) == Counter(
        [(g, 8 + g, "reduce") for g in range(8)] + [(8 + g, g, "reduce") for g in range(8)])
    assert all(len(e.srcs) == 1 and len(e.dsts) == 8 for e in multicast.switches)


def test_beyond_two_domains_each_slice_runs_both_machine_trees():
    s = build(resolve_topology("h100x4"), "allreduce", None, 1)
    assert verify(s) == [] and s.collective.buffer_chunks == 16  # 8 heads x 2 lanes
    assert len(s.meta["machine_trees"]) == 2
    # every head's NIC carries each of its two lanes once up-or-down per tree edge: interior in one tree
    # and a leaf in the other, so no NIC carries more than 4 of the 16 chunks each way
    out = Counter(x.src for step in s.steps for x in step.sends)
    assert max(out.values()) <= 4


def test_pipelined_pieces_and_the_chosen_depth_follow_the_size():
    small, large = (build(H100X2, "allreduce", None, None, size=size) for size in (1 << 16, 1 << 30))
    assert small.meta["pieces"] < large.meta["pieces"]
    assert verify(large) == [] and len(large.steps) == large.meta["pieces"] + 2
    assert best_protocol(large, 1 << 30)[0] == "simple"  # switch entries run Simple only
    assert simulate_us(large, 1 << 30) <= step_time_us(large, 1 << 30) * (1 + 1e-9)


def test_heads_are_capped_per_domain():
    plan = domains(resolve_topology("gb200nvl72x2"))
    assert len(plan.heads) == MAX_HEADS and all(len(rail) == 2 for rail in plan.heads)


@pytest.mark.parametrize("name, reason", [("h100", "one"), ("ndv2x2", "reduce and multicast"),
                                          ("a100x2", "reduce and multicast")])
def test_refused_where_nccl_cannot_run_it(name, reason, capsys):
    with pytest.raises(BaselineNotApplicable, match=reason):
        build_baseline(resolve_topology(name), "nccl_nvls_tree", "allreduce")
    code, _, err = run(capsys, "baseline", name, "allreduce", "--algo", "nccl_nvls_tree")
    assert code == 2 and err.count("\n") == 1 and "nccl_nvls_tree" in err


def test_refused_for_other_collectives_and_a_root():
    with pytest.raises(BaselineNotApplicable, match="allreduce only"):
        build(H100X2, "allgather", None, None)
    with pytest.raises(BaselineNotApplicable, match="root"):
        build(H100X2, "allreduce", 3, None)


def test_named_by_the_list_and_among_ncclss_allreduce_options(capsys):
    code, out, _ = run(capsys, "baseline", "h100x2", "allreduce", "--algo", "list")
    assert code == 0 and "nccl_nvls_tree       applies" in out
    assert "nccl_nvls_tree" in registry()


def test_exports_where_switch_entries_lower_and_one_line_where_not(tmp_path, capsys):
    path = tmp_path / "nt.json"
    assert run(capsys, "baseline", "h100x2", "allreduce", "--algo", "nccl_nvls_tree", "--chunks", "2",
               "-o", str(path))[0] == 0
    assert run(capsys, "export", str(path), "--format", "program-json", "-o", str(tmp_path / "p.json"))[0] == 0
    for fmt in ("msccl-xml", "mscclpp-json"):
        code, _, err = run(capsys, "export", str(path), "--format", fmt, "-o", str(tmp_path / f"x.{fmt}"))
        assert code == 2 and err.count("\n") == 1, err
        assert not (tmp_path / f"x.{fmt}").exists()


def _communicator(machines: int, per: int) -> Topology:
    return communicator_topology(resolve_topology("h100x5"), machines, machines * per)


@settings(max_examples=25, deadline=None)
@given(machines=st.integers(min_value=2, max_value=5), per=st.sampled_from([1, 2, 3, 4, 8]),
       pieces=st.integers(min_value=1, max_value=3))
def test_verifies_for_any_machine_count_and_ranks_per_machine(machines, per, pieces):
    topology = _communicator(machines, per)
    if per == 1:  # a one-GPU domain is still a switch of one port: NVLS needs two
        with pytest.raises(BaselineNotApplicable):
            build(topology, "allreduce", None, pieces)
        return
    s = build(topology, "allreduce", None, pieces)
    assert verify(s) == []
    lanes = per * (1 if machines == 2 else 2)
    assert s.collective.buffer_chunks == lanes * pieces
    # every lane piece: one reduce and one multicast per domain
    assert len(entries(s)) == 2 * machines * lanes * pieces


@pytest.mark.parametrize("name", ["h100x2", "h100x3"])
def test_never_faster_than_the_bounds_with_switches(name):
    from synth.bounds.lower_bounds import lower_bounds

    s = build(resolve_topology(name), "allreduce", None, 2)
    bound = lower_bounds(s.topology, s.collective)
    bound = bound.proven or bound
    assert sum(1 for step in s.steps if step.sends or step.switches) >= bound.steps
    for size in (1, 4096, 1 << 20, 1 << 30):
        assert bound.time_us(size) <= step_time_us(s, size) * (1 + 1e-9)
