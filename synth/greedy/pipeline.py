"""Greedy pipelined scheduling: one round per step, every resource kept busy, for big machines.

For a non-combining collective cut into many chunks, each step carries at most ``capacity``
chunks per link and group (one round). Sends are chosen greedily, scarcest resource first:
  1. chunks that still have to enter a machine (each chunk crosses into each machine once,
     through the least-used NIC links), rarest chunk first;
  2. chunks moving inside a machine, rarest-in-the-machine first, over the least-used links.
When the slow resource (a NIC) is busy in every step and the fast ones (NVLink, NVSwitch ports)
keep up, the step count approaches the rounds bound and the schedule the bandwidth limit.
Combining collectives go through ``synth.core.reductions`` (duals, the allreduce composition).
On a machine whose bandwidths are not whole multiples the rounds are planned on
``synth.core.planning.planning_view`` and the schedule returned runs on the machine itself.

>>> from synth.core.generators import ring
>>> from synth.core.collectives import allgather
>>> from synth.verify import verify
>>> s = greedy_schedule(ring(4), allgather(4, 2))
>>> verify(s), len(s.steps)
([], 3)
"""

from __future__ import annotations

from collections import Counter

from synth.core.collective import Collective
from synth.core.collectives import make_collective
from synth.core.errors import InputError
from synth.core.planning import on_machine, planning_view
from synth.core.reductions import solve_reduced
from synth.core.schedule import Schedule, Send, Step
from synth.core.topology import Topology
from synth.greedy.nic_matching import plan_crossings
from synth.verify import checked


def greedy_schedule(topology: Topology, collective: Collective, max_steps: int | None = None) -> Schedule:
    """A verified one-round-per-step schedule for a non-combining collective."""
    if collective.combining:
        raise InputError("greedy_schedule takes a non-combining collective (use pipelined())")
    if not topology.rounds_apply:  # plan in whole chunks per round, run on the machine itself
        schedule = on_machine(greedy_schedule(planning_view(topology), collective, max_steps), topology)
        _check(schedule)
        return schedule
    collective.check_on(topology)
    greedy = _Greedy(topology, collective)
    limit = max_steps or 64 * (collective.chunks + topology.ranks)
    steps: list[Step] = []
    while greedy.remaining:
        if len(steps) >= limit:
            raise RuntimeError(f"greedy scheduler did not finish in {limit} steps (a bug)")
        steps.append(greedy.next_step())
    schedule = Schedule(topology, collective, tuple(steps),
                        {"synthesizer": "greedy", "algorithm": "greedy pipelined",
                         "chunks_per_rank": collective.chunks_per_rank})
    _check(schedule)
    return schedule


class _Greedy:
    """The greedy scheduler's state for one collective on one machine.

    Fixed for the whole run: capacities (links, groups, each rank's out-room), the machine
    layout, links out of each rank (fastest first) and hop distances inside machines.
    Changed by each step: who holds (``holders``, ``held_by``, ``in_machine``) and who still
    needs (``needers``, ``remaining``) each chunk. Reset at each step: what the step's sends use.
    """

    def __init__(self, topology: Topology, collective: Collective) -> None:
        self.topology = topology
        self.chunks = collective.chunks
        self.ranks = ranks = topology.ranks
        self.machine = machine = topology.machine_of
        self.link_cap = {l.key: topology.link_capacity(l) for l in topology.links}
        self.groups_of = {key: tuple((g.name, topology.group_capacity(g)) for g in gs)
                          for key, gs in topology.groups_of_link.items()}
        self.group_caps = {g.name: topology.group_capacity(g) for g in topology.groups}
        self.out_room = _out_room(topology)
        self.out_of = [sorted(topology.out_links[r], key=lambda l: -l.bandwidth) for r in range(ranks)]
        self.local_out = [[l for l in self.out_of[r] if machine[l.dst] == machine[r]] for r in range(ranks)]
        self.members: dict[int, list[int]] = {}
        for r in range(ranks):
            self.members.setdefault(machine[r], []).append(r)
        self.local_dist = _local_distances(topology, self.local_out)
        self.fabric = _fabric_groups(topology)
        self.holders = [set(p) for p in collective.pre]
        self.needers = [set(p) - set(q) for p, q in zip(collective.post, collective.pre)]
        self.in_machine = [Counter(machine[r] for r in h) for h in self.holders]
        self.wanted_in = [set(machine[r] for r in need) for need in self.needers]
        self.remaining = sum(len(n) for n in self.needers)
        self.held_by = [set() for _ in range(ranks)]
        for c, h in enumerate(self.holders):
            for r in h:
                self.held_by[r].add(c)

    def next_step(self) -> Step:
        """One round: crossings into machines first (the NICs are the scarce resource), then
        passes inside machines; relays anywhere only when neither found a send."""
        self.start_step()
        self.cross_machines()
        self.fill_inside()
        if not self.sends:
            self.relay_fallback()
        if not self.sends:
            raise RuntimeError("greedy scheduler is stuck (a bug): no send is possible")
        return self.apply_step()

    def start_step(self) -> None:
        """Empty the step's counters and order the chunks rarest first (fewest holders, then id)."""
        self.link_used: Counter = Counter()
        self.group_used: Counter = Counter()
        self.in_used: Counter = Counter()
        self.remote_used: Counter = Counter()
        self.writes: set[tuple[int, int]] = set()
        self.sends: list[Send] = []
        self.out_used = [0] * self.ranks
        holders = self.holders
        self.order = sorted(range(self.chunks), key=lambda c: (len(holders[c]), c))

    def try_send(self, c: int, a: int, b: int) -> bool:
        """Add the send of chunk ``c`` over ``a -> b`` if ``b`` is not already written ``c`` this
        step and the link and every group on it have room left this round; say whether it was added."""
        key = (a, b)
        if (b, c) in self.writes or self.link_used[key] >= self.link_cap[key]:
            return False
        groups = self.groups_of.get(key, ())
        group_used = self.group_used
        for name, cap in groups:
            if group_used[name] >= cap:
                return False
        self.link_used[key] += 1
        self.out_used[a] += 1
        for name, _ in groups:
            group_used[name] += 1
        self.writes.add((b, c))
        self.sends.append(Send(c, a, b))
        return True

    def cross_machines(self) -> None:
        """Into machines that want a chunk and hold no copy: the most crossings the NICs allow,
        each chunk into each machine once. With labelled NIC groups a max flow plans them;
        without, chunk by chunk from the least-busy holder."""
        if self.fabric is not None:
            self._cross_by_flow()
        else:
            self._cross_greedily()

    def _cross_by_flow(self) -> None:
        """Plan the step's crossings with a max flow through the NIC groups, then fill them with the
        rarest chunks each receiving machine still lacks (each chunk into a machine once); NIC slots
        left over carry second copies straight to a rank that needs the chunk, so the NICs keep
        working while the switches spread what already crossed."""
        order, needers, holders, machine = self.order, self.needers, self.holders, self.machine
        rank_of_order = {c: i for i, c in enumerate(order)}
        missing: dict[int, set[int]] = {}
        for c in order:
            for m in self.wanted_in[c]:
                if self.in_machine[c][m] == 0:
                    missing.setdefault(m, set()).add(c)
        lacking_in = Counter(c for chunks in missing.values() for c in chunks)  # machines still to enter
        taken: dict[int, set[int]] = {}
        used = (Counter(), Counter())  # this phase's crossings per link, per NIC group
        self._fill_crossings(missing, taken, used,
                             lambda c, b: (b not in needers[c], -lacking_in[c], rank_of_order[c]),
                             lambda c, b: b not in holders[c])
        needed_in: dict[int, set[int]] = {}
        short = Counter()  # ranks per chunk still lacking it, machine by machine
        for c in order:
            for d in needers[c]:
                needed_in.setdefault(machine[d], set()).add(c)
        for c in order:
            for d in needers[c]:
                short[(c, machine[d])] += 1
        self._fill_crossings(needed_in, taken, used,
                             lambda c, b: (-short[(c, machine[b])], rank_of_order[c]),
                             lambda c, b: b in needers[c])

    def _fill_crossings(self, missing, taken, used, priority, acceptable) -> None:
        """Up to four rounds of: offer every cross-machine link from a holder the chunks its
        machine lacks (``missing``, less those ``taken`` into it), plan how many each link carries,
        and fill each planned link, fewest offers first, in ``priority`` order; stop when a round
        adds nothing (a planned crossing may find its chunks taken by another sender)."""
        fabric, machine = self.fabric, self.machine
        used_links, used_groups = used
        for _ in range(4):
            link_room, useful = self._offers(missing, taken, used_links)
            group_room = {name: self.group_caps[name] - used_groups[name]
                          for key in link_room for name in fabric[key]}
            plan = plan_crossings(link_room, {k: fabric[k] for k in link_room}, group_room)
            filled = 0
            for (a, b), count in sorted(plan.items(), key=lambda kv: (len(useful[kv[0]]), kv[0])):
                m = machine[b]
                for c in sorted(useful[(a, b)] - taken.get(m, set()), key=lambda c: priority(c, b)):
                    if count == 0:
                        break
                    if acceptable(c, b) and self.try_send(c, a, b):
                        taken.setdefault(m, set()).add(c)
                        used_links[(a, b)] += 1
                        for name in fabric[(a, b)]:
                            used_groups[name] += 1
                        count -= 1
                        filled += 1
            if filled == 0:
                break

    def _offers(self, missing, taken, used_links):
        """For each cross-machine link from a holder with room left: the chunks it could carry
        (held by its source, lacking in its destination's machine, not yet taken into it) and
        how many of them fit (the room, capped by the offer's size)."""
        fabric, link_cap, machine = self.fabric, self.link_cap, self.machine
        link_room: dict[tuple[int, int], int] = {}
        useful: dict[tuple[int, int], set[int]] = {}
        for a, chunks in enumerate(self.held_by):
            if not chunks:
                continue
            for m, lacking in missing.items():
                if m == machine[a]:
                    continue
                offer = (chunks & lacking) - taken.get(m, set())
                if not offer:
                    continue
                for b in self.members[m]:
                    key = (a, b)
                    if key in fabric and link_cap[key] > used_links[key]:
                        link_room[key] = min(link_cap[key] - used_links[key], len(offer))
                        useful[key] = offer
        return link_room, useful

    def _cross_greedily(self) -> None:
        """Without labelled NIC groups: chunk by chunk (rarest first), into each machine lacking it,
        from the holder with the fewest crossings so far this step, to the first free member."""
        holders, members, remote_used = self.holders, self.members, self.remote_used
        for c in self.order:
            missing = [m for m in self.wanted_in[c] if self.in_machine[c][m] == 0]
            if not missing:
                continue
            senders = sorted(holders[c], key=lambda r: (remote_used[r], r))
            for m in missing:
                placed = False
                for a in senders:
                    for b in members[m]:
                        if b not in holders[c] and (a, b) in self.link_cap and self.try_send(c, a, b):
                            remote_used[a] += 1
                            placed = True
                            break
                    if placed:
                        break

    def fill_inside(self) -> None:
        """Inside machines, in passes over the chunks (rarest first): each (chunk, holder) with
        out-room left sends at most one copy per pass, to the target ``_local_target`` picks, so no
        chunk hogs a port. A pass stops early once every rank's out-room is used; passes repeat
        until one adds no send."""
        needers, holders, out_used, out_room = self.needers, self.holders, self.out_used, self.out_room
        ranks = range(self.ranks)
        progress = True
        while progress:
            progress = False
            for c in self.order:
                if not needers[c]:
                    continue
                if all(out_used[r] >= out_room[r] for r in ranks):
                    break  # every rank sends all it can this round
                for a in list(holders[c]):
                    if out_used[a] >= out_room[a]:
                        continue  # no send from a fits this round
                    b = self._local_target(c, a)
                    if b is not None and self.try_send(c, a, b):
                        self.in_used[b] += 1
                        progress = True

    def _local_target(self, c: int, a: int) -> int | None:
        """Where holder ``a`` sends chunk ``c`` inside its machine, over a link with room: a rank
        that needs it, else a relay nearer (inside the machine) to a rank there that needs it;
        the least-used incoming side first, ties to the first of ``a``'s links (fastest first)."""
        holders, needers, writes, in_used = self.holders[c], self.needers[c], self.writes, self.in_used
        link_used, link_cap, local_dist = self.link_used, self.link_cap, self.local_dist
        local_needs = [d for d in needers if self.machine[d] == self.machine[a]]
        best = None
        for link in self.local_out[a]:
            b = link.dst
            if (b, c) in writes or b in holders or link_used[link.key] >= link_cap[link.key]:
                continue
            if b in needers:
                rank = (0, in_used[b])
            elif any(local_dist[b][d] < local_dist[a][d] for d in local_needs):
                rank = (1, in_used[b])  # a relay inside the machine, towards a needer
            else:
                continue
            if best is None or rank < best[0]:
                best = (rank, b)
        return None if best is None else best[1]

    def relay_fallback(self) -> None:
        """Nothing crossed or moved inside: allow a send over any link (across machines too) to a
        rank nearer, in hops over the whole topology, than every holder is to some rank that
        needs the chunk (relays on sparse topologies)."""
        for c in self.order:
            holders, needers = self.holders[c], self.needers[c]
            for a in sorted(holders):
                for link in self.out_of[a]:
                    if link.dst not in holders and _closer(self.topology, link.dst, holders, needers):
                        self.try_send(c, a, link.dst)

    def apply_step(self) -> Step:
        """Deliver the step's sends: each receiver now holds its chunk (and no longer needs it)."""
        machine = self.machine
        for send in self.sends:
            c, b = send.chunk, send.dst
            if b not in self.holders[c]:
                self.holders[c].add(b)
                self.held_by[b].add(c)
                self.in_machine[c][machine[b]] += 1
                if b in self.needers[c]:
                    self.needers[c].discard(b)
                    self.remaining -= 1
        return Step(tuple(sorted(self.sends)), 1)


def _out_room(topology: Topology) -> list[int]:
    """Per rank, the most chunks it can send in one round: the sum of its out-links' capacities,
    capped by every group that holds all of them (a switch port)."""
    room = []
    for out in topology.out_links:
        total = sum(topology.link_capacity(link) for link in out)
        keys = {link.key for link in out}
        for group in topology.groups_of_link.get(out[0].key, ()) if out else ():  # must hold the first
            if keys <= set(group.links):
                total = min(total, topology.group_capacity(group))
        room.append(total)
    return room


def _local_distances(topology: Topology, local_out) -> list[dict[int, float]]:
    """Hop distances inside each machine (links between machines are not used)."""
    out = []
    for start in range(topology.ranks):
        dist = {start: 0}
        frontier = [start]
        while frontier:
            nxt = []
            for node in frontier:
                for link in local_out[node]:
                    if link.dst not in dist:
                        dist[link.dst] = dist[node] + 1
                        nxt.append(link.dst)
            frontier = nxt
        out.append(dist)
    return [_Inf(d) for d in out]


class _Inf(dict):
    """A distance map whose missing entries are infinitely far."""

    def __missing__(self, key):
        return float("inf")


def _fabric_groups(topology: Topology) -> dict[tuple[int, int], tuple[str, str]] | None:
    """For composed machines (``NAMExK``): each cross-machine link's (NIC-out, NIC-in) groups."""
    machine = topology.machine_of
    out: dict[tuple[int, int], tuple[str, str]] = {}
    for link in topology.links:
        if machine[link.src] == machine[link.dst]:
            continue
        names = [g.name for g in topology.groups_of_link.get(link.key, ())]
        outs = [n for n in names if n.endswith("-out")]
        ins = [n for n in names if n.endswith("-in")]
        if len(outs) != 1 or len(ins) != 1:
            return None
        out[link.key] = (outs[0], ins[0])
    return out or None


def _closer(topology: Topology, rank: int, holders: set[int], needers: set[int]) -> bool:
    """Is ``rank`` nearer to some rank that still needs the chunk than every holder is?"""
    dist = topology.hop_distances
    return any(dist[rank][d] < min(dist[h][d] for h in holders) for d in needers)


def pipelined(topology: Topology, name: str, chunks: int, root: int | None = None) -> Schedule:
    """Greedy pipelined schedule for any standard collective with ``chunks`` chunks per rank
    (combining ones through ``synth.core.reductions``: duals and the allreduce composition)."""
    coll = make_collective(name, topology.ranks, root=root, chunks=chunks)
    if not coll.combining:
        return greedy_schedule(topology, coll)
    schedule = solve_reduced(topology, coll, lambda part: greedy_schedule(part.topology, part.collective))
    _check(schedule)
    return schedule


def _check(schedule: Schedule) -> None:
    checked(schedule, "the greedy scheduler")
