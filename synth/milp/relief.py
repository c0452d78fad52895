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
    length (ports alike by symmetry are relieved one after the other)."""
    current, score = step, _score(topo, step, b)
    while True:
        trial = _one_move(topo, current, score[2])
        if trial is None:
            break
        trial_score = _score(topo, trial, b)
        if trial_score[:2] >= score[:2]:
            break
        current, score = trial, trial_score
    if current is step:
        return step
    needed = rounds_needed(topo, current.sends, current.switches)
    rounds = None if step.rounds is None or needed is None else max(step.rounds, needed)
    return Step(tuple(sorted(current.sends)), rounds, current.switches)


def _score(topo, step: Step, b: float) -> tuple[float, int, tuple]:
    """(the step's duration, rounded to float noise; how many resources take that long; the
    first such switch port, else the first such resource)."""
    times = [(alpha + count * b / (bandwidth * 1e3), key) for key, count, alpha, bandwidth in step_terms(topo, step)]
    longest = max((t for t, _ in times), default=0.0)
    slowest = [key for t, key in times if t >= longest - _TOL * max(1.0, longest)]
    ports = [key for key in slowest if key[0] == "port"]
    return round(longest, 6), len(slowest), (ports or slowest or [("none",)])[0]


def _one_move(topo, step: Step, slowest: tuple) -> Step | None:
    """The step with one delivery moved off the slowest port ``slowest`` onto a link; None
    where the slowest resource is no switch port or no delivery through it can move."""
    if slowest[0] != "port":
        return None
    _, name, rank, direction = slowest
    entries = list(step.switches)
    for i, entry in enumerate(entries):
        if entry.switch != name or len(entry.srcs) != 1:
            continue
        src = entry.srcs[0]
        if direction == "in" and rank in entry.dsts and rank != src and topo.has_link(src, rank):
            rest = tuple(d for d in entry.dsts if d != rank)
            kept = [SwitchSend(entry.chunk, name, (src,), rest)] if rest else []
            return _with(step, entries[:i] + kept + entries[i + 1:], Send(entry.chunk, src, rank))
        if direction == "out" and src == rank and len(entry.dsts) == 1 and entry.dsts[0] != src \
                and topo.has_link(src, entry.dsts[0]):
            return _with(step, entries[:i] + entries[i + 1:], Send(entry.chunk, src, entry.dsts[0]))
    return None


def _with(step: Step, entries: list[SwitchSend], send: Send) -> Step:
    return Step(step.sends + (send,), step.rounds, tuple(entries))


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
