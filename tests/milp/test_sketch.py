"""Sketches (synth.sketch v1): valid documents, one-line errors naming the field, the default
sketch, the router helpers, and the ``sketch`` command."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.symmetry import _is_automorphism
from synth.core.topology import Link, Topology
from synth.milp.sketch import SKETCH_SCHEMA, Intra, Relay, Rotation, Sketch, default_sketch, load_sketch, parse_sketch

HEAD = {"format": "synth.sketch", "version": 1}


def doc(**fields):
    return {**HEAD, **fields}


def topo(name: str) -> Topology:
    return resolve_topology(name)


def crossed() -> Topology:
    """Two machines of two GPUs whose fabric joins GPU 0 to GPU 1 of the other machine only."""
    pairs = [(0, 1), (1, 0), (2, 3), (3, 2), (0, 3), (3, 0), (1, 2), (2, 1)]
    return Topology("crossed", 4, tuple(Link(a, b, 10.0, 1.0) for a, b in pairs), machines=((0, 1), (2, 3)))


# ---------------------------------------------------------------- valid sketches
def test_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SKETCH_SCHEMA)


def test_full_sketch_on_dgx2x2():
    t = topo("dgx2x2")
    s = parse_sketch(doc(intra={"mode": "switch", "policy": "many-peers"}, relay={"mode": "rail", "carries": "any"},
                         chunk_up=8, symmetry={"machines": 1, "gpus": 2}, size="1G"), t)
    assert s == Sketch(Intra("switch", "many-peers"), Relay("rail"), 8, Rotation(1, 2), 1 << 30)
    assert s.intra.peer_limit is None
    perm = s.rank_rotation(t)
    assert perm[0] == 18 and perm[31] == 1 and _is_automorphism(t, perm)
    assert s.allowed_crossing(t, 5, 21) and not s.allowed_crossing(t, 5, 22)
    assert s.allowed_crossing(t, 5, 6)  # inside a machine: relay does not restrict it
    assert not s.allowed_crossing(t, 0, 0)


def test_valid_sketches_on_ndv2x2_h100x4_ndv2():
    t = topo("ndv2x2")
    s = parse_sketch(doc(relay={"mode": "pairs", "pairs": [[1, 0], [0, 1]], "carries": {"0": [0, 2], "1": [1]}},
                         chunk_up=2, size=4096), t)
    assert s.relay.pairs == ((0, 1), (1, 0)) and s.size == 4096 and s.intra == Intra()
    assert s.allowed_crossing(t, 0, 9) and not s.allowed_crossing(t, 0, 8)
    assert s.may_carry(t, 0, 2) and not s.may_carry(t, 0, 1) and not s.may_carry(t, 0, 10)
    assert not s.may_carry(t, 5, 5)  # an unlisted sender carries nothing across machines
    machine = parse_sketch(doc(relay={"mode": "any", "carries": "machine"}), t)
    assert machine.may_carry(t, 3, 0) and not machine.may_carry(t, 3, 8)

    t = topo("h100x4")
    s = parse_sketch(doc(intra={"mode": "switch", "policy": "few-peers", "peers": 3},
                         relay={"mode": "rail"}, symmetry={"machines": 3, "gpus": 5}), t)
    assert s.intra.peer_limit == 3 and s.relay == Relay("rail", "any")
    assert parse_sketch(doc(intra={"mode": "switch", "policy": "few-peers"}), t).intra.peer_limit == 1
    assert s.rank_rotation(t)[0] == 29

    t = topo("ndv2")
    s = parse_sketch(doc(symmetry={"gpus": 4}, chunk_up=4), t)
    assert s.relay is None and s.symmetry == Rotation(0, 4) and s.allowed_crossing(t, 0, 1)
    assert parse_sketch(doc(symmetry={"machines": 0, "gpus": 0}), t).rank_rotation(t) is None
    assert parse_sketch(HEAD, topo("ndv2x2")) == Sketch(relay=Relay())  # left out: no restriction


def test_pairs_on_a_topology_without_rails():
    t = crossed()
    s = parse_sketch(doc(relay={"mode": "pairs", "pairs": [[0, 1], [1, 0]]}), t)
    assert s.allowed_crossing(t, 0, 3) and not s.allowed_crossing(t, 0, 2)
    with pytest.raises(InputError, match=r"relay.pairs: \[0, 0\]: no link 0->2 from machine 0 to machine 1"):
        parse_sketch(doc(relay={"mode": "pairs", "pairs": [[0, 0]]}), t)


def test_the_examples_in_docs_are_valid():
    text = (Path(__file__).parents[2] / "docs" / "sketch.md").read_text(encoding="utf-8")
    blocks = [json.loads(b.split("```")[0]) for b in text.split("```json")[1:]]
    assert len(blocks) == 3
    parse_sketch(blocks[0], topo("dgx2x2"))
    assert parse_sketch(blocks[1], topo("dgx2x2")).intra.peer_limit == 2
    ndv2 = parse_sketch(blocks[2], topo("ndv2x2"))
    assert ndv2.may_carry(topo("ndv2x2"), 5, 6) and not ndv2.may_carry(topo("ndv2x2"), 5, 1)


# ---------------------------------------------------------------- errors name the field
@pytest.mark.parametrize("name, fields, words", [
    ("ndv2", {"intra": {"mode": "switch", "policy": "many-peers"}}, ["intra.mode", "machine 0"]),
    ("mi300x", {"intra": {"mode": "switch", "policy": "few-peers"}}, ["intra.mode", "port group"]),
    ("ndv2", {"relay": {"mode": "any"}}, ["relay:", "one machine"]),
    ("dgx2x2", {"intra": {"mode": "switch", "policy": "many-peers", "peers": 2}}, ["intra.peers", "few-peers"]),
    ("dgx2x2", {"intra": {"mode": "switch"}}, ["intra.policy", "required"]),
    ("dgx2x2", {"intra": {"mode": "links", "peers": 1}}, ["intra.peers"]),
    ("dgx2x2", {"intra": {"mode": "switch", "policy": "few-peers", "peers": 16}}, ["intra.peers", "15"]),
    ("dgx2x2", {"relay": {"mode": "any", "pairs": [[0, 1]]}}, ["relay.pairs", "'any'"]),
    ("dgx2x2", {"relay": {"mode": "pairs"}}, ["relay.pairs", "required"]),
    ("dgx2x2", {"relay": {"mode": "pairs", "pairs": [[0, 16]]}}, ["relay.pairs", "[0, 16]", "out of range"]),
    ("dgx2x2", {"relay": {"mode": "pairs", "pairs": [[0]]}}, ["relay.pairs[0]"]),
    ("dgx2x2", {"relay": {"mode": "any", "carries": {"16": [0]}}}, ["relay.carries", "16", "out of range"]),
    ("dgx2x2", {"relay": {"mode": "any", "carries": {"1": [0, 17]}}}, ["relay.carries", "17"]),
    ("dgx2x2", {"relay": {"mode": "any", "carries": {"x": [0]}}}, ["relay.carries", "'x'"]),
    ("dgx2x2", {"relay": {"mode": "any", "carries": {"1": [-1]}}}, ["relay.carries.1[0]"]),
    ("dgx2x2", {"relay": {"mode": "any", "carries": "all"}}, ["relay.carries", "'machine'"]),
    ("dgx2x2", {"relay": {"mode": "pairs", "pairs": [[0, 1]], "carries": {"1": [0]}}},
     ["relay.carries", "sender 1"]),
    ("dgx2x2", {"relay": {"mode": "ring"}}, ["relay.mode", "'rail'"]),
    ("dgx2x2", {"relay": {"mode": "any", "via": 3}}, ["relay", "unknown key 'via'"]),
    ("dgx2x2", {"relay": {}}, ["relay", "missing key 'mode'"]),
    ("dgx2x2", {"chunks": 8}, ["unknown key 'chunks'"]),
    ("dgx2x2", {"symmetry": {"gpus": 2, "ranks": 1}}, ["symmetry", "unknown key 'ranks'"]),
    ("dgx2x2", {"symmetry": {"gpus": 1}}, ["symmetry", "gpus +1", "automorphism"]),
    ("dgx2x2", {"symmetry": {"machines": 1, "gpus": 3}}, ["symmetry", "machines +1, gpus +3"]),
    ("ndv2x2", {"symmetry": {"gpus": 2}}, ["symmetry", "gpus +2"]),
    ("dgx2x2", {"symmetry": {"gpus": 16}}, ["symmetry.gpus", "16"]),
    ("dgx2x2", {"symmetry": {"machines": 2}}, ["symmetry.machines"]),
    ("ndv2", {"symmetry": {"machines": 1}}, ["symmetry.machines", "one machine"]),
    ("dgx2x2", {"symmetry": {"gpus": 2}, "relay": {"mode": "pairs", "pairs": [[0, 1]]}},
     ["symmetry.gpus", "[0, 1]", "[2, 3]"]),
    ("dgx2x2", {"symmetry": {"gpus": 2}, "relay": {"mode": "any", "carries": {"0": [0]}}},
     ["symmetry.gpus", "relay.carries"]),
    ("dgx2x2", {"size": "1Q"}, ["size", "1Q"]),
    ("dgx2x2", {"size": 0}, ["size"]),
    ("dgx2x2", {"chunk_up": 8.0}, ["chunk_up", "integer"]),
    ("dgx2x2", {"chunk_up": "8"}, ["chunk_up", "integer"]),
    ("dgx2x2", {"chunk_up": 0}, ["chunk_up", ">= 1"]),
    ("dgx2x2", {"intra": "switch"}, ["intra", "object"]),
])
def test_errors_are_one_line_naming_the_field(name, fields, words):
    with pytest.raises(InputError) as info:
        parse_sketch(doc(**fields), topo(name))
    message = str(info.value)
    assert "\n" not in message and message.startswith("sketch: ")
    for word in words:
        assert word in message, (word, message)


def test_rail_without_rail_links_and_header_errors():
    with pytest.raises(InputError, match=r"relay.mode: 'rail'.*no link 0->2"):
        parse_sketch(doc(relay={"mode": "rail"}), crossed())
    with pytest.raises(InputError, match="'format' must be"):
        parse_sketch({"format": "synth.topology", "version": 1}, topo("ndv2"))
    with pytest.raises(InputError, match="version 2"):
        parse_sketch({**HEAD, "version": 2}, topo("ndv2"))
    with pytest.raises(InputError, match="JSON object"):
        parse_sketch([], topo("ndv2"))


def test_load_sketch(tmp_path):
    t = topo("ndv2x2")
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc(relay={"mode": "rail"})))
    assert load_sketch(str(path), t).relay == Relay("rail")
    path.write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        load_sketch(str(path), t)
    with pytest.raises(InputError, match="no such file"):
        load_sketch(str(tmp_path / "missing.json"), t)
    path.write_text(json.dumps(doc(relay={"mode": "rail", "extra": 1})))
    with pytest.raises(InputError, match=r"s\.json: relay: unknown key 'extra'"):
        load_sketch(str(path), t)


# ---------------------------------------------------------------- the default sketch
@pytest.mark.parametrize("name, expected", [
    ("dgx2x2", Sketch(Intra("switch", "many-peers"), Relay("any"), 8, Rotation(1, 2))),
    ("ndv2x2", Sketch(Intra(), Relay("any"), 8, Rotation(1, 4))),
    ("h100x16", Sketch(Intra("switch", "many-peers"), Relay("rail"), 3, Rotation(1, 1))),
    ("ndv2", Sketch(Intra(), None, 6, Rotation(0, 4))),  # one small machine: the exact stage tries 1..6
    ("dgx1", Sketch(Intra(), None, 6, Rotation(0, 4))),
])
def test_default_sketch(name, expected):
    t = topo(name)
    sketch, reasons = default_sketch(t)
    assert sketch == expected
    assert [line.split(":")[0] for line in reasons] == ["intra", "relay", "chunk_up", "symmetry", "size"]
    assert parse_sketch(sketch.to_dict(), t) == sketch


def test_default_sketch_size_and_collective():
    t = topo("h100x4")
    small, reasons = default_sketch(t, "allgather", 64 << 10)
    assert small.chunk_up == 1 and small.size == 64 << 10 and "given" in reasons[-1]
    assert default_sketch(topo("h100x8"), None, 1 << 30)[0].chunk_up == 4
    rooted, reasons = default_sketch(t, "broadcast")
    assert rooted.symmetry is None and "rooted" in reasons[3]
    assert default_sketch(t, "alltoallv:moe.json")[0].symmetry is None
    with pytest.raises(InputError, match="unknown collective"):
        default_sketch(t, "allgathr")
    assert default_sketch(crossed())[0].relay == Relay("any")


def test_describe():
    relay = Relay("pairs", ((0, (0, 1)),), ((0, 1),))
    lines = Sketch(Intra("switch", "few-peers"), relay, 2, Rotation(1, 0)).describe()
    assert lines == ["intra: switch, few-peers (at most 1 peer(s) per GPU per step)",
                     "relay: pairs 0->1, carries 0: [0, 1]", "chunk_up: 2",
                     "symmetry: machines +1, gpus +0", "size: 1G"]


# ---------------------------------------------------------------- round trip (property)
@st.composite
def sketch_docs(draw):
    name = draw(st.sampled_from(["ndv2x2", "dgx2x2", "h100x4"]))
    t = topo(name)
    size = t.ranks // t.machine_count
    out = dict(HEAD)
    if name != "ndv2x2" and draw(st.booleans()):
        policy = draw(st.sampled_from(["few-peers", "many-peers"]))
        out["intra"] = {"mode": "switch", "policy": policy}
        if policy == "few-peers" and draw(st.booleans()):
            out["intra"]["peers"] = draw(st.integers(1, size - 1))
    elif draw(st.booleans()):
        out["intra"] = {"mode": "links"}
    index = st.integers(0, size - 1)
    mode = draw(st.sampled_from(["rail", "any", "pairs", None]))
    senders = list(range(size))
    if mode is not None:
        out["relay"] = {"mode": mode}
        if mode == "pairs":
            pairs = draw(st.lists(st.tuples(index, index), min_size=1, max_size=4, unique=True))
            out["relay"]["pairs"] = [list(p) for p in pairs]
            senders = sorted({i for i, _ in pairs})
        carries = draw(st.one_of(st.sampled_from(["any", "machine", None]),
                                 st.dictionaries(st.sampled_from(senders).map(str),
                                                 st.lists(index, unique=True, max_size=3), max_size=3)))
        if carries is not None:
            out["relay"]["carries"] = carries
    restricted = mode == "pairs" or isinstance(out.get("relay", {}).get("carries"), dict)
    offsets = [(k, g) for k, g in _offsets(name) if not restricted or g == 0]
    if draw(st.booleans()):
        k, g = draw(st.sampled_from(offsets))
        out["symmetry"] = {"machines": k, "gpus": g}
    if draw(st.booleans()):
        out["chunk_up"] = draw(st.integers(1, 16))
    if draw(st.booleans()):
        out["size"] = draw(st.one_of(st.integers(1, 1 << 40), st.sampled_from(["1K", "1.5M", "3G", "64"])))
    return t, out


@functools.lru_cache(maxsize=None)
def _offsets(name: str) -> list[tuple[int, int]]:
    """(machines, gpus) offsets whose rotation is an automorphism of topology ``name``."""
    t = topo(name)
    size = t.ranks // t.machine_count

    def rotation(k, g):
        return Sketch(symmetry=Rotation(k, g)).rank_rotation(t) or tuple(range(t.ranks))

    return [(k, g) for k in range(t.machine_count) for g in range(size) if _is_automorphism(t, rotation(k, g))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sketch_docs())
def test_round_trip(case):
    t, document = case
    sketch = parse_sketch(document, t)
    again = parse_sketch(json.loads(json.dumps(sketch.to_dict())), t)
    assert again == sketch and again.to_dict() == sketch.to_dict()


# ---------------------------------------------------------------- the command line
def cli(capsys, *argv):
    from synth.cli.main import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_show_and_check(capsys, tmp_path):
    code, out, _ = cli(capsys, "sketch", "show", "dgx2x2")
    assert code == 0 and "intra: switch, many-peers" in out and "symmetry: machines +1, gpus +2" in out
    code, out, _ = cli(capsys, "sketch", "show", "h100x4", "--size", "64K", "--collective", "broadcast", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["chunk_up"] == 1 and "symmetry" not in shown and shown["size"] == "64K"
    path = tmp_path / "s.json"
    path.write_text(out)
    code, out, _ = cli(capsys, "sketch", "check", str(path), "h100x4")
    assert code == 0 and out.startswith("ok: ") and "relay: any" in out
    code, out, err = cli(capsys, "sketch", "check", str(path), "dgx1")
    assert code == 2 and not out and "intra.mode" in err and err.count("\n") == 1
    code, _, err = cli(capsys, "sketch", "show", "dgx2x2", "--size", "lots")
    assert code == 2 and "bad size" in err
