"""The tuner table of one machine: NCCL's fastest setting at every size, as config lines.

For each collective, ``ranges`` walks a grid of sizes from 1 B to ``TOP`` (four points an octave,
plus every size where a protocol's channel count steps: a multiple of its channel bytes), finds
where the fastest setting (algorithm, protocol, channels; ``choice.NcclOptions.fastest``) changes
between grid points by bisection down to the byte, and makes one range per setting: the first
from 0, the last to 2^64 - 1 (past ``TOP`` the setting of ``TOP`` holds). ``table_lines`` writes
them for the communicator the topology is (its machines as nNodes, its ranks as nRanks), each with
its channel count, and a last ring/simple line over every size per collective: NCCL passes over a
line whose combination it does not offer on a machine (LL128 where it judges it unsafe, PAT, or
one ``NCCL_PROTO`` removed) and the call then takes that line instead of falling through to 1
channel.

>>> from synth.core.library import resolve_topology
>>> from synth.measure.calibration import load_calibration
>>> from synth.tuner.choice import NcclOptions
>>> found = ranges(NcclOptions(resolve_topology("dgx1"), "broadcast", load_calibration("default")))
>>> found[0].low, found[-1].high == MAX_BYTES, all(a.high + 1 == b.low for a, b in zip(found, found[1:]))
(0, True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.tuner.choice import NcclOptions, Pick
from synth.tuner.config import MAX_BYTES, MAX_CHANNELS, TunerLine

TOP = 16 << 30  # the largest size the walk samples (16 GiB); its setting holds beyond
POINTS_PER_OCTAVE = 4


@dataclass(frozen=True)
class Range:
    """Sizes ``low..high`` (inclusive) and the fastest setting there (its pick at ``low``)."""

    low: int
    high: int
    pick: Pick


def ranges(options: NcclOptions, top: int = TOP) -> list[Range]:
    """One range per run of sizes with one fastest setting, covering 0..2^64 - 1 (module doc)."""
    memo: dict[int, Pick] = {}

    def pick_at(size: int) -> Pick:
        if size not in memo:
            memo[size] = options.fastest(max(1, size))
        return memo[size]

    grid = _grid(options, top)
    starts = [0]
    for a, b in zip(grid, grid[1:]):
        starts += _changes(a, b, pick_at)
    bounds = starts[1:] + [MAX_BYTES + 1]
    return [Range(low, high - 1, pick_at(low)) for low, high in zip(starts, bounds)]


def _grid(options: NcclOptions, top: int) -> list[int]:
    """Sizes 0, 1 and four per octave up to ``top``, and every size where a channel count steps."""
    sizes = {0, 1, top}
    k = 0
    while (size := round(2 ** (k / POINTS_PER_OCTAVE))) <= top:
        sizes.add(size)
        k += 1
    terms = options.terms
    if terms is not None:
        for protocol, step in terms.channel_bytes.items():
            sizes.update(int(m * step) for m in range(1, terms.max_channels + 1) if m * step <= top)
            sizes.update(int(m * step) - 1 for m in range(1, terms.max_channels + 1) if m * step <= top)
    return sorted(sizes)


def _changes(a: int, b: int, pick_at) -> list[int]:
    """Every size in (a, b] where the setting differs from the size before (found by bisection
    wherever the two ends differ)."""
    if pick_at(a).setting == pick_at(b).setting:
        return []
    if b == a + 1:
        return [b]
    middle = (a + b) // 2
    return _changes(a, middle, pick_at) + _changes(middle, b, pick_at)


def table_lines(options: NcclOptions, found: list[Range], reg_buff: int = -1, start: int = 0) -> list[TunerLine]:
    """The config lines of one collective: one per range, then the ring/simple safety net; each
    for calls whose buffers are registered as ``reg_buff`` says (the tuner's ``regBuff``: 1
    registered, 0 not, -1 either), and none below ``start`` (sizes NCCL never asks its tuner about)."""
    topology = options.topology
    nodes, ranks = max(1, topology.machine_count), topology.ranks
    kept = [r for r in found if r.high >= start]
    lines = [TunerLine(options.collective, max(r.low, start), r.high, r.pick.algorithm, r.pick.protocol,
                       _channels(r.pick), nodes, ranks, reg_buff=reg_buff) for r in kept]
    from synth.tuner.rules import ALWAYS, OFFERED

    if start and all((line.algorithm, line.protocol) in ALWAYS & OFFERED[options.collective] for line in lines):
        return lines  # the ranges already take every size from start with what NCCL always offers
    net = max((_channels(r.pick) for r in kept if r.pick.protocol == "simple"), default=None)
    if net is None:
        net = _channels(options.fastest(TOP)) if options.terms is None else options.terms.max_channels
    lines.append(TunerLine(options.collective, start, MAX_BYTES, "ring", "simple", min(net, MAX_CHANNELS), nodes,
                           ranks, reg_buff=reg_buff))
    return lines


def _channels(pick: Pick) -> int:
    """The channel count a line sets: the pick's, within 1..MAX_CHANNELS."""
    return min(MAX_CHANNELS, max(1, pick.channels or 1))
