"""Switch multicast as hyperedges in the ordering stage: one step's max-weight packing.

Where a machine has a switch that multicasts (NVSwitch NVLS), a chunk may leave a rank through
the switch and reach any set of its other ports in one entry (DESIGN.md, "In-network reduction
and multicast"): the entry costs one chunk on the src's out-port and one on each reached dst's
in-port, and the same on the groups those ports share with the rank's NVLinks. The ordering's
step LP then has three kinds of columns:

- a link send (link, chunk), as before: its link, its groups, one write at its dst, and one
  first entry into a machine for a crossing;
- a switch delivery (switch, src, dst, chunk): one write at dst, dst's in-port and in-group;
- an entry (switch, src, chunk), the hyperedge itself: src's out-port and out-group. A
  delivery needs its entry (delivery <= entry), so a chunk reaching k ports costs its src one
  out-port chunk, not k.

Only switches whose ports lie in one machine are used: the NIC links carry what crosses
machines (the routing stage plans them) and the hyperedges deliver inside each machine.

``echo``: in a part solved as the dual of a combining collective, an entry also lands on its
own src (src in dsts: one more in-port chunk). Run backwards, entry srcs {s} -> dsts D becomes
a reduce D + {s} -> {s}: the switch replaces what lands at s, so s's own partial must be among
the srcs, and the echo is what pays for that port in advance. In such a part a rank never
multicasts a chunk and sends it point to point in the same step (backwards, the two would
write its copy twice).

>>> from synth.core.library import resolve_topology
>>> Hyperedges.of(resolve_topology("h100")).switches[0].name
'nvswitch'
>>> Hyperedges.of(resolve_topology("ring:4")) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synth.bounds.lp import solve_lp_solution
from synth.core.collective import Collective
from synth.core.errors import InputError
from synth.core.schedule import Schedule, Send, Step, SwitchSend
from synth.core.topology import Switch, Topology

SWITCH_BONUS = 0.05  # a delivery through the switch is worth a little more than the same by link
ENTRY_COST = 1e-3  # an entry opened for nothing costs this much (no empty hyperedges)
ORIGIN_BONUS = 0.02  # ... and a little more from the chunk's origin than from a relay
SOURCES = 2  # holders of a chunk tried as the src of its entry through one switch, per step
_ONE = 1 - 1e-6


@dataclass(frozen=True, eq=False)
class Hyperedges:
    """The multicast switches of a topology the ordering may use (ports all in one machine),
    their capacity per port and round, and ``echo`` (see the module)."""

    topology: Topology
    switches: tuple[Switch, ...]
    capacity: tuple[int, ...]
    echo: bool = False

    @classmethod
    def of(cls, topology: Topology, echo: bool = False) -> "Hyperedges | None":
        """The hyperedges of ``topology``; None where no switch multicasts within one machine."""
        machine = topology.machine_of
        usable = tuple(s for s in topology.switches
                       if s.multicast and len(s.ranks) > 1 and len({machine[r] for r in s.ranks}) == 1)
        if not usable:
            return None
        return cls(topology, usable, tuple(topology.switch_capacity(s) for s in usable), echo)

    @property
    def through(self) -> str:
        """``through SWITCH, ...`` (two at most named) for progress lines."""
        names = [s.name for s in self.switches]
        return f"through {', '.join(names)}" if len(names) <= 2 else f"through {len(names)} switches"

    def machines(self) -> frozenset[int]:
        """The machines one of the switches joins every rank of."""
        machines = self.topology.machines or (tuple(range(self.topology.ranks)),)
        return frozenset(i for i, m in enumerate(machines) if any(set(m) <= set(s.ranks) for s in self.switches))

    def covers_machines(self) -> bool:
        """Every machine's ranks are all ports of one of the switches (so the switches alone
        can move any chunk inside any machine)."""
        return len(self.machines()) == max(1, self.topology.machine_count)

    def link_groups(self) -> dict[tuple[int, int], tuple[str, ...]]:
        """link key -> the switch-port groups (out_groups / in_groups) it belongs to."""
        named = {g for s in self.switches for g in (*(s.out_groups or ()), *(s.in_groups or ())) if g}
        out: dict[tuple[int, int], tuple[str, ...]] = {}
        for group in self.topology.groups:
            if group.name in named:
                for key in group.links:
                    out[key] = out.get(key, ()) + (group.name,)
        return out


@dataclass(frozen=True)
class LinkColumns:
    """The step's link candidates as the ordering sees them: link index, chunk, weight, and the
    rows each loads (keys; ``upper`` gives every key's bound)."""

    links: np.ndarray
    chunks: np.ndarray
    weight: np.ndarray
    rows: tuple[tuple, ...]
    upper: dict


@dataclass(frozen=True)
class Deliveries:
    """Switch deliveries the step may make: switch index, src, dst, chunk, weight per column."""

    switch: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    chunk: np.ndarray
    weight: np.ndarray


def switch_deliveries(hyper: Hyperedges, sendable: np.ndarray, origin: np.ndarray, need: np.ndarray,
                      weight_of) -> Deliveries:
    """Every (switch, src, dst, chunk) where src may send the chunk (``sendable``), dst needs it,
    both are ports, with at most SOURCES srcs per (switch, chunk): the chunk's ``origin`` first
    (a relay through the switch makes the next step wait on this one), then the holders next
    after the chunk in rank order, so different chunks leave from different ports.
    ``weight_of(dst, chunk)``: the ordering's weight of delivering there, plus SWITCH_BONUS
    (and ORIGIN_BONUS from the origin)."""
    cols: list[tuple[int, int, int, int]] = []
    ranks = sendable.shape[0]
    for k, switch in enumerate(hyper.switches):
        ports = np.array(switch.ranks, dtype=np.int64)
        wanting = need[ports]
        for c in np.nonzero(wanting.any(axis=0) & sendable[ports].any(axis=0))[0].tolist():
            holders = ports[sendable[ports, c]]
            order = np.lexsort(((holders - c) % ranks, holders != origin[c]))
            needers = ports[wanting[:, c]].tolist()
            for src in holders[order[:SOURCES]].tolist():
                cols.extend((k, src, d, c) for d in needers)
    if not cols:
        empty = np.zeros(0, dtype=np.int64)
        return Deliveries(empty, empty, empty, empty, np.zeros(0))
    arr = np.array(cols, dtype=np.int64)
    weight = weight_of(arr[:, 2], arr[:, 3]) + SWITCH_BONUS + ORIGIN_BONUS * (arr[:, 1] == origin[arr[:, 3]])
    return Deliveries(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], weight)


class _Packing:
    """Columns with weights, each loading some rows (a key, its bound) and possibly needing an
    opener column taken with it (a delivery its entry)."""

    def __init__(self, upper: dict):
        self.upper = dict(upper)
        self.weight: list[float] = []
        self.rows: list[tuple] = []
        self.opener: list[int] = []

    def add(self, weight: float, rows: tuple, opener: int = -1) -> int:
        self.weight.append(weight)
        self.rows.append(rows)
        self.opener.append(opener)
        return len(self.weight) - 1

    def solve(self, solver: str) -> np.ndarray:
        """Which columns to take: the LP's whole columns, then what rounding left room for,
        best first; every row within its bound, every taken column's opener taken."""
        keys = {key: i for i, key in enumerate(self.upper)}
        r, c = [], []
        for j, rows in enumerate(self.rows):
            r += [keys[k] for k in rows]
            c += [j] * len(rows)
        n, base = len(self.weight), len(keys)
        ties = [j for j in range(n) if self.opener[j] >= 0]
        r += list(range(base, base + len(ties))) * 2
        c += ties + [self.opener[j] for j in ties]
        v = np.concatenate([np.ones(len(r) - 2 * len(ties)), np.ones(len(ties)), -np.ones(len(ties))])
        upper = np.concatenate([np.array(list(self.upper.values()), dtype=float), np.zeros(len(ties))])
        found = solve_lp_solution(-np.array(self.weight), np.ones(n), (np.array(r), np.array(c), v),
                                  np.full(len(upper), -np.inf), upper, solver=solver, method="simplex")
        x = np.zeros(n) if found is None else found[1]
        return self._rounded(x)

    def _rounded(self, x: np.ndarray) -> np.ndarray:
        """Whole columns: those the LP took whole, then the rest by (LP value, weight)."""
        take = np.zeros(len(x), dtype=bool)
        left = dict(self.upper)
        weight = np.array(self.weight)
        order = np.lexsort((np.arange(len(x)), -weight, -np.round(x, 6), -(x > _ONE).astype(int))).tolist()
        for j in order:
            if take[j] or self.weight[j] <= 0:
                continue
            group = [j] if self.opener[j] < 0 or take[self.opener[j]] else [j, self.opener[j]]
            load = [k for g in group for k in self.rows[g]]
            if all(left[k] >= load.count(k) for k in set(load)):
                for k in load:
                    left[k] -= 1
                take[group] = True
        return take


def choose_step(hyper: Hyperedges, columns: LinkColumns, deliveries: Deliveries, link_src: np.ndarray,
                link_dst: np.ndarray, chunks: int, solver: str) -> tuple[list[Send], list[SwitchSend]]:
    """The step's link sends and switch entries: the max-weight packing of both kinds of
    columns (module docstring), entries listing the dsts their deliveries reach."""
    packing = _Packing(columns.upper)
    for j in range(len(columns.links)):
        packing.add(float(columns.weight[j]), columns.rows[j])
    entries: dict[tuple[int, int, int], int] = {}
    delivery_of: dict[int, tuple[int, int, int, int]] = {}  # packing column -> (switch, src, dst, chunk)
    for k, s, d, c, w in zip(deliveries.switch.tolist(), deliveries.src.tolist(), deliveries.dst.tolist(),
                             deliveries.chunk.tolist(), deliveries.weight.tolist()):
        if (k, s, c) not in entries:
            entries[(k, s, c)] = packing.add(-ENTRY_COST, _entry_rows(hyper, k, s, packing.upper))
        column = packing.add(w, _delivery_rows(hyper, k, d, d * chunks + c, packing.upper), entries[(k, s, c)])
        delivery_of[column] = (k, s, d, c)
    take = packing.solve(solver)
    link_take = take[:len(columns.links)]
    sends = [Send(int(c), int(link_src[l]), int(link_dst[l]))
             for l, c in zip(columns.links[link_take], columns.chunks[link_take])]
    reached: dict[tuple[int, int, int], list[int]] = {}
    for column, (k, s, d, c) in delivery_of.items():
        if take[column]:
            reached.setdefault((k, s, c), []).append(d)
    return _entries(hyper, sends, reached)


def _entries(hyper: Hyperedges, sends: list[Send], reached: dict) -> tuple[list[Send], list[SwitchSend]]:
    """SwitchSends from the deliveries taken; with ``echo``, one entry per (src, chunk) and no
    point-to-point send of a chunk its src multicasts in the step (module docstring)."""
    out: list[SwitchSend] = []
    seen: set[tuple[int, int]] = set()
    for (k, s, c), dsts in sorted(reached.items(), key=lambda item: (-len(item[1]), item[0])):
        if hyper.echo and (s, c) in seen:
            continue
        seen.add((s, c))
        dsts = sorted(dsts + [s]) if hyper.echo else sorted(dsts)
        out.append(SwitchSend(c, hyper.switches[k].name, (s,), tuple(dsts)))
    if hyper.echo:
        sends = [x for x in sends if (x.src, x.chunk) not in seen]
    return sends, sorted(out)


def _entry_rows(hyper: Hyperedges, k: int, src: int, upper: dict) -> tuple:
    """The rows an entry of switch k from src loads: its out-port and out-group (with echo, also
    its in-port and in-group)."""
    rows = _port_rows(hyper, k, src, "out", upper)
    return rows + _port_rows(hyper, k, src, "in", upper) if hyper.echo else rows


def _delivery_rows(hyper: Hyperedges, k: int, dst: int, write_key: int, upper: dict) -> tuple:
    """The rows a delivery to dst loads: its write, its in-port and in-group."""
    upper.setdefault(("write", write_key), 1)
    return (("write", write_key),) + _port_rows(hyper, k, dst, "in", upper)


def _port_rows(hyper: Hyperedges, k: int, rank: int, direction: str, upper: dict) -> tuple:
    switch = hyper.switches[k]
    port = ("port", k, rank, direction)
    upper.setdefault(port, hyper.capacity[k])
    group = switch.out_group(rank) if direction == "out" else switch.in_group(rank)
    if group is None:
        return (port,)
    key = ("group", group)
    upper.setdefault(key, hyper.topology.group_capacity(hyper.topology.group_map[group]))
    return (port, key)


def dual_with_switches(forward: Schedule, topology: Topology, collective: Collective) -> Schedule:
    """``forward`` (a non-combining schedule on ``topology.reversed()``, planned with ``echo``)
    run backwards as ``collective`` (its combining dual) on ``topology``: every send flipped
    into a reduce, every entry {s} -> D (s among D) into the reduce D -> {s} through the same
    switch (``reduce`` here is the reversed switch's ``multicast``). Valid when the forward
    schedule is a tree: no rank receives a chunk twice or one it starts with (InputError
    otherwise)."""
    received: set[tuple[int, int]] = set()
    for step in forward.steps:
        landed = [(s.dst, s.chunk) for s in step.sends]
        landed += [(d, e.chunk) for e in step.switches for d in e.dsts if d not in e.srcs]
        for rank, chunk in landed:
            if (rank, chunk) in received or rank in forward.collective.pre[chunk]:
                raise InputError(f"dual: rank {rank} receives chunk {chunk} twice or holds it already: "
                                 "the schedule is not a tree, so it cannot run backwards as a reduction")
            received.add((rank, chunk))
    steps = []
    for step in reversed(forward.steps):
        sends = tuple(sorted(Send(s.chunk, s.dst, s.src, "reduce") for s in step.sends))
        entries = tuple(sorted(_reversed_entry(e) for e in step.switches))
        steps.append(Step(sends, step.rounds, entries))
    return Schedule(topology, collective, tuple(steps), dict(forward.meta))


def _reversed_entry(entry: SwitchSend) -> SwitchSend:
    """A multicast {s} -> D with its echo (s in D) run backwards: the reduce D -> {s}."""
    if len(entry.srcs) != 1:
        raise InputError(f"dual: switch entry {entry.switch!r} chunk {entry.chunk} has {len(entry.srcs)} srcs: "
                         "a non-combining schedule's entries are multicasts")
    src = entry.srcs[0]
    if src not in entry.dsts:
        raise InputError(f"dual: switch entry {entry.switch!r} chunk {entry.chunk} from {src} has no echo: "
                         f"run backwards, the switch would replace rank {src}'s own partial")
    return SwitchSend(entry.chunk, entry.switch, tuple(sorted(entry.dsts)), (src,))
