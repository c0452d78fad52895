

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


def test_search_symmetries_on_tori_and_hypercubes_act_freely():
    """The restricted search ties routes under a group that fixes no rank (translations), not
    the full automorphism group (whose reflections fix ranks)."""
    from synth.core.collectives import make_collective
    from synth.core.library import resolve_topology
    from synth.core.symmetry import search_symmetries

    for name, order in (("torus:4x4", 16), ("hypercube:4", 16), ("torus:3x3", 9), ("hypercube:3", 8)):
        topo = resolve_topology(name)
        for coll in ("allgather", "alltoall"):
            syms = search_symmetries(topo, make_collective(coll, topo.ranks))
            perms = {s.ranks for s in syms}
            assert len(perms) == order and syms[0].is_identity
            assert all(tuple(a[b[r]] for r in range(topo.ranks)) in perms for a in perms for b in perms)
            assert all(all(p[r] != r for r in range(topo.ranks)) for p in perms if p != syms[0].ranks)
    rooted = search_symmetries(resolve_topology("hypercube:3"), make_collective("broadcast", 8, root=0))
    assert all(s.ranks[0] == 0 for s in rooted)


def test_torus_alltoall_meets_both_bounds_under_translations():
    """torus:4x4 alltoall at (S=4, R=8, C=1), both bounds: the translation-restricted search
    finds it (the full group could not), and the schedule verifies."""
    from synth.core.library import resolve_topology
    from synth.smt.session import SmtSession
    from synth.verify import verify

    result = SmtSession(resolve_topology("torus:4x4"), "alltoall", None).solve(4, 8, 1, time_limit=120)
    assert result.status.value == "solved" and verify(result.schedule) == []
    assert result.schedule.total_rounds == 8 and len(result.schedule.steps) == 4


def test_broadcast_walks_past_eight_chunks_and_says_why_it_stopped():
    """Pipelined collectives default to 16 chunks; the note names where and why the walk ended."""
    from synth.core.library import resolve_topology
    from synth.smt.strategies import default_max_chunks, pareto
    from synth.verify import verify

    assert default_max_chunks("broadcast") == 16 and default_max_chunks("allgather") == 8
    frontier = pareto(resolve_topology("dgx1"), "broadcast", 0, time_limit=60)
    points = {(p.steps, p.rounds, p.chunks) for p in frontier.points}
    assert frontier.complete and all(verify(p.schedule) == [] for p in frontier.points)
    best = {p.steps: p.ratio for p in frontier.points}
    from fractions import Fraction
    assert best.get(3, 1) <= Fraction(5, 12) and best.get(4, 1) <= Fraction(4, 13), points
    assert "the walk stopped at" in frontier.note and "--max-chunks" in frontier.note
    capped = pareto(resolve_topology("ring:4"), "broadcast", 0, max_chunks=2, time_limit=30)
    assert "with at most 2 chunks" in capped.note
