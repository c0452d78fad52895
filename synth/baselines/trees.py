"""Tree baselines: the pipelined binomial tree and NCCL's double binary tree.

Trees are drawn over *positions* 0..n-1 and laid onto ranks by a rank order chosen so that tree
edges land on physical links where possible (the best of a greedy embedding, the root-relative
relabellings and BFS/DFS orders). Edges without a link are routed over shortest paths; relays
that already hold a piece are not sent it again, so every broadcast is a physical tree and its
dual (run backwards on the reversed topology with ``reduce``) is a valid reduction.

>>> from synth.core.library import resolve_topology
>>> s = binomial_tree(resolve_topology("hypercube:3"), "broadcast", 0, None)
>>> len(s.steps), s.meta["routed_edges"]
(3, 0)
"""

from __future__ import annotations

from typing import Sequence

from synth.baselines import Baseline
from synth.baselines.common import BaselineNotApplicable, Transfer, finish, route_phase
from synth.core.collective import Collective
from synth.core.collectives import broadcast, gather, reduce, scatter
from synth.core.errors import InputError
from synth.core.schedule import Schedule, Send, Step
from synth.core.topology import Topology
from synth.core.transforms import dual_schedule

DEFAULT_DBT_PIECES = 4  # pieces per half of the buffer in the double binary tree

Edges = Sequence[tuple[int, int]]  # (parent position, child position)
Steps = list[list[Send]]


# ---------------------------------------------------------------------------- tree shapes
def binomial_phases(n: int) -> list[list[tuple[int, int]]]:
    """Broadcast phases of the binomial tree (parent of p is p - lowbit(p)), biggest half first.

    >>> binomial_phases(4)
    [[(0, 2)], [(0, 1), (2, 3)]]
    """
    levels = (n - 1).bit_length()
    return [
        [(r, r + (1 << k)) for r in range(0, n, 1 << (k + 1)) if r + (1 << k) < n]
        for k in range(levels - 1, -1, -1)
    ]


def binary_tree_parents(n: int) -> list[int]:
    """In-order binary tree over positions (-1 marks the root); interior positions are odd.

    >>> binary_tree_parents(4)
    [1, 3, 1, -1]
    """
    top = 1 << (n.bit_length() - 1)  # the root, 1-based
    parents = []
    for p in range(1, n + 1):
        node, low = p, p & -p
        while node != top:
            node = node - low if (node // (2 * low)) % 2 == 1 else node + low
            low *= 2
            if node <= n:
                break
        parents.append(-1 if p == top else node - 1)
    return parents


def double_binary_trees(n: int) -> tuple[list[int], list[int]]:
    """Parent lists of NCCL-style complementary trees: tree 2 mirrors (n even) or shifts tree 1.

    >>> double_binary_trees(4)
    ([1, 3, 1, -1], [-1, 2, 0, 2])
    """
    first = binary_tree_parents(n)
    second = [-1] * n
    move = (lambda p: n - 1 - p) if n % 2 == 0 else (lambda p: (p + 1) % n)
    for child, parent in enumerate(first):
        second[move(child)] = -1 if parent < 0 else move(parent)
    return first, second


def interior(parents: Sequence[int]) -> set[int]:
    """Positions (or ranks) that have at least one child."""
    return {p for p in parents if p >= 0}


def tree_levels(parents: Sequence[int]) -> list[list[tuple[int, int]]]:
    """(parent, child) edges grouped by the child's depth: the broadcast phases of a tree."""
    depth = {parents.index(-1): 0}
    levels: list[list[tuple[int, int]]] = []
    frontier = [parents.index(-1)]
    while frontier:
        nxt = [c for c, p in enumerate(parents) if p in frontier]
        if nxt:
            levels.append([(parents[c], c) for c in nxt])
        for c in nxt:
            depth[c] = depth[parents[c]] + 1
        frontier = nxt
    return levels


# ---------------------------------------------------------------------------- rank orders
def _greedy_order(topo: Topology, edges: Edges, root_pos: int, root_rank: int) -> list[int]:
    """Place children on free out-neighbours of their parent (most free neighbours first)."""
    n, dist = topo.ranks, topo.hop_distances
    order, used = [-1] * n, {root_rank}
    order[root_pos] = root_rank

    def free_degree(rank: int) -> int:
        return sum(1 for link in topo.out_links[rank] if link.dst not in used)

    for parent, child in edges:
        home = order[parent]
        near = [l.dst for l in topo.out_links[home] if l.dst not in used]
        if not near:
            best = min(dist[home][r] for r in range(n) if r not in used)
            near = [r for r in range(n) if r not in used and dist[home][r] == best]
        pick = max(near, key=lambda r: (topo.has_link(r, home), free_degree(r), -r))
        order[child] = pick
        used.add(pick)
    return order


def _search_orders(topo: Topology, start: int) -> list[list[int]]:
    """BFS and DFS orders of the ranks from ``start`` (smallest neighbour first)."""
    bfs, seen = [start], {start}
    for node in bfs:
        for link in sorted(topo.out_links[node], key=lambda l: l.dst):
            if link.dst not in seen:
                seen.add(link.dst)
                bfs.append(link.dst)
    dfs, seen, stack = [], set(), [start]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        dfs.append(node)
        stack.extend(sorted((l.dst for l in topo.out_links[node]), reverse=True))
    rest = [r for r in range(topo.ranks) if r not in seen]
    return [bfs + [r for r in range(topo.ranks) if r not in bfs], dfs + rest]


def _cost(topo: Topology, levels: Sequence[Edges], order: Sequence[int]) -> tuple[float, float]:
    """(sum over levels of the longest routed edge, total hops) of an order."""
    dist = topo.hop_distances
    per_level = [[dist[order[a]][order[b]] for a, b in level] for level in levels]
    return (sum(max(level) for level in per_level if level), sum(sum(level) for level in per_level))


def _best_order(topo: Topology, levels_of: list[list[Edges]], candidates: list[list[int]]) -> list[int]:
    """The candidate order with the least routing cost summed over ``levels_of`` (trees)."""
    def score(order: list[int]) -> tuple[float, float]:
        costs = [_cost(topo, levels, order) for levels in levels_of]
        return (sum(c[0] for c in costs), sum(c[1] for c in costs))

    return min(candidates, key=score)


def binomial_order(topo: Topology, root: int) -> list[int]:
    """Rank order (position -> rank, position 0 = root) for the binomial tree on ``topo``."""
    n, phases = topo.ranks, binomial_phases(topo.ranks)
    candidates = [_greedy_order(topo, [e for ph in phases for e in ph], 0, root)]
    if n & (n - 1) == 0:
        candidates.append([p ^ root for p in range(n)])
    candidates.append([(p + root) % n for p in range(n)])
    candidates += _search_orders(topo, root)
    return _best_order(topo, [phases], candidates)


# ---------------------------------------------------------------------------- building blocks
def _routed_edges(topo: Topology, levels: Sequence[Edges], order: Sequence[int]) -> int:
    return sum(1 for level in levels for a, b in level if not topo.has_link(order[a], order[b]))


def prune_redeliveries(steps: Sequence[Sequence[Send]], holders: set[int]) -> Steps:
    """Drop copies to ranks that already hold the chunk, so each rank receives it once."""
    held: dict[int, set[int]] = {}
    out: Steps = []
    for sends in steps:
        keep, landing = [], set()
        for send in sorted(sends):
            have = held.setdefault(send.chunk, set(holders))
            if send.dst in have or (send.chunk, send.dst) in landing:
                continue
            keep.append(send)
            landing.add((send.chunk, send.dst))
        for chunk, dst in landing:
            held[chunk].add(dst)
        if keep:
            out.append(keep)
    return out


def tree_copy_steps(topo: Topology, levels: Sequence[Edges], order: Sequence[int]) -> Steps:
    """One chunk (0) copied down a tree, level by level, routed and pruned to a physical tree."""
    steps: Steps = []
    for level in levels:
        steps.extend(route_phase(topo, [Transfer(0, order[a], order[b]) for a, b in level]))
    return prune_redeliveries(steps, {order[levels[0][0][0]]})


def tree_reduce_steps(topo: Topology, levels: Sequence[Edges], order: Sequence[int]) -> Steps:
    """One chunk (0) reduced up a tree: the dual of its routed broadcast on the reversed topology."""
    rev, root = topo.reversed(), order[levels[0][0][0]]
    copy = tree_copy_steps(rev, levels, order)
    tree = Schedule(rev, broadcast(topo.ranks, root, 1), tuple(Step(tuple(s), None) for s in copy))
    return [list(step.sends) for step in dual_schedule(tree).steps]


def pipeline(template: Steps, chunks: Sequence[int], start: int = 0) -> Steps:
    """Copies of a one-chunk template for each chunk, piece j starting ``j`` steps later."""
    steps: Steps = []
    for j, chunk in enumerate(chunks):
        for index, sends in enumerate(template):
            while len(steps) <= start + j + index:
                steps.append([])
            steps[start + j + index].extend(Send(chunk, s.src, s.dst, s.op) for s in sends)
    return steps


def merge(*schedules: Steps) -> Steps:
    """Run step lists side by side (step i of each together)."""
    length = max((len(s) for s in schedules), default=0)
    return [[send for s in schedules if i < len(s) for send in s[i]] for i in range(length)]


def check_args(topo: Topology, name: str, root: int | None, chunks: int | None, rooted: bool) -> tuple[int, int]:
    """Validate root and chunks (InputError); returns (root or 0, chunks or 1)."""
    if topo.ranks < 2:
        raise BaselineNotApplicable(f"{name} on {topo.name}: one rank has nothing to communicate")
    if root is not None and (
        not isinstance(root, int) or isinstance(root, bool) or not 0 <= root < topo.ranks
    ):
        raise InputError(f"root {root!r} out of range 0..{topo.ranks - 1} for {topo.name}")
    if root is not None and not rooted:
        raise InputError(f"{name} has no root (got root {root})")
    if chunks is not None and (not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1):
        raise InputError(f"chunks must be a positive integer, got {chunks!r}")
    return (root or 0, chunks or 1)


# ---------------------------------------------------------------------------- builders
def binomial_tree(topology: Topology, collective_name: str, root: int | None, chunks: int | None) -> Schedule:
    """Pipelined binomial tree: broadcast, reduce (its dual), scatter and gather.

    ``chunks``: pieces of the buffer (broadcast/reduce) or chunks per rank (scatter/gather).
    """
    root, pieces = check_args(topology, collective_name, root, chunks, rooted=True)
    n, phases = topology.ranks, binomial_phases(topology.ranks)
    meta = {"variant": "pipelined" if pieces > 1 else "plain", "pieces": pieces}
    if collective_name == "broadcast":
        order = binomial_order(topology, root)
        steps = pipeline(tree_copy_steps(topology, phases, order), range(pieces))
        coll: Collective = broadcast(n, root, pieces)
    elif collective_name == "reduce":
        order = binomial_order(topology.reversed(), root)
        steps = pipeline(tree_reduce_steps(topology, phases, order), range(pieces))
        coll = reduce(n, root, pieces)
    elif collective_name in ("scatter", "gather"):
        scatter_side = collective_name == "scatter"
        order = binomial_order(topology if scatter_side else topology.reversed(), root)
        steps = []
        for phase in phases if scatter_side else reversed(phases):
            moves = []
            for a, b in phase:
                block = [order[p] * pieces + i for p in range(b, min(n, 2 * b - a)) for i in range(pieces)]
                src, dst = (order[a], order[b]) if scatter_side else (order[b], order[a])
                moves += [Transfer(c, src, dst) for c in block]
            steps.extend(route_phase(topology, moves))
        coll = (scatter if scatter_side else gather)(n, root, pieces)
        meta["variant"] = "subtree-blocks"
    else:
        raise BaselineNotApplicable(f"binomial_tree does not build {collective_name}")
    check_order = topology if collective_name in ("broadcast", "scatter") else topology.reversed()
    return finish(
        topology, coll, steps, "binomial_tree", order=list(order),
        routed_edges=_routed_edges(check_order, phases, order), **meta,
    )


def _allreduce_collective(n: int, total: int) -> Collective:
    """Allreduce cut into ``total`` chunks (buffer_chunks = total keeps the size S)."""
    everyone = frozenset(range(n))
    per_rank = total // n if total % n == 0 else 1
    return Collective("allreduce", n, True, (everyone,) * total, (everyone,) * total, total, None, per_rank)


def double_binary_order(topo: Topology) -> tuple[list[int], list[list[int]]]:
    """Rank order for the double binary tree, and the two parent lists over positions."""
    n = topo.ranks
    trees = list(double_binary_trees(n))
    levels = [tree_levels(t) for t in trees]
    edges = [e for level in levels[0] for e in level]
    candidates = [list(range(n)), _greedy_order(topo, edges, trees[0].index(-1), 0)]
    candidates += _search_orders(topo, 0)
    both = [lv for tree in levels for lv in (tree, _flip(tree))]
    return _best_order(topo, both, candidates), trees


def _flip(levels: Sequence[Edges]) -> list[list[tuple[int, int]]]:
    """Reduction phases of a tree: child -> parent, deepest level first."""
    return [[(c, p) for p, c in level] for level in reversed(levels)]


def double_binary_tree(topology: Topology, collective_name: str, root: int | None, chunks: int | None) -> Schedule:
    """NCCL's double binary tree allreduce: each tree reduces then broadcasts half the buffer.

    Both halves run at once, each pipelined over ``chunks`` pieces (default 4). Reductions follow
    the dual of a routed broadcast, so relays add their own contribution on the way up.
    """
    if collective_name != "allreduce":
        raise BaselineNotApplicable(f"double_binary_tree builds allreduce only, not {collective_name}")
    check_args(topology, collective_name, root, chunks, rooted=False)
    pieces = chunks or DEFAULT_DBT_PIECES
    order, trees = double_binary_order(topology)
    halves, routed, physical_interior = [], 0, []
    for t, parents in enumerate(trees):
        levels = tree_levels(parents)
        down = tree_copy_steps(topology, levels, order)
        up = tree_reduce_steps(topology, levels, order)
        halves.append(pipeline(up + down, range(t * pieces, (t + 1) * pieces)))
        routed += _routed_edges(topology, levels, order) + _routed_edges(
            topology.reversed(), levels, order
        )
        physical_interior.append({s.dst for step in up for s in step})
    logical = [{order[p] for p in interior(t)} for t in trees]
    return finish(
        topology, _allreduce_collective(topology.ranks, 2 * pieces), merge(*halves),
        "double_binary_tree", variant="reduce+broadcast per tree, halves concurrent",
        pieces=pieces, pieces_per_half=pieces, order=order,
        trees=[[order[p] if p >= 0 else -1 for p in _by_rank(t, order)] for t in trees],
        interior_overlap=sorted(logical[0] & logical[1]),
        physical_interior_overlap=sorted(physical_interior[0] & physical_interior[1]),
        routed_edges=routed,
    )


def _by_rank(parents: Sequence[int], order: Sequence[int]) -> list[int]:
    """Parent positions re-indexed by rank: entry r is the parent position of rank r."""
    out = [-1] * len(order)
    for pos, parent in enumerate(parents):
        out[order[pos]] = parent
    return out


BASELINES: tuple[Baseline, ...] = (
    Baseline(
        "binomial_tree",
        frozenset({"broadcast", "reduce", "scatter", "gather"}),
        binomial_tree,
        "binomial tree over a topology-aware rank order, pipelined over pieces; reduce is its dual",
    ),
    Baseline(
        "double_binary_tree",
        frozenset({"allreduce"}),
        double_binary_tree,
        "NCCL's two complementary binary trees, each reducing and broadcasting half the buffer",
    ),
)
