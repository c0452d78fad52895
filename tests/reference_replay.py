"""A second, deliberately different implementation of the schedule semantics, for tests only.

It replays *data*: every rank's contribution is a random 64-bit integer, copies move values,
reduces add them (so a double count shows up as a wrong sum), and contribution sets are bit
masks. It answers only "valid or not", so that property tests can compare it with verify().
"""

from __future__ import annotations

import random

from synth.core.schedule import Schedule


def reference_valid(schedule: Schedule, seed: int = 7) -> bool:
    topo, coll = schedule.topology, schedule.collective
    rng = random.Random(seed)
    n, chunks = coll.ranks, coll.chunks
    contribution = [[rng.getrandbits(64) | 1 for _ in range(chunks)] for _ in range(n)]
    # value[r][c]: None, or (sum, mask) for combining / (token, 0) for copies
    value: list[list[tuple[int, int] | None]] = [[None] * chunks for _ in range(n)]
    for c in range(chunks):
        for r in coll.pre[c]:
            value[r][c] = (contribution[r][c], 1 << r) if coll.combining else (c, 0)
    links = {(l.src, l.dst): l for l in topo.links}
    ok = True
    for step in schedule.steps:
        if step.rounds is not None and step.rounds < 1:
            ok = False
        load: dict[tuple[int, int], int] = {}
        incoming: dict[tuple[int, int], list] = {}
        for s in step.sends:
            if not (0 <= s.src < n and 0 <= s.dst < n and 0 <= s.chunk < chunks):
                return False
            if (s.src, s.dst) not in links:
                ok = False
            else:
                load[(s.src, s.dst)] = load.get((s.src, s.dst), 0) + 1
            if s.op == "reduce" and not coll.combining:
                ok = False
            held = value[s.src][s.chunk]
            if held is None:
                ok = False
                continue
            incoming.setdefault((s.dst, s.chunk), []).append((s.op, held))
        if step.rounds is not None and step.rounds >= 1:
            for key, count in load.items():
                cap = topo.link_capacity(links[key])
                if cap is not None and count > cap * step.rounds:
                    ok = False
            for g in topo.groups:
                cap = topo.group_capacity(g)
                if cap is not None and sum(load.get(k, 0) for k in g.links) > cap * step.rounds:
                    ok = False
        new_values = {}
        for (dst, c), writes in incoming.items():
            ops = [op for op, _ in writes]
            if len(writes) > 1 and any(op == "copy" for op in ops):
                ok = False
            copies = [v for op, v in writes if op == "copy"]
            total, mask = copies[-1] if copies else (value[dst][c] or (0, 0))
            for op, (v, m) in writes:
                if op != "reduce":
                    continue
                if coll.combining and mask & m:
                    ok = False
                total, mask = total + v, mask | m
            new_values[(dst, c)] = (total, mask) if coll.combining else (c, 0)
        for (dst, c), v in new_values.items():
            value[dst][c] = v
    for c in range(chunks):
        expected = sum(contribution[r][c] for r in coll.pre[c])
        want_mask = sum(1 << r for r in coll.pre[c])
        for r in coll.post[c]:
            held = value[r][c]
            if held is None:
                ok = False
            elif coll.combining and held != (expected, want_mask):
                ok = False
    return ok
