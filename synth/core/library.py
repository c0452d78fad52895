"""Turn a topology spec into a Topology: library name, generator, composition or file path.

Specs:
  ``dgx1``                         a file of the library (topologies/NAME.json)
  ``ring:8`` ``torus:4x4`` ...     a generator (see synth.core.generators)
  ``ndv2x2`` ``h100x16``           K copies of a library machine joined through its NICs
  ``h100x16+sharp``                the same, on a fabric whose switches aggregate (SHARP)
  ``path/to/t.json``               a synth.topology file (contains ``/`` or ends in ``.json``)

>>> resolve_topology("ring:4").ranks, resolve_topology("ndv2x2").machine_count
(4, 2)
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from synth.core import generators
from synth.core.compose import compose_machines
from synth.core.errors import InputError, TopologyError
from synth.core.io import load_topology_file
from synth.core.topology import Topology

_DESCRIPTIONS = {
    "dgx1": "NVIDIA DGX-1, 8 V100, NVLink hybrid cube-mesh (25/50 GB/s links), no NICs",
    "ndv2": "Azure NDv2, dgx1 links plus one 12.5 GB/s IB NIC shared by the 8 GPUs",
    "dgx2": "NVIDIA DGX-2, 16 V100 behind NVSwitch (125 GB/s ports), 8 NICs of 12.5 GB/s",
    "a100": "DGX/HGX A100, 8 GPUs behind NVSwitch (300 GB/s ports), 8 NICs of 25 GB/s",
    "h100": "DGX/HGX H100, 8 GPUs behind NVSwitch (450 GB/s ports, NVLS: reduce + multicast), "
            "8 NICs of 50 GB/s",
    "mi250": "AMD MI250 node, 16 GCDs joined by xGMI (50 GB/s per link, x1/x2/x4), 16 NICs of 16 GB/s",
    "mi300x": "AMD MI300X platform, 8 GPUs fully connected by 64 GB/s xGMI links, 8 NICs of 50 GB/s",
}

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


@lru_cache(maxsize=32)
def _composed(name: str, k: int, sharp: bool = False) -> Topology:
    return compose_machines(load_library(name), k, sharp)


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
    names = library_names()
    if lowered in names:
        return load_library(lowered)
    sharp = lowered.endswith(SHARP_SUFFIX)
    lowered = lowered.removesuffix(SHARP_SUFFIX)
    match = re.fullmatch(r"(.+)x(\d+)", lowered)
    if match and match.group(1) in names:
        return _composed(match.group(1), int(match.group(2)), sharp)
    if sharp and lowered in names:
        raise InputError(f"{spec!r}: SHARP aggregates in the network's switches; join machines first "
                         f"(e.g. {lowered}x2{SHARP_SUFFIX})")
    hint = ""
    if lowered in _GENERATORS:
        hint = f" (did you mean {_GENERATORS[lowered][1]}?)"
    elif match:
        near = [n for n in names if lowered.startswith(n) and lowered[len(n):].isdigit()]
        if near:
            hint = f" (did you mean {near[0]}x{lowered[len(near[0]):]}?)"
    raise InputError(f"unknown topology {spec!r}{hint}; {_known()}")


def list_topologies() -> list[tuple[str, str]]:
    """(name or syntax, one-line description) for every library file, generator and NAMExK."""
    rows = [(name, _DESCRIPTIONS.get(name) or _summary(load_library(name))) for name in library_names()]
    rows += [(syntax, text) for _, syntax, text in _GENERATORS.values()]
    rows.append((_COMPOSE_SYNTAX, "K copies of library machine NAME joined by a non-blocking "
                                  "fabric through their NICs, e.g. ndv2x2, h100x16"))
    rows.append((_COMPOSE_SYNTAX + SHARP_SUFFIX, "the same on an InfiniBand fabric with SHARP: its "
                                                 "switches reduce and multicast in one pass (e.g. h100x16+sharp)"))
    return rows


def _summary(topology: Topology) -> str:
    return f"{topology.ranks} ranks, {len(topology.links)} links, {len(topology.nics)} NICs"


def _known() -> str:
    syntaxes = ", ".join(syntax for _, syntax, _ in _GENERATORS.values())
    return (f"known: {', '.join(library_names())}; generators: {syntaxes}; "
            f"composition: {_COMPOSE_SYNTAX} (e.g. ndv2x2); or a path to a .json file")


def _int(text: str, kind: str) -> int:
    if not re.fullmatch(r"\s*\d+\s*", text):
        raise InputError(f"{kind}: expected a whole number after '{kind}:', got {text!r}")
    return int(text)


def _dims(text: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\d+(x\d+)+", text.strip()):
        raise InputError(f"torus: expected sizes like 4x4 or 2x2x2 after 'torus:', got {text!r}")
    return tuple(int(part) for part in text.strip().split("x"))
