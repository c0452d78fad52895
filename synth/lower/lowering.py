"""Lowering: a verified Schedule -> a Program (thread blocks of MSCCL steps), ready to export.

Design (rules from shared/reference/msccl-format.md, semantics from DESIGN.md):

* Buffers (``buffer_layout``): every (rank, chunk) maps to MSCCL buffer locations as the runtimes
  lay them out (section 3): an input location where the rank holds the chunk at the start and an
  output location, its *home*, where it must hold it at the end. In place, allgather is written in
  terms of ``o`` and allreduce/broadcast/reduce/alltoall/reduce_scatter in terms of ``i``.
* Values: walking the steps, each rank tracks where its current value of each chunk lives. A
  received chunk lands at its home when that is free, else where the chunk already lives (when
  writable), else in a scratch slot (slots are reused once their value is dead); forwarding sends
  from where the value landed. Out of place the input buffer is never written. At the end a
  ``cpy`` moves every value that is not at its home there.
* Transfers: a send is ``s`` on the sender and ``r`` (copy) or ``rrc`` (reduce; local operand in
  ``src``) on the receiver. A step's sends between one pair on one channel merge into ops of
  ``cnt`` <= 71 where both ends' ranges are contiguous.
* Channels: ``one`` (all on 0), ``link`` (as many channels per pair as the link's capacity, each
  step's chunks split evenly), ``max`` (up to ``channels`` per pair, default 8). When a block would
  exceed the runtime's steps per block, the steps of each pair rotate over more channels.
* Thread blocks: one per (send peer, receive peer, channel), one owner per (peer, direction,
  channel). A receive connection shares a block with the send connection its chunks flow on to
  (max-weight matching), so that r+s fuse into ``rcs``/``rrcs``/``rrs``. ``max_threadblocks``
  first pairs every connection, then uses fewer channels, then refuses.
* Order: every op has a key (step, phase, sequence, instance): sends read the state at the start of
  their step (phase 0), receives land after (phase 1), final copies come last. Blocks run their
  ops in key order; an op depends on the last writer of what it reads and on the last writer and
  readers of what it writes (same rank, other blocks; redundant ones dropped with vector clocks;
  the first on the op, the others on nops before it). Every edge, including send -> receive, goes
  forward in key order, so the program cannot deadlock; connections carry their ops in the same
  order at both ends. A receive fuses with the next op of its block only when no other op waits
  on it earlier than that op. With FIFOs of B slots the same argument holds while a connection
  carries fewer than B ops per step, so at most 7 do (NCCL has 8 slots); the rest spill onto
  extra channels.
* Instances (section 8.2): each op runs k times, instance i on channels ``i*C..``, each range
  (off, cnt) of every buffer becoming (off*k + i*cnt, cnt), so chunk counts scale by k.
* Switch entries (DESIGN.md, "In-network reduction and multicast"; synth.lower.switches fuses a
  reduce with the multicast of its result into one reduce-multicast): each is a switch op
  (``glre``/``gstore``/``glres``, synth.program.ir) on every participant, in a thread block per
  root (``Op.root``) on each rank, keyed after the step's sends and before its receives: each src reads where
  its value lives at the step's start, each dst's result lands as a receive's would. MSCCL has no
  switch operation: lowering for an MSCCL runtime (``runtime`` set) refuses them in one line.

>>> from synth.baselines import registry
>>> from synth.core.library import resolve_topology
>>> ring = registry()["ring"].build(resolve_topology("ring:4"), "allgather", None, None)
>>> p = lower(ring, LoweringOptions(runtime="executor"))
>>> p.chunks_per_loop, p.threadblocks_per_rank, p.channels, p.max_ops_per_threadblock
(8, 2, 1, 5)
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from synth.core.errors import InputError
from synth.core.schedule import Schedule, peer_sets
from synth.lower.blocks import (
    Overflow,
    add_dependencies,
    assign_blocks,
    build_ops,
    emit_rank,
    fuse,
    reduce_dependencies,
)
from synth.lower.layout import Layout, buffer_layout
from synth.lower.plan import PlanConfig, Planner
from synth.lower.policies import CHANNEL_POLICIES
from synth.msccl.profiles import MAX_ELEMENTS_PER_RANK, MAX_OFFSET, MAX_PEERS_PER_CHANNEL, PROFILES, Profile
from synth.program.ir import PROTOCOLS, Program, RankProgram, Threadblock

DEFAULT_MAX_CHANNELS = 8
NAME_RE = re.compile(r"[A-Za-z0-9_.+-]{1,63}")

__all__ = ["LoweringOptions", "lower", "buffer_layout", "Layout", "CHANNEL_POLICIES"]


@dataclass(frozen=True)
class LoweringOptions:
    """How to lower. ``runtime`` (legacy/executor/rccl) sets the limits to respect (None: only
    the limits every MSCCL runtime shares); ``channels`` is the cap of the ``max`` policy;
    ``max_bytes`` None = unbounded (inclusive bound otherwise)."""

    runtime: str | None = None
    protocol: str = "Simple"
    channel_policy: str = "link"
    channels: int | None = None
    instances: int = 1
    inplace: bool = False
    max_threadblocks: int | None = None
    min_bytes: int = 0
    max_bytes: int | None = None
    name: str | None = None
    mscclpp_version: str | None = None  # mscclpp-json only: the release the plan is for (default 0.10)


# ---------------------------------------------------------------------- driver
def _check_options(options: LoweringOptions) -> Profile | None:
    def positive(value: Any, what: str) -> None:
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise InputError(f"{what} must be a positive integer, got {value!r}")

    if options.runtime is not None and options.runtime not in PROFILES:
        raise InputError(f"unknown runtime {options.runtime!r}; known: {', '.join(PROFILES)}")
    if options.protocol not in PROTOCOLS:
        raise InputError(f"unknown protocol {options.protocol!r}; known: {', '.join(PROTOCOLS)}")
    if options.channel_policy not in CHANNEL_POLICIES:
        raise InputError(f"unknown channel policy {options.channel_policy!r}; known: {', '.join(CHANNEL_POLICIES)}")
    if options.channels is not None and options.channel_policy != "max":
        raise InputError("a channel count applies to the 'max' channel policy only")
    positive(options.channels, "channels")
    positive(options.instances, "instances")
    positive(options.max_threadblocks, "max threadblocks")
    if not isinstance(options.min_bytes, int) or options.min_bytes < 0:
        raise InputError(f"min bytes must be an integer >= 0, got {options.min_bytes!r}")
    if options.max_bytes is not None and (not isinstance(options.max_bytes, int)
                                          or options.max_bytes < options.min_bytes):
        raise InputError(f"max bytes must be an integer >= min bytes ({options.min_bytes}), got {options.max_bytes!r}")
    if options.name is not None and not NAME_RE.fullmatch(options.name):
        raise InputError(f"program name {options.name!r}: use 1-63 characters among A-Z a-z 0-9 _ . + -")
    return None if options.runtime is None else PROFILES[options.runtime]


def refuse_switches_for_msccl(schedule: Schedule, runtime: str) -> None:
    """InputError (one line) when ``schedule`` has switch entries: MSCCL has no switch operation."""
    if schedule.switch_count:
        names = sorted({entry.switch for step in schedule.steps for entry in step.switches})
        raise InputError(f"MSCCL has no switch operation (its runtimes run point-to-point sends only): cannot lower "
                         f"for the {runtime} runtime a schedule with {schedule.switch_count} switch entries (switch "
                         f"{', '.join(names)}); export it as mscclpp-json (NVLS switch channels) or as program-json "
                         "without --runtime")


def _default_name(schedule: Schedule) -> str:
    algo = schedule.meta.get("algorithm") or schedule.meta.get("synthesizer") or "synth"
    raw = f"{algo}_{schedule.collective.name}_{schedule.topology.name}_s{len(schedule.steps)}"
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", raw)[:63]


def lower(schedule: Schedule, options: LoweringOptions = LoweringOptions(), layout: Layout | None = None) -> Program:
    """The Program for ``schedule`` under ``options``; InputError (one line) when it cannot be
    lowered within the runtime's limits or ``max_threadblocks``. ``layout``: where each (rank,
    chunk) lives (default: MSCCL's layout for the collective, ``buffer_layout``); a runtime that
    packs its buffers its own way (synth.runtime.moe: a rank's tokens only) passes its own, which
    must place every (rank, chunk) of ``pre`` in ``inputs`` and of ``post`` in ``outputs``."""
    profile = _check_options(options)
    if profile is not None:
        refuse_switches_for_msccl(schedule, profile.name)
    else:
        _refuse_crowded_peers(schedule)
    if layout is None:
        layout = buffer_layout(schedule.collective, options.inplace)
    k = options.instances
    channel_limit = (profile.max_channels if profile else 1 << 30) // k
    if channel_limit < 1:
        raise InputError(f"{k} instances need {k} channels; {profile.name} allows {profile.max_channels}")
    if options.channel_policy == "one":
        cap = 1
    elif options.channel_policy == "link":
        cap = max((schedule.topology.link_capacity(l) or 1 for l in schedule.topology.links), default=1)
    else:
        cap = options.channels or DEFAULT_MAX_CHANNELS
    queue = [PlanConfig(max(1, min(cap, channel_limit)), False, 0)]
    tried: set[PlanConfig] = set()
    errors: list[Overflow] = []
    while queue:
        cfg = queue.pop(0)
        if cfg in tried:
            continue
        tried.add(cfg)
        try:
            return _lower_with(schedule, layout, options, profile, cfg)
        except Overflow as exc:
            errors.append(exc)
            if exc.kind == "steps" and cfg.spread < channel_limit:
                queue.insert(0, replace(cfg, spread=max(2, cfg.spread + 1)))
            elif exc.kind in ("blocks", "channels") and not cfg.pair_all:
                queue.insert(0, replace(cfg, pair_all=True))
            elif exc.kind in ("blocks", "channels") and cfg.spread > 1:
                queue.insert(0, replace(cfg, spread=cfg.spread - 1 if cfg.spread > 2 else 0))
            elif exc.kind in ("blocks", "channels") and cfg.cap > 1:
                queue.insert(0, replace(cfg, cap=cfg.cap - 1))
    tail = "" if len(errors) == 1 else f" (after {len(errors)} channel/thread-block arrangements)"
    raise InputError(f"cannot lower {schedule.collective.name} on {schedule.topology.name}: {errors[-1]}{tail}")


def _refuse_crowded_peers(schedule: Schedule) -> None:
    """InputError (one line) when a rank sends to, or receives from, more than
    MAX_PEERS_PER_CHANNEL peers. Channel 0 carries a thread block toward every peer a rank
    talks to unless steps rotate over channels, which only a runtime's step limit triggers; so
    without a runtime no arrangement fits, and this says so before planning a single step."""
    for direction, peers in zip(("send", "recv"), peer_sets(schedule)):
        crowded = [(len(group), rank) for rank, group in peers.items() if len(group) > MAX_PEERS_PER_CHANNEL]
        if crowded:
            count, rank = max(crowded, key=lambda item: (item[0], -item[1]))
            raise InputError(f"cannot lower {schedule.collective.name} on {schedule.topology.name}: rank {rank} "
                             f"has {count} {direction} peers on channel 0, MSCCL allows {MAX_PEERS_PER_CHANNEL}")


def _lower_with(schedule: Schedule, layout: Layout, options: LoweringOptions, profile: Profile | None,
                cfg: PlanConfig) -> Program:
    plan = Planner(schedule, layout, cfg, options.channel_policy).run()
    k, n = options.instances, schedule.collective.ranks
    used = 1 + max([t.channel for t in plan.transfers] + [0])
    channels = used * k
    if profile is not None and channels > profile.max_channels:
        raise Overflow("channels", f"needs {channels} channels, {profile.name} allows {profile.max_channels}")
    sizes = (layout.chunks_per_loop * k, layout.input_chunks * k, layout.output_chunks * k, max(plan.scratch) * k)
    if max(sizes) > MAX_OFFSET + 1:
        raise InputError(f"{max(sizes)} chunks per buffer exceed MSCCL's int16 offsets ({MAX_OFFSET + 1})")
    per_rank = build_ops(plan, k, used, len(schedule.steps))
    gpus = []
    for rank in range(n):
        rank_ops = per_rank.get(rank, [])
        blocks = assign_blocks(rank_ops, cfg.pair_all, lambda c: c // used)
        add_dependencies(rank_ops)
        fuse(blocks, rank_ops)
        reduce_dependencies(blocks)
        tbs = emit_rank(rank, blocks)
        _check_rank(rank, tbs, n, options, profile)
        gpus.append(RankProgram(rank, layout.input_chunks * k, layout.output_chunks * k, plan.scratch[rank] * k, tbs))
    meta = {"schedule": {"collective": schedule.collective.name, "topology": schedule.topology.name,
                         "steps": len(schedule.steps), "synthesizer": schedule.meta.get("synthesizer", "")},
            "lowering": {"runtime": options.runtime or "", "channel_policy": options.channel_policy,
                         "channels_per_pair": cfg.cap, "spread": cfg.spread, "paired_all": cfg.pair_all,
                         "instances": k}}
    return Program(options.name or _default_name(schedule), schedule.collective.name, n, options.protocol,
                   layout.chunks_per_loop * k, options.inplace, not options.inplace, channels, tuple(gpus),
                   options.min_bytes, options.max_bytes, meta)


def _check_rank(rank: int, tbs: tuple[Threadblock, ...], n: int, options: LoweringOptions,
                profile: Profile | None) -> None:
    limits = [(options.max_threadblocks, "--max-threadblocks")]
    if profile is not None:
        limits.append((profile.max_threadblocks, f"{profile.name} runtime"))
    for limit, source in limits:
        if limit is not None and len(tbs) > limit:
            raise Overflow("blocks", f"rank {rank} needs {len(tbs)} thread blocks, the {source} limit is {limit}")
    for direction in ("send", "recv"):
        peers: dict[int, set] = defaultdict(set)
        for tb in tbs:
            if getattr(tb, direction) >= 0:
                peers[tb.channel].add(getattr(tb, direction))
        for channel, group in peers.items():
            if len(group) > MAX_PEERS_PER_CHANNEL:
                raise Overflow("blocks", f"rank {rank} has {len(group)} {direction} peers on channel {channel}, "
                                          f"MSCCL allows {MAX_PEERS_PER_CHANNEL}")
    if profile is None:
        return
    longest = max(tbs, key=lambda tb: len(tb.ops))
    if len(longest.ops) > profile.max_steps:
        raise Overflow("steps", f"rank {rank} thread block (send {longest.send}, recv {longest.recv}, "
                                 f"channel {longest.channel}) has {len(longest.ops)} steps, {profile.name} "
                                 f"allows {profile.max_steps}")
    elements = 1 + n + len(tbs) + sum(len(tb.ops) for tb in tbs)
    if elements > MAX_ELEMENTS_PER_RANK:
        raise Overflow("elements", f"rank {rank} needs {elements} XML elements, MSCCL stores {MAX_ELEMENTS_PER_RANK}")
