"""From a choice of carriers to pipelined steps of sends, as arrays (no per-token Python loop).

Every dispatch plan here has the same shape. For token t of rank s on machine a:
- each destination on machine a gets it from s over one intra-machine link (*local*);
- for each other machine b holding destinations, one *crossing* carries it: a sender h on a
  (s itself, or a rank s first *relays* it to) sends it to a receiver l on b, and l *forwards*
  it to the other destinations on b.
A ``Carriers`` says who sends and who receives each crossing; ``DispatchPlan`` turns it into
steps. Pipelining: the crossings are spread over K steps, every link's
crossings in equal runs (``_Spread``), so every NIC and every link carries about 1/K of its load
in each step; a crossing in step c has its relay in step c - 1 (crossings straight from s
take the earliest steps) and its forwards in c + 1; local deliveries share steps 0..K-1 the same
way. K is the one whose plan is fastest in the step model (``synth.moe.planner.best_depth``). Every rank receives a
token at most once, so the plan is a tree per token, and ``reversed_hops`` runs it backwards as
the combine: each rank adds its output to what its children sent and passes the sum to its parent.
Plans inside one switch domain (``synth.moe.fanout``) may also hold switch entries (``Fans``):
multicasts in dispatch, which ``reversed_hops`` turns into switch reduces.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from synth.core.collective import Collective
from synth.core.routing import Routing
from synth.core.schedule import Schedule, Send, Step, SwitchSend
from synth.core.topology import Topology


@dataclass(frozen=True, eq=False)
class Traffic:
    """What a routing asks of a machine, as arrays.

    ``dest_token``/``dest_rank``: every (token, destination) pair other than the source itself;
    ``token``/``machine``: every crossing (a token and a machine it must enter), with
    ``dest_crossing`` the crossing of each destination pair (-1 on the source's machine).
    """

    routing: Routing
    topology: Topology
    dest_token: np.ndarray
    dest_rank: np.ndarray
    dest_crossing: np.ndarray
    token: np.ndarray
    machine: np.ndarray

    @classmethod
    def of(cls, routing: Routing, topology: Topology) -> "Traffic":
        machine_of = np.asarray(topology.machine_of, dtype=np.int64)
        token, rank = routing.destination_pairs()
        keep = rank != routing.token_source[token]
        token, rank = token[keep], rank[keep]
        remote = machine_of[rank] != machine_of[routing.token_source[token]]
        machines = topology.machine_count
        key = token[remote] * machines + machine_of[rank[remote]]
        order = np.argsort(key, kind="stable")
        first = np.r_[True, key[order][1:] != key[order][:-1]][:len(key)]
        crossing = np.full(len(token), -1, dtype=np.int64)
        crossing[np.flatnonzero(remote)[order]] = np.cumsum(first) - 1
        unique = key[order][first]
        return cls(routing, topology, token, rank, crossing, unique // machines, unique % machines)

    @property
    def crossings(self) -> int:
        return len(self.token)

    @cached_property
    def source(self) -> np.ndarray:
        """Source rank of every crossing."""
        return self.routing.token_source[self.token]

    @cached_property
    def candidates(self) -> tuple[np.ndarray, np.ndarray]:
        """(crossing, rank) of every destination of every crossing: the ranks it may land on
        without a forward, sorted by crossing."""
        remote = np.flatnonzero(self.dest_crossing >= 0)
        order = remote[np.argsort(self.dest_crossing[remote], kind="stable")]
        return self.dest_crossing[order], self.dest_rank[order]


@dataclass(frozen=True, eq=False)
class Carriers:
    """Per crossing: the rank on the source's machine that sends it and the rank that receives it."""

    sender: np.ndarray
    receiver: np.ndarray


@dataclass(frozen=True, eq=False)
class Fans:
    """Switch entries as arrays: entry i moves ``chunk[i]`` in ``step[i]`` through switch
    ``switch[i]`` (an index into ``topology.switches``) between its ``root`` and its leaves
    ``leaves[ptr[i]:ptr[i + 1]]`` (two or more): a multicast root -> leaves (dispatch), or, in a
    ``Hops`` that reduces, the leaves' partial sums (and the root's own, where ``with_root[i]``)
    summed into the root (combine). ``root_needs[i]``: the root is one of the chunk's
    destinations (in combine it starts with an output of its own)."""

    chunk: np.ndarray
    step: np.ndarray
    switch: np.ndarray
    root: np.ndarray
    ptr: np.ndarray
    leaves: np.ndarray
    root_needs: np.ndarray
    with_root: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.chunk)


@dataclass(frozen=True, eq=False)
class Hops:
    """A plan's sends as arrays, one entry a send of ``chunk`` from ``src`` to ``dst`` in ``step``;
    ``fans``: its switch entries, if any."""

    chunk: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    step: np.ndarray
    steps: int
    reduce: bool = False
    fans: Fans | None = None

    def by_step(self, order: np.ndarray) -> list[np.ndarray]:
        """``order`` (an ordering of the sends, by step first) cut into one index array per step."""
        bounds = np.searchsorted(self.step[order], np.arange(self.steps + 1))
        return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


class DispatchPlan:
    """Every send of a dispatch plan but the steps, which ``hops(depth)`` assigns: built once,
    pipelined at any depth in a few array operations."""

    def __init__(self, traffic: Traffic, carriers: Carriers):
        ranks = traffic.topology.ranks
        source = traffic.routing.token_source
        self.relayed = carriers.sender != traffic.source
        self.relay_of, relay_token, relay_dst = _relays(traffic, carriers, self.relayed)
        local = traffic.dest_crossing < 0
        relay_key = relay_token * ranks + relay_dst
        local_key = traffic.dest_token[local] * ranks + traffic.dest_rank[local]
        fresh = ~np.isin(local_key, relay_key)  # a relay to a destination is its delivery
        local_token, local_dst = traffic.dest_token[local][fresh], traffic.dest_rank[local][fresh]
        self.locals = _Spread(source[local_token], local_dst, ranks, ())
        remote = ~local
        crossing = traffic.dest_crossing[remote]
        forward = traffic.dest_rank[remote] != carriers.receiver[crossing]
        self.forward_crossing = crossing[forward]
        forwards = np.bincount(self.forward_crossing, minlength=traffic.crossings)
        # on each link: straight from the source first (a relayed one needs a step before it),
        # the ones forwarded to the most ranks early, so the last step's forwards are few
        self.crossings = _Spread(carriers.sender, carriers.receiver, ranks, (-forwards, self.relayed))
        self.chunk = np.concatenate((local_token, relay_token, traffic.token, traffic.token[self.forward_crossing]))
        self.src = np.concatenate((source[local_token], source[relay_token], carriers.sender,
                                   carriers.receiver[self.forward_crossing]))
        self.dst = np.concatenate((local_dst, relay_dst, carriers.receiver, traffic.dest_rank[remote][forward]))
        self.relays = len(relay_token)

    @property
    def crossing_links(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sender, receiver, crossings) of every link crossings use, in ``step_counts`` order."""
        return self.crossings.links

    def hops(self, depth: int, step_counts: np.ndarray | None = None, prologue: bool = False) -> Hops:
        """The plan with its crossings spread over ``depth`` steps: in even runs on every link, or
        ``step_counts[step, link]`` crossings per step on each link of ``crossing_links``. A relayed
        crossing needs a step before it: without ``prologue`` one in step 0 moves to step 1; with
        it every crossing is one step later and step 0 holds the first relays."""
        cross = self.crossings.steps(depth) if step_counts is None else self.crossings.counted(step_counts)
        cross = cross + 1 if prologue else np.where(self.relayed, np.maximum(cross, 1), cross)
        relay = np.full(self.relays, np.iinfo(np.int64).max)
        np.minimum.at(relay, self.relay_of, cross[self.relayed] - 1)  # before its earliest crossing
        step = np.concatenate((self.locals.steps(depth), relay, cross, cross[self.forward_crossing] + 1))
        return Hops(self.chunk, self.src, self.dst, step, int(step.max()) + 1 if len(step) else 0)


def reversed_hops(hops: Hops) -> Hops:
    """The plan backwards as reductions: every send turned around, the last step first. A
    multicast becomes a switch reduce of its leaves into its root; what lands replaces the root's
    copy, so the root is a src too where it holds a partial sum by then (it is a destination, or
    it sends the chunk on later in the dispatch, which runs earlier here)."""
    fans = hops.fans
    if fans is not None and not hops.reduce:
        with_root = fans.root_needs | _sends_later(hops)
        fans = Fans(fans.chunk, hops.steps - 1 - fans.step, fans.switch, fans.root, fans.ptr, fans.leaves,
                    fans.root_needs, with_root)
    elif fans is not None:
        raise ValueError("a combine plan does not reverse into a dispatch")
    return Hops(hops.chunk, hops.dst, hops.src, hops.steps - 1 - hops.step, hops.steps, not hops.reduce, fans)


def _sends_later(hops: Hops) -> np.ndarray:
    """Per switch entry of a dispatch, whether its root sends the chunk in a later step (by a
    link or as another entry's root)."""
    fans = hops.fans
    ranks = int(max(hops.src.max(initial=0), hops.dst.max(initial=0), fans.root.max(initial=0),
                    fans.leaves.max(initial=0))) + 1
    key = np.concatenate((hops.chunk * ranks + hops.src, fans.chunk * ranks + fans.root))
    step = np.concatenate((hops.step, fans.step))
    unique, inverse = np.unique(key, return_inverse=True)
    last = np.full(len(unique), -1, dtype=np.int64)
    np.maximum.at(last, inverse, step)
    return last[inverse[len(hops.chunk):]] > fans.step


def _relays(traffic: Traffic, carriers: Carriers, relayed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(relay of every relayed crossing, token and rank of every relay): one relay per token and
    rank it is relayed to."""
    ranks = traffic.topology.ranks
    key = traffic.token[relayed] * ranks + carriers.sender[relayed]
    unique, relay_of = np.unique(key, return_inverse=True)
    return relay_of, unique // ranks, unique % ranks


class _Spread:
    """Sends spread over steps. Evenly: every link's sends in equal runs (floor or ceil of their
    share per step), where the longer runs fall chosen per link, so every rank carries a balanced
    share in every step. Counted: so many per step and link.
    Within a link the sends are ordered by ``priority`` (keys, the last the primary, as
    np.lexsort), and the first take the earliest steps."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, ranks: int, priority: tuple):
        link = src * ranks + dst
        self.order = np.lexsort((*priority, link))
        sorted_link = link[self.order]
        starts = np.flatnonzero(np.r_[True, sorted_link[1:] != sorted_link[:-1]]) if len(link) else link[:0]
        sizes = np.diff(np.r_[starts, len(link)])
        self.links = (sorted_link[starts] // ranks, sorted_link[starts] % ranks, sizes)
        self.size = np.repeat(sizes, sizes)
        self.position = np.arange(len(link)) - np.repeat(starts, sizes)
        self.seed = np.repeat(np.arange(len(starts)) * 7919, sizes)  # a per-link phase

    def steps(self, depth: int) -> np.ndarray:
        """A link's m sends in order take steps floor((p x depth + phase) / m), phase in 0..depth-1
        per link: each step gets floor or ceil of m / depth of them, earliest first, the phase
        choosing which steps get the ceil (the last send's step stays below depth)."""
        step = np.zeros(len(self.order), dtype=np.int64)
        if depth == 1 or not len(self.order):
            return step
        step[self.order] = (self.position * depth + self.seed % depth) // self.size
        return step

    def counted(self, counts: np.ndarray) -> np.ndarray:
        """Steps from [depth, links] counts (each link's column summing to its sends)."""
        depth, links = counts.shape
        step = np.empty(len(self.order), dtype=np.int64)
        step[self.order] = np.repeat(np.tile(np.arange(depth), links), counts.T.reshape(-1))
        return step


def to_schedule(hops: Hops, topology: Topology, collective: Collective, meta: dict,
                rounds: list[int] | None = None) -> Schedule:
    """The plan as a synth.schedule, sends sorted within each step, with ``rounds`` per step
    (None: no k-synchronous budget); switch entries (v2) sorted by chunk within each step."""
    op = "reduce" if hops.reduce else "copy"
    budgets = rounds or [None] * hops.steps
    entries = _switch_entries(hops, topology)
    steps = []
    for index, (at, budget) in enumerate(zip(hops.by_step(np.lexsort((hops.dst, hops.src, hops.chunk, hops.step))),
                                             budgets)):
        chunks, srcs, dsts = hops.chunk[at].tolist(), hops.src[at].tolist(), hops.dst[at].tolist()
        steps.append(Step(tuple(map(Send, chunks, srcs, dsts, [op] * len(chunks))), budget, entries[index]))
    return Schedule(topology, collective, tuple(steps), meta)


def _switch_entries(hops: Hops, topology: Topology) -> list[tuple[SwitchSend, ...]]:
    """Every step's switch entries: multicasts root -> leaves, or reduces leaves (+ root) -> root."""
    out: list[list[SwitchSend]] = [[] for _ in range(hops.steps)]
    fans = hops.fans
    if fans is None:
        return [()] * hops.steps
    names = [switch.name for switch in topology.switches]
    leaves, ptr = fans.leaves.tolist(), fans.ptr.tolist()
    with_root = fans.with_root.tolist() if fans.with_root is not None else [False] * len(fans)
    for i in np.lexsort((fans.chunk, fans.step)).tolist():
        root, ends = int(fans.root[i]), tuple(sorted(leaves[ptr[i]:ptr[i + 1]]))
        if hops.reduce:
            srcs, dsts = (tuple(sorted((*ends, root))) if with_root[i] else ends), (root,)
        else:
            srcs, dsts = (root,), ends
        out[int(fans.step[i])].append(SwitchSend(int(fans.chunk[i]), names[int(fans.switch[i])], srcs, dsts))
    return [tuple(entries) for entries in out]


def plan_valid(topology: Topology, collective: Collective, hops: Hops, rounds: list[int] | None = None) -> bool:
    """Whether the plan passes the verifier: the array replay (``synth.verify.arrays_valid``) for
    link sends only; with switch entries the schedule verifier (its bit-set replay at scale)."""
    from synth.verify import arrays_valid, verify

    if hops.fans is None or not len(hops.fans):
        return arrays_valid(topology, collective, step_arrays(hops, rounds))
    return not verify(to_schedule(hops, topology, collective, {}, rounds))


def step_arrays(hops: Hops, rounds: list[int] | None = None) -> list:
    """The plan as the verifier's ``StepArrays`` (``synth.verify.arrays_valid``), step by step
    (link sends only: a plan with switch entries goes through ``plan_valid``)."""
    from synth.verify import StepArrays

    if hops.fans is not None and len(hops.fans):
        raise ValueError("a plan with switch entries has no StepArrays; use plan_valid")

    budgets = rounds or [None] * hops.steps
    return [StepArrays(hops.chunk[at], hops.src[at], hops.dst[at], np.full(len(at), hops.reduce), budget)
            for at, budget in zip(hops.by_step(np.argsort(hops.step, kind="stable")), budgets)]
