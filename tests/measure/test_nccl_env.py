"""synth.measure.nccl_env and the reader's NCCL settings: what a run let NCCL do, as the text around
an nccl-tests table states it, and what NCCL says it ran."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.core.errors import InputError
from synth.measure.logs import parse_runs
from synth.measure.nccl_env import Allowed, allowed, chosen_call, info_setting, statements

HEADER = "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n"


def _table(*sizes: int) -> str:
    return HEADER + "".join(f"{s} {s // 4} float sum -1 1.0 0.0 0.0 0 1.0 0.0 0.0 0\n" for s in sizes)


def test_prose_states_a_variable_once_the_first_statement_wins():
    text = ("# NVLS: ON. Config = NCCL_ALGO unset, NCCL_NVLS_ENABLE=1\n"
            "# Companion file: NCCL_ALGO=RING NCCL_NVLS_ENABLE=0\n" + _table(8))
    [run] = parse_runs(text, "f")
    assert run.nccl_settings == {"NCCL_ALGO": None, "NCCL_NVLS_ENABLE": "1"}


def test_a_command_sets_its_own_invocation_only():
    text = ("NCCL_ALGO=Ring mpirun -np 8 -x NCCL_NVLS_ENABLE=0 ./build/all_reduce_perf -g 1\n" + _table(8, 16)
            + "mpirun -np 8 ./build/all_reduce_perf -g 1\n" + _table(8))
    first, second = parse_runs(text, "f")
    assert first.nccl_settings == {"NCCL_ALGO": "Ring", "NCCL_NVLS_ENABLE": "0"}
    assert second.nccl_settings == {}


def test_exports_and_nccls_own_word_replace_what_prose_said():
    text = ("# Header: NCCL_ALGO=Tree\nexport NCCL_PROTO=Simple\n"
            "host:1:1 [0] NCCL INFO NCCL_ALGO set by environment to NVLS\n" + _table(8))
    [run] = parse_runs(text, "f")
    assert run.nccl_settings == {"NCCL_ALGO": "NVLS", "NCCL_PROTO": "Simple"}


def test_per_call_lines_belong_to_the_run_before_or_around_them():
    calls = "".join(f"#> h:1:1 [0] NCCL INFO AllReduce: {s} Bytes -> Algo {a} proto SIMPLE "
                    "channel{Lo..Hi}={0..15}\n" for s, a in ((8, "NVLS"), (16, "RING")))
    text = "# Collective test starting: all_reduce_perf\n" + _table(8, 16) + calls + \
        "# Collective test starting: all_gather_perf\n" + _table(8)
    first, second = parse_runs(text, "f")
    assert [(c.size_bytes, c.algorithm, c.protocol) for c in first.calls] == [(8, "nvls", "simple"),
                                                                                (16, "ring", "simple")]
    assert second.calls == ()


@pytest.mark.parametrize("line, expected", [
    ("h:1:1 [0] NCCL INFO AllGather: 1024 Bytes -> Algo NVLSTree proto LL128 channel{Lo..Hi}={0..3}",
     ("allgather", 1024, "nvls_tree", "ll128")),
    ("h:1:1 [0] NCCL INFO ReduceScatter: opCount 4 8 Bytes -> Algo CollNetDirect proto LL nchannels 1",
     ("reduce_scatter", 8, "collnet_direct", "ll")),
    ("h:1:1 [0] NCCL INFO AllReduce: 64 Bytes -> Algo COLLNET proto SIMPLE", ("allreduce", 64, None, "simple")),
])
def test_call_lines(line, expected):
    call = chosen_call(line)
    assert (call.collective, call.size_bytes, call.algorithm, call.protocol) == expected


def test_lines_that_are_not_statements():
    assert statements("NCCL_ALGORITHM=Ring MY_NCCL_ALGO=Tree NCCL_ALGO= ") == []
    assert info_setting("NCCL INFO NCCL_IB_HCA set by environment to mlx5") is None
    assert chosen_call("NCCL INFO Channel 00/32 : 0 1 2 3") is None


@pytest.mark.parametrize("value, collective, algorithms, excluded", [
    ("Ring", "allreduce", {"ring"}, set()),
    ("ring,TREE", "allreduce", {"ring", "tree"}, set()),
    ("^NVLS,NVLSTree", "allreduce", None, {"nvls", "nvls_tree"}),
    ("CollNet", "allreduce", {"collnet_direct", "collnet_chain"}, set()),
    ("allreduce:tree;allgather:ring", "allgather", {"ring"}, set()),
    ("allreduce:tree", "allgather", None, set()),
])
def test_nccl_algo_grammar(value, collective, algorithms, excluded):
    got = allowed({"NCCL_ALGO": value}, collective)
    assert (None if got.algorithms is None else set(got.algorithms), set(got.excluded)) == (algorithms, excluded)


def test_enable_variables_and_protocols():
    got = allowed({"NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "1", "NCCL_PROTO": "^LL128"}, "allreduce")
    assert (got.nvls, got.collnet, set(got.protocols)) == (False, True, {"ll", "simple"})
    assert not got.permits("nvls") and not got.permits("nvls_tree") and got.permits("collnet_chain")
    assert allowed({"NCCL_NVLS_ENABLE": "2"}, "allreduce").nvls is True
    assert allowed({"NCCL_NVLS_ENABLE": None}, "allreduce") == Allowed()
    assert allowed({"NCCL_ALGO": "Ring"}, "alltoall").permits("p2p")  # sends, not a collective algorithm


@pytest.mark.parametrize("name, value, words", [
    ("NCCL_ALGO", "Warp", "not an algorithm"),
    ("NCCL_PROTO", "LL64", "not a protocol"),
])
def test_unknown_names_are_one_input_error(name, value, words):
    with pytest.raises(InputError, match=words):
        allowed({name: value}, "allreduce")


ALGO_NAMES = st.sampled_from(["Ring", "Tree", "NVLS", "NVLSTree", "CollNetDirect", "CollNetChain", "PAT"])


@settings(max_examples=60, deadline=None)
@given(names=st.lists(ALGO_NAMES, min_size=1, max_size=4, unique=True), exclude=st.booleans(),
       nvls=st.sampled_from([None, "0", "1"]), where=st.sampled_from(["prose", "command", "export"]))
def test_settings_written_anywhere_are_read_back(names, exclude, nvls, where):
    """Written as prose, on the command line or exported, the settings are read back, and NVLS is
    never allowed once NCCL_NVLS_ENABLE=0, whatever NCCL_ALGO says."""
    value = ("^" if exclude else "") + ",".join(names)
    assignments = f"NCCL_ALGO={value}" + ("" if nvls is None else f" NCCL_NVLS_ENABLE={nvls}")
    lead = {"prose": f"# Arm: {assignments}\n", "export": "".join(f"export {a}\n" for a in assignments.split()),
            "command": f"{assignments} mpirun -np 8 ./build/all_reduce_perf -g 1\n"}[where]
    [run] = parse_runs(lead + _table(8), "f")
    assert run.nccl_settings == {"NCCL_ALGO": value, **({} if nvls is None else {"NCCL_NVLS_ENABLE": nvls})}
    got = allowed(run.nccl_settings, "allreduce")
    if nvls == "0":
        assert not got.permits("nvls") and not got.permits("nvls_tree")
    assert got.permits("ring") == (("Ring" in names) != exclude)
