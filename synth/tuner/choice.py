"""What NCCL can run for one collective on one machine, costed at any size: the choice a tuner
table writes, and NCCL's own pick beside it.

``NcclOptions`` holds every schedule NCCL would run (``synth.baselines.nccl.variants``: its rings,
its tree at every pipelining depth some size of a grid selects, PAT, NVLS) with their step loads, and
where the shared runs check it (allreduce, allgather, reduce-scatter) the runtime model fitted to
measured nccl-tests runs (``synth.measure.runtime``). At a size:

- ``fastest``: the fastest option, each schedule at its fastest protocol under the runtime terms
  and with the channel count those terms give it, or the runtime model's option where that is
  faster. This is what a report calls NCCL's figure at that size (``synth.report.evaluate``),
  and what ``synth tune`` writes: NCCL as tuned by synth.
- ``own_pick``: what NCCL's own tuning model (``synth.baselines.nccl_model``, NCCL's formula as
  synth implements it) would pick, costed the same way: NCCL left to itself.

Where the runtime model is used, NVLSTree is priced by it alone (``MODEL_PRICED``): its latency
(2 log2(N) network crossings, NCCL's 20.9 us each) and its per-head cap are fitted to the measured
two-machine runs, and the step model's cost of the ``nccl_nvls_tree`` schedule has neither (with
it, NVLSTree would beat tree/LL from 16 KiB on two H100 machines and tree on two B200 machines
from 150 MiB, where NCCL as modelled keeps tree). Where NVLSTree is the pick, its schedule is
built for the size.

``schedule`` (and ``nccl_schedule``) is that same choice as a verified schedule: what ``synth
baseline --algo nccl --calibration CAL`` writes, with the algorithm ``synth tune`` writes at that
size (one decision, two commands).

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
from synth.core.schedule import Schedule
from synth.core.topology import Topology
from synth.cost import step_loads

CHECKED_COLLECTIVES = ("allreduce", "allgather", "reduce_scatter")  # where the runtime model is checked
MODELLED = "NCCL as modelled"  # the label of the runtime model's options
MODEL_PRICED = ("nvls_tree",)  # algorithms the runtime model alone prices where it is used (module doc)
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
        self.machine = None
        if calibration is not None and collective in CHECKED_COLLECTIVES:
            from synth.measure.runtime import describe

            self.machine = describe(topology)
        skipped = model_priced_baselines() if self.machine else ()
        self.schedules = [(label, MODEL_NAMES.get(label.split(" ")[0], label), schedule, step_loads(schedule))
                          for label, schedule in variants(topology, collective, grid or GRID, skipped)]

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

    def schedule(self, size: int, root: int | None = None, label: str = "default") -> Schedule:
        """The schedule of ``fastest(size)`` (what ``synth tune`` writes there), built and verified:
        the option's own schedule, or where the runtime model's option is the fastest, the schedule
        of its algorithm built for ``size`` (BaselineNotApplicable where NCCL runs something no
        schedule builds, e.g. CollNet: the message names it). ``root`` reaches rooted collectives."""
        from synth.baselines import BaselineNotApplicable, registry

        pick = self.fastest(size)
        if pick is None:
            raise BaselineNotApplicable(f"nccl: NCCL has no algorithm for {self.collective} on {self.topology.name}")
        name, pieces = _built_as(pick)
        if name not in registry():
            raise BaselineNotApplicable(f"nccl: NCCL runs {pick.algorithm}/{pick.protocol} for {self.collective} at "
                                        f"{size} bytes on {self.topology.name}, which no schedule builds")
        same = [s for label_, _, s, _ in self.schedules if label_ == pick.source]
        if same and root is None:
            schedule = same[0]
        elif same:  # built as ``variants`` built it, with the root
            schedule = registry()[name].make(self.topology, self.collective, root, pieces)
        else:
            schedule = registry()[name].make(self.topology, self.collective, root, None, size)
        options = [{"algorithm": p.algorithm, "protocol": p.protocol, "time_us": p.time_us, "source": p.source}
                   for p in sorted(self.options(size), key=lambda p: p.time_us)]
        return schedule.with_meta(algorithm="nccl", nccl_algorithm=name, protocol=pick.protocol, size=size,
                                  time_us=pick.time_us, nccl_channels=pick.channels, priced_by=pick.source,
                                  calibration=label, options=options)

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


def model_priced_baselines() -> tuple[str, ...]:
    """The baselines of ``MODEL_PRICED``'s algorithms: not options where the runtime model prices them."""
    return tuple(name for name, algorithm in MODEL_NAMES.items() if algorithm in MODEL_PRICED)


def nccl_schedule(topology: Topology, collective: str, size: int, calibration, root: int | None = None,
                  label: str = "default") -> Schedule:
    """``NcclOptions(topology, collective, calibration).schedule(size, root, label)``: what ``synth
    baseline --algo nccl --calibration CAL`` writes."""
    return NcclOptions(topology, collective, calibration).schedule(size, root, label)


def _built_as(pick: Pick) -> tuple[str, int | None]:
    """(baseline name, pieces or None) that builds ``pick``: its schedule's label (``variants``), or
    for the runtime model's option the baseline of its algorithm."""
    if pick.source != MODELLED:
        name, _, rest = pick.source.partition(" pieces=")
        return name, int(rest) if rest else None
    by_algorithm = {algorithm: name for name, algorithm in MODEL_NAMES.items()}
    return by_algorithm.get(pick.algorithm, pick.algorithm), None
