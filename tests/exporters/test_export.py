"""Exporters: golden files, JSON Schema, XML lexical shape, per-runtime limits and refusals, CLI.

Golden files live in tests/golden/ and change only on purpose. Regenerate them with

    SYNTH_UPDATE_GOLDEN=1 python -m pytest tests/test_export.py -k golden

then review the diff before committing.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.baselines import registry
from synth.cli.export import add_export_parser
from synth.core.errors import InputError, SynthError
from synth.core.io import save_schedule
from synth.core.library import resolve_topology
from synth.exporters import EXPORTERS
from synth.exporters.msccl_xml import LEGACY_MAX_BYTES, LEGACY_MAX_BYTES_SCRATCH, program_to_xml
from synth.lower.lowering import LoweringOptions, lower
from synth.msccl.profiles import PROFILES
from synth.program.document import (
    load_program,
    program_from_dict,
    program_from_json,
    program_schema,
    program_to_dict,
    program_to_json,
)
from synth.program.ir import BUFFERS, OP_TYPES, PROTOCOLS, Op, Program, RankProgram, Threadblock, with_threadblock
from tests.lower.test_lowering import check_structure, replay

GOLDEN = Path(__file__).parents[1] / "golden"
UPDATE = bool(os.environ.get("SYNTH_UPDATE_GOLDEN"))
RUNTIMES = tuple(PROFILES)

# name -> (topology, baseline, collective, lowering options)
CASES = {
    "ring4_allgather": ("ring:4", "ring", "allgather", LoweringOptions()),
    "ring4_reduce_scatter": ("ring:4", "ring", "reduce_scatter", LoweringOptions()),
    "ring4_allreduce": ("ring:4", "ring", "allreduce", LoweringOptions(channel_policy="one")),
    "ring4_allreduce_inplace": ("ring:4", "ring", "allreduce", LoweringOptions(inplace=True, max_bytes=1 << 20)),
    "full4_alltoall": ("full:4", "direct", "alltoall", LoweringOptions(instances=2, min_bytes=1024)),
}


def _schedule(case: str):
    topo, algo, coll, _ = CASES[case]
    return registry()[algo].build(resolve_topology(topo), coll, None, None)


def _program(case: str, runtime: str | None = None) -> Program:
    return lower(_schedule(case), replace(CASES[case][3], runtime=runtime))


def _compare(path: Path, text: str) -> None:
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path.name}: run SYNTH_UPDATE_GOLDEN=1 python -m pytest {__file__}"
    assert text == path.read_text(encoding="utf-8"), f"{path.name} changed (regenerate on purpose, see module doc)"


# ---------------------------------------------------------------------- golden files
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_golden_msccl_xml(case, runtime):
    program = _program(case, runtime)
    check_structure(program)
    replay(program, _schedule(case).collective, fifo=8)
    _compare(GOLDEN / f"{case}.{runtime}.xml", program_to_xml(program, runtime))


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_program_json(case):
    program = _program(case)
    text = program_to_json(program)
    _compare(GOLDEN / f"{case}.program.json", text)
    doc = json.loads(text)
    jsonschema.Draft202012Validator(program_schema()).validate(doc)
    assert program_from_json(text) == program


# ---------------------------------------------------------------------- XML shape
_LINE = re.compile(r'^(?P<indent>(  )*)<(?P<close>/)?(?P<tag>algo|gpu|tb|step)'
                   r'(?P<attrs>( [A-Za-z_]+="[^"<>&]*")*)(?P<end>/?)>$')
_DEPTH = {"algo": 0, "gpu": 1, "tb": 2, "step": 3}


def check_xml_shape(text: str) -> None:
    """Section 2 of the format reference: the tokenizer-safe shape."""
    assert text.endswith("\n") and "\t" not in text and "\r" not in text and "'" not in text
    assert not text.startswith("<?")
    lines = text.splitlines()
    while lines and re.fullmatch(r"<!-- [^<>]* -->", lines[0]):  # comments before <algo> (the target runtime)
        lines = lines[1:]
    assert lines[0].startswith("<algo ") and lines[-1] == "</algo>"
    step_position = 0
    for line in lines:
        match = _LINE.match(line)
        assert match, f"not one tag on one line: {line!r}"
        tag = match.group("tag")
        assert len(match.group("indent")) == 2 * _DEPTH[tag], line
        attrs = re.findall(r'([A-Za-z_]+)="([^"]*)"', match.group("attrs"))
        assert len(attrs) <= 16 and all(len(value) <= 255 for _, value in attrs), line
        for key, value in attrs:
            if re.fullmatch(r"-?\d+", value):
                assert value == str(int(value)), f"zero-padded integer {key}={value!r}"
        assert (tag == "step") == bool(match.group("end")) and not (match.group("close") and attrs)
        if tag == "tb" and not match.group("close"):
            step_position = 0
        if tag == "step":
            fields = dict(attrs)
            assert list(fields) == ["s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps",
                                    "hasdep"]
            assert fields["s"] == str(step_position) and fields["type"] != "ra"
            step_position += 1


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_xml_shape_and_algo_attributes(runtime):
    for case in ("ring4_reduce_scatter", "full4_alltoall"):
        program = _program(case, runtime)
        text = program_to_xml(program, runtime)
        check_xml_shape(text)
        algo = dict(re.findall(r'([A-Za-z_]+)="([^"]*)"', text.splitlines()[0]))
        assert list(algo) == ["name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace",
                              "outofplace", "minBytes", "maxBytes"]
        assert set(PROFILES[runtime].requires) <= set(algo)
        assert algo["coll"] == PROFILES[runtime].coll_names[program.collective]
        assert len(algo["name"]) <= 63
        assert text.count("<gpu ") == program.ranks


def test_reduce_scatter_spelling_per_runtime():
    program = _program("ring4_reduce_scatter")
    assert 'coll="reduce_scatter"' in program_to_xml(program, "legacy")
    assert 'coll="reducescatter"' in program_to_xml(program, "executor")
    assert 'coll="reducescatter"' in program_to_xml(program, "rccl")


def test_max_bytes_per_runtime():
    unbounded = _program("ring4_allgather")
    assert f'maxBytes="{LEGACY_MAX_BYTES}"' in program_to_xml(unbounded, "legacy")
    assert 'maxBytes="0"' in program_to_xml(unbounded, "executor")
    bounded = replace(unbounded, min_bytes=4096, max_bytes=65536)
    assert 'minBytes="4096" maxBytes="65537"' in program_to_xml(bounded, "legacy")  # exclusive
    assert 'minBytes="4096" maxBytes="65536"' in program_to_xml(bounded, "rccl")  # inclusive
    scratch = replace(unbounded, gpus=(replace(unbounded.gpus[0], scratch_chunks=2),) + unbounded.gpus[1:])
    assert f'maxBytes="{LEGACY_MAX_BYTES_SCRATCH}"' in program_to_xml(scratch, "legacy")
    with pytest.raises(InputError, match="maxBytes 0 as unbounded"):
        program_to_xml(replace(unbounded, max_bytes=0), "executor")


def test_inplace_flags():
    text = program_to_xml(_program("ring4_allreduce_inplace"), "executor")
    assert 'inplace="1" outofplace="0"' in text and 'o_chunks="0"' in text


# ---------------------------------------------------------------------- refusals
def _small() -> Program:
    return _program("ring4_allreduce")


def _edit_op(program: Program, rank: int, tb: int, pos: int, **changes) -> Program:
    gpu = program.gpus[rank]
    block = gpu.threadblocks[tb]
    ops = list(block.ops)
    ops[pos] = replace(ops[pos], **changes)
    tbs = list(gpu.threadblocks)
    tbs[tb] = replace(block, ops=tuple(ops))
    gpus = list(program.gpus)
    gpus[rank] = replace(gpu, threadblocks=tuple(tbs))
    return replace(program, gpus=tuple(gpus))


def _edit_tb(program: Program, rank: int, tb: int, **changes) -> Program:
    return with_threadblock(program, rank, tb, **changes)


def _nop(dep_tb=0, dep_op=0) -> Op:
    return Op("nop", "i", -1, "o", -1, 0, dep_tb, dep_op, False)


MUTATIONS = {
    "cnt 0": (lambda p: _edit_op(p, 0, 0, 0, count=0), "cnt 0 outside 1..71"),
    "cnt 72": (lambda p: _edit_op(p, 0, 0, 0, count=72), "cnt 72"),
    "off+cnt": (lambda p: _edit_op(p, 0, 0, 0, src_off=p.chunks_per_loop - 1, count=2), "outside the"),
    "chan": (lambda p: _edit_tb(p, 0, 0, channel=p.channels), "channel 1 outside"),
    "self peer": (lambda p: _edit_tb(p, 0, 0, send=0), "send peer 0 must be another rank"),
    "dep without hasdep": (lambda p: _edit_op(p, 1, 0, 1, dep_tb=0, dep_op=0), "which has hasdep=0"),
    "half dep": (lambda p: _edit_op(p, 1, 0, 1, dep_tb=0), "both be set"),
    "missing dep": (lambda p: _edit_op(p, 1, 0, 1, dep_tb=0, dep_op=999), "missing step"),
    "name": (lambda p: replace(p, name="x" * 64), "program name"),
    "coll": (lambda p: replace(p, collective="scatter"), "has no collective 'scatter'"),
    "neither": (lambda p: replace(p, inplace=False, outofplace=False), "never be selected"),
    "ids": (lambda p: _edit_tb(p, 0, 0, id=5), "ids must be"),
    "empty rank": (lambda p: replace(p, gpus=(replace(p.gpus[0], threadblocks=()),) + p.gpus[1:]), "no thread block"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_exporter_refuses_what_runtimes_misrun(mutation):
    change, pattern = MUTATIONS[mutation]
    bad = change(_small())
    for runtime in RUNTIMES:
        if mutation == "coll" and runtime != "legacy":
            continue
        with pytest.raises(InputError, match=pattern) as info:
            program_to_xml(bad, runtime)
        assert "\n" not in str(info.value)


def test_nop_rule_and_reduce_fusion_refused():
    base = _small()
    tb = base.gpus[0].threadblocks[0]
    second = base.gpus[0].threadblocks[1]
    target = replace(second.ops[0], has_dep=True)
    nop_then_plain = (_nop(1, 0),) + tb.ops
    p = _edit_tb(_edit_tb(base, 0, 1, ops=(target,) + second.ops[1:]), 0, 0, ops=nop_then_plain)
    with pytest.raises(InputError, match="parser rule"):
        program_to_xml(p, "executor")
    re_op = Op("re", "o", 0, "o", 1, 1)
    chain = _edit_tb(base, 0, 0, ops=tb.ops + (re_op,) * 17)
    with pytest.raises(InputError, match="more than 16 fusable re"):
        program_to_xml(chain, "legacy")
    accidental = _edit_tb(base, 0, 0, ops=tb.ops + (re_op, Op("cpy", "i", 0, "o", 1, 1)))
    with pytest.raises(InputError, match="fused into the re"):
        program_to_xml(accidental, "legacy")
    ok = _edit_tb(base, 0, 0, ops=tb.ops + (re_op,) * 16)
    program_to_xml(ok, "legacy")


def test_per_profile_limits():
    big = lower(registry()["ring"].build(resolve_topology("ring:40"), "allreduce", None, None),
                LoweringOptions(runtime="legacy", channel_policy="one"))
    assert big.max_ops_per_threadblock > 64
    check_xml_shape(program_to_xml(big, "legacy"))
    for runtime in ("executor", "rccl"):
        with pytest.raises(InputError, match=f"allows {PROFILES[runtime].max_steps}"):
            program_to_xml(big, runtime)
    wide = _small()
    gpu = wide.gpus[0]
    extra = tuple(Threadblock(len(gpu.threadblocks) + j, -1, -1, 0, ()) for j in range(64))
    wide = replace(wide, gpus=(replace(gpu, threadblocks=gpu.threadblocks + extra),) + wide.gpus[1:])
    program_to_xml(wide, "executor")
    with pytest.raises(InputError, match="thread blocks; rccl allows 64"):
        program_to_xml(wide, "rccl")
    deep = _edit_op(wide, 0, 0, 0, dep_tb=130, dep_op=0)
    with pytest.raises(InputError, match="missing step|> 127"):
        program_to_xml(deep, "executor")
    gather = lower(registry()["binomial_tree"].build(resolve_topology("ring:4"), "gather", None, None))
    program_to_xml(gather, "executor")
    with pytest.raises(InputError, match="legacy runtime has no collective 'gather'"):
        program_to_xml(gather, "legacy")
    with pytest.raises(InputError, match="unknown runtime"):
        program_to_xml(gather, "nccl")


def test_legacy_chunk_counts():
    p = _program("ring4_allgather")
    bad = replace(p, gpus=(replace(p.gpus[0], input_chunks=3),) + p.gpus[1:])
    program_to_xml(bad, "executor")
    with pytest.raises(InputError, match="i_chunks 3 must be 0 or 2"):
        program_to_xml(bad, "legacy")


# ---------------------------------------------------------------------- program JSON
def test_program_json_errors_name_the_path(tmp_path):
    doc = program_to_dict(_small())
    doc["gpus"][1]["threadblocks"][0]["ops"][2]["type"] = "ra"
    with pytest.raises(InputError, match=r"^program: gpus\[1\]\.threadblocks\[0\]\.ops\[2\]\.type: must be one of"):
        program_from_dict(doc)
    doc = program_to_dict(_small())
    doc["gpus"][0]["threadblocks"][0]["ops"][0]["count"] = 1.0
    with pytest.raises(InputError, match=r"ops\[0\]\.count: must be an integer >= 0, got 1.0"):
        program_from_dict(doc)
    doc = program_to_dict(_small())
    doc["gpus"][0]["threadblocks"][0]["colour"] = "red"
    with pytest.raises(InputError, match=r"threadblocks\[0\]: unknown key 'colour'"):
        program_from_dict(doc)
    doc = program_to_dict(_small())
    doc["version"] = 3
    with pytest.raises(InputError, match="unsupported synth.program version 3"):
        program_from_dict(doc)
    path = tmp_path / "bad.json"
    path.write_text('{"format": "synth.program", "version": 1, "name": 3}')
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: ") as info:
        load_program(path)
    assert "\n" not in str(info.value)
    path.write_text(program_to_json(_small()))
    assert load_program(path) == _small()


def test_exporter_registry():
    program = _small()
    assert EXPORTERS["program-json"].render(program, None) == program_to_json(program)
    assert EXPORTERS["msccl-xml"].render(program, "rccl") == program_to_xml(program, "rccl")


_names = st.from_regex(r"[A-Za-z0-9_.+-]{1,63}", fullmatch=True)
_ints = st.integers(min_value=-1, max_value=40000)
_ops = st.builds(Op, st.sampled_from(OP_TYPES), st.sampled_from(BUFFERS), _ints, st.sampled_from(BUFFERS), _ints,
                 st.integers(0, 80), st.integers(-1, 200), st.integers(-1, 300), st.booleans())
_tbs = st.builds(Threadblock, st.integers(0, 300), st.integers(-1, 8), st.integers(-1, 8), st.integers(0, 40),
                 st.lists(_ops, max_size=5).map(tuple))
_json = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
                     lambda inner: (st.lists(inner, max_size=3)
                                    | st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                     max_leaves=6)


@st.composite
def programs(draw) -> Program:
    ranks = draw(st.integers(1, 4))
    gpus = tuple(RankProgram(r, draw(st.integers(0, 99)), draw(st.integers(0, 99)), draw(st.integers(0, 99)),
                             tuple(draw(st.lists(_tbs, max_size=3)))) for r in range(ranks))
    min_bytes = draw(st.integers(0, 1 << 40))
    return Program(draw(_names), draw(st.sampled_from(["allgather", "allreduce", "custom", "reduce_scatter"])),
                   ranks, draw(st.sampled_from(PROTOCOLS)), draw(st.integers(1, 999)), draw(st.booleans()),
                   draw(st.booleans()), draw(st.integers(1, 64)), gpus, min_bytes,
                   draw(st.none() | st.integers(min_bytes, 1 << 50)),
                   draw(st.dictionaries(st.text(max_size=6), _json, max_size=3)))


@settings(max_examples=60, deadline=None)
@given(programs())
def test_program_json_round_trip(program):
    doc = program_to_dict(program)
    jsonschema.Draft202012Validator(program_schema()).validate(doc)
    assert program_from_dict(doc) == program
    assert program_from_json(program_to_json(program)) == program


# ---------------------------------------------------------------------- CLI
def _run(argv: list[str]) -> int:
    """Parse and run like synth.cli.main.main: a SynthError is one line and its exit code."""
    from synth.cli.common import Parser as _Parser

    parser = _Parser(prog="synth")
    add_export_parser(parser.add_subparsers(dest="command", parser_class=_Parser))
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except SynthError as exc:
        print(f"synth: error: {exc}", file=__import__("sys").stderr)
        return exc.exit_code


@pytest.fixture
def schedule_file(tmp_path):
    path = tmp_path / "ring.schedule.json"
    save_schedule(path, _schedule("ring4_allreduce"))
    return path


def test_cli_export_writes_both_formats(tmp_path, schedule_file, capsys):
    out = tmp_path / "ring.xml"
    assert _run(["export", str(schedule_file), "--format", "msccl-xml", "--runtime", "legacy",
                 "--channel-policy", "one", "--max-bytes", "1M", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "footprint: 2 thread blocks per rank, 1 channel(s)" in err and "(legacy)" in err
    text = out.read_text()
    check_xml_shape(text)
    assert 'coll="allreduce"' in text and 'maxBytes="1048577"' in text
    out_json = tmp_path / "ring.program.json"
    assert _run(["export", str(schedule_file), "--format", "program-json", "--channels", "2", "--instances", "2",
                 "--inplace", "--proto", "LL", "-o", str(out_json)]) == 0
    program = load_program(out_json)
    assert program.inplace and program.protocol == "LL" and program.meta["lowering"]["instances"] == 2
    replay(program, _schedule("ring4_allreduce").collective)


def test_cli_export_bad_input_writes_nothing(tmp_path, schedule_file, capsys):
    out = tmp_path / "never.xml"
    cases = (
        ([str(tmp_path / "missing.json"), "--format", "msccl-xml"], "no such file"),
        ([str(schedule_file), "--format", "msccl-xml", "--max-threadblocks", "1"], "thread blocks"),
        ([str(schedule_file), "--format", "msccl-xml", "--max-bytes", "lots"], "--max-bytes: bad size"),
        ([str(schedule_file), "--format", "msccl-xml", "--channels", "2", "--channel-policy", "one"], "not allowed"),
        ([str(schedule_file), "--format", "yaml"], "invalid choice"),
    )
    for argv, pattern in cases:
        assert _run(["export"] + argv + ["-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert pattern in err and err.count("\n") == 1, err
        assert not out.exists()
    broken = tmp_path / "broken.schedule.json"
    doc = json.loads(schedule_file.read_text())
    doc["steps"] = doc["steps"][:-1]
    broken.write_text(json.dumps(doc))
    assert _run(["export", str(broken), "--format", "program-json", "-o", str(out)]) == 4
    assert "invalid schedule" in capsys.readouterr().err and not out.exists()


def test_a_new_exporter_record_is_all_the_cli_and_the_selection_exporter_need(monkeypatch):
    from synth.cli.main import build_parser
    from synth.exporters import EXPORTERS, Exporter
    from synth.exporters.selection import file_name, is_export_name, parse_selection

    monkeypatch.setitem(EXPORTERS, "plan-text", Exporter("plan-text", "a test format", ".plan.txt",
                                                         lambda program, runtime: "plan"))
    doc = {"format": "synth.selection", "version": 1, "topology": "dgx1", "collective": "allgather",
           "ranges": [{"min_bytes": 0, "max_bytes": None, "schedule": "s.json", "label": "ring"}]}
    selection = parse_selection(doc, "sel.json")
    name = file_name(selection, selection.ranges[0], "plan-text")
    assert name == "allgather.dgx1.00.ring.0-inf.plan.txt" and is_export_name(name)
    args = build_parser().parse_args(["export", "s.json", "--format", "plan-text", "-o", "x"])
    assert args.format == "plan-text"
