"""Schedule and topology v2 (switch entries, switches): reading, writing, versions, one-line
errors for bad entries; the port loads and rounds switch entries need."""

from __future__ import annotations

import copy
import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.baselines import build_baseline
from synth.core.collectives import allgather, allreduce
from synth.core.errors import InputError, ScheduleFormatError, TopologyError
from synth.core.io import read_json
from synth.core.library import resolve_topology
from synth.core.schedule import Schedule, Send, Step, SwitchSend, port_loads, refuse_switches, rounds_needed
from synth.core.topology import Switch, Topology
from tests.switch_strategies import box, fewest_rounds, switch_schedules
from tests.test_verify import DATA

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def json_round_trip(schedule: Schedule) -> Schedule:
    return Schedule.from_dict(json.loads(json.dumps(schedule.to_dict())))


def mixed_schedule() -> Schedule:
    """A box allreduce with sends and switch entries in the same steps."""
    topo = box(4, ports=(0, 1, 2))
    steps = (Step((Send(0, 3, 0, "reduce"), Send(1, 3, 1, "reduce")), 1, ()),
             Step((), 2, (SwitchSend(0, "nvs", (0, 1, 2), (0,)), SwitchSend(1, "nvs", (2, 0, 1), (1,)))),
             Step((Send(0, 0, 3),), 2, (SwitchSend(0, "nvs", (0,), (1, 2)), SwitchSend(1, "nvs", (1,), (0, 2)))))
    return Schedule(topo, allreduce(4), steps, {"note": "mixed"})


def v2_doc() -> dict:
    schedule = Schedule(box(3), allgather(3), (Step((), 1, (SwitchSend(0, "nvs", (0,), (1, 2)),)),))
    return json.loads(json.dumps(schedule.to_dict()))


# ---------------------------------------------------------------- round trips and versions
@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reduce_scatter"])
def test_the_nvls_baseline_round_trips_as_a_v2_document(collective):
    schedule = build_baseline(resolve_topology("h100"), "nccl_nvls", collective, chunks=2)
    doc = schedule.to_dict()
    assert doc["version"] == 2 and doc["topology"]["version"] == 2
    assert doc["topology"]["switches"][0]["name"] == "nvswitch"
    written = [s for step in doc["steps"] for s in step["sends"]]
    assert len(written) == schedule.switch_count
    assert all(s["op"] == "switch" and set(s) == {"op", "switch", "chunk", "srcs", "dsts"} for s in written)
    assert json_round_trip(schedule) == schedule


def test_sends_and_switch_entries_in_one_step_round_trip():
    schedule = mixed_schedule()
    again = json_round_trip(schedule)
    assert again == schedule
    assert again.steps[1].switches[1].srcs == (2, 0, 1)  # the order of srcs is kept
    assert (again.send_count, again.switch_count) == (3, 4)
    assert again.traffic_text == "3 sends, 4 switch entries"


def test_switch_entries_may_come_before_and_between_sends_in_the_list():
    doc = mixed_schedule().to_dict()
    sends = doc["steps"][2]["sends"]
    doc["steps"][2]["sends"] = [sends[1], sends[0], sends[2]]  # entry, send, entry
    assert Schedule.from_dict(json.loads(json.dumps(doc))) == mixed_schedule()


def test_a_schedule_without_switches_is_still_written_as_version_1():
    schedule = Schedule.from_dict(read_json(DATA / "schedule-uring4-allgather-ring.json"))
    doc = schedule.to_dict()
    assert doc["version"] == 1 and doc["topology"]["version"] == 1
    assert "switches" not in doc["topology"]
    assert all(s["op"] in ("copy", "reduce") for step in doc["steps"] for s in step["sends"])
    plain = Topology("plain", 3, box(3).links, box(3).groups)
    assert plain.to_dict()["version"] == 1
    assert Schedule(plain, allgather(3), (Step((Send(0, 0, 1),), 1),)).to_dict()["version"] == 1


def test_a_topology_with_a_switch_is_version_2_and_so_is_its_schedule():
    topo = box(3)
    assert topo.to_dict()["version"] == 2
    assert Schedule(topo, allgather(3), (Step((Send(0, 0, 1),), 1),)).to_dict()["version"] == 2


def test_switch_entries_on_a_topology_without_switches_still_need_version_2():
    topo = box(3)
    plain = Topology("plain", 3, topo.links, topo.groups)
    schedule = Schedule(plain, allgather(3), (Step((), 1, (SwitchSend(0, "nvs", (0,), (1,)),)),))
    doc = schedule.to_dict()
    assert doc["version"] == 2 and doc["topology"]["version"] == 1
    assert json_round_trip(schedule) == schedule


def test_a_v1_document_with_a_switch_entry_is_refused_in_one_line():
    doc = v2_doc()
    doc["version"] = 1
    with pytest.raises(ScheduleFormatError) as caught:
        Schedule.from_dict(doc, where="f.json")
    text = str(caught.value)
    assert "\n" not in text and "version 2" in text and text.startswith("f.json")


def test_a_v1_topology_with_switches_is_refused_in_one_line():
    doc = box(3).to_dict()
    doc["version"] = 1
    with pytest.raises(TopologyError) as caught:
        Topology.from_dict(doc)
    assert "\n" not in str(caught.value) and "version 2" in str(caught.value)


@pytest.mark.parametrize("version", [3, 0, "2", None, True])
def test_an_unknown_schedule_version_is_one_line(version):
    doc = v2_doc()
    doc["version"] = version
    with pytest.raises(ScheduleFormatError) as caught:
        Schedule.from_dict(doc)
    assert "\n" not in str(caught.value) and "version" in str(caught.value)


# ---------------------------------------------------------------- bad switch entries
MISSING = object()
BAD_ENTRIES = [
    ("srcs", []), ("srcs", "0"), ("srcs", 0), ("srcs", None), ("srcs", MISSING), ("srcs", [0, True]),
    ("srcs", [0, 1.5]), ("srcs", [2, 2]), ("srcs", {"0": 1}),
    ("dsts", []), ("dsts", [1, 1]), ("dsts", "1"), ("dsts", [None]), ("dsts", MISSING),
    ("chunk", "1"), ("chunk", 1.5), ("chunk", True), ("chunk", None), ("chunk", MISSING), ("chunk", [0]),
    ("switch", 7), ("switch", None), ("switch", MISSING), ("switch", ["nvs"]), ("switch", True),
]


@pytest.mark.parametrize("field, value", BAD_ENTRIES)
def test_a_bad_switch_entry_is_one_line_naming_the_field_and_value(field, value):
    doc = v2_doc()
    written = doc["steps"][0]["sends"][0]
    if value is MISSING:
        del written[field]
    else:
        written[field] = copy.deepcopy(value)
    with pytest.raises(ScheduleFormatError) as caught:
        Schedule.from_dict(doc, where="bad.json")
    text = str(caught.value)
    assert "\n" not in text and text.startswith("bad.json")
    assert f"'{field}'" in text and "step 0" in text
    assert repr(None if value is MISSING else value) in text, text


def test_a_switch_entry_that_is_not_an_object_is_one_line():
    doc = v2_doc()
    doc["steps"][0]["sends"].append(["switch", "nvs"])
    with pytest.raises(ScheduleFormatError) as caught:
        Schedule.from_dict(doc)
    assert "\n" not in str(caught.value)


def test_an_unknown_op_names_switch_among_the_ops():
    doc = v2_doc()
    doc["steps"][0]["sends"][0] = {"chunk": 0, "src": 0, "dst": 1, "op": "multicast"}
    with pytest.raises(ScheduleFormatError, match="'switch'"):
        Schedule.from_dict(doc)


def test_what_only_the_verifier_can_judge_parses():
    """Unknown switch, a rank no switch has, an out-of-range chunk: the file is well formed."""
    doc = v2_doc()
    doc["steps"][0]["sends"] = [{"op": "switch", "switch": "ghost", "chunk": 99, "srcs": [0, 7], "dsts": [-1]}]
    parsed = Schedule.from_dict(doc)
    assert parsed.steps[0].switches == (SwitchSend(99, "ghost", (0, 7), (-1,)),)


# ---------------------------------------------------------------- random round trips
_names = st.text(min_size=1, max_size=8)
_ranks = st.lists(st.integers(-3, 40), min_size=1, max_size=5, unique=True)


@st.composite
def arbitrary_switch_steps(draw) -> tuple[Step, ...]:
    """Steps with any well-formed entries (the parser does not judge ranks, chunks or names)."""
    steps = []
    for _ in range(draw(st.integers(0, 4))):
        entries = draw(st.lists(st.builds(SwitchSend, st.integers(-2, 50), _names, _ranks, _ranks), max_size=4))
        sends = draw(st.lists(st.builds(Send, st.integers(0, 9), st.integers(0, 9), st.integers(0, 9),
                                        st.sampled_from(["copy", "reduce"])), max_size=3))
        steps.append(Step(tuple(sends), draw(st.none() | st.integers(1, 9)), tuple(entries)))
    return tuple(steps)


@SETTINGS
@given(switch_schedules())
def test_random_switch_schedules_round_trip(schedule):
    assert json_round_trip(schedule) == schedule
    assert schedule.to_dict()["version"] == 2


@SETTINGS
@given(arbitrary_switch_steps(), st.dictionaries(_names, st.integers() | _names, max_size=3))
def test_random_entries_round_trip(steps, meta):
    schedule = Schedule(box(4), allreduce(4), steps, meta)
    assert json_round_trip(schedule) == schedule


# ---------------------------------------------------------------- topology v2
def test_a_switch_with_every_field_round_trips():
    topo = box(3, reduce=False, multicast=True, reduce_multicast=True, capacity=2, alpha=0.25)
    sw = topo.switches[0]
    sw = Switch(sw.name, (2, 0), 300.0, 0.25, 2, False, True, True, ("gpu2-out", None), (None, "gpu0-in"), "net")
    topo = Topology(topo.name, 3, topo.links, topo.groups, switches=(sw,))
    again = Topology.from_dict(json.loads(json.dumps(topo.to_dict())))
    assert again == topo and again.switch("nvs") == sw and again.switch("other") is None
    assert again.switch("nvs").out_group(2) == "gpu2-out" and again.switch("nvs").in_group(2) is None


@pytest.mark.parametrize("change, message", [
    ({"ranks": [0, 0]}, "twice"),
    ({"ranks": []}, "empty"),
    ({"ranks": [0, 5]}, "out of range"),
    ({"out_groups": ["gpu0-out"]}, "out_groups"),
    ({"in_groups": ["nope", "gpu1-in", "gpu2-in"]}, "nope"),
    ({"reduce": "yes"}, "reduce"),
    ({"bandwidth": 0}, "bandwidth"),
    ({"capacity": 0}, "capacity"),
    ({"name": 3}, "name"),
])
def test_a_bad_switch_in_a_topology_is_one_line(change, message):
    doc = box(3).to_dict()
    doc["switches"][0].update(change)
    with pytest.raises(TopologyError) as caught:
        Topology.from_dict(doc)
    assert "\n" not in str(caught.value) and message in str(caught.value)


def test_two_switches_with_one_name_are_refused():
    doc = box(3).to_dict()
    doc["switches"].append(copy.deepcopy(doc["switches"][0]))
    with pytest.raises(TopologyError, match="duplicate switch"):
        Topology.from_dict(doc)


def test_the_library_h100_has_the_nvls_switch():
    topo = resolve_topology("h100")
    sw = topo.switch("nvswitch")
    assert sw.reduce and sw.multicast and not sw.reduce_multicast
    assert sw.ranks == tuple(range(8))
    assert [sw.out_group(r) for r in range(8)] == [f"gpu{r}-out" for r in range(8)]
    assert [sw.in_group(r) for r in range(8)] == [f"gpu{r}-in" for r in range(8)]
    assert topo.switch_capacity(sw) == 1


# ---------------------------------------------------------------- port loads and rounds
def test_port_loads_count_every_src_out_and_every_dst_in_with_their_groups():
    topo = box(4, ports=(0, 1, 2))
    step = Step((Send(0, 3, 0),), 1, (SwitchSend(0, "nvs", (0, 1), (2,)), SwitchSend(1, "nvs", (2,), (0, 1)),
                                      SwitchSend(2, "ghost", (0,), (1,)), SwitchSend(3, "nvs", (3,), (0,))))
    ports, groups = port_loads(step, topo)
    assert ports == Counter({("nvs", 0, "out"): 1, ("nvs", 1, "out"): 1, ("nvs", 2, "out"): 1,
                             ("nvs", 2, "in"): 1, ("nvs", 0, "in"): 2, ("nvs", 1, "in"): 1})
    assert groups == Counter({"gpu0-out": 1, "gpu1-out": 1, "gpu2-out": 1, "gpu2-in": 1, "gpu0-in": 2, "gpu1-in": 1})


def test_rounds_needed_counts_ports_groups_and_links_together():
    topo = box(4, capacity=4)  # ports carry 4 a round, links and groups 1
    entries = [SwitchSend(c, "nvs", (0,), (1, 2, 3)) for c in range(3)]
    assert rounds_needed(topo, (), entries) == 3  # gpu0-out: three port chunks
    assert rounds_needed(topo, (Send(0, 0, 1),), entries) == 4  # ... and a link chunk
    assert rounds_needed(box(4, capacity=4, groups=False), (), entries) == 1
    assert rounds_needed(box(4, groups=False), (), entries) == 3  # the port itself
    assert rounds_needed(box(4, groups=False, switch_bw=300.0), (), entries) == 1


def test_rounds_needed_on_the_nvls_baseline():
    schedule = build_baseline(resolve_topology("h100"), "nccl_nvls", "allreduce", chunks=2)
    # step 0: 8 reduces (8 chunks on every out-port); 1: 8 reduces + 8 multicasts (9 each way); 2: 8 multicasts
    assert [step.rounds for step in schedule.steps] == [8, 9, 8]
    for step in schedule.steps:
        assert rounds_needed(schedule.topology, step.sends, step.switches) == step.rounds
        assert fewest_rounds(schedule.topology, step.sends, step.switches) == step.rounds


def test_refuse_switches_is_one_line_and_quiet_without_entries():
    schedule = build_baseline(resolve_topology("h100"), "nccl_nvls", "allgather", chunks=1)
    with pytest.raises(InputError) as caught:
        refuse_switches(schedule, "the exporter")
    text = str(caught.value)
    assert "\n" not in text and "the exporter" in text and "8" in text and "nvswitch" in text
    refuse_switches(Schedule.from_dict(read_json(DATA / "schedule-uring4-allgather-ring.json")), "x")
