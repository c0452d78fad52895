"""Port relief: a switch port pays alpha as a link does, so a step whose slowest resource is a
switch port gets shorter when some of its deliveries take the NVLink beside it instead.

The step model charges a switch port ``alpha + n b / bw`` and the group it shares with the
rank's NVLinks ``n_g b / bw`` (no alpha). Where the ordering put every delivery into a rank
through the switch, that port is the step's slowest resource by its alpha alone. One at a time,
while the step gets shorter: a multicast {s} -> D whose in-port at d in D is the slowest
resource drops d, and the point-to-point send s -> d carries the chunk instead (same chunk,
same step, same value: d's group carries the same load); a multicast with one dst whose
out-port is the slowest becomes the send. Entries with several srcs (reductions) stay: a send
into their dst would write it twice. Rounds are recounted for every step that changes; the
result is verified.

>>> from synth.core.library import resolve_topology
>>> from synth.core.collectives import allgather
>>> from synth.core.schedule import Schedule, Step, SwitchSend
>>> from synth.cost import step_time_us
>>> h100 = resolve_topology("h100")
>>> everyone = [SwitchSend(r, "nvswitch", (r,), tuple(d for d in range(8) if d != r)) for r in range(8)]
>>> one = Schedule(h100, allgather(8), (Step((), 7, tuple(everyone)),))
>>> relieved = relieve_ports(one, 1 << 30)
>>> step_time_us(relieved, 1 << 30) < step_time_us(one, 1 << 30), relieved.send_count > 0
(True, True)
"""

from __future__ import annotations

from synth.core.schedule import Schedule, Send, Step, SwitchSend, rounds_needed
from synth.milp.timing import step_terms
from synth.verify import checked

_TOL = 1e-9


def relieve_ports(schedule: Schedule, size: float) -> Schedule:
    """``schedule`` with deliveries moved from switch ports to links where that shortens a
    step at ``size`` (module docstring); ``schedule`` itself where nothing moves."""
    if not schedule.switch_count:
        return schedule
    b = size / schedule.collective.buffer_chunks
    steps = [_relieved(schedule.topology, step, b) for step in schedule.steps]
    if all(new is old for new, old in zip(steps, schedule.steps)):
        return schedule
    moved = sum(len(new.sends) - len(old.sends) for new, old in zip(steps, schedule.steps))
    relieved = Schedule(schedule.topology, schedule.collective, tuple(steps), schedule.meta)
    return checked(relieved.with_meta(relieved_ports=moved), "port relief")


def _relieved(topo, step: Step, b: float) -> Step:
    """One step relieved, move by move while each shortens it or leaves fewer resources at its
    length (ports alike by symmetry are relieved one after the other). Each move changes a few
    resources' loads (``_Loads``), so a move is scored without recounting the step."""
    loads = _Loads(topo, step, b)
    entries, sends = list(step.switches), list(step.sends)
    score = loads.score(entries)
    while True:
        move = _one_move(topo, entries, score[2])
        if move is None:
            break
        index, kept, send, changes = move
        trial = entries[:index] + kept + entries[index + 1:]
        loads.apply(changes, 1)
        trial_score = loads.score(trial)
        if trial_score[:2] >= score[:2]:
            loads.apply(changes, -1)
            break
        entries, score = trial, trial_score
        sends.append(send)
    if len(sends) == len(step.sends):
        return step
    needed = rounds_needed(topo, sends, entries)
    rounds = None if step.rounds is None or needed is None else max(step.rounds, needed)
    return Step(tuple(sorted(sends)), rounds, tuple(entries))


def _score(topo, step: Step, b: float) -> tuple[float, int, tuple]:
    """(the step's duration, rounded to float noise; how many resources take that long; the
    first such switch port, else one such resource)."""
    return _Loads(topo, step, b).score(list(step.switches))


class _Loads:
    """Every resource a step loads with its time (``step_terms``), kept up to date as deliveries
    move; ``score`` is ``_score`` of the step with the given switch entries."""

    def __init__(self, topo, step: Step, b: float) -> None:
        self.topo, self.b = topo, b
        self.terms: dict[tuple, list] = {}  # key -> [count, alpha, bandwidth]
        self.times: dict[tuple, float] = {}
        for key, count, alpha, bandwidth in step_terms(topo, step):
            self.terms[key] = [count, alpha, bandwidth]
            self.times[key] = alpha + count * b / (bandwidth * 1e3)

    def apply(self, changes, sign: int) -> None:
        """Add ``sign`` x each (key, chunks, alpha, bandwidth) change; a resource left with no
        chunks is no longer loaded."""
        for key, delta, alpha, bandwidth in changes:
            term = self.terms.setdefault(key, [0, alpha, bandwidth])
            term[0] += sign * delta
            if term[0]:
                self.times[key] = term[1] + term[0] * self.b / (term[2] * 1e3)
            else:
                del self.terms[key], self.times[key]

    def score(self, entries: list[SwitchSend]) -> tuple[float, int, tuple]:
        """(the step's duration, rounded to float noise; how many resources take that long; the
        first of them that is a switch port in ``step_terms``' order (by switch, out-ports before
        in-ports, ranks as the entries first name them), else any of them (no move follows))."""
        longest = max(self.times.values(), default=0.0)
        cut = longest - _TOL * max(1.0, longest)
        slowest = [key for key, took in self.times.items() if took >= cut]
        ports = {key for key in slowest if key[0] == "port"}
        return round(longest, 6), len(slowest), (_first_port(entries, ports) if ports else
                                                 (slowest or [("none",)])[0])


def _first_port(entries: list[SwitchSend], ports: set) -> tuple:
    """The first of ``ports`` in ``synth.core.schedule.port_loads``' order."""
    for name in dict.fromkeys(entry.switch for entry in entries):
        for direction, side in (("out", "srcs"), ("in", "dsts")):
            for entry in entries:
                if entry.switch == name:
                    for rank in getattr(entry, side):
                        if ("port", name, rank, direction) in ports:
                            return ("port", name, rank, direction)
    raise AssertionError("a loaded port no entry names")


def _one_move(topo, entries: list[SwitchSend], slowest: tuple):
    """One delivery moved off the slowest port ``slowest`` onto a link: (the entry's index, what
    replaces it, the send, the load changes); None where the slowest resource is no switch port
    or no delivery through it can move."""
    if slowest[0] != "port":
        return None
    _, name, rank, direction = slowest
    for i, entry in enumerate(entries):
        if entry.switch != name or len(entry.srcs) != 1:
            continue
        src = entry.srcs[0]
        if direction == "in" and rank in entry.dsts and rank != src and topo.has_link(src, rank):
            rest = tuple(d for d in entry.dsts if d != rank)
            kept = [SwitchSend(entry.chunk, name, (src,), rest)] if rest else []
            changes = _port_changes(topo, name, rank, "in") + _link_changes(topo, src, rank)
            if not rest:
                changes += _port_changes(topo, name, src, "out")
            return i, kept, Send(entry.chunk, src, rank), changes
        if direction == "out" and src == rank and len(entry.dsts) == 1 and entry.dsts[0] != src \
                and topo.has_link(src, entry.dsts[0]):
            dst = entry.dsts[0]
            changes = (_port_changes(topo, name, src, "out") + _port_changes(topo, name, dst, "in")
                       + _link_changes(topo, src, dst))
            return i, [], Send(entry.chunk, src, dst), changes
    return None


def _port_changes(topo, name: str, rank: int, direction: str) -> list:
    """One chunk off a port of switch ``name`` and off the group it shares (as ``port_loads``)."""
    switch = topo.switch(name)
    if rank not in switch.port_index:
        return []
    out = [(("port", name, rank, direction), -1, switch.alpha, switch.bandwidth)]
    group = switch.out_group(rank) if direction == "out" else switch.in_group(rank)
    if group is not None:
        out.append((("group", group), -1, 0.0, topo.group_map[group].bandwidth))
    return out


def _link_changes(topo, src: int, dst: int) -> list:
    """One chunk onto the link src -> dst and the groups it crosses (as ``step_terms``)."""
    link = topo.link(src, dst)
    out = [(("link", (src, dst)), 1, link.alpha, link.bandwidth)]
    return out + [(("group", g.name), 1, 0.0, g.bandwidth) for g in topo.groups_of_link.get((src, dst), ())]


def multicast_fanouts(schedule: Schedule, size: float, switches) -> Schedule:
    """``schedule`` with every step's fan-outs through ``switches`` (multicast, ports in one
    machine) made multicast entries where the step gets no slower at ``size``: the copies of
    one chunk from one src to two or more ports of the src's switch become one entry (one chunk
    on the src's out-port instead of one per copy; the same on every dst's in-port). Each
    fan-out is tried alone, largest first, and kept when the step's duration does not grow;
    then the ports are relieved. ``schedule`` itself where nothing changes."""
    b = size / schedule.collective.buffer_chunks
    steps = [_fanned(schedule.topology, step, b, switches) for step in schedule.steps]
    if all(new is old for new, old in zip(steps, schedule.steps)):
        return schedule
    fanned = Schedule(schedule.topology, schedule.collective, tuple(steps), schedule.meta)
    return relieve_ports(checked(fanned, "multicast fan-outs"), size)


def _fanned(topo, step: Step, b: float, switches) -> Step:
    """One step's fan-outs made entries, one at a time while the step gets no slower."""
    groups: dict[tuple[str, int, int], list[Send]] = {}
    for send in step.sends:
        for switch in switches:
            ports = switch.port_index
            if send.op == "copy" and send.src in ports and send.dst in ports:
                groups.setdefault((switch.name, send.src, send.chunk), []).append(send)
                break
    current, took = step, _score(topo, step, b)[0]
    for (name, src, chunk), sends in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        if len(sends) < 2:
            continue
        gone = set(sends)
        entry = SwitchSend(chunk, name, (src,), tuple(sorted(s.dst for s in sends)))
        trial = Step(tuple(s for s in current.sends if s not in gone), current.rounds, current.switches + (entry,))
        trial_took = _score(topo, trial, b)[0]
        if trial_took <= took:
            current, took = trial, trial_took
    if current is step:
        return step
    needed = rounds_needed(topo, current.sends, current.switches)
    rounds = None if step.rounds is None or needed is None else max(step.rounds, needed)
    return Step(current.sends, rounds, tuple(sorted(current.switches)))
