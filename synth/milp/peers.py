"""A peer budget: which links a schedule may use when a rank may talk to at most N peers each way.

An MSCCL thread block sends to one peer and receives from one, so a schedule whose ranks have at
most N send peers and N receive peers lowers within N thread blocks per rank
(``synth.report.budget``). Rather than refusing schedules that reach further, synthesis plans for
the budget: ``choose_peers`` picks, by a MILP, the links each rank keeps, and the backends
synthesize on ``peer_view`` (the machine with only those links; groups and NICs as they were).
The schedule runs on the machine itself unchanged.

The peer MILP (one binary ``u`` per link, tied across each orbit of a symmetry so the view keeps
it):

- **Budget.** Per rank, at most N kept links out and N in.
- **Reach.** Flows over kept links only (``f <= (ranks - 1) u``): one unit from the one source
  to each rank it must reach (or to the one sink from each that must reach it), else both ways
  between one rank and every other rank involved (strongly connected), so every chunk has a path.
  More roots (one per orbit of ranks, at most ``MAX_ROOTS``) add flows to and from the ranks they
  exchange data with, for the distance objective. Across machines each machine's own kept links
  connect it both ways too (the router routes inside machines and crosses between them once).
- **Rate.** A rate ``x <= bandwidth x u`` per link, each group within its bandwidth; every rank
  receives at ``theta x`` the chunks it lacks and sends at ``theta x`` what it must send (the
  allreduce family: one unit each way). ``theta`` is the bandwidth the kept links give the
  collective.
- **Objective.** At ``size`` >= ``BANDWIDTH_FIRST`` bytes: the largest ``theta``, ties broken
  towards the shortest paths (the sum of the flows: the fewest hops from and to every root);
  below it the shortest paths, ties broken towards the largest ``theta``. Each term is scaled to
  at most 1 and the tie-breaker weighs ``TIE``, so one solve stands for the lexicographic order.

>>> from synth.core.library import resolve_topology
>>> topo = resolve_topology("dgx1")
>>> choice = choose_peers(topo, "allgather", 1)
>>> max(choice.degrees()), len(choice.links)  # a ring through the NVLinks
(1, 8)
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, replace

import pulp

from synth.bounds.solver import MilpOptions, MilpStatus, solve, value
from synth.core.collective import Collective
from synth.core.collectives import make_collective
from synth.core.errors import InfeasibleError, InputError, SolverError, UnknownResultError
from synth.core.orbits import orbit_classes
from synth.core.schedule import peer_sets
from synth.core.topology import Topology

BANDWIDTH_FIRST = 1 << 20  # bytes: from this size on the kept links maximise bandwidth first
PEER_SECONDS = 30.0  # the peer MILP's default time limit
PEER_GAP = 1e-3  # and its relative gap (below TIE: the tie-breaker counts)
TIE = 0.05  # weight of the second objective against the first, each scaled to at most 1
MAX_ROOTS = 8  # roots whose paths the distance objective counts (spread over the rank orbits)

Key = tuple[int, int]


@dataclass(frozen=True)
class PeerChoice:
    """The links kept under a budget of ``limit`` peers each way, the rate ``theta`` they give
    (GB/s per chunk of a rank's load), the mean hops between the ranks that exchange data, and
    how long choosing and measuring took (``_measured``)."""

    limit: int
    links: frozenset[Key]
    theta: float
    distance: float
    seconds: float
    message: str

    def degrees(self) -> list[int]:
        """Per rank that keeps a link, the larger of its send and receive peer counts."""
        counts = _peer_counts(self.links)
        return [counts[r] for r in sorted(counts)]


def _peer_counts(pairs) -> dict[int, int]:
    """rank -> the larger of its distinct send and receive peers among (src, dst) ``pairs``."""
    out: dict[int, set] = defaultdict(set)
    into: dict[int, set] = defaultdict(set)
    for a, b in pairs:
        out[a].add(b)
        into[b].add(a)
    return {r: max(len(out[r]), len(into[r])) for r in set(out) | set(into)}


def peer_degree(topology: Topology) -> int:
    """The most send or receive peers a rank of ``topology`` has."""
    return max(_peer_counts(link.key for link in topology.links).values(), default=0)


def schedule_degree(schedule) -> int:
    """The most send or receive peers a rank of ``schedule`` talks to (at least 1)."""
    return max((len(peers) for side in peer_sets(schedule) for peers in side.values()), default=1)


def choose_peers(topology: Topology, collective: str | Collective, limit: int, size: int = 1 << 30,
                 generators: list[tuple[int, ...]] | None = None,
                 options: MilpOptions | None = None, keep_symmetry: bool = False,
                 machines_connected: bool = True) -> PeerChoice:
    """The links to keep (module docstring). ``generators``: rank permutations the choice must be
    invariant under (automorphisms of the machine). InfeasibleError when no choice within
    ``limit`` reaches every rank that must be reached (tried without the symmetry before that is
    said, unless ``keep_symmetry``); ``machines_connected``: each machine connected by its own
    kept links (what the router needs); UnknownResultError on a timeout without one. A budget of
    1 is a ring when one exists."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InputError(f"a peer budget must be an integer >= 1, got {limit!r}")
    coll = collective if isinstance(collective, Collective) else make_collective(collective, topology.ranks)
    options = options or MilpOptions(time_limit=PEER_SECONDS, gap=PEER_GAP)
    connected = machines_connected and topology.machine_count > 1
    if limit == 1 and not connected and (ring := _ring(topology, coll)) is not None:
        if not keep_symmetry or all({(p[a], p[b]) for a, b in ring.links} == ring.links for p in generators or []):
            return ring
    try:
        return _PeerModel(topology, coll, limit, generators or [], connected).solve(size >= BANDWIDTH_FIRST, options)
    except InfeasibleError:
        if not generators or keep_symmetry:
            raise
    return _PeerModel(topology, coll, limit, [], connected).solve(size >= BANDWIDTH_FIRST, options)


def _ring(topology: Topology, coll: Collective) -> PeerChoice | None:
    """One peer each way over every rank: a Hamiltonian cycle of links, its narrowest link the
    widest (``synth.baselines.cycles``); None when the search finds none (the MILP decides)."""
    from synth.baselines.cycles import find_ring

    started = time.perf_counter()
    ring = find_ring(topology)
    if not ring.direct:
        return None
    hops = frozenset(zip(ring.order, ring.order[1:] + ring.order[:1]))
    return _measured(topology, coll, 1, hops, started, "peer budget 1: a ring over every rank")


def _measured(topology: Topology, coll: Collective, limit: int, links: frozenset[Key], started: float,
              how: str) -> PeerChoice:
    """The choice of ``links``, measured alike however it was made: ``theta`` by the rate LP on
    exactly those links, ``distance`` the mean hops between the pairs that exchange data."""
    theta = _PeerModel(topology, coll, limit, []).rate_of(links)
    dist = _restricted(topology, links, "").hop_distances
    pairs = _needed_pairs(coll)
    distance = sum(dist[a][b] for a, b in pairs) / max(1, len(pairs))
    seconds = time.perf_counter() - started
    return PeerChoice(limit, links, theta, distance, seconds,
                      f"{how}: {len(links)} of {len(topology.links)} links kept, {distance:.2f} hops a pair, "
                      f"{seconds:.2f} s")


def peer_view(topology: Topology, choice: PeerChoice) -> Topology:
    """``topology`` with only the chosen links (groups keep their bandwidth over the links they
    still hold; NICs and machines unchanged; no switches: a peer budget plans point-to-point
    sends), its sources saying so."""
    return _restricted(topology, choice.links,
                       f"peer budget: at most {choice.limit} send and {choice.limit} receive peers per rank "
                       f"({len(choice.links)} of {len(topology.links)} links kept)")


def _restricted(topology: Topology, keep: frozenset[Key], note: str) -> Topology:
    links = tuple(link for link in topology.links if link.key in keep)
    groups = tuple(replace(g, links=kept) for g in topology.groups if (kept := tuple(k for k in g.links if k in keep)))
    return replace(topology, links=links, groups=groups, switches=(),
                   sources=topology.sources + ((note,) if note else ()))


def rank_loads(coll: Collective) -> tuple[list[float], list[float]]:
    """Per rank, the chunks it must receive and send at least once: for a non-combining
    collective what it lacks and what it alone holds that others lack; for a combining one the
    reverse roles (contributions flow to the ranks that end with the sum); where every rank ends
    with the sum of everyone's (allreduce) one unit each way for every rank."""
    recv = [0.0] * coll.ranks
    send = [0.0] * coll.ranks
    for pre, post in zip(coll.pre, coll.post):
        if coll.combining:
            if pre == post:
                for r in pre:
                    recv[r] += 1
                    send[r] += 1
                continue
            for r in pre - post:
                send[r] += 1
            for r in post:
                recv[r] += 1 if pre - {r} else 0
        else:
            missing = post - pre
            for r in missing:
                recv[r] += 1
            if missing:
                send[min(pre)] += 1
    return recv, send


def _needed_pairs(coll: Collective) -> set[Key]:
    """(source, destination) rank pairs some data must travel between."""
    pairs: set[Key] = set()
    for pre, post in zip(coll.pre, coll.post):
        sources = pre if coll.combining else {min(pre)}
        pairs.update((s, d) for s in sources for d in post if d != s and (coll.combining or d not in pre))
    return pairs


class _PeerModel:
    """The peer MILP of one problem (module docstring): its data, variables and constraint
    families."""

    def __init__(self, topology: Topology, coll: Collective, limit: int, generators: list[tuple[int, ...]],
                 machines_connected: bool = True):
        self.topology, self.coll, self.limit = topology, coll, limit
        self.machines_connected = machines_connected
        self.links = [link.key for link in topology.links]
        self.orbit = _link_orbits(self.links, generators)
        self.tied = any(rep != key for key, rep in self.orbit.items())
        self.rank_orbit = _rank_orbits(topology.ranks, generators)
        self.pairs = _needed_pairs(coll)
        self.prob = pulp.LpProblem("peers", pulp.LpMaximize)
        self.u = {}
        self.x = {}
        for key in self.links:
            rep = self.orbit[key]
            if rep not in self.u:
                self.u[rep] = self.prob.add_variable(f"u_{rep[0]}_{rep[1]}", lowBound=0, upBound=1, cat="Integer")
                self.x[rep] = self.prob.add_variable(f"x_{rep[0]}_{rep[1]}", lowBound=0)
        self.theta = self.prob.add_variable("theta", lowBound=0)
        self.flows: list[pulp.LpVariable] = []

    def use(self, key: Key) -> pulp.LpVariable:
        return self.u[self.orbit[key]]

    def rate(self, key: Key) -> pulp.LpVariable:
        return self.x[self.orbit[key]]

    def _budget_rows(self) -> None:
        out, into = defaultdict(list), defaultdict(list)
        for key in self.links:
            out[key[0]].append(self.use(key))
            into[key[1]].append(self.use(key))
        for rank in range(self.topology.ranks):
            for side in (out[rank], into[rank]):
                if len(side) > self.limit:
                    self.prob += pulp.lpSum(side) <= self.limit

    def _rate_rows(self) -> None:
        """Link rates within bandwidth on kept links, groups within theirs, and every rank's
        traffic at ``theta`` times its load."""
        bandwidth = {link.key: link.bandwidth for link in self.topology.links}
        for rep in self.u:
            self.prob += self.x[rep] <= bandwidth[rep] * self.u[rep]
        for group in self.topology.groups:
            self.prob += pulp.lpSum(self.rate(k) for k in group.links if k in bandwidth) <= group.bandwidth
        recv, send = rank_loads(self.coll)
        into, out = defaultdict(list), defaultdict(list)
        for key in self.links:
            out[key[0]].append(self.rate(key))
            into[key[1]].append(self.rate(key))
        for rank in range(self.topology.ranks):
            for load, side in ((recv[rank], into[rank]), (send[rank], out[rank])):
                if load > 0:
                    self.prob += pulp.lpSum(side) >= load * self.theta

    def _reach_rows(self) -> None:
        """Paths for every needed pair: from the one source (or to the one sink) when there is
        one, else both ways between the least rank involved and every other (strongly
        connected); then, for the distance objective, flows of up to MAX_ROOTS more roots (one
        per rank orbit) to and from the ranks they exchange data with."""
        sinks, sources = defaultdict(set), defaultdict(set)
        for s, d in self.pairs:
            sinks[s].add(d)
            sources[d].add(s)
        involved = set(sinks) | set(sources)
        if len(sinks) == 1:
            (root,) = sinks
            self._flow(root, sinks[root], forward=True)
            return
        if len(sources) == 1:
            (root,) = sources
            self._flow(root, sources[root], forward=False)
            return
        spine = min(involved)
        self._flow(spine, involved - {spine}, forward=True)
        self._flow(spine, involved - {spine}, forward=False)
        roots: dict[int, int] = {}
        for r in sorted(involved):
            roots.setdefault(self.rank_orbit[r], r)
        chosen = [r for r in roots.values() if r != spine]
        step = max(1, -(-len(chosen) // MAX_ROOTS))
        for root in chosen[::step]:
            if sinks.get(root):
                self._flow(root, sinks[root], forward=True)
            if sources.get(root):
                self._flow(root, sources[root], forward=False)

    def _machine_rows(self) -> None:
        """Each machine strongly connected by its own kept links (the router routes inside a
        machine and crosses between machines once)."""
        machine_of = self.topology.machine_of
        for m in range(self.topology.machine_count):
            members = {r for r in range(self.topology.ranks) if machine_of[r] == m}
            if len(members) < 2:
                continue
            inside = [k for k in self.links if k[0] in members and k[1] in members]
            spine = min(members)
            self._flow(spine, members - {spine}, True, inside, track=False)
            self._flow(spine, members - {spine}, False, inside, track=False)

    def _flow(self, root: int, others: set[int], forward: bool, links: list[Key] | None = None,
              track: bool = True) -> None:
        links = self.links if links is None else links
        big = self.topology.ranks - 1
        tag = ("f" if forward else "g") + ("" if track else "m")
        flow = {}
        for key in links:
            var = self.prob.add_variable(f"{tag}{root}_{key[0]}_{key[1]}", lowBound=0)
            self.prob += var <= big * self.use(key)
            flow[key] = var
            if track:
                self.flows.append(var)
        balance: dict[int, list] = defaultdict(list)
        for (a, b), var in flow.items():
            head, tail = (b, a) if forward else (a, b)
            balance[head].append(var)
            balance[tail].append(-var)
        for rank in {r for key in links for r in key} | {root}:
            if rank == root:
                target = -len(others)
            else:
                target = 1 if rank in others else 0
            self.prob += pulp.lpSum(balance[rank]) == target

    def solve(self, bandwidth_first: bool, options: MilpOptions) -> PeerChoice:
        started = time.perf_counter()
        self._budget_rows()
        self._rate_rows()
        self._reach_rows()
        if self.machines_connected and self.topology.machine_count > 1:
            self._machine_rows()
        theta = self.theta / self._theta_scale()
        distance = pulp.lpSum(self.flows) / max(1.0, len(self.flows) * (self.topology.ranks - 1))
        self.prob.setObjective(theta - TIE * distance if bandwidth_first else TIE * theta - distance)
        outcome = solve(self.prob, options)
        if outcome.status is MilpStatus.INFEASIBLE:
            inside = " and keeps every machine connected inside" if self.machines_connected else ""
            tied = " invariant under the sketch's symmetry" if self.tied else ""
            raise InfeasibleError(f"no choice of at most {self.limit} send and {self.limit} receive peers per rank"
                                  f"{tied} on {self.topology.name} reaches every rank {self.coll.name} must reach"
                                  f"{inside}")
        if not outcome.has_incumbent:
            if outcome.status is MilpStatus.TIMEOUT:
                raise UnknownResultError(f"peer MILP: {outcome.message}")
            raise SolverError(f"peer MILP: {outcome.message}")
        links = frozenset(k for k in self.links if value(self.use(k)) > 0.5)
        proven = ("optimal" if outcome.proven_optimal else f"within a relative gap of {outcome.gap:g}"
                  if outcome.gap is not None else "the best found in the time limit")
        return _measured(self.topology, self.coll, self.limit, links, started, f"peer MILP ({proven})")

    def rate_of(self, links: frozenset[Key]) -> float:
        """``theta`` with exactly ``links`` kept: the rate rows alone, an LP."""
        for rep, use in self.u.items():
            use.lowBound = use.upBound = 1 if rep in links else 0
        self._rate_rows()
        self.prob.setObjective(self.theta)
        outcome = solve(self.prob, MilpOptions(time_limit=PEER_SECONDS))
        if not outcome.has_incumbent:
            raise SolverError(f"peer rate LP: {outcome.message}")
        return float(value(self.theta))

    def _theta_scale(self) -> float:
        """An upper bound on ``theta``: every rank's links all kept, at full rate."""
        recv, send = rank_loads(self.coll)
        into, out = defaultdict(float), defaultdict(float)
        for link in self.topology.links:
            out[link.src] += link.bandwidth
            into[link.dst] += link.bandwidth
        ratios = [into[r] / recv[r] for r in range(self.topology.ranks) if recv[r] > 0]
        ratios += [out[r] / send[r] for r in range(self.topology.ranks) if send[r] > 0]
        return max(1e-9, min(ratios, default=1.0))


def _link_orbits(links: list[Key], generators: list[tuple[int, ...]]) -> dict[Key, Key]:
    """Each link's orbit representative (its least member) under the group the generators make."""
    return orbit_classes(links, [lambda key, p=perm: (p[key[0]], p[key[1]]) for perm in generators])


def _rank_orbits(ranks: int, generators: list[tuple[int, ...]]) -> list[int]:
    """Each rank's orbit representative (its least member)."""
    reps = orbit_classes(list(range(ranks)), [lambda r, p=perm: p[r] for perm in generators])
    return [reps[r] for r in range(ranks)]
