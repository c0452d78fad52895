"""The flow LP solved per orbit of the topology's automorphisms (``flow_lp(..., symmetry)``) has
the optimum of the whole LP: compared on every library machine and generator, every collective
and every value set the bounds use (bandwidths with and without groups, capacities)."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from synth.bounds.cuts import network_of
from synth.bounds.flow import _is_group, _symmetric_rows, flow_lp, flow_variables
from synth.bounds.lower_bounds import FLOW_LP_LIMIT, _demands, _flow_symmetry, lower_bounds
from synth.core.collectives import make_collective
from synth.core.library import machine_names, resolve_topology
from synth.core.reductions import dual_collective

GENERATORS = ["ring:5", "ring:6", "uring:6", "line:5", "full:5", "full:7", "star:6", "hypercube:3",
              "torus:3x3", "torus:2x3", "torus:2x2x2", "torus:3x4", "torus:4x4", "hypercube:4"]
COLLECTIVES = ["allgather", "reduce_scatter", "allreduce", "alltoall", "broadcast", "reduce", "gather", "scatter"]
# one of each kind of LP: sources a class, the dual on the reversed topology, every contribution
# to every rank, a root that the symmetries must fix
QUICK = ["allgather", "reduce_scatter", "allreduce", "gather"]
FAST = 4_000  # flow variables the whole LP may have in the quick tests (a fraction of a second)


def _machines() -> list[str]:
    return [m for m in machine_names() if not resolve_topology(m).switches] + GENERATORS


def _lp(spec: str, name: str):
    """(network, demands, multiplicities, group) as ``_direct_limit`` builds them (combining
    collectives with one destination a chunk: the dual on the reversed topology)."""
    topo = resolve_topology(spec)
    coll = make_collective(name, topo.ranks, root=0 if name in ("broadcast", "reduce", "gather", "scatter") else None)
    group = _flow_symmetry(topo)
    if coll.combining and all(len(p) == 1 for p in coll.post):
        topo, coll = topo.reversed(), dual_collective(coll)
    classes = Counter(zip(coll.pre, coll.post))
    demands = [_demands(pre, post, coll.combining) for pre, post in classes]
    return network_of(topo), demands, list(classes.values()), group


def _compare(spec: str, name: str, most: int) -> int:
    net, demands, mult, group = _lp(spec, name)
    if flow_variables(sum(map(len, demands)), net) > most:
        return 0
    values = [(net.bandwidth, net.group_bandwidth), (net.bandwidth, None)]
    if net.capacity is not None:
        values.append((net.capacity, net.group_capacity))
    for links, groups in values:
        whole = flow_lp(net, demands, mult, links, groups)
        orbits = flow_lp(net, demands, mult, links, groups, group)
        if most > FAST and (whole is None or orbits is None):
            continue  # an LP of 10^4 variables can run out of its 10 s on a busy machine
        assert whole is not None and orbits is not None, (spec, name)
        assert orbits == pytest.approx(whole, rel=1e-7, abs=1e-12), (spec, name)
    return 1


@pytest.mark.parametrize("spec", [m for m in _machines() if m != "dgx2"])
def test_symmetric_flow_lp_equals_the_whole_one(spec):
    compared = sum(_compare(spec, name, FAST) for name in QUICK)
    assert compared or spec in ("mi250", "torus:4x4", "hypercube:4", "torus:3x4")


@pytest.mark.slow
@pytest.mark.parametrize("spec", _machines() + ["ndv2x2", "mi250x2"])
def test_symmetric_flow_lp_equals_the_whole_one_up_to_the_lp_limit(spec):
    """Every collective, every LP the bounds solve (at most ``FLOW_LP_LIMIT`` flow variables)."""
    for name in COLLECTIVES:
        _compare(spec, name, FLOW_LP_LIMIT)


def test_the_symmetric_lp_is_much_smaller_on_a_torus():
    """torus:3x3 allgather: one commodity per orbit of sources, a few per orbit of sinks."""
    net, demands, mult, group = _lp("torus:3x3", "allgather")
    assert group is not None and len(group) == 72  # translations, rotations and reflections
    rows, columns = _symmetric_rows(net, demands, mult, net.bandwidth, net.group_bandwidth, group)
    assert columns < flow_variables(sum(map(len, demands)), net) // 20


def test_elements_that_are_not_symmetries_of_the_lp_are_left_out():
    """On a line the reflection maps links onto links; with one link made faster it does not, and
    the LP is solved whole (the group left is the identity alone)."""
    from dataclasses import replace

    topo = resolve_topology("line:5")
    links = tuple(replace(l, bandwidth=50.0) if (l.src, l.dst) == (0, 1) else l for l in topo.links)
    skewed = replace(topo, name="skewed", links=links)
    coll = make_collective("allgather", 5)
    classes = Counter(zip(coll.pre, coll.post))
    demands = [_demands(pre, post, False) for pre, post in classes]
    net = network_of(skewed)
    flip = np.array([range(5), range(4, -1, -1)])
    assert _symmetric_rows(net, demands, list(classes.values()), net.bandwidth, None, flip) is None
    assert flow_lp(net, demands, list(classes.values()), net.bandwidth, None, flip) == \
        pytest.approx(flow_lp(net, demands, list(classes.values()), net.bandwidth, None))


def test_permutations_that_are_no_group_are_refused():
    rotation = [1, 2, 3, 0]
    assert not _is_group(np.array([range(4), rotation]))  # its square is missing
    assert _is_group(np.array([range(4), rotation, [2, 3, 0, 1], [3, 0, 1, 2]]))
    net, demands, mult, _ = _lp("ring:4", "allgather")
    assert _symmetric_rows(net, demands, mult, net.bandwidth, None, np.array([range(4), rotation])) is None


@pytest.mark.parametrize("spec", ["torus:4x4", "hypercube:4"])
def test_sixteen_rank_allreduce_bounds_are_today_s(spec):
    """The bounds ``synth pareto SPEC allreduce`` reports (issue 43: the flow LPs behind them
    were 11 s of its 13 s): the composition's 15/2 rounds a chunk, the proven 4."""
    b = lower_bounds(resolve_topology(spec), make_collective("allreduce", 16))
    assert b.steps == 4 and b.rounds_per_chunk == Fraction(15, 2)
    assert b.proven is not None and b.proven.rounds_per_chunk == Fraction(4)
    assert b.bandwidth_time_per_byte == pytest.approx(1.875e-05, rel=1e-12)
    assert b.proven.bandwidth_time_per_byte == pytest.approx(1e-05, rel=1e-12)


@pytest.mark.parametrize("specs", [
    ["torus:4x4", "hypercube:4", "torus:3x4", "uring:6", "star:6", "dgx1", "mi250", "ndv2"],
    pytest.param(_machines() + ["ndv2x2"], marks=pytest.mark.slow),
])
def test_a_reversed_topology_shares_the_automorphisms_the_matcher_lists_for_it(specs):
    """``automorphisms`` gives a topology's reversal (a reduction's dual) the list found for the
    topology; the graph matcher lists the same automorphisms in the same order for both, so the
    searches that tie variables under them see what they saw before the lists were shared."""
    from synth.core.symmetry import AUTOMORPHISM_LIMIT, _automorphisms, automorphisms

    for spec in specs:
        topo = resolve_topology(spec)
        for limit in (64, AUTOMORPHISM_LIMIT):
            mine = _automorphisms(topo.reversed(), limit)
            assert tuple(automorphisms(topo, limit)) == _automorphisms(topo, limit) == mine, spec
            assert tuple(automorphisms(topo.reversed(), limit)) == mine, spec
