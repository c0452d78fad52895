"""One order of every rank's transfers that can never deadlock, for the single-threaded executor.

The happens-before graph of a Program (synth.program.deps): a thread block's transfers in program
order, every dependency (the publishing transfer before the waiting one), and on every connection
the k-th send before the k-th receive. When it is acyclic, walking one topological order of the
whole graph and keeping each rank's own transfers gives each rank a sequence it can execute in
one thread: with non-blocking sends (and receives posted no later than they are taken), the transfer at
global position p only ever waits for a send
at a position < p, which its rank has already posted, so every rank finishes (by induction on p).
Running the transfers in that order is one of the interleavings the thread blocks could take, so a
race-free program computes the same result as with a thread per block. None when the graph has a
cycle (the program can deadlock; the threaded executor shows where). The order taken is by layer
(longest path from the start), sends first within a layer, so that each rank posts what others
wait for as early as it can.

>>> from synth.program.ir import Op, Program, RankProgram, Threadblock
>>> def rank(r):
...     net = Threadblock(0, 1 - r, 1 - r, 0, (Op("s", "i", 0, "o", r, 1), Op("r", "i", 0, "o", 1 - r, 1)))
...     return RankProgram(r, 1, 2, 0, (net, Threadblock(1, -1, -1, 0, (Op("cpy", "i", 0, "o", r, 1),))))
>>> global_order(Program("ag", "allgather", 2, "Simple", 2, False, True, 1, (rank(0), rank(1))))[0]
[(0, 0), (1, 0), (0, 1)]
"""

from __future__ import annotations

import heapq

from synth.program.deps import connections, release, transfers
from synth.program.ir import Program


def global_order(program: Program) -> list[list[tuple[int, int]]] | None:
    """Per rank, its (thread block index, transfer index) pairs in a deadlock-free order; None if
    the happens-before graph has a cycle or a wait no transfer ever releases, and for a program
    with switch ops (their emulation blocks a root on its srcs inside one transfer, which one
    thread per rank cannot interleave; they run threaded)."""
    if program.switch_ops:
        return None
    folded = [[transfers(tb) for tb in g.threadblocks] for g in program.gpus]
    node: dict[tuple[int, int, int], int] = {}
    of_op: dict[tuple[int, int, int], int] = {}
    label: list[tuple[int, int, int]] = []
    for g in program.gpus:
        for i, blocks in enumerate(folded[g.rank]):
            for k, t in enumerate(blocks):
                node[(g.rank, i, k)] = len(label)
                for pos in t.ops:
                    of_op[(g.rank, i, pos)] = len(label)
                label.append((g.rank, i, k))
    succ: list[list[int]] = [[] for _ in label]
    preds = [0] * len(label)

    def edge(a: int, b: int) -> None:
        succ[a].append(b)
        preds[b] += 1

    for g in program.gpus:
        ids: dict[int, int] = {}
        for i, tb in enumerate(g.threadblocks):
            ids.setdefault(tb.id, i)
        for i, blocks in enumerate(folded[g.rank]):
            for k, t in enumerate(blocks):
                here = node[(g.rank, i, k)]
                if k:
                    edge(here - 1, here)
                for dep_tb, dep_step in t.waits:
                    target = ids.get(dep_tb)
                    found = None if target is None else release(folded[g.rank][target], dep_step)
                    if found is None:
                        return None
                    edge(node[(g.rank, target, found)], here)
    for sends, recvs in connections(program).values():
        if len(sends) < len(recvs):
            return None
        for s, r in zip(sends, recvs):
            edge(of_op[s[:3]], of_op[r[:3]])
    sending = [any(program.gpus[r].threadblocks[i].ops[pos].sends for pos in folded[r][i][k].ops)
               for r, i, k in label]
    depth = [0] * len(label)

    def key(n: int) -> tuple:  # earliest layer first; in a layer, what others wait for (sends) first
        return (depth[n], not sending[n], label[n], n)

    ready = [key(n) for n, p in enumerate(preds) if p == 0]
    heapq.heapify(ready)
    out: list[list[tuple[int, int]]] = [[] for _ in program.gpus]
    done = 0
    while ready:
        n = heapq.heappop(ready)[-1]
        rank, i, k = label[n]
        out[rank].append((i, k))
        done += 1
        for m in succ[n]:
            depth[m] = max(depth[m], depth[n] + 1)
            preds[m] -= 1
            if preds[m] == 0:
                heapq.heappush(ready, key(m))
    return out if done == len(label) else None
