"""Direct allreduce encoding: every chunk is reduced up its own tree to a root, then copied out.

SCCL only solves allreduce as reduce_scatter followed by allgather, which forces every chunk's
reduction to finish before any chunk's distribution starts. Here each chunk c has
  root[c][r]      the rank where c's sum is completed (exactly one),
  up[c][a][b][s]  a adds its partial of c into b in step s (every non-root exactly once),
  cp[c][a][b][s]  a copies the finished sum of c to b in step s,
  done[c][r][s]   r holds the finished sum after step s,
and the phases of different chunks may overlap. A rank sends its partial up only after all its
children have (strictly earlier steps), so partial sums form a tree into the root and every
contribution is counted exactly once; a rank receives the final copy only after its own partial
has left. Capacity and rounds are the same as in the plain encoding. On a topology whose
switches compute, reduce entries (several partials summed into one rank) and copy entries
(one sum written to several ranks) join the trees (``synth.smt.switch_trees``).

>>> from synth.core.generators import ring
>>> from synth.core.collectives import allreduce
>>> inst = DirectAllreduceInstance(ring(3), allreduce(3), steps=2, max_rounds=4)
>>> inst.solve(4).status.value
'solved'
"""

from __future__ import annotations

from synth.core.schedule import Schedule, Send, Step
from synth.smt import switch_trees
from synth.smt.cardinality import neg
from synth.smt.encoding import SmtInstance
from synth.smt.sat.answer import Answer


class DirectAllreduceInstance(SmtInstance):
    """Allreduce (every chunk: pre = post = all ranks) as overlapping reduce and copy trees."""

    ENCODING_KIND = "direct"

    def _build(self) -> None:
        topo, coll, S = self.topology, self.collective, self.steps
        n = topo.ranks
        everyone = frozenset(range(n))
        if not coll.combining or any(p != everyone or q != everyone for p, q in zip(coll.pre, coll.post)):
            raise ValueError("the direct allreduce encoding takes an allreduce collective")
        cl, var = self._clause, self._var
        chunks = range(coll.chunks)
        self.root = {(c, r): var(f"root_{c}_{r}") for c in chunks for r in range(n)}
        self.up = {(c, l.src, l.dst, s): var(f"up_{c}_{l.src}_{l.dst}_{s}")
                   for c in chunks for l in topo.links for s in range(1, S)}
        self.cp = {(c, l.src, l.dst, s): var(f"cp_{c}_{l.src}_{l.dst}_{s}")
                   for c in chunks for l in topo.links for s in range(2, S + 1)}
        done = {(c, r, s): (False if s == 0 and n > 1 else var(f"done_{c}_{r}_{s}"))
                for c in chunks for r in range(n) for s in range(S + 1)}
        sent = {(c, r, s): (False if s == 0 else var(f"sent_{c}_{r}_{s}"))
                for c in chunks for r in range(n) for s in range(S + 1)}
        ups_from: dict[tuple[int, int, int], list] = {}
        cps_into: dict[tuple[int, int, int], list] = {}
        for (c, a, b, s), x in self.up.items():
            ups_from.setdefault((c, a, s), []).append(x)
            cl(-x, neg(sent[(c, b, s)]))  # b sends up only after its children
            cl(-x, neg(done[(c, b, s - 1)]))  # a root is done only once every reduction into it has landed
        for (c, a, b, s), x in self.cp.items():
            cps_into.setdefault((c, b, s), []).append(x)
            cl(-x, done[(c, a, s - 1)])
            cl(-x, neg(done[(c, b, s - 1)]))
            cl(-x, sent[(c, b, s - 1)])  # b's own partial has already left
            cl(-x, done[(c, b, s)])
        if topo.switches:  # their reduce and copy entries join the trees
            self.switch_vars = switch_trees.encode(self, (ups_from, cps_into, sent, done))
        for c in chunks:
            self._exactly_one([self.root[(c, r)] for r in range(n)])
            if c + 1 < coll.chunks:  # chunks are interchangeable: sort them by root (sound)
                for r in range(n):
                    cl(-self.root[(c + 1, r)], *[self.root[(c, q)] for q in range(r + 1)])
            for r in range(n):
                every_up = [x for s in range(1, S) for x in ups_from.get((c, r, s), [])]
                self._exactly_one(every_up + [self.root[(c, r)]])
                for s in range(1, S + 1):
                    now, before, after = ups_from.get((c, r, s), []), sent[(c, r, s - 1)], sent[(c, r, s)]
                    cl(-after, before, *now)  # sent[s] == sent[s-1] or some up in s
                    cl(neg(before), after)
                    for x in now:
                        cl(-x, after)
                    cl(neg(done[(c, r, s - 1)]), done[(c, r, s)])
                    cl(-done[(c, r, s)], done[(c, r, s - 1)], self.root[(c, r)], *cps_into.get((c, r, s), []))
                cl(done[(c, r, S)])
        self.done = done
        per_link: dict[tuple[int, int, int], list] = {}
        for table in (self.up, self.cp):
            for (c, a, b, s), x in table.items():
                per_link.setdefault((a, b, s), []).append(x)
        self._rounds_and_capacity(per_link, self.switch_vars.port_loads if self.switch_vars else None)

    def _decode(self, answer: Answer, seconds: float) -> Schedule:
        true = answer.value

        steps = []
        for s in range(1, self.steps + 1):
            sends = [Send(c, a, b, "reduce") for (c, a, b, t), v in sorted(self.up.items()) if t == s and true(v)]
            copies: dict[tuple[int, int], Send] = {}
            for (c, a, b, t), v in sorted(self.cp.items()):
                if t == s and true(v) and (b, c) not in copies:
                    copies[(b, c)] = Send(c, a, b, "copy")
            extra = sum(true(e) for e in self.extra[s - 1])
            entries = switch_trees.decode(true, self.switch_vars, s, set(copies)) if self.switch_vars else ()
            steps.append(Step(tuple(sorted(sends + list(copies.values()))), 1 + extra, tuple(entries)))
        meta = {"synthesizer": "smt", "encoding": "direct-allreduce", "solve_seconds": round(seconds, 4)}
        return Schedule(self.topology, self.collective, tuple(steps), meta)
