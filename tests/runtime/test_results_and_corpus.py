"""The files people hand us: every committed dgx1 schedule, the ndv2x2 MILP schedule (16 ranks),
and the MSCCL XML corpus (shared/corpus; at most 16 ranks): what our replay calls correct runs
correct; what it calls incorrect is refused by ``synth run`` and, forced, ends with a verdict
within the timeout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

from synth.cli.main import main
from synth.core.errors import EXIT_INVALID
from synth.msccl.corpus import corpus_root
from synth.runtime.measure import RunOptions
from synth.runtime.runnable import load_runnable, precheck

ROOT = Path(__file__).resolve().parents[2]
CORPUS = corpus_root()
QUICK = RunOptions(sizes=(1024, 1 << 20), iters=1, warmup=0, timeout=30)


def _run(worlds, runnable, options=QUICK):
    return worlds(runnable.ranks).run(runnable, options)


@pytest.mark.slow
def test_every_dgx1_result_schedule_runs_correct_at_1k_and_1m(worlds):
    files = sorted((ROOT / "results" / "dgx1").glob("*/schedules/*.schedule.json"))
    assert len(files) >= 30
    wrong = {}
    for path in files:
        result = _run(worlds, load_runnable(str(path)))
        if not result.correct or len(result.rows) != 2:
            wrong[path.name] = result.fault
    assert wrong == {}


def test_ndv2x2_milp_allgather_on_16_ranks_at_64k(worlds):
    path = ROOT / "results" / "ndv2x2" / "allgather" / "schedules" / "allgather.ndv2x2.milp-64K.schedule.json"
    result = _run(worlds, load_runnable(str(path)), RunOptions(sizes=(64 << 10,), iters=1, warmup=0, timeout=60))
    assert result.correct, result.fault


def _corpus(limit: int = 16) -> list[Path]:
    if CORPUS is None:
        return []
    out = []
    for path in sorted((CORPUS / "msccl-xml").glob("*/*.xml")):
        found = re.search(r'ngpus="(\d+)"', path.read_text(encoding="latin-1"))
        if found and int(found.group(1)) <= limit:
            out.append(path)
    return out


# One of each kind in the default suite; every file under -m slow.
QUICK_CORPUS = ("ndv4__ag-1m.xml", "allreduce-allpairs-8n-ll-32tb.xml", "alltoall-8n-9kb-190kb.xml",
                "allreduce_binomial_tree_LL128_gpu16_ins2.xml", "ar_tree_12_LL.xml")
INCORRECT = ("experiments_ar_multi__ar_1.xml", "test_x3_gpu.xml", "nvswitch16__AllGather__Fast__64MB_msccl_strict.xml")


def _judge(worlds, path: Path) -> None:
    runnable = load_runnable(str(path))
    verdict = precheck(runnable).correct
    if verdict is None:
        pytest.skip("our replay does not judge it")
    result = _run(worlds, runnable, RunOptions(sizes=(1024, 1 << 20), iters=1, warmup=0, timeout=5))
    if verdict:
        assert result.correct, result.fault
    else:
        assert not result.correct and result.fault


@pytest.mark.skipif(CORPUS is None, reason="shared/corpus not found beside the repository (set SYNTH_CORPUS)")
@pytest.mark.parametrize("suffix", QUICK_CORPUS + INCORRECT)
def test_corpus_representatives(worlds, suffix):
    (path,) = [p for p in _corpus() if p.name.endswith(suffix)]
    _judge(worlds, path)


@pytest.mark.slow
@pytest.mark.skipif(CORPUS is None, reason="shared/corpus not found beside the repository (set SYNTH_CORPUS)")
@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.name)
def test_whole_corpus(worlds, path):
    _judge(worlds, path)


@pytest.mark.skipif(CORPUS is None, reason="shared/corpus not found beside the repository (set SYNTH_CORPUS)")
def test_synth_run_refuses_what_our_checker_finds_wrong(capsys):
    (path,) = [p for p in _corpus() if p.name.endswith(INCORRECT[0])]
    assert main(["run", str(path)]) == EXIT_INVALID
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "our checker finds the program wrong" in err[0] and "--force" in err[0]
