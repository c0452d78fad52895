"""NCCL's Tree allreduce as a verified schedule: a double binary tree across machines, a chain
inside each machine, reduce up then broadcast down, pipelined in pieces.

- **Machine trees** (``machine_trees``): two binary trees over the machines, the second the
  mirror (even count) or the shift by one (odd count) of the first, so that a machine interior in
  one tree is a leaf in the other; each tree carries half of the data. This is the shape NCCL's
  ``ncclGetDtree`` builds (an in-order tree whose parents follow the lowest set bit), without the
  one-child root NCCL hangs above it: with that extra root, an odd machine count has one machine
  interior in both trees (see the ``trees`` module's ``double_binary_trees``, reused here).
- **Chains**: inside a machine, a path through every GPU over direct links (widest first) that
  starts at the *head*, the GPU that talks to the other machines. Tree edges between machines go
  head to head over the fabric.
- **Channels**: NCCL spreads its tree channels over the NICs. Here each NIC of a machine (up to
  ``MAX_PAIRS``) anchors one channel pair: tree 0 leaves through NIC g, tree 1 through NIC g+1,
  and tree 1's chain is tree 0's run backwards where the links allow. With one NIC per machine
  there is one pair whose two heads are different GPUs behind that NIC.
- **Pipelining**: every channel's data is cut into C pieces; piece j runs the one-piece template
  (reduce level by level from the deepest, then broadcast) j steps after piece 0, so different
  pieces sit at different levels in the same step: 2 x depth + C - 1 steps, not depth x C.
- **One machine**: the chain alone (cut from ``cycles.find_ring`` at its narrowest hop).

Reductions travel over direct links only: the reduce template is the dual of a broadcast routed
on the reversed topology, so a relay on a routed hop adds its own contribution on the way up.

>>> from synth.core.library import resolve_topology
>>> s = build(resolve_topology("ring:4"), "allreduce", None, 2)
>>> len(s.steps), s.meta["pieces"], s.meta["chains"]
(7, 2, [[[0, 3, 2, 1]]])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from synth.baselines import Baseline
from synth.baselines.common import BaselineNotApplicable, finish
from synth.baselines.cycles import PATH_BUDGET, _best, _spanning_order, _weights, find_ring
from synth.baselines.trees import (
    check_args,
    double_binary_trees,
    merge,
    pipeline,
    tree_copy_steps,
    tree_levels,
)
from synth.core.collective import Collective
from synth.core.errors import InputError
from synth.core.schedule import Schedule, Send, Step
from synth.core.topology import Topology

CANDIDATE_PIECES = (1, 2, 4, 8, 16, 32, 64)  # pieces per channel tried when a size is given
DEFAULT_SIZE = 1 << 30  # the size the piece count is chosen for when none is given (1 GiB)
MAX_PAIRS = 8  # channel pairs (one per NIC) at most
MAX_SENDS = 300_000  # piece counts whose schedule would have more sends are not tried
MAX_GIVEN_SENDS = 2_000_000  # a given piece count that needs more sends is refused

Steps = list[list[Send]]
Chain = tuple[int, ...]


@dataclass(frozen=True)
class TreeChannel:
    """One tree channel: which machine tree, each machine's head and chain, and every rank's parent."""

    tree: int
    heads: tuple[int, ...]
    chains: tuple[Chain, ...]
    parents: tuple[int, ...]  # per rank; -1 at the root


@dataclass(frozen=True)
class TreePlan:
    """The machine trees (none on one machine) and the channels that run over them."""

    machine_trees: tuple[tuple[int, ...], ...]
    channels: tuple[TreeChannel, ...]


# ---------------------------------------------------------------------------- machine trees
def machine_trees(k: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Parent lists (-1 at the root) of the two complementary trees over ``k`` >= 2 machines.

    >>> machine_trees(4)
    ((1, 3, 1, -1), (-1, 2, 0, 2))
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 2:
        raise InputError(f"a double binary tree needs at least 2 machines, got {k!r}")
    first, second = double_binary_trees(k)
    return tuple(first), tuple(second)


def depth_of(parents: Sequence[int]) -> int:
    """Edges on the longest root-to-leaf path of a parent list.

    >>> depth_of((1, 3, 1, -1))
    2
    """
    return len(tree_levels(list(parents)))


# ---------------------------------------------------------------------------- chains
def nic_slots(topology: Topology, machine: Sequence[int]) -> list[tuple[int, ...]]:
    """The machine's GPUs that reach other machines, grouped by NIC (a GPU without one alone)."""
    inside = set(machine)
    mof = topology.machine_of
    ports = [r for r in machine if any(mof[l.dst] != mof[r] for l in topology.out_links[r])]
    slots: list[tuple[int, ...]] = []
    for nic in topology.nics:
        served = tuple(r for r in nic.ranks if r in inside and r in ports)
        if served:
            slots.append(served)
    covered = {r for slot in slots for r in slot}
    slots += [(r,) for r in ports if r not in covered]
    return sorted(slots) or [(machine[0],)]


def hamiltonian_path(topology: Topology, machine: Sequence[int], head: int, tail: int) -> Chain | None:
    """A head -> tail path through the machine over links present both ways (widest first)."""
    if len(machine) == 1:
        return (head,) if head == tail else None
    if head == tail:
        return None
    weights = _weights(topology, tuple(sorted(machine)), True)
    return _best(weights, head, tail, topology.machine_of, PATH_BUDGET)


def ring_chain(topology: Topology, machine: Sequence[int], head: int | None,
               backwards: bool = False) -> Chain | None:
    """A chain cut from the machine's ring: ``head`` then its ring predecessors, so that every
    reduction (chain[i+1] -> chain[i]) follows a ring link (``backwards`` on a bidirectional
    ring: its successors). Without a head, the ring is cut at its narrowest hop. None when the
    ring is routed."""
    ring = find_ring(topology, machine)
    if not ring.direct:
        return None
    order, m = ring.order, len(ring.order)
    if backwards and ring.bidirectional:
        order = order[::-1]
    if head is None:
        def width(i: int) -> float:
            a, b = order[i], order[(i + 1) % m]
            back = topology.link(b, a)
            forward = topology.link(a, b).bandwidth
            return min(forward, back.bandwidth) if ring.bidirectional and back else forward

        head = order[min(range(m), key=lambda i: (width(i), i))]
    pos = order.index(head)
    return tuple(order[(pos - i) % m] for i in range(m))


def routed_chain(topology: Topology, machine: Sequence[int], head: int) -> Chain:
    """A depth-first order from ``head`` (widest links first); its hops may be routed."""
    return _spanning_order(topology, (head,) + tuple(r for r in machine if r != head))


def chain_from(topology: Topology, machine: Sequence[int], head: int, backwards: bool = False) -> Chain:
    """The best chain starting at ``head``: a ring cut there, else a routed order."""
    return ring_chain(topology, machine, head, backwards) or routed_chain(topology, machine, head)


def _width(topology: Topology, chain: Chain) -> tuple[float, float]:
    hops = [min(topology.link(a, b).bandwidth, topology.link(b, a).bandwidth) for a, b in zip(chain, chain[1:])]
    return (min(hops, default=float("inf")), sum(hops))


def pair_chains(topology: Topology, machine: Sequence[int], slots: Sequence[tuple[int, ...]],
                pair: int) -> tuple[Chain, Chain]:
    """Chains of tree 0 and tree 1 of channel pair ``pair`` on one machine.

    Tree 0's head is the first GPU of NIC slot ``pair``, tree 1's the first of the next slot (with
    one slot: another GPU behind it, the one that ends the widest path). Tree 1 runs tree 0's path
    backwards when one joins the two heads; otherwise each gets its own chain (with a single GPU
    on the fabric, both start there and run round the ring in opposite directions).
    """
    head0 = slots[pair % len(slots)][0]
    if len(slots) > 1:
        tails = [slots[(pair + 1) % len(slots)][0]]
    else:
        tails = [r for r in slots[0] if r != head0]
    paths = [p for p in (hamiltonian_path(topology, machine, head0, t) for t in tails) if p]
    if paths:
        best = max(paths, key=lambda p: (_width(topology, p), -p[-1]))
        return best, best[::-1]
    if len(machine) == 1:
        return (head0,), (head0,)
    if not tails:
        return chain_from(topology, machine, head0), chain_from(topology, machine, head0, backwards=True)
    return chain_from(topology, machine, head0), chain_from(topology, machine, tails[0])


def spanning_parents(ranks: int, tree: Sequence[int] | None, chains: Sequence[Chain]) -> tuple[int, ...]:
    """Every rank's parent: along its machine's chain, and chain head to parent machine's head.

    >>> spanning_parents(4, (1, -1), [(0, 1), (2, 3)])  # machine 0 hangs under machine 1
    (2, 0, -1, 2)
    """
    parents = [-1] * ranks
    for m, chain in enumerate(chains):
        for up, down in zip(chain, chain[1:]):
            parents[down] = up
        if tree is not None and tree[m] >= 0:
            parents[chain[0]] = chains[tree[m]][0]
    return tuple(parents)


# ---------------------------------------------------------------------------- plan
def plan(topology: Topology) -> TreePlan:
    """Machine trees, heads and chains of every channel of ``topology``."""
    machines = topology.machines or (tuple(range(topology.ranks)),)
    if len(machines) == 1:
        chain = ring_chain(topology, machines[0], None) or routed_chain(topology, machines[0], machines[0][0])
        parents = spanning_parents(topology.ranks, None, [chain])
        return TreePlan((), (TreeChannel(0, (chain[0],), (chain,), parents),))
    trees = machine_trees(len(machines))
    slots = [nic_slots(topology, m) for m in machines]
    pairs = min(MAX_PAIRS, min(len(s) for s in slots))
    channels = []
    for pair in range(pairs):
        both = [pair_chains(topology, m, s, pair) for m, s in zip(machines, slots)]
        for t in (0, 1):
            chains = tuple(b[t] for b in both)
            parents = spanning_parents(topology.ranks, trees[t], chains)
            channels.append(TreeChannel(t, tuple(c[0] for c in chains), chains, parents))
    return TreePlan(trees, tuple(channels))


# ---------------------------------------------------------------------------- templates
def channel_template(topology: Topology, reverse: Topology, channel: TreeChannel) -> Steps:
    """One piece (chunk 0) through a channel: reduce to the root level by level, then broadcast."""
    levels = tree_levels(list(channel.parents))
    if not levels:
        return []
    identity = list(range(topology.ranks))
    down = tree_copy_steps(topology, levels, identity)
    # the dual of a broadcast routed on the reversed topology (each rank reached once): run
    # backwards with every send flipped into a reduce (transforms.dual_schedule, without
    # rebuilding the reversed topology for every channel)
    rev_copy = tree_copy_steps(reverse, levels, identity)
    up = [[Send(0, s.dst, s.src, "reduce") for s in step] for step in reversed(rev_copy)]
    return up + down


def routed_hops(topology: Topology, channel: TreeChannel) -> int:
    """Tree edges of the channel without a direct link in both directions."""
    return sum(
        1 for child, parent in enumerate(channel.parents)
        if parent >= 0 and not (topology.has_link(parent, child) and topology.has_link(child, parent))
    )


def pipeline_pieces(templates: Sequence[Steps], pieces: int) -> Steps:
    """Channel c's template on chunks c*pieces .. c*pieces+pieces-1, one step apart; channels side by side."""
    return merge(*(pipeline(t, range(c * pieces, (c + 1) * pieces)) for c, t in enumerate(templates)))


def allreduce_in(ranks: int, total: int) -> Collective:
    """Allreduce cut into ``total`` chunks (buffer_chunks = total keeps the size S)."""
    everyone = frozenset(range(ranks))
    per_rank = total // ranks if total % ranks == 0 else 1
    return Collective("allreduce", ranks, True, (everyone,) * total, (everyone,) * total, total, None, per_rank)


def cost_stand_in(topology: Topology, templates: Sequence[Steps], pieces: int) -> Schedule:
    """A schedule with the pipelined one's sends per link in every step, every send left on chunk 0.

    The step model counts sends per link and group, not which chunk they carry, so this costs
    what the real schedule costs without building (or verifying) its sends; it is not valid.
    """
    steps: Steps = []
    for template in templates:
        for j in range(pieces):
            for index, sends in enumerate(template):
                while len(steps) <= j + index:
                    steps.append([])
                steps[j + index].extend(sends)
    coll = allreduce_in(topology.ranks, len(templates) * pieces)
    return Schedule(topology, coll, tuple(Step(tuple(s), None) for s in steps if s))


def candidates(templates: Sequence[Steps]) -> tuple[int, ...]:
    """Piece counts worth trying: those whose schedule stays under ``MAX_SENDS`` sends."""
    per_piece = sum(len(step) for t in templates for step in t)
    return tuple(c for c in CANDIDATE_PIECES if c == 1 or c * per_piece <= MAX_SENDS)


def choose_pieces(topology: Topology, templates: Sequence[Steps], size: float) -> tuple[int, dict[int, float]]:
    """The candidate piece count fastest at ``size`` at its best protocol (ties: fewer), and
    every candidate's time."""
    from synth.cost import best_protocol

    times = {c: best_protocol(cost_stand_in(topology, templates, c), size)[1] for c in candidates(templates)}
    return min(times, key=lambda c: (times[c], c)), times


def choices(topology: Topology, collective_name: str, root: int | None, sizes: Sequence[float]) -> dict[float, int]:
    """For every size, the piece count ``build`` would choose there (cheap: no schedule is built).

    >>> from synth.core.library import resolve_topology
    >>> picks = choices(resolve_topology("h100x4"), "allreduce", None, [1024, 1 << 30])
    >>> picks[1024] < picks[1 << 30]
    True
    """
    from synth.cost import step_loads

    if collective_name != "allreduce":
        raise BaselineNotApplicable(f"nccl_tree builds allreduce only, not {collective_name}")

    layout = plan(topology)
    reverse = topology.reversed()
    templates = [channel_template(topology, reverse, ch) for ch in layout.channels]
    loads = {c: step_loads(cost_stand_in(topology, templates, c)) for c in candidates(templates)}
    return {size: min(loads, key=lambda c: (loads[c].best(size)[1], c)) for size in sizes}


# ---------------------------------------------------------------------------- builder
def _check_size(size: float | None) -> None:
    if size is None:
        return
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0 or size == float("inf"):
        raise InputError(f"size must be a positive number of bytes, got {size!r}")


def _pieces(topology: Topology, templates: Sequence[Steps], chunks: int | None,
            size: float | None) -> tuple[int, dict]:
    """Pieces per channel (given, or the fastest at ``size`` / 1 GiB) and the meta that says which."""
    if chunks is not None:
        sends = chunks * sum(len(step) for t in templates for step in t)
        if sends > MAX_GIVEN_SENDS:
            raise InputError(
                f"nccl_tree with {chunks} pieces per channel would have {sends} sends on {topology.name}; "
                f"at most {MAX_GIVEN_SENDS} are built (use fewer chunks)"
            )
        return chunks, {"pieces_chosen": "given"}
    at = DEFAULT_SIZE if size is None else size
    pieces, times = choose_pieces(topology, templates, at)
    return pieces, {
        "pieces_chosen": f"fastest at {int(at)} bytes" + (" (no size given: 1 GiB)" if size is None else ""),
        "candidate_times_us": {str(c): round(t, 4) for c, t in times.items()},
    }


def build(topology: Topology, collective_name: str, root: int | None, chunks: int | None,
          size: float | None = None) -> Schedule:
    """NCCL's Tree allreduce (verified); ``chunks`` = pieces per channel, else the fastest at ``size``."""
    if collective_name != "allreduce":
        raise BaselineNotApplicable(
            f"nccl_tree builds allreduce only (NCCL runs Tree for allreduce), not {collective_name}"
        )
    check_args(topology, "nccl_tree", root, chunks, rooted=False)
    _check_size(size)
    layout = plan(topology)
    reverse = topology.reversed()
    templates = [channel_template(topology, reverse, ch) for ch in layout.channels]
    pieces, meta = _pieces(topology, templates, chunks, size)
    multi = bool(layout.machine_trees)
    depth = max(depth_of(ch.parents) for ch in layout.channels)
    steps = pipeline_pieces(templates, pieces)
    return finish(
        topology, allreduce_in(topology.ranks, len(templates) * pieces), steps, "nccl_tree",
        variant="double binary tree across machines, chains inside" if multi else "chain (one machine)",
        pieces=pieces, channels=len(layout.channels), depth=depth,
        machine_trees=[list(t) for t in layout.machine_trees],
        channel_trees=[ch.tree for ch in layout.channels],
        heads=[list(ch.heads) for ch in layout.channels],
        chains=[[list(c) for c in ch.chains] for ch in layout.channels],
        routed_edges=sum(routed_hops(topology, ch) for ch in layout.channels),
        **meta,
    )


NCCL_TREE = Baseline(
    name="nccl_tree",
    collectives=frozenset({"allreduce"}),
    build=build,
    description=("NCCL's Tree: double binary tree across machines, chains inside, pipelined "
                 "(fastest pieces at the size)"),
    sized=True,
    choices=choices,
)

BASELINES: tuple[Baseline, ...] = (NCCL_TREE,)
