"""Greedy pipelined scheduling: one round per step, every resource kept busy, for big machines.

For a non-combining collective cut into many chunks, each step carries at most ``capacity``
chunks per link and group (one round). Sends are chosen greedily, scarcest resource first:
  1. chunks that still have to enter a machine (each chunk crosses into each machine once,
     through the least-used NIC links), rarest chunk first;
  2. chunks moving inside a machine, rarest-in-the-machine first, over the least-used links.
When the slow resource (a NIC) is busy in every step and the fast ones (NVLink, NVSwitch ports)
keep up, the step count approaches the rounds bound and the schedule the bandwidth limit.
Reduce-scatter is the dual on the reversed topology; allreduce is reduce_scatter + allgather.
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
from synth.greedy.nic_matching import plan_crossings
from synth.core.planning import on_machine, planning_view
from synth.core.transforms import compose, dual_collective, dual_schedule
from synth.core.schedule import Schedule, Send, Step
from synth.core.topology import Topology
from synth.verify import verify


def greedy_schedule(topology: Topology, collective: Collective, max_steps: int | None = None) -> Schedule:
    """A verified one-round-per-step schedule for a non-combining collective."""
    if collective.combining:
        raise InputError("greedy_schedule takes a non-combining collective (use pipelined())")
    if not topology.rounds_apply:  # plan in whole chunks per round, run on the machine itself
        schedule = on_machine(greedy_schedule(planning_view(topology), collective, max_steps), topology)
        _check(schedule)
        return schedule
    collective.check_on(topology)
    machine = topology.machine_of
    link_cap = {l.key: topology.link_capacity(l) for l in topology.links}
    groups_of = {key: tuple((g.name, topology.group_capacity(g)) for g in gs)
                 for key, gs in topology.groups_of_link.items()}
    holders = [set(p) for p in collective.pre]
    needers = [set(p) - set(q) for p, q in zip(collective.post, collective.pre)]
    in_machine = [Counter(machine[r] for r in h) for h in holders]
    wanted_in = [set(machine[r] for r in need) for need in needers]
    remaining = sum(len(n) for n in needers)
    out_of = [sorted(topology.out_links[r], key=lambda l: -l.bandwidth) for r in range(topology.ranks)]
    local_out = [[l for l in out_of[r] if machine[l.dst] == machine[r]] for r in range(topology.ranks)]
    members: dict[int, list[int]] = {}
    for r in range(topology.ranks):
        members.setdefault(machine[r], []).append(r)
    local_dist = _local_distances(topology, local_out)
    held_by = [set() for _ in range(topology.ranks)]
    for c, h in enumerate(holders):
        for r in h:
            held_by[r].add(c)
    fabric = _fabric_groups(topology)
    group_caps = {g.name: topology.group_capacity(g) for g in topology.groups}
    limit = max_steps or 64 * (collective.chunks + topology.ranks)
    out_room = _out_room(topology)
    steps: list[Step] = []
    while remaining:
        if len(steps) >= limit:
            raise RuntimeError(f"greedy scheduler did not finish in {limit} steps (a bug)")
        link_used: Counter = Counter()
        group_used: Counter = Counter()
        in_used: Counter = Counter()
        remote_used: Counter = Counter()
        writes: set[tuple[int, int]] = set()
        sends: list[Send] = []
        out_used = [0] * topology.ranks

        def try_send(c: int, a: int, b: int) -> bool:
            key = (a, b)
            if (b, c) in writes or link_used[key] >= link_cap[key]:
                return False
            for name, cap in groups_of.get(key, ()):
                if group_used[name] >= cap:
                    return False
            link_used[key] += 1
            out_used[a] += 1
            for name, _ in groups_of.get(key, ()):
                group_used[name] += 1
            writes.add((b, c))
            sends.append(Send(c, a, b))
            return True

        order = sorted(range(collective.chunks), key=lambda c: (len(holders[c]), c))
        # 1. into machines that lack the chunk entirely: the most crossings the NICs allow
        if fabric is not None:
            _cross_by_flow(fabric, group_caps, order, holders, held_by, wanted_in, in_machine, members,
                           machine, link_cap, try_send, needers)
        else:
            _cross_greedily(order, holders, wanted_in, in_machine, members, link_cap, try_send, remote_used)
        # 2. inside machines, in passes: each (chunk, holder) sends at most one copy per pass,
        #    to the needer whose incoming side is least used, so no chunk hogs a port
        progress = True
        while progress:
            progress = False
            for c in order:
                if not needers[c]:
                    continue
                if all(out_used[r] >= out_room[r] for r in range(topology.ranks)):
                    break  # every rank sends all it can this round
                for a in list(holders[c]):
                    if out_used[a] >= out_room[a]:
                        continue  # no send from a fits this round
                    best = None
                    local_needs = [d for d in needers[c] if machine[d] == machine[a]]
                    for link in local_out[a]:
                        b = link.dst
                        if (b, c) in writes or b in holders[c] or link_used[link.key] >= link_cap[link.key]:
                            continue
                        if b in needers[c]:
                            rank = (0, in_used[b])
                        elif any(local_dist[b][d] < local_dist[a][d] for d in local_needs):
                            rank = (1, in_used[b])  # a relay inside the machine, towards a needer
                        else:
                            continue
                        if best is None or rank < best[0]:
                            best = (rank, b)
                    if best is not None and try_send(c, a, best[1]):
                        in_used[best[1]] += 1
                        progress = True
        if not sends:
            # nothing local to do: allow any useful hop (relays on sparse topologies)
            for c in order:
                for a in sorted(holders[c]):
                    for link in out_of[a]:
                        if link.dst not in holders[c] and _closer(topology, link.dst, holders[c], needers[c]):
                            try_send(c, a, link.dst)
        if not sends:
            raise RuntimeError("greedy scheduler is stuck (a bug): no send is possible")
        for send in sends:
            if send.dst not in holders[send.chunk]:
                holders[send.chunk].add(send.dst)
                held_by[send.dst].add(send.chunk)
                in_machine[send.chunk][machine[send.dst]] += 1
                if send.dst in needers[send.chunk]:
                    needers[send.chunk].discard(send.dst)
                    remaining -= 1
        steps.append(Step(tuple(sorted(sends)), 1))
    schedule = Schedule(topology, collective, tuple(steps),
                        {"synthesizer": "greedy", "algorithm": "greedy pipelined", "chunks_per_rank": collective.chunks_per_rank})
    _check(schedule)
    return schedule


def _out_room(topology: Topology) -> list[int]:
    """Per rank, the most chunks it can send in one round: the sum of its out-links' capacities,
    capped by every group that holds all of them (a switch port)."""
    room = []
    for r in range(topology.ranks):
        keys = {link.key for link in topology.out_links[r]}
        total = sum(topology.link_capacity(link) for link in topology.out_links[r])
        for group in topology.groups:
            if keys and keys <= set(group.links):
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


def _cross_by_flow(fabric, group_caps, order, holders, held_by, wanted_in, in_machine, members, machine,
                   link_cap, try_send, needers) -> None:
    """Plan the step's crossings with a max flow through the NIC groups, then fill them with the
    rarest chunks each receiving machine still lacks (each chunk into a machine once)."""
    rank_of_order = {c: i for i, c in enumerate(order)}
    missing: dict[int, set[int]] = {}
    for c in order:
        for m in wanted_in[c]:
            if in_machine[c][m] == 0:
                missing.setdefault(m, set()).add(c)
    lacking_in = Counter(c for chunks in missing.values() for c in chunks)  # machines still to enter
    taken: dict[int, set[int]] = {}
    used_links: Counter = Counter()
    used_groups: Counter = Counter()
    _fill_crossings(fabric, group_caps, missing, taken, used_links, used_groups, held_by, members, machine,
                    link_cap, try_send, lambda c, b: (b not in needers[c], -lacking_in[c], rank_of_order[c]),
                    lambda c, b: b not in holders[c])
    # NIC slots left over: second copies straight to a rank that needs the chunk, so the NICs
    # keep working while the switches spread what already crossed
    needed_in: dict[int, set[int]] = {}
    for c in order:
        for d in needers[c]:
            needed_in.setdefault(machine[d], set()).add(c)
    short = Counter()  # ranks per chunk still lacking it, machine by machine
    for c in order:
        for d in needers[c]:
            short[(c, machine[d])] += 1
    _fill_crossings(fabric, group_caps, needed_in, taken, used_links, used_groups, held_by, members, machine,
                    link_cap, try_send, lambda c, b: (-short[(c, machine[b])], rank_of_order[c]),
                    lambda c, b: b in needers[c])


def _fill_crossings(fabric, group_caps, missing, taken, used_links, used_groups, held_by, members, machine,
                    link_cap, try_send, priority, acceptable) -> None:
    for _ in range(4):  # re-plan: a planned crossing may find its chunks taken by another sender
        link_room: dict[tuple[int, int], int] = {}
        useful: dict[tuple[int, int], set[int]] = {}
        for a, chunks in enumerate(held_by):
            if not chunks:
                continue
            for m, lacking in missing.items():
                if m == machine[a]:
                    continue
                offer = (chunks & lacking) - taken.get(m, set())
                if not offer:
                    continue
                for b in members[m]:
                    key = (a, b)
                    if key in fabric and link_cap[key] > used_links[key]:
                        link_room[key] = min(link_cap[key] - used_links[key], len(offer))
                        useful[key] = offer
        group_room = {name: group_caps[name] - used_groups[name]
                      for key in link_room for name in fabric[key]}
        plan = plan_crossings(link_room, {k: fabric[k] for k in link_room}, group_room)
        filled = 0
        for (a, b), count in sorted(plan.items(), key=lambda kv: (len(useful[kv[0]]), kv[0])):
            m = machine[b]
            for c in sorted(useful[(a, b)] - taken.get(m, set()), key=lambda c: priority(c, b)):
                if count == 0:
                    break
                if acceptable(c, b) and try_send(c, a, b):
                    taken.setdefault(m, set()).add(c)
                    used_links[(a, b)] += 1
                    for name in fabric[(a, b)]:
                        used_groups[name] += 1
                    count -= 1
                    filled += 1
        if filled == 0:
            break


def _cross_greedily(order, holders, wanted_in, in_machine, members, link_cap, try_send, remote_used) -> None:
    """Without labelled NIC groups: chunk by chunk, from the least-busy holder."""
    for c in order:
        missing = [m for m in wanted_in[c] if in_machine[c][m] == 0]
        if not missing:
            continue
        senders = sorted(holders[c], key=lambda r: (remote_used[r], r))
        for m in missing:
            placed = False
            for a in senders:
                for b in members[m]:
                    if b not in holders[c] and (a, b) in link_cap and try_send(c, a, b):
                        remote_used[a] += 1
                        placed = True
                        break
                if placed:
                    break


def _closer(topology: Topology, rank: int, holders: set[int], needers: set[int]) -> bool:
    """Is ``rank`` nearer to some rank that still needs the chunk than every holder is?"""
    dist = topology.hop_distances
    return any(dist[rank][d] < min(dist[h][d] for h in holders) for d in needers)


def pipelined(topology: Topology, name: str, chunks: int, root: int | None = None) -> Schedule:
    """Greedy pipelined schedule for any standard collective with ``chunks`` chunks per rank."""
    coll = make_collective(name, topology.ranks, root=root, chunks=chunks)
    if name == "allreduce":
        rs = pipelined(topology, "reduce_scatter", chunks)
        ag = pipelined(topology, "allgather", chunks)
        schedule = compose(rs, ag, coll)
    elif coll.combining:
        forward = greedy_schedule(topology.reversed(), dual_collective(coll))
        dual = dual_schedule(forward)
        schedule = Schedule(topology, coll, dual.steps, dual.meta)
    else:
        return greedy_schedule(topology, coll)
    _check(schedule)
    return schedule


def _check(schedule: Schedule) -> None:
    problems = verify(schedule)
    if problems:
        raise RuntimeError(f"greedy scheduler built an invalid schedule (a bug): {problems[0]}")
