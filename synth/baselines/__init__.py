"""Classic collective algorithms as verified Schedules (what people use today).

Every builder has the signature ``build(topology, collective_name, root, chunks) -> Schedule``
(``sized`` builders also take ``size=`` bytes, to pick what is fastest at that size; None means
their documented default) and raises ``BaselineNotApplicable`` (with the reason) when it does
not apply. Each builder
chooses the chunking its algorithm needs; the schedule's collective says what it is, and its
``buffer_chunks`` keeps the nccl-tests size S, so costs are comparable across algorithms.

>>> sorted(registry())[:3]
['binomial_tree', 'bruck', 'deepep']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from synth.baselines.common import BaselineNotApplicable
from synth.core.errors import InputError
from synth.core.schedule import Schedule
from synth.core.topology import Topology

__all__ = ["Baseline", "BaselineNotApplicable", "registry", "build_baseline", "baseline_loads", "applicable",
           "fastest_baseline"]


@dataclass(frozen=True)
class Baseline:
    """One classic algorithm: its name, the collectives it covers, and its builder."""

    name: str
    collectives: frozenset[str]
    build: Callable[..., Schedule]
    description: str
    sized: bool = False  # build also takes size= (bytes): its choices depend on the message size
    # choices(topology, collective, root, sizes) -> {size: chunks build would pick}, or None where
    # the size changes nothing; lets a caller build each distinct variant once for a size grid
    choices: Callable[..., dict | None] | None = None
    # loads(topology, collective) -> the StepLoads (synth.cost) of make(topology, collective),
    # counted without making its sends, or None where it counts no such shape (then build it);
    # raises BaselineNotApplicable where make would
    loads: Callable[..., object] | None = None

    def make(self, topology: Topology, collective: str, root: int | None = None, chunks: int | None = None,
             size: float | None = None) -> Schedule:
        """Build for ``collective``; ``size`` reaches only sized builders (the others ignore it)."""
        if self.sized:
            return self.build(topology, collective, root, chunks, size=size)
        return self.build(topology, collective, root, chunks)


def registry() -> dict[str, Baseline]:
    """All baselines by name (imported lazily to keep ``import synth`` light)."""
    from synth.baselines import (
        alltoall,
        hierarchical,
        moe,
        nccl,
        nccl_nvls,
        nccl_nvls_tree,
        nccl_pat,
        nccl_ring,
        nccl_tree,
        recursive,
        ring,
        trees,
    )

    entries = (
        ring.BASELINES
        + nccl_ring.BASELINES
        + nccl_tree.BASELINES
        + nccl_pat.BASELINES
        + nccl_nvls.BASELINES
        + nccl_nvls_tree.BASELINES
        + nccl.BASELINES
        + recursive.BASELINES
        + trees.BASELINES
        + alltoall.BASELINES
        + hierarchical.BASELINES
        + moe.BASELINES
    )
    return {entry.name: entry for entry in entries}


def baseline_loads(entry: Baseline, topology: Topology, collective: str):
    """The StepLoads of ``entry.make(topology, collective)``: counted where the baseline can
    (``entry.loads``: a ring's steps without its millions of sends), else built and counted."""
    from synth.cost import step_loads

    counted = entry.loads(topology, collective) if entry.loads is not None else None
    return counted if counted is not None else step_loads(entry.make(topology, collective))


def build_baseline(
    topology: Topology, algorithm: str, collective: str, root: int | None = None, chunks: int | None = None,
    size: float | None = None,
) -> Schedule:
    """Build (and verify) one baseline; unknown names and non-applicable cases raise InputError.
    NCCL's choice under a calibration is ``synth.tuner.choice.nccl_schedule``."""
    table = registry()
    entry = table.get(algorithm)
    if entry is None:
        raise InputError(f"unknown baseline {algorithm!r}; known: {', '.join(sorted(table))}")
    if collective.partition(":")[0] not in entry.collectives:
        raise BaselineNotApplicable(
            f"{algorithm} does not build {collective}; it builds {', '.join(sorted(entry.collectives))}"
        )
    return entry.make(topology, collective, root, chunks, size)


def applicable(topology: Topology, collective: str, root: int | None = None,
               size: float | None = None) -> dict[str, str | None]:
    """For every baseline that builds ``collective``: None if it applies, else the reason."""
    out: dict[str, str | None] = {}
    for name, entry in sorted(registry().items()):
        if collective.partition(":")[0] not in entry.collectives:
            continue
        try:
            entry.make(topology, collective, root, None, size)
            out[name] = None
        except InputError as exc:
            out[name] = str(exc)
    return out


def fastest_baseline(topology: Topology, collective: str, size_bytes: float,
                     root: int | None = None) -> tuple[str, float] | None:
    """(name, step-model time in us at ``size_bytes``) of the fastest applicable baseline, or None."""
    from synth.cost import step_time_us

    best: tuple[str, float] | None = None
    for name, entry in sorted(registry().items()):
        if collective.partition(":")[0] not in entry.collectives:
            continue
        try:
            took = step_time_us(entry.make(topology, collective, root, None, size_bytes), size_bytes)
        except BaselineNotApplicable:
            continue
        if best is None or took < best[1]:
            best = (name, took)
    return best
