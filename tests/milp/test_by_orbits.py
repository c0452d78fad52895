"""The router by orbits: its schedules are valid, invariant under the symmetry, and as fast."""

from dataclasses import replace

import pytest

from synth.core.library import resolve_topology
from synth.milp.sketch import default_sketch, parse_sketch
from synth.milp.synthesize import synthesize
from synth.verify import verify


def _invariant(schedule, perm) -> bool:
    from synth.core.symmetry import chunk_permutation

    chunks = chunk_permutation(schedule.collective, perm)
    for step in schedule.steps:
        sends = {(s.chunk, s.src, s.dst, s.op) for s in step.sends}
        if {(chunks[c], perm[a], perm[b], op) for c, a, b, op in sends} != sends:
            return False
    return True


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter", "allreduce", "alltoall"])
def test_h100x2_schedules_are_valid_and_symmetric(collective):
    """On the machine without its NVSwitches (the router plans point to point, and its quality is
    measured against the point-to-point bound, not the switch's)."""
    topo = replace(resolve_topology("h100x2"), switches=())
    sketch, _ = default_sketch(topo, collective, 1 << 28)
    lines: list[str] = []
    result = synthesize(topo, collective, sketch, progress=lines.append)
    assert verify(result.schedule) == []
    assert any(line.startswith("expanded:") for line in lines)  # the orbit path was taken
    for perm in sketch.symmetry_generators(topo):
        if collective != "allreduce":
            assert _invariant(result.schedule, perm)
    assert result.percent_of_bound > 80


def test_orbits_do_not_lose_to_the_plain_ordering():
    """h100x2 allgather: the same sketch without its symmetry (every rank on its own) is no faster."""
    topo = resolve_topology("h100x2")
    sketch, _ = default_sketch(topo, "allgather", 1 << 30)
    plain = parse_sketch({k: v for k, v in sketch.to_dict().items() if k != "symmetry"}, topo)
    by_orbits = synthesize(topo, "allgather", sketch)
    alone = synthesize(topo, "allgather", plain)
    assert verify(alone.schedule) == []
    assert by_orbits.time_us <= alone.time_us * 1.02


def test_a_group_that_fixes_a_nic_falls_back_to_the_rotation():
    """ndv2x2 (one NIC per machine; GPUs +4 maps it onto itself): the rotation alone is used."""
    topo = resolve_topology("ndv2x2")
    sketch, _ = default_sketch(topo, "allgather", 1 << 30)
    lines: list[str] = []
    result = synthesize(topo, "allgather", sketch, progress=lines.append)
    assert verify(result.schedule) == []
    assert any("x 2 rotations" in line for line in lines)
