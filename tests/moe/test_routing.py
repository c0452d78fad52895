"""Routing documents: what is accepted, every bad input as one line naming the field and token."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.core.errors import InputError
from synth.core.routing import Routing, load_routing, routing_from_doc
from tests.cli_run import run


def doc(**change):
    base = {"format": "synth.routing", "version": 1, "ranks": 4, "token_bytes": 64,
            "experts": [0, 1, 2, 3], "tokens": [[[0, 1], [2]], [[3]], [], [[0, 2, 3]]]}
    return {**base, **change}


def test_a_routing_reads_as_arrays():
    r = routing_from_doc(doc(), "r.json")
    assert r.tokens == 4 and r.offsets.tolist() == [0, 2, 3, 3, 4]
    token, rank = r.destination_pairs()
    assert list(zip(token.tolist(), rank.tolist())) == [(0, 0), (0, 1), (1, 2), (2, 3), (3, 0), (3, 2), (3, 3)]
    dispatch, combine = r.collective("moe_dispatch"), r.collective("moe_combine")
    assert dispatch.pre[3] == {3} and dispatch.post[3] == {0, 2, 3} and not dispatch.combining
    assert combine.pre[3] == {0, 2, 3} and combine.post[3] == {3} and combine.combining
    assert dispatch.buffer_chunks == 2 and dispatch.size_bytes == 128


@pytest.mark.parametrize("change, words", [
    ({"format": "synth.traffic"}, ["format", "synth.routing"]),
    ({"version": 2}, ["version"]),
    ({"version": True}, ["version"]),
    ({"token_bytes": -4}, ["token_bytes", "-4"]),
    ({"token_bytes": 1.5}, ["token_bytes", "1.5"]),
    ({"ranks": 0}, ["ranks"]),
    ({"experts": [0, 1, 7, 3]}, ["experts[2]", "rank 7", "does not exist"]),
    ({"experts": [0, 1, -1, 3]}, ["experts[2]", "-1"]),
    ({"tokens": [[[0, 1], [9]], [[3]], [], [[0]]]}, ["tokens[0][1][0]", "9", "out of range"]),
    ({"tokens": [[[0, 1]], [[3, 1, 3]], [], []]}, ["tokens[1][0][2]", "expert 3", "twice"]),
    ({"tokens": [[[0, 1]], [[]], [], []]}, ["tokens[1][0]", "non-empty"]),
    ({"tokens": [[[0, 1]], [[2.0]], [], []]}, ["tokens[1][0][0]", "integers"]),
    ({"tokens": [[[0, 1]], [], []]}, ["one list per rank", "4"]),
])
def test_bad_documents_are_one_line_naming_the_field(change, words):
    with pytest.raises(InputError) as caught:
        routing_from_doc(doc(**change), "r.json")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("r.json")
    for word in words:
        assert word in message, (word, message)


def test_missing_fields_are_named():
    broken = doc()
    del broken["experts"]
    with pytest.raises(InputError, match="missing field.*experts"):
        routing_from_doc(broken, "r.json")


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_documents_round_trip(data):
    ranks = data.draw(st.integers(1, 6))
    experts = data.draw(st.lists(st.integers(0, ranks - 1), min_size=1, max_size=8))
    token = st.lists(st.integers(0, len(experts) - 1), min_size=1, max_size=len(experts), unique=True)
    tokens = [data.draw(st.lists(token, max_size=4)) for _ in range(ranks)]
    if not any(tokens):
        tokens[0] = [[0]]
    routing = routing_from_doc(doc(ranks=ranks, experts=experts, tokens=tokens), "r")
    again = routing_from_doc(json.loads(json.dumps(routing.to_doc())), "r")
    for field in ("experts", "token_source", "expert_ptr", "expert_ids"):
        assert np.array_equal(getattr(routing, field), getattr(again, field))
    token_ids, ranks_needed = routing.destination_pairs()
    for t, r in zip(token_ids.tolist(), ranks_needed.tolist()):  # every destination hosts one of its experts
        ids = routing.expert_ids[routing.expert_ptr[t]:routing.expert_ptr[t + 1]]
        assert r in set(routing.experts[ids].tolist())


def test_commands_refuse_a_bad_routing_in_one_line_and_write_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc(ranks=16, experts=list(range(16)), tokens=[[[0, 99]]] + [[]] * 15)))
    out = tmp_path / "out.json"
    for argv in (["solve", "h100x2", f"moe_dispatch:{bad}", "--backend", "greedy", "-o", str(out)],
                 ["baseline", "h100x2", f"moe_combine:{bad}", "--algo", "deepep", "-o", str(out)],
                 ["bounds", "h100x2", f"moe_dispatch:{bad}"]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "tokens[0][0][1]" in err and len(err.strip().splitlines()) == 1, err
        assert "Traceback" not in err and not out.exists()


def test_a_rank_count_unlike_the_topology_is_refused(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc()))
    code, _, err = run(capsys, "bounds", "h100x2", f"moe_dispatch:{path}")
    assert code == 2 and "'ranks' is 4" in err and "16" in err


def test_load_routing_names_a_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_routing(tmp_path / "none.json")


def test_routing_of_builds_from_fields():
    r = Routing.of(2, 8, [1, 0], [[[0], [1]], [[0, 1]]])
    assert r.tokens_per_rank.tolist() == [2, 1]


def test_synth_report_writes_a_routing_report(tmp_path, capsys):
    from synth.moe.generate import make_routing

    path = tmp_path / "r.json"
    path.write_text(json.dumps(make_routing(16, 32, 4, 20, 4096, "uniform", seed=1, imbalance=2.0).to_doc()))
    out = tmp_path / "report"
    code, stdout, err = run(capsys, "report", "h100x2", f"moe_combine:{path}", "-o", str(out))
    assert code == 0, err
    doc = json.loads((out / "report.json").read_text())
    assert [row["method"] for row in doc["methods"]] == ["planner", "router", "deepep", "direct"]
    assert all(row["time_us"] >= doc["bound_us"] * (1 - 1e-9) for row in doc["methods"])
    assert doc["speedups"]["router over deepep"] >= 1.0 and "router:" in stdout
    assert len(list((out / "schedules").glob("*.schedule.json.gz"))) == 4
    code, _, err = run(capsys, "report", "h100x2", f"moe_combine:{path}", "--sizes", "1M", "-o", str(tmp_path / "x"))
    assert code == 2 and "fixes its size" in err and not (tmp_path / "x").exists()


def test_export_writes_a_program_and_refuses_msccl_formats(tmp_path, capsys):
    from synth.moe.generate import make_routing

    path = tmp_path / "r.json"
    path.write_text(json.dumps(make_routing(16, 32, 4, 6, 65536, "uniform", seed=3).to_doc()))
    schedule = tmp_path / "s.json"
    assert run(capsys, "baseline", "h100x2", f"moe_combine:{path}", "--algo", "deepep", "-o", str(schedule))[0] == 0
    code, _, err = run(capsys, "export", str(schedule), "--format", "program-json", "-o", str(tmp_path / "p.json"))
    doc = json.loads((tmp_path / "p.json").read_text())
    assert code == 0 and doc["collective"] == "moe_combine" and len(doc["gpus"]) == 16
    for fmt in ("msccl-xml", "mscclpp-json"):
        code, _, err = run(capsys, "export", str(schedule), "--format", fmt, "-o", str(tmp_path / "x"))
        assert code == 2 and "no moe_combine collective" in err and not (tmp_path / "x").exists()
