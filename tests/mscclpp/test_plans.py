"""MSCCL++ plans: every corpus plan read with the verdict the reference gives it, and plans broken
on purpose named at their JSON path and rule, by synth check and by the replay."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.cli.main import main
from synth.mscclpp.plan import read_plan
from synth.mscclpp.replay import replay
from synth.mscclpp.rules import check_plan
from tests.shared_data import shared_folder

CORPUS = shared_folder("corpus", "SOURCES.md", "SYNTH_CORPUS")
needs_corpus = pytest.mark.skipif(CORPUS is None, reason="shared corpus not found")
CURRENT = "mscclpp-json/microsoft__mscclpp"
LEGACY = "mscclpp-json/microsoft__mscclpp@88d28e07"
STALE = "test__execution-files__allreduce_pipeline.json"  # the reference's negative example (section 18)


def corpus_files(folder: str) -> list[str]:
    return sorted(p.name for p in (CORPUS / folder).glob("*.json")) if CORPUS else []


def load(name: str, folder: str = CURRENT) -> dict:
    from synth.core.io import read_json

    return read_json(CORPUS / folder / name, wide_ints=True)


def verdict(doc: dict):
    plan, problems = read_plan(doc)
    return plan, problems + (check_plan(plan) if plan.schema == "current" else []), replay(plan)


@needs_corpus
@pytest.mark.parametrize("name", corpus_files(CURRENT))
def test_every_current_corpus_plan_reads_and_all_but_the_stale_one_load_and_replay_correct(name):
    plan, problems, result = verdict(load(name))
    if name == STALE:
        said = [str(p) for p in problems]
        assert any('channels[0].buffer_type: missing: the file says "buff"' in s for s in said)
        assert any(s.startswith("gpus[0].output_chunks: 0:") for s in said)
        return
    assert problems == [], [str(p) for p in problems]
    assert result.correct is True, result.problems


@needs_corpus
@pytest.mark.parametrize("name", corpus_files(LEGACY))
def test_legacy_plans_are_read_and_said_to_be_legacy(name):
    plan, problems, result = verdict(load(name, LEGACY))
    assert plan.schema == "legacy" and problems == [] and result.correct is None
    assert plan.ranks >= 2 and "cannot load" in plan.notes[0]


def ops_of(doc, rank=0, block=0):
    return doc["gpus"][rank]["threadblocks"][block]["ops"]


@needs_corpus
def test_broken_synchronisation_is_named():
    doc = load("test__execution-files__allreduce.json")
    names = [o["name"] for o in ops_of(doc)]
    assert names == ["rlxsignal", "rlxwait", "nop", "rres", "nop", "signal", "wait"]
    cases = {  # op dropped on rank 0 -> what the replay must say
        0: "waits forever for a signal that never comes (deadlock)",
        1: "are never waited for: the next execution starts with them [R20]",
        3: "ends holding {r0:0}, allreduce needs {r0:0, r1:0}",
        4: "nothing orders that before rank 1's kernel ends",
        5: "waits forever for a signal that never comes (deadlock)",
        6: "are never waited for",
    }
    for index, words in cases.items():
        broken = copy.deepcopy(doc)
        del ops_of(broken)[index]
        result = replay(read_plan(broken)[0])
        assert result.correct is False and any(words in p for p in result.problems), (index, result.problems)


@needs_corpus
def test_two_ranks_writing_one_chunk_race():
    doc = load("test__execution-files__allreduce.json")
    for op in ops_of(doc, rank=1):
        for ref in op.get("src_buff", []) + op.get("dst_buff", []):
            ref["index"] = 0 if ref["index"] == 8 else ref["index"]
    result = replay(read_plan(doc)[0])
    assert result.correct is False and any("[R24]" in p for p in result.problems)


@needs_corpus
def test_a_missing_nop_between_a_write_and_a_read_in_one_block_is_a_hazard():
    doc = load("test__executor-tests__execution-plans__reduce.json")
    ops = ops_of(doc)
    nops = [i for i, o in enumerate(ops) if o["name"] == "nop"]
    found = []
    for index in nops:
        broken = copy.deepcopy(doc)
        del ops_of(broken)[index]
        found += replay(read_plan(broken)[0]).problems
    assert any("[R23]" in p or "[R24]" in p for p in found)


@needs_corpus
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_dropping_any_signal_or_wait_of_a_correct_plan_is_caught(data):
    name = data.draw(st.sampled_from([n for n in corpus_files(CURRENT) if n != STALE]))
    doc = load(name)
    sync = [(r, b, i) for r, g in enumerate(doc["gpus"]) for b, t in enumerate(g["threadblocks"])
            for i, o in enumerate(t["ops"]) if o["name"] in ("signal", "wait", "rlxsignal", "rlxwait")]
    if not sync:
        return
    r, b, i = data.draw(st.sampled_from(sync))
    del ops_of(doc, r, b)[i]
    result = replay(read_plan(doc)[0])
    assert result.correct is False and result.problems


BAD = [  # (change to a valid plan, words of the one problem named)
    (lambda d: d["gpus"][0]["channels"][0].update(channel_type="nvlink"),
     "gpus[0].channels[0].channel_type: 'nvlink' is not a type the executor knows"),
    (lambda d: ops_of(d)[3]["src_buff"][0].update(index=40),
     "gpus[0].threadblocks[0].ops[3].src_buff[0]: chunks 40..40"),
    (lambda d: d["gpus"].pop(), "gpus[0].channels[0].connected_to: 1: must be another rank of the plan's 1"),
    (lambda d: d["gpus"][1].update(output_chunks=0), "gpus[1].output_chunks: 0:"),
    (lambda d: d.update(inplace="yes"), "inplace: must be a JSON boolean"),
    (lambda d: ops_of(d)[3].update(name="rresx"), "gpus[0].threadblocks[0].ops[3].name: 'rresx' is not an op"),
]


@needs_corpus
@pytest.mark.parametrize("change, words", BAD)
def test_synth_check_names_the_json_path_and_exits_4(change, words, tmp_path, capsys):
    doc = load("test__execution-files__allreduce.json")
    change(doc)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    code = main(["check", str(path)])
    out = capsys.readouterr().out
    assert code == 4 and words in out, out


@needs_corpus
def test_a_plan_that_ends_early_is_one_line_exit_2(tmp_path, capsys):
    text = (CORPUS / CURRENT / "test__execution-files__allreduce.json").read_text()
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    code = main(["check", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "not valid JSON (line" in err and len(err.strip().splitlines()) == 1
