"""The cost model against real nccl-tests runs (../shared/nccl-tests-logs/).

For every shared run, NCCL's time as the runtime model predicts it (``synth.measure.runtime``)
over the measured out-of-place time, per regime (one or two machines x < 64 KiB / 64 KiB-64 MiB /
>= 64 MiB), three ways:

- ``default``: the default parameters (``synth.measure.calibration.DEFAULTS``);
- ``held out``: the defaults fitted again to every shared run but this one (``--fit-defaults``
  without it): what the defaults would predict for a run they never saw;
- ``calibrated``: starting from those, a calibration fitted to the other runs of the same GPU
  kind (never the run being predicted); runs with no sibling keep the held-out defaults;
- ``nccl model``: NCCL's own tuning model as synth implements it (``baselines/nccl_model.py``), its
  tuner's pick among what the run allowed (NVLS and NVLSTree where the machine has NVLS; the
  algorithm NCCL logged, where it did), which has no launch cost.

Every run is costed with what it let NCCL do (its NCCL_ALGO / NCCL_NVLS_ENABLE settings and the
per-call algorithm lines, ``synth.measure.nccl_env``), as ``synth doctor`` does.

Rows ``synth doctor`` flags as far slower than the machine should be (under the defaults), and
0-byte rows timed under 5 us (no call made), are left out of every figure and listed. A GPU
generation with defaults of its own (``ARCH_DEFAULTS``: Blackwell, CDNA4) is fitted on its runs
only, on top of the others' fit (``fit_all``); the A4 two-node allgather run is costed but fitted
by nothing (SOURCES.md doubts it; doctor finds 20 of its 24 rows slower than the machine). The H200 pair
runs NCCL over RoCE with GPUDirect RDMA; its small sizes match the ib hop, not the roce one
(76-101 us: RCCL's two-MI300X run, the only other RoCE run with small sizes), so it is costed as
ib. ``--fit-defaults`` fits every parameter but ``HELD`` to all
shared runs at once and prints the values (how DEFAULTS were set).

    python benchmarks/model_vs_measured.py [--logs DIR] [--fit-defaults] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from synth.baselines.nccl import nccl_setup
from synth.baselines.nccl_model import PROTOCOLS, applies, predicted_us, with_nvls
from synth.core.library import resolve_topology
from synth.core.subset import parse_ranks, sub_topology
from synth.measure import doctor
from synth.measure.calibration import ARCH_DEFAULTS, DEFAULTS, Calibration
from synth.measure.fit import Measured, allowed_for, fit, fitted_names, model_us, setup_of
from synth.measure.logs import read_runs
from synth.measure.runtime import Launch, available, describe, parse_launch
from synth.measure.symmetric import eligible, pick

LOGS = Path(__file__).resolve().parents[2] / "shared" / "nccl-tests-logs"


@dataclass(frozen=True)
class Spec:
    """Which library machine a shared run was made on (SOURCES.md), and how."""

    file: str
    run: int
    topology: str
    kind: str
    ranks: str | None = None
    transport: str = "ib"
    nic_gbps: float | None = None  # per machine, where the run's NICs differ from the library's
    settings: tuple[tuple[str, str], ...] = ()  # NCCL settings that override the log's (SOURCES.md says why)
    collective: str | None = None  # where the log does not name its test
    fitted: bool = True  # False: costed, but not used to fit the defaults (SOURCES.md doubts the run)
    launch: str | None = None  # where the log does not say (synth doctor --launch)


SPECS = (
    Spec("dgx1-v100-8gpu-allreduce-1.txt", 0, "dgx1", "V100"),
    Spec("dgx2-v100-12gpu-allreduce-1.txt", 0, "dgx2", "V100", ranks="0-11"),
    Spec("dgx2-v100-12gpu-allgather-1.txt", 0, "dgx2", "V100", ranks="0-11"),
    Spec("h100-8gpu-allreduce-1.txt", 0, "h100", "H100"),
    Spec("h100-2node-16gpu-allreduce-1.txt", 0, "h100x2", "H100", transport="tcp", nic_gbps=200.0),
    Spec("h100-2node-16gpu-allreduce-2.txt", 0, "h100x2", "H100"),
    Spec("a100-8gpu-allreduce-1.txt", 0, "a100", "A100"),
    Spec("a100-8gpu-allreduce-2.txt", 0, "a100", "A100"),
    Spec("a100-8gpu-and-2node-allreduce-oci.txt", 0, "a100", "A100"),
    Spec("a100-8gpu-and-2node-allreduce-oci.txt", 1, "a100x2", "A100", transport="roce"),
    Spec("a100-8gpu-and-2node-allreduce-oci-ubuntu.txt", 0, "a100", "A100"),
    Spec("a100-8gpu-and-2node-allreduce-oci-ubuntu.txt", 1, "a100x2", "A100", transport="roce"),
    Spec("mi300x-8gpu-allreduce-1.txt", 0, "mi300x", "MI300X"),
    Spec("mi300x-8gpu-allreduce-2.txt", 0, "mi300x", "MI300X"),
    Spec("mi300x-2node-16gpu-allreduce-1.txt", 0, "mi300xx2", "MI300X", transport="roce"),
    Spec("mi250-16gcd-allreduce-excerpt.txt", 0, "mi250", "MI250"),
    Spec("h100-8gpu-allreduce-nvls-1.txt", 0, "h100", "H100"),
    Spec("h100-8gpu-allreduce-ring-1.txt", 0, "h100", "H100"),
    Spec("h100-8gpu-allgather-nvlsenabled-1.txt", 0, "h100", "H100"),
    Spec("h100-2gpu-allreduce-nvls-forced-1.txt", 0, "h100", "H100", ranks="0-1"),
    Spec("h100-2gpu-allreduce-ring-1.txt", 0, "h100", "H100", ranks="0-1"),
    Spec("h100-4gpu-allreduce-nvls-forced-1.txt", 0, "h100", "H100", ranks="0-3"),
    Spec("h100-4gpu-allreduce-ring-1.txt", 0, "h100", "H100", ranks="0-3"),
    Spec("h100-4gpu-allreduce-auto-ring-1.txt", 0, "h100", "H100", ranks="0-3"),
    Spec("h200-2node-16gpu-allreduce-roce-1.txt", 0, "h100x2", "H100"),  # RoCE, costed as ib (the module)
    # Blackwell (ARCH_DEFAULTS["blackwell"]): HGX boards, NVL72 trays and racks
    Spec("b200-gcp-a4-8gpu-allreduce-abbrev-1.txt", 0, "a4", "B200"),
    Spec("b300-8gpu-allreduce-oci-excerpt-1.txt", 0, "oci-b300", "B300"),
    # "probably not a clean baseline" (SOURCES.md): 260 GB/s busbw on 400 GB/s of NICs per node
    Spec("b200-gcp-a4-2node-16gpu-allgather-1.txt", 0, "a4x2", "B200", transport="roce", collective="allgather",
         fitted=False),
    Spec("gb200-nvl72-4gpu-1node-allreduce-oci-excerpt-1.txt", 0, "gb200nvl72", "GB200", ranks="0-3"),
    # NVLS state disputed; probably on (in-network.md section 8): costed with NVLS
    Spec("gb200-nvl72-72gpu-allreduce-1.txt", 0, "gb200nvl72", "GB200", settings=(("NCCL_NVLS_ENABLE", "1"),)),
    Spec("gb200-nvl72-128gpu-2rack-allreduce-oci-1.txt", 0, "oci-gb200-v3.4x2", "GB200", ranks="0-63,72-135",
         transport="roce"),
    Spec("gb300-nvl72-4gpu-1node-allreduce-nvls-oci-excerpt-1.txt", 0, "oci-gb300", "GB300", ranks="0-3"),
    Spec("gb300-nvl72-64gpu-16node-allreduce-nvls-oci-excerpt-1.txt", 0, "oci-gb300", "GB300", ranks="0-63"),
    # CDNA4 (ARCH_DEFAULTS["cdna4"])
    Spec("mi355x-8gpu-allreduce-oci-pollara-excerpt-1.txt", 0, "mi355x", "MI355X"),
    Spec("mi355x-2node-16gpu-allreduce-1.txt", 0, "mi355xx2", "MI355X", transport="roce"),
    # NCCL 2.27-2.30: registration (-R), symmetric kernels, CUDA graphs (the logs' headers and prose)
    Spec("h200-8gpu-allreduce-default-R0-1.txt", 0, "h200", "H200"),
    Spec("h200-8gpu-allreduce-symmetric-R2-1.txt", 0, "h200", "H200"),
    Spec("h200-8gpu-allreduce-symmetric-R2-graph-1.txt", 0, "h200", "H200"),
    Spec("h200-8gpu-allreduce-default-symnowin0-1.txt", 0, "h200", "H200"),
    Spec("h200-8gpu-nccl-allreduce-ring-nonvls-1.txt", 0, "h200", "H200"),
    Spec("h200-8gpu-nccl-alltoall-fair-1.txt", 0, "h200", "H200"),
    Spec("h200-2node-16gpu-allreduce-default-R0-1.txt", 0, "h200x2", "H200"),
    Spec("b200-8gpu-allreduce-symmetric-R2-1.txt", 0, "b200", "B200"),
    # launch not in the excerpt: its 32-35 us floor, flat from 1 to 32 KiB, is the -g 8 eager floor
    # (31.8-40.4 us on the H200 runs), 2-3x what one process per GPU takes
    Spec("h100-8gpu-allreduce-default-excerpt-1.txt", 0, "h100", "H100", collective="allreduce", launch="threads:8"),
)
NO_CALL_US = 5.0
MODELS = ("default", "held out", "calibrated", "nccl model")
DEFAULTS_PRIOR = 0.05
# Terms the shared runs cannot separate from others, held when the defaults are fitted: NVLS's
# latency (NCCL's 25 us) trades against Simple's fill on the one run that lets NCCL pick NVLS at
# mid sizes (the -g 8 launch floor hides it below 2 MiB), and a free fit drives it to ~1 us; the
# channel terms trade against latency_scale and the launch floor (a free fit moves the LL
# threshold off NCCL's 32 KiB, which makes the modelled time fall where the channel count steps).
HELD = ("nvls_latency_us", "channel_gbps_ll", "channel_gbps_ll128", "channel_gbps_simple", "channel_bytes_ll",
        "channel_bytes_ll128", "channel_bytes_simple", "max_channels",
        # NCCL's own values (its symmetric latencies, its unscaled latencies under a graph), and what no
        # run separates (a graph's kernel-node floor from a kernel's latency) or measures (copy engines)
        "sym_ll_us", "sym_ldst_us", "latency_scale_graph", "launch_graph_us", "ce_sync_us")
FITTED = tuple(name for name in DEFAULTS if name not in HELD)
# What a GPU generation with its own defaults (ARCH_DEFAULTS) fits on its runs, on top of the base
# fit: the links' and the switch's efficiency, NVLSTree's head cap, the RoCE stack's hop, the latency.
# NCCL's own constant where the shared runs cannot pin it (NVLSTree's per-head cap on Blackwell: 43.8
# GB/s in NCCL 2.29; a free fit trades it against the ring on the one two-rack run)
ARCH_HELD = {"blackwell": ("nvls_tree_channel_gbps",)}
ARCH_FITTED = ("efficiency_nvlink", "efficiency_xgmi", "efficiency_nvls", "efficiency_net", "nvls_tree_channel_gbps",
               "network_hop_us_roce", "latency_scale")
REGIMES = ("1 machine, < 64 KiB", "1 machine, 64 KiB - 64 MiB", "1 machine, >= 64 MiB",
           "2+ machines, < 64 MiB", "2+ machines, >= 64 MiB")


def regime(machines: int, size: float) -> str:
    """The regime of a (run, size) point, as the issue's table names them."""
    if machines > 1:
        return REGIMES[3] if size < 64 * 2**20 else REGIMES[4]
    return REGIMES[0] if size < 64 * 2**10 else REGIMES[1] if size < 64 * 2**20 else REGIMES[2]


def load(spec: Spec, logs: Path) -> Measured:
    """The shared run as a Measured (its topology, launch mode and rows)."""
    run = read_runs(logs / spec.file)[spec.run]
    topology = resolve_topology(spec.topology)
    if spec.ranks:
        topology = sub_topology(topology, parse_ranks(spec.ranks, topology.ranks))
    machine = describe(topology)
    if spec.nic_gbps is not None:
        machine = dataclasses.replace(machine, nic_gbps=spec.nic_gbps)
    launch = parse_launch(spec.launch) or Launch(run.launch, run.gpus_per_thread, run.graph > 0)
    rows = tuple((float(r.size_bytes), r.time_us) for r in run.rows)
    collective = run.collective or spec.collective or "allreduce"
    allowed, chosen = allowed_for(run, collective, machine, dict(spec.settings), where=spec.file)
    return Measured(f"{spec.file}#{spec.run}", collective, machine, launch, spec.transport, rows, allowed, chosen,
                    setup_of(run))


def healthy(run: Measured) -> tuple[Measured, list]:
    """The run without the rows doctor flags (under the defaults) and without 0-byte rows that
    took less than ``NO_CALL_US`` (nccl-tests >= 2.17 makes no call for 0 bytes), and those rows."""
    flagged = {row.size_bytes for row in doctor.unhealthy(doctor.rows(run, Calibration()))}
    flagged |= {0 for size, took in run.rows if size == 0 and took < NO_CALL_US}
    kept = tuple(r for r in run.rows if int(r[0]) not in flagged)
    return dataclasses.replace(run, rows=kept), [int(r[0]) for r in run.rows if int(r[0]) in flagged]


def nccl_setup_of(spec: Spec, run: Measured):
    """NCCL's tuning-model setup for this run: its ranks and machines, one channel of the
    machine's ring (or NIC) bandwidth, and NVLS's graph where the machine has NVLS."""
    setup, _ = nccl_setup(resolve_topology(spec.topology), run.collective, 1)
    gbps = run.machine.ring_gbps if run.machine.machines == 1 else min(run.machine.ring_gbps, run.machine.nic_gbps)
    setup = dataclasses.replace(setup, ranks=run.machine.ranks, machines=run.machine.machines, channel_gbps=gbps)
    if run.machine.nvls_domains:
        setup = with_nvls(setup, nic_gbps=run.machine.nic_gbps / run.machine.per_machine or None)
    return setup


def nccl_own(setup, run: Measured, size: float) -> float | None:
    """NCCL's own tuning model's pick at this size among what the run allowed (no launch cost);
    where NCCL takes a symmetric kernel before its tuner (a registered window), its own estimate
    of that kernel (``synth.measure.symmetric.pick``)."""
    allowed = run.allowed_at(size)
    if run.setup.registration == "symmetric":
        version = run.setup.version or Calibration().nccl_version
        kernels = eligible(run.machine, run.collective, run.setup, version, allowed.nvls is not False)
        chosen = pick(kernels, size, run.machine.ranks, run.machine.arch) if kernels else None
        if chosen is not None:
            return chosen.nccl_us
    algorithms = [a for a in ("ring", "tree", "nvls", "nvls_tree")
                  if a in available(run.machine, run.collective) and allowed.permits(a)]
    times = [predicted_us(setup, algo, proto, size) for algo in algorithms for proto in PROTOCOLS
             if applies(setup, algo, proto) and allowed.permits_protocol(proto)]
    return min(times) if times else None  # alltoall: NCCL's tuning model has no formula for it


def own_arch(run: Measured) -> str | None:
    """The run's GPU generation where it has defaults of its own (ARCH_DEFAULTS), else None."""
    return run.machine.arch if run.machine.arch in ARCH_DEFAULTS else None


def fit_all(runs: list[Measured], arch: str | None = None) -> Calibration:
    """The defaults fitted to ``runs``: ``FITTED`` on the runs of generations without defaults of
    their own, then, for ``arch`` (one with its own), ``ARCH_FITTED`` on that generation's runs."""
    base = fit([r for r in runs if own_arch(r) is None], Calibration(), names=FITTED, prior=DEFAULTS_PRIOR)
    group = [r for r in runs if arch is not None and own_arch(r) == arch]
    if not group:
        return base
    held = ARCH_HELD.get(arch, ())
    names = tuple(name for name in fitted_names(group) if name in ARCH_FITTED and name not in held)
    base = base.with_parameters(**{name: ARCH_DEFAULTS[arch][name] for name in held})
    return fit(group, base, names=names, prior=DEFAULTS_PRIOR)


def evaluate(logs: Path) -> dict:
    """Every point's model/measured under the three models, per run and regime."""
    runs = {spec: healthy(load(spec, logs)) for spec in SPECS}
    points, per_run, flagged = [], [], []
    for spec, (run, dropped) in runs.items():
        others = [r for s, (r, _) in runs.items() if s != spec and s.fitted and r.rows]
        held_out = fit_all(others, own_arch(run))
        siblings = [r for s, (r, _) in runs.items() if s.kind == spec.kind and s != spec and s.fitted and r.rows]
        cal = fit(siblings, held_out) if siblings else held_out
        flagged.extend({"run": run.source, "size_bytes": s} for s in dropped)
        ratios = {key: [] for key in MODELS}
        setup = nccl_setup_of(spec, run)
        for size, took in run.rows:
            point = {"run": run.source, "size_bytes": size, "regime": regime(run.machine.machines, size),
                     "default": model_us(run, size, Calibration()) / took,
                     "held out": model_us(run, size, held_out) / took,
                     "calibrated": model_us(run, size, cal) / took,
                     "nccl model": _over(nccl_own(setup, run, size), took),
                     "calibrated_from_siblings": bool(siblings)}
            points.append(point)
            for key in ratios:
                if point[key] is not None:
                    ratios[key].append(point[key])
        mode = "graph" if run.launch.graph else run.launch.mode
        per_run.append({"run": run.source, "topology": run.machine.name, "launch": mode,
                        "points": len(run.rows), "siblings": len(siblings),
                        **{key: _summary(values) for key, values in ratios.items()}})
    regimes = {name: {key: _summary([p[key] for p in points if p["regime"] == name and p[key] is not None])
                      for key in MODELS} for name in REGIMES}
    overall = {key: _summary([p[key] for p in points if p[key] is not None]) for key in MODELS}
    return {"runs": per_run, "regimes": regimes, "all": overall, "flagged": flagged, "points": points}


def _over(model: float | None, took: float) -> float | None:
    return None if model is None else model / took


def _summary(ratios: list[float]) -> dict:
    if not ratios:
        return {"points": 0, "within_1_3": None, "geo_mean": None}
    within = sum(1 for r in ratios if 1 / 1.3 <= r <= 1.3) / len(ratios)
    return {"points": len(ratios), "within_1_3": round(within, 3),
            "geo_mean": round(math.exp(sum(math.log(r) for r in ratios) / len(ratios)), 3)}


def fit_defaults(logs: Path) -> dict[str | None, Calibration]:
    """Every parameter but ``HELD`` fitted to every shared run of the generations without defaults
    of their own (DEFAULTS, key None), then each generation of ARCH_DEFAULTS on its runs."""
    runs = [healthy(load(spec, logs))[0] for spec in SPECS if spec.fitted]
    return {arch: fit_all(runs, arch) for arch in (None, *ARCH_DEFAULTS)}


def _cell(s: dict) -> str:
    if not s["points"]:
        return "- | -"
    return f"{100 * s['within_1_3']:.0f}% | {s['geo_mean']:.2f}"


def print_tables(result: dict) -> None:
    heads = " | ".join(f"{m}: within 1.3x | geo-mean" for m in MODELS)
    print(f"| regime | points | {heads} |")
    print("|---|---|" + "---|---|" * len(MODELS))
    for name, s in [*result["regimes"].items(), ("all", result["all"])]:
        print(f"| {name} | {s['default']['points']} | " + " | ".join(_cell(s[m]) for m in MODELS) + " |")
    print()
    print("| run | topology | launch | points | siblings | " + " | ".join(MODELS) + " |")
    print("|---|---|---|---|---|" + "---|" * len(MODELS))
    for r in result["runs"]:
        print(f"| {r['run']} | {r['topology']} | {r['launch']} | {r['points']} | {r['siblings']} | "
              + " | ".join(_cell(r[m]).replace(" | ", " / ") for m in MODELS) + " |")
    if result["flagged"]:
        by_run: dict = {}
        for f in result["flagged"]:
            by_run.setdefault(f["run"], []).append(f["size_bytes"])
        print()
        for run, sizes in by_run.items():
            print(f"left out (doctor: far slower than the machine should be; 0-byte rows nccl-tests made no "
                  f"call for): {run}: {len(sizes)} rows, {min(sizes)} .. {max(sizes)} bytes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, default=LOGS)
    parser.add_argument("--fit-defaults", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.fit_defaults:
        fitted = fit_defaults(args.logs)
        base = fitted[None].values()
        doc = {"defaults": {k: v if k in HELD else float(f"{v:.4g}") for k, v in base.items()}}
        for arch, cal in fitted.items():
            if arch is not None:
                doc[arch] = {k: float(f"{v:.4g}") for k, v in cal.values().items() if k in cal.parameters
                             and k in ARCH_FITTED and f"{v:.4g}" != f"{base[k]:.4g}"}
        print(json.dumps(doc, indent=1))
        return 0
    result = evaluate(args.logs)
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "points"}, indent=1))
    else:
        print_tables(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
