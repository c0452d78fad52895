"""``synth export``: ``--protocol`` on one schedule, and a whole synth.selection exported into an
algorithm folder (one MSCCL XML or synth.program file per size range) that every runtime loads.

The selection is hand-written over dgx1 allgather baselines built here: ``ring`` under LL and LL128
for small sizes, ``nccl_ring`` under Simple for the rest.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from synth.baselines import build_baseline
from synth.cli.main import main
from synth.core.io import save_schedule
from synth.core.library import resolve_topology
from synth.exporters.msccl_xml import LEGACY_MAX_BYTES, LEGACY_MAX_BYTES_SCRATCH
from synth.msccl.profiles import PROFILES

RANGES = [  # (min, max inclusive or None, schedule file, label, protocol)
    (0, 65535, "ring.schedule.json", "ring", "ll"),
    (65536, 1048575, "ring.schedule.json", "ring", "ll128"),
    (1048576, None, "nccl_ring.schedule.json", "nccl_ring", "simple"),
]
SPELLED = {"simple": "Simple", "ll128": "LL128", "ll": "LL"}


@pytest.fixture(scope="module")
def schedules(tmp_path_factory) -> Path:
    """A folder with schedules/ring.schedule.json and schedules/nccl_ring.schedule.json (dgx1 allgather)."""
    root = tmp_path_factory.mktemp("selection")
    (root / "schedules").mkdir()
    dgx1 = resolve_topology("dgx1")
    for algo in ("ring", "nccl_ring"):
        save_schedule(root / "schedules" / f"{algo}.schedule.json", build_baseline(dgx1, algo, "allgather"))
    (root / "other").mkdir()
    save_schedule(root / "other" / "rs.schedule.json", build_baseline(dgx1, "ring", "reduce_scatter"))
    return root


def _selection(folder: Path, rows=RANGES, name: str = "selection.json", **changes) -> Path:
    """Write a selection over ``rows`` (see RANGES) into ``folder``; ``changes`` replace top-level fields."""
    doc = {"format": "synth.selection", "version": 1, "topology": "dgx1", "collective": "allgather",
           "ranges": [{"min_bytes": lo, "max_bytes": hi, "schedule": f"schedules/{file}", "label": label,
                       "protocol": proto} for lo, hi, file, label, proto in rows]}
    doc.update(changes)
    path = folder / name
    path.write_text(json.dumps(doc))
    return path


def _algo(path: Path) -> dict[str, str]:
    first = next(line for line in path.read_text().splitlines() if line.startswith("<algo "))
    return dict(re.findall(r'(\w+)="([^"]*)"', first))


def _run(argv, capsys) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


# ---------------------------------------------------------------------- one schedule: --protocol
@pytest.mark.parametrize("flag, value, spelled", [
    ("--protocol", "ll128", "LL128"), ("--protocol", "LL128", "LL128"), ("--proto", "LL", "LL"),
    ("--proto", "simple", "Simple"), ("--protocol", "Ll", "LL"), (None, None, "Simple"),
])
def test_protocol_flag_sets_proto(schedules, tmp_path, capsys, flag, value, spelled):
    out = tmp_path / "ring.xml"
    argv = ["export", str(schedules / "schedules" / "ring.schedule.json"), "--format", "msccl-xml", "-o", str(out)]
    code, err = _run(argv + ([flag, value] if flag else []), capsys)
    assert code == 0, err
    assert _algo(out)["proto"] == spelled
    assert main(["check", str(out), "--runtime", "executor"]) == 0


def test_unknown_protocol_is_one_line(schedules, tmp_path, capsys):
    out = tmp_path / "ring.xml"
    code, err = _run(["export", str(schedules / "schedules" / "ring.schedule.json"), "--format", "msccl-xml",
                      "--protocol", "ideal", "-o", str(out)], capsys)
    assert code == 2 and err.count("\n") == 1 and "unknown protocol 'ideal'" in err and "ll128" in err, err
    assert not out.exists()


# ---------------------------------------------------------------------- a selection, every runtime
@pytest.mark.parametrize("runtime", tuple(PROFILES))
def test_selection_exports_one_checked_file_per_range(schedules, tmp_path, capsys, runtime):
    selection = _selection(schedules, name=f"selection-{runtime}.json")
    out = tmp_path / "algos" / runtime
    code, err = _run(["export", str(selection), "--format", "msccl-xml", "--runtime", runtime, "-o", str(out)], capsys)
    assert code == 0, err
    files = sorted(out.iterdir())
    assert [f.name for f in files] == [
        "allgather.dgx1.00.ring.0-65535.xml", "allgather.dgx1.01.ring.65536-1048575.xml",
        "allgather.dgx1.02.nccl-ring.1048576-inf.xml"]
    lines = err.splitlines()
    assert len(lines) == len(files) + 1 and all(line.startswith("wrote ") for line in lines), err
    assert "no gap" in lines[-1] and runtime in lines[-1]
    algos = [_algo(f) for f in files]
    for f, algo, (lo, hi, _, _, proto) in zip(files, algos, RANGES):
        assert main(["check", str(f), "--runtime", runtime]) == 0, f.name
        assert algo["proto"] == SPELLED[proto] and algo["coll"] == "allgather"
        assert int(algo["minBytes"]) == lo
        if PROFILES[runtime].max_bytes_exclusive:  # legacy: exclusive and finite
            want = (hi + 1,) if hi is not None else (LEGACY_MAX_BYTES, LEGACY_MAX_BYTES_SCRATCH)
            assert int(algo["maxBytes"]) in want
        else:  # inclusive, 0 = unbounded
            assert int(algo["maxBytes"]) == (0 if hi is None else hi)
    _assert_covers_everything(algos, PROFILES[runtime].max_bytes_exclusive)
    assert [p.name for p in out.parent.iterdir()] == [runtime]  # no temp folder left beside it


def _assert_covers_everything(algos: list[dict[str, str]], exclusive: bool) -> None:
    """The files' byte ranges, as the runtime reads them, start at 0 and meet without gap or overlap."""
    assert int(algos[0]["minBytes"]) == 0
    for prev, nxt in zip(algos, algos[1:]):
        end = int(prev["maxBytes"]) if exclusive else int(prev["maxBytes"]) + 1  # first byte count not covered
        assert int(nxt["minBytes"]) == end
    if not exclusive:
        assert algos[-1]["maxBytes"] == "0"


def test_selection_to_program_json(schedules, tmp_path, capsys):
    out = tmp_path / "programs"
    code, err = _run(["export", str(_selection(schedules, name="sel-json.json")), "--format", "program-json",
                      "--channel-policy", "one", "-o", str(out)], capsys)
    assert code == 0, err
    files = sorted(out.iterdir())
    assert [f.name.split(".", 3)[2] for f in files] == ["00", "01", "02"]
    assert all(f.name.endswith(".program.json") for f in files)
    for f, (lo, hi, _, _, proto) in zip(files, RANGES):
        doc = json.loads(f.read_text())
        assert (doc["protocol"], doc["min_bytes"], doc["max_bytes"], doc["channels"]) == (SPELLED[proto], lo, hi, 1)
        assert main(["check", str(f)]) == 0


def test_options_apply_to_every_file(schedules, tmp_path, capsys):
    out = tmp_path / "inplace"
    code, err = _run(["export", str(_selection(schedules, name="sel-opts.json")), "--format", "msccl-xml",
                      "--inplace", "--instances", "2", "-o", str(out)], capsys)
    assert code == 0, err
    for f in sorted(out.iterdir()):
        algo = _algo(f)
        assert algo["inplace"] == "1" and algo["outofplace"] == "0"
        assert main(["check", str(f), "--runtime", "executor"]) == 0


def test_old_selection_without_protocol_is_simple_with_one_note(schedules, tmp_path, capsys):
    doc = json.loads(_selection(schedules, name="old.json").read_text())
    for rng in doc["ranges"]:
        del rng["protocol"]
    (schedules / "old.json").write_text(json.dumps(doc))
    out = tmp_path / "old"
    code, err = _run(["export", str(schedules / "old.json"), "--format", "msccl-xml", "-o", str(out)], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "3 of 3" in notes[0] and "Simple" in notes[0]
    assert {_algo(f)["proto"] for f in out.iterdir()} == {"Simple"}


def test_gaps_are_allowed_and_reported(schedules, tmp_path, capsys):
    ranges = [(0, 4095, "ring.schedule.json", "ring", "ll"), (8192, None, "nccl_ring.schedule.json", "nccl", "simple")]
    out = tmp_path / "gappy"
    code, err = _run(["export", str(_selection(schedules, ranges, name="gappy.json")), "--format", "msccl-xml",
                      "-o", str(out)], capsys)
    assert code == 0 and "not covered: 4096..8191" in err.splitlines()[-1], err


def test_reexport_replaces_only_its_own_files(schedules, tmp_path, capsys):
    out = tmp_path / "algos"
    out.mkdir()
    stale = out / "allgather.dgx1.05.old-label.0-1023.xml"  # a name an earlier export gives
    stale.write_text("old")
    code, err = _run(["export", str(_selection(schedules, name="again.json")), "--format", "msccl-xml", "-o", str(out)],
                     capsys)
    assert code == 0, err
    assert not stale.exists() and len(list(out.iterdir())) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["algos"]


# ---------------------------------------------------------------------- bad input: one line, exit 2, nothing written
def _bad_cases(root: Path) -> dict[str, tuple[list, str]]:
    """name -> (the export's input arguments (a bad selection written into ``root``), text its error line holds)."""
    rs = [(0, None, "../other/rs.schedule.json", "rs", "simple")]
    cases = {
        "overlap": (_selection(root, [RANGES[0], (60000, None, "ring.schedule.json", "r", "ll")], "overlap.json"),
                    "overlaps range 0"),
        "unsorted": (_selection(root, [RANGES[2], RANGES[0]], "unsorted.json"), "not sorted"),
        "protocol": (_selection(root, [(0, None, "ring.schedule.json", "r", "ideal")], "proto.json"),
                     "unknown protocol 'ideal'"),
        "missing schedule": (_selection(root, [(0, None, "gone.schedule.json", "r", "ll")], "gone.json"),
                             "gone.schedule.json: no such file"),
        "other collective": (_selection(root, rs, "rs.json"), "reduce_scatter on dgx1, not allgather on dgx1"),
        "other topology": (_selection(root, name="ndv2.json", topology="ndv2"), "not allgather on ndv2"),
        "malformed": (_selection(root, name="malformed.json", ranges={"min_bytes": 0}), "'ranges' must be"),
        "negative": (_selection(root, [(-1, None, "ring.schedule.json", "r", "ll")], "neg.json"), "'min_bytes'"),
        "max below min": (_selection(root, [(10, 5, "ring.schedule.json", "r", "ll")], "maxmin.json"), "'max_bytes'"),
        "version": (_selection(root, name="v2.json", version=2), "version 2"),
    }
    return {name: ([str(path)], text) for name, (path, text) in cases.items()}


@pytest.mark.parametrize("case", ["overlap", "unsorted", "protocol", "missing schedule", "other collective",
                                  "other topology", "malformed", "negative", "max below min", "version"])
def test_bad_selection_is_one_line_and_writes_nothing(schedules, tmp_path, capsys, case):
    argv, text = _bad_cases(schedules)[case]
    out = tmp_path / "algos"
    code, err = _run(["export", *argv, "--format", "msccl-xml", "-o", str(out)], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("synth: error: ") and text in err, err
    assert Path(argv[0]).name in err  # names the selection file
    assert list(tmp_path.iterdir()) == []  # no folder, no temp folder


def test_output_that_is_a_file_or_a_foreign_folder_is_refused(schedules, tmp_path, capsys):
    selection = str(_selection(schedules, name="target.json"))
    as_file = tmp_path / "taken"
    as_file.write_text("mine")
    code, err = _run(["export", selection, "--format", "msccl-xml", "-o", str(as_file)], capsys)
    assert code == 2 and err.count("\n") == 1 and "taken: exists and is not a folder" in err, err
    assert as_file.read_text() == "mine"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    code, err = _run(["export", selection, "--format", "msccl-xml", "-o", str(foreign)], capsys)
    assert code == 2 and err.count("\n") == 1 and "'notes.txt'" in err, err
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign", "taken"]


@pytest.mark.parametrize("flag", [["--protocol", "ll"], ["--proto", "LL"], ["--min-bytes", "1K"], ["--name", "x"]])
def test_per_range_options_are_refused_with_a_selection(schedules, tmp_path, capsys, flag):
    out = tmp_path / "algos"
    code, err = _run(["export", str(_selection(schedules, name="flags.json")), "--format", "msccl-xml", *flag,
                      "-o", str(out)], capsys)
    assert code == 2 and err.count("\n") == 1 and "does not apply to a selection" in err, err
    assert not out.exists()


def test_a_range_the_runtime_cannot_express_names_the_range(schedules, tmp_path, capsys):
    zero = _selection(schedules, [(0, 0, "ring.schedule.json", "r", "ll"), (1, None, "ring.schedule.json", "r", "ll")],
                      "zero.json")
    out = tmp_path / "algos"
    code, err = _run(["export", str(zero), "--format", "msccl-xml", "--runtime", "rccl", "-o", str(out)], capsys)
    assert code == 2 and err.count("\n") == 1 and "zero.json: range 0" in err and "maxBytes 0" in err, err
    assert list(tmp_path.iterdir()) == []
