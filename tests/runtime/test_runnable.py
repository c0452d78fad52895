"""Loading what synth run executes (no torch needed): schedules, synth.program JSON, MSCCL XML;
bindings, roots, and our checker's verdict before anything runs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from synth.baselines import build_baseline
from synth.core.errors import InputError
from synth.core.generators import ring
from synth.core.io import save_schedule
from synth.core.library import resolve_topology
from synth.program.document import program_to_dict
from synth.runtime.runnable import load_runnable, precheck, runnable_from_program, runnable_from_schedule

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _schedule(topo, coll, algo, root=None):
    return build_baseline(resolve_topology(topo) if isinstance(topo, str) else topo, algo, coll, root, None)


def test_schedule_file_is_verified_lowered_and_sized(tmp_path):
    path = tmp_path / "ag.json"
    save_schedule(path, _schedule(ring(4), "allgather", "ring"))
    r = load_runnable(str(path))
    assert (r.kind, r.collective, r.ranks, r.inplace) == ("schedule", "allgather", 4, False)
    assert r.size_chunks == r.program.chunks_per_loop
    # every rank's input is its share, its output the whole buffer
    assert all(len(r.binding.output_chunks(k)) == r.size_chunks for k in range(4))
    assert sum(len(r.binding.input_chunks(k)) for k in range(4)) == r.size_chunks
    assert precheck(r).correct is True


def test_inplace_variant_of_a_schedule():
    r = runnable_from_schedule(_schedule(ring(4), "allreduce", "ring"), "x", inplace=True)
    assert r.inplace and r.program.inplace and not r.program.outofplace
    assert precheck(r).correct is True


@pytest.mark.parametrize("name", ["ring4_allgather.executor.xml", "ring4_allreduce_inplace.legacy.xml",
                                  "full4_alltoall.rccl.xml", "ring4_reduce_scatter.program.json"])
def test_program_and_xml_files_load(name):
    r = load_runnable(str(GOLDEN / name))
    assert r.ranks == 4 and r.kind in ("msccl-xml", "program")
    assert precheck(r).correct is True
    if "inplace" in name:
        assert r.inplace


def test_alltoallv_binds_packed_tensors_by_the_traffic_matrix(tmp_path):
    matrix = [[0, 2, 1], [1, 0, 0], [3, 1, 0]]
    traffic = tmp_path / "m.json"
    traffic.write_text(json.dumps(matrix))
    sched = build_baseline(resolve_topology("full:3"), "direct", f"alltoallv:{traffic}", None, None)
    r = runnable_from_schedule(sched, "a2av")
    assert r.collective == "alltoallv" and r.binding.splits == ((0, 2, 1), (1, 0, 0), (3, 1, 0))
    assert r.size_chunks == 4  # the largest send buffer (rank 2: 3 + 1 chunks)
    # rank 0 sends chunks 0, 1 (to 1) and 2 (to 2); rank 1 receives 0 -> 1 chunks, then 2 -> 1
    assert r.binding.input_chunks(0) == (0, 1, 2)
    src_of = {c: s for s, row in enumerate(matrix)
              for c in range(sum(map(sum, matrix[:s])), sum(map(sum, matrix[:s + 1])))}
    for d in range(3):
        sources = [src_of[c] for c in r.binding.output_chunks(d)]
        assert sources == sorted(sources) and len(sources) == sum(matrix[s][d] for s in range(3))


def test_rooted_schedule_keeps_its_root_and_programs_find_theirs(tmp_path):
    sched = _schedule("dgx1", "broadcast", "binomial_tree", root=3)
    r = runnable_from_schedule(sched, "b")
    assert r.root == 3
    with pytest.raises(InputError, match="rooted at rank 3"):
        runnable_from_schedule(sched, "b", root=2)
    found = runnable_from_program(r.program, "b.json", "program")
    assert found.root == 3


def test_refusals_are_one_line(tmp_path):
    custom = tmp_path / "custom.json"
    prog = load_runnable(str(GOLDEN / "ring4_allgather.program.json")).program
    custom.write_text(json.dumps(program_to_dict(replace(prog, collective="custom"))))
    with pytest.raises(InputError, match="no torch.distributed collective"):
        load_runnable(str(custom))
    with pytest.raises(InputError, match="applies to rooted collectives"):
        load_runnable(str(GOLDEN / "ring4_allgather.program.json"), root=1)
    with pytest.raises(InputError, match="does not run in place"):
        load_runnable(str(GOLDEN / "ring4_allgather.program.json"), inplace=True)


def test_precheck_finds_a_broken_program():
    r = load_runnable(str(GOLDEN / "ring4_allgather.program.json"))
    gpu = r.program.gpus[0]
    tb = gpu.threadblocks[0]
    broken_tb = replace(tb, ops=tuple(op for op in tb.ops if not op.sends))  # rank 0 never sends
    broken = replace(r.program, gpus=(replace(gpu, threadblocks=(broken_tb,) + gpu.threadblocks[1:]),)
                     + r.program.gpus[1:])
    verdict = precheck(replace(r, program=broken))
    assert verdict.correct is False and verdict.first_problem


def test_gzipped_schedules_load_as_results_ship_them():
    path = Path(__file__).resolve().parents[2] / "results" / "h100x16" / "allgather" / "schedules"
    r = load_runnable(str(path / "allgather.h100x16.ring.schedule.json.gz"))
    assert (r.kind, r.collective, r.ranks) == ("schedule", "allgather", 128)
