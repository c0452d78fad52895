"""Reading and writing files: one clear error line, atomic writes, verification on load."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.core.errors import InputError, InvalidScheduleError, ScheduleFormatError
from synth.core.io import read_json, save_schedule, write_text_atomic
from synth.verify import load_schedule
from tests.test_verify import DATA


def test_read_json_errors_are_one_line(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{\"format\": ")
    with pytest.raises(InputError, match="not valid JSON"):
        read_json(bad)
    with pytest.raises(InputError, match="is a directory"):
        read_json(tmp_path)


def test_load_schedule_verifies(tmp_path):
    assert load_schedule(DATA / "schedule-uring4-allgather-ring.json").collective.name == "allgather"
    with pytest.raises(InvalidScheduleError) as err:
        load_schedule(DATA / "schedule-uring4-allgather-no-link.json")
    assert len(err.value.violations) == 5


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"format": "synth.topology"}, "'format' must be"),
        ({"version": 9}, "version 9"),
        ({"steps": {}}, "'steps' must be a list"),
        ({"steps": [{"sends": [{"chunk": "x", "src": 0, "dst": 1}]}]}, "must be an integer"),
        ({"steps": [{"sends": [{"chunk": 0, "src": 0, "dst": 1, "op": "add"}]}]}, "op must be"),
    ],
)
def test_malformed_schedules(tmp_path, patch, message):
    doc = read_json(DATA / "schedule-uring4-allgather-ring.json")
    doc.update(patch)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ScheduleFormatError, match=message):
        load_schedule(path)


def test_round_trip_and_atomic_write(tmp_path):
    schedule = load_schedule(DATA / "schedule-uring4-allreduce-ring.json")
    out = tmp_path / "copy.json"
    save_schedule(out, schedule)
    assert load_schedule(out) == schedule
    with pytest.raises(InputError, match="does not exist"):
        write_text_atomic(tmp_path / "nope" / "x.json", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.json"]


def test_gzip_schedule_round_trip_is_deterministic(tmp_path):
    from synth.baselines import build_baseline
    from synth.core.generators import ring
    from synth.core.io import save_schedule
    from synth.verify import load_schedule

    schedule = build_baseline(ring(4), "ring", "allgather")
    first, second = tmp_path / "a.schedule.json.gz", tmp_path / "b.schedule.json.gz"
    save_schedule(first, schedule)
    save_schedule(second, schedule)
    assert first.read_bytes() == second.read_bytes()  # no timestamp in the gzip header
    assert first.read_bytes()[:2] == b"\x1f\x8b"
    assert load_schedule(first).steps == schedule.steps


def test_gzip_name_on_plain_text_is_one_clear_error(tmp_path):
    import pytest

    from synth.core.errors import InputError
    from synth.core.io import read_json

    path = tmp_path / "x.json.gz"
    path.write_text("{}")
    with pytest.raises(InputError, match="not a gzip file"):
        read_json(path)


# ---------------------------------------------------------------- the fast schedule writer
_send = st.fixed_dictionaries({"chunk": st.integers(-3, 10 ** 6), "src": st.integers(0, 4096),
                               "dst": st.integers(0, 4096), "op": st.sampled_from(["copy", "reduce", 'q"\\'])})
_ranks = st.lists(st.one_of(st.integers(-2, 4096), st.integers(-2, 4096), st.text(max_size=1)), max_size=4)
_entry = st.fixed_dictionaries({"op": st.sampled_from(["switch", "switch", "copy"]), "switch": st.text(max_size=3),
                                "chunk": st.integers(-3, 10 ** 6), "srcs": _ranks, "dsts": _ranks})
_odd_send = st.dictionaries(st.sampled_from(["chunk", "src", "op", "x"]), st.one_of(st.integers(), st.text(max_size=3)))
_step = st.one_of(
    st.fixed_dictionaries({"rounds": st.integers(1, 9), "sends": st.lists(_send, max_size=4)}),
    st.fixed_dictionaries({"sends": st.lists(st.one_of(_send, _odd_send), max_size=3)}),
    st.fixed_dictionaries({"rounds": st.integers(1, 9), "sends": st.lists(st.one_of(_send, _entry), max_size=4)}),
    st.fixed_dictionaries({"sends": st.lists(_send, max_size=3), "rounds": st.integers(1, 3)}),
    st.fixed_dictionaries({"rounds": st.one_of(st.none(), st.text(max_size=2)), "sends": st.lists(_send, max_size=2)}),
)


_rank_lists = st.lists(st.lists(st.integers(-2, 4096), max_size=3), max_size=3)
_collective = st.one_of(st.none(), st.fixed_dictionaries(
    {"name": st.text(max_size=3), "pre": st.one_of(_rank_lists, _rank_lists, _ranks), "post": _rank_lists}))


@settings(max_examples=200, deadline=None)
@given(st.lists(_step, max_size=4), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2), _collective)
def test_dumps_writes_what_json_writes(steps, meta, collective):
    """Byte for byte json.dumps(indent=1), whatever the steps and the collective's rank lists hold
    (the templates or the fallback)."""
    import json

    from synth.core.io import dumps

    doc = {"format": "synth.schedule", "version": 1, "steps": steps, "meta": meta}
    if collective is not None:
        doc = {"format": "synth.schedule", "collective": collective, "steps": steps, "meta": meta}
    assert dumps(doc) == json.dumps(doc, indent=1) + "\n"
