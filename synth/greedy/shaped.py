"""The shape of an allreduce pipeline through one switch domain, chosen by a small LP.

n ranks, each a port of a switch with reduce and multicast, every two joined by a link; every
rank heads a 1/n share of each piece of the buffer. In step t a share of the buffer may be
reduced to its heads through the switch (``switch_reduce``: every port sends it, a head receives
1/n of it) or point to point (``p2p_reduce``: (n-1)/n out and in per rank), and a share reduced
in an earlier step may be spread from its heads by multicast (``multicast``: 1/n out, (n-1)/n
in) or point to point (``p2p_spread``: (n-1)/n out and in). A step lasts as long as its busiest
resource: a port (switch traffic at the port's rate), a rank's group (all its traffic at the
group's rate) or a link ((p2p_reduce + p2p_spread)/n at the link's rate), a port and a link
with their alpha added. The LP picks the shares that minimise the sum of the steps for a given
step count and size.

With one rate everywhere the optimum is the geometric pipeline: step 0 reduces point to point,
then each piece is (n-2)/(n-1) of the one before, which balances every step, and the sum
approaches the exchange bound (docs/bounds.md) as the steps grow. Where the switch's ports run
slower than the groups (NVLS's efficiency under a runtime's terms) the LP mixes point-to-point
reduction into every step instead.

>>> shape = pipeline_shape(8, 12, Rates(450.0, 450.0, 450.0), 450e3)  # 1 us per buffer at 450 GB/s
>>> round(sum(s.switch_reduce + s.p2p_reduce for s in shape.steps), 6), round(shape.time_us, 4)
(1.0, 1.1312)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synth.bounds.lp import LpRows, solve_lp_solution
from synth.core.errors import SynthesisBug

# columns per step: switch_reduce, p2p_reduce to be multicast, p2p_reduce to be spread point to
# point, multicast, p2p_spread; then the step's time
_KINDS = 5
SWITCH_REDUCE, P2P_THEN_MULTICAST, P2P_THEN_P2P, MULTICAST, P2P_SPREAD = range(_KINDS)


@dataclass(frozen=True)
class Rates:
    """GB/s per direction: a switch port, a rank's group (its links and its port together), a
    link; the alphas (us) a step pays on a port and on a link (groups have none)."""

    port: float
    group: float
    link: float
    port_alpha: float = 0.0
    link_alpha: float = 0.0


@dataclass(frozen=True)
class StepShare:
    """Shares of the buffer one step moves each way (see the module); ``p2p_then_p2p`` is the part
    of ``p2p_reduce`` a later step spreads point to point (the rest, and all the switch summed,
    goes back out by multicast)."""

    switch_reduce: float
    p2p_reduce: float
    multicast: float
    p2p_spread: float
    p2p_then_p2p: float = 0.0


@dataclass(frozen=True)
class PipelineShape:
    """The LP's steps and the sum of their times in us."""

    steps: tuple[StepShare, ...]
    time_us: float


def pipeline_shape(ranks: int, steps: int, rates: Rates, size_bytes: float) -> PipelineShape:
    """The fastest shares for ``steps`` steps at ``size_bytes`` (SynthesisBug if the LP has no
    optimum: it always has one for steps >= 2). Every step pays the alpha of the resources it
    uses, so the shape may hide it under a busier group."""
    n, width = ranks, _KINDS + 1
    cost = np.zeros(steps * width)
    cost[_KINDS::width] = 1.0
    rows = LpRows()
    for t in range(steps):
        _step_rows(rows, t, n, width, rates, size_bytes / 1e3)
        _order_rows(rows, t, width)
    every = [t * width + k for t in range(steps) for k in (MULTICAST, P2P_SPREAD)]
    rows.add(np.zeros(len(every), dtype=int), every, np.ones(len(every)), [1.0], [1.0])
    found = solve_lp_solution(cost, np.full(steps * width, np.inf), rows.arrays()[:3], *rows.arrays()[3:])
    if found is None:
        raise SynthesisBug(f"the pipeline LP of {steps} steps on {n} ranks has no optimum")
    value, x = found
    return PipelineShape(tuple(_share(x[t * width:t * width + _KINDS]) for t in range(steps)), value)


def _share(column) -> StepShare:
    v = [max(0.0, float(c)) for c in column]
    return StepShare(v[SWITCH_REDUCE], v[P2P_THEN_MULTICAST] + v[P2P_THEN_P2P], v[MULTICAST], v[P2P_SPREAD],
                     v[P2P_THEN_P2P])


def _step_rows(rows: LpRows, t: int, n: int, width: int, rates: Rates, kilobytes: float) -> None:
    """alpha + load x size / rate <= the step's time (us), for the port and a link each way, and
    load x size / rate for the group (no alpha). Every step uses a port or a link, and the alphas
    are charged whether it does or not: exact where the port's and the links' alphas are equal."""
    inner, head = (n - 1) / n, 1 / n
    loads = [  # coefficients of (switch_reduce, p2p_reduce x 2, multicast, p2p_spread), rate, alpha
        ((1.0, 0.0, 0.0, head, 0.0), rates.port, rates.port_alpha),
        ((head, 0.0, 0.0, inner, 0.0), rates.port, rates.port_alpha),
        ((1.0, inner, inner, head, inner), rates.group, 0.0),
        ((head, inner, inner, inner, inner), rates.group, 0.0),
        ((0.0, head, head, 0.0, head), rates.link, rates.link_alpha),
    ]
    base = t * width
    for coefficients, rate, alpha in loads:
        cols = [base + k for k in range(_KINDS)] + [base + _KINDS]
        vals = [c * kilobytes / rate for c in coefficients] + [-1.0]
        rows.add(np.zeros(len(cols), dtype=int), cols, vals, [-np.inf], [-alpha])


def _order_rows(rows: LpRows, t: int, width: int) -> None:
    """Every spread by step t was reduced before it, in its own stream: what is spread point to
    point was reduced point to point for that, and the multicasts carry the rest (whatever the
    switch summed goes back out by multicast, which a runtime fuses with the reduction into one
    reduce-multicast, MSCCL++'s ``glres``)."""
    for spread, reduced in ((P2P_SPREAD, (P2P_THEN_P2P,)), (MULTICAST, (SWITCH_REDUCE, P2P_THEN_MULTICAST))):
        cols = [s * width + spread for s in range(t + 1)] + [s * width + k for s in range(t) for k in reduced]
        vals = [1.0] * (t + 1) + [-1.0] * (len(reduced) * t)
        rows.add(np.zeros(len(cols), dtype=int), cols, vals, [-np.inf], [0.0])


def slot_plan(shape: PipelineShape, slots: int) -> list[tuple[int, str, int, str]]:
    """(reduce step, "switch" | "p2p", spread step, "switch" | "p2p") for each of ``slots`` slots
    (a slot: one chunk per head), the shares rounded to whole slots on their running sums. Two
    streams, each in order: the slots reduced point to point for a point-to-point spread, and the
    rest, multicast. A slot is never spread in its own step or before (then one step later)."""
    steps = list(enumerate(shape.steps))
    reduced = _rounded([(t, "switch", s.switch_reduce) for t, s in steps]
                       + [(t, "p2p", s.p2p_reduce - s.p2p_then_p2p) for t, s in steps]
                       + [(t, "p2p then p2p", s.p2p_then_p2p) for t, s in steps], slots)
    spread = _rounded([(t, "switch", s.multicast) for t, s in steps] + [(t, "p2p", s.p2p_spread) for t, s in steps],
                      slots)
    streams = {"p2p": [i for i, (_, how) in enumerate(reduced) if how == "p2p then p2p"]}
    streams["switch"] = [i for i, (_, how) in enumerate(reduced) if how != "p2p then p2p"]
    times = {how: [t for t, mode in spread if mode == how] for how in streams}
    plan: list[tuple[int, str, int, str]] = [None] * slots  # type: ignore[list-item]
    for how in streams:
        _pair(plan, reduced, streams[how], times[how], how)
    return plan


def _pair(plan: list, reduced, slots_in_order: list[int], spread_steps: list[int], how: str) -> None:
    """Spread ``slots_in_order`` at ``spread_steps`` in order; where rounding leaves the counts
    apart, the missing steps repeat the last one (multicast) or the leftover slots multicast."""
    for k, slot in enumerate(slots_in_order):
        step = spread_steps[k] if k < len(spread_steps) else (spread_steps[-1] if spread_steps else 0)
        mode = how if k < len(spread_steps) else "switch"
        plan[slot] = (reduced[slot][0], reduced[slot][1].split()[0], max(step, reduced[slot][0] + 1), mode)


def _rounded(shares: list[tuple[int, str, float]], slots: int) -> list[tuple[int, str]]:
    """(step, mode) per slot, in step order: each share's slots the rounding of its running sum."""
    ordered = sorted(shares, key=lambda item: (item[0], item[1] != "p2p"))
    total = sum(share for _, _, share in ordered)
    out: list[tuple[int, str]] = []
    running = 0.0
    for step, mode, share in ordered:
        running += share
        upto = round(slots * running / total)
        out += [(step, mode)] * (upto - len(out))
    return out + [out[-1]] * (slots - len(out))
