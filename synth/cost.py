"""The cost model of DESIGN.md (the contract), an event-driven simulator, bus bandwidth, sizes.

Units: sizes in bytes, bandwidth in GB/s (1e9 bytes/s), times in microseconds, so a chunk of
b bytes spends b / (bw * 1e3) us on a link.

- ``step_time_us``: for S bytes, b = S / buffer_chunks; a step lasts
  max(max over links used of alpha_l + n_l*b/bw_l, max over groups used of n_g*b/bw_g);
  the schedule lasts the sum over steps (an empty step costs nothing).
- ``simulate_us``: sends run as soon as their data and resources allow, ignoring step
  barriers. Sends are taken in schedule order. A send may start once the sender's copy (or,
  combining, its partial) as of the step's start is complete. Every link and every group is
  a FIFO server: the send occupies its link for b/bw_l and each of its groups for b/bw_g,
  queueing at each from that moment independently (a group is a shared server at the group
  bandwidth), and lands alpha_l after the link served it, or when the last group did if
  later. A rank's chunk is ready when the last write of that step lands (a reduce also waits
  for the rank's own partial). The makespan is the last arrival.
  By induction over steps, every resource is free and every value ready by the step model's
  end of the previous step, so each send of a step lands within that step's step-model
  duration: the simulator is never above ``step_time_us``, and equals it for a chain of
  dependent single-send steps.

>>> from synth.core.collectives import allgather
>>> from synth.core.schedule import Send, Step
>>> from synth.core.topology import Link, Topology
>>> pair = Topology("pair", 2, (Link(0, 1, 25.0, 0.7), Link(1, 0, 25.0, 0.7)))
>>> s = Schedule(pair, allgather(2), (Step((Send(0, 0, 1), Send(1, 1, 0))),))
>>> round(step_time_us(s, parse_size("1M")), 4)  # 0.7 + 524288 B / 25 GB/s
21.6715
"""

from __future__ import annotations

import math
import re
from collections import Counter
from fractions import Fraction
from typing import Any, Iterable

from synth.core.errors import InputError
from synth.core.schedule import Schedule

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


# ---------------------------------------------------------------------------- step model
def step_times_us(schedule: Schedule, size_bytes: float) -> list[float]:
    """The duration of every step under the contract cost model."""
    topo = schedule.topology
    b = size_bytes / schedule.collective.buffer_chunks
    times = []
    for index, step in enumerate(schedule.steps):
        per_link = Counter((s.src, s.dst) for s in step.sends)
        per_group: Counter = Counter()
        longest = 0.0
        for key, count in per_link.items():
            link = _link(schedule, index, key)
            longest = max(longest, link.alpha + count * b / (link.bandwidth * 1e3))
            for group in topo.groups_of_link.get(key, ()):
                per_group[group.name] += count
        for group in topo.groups:
            if per_group[group.name]:
                longest = max(longest, per_group[group.name] * b / (group.bandwidth * 1e3))
        times.append(longest)
    return times


def step_time_us(schedule: Schedule, size_bytes: float) -> float:
    """The schedule's time in the contract cost model (sum of step durations)."""
    return sum(step_times_us(schedule, size_bytes))


# ---------------------------------------------------------------------------- simulator
def simulate_us(schedule: Schedule, size_bytes: float) -> float:
    """Makespan of the event-driven simulation (see the module docstring); <= step_time_us."""
    topo, coll = schedule.topology, schedule.collective
    b = size_bytes / coll.buffer_chunks
    ready: dict[tuple[int, int], float] = {(r, c): 0.0 for c, pre in enumerate(coll.pre) for r in pre}
    link_free: dict[tuple[int, int], float] = {}
    group_free: dict[str, float] = {}
    makespan = 0.0
    for index, step in enumerate(schedule.steps):
        landed: dict[tuple[int, int], list[tuple[float, str]]] = {}
        for send in step.sends:
            key = (send.src, send.dst)
            link = _link(schedule, index, key)
            start = ready.get((send.src, send.chunk))
            if start is None:
                raise InputError(
                    f"simulate: step {index}: rank {send.src} sends chunk {send.chunk}, which it "
                    "does not hold (verify the schedule first)"
                )
            served = max(start, link_free.get(key, 0.0)) + b / (link.bandwidth * 1e3)
            link_free[key] = served
            arrival = served + link.alpha
            for group in topo.groups_of_link.get(key, ()):
                done = max(start, group_free.get(group.name, 0.0)) + b / (group.bandwidth * 1e3)
                group_free[group.name] = done
                arrival = max(arrival, done)
            landed.setdefault((send.dst, send.chunk), []).append((arrival, send.op))
            makespan = max(makespan, arrival)
        for place, writes in landed.items():
            last = max(t for t, _ in writes)
            before = ready.get(place)
            if before is None:
                ready[place] = last
            elif all(op == "reduce" for _, op in writes):
                ready[place] = max(before, last)  # adds into the rank's own partial
            elif not coll.combining:
                ready[place] = min(before, last)  # the same data was already there
            else:
                ready[place] = last
    return makespan


def _link(schedule: Schedule, index: int, key: tuple[int, int]):
    link = schedule.topology.link(*key)
    if link is None:
        raise InputError(f"cost: step {index}: {key[0]}->{key[1]} is not a link of {schedule.topology.name}")
    return link


# ---------------------------------------------------------------------------- bandwidth
def algbw_gbps(size_bytes: float, time_us: float) -> float:
    """nccl-tests algorithm bandwidth S / t in GB/s (inf for t = 0)."""
    return math.inf if time_us <= 0 else size_bytes / (time_us * 1e3)


def busbw_gbps(size_bytes: float, time_us: float, factor: Any) -> float:
    """algbw x the nccl-tests factor; ``factor`` is a number or anything with ``busbw_factor``."""
    scale = getattr(factor, "busbw_factor", factor)
    return algbw_gbps(size_bytes, time_us) * float(scale)


def cost_rows(schedule: Schedule, sizes: Iterable[int], bounds: Any = None) -> list[dict[str, Any]]:
    """One row per size: step-model and simulated times, algbw/busbw, fraction of the bound.

    ``bounds`` is a ``synth.bounds.lower_bounds.Bounds`` (anything with ``time_us(size)``) or None.
    """
    rows = []
    for size in sizes:
        step = step_time_us(schedule, size)
        row: dict[str, Any] = {
            "size": size,
            "step_time_us": step,
            "sim_time_us": simulate_us(schedule, size),
            "algbw_gbps": algbw_gbps(size, step),
            "busbw_gbps": busbw_gbps(size, step, schedule.collective),
            "bound_time_us": None,
            "bound_fraction": None,
        }
        if bounds is not None:
            limit = bounds.time_us(size)
            row["bound_time_us"] = limit
            row["bound_fraction"] = limit / step if step > 0 else None
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------- sizes
def parse_size(text: str) -> int:
    """Bytes from ``4096``, ``1K``, ``1.5M``, ``2G``, ``1T`` (powers of 1024, as nccl-tests).

    >>> parse_size("1M"), parse_size("1.5k"), parse_size("64")
    (1048576, 1536, 64)
    """
    match = _SIZE.match(str(text))
    if not match:
        raise InputError(f"bad size {text!r}: use bytes or a number with K, M, G or T (powers of 1024)")
    value = Fraction(match.group(1)) * _UNITS[match.group(2).upper()]
    if value.denominator != 1:
        raise InputError(f"bad size {text!r}: not a whole number of bytes")
    if value < 1:
        raise InputError(f"bad size {text!r}: must be at least 1 byte")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    """A comma-separated list of sizes, in the order given.

    >>> parse_sizes("1K,1M,1G")
    [1024, 1048576, 1073741824]
    """
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise InputError(f"bad size list {text!r}: give sizes separated by commas, e.g. 1K,1M,1G")
    return [parse_size(p) for p in parts]


def format_size(size: int) -> str:
    """The shortest exact form with a 1024-power suffix (``parse_size`` reads it back).

    >>> format_size(1048576), format_size(1536), format_size(1000)
    ('1M', '1.5K', '1000')
    """
    for suffix in ("T", "G", "M", "K"):
        unit = _UNITS[suffix]
        if size >= unit:
            value = Fraction(size, unit)
            if (value * 1000).denominator == 1:
                text = f"{float(value):.3f}".rstrip("0").rstrip(".")
                return f"{text}{suffix}"
    return str(size)
