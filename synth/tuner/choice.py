"""What NCCL can run for one collective on one machine, costed at any size: the choice a tuner
table writes, and NCCL's own pick beside it.

``NcclOptions`` holds every schedule NCCL would run (``synth.baselines.nccl.variants``: its rings,
its tree at every pipelining depth some size of a grid selects, PAT) with their step loads, and
where the shared runs check it (allreduce, allgather, reduce-scatter) the runtime model fitted to
measured nccl-tests runs (``synth.measure.runtime``). At a size:

- ``fastest``: the fastest option, each schedule at its fastest protocol under the runtime terms
  and with the channel count those terms give it, or the runtime model's option where that is
  faster. This is what a report calls NCCL's figure at that size (``synth.report.evaluate``),
  and what ``synth tune`` writes: NCCL as tuned by synth.
- ``own_pick``: what NCCL's own tuning model (``synth.baselines.nccl_model``, NCCL's formula as
  synth implements it) would pick, costed the same way: NCCL left to itself.

>>> from synth.core.library import resolve_topology
>>> from synth.measure.calibration import load_calibration
>>> nccl = NcclOptions(resolve_topology("dgx1"), "allreduce", load_calibration("default"))
>>> pick = nccl.fastest(1 << 30)
>>> pick.algorithm, pick.protocol, pick.channels
('ring', 'simple', 32)
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.baselines.nccl import MODEL_NAMES, nccl_setup, variants
from synth.baselines.nccl_model import PROTOCOLS, applies, predicted_us
from synth.core.topology import Topology
from synth.cost import step_loads

CHECKED_COLLECTIVES = ("allreduce", "allgather", "reduce_scatter")  # where the runtime model is checked
MODELLED = "NCCL as modelled"  # the label of the runtime model's options
GRID = [1 << k for k in range(10, 33)]  # 1K..4G: the report's default grid, which picks the tree variants


@dataclass(frozen=True)
class Pick:
    """One NCCL option at one size: NCCL's algorithm and protocol names, its channel count (None
    without runtime terms), its modelled time, and where it comes from (a schedule's label, or
    ``NCCL as modelled``)."""

    algorithm: str
    protocol: str
    channels: int | None
    time_us: float
    source: str

    @property
    def setting(self) -> tuple[str, str, int | None]:
        """What a tuner line sets."""
        return self.algorithm, self.protocol, self.channels


class NcclOptions:
    """NCCL's options for ``collective`` on ``topology`` under ``calibration`` (None: the protocol
    model, no runtime terms and no runtime model). ``grid``: the sizes whose choices pick the
    sized algorithms' variants (a report's grid)."""

    def __init__(self, topology: Topology, collective: str, calibration, grid: list[int] | None = None):
        self.topology, self.collective, self.calibration = topology, collective, calibration
        calibration = None if calibration is None else calibration.on(topology.arch)
        self.calibration = calibration
        self.terms = None if calibration is None else calibration.terms()
        self.schedules = [(label, MODEL_NAMES.get(label.split(" ")[0], label), schedule, step_loads(schedule))
                          for label, schedule in variants(topology, collective, grid or GRID)]
        self.machine = None
        if calibration is not None and collective in CHECKED_COLLECTIVES:
            from synth.measure.runtime import describe

            self.machine = describe(topology)

    def options(self, size: int) -> list[Pick]:
        """Every option at ``size``: the schedules (each at its fastest protocol), then the
        runtime model's options."""
        out = []
        for label, algorithm, _, loads in self.schedules:
            protocol, took = loads.best(size, self.terms)
            channels = None if self.terms is None else self.terms.channels(size, protocol)
            out.append(Pick(algorithm, protocol, channels, took, label))
        return out + self._modelled(size)

    def _modelled(self, size: int) -> list[Pick]:
        if self.machine is None:
            return []
        from synth.measure.runtime import Launch, nccl_options

        cal = self.calibration
        return [Pick(c.algorithm, c.protocol, c.channels, c.time_us, MODELLED)
                for c in nccl_options(self.machine, self.collective, size, cal, Launch("processes"), cal.transport)]

    def fastest(self, size: int) -> Pick | None:
        """The report's NCCL figure at ``size``: its fastest schedule (ties: the first label), or the
        runtime model's pick where that is faster."""
        options = self.options(size)
        schedules = [p for p in options if p.source != MODELLED]
        best = min(schedules, key=lambda p: (p.time_us, p.source)) if schedules else None
        modelled = [p for p in options if p.source == MODELLED]
        if modelled:
            pick = min(modelled, key=lambda p: p.time_us)
            if best is None or pick.time_us < best.time_us:
                best = pick
        return best

    def own_pick(self, size: int, algorithms: set[str] | None = None, protocols: set[str] | None = None) -> Pick | None:
        """NCCL's own tuning model's (algorithm, protocol) at ``size`` (among ``algorithms`` x
        ``protocols`` when given: what NCCL_ALGO / NCCL_PROTO leave it), costed as ``fastest``
        costs (the fastest of our options with that algorithm and protocol); None where its model
        does not cover the collective or none of our options has its pick."""
        choice = self.own_choice(size, algorithms, protocols)
        if choice is None:
            return None
        algorithm, protocol = choice
        same = [p for p in self._at_protocol(size, protocol) if p.algorithm == algorithm]
        return min(same, key=lambda p: (p.time_us, p.source)) if same else None

    def own_choice(self, size: int, algorithms: set[str] | None = None,
                   protocols: set[str] | None = None) -> tuple[str, str] | None:
        """(algorithm, protocol) NCCL's tuning model predicts fastest at ``size`` (among those given)."""
        if self.collective not in ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce"):
            return None
        rings = [s for label, _, s, _ in self.schedules if label == "nccl_ring"]
        channels = (rings[0].meta.get("channels") if rings else None) or 1
        setup, _ = nccl_setup(self.topology, self.collective, channels)
        allowed_algos = algorithms
        algorithms = sorted({a for _, a, _, _ in self.schedules if a in ("ring", "tree", "pat")})
        predicted = [(predicted_us(setup, a, p, size), a, p) for a in algorithms for p in PROTOCOLS
                     if applies(setup, a, p) and (allowed_algos is None or a in allowed_algos)
                     and (protocols is None or p in protocols)]
        return min(predicted)[1:] if predicted else None

    def _at_protocol(self, size: int, protocol: str) -> list[Pick]:
        """Every option at ``size`` under ``protocol`` (the schedules that run under it, the
        runtime model's)."""
        out = []
        for label, algorithm, _, loads in self.schedules:
            if protocol not in loads.protocols:
                continue
            took = loads.time_us(size, protocol, self.terms)
            channels = None if self.terms is None else self.terms.channels(size, protocol)
            out.append(Pick(algorithm, protocol, channels, took, label))
        return out + [p for p in self._modelled(size) if p.protocol == protocol]
