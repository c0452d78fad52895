"""Schedule -> program -> MSCCL XML -> import -> load rules + data-level replay, end to end.

Every baseline on dgx1, ndv2x2 and ring:8, and synthesized (SMT and MILP) schedules: the XML
written for each runtime passes that runtime's load rules, and replaying what was read back
gives the collective's result. The JSON program format round-trips too.
"""

from __future__ import annotations

import pytest

from synth.baselines import registry
from synth.baselines.common import BaselineNotApplicable
from synth.cli.main import main
from synth.core.library import resolve_topology
from synth.exporters.msccl_xml import program_to_xml
from synth.lower.lowering import LoweringOptions, lower
from synth.msccl.load_rules import check_profile, ok
from synth.msccl.profiles import PROFILES, RUNTIMES
from synth.msccl.xml_reader import read_xml
from synth.program.document import program_from_json, program_to_json
from synth.program.replay import replay

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce", "alltoall", "broadcast", "gather", "scatter")


def _baselines(topology_name: str):
    topo = resolve_topology(topology_name)
    for name, entry in sorted(registry().items()):
        for coll in COLLECTIVES:
            if coll not in entry.collectives:
                continue
            try:
                yield f"{topology_name}:{name}:{coll}", entry.build(topo, coll, None, None)
            except BaselineNotApplicable:
                continue


def _round_trip(schedule, runtime: str, inplace: bool = False) -> None:
    program = lower(schedule, LoweringOptions(runtime=runtime, inplace=inplace))
    text = program_to_xml(program, runtime)
    parsed = read_xml(text)
    problems = check_profile(parsed, PROFILES[runtime])
    assert ok(problems), [str(p) for p in problems]
    result = replay(parsed.program)
    assert result.correct is True, [str(p) for p in result.problems]


@pytest.mark.parametrize("topology", ["dgx1", pytest.param("ndv2x2", marks=pytest.mark.slow), "ring:8"])
def test_every_baseline_round_trips_for_every_runtime(topology):
    cases = list(_baselines(topology))
    assert cases
    for label, schedule in cases:
        for runtime in RUNTIMES:
            if schedule.collective.name not in PROFILES[runtime].coll_names:
                continue  # legacy has no gather/scatter (the exporter refuses: tested in test_export)
            try:
                _round_trip(schedule, runtime)
            except AssertionError as exc:
                raise AssertionError(f"{label} ({runtime}): {exc}") from None


def test_in_place_allreduce_and_allgather_round_trip():
    topo = resolve_topology("dgx1")
    for coll in ("allreduce", "allgather"):
        schedule = registry()["ring"].build(topo, coll, None, None)
        for runtime in RUNTIMES:
            _round_trip(schedule, runtime, inplace=True)


def test_smt_frontier_schedules_round_trip(tmp_path):
    from synth.verify import load_schedule

    assert main(["pareto", "dgx1", "allgather", "-o", str(tmp_path)]) == 0
    files = sorted(tmp_path.glob("*.schedule.json"))
    assert files
    for path in files:
        for runtime in RUNTIMES:
            _round_trip(load_schedule(path), runtime)


def test_milp_router_schedules_round_trip():
    from dataclasses import replace

    from synth.milp.sketch import default_sketch
    from synth.milp.synthesize import synthesize

    topo = resolve_topology("ndv2x2")
    for coll in ("allgather", "allreduce"):
        sketch = replace(default_sketch(topo, coll)[0], chunk_up=2)
        schedule = synthesize(topo, coll, sketch).schedule
        for runtime in ("legacy", "executor"):
            _round_trip(schedule, runtime)


def test_program_json_round_trips_unchanged():
    topo = resolve_topology("dgx1")
    schedule = registry()["ring"].build(topo, "allreduce", None, None)
    program = lower(schedule, LoweringOptions())
    again = program_from_json(program_to_json(program))
    assert again.gpus == program.gpus and again.collective == program.collective
    assert replay(again).correct is True


def test_cli_export_then_check(tmp_path, capsys):
    from synth.core.io import save_schedule

    topo = resolve_topology("dgx1")
    path = tmp_path / "ring.json"
    save_schedule(path, registry()["ring"].build(topo, "allgather", None, None))
    for runtime in RUNTIMES:
        xml = tmp_path / f"ring.{runtime}.xml"
        assert main(["export", str(path), "--format", "msccl-xml", "--runtime", runtime, "-o", str(xml)]) == 0
        assert main(["check", str(xml), "--runtime", runtime]) == 0
    capsys.readouterr()
    broken = tmp_path / "broken.xml"
    broken.write_text((tmp_path / "ring.executor.xml").read_text().replace(' outofplace="1"', ""))
    assert main(["check", str(broken), "--runtime", "executor"]) == 4
    assert "outofplace" in capsys.readouterr().out


def test_check_a_program_json_file_and_a_broken_one(tmp_path, capsys):
    from synth.core.io import save_schedule

    path = tmp_path / "ring.json"
    save_schedule(path, registry()["ring"].build(resolve_topology("ring:4"), "allgather", None, None))
    prog = tmp_path / "ring.prog.json"
    assert main(["export", str(path), "--format", "program-json", "-o", str(prog)]) == 0
    assert main(["check", str(prog)]) == 0
    bad = tmp_path / "bad.prog.json"
    bad.write_text('{"format": "synth.program", "version": 1}')
    capsys.readouterr()
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0]
