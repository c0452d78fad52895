"""Schedule -> MSCCL++ execution plan (the current schema of mscclpp >= 0.8).

Where every value lives comes from the MSCCL lowering's planner (``synth.lower.plan``: MSCCL's
buffer layout, scratch slots for values in transit, final copies). What moves it is new, since
MSCCL++ has no FIFOs, only stores into peer memory and explicit synchronisation
(shared/reference/mscclpp-format.md, sections 9-10). Every rank runs one program: its thread
blocks are that program cut into pieces of at most ``MAX_OPS`` ops at step boundaries, each piece
waiting on a semaphore the one before releases. Channels are memory channels inside a machine and
port channels across machines, one per neighbour.

- **Simple.** In step t a sender ``put``s each chunk into the receiver's buffer. A copy goes
  straight to its place there, unless the receiver still reads that place in step t: then, like a
  reduction's partial, it goes to a landing slot in the receiver's scratch (two sets, by the step's
  parity). After a ``nop``, every rank signals and waits on every neighbour. After another ``nop``
  the receiver copies landed chunks to their place, or adds them to its operand (``re``).
- **LL.** A sender writes packets (``ppkt``) into a slot of the receiver's scratch used once per
  execution, and the receiver unpacks them (``upkt``) or adds them to its operand (``repkt``). It
  polls their flags, so no signals are needed. Scratch is double-buffered across executions.
- **Switch entries** (Simple only; synth.mscclpp.switches): switch channels, and ``glres`` /
  ``gstore`` run by one rank of each group after the step's signal/wait, so they read what every
  member holds at the step's start; then every rank signals and waits again (the members are
  neighbours) before the landed chunks are placed, so the next step sees what the switch wrote,
  as the reference NVLS plans do. A step with switch ops only skips the first signal/wait when
  nothing was written since the last one. A put into a place a switch op reads that step lands in
  scratch instead.

The replay (``synth.mscclpp.replay``) checks every plan this writes: ``tests/mscclpp`` replays the
plans of every shared example and library schedule.

>>> from synth.core.library import resolve_topology
>>> from synth.baselines import registry
>>> ring = registry()["ring"].make(resolve_topology("ring:4"), "allgather")
>>> doc = lower_plan(ring, PlanOptions())
>>> doc["collective"], len(doc["gpus"]), doc["gpus"][0]["channels"]
('allgather', 4, [{'channel_type': 'memory', 'connected_to': [1, 3]}])
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from synth.core.errors import InputError
from synth.core.schedule import Schedule
from synth.lower.layout import buffer_layout
from synth.lower.plan import PlanConfig, Planner, Transfer
from synth.mscclpp.switches import SwitchPlan

PROTOCOLS = ("Simple", "LL")
VERSIONS = ("0.8", "0.9", "0.10")
COLLECTIVES = {"allreduce": "allreduce", "allgather": "allgather", "reduce_scatter": "reducescatter",
               "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce"}
MAX_OPS = 62  # per block: MAX_OPERATION 64 minus the semaphore and nop that chain the blocks
MAX_IDS = 8  # channel ids per op
MAX_BLOCKS = 128  # blocks a rank may chain (all resident at once)
MAX_CHANNELS = 16  # channels of a type, and remote buffers of an access type, per thread block


@dataclass(frozen=True)
class PlanOptions:
    """``protocol``: Simple or LL; ``version``: the mscclpp release the plan is for (every op this
    writes exists from 0.8); ``inplace``; the byte range it is selected for; ``name``;
    ``max_threadblocks``: the most thread blocks a rank may run (the plan already chains the
    fewest its ops allow; more is refused in one line)."""

    protocol: str = "Simple"
    version: str = "0.10"
    inplace: bool = False
    min_bytes: int = 0
    max_bytes: int | None = None
    name: str | None = None
    alignment: int = 16
    max_threadblocks: int | None = None


def lower_plan(schedule: Schedule, options: PlanOptions = PlanOptions()) -> dict:
    """The plan document of ``schedule`` (see the module); InputError (one line) when it cannot
    be written."""
    _check(schedule, options)
    coll = schedule.collective
    layout = buffer_layout(coll, options.inplace)
    planner = Planner(schedule, layout, PlanConfig(cap=1, pair_all=False, spread=1), "one").run()
    writer = _Writer(schedule, layout, planner, options)
    gpus = [writer.gpu(r) for r in range(coll.ranks)]
    largest = _largest_size(gpus, coll.name, options.protocol)
    if options.max_bytes is not None and options.max_bytes > largest:
        raise InputError(f"max bytes {options.max_bytes}: past {largest} a buffer offset of this plan passes 2^32, "
                         "which MSCCL++ keeps in 32 bits")
    name = options.name or f"synth_{coll.name}_{schedule.topology.name}_{len(schedule.steps)}s"
    rooted = {} if coll.root is None else {"root": coll.root}  # for readers: the executor reads no root
    if writer.switch is not None:  # for readers too: what switch channels need (the executor reads no such key)
        rooted["requires"] = writer.switch.requires()
    return {
        "name": name, "collective": COLLECTIVES[coll.name], **rooted, "protocol": options.protocol,
        "inplace": options.inplace, "reuse_resources": False, "num_threads_per_block": 1024,
        "use_double_scratch_buffer": options.protocol == "LL", "buffer_alignment": options.alignment,
        "min_message_size": options.min_bytes,
        "max_message_size": largest if options.max_bytes is None else options.max_bytes,
        "gpus": gpus,
    }


def _largest_size(gpus: list[dict], collective: str, protocol: str) -> int:
    """The largest message (as the executor checks it: the output for allgather, else the input)
    whose every byte offset stays below 2^32 (R12; LL doubles scratch offsets)."""
    worst = 1.0
    for g in gpus:
        checked = g["output_chunks"] if collective == "allgather" else g["input_chunks"]
        scratch = g["scratch_chunks"] * (2 if protocol == "LL" else 1)
        worst = max(worst, max(g["input_chunks"], g["output_chunks"], scratch) / checked)
    return int((2**32 - 1) / worst)


def _check(schedule: Schedule, options: PlanOptions) -> None:
    if options.protocol not in PROTOCOLS:
        raise InputError(f"MSCCL++ plans run Simple or LL, not {options.protocol}")
    if options.version not in VERSIONS:
        raise InputError(f"--mscclpp-version {options.version}: the current schema is {', '.join(VERSIONS)}")
    if schedule.collective.name not in COLLECTIVES:
        raise InputError(f"MSCCL++ plans are written for {', '.join(COLLECTIVES)}, not {schedule.collective.name}")
    if not 0 <= options.min_bytes < 2**31:
        raise InputError(f"min bytes {options.min_bytes}: MSCCL++ reads it as an int (below 2^31)")
    budget = options.max_threadblocks
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 1):
        raise InputError(f"--max-threadblocks must be a positive integer, got {budget!r}")


class _Writer:
    """Builds each rank's gpu entry from the planner's transfers."""

    def __init__(self, schedule: Schedule, layout, planner: Planner, options: PlanOptions):
        self.schedule, self.layout, self.options = schedule, layout, options
        self.topology = schedule.topology
        self.ll = options.protocol == "LL"
        self.by_step: dict[int, list[Transfer]] = defaultdict(list)
        for t in planner.transfers:
            self.by_step[t.step].append(t)
        self.copies = planner.copies
        self.scratch = list(planner.scratch)
        self.neighbours = defaultdict(set)
        for t in planner.transfers:
            self.neighbours[t.src].add(t.dst)
            self.neighbours[t.dst].add(t.src)
        self.switch = None
        self.switch_reads: dict[int, set] = defaultdict(set)  # step -> (rank, buffer, index) a switch op reads
        if planner.switches:
            self.switch = SwitchPlan(schedule, planner.switches, options.version, options.protocol)
            for rank, others in self.switch.members.items():
                self.neighbours[rank].update(others)
            for sw in planner.switches:
                self.switch_reads[sw.step].update((r, loc[0], loc[1] + i) for r, loc in sw.reads
                                                  for i in range(sw.count))
        self.landing = self._landing_slots()

    # ---------------------------------------------------------------- scratch
    def _landing_slots(self) -> dict[Transfer, int]:
        """The scratch slot each landed transfer writes (Simple: two sets by step parity after the
        planner's own slots; LL: one packet slot per transfer, past every data slot)."""
        slots: dict[Transfer, int] = {}
        if self.ll:
            used = defaultdict(int)
            for step in sorted(self.by_step):
                for t in self.by_step[step]:
                    slots[t] = used[t.dst]
                    used[t.dst] += t.count
            base = list(self.scratch)
            slots = {t: base[t.dst] + s for t, s in slots.items()}
            self.scratch = [base[r] + used[r] for r in range(len(base))]
            return slots
        width = defaultdict(int)
        per_step = defaultdict(int)
        for step in sorted(self.by_step):
            per_step.clear()
            for t in self.by_step[step]:
                if self._lands(t):
                    slots[t] = per_step[t.dst]
                    per_step[t.dst] += t.count
            for r, used in per_step.items():
                width[r] = max(width[r], used)
        base = list(self.scratch)
        slots = {t: base[t.dst] + (t.step % 2) * width[t.dst] + s for t, s in slots.items()}
        self.scratch = [base[r] + 2 * width[r] for r in range(len(base))]
        return slots

    def _lands(self, t: Transfer) -> bool:
        """Whether a Simple transfer goes through a landing slot: a reduction's partial, or a copy
        whose place the receiver still reads in this step."""
        if t.kind != "r":
            return True
        read = {(u.send[0], u.send[1] + i) for u in self.by_step[t.step] if u.src == t.dst for i in range(u.count)}
        switched = self.switch_reads.get(t.step, set())
        return any((t.target[0], t.target[1] + i) in read or (t.dst, t.target[0], t.target[1] + i) in switched
                   for i in range(t.count))

    # ---------------------------------------------------------------- one rank
    def gpu(self, rank: int) -> dict:
        peers = sorted(self.neighbours[rank])
        kinds = {p: self._kind(rank, p) for p in peers}
        memory = [p for p in peers if kinds[p] == "memory"]
        port = [p for p in peers if kinds[p] == "port"]
        for kind, group in (("memory", memory), ("port", port)):
            if len(group) > MAX_CHANNELS:
                raise InputError(f"rank {rank} talks to {len(group)} peers over {kind} channels: a thread block "
                                 f"holds at most {MAX_CHANNELS} channels of a type")
        channels = ([{"channel_type": "memory", "connected_to": memory}] if memory else []) + \
                   ([{"channel_type": "port", "connected_to": port}] if port else [])
        self.switch_channels = len(self.switch.channel_keys(rank)) if self.switch else 0
        channels += self.switch.channels(rank) if self.switch else []
        self.channel_index = {p: (kinds[p], (memory if kinds[p] == "memory" else port).index(p)) for p in peers}
        self.remote: list[dict] = []
        self.remote_index: dict[tuple[int, str], int] = {}
        ops = self._program(rank, peers)
        blocks = self._blocks(rank, ops, memory, port)
        layout = self.layout
        n = self.schedule.collective.ranks
        input_chunks = layout.input_chunks or (layout.chunks_per_loop // n if self.schedule.collective.name
                                               == "allgather" else layout.chunks_per_loop)
        output_chunks = layout.output_chunks or (layout.chunks_per_loop // n if self.schedule.collective.name
                                                 == "reduce_scatter" else layout.chunks_per_loop)
        return {"id": rank, "input_chunks": input_chunks, "output_chunks": output_chunks,
                "scratch_chunks": self.scratch[rank], "channels": channels, "remote_buffers": self.remote,
                "semaphores": [{"init_value": 0} for _ in range(max(0, len(blocks) - 1))],
                "threadblocks": blocks}

    def _kind(self, a: int, b: int) -> str:
        mof = self.topology.machine_of
        return "memory" if mof[a] == mof[b] else "port"

    def _program(self, rank: int, peers: list[int]) -> list[list[dict]]:
        """The rank's ops, in pieces that must stay in one block (a step's ops, the final copies)."""
        pieces = [[*self._sync(peers, relaxed=True), {"name": "nop"}]] if peers and not self.ll else []
        for step in sorted(set(self.by_step) | (self.switch.steps if self.switch else set())):
            pieces.append(self._step(rank, step, peers))
        finals = [self._copy(c.src, c.dst, c.count) for c in self.copies if c.rank == rank]
        if finals:
            pieces.append(finals + [{"name": "nop"}])
        return [p for p in pieces if p]

    def _step(self, rank: int, step: int, peers: list[int]) -> list[dict]:
        transfers = self.by_step[step]
        out = [self._send(t) for t in transfers if t.src == rank]
        incoming = [t for t in transfers if t.dst == rank]
        if self.ll:
            if out and incoming:
                out.append({"name": "nop"})
            out += [self._land(t) for t in incoming]
            return out + ([{"name": "nop"}] if incoming else [])
        if not out and not incoming and not peers:
            return []
        if peers and self._synced_before(step):
            out += [{"name": "nop"}, *self._sync(peers, relaxed=False), {"name": "nop"}]
        if peers and self.switch is not None and step in self.switch.steps:
            out += [*self.switch.step_ops(rank, step), {"name": "nop"}, *self._sync(peers, relaxed=False),
                    {"name": "nop"}]
        finish = [self._land(t) for t in incoming if t in self.landing]
        return out + (finish + [{"name": "nop"}] if finish else [])

    def _synced_before(self, step: int) -> bool:
        """Whether a step needs its signal/wait after the puts: always, unless it only has switch
        ops and nothing was written since the last signal/wait (the step before placed nothing
        landed; the very first step has the initial one)."""
        if self.switch is None or step not in self.switch.steps or self.by_step.get(step):
            return True
        before = [s for s in set(self.by_step) | self.switch.steps if s < step]
        return bool(before) and any(t in self.landing for t in self.by_step.get(max(before), []))

    # ---------------------------------------------------------------- ops
    def _send(self, t: Transfer) -> dict:
        """The sender's op: packets into the receiver's slot (LL), or a put to the chunk's place
        there, or to a landing slot (Simple)."""
        kind, index = self.channel_index[t.dst]
        target = ("s", self.landing[t]) if t in self.landing else t.target
        op = {"name": "ppkt" if self.ll else "put", "channel_type": kind,
              "src_buff": [self._local(t.send, t.count)], "dst_buff": [self._remote(t.dst, target, t.count, kind)]}
        if kind == "port":
            op["channel_ids"] = [index]
        return op

    def _land(self, t: Transfer) -> dict:
        """The receiver's op for what landed in its slot: a copy to the chunk's place, or a sum with
        its operand (LL: from packets, ``upkt`` / ``repkt``; Simple: ``copy`` / ``re``)."""
        landed = self._local(("s", self.landing[t]), t.count)
        target = [self._local(t.target, t.count)]
        if t.kind == "r":
            return {"name": "upkt" if self.ll else "copy", "src_buff": [landed], "dst_buff": target}
        return {"name": "repkt" if self.ll else "re", "src_buff": [self._local(t.operand, t.count), landed],
                "dst_buff": target, "reduce_op": "sum"}

    def _copy(self, src, dst, count: int) -> dict:
        return {"name": "copy", "src_buff": [self._local(src, count)], "dst_buff": [self._local(dst, count)]}

    @staticmethod
    def _local(loc, count: int) -> dict:
        return {"type": loc[0], "index": loc[1], "size": count}

    def _remote(self, peer: int, loc, count: int, kind: str) -> dict:
        key = (peer, loc[0])
        if key not in self.remote_index:
            self.remote_index[key] = len(self.remote)
            self.remote.append({"rank": peer, "type": loc[0], "access_channel_types": [kind]})
        return {"buffer_id": ("ref", self.remote_index[key], kind), "index": loc[1], "size": count}

    def _sync(self, peers: list[int], relaxed: bool) -> list[dict]:
        """Signal every neighbour, then wait on every one (at most MAX_IDS channels an op)."""
        ops = []
        for verb in ("signal", "wait"):
            for kind in ("memory", "port"):
                ids = [self.channel_index[p][1] for p in peers if self.channel_index[p][0] == kind]
                for start in range(0, len(ids), MAX_IDS):
                    ops.append({"name": ("rlx" if relaxed else "") + verb, "channel_type": kind,
                                "channel_ids": ids[start:start + MAX_IDS]})
        return ops

    # ---------------------------------------------------------------- blocks
    def _blocks(self, rank: int, pieces: list[list[dict]], memory: list[int], port: list[int]) -> list[dict]:
        """The program cut into blocks of at most MAX_OPS ops at piece boundaries, block k waiting
        on semaphore k - 1 that block k - 1 releases last."""
        groups: list[list[dict]] = [[]]
        for piece in pieces:
            if len(piece) > MAX_OPS - 2:
                raise InputError(f"rank {rank}: one step takes {len(piece)} ops, more than a thread block runs "
                                 f"({MAX_OPS}); a schedule with fewer transfers per step is needed")
            if len(groups[-1]) + len(piece) > MAX_OPS - 2:
                groups.append([])
            groups[-1].extend(piece)
        if len(groups) > MAX_BLOCKS:
            raise InputError(f"rank {rank}: {len(groups)} thread blocks needed, more than {MAX_BLOCKS}")
        budget = self.options.max_threadblocks
        if budget is not None and len(groups) > budget:
            raise InputError(f"rank {rank}: its program takes {len(groups)} thread blocks (steps in blocks of at most "
                             f"{MAX_OPS} ops, chained), more than --max-threadblocks {budget}; a schedule with fewer "
                             "steps or peers fits (synth solve --max-threadblocks)")
        blocks = []
        for k, ops in enumerate(groups):
            if k:
                ops = [{"name": "sem_acquire", "semaphore_ids": [k - 1]}, {"name": "nop"}] + ops
            if k + 1 < len(groups):
                ops = ops + [{"name": "nop"}, {"name": "sem_release", "semaphore_ids": [k]}]
            blocks.append(self._block(k, ops, memory, port))
        return blocks

    def _block(self, k: int, ops: list[dict], memory: list[int], port: list[int]) -> dict:
        refs: dict[str, list[int]] = {"memory": [], "port": []}
        for op in ops:
            for ref in op.get("dst_buff", []):
                marker = ref.get("buffer_id")
                if isinstance(marker, tuple):
                    _, gpu_id, kind = marker
                    if gpu_id not in refs[kind]:
                        refs[kind].append(gpu_id)
                    ref["buffer_id"] = refs[kind].index(gpu_id)
        if any(len(ids) > MAX_CHANNELS for ids in refs.values()):
            raise InputError(f"a thread block would reach more than {MAX_CHANNELS} remote buffers of one access type")
        channels = ([{"channel_type": "memory", "channel_ids": list(range(len(memory)))}] if memory else []) + \
                   ([{"channel_type": "port", "channel_ids": list(range(len(port)))}] if port else []) + \
                   ([{"channel_type": "switch", "channel_ids": list(range(self.switch_channels))}]
                    if self.switch_channels else [])
        remote = [{"access_channel_type": kind, "remote_buffer_ids": ids} for kind, ids in refs.items() if ids]
        return {"id": k, "channels": channels, "remote_buffer_refs": remote, "ops": ops}
