

def test_allreduce_frontier_with_jobs_equals_the_serial_one():
    """The reduce-scatter and allgather sweeps in two processes: the same points and schedules."""
    from synth.core.library import resolve_topology
    from synth.smt.strategies import pareto
    from synth.verify import verify

    topo = resolve_topology("ring:4")
    serial = pareto(topo, "allreduce", time_limit=30)
    lines: list[str] = []
    parallel = pareto(topo, "allreduce", time_limit=30, progress=lines.append, jobs=2)
    assert [(p.steps, p.rounds, p.chunks) for p in serial.points] == [(p.steps, p.rounds, p.chunks)
                                                                       for p in parallel.points]
    assert [p.schedule.steps for p in serial.points] == [p.schedule.steps for p in parallel.points]
    assert all(verify(p.schedule) == [] for p in parallel.points)
    assert parallel.complete and any("reduce_scatter" in line for line in lines)
