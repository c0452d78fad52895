"""``nccl``: the best NCCL option at a size, and NCCL's own tuning-model prediction beside it."""

from __future__ import annotations

import json
import math

import pytest

from synth.baselines import BaselineNotApplicable, build_baseline, registry
from synth.baselines.nccl import OPTIONS, build
from synth.baselines.nccl_model import Setup, applies, predicted_us
from synth.cli.main import main
from synth.core.library import resolve_topology
from synth.cost import best_protocol
from synth.verify import verify

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


@pytest.mark.parametrize("name, coll", [("dgx1", "allreduce"), ("dgx1", "allgather"), ("ndv2x2", "allreduce"),
                                        ("dgx1", "broadcast"), ("ring:4", "alltoall")])
@pytest.mark.parametrize("size", [KIB, MIB, GIB])
def test_picks_the_fastest_option_at_its_best_protocol(name, coll, size):
    topo = resolve_topology(name)
    chosen = build(topo, coll, None, None, size=size)
    assert verify(chosen) == []
    protocol, took = best_protocol(chosen, size)
    assert (chosen.meta["protocol"], chosen.meta["time_us"]) == (protocol, pytest.approx(took))
    for algo in OPTIONS[coll]:
        try:
            other = registry()[algo].make(topo, coll, None, None, size)
        except BaselineNotApplicable:
            continue
        assert best_protocol(other, size)[1] >= took * (1 - 1e-12)


def test_protocol_follows_the_size():
    topo = resolve_topology("dgx1")
    assert build(topo, "allgather", None, None, size=KIB).meta["protocol"] == "ll"
    assert build(topo, "allgather", None, None, size=GIB).meta["protocol"] == "simple"


def test_tree_wins_small_allreduce_across_machines():
    small = build(resolve_topology("h100x4"), "allreduce", None, None, size=KIB)
    assert small.meta["nccl_algorithm"] == "nccl_tree"
    assert small.meta["nccl_model"]["tuner_pick"]["algorithm"] == "nccl_tree"


def test_point_to_point_collectives_are_direct_without_a_model():
    chosen = build(resolve_topology("dgx1"), "alltoall", None, None, size=MIB)
    assert chosen.meta["nccl_algorithm"] == "direct"
    assert "point-to-point" in chosen.meta["nccl_model"]


def test_nccl_model_ring_by_hand():
    # 2 machines x 8 GPUs, 8 channels of 50 GB/s, ring allreduce, LL128, 1 MiB:
    # latency 14.0 + (30 - 2) x max(1.9, 1.0) + 2 x 4.0; algBw = 400 x 0.92 x 16 / 30
    setup = Setup("allreduce", 16, 2, 8, 50.0, "nvlink")
    expected = 14.0 + 28 * 1.9 + 2 * 4.0 + MIB / (1000 * 400 * 0.92 * 16 / 30)
    assert predicted_us(setup, "ring", "ll128", MIB) == pytest.approx(expected)


def test_nccl_model_tree_by_hand():
    # tree: base 6.8 + 2 x ((16/2 - 1) x 0.6 x 1.8 + log2(2) x 5.0); busBw 400 / 3.8 x 0.92, algBw half of it
    setup = Setup("allreduce", 16, 2, 8, 50.0, "nvlink")
    expected = 6.8 + 2 * (7 * max(0.6 * 1.8, 1.0) + math.log2(2) * 5.0) + KIB / (1000 * 400 / 3.8 * 0.92 / 2)
    assert predicted_us(setup, "tree", "ll", KIB) == pytest.approx(expected)


def test_nccl_model_applicability():
    single = Setup("allgather", 8, 1, 6, 25.0, "nvlink")
    assert applies(single, "ring", "simple") and not applies(single, "tree", "simple")
    assert not applies(single, "pat", "simple")
    assert applies(Setup("allgather", 4, 4, 1, 50.0, "nvlink"), "pat", "simple")
    assert not applies(Setup("allgather", 4, 4, 1, 50.0, "nvlink"), "pat", "ll")


def test_cli_writes_the_pick_and_refuses_what_nccl_lacks(capsys, tmp_path):
    out = tmp_path / "nccl.json"
    assert main(["baseline", "dgx1", "allreduce", "--algo", "nccl", "--size", "1K", "-o", str(out)]) == 0
    meta = json.loads(out.read_text())["meta"]
    assert meta["algorithm"] == "nccl" and meta["protocol"] == "ll"
    capsys.readouterr()
    assert main(["baseline", "dgx1", "alltoall", "--algo", "nccl_tree"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "alltoall" in err[0]
    assert main(["baseline", "dgx1", "allreduce", "--algo", "nccl", "--chunks", "2"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_listed_with_the_other_baselines(capsys):
    assert main(["baseline", "dgx1", "allreduce", "--algo", "list"]) == 0
    listed = capsys.readouterr().out
    for name in ("nccl", "nccl_ring", "nccl_tree"):
        assert name in listed
    assert main(["baseline", "dgx1", "allgather", "--algo", "list"]) == 0
    assert "nccl_pat             n/a: PAT needs one GPU per machine" in capsys.readouterr().out
    assert build_baseline(resolve_topology("dgx1"), "nccl", "reduce", 3, None, MIB).collective.root == 3


def test_chosen_prediction_is_the_chosen_protocols():
    """NCCL's model's prediction for the chosen option is the one for its own protocol (the
    loop over protocols once rebound the chosen one, so this was always the Simple figure)."""
    from synth.baselines.nccl import build
    from synth.core.library import resolve_topology

    for size in (1024, 1 << 30):
        s = build(resolve_topology("dgx1"), "allreduce", None, None, size=size)
        model = s.meta["nccl_model"]
        same = [p["predicted_us"] for p in model["predictions"]
                if p["algorithm"] == s.meta["nccl_algorithm"] and p["protocol"] == s.meta["protocol"]]
        assert model["chosen_predicted_us"] == same[0]
