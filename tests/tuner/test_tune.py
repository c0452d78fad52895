"""synth tune: every size of every collective NCCL tunes takes a line with an explicit channel
count, the line the plugin takes is synth's pick there, and the file passes synth check."""

from __future__ import annotations

import pytest

from synth.core.library import resolve_topology
from synth.measure.calibration import load_calibration
from synth.tuner.config import TUNED, read_lines
from synth.tuner.rules import check_text, lookup
from synth.tuner.tune import communicator_topology, config_text, tune

QUICK = ["dgx1", "h100x2"]
ALL = ["dgx1", "h100", "h100x2", "h100x16", "mi300x"]  # the issue's machines


def sample_sizes(tuned) -> list[int]:
    """1 B..16 GiB by powers of two, and both sides of every range boundary."""
    sizes = {1 << k for k in range(35)}
    for t in tuned:
        sizes.update(s for r in t.ranges[1:] for s in (r.low - 1, r.low) if 1 <= s <= 16 << 30)
    return sorted(sizes)


def assert_table_is_the_pick_everywhere(name: str):
    topology = resolve_topology(name)
    tuned = tune(topology, list(TUNED), [None], load_calibration("default"))
    text = config_text(topology, tuned, "default")
    checked = check_text(text)
    assert checked.ok, [str(f) for f in checked.findings][:5]
    assert all(len(line) < 255 for line in text.splitlines())
    lines, _ = read_lines(text)
    nodes, ranks = max(1, topology.machine_count), topology.ranks
    for t in tuned:
        for size in sample_sizes([t]):
            line = lookup(lines, t.collective, size, nodes, ranks)
            assert line is not None and line.channels >= 1, (t.collective, size)
            pick = t.options.fastest(size)
            assert (line.algorithm, line.protocol, line.channels) == pick.setting, (t.collective, size)


@pytest.mark.parametrize("name", QUICK)
def test_the_table_is_synths_pick_at_every_size(name):
    assert_table_is_the_pick_everywhere(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(ALL) - set(QUICK)))
def test_the_table_is_synths_pick_at_every_size_on_the_issues_machines(name):
    assert_table_is_the_pick_everywhere(name)


def test_communicators_are_the_first_gpus_of_the_first_machines():
    h100x2 = resolve_topology("h100x2")
    one = communicator_topology(h100x2, 1, 8)
    assert (one.ranks, one.machine_count) == (8, 1)
    spread = communicator_topology(h100x2, 2, 4)
    assert (spread.ranks, spread.machine_count) == (4, 2)
    assert communicator_topology(h100x2, 2, 16) is h100x2


def test_one_file_for_several_communicators_passes_and_names_each():
    h100x2 = resolve_topology("h100x2")
    tuned = tune(h100x2, ["allreduce", "allgather", "reduce_scatter", "broadcast", "reduce"], [(1, 8), (2, 16)],
                 load_calibration("default"))
    checked = check_text(config_text(h100x2, tuned, "default"))
    assert checked.ok and checked.communicators == ((1, 8), (2, 16))


def test_tuning_gains_where_nccls_own_model_picks_otherwise():
    """On two H100 machines NCCL's own model takes the ring for allreduce at mid sizes; synth's
    model (which agrees with measured runs) says the tree: the table is worth > 1.2x there."""
    [t] = tune(resolve_topology("h100x2"), ["allreduce"], [None], load_calibration("default"))
    assert t.gain.most > 1.2 and t.gain.mean >= 1.0


def test_nvls_lines_start_where_a_call_through_the_switch_outruns_its_floor():
    """A call with switch entries takes at least NVLS's latency (25 us by default), as NCCL's
    forced-NVLS runs measure: small allreduces stay on the ring/LL, NVLS takes over from MiBs."""
    cal = load_calibration("default")
    [t] = tune(resolve_topology("h100"), ["allreduce"], [None], cal)
    lines, _ = read_lines(config_text(resolve_topology("h100"), [t], "default"))
    first = min(line.min_bytes for line in lines if line.algorithm == "nvls")
    assert first >= 1 << 20
    assert lookup(lines, "allreduce", 1 << 30, 1, 8).algorithm == "nvls"


# --- registered buffers: regBuff, and no line where NCCL's symmetric kernels go first ---------------------

def test_symmetric_window_leaves_the_tuner_no_line_it_cannot_act_on():
    """With a symmetric window on one NVLink domain NCCL 2.27+ takes allreduce, allgather and
    reduce-scatter to its symmetric kernels below 64 GiB, before asking the tuner: no line there;
    broadcast and reduce, and every collective across machines, keep theirs, for registered calls."""
    cal = load_calibration("default")
    for name, taken in (("h100", {"allreduce", "allgather", "reduce_scatter"}), ("h100x2", {"allgather",
                                                                                             "reduce_scatter"})):
        topology = resolve_topology(name)
        tuned = tune(topology, list(TUNED), [None], cal, buffers="symmetric")
        text = config_text(topology, tuned, "default")
        assert check_text(text).ok
        lines, _ = read_lines(text)
        assert lines and all(line.reg_buff == 1 for line in lines)
        for t in tuned:
            first = min(line.min_bytes for line in t.lines)
            if t.collective in taken and topology.machine_count <= 1:
                assert first == 64 << 30 and t.symmetric_below == 64 << 30, (name, t.collective)
                nodes = max(1, topology.machine_count)
                assert lookup(lines, t.collective, 1 << 20, nodes, topology.ranks, registered=True) is None
                assert lookup(lines, t.collective, 1 << 37, nodes, topology.ranks, registered=True) is not None
                assert lookup(lines, t.collective, 1 << 37, nodes, topology.ranks) is None  # regBuff 1 only
            else:
                assert first == 0 and t.symmetric_below == 0, (name, t.collective)
        if topology.machine_count <= 1:
            assert "symmetric kernels" in text.splitlines()[4]


def test_buffers_set_the_lines_regbuff_and_by_default_any():
    cal = load_calibration("default")
    topology = resolve_topology("dgx1")
    for buffers, reg in ((None, -1), ("none", 0), ("local", 1)):
        [t] = tune(topology, ["allreduce"], [None], cal, buffers=buffers)
        assert {line.reg_buff for line in t.lines} == {reg} and min(line.min_bytes for line in t.lines) == 0


def test_a_calibration_of_an_nccl_before_symmetric_kernels_keeps_every_line():
    from synth.measure.calibration import Calibration

    old = Calibration.from_doc({"format": "synth.calibration", "version": 1, "nccl": "2.26.2"}, "x")
    [t] = tune(resolve_topology("h100"), ["allreduce"], [None], old, buffers="symmetric")
    assert t.symmetric_below == 0 and min(line.min_bytes for line in t.lines) == 0
