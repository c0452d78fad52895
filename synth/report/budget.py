"""Thread blocks per rank: what a schedule takes of the GPU's SMs, and a report under a budget.

A schedule lowered for an MSCCL runtime (``synth.lower``) runs ``blocks`` thread blocks per rank
per instance, and under the runtime terms it runs C instances at a size (C = the channel count
``RuntimeTerms.channels`` gives its protocol there): ``blocks x C`` thread blocks per rank. What
NCCL runs takes one thread block per channel. Under a budget of N thread blocks per rank:

- a schedule takes the fewer blocks of its default lowering and its one-channel lowering; when
  both need more than N, its lowering within N (``synth export --max-threadblocks N``: every
  connection paired, then fewer channels); one that fits in none is left out;
- it runs at most ``N // blocks`` instances, so its links move at most that many channels' worth
  (``capped``); NCCL and its runtime model run at most N channels (``capped_calibration``).

>>> from synth.core.library import resolve_topology
>>> from synth.baselines import registry
>>> ring = registry()["ring"].make(resolve_topology("uring:4"), "allgather")
>>> fewest_blocks(ring), footprint(ring, "baseline", 1)
(1, 1)
"""

from __future__ import annotations

from dataclasses import replace

from synth.core.errors import InputError
from synth.core.schedule import Schedule

BUDGETS = (1, 2, 4, 8, 16, 32)  # the budgets the report's threadblocks.png shows, beside no budget


def fewest_blocks(schedule: Schedule) -> int:
    """A lower bound on an MSCCL lowering's thread blocks per rank (at least 1): a block sends to
    one peer and receives from one, so a rank needs as many as it has peers in either direction,
    and one more for every root of the switch operations it takes part in (``switch_root``)."""
    from synth.core.schedule import peer_sets
    from synth.lower.blocks import switch_root

    out, into = peer_sets(schedule)
    roots: dict[int, set] = {}
    for step in schedule.steps:
        for entry in step.switches:
            root = switch_root(entry.srcs, entry.dsts)
            for rank in {*entry.srcs, *entry.dsts}:
                roots.setdefault(rank, set()).add(root)
    ranks = set(out) | set(into) | set(roots)
    return max((max(len(out.get(r, ())), len(into.get(r, ()))) + len(roots.get(r, ())) for r in ranks),
               default=1) or 1


def footprint(schedule: Schedule, kind: str, budget: int | None = None) -> int | None:
    """Thread blocks per rank per instance: 1 for what NCCL runs (a block per channel), else the
    MSCCL lowering's within ``budget`` (None when it cannot fit)."""
    if kind == "nccl":
        return 1
    if budget is not None and fewest_blocks(schedule) > budget:
        return None
    return _lowered(schedule, budget)


def _lowered(schedule: Schedule, budget: int | None) -> int | None:
    """Thread blocks per rank of the lowering within ``budget`` (None when it cannot fit)."""
    from synth.lower.lowering import LoweringOptions, lower

    try:
        return lower(schedule, LoweringOptions(max_threadblocks=budget)).threadblocks_per_rank
    except InputError:
        return None


LOWERED_WITHIN = 100_000  # transfers above which a schedule is not lowered again within each budget


class Footprints:
    """``footprint`` remembered per schedule: the default lowering and one channel per pair (the
    fewest blocks) first. Under a budget a schedule takes the fewer of the two (more instances
    fit); when both are too many, the lowering within the budget (every connection paired, then
    fewer channels; not for schedules of more than ``LOWERED_WITHIN`` sends and switch entries,
    whose lowering takes minutes); when that fails too it is left out. One that needs more than
    the budget by ``fewest_blocks`` is left out without lowering it."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, object], int | None] = {}

    def _once(self, schedule: Schedule, key, make) -> int | None:
        if (id(schedule), key) not in self._seen:
            self._seen[(id(schedule), key)] = make()
        return self._seen[(id(schedule), key)]

    def of(self, schedule: Schedule, kind: str, budget: int | None = None) -> int | None:
        free = self._once(schedule, None, lambda: footprint(schedule, kind))
        if budget is None:
            return free
        if kind != "nccl" and self._once(schedule, "fewest", lambda: fewest_blocks(schedule)) > budget:
            return None  # no lowering takes fewer (so neither of the two below, nor one within the budget)
        fewest = self._once(schedule, "one", lambda: _one_channel(schedule, kind))
        best = min((b for b in (free, fewest) if b is not None), default=None)
        if best is not None and best <= budget:
            return best
        if schedule.send_count + schedule.switch_count > LOWERED_WITHIN:
            return None
        return self._once(schedule, budget, lambda: _lowered(schedule, budget))


def _one_channel(schedule: Schedule, kind: str) -> int | None:
    """Blocks per rank when every pair of ranks gets one channel (the fewest a lowering uses)."""
    if kind == "nccl":
        return 1
    from synth.lower.lowering import LoweringOptions, lower

    try:
        return lower(schedule, LoweringOptions(channel_policy="one")).threadblocks_per_rank
    except InputError:
        return None


def capped(terms, blocks: int, budget: int | None):
    """``terms`` with at most ``budget // blocks`` instances (channels) per call."""
    if terms is None or budget is None:
        return terms
    return replace(terms, max_channels=max(1, min(terms.max_channels, budget // blocks)))


def capped_calibration(calibration, budget: int | None):
    """NCCL under a budget: at most ``budget`` channels."""
    if calibration is None or budget is None:
        return calibration
    return calibration.with_parameters(max_channels=float(min(calibration.get("max_channels"), budget)))


def budget_curve(topology, collective: str, candidates: list, terms, calibration, footprints: Footprints) -> list[dict]:
    """At each of BUDGETS and with none: the fastest synthesized schedule and what NCCL takes at
    the report's table sizes (what threadblocks.png draws), step times only."""
    from synth.cost import step_loads
    from synth.report.evaluate import TABLE_SIZES, nccl_model_points

    sizes = list(TABLE_SIZES)
    loads = {id(c): step_loads(c.schedule) for c in candidates}
    out = []
    for budget in (*BUDGETS, None):
        times: list[tuple] = []  # (candidate, [time per size])
        for c in candidates:
            blocks = footprints.of(c.schedule, c.kind, budget)
            if blocks is None and budget is not None:
                continue
            mine = capped(terms, blocks or 1, budget)
            times.append((c, [loads[id(c)].best(size, mine)[1] for size in sizes]))
        model = None if calibration is None else nccl_model_points(topology, collective, sizes, calibration, budget)
        for i, size in enumerate(sizes):
            ours = [(t[i], c.label) for c, t in times if c.synthesized]
            nccl = [t[i] for c, t in times if c.nccl] + ([model[i].time_us] if model else [])
            best = min(ours) if ours else None
            out.append({"budget": budget, "size": size, "nccl_us": min(nccl) if nccl else None,
                        "synthesized_us": None if best is None else best[0],
                        "synthesized": None if best is None else best[1]})
    return out


def budget_markdown(curve: list[dict], budget: int | None, evaluations: list) -> list[str]:
    """report.md's section: each schedule's thread blocks, and the fastest under each budget."""
    from synth.cost import format_size

    head = ("Every row of this report runs within " + (f"**{budget} thread blocks per rank**" if budget else
                                                        "no budget of thread blocks") + ".")
    blocks = ", ".join(f"{e.candidate.label} {e.blocks}" for e in evaluations if e.blocks is not None)
    lines = ["## Thread blocks per rank (SMs)", "", head + " A schedule takes its lowering's thread blocks per "
             "instance and runs as many instances as the runtime terms give its protocol at a size (NCCL: one "
             "block per channel), so a budget caps its bandwidth; a schedule that cannot be lowered within it is "
             "left out (so is one of more than 100,000 transfers that its own lowerings do not fit). `synth report ... "
             "--max-threadblocks N` selects within N. threadblocks.png draws this table.",
             "", f"Thread blocks per rank per instance: {blocks}.", "",
             "| budget | size | fastest synthesized | us | NCCL us | NCCL / synthesized |", "|---|---|---|---|---|---|"]
    for row in curve:
        ours, theirs = row["synthesized_us"], row["nccl_us"]
        ratio = "-" if ours is None or theirs is None else f"{theirs / ours:.2f}x"
        label = row["synthesized"] or "- (none fits)"
        lines.append(f"| {row['budget'] or 'none'} | {format_size(row['size'])} | {label} "
                     f"| {'-' if ours is None else f'{ours:.2f}'} | {'-' if theirs is None else f'{theirs:.2f}'} "
                     f"| {ratio} |")
    return lines + [""]
