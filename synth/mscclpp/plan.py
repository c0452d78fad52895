"""The MSCCL++ execution plan model, and its reader.

A plan (shared/reference/mscclpp-format.md, sections 3-9) has one ``gpus[r]`` entry per rank: its
chunk counts, its channels (memory, port: one per ``connected_to`` element; switch: one per rank
group), the remote buffers it reaches, its semaphores and its thread blocks, each an ordered list
of ops. Ops address chunks (``index``, ``size``) of a local buffer (``type`` i, o or s), of a remote
buffer (``buffer_id`` into the block's ``remote_buffer_refs`` of the op's channel type) or of a switch
channel's buffer (``switch_channel_id``).

``read_plan(doc)`` builds the model and names, by JSON path, every key that is missing or of the
wrong type and every name the executor does not know (rules R1, R3, R4); it keeps reading where it
can so that one pass reports every problem. A legacy plan (camelCase, mscclpp 0.5-0.7) is recognised
and described, not modelled: the current executor cannot load it.

>>> doc = {"name": "p", "collective": "allreduce", "protocol": "Simple", "inplace": True, "gpus": [
...     {"id": 0, "input_chunks": 1, "output_chunks": 1, "scratch_chunks": 0, "channels": [],
...      "remote_buffers": [], "threadblocks": [{"id": 0, "channels": [], "ops": [{"name": "nop"}]}]}]}
>>> plan, problems = read_plan(doc)
>>> plan.ranks, plan.gpus[0].blocks[0].ops[0].name, problems
(1, 'nop', [])
>>> str(read_plan({**doc, "inplace": 1})[1][0])
'inplace: must be a JSON boolean (true or false), got 1 [R1]'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BUFFER_TYPES = ("i", "o", "s")
CHANNEL_TYPES = ("memory", "port", "switch", "none")
OP_NAMES = ("nop", "barrier", "signal", "rlxsignal", "wait", "rlxwait", "flush", "put", "pws", "pwsf", "get", "copy",
            "re", "res", "rre", "rres", "ppkt", "rppkt", "cpkt", "upkt", "repkt", "respkt", "recpkt", "recspkt",
            "glres", "gstore", "gstorepkt", "pipeline", "sem_acquire", "sem_release")
LEGACY_KEYS = ("inputChunks", "outputChunks", "scratchChunks", "chunkGroups")


@dataclass(frozen=True)
class Problem:
    """A rule a plan breaks, at a JSON path."""

    path: str
    text: str
    rule: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.text}" + (f" [{self.rule}]" if self.rule else "")


@dataclass(frozen=True)
class Ref:
    """Chunks ``index .. index+size-1`` of a buffer: local (``buffer`` i, o or s), remote (``buffer``
    the block-level remote buffer id) or switch (``buffer`` the block's switch channel index)."""

    kind: str
    buffer: Any
    index: int
    size: int
    path: str


@dataclass(frozen=True)
class Op:
    name: str
    path: str
    channel_type: str = "none"
    channel_ids: tuple[int, ...] = ()
    src: tuple[Ref, ...] = ()
    dst: tuple[Ref, ...] = ()
    barrier_id: int | None = None
    num_threadblocks: int | None = None
    semaphore_ids: tuple[int, ...] = ()
    body: tuple["Op", ...] = ()
    unit_size: int | None = None
    num_chunks: int | None = None
    tbg: tuple[int, int] | None = None  # (tb_id, tbg_size)


@dataclass(frozen=True)
class Block:
    """A thread block: its block-level channel lists and remote buffer lists by type, and its ops."""

    id: int
    path: str
    channels: dict[str, tuple[int, ...]]
    remote_refs: dict[str, tuple[int, ...]]
    ops: tuple[Op, ...]


@dataclass(frozen=True)
class Channel:
    """One ``gpus[r].channels`` entry: memory/port to ``peers`` (one channel each), or a switch
    channel on ``buffer_type`` per rank group."""

    type: str
    peers: tuple[int, ...] = ()
    buffer_type: str | None = None
    rank_groups: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class RemoteBuffer:
    rank: int
    type: str
    access: tuple[str, ...]


@dataclass(frozen=True)
class Gpu:
    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    channels: tuple[Channel, ...]
    remote_buffers: tuple[RemoteBuffer, ...]
    semaphores: tuple[int, ...]
    blocks: tuple[Block, ...]

    def peers(self, channel_type: str) -> list[int]:
        """The gpu-level channels of a type, flattened in file order: index = channel id."""
        return [p for c in self.channels if c.type == channel_type for p in c.peers]

    def switch_groups(self) -> list[tuple[str | None, tuple[int, ...]]]:
        """Switch channels in file order: (buffer type, ranks of the group)."""
        return [(c.buffer_type, g) for c in self.channels if c.type == "switch" for g in c.rank_groups]

    def chunks(self, buffer: str) -> int:
        return {"i": self.input_chunks, "o": self.output_chunks, "s": self.scratch_chunks}[buffer]


@dataclass(frozen=True)
class Plan:
    name: str
    collective: str
    protocol: str
    inplace: bool
    gpus: tuple[Gpu, ...]
    reuse_resources: bool = False
    double_scratch: bool = False
    alignment: int = 16
    min_size: int = 0
    max_size: int = 2**64 - 1
    threads: int = 1024
    schema: str = "current"
    notes: tuple[str, ...] = field(default=())
    root: int | None = None  # a rooted collective's root, where the file says it (the executor reads none)
    requires: dict | None = None  # what the plan says it needs (synth writes it for switch channels; not read
    # by the executor): {"mscclpp": "0.10", "sm": 90, "nvls": true, ...}

    @property
    def ranks(self) -> int:
        return len(self.gpus)


def is_legacy(doc: Any) -> bool:
    """A plan of the legacy schema (mscclpp 0.5-0.7): camelCase chunk counts in its gpus."""
    gpus = doc.get("gpus") if isinstance(doc, dict) else None
    return isinstance(gpus, list) and any(isinstance(g, dict) and any(k in g for k in LEGACY_KEYS) for g in gpus)


def read_plan(doc: Any) -> tuple[Plan | None, list[Problem]]:
    """The plan of a JSON document and every problem found reading it (None when it is not a plan
    object at all)."""
    reader = _Reader()
    if not isinstance(doc, dict):
        return None, [Problem("$", "not an MSCCL++ plan: the document is not a JSON object", "R1")]
    if is_legacy(doc):
        return reader.legacy(doc), reader.problems
    return reader.plan(doc), reader.problems


class _Reader:
    """Reads a document into the model, recording problems instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def say(self, path: str, text: str, rule: str) -> None:
        self.problems.append(Problem(path, text, rule))

    def get(self, obj: dict, key: str, kind, path: str, default=None, required: bool = True):
        """``obj[key]`` if it has the JSON type ``kind`` (int, str, bool, list, dict)."""
        here = f"{path}.{key}" if path else key
        if key not in obj:
            if required:
                self.say(here, "missing (a required key: the executor reads it unchecked)", "R3")
            return default
        value = obj[key]
        if kind is bool and not isinstance(value, bool):
            self.say(here, f"must be a JSON boolean (true or false), got {value!r}"[:200], "R1")
            return default
        if kind is int and (not isinstance(value, int) or isinstance(value, bool)):
            self.say(here, f"must be an integer, got {value!r}"[:200], "R1")
            return default
        if kind in (str, list, dict) and not isinstance(value, kind):
            self.say(here, f"must be a JSON {_json_name(kind)}, got {type(value).__name__}", "R1")
            return default
        return value

    def plan(self, doc: dict) -> Plan:
        name = self.get(doc, "name", str, "", "")
        collective = self.get(doc, "collective", str, "", "")
        protocol = self.get(doc, "protocol", str, "", "Simple")
        if protocol not in ("Simple", "LL"):
            self.say("protocol", f"{protocol!r}: the executor reads anything but \"LL\" as Simple (write Simple or LL)",
                     "R1")
        inplace = self.get(doc, "inplace", bool, "", False)
        gpus = self.get(doc, "gpus", list, "", [])
        return Plan(name, collective, protocol, inplace,
                    tuple(self.gpu(g, f"gpus[{r}]") for r, g in enumerate(gpus)),
                    reuse_resources=self.get(doc, "reuse_resources", bool, "", False, required=False),
                    double_scratch=self.get(doc, "use_double_scratch_buffer", bool, "", False, required=False),
                    alignment=self.get(doc, "buffer_alignment", int, "", 16, required=False),
                    min_size=self.get(doc, "min_message_size", int, "", 0, required=False),
                    max_size=self.get(doc, "max_message_size", int, "", 2**64 - 1, required=False),
                    threads=self.get(doc, "num_threads_per_block", int, "", 1024, required=False),
                    root=self.get(doc, "root", int, "", None, required=False),
                    requires=self.get(doc, "requires", dict, "", None, required=False))

    def gpu(self, g: Any, path: str) -> Gpu:
        if not isinstance(g, dict):
            self.say(path, "must be a JSON object (a rank's plan)", "R3")
            g = {}
        counts = [self.get(g, k, int, path, 0) for k in ("id", "input_chunks", "output_chunks", "scratch_chunks")]
        channels = [self.channel(c, f"{path}.channels[{i}]")
                    for i, c in enumerate(self.get(g, "channels", list, path, []))]
        remotes = [self.remote(b, f"{path}.remote_buffers[{i}]")
                   for i, b in enumerate(self.get(g, "remote_buffers", list, path, []))]
        semaphores = []
        for i, s in enumerate(self.get(g, "semaphores", list, path, [], required=False)):
            if isinstance(s, dict):
                semaphores.append(self.get(s, "init_value", int, f"{path}.semaphores[{i}]", 0))
            else:
                self.say(f"{path}.semaphores[{i}]", "must be an object {\"init_value\": N}", "R1")
        blocks = [self.block(b, f"{path}.threadblocks[{i}]")
                  for i, b in enumerate(self.get(g, "threadblocks", list, path, []))]
        return Gpu(*counts, tuple(c for c in channels if c), tuple(remotes), tuple(semaphores), tuple(blocks))

    def channel(self, c: Any, path: str) -> Channel | None:
        if not isinstance(c, dict):
            self.say(path, "must be a JSON object", "R3")
            return None
        kind = self.type_name(c, "channel_type", CHANNEL_TYPES, path)
        if kind == "switch":
            if "buffer_type" not in c and "buff" in c:
                self.say(f"{path}.buffer_type", "missing: the file says \"buff\", a spelling the current executor "
                                                "does not read (it reads buffer_type)", "R3")
                buffer_type = c["buff"] if c["buff"] in BUFFER_TYPES else None
            else:
                buffer_type = self.type_name(c, "buffer_type", BUFFER_TYPES, path)
            groups = []
            for i, group in enumerate(self.get(c, "rank_groups", list, path, [])):
                here = f"{path}.rank_groups[{i}]"
                ranks = self.get(group, "ranks", list, here, []) if isinstance(group, dict) else []
                groups.append(tuple(r for r in ranks if isinstance(r, int)))
            return Channel(kind, (), buffer_type, tuple(groups))
        peers = self.get(c, "connected_to", list, path, []) if kind in ("memory", "port") else []
        bad = [p for p in peers if not isinstance(p, int) or isinstance(p, bool)]
        if bad:
            self.say(f"{path}.connected_to", f"must hold ranks (integers), got {bad[0]!r}", "R1")
        return Channel(kind or "none", tuple(p for p in peers if p not in bad))

    def remote(self, b: Any, path: str) -> RemoteBuffer:
        if not isinstance(b, dict):
            self.say(path, "must be a JSON object", "R3")
            return RemoteBuffer(-1, "i", ())
        rank = self.get(b, "rank", int, path, -1)
        kind = self.type_name(b, "type", BUFFER_TYPES, path) or "i"
        access = self.get(b, "access_channel_types", list, path, [])
        for i, a in enumerate(access):
            if a not in ("memory", "port"):
                self.say(f"{path}.access_channel_types[{i}]", f"{a!r} is not a channel type a buffer is reached "
                                                              "by (memory, port)", "R4")
        return RemoteBuffer(rank, kind, tuple(a for a in access if a in ("memory", "port")))

    def block(self, b: Any, path: str) -> Block:
        if not isinstance(b, dict):
            self.say(path, "must be a JSON object (a thread block)", "R3")
            return Block(-1, path, {}, {}, ())
        ident = self.get(b, "id", int, path, -1)
        channels = self.typed_lists(b, "channels", "channel_type", "channel_ids", path, True)
        refs = self.typed_lists(b, "remote_buffer_refs", "access_channel_type", "remote_buffer_ids", path, False)
        ops = tuple(self.op(o, f"{path}.ops[{i}]") for i, o in enumerate(self.get(b, "ops", list, path, [])))
        return Block(ident, path, channels, refs, ops)

    def typed_lists(self, b: dict, key: str, type_key: str, ids_key: str, path: str,
                    required: bool) -> dict[str, tuple[int, ...]]:
        out: dict[str, list[int]] = {}
        for i, entry in enumerate(self.get(b, key, list, path, [], required=required)):
            here = f"{path}.{key}[{i}]"
            if not isinstance(entry, dict):
                self.say(here, "must be a JSON object", "R3")
                continue
            kind = self.type_name(entry, type_key, CHANNEL_TYPES, here)
            ids = [x for x in self.get(entry, ids_key, list, here, []) if isinstance(x, int)]
            out.setdefault(kind or "none", []).extend(ids)
        return {k: tuple(v) for k, v in out.items()}

    def type_name(self, obj: dict, key: str, allowed: tuple[str, ...], path: str) -> str | None:
        value = self.get(obj, key, str, path, None)
        if value is not None and value not in allowed:
            self.say(f"{path}.{key}", f"{value!r} is not a type the executor knows ({', '.join(allowed)})", "R4")
            return None
        return value

    def op(self, o: Any, path: str) -> Op:
        if not isinstance(o, dict):
            self.say(path, "must be a JSON object (an op)", "R3")
            return Op("nop", path)
        name = self.get(o, "name", str, path, "nop")
        if name not in OP_NAMES:
            self.say(f"{path}.name", f"{name!r} is not an op the executor knows (it throws \"Invalid operation "
                                     "type\")", "R4")
            name = "nop"
        channel_type = self.type_name(o, "channel_type", CHANNEL_TYPES, path) if "channel_type" in o else "none"
        ids = tuple(x for x in self.get(o, "channel_ids", list, path, [], required=False) if isinstance(x, int))
        src = tuple(self.ref(r, f"{path}.src_buff[{i}]")
                    for i, r in enumerate(self.get(o, "src_buff", list, path, [], required=False)))
        dst = tuple(self.ref(r, f"{path}.dst_buff[{i}]")
                    for i, r in enumerate(self.get(o, "dst_buff", list, path, [], required=False)))
        sems = tuple(x for x in self.get(o, "semaphore_ids", list, path, [], required=False) if isinstance(x, int))
        tbg = self.get(o, "tbg_info", dict, path, None, required=False)
        if tbg is not None:
            tbg = (self.get(tbg, "tb_id", int, f"{path}.tbg_info", 0), self.get(tbg, "tbg_size", int,
                                                                              f"{path}.tbg_info", 1))
        body, unit, count = (), None, None
        if name == "pipeline":
            context = self.get(o, "iter_context", dict, path, {})
            unit = self.get(context, "unit_size", int, f"{path}.iter_context", None)
            count = self.get(context, "num_chunks", int, f"{path}.iter_context", None)
            body = tuple(self.op(b, f"{path}.ops[{i}]") for i, b in enumerate(self.get(o, "ops", list, path, [])))
        barrier = (self.get(o, "barrier_id", int, path, None), self.get(o, "num_threadblocks", int, path, None)) \
            if name == "barrier" else (None, None)
        return Op(name, path, channel_type or "none", ids, src, dst, *barrier, sems, body, unit, count, tbg)

    def ref(self, r: Any, path: str) -> Ref:
        if not isinstance(r, dict):
            self.say(path, "must be a JSON object (a buffer reference)", "R16")
            return Ref("local", "i", 0, 0, path)
        keys = [k for k in ("type", "buffer_id", "switch_channel_id") if k in r]
        index, size = self.get(r, "index", int, path, 0), self.get(r, "size", int, path, 0)
        if len(keys) != 1:
            self.say(path, "needs exactly one of type, buffer_id, switch_channel_id", "R16")
            return Ref("local", "i", index, size, path)
        if keys[0] == "type":
            return Ref("local", self.type_name(r, "type", BUFFER_TYPES, path) or "i", index, size, path)
        kind = "remote" if keys[0] == "buffer_id" else "switch"
        return Ref(kind, self.get(r, keys[0], int, path, 0), index, size, path)

    def legacy(self, doc: dict) -> Plan:
        """A legacy plan described (name, collective, ranks, chunk counts), not modelled."""
        gpus = [g for g in doc.get("gpus", []) if isinstance(g, dict)]
        blocks = [() for _ in gpus]
        return Plan(str(doc.get("name", "")), str(doc.get("collective", "")), str(doc.get("protocol", "")),
                    bool(doc.get("inplace", False)),
                    tuple(Gpu(r, int(g.get("inputChunks", 0) or 0), int(g.get("outputChunks", 0) or 0),
                              int(g.get("scratchChunks", 0) or 0), (), (), (), blocks[r])
                          for r, g in enumerate(gpus)),
                    schema="legacy",
                    notes=("legacy schema (mscclpp 0.5-0.7: camelCase keys, channels bound to buffer pairs): the "
                           "current executor (>= 0.8) cannot load it, and the legacy one cannot load a current plan",))


def _json_name(kind) -> str:
    return {str: "string", list: "array", dict: "object"}[kind]


def summary(plan: Plan) -> str:
    """One line: schema, collective, ranks, protocol, placement, blocks and ops."""
    if plan.schema == "legacy":
        return f"MSCCL++ execution plan, legacy schema (mscclpp 0.5-0.7): {plan.collective} on {plan.ranks} ranks"
    blocks = max((len(g.blocks) for g in plan.gpus), default=0)
    ops = max((sum(1 + len(o.body) for o in b.ops) for g in plan.gpus for b in g.blocks), default=0)
    needs = plan.requires if isinstance(plan.requires, dict) else {}
    release = needs.get("mscclpp") if isinstance(needs.get("mscclpp"), str) else "0.8"
    gpu = f", sm_{needs['sm']}+ with NVLS" if needs.get("nvls") and isinstance(needs.get("sm"), int) else ""
    return (f"MSCCL++ execution plan (mscclpp >= {release}{gpu}): {plan.collective or '?'} on {plan.ranks} ranks, "
            f"{plan.protocol}, {'in place' if plan.inplace else 'out of place'}, up to {blocks} thread blocks per "
            f"rank and {ops} ops per block")


def looks_like_plan(doc: Any) -> bool:
    """Whether a JSON document is an MSCCL++ plan (a ``gpus`` array of rank plans) rather than a
    synth.program document."""
    return isinstance(doc, dict) and isinstance(doc.get("gpus"), list) and "format" not in doc
