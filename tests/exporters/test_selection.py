"""synth.exporters.selection (reading a synth.selection, file names, per-range lowering), the atomic
folder writer it uses (synth.core.io.write_folder_atomic), protocol spellings and legacy maxBytes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from synth.baselines import build_baseline
from synth.core.errors import InputError
from synth.core.io import folder_problem, write_folder_atomic
from synth.core.library import resolve_topology
from synth.exporters.msccl_xml import program_to_xml
from synth.exporters.selection import (
    export_selection,
    file_name,
    gaps,
    is_export_name,
    is_selection,
    parse_selection,
    program_name,
)
from synth.lower.lowering import NAME_RE, LoweringOptions, lower
from synth.program.ir import PROTOCOLS, msccl_protocol


def _doc(*ranges, **top) -> dict:
    doc = {"format": "synth.selection", "version": 1, "topology": "ring:4", "collective": "allgather",
           "ranges": [dict(zip(("min_bytes", "max_bytes", "schedule", "label", "protocol"), r)) for r in ranges]}
    return {**doc, **top}


GOOD = _doc((0, 1023, "schedules/a.json", "smt S=2 R=3 C=2", "LL"), (1024, None, "schedules/b.json", "ring", "simple"))


def test_protocol_spellings():
    assert [msccl_protocol(n) for n in ("simple", "ll128", "ll", "Simple", "LL128", "LL", "lL")] == \
        ["Simple", "LL128", "LL", "Simple", "LL128", "LL", "LL"]
    assert msccl_protocol("ideal") is None and msccl_protocol(None) is None and msccl_protocol("best") is None
    assert {msccl_protocol(p) for p in PROTOCOLS} == set(PROTOCOLS)


def test_parse_and_names():
    sel = parse_selection(GOOD, "results/ring4/selection.json")
    assert is_selection(GOOD) and not is_selection({"format": "synth.schedule"}) and not is_selection([1])
    assert [(r.min_bytes, r.max_bytes, r.protocol) for r in sel.ranges] == [(0, 1023, "LL"), (1024, None, "Simple")]
    assert sel.schedule_path(sel.ranges[1]) == Path("results/ring4/schedules/b.json")
    names = [file_name(sel, r, "msccl-xml") for r in sel.ranges]
    assert names == ["allgather.ring_4.00.smt-s-2-r-3-c-2.0-1023.xml", "allgather.ring_4.01.ring.1024-inf.xml"]
    assert file_name(sel, sel.ranges[0], "program-json").endswith(".0-1023.program.json")
    assert all(is_export_name(n) for n in names) and not is_export_name("notes.txt")
    assert not is_export_name("allgather.ring_4.00.ring.0-1023.xml.tmp")
    assert all(NAME_RE.fullmatch(program_name(sel, r)) for r in sel.ranges)
    assert gaps(sel) == []
    holey = parse_selection(_doc((0, 99, "a", "x", "ll"), (200, 299, "a", "x", "ll"), (300, None, "a", "x", "ll")), "s")
    assert gaps(holey) == [(100, 199)]


def test_long_or_odd_labels_make_valid_names():
    sel = parse_selection(_doc((0, None, "a.json", "Ünïcode / " + "x" * 200, "ll")), "s.json")
    name = file_name(sel, sel.ranges[0], "msccl-xml")
    assert is_export_name(name) and len(name) < 120
    assert NAME_RE.fullmatch(program_name(sel, sel.ranges[0]))
    empty = parse_selection(_doc((0, None, "a.json", "", "ll")), "s.json")
    assert ".00.range.0-inf.xml" in file_name(empty, empty.ranges[0], "msccl-xml")


@pytest.mark.parametrize("doc, message", [
    (_doc(), "'ranges' must be a non-empty list"),
    ({**GOOD, "ranges": "all"}, "'ranges' must be a non-empty list"),
    ({**GOOD, "version": True}, "version True"),
    ({**GOOD, "topology": 4}, "'topology' must be a non-empty string"),
    ({**GOOD, "ranges": [[0, 1]]}, "range 0: expected an object"),
    (_doc((0, 9, "a", "x", "ll"), (5, None, "a", "x", "ll")), "range 1 (5..unbounded) overlaps range 0 (0..9)"),
    (_doc((0, None, "a", "x", "ll"), (5, None, "a", "x", "ll")), "overlaps range 0 (0..unbounded)"),
    (_doc((10, 19, "a", "x", "ll"), (0, 9, "a", "x", "ll")), "ranges are not sorted"),
    (_doc((0, None, "a", "x", "LL64")), "range 0: unknown protocol 'LL64'"),
    (_doc((0, None, "a", "x", 3)), "unknown protocol 3"),
    (_doc((True, None, "a", "x", "ll")), "'min_bytes' must be an integer"),
    (_doc((0, 1.5, "a", "x", "ll")), "'max_bytes' must be null"),
    (_doc((0, None, "", "x", "ll")), "'schedule' must be a file path"),
    (_doc((0, None, "a", ["x"], "ll")), "'label' must be a string"),
])
def test_malformed_selections(doc, message):
    with pytest.raises(InputError) as err:
        parse_selection(doc, "sel.json")
    assert str(err.value).startswith("sel.json: ") and message in str(err.value), str(err.value)


def test_missing_max_bytes_is_malformed():
    doc = _doc((0, None, "a", "x", "ll"))
    del doc["ranges"][0]["max_bytes"]
    with pytest.raises(InputError, match="'max_bytes' must be null"):
        parse_selection(doc, "sel.json")


def test_export_lowers_each_range_with_its_protocol_and_bytes():
    ring = build_baseline(resolve_topology("ring:4"), "ring", "allgather")
    sel = parse_selection(GOOD, "sel.json")
    files = export_selection(sel, (ring, ring), "msccl-xml", LoweringOptions(runtime="legacy", channel_policy="one"))
    assert [(f.program.protocol, f.program.min_bytes, f.program.max_bytes, f.program.channels) for f in files] == \
        [("LL", 0, 1023, 1), ("Simple", 1024, None, 1)]
    assert 'proto="LL"' in files[0].text and 'minBytes="0" maxBytes="1024"' in files[0].text  # legacy: exclusive


def test_legacy_max_bytes_stays_above_a_large_min_bytes():
    program = lower(build_baseline(resolve_topology("ring:4"), "ring", "allgather"), LoweringOptions())
    big = replace(program, min_bytes=3 << 30)
    assert f'minBytes="{3 << 30}" maxBytes="{(3 << 30) + 1}"' in program_to_xml(big, "legacy")


# ---------------------------------------------------------------------- the folder writer
def _ours(name: str) -> bool:
    return name.endswith(".xml")


def test_write_folder_creates_replaces_and_refuses(tmp_path):
    out = tmp_path / "deep" / "algos"
    write_folder_atomic(out, {"a.xml": "A", "b.xml": "B"}, _ours)
    assert sorted(p.name for p in out.iterdir()) == ["a.xml", "b.xml"]
    write_folder_atomic(out, {"c.xml": "C"}, _ours)  # only files it wrote before: replaced whole
    assert [p.name for p in out.iterdir()] == ["c.xml"] and (out / "c.xml").read_text() == "C"
    (out / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="holds 'keep.txt'"):
        write_folder_atomic(out, {"d.xml": "D"}, _ours)
    assert sorted(p.name for p in out.iterdir()) == ["c.xml", "keep.txt"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["algos"]  # no temp or old folder left
    empty = tmp_path / "empty"
    empty.mkdir()
    write_folder_atomic(empty, {"e.xml": "E"})
    assert [p.name for p in empty.iterdir()] == ["e.xml"]


def test_folder_problems(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path)
    sub = tmp_path / "sub"
    (sub / "inner").mkdir(parents=True)
    assert folder_problem(tmp_path / "new", _ours) is None
    assert folder_problem(tmp_path / "file", _ours) == "exists and is not a folder"
    assert "symbolic link" in folder_problem(tmp_path / "link", _ours)
    assert "'inner'" in folder_problem(sub, lambda name: True)  # a folder is never one of ours


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "algos"
    write_folder_atomic(out, {"old.xml": "old"}, _ours)
    real = Path.write_text

    def failing(self, text, *args, **kwargs):
        if self.name == "b.xml":
            raise OSError(28, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", failing)
    with pytest.raises(InputError, match="algos: cannot write: No space left on device"):
        write_folder_atomic(out, {"a.xml": "A", "b.xml": "B"}, _ours)
    assert [p.name for p in tmp_path.iterdir()] == ["algos"]
    assert [p.name for p in out.iterdir()] == ["old.xml"]  # the earlier export is untouched
