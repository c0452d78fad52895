"""Replay an MSCCL++ plan at the data level: every rank's thread blocks run against each other under
the plan's own synchronisation, and the final state is compared with the declared collective.

What the executor does (shared/reference/mscclpp-format.md, sections 9-10) and how it is modelled:

- **Data.** Every chunk of every buffer holds the contributions it sums (rank, element) or nothing
  yet; ops move and add them (``copy``, ``put``, ``get``, the reduce family, packets, switch
  ``glres``/``gstore``). A chunk is cut into ``pieces`` elements so that thread-block groups
  (``tbg_info``) each take their share. In-place plans alias the input and output buffers as the
  collective lays them out.
- **Inside a block** ops run in order but are not separated: two ops between the same ``nop``s that
  touch one element, one of them writing, are a hazard (R23). A ``signal`` publishes what the
  block wrote before its last ``nop``; a ``wait`` (or ``sem_acquire``) is known to the block's
  other threads only from the next ``nop``.
- **Across blocks and ranks** happens-before is tracked with vector clocks: the k-th signal a rank
  sends on its k-th channel of a type to a peer meets the peer's k-th wait on its k-th channel of
  that type back (relaxed ones order execution only, not data); semaphores; barriers (every
  participant, same ``num_threadblocks``); LL packets carry their own flag, so a packet read waits
  for the packet to be written. An access not ordered after a conflicting one of another block is
  a race (R24); a block that can never go on is a deadlock; tokens and semaphores must end as they
  began (R20, R21).

>>> from synth.baselines import registry
>>> from synth.core.library import resolve_topology
>>> from synth.mscclpp.lower import PlanOptions, lower_plan
>>> from synth.mscclpp.plan import read_plan
>>> doc = lower_plan(registry()["ring"].make(resolve_topology("ring:4"), "allreduce"), PlanOptions())
>>> replay(read_plan(doc)[0]).correct
True
>>> waits = [i for i, op in enumerate(doc["gpus"][2]["threadblocks"][0]["ops"]) if op["name"] == "wait"]
>>> del doc["gpus"][2]["threadblocks"][0]["ops"][waits[-1]]
>>> print(replay(read_plan(doc)[0]).problems[0].split(": the next")[0])
gpus[1].channels: 1 signal(s) on rank 1's memory channel 0 to rank 2 are never waited for
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from synth.mscclpp.plan import Block, Op, Plan, Ref

MAX_PROBLEMS = 20
JUDGED = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce")
Loc = tuple[int, str, int]  # (rank, buffer, element)


@dataclass(frozen=True)
class ReplayResult:
    """``correct``: the final state is the collective's (None: not judged); ``problems``: each with
    the JSON path of the op it concerns; ``note``: what was not judged and why."""

    correct: bool | None
    problems: tuple[str, ...]
    note: str = ""
    trace: tuple = ()  # (rank, op, sources, targets) of every data op, in an order the plan allows
    pieces: int = 1  # elements per chunk in the trace's locations


@dataclass
class _Access:
    block: int
    clock: int
    path: str
    switch: bool = False  # a multimem store: visible once execution is ordered (relaxed signals do that)


@dataclass
class _BlockState:
    rank: int
    block: Block
    ops: list[Op]
    index: int
    pc: int = 0
    vc: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)  # joins the block's other threads see at the next nop
    published: list[int] = field(default_factory=list)  # what a signal carries: the state at the last nop
    ran: list[int] = field(default_factory=list)  # execution order known (relaxed signals included)
    ran_pending: list[int] = field(default_factory=list)
    phase: dict = field(default_factory=dict)  # element -> (op path, wrote) since the last nop
    at_barrier: bool = False


def replay(plan: Plan) -> ReplayResult:
    """The plan run to its end (see the module)."""
    if plan.schema != "current":
        return ReplayResult(None, (), "a legacy plan is not replayed")
    return _Replay(plan).run()


class _Replay:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.pieces = math.lcm(1, *(op.tbg[1] for g in plan.gpus for b in g.blocks for op in _flat(b.ops)
                                    if op.tbg and op.tbg[1] > 0))
        self.blocks = [_BlockState(r, b, _flat(b.ops), 0) for r, g in enumerate(plan.gpus) for b in g.blocks]
        for i, state in enumerate(self.blocks):
            state.index = i
            state.vc = [0] * len(self.blocks)
            state.pending = [0] * len(self.blocks)
            state.published = [0] * len(self.blocks)
            state.ran = [0] * len(self.blocks)
            state.ran_pending = [0] * len(self.blocks)
        self.values: dict[Loc, tuple | None] = {}
        self.packets: dict[Loc, list[int]] = {}  # a written packet -> what its writer knew
        self.writes: dict[Loc, _Access] = {}
        self.reads: dict[Loc, list[_Access]] = {}
        self.tokens: dict[tuple, list[tuple[list[int] | None, list[int]]]] = {}  # (data, execution) orders
        self.semaphores = {(r, s): (v, []) for r, g in enumerate(plan.gpus) for s, v in enumerate(g.semaphores)}
        self.barriers: dict[tuple, list[int]] = {}
        self.problems: list[str] = []
        self.trace: list[tuple] = []
        self._initial_state()

    # ------------------------------------------------------------------ layout
    def canonical(self, rank: int, buffer: str, element: int) -> Loc:
        """The location an element of a buffer is, in-place aliases resolved."""
        plan, gpu = self.plan, self.plan.gpus[rank]
        if plan.inplace:
            if plan.collective in ("allreduce", "alltoall") and buffer == "o":
                return rank, "i", element
            if plan.collective == "allgather" and buffer == "i":
                return rank, "o", rank * gpu.input_chunks * self.pieces + element
            if plan.collective == "reducescatter" and buffer == "o":
                return rank, "i", rank * gpu.output_chunks * self.pieces + element
        return rank, buffer, element

    def _initial_state(self) -> None:
        for r, gpu in enumerate(self.plan.gpus):
            for e in range(gpu.input_chunks * self.pieces):
                self.values[self.canonical(r, "i", e)] = ((r, e),)

    # ------------------------------------------------------------------ run
    def run(self) -> ReplayResult:
        steps, limit = 0, 100 * sum(len(s.ops) + 1 for s in self.blocks) + 1000
        while any(s.pc < len(s.ops) for s in self.blocks):
            moved = False
            for state in self.blocks:
                while state.pc < len(state.ops) and self.step(state):
                    moved, steps = True, steps + 1
            if not moved:
                self._deadlock()
                break
            if steps > limit:
                self.say("the replay did not finish (a bug in the replay or a plan that loops)")
                break
        self._leftovers()
        self._kernel_ends()
        correct, note = self._judge()
        if self.problems:
            correct = False if correct is not None else None
        return ReplayResult(correct, tuple(self.problems[:MAX_PROBLEMS]), note, tuple(self.trace), self.pieces)

    def say(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    def step(self, state: _BlockState) -> bool:
        """Run the block's next op if it can run now; False when it must wait."""
        op = state.ops[state.pc]
        handler = getattr(self, f"_op_{op.name}", None)
        if handler is None:
            handler = self._data
        if handler(state, op) is False:
            return False
        state.pc += 1
        state.vc[state.index] += 1
        return True

    # ------------------------------------------------------------------ synchronisation
    def _op_nop(self, state: _BlockState, op: Op) -> None:
        state.vc = _join(state.vc, state.pending)
        state.ran = _join(_join(state.ran, state.ran_pending), state.vc)
        state.published = list(state.vc)  # own component: this nop's clock, above every op before it
        state.phase = {}

    def _channel(self, state: _BlockState, op: Op, index: int) -> tuple | None:
        """(sender, receiver, type, ordinal) of a block-level channel index, from this rank's side."""
        ids = state.block.channels.get(op.channel_type, ())
        gpu = self.plan.gpus[state.rank]
        peers = gpu.peers(op.channel_type)
        if not 0 <= index < len(ids) or not 0 <= ids[index] < len(peers):
            self.say(f"{op.path}: channel {index} does not exist (see the load rules)")
            return None
        g = ids[index]
        peer = peers[g]
        ordinal = sum(1 for p in peers[:g] if p == peer)
        return state.rank, peer, op.channel_type, ordinal

    def _op_signal(self, state: _BlockState, op: Op, relaxed: bool = False) -> None:
        for index in op.channel_ids:
            key = self._channel(state, op, index)
            if key is not None:
                carried = self._carried(state, op)
                self.tokens.setdefault(key, []).append((None if relaxed else carried, _join(carried, state.ran)))

    def _carried(self, state: _BlockState, op: Op) -> list[int]:
        """What a signal makes known: the block's state at its last nop; on a port channel also
        everything the block posted before (the proxy runs a channel's requests in order)."""
        carried = list(state.published)
        if op.channel_type == "port":
            carried[state.index] = state.vc[state.index]
        return carried

    def _op_rlxsignal(self, state: _BlockState, op: Op) -> None:
        self._op_signal(state, op, relaxed=True)

    def _op_wait(self, state: _BlockState, op: Op) -> bool:
        keys = []
        for index in op.channel_ids:
            key = self._channel(state, op, index)
            if key is None:
                continue
            me, peer, kind, ordinal = key
            keys.append((peer, me, kind, ordinal))
        if any(not self.tokens.get(k) for k in keys):
            return False
        for k in keys:
            data, ran = self.tokens[k].pop(0)
            if data is not None:
                state.pending = _join(state.pending, data)
            state.ran_pending = _join(state.ran_pending, ran)
        return True

    _op_rlxwait = _op_wait

    def _op_flush(self, state: _BlockState, op: Op) -> None:
        return None

    def _op_sem_release(self, state: _BlockState, op: Op) -> None:
        for s in op.semaphore_ids:
            value, carried = self.semaphores.get((state.rank, s), (0, []))
            self.semaphores[(state.rank, s)] = (value + 1, carried + [list(state.published)])

    def _op_sem_acquire(self, state: _BlockState, op: Op) -> bool:
        keys = [(state.rank, s) for s in op.semaphore_ids]
        if any(self.semaphores.get(k, (0, []))[0] <= 0 for k in keys):
            return False
        for k in keys:
            value, carried = self.semaphores[k]
            if carried:
                state.pending = _join(state.pending, carried[0])
            self.semaphores[k] = (value - 1, carried[1:])
        return True

    def _op_barrier(self, state: _BlockState, op: Op) -> bool:
        key = (state.rank, op.barrier_id)
        arrived = self.barriers.setdefault(key, [])
        if not state.at_barrier:
            state.at_barrier = True
            state.vc = _join(state.vc, state.pending)
            arrived.append(state.index)
        members = [self.blocks[i] for i in arrived]
        if any(m.ops[m.pc].num_threadblocks != op.num_threadblocks for m in members):
            self.say(f"{op.path}: barrier {op.barrier_id} is joined with different num_threadblocks [R22]")
        if len(arrived) < (op.num_threadblocks or 0):
            return False
        joined = [0] * len(self.blocks)
        for m in members:
            joined = _join(joined, m.vc)
        for m in members:
            m.vc = list(joined)
            m.ran = _join(m.ran, joined)
            m.published = list(joined)
            m.phase, m.at_barrier = {}, False
            if m is not state:
                m.pc += 1
                m.vc[m.index] += 1
        self.barriers[key] = []
        return True

    def _op_pipeline(self, state: _BlockState, op: Op) -> None:
        return None  # its body follows it in the flattened ops

    # ------------------------------------------------------------------ data
    def _data(self, state: _BlockState, op: Op) -> bool:
        sources = [self.locations(state, op, ref) for ref in op.src]
        targets = [self.locations(state, op, ref) for ref in op.dst]
        if any(s is None for s in sources) or any(t is None for t in targets):
            return True  # a bad reference: the load rules said so
        packet_in = _packet_sources(op, len(sources))
        if any(loc not in self.packets for i in packet_in for loc in sources[i]):
            return False  # the packet has not arrived: the op polls its flag
        results = self.compute(op, sources, state)
        if results is None:
            return True
        self.trace.append((state.rank, op, sources, targets))
        known = list(state.vc)  # a packet read orders this op after the packet's writer
        for i in packet_in:
            for loc in sources[i]:
                known = _join(known, self.packets[loc])
        for i, locs in enumerate(sources):
            for loc in locs:
                self.access(state, op, loc, False, known, packet=i in packet_in)
        packet_out = _packet_targets(op, len(targets))
        stamp = list(known)
        stamp[state.index] = state.vc[state.index]
        for position, locs in enumerate(targets):
            for loc, value in zip(locs, results):
                for one in loc if isinstance(loc, list) else [loc]:
                    self.access(state, op, one, True, known, packet=position in packet_out,
                                switch=op.channel_type == "switch")
                    self.values[one] = value
                    if position in packet_out:
                        self.packets[one] = stamp
        if op.name in ("pws", "pwsf"):  # the put, then a signal on its channel
            for index in op.channel_ids:
                key = self._channel(state, op, index)
                if key is not None:
                    carried = self._carried(state, op)
                    self.tokens.setdefault(key, []).append((carried, _join(carried, state.ran)))
        return True

    def compute(self, op: Op, sources: list[list[Loc]], state: _BlockState) -> list[tuple] | None:
        """The value each target element gets: a copy of the first source, or the sum of all."""
        if op.name == "glres":
            return [self._sum([self.values.get(loc) for loc in group], op) for group in sources[0]] if sources else None
        if not sources:
            self.say(f"{op.path}: {op.name} with no source")
            return None
        width = len(sources[0])
        if any(len(s) != width for s in sources):
            return None  # sizes differ: the load rules said so
        summing = op.name in ("re", "res", "rre", "rres", "repkt", "respkt", "recpkt", "recspkt")
        out = []
        for x in range(width):
            values = [self.values.get(s[x]) for s in (sources if summing else sources[:1])]
            if any(v is None for v in values):
                where = next(s[x] for s, v in zip(sources, values) if v is None)
                self.say(f"{op.path}: reads {_where(where, self.pieces)} before anything is written there")
                return None
            out.append(self._sum(values, op) if summing else values[0])
        return out

    def _sum(self, values: list, op: Op) -> tuple | None:
        if any(v is None for v in values):
            self.say(f"{op.path}: reduces a chunk nothing was written to")
            return None
        return tuple(sorted(c for v in values for c in v))

    def locations(self, state: _BlockState, op: Op, ref: Ref) -> list[Loc] | None:
        """The elements a reference covers (this block's share of a thread-block group)."""
        lo, hi = ref.index * self.pieces, (ref.index + ref.size) * self.pieces
        if op.tbg is not None and op.tbg[1] > 0:
            share = (hi - lo) // op.tbg[1]
            lo, hi = lo + op.tbg[0] * share, lo + (op.tbg[0] + 1) * share
        if ref.kind == "local":
            return [self.canonical(state.rank, ref.buffer, e) for e in range(lo, hi)]
        if ref.kind == "remote":
            refs = state.block.remote_refs.get(op.channel_type, ())
            gpu = self.plan.gpus[state.rank]
            if not 0 <= ref.buffer < len(refs) or not 0 <= refs[ref.buffer] < len(gpu.remote_buffers):
                return None
            remote = gpu.remote_buffers[refs[ref.buffer]]
            if not 0 <= remote.rank < self.plan.ranks:
                return None
            return [self.canonical(remote.rank, remote.type, e) for e in range(lo, hi)]
        return self._switch_locations(state, op, ref, lo, hi)

    def _switch_locations(self, state: _BlockState, op: Op, ref: Ref, lo: int, hi: int) -> list | None:
        """A switch reference: per element, its location on every rank of the group (glres reads
        and writes them all; gstore writes them all)."""
        ids = state.block.channels.get("switch", ())
        groups = self.plan.gpus[state.rank].switch_groups()
        if not 0 <= ref.buffer < len(ids) or not 0 <= ids[ref.buffer] < len(groups):
            return None
        buffer, ranks = groups[ids[ref.buffer]]
        return [[self.canonical(r, buffer, e) for r in ranks] for e in range(lo, hi)]

    def access(self, state: _BlockState, op: Op, loc, write: bool, known: list[int], packet: bool = False,
               switch: bool = False) -> None:
        """Record one access by an op that knows ``known``; say so where it races (another block,
        no happens-before) or is a hazard inside the block (no nop between, nor a packet chain)."""
        if isinstance(loc, list):  # a switch element: every rank's copy
            for one in loc:
                self.access(state, op, one, write, known, packet, switch)
            return
        clock = state.vc[state.index]
        seen = state.phase.get(loc)
        if seen is not None and seen[0] != op.path and (write or seen[1]) and known[state.index] < seen[2]:
            self.say(f"{op.path}: touches {_where(loc, self.pieces)} that {seen[0]} of the same block "
                     f"{'writes' if seen[1] else 'reads'}, with no nop between them [R23]")
        state.phase[loc] = (op.path, write or (seen is not None and seen[1]), clock)
        last = self.writes.get(loc)
        basis = _join(known, state.ran) if last is not None and last.switch else known
        if last is not None and last.block != state.index and basis[last.block] < last.clock and not packet:
            self.say(f"{op.path}: {'writes' if write else 'reads'} {_where(loc, self.pieces)}, which {last.path} "
                     "writes with nothing ordering the two (a signal/wait, semaphore or barrier after a nop) [R24]")
        if write:
            for read in self.reads.get(loc, []):
                if read.block != state.index and known[read.block] < read.clock:
                    self.say(f"{op.path}: overwrites {_where(loc, self.pieces)} while {read.path} may still "
                             "read it [R24]")
            self.writes[loc] = _Access(state.index, clock, op.path, switch)
            self.reads[loc] = []
        else:
            self.reads.setdefault(loc, []).append(_Access(state.index, clock, op.path))

    # ------------------------------------------------------------------ the end
    def _deadlock(self) -> None:
        for state in self.blocks:
            if state.pc < len(state.ops):
                op = state.ops[state.pc]
                what = {"wait": "a signal that never comes", "rlxwait": "a signal that never comes",
                        "sem_acquire": "a semaphore release that never comes",
                        "barrier": f"the other blocks of barrier {op.barrier_id}"}.get(op.name,
                                                                                   "a packet that is never written")
                self.say(f"{op.path}: rank {state.rank} block {state.block.id} waits forever for {what} (deadlock)")

    def _leftovers(self) -> None:
        for (sender, receiver, kind, ordinal), left in sorted(self.tokens.items()):
            if left:
                self.say(f"gpus[{sender}].channels: {len(left)} signal(s) on rank {sender}'s {kind} channel {ordinal} "
                         f"to rank {receiver} are never waited for: the next execution starts with them [R20]")
        for (rank, s), (value, _) in sorted(self.semaphores.items()):
            initial = self.plan.gpus[rank].semaphores[s]
            if value != initial:
                self.say(f"gpus[{rank}].semaphores[{s}]: ends at {value}, began at {initial} [R21]")

    def _kernel_ends(self) -> None:
        """A rank's kernel ends when its blocks do: by then every write into its output from
        another rank must be known to one of its blocks (a signal after a nop, a wait on this rank)."""
        for r, gpu in enumerate(self.plan.gpus):
            known = [0] * len(self.blocks)
            ran = [0] * len(self.blocks)
            for state in self.blocks:
                if state.rank == r:
                    known = _join(known, _join(state.vc, state.pending))
                    ran = _join(ran, _join(state.ran, state.ran_pending))
            for e in range(max(0, gpu.output_chunks) * self.pieces):
                loc = self.canonical(r, "o", e)
                last = self.writes.get(loc)
                basis = _join(known, ran) if last is not None and last.switch else known
                if last is not None and self.blocks[last.block].rank != r and basis[last.block] < last.clock:
                    self.say(f"{last.path}: writes {_where(loc, self.pieces)}, and nothing orders that before rank "
                             f"{r}'s kernel ends (a signal after a nop there, a wait on rank {r}) [R24]")

    def _judge(self) -> tuple[bool | None, str]:
        plan = self.plan
        if plan.collective not in JUDGED:
            return None, f"collective {plan.collective!r}: not one the replay knows the result of"
        gpus = plan.gpus
        if len({(g.input_chunks, g.output_chunks) for g in gpus}) != 1:
            return None, "ranks with different chunk counts: not judged"
        if gpus[0].input_chunks <= 0 or gpus[0].output_chunks <= 0:
            return None, "no input or no output chunks: not judged (the executor refuses it, R6)"
        if plan.collective in ("broadcast", "reduce") and (plan.root is None or not 0 <= plan.root < plan.ranks):
            return None, f"{plan.collective} without a \"root\" key: not judged"
        for r in range(plan.ranks):
            for e, want in enumerate(self._expected(r)):
                if want is None:
                    continue  # nothing asked of this rank's output
                have = self.values.get(self.canonical(r, "o", e))
                if have != want:
                    self.say(f"gpus[{r}]: output {_where((r, 'o', e), self.pieces)} ends holding {_text(have)}, "
                             f"{plan.collective} needs {_text(want)}")
                    return False, ""
        return True, ""

    def _expected(self, rank: int) -> list[tuple]:
        plan, n, p = self.plan, self.plan.ranks, self.pieces
        gpu = plan.gpus[rank]
        per_out = gpu.output_chunks * p
        if plan.collective == "allreduce":
            return [tuple((q, e) for q in range(n)) for e in range(per_out)]
        if plan.collective == "allgather":
            per_in = gpu.input_chunks * p
            return [((e // per_in, e % per_in),) for e in range(per_out)]
        if plan.collective == "reducescatter":
            return [tuple((q, rank * per_out + e) for q in range(n)) for e in range(per_out)]
        if plan.collective == "broadcast":
            return [((plan.root, e),) for e in range(per_out)]
        if plan.collective == "reduce":
            return [tuple((q, e) for q in range(n)) if rank == plan.root else None for e in range(per_out)]
        k = per_out // n
        return [((e // k, rank * k + e % k),) for e in range(per_out)]


def _packet_sources(op: Op, count: int) -> set[int]:
    """Which sources hold LL packets (the op polls them)."""
    if op.name in ("upkt", "rppkt", "gstorepkt"):
        return set(range(count))
    if op.name in ("repkt", "respkt", "recpkt", "recspkt"):
        return set(range(1, count))
    return set()


def _packet_targets(op: Op, count: int) -> set[int]:
    """Which destinations the op writes as LL packets."""
    if op.name in ("ppkt", "rppkt", "cpkt", "gstorepkt"):
        return set(range(count))
    if op.name in ("respkt", "recspkt"):
        return set(range(2 if op.name == "recspkt" else 1, count)) | ({1} if op.name == "recspkt" else set())
    if op.name == "recpkt":
        return {1}
    return set()


def _flat(ops) -> list[Op]:
    out = []
    for op in ops:
        out.append(op)
        out += list(op.body)
    return out


def _join(a: list[int], b: list[int]) -> list[int]:
    return [max(x, y) for x, y in zip(a, b)]


def _where(loc: Loc, pieces: int) -> str:
    rank, buffer, element = loc
    chunk = element // pieces
    part = "" if pieces == 1 else f" (piece {element % pieces} of {pieces})"
    return f"chunk {chunk}{part} of rank {rank}'s {buffer}"


def _text(value) -> str:
    if value is None:
        return "nothing"
    shown = ", ".join(f"r{r}:{e}" for r, e in value[:6])
    return f"{{{shown}{', ...' if len(value) > 6 else ''}}}"
