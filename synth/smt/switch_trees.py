"""Switch entries in the direct allreduce encoding (``synth.smt.direct_allreduce``).

Beside the point-to-point trees, for a switch w and ports a != b of it:
  fold[c][w][a][b][s]   a adds its partial of c into b through w's reduce entry into b in step s
                        (w needs ``reduce``; s < S); it is one of a's ups (every non-root sends
                        its partial exactly once) with the rules of a point-to-point up;
  into[c][w][b][s]      w's reduce entry into b runs (some fold into b: fold -> into);
  spread[c][w][a][b][s] a copies the finished sum of c to b through w (s > 1); one of b's copies,
                        with the rules of a point-to-point copy; several dsts need ``multicast``;
  out[c][w][a][s]       a puts its sum into w (some spread of it: spread -> out).
The reduce entry's srcs are its folds' ranks and b itself: what lands at b replaces its copy,
so b keeps its own partial only as a src (every rank contributes to an allreduce, and b's
partial has not left yet: the up rules). So the entry loads b's out-port and in-port and every
folding rank's out-port, and nothing else writes (b, c) in that step: no point-to-point up into
b, no other switch's entry into b. A copy entry loads a's out-port and every dst's in-port.
``reduce_multicast`` is not used (its flags ``reduce`` and ``multicast`` are).
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.core.schedule import SwitchSend
from synth.smt.cardinality import neg
from synth.smt.switch_sends import IN, OUT


@dataclass(frozen=True)
class TreeSwitchVars:
    """The switch literals of a direct allreduce encoding (see the module) and ``port_loads``:
    the literals each (switch, rank, 'out' | 'in', step) port counts."""

    fold: dict
    spread: dict
    port_loads: dict


def encode(inst, tables) -> TreeSwitchVars:
    """The switch literals and rules of a ``DirectAllreduceInstance`` being built: ``tables`` is
    (ups_from, cps_into, sent, done) of its point-to-point trees, which the switch ups and
    copies join (see the module)."""
    ups_from, cps_into, sent, done = tables
    fold, spread = _literals(inst)
    cl = inst._clause
    for (c, w, a, b, s), x in fold.items():
        ups_from.setdefault((c, a, s), []).append(x)
        cl(-x, neg(sent[(c, b, s)]))
        cl(-x, neg(done[(c, b, s - 1)]))
    for (c, w, a, b, s), x in spread.items():
        cps_into.setdefault((c, b, s), []).append(x)
        cl(-x, done[(c, a, s - 1)])
        cl(-x, neg(done[(c, b, s - 1)]))
        cl(-x, sent[(c, b, s - 1)])
        cl(-x, done[(c, b, s)])
    loads: dict = {}
    _reduce_entries(inst, fold, loads)
    _copy_entries(inst, spread, loads)
    return TreeSwitchVars(fold, spread, loads)


def _literals(inst) -> tuple[dict, dict]:
    """(fold, spread): a literal for every switch up (w with ``reduce``, steps 1..S-1) and every
    switch copy (steps 2..S) between two ports."""
    fold, spread = {}, {}
    for switch in inst.topology.switches:
        pairs = [(a, b) for a in switch.ranks for b in switch.ranks if a != b]
        for c in range(inst.collective.chunks):
            for a, b in pairs:
                key = (c, switch.name, a, b)
                if switch.reduce:
                    fold.update({(*key, s): inst._var() for s in range(1, inst.steps)})
                spread.update({(*key, s): inst._var() for s in range(2, inst.steps + 1)})
    return fold, spread


def _reduce_entries(inst, fold: dict, loads: dict) -> None:
    """into[c][w][b][s] from its folds, its loads, and the rule that nothing else writes (b, c)
    in that step."""
    by_entry: dict = {}
    for (c, w, a, b, s), x in fold.items():
        by_entry.setdefault((c, w, b, s), []).append(x)
        loads.setdefault((w, a, OUT, s), []).append(x)
    ups_into: dict = {}
    for (c, a, b, s), x in inst.up.items():
        ups_into.setdefault((c, b, s), []).append(x)
    entries_into: dict = {}
    for (c, w, b, s), xs in by_entry.items():
        into = inst._var()
        for x in xs:
            inst._clause(-x, into)
        for x in ups_into.get((c, b, s), []):
            inst._clause(-into, -x)
        for other in entries_into.get((c, b, s), []):
            inst._clause(-into, -other)
        entries_into.setdefault((c, b, s), []).append(into)
        loads.setdefault((w, b, OUT, s), []).append(into)
        loads.setdefault((w, b, IN, s), []).append(into)


def _copy_entries(inst, spread: dict, loads: dict) -> None:
    """out[c][w][a][s] from its spreads, the loads, and one dst at most without ``multicast``."""
    by_entry: dict = {}
    for (c, w, a, b, s), x in spread.items():
        by_entry.setdefault((c, w, a, s), []).append(x)
        loads.setdefault((w, b, IN, s), []).append(x)
    for (c, w, a, s), xs in by_entry.items():
        out = inst._var()
        for x in xs:
            inst._clause(-x, out)
        if not inst.topology.switch(w).multicast:
            inst._at_most(xs, 1)
        loads.setdefault((w, a, OUT, s), []).append(out)


def decode(value, switch_vars: TreeSwitchVars, step: int, written: set) -> list[SwitchSend]:
    """The step's entries in a model (``value(lit)``: its truth): a reduce entry per (chunk,
    switch, dst) with its folding ranks and the dst as srcs, and a copy entry per (chunk,
    switch, src) with every dst whose (rank, chunk) nothing in ``written`` (the step's copies
    so far, updated here) has written."""
    folded: dict = {}
    for (c, w, a, b, s), x in sorted(switch_vars.fold.items()):
        if s == step and value(x):
            folded.setdefault((c, w, b), {b}).add(a)
    copied: dict = {}
    for (c, w, a, b, s), x in sorted(switch_vars.spread.items()):
        if s == step and value(x) and (b, c) not in written:
            written.add((b, c))
            copied.setdefault((c, w, a), []).append(b)
    return ([SwitchSend(c, w, tuple(sorted(srcs)), (b,)) for (c, w, b), srcs in sorted(folded.items())]
            + [SwitchSend(c, w, (a,), tuple(dsts)) for (c, w, a), dsts in sorted(copied.items())])
