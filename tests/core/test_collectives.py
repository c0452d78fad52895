"""Collective builders and their checks."""

from __future__ import annotations

import json

import pytest

from synth.core.collective import Collective
from synth.core.collectives import known_names, make_collective
from synth.core.errors import CollectiveError, InputError
from synth.core.topology import Link, Topology


@pytest.mark.parametrize(
    "name, chunks, buffer, combining",
    [
        ("allgather", 8, 8, False),
        ("reduce_scatter", 8, 8, True),
        ("allreduce", 8, 8, True),
        ("alltoall", 64, 8, False),
        ("broadcast", 1, 1, False),
        ("reduce", 1, 1, True),
        ("gather", 8, 8, False),
        ("scatter", 8, 8, False),
    ],
)
def test_builders_follow_nccl_sizes(name, chunks, buffer, combining):
    coll = make_collective(name, 8)
    assert (coll.chunks, coll.buffer_chunks, coll.combining) == (chunks, buffer, combining)


def test_chunking_and_roots():
    ag = make_collective("allgather", 4, chunks=3)
    assert ag.chunks == 12 and ag.pre[5] == {1}
    b = make_collective("broadcast", 4, root=2, chunks=2)
    assert b.pre == (frozenset({2}),) * 2 and b.root == 2
    assert make_collective("scatter", 4, root=1).post[3] == {3}
    with pytest.raises(CollectiveError, match="root 7 out of range"):
        make_collective("reduce", 4, root=7)
    with pytest.raises(InputError, match="has no root"):
        make_collective("allgather", 4, root=1)


def test_unknown_names_list_the_known_ones():
    with pytest.raises(InputError) as err:
        make_collective("allgatherr", 4)
    assert "allgather" in str(err.value) and "alltoallv" in str(err.value)


def test_alltoallv_from_matrix_file(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps([[0, 3, 1], [1, 0, 0], [2, 2, 0]]))
    coll = make_collective(f"alltoallv:{path}", 3)
    assert coll.chunks == 9 and coll.buffer_chunks == 4 and coll.post[0] == {1}
    path.write_text(json.dumps([[0, -1], [0, 0]]))
    with pytest.raises(CollectiveError, match="non-negative"):
        make_collective(f"alltoallv:{path}", 2)
    with pytest.raises(InputError, match="needs a file"):
        make_collective("alltoallv", 3)


def test_custom_file_and_rank_mismatch(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"format": "synth.collective", "version": 1, "name": "pairs", "ranks": 2,
                                "combining": False, "pre": [[0]], "post": [[1]]}))
    assert make_collective(f"custom:{path}", 2).post == (frozenset({1}),)
    with pytest.raises(CollectiveError, match="for 2 ranks"):
        make_collective(f"custom:{path}", 3)


def test_impossible_collective_names_unreachable_ranks():
    one_way = Topology("split", 3, (Link(0, 1, 25.0), Link(1, 0, 25.0), Link(2, 0, 25.0)))
    with pytest.raises(CollectiveError) as err:
        make_collective("allgather", 3).check_on(one_way)
    assert "ranks 2" in str(err.value)


def test_malformed_collectives():
    with pytest.raises(CollectiveError, match="out of range"):
        Collective("x", 2, False, (frozenset({0}),), (frozenset({5}),), 1)
    with pytest.raises(CollectiveError, match="held by no rank"):
        Collective("x", 2, False, (frozenset(),), (frozenset({1}),), 1)
    assert "custom" in known_names()
