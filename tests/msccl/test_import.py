"""MSCCL XML importer (tokenizer rules), load rules per profile, and the data-level replay."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.cli.check import add_check_parser
from synth.cli.common import Parser as _Parser
from synth.core.errors import InputError
from synth.msccl.load_rules import PROFILES, check_profile, check_program, ok
from synth.msccl.xml_reader import read_xml, read_xml_file, strtol
from synth.program import document as program_json
from synth.program.ir import BUFFERS, OP_TYPES, Op, Program, RankProgram, Threadblock, with_threadblock
from synth.program.replay import replay


# ---------------------------------------------------------------------- a tiny writer (section 2 shape)
def write_xml(p: Program, coll: str | None = None, algo_extra: str = "") -> str:
    """Exactly the shape of msccl-format.md section 2: all attributes on one line, double quotes."""
    lines = [f'<algo name="{p.name}" proto="{p.protocol}" nchannels="{p.channels}" '
             f'nchunksperloop="{p.chunks_per_loop}" '
             f'ngpus="{p.ranks}" coll="{coll or p.collective}" inplace="{int(p.inplace)}" '
             f'outofplace="{int(p.outofplace)}" minBytes="{p.min_bytes}" maxBytes="{p.max_bytes or 0}"{algo_extra}>']
    for g in p.gpus:
        lines.append(f'  <gpu id="{g.rank}" i_chunks="{g.input_chunks}" o_chunks="{g.output_chunks}" '
                     f's_chunks="{g.scratch_chunks}">')
        for tb in g.threadblocks:
            lines.append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.channel}">')
            for s, op in enumerate(tb.ops):
                lines.append(f'      <step s="{s}" type="{op.type}" srcbuf="{op.src_buf}" srcoff="{op.src_off}" '
                             f'dstbuf="{op.dst_buf}" dstoff="{op.dst_off}" cnt="{op.count}" depid="{op.dep_tb}" '
                             f'deps="{op.dep_op}" hasdep="{int(op.has_dep)}"/>')
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def allgather2(**changes) -> Program:
    """A correct out-of-place allgather on 2 ranks: exchange, then copy the own chunk."""
    gpus = []
    for r in range(2):
        peer = 1 - r
        net = Threadblock(0, peer, peer, 0, (Op("s", "i", 0, "o", r, 1), Op("r", "i", 0, "o", peer, 1)))
        local = Threadblock(1, -1, -1, 0, (Op("cpy", "i", 0, "o", r, 1),))
        gpus.append(RankProgram(r, 1, 2, 0, (net, local)))
    p = Program("ag", "allgather", 2, "Simple", 2, False, True, 1, tuple(gpus), 0, 1 << 20)
    return replace(p, **changes)


def with_tb(p: Program, rank: int, index: int, **changes) -> Program:
    return with_threadblock(p, rank, index, **changes)


def with_op(p: Program, rank: int, index: int, pos: int, **changes) -> Program:
    ops = list(p.gpus[rank].threadblocks[index].ops)
    ops[pos] = replace(ops[pos], **changes)
    return with_tb(p, rank, index, ops=tuple(ops))


def codes(text: str, profile: str = "legacy", severity: str | None = None) -> set[str]:
    found = check_profile(read_xml(text), PROFILES[profile])
    return {p.code for p in found if severity is None or p.severity == severity}


BASE = write_xml(allgather2())


def test_base_file_is_clean_everywhere():
    parsed = read_xml(BASE)
    assert parsed.lexical == () and parsed.missing == ()
    for name in PROFILES:
        assert ok(check_profile(parsed, PROFILES[name])), name
    assert replay(parsed.program).correct is True


# ---------------------------------------------------------------------- tokenizer
def test_strtol_reads_like_c():
    assert strtol("010") == (8, "octal")
    assert strtol("0x10") == (16, "hex")
    assert strtol("007") == (7, None)  # octal, but the same number
    assert strtol("abc") == (0, "not-a-number")
    assert strtol(" -3") == (-3, None)
    assert strtol("4294967297") == (1, "out-of-range")


@pytest.mark.parametrize("edit, code", [
    (lambda t: '<?xml version="1.0"?>\n' + t, "xml-declaration"),
    (lambda t: t.replace("\n  <gpu", "\n\t<gpu", 1), "tab"),
    (lambda t: t.replace('<tb id="0" send', '<tb\tid="0" send', 1), "tab"),
    (lambda t: t.replace(' send="1"', '\n send="1"', 1), "multiline-tag"),
    (lambda t: t.replace('chan="0"', "chan='0'", 1), "single-quote"),
    (lambda t: t.replace('chan="0"', "chan=0", 1), "unquoted-value"),
    (lambda t: t.replace("</algo>", ""), "syntax"),
    (lambda t: t.replace("</tb>", "</gpu>", 1), "syntax"),
])
def test_text_the_reader_fails_on_is_rejected_by_every_runtime(edit, code):
    text = edit(BASE)
    for name in PROFILES:
        found = check_profile(read_xml(text), PROFILES[name])
        assert any(p.code == code and p.severity == "rejects" for p in found), (name, [str(p) for p in found])
    assert read_xml(text).program.ranks == 2  # recovered enough to check the rest


def test_misread_integers_are_flagged_and_read_as_c_does():
    parsed = read_xml(BASE.replace('cnt="1"', 'cnt="010"', 1).replace('srcoff="0"', 'srcoff="zero"', 1))
    assert parsed.program.gpus[0].threadblocks[0].ops[0].count == 8
    assert {x.code: x.severity for x in parsed.lexical} == {"octal": "misbehaves", "not-a-number": "misbehaves"}
    assert read_xml(BASE.replace('cnt="1"', 'cnt="0x1"', 1)).lexical[0].severity == "note"


def test_long_values_and_too_many_attributes():
    assert "long-value" in codes(BASE.replace('name="ag"', f'name="{"x" * 300}"'))
    crowded = BASE.replace('<step s="0"', '<step a="1" b="1" c="1" d="1" e="1" f="1" g="1" s="0"', 1)
    found = codes(crowded)
    assert {"too-many-attributes", "missing-attribute"} <= found  # the dropped ones are the last: hasdep...


def test_unknown_elements_and_attributes_are_ignored():
    text = BASE.replace('<gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">',
                        '<gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">\n    <copy i_off="0" o_off="0"/>')
    text = text.replace('maxBytes="1048576"', 'maxBytes="1048576" redop="nop"')
    parsed = read_xml(text)
    assert [x.code for x in parsed.lexical] == ["ignored-element"]
    assert "ignored by all runtimes" in parsed.lexical[0].message
    assert all(ok(check_profile(parsed, PROFILES[n])) for n in PROFILES)


def test_comments_before_algo_and_explicit_closing_steps_are_fine():
    text = "<!-- Copyright -->\n<!-- more -->\n" + BASE.replace('hasdep="0"/>', 'hasdep="0"></step>')
    parsed = read_xml(text)
    assert parsed.lexical == () and parsed.first_element == "algo"
    assert all(ok(check_profile(parsed, PROFILES[n])) for n in PROFILES)


def test_missing_attributes_are_recorded_not_raised():
    parsed = read_xml(BASE.replace(' hasdep="0"', "", 1).replace(' chan="0"', "", 1).replace(' i_chunks="1"', "", 1))
    assert {(m.element, m.names) for m in parsed.missing} == {("step", ("hasdep",)), ("tb", ("chan",)),
                                                               ("gpu", ("i_chunks",))}
    assert "missing-attribute" in codes(BASE.replace(' hasdep="0"', "", 1), "executor", "rejects")


@pytest.mark.parametrize("text", ["", "garbage", "<algo", "<algo name=", '<algo name="x"', "\x00\xff<<>>",
                                  "<algo><gpu><tb><step/></tb></gpu></algo>", "</algo>", "<a><b></a>",
                                  '<algo ngpus="999999999"><gpu id="-5"/></algo>', BASE[: len(BASE) // 2]])
def test_malformed_text_never_raises(text):
    parsed = read_xml(text)
    for name in PROFILES:
        assert not ok(check_profile(parsed, PROFILES[name])) or text == ""
    replay(parsed.program)


def test_read_xml_file_unreadable(tmp_path):
    with pytest.raises(InputError):
        read_xml_file(tmp_path / "absent.xml")


# ---------------------------------------------------------------------- load rules, one broken rule each
def _edit(old: str, new: str, count: int = 1):
    return lambda t: t.replace(old, new, count)


def _program(mutate):
    return lambda t: write_xml(mutate(allgather2()))


def _many_nops(p: Program, n: int) -> Program:
    ops = p.gpus[0].threadblocks[1].ops + (Op("nop", "i", -1, "o", -1, 0),) * n
    return with_tb(p, 0, 1, ops=ops)


def _many_blocks(p: Program, n: int, **tb) -> Program:
    extra = tuple(Threadblock(2 + k, -1, -1, 0, (Op("cpy", "i", 0, "o", 0, 1),)) for k in range(n))
    gpus = list(p.gpus)
    gpus[0] = replace(gpus[0], threadblocks=gpus[0].threadblocks + extra)
    return replace(p, gpus=tuple(gpus))


def _fusable(p: Program) -> Program:
    res = tuple(Op("re", "i", 0, "s", 0, 1) for _ in range(16)) + tuple(Op("re", "i", 0, "s", 1, 1) for _ in range(17))
    p = with_tb(p, 0, 1, ops=(Op("cpy", "i", 0, "s", 0, 1), Op("cpy", "i", 0, "s", 1, 1)) + res
                + (Op("cpy", "i", 0, "o", 0, 1),))
    gpus = list(p.gpus)
    gpus[0] = replace(gpus[0], scratch_chunks=2)
    return replace(p, gpus=tuple(gpus))


def _crowded_channel(p: Program) -> Program:
    extra = tuple(Threadblock(2 + k, 1, -1, 0, (Op("nop", "i", -1, "o", -1, 0),)) for k in range(32))
    return replace(p, gpus=(replace(p.gpus[0], threadblocks=p.gpus[0].threadblocks + extra), p.gpus[1]))


def _dependency(p: Program, dep_tb: int, dep_op: int, has_dep: bool = True) -> Program:
    p = with_op(p, 0, 0, 0, has_dep=has_dep)
    return with_op(p, 0, 1, 0, dep_tb=dep_tb, dep_op=dep_op)


RULES = [  # (what, edit of BASE, code, severity, profiles where it shows)
    ("executor needs minBytes", _edit(' minBytes="0"', ""), "missing-attribute", "rejects", ("executor", "rccl")),
    ("legacy needs name", _edit(' name="ag"', ""), "missing-attribute", "rejects", ("legacy",)),
    ("protocol name", _edit('proto="Simple"', 'proto="simple"'), "protocol", "rejects", ("legacy", "executor", "rccl")),
    ("reducescatter spelling", _edit('coll="allgather"', 'coll="reducescatter"'), "collective", "rejects", ("legacy",)),
    ("reduce_scatter spelling", _edit('coll="allgather"', 'coll="reduce_scatter"'), "collective", "rejects",
     ("executor", "rccl")),
    ("custom is legacy only", _edit('coll="allgather"', 'coll="custom"'), "collective", "rejects",
     ("executor", "rccl")),
    ("unknown collective", _edit('coll="allgather"', 'coll="allgathr"'), "collective", "rejects",
     ("legacy", "executor", "rccl")),
    ("ngpus without a gpu", _edit('ngpus="2"', 'ngpus="3"'), "no-blocks", "misbehaves", ("legacy", "executor", "rccl")),
    ("minBytes > maxBytes", _edit('minBytes="0"', 'minBytes="9999999"'), "byte-range", "rejects", ("legacy",)),
    ("i/o chunks vs nchunksperloop", _edit('o_chunks="2"', 'o_chunks="3"'), "chunk-counts", "rejects", ("legacy",)),
    ("nthreads % 32", _edit('maxBytes="1048576"', 'maxBytes="1048576" nthreads="100"'), "nthreads", "rejects",
     ("legacy",)),
    ("duplicate tb id", _edit('<tb id="1"', '<tb id="0"'), "tb-id", "rejects", ("legacy", "executor", "rccl")),
    ("tb id gap", _edit('<tb id="1"', '<tb id="2"'), "tb-id", "rejects", ("legacy", "executor", "rccl")),
    ("peer is self", _program(lambda p: with_tb(p, 0, 1, send=0)), "peer", "rejects", ("legacy", "executor", "rccl")),
    ("peer out of range", _program(lambda p: with_tb(p, 0, 1, recv=7)), "peer", "rejects", ("legacy",)),
    ("chan -1", _program(lambda p: with_tb(p, 0, 1, channel=-1)), "channel", "rejects", ("legacy", "executor", "rccl")),
    ("chan >= nchannels", _program(lambda p: with_tb(p, 0, 1, channel=1)), "channel", "misbehaves", ("legacy",)),
    ("steps per tb", _program(lambda p: _many_nops(p, 70)), "step-limit", "rejects", ("executor", "rccl")),
    ("tbs per rank", _program(lambda p: _many_blocks(p, 63)), "tb-limit", "rejects", ("rccl",)),
    ("elements per rank", _program(lambda p: _many_blocks(_many_nops(p, 200), 4000)), "elements", "rejects",
     ("legacy", "executor", "rccl")),
    ("s is not the position", _edit('<step s="1"', '<step s="5"'), "step-number", "misbehaves", ("legacy",)),
    ("s beyond the limit", _edit('<step s="1"', '<step s="300"'), "step-limit", "rejects",
     ("legacy", "executor", "rccl")),
    ("unknown type", _program(lambda p: with_op(p, 0, 1, 0, type="copy")), "step-type", "rejects", ("legacy",)),
    ("ra on executor", _program(lambda p: with_op(p, 0, 1, 0, type="ra")), "step-type", "rejects",
     ("executor", "rccl")),
    ("ra on legacy hangs", _program(lambda p: with_op(p, 0, 1, 0, type="ra")), "step-type", "misbehaves", ("legacy",)),
    ("buffer letter", _program(lambda p: with_op(p, 0, 1, 0, dst_buf="x")), "buffer", "rejects", ("legacy",)),
    ("offset the parser checks", _program(lambda p: with_op(p, 0, 0, 0, src_off=5)), "offset", "rejects", ("legacy",)),
    ("off+cnt past the end", _program(lambda p: with_op(with_op(p, 0, 0, 0, count=2), 1, 0, 1, count=2)), "offset",
     "misbehaves", ("legacy", "executor", "rccl")),
    ("rrc offsets are unchecked", _program(lambda p: with_op(p, 0, 0, 1, type="rrc", src_off=9)), "offset",
     "misbehaves", ("legacy",)),
    ("cnt 72", _program(lambda p: with_op(p, 0, 1, 0, count=72)), "count", "rejects", ("legacy",)),
    ("cnt 0 on data", _program(lambda p: with_op(p, 0, 1, 0, count=0)), "count", "misbehaves", ("legacy",)),
    ("hasdep 2", _edit('hasdep="0"/>', 'hasdep="2"/>'), "hasdep", "rejects", ("legacy", "executor", "rccl")),
    ("send without a send peer", _program(lambda p: with_op(p, 0, 1, 0, type="s")), "peer", "rejects", ("legacy",)),
    ("two owners of one FIFO", _program(lambda p: with_tb(p, 0, 1, send=1, ops=(Op("cpy", "i", 0, "o", 0, 1),))),
     "shared-fifo", "misbehaves", ("legacy",)),
    ("peers per channel", _program(_crowded_channel), "peers-per-channel", "rejects", ("legacy",)),
    ("dependency on a missing tb", _program(lambda p: _dependency(p, 5, 0)), "dependency", "misbehaves", ("legacy",)),
    ("dependency never released", _program(lambda p: _dependency(p, 0, 1, has_dep=False)), "dependency",
     "misbehaves", ("legacy",)),
    ("dependency id > 127", _program(lambda p: _dependency(_many_blocks(p, 128), 129, 0)), "dep-id-overflow",
     "misbehaves", ("legacy", "executor")),
    ("nop chain before depid -1", _program(lambda p: with_tb(_dependency(p, 0, 0), 0, 1, ops=(
        Op("nop", "i", -1, "o", -1, 0, 0, 0), Op("cpy", "i", 0, "o", 0, 1)))), "nop-chain", "rejects", ("legacy",)),
    ("17 fusable re", _program(_fusable), "fused-reduces", "misbehaves", ("legacy",)),
    ("sends without receives", _program(lambda p: with_tb(p, 1, 0, ops=p.gpus[1].threadblocks[0].ops[:1])),
     "unmatched", "misbehaves", ("legacy",)),
    ("count mismatch", _program(lambda p: with_op(p, 1, 0, 1, count=2, dst_off=0)), "count-mismatch", "misbehaves",
     ("legacy",)),
    ("both receive first", _program(lambda p: with_tb(with_tb(p, 0, 0, ops=p.gpus[0].threadblocks[0].ops[::-1]), 1, 0,
                                                      ops=p.gpus[1].threadblocks[0].ops[::-1])),
     "deadlock", "misbehaves", ("legacy", "executor", "rccl")),
]


@pytest.mark.parametrize("what, edit, code, severity, profiles", RULES, ids=[r[0] for r in RULES])
def test_each_load_rule(what, edit, code, severity, profiles):
    parsed = read_xml(edit(BASE))
    for name in PROFILES:
        found = check_profile(parsed, PROFILES[name])
        hit = [p for p in found if p.code == code and p.severity == severity]
        if name in profiles:
            assert hit, (name, [str(p) for p in found])
            assert not ok(found)
    if code in ("collective", "byte-range", "chunk-counts", "nthreads", "step-limit", "tb-limit") and len(profiles) < 3:
        clean = [n for n in PROFILES if n not in profiles]
        assert all(not [p for p in check_profile(parsed, PROFILES[n]) if p.code == code and p.severity == severity]
                   for n in clean)


def test_problems_carry_locations():
    parsed = read_xml(write_xml(with_op(allgather2(), 1, 1, 0, count=72)))
    (p,) = [p for p in check_profile(parsed, PROFILES["legacy"]) if p.code == "count"]
    assert (p.rank, p.tb, p.step, p.line) == (1, 1, 0, 17)
    assert str(p).startswith("rejects: line 17 rank 1 tb 1 step 0: cnt=72")


def test_check_program_needs_a_known_collective():
    assert ok(check_program(allgather2(), PROFILES["executor"]))
    assert "collective" in {p.code for p in check_program(replace(allgather2(), collective="custom"), PROFILES["rccl"])}


# ---------------------------------------------------------------------- replay
def _codes(result) -> set[str]:
    return {p.code for p in result.problems}


def test_replay_catches_a_deadlock():
    p = allgather2()
    p = with_tb(with_tb(p, 0, 0, ops=p.gpus[0].threadblocks[0].ops[::-1]), 1, 0,
                ops=p.gpus[1].threadblocks[0].ops[::-1])
    result = replay(p)
    assert result.correct is False and "deadlock" in _codes(result)


def test_replay_catches_out_of_bounds_and_unwritten_scratch():
    result = replay(with_op(allgather2(), 0, 1, 0, src_off=3))
    assert result.correct is False and "out-of-bounds" in _codes(result)
    p = with_op(allgather2(), 0, 0, 0, src_buf="s")
    p = replace(p, gpus=(replace(p.gpus[0], scratch_chunks=1), p.gpus[1]))
    result = replay(p)
    assert result.correct is False and "unwritten" in _codes(result)
    assert any(x.code == "unwritten" and (x.rank, x.tb, x.step) == (0, 0, 0) for x in result.problems)


def test_replay_catches_a_wrong_result():
    result = replay(with_op(allgather2(), 1, 1, 0, dst_off=0))  # rank 1 copies its chunk over rank 0's
    assert result.correct is False and "wrong-result" in _codes(result)


def allreduce2(inplace: bool) -> Program:
    """2 ranks, 2 chunks: reduce-scatter by exchange, then all-gather."""
    out = "i" if inplace else "o"
    gpus = []
    for r in range(2):
        peer, mine, other = 1 - r, r, 1 - r
        ops = (Op("s", "i", other, "i", other, 1), Op("rrc", "i", mine, out, mine, 1),
               Op("s", out, mine, out, mine, 1), Op("r", "i", other, out, other, 1))
        gpus.append(RankProgram(r, 2, 0 if inplace else 2, 0, (Threadblock(0, peer, peer, 0, ops),)))
    return Program("ar", "allreduce", 2, "LL", 2, inplace, not inplace, 1, tuple(gpus))


def test_replay_allreduce_in_place_and_out_of_place():
    assert replay(allreduce2(True)).correct is True
    assert replay(allreduce2(False)).correct is True
    both = replace(allreduce2(False), inplace=True)  # out-of-place program also claims in-place
    assert replay(both).correct is True  # reads each input chunk before writing it: safe when aliased
    doubled = with_op(allreduce2(True), 0, 0, 1, src_off=1, src_buf="i")  # reduces the wrong local chunk
    assert replay(doubled).correct is False


def test_replay_double_count():
    p = allreduce2(False)
    ops = p.gpus[0].threadblocks[0].ops
    p = with_tb(p, 0, 0, ops=ops[:2] + (Op("re", "i", 0, "o", 0, 1),) + ops[2:])
    result = replay(p)
    assert result.correct is False and "double-count" in _codes(result)


def test_replay_in_place_allgather_aliases_input_into_output():
    gpus = []
    for r in range(2):
        peer = 1 - r
        gpus.append(RankProgram(r, 0, 2, 0, (Threadblock(0, peer, peer, 0, (
            Op("s", "o", r, "o", r, 1), Op("r", "o", peer, "o", peer, 1))),)))
    assert replay(Program("ag", "allgather", 2, "LL", 2, True, False, 1, tuple(gpus))).correct is True


def _reads_received_chunk(p: Program, dep: bool) -> Program:
    """Rank 0's local block also copies o[1] (received by tb 0 step 1) into scratch."""
    p = with_op(p, 0, 0, 1, has_dep=dep)
    copy = Op("cpy", "o", 1, "s", 0, 1, 0 if dep else -1, 1 if dep else -1)
    p = with_tb(p, 0, 1, ops=p.gpus[0].threadblocks[1].ops + (copy,))
    return replace(p, gpus=(replace(p.gpus[0], scratch_chunks=1), p.gpus[1]))


def test_replay_finds_data_races_whatever_the_order():
    result = replay(_reads_received_chunk(allgather2(), dep=False))
    races = [x for x in result.problems if x.code == "data-race"]
    assert result.correct is False and races
    assert str(races[0]) == ("misbehaves: rank 0 tb 1 step 1: data race on rank 0 o[1]: tb 1 step 1 (cpy) reads it, "
                             "unordered with the write by tb 0 step 1 (r) [data-race]")
    assert "order-dependent" in _codes(result)  # some orders also read it unwritten
    assert replay(_reads_received_chunk(allgather2(), dep=True)).correct is True


def test_replay_does_not_judge_custom_collectives():
    result = replay(replace(allgather2(), collective="custom"))
    assert result.correct is None and result.problems == ()


def test_replay_finds_shared_fifos_and_order_dependence():
    p = with_tb(allgather2(), 0, 1, send=1, ops=(Op("s", "i", 0, "o", 0, 1),))  # a second sender to rank 1
    result = replay(p)
    assert result.correct is False and "shared-fifo" in _codes(result)


# ---------------------------------------------------------------------- round trip through the tiny writer
@st.composite
def programs(draw):
    ranks = draw(st.integers(1, 4))
    channels = draw(st.integers(1, 3))
    small = st.integers(-1, 20)
    gpus = []
    for r in range(ranks):
        k = draw(st.integers(0, 3))
        peer = st.sampled_from([-1] + [q for q in range(ranks) if q != r])
        tbs = []
        for t in range(k):
            ops = tuple(Op(draw(st.sampled_from(OP_TYPES)), draw(st.sampled_from(BUFFERS)), draw(small),
                           draw(st.sampled_from(BUFFERS)), draw(small), draw(st.integers(0, 71)),
                           draw(st.integers(-1, k - 1)), draw(small), draw(st.booleans()))
                        for _ in range(draw(st.integers(0, 5))))
            tbs.append(Threadblock(t, draw(peer), draw(peer), draw(st.integers(0, channels - 1)), ops))
        gpus.append(RankProgram(r, draw(st.integers(0, 9)), draw(st.integers(0, 9)), draw(st.integers(0, 9)),
                                tuple(tbs)))
    inplace = draw(st.booleans())
    return Program(draw(st.text("abcxyz_-0123456789", min_size=1, max_size=12)),
                   draw(st.sampled_from(["allreduce", "allgather", "reduce_scatter", "alltoall", "custom"])),
                   ranks, draw(st.sampled_from(["Simple", "LL", "LL128"])), draw(st.integers(1, 64)), inplace,
                   draw(st.booleans()), channels, tuple(gpus), draw(st.integers(0, 1 << 40)),
                   draw(st.none() | st.integers(1, 1 << 40)), meta={})


@settings(max_examples=60, deadline=None)
@given(programs())
def test_written_programs_read_back_unchanged(program):
    parsed = read_xml(write_xml(program))
    assert parsed.lexical == () and parsed.missing == ()
    assert replace(parsed.program, meta={}) == program
    for name in PROFILES:  # the checker never raises on arbitrary (mostly invalid) programs
        check_profile(parsed, PROFILES[name])
    replay(parsed.program, orders=2)


# ---------------------------------------------------------------------- command line
def _cli(argv: list[str]) -> int:
    parser = _Parser(prog="synth")
    add_check_parser(parser.add_subparsers(parser_class=_Parser))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_check_exit_codes_and_json(tmp_path, capsys):
    good, bad = tmp_path / "good.xml", tmp_path / "bad.xml"
    good.write_text(BASE)
    bad.write_text(BASE.replace(' minBytes="0"', ""))
    assert _cli(["check", str(good)]) == 0
    assert "replay" in capsys.readouterr().out
    assert _cli(["check", str(bad), "--runtime", "legacy"]) == 0
    capsys.readouterr()
    assert _cli(["check", str(bad), "--runtime", "legacy,executor", "--json"]) == 4
    assert json.loads(capsys.readouterr().out)["profiles"]["legacy"]["loads"] is True
    assert _cli(["check", str(bad), "--json", "--runtime", "rccl", "--runtime", "executor"]) == 4
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"profiles", "targets", "replay"} and doc["targets"] == ["executor", "rccl"]
    assert list(doc["profiles"]) == ["legacy", "executor", "rccl"]  # every verdict shown, the targets judged
    assert doc["profiles"]["rccl"]["loads"] is False
    assert doc["profiles"]["rccl"]["problems"][0].startswith("rejects: line 1: <algo> lacks minBytes")
    assert doc["replay"] == {"correct": True, "problems": []}


def test_cli_check_bad_input(tmp_path):
    with pytest.raises(InputError):
        _cli(["check", str(tmp_path / "absent.xml")])
    (tmp_path / "x.xml").write_text("hello")
    with pytest.raises(InputError):
        _cli(["check", str(tmp_path / "x.xml")])
    with pytest.raises(InputError):
        _cli(["check", str(tmp_path / "x.xml"), "--runtime", "nccl"])


def test_cli_check_reports_a_deadlocked_file(tmp_path, capsys):
    p = allgather2()
    p = with_tb(with_tb(p, 0, 0, ops=p.gpus[0].threadblocks[0].ops[::-1]), 1, 0,
                ops=p.gpus[1].threadblocks[0].ops[::-1])
    path = tmp_path / "dead.xml"
    path.write_text(write_xml(p))
    assert _cli(["check", str(path)]) == 4
    out = capsys.readouterr().out
    assert "loads, but misbehaves" in out and "INCORRECT" in out and "[deadlock]" in out



_EDIT = st.tuples(st.integers(0, len(BASE)), st.integers(0, 12),
                  st.text("<>/=\"'\t\n -!?0123456789abgipsotx", max_size=6))


@settings(max_examples=150, deadline=None)
@given(st.lists(_EDIT, max_size=5))
def test_damaged_text_gives_problems_never_a_traceback(edits):
    text = BASE
    for pos, cut, insert in edits:
        text = text[:pos] + insert + text[pos + cut:]
    parsed = read_xml(text)
    for name in PROFILES:
        check_profile(parsed, PROFILES[name])
    replay(parsed.program, orders=2)


def test_cli_check_reads_synth_program_json(tmp_path, capsys):
    path = tmp_path / "ag.json"
    path.write_text(program_json.program_to_json(allgather2()))
    assert _cli(["check", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["replay"]["correct"] is True
    broken = with_op(allgather2(), 1, 1, 0, dst_off=0)
    path.write_text(program_json.program_to_json(broken))
    assert _cli(["check", str(path)]) == 4
