"""Schedule: steps of sends over a topology for a collective; SolveResult for solvers.

The semantics (DESIGN.md): all sends of a step read the state at the step's start and land at
its end; ``copy`` overwrites the destination's copy, ``reduce`` adds the sender's partial.

>>> s = Send(chunk=0, src=0, dst=1)
>>> Step(sends=(s,), rounds=1).sends[0].op
'copy'
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import Any, Mapping, Sequence

from synth.core.collective import Collective
from synth.core.errors import InfeasibleError, InputError, ScheduleFormatError, SolverError, UnknownResultError
from synth.core.topology import Topology

SCHEDULE_FORMAT = "synth.schedule"
SCHEDULE_VERSION = 1  # written when no step has a switch entry and the topology has no switch
SCHEDULE_SWITCH_VERSION = 2  # switch entries (DESIGN.md, "In-network reduction and multicast")
SCHEDULE_VERSIONS = (SCHEDULE_VERSION, SCHEDULE_SWITCH_VERSION)
OPS = ("copy", "reduce")
SWITCH_OP = "switch"


@dataclass(frozen=True, order=True)
class Send:
    """Move chunk ``chunk`` from ``src`` to ``dst``; ``op`` is ``copy`` or ``reduce``."""

    chunk: int
    src: int
    dst: int
    op: str = "copy"


SEND_ORDER = attrgetter("chunk", "src", "dst", "op")
"""A sort key equal to Send's own order, compared in C (the generated comparisons are slow)."""


@dataclass(frozen=True, order=True)
class SwitchSend:
    """A switch operation: chunk ``chunk`` read from every rank in ``srcs`` and, summed when
    there are several, written over every rank in ``dsts`` through switch ``switch``
    (DESIGN.md: one src and several dsts is a multicast, several srcs and one dst a reduce,
    several of both a reduce-multicast)."""

    chunk: int
    switch: str
    srcs: tuple[int, ...]
    dsts: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "srcs", tuple(self.srcs))
        object.__setattr__(self, "dsts", tuple(self.dsts))

    op = SWITCH_OP


@dataclass(frozen=True)
class Step:
    """Sends that run concurrently; ``rounds`` (k-synchronous budget) may be None; ``switches``
    are the step's switch operations (written in ``sends`` with ``"op": "switch"``)."""

    sends: tuple[Send, ...]
    rounds: int | None = 1
    switches: tuple[SwitchSend, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "sends", tuple(self.sends))
        object.__setattr__(self, "switches", tuple(self.switches))


@dataclass(frozen=True)
class Schedule:
    """A complete algorithm: the topology, the collective, the steps, and free-form meta."""

    topology: Topology
    collective: Collective
    steps: tuple[Step, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))

    @property
    def total_rounds(self) -> int | None:
        if any(step.rounds is None for step in self.steps):
            return None
        return sum(step.rounds for step in self.steps)  # type: ignore[misc]

    @property
    def send_count(self) -> int:
        return sum(len(step.sends) for step in self.steps)

    @property
    def switch_count(self) -> int:
        """How many switch operations the steps hold."""
        return sum(len(step.switches) for step in self.steps)

    @property
    def traffic_text(self) -> str:
        """``N sends`` and, when there are any, ``, M switch entries``."""
        entries = self.switch_count
        return f"{self.send_count} sends" + (f", {entries} switch entries" if entries else "")

    @property
    def version(self) -> int:
        """The synth.schedule version its document needs (2 with switches anywhere)."""
        uses_switches = self.switch_count or self.topology.switches
        return SCHEDULE_SWITCH_VERSION if uses_switches else SCHEDULE_VERSION

    def with_meta(self, **extra: Any) -> "Schedule":
        return Schedule(self.topology, self.collective, self.steps, {**self.meta, **extra})

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": SCHEDULE_FORMAT,
            "version": self.version,
            "topology": self.topology.to_dict(),
            "collective": self.collective.to_dict(),
            "steps": [_step_dict(step) for step in self.steps],
        }
        if self.meta:
            doc["meta"] = dict(self.meta)
        return doc

    @classmethod
    def from_dict(cls, doc: Any, where: str = "schedule") -> "Schedule":
        """Parse a synth.schedule v1 or v2 document (no verification; see synth.verify.load_schedule)."""
        if not isinstance(doc, dict):
            raise ScheduleFormatError(f"{where}: expected a JSON object")
        if doc.get("format") != SCHEDULE_FORMAT:
            raise ScheduleFormatError(
                f"{where}: 'format' must be {SCHEDULE_FORMAT!r}, got {doc.get('format')!r}"
            )
        version = doc.get("version")
        if type(version) is not int or version not in SCHEDULE_VERSIONS:
            raise ScheduleFormatError(
                f"{where}: unsupported {SCHEDULE_FORMAT} version {doc.get('version')!r} "
                f"(this synth reads versions {SCHEDULE_VERSION} and {SCHEDULE_SWITCH_VERSION})"
            )
        for key in ("topology", "collective", "steps"):
            if key not in doc:
                raise ScheduleFormatError(f"{where}: missing field {key!r}")
        topology = Topology.from_dict(doc["topology"], where=f"{where}: topology")
        collective = Collective.from_dict(doc["collective"], where=f"{where}: collective")
        if not isinstance(doc["steps"], list):
            raise ScheduleFormatError(f"{where}: 'steps' must be a list")
        steps = tuple(_parse_step(item, index, where, version) for index, item in enumerate(doc["steps"]))
        meta = doc.get("meta", {})
        if not isinstance(meta, dict):
            raise ScheduleFormatError(f"{where}: 'meta' must be an object")
        return cls(topology, collective, steps, meta)


def _step_dict(step: Step) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if step.rounds is not None:
        out["rounds"] = step.rounds
    out["sends"] = [
        {"chunk": s.chunk, "src": s.src, "dst": s.dst, "op": s.op} for s in step.sends
    ] + [
        {"op": SWITCH_OP, "switch": s.switch, "chunk": s.chunk, "srcs": list(s.srcs), "dsts": list(s.dsts)}
        for s in step.switches
    ]
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _all_ints(values) -> bool:
    """Whether every value is an integer and none a bool (``_is_int``), for lists of millions:
    their types are collected in C first, and only a list with other types is walked."""
    return set(map(type, values)) <= {int} or all(map(_is_int, values))


def _parse_step(item: Any, index: int, where: str, version: int = SCHEDULE_VERSION) -> Step:
    if not isinstance(item, dict) or not isinstance(item.get("sends"), list):
        raise ScheduleFormatError(f"{where}: step {index} must be an object with a 'sends' list")
    rounds = item.get("rounds")
    if rounds is not None and not _is_int(rounds):
        raise ScheduleFormatError(f"{where}: step {index}: 'rounds' must be an integer")
    sends, switches = [], []
    for send in item["sends"]:
        if not isinstance(send, dict):
            raise ScheduleFormatError(f"{where}: step {index}: every send must be an object")
        if send.get("op") == SWITCH_OP:
            if version < SCHEDULE_SWITCH_VERSION:
                raise ScheduleFormatError(f"{where}: step {index}: a switch entry needs {SCHEDULE_FORMAT} "
                                          f"version {SCHEDULE_SWITCH_VERSION}, the file says version {version}")
            switches.append(_parse_switch_send(send, f"{where}: step {index}"))
            continue
        for key in ("chunk", "src", "dst"):
            if not _is_int(send.get(key)):
                raise ScheduleFormatError(
                    f"{where}: step {index}: send field {key!r} must be an integer, got {send.get(key)!r}"
                )
        op = send.get("op", "copy")
        if op not in OPS:
            raise ScheduleFormatError(f"{where}: step {index}: op must be 'copy', 'reduce' or "
                                      f"'switch', got {op!r}")
        sends.append(Send(send["chunk"], send["src"], send["dst"], op))
    return Step(tuple(sends), rounds, tuple(switches))


def _parse_switch_send(entry: dict, where: str) -> SwitchSend:
    """One ``{"op": "switch", ...}`` entry: the fields' types and the rules a single entry can
    break on its own (empty or repeated srcs/dsts); the rest is the verifier's."""
    name = entry.get("switch")
    if not isinstance(name, str):
        raise ScheduleFormatError(f"{where}: switch entry field 'switch' must be a switch name, got {name!r}")
    if not _is_int(entry.get("chunk")):
        raise ScheduleFormatError(f"{where}: switch entry field 'chunk' must be an integer, got {entry.get('chunk')!r}")
    ranks = {}
    for key in ("srcs", "dsts"):
        value = entry.get(key)
        if not isinstance(value, list) or not value or not _all_ints(value):
            raise ScheduleFormatError(f"{where}: switch entry field {key!r} must be a non-empty list of "
                                      f"ranks, got {value!r}")
        if len(set(value)) != len(value):
            raise ScheduleFormatError(f"{where}: switch entry field {key!r} names a rank twice: {value!r}")
        ranks[key] = tuple(value)
    return SwitchSend(entry["chunk"], name, ranks["srcs"], ranks["dsts"])


class Status(enum.StrEnum):
    """How a solve ended, for every backend and stage (one vocabulary; what else a backend wants
    to say, such as "one machine: nothing to route", is a detail beside it). Only INFEASIBLE
    proves anything negative; TIMEOUT and SKIPPED prove nothing."""

    SOLVED = "solved"  # an answer: optimal, or what the backend promises (a heuristic's schedule)
    INFEASIBLE = "infeasible"  # proven: no answer exists (within the question asked)
    TIMEOUT = "timeout"  # stopped at a time or work limit; maybe an incumbent, nothing proven
    SKIPPED = "skipped"  # not attempted (too big for the solver, or the search's budget spent)
    ERROR = "error"  # the solver failed, or said something that cannot be trusted


@dataclass(frozen=True)
class SolveResult:
    """A solver's answer: status, schedule when SOLVED (or a flagged TIMEOUT incumbent), the
    backend that gave it, and what else the backend reports (``details``: figures such as the
    time at the size it optimised for, or "one machine: nothing to route")."""

    status: Status
    schedule: Schedule | None = None
    seconds: float = 0.0
    message: str = ""
    backend: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def schedule_or_raise(self, what: str) -> Schedule:
        """The schedule, or the error that says why there is none: InfeasibleError (proven),
        UnknownResultError (a timeout: nothing proven), SolverError (the solver failed)."""
        if self.schedule is not None:
            return self.schedule
        if self.status == Status.INFEASIBLE:
            raise InfeasibleError(f"{what}{': ' + self.message if self.message else ''} (proven)")
        if self.status == Status.TIMEOUT:
            raise UnknownResultError(f"the solver timed out on {what} after {self.seconds:.1f} s; "
                                     "nothing was proven (raise --time-limit)")
        raise SolverError(f"the solver failed on {what}: {self.message}")


def refuse_switches(schedule: "Schedule", stage: str) -> None:
    """InputError (one line) when ``schedule`` has switch entries that ``stage`` cannot carry:
    how a stage without switch support says so instead of dropping them."""
    if schedule.switch_count:
        names = sorted({entry.switch for step in schedule.steps for entry in step.switches})
        raise InputError(f"{stage} does not take switch entries; this schedule has "
                         f"{schedule.switch_count} (switch {', '.join(names)})")


def port_loads(step: Step, topology: Topology) -> tuple[Counter, Counter]:
    """(chunks per (switch, rank, 'out'|'in') port, chunks per group name) that the step's switch
    entries put on ports of known switches: one chunk on the out-port of every src and the
    in-port of every dst, and on the groups those ports share."""
    ports: Counter = Counter()
    groups: Counter = Counter()
    by_switch: dict[str, list[SwitchSend]] = {}
    for entry in step.switches:
        by_switch.setdefault(entry.switch, []).append(entry)
    for name, entries in by_switch.items():  # ranks counted in C (millions of them at scale), then named
        switch = topology.switch(name)
        if switch is None:
            continue
        for direction, field_name, group_of in (("out", "srcs", switch.out_group), ("in", "dsts", switch.in_group)):
            counts = Counter(chain.from_iterable(getattr(entry, field_name) for entry in entries))
            for rank, count in counts.items():
                if rank in switch.port_index:
                    ports[(switch.name, rank, direction)] += count
                    if (group := group_of(rank)) is not None:
                        groups[group] += count
    return ports, groups


def peer_sets(schedule: "Schedule") -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    """(rank -> the ranks it sends to, rank -> the ranks it receives from) over every send of
    ``schedule`` (switch entries are no peers)."""
    out: dict[int, set[int]] = {}
    into: dict[int, set[int]] = {}
    for step in schedule.steps:
        for send in step.sends:
            out.setdefault(send.src, set()).add(send.dst)
            into.setdefault(send.dst, set()).add(send.src)
    return out, into


def rounds_needed(topology: Topology, sends: Sequence[Send], switches: Sequence[SwitchSend] = ()) -> int | None:
    """Fewest rounds for which the sends and switch entries fit every link, port and group
    capacity (None: no rounds)."""
    if not topology.rounds_apply:
        return None
    per_link = Counter((s.src, s.dst) for s in sends)
    need = 1
    for key, count in per_link.items():
        capacity = topology.link_capacity(topology.link(*key))
        need = max(need, -(-count // capacity))
    ports, per_group = port_loads(Step((), None, tuple(switches)), topology)
    for (name, _, _), count in ports.items():
        need = max(need, -(-count // topology.switch_capacity(topology.switch(name))))
    for key, count in per_link.items():
        for group in topology.groups_of_link.get(key, ()):
            per_group[group.name] += count
    for group in topology.groups:
        count = per_group.get(group.name, 0)
        if count:
            need = max(need, -(-count // topology.group_capacity(group)))
    return need
