"""synth check's reading of a tuner config: the lines that never apply and the sizes that fall
through, checked against a brute-force replay of the plugin's matching."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from synth.tuner.config import MAX_BYTES, TUNED, TunerLine, render
from synth.tuner.rules import ALWAYS, OFFERED, check_text, lookup

REFERENCE_EXAMPLE = """\
# synth -> NCCL example tuner plugin, 1 node x 8 GPUs
# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff
allreduce,0,32767,ring,ll,8,1,8,-1,-1
allreduce,32768,1048575,ring,ll128,16,1,8,-1,-1
allreduce,1048576,18446744073709551615,ring,simple,24,1,8,-1,-1
# safety net: reached only when the line above matched but NCCL marked its algo/proto IGNORE
allreduce,0,18446744073709551615,ring,simple,24,1,8,-1,-1
allgather,0,65535,ring,ll,8,1,8
allgather,65536,18446744073709551615,ring,simple,24,1,8
reducescatter,0,65535,ring,ll,8,1,8
reducescatter,65536,18446744073709551615,ring,simple,24,1,8
broadcast,0,18446744073709551615,ring,simple,24,1,8
reduce,0,18446744073709551615,ring,simple,24,1,8
"""


def test_the_reference_example_config_passes():
    checked = check_text(REFERENCE_EXAMPLE)
    assert checked.ok, [str(f) for f in checked.findings]
    assert checked.communicators == ((1, 8),)


def test_the_reference_harness_calls():
    """The calls the reference made against the real plugin (section 7), replayed by ``lookup``."""
    lines = list(check_text(REFERENCE_EXAMPLE).lines)
    pick = lambda coll, size, offered=None, comm=(1, 8): lookup(lines, coll, size, *comm, offered)  # noqa: E731
    assert (pick("allreduce", 1024).protocol, pick("allreduce", 1024).channels) == ("ll", 8)
    assert (pick("allreduce", 32768).protocol, pick("allreduce", 32768).channels) == ("ll128", 16)
    assert pick("allreduce", 8 << 30).channels == 24
    without_ll = OFFERED["allreduce"] - {("ring", "ll")}
    assert (pick("allreduce", 1024, without_ll).protocol, pick("allreduce", 1024, without_ll).number) == ("simple", 7)
    assert pick("allgather", 65535).protocol == "ll" and pick("allgather", 65536).protocol == "simple"
    assert pick("broadcast", 3000).channels == 24
    assert pick("allreduce", 1024, comm=(2, 16)) is None


def test_nvidias_sample_lines_that_can_never_apply_are_named():
    text = REFERENCE_EXAMPLE + "broadcast,0,1024,tree,ll,4,1,8\nreducescatter,0,1024,tree,simple,4,1,8\n"
    said = [str(f) for f in check_text(text).findings]
    assert any("line 14: tree/ll is not an option NCCL offers for broadcast" in s for s in said)
    assert any("line 15: tree/simple is not an option NCCL offers for reduce_scatter" in s for s in said)


def test_a_line_taken_by_earlier_ones_never_applies_but_a_safety_net_after_ll128_does():
    text = REFERENCE_EXAMPLE + "allreduce,100,200,ring,ll,8,1,8\n"
    said = [str(f) for f in check_text(text).findings]
    assert said == ["line 14: never applies: lines 3, 7 take every size of its range first"]


def test_sizes_only_ll128_takes_fall_through_where_ll128_is_off():
    text = REFERENCE_EXAMPLE.replace("allreduce,0,18446744073709551615,ring,simple,24,1,8,-1,-1\n", "")
    said = [str(f) for f in check_text(text).findings]
    assert said == ["allreduce on 1 node x 8 ranks: sizes 32768..1048575 are taken only by lines NCCL may not offer "
                    "(ll128, pat, nvls, collnet) on every machine: add a ring/simple line after them, or such calls "
                    "fall through to 1 channel"]


small_lines = st.builds(
    TunerLine,
    collective=st.sampled_from(TUNED),
    min_bytes=st.integers(0, 40),
    max_bytes=st.one_of(st.integers(0, 40), st.just(MAX_BYTES)),
    algorithm=st.sampled_from(["ring", "tree", "pat"]),
    protocol=st.sampled_from(["ll", "ll128", "simple"]),
    channels=st.integers(1, 8),
    nodes=st.just(1),
    ranks=st.just(8),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(small_lines, max_size=10))
def test_coverage_findings_agree_with_replaying_the_plugin(lines):
    checked = check_text(render(lines, []))
    said = [str(f) for f in checked.findings if f.line is None]
    for collective in TUNED:
        name = collective.replace("_", "")
        sizes = list(range(0, 42)) + [MAX_BYTES]
        offered_always = OFFERED[collective] & ALWAYS
        none = [s for s in sizes if lookup(list(checked.lines), collective, s, 1, 8) is None]
        fragile = [s for s in sizes if lookup(list(checked.lines), collective, s, 1, 8, offered_always) is None]
        gap_said = any(f.startswith(f"{name} on") and "match no line" in f for f in said)
        fragile_said = any(f.startswith(f"{name} on") and "taken only by lines" in f for f in said)
        assert gap_said == bool(none)
        assert fragile_said == bool(set(fragile) - set(none))
