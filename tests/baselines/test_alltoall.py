"""Personalised-exchange baselines: direct (alltoall, alltoallv, scatter, gather) and Bruck."""

from __future__ import annotations

import json

import pytest

from synth.baselines import BaselineNotApplicable
from synth.baselines.alltoall import (
    BASELINES,
    bruck,
    bruck_alltoall_phases,
    bruck_schedule,
    direct,
    direct_schedule,
)
from synth.core.collectives import allgather, alltoall, alltoallv
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.verify import verify
from tests.baselines.test_trees import TOPOLOGIES, hand_dgx1

SPECS = TOPOLOGIES + ["full:7", "ring:5"]


@pytest.fixture(scope="module", params=range(len(SPECS) + 1), ids=SPECS + ["hand-dgx1"])
def topo(request):
    return ([resolve_topology(spec) for spec in SPECS] + [hand_dgx1()])[request.param]


@pytest.mark.parametrize("chunks", [None, 2])
def test_direct_verifies(topo, chunks):
    for name in ("alltoall", "scatter", "gather"):
        root = None if name == "alltoall" else topo.ranks - 1
        schedule = direct(topo, name, root, chunks)
        assert verify(schedule) == []
        assert schedule.meta["algorithm"] == "direct" and schedule.meta["pieces"] == (chunks or 1)
        assert schedule.collective.name == name


@pytest.mark.parametrize("chunks", [None, 2])
def test_bruck_verifies(topo, chunks):
    for name in ("alltoall", "allgather"):
        schedule = bruck(topo, name, None, chunks)
        assert verify(schedule) == []
        assert schedule.meta["phases"] == (topo.ranks - 1).bit_length()
        assert schedule.meta["algorithm"] == "bruck" and schedule.meta["pieces"] == (chunks or 1)


def test_step_counts_on_full_meshes():
    assert len(bruck(resolve_topology("full:8"), "alltoall", None, None).steps) == 3
    assert len(bruck(resolve_topology("full:8"), "allgather", None, None).steps) == 3
    one = direct(resolve_topology("full:4"), "alltoall", None, None)
    assert len(one.steps) == 1 and one.steps[0].rounds == 1


def test_bruck_moves_each_block_along_its_offset_bits():
    n = 6
    moves = {}
    for phase in bruck_alltoall_phases(n, 1):
        for t in phase:
            moves.setdefault(t.chunk, []).append((t.dst - t.src) % n)
    for src in range(n):
        for dst in range(n):
            assert sum(moves.get(src * n + dst, [])) == (dst - src) % n


SKEWED = [
    [0, 6, 0, 1],
    [1, 0, 0, 0],
    [3, 2, 0, 4],
    [0, 0, 1, 0],
]


def test_alltoallv_skewed_matrix():
    for spec in ("full:4", "ring:4", "star:4", "uring:4"):
        schedule = direct_schedule(resolve_topology(spec), alltoallv(SKEWED))
        assert verify(schedule) == []
        assert schedule.collective.name == "alltoallv"
        assert schedule.collective.buffer_chunks == 9


def test_alltoallv_by_file_name(tmp_path):
    path = tmp_path / "traffic.json"
    path.write_text(json.dumps({"format": "synth.traffic", "version": 1, "chunks": SKEWED}))
    schedule = direct(resolve_topology("ring:4"), f"alltoallv:{path}", None, None)
    assert verify(schedule) == []
    assert schedule.collective.chunks == sum(map(sum, SKEWED))


def test_bare_alltoallv_asks_for_a_matrix():
    with pytest.raises(BaselineNotApplicable, match="traffic matrix"):
        direct(resolve_topology("full:4"), "alltoallv", None, None)


def test_objects_and_mismatches():
    full4 = resolve_topology("full:4")
    assert verify(bruck_schedule(full4, alltoall(4, 3))) == []
    assert verify(direct_schedule(full4, allgather(4))) == []
    with pytest.raises(InputError):
        direct_schedule(full4, alltoall(5))
    with pytest.raises(BaselineNotApplicable):
        bruck_schedule(full4, alltoallv(SKEWED))


def test_bad_arguments():
    full4 = resolve_topology("full:4")
    for root in (4, -1, "0"):
        with pytest.raises(InputError):
            direct(full4, "scatter", root, None)
    with pytest.raises(InputError):
        direct(full4, "alltoall", 1, None)
    with pytest.raises(InputError):
        bruck(full4, "alltoall", None, -2)
    with pytest.raises(BaselineNotApplicable):
        bruck(full4, "broadcast", None, None)
    with pytest.raises(BaselineNotApplicable):
        direct(full4, "allgather", None, None)


def test_baseline_entries():
    names = {b.name: b for b in BASELINES}
    assert names["direct"].collectives == {"alltoall", "alltoallv", "scatter", "gather", "moe_dispatch", "moe_combine"}
    assert names["bruck"].collectives == {"alltoall", "allgather"}
