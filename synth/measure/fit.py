"""Fit a calibration's parameters to measured runs.

The fit minimises, over the parameters in log space, a robust (soft L1) sum of
``log(model / measured)`` over every row, plus a pull of each parameter toward its value in the
base calibration (``PRIOR_WEIGHT`` per parameter, in log units), so a term the rows do not
determine stays where it was. Rows an unhealthy machine made (measured over the base
calibration's model beyond ``UNHEALTHY``, what ``synth doctor`` calls far slower) are left out
before fitting; rows still far off the rest (beyond ``FAR`` after a first fit) are left out too,
and the fit is run again without them. Both are listed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np
from scipy.optimize import least_squares

from synth.core.errors import InputError
from synth.measure.calibration import Calibration
from synth.measure.nccl_env import Allowed
from synth.measure.nccl_env import allowed as allowed_by
from synth.measure.runtime import SWITCH_ALGORITHMS, Choice, Launch, Machine, available, considered, nccl_time
from synth.measure.symmetric import Setup, version_tuple

PRIOR_WEIGHT = 0.3
FAR = 2.0
UNHEALTHY = 3.0
ALWAYS = ("fill_us", "fill_bytes")
MULTI = ("efficiency_net", "tree_channel_gbps")
NVLS = ("efficiency_nvls", "nvls_latency_us")


@dataclass(frozen=True)
class Measured:
    """One run to fit or predict: where it came from, the machine, how it was launched, the
    network transport, its (size bytes, out-of-place time us) rows, what it let NCCL run
    (``allowed``: its NCCL_ALGO / NCCL_PROTO / NVLS / CollNet settings) and what NCCL said it ran
    (``chosen``: (size bytes, algorithm, protocol or None) from its per-call lines), and how its
    buffers were set up and which NCCL ran it (``setup``: what decides NCCL's symmetric kernels),
    and the lines of its log not read (``skipped``)."""

    source: str
    collective: str
    machine: Machine
    launch: Launch
    transport: str
    rows: tuple[tuple[float, float], ...]
    allowed: Allowed = Allowed()
    chosen: tuple[tuple[int, str, str | None], ...] = ()
    setup: Setup = Setup()
    skipped: tuple[str, ...] = ()  # what the log reader could not read (``logs.Run.skipped``)

    def allowed_at(self, size: float) -> Allowed:
        """What the model may pick at ``size``: the algorithm (and protocol) NCCL logged for that
        size, else what the run's settings allowed."""
        for at, algorithm, protocol in self.chosen:
            if at == int(size):
                return Allowed(frozenset({algorithm}), protocols=None if protocol is None else frozenset({protocol}))
        return self.allowed


def allowed_for(run, collective: str, machine: Machine, overrides: Mapping[str, str] | None = None,
                where: str = "") -> tuple[Allowed, tuple[tuple[int, str, str | None], ...]]:
    """(allowed, chosen) of a ``synth.measure.logs.Run``: its NCCL settings with ``overrides`` on
    top, and the algorithm NCCL logged per size (the first line of a size; dropped where the
    settings forbid it or the model lacks the algorithm, as PAT). InputError, prefixed with
    ``where``, when the settings leave the machine no algorithm or NCCL logged one the machine
    cannot run (NVLS on a topology without an NVLS switch)."""
    settings = {**run.nccl_settings, **(overrides or {})}
    try:
        allowed = allowed_by(settings, collective)
        considered(machine, collective, allowed)
    except InputError as exc:
        raise InputError(f"{where}: {exc}" if where else str(exc)) from None
    offered = available(machine, collective)
    first: dict[int, tuple[int, str, str | None]] = {}
    for call in run.calls:
        if call.collective != collective or call.algorithm is None or not allowed.permits(call.algorithm):
            continue
        if call.algorithm not in offered and call.algorithm in SWITCH_ALGORITHMS:
            raise InputError(f"{where}: NCCL ran {call.algorithm} at {call.size_bytes} bytes, which the topology "
                             f"{machine.name} cannot run (it offers {', '.join(offered)})")
        if call.algorithm not in offered:
            continue  # one the model lacks (PAT): what the settings allow stands in
        first.setdefault(call.size_bytes, (call.size_bytes, call.algorithm, call.protocol))
    return allowed, tuple(first.values())


def expected(run: Measured, size: float, cal: Calibration) -> Choice:
    """The model's option for one row: NCCL's fastest among what the run allowed there."""
    return nccl_time(run.machine, run.collective, size, cal, run.launch, run.transport, run.allowed_at(size),
                     run.setup)


def setup_of(run) -> Setup:
    """The Setup of a ``synth.measure.logs.Run``: its -R, NCCL_SYM_NOWIN_ENABLE, NCCL_CTA_POLICY and
    the version it printed."""
    settings = run.nccl_settings
    nowin = (settings.get("NCCL_SYM_NOWIN_ENABLE") or "0").strip() not in ("0", "")
    policy = (settings.get("NCCL_CTA_POLICY") or "").strip().upper() in ("ZERO", "2")
    return Setup(run.buffers, nowin, version_tuple(run.version), policy)


def model_us(run: Measured, size: float, cal: Calibration) -> float:
    """The modelled time of one row."""
    return expected(run, size, cal).time_us


def fitted_names(runs: list[Measured]) -> tuple[str, ...]:
    """The parameters these runs inform: the links' efficiency, latencies, channel and fill
    terms, the launch cost of each launch mode present, network terms for multi-machine runs, and
    NVLS's terms where a run let NCCL use NVLS (NVLSTree's head cap where it spans machines)."""
    names = list(ALWAYS)
    for run in runs:
        names.append(f"efficiency_{run.machine.intra_kind}")
        names.append(_launch_name(run.launch))
        if run.setup.registration == "symmetric" or run.setup.nowin:
            names.extend(("sym_ll_us", "sym_ldst_us", "sym_mc_us", "efficiency_ldst"))
        if run.machine.machines > 1:
            names.extend((*MULTI, f"network_hop_us_{run.transport}"))
        algorithms = _possible(run)
        if {"nvls", "nvls_tree"} & algorithms:
            names.extend(NVLS)
        if "nvls_tree" in algorithms:
            names.append("nvls_tree_channel_gbps")
    return tuple(dict.fromkeys(names))


def _launch_name(launch: Launch) -> str:
    if launch.graph:
        return "launch_graph_us"
    return "launch_thread_gpu_us" if launch.mode == "threads" else "launch_process_us"


def _possible(run: Measured) -> set[str]:
    """Every algorithm the model may pick at some row of ``run``."""
    return {a for size, _ in run.rows for a in considered(run.machine, run.collective, run.allowed_at(size))}


def fit(runs: list[Measured], base: Calibration, topology: str | None = None,
        names: tuple[str, ...] | None = None, prior: float = PRIOR_WEIGHT) -> Calibration:
    """A calibration fitted to ``runs``, starting from (and pulled toward) ``base``; ``names``
    (default: ``fitted_names``) are the parameters it may move."""
    names = names or fitted_names(runs)
    archs = {run.machine.arch for run in runs}
    base = base.on(archs.pop()) if len(archs) == 1 else base  # one generation: start from its defaults
    rows = [(run, size, took) for run in runs for size, took in run.rows if took > 0]
    keep = [i for i, (run, size, took) in enumerate(rows) if took / model_us(run, size, base) <= UNHEALTHY]
    keep = keep or list(range(len(rows)))
    cal = _solve([rows[i] for i in keep], names, base, prior)
    still = [i for i in keep if rows[i][2] / model_us(rows[i][0], rows[i][1], cal) <= FAR]
    if still and len(still) < len(keep):
        keep = still
        cal = _solve([rows[i] for i in keep], names, base, prior)
    kept, left = [rows[i] for i in keep], set(range(len(rows))) - set(keep)
    far = [rows[i] for i in sorted(left)]
    sources = tuple({"file": run.source, "rows": len(run.rows), "collective": run.collective,
                     "launch": run.launch.mode, "gpus_per_thread": run.launch.gpus_per_thread,
                     "graph": run.launch.graph, "registration": run.setup.registration,
                     "ranks": run.machine.ranks, "machines": run.machine.machines,
                     "transport": run.transport} for run in runs)
    table = tuple(_fit_row(run, size, took, cal) for run, size, took in kept)
    excluded = tuple(_fit_row(run, size, took, cal) for run, size, took in far)
    return Calibration(cal.parameters, topology, sources, table, excluded, arch=base.arch)


def _solve(rows: list, names: tuple[str, ...], base: Calibration, prior: float) -> Calibration:
    """Least squares over ``names`` (log space, soft L1 on the rows, a prior toward ``base``)."""
    start = np.log([base.get(name) for name in names])
    upper = np.array([0.0 if name.startswith("efficiency_") else np.inf for name in names])
    lower = np.full(len(names), -np.inf)

    def calibration(x: np.ndarray) -> Calibration:
        return base.with_parameters(**{name: float(math.exp(v)) for name, v in zip(names, x)})

    def residuals(x: np.ndarray) -> np.ndarray:
        cal = calibration(x)
        fit = [math.log(model_us(run, size, cal) / took) for run, size, took in rows]
        return np.concatenate([fit, prior * (x - start)])

    solved = least_squares(residuals, np.minimum(start, upper - 1e-9), bounds=(lower, upper),
                           loss="soft_l1", f_scale=0.1, x_scale=1.0, diff_step=1e-3)
    return calibration(solved.x)


def _fit_row(run: Measured, size: float, took: float, cal: Calibration) -> dict:
    model = model_us(run, size, cal)
    return {"file": run.source, "size_bytes": int(size), "measured_us": took,
            "model_us": round(model, 3), "model_over_measured": round(model / took, 4)}
