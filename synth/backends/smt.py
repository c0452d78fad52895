"""SCCL-style k-synchronous synthesis on z3, as a pure Boolean + pseudo-Boolean (SAT) encoding.

For a non-combining collective, S steps and a rounds budget:
  has[c][r][s]   rank r holds chunk c after step s (s = 0: the precondition), monotone in s;
  send[c][l][s]  chunk c crosses link l = (a, b) in step s (1-based);
  extra[s][k]    step s uses more than k rounds (unary, ordered), so rounds[s] = 1 + sum_k extra[s][k].
Constraints: a send needs the sender to hold c at the step's start and the receiver not to;
a rank holds c after s only if it held it before or some link brought it in s; every post rank
holds c after S; per step, every link and group carries at most capacity x rounds[s] chunks;
sum_s rounds[s] <= R (a selector literal per R, so one solver serves every R for given S, C).
Variables that reachability rules out (hop distances) are never created.

Solver objects never leave this module: callers get SolveResult with a Schedule or a status.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import z3

from synth.collective import Collective
from synth.schedule import Schedule, Send, SolveResult, Status, Step
from synth.symmetry import Symmetry, interchangeable_chunks
from synth.topology import Topology


@dataclass(frozen=True)
class SmtOptions:
    """Knobs of the encoding; the defaults are the measured winners (see benchmarks/)."""

    forbid_redundant_sends: bool = True
    prune_useless_relays: bool = True
    capacity_encoding: str = "guarded_card"  # or "pb": one pseudo-Boolean row per link-step
    order_interchangeable_chunks: bool = True
    receive_once: bool = False
    random_seed: int = 0
    memory_mb: int = 4096  # z3 gives up (an unknown, not a proof) beyond this


class SmtInstance:
    """One encoding for (topology, collective, steps) that answers many rounds budgets.

    >>> from synth.generators import uring
    >>> from synth.collectives import allgather
    >>> inst = SmtInstance(uring(3), allgather(3), steps=2, max_rounds=2)
    >>> inst.solve(rounds=2).status.value
    'solved'
    """

    def __init__(
        self,
        topology: Topology,
        collective: Collective,
        steps: int,
        max_rounds: int,
        options: SmtOptions = SmtOptions(),
        symmetries: tuple[Symmetry, ...] = (),
    ) -> None:
        """``symmetries`` *restrict* the search to schedules invariant under them: a SAT answer
        is a real schedule, but INFEASIBLE then proves nothing about the unrestricted problem."""
        if collective.combining:
            raise ValueError("the SMT encoding takes non-combining collectives; use reductions")
        if not topology.rounds_apply:
            raise ValueError(f"{topology.name}: capacities are not whole numbers, rounds do not apply")
        self.topology = topology
        self.collective = collective
        self.steps = steps
        self.max_rounds = max(max_rounds, steps)
        self.options = options
        self.symmetries = tuple(sym for sym in symmetries if not sym.is_identity)
        z3.set_param("memory_max_size", options.memory_mb)
        self._solver = z3.SolverFor("QF_FD")
        self._solver.set("random_seed", options.random_seed)
        self._selectors: dict[int, z3.BoolRef] = {}
        self._build()

    # ------------------------------------------------------------------ encoding
    def _build(self) -> None:
        topo, coll, S = self.topology, self.collective, self.steps
        dist = topo.hop_distances
        add = self._solver.add
        self._dist = [
            [min(dist[h][r] for h in coll.pre[c]) for r in range(topo.ranks)] for c in range(coll.chunks)
        ]
        need = [sorted(coll.post[c] - coll.pre[c]) for c in range(coll.chunks)]
        # which keys exist (reachability pruning is invariant under automorphisms)
        has_keys = []
        fixed: dict[tuple[int, int, int], bool] = {}
        for c in range(coll.chunks):
            for r in range(topo.ranks):
                for s in range(S + 1):
                    if r in coll.pre[c]:
                        fixed[(c, r, s)] = True
                    elif self._dist[c][r] > s:
                        fixed[(c, r, s)] = False
                    else:
                        has_keys.append((c, r, s))
        send_keys = []
        for c in range(coll.chunks):
            for link in topo.links:
                a, b = link.src, link.dst
                if b in coll.pre[c]:
                    continue
                for s in range(1, S + 1):
                    if self._dist[c][a] > s - 1:
                        continue
                    if self.options.prune_useless_relays and not any(dist[b][d] <= S - s for d in need[c]):
                        continue
                    send_keys.append((c, a, b, s))
        # one variable per orbit under the symmetries; constraints only for orbit representatives
        has_rep = _orbits(has_keys, [lambda k, g=g: (g.chunks[k[0]], g.ranks[k[1]], k[2]) for g in self.symmetries])
        send_rep = _orbits(send_keys, [lambda k, g=g: (g.chunks[k[0]], g.ranks[k[1]], g.ranks[k[2]], k[3])
                                       for g in self.symmetries])
        has_var = {k: z3.Bool("h_%d_%d_%d" % k) for k in has_keys if has_rep[k] == k}
        send_var = {k: z3.Bool("x_%d_%d_%d_%d" % k) for k in send_keys if send_rep[k] == k}
        self.has = {**{k: v for k, v in fixed.items()}, **{k: has_var[has_rep[k]] for k in has_keys}}
        self.send = {k: send_var[send_rep[k]] for k in send_keys}
        incoming: dict[tuple[int, int, int], list] = {}
        for key, var in self.send.items():
            c, a, b, s = key
            incoming.setdefault((c, b, s), []).append(var)
            if send_rep[key] != key:
                continue
            clauses = [_lit(self.has[(c, a, s - 1)]), _lit(self.has[(c, b, s)])]
            if self.options.forbid_redundant_sends:
                clauses.append(z3.Not(_lit(self.has[(c, b, s - 1)])))
            for clause in clauses:
                add(z3.Or(z3.Not(var), clause))
        if self.options.receive_once:
            into: dict[tuple[int, int], list] = {}
            for (c, b, s), vars_ in incoming.items():
                into.setdefault((c, b), []).extend(vars_)
            for (c, b), vars_ in into.items():
                if b in coll.post[c]:
                    add(z3.PbEq([(v, 1) for v in vars_], 1))
                elif len(vars_) > 1:
                    add(z3.AtMost(*vars_, 1))
        for key in has_keys:
            if has_rep[key] != key or key[2] == 0:
                continue
            c, r, s = key
            value, prev = self.has[key], _lit(self.has[(c, r, s - 1)])
            add(z3.Or(z3.Not(value), prev, *incoming.get((c, r, s), [])))
            add(z3.Or(z3.Not(prev), value))
        for c, post in enumerate(coll.post):
            for r in post:
                add(_lit(self.has[(c, r, S)]))
        if not self.symmetries and self.options.order_interchangeable_chunks:
            self._order_chunks(add)
        # rounds: extra[s][k] for k < max extra per step, ordered
        spare = self.max_rounds - S
        self.extra = [[z3.Bool(f"e_{s}_{k}") for k in range(spare)] for s in range(1, S + 1)]
        for row in self.extra:
            for k in range(1, len(row)):
                add(z3.Implies(row[k], row[k - 1]))
        per_link: dict[tuple[int, int, int], list] = {}
        for (c, a, b, s), var in self.send.items():
            per_link.setdefault((a, b, s), []).append(var)
        link_rep = _orbits([l.key for l in topo.links], [lambda k, g=g: (g.ranks[k[0]], g.ranks[k[1]])
                                                          for g in self.symmetries])
        for (a, b, s), vars_ in per_link.items():
            if link_rep[(a, b)] == (a, b):
                self._capacity(vars_, topo.link_capacity(topo.link(a, b)), s)
        group_names = {frozenset(g.links): g.name for g in topo.groups}
        by_name = {g.name: g for g in topo.groups}
        group_rep = _orbits([g.name for g in topo.groups], [
            lambda name, g=g: group_names.get(frozenset((g.ranks[a], g.ranks[b]) for a, b in by_name[name].links), name)
            for g in self.symmetries
        ]) if topo.groups else {}
        for group in topo.groups:
            if group_rep.get(group.name, group.name) != group.name:
                continue
            cap = topo.group_capacity(group)
            for s in range(1, S + 1):
                vars_ = [v for key in group.links for v in per_link.get((key[0], key[1], s), [])]
                self._capacity(vars_, cap, s)

    def _order_chunks(self, add) -> None:
        """Interchangeable chunks reach a designated rank in index order (a valid relabeling)."""
        for members in interchangeable_chunks(self.collective):
            first = members[0]
            targets = sorted(self.collective.post[first] - self.collective.pre[first])
            if not targets:
                continue
            d = max(targets, key=lambda r: (self._dist[first][r], -r))
            for c1, c2 in zip(members, members[1:]):
                for s in range(self.steps + 1):
                    later, earlier = self.has[(c2, d, s)], self.has[(c1, d, s)]
                    if isinstance(later, z3.BoolRef):
                        add(z3.Implies(later, _lit(earlier)))

    def _capacity(self, sends: list, cap: int, step: int) -> None:
        row = self.extra[step - 1]
        if len(sends) <= cap:
            return
        if not row:
            self._solver.add(z3.AtMost(*sends, cap))
            return
        if self.options.capacity_encoding == "guarded_card":
            # rounds[step] <= 1 + k  (i.e. not extra[k])  =>  at most cap * (1 + k) sends
            for k, more in enumerate(row):
                if len(sends) > cap * (1 + k):
                    self._solver.add(z3.Or(more, z3.AtMost(*sends, cap * (1 + k))))
            if len(sends) > cap * (1 + len(row)):
                self._solver.add(z3.AtMost(*sends, cap * (1 + len(row))))
            return
        # sum(sends) <= cap * (1 + sum(row))  <=>  sum(sends) + cap * sum(not row) <= cap * (1 + len(row))
        terms = [(v, 1) for v in sends] + [(z3.Not(e), cap) for e in row]
        self._solver.add(z3.PbLe(terms, cap * (1 + len(row))))

    def _selector(self, rounds: int) -> z3.BoolRef:
        if rounds not in self._selectors:
            sel = z3.Bool(f"rounds_le_{rounds}")
            flat = [e for row in self.extra for e in row]
            if flat:
                self._solver.add(z3.Implies(sel, z3.AtMost(*flat, rounds - self.steps)))
            self._selectors[rounds] = sel
        return self._selectors[rounds]

    # ------------------------------------------------------------------ solving
    def solve(self, rounds: int, time_limit: float | None = None) -> SolveResult:
        """Is there a schedule with these steps and at most ``rounds`` rounds in total?"""
        if rounds < self.steps or rounds > self.max_rounds:
            raise ValueError(f"rounds {rounds} outside {self.steps}..{self.max_rounds}")
        return self._check([self._selector(rounds)], time_limit)

    def solve_split(self, rounds_per_step: tuple[int, ...], time_limit: float | None = None) -> SolveResult:
        """Is there a schedule with exactly these rounds in each step? (assumptions; exact)"""
        if len(rounds_per_step) != self.steps or min(rounds_per_step) < 1:
            raise ValueError(f"need {self.steps} per-step rounds >= 1, got {rounds_per_step}")
        assumptions = []
        for row, rounds in zip(self.extra, rounds_per_step):
            if rounds - 1 > len(row):
                raise ValueError(f"{rounds} rounds in a step exceed this instance's {1 + len(row)}")
            assumptions += [e if k < rounds - 1 else z3.Not(e) for k, e in enumerate(row)]
        return self._check(assumptions, time_limit)

    def _check(self, assumptions: list, time_limit: float | None) -> SolveResult:
        started = time.perf_counter()
        self._solver.set("timeout", max(1, int(time_limit * 1000)) if time_limit is not None else 4294967295)
        verdict = self._solver.check(*assumptions)
        seconds = time.perf_counter() - started
        if verdict == z3.unsat:
            return SolveResult(Status.INFEASIBLE, None, seconds)
        if verdict == z3.unknown:
            reason = self._solver.reason_unknown()
            if "canceled" in reason or "interrupted" in reason:
                raise KeyboardInterrupt
            status = Status.TIMEOUT if "timeout" in reason or "memory" in reason else Status.ERROR
            return SolveResult(status, None, seconds, reason)
        return SolveResult(Status.SOLVED, self._decode(self._solver.model(), seconds), seconds)

    def _decode(self, model: z3.ModelRef, seconds: float) -> Schedule:
        coll = self.collective
        chosen: dict[int, dict[tuple[int, int], Send]] = {s: {} for s in range(1, self.steps + 1)}
        for (c, a, b, s), var in sorted(self.send.items()):
            if z3.is_true(model.eval(var, model_completion=True)) and (b, c) not in chosen[s]:
                chosen[s][(b, c)] = Send(c, a, b)
        steps = []
        for s in range(1, self.steps + 1):
            extra = sum(z3.is_true(model.eval(e, model_completion=True)) for e in self.extra[s - 1])
            steps.append(Step(tuple(sorted(chosen[s].values())), 1 + extra))
        meta = {"synthesizer": "smt", "solve_seconds": round(seconds, 4)}
        return Schedule(self.topology, coll, tuple(steps), meta)


def _orbits(keys: list, maps: list) -> dict:
    """Representative (smallest member) of every key's orbit under the maps (union-find)."""
    parent = {k: k for k in keys}

    def find(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for image_of in maps:
        for k in keys:
            image = image_of(k)
            if image in parent:
                a, b = find(k), find(image)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return {k: find(k) for k in keys}


def _lit(value: object) -> z3.BoolRef:
    if value is True:
        return z3.BoolVal(True)
    if value is False:
        return z3.BoolVal(False)
    return value  # type: ignore[return-value]


def steps_possible(topology: Topology, collective: Collective) -> float:
    """Fewest steps any schedule needs (hop distance), math.inf when unreachable."""
    dist = topology.hop_distances
    worst = 0.0
    for pre, post in zip(collective.pre, collective.post):
        for r in post - pre:
            worst = max(worst, min(dist[h][r] for h in pre))
    return worst if worst != math.inf else math.inf
