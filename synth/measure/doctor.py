"""Measured against expected, size by size, and what is most likely wrong where they differ.

Each row is classed by measured over expected: ``as expected`` within ``SLOW`` either way,
``slower`` beyond it, ``far slower`` beyond ``FAR`` (an unhealthy machine or setup: such rows
are left out of calibrations and accuracy figures), ``faster`` below 1/SLOW (the model is
pessimistic there). A row measured below the lower bound printed beside it (the topology at line
rate, with the least per-call latency any modelled kernel pays in the run's launch mode) is
``below the bound`` whatever its ratio: no schedule run that way on the topology as described can
be that fast, so the machine does something the topology does not say (NVLS, SHARP: a switch that
computes), or, where the contract model's bound still holds, a call costs less than any kernel
the model knows. A row only below the bound at the calibration's rates is not below the bound:
its links beat the calibration, which ``summary`` names (recalibrate). Consecutive rows of one
class form a region; each region gets one line with the most likely cause for where it lies
(latency-bound, mid or bandwidth-bound sizes), and ``summary`` one line for the whole run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from synth.cost import format_size
from synth.measure.calibration import Calibration
from synth.measure.fit import UNHEALTHY, Measured, expected
from synth.measure.runtime import Choice, launch_us

SLOW = 1.5
FAR = UNHEALTHY
CLOSE = 1.15  # the summary's "within" figure
NEAR = 1.3  # and its looser one
LATENCY_BOUND = 64 * 1024
BANDWIDTH_BOUND = 64 * 1024 * 1024
BELOW = "below the bound"
UNDESCRIBED = ("the machine does something this topology does not describe (NVLS? SHARP? a switch that "
               "computes: add it to the topology's switches)")
UNDER_RATED = "the links run faster than the calibration's efficiency says (recalibrate with this run: synth calibrate)"
CHEAPER_CALL = ("a call costs less than any kernel the model knows in this launch mode (a runtime, kernel or "
                "launch the model lacks: name the launch with --launch, the buffers with --buffers)")


@dataclass(frozen=True)
class Alternative:
    """The fastest schedule at one size under the same calibration: its label, protocol and time."""

    label: str
    protocol: str
    time_us: float


@dataclass(frozen=True)
class Row:
    """One size: measured, expected (NCCL's best option in the model) and the lower bound, us;
    the fastest classic or synthesized schedule there, when any were given; and the line-rate
    bound (``ideal_us``) when the printed bound is one under runtime terms."""

    size_bytes: int
    measured_us: float
    expected_us: float
    choice: Choice
    bound_us: float | None
    alternative: Alternative | None = None
    ideal_us: float | None = None
    rated_us: float | None = None  # the bound at the calibration's rates

    @property
    def ratio(self) -> float:
        """Measured over expected."""
        return self.measured_us / self.expected_us

    @property
    def below_bound(self) -> bool:
        """Measured faster than the printed bound allows."""
        return self.bound_us is not None and self.measured_us < self.bound_us

    @property
    def beats_rates(self) -> bool:
        """Faster than the calibration's link rates allow, though not below the bound."""
        return not self.below_bound and self.rated_us is not None and self.measured_us < self.rated_us

    @property
    def below_line_rate(self) -> bool:
        """Measured faster than the line-rate bound (the printed one when there is no other)."""
        limit = self.ideal_us if self.ideal_us is not None else self.bound_us
        return limit is not None and self.measured_us < limit

    @property
    def verdict(self) -> str:
        if self.below_bound:
            return BELOW
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
        if self.verdict == BELOW:
            return f"{span}: {BELOW} (measured / expected {self.ratio:.2f}): {self.cause}"
        return f"{span}: {self.verdict} than expected ({self.ratio:.2f}x); {self.cause}"


def rows(run: Measured, cal: Calibration, bound=None, schedules=(), ideal=None, rated=None) -> list[Row]:
    """Every measured size with its expectation; ``bound(size)`` gives the lower bound printed
    (us), ``ideal(size)`` the contract model's bound, ``rated(size)`` the bound at the
    calibration's rates; ``schedules`` are (label, StepLoads) pairs costed under the calibration's
    terms with the run's launch floor."""
    cal = cal.on(run.machine.arch)
    terms = replace(cal.terms(graph=run.launch.graph), launch_us=launch_us(run.launch, cal))
    out = []
    for size, took in run.rows:
        choice = expected(run, size, cal)
        out.append(Row(int(size), took, choice.time_us, choice, bound(size) if bound else None,
                       fastest(schedules, size, terms), ideal(size) if ideal else None,
                       rated(size) if rated else None))
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
        if verdict == BELOW:
            cause = UNDESCRIBED if any(r.below_line_rate for r in group) else CHEAPER_CALL
        else:
            cause = _cause(verdict, group[0].size_bytes, group[-1].size_bytes, machines)
        if verdict not in ("as expected", BELOW) and len(group) == 1 and _quiet_neighbours(found, index):
            cause = "a single row among rows as expected: warm-up or noise, rerun to confirm"
        out.append(Region(group[0].size_bytes, group[-1].size_bytes, verdict, ratio, cause))
    return out


def summary(table: list[Row]) -> str:
    """One line for the run: rows within ``CLOSE`` and ``NEAR`` of the model, rows below the bound."""
    close = sum(1 for r in table if 1 / CLOSE <= r.ratio <= CLOSE)
    near = sum(1 for r in table if 1 / NEAR <= r.ratio <= NEAR)
    below = [r for r in table if r.below_bound]
    line = f"{close} of {len(table)} rows within {CLOSE}x of the model ({near} within {NEAR}x)"
    rated = [r for r in table if r.beats_rates]
    faster = (f"; {len(rated)} faster than the calibration's link rates allow ({_span(rated)}): {UNDER_RATED}"
              if rated else "")
    if not below:
        return line + "; none below the bound" + faster
    beyond = sum(1 for r in below if r.below_line_rate)
    if beyond:
        return (f"{line}; {len(below)} below the bound ({_span(below)}), {beyond} of them below the line-rate bound: "
                + UNDESCRIBED + faster)
    return f"{line}; {len(below)} below the bound ({_span(below)}): {CHEAPER_CALL}" + faster


def _span(table: list[Row]) -> str:
    first, last = format_size(table[0].size_bytes), format_size(table[-1].size_bytes)
    return first if first == last else f"{first} - {last}"


INVERSION = 1.25  # a size measured this much slower than the next larger one is named


@dataclass(frozen=True)
class Inversion:
    """A measured size that took longer than the next larger one (``smaller`` and ``larger`` rows)."""

    smaller: Row
    larger: Row
    first: bool  # the smaller row is the run's first

    @property
    def ratio(self) -> float:
        return self.smaller.measured_us / self.larger.measured_us

    def line(self) -> str:
        a, b = format_size(self.smaller.size_bytes), format_size(self.larger.size_bytes)
        head = (f"{a} took {self.ratio:.2f}x as long as {b} ({self.smaller.measured_us:.2f} vs "
                f"{self.larger.measured_us:.2f} us): a larger message never needs less time on a healthy path; ")
        if self.first:
            return head + "the run's first size pays its warm-up (more nccl-tests -w iterations)"
        choice = self.smaller.choice
        return head + (f"at {a} NCCL's choice (in the model {choice.algorithm}/{choice.protocol}) suits this "
                       f"machine badly (compare NCCL_PROTO / NCCL_ALGO there, or synth export --format "
                       f"nccl-tuner), or the run is noisy (rerun)")


def inversions(table: list[Row]) -> list[Inversion]:
    """Consecutive sizes (ascending) where the smaller took more than ``INVERSION`` times as long."""
    ordered = sorted((r for r in table if r.measured_us > 0), key=lambda r: r.size_bytes)
    return [Inversion(a, b, i == 0) for i, (a, b) in enumerate(zip(ordered, ordered[1:]))
            if b.size_bytes > a.size_bytes and a.measured_us > INVERSION * b.measured_us]


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
                "an algorithm the model lacks (NVLS or CollNet where the topology has no computing switch, "
                "RCCL's one-shot allreduce)")
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
