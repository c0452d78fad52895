"""nccl_tree: NCCL's Tree allreduce (double binary tree across machines, chains inside, pipelined)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import synth.baselines
from synth.baselines import BaselineNotApplicable
from synth.baselines.nccl_tree import (
    BASELINES,
    build,
    channel_template,
    choose_pieces,
    depth_of,
    machine_trees,
    plan,
)
from synth.cli.main import main
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.topology import Group, Link, Topology
from synth.cost import best_protocol
from synth.verify import verify

FAST = ["ndv2x2", "dgx2x2", "h100x4", "dgx1", "ring:8", "uring:4", "line:5", "star:5", "full:4"]


def children(parents) -> Counter:
    return Counter(p for p in parents if p >= 0)


def reaches_root(parents, node: int) -> bool:
    seen = set()
    while parents[node] >= 0:
        if node in seen:
            return False
        seen.add(node)
        node = parents[node]
    return True


def machines_of(ring_inside: str, machines: int, size: int) -> Topology:
    """``machines`` machines of ``size`` ranks joined rank 0 to rank 0 over a 12.5 GB/s fabric.

    Inside: ``"both"`` a ring with links both ways, ``"one"`` a one-way ring (reductions need
    the ring's direction, broadcasts are routed), ``"star"`` a hub at local rank 1 (no chain of
    direct links exists).
    """
    links: dict[tuple[int, int], Link] = {}
    for m in range(machines):
        base = m * size
        for i in range(size):
            if ring_inside == "star":
                pairs = [] if i == 1 else [(base + 1, base + i), (base + i, base + 1)]
            else:
                a, b = base + i, base + (i + 1) % size
                pairs = [(a, b)] + ([(b, a)] if ring_inside == "both" else [])
            for a, b in pairs:
                if a != b:
                    links[(a, b)] = Link(a, b, 50.0, 0.7)
    heads = [m * size for m in range(machines)]
    fabric = [(a, b) for a in heads for b in heads if a != b]
    links.update({k: Link(*k, 12.5, 2.0) for k in fabric})
    groups = [Group(f"m{m}-nic-out", tuple(k for k in fabric if k[0] == h), 12.5) for m, h in enumerate(heads)]
    sets = tuple(tuple(range(m * size, (m + 1) * size)) for m in range(machines))
    return Topology(f"{ring_inside}{machines}x{size}", machines * size, tuple(links.values()), tuple(groups), sets)


# ---------------------------------------------------------------------------- machine trees
@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=2, max_value=16))
def test_machine_trees_are_complementary_binary_trees(k):
    trees = machine_trees(k)
    for parents in trees:
        assert len(parents) == k and list(parents).count(-1) == 1
        assert all(reaches_root(parents, m) for m in range(k))
        assert max(children(parents).values()) <= 2
        assert depth_of(parents) <= k.bit_length()
    inner = [set(children(parents)) for parents in trees]
    assert not inner[0] & inner[1]  # interior in one tree -> a leaf in the other


@pytest.mark.parametrize("k", [0, 1, 2.0, True])
def test_machine_trees_need_two_machines(k):
    with pytest.raises(InputError):
        machine_trees(k)


# ---------------------------------------------------------------------------- schedules
@pytest.mark.parametrize("spec", FAST)
def test_allreduce_verifies(spec):
    topo = resolve_topology(spec)
    schedule = build(topo, "allreduce", None, 4)
    assert verify(schedule) == []
    assert schedule.collective.name == "allreduce" and schedule.collective.combining
    meta = schedule.meta
    assert meta["algorithm"] == "nccl_tree" and meta["pieces"] == 4 and meta["pieces_chosen"] == "given"
    assert schedule.collective.buffer_chunks == meta["channels"] * 4
    assert {s.op for step in schedule.steps for s in step.sends} == {"reduce", "copy"}
    # every chunk reaches every rank: each of the n-1 non-roots sends up once and receives once
    assert schedule.send_count >= 2 * (topo.ranks - 1) * schedule.collective.chunks


@pytest.mark.parametrize("spec", ["ndv2x2", "h100x4", "dgx1"])
def test_pipelining_overlaps_levels(spec):
    topo = resolve_topology(spec)
    pieces = 8
    schedule = build(topo, "allreduce", None, pieces)
    depth = schedule.meta["depth"]
    assert len(schedule.steps) == 2 * depth + pieces - 1 < depth * pieces
    # in one step, some channel reduces one piece while broadcasting another
    per_channel = schedule.collective.chunks // schedule.meta["channels"]
    both = [
        step for step in schedule.steps
        if {s.op for s in step.sends if s.chunk < per_channel} == {"reduce", "copy"}
    ]
    assert both
    assert all(len({s.chunk for s in step.sends if s.chunk < per_channel}) > 1 for step in both)


def test_multi_machine_layout_ndv2x2():
    schedule = build(resolve_topology("ndv2x2"), "allreduce", None, 2)
    meta = schedule.meta
    assert meta["variant"].startswith("double binary tree") and meta["machine_trees"] == [[1, -1], [-1, 0]]
    assert meta["channels"] == 2 and meta["channel_trees"] == [0, 1] and meta["routed_edges"] == 0
    (heads0, heads1), (chains0, chains1) = meta["heads"], meta["chains"]
    # one NIC per machine: the two trees leave through different GPUs behind it
    assert heads0 != heads1 and all(h // 8 == m for m, h in enumerate(heads0 + heads1) if m < 2)
    assert chains1 == [c[::-1] for c in chains0]
    topo = schedule.topology
    for chain in chains0:
        assert sorted(chain) == sorted(range(chain[0] // 8 * 8, chain[0] // 8 * 8 + 8))
        assert all(topo.link(a, b).bandwidth == 50.0 for a, b in zip(chain, chain[1:]))  # NVLink pairs


def test_channels_spread_over_every_nic_h100x4():
    topo = resolve_topology("h100x4")
    layout = plan(topo)
    assert len(layout.channels) == 16
    for t in (0, 1):
        heads = Counter(h for ch in layout.channels if ch.tree == t for h in ch.heads)
        assert sorted(heads) == [r for m in range(4) for r in range(8 * m, 8 * m + 8)]  # each GPU/NIC once
    for tree0, tree1 in zip(layout.channels[::2], layout.channels[1::2]):
        assert all(a != b for a, b in zip(tree0.heads, tree1.heads))  # a pair leaves through two NICs


def test_chain_on_one_machine_uses_the_widest_links():
    schedule = build(resolve_topology("dgx1"), "allreduce", None, 1)
    (chain,), = schedule.meta["chains"]
    assert schedule.meta["variant"] == "chain (one machine)" and schedule.meta["machine_trees"] == []
    assert sorted(chain) == list(range(8))
    assert all(schedule.topology.link(a, b).bandwidth == 50.0 for a, b in zip(chain, chain[1:]))
    assert len(schedule.steps) == 2 * 7


@pytest.mark.parametrize("inside", ["both", "one", "star"])
@pytest.mark.parametrize("machines", [2, 3, 5])
def test_multi_machine_with_awkward_insides(inside, machines):
    topo = machines_of(inside, machines, 4)
    schedule = build(topo, "allreduce", None, 3)
    assert verify(schedule) == []
    assert (schedule.meta["routed_edges"] > 0) == (inside != "both")
    for heads in schedule.meta["heads"]:
        assert all(h % 4 == 0 for h in heads)  # only local rank 0 reaches the fabric


def test_unequal_machines_and_one_gpu_machines():
    links = tuple(Link(a, b, 25.0, 1.0) for a in range(5) for b in range(5) if a != b)
    odd = Topology("odd", 5, links, machines=((0, 1, 2), (3,), (4,)))
    schedule = build(odd, "allreduce", None, 2)
    assert verify(schedule) == [] and schedule.meta["machine_trees"] == [list(t) for t in machine_trees(3)]


def test_pieces_follow_the_size_h100x4():
    topo = resolve_topology("h100x4")
    layout = plan(topo)
    reverse = topo.reversed()
    templates = [channel_template(topo, reverse, ch) for ch in layout.channels]
    small, times_small = choose_pieces(topo, templates, 1024)
    large, times_large = choose_pieces(topo, templates, 1 << 30)
    assert small < large  # latency-bound: few pieces; bandwidth-bound: many
    assert times_small[small] == min(times_small.values()) and times_large[large] == min(times_large.values())
    schedule = build(topo, "allreduce", None, None, size=1024)
    assert schedule.meta["pieces"] == small and "fastest at 1024 bytes" in schedule.meta["pieces_chosen"]
    assert best_protocol(schedule, 1024)[1] == pytest.approx(times_small[small])  # times are at the best protocol


def test_default_size_is_one_gib():
    schedule = build(resolve_topology("ring:4"), "allreduce", None, None)
    assert "1 GiB" in schedule.meta["pieces_chosen"]
    times = {int(c): t for c, t in schedule.meta["candidate_times_us"].items()}
    assert schedule.meta["pieces"] == min(times, key=lambda c: (times[c], c))


def test_registry_entry_is_sized():
    (entry,) = BASELINES
    assert entry.name == "nccl_tree" and entry.sized and entry.collectives == frozenset({"allreduce"})
    schedule = entry.make(resolve_topology("ring:4"), "allreduce", None, None, 4096)
    assert "4096 bytes" in schedule.meta["pieces_chosen"]


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("name", ["alltoall", "allgather", "reduce_scatter", "broadcast"])
def test_other_collectives_do_not_apply(name):
    with pytest.raises(BaselineNotApplicable, match="allreduce only"):
        build(resolve_topology("dgx1"), name, None, None)


@pytest.mark.parametrize("kwargs", [{"root": 0}, {"chunks": 0}, {"chunks": 2.5}, {"size": 0}, {"size": -1.0},
                                    {"size": "1G"}, {"size": float("nan")}])
def test_bad_arguments(kwargs):
    args = {"root": None, "chunks": None, **kwargs}
    size = args.pop("size", None)
    with pytest.raises(InputError):
        build(resolve_topology("ring:4"), "allreduce", args["root"], args["chunks"], size=size)


def test_absurd_piece_counts_are_refused():
    with pytest.raises(InputError, match="at most"):
        build(resolve_topology("dgx2x2"), "allreduce", None, 10**6)


def test_one_rank_does_not_apply():
    with pytest.raises(BaselineNotApplicable):
        build(Topology("one", 1, ()), "allreduce", None, None)


@pytest.fixture
def registered(monkeypatch):
    """The registry with this module in it (until synth/baselines/__init__.py lists it)."""
    from synth.baselines import nccl_pat, nccl_tree

    table = dict(synth.baselines.registry())
    table.update({e.name: e for e in nccl_tree.BASELINES + nccl_pat.BASELINES})
    monkeypatch.setattr(synth.baselines, "registry", lambda: table)


@pytest.mark.usefixtures("registered")
def test_cli_alltoall_is_one_line_exit_2(capsys):
    assert main(["baseline", "dgx1", "alltoall", "--algo", "nccl_tree"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "nccl_tree" in err and "allreduce" in err


@pytest.mark.usefixtures("registered")
def test_cli_builds_with_size(capsys, tmp_path):
    target = tmp_path / "tree.json"
    assert main(["baseline", "ndv2x2", "allreduce", "--algo", "nccl_tree", "--size", "1M", "-o", str(target)]) == 0
    assert target.exists()


# ---------------------------------------------------------------------------- slow
@pytest.mark.slow
@pytest.mark.parametrize("size", [1024, 1 << 30])
def test_h100x16_verifies(size):
    schedule = build(resolve_topology("h100x16"), "allreduce", None, None, size=size)
    assert verify(schedule) == []
    assert schedule.meta["channels"] == 16 and schedule.meta["depth"] == 4 + 7
