"""The shortcuts that make bounds fast at scale give the same bounds."""

import numpy as np
import pytest

import synth.bounds.flow as flow
import synth.bounds.steps as steps
from synth.bounds.cuts import _candidates, network_of
from synth.bounds.lower_bounds import lower_bounds
from synth.core.collectives import make_collective
from synth.core.library import resolve_topology
from synth.core.orbits import Quotient
from synth.milp.sketch import default_sketch


@pytest.mark.parametrize("name,collective", [("h100x4", "allgather"), ("h100x4", "reduce_scatter"),
                                             ("h100x2", "allreduce"), ("dgx2x2", "alltoall"),
                                             ("ndv2x2", "allgather")])
def test_bounds_with_symmetry_equal_the_full_sweep(name, collective):
    topo = resolve_topology(name)
    coll = make_collective(collective, topo.ranks, chunks=2)
    sketch, _ = default_sketch(topo, collective)
    gens = sketch.symmetry_generators(topo)
    q = Quotient.of(topo, make_collective("allgather", topo.ranks), gens)
    assert lower_bounds(topo, coll, symmetry=q.ranks) == lower_bounds(topo, coll)


def test_cut_rate_shortcut_equals_the_packing_lp(monkeypatch):
    """Every cut candidate of two composed machines, with and without the closed-form sandwich."""
    for name in ("h100x4", "dgx2x2", "ndv2x2"):
        topo = resolve_topology(name)
        net = network_of(topo)
        _, masks = _candidates(topo)
        fast = []
        for mask in masks:
            cut = mask[net.src] & ~mask[net.dst]
            fast.append(flow.cut_rate(net, cut, net.bandwidth, net.group_bandwidth)[0])
        monkeypatch.setattr(flow, "_sandwich", lambda *a: None)
        slow = [flow.cut_rate(net, mask[net.src] & ~mask[net.dst], net.bandwidth, net.group_bandwidth)[0]
                for mask in masks]
        monkeypatch.undo()
        assert fast == pytest.approx(slow, rel=1e-9)


def test_floyd_warshall_alpha_distances_equal_dijkstra(monkeypatch):
    topo = resolve_topology("h100x4")
    dijkstra = steps.alpha_distances(topo)
    monkeypatch.setattr(steps, "DIJKSTRA_RANKS", 4)
    assert np.allclose(steps.alpha_distances(topo), dijkstra, rtol=1e-12, atol=0)


@pytest.mark.parametrize("name", ["dgx1", "torus:4x4", "mi250", "ndv2x2", "line:5"])
def test_hop_distances_equal_one_bfs_per_rank(name):
    topo = resolve_topology(name)
    assert topo.hop_distances == tuple(topo.distances_from(r) for r in range(topo.ranks))


@pytest.mark.parametrize("name,fabric", [("h100", "full"), ("h100", "rails"), ("a100", "rails")])
@pytest.mark.parametrize("collective", ["allgather", "allreduce", "reduce_scatter"])
def test_bounds_with_the_copies_symmetry_equal_the_full_sweep(monkeypatch, name, fabric, collective):
    """cut_limit's own symmetry of NAMExK (copy_symmetry, from COPY_SYMMETRY_RANKS ranks on; here
    from 1) gives the bounds of the sweep over every candidate. Fresh topologies: bounds are kept
    per topology object."""
    import synth.bounds.cuts as cuts
    from synth.core.compose import compose_machines
    from synth.core.library import load_machine

    def bounds():
        topo = compose_machines(load_machine(name), 3, fabric=fabric)
        return lower_bounds(topo, make_collective(collective, topo.ranks))

    monkeypatch.setattr(cuts, "COPY_SYMMETRY_RANKS", 10 ** 9)
    swept = bounds()
    monkeypatch.setattr(cuts, "COPY_SYMMETRY_RANKS", 1)
    assert bounds() == swept


def test_the_copies_symmetry_is_every_translation_or_none():
    from synth.bounds.cuts import copy_symmetry
    from synth.core.collectives import allgather

    topo = resolve_topology("h100x3")
    group = copy_symmetry(topo, allgather(24))
    assert group.shape == (24, 24) and sorted(map(tuple, group.tolist())) == sorted(set(map(tuple, group.tolist())))
    assert ((group[1:] != np.arange(24)).all(axis=1)).all()  # acts freely
    assert copy_symmetry(resolve_topology("dgx2x2"), allgather(32)) is None  # its GPUs are not alike
    assert copy_symmetry(resolve_topology("h100"), allgather(8)) is None  # one machine
