"""``synth.calibration`` v1: the runtime terms of the cost model, fitted from measurements.

The ideal model (DESIGN.md) is what the links allow. A real runtime reaches less, and the
difference decides which schedule wins at which size. These named terms say how much less; the
formulas that use them are in ``synth.measure.runtime`` and docs/cost-model.md. Units as
everywhere: us, GB/s, bytes.

A document::

    {"format": "synth.calibration", "version": 1, "topology": "h100", "transport": "ib",
     "parameters": {"efficiency_nvlink": 0.81, ...},      # any subset; the rest take DEFAULTS
     "sources": [{"file": ..., "rows": 31, "collective": "allreduce", "launch": "threads"}],
     "fit": [{"file": ..., "size_bytes": 1048576, "measured_us": 46.5, "model_us": 44.0}, ...]}

>>> cal = Calibration.from_doc({"format": "synth.calibration", "version": 1,
...                             "parameters": {"efficiency_nvlink": 0.8}}, "x.json")
>>> cal.get("efficiency_nvlink"), cal.get("fill_us") == DEFAULTS["fill_us"]
(0.8, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from synth.core.errors import InputError
from synth.core.io import read_json
from synth.core.topology import LINK_KINDS
from synth.cost import RUNTIME_PROTOCOLS, RuntimeTerms

FORMAT = "synth.calibration"
VERSION = 1
TRANSPORTS = ("ib", "roce", "tcp")
DEFAULT_NAME = "default"  # --calibration default: the DEFAULTS below
DEFAULT_NCCL = "2.30.4"  # the newest NCCL the model follows (reference/nccl-symmetric.md)

# Fitted to every shared run at once (benchmarks/model_vs_measured.py --fit-defaults), but for the
# terms it holds (NVLS's latency, the channel caps and thresholds: NCCL's values).
DEFAULTS: Mapping[str, float] = {
    # CPU cost of one call: the measured time never goes below it (calls queue behind it)
    "launch_process_us": 12.0,        # one process per GPU
    "launch_thread_gpu_us": 5.022,    # per GPU when one thread drives several (nccl-tests -g N)
    # a call replayed from a CUDA graph (nccl-tests -G N): the GPU's cost of one kernel node, no CPU
    # (no run separates it from a kernel's own latency; the fastest graph row, B200's 3.1 us, bounds it)
    "launch_graph_us": 2.0,
    # NCCL's symmetric-memory kernels (2.27+, synth.measure.symmetric): each class's latency, NCCL's
    # own Hopper constants (sym_kernels.cc: LL 4.5 us, the others 7.8 us) but the multicast class,
    # whose barriers are one multimem.red each (H200 graph run: 5.7-6.3 us from 32 KiB to 256 KiB)
    "sym_ll_us": 4.5,
    "sym_ldst_us": 7.8,
    "sym_mc_us": 6.0,
    # share of NVLink's line rate SM loads and stores to peers reach (two-shot allreduce: 289 GB/s
    # busbw of 450 on H200, the one run of it; NCCL's Simple copies reach efficiency_nvlink)
    "efficiency_ldst": 0.642,
    # copy-engine collectives (2.28+): one all-to-all flag round (two per call); no run measures it
    "ce_sync_us": 5.0,
    # share of a link's line rate that bulk (Simple) transfers reach, per link kind
    "efficiency_nvlink": 0.7768,
    "efficiency_xgmi": 0.8634,
    "efficiency_pcie": 0.74,
    "efficiency_net": 0.8288,
    # NCCL's base and per-hop latencies (reference/nccl-model.md) times this
    "latency_scale": 1.32,
    # ... and for a call replayed from a CUDA graph: NCCL's own values (the eager scale carries the
    # host's work per call, which a replay does not do; the H200 alltoall graph run: 5.7 us at 1 KiB)
    "latency_scale_graph": 1.0,
    # added (unscaled) to NCCL's network hop latency per inter-machine hop, by transport
    "network_hop_us_ib": 6.829,
    "network_hop_us_roce": 101.0,
    "network_hop_us_tcp": 52.99,
    # bus bandwidth one channel (thread block) moves, per protocol
    "channel_gbps_ll": 23.6,
    "channel_gbps_ll128": 20.0,
    "channel_gbps_simple": 25.0,
    # bytes of the call per channel NCCL uses before it adds another channel, per protocol
    "channel_bytes_ll": 32768.0,
    "channel_bytes_ll128": 40960.0,
    "channel_bytes_simple": 262144.0,
    "max_channels": 32.0,
    # NCCL's tree across machines: bandwidth per channel (16 channels)
    "tree_channel_gbps": 14.6,
    # Simple's pipeline fill: grows with the size up to fill_us at fill_bytes
    "fill_us": 51.24,
    "fill_bytes": 13600000.0,
    # NVLS (NVLink SHARP in the NVSwitch): the share of a switch port's line rate its traffic
    # reaches ((n+1)/n of the buffer each way per port in allreduce; fitted to the shared H100 runs
    # of 2, 4 and 8 GPUs, 308-314 GB/s of 450, reference/in-network.md section 7; NCCL's own
    # constant is nvlsEfficiency 0.85 of its 370.8; Blackwell's ~542 GB/s of 900 is ~0.60: calibrate)
    "efficiency_nvls": 0.689,
    # NVLS's NVLink latency per call (NCCL's hwLat: 25 us), not scaled by latency_scale; held at
    # NCCL's value when the defaults are fitted (benchmarks/model_vs_measured.py HELD)
    "nvls_latency_us": 25.0,
    # NVLSTree on two machines: bus bandwidth per NVLS head (NCCL's perChMaxNVLSTreeBw, Hopper
    # 57.7; fitted to the two-H200 run, 485.7 GB/s busbw at 16 GiB; beyond two machines x 45.5/57.7,
    # NCCL's ratio)
    "nvls_tree_channel_gbps": 57.09,
}
FRACTIONS = frozenset(name for name in DEFAULTS if name.startswith("efficiency_"))

# Where a GPU generation's runtime differs from DEFAULTS (fitted to the Volta, Ampere, Hopper and
# CDNA2-3 runs), the terms that generation defaults to, fitted to its own shared runs
# (benchmarks/model_vs_measured.py --fit-defaults fits each group; docs/cost-model.md). A
# topology's ``arch`` picks them; a calibration's own parameters still win.
ARCH_DEFAULTS: Mapping[str, Mapping[str, float]] = {
    "blackwell": {  # B200 / B300 boards, GB200 / GB300 trays and racks (8 runs)
        "efficiency_nvlink": 0.7183,
        # NVLS per switch port: 0.52 of NVLink5's line rate (NCCL's nvlsEfficiency: 0.74 of its 721.8)
        "efficiency_nvls": 0.5157,
        "network_hop_us_roce": 64.03,  # OCI's and Google's RoCE stacks (GB200 racks, A4)
        # NVLSTree's bus bandwidth per head (NCCL 2.29's perChMaxNVLSTreeBw for Blackwell, 2 nodes;
        # held at NCCL's value: the one two-rack run cannot separate it from the ring)
        "nvls_tree_channel_gbps": 43.8,
        # symmetric kernels on B200 (NCCL's Blackwell constants, LL 11 us and multicast 19.5 us, are
        # 3x what the B200 run measures: 3.2-3.8 us up to 32 KiB, 8.3-9.7 us for multicast to 512 KiB);
        # load/store: no run, NCCL's Hopper gap between the classes added to the multicast latency
        "sym_ll_us": 3.0,
        "sym_mc_us": 8.0,
        "sym_ldst_us": 9.8,
    },
    "cdna4": {  # MI355X (2 runs)
        "efficiency_xgmi": 0.8883,
        "efficiency_net": 0.8388,
        "network_hop_us_roce": 7.09,  # Pensando Pollara 400 with RCCL's ANP plugin
    },
}


@dataclass(frozen=True)
class Calibration:
    """Named runtime terms (a subset of DEFAULTS' names; the rest take the defaults), with the
    runs they were fitted from and the residual of every row."""

    parameters: Mapping[str, float] = field(default_factory=dict)
    topology: str | None = None
    sources: tuple[Mapping[str, Any], ...] = ()
    fit: tuple[Mapping[str, Any], ...] = ()
    excluded: tuple[Mapping[str, Any], ...] = ()
    transport: str = "ib"
    arch: str | None = None
    nccl: str | None = None  # the NCCL version it models, "2.30.4" (None: DEFAULT_NCCL)

    @property
    def nccl_version(self) -> tuple[int, int, int]:
        """The NCCL version this calibration models (what decides its symmetric kernels and
        copy-engine collectives where a run does not print its own)."""
        from synth.measure.symmetric import version_tuple

        return version_tuple(self.nccl or DEFAULT_NCCL)

    def get(self, name: str) -> float:
        """The value of ``name``: this calibration's, else its architecture's default (``on``),
        else the default."""
        if name in self.parameters:
            return float(self.parameters[name])
        return float(ARCH_DEFAULTS.get(self.arch or "", {}).get(name, DEFAULTS[name]))

    def on(self, arch: str | None) -> "Calibration":
        """This calibration applied to a machine of GPU generation ``arch`` (a topology's
        ``arch``; None: unknown): the parameters it does not set take that generation's defaults."""
        return self if arch == self.arch else replace(self, arch=arch)

    def values(self) -> dict[str, float]:
        """Every parameter, defaults filled in."""
        return {name: self.get(name) for name in DEFAULTS}

    def with_parameters(self, **values: float) -> "Calibration":
        """A copy with some parameters set (validated)."""
        merged = dict(self.parameters)
        merged.update(values)
        _check_parameters(merged, "calibration")
        return replace(self, parameters=merged)

    def terms(self, label: str = "default", graph: bool = False, symmetric: bool = False) -> RuntimeTerms:
        """The runtime terms every schedule pays under this calibration (``synth.cost``): the
        launch floor of one process per GPU (``graph``: of a call replayed from a CUDA graph, whose
        latencies scale by ``latency_scale_graph``),
        network hops over this calibration's transport; an NVLink switch's ports (cost kind
        ``nvls``) at ``efficiency_nvls``, a network switch's (``sharp``) at ``efficiency_net``; a
        call with switch entries takes at least ``nvls_latency_us``. The least a call adds (what
        bounds charge, ``RuntimeTerms.fastest_call_us``): from a graph nothing beyond the links'
        own latency (a replayed kernel has no CPU cost, and no floor is measured below every
        graph row: B200's symmetric kernel takes 3.1 us, 2.3 us is reported on H200); eagerly on
        a machine where NCCL runs its symmetric kernels (``symmetric``), ``sym_ll_us`` where
        that is less than the protocols' own."""
        return RuntimeTerms(
            label=label, latency_scale=self.get("latency_scale_graph" if graph else "latency_scale"),
            efficiency={**{kind: self.get(f"efficiency_{kind}") for kind in LINK_KINDS},
                        "nvls": self.get("efficiency_nvls")},
            net_hop_us=self.get(f"network_hop_us_{self.transport}"),
            channel_gbps={p: self.get(f"channel_gbps_{p}") for p in RUNTIME_PROTOCOLS},
            channel_bytes={p: self.get(f"channel_bytes_{p}") for p in RUNTIME_PROTOCOLS},
            max_channels=int(self.get("max_channels")), fill_us=self.get("fill_us"),
            fill_bytes=self.get("fill_bytes"),
            launch_us=self.get("launch_graph_us" if graph else "launch_process_us"),
            switch_floor_us=self.get("nvls_latency_us"),
            call_floor_us=0.0 if graph else (self.get("sym_ll_us") if symmetric else None))

    def to_doc(self) -> dict[str, Any]:
        """The ``synth.calibration`` v1 document."""
        doc: dict[str, Any] = {"format": FORMAT, "version": VERSION, "topology": self.topology,
                               "transport": self.transport, "nccl": self.nccl or DEFAULT_NCCL,
                               "parameters": {k: _rounded(v) for k, v in sorted(self.parameters.items())},
                               "sources": [dict(s) for s in self.sources], "fit": [dict(r) for r in self.fit]}
        if self.excluded:
            doc["excluded"] = [dict(r) for r in self.excluded]
        return doc

    @classmethod
    def from_doc(cls, doc: Any, where: str) -> "Calibration":
        """Read and validate a document; every problem is one InputError line naming ``where``."""
        if not isinstance(doc, dict):
            raise InputError(f"{where}: not a {FORMAT} document (expected a JSON object)")
        if doc.get("format") != FORMAT:
            raise InputError(f"{where}: format is {doc.get('format')!r}, expected {FORMAT!r}")
        if type(doc.get("version")) is not int or doc["version"] != VERSION:
            raise InputError(f"{where}: {FORMAT} version {doc.get('version')!r} is not supported (expected {VERSION})")
        parameters = doc.get("parameters", {})
        if not isinstance(parameters, dict):
            raise InputError(f"{where}: 'parameters' must be an object")
        _check_parameters(parameters, where)
        topology = doc.get("topology")
        if topology is not None and not isinstance(topology, str):
            raise InputError(f"{where}: 'topology' must be a string")
        transport = doc.get("transport", "ib")
        if transport not in TRANSPORTS:
            raise InputError(f"{where}: 'transport' is {transport!r}; known: {', '.join(TRANSPORTS)}")
        nccl = doc.get("nccl")
        if nccl is not None and not (isinstance(nccl, str) and _version_text(nccl)):
            raise InputError(f"{where}: 'nccl' is {nccl!r}; expected an NCCL version such as \"2.30.4\"")
        lists = {}
        for key in ("sources", "fit", "excluded"):
            items = doc.get(key, [])
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise InputError(f"{where}: {key!r} must be a list of objects")
            lists[key] = tuple(items)
        return cls({k: float(v) for k, v in parameters.items()}, topology, **lists, transport=transport, nccl=nccl)


def load_calibration(path: str | Path | None) -> Calibration:
    """The calibration in ``path`` (None or ``default``: the defaults)."""
    if path is None or str(path) == DEFAULT_NAME:
        return Calibration()
    return Calibration.from_doc(read_json(path), str(path))


def load_terms(path: str | Path | None, arch: str | None = None, graph: bool = False) -> RuntimeTerms | None:
    """The runtime terms of the calibration in ``path`` on a machine of GPU generation ``arch``
    (``default``: the defaults of that generation; None: none, the contract model), for calls
    replayed from a CUDA graph where ``graph``."""
    if path is None:
        return None
    return load_calibration(path).on(arch).terms("default" if str(path) == DEFAULT_NAME else str(path), graph)


def _check_parameters(parameters: Mapping[str, Any], where: str) -> None:
    """Known names, finite positive numbers; efficiencies at most 1."""
    for name, value in parameters.items():
        if name not in DEFAULTS:
            raise InputError(f"{where}: unknown parameter {name!r}; known: {', '.join(DEFAULTS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"{where}: parameter {name!r} must be a finite number, got {value!r}")
        if value <= 0:
            raise InputError(f"{where}: parameter {name!r} must be positive, got {value!r}")
        if name in FRACTIONS and value > 1:
            raise InputError(f"{where}: parameter {name!r} is a share of line rate, at most 1, got {value!r}")


def _version_text(text: str) -> bool:
    """X.Y or X.Y.Z with numbers."""
    parts = text.split(".")
    return 2 <= len(parts) <= 3 and all(p.isdigit() and len(p) <= 4 for p in parts)


def _rounded(value: float) -> float:
    return float(f"{value:.6g}")
