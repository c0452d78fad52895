"""How a Program's ops wait on each other, as the MSCCL runtimes execute them.

Shared by the load rules (synth.msccl.load_rules) and the data-level replay (synth.program.replay):

- ``transfers(tb)``: a thread block's ops after the parser folds them (msccl-format.md 6.2): nops
  vanish and hand their dependency to the next real op; consecutive fusable ``re`` become one
  transfer; each transfer publishes the kernel's step counter (which counts one position per
  dependency and per fused ``re``) when its last op has ``has_dep``;
- ``release(...)``: which transfer of the target block releases a wait for position K (flags are
  monotonic: the first publishing transfer at a position >= K);
- ``connections(program)``: the ordered sends and receives of every (sender, receiver, channel);
- ``structure_problems(program)``: FIFO ownership, unmatched or mismatched send/receive
  sequences, switch ops whose participants disagree (synth.program.switches), and waits that can
  never be met (happens-before cycles = deadlock; a switch op is a rendezvous: what follows it on
  any participant waits for every participant to reach it).

>>> from synth.program.ir import Op, Threadblock
>>> tb = Threadblock(0, -1, -1, 0, (Op("nop", "i", -1, "o", -1, 0, 1, 2), Op("cpy", "i", 0, "o", 0, 1, 2, 0, True)))
>>> [(t.ops, t.waits, t.step) for t in transfers(tb)]
[((1,), ((1, 2), (2, 0)), 1)]
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from synth.program.ir import MAX_FUSED_REDUCES, RECEIVING, SENDING, Program, Threadblock

SEVERITIES = ("rejects", "misbehaves", "note")


@dataclass(frozen=True)
class Problem:
    """One finding. severity: "rejects" (the runtime refuses to load the file), "misbehaves"
    (it loads but computes garbage, hangs or corrupts memory) or "note" (harmless)."""

    code: str
    message: str
    severity: str = "misbehaves"
    rank: int | None = None
    tb: int | None = None
    step: int | None = None
    line: int | None = None

    def where(self) -> str:
        parts = [f"line {self.line}"] if self.line is not None else []
        parts += [f"{k} {v}" for k, v in (("rank", self.rank), ("tb", self.tb), ("step", self.step)) if v is not None]
        return " ".join(parts)

    def __str__(self) -> str:
        where = self.where()
        return f"{self.severity}: {where + ': ' if where else ''}{self.message} [{self.code}]"


@dataclass(frozen=True)
class Transfer:
    """What the runtime executes: ``ops`` (positions of the real ops; several for a fused ``re``
    chain), ``waits`` ((block id, step) pairs met before it starts), ``step`` (the counter value it
    publishes) and ``has_dep`` (whether it publishes)."""

    ops: tuple[int, ...]
    waits: tuple[tuple[int, int], ...]
    step: int
    has_dep: bool


_FOLDED: dict[int, tuple[Threadblock, tuple[Transfer, ...]]] = {}
_STRUCTURE: dict[int, tuple[Program, list]] = {}


def transfers(tb: Threadblock) -> tuple[Transfer, ...]:
    """Fold ``tb``'s ops as the executor's parser does (nops, fused reductions, step counter)."""
    hit = _FOLDED.get(id(tb))
    if hit is not None and hit[0] is tb:
        return hit[1]
    if len(_FOLDED) > 200_000:
        _FOLDED.clear()
    result = _fold(tb)
    _FOLDED[id(tb)] = (tb, result)
    return result


def _fold(tb: Threadblock) -> tuple[Transfer, ...]:
    out: list[list] = []  # [ops, waits, has_dep, n_reductions]
    pending: list[tuple[int, int]] = []
    red_dst = red_src = None
    n_red = 0
    for pos, op in enumerate(tb.ops):
        if op.dep_tb >= 0:
            pending.append((op.dep_tb, op.dep_op))
        if op.type == "nop":
            continue
        is_re = op.type == "re"
        if is_re and out and red_dst == (op.dst_buf, op.dst_off) and red_src == op.src_buf and op.dep_tb == -1:
            last = out[-1]
            last[0].append(pos)
            last[2] = op.has_dep
            last[3] += 1
        else:
            out.append([[pos], tuple(pending), op.has_dep, 1])
            pending = []
            red_dst = red_src = None
        if is_re:
            n_red += 1
            if op.has_dep or n_red == MAX_FUSED_REDUCES:
                red_dst = red_src = None
            else:
                red_dst, red_src = (op.dst_buf, op.dst_off), op.src_buf
        else:
            red_dst = red_src = None
    result, step = [], 0
    for ops, waits, has_dep, n in out:
        if waits:
            step += len(waits) - 1
        step += n - 1
        result.append(Transfer(tuple(ops), waits, step, has_dep))
        step += 1
    return tuple(result)


def release(target: tuple[Transfer, ...], step: int) -> int | None:
    """Index of the transfer of a block whose publication first satisfies a wait for ``step``."""
    for index, t in enumerate(target):
        if t.has_dep and t.step >= step:
            return index
    return None


def connections(program: Program) -> dict[tuple[int, int, int], tuple[list, list]]:
    """(sender, receiver, channel) -> ([sends], [receives]), each (rank, tb index, op position, count)
    in block order; blocks of one rank that share a FIFO are listed block after block."""
    conns: dict[tuple[int, int, int], tuple[list, list]] = defaultdict(lambda: ([], []))
    ranks = len(program.gpus)
    for g in program.gpus:
        for index, tb in enumerate(g.threadblocks):
            send_ok, recv_ok = 0 <= tb.send < ranks, 0 <= tb.recv < ranks
            for pos, op in enumerate(tb.ops):
                if send_ok and op.type in SENDING:
                    conns[(g.rank, tb.send, tb.channel)][0].append((g.rank, index, pos, op.count))
                if recv_ok and op.type in RECEIVING:
                    conns[(tb.recv, g.rank, tb.channel)][1].append((g.rank, index, pos, op.count))
    return dict(conns)


def shared_fifos(program: Program) -> list[Problem]:
    """Blocks of one rank that own the same (peer, direction, channel) FIFO."""
    problems = []
    for g in program.gpus:
        owners: dict[tuple[str, int, int], list[int]] = defaultdict(list)
        for tb in g.threadblocks:
            if tb.send >= 0:
                owners[("send", tb.send, tb.channel)].append(tb.id)
            if tb.recv >= 0:
                owners[("recv", tb.recv, tb.channel)].append(tb.id)
        for (direction, peer, chan), ids in owners.items():
            if len(ids) > 1:
                verb = "send to" if direction == "send" else "receive from"
                problems.append(Problem("shared-fifo", f"tbs {', '.join(map(str, ids))} all {verb} rank {peer} on "
                                        f"channel {chan}: they share one FIFO and their messages interleave",
                                        rank=g.rank))
    return problems


def sequence_problems(program: Program, conns) -> list[Problem]:
    """Per connection: a receiving block exists, and the k-th send and k-th receive agree on count."""
    problems = []
    for (src, dst, chan), (sends, recvs) in sorted(conns.items()):
        name = f"connection {src}->{dst} channel {chan}"
        if len(sends) != len(recvs):
            problems.append(Problem("unmatched", f"{name}: {len(sends)} sends but {len(recvs)} receives "
                                    "(a receive waits forever or data is left in the FIFO)",
                                    rank=src if sends else dst))
        for k, (s, r) in enumerate(zip(sends, recvs)):
            if s[3] != r[3]:
                tb = program.gpus[dst].threadblocks[r[1]].id
                problems.append(Problem("count-mismatch", f"{name}: send #{k} moves {s[3]} chunks but the receive "
                                        f"expects {r[3]}", rank=dst, tb=tb, step=r[2]))
                break
    return problems


def wait_problems(program: Program, conns, owners_ok) -> list[Problem]:
    """Whether every transfer can run: happens-before edges (program order, dependencies,
    k-th send before k-th receive) must be acyclic and every wait must have a releasing step."""
    index: dict[tuple[int, int, int], int] = {}  # (rank, tb index, transfer) -> node
    of_op: dict[tuple[int, int, int], int] = {}  # (rank, tb index, op position) -> node
    preds: list[int] = []
    succ: list[list[int]] = []
    labels: list[tuple[int, int, int, int]] = []
    problems = []
    folded = [[transfers(tb) for tb in g.threadblocks] for g in program.gpus]
    for g in program.gpus:
        ids = {}
        for i, tb in enumerate(g.threadblocks):
            ids.setdefault(tb.id, i)
        for i, tb in enumerate(g.threadblocks):
            for k, t in enumerate(folded[g.rank][i]):
                node = len(labels)
                index[(g.rank, i, k)] = node
                for pos in t.ops:
                    of_op[(g.rank, i, pos)] = node
                labels.append((g.rank, tb.id, t.ops[0], k))
                preds.append(0)
                succ.append([])
                if k:
                    succ[node - 1].append(node)
                    preds[node] += 1
        for i, tb in enumerate(g.threadblocks):
            for k, t in enumerate(folded[g.rank][i]):
                node = index[(g.rank, i, k)]
                for dep_tb, dep_step in t.waits:
                    target = ids.get(dep_tb)
                    found = None if target is None else release(folded[g.rank][target], dep_step)
                    if found is None:
                        preds[node] += 1  # never met
                        continue
                    succ[index[(g.rank, target, found)]].append(node)
                    preds[node] += 1
    for key, (sends, recvs) in conns.items():
        if not owners_ok(key):
            continue
        for k, r in enumerate(recvs):
            dst = of_op[(r[0], r[1], r[2])]
            if k >= len(sends):
                preds[dst] += 1  # nothing to receive
                continue
            s = sends[k]
            succ[of_op[(s[0], s[1], s[2])]].append(dst)
            preds[dst] += 1
    _rendezvous(program, of_op, preds, succ)
    ready = [n for n, p in enumerate(preds) if p == 0]
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        for nxt in succ[node]:
            preds[nxt] -= 1
            if preds[nxt] == 0:
                ready.append(nxt)
    if done < len(preds):
        stuck = [labels[n] for n, p in enumerate(preds[:len(labels)]) if p > 0]
        first = {}
        for rank, tb, pos, _ in stuck:
            first.setdefault((rank, tb), pos)
        shown = "; ".join(f"rank {r} tb {t} step {p}" for (r, t), p in list(first.items())[:4])
        problems.append(Problem("deadlock", f"{len(first)} thread block(s) can never finish (cyclic or unmet waits), "
                                f"e.g. {shown}", rank=stuck[0][0], tb=stuck[0][1], step=stuck[0][2]))
    return problems


def _rendezvous(program: Program, of_op: dict, preds: list[int], succ: list[list[int]]) -> None:
    """Make every switch op a rendezvous in the graph: a new node after every participant's op,
    taking over their successors (an op missing on a participant: a wait never met)."""
    from synth.program.switches import switch_groups

    for group in switch_groups(program)[0].values():
        meet = len(preds)
        preds.append(0 if group.complete else 1)
        succ.append([])
        for rank, (index, pos) in group.members.items():
            node = of_op[(rank, index, pos)]
            succ[meet] += succ[node]
            succ[node] = [meet]
            preds[meet] += 1


def structure_problems(program: Program) -> list[Problem]:
    """FIFO ownership, send/receive sequences per connection, and deadlock freedom."""
    hit = _STRUCTURE.get(id(program))
    if hit is not None and hit[0] is program:
        return list(hit[1])
    if len(_STRUCTURE) > 8:
        _STRUCTURE.clear()
    result = _structure(program)
    _STRUCTURE[id(program)] = (program, result)
    return list(result)


def _structure(program: Program) -> list[Problem]:
    shared = shared_fifos(program)
    owners: dict[tuple[int, int, int], int] = defaultdict(int)
    for g in program.gpus:
        for tb in g.threadblocks:
            if tb.send >= 0:
                owners[(g.rank, tb.send, tb.channel, "s")] += 1
            if tb.recv >= 0:
                owners[(tb.recv, g.rank, tb.channel, "r")] += 1

    def owners_ok(key) -> bool:
        src, dst, chan = key
        return owners[(src, dst, chan, "s")] <= 1 and owners[(src, dst, chan, "r")] <= 1

    from synth.program.switches import switch_groups

    conns = connections(program)
    single = {k: v for k, v in conns.items() if owners_ok(k)}
    switches = switch_groups(program)[1]
    return shared + sequence_problems(program, single) + switches + wait_problems(program, conns, owners_ok)
