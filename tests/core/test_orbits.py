"""The quotient by a rotation group: its loads, simulation and expansion are the full schedule's."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.core.collectives import make_collective
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.orbits import Quotient
from synth.core.schedule import Schedule, Send, Step
from synth.cost import simulate_us, step_loads
from synth.milp.orbit_cost import orbit_simulate_us, orbit_step_loads
from synth.milp.ordering import OrderingRules, order_sends
from synth.milp.sketch import default_sketch
from synth.verify import verify


def _quotient(name: str, collective: str, chunks: int = 1) -> Quotient:
    topo = resolve_topology(name)
    sketch, _ = default_sketch(topo, collective)
    coll = make_collective(collective, topo.ranks, chunks=chunks)
    return Quotient.of(topo, coll, sketch.symmetry_generators(topo))


def test_h100x4_group_is_regular_on_ranks():
    q = _quotient("h100x4", "allgather", chunks=2)
    assert q.order == 32  # machines x GPUs: one orbit of ranks
    assert len(q.reps) == 2  # one origin's two chunks
    assert q.link_orbits * q.order == len(q.topology.links)  # free on links
    assert q.resources.max_multiplicity == 1


def test_a_group_that_fixes_a_shared_nic_is_flagged():
    """ndv2x2: GPUs +4 maps the one NIC of a machine onto itself (two links of an orbit in it)."""
    q = _quotient("ndv2x2", "allgather")
    assert q.resources.max_multiplicity == 2


def test_not_an_automorphism_is_refused():
    topo = resolve_topology("dgx1")
    coll = make_collective("allgather", 8)
    with pytest.raises(InputError, match="not an automorphism"):
        Quotient.of(topo, coll, [tuple((r + 1) % 8 for r in range(8))])


def test_rooted_collective_is_not_preserved():
    topo = resolve_topology("ring:4")
    coll = make_collective("broadcast", 4, root=0)
    with pytest.raises(InputError, match="does not preserve"):
        Quotient.of(topo, coll, [(1, 2, 3, 0)])


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([("h100x2", "allgather", 1), ("h100x2", "alltoall", 1), ("ring:6", "allgather", 2),
                        ("hypercube:3", "allgather", 1)]),
       st.integers(0, 2 ** 32 - 1), st.sampled_from([1 << 10, 1 << 20, 1 << 30]))
def test_costs_of_the_representatives_are_the_full_schedules(case, seed, size):
    """Random representative schedules (any sends over links, ordered by a random permutation):
    the quotient's step loads and event simulation equal those of the expanded schedule."""
    name, collective, chunks = case
    topo = resolve_topology(name)
    sketch, _ = default_sketch(topo, collective)
    gens = sketch.symmetry_generators(topo) or [tuple((r + 1) % topo.ranks for r in range(topo.ranks))]
    q = Quotient.of(topo, make_collective(collective, topo.ranks, chunks=chunks), gens)
    rep = _random_valid_rep(q, np.random.default_rng(seed))
    full = q.expand(rep)
    assert verify(rep) == []
    assert orbit_step_loads(q, rep).step_times_us(size) == pytest.approx(step_loads(full).step_times_us(size),
                                                                         rel=1e-12)
    assert orbit_step_loads(q, rep).best(size)[1] == pytest.approx(step_loads(full).best(size)[1], rel=1e-12)
    assert orbit_simulate_us(q, rep, size) == pytest.approx(simulate_us(full, size), rel=1e-12)
    assert q.rep_schedule(full).steps == rep.steps


def _random_valid_rep(q: Quotient, rng) -> Schedule:
    """Flood the representative chunks along random links until every rank holds them."""
    coll = q.rep_collective
    topo = q.topology
    holds = [set(pre) for pre in coll.pre]
    steps = []
    while any(len(h) < topo.ranks for h in holds):
        sends = []
        written = set()
        for i in rng.permutation(len(topo.links)):
            link = topo.links[int(i)]
            for c in rng.permutation(coll.chunks):
                c = int(c)
                if link.src in holds[c] and link.dst not in holds[c] and (link.dst, c) not in written \
                        and rng.random() < 0.5:
                    sends.append(Send(c, link.src, link.dst))
                    written.add((link.dst, c))
        for s in sends:
            holds[s.chunk].add(s.dst)
        steps.append(Step(tuple(sends), None))
    return Schedule(topo, coll, tuple(steps))


def test_ordering_on_the_quotient_expands_to_a_valid_schedule():
    q = _quotient("h100x4", "allgather", chunks=2)
    rep = order_sends(q.topology, q.collective, OrderingRules.of(q.topology), quotient=q)
    full = q.expand(rep)
    assert verify(full) == []  # capacities included: every step's images fit one round
    assert full.send_count == rep.send_count * q.order


def test_given_chunk_permutations_must_follow_the_ranks():
    """A chunk permutation that is not the image of the holders (here: the identity) is refused."""
    topo = resolve_topology("ring:4")
    coll = make_collective("allgather", 4)
    rotate = (1, 2, 3, 0)
    with pytest.raises(InputError, match="holders are not the images"):
        Quotient.of(topo, coll, [rotate], [(0, 1, 2, 3)])
    assert Quotient.of(topo, coll, [rotate], [rotate]).order == 4
