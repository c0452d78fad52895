"""Measured against expected, size by size, and what is most likely wrong where they differ.

Each row is classed by measured over expected: ``as expected`` within ``SLOW`` either way,
``slower`` beyond it, ``far slower`` beyond ``FAR`` (an unhealthy machine or setup: such rows
are left out of calibrations and accuracy figures), ``faster`` below 1/SLOW (the model is
pessimistic there). Consecutive rows of one class form a region; each region gets one line with
the most likely cause for where it lies (latency-bound, mid or bandwidth-bound sizes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from synth.cost import format_size
from synth.measure.calibration import Calibration
from synth.measure.fit import UNHEALTHY, Measured
from synth.measure.runtime import Choice, launch_us, nccl_time

SLOW = 1.5
FAR = UNHEALTHY
LATENCY_BOUND = 64 * 1024
BANDWIDTH_BOUND = 64 * 1024 * 1024


@dataclass(frozen=True)
class Alternative:
    """The fastest schedule at one size under the same calibration: its label, protocol and time."""

    label: str
    protocol: str
    time_us: float


@dataclass(frozen=True)
class Row:
    """One size: measured, expected (NCCL's best option in the model) and the lower bound, us;
    and the fastest classic or synthesized schedule there, when any were given."""

    size_bytes: int
    measured_us: float
    expected_us: float
    choice: Choice
    bound_us: float | None
    alternative: Alternative | None = None

    @property
    def ratio(self) -> float:
        """Measured over expected."""
        return self.measured_us / self.expected_us

    @property
    def verdict(self) -> str:
        if self.ratio > FAR:
            return "far slower"
        if self.ratio > SLOW:
            return "slower"
        if self.ratio < 1 / SLOW:
            return "faster"
        return "as expected"


@dataclass(frozen=True)
class Region:
    """Consecutive rows with one verdict, their geo-mean ratio, and the most likely cause."""

    first: int
    last: int
    verdict: str
    ratio: float
    cause: str

    def line(self) -> str:
        span = format_size(self.first) if self.first == self.last else \
            f"{format_size(self.first)} - {format_size(self.last)}"
        if self.verdict == "as expected":
            return f"{span}: as expected (measured / expected {self.ratio:.2f})"
        return f"{span}: {self.verdict} than expected ({self.ratio:.2f}x); {self.cause}"


def rows(run: Measured, cal: Calibration, bound=None, schedules=()) -> list[Row]:
    """Every measured size with its expectation; ``bound(size)`` gives the lower bound (us);
    ``schedules`` are (label, StepLoads) pairs costed under the calibration's terms with the
    run's launch floor."""
    terms = replace(cal.terms(), launch_us=launch_us(run.launch, cal))
    out = []
    for size, took in run.rows:
        choice = nccl_time(run.machine, run.collective, size, cal, run.launch, run.transport)
        out.append(Row(int(size), took, choice.time_us, choice, bound(size) if bound else None,
                       fastest(schedules, size, terms)))
    return out


def fastest(schedules, size: float, terms) -> Alternative | None:
    """The fastest of (label, StepLoads) pairs at ``size`` under ``terms`` (None when there are none)."""
    best = None
    for label, loads in schedules:
        protocol, took = loads.best(size, terms)
        if best is None or took < best.time_us:
            best = Alternative(label, protocol, took)
    return best


def regions(table: list[Row], machines: int = 1) -> list[Region]:
    """Consecutive rows of one verdict, each with its likely cause."""
    found: list[list[Row]] = []
    for row in table:
        if found and found[-1][-1].verdict == row.verdict:
            found[-1].append(row)
        else:
            found.append([row])
    out = []
    for index, group in enumerate(found):
        ratio = math.exp(sum(math.log(r.ratio) for r in group) / len(group))
        verdict = group[0].verdict
        cause = _cause(verdict, group[0].size_bytes, group[-1].size_bytes, machines)
        if verdict != "as expected" and len(group) == 1 and _quiet_neighbours(found, index):
            cause = "a single row among rows as expected: warm-up or noise, rerun to confirm"
        out.append(Region(group[0].size_bytes, group[-1].size_bytes, verdict, ratio, cause))
    return out


def _quiet_neighbours(found: list[list[Row]], index: int) -> bool:
    """Whether the regions beside ``index`` (or the table's ends) are as expected."""
    sides = [found[i] for i in (index - 1, index + 1) if 0 <= i < len(found)]
    return bool(sides) and all(side[0].verdict == "as expected" for side in sides)


def unhealthy(table: list[Row]) -> list[Row]:
    """Rows far slower than the machine should be (left out of calibrations and figures)."""
    return [row for row in table if row.verdict == "far slower"]


def _cause(verdict: str, first: int, last: int, machines: int) -> str:
    if verdict == "faster":
        return ("the model is pessimistic here: recalibrate with this run (synth calibrate), or NCCL ran "
                "an algorithm the model lacks (NVLS, CollNet, RCCL's one-shot allreduce)")
    if verdict == "as expected":
        return ""
    if last < LATENCY_BOUND:
        return ("per-call overhead: the launch mode (one thread driving many GPUs costs more), CPU binding, "
                + ("or the network's latency (transport, GPUDirect RDMA)" if machines > 1 else "or clocks"))
    if first >= BANDWIDTH_BOUND:
        return ("links below their rate: a degraded NVLink/xGMI link, a NIC at a lower speed or on the wrong "
                "PCIe switch, or a topology that is not this machine")
    if machines > 1:
        return ("the network path at mid sizes: a fallback to sockets, GPUDirect RDMA off, NIC/GPU affinity, "
                "or congestion from other jobs (check NCCL_DEBUG=INFO)")
    return "protocol or channel choice at mid sizes (check NCCL_DEBUG=INFO, NCCL_ALGO/NCCL_PROTO settings)"
