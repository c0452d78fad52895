"""nccl_pat: NCCL's PAT allgather / reduce-scatter (reversed-dimension Bruck), one GPU per machine."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import synth.baselines
from synth.baselines import BaselineNotApplicable
from synth.baselines.nccl_pat import BASELINES, build, pat_phases
from synth.baselines.trees import binomial_phases
from synth.cli.main import main
from synth.core.compose import compose_machines
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.topology import Link, Nic, Topology
from synth.verify import verify


def one_gpu_machines(k: int) -> Topology:
    """k machines of one GPU joined through one 50 GB/s NIC each (a composition)."""
    base = Topology("gpu1", 1, (), machines=((0,),), nics=(Nic("nic0", (0,), 50.0, 2.0),))
    return compose_machines(base, k)


def mesh_of_machines(k: int, missing: tuple[tuple[int, int], ...] = ()) -> Topology:
    """A full mesh whose ranks are machines of their own, maybe with some links left out."""
    links = tuple(Link(a, b, 25.0, 1.0) for a in range(k) for b in range(k) if a != b and (a, b) not in missing)
    return Topology(f"mesh{k}", k, links, machines=tuple((r,) for r in range(k)))


# ---------------------------------------------------------------------------- the tree shape
@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=2, max_value=40))
def test_every_block_reaches_every_offset_once_far_hops_first(n):
    edges = binomial_phases(n)
    assert len(edges) == (n - 1).bit_length()
    reached = Counter(b for step in edges for _, b in step)
    assert sorted(reached) == list(range(1, n)) and set(reached.values()) == {1}
    held = {0}
    for step, distance in zip(edges, [1 << d for d in range(len(edges) - 1, -1, -1)]):
        assert all(a in held and b - a == distance for a, b in step)  # senders hold the block
        held |= {b for _, b in step}
    assert [len(step) for step in edges][-1] == n // 2  # the neighbour step carries half


def test_phases_send_each_rank_one_block_per_far_step():
    phases = pat_phases(8, 1)
    assert [len(p) for p in phases] == [8, 16, 32]
    for phase, distance in zip(phases, (4, 2, 1)):
        assert all((t.src - t.dst) % 8 == distance for t in phase)


# ---------------------------------------------------------------------------- schedules
@pytest.mark.parametrize("k", [2, 3, 5, 8, 16])
@pytest.mark.parametrize("name", ["allgather", "reduce_scatter"])
def test_composition_verifies_in_log_steps(k, name):
    topo = one_gpu_machines(k)
    schedule = build(topo, name, None, None)
    assert verify(schedule) == []
    assert schedule.collective.name == name and schedule.meta["algorithm"] == "nccl_pat"
    assert len(schedule.steps) == (k - 1).bit_length() == schedule.meta["phases"]
    assert schedule.meta["routed_pairs"] == 0
    assert {s.op for step in schedule.steps for s in step.sends} == {"copy" if name == "allgather" else "reduce"}


@pytest.mark.parametrize("name", ["allgather", "reduce_scatter"])
def test_chunks_per_rank(name):
    schedule = build(mesh_of_machines(6), name, None, 3)
    assert verify(schedule) == [] and schedule.collective.chunks_per_rank == 3
    assert schedule.send_count == 6 * 5 * 3  # every rank receives (or reduces) each block once


@pytest.mark.parametrize("name", ["allgather", "reduce_scatter"])
def test_missing_links_are_relayed(name):
    schedule = build(mesh_of_machines(5, missing=((4, 0), (0, 4), (1, 0))), name, None, None)
    assert verify(schedule) == []
    assert schedule.meta["routed_pairs"] > 0 and "routed" in schedule.meta["note"]
    assert len(schedule.steps) > schedule.meta["phases"]


# ---------------------------------------------------------------------------- not applicable
@pytest.mark.parametrize("spec", ["dgx1", "ndv2x2", "h100x4", "full:4"])
def test_needs_one_gpu_per_machine(spec):
    with pytest.raises(BaselineNotApplicable, match=r"PAT needs one GPU per machine \(NCCL enables it only then\)"):
        build(resolve_topology(spec), "allgather", None, None)


def test_no_machines_means_one_machine():
    links = tuple(Link(a, b, 25.0) for a in range(3) for b in range(3) if a != b)
    with pytest.raises(BaselineNotApplicable, match="one GPU per machine"):
        build(Topology("bare", 3, links), "reduce_scatter", None, None)


@pytest.mark.parametrize("name", ["allreduce", "alltoall", "broadcast"])
def test_other_collectives(name):
    with pytest.raises(BaselineNotApplicable, match="allgather and reduce_scatter"):
        build(one_gpu_machines(4), name, None, None)


@pytest.mark.parametrize("root, chunks", [(0, None), (None, 0), (None, -2), (None, 1.5)])
def test_bad_arguments(root, chunks):
    with pytest.raises(InputError):
        build(one_gpu_machines(4), "allgather", root, chunks)


def test_one_rank():
    lonely = Topology("lonely", 1, (), machines=((0,),))
    with pytest.raises(BaselineNotApplicable):
        build(lonely, "allgather", None, None)


def test_registry_entry():
    (entry,) = BASELINES
    assert entry.name == "nccl_pat" and not entry.sized
    assert entry.collectives == frozenset({"allgather", "reduce_scatter"})


def test_cli_not_applicable_is_one_line(capsys, monkeypatch, tmp_path):
    from synth.baselines import nccl_pat

    table = {**synth.baselines.registry(), **{e.name: e for e in nccl_pat.BASELINES}}
    monkeypatch.setattr(synth.baselines, "registry", lambda: table)
    assert main(["baseline", "dgx1", "allgather", "--algo", "nccl_pat"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "one GPU per machine" in err
    path = tmp_path / "mesh.json"
    path.write_text(json.dumps(one_gpu_machines(4).to_dict()))
    assert main(["baseline", str(path), "reduce_scatter", "--algo", "nccl_pat", "-o", str(tmp_path / "s.json")]) == 0
