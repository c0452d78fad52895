"""Switch entries for tests: small machines with a computing switch, random *valid* switch
schedules built constructively (never by asking the verifier), mutations of them, and a second,
deliberately different replay of the schedule v2 semantics (DESIGN.md, "In-network reduction and
multicast") that answers only "valid or not".

The reference replay moves *data*: every contribution is a random 64-bit integer, a switch entry
with several srcs writes their sum over every dst (replacing what the dst held), a double count
shows as a wrong sum. Capacity is counted here from the topology's fields, not through
``synth.core.schedule.port_loads`` or ``rounds_needed``.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

from hypothesis import strategies as st

from synth.core import collectives as colls
from synth.core.schedule import Schedule, Send, Step, SwitchSend
from synth.core.topology import Group, Link, Switch, Topology

LINK_BW = 100.0


# ---------------------------------------------------------------- machines
def box(n: int = 4, ports=None, *, reduce: bool = True, multicast: bool = True, reduce_multicast: bool = False,
        groups: bool = True, switch_bw: float = LINK_BW, group_bw: float = LINK_BW, capacity: int | None = None,
        alpha: float = 1.0, link_alpha: float = 0.5, name: str = "nvs", port_groups=None) -> Topology:
    """``n`` ranks, every pair linked (LINK_BW GB/s each way); with ``groups`` a ``gpuR-out`` and a
    ``gpuR-in`` group per rank over its links, which the switch's port of R shares (unless
    ``port_groups`` is False); one switch ``name`` over ``ports`` (default: every rank)."""
    ports = tuple(range(n)) if ports is None else tuple(ports)
    links = tuple(Link(a, b, LINK_BW, link_alpha) for a in range(n) for b in range(n) if a != b)
    made = ()
    if groups:
        made = tuple(g for r in range(n) for g in (
            Group(f"gpu{r}-out", tuple((r, d) for d in range(n) if d != r), group_bw),
            Group(f"gpu{r}-in", tuple((s, r) for s in range(n) if s != r), group_bw)))
    shared = groups if port_groups is None else port_groups
    switch = Switch(name, ports, switch_bw, alpha, capacity, reduce, multicast, reduce_multicast,
                    out_groups=tuple(f"gpu{r}-out" for r in ports) if shared else None,
                    in_groups=tuple(f"gpu{r}-in" for r in ports) if shared else None)
    return Topology(f"box{n}", n, links, made, switches=(switch,))


def _whole(capacity, bandwidth: float, smallest: float) -> int | None:
    if capacity is not None:
        return capacity
    ratio = bandwidth / smallest
    return int(round(ratio)) if abs(ratio - round(ratio)) < 1e-9 and round(ratio) >= 1 else None


def step_loads(topo: Topology, sends, entries) -> tuple[Counter, Counter, Counter]:
    """(chunks per link, per (switch, rank, 'out'|'in') port, per group name) of one step, counted
    from the topology's fields: a send loads its link and every group listing it; an entry loads
    the out-port of each src, the in-port of each dst and the group each port names."""
    links, ports, groups = Counter(), Counter(), Counter()
    switches = {s.name: s for s in topo.switches}
    for s in sends:
        links[(s.src, s.dst)] += 1
        for g in topo.groups:
            if (s.src, s.dst) in g.links:
                groups[g.name] += 1
    for e in entries:
        sw = switches.get(e.switch)
        if sw is None:
            continue
        for direction, ranks, named in (("out", e.srcs, sw.out_groups), ("in", e.dsts, sw.in_groups)):
            for r in ranks:
                if r not in sw.ranks:
                    continue
                ports[(sw.name, r, direction)] += 1
                if named is not None and named[sw.ranks.index(r)] is not None:
                    groups[named[sw.ranks.index(r)]] += 1
    return links, ports, groups


def capacities(topo: Topology) -> tuple[dict, dict, dict]:
    """Chunks per round of every link, switch and group (None: not whole)."""
    smallest = min(l.bandwidth for l in topo.links)
    return ({(l.src, l.dst): _whole(l.capacity, l.bandwidth, smallest) for l in topo.links},
            {s.name: _whole(s.capacity, s.bandwidth, smallest) for s in topo.switches},
            {g.name: _whole(g.capacity, g.bandwidth, smallest) for g in topo.groups})


def fewest_rounds(topo: Topology, sends, entries) -> int:
    """Fewest rounds for which the step fits every capacity (1 for an empty step)."""
    links, ports, groups = step_loads(topo, sends, entries)
    link_cap, switch_cap, group_cap = capacities(topo)
    need = 1
    for key, count in links.items():
        need = max(need, -(-count // link_cap[key]))
    for (name, _, _), count in ports.items():
        need = max(need, -(-count // switch_cap[name]))
    for name, count in groups.items():
        need = max(need, -(-count // group_cap[name]))
    return need


def make_steps(topo: Topology, raw, extra=None) -> tuple[Step, ...]:
    """Steps from [(sends, entries), ...] with the fewest rounds (plus ``extra[i]``)."""
    return tuple(Step(tuple(sends), fewest_rounds(topo, sends, entries) + (extra[i] if extra else 0), tuple(entries))
                 for i, (sends, entries) in enumerate(raw))


# ---------------------------------------------------------------- the reference replay
def _capability_ok(sw: Switch, srcs: int, dsts: int) -> bool:
    """DESIGN.md: several srcs and one dst need reduce, one src and several dsts multicast,
    several of both reduce_multicast (no capability stands in for another)."""
    if srcs > 1 and dsts > 1:
        return sw.reduce_multicast
    if srcs > 1:
        return sw.reduce
    if dsts > 1:
        return sw.multicast
    return True


class _Replay:
    def __init__(self, schedule: Schedule, seed: int):
        self.topo, self.coll = schedule.topology, schedule.collective
        rng = random.Random(seed)
        n, chunks = self.coll.ranks, self.coll.chunks
        self.contribution = [[rng.getrandbits(64) | 1 for _ in range(chunks)] for _ in range(n)]
        self.value: dict = {}
        for c, pre in enumerate(self.coll.pre):
            for r in pre:
                self.value[(r, c)] = (self.contribution[r][c], 1 << r) if self.coll.combining else (c, 0)
        self.links = {(l.src, l.dst) for l in self.topo.links}
        self.switches = {s.name: s for s in self.topo.switches}

    def in_range(self, ranks, chunk) -> bool:
        return all(isinstance(r, int) and 0 <= r < self.coll.ranks for r in ranks) and 0 <= chunk < self.coll.chunks

    def send(self, s: Send, writes: dict) -> bool:
        if not self.in_range((s.src, s.dst), s.chunk) or (s.src, s.dst) not in self.links:
            return False
        if s.op == "reduce" and not self.coll.combining:
            return False
        held = self.value.get((s.src, s.chunk))
        if held is None:
            return False
        writes.setdefault((s.dst, s.chunk), []).append((s.op, held))
        return True

    def entry(self, e: SwitchSend, writes: dict) -> bool:
        sw = self.switches.get(e.switch)
        if sw is None or not self.in_range((*e.srcs, *e.dsts), e.chunk):
            return False
        if not e.srcs or not e.dsts or len(set(e.srcs)) < len(e.srcs) or len(set(e.dsts)) < len(e.dsts):
            return False
        if not all(r in sw.ranks for r in (*e.srcs, *e.dsts)) or not _capability_ok(sw, len(e.srcs), len(e.dsts)):
            return False
        if len(e.srcs) > 1 and not self.coll.combining:
            return False
        parts = [self.value.get((r, e.chunk)) for r in e.srcs]
        if any(p is None for p in parts):
            return False
        total, mask = 0, 0
        for v, m in parts:
            if self.coll.combining and mask & m:
                return False
            total, mask = total + v, mask | m
        landed = (total, mask) if self.coll.combining else (e.chunk, 0)
        for dst in e.dsts:
            writes.setdefault((dst, e.chunk), []).append(("switch", landed))
        return True

    def fits(self, step: Step) -> bool:
        if step.rounds is None:
            return True
        links, ports, groups = step_loads(self.topo, step.sends, step.switches)
        link_cap, switch_cap, group_cap = capacities(self.topo)
        over = [count > link_cap[k] * step.rounds for k, count in links.items() if link_cap.get(k)]
        over += [count > switch_cap[k[0]] * step.rounds for k, count in ports.items() if switch_cap[k[0]]]
        over += [count > group_cap[k] * step.rounds for k, count in groups.items() if group_cap[k]]
        return not any(over)

    def land(self, writes: dict) -> bool:
        updates = {}
        for (dst, c), group in writes.items():
            ops = [op for op, _ in group]
            if "switch" in ops:
                if len(group) > 1:
                    return False
                updates[(dst, c)] = group[0][1]
                continue
            if len(group) > 1 and any(op == "copy" for op in ops):
                return False
            copies = [v for op, v in group if op == "copy"]
            total, mask = copies[-1] if copies else self.value.get((dst, c), (0, 0))
            for op, (v, m) in group:
                if op == "reduce":
                    if self.coll.combining and mask & m:
                        return False
                    total, mask = total + v, mask | m
            updates[(dst, c)] = (total, mask) if self.coll.combining else (c, 0)
        self.value.update(updates)
        return True

    def post_ok(self) -> bool:
        for c, post in enumerate(self.coll.post):
            want = (sum(self.contribution[r][c] for r in self.coll.pre[c]), sum(1 << r for r in self.coll.pre[c]))
            for r in post:
                held = self.value.get((r, c))
                if held is None or (self.coll.combining and held != want):
                    return False
        return True


def reference_valid(schedule: Schedule, seed: int = 11) -> bool:
    """True exactly when the schedule (sends and switch entries) keeps every rule and ends with
    every post rank holding its chunks (combining: the exact sum of ``pre``'s contributions)."""
    if schedule.topology.ranks != schedule.collective.ranks:
        return False
    replay = _Replay(schedule, seed)
    for step in schedule.steps:
        if step.rounds is not None and (not isinstance(step.rounds, int) or step.rounds < 1):
            return False
        writes: dict = {}
        if not all(replay.send(s, writes) for s in step.sends):
            return False
        if not all(replay.entry(e, writes) for e in step.switches):
            return False
        if not replay.fits(step) or not replay.land(writes):
            return False
    return replay.post_ok()


# ---------------------------------------------------------------- random valid schedules
class _Plan:
    """Chunk by chunk, operations at relative steps; a timeline of (sends, entries)."""

    def __init__(self, topo: Topology, coll, rng: random.Random):
        self.topo, self.coll, self.rng = topo, coll, rng
        self.sw = topo.switches[0]
        self.ports = sorted(self.sw.ranks)
        self.others = [r for r in range(topo.ranks) if r not in self.sw.ranks]
        self.timeline: dict[int, tuple[list, list]] = {}

    def at(self, t: int):
        return self.timeline.setdefault(t, ([], []))

    def entry(self, t: int, chunk: int, srcs, dsts) -> None:
        srcs, dsts = list(srcs), list(dsts)
        self.rng.shuffle(srcs)
        self.rng.shuffle(dsts)
        self.at(t)[1].append(SwitchSend(chunk, self.sw.name, tuple(srcs), tuple(dsts)))

    def gap(self) -> int:
        return self.rng.choice([1, 1, 2])

    def modes(self, kind: str) -> list[str]:
        sw, k = self.sw, len(self.ports)
        can_reduce = _capability_ok(sw, k, 1)  # k >= 2 ports
        can_multicast = _capability_ok(sw, 1, 2)
        wanted = {"allreduce": [("nvls", can_reduce and can_multicast), ("sharp", sw.reduce_multicast),
                                ("reduce_then_p2p", can_reduce), ("p2p", True)],
                  "allgather": [("multicast", can_multicast), ("unicast", True), ("p2p", True)],
                  "reduce_scatter": [("reduce", can_reduce), ("sharp", sw.reduce_multicast), ("p2p", True)]}[kind]
        return [name for name, ok in wanted if ok for _ in range(1 if name == "p2p" else 3)]  # mostly the switch

    def gather_into_ports(self, t: int, chunk: int) -> None:
        """Every non-port rank reduces its contribution into a random port (step t)."""
        for q in self.others:
            self.at(t)[0].append(Send(chunk, q, self.rng.choice(self.ports), "reduce"))

    def spread_from_ports(self, t: int, chunk: int, skip=()) -> None:
        """Every non-port rank (but ``skip``) copies the chunk from a random port (step t)."""
        for q in self.others:
            if q not in skip:
                self.at(t)[0].append(Send(chunk, self.rng.choice(self.ports), q))

    def allreduce(self, chunk: int, t: int, mode: str) -> None:
        n, rng = self.topo.ranks, self.rng
        if mode == "p2p":
            head = rng.randrange(n)
            for r in range(n):
                if r != head:
                    self.at(t)[0].append(Send(chunk, r, head, "reduce"))
            t += self.gap()
            for r in range(n):
                if r != head:
                    self.at(t)[0].append(Send(chunk, head, r))
            return
        if self.others:
            self.gather_into_ports(t, chunk)
            t += self.gap()
        head = rng.choice(self.ports)
        if mode == "sharp":
            self.entry(t, chunk, self.ports, self.ports)
        elif mode == "nvls":
            self.entry(t, chunk, self.ports, [head])
            t += self.gap()
            include = rng.random() < 0.5
            self.entry(t, chunk, [head], [p for p in self.ports if include or p != head])
        else:  # reduce_then_p2p
            self.entry(t, chunk, self.ports, [head])
            t += self.gap()
            for r in range(n):
                if r != head:
                    self.at(t)[0].append(Send(chunk, head, r))
            return
        if self.others:
            self.spread_from_ports(t + self.gap(), chunk)

    def allgather(self, chunk: int, t: int, mode: str) -> None:
        owner = next(iter(self.coll.pre[chunk]))
        if mode == "p2p":
            for r in range(self.topo.ranks):
                if r != owner:
                    self.at(t)[0].append(Send(chunk, owner, r))
            return
        source = owner
        if owner not in self.ports:
            source = self.rng.choice(self.ports)
            self.at(t)[0].append(Send(chunk, owner, source))
            t += self.gap()
        rest = [p for p in self.ports if p != source]
        if mode == "multicast":
            include = self.rng.random() < 0.5
            self.entry(t, chunk, [source], rest + ([source] if include else []))
        else:  # unicast: one 1->1 entry per port
            for p in rest:
                self.entry(t, chunk, [source], [p])
        if self.others:
            self.spread_from_ports(t + self.gap(), chunk, skip=(owner,))

    def reduce_scatter(self, chunk: int, t: int, mode: str) -> None:
        owner = next(iter(self.coll.post[chunk]))
        if mode == "p2p":
            for r in range(self.topo.ranks):
                if r != owner:
                    self.at(t)[0].append(Send(chunk, r, owner, "reduce"))
            return
        if self.others:
            self.gather_into_ports(t, chunk)
            t += self.gap()
        dst = owner if owner in self.ports else self.rng.choice(self.ports)
        if mode == "sharp":
            rest = [p for p in self.ports if p != dst]
            extra = [p for p in rest if self.rng.random() < 0.5] or rest
            self.entry(t, chunk, self.ports, [dst, *extra])
        else:
            self.entry(t, chunk, self.ports, [dst])
        if dst != owner:
            self.at(t + self.gap())[0].append(Send(chunk, dst, owner))

    def steps(self) -> list[tuple[list, list]]:
        return [self.timeline[t] for t in sorted(self.timeline) if any(self.timeline[t])]


SWITCH_COLLECTIVES = ("allreduce", "allgather", "reduce_scatter")


@st.composite
def switch_boxes(draw, min_ranks: int = 3, max_ranks: int = 5) -> Topology:
    """A fully linked box with one switch over every rank or over a subset of at least two, random
    capabilities, capacities 1 or 2, groups or none (some ports sharing none)."""
    n = draw(st.integers(min_ranks, max_ranks))
    if draw(st.booleans()):
        ports = tuple(range(n))
    else:
        ports = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=2, max_size=n - 1))))
    flags = draw(st.tuples(st.booleans(), st.booleans(), st.booleans()))
    groups = draw(st.booleans())
    topo = box(n, ports, reduce=flags[0], multicast=flags[1], reduce_multicast=flags[2], groups=groups,
               switch_bw=draw(st.sampled_from([LINK_BW, 2 * LINK_BW])),
               group_bw=draw(st.sampled_from([LINK_BW, 2 * LINK_BW])),
               capacity=draw(st.sampled_from([None, None, 1, 3])),
               alpha=draw(st.sampled_from([0.0, 0.7, 2.0])))
    if groups and draw(st.booleans()):  # some ports share no group
        sw = topo.switches[0]
        keep = draw(st.lists(st.booleans(), min_size=len(ports), max_size=len(ports)))
        sw = replace(sw, out_groups=tuple(g if k else None for g, k in zip(sw.out_groups, keep)),
                     in_groups=tuple(g if not k else None for g, k in zip(sw.in_groups, keep)))
        topo = replace(topo, switches=(sw,))
    return topo


@st.composite
def switch_schedules(draw, kinds=SWITCH_COLLECTIVES) -> Schedule:
    """A random valid schedule through the switch (mixed with point-to-point sends): per chunk a
    random way (reduce to a random head then multicast with or without it, reduce-multicast,
    one-to-one entries, plain sends), a random start step, random gaps between its phases."""
    topo = draw(switch_boxes())
    kind = draw(st.sampled_from(kinds))
    coll = getattr(colls, kind)(topo.ranks, draw(st.integers(1, 2)))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    plan = _Plan(topo, coll, rng)
    for chunk in range(coll.chunks):
        getattr(plan, kind)(chunk, rng.randint(0, 2), rng.choice(plan.modes(kind)))
    raw = plan.steps()
    extra = draw(st.lists(st.integers(0, 1), min_size=len(raw), max_size=len(raw)))
    return Schedule(topo, coll, make_steps(topo, raw, extra), {"synthesizer": "test"})


# ---------------------------------------------------------------- mutations
SWITCH_MUTATIONS = ("drop_entry", "drop_src", "drop_dst", "rename_switch", "change_chunk", "earlier",
                    "shrink_rounds", "squeeze", "add_src", "add_dst", "drop_send", "pre_reduce",
                    "strip_capability", "drop_port", "duplicate_entry")


def _entry_mutation(kind: str, entry: SwitchSend, schedule: Schedule, rng: random.Random):
    """The mutated entry (None: drop it; the entry itself: no change possible)."""
    ports = schedule.topology.switches[0].ranks if schedule.topology.switches else range(schedule.topology.ranks)
    if kind == "drop_entry":
        return None
    if kind in ("drop_src", "drop_dst"):
        field = "srcs" if kind == "drop_src" else "dsts"
        ranks = list(getattr(entry, field))
        del ranks[rng.randrange(len(ranks))]
        return replace(entry, **{field: tuple(ranks)})
    if kind == "rename_switch":
        return replace(entry, switch=entry.switch + "-ghost")
    if kind == "change_chunk":
        others = [c for c in range(schedule.collective.chunks) if c != entry.chunk]
        return replace(entry, chunk=rng.choice(others)) if others else entry
    if kind in ("add_src", "add_dst"):
        field = "srcs" if kind == "add_src" else "dsts"
        free = [r for r in ports if r not in getattr(entry, field)]
        return replace(entry, **{field: (*getattr(entry, field), rng.choice(free))}) if free else entry
    return entry


def _topology_mutation(kind: str, schedule: Schedule, rng: random.Random) -> Schedule:
    """``strip_capability``: the switch loses one capability it has; ``drop_port``: one rank
    stops being a port of it (and its port groups go)."""
    sw = schedule.topology.switches[0]
    if kind == "strip_capability":
        have = [name for name in ("reduce", "multicast", "reduce_multicast") if getattr(sw, name)]
        if not have:
            return schedule
        sw = replace(sw, **{rng.choice(have): False})
    else:
        if len(sw.ranks) < 2:
            return schedule
        drop = rng.randrange(len(sw.ranks))

        def pick(values):
            return None if values is None else tuple(v for i, v in enumerate(values) if i != drop)

        sw = replace(sw, ranks=pick(sw.ranks), out_groups=pick(sw.out_groups), in_groups=pick(sw.in_groups))
    switches = (sw, *schedule.topology.switches[1:])
    return replace(schedule, topology=replace(schedule.topology, switches=switches))


def _step_mutation(kind: str, sends: list, rounds: list, entries: list, topo: Topology, rng: random.Random) -> bool:
    """Mutate the step lists in place; False when the mutation does not apply."""
    if kind == "shrink_rounds":
        rounds[rng.randrange(len(rounds))] -= 1
    elif kind == "squeeze":  # a step one round short of what its loads need
        tight = [i for i in range(len(rounds)) if fewest_rounds(topo, sends[i], entries[i]) > 1]
        if not tight:
            return False
        i = rng.choice(tight)
        rounds[i] = fewest_rounds(topo, sends[i], entries[i]) - 1
    elif kind == "drop_send":
        placed = [(i, j) for i, row in enumerate(sends) for j in range(len(row))]
        if not placed:
            return False
        i, j = rng.choice(placed)
        del sends[i][j]
    elif kind == "pre_reduce":  # a src of a reducing entry first adds another src's part: counted twice
        reducing = [(i, e) for i, row in enumerate(entries) for e in row if len(e.srcs) > 1]
        if not reducing:
            return False
        i, e = rng.choice(reducing)
        a, b = rng.sample(list(e.srcs), 2)
        sends.insert(i, [Send(e.chunk, a, b, "reduce")])
        rounds.insert(i, 1)
        entries.insert(i, [])
    else:
        return False
    return True


def mutate_switches(schedule: Schedule, kind: str, rng: random.Random) -> Schedule:
    """One mutation of ``kind`` (SWITCH_MUTATIONS); the result may or may not still be valid
    (the same schedule when the mutation does not apply)."""
    if kind in ("strip_capability", "drop_port"):
        return _topology_mutation(kind, schedule, rng)
    sends = [list(step.sends) for step in schedule.steps]
    entries = [list(step.switches) for step in schedule.steps]
    rounds = [step.rounds for step in schedule.steps]
    where = [(i, j) for i, row in enumerate(entries) for j in range(len(row))]
    if kind in ("shrink_rounds", "squeeze", "drop_send", "pre_reduce"):
        if not _step_mutation(kind, sends, rounds, entries, schedule.topology, rng):
            return schedule
    elif not where:
        return schedule
    elif kind == "earlier":
        i, j = rng.choice(where)
        if i == 0:
            return schedule
        entries[i - 1].append(entries[i].pop(j))
    elif kind == "duplicate_entry":  # the same value written twice to each of its dsts
        i, j = rng.choice(where)
        entries[i].append(entries[i][j])
    else:
        i, j = rng.choice(where)
        changed = _entry_mutation(kind, entries[i][j], schedule, rng)
        if changed is None:
            del entries[i][j]
        else:
            entries[i][j] = changed
    steps = tuple(Step(tuple(s), r, tuple(e)) for s, r, e in zip(sends, rounds, entries))
    return Schedule(schedule.topology, schedule.collective, steps, schedule.meta)
