"""Turn a topology spec into a Topology: library name, generator, composition or file path.

Specs:
  ``dgx1``                         a file of the library (topologies/NAME.json)
  ``ring:8`` ``torus:4x4`` ...     a generator (see synth.core.generators)
  ``a3-mega`` ``p5``               a cloud shape: a library machine with its provider's NICs (CLOUD_SHAPES)
  ``ndv2x2`` ``h100x16``           K copies of a library machine or cloud shape joined through its NICs
  ``h100x16+sharp``                the same, on a fabric whose switches aggregate (SHARP)
  ``path/to/t.json``               a synth.topology file (contains ``/`` or ends in ``.json``)

>>> resolve_topology("ring:4").ranks, resolve_topology("ndv2x2").machine_count
(4, 2)
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from synth.core import generators
from synth.core.compose import compose_machines
from synth.core.errors import InputError, TopologyError
from synth.core.io import load_topology_file
from synth.core.topology import MAX_RANKS, Topology

_DESCRIPTIONS = {
    "dgx1": "NVIDIA DGX-1, 8 V100, NVLink hybrid cube-mesh (25/50 GB/s links), no NICs",
    "ndv2": "Azure NDv2, dgx1 links plus one 12.5 GB/s IB NIC shared by the 8 GPUs",
    "dgx2": "NVIDIA DGX-2, 16 V100 behind NVSwitch (125 GB/s ports), 8 NICs of 12.5 GB/s",
    "a100": "DGX/HGX A100, 8 GPUs behind NVSwitch (300 GB/s ports), 8 NICs of 25 GB/s",
    "h100": "DGX/HGX H100, 8 GPUs behind NVSwitch (450 GB/s ports, NVLS: reduce + multicast), "
            "8 NICs of 50 GB/s",
    "mi250": "AMD MI250 node, 16 GCDs joined by xGMI (50 GB/s per link, x1/x2/x4), 16 NICs of 16 GB/s",
    "mi300x": "AMD MI300X platform, 8 GPUs fully connected by 64 GB/s xGMI links, 8 NICs of 50 GB/s",
    "h200": "HGX/DGX H200, the h100 board (450 GB/s NVSwitch ports, NVLS: reduce + multicast), "
            "8 NICs of 50 GB/s",
    "b200": "HGX/DGX B200, 8 GPUs at 900 GB/s (NVLink5; its 2 switch chips as one NVLS switch: reduce + "
            "multicast), 8 NICs of 50 GB/s",
    "b300": "HGX B300, the b200 fabric (900 GB/s, NVLS: reduce + multicast) with 8 NICs of 100 GB/s "
            "(800 Gb/s ConnectX-8)",
    "gb200nvl72": "GB200 NVL72 rack as one machine: 72 GPUs at 900 GB/s behind one NVLink switch domain "
                  "(NVLS across the rack: reduce + multicast), one 50 GB/s NIC per GPU",
    "gb300nvl72": "GB300 NVL72 rack, the gb200nvl72 fabric (reduce + multicast) with 100 GB/s of NICs per GPU "
                  "(OCI: 2 x 400 Gb/s)",
    "mi325x": "AMD MI325X platform, the mi300x fabric (64 GB/s xGMI per GPU pair, no switch), 8 NICs of 50 GB/s",
    "mi355x": "AMD MI355X platform, 8 GPUs fully connected by 76.8 GB/s xGMI links (7 per GPU, no switch), "
              "8 NICs of 50 GB/s",
}


@dataclass(frozen=True)
class CloudShape:
    """A rented variant of a library machine: the ``base`` board with the provider's NICs.

    The rule (``shape_topology``): the base topology renamed, each of its NICs replaced by one NIC
    on the same ranks, with the same alpha, at ``gpu_bandwidth`` GB/s per GPU it serves; the base's
    sources that start with ``NICs:`` replaced by ``nic_source`` and the shape's ``sources``. A
    provider's several NICs per GPU are one NIC at their summed rate: ``NAMExK`` joins machines with
    one fabric link per pair of ranks, so a rank behind two NICs cannot be composed, and the sum
    keeps what bounds and costs use (each GPU's injection rate), not striping over rails.
    ``transport`` names the provider's network (ib, roce, tcp, efa); ``description`` the provider's
    name for the shape and its NICs.
    """

    name: str
    base: str
    nic_gbps: float
    nics_per_gpu: int
    transport: str
    description: str
    sources: tuple[str, ...]

    @property
    def gpu_bandwidth(self) -> float:
        """GB/s per GPU and direction: the provider's NICs of one GPU together (Gb/s over 8)."""
        return self.nics_per_gpu * self.nic_gbps / 8

    @property
    def nic_source(self) -> str:
        """The source line that replaces the base's NIC lines."""
        each = f"{self.nics_per_gpu} x {self.nic_gbps:g} Gb/s" if self.nics_per_gpu > 1 else f"{self.nic_gbps:g} Gb/s"
        return (f"NICs: {self.description}: {each} per GPU = {self.gpu_bandwidth:g} GB/s per GPU per direction, "
                f"one NIC per GPU in the model; transport {self.transport} (synth.core.library.CloudShape)")

    def summary(self, base: Topology) -> str:
        """One line for ``synth topo list``: the shape, its base and how its NICs differ from the base's."""
        base_rates = sorted({nic.bandwidth / len(nic.ranks) for nic in base.nics})
        was = "/".join(f"{rate:g}" for rate in base_rates)
        change = "same rate as" if base_rates == [self.gpu_bandwidth] else f"not {was} GB/s as on"
        return (f"{self.description}: {self.base} with {self.gpu_bandwidth:g} GB/s of NICs per GPU ({change} "
                f"{self.base}), {self.transport}")


_MULTI_RAIL = ("several NICs per GPU modelled as one NIC at their summed rate (CloudShape): NAMExK cannot put a rank "
               "behind two NICs, and the sum is the GPU's injection rate that bounds and costs use; striping over "
               "the rails and per-NIC latency are not modelled")
_EFA_RAILS = "aws-ofi-nccl models {rails} rails x {rate} GB/s per GPU (machines-2026.md section 8, [C2])"
_PCIE_PAIRS = "2 GPUs and 2 NICs share each PCIe switch (machines-2026.md section 8, [C4]); not modelled"


def _shapes(*shapes: CloudShape) -> dict[str, CloudShape]:
    """The shapes by name."""
    return {shape.name: shape for shape in shapes}


# the rented variants a user can name: each its reference board with the provider's NICs (machines-2026.md
# section 8); a description is the provider's name for the shape and its NICs per node
CLOUD_SHAPES = _shapes(
    CloudShape("a3-mega", "h100", 200, 1, "tcp", "Google A3 Mega, 8 x 200 Gb/s GPUDirect-TCPXO",
               ("A3 Mega: 8 H100, 8 x 200 Gb/s GPUDirect-TCPXO (machines-2026.md section 8, [G2])",)),
    CloudShape("a3-ultra", "h200", 400, 1, "roce", "Google A3 Ultra, 8 x 400 Gb/s ConnectX-7 RoCE",
               ("A3 Ultra: 8 H200, 8 x 400 Gb/s CX-7 RoCE, GPUDirect RDMA, gIB plugin "
                "(machines-2026.md section 8, [G3])",)),
    CloudShape("a4", "b200", 400, 1, "roce", "Google A4, 8 x 400 Gb/s ConnectX-7 RoCE",
               ("A4: 8 B200, 8 x 400 Gb/s CX-7 RoCE (machines-2026.md section 8, [M7])", _PCIE_PAIRS)),
    CloudShape("p5", "h100", 100, 4, "efa", "AWS p5, 32 x 100 Gb/s EFAv2",
               ("p5: 8 H100, 32 x 100 Gb/s EFAv2 = 3200 Gb/s, 4 NICs per GPU (machines-2026.md section 8, [C1, C2])",
                _MULTI_RAIL, _EFA_RAILS.format(rails=4, rate=12.5))),
    CloudShape("p5e", "h200", 100, 4, "efa", "AWS p5e, 32 x 100 Gb/s EFAv2",
               ("p5e: 8 H200 with the 32 x 100 Gb/s EFAv2 of p5 (machines-2026.md section 8, [C1, C2])",
                _MULTI_RAIL, _EFA_RAILS.format(rails=4, rate=12.5))),
    CloudShape("p5en", "h200", 200, 2, "efa", "AWS p5en, 16 x 200 Gb/s EFAv3",
               ("p5en: 8 H200, 16 x 200 Gb/s EFAv3, 2 NICs per GPU (machines-2026.md section 8, [C1, C2])",
                _MULTI_RAIL, _EFA_RAILS.format(rails=2, rate=25), _PCIE_PAIRS)),
    CloudShape("p6-b200", "b200", 400, 1, "efa", "AWS p6-b200, 3200 Gb/s EFA",
               ("p6-b200: 8 B200, 3200 Gb/s EFA = 400 Gb/s per GPU (machines-2026.md section 8, [C3, C4])",
                _PCIE_PAIRS)),
    CloudShape("nd-h100-v5", "h100", 400, 1, "ib", "Azure ND H100 v5, 8 x 400 Gb/s NDR InfiniBand",
               ("ND H100 v5: 8 H100, 8 x 400 Gb/s NDR InfiniBand CX-7, 1 per GPU "
                "(machines-2026.md section 8, [Z3])",)),
    CloudShape("nd-h200-v5", "h200", 400, 1, "ib", "Azure ND H200 v5, 8 x 400 Gb/s NDR InfiniBand",
               ("ND H200 v5: 8 H200, 8 x 400 Gb/s NDR InfiniBand CX-7, 1 per GPU "
                "(machines-2026.md section 8, [Z3])",)),
    CloudShape("nd-mi300x-v5", "mi300x", 400, 1, "ib", "Azure ND MI300X v5, 8 x 400 Gb/s NDR InfiniBand",
               ("ND MI300X v5: 8 MI300X, 8 x 400 Gb/s NDR InfiniBand CX-7, 1 per GPU "
                "(machines-2026.md section 8, [Z3])",)),
    CloudShape("oci-b300", "b300", 400, 2, "roce", "OCI BM.GPU.B300.8, 8 x 2 x 400 Gb/s RoCE",
               ("BM.GPU.B300.8: 8 B300, 8 x 2 x 400 Gb/s = 6.4 Tb/s RoCE (machines-2026.md section 8, [O1])",
                _MULTI_RAIL)),
    CloudShape("oci-gb200-v3.4", "gb200nvl72", 400, 2, "roce",
               "OCI BM.GPU.GB200-v3.4, 8 x 400 Gb/s RoCE per 4-GPU tray",
               ("BM.GPU.GB200-v3.4: 4 GB200 per host in NVL72 racks, 8 x 400 Gb/s RoCE per host = 2 per GPU "
                "(machines-2026.md section 8, [O2]; section 4, [O2])", _MULTI_RAIL)),
    CloudShape("oci-gb300", "gb300nvl72", 400, 2, "roce", "OCI BM.GPU.GB300.4, 8 x 400 Gb/s RoCE per 4-GPU tray",
               ("BM.GPU.GB300.4: 4 GB300 per host in NVL72 racks, 8 x 400 Gb/s RoCE per host = 2 per GPU "
                "(machines-2026.md section 8, [O3])", _MULTI_RAIL)),
)


# generator name -> (builder taking the text after ':', syntax, description)
_GENERATORS = {
    "ring": (lambda a: generators.ring(_int(a, "ring")), "ring:N", "bidirectional ring of N ranks"),
    "uring": (lambda a: generators.uring(_int(a, "uring")), "uring:N", "one-way ring i -> i+1"),
    "line": (lambda a: generators.line(_int(a, "line")), "line:N", "bidirectional path of N ranks"),
    "full": (lambda a: generators.full(_int(a, "full")), "full:N", "all N*(N-1) links"),
    "star": (lambda a: generators.star(_int(a, "star")), "star:N", "rank 0 is the hub of N-1 spokes"),
    "hypercube": (lambda a: generators.hypercube(_int(a, "hypercube")), "hypercube:D",
                  "2^D ranks, i <-> i xor 2^k"),
    "torus": (lambda a: generators.torus(_dims(a)), "torus:AxB[xC]", "wrap-around mesh, e.g. torus:4x4"),
}

_COMPOSE_SYNTAX = "NAMExK"
SHARP_SUFFIX = "+sharp"  # NAMExK+sharp: the fabric's switches aggregate (InfiniBand SHARP)

# what ``synth topo list`` says about links it did not read from a file
LINK_NOTE = (f"links of generated topologies: {generators.BANDWIDTH:g} GB/s, alpha {generators.ALPHA:g} us, "
             f"kind {generators.KIND} (one NVLink2 each); NAMExK fabric links: kind net")


def library_names() -> list[str]:
    """Names of the topology files shipped with synth, sorted."""
    return list(_library_names())


def library_folder() -> Traversable:
    """Where the library files are: ``synth/topologies`` inside an installed wheel, else the
    top-level ``topologies/`` of the source checkout this package was imported from."""
    packaged = resources.files("synth").joinpath("topologies")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "topologies"


@lru_cache(maxsize=1)
def _library_names() -> tuple[str, ...]:
    folder = library_folder()
    if not folder.is_dir():
        raise InputError(f"the topology library is missing ({folder}); reinstall synth")
    return tuple(sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json")))


@lru_cache(maxsize=None)
def load_library(name: str) -> Topology:
    """The library topology ``name`` (cached). Raises InputError for an unknown name."""
    if name not in library_names():
        raise InputError(f"unknown library topology {name!r}; known: {', '.join(library_names())}")
    text = library_folder().joinpath(f"{name}.json").read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TopologyError(f"library topology {name}: not valid JSON ({exc.msg})") from None
    return Topology.from_dict(doc, where=f"library topology {name}")


def shape_names() -> list[str]:
    """Names of the cloud shapes (``CLOUD_SHAPES``), sorted."""
    return sorted(CLOUD_SHAPES)


def machine_names() -> list[str]:
    """Every machine a bare name resolves to: the library files, then the cloud shapes."""
    return library_names() + shape_names()


@lru_cache(maxsize=None)
def shape_topology(name: str) -> Topology:
    """The cloud shape ``name`` as a topology, built from its base by the rule of ``CloudShape``
    (cached). Raises InputError for an unknown name."""
    shape = CLOUD_SHAPES.get(name)
    if shape is None:
        raise InputError(f"unknown cloud shape {name!r}{_close(name)}; shapes: {', '.join(shape_names())}")
    base = load_library(shape.base)
    nics = tuple(replace(nic, bandwidth=shape.gpu_bandwidth * len(nic.ranks)) for nic in base.nics)
    kept = tuple(source for source in base.sources if not source.startswith("NICs:"))
    sources = (f"cloud shape {shape.name}: the {shape.base} library machine with the provider's NICs",
               shape.nic_source) + shape.sources + kept
    return Topology(shape.name, base.ranks, base.links, base.groups, base.machines, nics, sources, base.switches,
                    base.arch)


def load_machine(name: str) -> Topology:
    """The library file or cloud shape ``name``; InputError (with the close names) for neither."""
    if name in CLOUD_SHAPES:
        return shape_topology(name)
    if name in library_names():
        return load_library(name)
    raise InputError(f"unknown machine {name!r}{_close(name)}; {_known()}")


@lru_cache(maxsize=32)
def _composed(name: str, k: int, sharp: bool = False) -> Topology:
    return compose_machines(load_machine(name), k, sharp)


def resolve_topology(spec: str) -> Topology:
    """The Topology a spec names; unknown or malformed specs raise InputError (one line).

    >>> resolve_topology("torus:2x2x2").ranks
    8
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"empty topology spec; {_known()}")
    spec = spec.strip()
    if "/" in spec or spec.endswith(".json"):
        return load_topology_file(spec)
    lowered = spec.lower()
    if ":" in lowered:
        kind, _, args = lowered.partition(":")
        entry = _GENERATORS.get(kind)
        if entry is None:
            raise InputError(f"unknown generator {kind!r} in {spec!r}; {_known()}")
        return entry[0](args)
    names = machine_names()
    if lowered in names:
        return load_machine(lowered)
    sharp = lowered.endswith(SHARP_SUFFIX)
    lowered = lowered.removesuffix(SHARP_SUFFIX)
    match = re.fullmatch(r"(.+)x(\d+)", lowered)
    if match and match.group(1) in names:
        return _composed(match.group(1), _copy_count(match.group(1), match.group(2)), sharp)
    if sharp and lowered in names:
        raise InputError(f"{spec!r}: SHARP aggregates in the network's switches; join machines first "
                         f"(e.g. {lowered}x2{SHARP_SUFFIX})")
    raise InputError(f"unknown topology {spec!r}{_hint(lowered, match, names)}; {_known()}")


def _copy_count(name: str, digits: str) -> int:
    """K of ``NAMExK``: refused (one line) when K copies of NAME exceed MAX_RANKS; K < 2 is left to
    compose_machines, which names the rule."""
    ranks = load_machine(name).ranks
    most = MAX_RANKS // ranks
    if len(digits) > len(str(most)) or int(digits) > most:
        count = digits if len(digits) <= 12 else f"{digits[:6]}... ({len(digits)} digits)"
        raise InputError(f"{name}x{count}: more than the {MAX_RANKS} ranks synth handles ({ranks} per {name}); "
                         f"at most {name}x{most}")
    return int(digits)


def _hint(lowered: str, match: re.Match | None, names: list[str]) -> str:
    """What an unknown spec may have meant: a generator's syntax, NAMExK for NAMEK, else the
    machine names close to the spec (or to its NAME part when it reads as NAMExK)."""
    if lowered in _GENERATORS:
        return f" (did you mean {_GENERATORS[lowered][1]}?)"
    near = [n for n in names if lowered.startswith(n) and lowered[len(n):].isdigit()]
    if match and near:
        return f" (did you mean {near[0]}x{lowered[len(near[0]):]}?)"
    if match and _close(match.group(1)):
        return _close(match.group(1), "close machine names")
    return _close(lowered)


def _close(name: str, label: str = "close names") -> str:
    """'; close names: a, b' for the machine names difflib finds close to ``name`` ('' for none)."""
    close = difflib.get_close_matches(name, machine_names(), n=4, cutoff=0.6)
    return f"; {label}: {', '.join(close)}" if close else ""


def list_topologies() -> list[tuple[str, str]]:
    """(name or syntax, one-line description) for every library file, cloud shape, generator and NAMExK."""
    rows = [(name, _DESCRIPTIONS.get(name) or _summary(load_library(name))) for name in library_names()]
    rows += [(name, CLOUD_SHAPES[name].summary(load_library(CLOUD_SHAPES[name].base))) for name in shape_names()]
    rows += [(syntax, text) for _, syntax, text in _GENERATORS.values()]
    rows.append((_COMPOSE_SYNTAX, "K copies of library machine or cloud shape NAME joined by a non-blocking "
                                  "fabric through their NICs, e.g. ndv2x2, h100x16, a3-megax2"))
    rows.append((_COMPOSE_SYNTAX + SHARP_SUFFIX, "the same on an InfiniBand fabric with SHARP: its "
                                                 "switches reduce and multicast in one pass (e.g. h100x16+sharp)"))
    return rows


def _summary(topology: Topology) -> str:
    return f"{topology.ranks} ranks, {len(topology.links)} links, {len(topology.nics)} NICs"


def _known() -> str:
    syntaxes = ", ".join(syntax for _, syntax, _ in _GENERATORS.values())
    return (f"known: {', '.join(library_names())}; cloud shapes: {', '.join(shape_names())}; "
            f"generators: {syntaxes}; composition: {_COMPOSE_SYNTAX} (e.g. ndv2x2); or a path to a .json file")


def _int(text: str, kind: str) -> int:
    if not re.fullmatch(r"\s*\d+\s*", text):
        raise InputError(f"{kind}: expected a whole number after '{kind}:', got {text!r}")
    return int(text)


def _dims(text: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\d+(x\d+)+", text.strip()):
        raise InputError(f"torus: expected sizes like 4x4 or 2x2x2 after 'torus:', got {text!r}")
    return tuple(int(part) for part in text.strip().split("x"))
