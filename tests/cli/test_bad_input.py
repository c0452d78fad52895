"""Every bad input is a clear error: every command that reads a file, over every kind of malformed
file, exits 2 with one line on stderr that names the file, no traceback, and writes nothing.

The malformed files are generated here (in tmp_path), from a valid document of the kind each
command reads, so that a wrong ``version`` or a NaN is the only thing wrong with them.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from synth.cli.main import main

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
HUGE = "9" * 400  # an integer that fits no machine word
BILLION = 1_000_000_000


@lru_cache(maxsize=None)
def _valid(kind: str) -> str:
    """JSON text of a valid document of ``kind`` (XML text for ``xml``)."""
    from synth.baselines import build_baseline
    from synth.core.collectives import allgather
    from synth.core.generators import ring
    from synth.core.library import resolve_topology
    from synth.milp.sketch import default_sketch

    if kind == "xml":
        return (GOLDEN / "ring4_allgather.executor.xml").read_text()
    if kind == "program":
        return (GOLDEN / "ring4_allgather.program.json").read_text()
    if kind == "topology":
        doc = ring(4).to_dict()
    elif kind == "schedule":
        doc = build_baseline(ring(4), "ring", "allgather", None, None).to_dict()
    elif kind == "collective":
        doc = {"format": "synth.collective", "version": 1, **allgather(4).to_dict()}
    elif kind == "traffic":
        doc = {"format": "synth.traffic", "version": 1, "chunks": [[int(s != d) for d in range(4)] for s in range(4)]}
    elif kind == "sketch":
        doc = default_sketch(resolve_topology("dgx1"))[0].to_dict()
    elif kind == "frontier":
        doc = {"topology": "ring4", "collective": "allgather", "complete": True, "bounds": {"steps": 2},
               "points": [], "attempts": []}
    elif kind == "selection":
        doc = {"format": "synth.selection", "version": 1, "topology": "ring4", "collective": "allgather",
               "ranges": [{"min_bytes": 0, "max_bytes": None, "schedule": "schedules/ring.schedule.json",
                           "label": "ring", "protocol": "simple"}]}
    else:
        raise ValueError(kind)
    return json.dumps(doc)


def _doc(kind: str) -> dict:
    return json.loads(_valid(kind))


def _with_number(kind: str, literal: str) -> str:
    """The valid document of ``kind`` with one number replaced by the JSON text ``literal``."""
    doc, marker = _doc(kind), "@@NUMBER@@"
    if kind == "topology":
        doc["links"][0]["bandwidth"] = marker
    elif kind == "schedule":
        doc["topology"]["links"][0]["bandwidth"] = marker
    elif kind == "collective":
        doc["buffer_chunks"] = marker
    elif kind == "traffic":
        doc["chunks"][0][1] = marker
    elif kind == "sketch":
        doc["chunk_up"] = marker
    elif kind == "program":
        doc["min_bytes"] = marker
    elif kind == "frontier":
        doc["bounds"]["steps"] = marker
    elif kind == "selection":
        doc["ranges"][0]["min_bytes"] = marker
    return json.dumps(doc).replace(json.dumps(marker), literal)


def _with_big_int(kind: str) -> str:
    """A 400-digit integer where the document wants a small one (ranks, a link's src, a count)."""
    if kind == "topology":
        doc = _doc(kind)
        doc["links"][0]["src"] = "@@NUMBER@@"
        return json.dumps(doc).replace('"@@NUMBER@@"', HUGE)
    if kind == "schedule":
        doc = _doc(kind)
        doc["topology"]["ranks"] = "@@NUMBER@@"
        return json.dumps(doc).replace('"@@NUMBER@@"', HUGE)
    return _with_number(kind, HUGE)


def _billion_ranks(kind: str, links: bool) -> str | None:
    """A billion ranks (or chunks, or pieces per rank) that must be refused before anything is built."""
    if kind in ("xml", "frontier", "selection") or (kind == "sketch" and not links):
        return None
    doc = _doc(kind)
    if kind == "sketch":
        doc["chunk_up"] = BILLION
        return json.dumps(doc)
    if kind == "topology":
        target = doc
    elif kind == "schedule":
        target = doc["topology"]
    elif kind in ("collective", "program"):
        doc["ranks"] = BILLION
        return json.dumps(doc) if links else None
    else:  # traffic: a billion chunks from rank 0 to rank 1
        doc["chunks"][0][1] = BILLION
        return json.dumps(doc) if links else None
    target["ranks"] = BILLION
    if not links:
        target["links"] = []
        target.pop("groups", None)
    target.pop("machines", None)
    return json.dumps(doc)


def _rank_out_of_range(kind: str) -> str | None:
    """A document that parses but that validation refuses: a link or a chunk names rank 99 of 4."""
    doc = _doc(kind) if kind in ("topology", "schedule", "collective") else None
    if kind == "topology":
        doc["links"][0]["dst"] = 99
    elif kind == "schedule":
        doc["topology"]["links"][0]["dst"] = 99
    elif kind == "collective":
        doc["pre"][0] = [99]
    return None if doc is None else json.dumps(doc)


def _with_field(kind: str, key: str, value) -> str | None:
    if kind in ("xml", "frontier"):
        return None
    doc = _doc(kind)
    doc[key] = value
    return json.dumps(doc)


def _deep_field(kind: str) -> str | None:
    """A valid document plus a key whose value is nested 900 levels deep (within Python's recursion limit)."""
    if kind == "xml":
        return None
    return '{"deep": ' + "[" * 900 + "]" * 900 + ", " + _valid(kind).lstrip()[1:]


def _truncated(kind: str) -> str:
    text = _valid(kind)
    return text[: len(text) // 2]


TRUNCATED_XML = ('<algo name="a" proto="Simple" nchannels="1" nchunksperloop="4" ngpus="4" coll="allgather" '
                 'inplace="0">\n  <gpu id="0" i_chunks="1" o_')

# name -> content builder: the kind of file a command reads -> text or bytes, "DIRECTORY", "MISSING",
# or None where the malformation does not apply to that kind
MALFORMED = {
    "empty": lambda kind: b"",
    "binary": lambda kind: bytes(range(256)) * 4,
    "truncated-json": lambda kind: None if kind == "xml" else _truncated(kind),
    "truncated-xml": lambda kind: _truncated(kind) if kind == "xml" else TRUNCATED_XML,
    "not-an-object": lambda kind: None if kind == "xml" else "[1, 2, 3]",
    "nan": lambda kind: None if kind == "xml" else _with_number(kind, "NaN"),
    "infinity": lambda kind: None if kind == "xml" else _with_number(kind, "Infinity"),
    "-infinity": lambda kind: None if kind == "xml" else _with_number(kind, "-Infinity"),
    "1e999": lambda kind: None if kind == "xml" else _with_number(kind, "1e999"),
    "400-digits": lambda kind: None if kind == "xml" else _with_big_int(kind),
    "nested-100000": lambda kind: ('<algo name="a">' + "<gpu>" * 100000) if kind == "xml" else "[" * 100000,
    "nested-900": _deep_field,
    "rank-out-of-range": _rank_out_of_range,
    "billion-ranks": lambda kind: _billion_ranks(kind, links=True),
    "billion-ranks-no-links": lambda kind: _billion_ranks(kind, links=False),
    "wrong-format": lambda kind: (_valid("topology") if kind == "frontier"
                                  else _with_field(kind, "format", "synth.nonsense")),
    "version-3": lambda kind: _with_field(kind, "version", 3),  # topologies and schedules read 1 and 2
    "version-string": lambda kind: _with_field(kind, "version", "1"),
    "version-true": lambda kind: _with_field(kind, "version", True),
    "version-1.0": lambda kind: _with_field(kind, "version", 1.0),
    "directory": lambda kind: "DIRECTORY",
    "missing": lambda kind: "MISSING",
}

# command name -> (kind of file it reads, file suffix, argv builder(file, out folder))
COMMANDS = {
    "topo show": ("topology", ".json", lambda f, o: ["topo", "show", f]),
    "coll show custom": ("collective", ".json", lambda f, o: ["coll", "show", f"custom:{f}"]),
    "coll show alltoallv": ("traffic", ".json", lambda f, o: ["coll", "show", f"alltoallv:{f}"]),
    "verify": ("schedule", ".json", lambda f, o: ["verify", f]),
    "cost": ("schedule", ".json", lambda f, o: ["cost", f]),
    "bounds topo": ("topology", ".json", lambda f, o: ["bounds", f, "allgather"]),
    "bounds custom": ("collective", ".json", lambda f, o: ["bounds", "ring:4", f"custom:{f}"]),
    "bounds alltoallv": ("traffic", ".json", lambda f, o: ["bounds", "ring:4", f"alltoallv:{f}"]),
    "baseline": ("topology", ".json",
                 lambda f, o: ["baseline", f, "allgather", "--algo", "ring", "-o", f"{o}/out.json"]),
    "solve": ("topology", ".json",
              lambda f, o: ["solve", f, "allgather", "--steps", "2", "-o", f"{o}/out.json"]),
    "solve milp sketch": ("sketch", ".json",
                          lambda f, o: ["solve", "dgx2x2", "allgather", "--backend", "milp", "--sketch", f,
                                        "-o", f"{o}/out.json"]),
    "least-steps": ("topology", ".json", lambda f, o: ["least-steps", f, "allgather", "-o", f"{o}/out.json"]),
    "pareto": ("topology", ".json", lambda f, o: ["pareto", f, "allgather", "-o", f"{o}/frontier"]),
    "sketch check": ("sketch", ".json", lambda f, o: ["sketch", "check", f, "dgx1"]),
    "export": ("schedule", ".json",
               lambda f, o: ["export", f, "--format", "msccl-xml", "-o", f"{o}/out.xml"]),
    "export selection": ("selection", ".json",
                         lambda f, o: ["export", f, "--format", "msccl-xml", "-o", f"{o}/algos"]),
    "check xml": ("xml", ".xml", lambda f, o: ["check", f]),
    "check json": ("program", ".json", lambda f, o: ["check", f]),
    "run schedule": ("schedule", ".json", lambda f, o: ["run", f, "--iters", "0"]),
    "run xml": ("xml", ".xml", lambda f, o: ["run", f, "--iters", "0"]),
    "run program": ("program", ".json", lambda f, o: ["run", f, "--iters", "0"]),
    "report frontier": ("frontier", "", lambda f, o: ["report", "ring:4", "allgather", "--from", f,
                                                      "-o", f"{o}/report"]),
    "report schedule": ("schedule", "", lambda f, o: ["report", "ring:4", "allgather", "--from", f,
                                                      "-o", f"{o}/report"]),
}


def _cases():
    for command, (kind, _, _) in COMMANDS.items():
        for name, build in MALFORMED.items():
            if build(kind) is not None:
                yield pytest.param(command, name, id=f"{command}-{name}")


def _place(path: Path, content) -> None:
    if content == "DIRECTORY":
        path.mkdir()
    elif content == "MISSING":
        pass
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))


def _make_input(tmp_path: Path, command: str, malformed: str) -> tuple[str, str]:
    """(the argument naming the input, the text stderr must contain to name the file)."""
    kind, suffix, _ = COMMANDS[command]
    content = MALFORMED[malformed](kind)
    if command == "report frontier":  # a 'synth pareto -o DIR' folder whose frontier.json is bad
        folder = tmp_path / "frontier-dir"
        folder.mkdir()
        _place(folder / "frontier.json", content)
        return str(folder), "frontier.json"
    if command == "report schedule":  # a good frontier.json naming a bad schedule file
        folder = tmp_path / "frontier-dir"
        folder.mkdir()
        name = "allgather.ring4.s2-r2-c1.schedule.json"
        point = {"steps": 2, "rounds": 2, "chunks": 1, "schedule": name, "solve_seconds": 0.1}
        frontier = {**_doc("frontier"), "points": [point]}
        (folder / "frontier.json").write_text(json.dumps(frontier))
        _place(folder / name, content)
        return str(folder), name
    path = tmp_path / f"bad-{malformed}{suffix}"
    _place(path, content)
    return str(path), path.name


@pytest.mark.parametrize("command, malformed", list(_cases()))
def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys, command, malformed):
    given, name = _make_input(tmp_path, command, malformed)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code = main(COMMANDS[command][2](given, str(out_dir)))
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("synth: error: ") and err.endswith("\n"), err
    assert "Traceback" not in err and "internal error" not in err
    assert name in lines[0], lines[0]
    assert out == ""
    assert list(out_dir.iterdir()) == []  # no output file, folder or temp file


def test_every_command_and_malformed_kind_is_covered():
    cases = list(_cases())
    assert {c.values[0] for c in cases} == set(COMMANDS)
    assert {c.values[1] for c in cases} == set(MALFORMED)


def test_a_billion_ranks_is_refused_before_anything_per_rank():
    from synth.core.errors import TopologyError
    from synth.core.topology import Link, Topology

    with pytest.raises(TopologyError, match="at most 65536"):
        Topology("huge", BILLION, (Link(0, 1, 25.0),))


def test_absurd_counts_in_a_program_are_reported_not_replayed(tmp_path, capsys):
    doc = json.loads((GOLDEN / "ring4_allgather.program.json").read_text())
    doc["chunks_per_loop"] = 10 ** 18
    doc["gpus"][0]["threadblocks"][0]["ops"][0]["count"] = 10 ** 18
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(doc))
    assert main(["check", str(path), "--runtime", "executor"]) == 4
    out = capsys.readouterr().out
    assert "not judged" in out and "too big to replay" in out
