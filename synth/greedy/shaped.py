"""The shape of an allreduce pipeline through one switch domain, chosen by a small LP.

n ranks, each a port of a switch with reduce and multicast, every two joined by a link; every
rank heads a 1/n share of each piece of the buffer. In step t a share of the buffer may be
reduced to its heads through the switch (``switch_reduce``: every port sends it, a head receives
1/n of it) or point to point (``p2p_reduce``: (n-1)/n out and in per rank), and a share reduced
in an earlier step may be spread from its heads by multicast (``multicast``: 1/n out, (n-1)/n
in) or point to point (``p2p_spread``: (n-1)/n out and in). A step lasts as long as its busiest
resource: a port (switch traffic at the port's rate), a rank's group (all its traffic at the
group's rate) or a link ((p2p_reduce + p2p_spread)/n at the link's rate). The LP picks the shares
that minimise the sum of the steps for a given step count; per-step latencies are the same for
every shape of that count and are left to the caller.

With one rate everywhere the optimum is the geometric pipeline: step 0 reduces point to point,
then each piece is (n-2)/(n-1) of the one before, which balances every step, and the sum
approaches the exchange bound (docs/bounds.md) as the steps grow. Where the switch's ports run
slower than the groups (NVLS's efficiency under a runtime's terms) the LP mixes point-to-point
reduction into every step instead.

>>> shape = pipeline_shape(8, 12, Rates(450.0, 450.0, 450.0))
>>> round(sum(s.switch_reduce + s.p2p_reduce for s in shape.steps), 6), round(shape.time * 450.0, 4)
(1.0, 1.1312)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synth.bounds.lp import LpRows, solve_lp_solution
from synth.core.errors import SynthesisBug

_KINDS = 4  # switch_reduce, p2p_reduce, multicast, p2p_spread; then the step's time


@dataclass(frozen=True)
class Rates:
    """GB/s per direction: a switch port, a rank's group (its links and its port together), a link."""

    port: float
    group: float
    link: float


@dataclass(frozen=True)
class StepShare:
    """Shares of the buffer one step moves each way (see the module)."""

    switch_reduce: float
    p2p_reduce: float
    multicast: float
    p2p_spread: float


@dataclass(frozen=True)
class PipelineShape:
    """The LP's steps and their summed time (buffer / (GB/s): multiply by bytes for us x 1e-3)."""

    steps: tuple[StepShare, ...]
    time: float


def pipeline_shape(ranks: int, steps: int, rates: Rates) -> PipelineShape:
    """The fastest shares for ``steps`` steps (SynthesisBug if the LP has no optimum: it always
    has one for steps >= 2)."""
    n, width = ranks, _KINDS + 1
    cost = np.zeros(steps * width)
    cost[_KINDS::width] = 1.0
    rows = LpRows()
    for t in range(steps):
        _step_rows(rows, t, n, width, rates)
        _order_row(rows, t, width)
    every = [t * width + k for t in range(steps) for k in (2, 3)]
    rows.add(np.zeros(len(every), dtype=int), every, np.ones(len(every)), [1.0], [1.0])
    found = solve_lp_solution(cost, np.full(steps * width, np.inf), rows.arrays()[:3], *rows.arrays()[3:])
    if found is None:
        raise SynthesisBug(f"the pipeline LP of {steps} steps on {n} ranks has no optimum")
    value, x = found
    shares = tuple(StepShare(*(max(0.0, float(v)) for v in x[t * width:t * width + _KINDS])) for t in range(steps))
    return PipelineShape(shares, value)


def _step_rows(rows: LpRows, t: int, n: int, width: int, rates: Rates) -> None:
    """load / rate <= the step's time, for the port, the group and a link, each way."""
    inner, head = (n - 1) / n, 1 / n
    loads = [  # (coefficients of switch_reduce, p2p_reduce, multicast, p2p_spread), rate
        ((1.0, 0.0, head, 0.0), rates.port), ((head, 0.0, inner, 0.0), rates.port),
        ((1.0, inner, head, inner), rates.group), ((head, inner, inner, inner), rates.group),
        ((0.0, head, 0.0, head), rates.link),
    ]
    base = t * width
    for i, (coefficients, rate) in enumerate(loads):
        cols = [base + k for k in range(_KINDS)] + [base + _KINDS]
        vals = [c / rate for c in coefficients] + [-1.0]
        rows.add(np.zeros(len(cols), dtype=int), cols, vals, [-np.inf], [0.0])


def _order_row(rows: LpRows, t: int, width: int) -> None:
    """What is spread by step t was reduced before it: sum_{s<=t} spread - sum_{s<t} reduced <= 0."""
    cols = [s * width + k for s in range(t + 1) for k in (2, 3)] + [s * width + k for s in range(t) for k in (0, 1)]
    vals = [1.0] * (2 * (t + 1)) + [-1.0] * (2 * t)
    rows.add(np.zeros(len(cols), dtype=int), cols, vals, [-np.inf], [0.0])


def slot_plan(shape: PipelineShape, slots: int) -> list[tuple[int, str, int, str]]:
    """(reduce step, "switch" | "p2p", spread step, "switch" | "p2p") for each of ``slots`` slots
    (a slot: one chunk per head), the shares rounded to whole slots on their running sums; a slot
    is spread in order of reduction and never in its own step or before (then one step later)."""
    reduced = _rounded([(t, "switch", s.switch_reduce) for t, s in enumerate(shape.steps)]
                       + [(t, "p2p", s.p2p_reduce) for t, s in enumerate(shape.steps)], slots)
    spread = _rounded([(t, "switch", s.multicast) for t, s in enumerate(shape.steps)]
                      + [(t, "p2p", s.p2p_spread) for t, s in enumerate(shape.steps)], slots)
    return [(r_step, r_mode, max(s_step, r_step + 1), s_mode)
            for (r_step, r_mode), (s_step, s_mode) in zip(reduced, spread)]


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
