"""synth tune, synth check on a tuner config and synth export --format nccl-tuner / nccl-env, as a
user runs them: the files, the exit codes, one line for bad input and nothing written."""

from __future__ import annotations

import pytest

from synth.tuner.rules import check_text
from tests.cli_run import run


def test_tune_writes_a_file_check_passes(tmp_path, capsys):
    conf = tmp_path / "nccl_tuner.conf"
    code, _, err = run(capsys, "tune", "dgx1", "-o", str(conf))
    assert code == 0 and "allreduce on 1 node x 8 ranks:" in err
    assert "NCCL's own pick (its tuning formula) is up to" in err and "(default calibration)" in err
    assert check_text(conf.read_text()).ok
    code, out, _ = run(capsys, "check", str(conf))
    assert code == 0 and "ok: every size 0..2^64-1 of the five collectives" in out


def test_tune_env_says_what_it_cannot_express(capsys):
    code, out, _ = run(capsys, "tune", "h100x2", "--collectives", "allreduce,allgather", "--format", "nccl-env",
                       "-o", "-")
    assert code == 0
    assert 'export NCCL_ALGO="allreduce:Tree,NVLSTree;allgather:Ring"' in out  # NVLSTree: h100x2's NVSwitches
    assert "NCCL >= 2.24.3" in out and "channel counts per call" in out and "picks otherwise" in out


@pytest.mark.parametrize("args, words", [
    (["--collectives", "alltoall"], "NCCL tunes broadcast"),
    (["--nodes-ranks", "3x8"], "has 2 machine(s)"),
    (["--nodes-ranks", "2by8"], "expected pairs like 1x8"),
    (["--calibration", "missing.json"], "missing.json"),
])
def test_tune_bad_input_is_one_line_and_writes_nothing(args, words, tmp_path, capsys):
    conf = tmp_path / "t.conf"
    code, _, err = run(capsys, "tune", "h100x2", *args, "-o", str(conf))
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1 and not conf.exists()


BROKEN = [
    ("allreduce,0,100,ring,ll,8,1,8\nAllGather,0,100,ring,ll,8,1,8\n", "line 2: unknown collective 'AllGather'"),
    ("allreduce,0,100,ring,LL,8,1,8\n", "line 1: unknown protocol 'LL'"),
    ("allreduce,0,100,rings,ll,8,1,8\n", "line 1: unknown algorithm 'rings'"),
    ("allreduce,0,100,ring,,8,1,8\n", "line 1: dropped: 7 fields"),
    ("allreduce,100,0,ring,ll,8,1,8\n", "line 1: min_bytes 100 > max_bytes 0"),
    ("allreduce,0,100,ring,ll,8,1,8," + "x" * 250 + "\n", "line 1: 280 characters"),
]


@pytest.mark.parametrize("text, words", BROKEN)
def test_check_names_the_line_and_exits_4(text, words, tmp_path, capsys):
    conf = tmp_path / "broken.conf"
    conf.write_text(text)
    code, out, _ = run(capsys, "check", str(conf))
    assert code == 4 and words in out


def test_check_of_an_unreadable_config_exits_2(tmp_path, capsys):
    conf = tmp_path / "binary.conf"
    conf.write_bytes(b"allreduce,\xff\x00")
    code, _, err = run(capsys, "check", str(conf))
    assert code == 2 and "not a text file" in err


def test_export_of_a_selection_writes_every_collective(tmp_path, capsys):
    from synth.report import runner

    report = tmp_path / "report"
    runner.report("full:4", "allgather", report, sizes="1K..1M", time_limit=30)
    conf = tmp_path / "out.conf"
    code, _, err = run(capsys, "export", str(report / "selection.json"), "--format", "nccl-tuner", "-o", str(conf))
    assert code == 0 and check_text(conf.read_text()).ok
    code, _, err = run(capsys, "export", str(report / "selection.json"), "--format", "nccl-tuner", "--protocol", "ll",
                       "-o", str(tmp_path / "no.conf"))
    assert code == 2 and "--protocol does not apply" in err and not (tmp_path / "no.conf").exists()
    schedule = next((report / "schedules").iterdir())
    code, _, err = run(capsys, "export", str(schedule), "--format", "nccl-tuner", "-o", str(tmp_path / "no.conf"))
    assert code == 2 and "selection.json" in err and not (tmp_path / "no.conf").exists()
