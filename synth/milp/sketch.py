"""Communication sketches (``synth.sketch`` v1): hints AND restrictions for the MILP router.

A sketch says how to treat each machine's interconnect (``intra``), which cross-machine links
may carry which chunks (``relay``), how many pieces each rank's buffer is cut into
(``chunk_up``), which rank rotation the schedule must be invariant under (``symmetry``) and the
message size it is tuned for (``size``). Nothing in it is ever silently ignored: a field that
does not apply to the topology is an InputError naming the field. A field left out means "no
restriction"; ``default_sketch`` derives a good starting sketch. See docs/sketch.md.

>>> from synth.core.library import resolve_topology
>>> t = resolve_topology("dgx2x2")
>>> s = parse_sketch({"format": "synth.sketch", "version": 1, "relay": {"mode": "rail"},
...                   "symmetry": {"machines": 1, "gpus": 2}}, t)
>>> s.allowed_crossing(t, 3, 19), s.allowed_crossing(t, 3, 20), s.rank_rotation(t)[:3]
(True, False, (18, 19, 20))
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from synth.core.errors import InputError
from synth.core.topology import Topology
from synth.cost import format_size, parse_size

SKETCH_FORMAT = "synth.sketch"
SKETCH_VERSION = 1
DEFAULT_SIZE = 1 << 30
MAX_CHUNK_UP = 64  # pieces per rank a sketch may ask for; far beyond it the router runs out of memory
_MIB = 1 << 20

_INT0 = {"type": "integer", "minimum": 0, "description": "an integer >= 0"}
_INT1 = {"type": "integer", "minimum": 1, "description": "an integer >= 1"}


def _object(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "description": "an object", "additionalProperties": False,
            "required": required, "properties": properties}


SKETCH_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    **_object(
        ["format", "version"],
        format={"const": SKETCH_FORMAT}, version={"const": SKETCH_VERSION},
        intra=_object(["mode"], mode={"enum": ["links", "switch"]},
                      policy={"enum": ["few-peers", "many-peers"]}, peers=_INT1),
        relay=_object(
            ["mode"], mode={"enum": ["rail", "any", "pairs"]},
            pairs={"type": "array", "minItems": 1, "uniqueItems": True,
                   "description": "a non-empty list of distinct [sender index, receiver index] pairs",
                   "items": {"type": "array", "prefixItems": [_INT0, _INT0], "minItems": 2, "maxItems": 2,
                             "description": "a pair [sender index, receiver index]"}},
            carries={"description": "'any', 'machine' or an object {\"<sender index>\": [origin indices]}",
                     "anyOf": [{"enum": ["any", "machine"]},
                               {"type": "object",
                                "propertyNames": {"pattern": "^(0|[1-9][0-9]*)$",
                                                  "description": "a local sender index such as \"3\""},
                                "additionalProperties": {"type": "array", "uniqueItems": True, "items": _INT0,
                                                         "description": "a list of distinct local origin indices"}}]}),
        chunk_up={"type": "integer", "minimum": 1, "maximum": MAX_CHUNK_UP,
                  "description": f"an integer >= 1 and <= {MAX_CHUNK_UP}"},
        symmetry=_object([], machines=_INT0, gpus=_INT0),
        size={"type": ["integer", "string"], "minimum": 1,
              "description": "bytes (an integer >= 1) or a string such as \"256M\""},
    ),
}

# JSON integers only: jsonschema would otherwise accept 8.0 as an integer.
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, x: isinstance(x, int) and not isinstance(x, bool)),
)
_VALIDATOR = _Validator(SKETCH_SCHEMA)


@dataclass(frozen=True)
class Intra:
    """Inside machines: ``links`` (physical links) or ``switch`` (NVSwitch as a hyperedge)."""

    mode: str = "links"
    policy: str | None = None  # switch only: "few-peers" | "many-peers"
    peers: int | None = None  # few-peers only; None = the default cap of 1

    @property
    def peer_limit(self) -> int | None:
        """Distinct destinations a GPU may send to per step (None: no cap)."""
        if self.mode == "switch" and self.policy == "few-peers":
            return self.peers or 1
        return None


@dataclass(frozen=True)
class Relay:
    """Across machines: which links may cross (``mode``) and which chunks they carry."""

    mode: str = "any"  # "rail" | "any" | "pairs"
    carries: str | tuple[tuple[int, tuple[int, ...]], ...] = "any"  # "any" | "machine" | map
    pairs: tuple[tuple[int, int], ...] = ()  # mode "pairs" only


@dataclass(frozen=True)
class Rotation:
    """The schedule is invariant under (m, i) -> ((m + machines) mod M, (i + gpus) mod G)."""

    machines: int = 0
    gpus: int = 0


@dataclass(frozen=True)
class Sketch:
    """A parsed sketch; build one with ``parse_sketch`` or ``default_sketch`` (they validate it)."""

    intra: Intra = Intra()
    relay: Relay | None = None  # None exactly on one-machine topologies
    chunk_up: int = 1
    symmetry: Rotation | None = None
    size: int = DEFAULT_SIZE

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"format": SKETCH_FORMAT, "version": SKETCH_VERSION}
        intra: dict[str, Any] = {"mode": self.intra.mode}
        if self.intra.policy is not None:
            intra["policy"] = self.intra.policy
        if self.intra.peers is not None:
            intra["peers"] = self.intra.peers
        doc["intra"] = intra
        if self.relay is not None:
            relay: dict[str, Any] = {"mode": self.relay.mode}
            if self.relay.pairs:
                relay["pairs"] = [list(p) for p in self.relay.pairs]
            carries = self.relay.carries
            relay["carries"] = carries if isinstance(carries, str) else {str(j): list(o) for j, o in carries}
            doc["relay"] = relay
        doc["chunk_up"] = self.chunk_up
        if self.symmetry is not None:
            doc["symmetry"] = {"machines": self.symmetry.machines, "gpus": self.symmetry.gpus}
        doc["size"] = format_size(self.size)
        return doc

    # ------------------------------------------------------------ router helpers
    def allowed_crossing(self, topology: Topology, src: int, dst: int) -> bool:
        """May link src->dst be used? True for links inside a machine (relay restricts only
        crossings), False where there is no link."""
        if not topology.has_link(src, dst):
            return False
        if self.relay is None or topology.machine_of[src] == topology.machine_of[dst]:
            return True
        i, j = _local(topology, src), _local(topology, dst)
        if self.relay.mode == "rail":
            return i == j
        if self.relay.mode == "pairs":
            return (i, j) in self.relay.pairs
        return True

    def may_carry(self, topology: Topology, sender: int, origin: int) -> bool:
        """May ``sender`` send the chunk that originated at rank ``origin`` over a cross-machine
        link? (``carries``; sends inside a machine are not restricted by it.)"""
        carries = "any" if self.relay is None else self.relay.carries
        if carries == "any":
            return True
        if topology.machine_of[sender] != topology.machine_of[origin]:
            return False
        if carries == "machine":
            return True
        return _local(topology, origin) in dict(carries).get(_local(topology, sender), ())

    @property
    def carries_anything(self) -> bool:
        """True when ``carries`` restricts nothing (every crossing may carry every chunk)."""
        return self.relay is None or self.relay.carries == "any"

    def may_carry_link(self, topology: Topology, src: int, dst: int, origin: int) -> bool:
        """``may_carry`` for the cross-machine link src->dst (the router asks per link)."""
        return self.may_carry(topology, src, origin)

    def rank_rotation(self, topology: Topology) -> tuple[int, ...] | None:
        """perm[r] = image of rank r under the symmetry; None when there is none (or trivial)."""
        if self.symmetry is None:
            return None
        perm = _rotation(topology, self.symmetry.machines, self.symmetry.gpus)
        return None if perm == tuple(range(topology.ranks)) else perm

    def symmetry_generators(self, topology: Topology) -> list[tuple[int, ...]]:
        """Rank permutations that generate the group the router solves by orbits: the
        rotation's machine part and GPU part when each alone is an automorphism (a larger group,
        so fewer orbits, and still invariant under the rotation), else the rotation itself;
        [] without a symmetry."""
        from synth.core.symmetry import _is_automorphism

        whole = self.rank_rotation(topology)
        if whole is None:
            return []
        sym = self.symmetry
        parts = [_rotation(topology, sym.machines, 0), _rotation(topology, 0, sym.gpus)]
        parts = [p for p in parts if p != tuple(range(topology.ranks))]
        if len(parts) == 2 and all(_is_automorphism(topology, p) for p in parts):
            return parts
        return [whole]

    def describe(self) -> list[str]:
        """One line per field."""
        intra = self.intra.mode
        if self.intra.mode == "switch":
            intra += f", {self.intra.policy}"
            if self.intra.peer_limit is not None:
                intra += f" (at most {self.intra.peer_limit} peer(s) per GPU per step)"
        if self.relay is None:
            relay = "none (one machine)"
        else:
            relay = self.relay.mode
            if self.relay.pairs:
                relay += " " + ", ".join(f"{i}->{j}" for i, j in self.relay.pairs)
            carries = self.relay.carries
            relay += ", carries " + (carries if isinstance(carries, str) else "; ".join(
                f"{j}: {list(o)}" for j, o in carries))
        sym = "none" if self.symmetry is None else f"machines +{self.symmetry.machines}, gpus +{self.symmetry.gpus}"
        return [f"intra: {intra}", f"relay: {relay}", f"chunk_up: {self.chunk_up}",
                f"symmetry: {sym}", f"size: {format_size(self.size)}"]


# ---------------------------------------------------------------------- parsing
def parse_sketch(doc: Any, topology: Topology, where: str = "sketch") -> Sketch:
    """A validated Sketch for ``topology``; any problem is one InputError line naming the field."""
    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected a JSON object")
    if doc.get("format") != SKETCH_FORMAT:
        raise InputError(f"{where}: 'format' must be {SKETCH_FORMAT!r}, got {doc.get('format')!r}")
    if type(doc.get("version")) is not int or doc.get("version") != SKETCH_VERSION:
        raise InputError(f"{where}: unsupported {SKETCH_FORMAT} version {doc.get('version')!r} "
                         f"(this synth reads version {SKETCH_VERSION})")
    try:
        error = best_match(_VALIDATOR.iter_errors(doc))
    except RecursionError:
        raise InputError(f"{where}: nested too deeply") from None
    if error is not None:
        raise InputError(f"{where}: {_schema_message(error)}")
    intra, relay, sym = doc.get("intra", {"mode": "links"}), doc.get("relay"), doc.get("symmetry")
    if relay is not None:
        carries = relay.get("carries", "any")
        if isinstance(carries, dict):
            carries = tuple(sorted((int(j), tuple(sorted(o))) for j, o in carries.items()))
        relay = Relay(relay["mode"], carries, tuple(sorted(tuple(p) for p in relay.get("pairs", ()))))
    elif topology.machine_count > 1:
        relay = Relay()
    size = doc.get("size", DEFAULT_SIZE)
    if isinstance(size, str):
        try:
            size = parse_size(size)
        except InputError as exc:
            raise InputError(f"{where}: size: {exc}") from None
    sketch = Sketch(Intra(intra["mode"], intra.get("policy"), intra.get("peers")), relay,
                    doc.get("chunk_up", 1),
                    None if sym is None else Rotation(sym.get("machines", 0), sym.get("gpus", 0)), size)
    check_sketch(sketch, topology, where)
    return sketch


def load_sketch(path: str, topology: Topology) -> Sketch:
    """Read and validate a sketch file (InputError, one line naming the file, on any problem)."""
    from synth.core.io import read_json

    return parse_sketch(read_json(path), topology, where=str(path))


def _schema_message(error: jsonschema.ValidationError) -> str:
    if error.validator in ("anyOf", "oneOf") and isinstance(error.instance, dict) and error.context:
        inner = best_match([e for e in error.context if e.validator not in ("type", "enum")])
        if inner is not None:
            error = inner
    path = _path(error.absolute_path)
    at = f"{path}: " if path else ""
    schema, instance = error.schema, error.instance
    if error.validator == "additionalProperties":
        extra = sorted(set(instance) - set(schema.get("properties", {})))
        known = ", ".join(schema.get("properties", {}))
        return f"{at}unknown key {extra[0]!r} (known: {known})"
    if error.validator == "required":
        missing = [k for k in schema["required"] if k not in instance]
        return f"{at}missing key {missing[0]!r}"
    if error.validator == "enum":
        return f"{at}must be one of {', '.join(map(repr, schema['enum']))}, got {json.dumps(instance)}"
    if error.validator == "pattern" and "description" in schema:  # a propertyNames key
        return f"{at}key {instance!r}: must be {schema['description']}"
    if "description" in schema:
        return f"{at}must be {schema['description']}, got {json.dumps(instance)}"
    return f"{at}{error.message}"


def _path(parts) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


# ---------------------------------------------------------------------- topology checks
def check_sketch(sketch: Sketch, topology: Topology, where: str = "sketch") -> None:
    """Raise InputError (one line naming the field) where ``sketch`` does not fit ``topology``."""
    machines = _machines(topology)
    smallest = min(len(m) for m in machines)
    intra = sketch.intra
    if intra.mode == "links":
        for field in ("policy", "peers"):
            if getattr(intra, field) is not None:
                raise InputError(f"{where}: intra.{field}: only applies with intra.mode 'switch'")
    else:
        if intra.policy is None:
            raise InputError(f"{where}: intra.policy: required with mode 'switch' ('few-peers' or 'many-peers')")
        if intra.peers is not None and intra.policy != "few-peers":
            raise InputError(f"{where}: intra.peers: only applies with policy 'few-peers', not {intra.policy!r}")
        if intra.peers is not None and intra.peers > smallest - 1:
            raise InputError(f"{where}: intra.peers: {intra.peers} is more than the {smallest - 1} "
                             "peers a GPU has in its machine")
        problem = switch_problem(topology)
        if problem:
            raise InputError(f"{where}: intra.mode: 'switch' needs every GPU's links inside its machine in one port "
                             f"group (an NVSwitch or PCIe switch); {problem}")
    _check_relay(sketch.relay, topology, machines, where)
    if sketch.symmetry is not None:
        _check_symmetry(sketch, topology, machines, where)


def _check_relay(relay: Relay | None, topology: Topology, machines, where: str) -> None:
    if relay is None:
        if len(machines) > 1:
            raise InputError(f"{where}: relay: missing on {topology.name}, which has {len(machines)} machines")
        return
    if len(machines) < 2:
        raise InputError(f"{where}: relay: {topology.name} is one machine; relay applies across machines")
    if relay.mode != "pairs" and relay.pairs:
        raise InputError(f"{where}: relay.pairs: only applies with relay.mode 'pairs', not {relay.mode!r}")
    largest = max(len(m) for m in machines)
    if relay.mode == "pairs" and not relay.pairs:
        raise InputError(f"{where}: relay.pairs: required with relay.mode 'pairs'")
    rail = relay.mode == "rail"
    for i, j in [(i, i) for i in range(largest)] if rail else relay.pairs:
        for (a, ma), (b, mb) in itertools.permutations(enumerate(machines), 2):
            if rail and max(i, j) >= min(len(ma), len(mb)):
                continue
            if i >= len(ma) or j >= len(mb):
                raise InputError(f"{where}: relay.pairs: [{i}, {j}]: local index out of range "
                                 f"(machine {a if i >= len(ma) else b} has {len(mb) if i < len(ma) else len(ma)} GPUs)")
            if not topology.has_link(ma[i], mb[j]):
                raise InputError(f"{where}: relay.mode: 'rail' needs a link from local GPU {i} of machine {a} "
                                 f"to local GPU {i} of machine {b}; {topology.name} has no link {ma[i]}->{mb[j]}"
                                 if rail else f"{where}: relay.pairs: [{i}, {j}]: no link {ma[i]}->{mb[j]} "
                                 f"from machine {a} to machine {b}")
    if isinstance(relay.carries, tuple):
        sketch = Sketch(relay=relay)
        for j, origins in relay.carries:
            for index in (j, *origins):
                if index >= largest:
                    what = "sender" if index == j else "origin"
                    raise InputError(f"{where}: relay.carries: {what} index {index} out of range "
                                     f"0..{largest - 1} (local GPU indices)")
            if not any(j < len(ma) and any(sketch.allowed_crossing(topology, ma[j], r)
                                           for r in range(topology.ranks) if topology.machine_of[r] != a)
                       for a, ma in enumerate(machines)):
                raise InputError(f"{where}: relay.carries: local sender {j} has no cross-machine link "
                                 f"that relay.mode {relay.mode!r} allows")


def _check_symmetry(sketch: Sketch, topology: Topology, machines, where: str) -> None:
    from synth.core.symmetry import _is_automorphism

    sym, count, size = sketch.symmetry, len(machines), len(machines[0])
    if any(len(m) != size for m in machines):
        raise InputError(f"{where}: symmetry: the machines of {topology.name} differ in size")
    if count == 1 and sym.machines:
        raise InputError(f"{where}: symmetry.machines: {topology.name} is one machine; must be 0 or absent")
    if sym.machines >= count:
        raise InputError(f"{where}: symmetry.machines: {sym.machines} must be below the {count} machines")
    if sym.gpus >= size:
        raise InputError(f"{where}: symmetry.gpus: {sym.gpus} must be below the {size} GPUs per machine")
    if not _is_automorphism(topology, _rotation(topology, sym.machines, sym.gpus)):
        raise InputError(f"{where}: symmetry: offset machines +{sym.machines}, gpus +{sym.gpus} is not an "
                         f"automorphism of {topology.name} (links or groups do not map onto alike ones)")
    relay, g = sketch.relay, sym.gpus
    if relay is not None and g:
        for i, j in relay.pairs:
            if ((i + g) % size, (j + g) % size) not in relay.pairs:
                raise InputError(f"{where}: symmetry.gpus: +{g} maps relay pair [{i}, {j}] to "
                                 f"[{(i + g) % size}, {(j + g) % size}], which is not in relay.pairs")
        if isinstance(relay.carries, tuple):
            carried = dict(relay.carries)
            for j, origins in relay.carries:
                for o in origins:
                    if (o + g) % size not in carried.get((j + g) % size, ()):
                        raise InputError(f"{where}: symmetry.gpus: +{g} maps relay.carries {j}: {o} to "
                                         f"{(j + g) % size}: {(o + g) % size}, which relay.carries lacks")


def switch_problem(topology: Topology) -> str | None:
    """Why some machine is not an NVSwitch box (None when every one is): its links must form a
    complete digraph and each GPU's out- and in-links must lie in one port group."""
    machines = _machines(topology)
    for a, machine in enumerate(machines):
        members = set(machine)
        for r in machine:
            for s in machine:
                if r != s and not topology.has_link(r, s):
                    return f"machine {a} has no link {r}->{s}"
            for way in ("out", "in"):
                ports = {(l.src, l.dst) for l in (topology.out_links if way == "out" else topology.in_links)[r]
                         if l.src in members and l.dst in members}
                end = 0 if way == "out" else 1
                if ports and not any(ports <= set(g.links) and all(k[end] == r for k in g.links)
                                     for g in topology.groups_of_link.get(next(iter(ports)), ())):
                    return f"machine {a}: GPU {r}'s {way}-links share no port group"
    return None


SWITCHED = {"nvlink": "every machine is an NVSwitch box: each GPU reaches its peers through one NVSwitch port",
            "pcie": "a PCIe machine: each GPU reaches its peers through its one PCIe link",
            "xgmi": "each GPU reaches its peers through one switch port (xGMI)"}


def switched_machine(topology: Topology) -> str:
    """What a switched machine (``switch_problem`` is None) is made of, in words, from its
    links' kinds inside machines."""
    machine = topology.machine_of
    kinds = {link.kind for link in topology.links if machine[link.src] == machine[link.dst]}
    if len(kinds) == 1 and (kind := kinds.pop()) in SWITCHED:
        return SWITCHED[kind]
    return "each GPU reaches its peers through one port group"


# ---------------------------------------------------------------------- the default sketch
EXACT_RANKS = 16  # one machine this small also gets the exact time-expanded MILP (synth.milp.exact)
EXACT_CHUNKS = 6  # pieces per rank it tries at most by default (C = 6 closes in seconds on ndv2)
def default_sketch(topology: Topology, collective: str | None = None,
                   size: int | None = None) -> tuple[Sketch, list[str]]:
    """The derived sketch for ``topology`` and the reasons, one short line per field.

    ``collective`` matters only for symmetry: rooted collectives (a rotation moves the root)
    and file-based ones (traffic unknown here) get none.
    """
    from synth.core.symmetry import _is_automorphism

    machines = _machines(topology)
    count, ranks = len(machines), topology.ranks
    given, size = size is not None, DEFAULT_SIZE if size is None else size
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise InputError(f"sketch: size must be a whole number of bytes >= 1, got {size!r}")
    reasons: list[str] = []
    problem = switch_problem(topology)
    if problem is None:
        intra = Intra("switch", "many-peers")
        reasons.append(f"intra: switch, many-peers ({switched_machine(topology)})")
    else:
        intra = Intra()
        reasons.append(f"intra: links (no NVSwitch: {problem})")
    relay = None
    if count == 1:
        reasons.append("relay: none (one machine)")
    elif count <= 4:
        relay = Relay("any")
        reasons.append(f"relay: any, carries any ({count} machines: every NIC path stays open)")
    else:
        try:
            check_sketch(Sketch(relay=Relay("rail")), topology)
            relay = Relay("rail")
            reasons.append(f"relay: rail, carries any ({count} machines: rails keep the routing MILP small)")
        except InputError:
            relay = Relay("any")
            reasons.append(f"relay: any, carries any ({count} machines, but no rail links)")
    file_based = collective is not None and (collective.partition(":")[0] in ("alltoallv", "custom")
                                              or collective.endswith(".json"))
    if file_based:
        chunk_up = 1
        reasons.append("chunk_up: 1 (the collective's file fixes its chunks)")
    elif count == 1 and ranks <= EXACT_RANKS:
        chunk_up = EXACT_CHUNKS
        reasons.append(f"chunk_up: {chunk_up} (one machine of {ranks} ranks: the exact MILP stage tries "
                       f"1..{chunk_up} pieces and keeps the fastest at the size)")
    else:
        if size < _MIB:
            chunk_up, why = 1, "under 1M: latency-bound"
        else:
            chunk_up = 8 if ranks <= 32 else 4 if ranks <= 64 else 3
            why = "pieces enough to pipeline, few enough to keep routing small"
        reasons.append(f"chunk_up: {chunk_up} ({format_size(size)} over {ranks} ranks: {why})")
    symmetry, why = None, None
    if collective is not None:
        from synth.core.collectives import FILE_KINDS, REGISTRY

        kind = collective.partition(":")[0]
        if kind not in REGISTRY and kind not in FILE_KINDS and not collective.endswith(".json"):
            raise InputError(f"unknown collective {collective!r}; known: {', '.join(sorted(REGISTRY))}, "
                             f"{', '.join(f'{k}:FILE' for k in sorted(FILE_KINDS))}")
        if kind in REGISTRY and REGISTRY[kind].rooted:
            why = f"{kind} is rooted: a rotation moves the root"
        elif kind not in REGISTRY:
            why = "the traffic of a file-based collective is not known here"
    if why is None and any(len(m) != len(machines[0]) for m in machines):
        why = "the machines differ in size"
    if why is None:
        k = 1 if count > 1 and _is_automorphism(topology, _rotation(topology, 1, 0)) else 0
        g = next((g for g in range(1, len(machines[0])) if _is_automorphism(topology, _rotation(topology, k, g))), 0)
        symmetry = Rotation(k, g) if k or g else None
        moved = " and ".join(f"{what} by {n}" for what, n in (("machines", k), ("GPUs", g)) if n)
        why = f"rotating {moved} is an automorphism" if symmetry else "no rotation of ranks is an automorphism"
    sym = "none" if symmetry is None else f"machines +{symmetry.machines}, gpus +{symmetry.gpus}"
    reasons.append(f"symmetry: {sym} ({why})")
    reasons.append(f"size: {format_size(size)} ({'given' if given else 'default'})")
    return Sketch(intra, relay, chunk_up, symmetry, size), reasons


def _machines(topology: Topology) -> tuple[tuple[int, ...], ...]:
    return topology.machines or (tuple(range(topology.ranks)),)


def _local(topology: Topology, rank: int) -> int:
    """Index of ``rank`` inside its machine."""
    return _machines(topology)[topology.machine_of[rank]].index(rank)


def _rotation(topology: Topology, k: int, g: int) -> tuple[int, ...]:
    machines = _machines(topology)
    count, size = len(machines), len(machines[0])
    image = [0] * topology.ranks
    for m, machine in enumerate(machines):
        for i, r in enumerate(machine):
            image[r] = machines[(m + k) % count][(i + g) % size]
    return tuple(image)
