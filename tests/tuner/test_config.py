"""The tuner config as NCCL's example plugin reads it (shared/reference/nccl-tuner.md, section 6):
what it loads from well-formed and broken lines, and synth's lines read back unchanged."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from synth.tuner.config import ALGORITHMS, MAX_BYTES, PROTOCOLS, TUNED, TunerLine, read_lines, render


def test_the_reference_examples_read_as_the_plugin_reads_them():
    lines, notes = read_lines("AllReduce,0,1024,Tree,LL,4,1,8\n"
                              "allreduce,0,1024,tree,,4,1,8,-1,-1\n"
                              "allgather,0,1M,ring,simple,8,1,8\n"
                              " # comment\n"
                              "# a comment\n"
                              "\n"
                              "allreduce,0,1024,ring,ll,8,1,8\r\n")
    first, misaligned, suffixed, crlf = lines
    assert (first.collective, first.algorithm, first.protocol) == ("allreduce", "ring", "simple")
    # tree,,4,1,8,-1,-1: the empty field collapses, protocol '4' -> simple, 1 channel, nNodes 8, nRanks -1
    assert (misaligned.algorithm, misaligned.protocol, misaligned.channels, misaligned.nodes,
            misaligned.ranks) == ("tree", "simple", 1, 8, -1)
    assert (suffixed.min_bytes, suffixed.max_bytes) == (0, 1)
    assert (crlf.channels, crlf.ranks) == (8, 8)
    said = [str(n) for n in notes]
    assert any(s.startswith("line 1: unknown collective 'AllReduce'") for s in said)
    assert any(s.startswith("line 2: field 5 is empty") for s in said)
    assert any(s.startswith("line 3: max_bytes '1M' is not a plain decimal number") for s in said)
    assert any(s.startswith("line 4: a comment must start in column 1") for s in said)
    assert not any(s.startswith(("line 5", "line 6", "line 7")) for s in said)


def test_short_and_long_lines():
    lines, notes = read_lines("allreduce,0,10,ring,ll,8,1\n" + "allreduce,0,10,ring,ll,8,1,8," + "-1," * 80 + "\n")
    assert lines == [] and [n.line for n in notes] == [1, 2]
    assert "needs 8 to 10" in notes[0].text and "characters" in notes[1].text


lines_strategy = st.builds(
    TunerLine,
    collective=st.sampled_from(TUNED),
    min_bytes=st.integers(0, MAX_BYTES),
    max_bytes=st.integers(0, MAX_BYTES),
    algorithm=st.sampled_from(ALGORITHMS),
    protocol=st.sampled_from(PROTOCOLS),
    channels=st.integers(-1, 64),
    nodes=st.integers(-1, 4096),
    ranks=st.integers(-1, 65536),
    pipe_ops=st.integers(-1, 8),
    reg_buff=st.integers(-1, 1),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(lines_strategy, max_size=12))
def test_what_synth_writes_the_plugin_reads_back_unchanged(lines):
    read, notes = read_lines(render(lines, ["made by a test"]))
    assert notes == []
    assert [l.text() for l in read] == [l.text() for l in lines]
    assert [l.number for l in read] == list(range(3, 3 + len(lines)))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("allreducegthrsimple0123456789,- #\t\r\nMx")), max_size=300))
def test_any_text_reads_without_error_into_known_names(text):
    lines, notes = read_lines(text)
    for line in lines:
        assert line.collective in TUNED and line.algorithm in ALGORITHMS and line.protocol in PROTOCOLS
        assert 0 <= line.min_bytes <= MAX_BYTES and 0 <= line.max_bytes <= MAX_BYTES
    assert all(n.line >= 1 for n in notes)
