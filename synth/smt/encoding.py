"""SCCL-style k-synchronous synthesis as a pure CNF, answered by a SAT engine.

For a non-combining collective, S steps and a rounds budget:
  has[c][r][s]   rank r holds chunk c after step s (s = 0: the precondition), monotone in s;
  send[c][l][s]  chunk c crosses link l = (a, b) in step s (1-based);
  extra[s][k]    step s uses more than k rounds (unary, ordered), so rounds[s] = 1 + sum_k extra[s][k].
Constraints: a send needs the sender to hold c at the step's start and the receiver not to;
a rank holds c after s only if it held it before or some link brought it in s; every post rank
holds c after S; per step, every link and group carries at most capacity x rounds[s] chunks;
sum_s rounds[s] <= R (a selector literal per R, so one solver serves every R for given S, C).
Variables that reachability rules out (hop distances) are never created. Literals are ints
(negative: negated) or Python bools for the values reachability fixes.

Per rounds budget R, guarded by R's selector, implied rows (they never exclude a valid schedule,
so an UNSAT stays a proof) tell the solver where capacity must be saturated:
  in-saturation: rank r takes in at most U_r = sum(cap of its in-units) chunks a round and needs
    N_r, slack_r = U_r * R - N_r; in step s every in-unit u carries >= cap_u * rounds[s] - slack_r;
  receive-once at zero slack: when slack_r == 0 no chunk enters r twice;
  out-saturation: all sends >= sum_r N_r and all sends <= sum(out-unit caps) * R, so every out-unit
    carries >= cap_u * rounds[s] - (that global slack) in step s.
(A unit is a group holding only links into (out of) one rank and tighter than their sum, else a
link.) On a topology whose switches compute, switch entries join the sends
(``synth.smt.switch_sends``: reach and enter literals, port rows, ports counted on their groups;
hop distances count a switch entry as one hop) and the implied rows are left out (they count
links only); such an instance takes no symmetries. The clauses go into a
``synth.smt.sat.Formula``; a SAT engine of ``synth.smt.sat.engines`` (z3's SAT core, CaDiCaL or
Kissat: ``SmtOptions.sat``) answers the checks.

Engines and literals never leave synth/smt: callers get SolveResult with a Schedule or a status.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from synth.core.collective import Collective
from synth.core.orbits import orbit_classes
from synth.core.schedule import Schedule, Send, SolveResult, Status, Step
from synth.core.symmetry import Symmetry, interchangeable_chunks
from synth.core.topology import Topology
from synth.smt import switch_sends
from synth.smt.cardinality import CnfBuilder, neg
from synth.smt.sat.answer import Answer, Verdict
from synth.smt.sat.engines import Engine, make_engine
from synth.smt.switch_sends import SwitchVars

WORK_START = 0.25  # work seconds of a first try (a split's, a window's; ``synth.smt.sat.engines``)


@dataclass(frozen=True)
class SmtOptions:
    """Knobs of the encoding; the defaults are the measured winners (see benchmarks/)."""

    forbid_redundant_sends: bool = True
    prune_useless_relays: bool = True
    order_interchangeable_chunks: bool = True
    receive_once: bool = False  # exactly-one receive everywhere (a restriction at slack > 0: measured worse)
    saturate: bool = True  # implied in-saturation rows and receive-once at zero slack (see above)
    out_saturate: bool = True  # implied out-saturation rows
    random_seed: int = 0
    memory_mb: int = 4096  # an engine gives up (an unknown, not a proof) beyond this
    sat: str = "auto"  # the SAT engine: z3, cadical, kissat or auto (``synth.smt.sat.choice``)
    certify: bool = False  # every exact UNSAT carries a checked DRAT proof (``synth.smt.certificates``)
    portfolio: int = 1  # > 1: that many engines and seeds race on every check (``synth.smt.sat.portfolio``)

    def encoding_fields(self) -> tuple[tuple[str, object], ...]:
        """The fields that shape the formula (what a certificate names to rebuild it)."""
        return (("forbid_redundant_sends", self.forbid_redundant_sends),
                ("order_interchangeable_chunks", self.order_interchangeable_chunks),
                ("out_saturate", self.out_saturate), ("prune_useless_relays", self.prune_useless_relays),
                ("receive_once", self.receive_once), ("saturate", self.saturate))


class SmtInstance(CnfBuilder):
    """One encoding for (topology, collective, steps) that answers many rounds budgets.

    >>> from synth.core.generators import uring
    >>> from synth.core.collectives import allgather
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
        dual: bool = False,
    ) -> None:
        """``symmetries`` *restrict* the search to schedules invariant under them: a SAT answer
        is a real schedule, but INFEASIBLE then proves nothing about the unrestricted problem.
        ``dual``: ``collective`` is a combining one's dual on the reversed ``topology`` (its switch
        entries follow the dual's rules, ``synth.smt.switch_sends``). A topology with switches
        takes no symmetries (their entries are not tied by orbits)."""
        if not topology.rounds_apply:
            raise ValueError(f"{topology.name}: capacities are not whole numbers, rounds do not apply")
        if topology.switches and any(not sym.is_identity for sym in symmetries):
            raise ValueError(f"{topology.name}: a restricted (symmetric) search does not take switch entries")
        self.dual = dual
        self.switch_vars: SwitchVars | None = None
        self.topology = topology
        self.collective = collective
        self.steps = steps
        self.max_rounds = max(max_rounds, steps)
        self.options = options
        self.symmetries = tuple(sym for sym in symmetries if not sym.is_identity)
        self._init_cnf()
        self._engine: Engine | None = None
        self._selectors: dict[int, int] = {}
        self._incoming: dict | None = None  # set by the plain encoding: it has saturation rows
        self._rows_done: set = set()
        self._build()

    # ------------------------------------------------------------------ encoding
    def _build(self) -> None:
        if self.collective.combining:
            raise ValueError("this encoding takes non-combining collectives; use reductions")
        topo, coll, S = self.topology, self.collective, self.steps
        dist = self._hops = switch_sends.hop_distances(topo)
        cl = self._clause
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
        has_rep = orbit_classes(has_keys, [lambda k, g=g: (g.chunks[k[0]], g.ranks[k[1]], k[2])
                                           for g in self.symmetries])
        send_rep = orbit_classes(send_keys, [lambda k, g=g: (g.chunks[k[0]], g.ranks[k[1]], g.ranks[k[2]], k[3])
                                       for g in self.symmetries])
        has_var = {k: self._var("h_%d_%d_%d" % k) for k in has_keys if has_rep[k] == k}
        send_var = {k: self._var("x_%d_%d_%d_%d" % k) for k in send_keys if send_rep[k] == k}
        self.has = {**{k: v for k, v in fixed.items()}, **{k: has_var[has_rep[k]] for k in has_keys}}
        self.send = {k: send_var[send_rep[k]] for k in send_keys}
        incoming = self._switch_incoming(need)
        for key, var in self.send.items():
            c, a, b, s = key
            incoming.setdefault((c, b, s), []).append(var)
            if send_rep[key] != key:
                continue
            cl(-var, self.has[(c, a, s - 1)])
            cl(-var, self.has[(c, b, s)])
            if self.options.forbid_redundant_sends:
                cl(-var, neg(self.has[(c, b, s - 1)]))
        if self.options.receive_once:
            into: dict[tuple[int, int], list] = {}
            for (c, b, s), vars_ in incoming.items():
                into.setdefault((c, b), []).extend(vars_)
            for (c, b), vars_ in into.items():
                if b in coll.post[c]:
                    self._exactly_one(vars_)
                else:
                    self._at_most(vars_, 1)
        for key in has_keys:
            if has_rep[key] != key or key[2] == 0:
                continue
            c, r, s = key
            value, prev = self.has[key], self.has[(c, r, s - 1)]
            cl(-value, prev, *incoming.get((c, r, s), []))
            cl(neg(prev), value)
        for c, post in enumerate(coll.post):
            for r in post:
                cl(self.has[(c, r, S)])
        if not self.symmetries and self.options.order_interchangeable_chunks:
            self._order_chunks()
        per_link: dict[tuple[int, int, int], list] = {}
        for (c, a, b, s), var in self.send.items():
            per_link.setdefault((a, b, s), []).append(var)
        self._rounds_and_capacity(per_link, self.switch_vars.port_loads if self.switch_vars else None)
        self._incoming = None if self.switch_vars else incoming  # saturation rows count links only
        self._in_units = self._units(into=True)

    def _switch_incoming(self, need: list) -> dict[tuple[int, int, int], list]:
        """The switch literals (``synth.smt.switch_sends``) when the topology has switches, and
        (chunk, rank, step) -> the switch literals that bring the chunk there: the start of
        ``incoming``, which the link sends join."""
        if not self.topology.switches:
            return {}
        self.switch_vars = switch_sends.encode(self, self._dist, need, self.dual)
        return self.switch_vars.incoming()

    def _rounds_and_capacity(self, per_link: dict[tuple[int, int, int], list], port_loads: dict | None = None) -> None:
        """Unary extra rounds per step and the capacity rows of every link, switch port and
        group (one row per orbit of links/groups under the symmetries); ``port_loads``: the
        literals each (switch, rank, 'out' | 'in', step) port carries, counted on the port and on
        the group it shares."""
        topo, S = self.topology, self.steps
        self._per_link = per_link
        # rounds: extra[s][k] for k < max extra per step, ordered
        spare = self.max_rounds - S
        self.extra = [[self._var(f"e_{s}_{k}") for k in range(spare)] for s in range(1, S + 1)]
        for row in self.extra:
            for k in range(1, len(row)):
                self._clause(-row[k], row[k - 1])
        link_rep = orbit_classes([l.key for l in topo.links], [lambda k, g=g: (g.ranks[k[0]], g.ranks[k[1]])
                                                          for g in self.symmetries])
        # a link in a group no wider than itself is already bounded by the group's row
        covered = {key for g in topo.groups for key in g.links
                   if topo.group_capacity(g) <= topo.link_capacity(topo.link(*key))}
        for (a, b, s), vars_ in per_link.items():
            if link_rep[(a, b)] == (a, b) and (a, b) not in covered:
                self._capacity(vars_, topo.link_capacity(topo.link(a, b)), s)
        group_names = {frozenset(g.links): g.name for g in topo.groups}
        by_name = {g.name: g for g in topo.groups}
        group_rep = orbit_classes([g.name for g in topo.groups], [
            lambda name, g=g: group_names.get(frozenset((g.ranks[a], g.ranks[b]) for a, b in by_name[name].links), name)
            for g in self.symmetries
        ]) if topo.groups else {}
        ports = switch_sends.group_ports(topo) if port_loads else {}
        for group in topo.groups:
            if group_rep.get(group.name, group.name) != group.name:
                continue
            cap = topo.group_capacity(group)
            for s in range(1, S + 1):
                vars_ = [v for key in group.links for v in per_link.get((key[0], key[1], s), [])]
                vars_ += [v for port in ports.get(group.name, ()) for v in port_loads.get((*port, s), [])]
                self._capacity(vars_, cap, s)
        for (name, _, _, s), vars_ in (port_loads or {}).items():
            self._capacity(vars_, topo.switch_capacity(topo.switch(name)), s)

    def _order_chunks(self) -> None:
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
                    if not isinstance(later, bool):
                        self._clause(-later, earlier)

    def _capacity(self, sends: list[int], cap: int, step: int) -> None:
        """rounds[step] <= 1 + k (i.e. not extra[k])  =>  at most cap * (1 + k) sends."""
        row = self.extra[step - 1]
        if len(sends) <= cap:
            return
        if not row:
            self._at_most(sends, cap)
            return
        top = cap * (1 + len(row))
        count = self._counter(sends, min(len(sends), top + 1))
        for k, more in enumerate(row):
            if len(sends) > cap * (1 + k):
                self._clause(-count[cap * (1 + k)], more)
        if len(sends) > top:
            self._clause(-count[top])

    # ------------------------------------------------------------------ implied saturation rows
    def _units(self, into: bool) -> dict[int, list[tuple[int, list]]]:
        """rank -> its in-links (out-links) cut into capacity units (cap, link keys): a group
        holding only links into (out of) the rank and tighter than their sum is one unit."""
        topo, side = self.topology, (1 if into else 0)
        out = {}
        for r in range(topo.ranks):
            units, covered = [], set()
            for g in topo.groups:
                keys = set(g.links)
                if keys and all(k[side] == r for k in keys) and not (keys & covered):
                    cap = topo.group_capacity(g)
                    if cap < sum(topo.link_capacity(topo.link(*k)) for k in keys):
                        units.append((cap, sorted(keys)))
                        covered |= keys
            units += [(topo.link_capacity(l), [l.key]) for l in topo.links
                      if l.key[side] == r and l.key not in covered]
            out[r] = units
        return out

    def _unit_lower_bounds(self, sel: int, units: list, slack: int) -> None:
        """sel and rounds[s] >= 1 + k  ->  unit u carries >= cap_u * (1 + k) - slack chunks in step s."""
        for cap, keys in units:
            for s in range(1, self.steps + 1):
                xs = [x for k in keys for x in self._per_link.get((k[0], k[1], s), [])]
                seen = (tuple(sorted(xs)), cap, s, slack, sel)  # symmetric instances share variables
                if seen in self._rows_done:
                    continue
                self._rows_done.add(seen)
                row = self.extra[s - 1]
                for k in range(len(row) + 1):
                    least = cap * (1 + k) - slack
                    if least <= 0:
                        continue
                    guard = [-sel] + ([-row[k - 1]] if k > 0 else [])
                    if len(xs) < least:
                        self._clause(*guard)
                    elif least == 1:
                        self._clause(*guard, *xs)
                    else:
                        count = self._counter(xs, min(len(xs), cap * (1 + len(row)) + 1))
                        self._clause(*guard, count[least - 1])

    def _saturation(self, sel: int, rounds: int) -> None:
        """Implied: rank r takes in <= sum(cap_u) * rounds chunks and needs N_r of them."""
        coll = self.collective
        for r, units in self._in_units.items():
            need = sum(1 for c in range(coll.chunks) if r in coll.post[c] and r not in coll.pre[c])
            if need == 0:
                continue
            slack = sum(cap for cap, _ in units) * rounds - need
            if slack < 0:
                self._clause(-sel)
                return
            self._unit_lower_bounds(sel, units, slack)
            if slack == 0:  # r takes in exactly N_r chunks: none twice
                into: dict[int, list] = {}
                for (c, b, s), xs in self._incoming.items():
                    if b == r:
                        into.setdefault(c, []).extend(xs)
                for c, xs in into.items():
                    key = (tuple(sorted(xs)), sel)
                    if key not in self._rows_done:
                        self._rows_done.add(key)
                        self._at_most(xs, 1, (-sel,))

    def _out_saturation(self, sel: int, rounds: int) -> None:
        """Implied: all sends >= all needed receptions N; all sends <= sum(cap_u) * rounds over
        a partition of the links into units; so unit u carries >= cap_u * rounds[s] - slack in step s."""
        coll = self.collective
        units = [u for rank_units in self._units(into=False).values() for u in rank_units]
        need = sum(len(post - pre) for pre, post in zip(coll.pre, coll.post))
        slack = sum(cap for cap, _ in units) * rounds - need
        if slack < 0:
            self._clause(-sel)
            return
        self._unit_lower_bounds(sel, units, slack)

    def _selector(self, rounds: int) -> int:
        if rounds not in self._selectors:
            sel = self._var(f"rounds_le_{rounds}")
            self._at_most_unary_sum(self.extra, rounds - self.steps, (-sel,))
            if self._incoming is not None:  # the plain encoding's implied rows
                if self.options.saturate:
                    self._saturation(sel, rounds)
                if self.options.out_saturate:
                    self._out_saturation(sel, rounds)
            self._selectors[rounds] = sel
        return self._selectors[rounds]

    # ------------------------------------------------------------------ solving
    def solve(self, rounds: int, time_limit: float | None = None) -> SolveResult:
        """Is there a schedule with these steps and at most ``rounds`` rounds in total?"""
        if rounds < self.steps or rounds > self.max_rounds:
            raise ValueError(f"rounds {rounds} outside {self.steps}..{self.max_rounds}")
        return self.check([self.total_literal(rounds)], time_limit, prove=self.proves)

    def solve_split(self, rounds_per_step: tuple[int, ...], time_limit: float | None = None,
                    work: float | None = None) -> SolveResult:
        """Is there a schedule with exactly these rounds in each step? (assumptions; exact)

        ``work``: the engine's deterministic work budget for this check, in work seconds
        (TIMEOUT when spent); the answer then depends on the work done, not on how loaded the
        machine is."""
        if len(rounds_per_step) != self.steps or min(rounds_per_step) < 1:
            raise ValueError(f"need {self.steps} per-step rounds >= 1, got {rounds_per_step}")
        assumptions = []
        for step, rounds in enumerate(rounds_per_step, 1):
            literals = self.step_rounds_literals(step, rounds)
            if literals is None:
                raise ValueError(f"{rounds} rounds in a step exceed this instance's {1 + len(self.extra[step - 1])}")
            assumptions += literals
        # the total's selector too: it switches on the implied rows for that total
        return self.check([self.total_literal(sum(rounds_per_step)), *assumptions], time_limit, work,
                          prove=self.proves)

    @property
    def proves(self) -> bool:
        """Budget checks carry proofs: certifying, and exact (a restricted search's UNSAT
        proves nothing, so it needs none)."""
        return self.options.certify and not self.symmetries

    # the literals a search outside this class assumes (``synth.smt.windows``)
    def total_literal(self, rounds: int) -> int:
        """True: at most ``rounds`` rounds in all (with the implied rows for that total)."""
        return self._selector(rounds)

    def step_rounds_literals(self, step: int, rounds: int) -> list[int] | None:
        """Literals that give ``step`` (1-based) exactly ``rounds`` rounds; None when this
        instance allows it fewer."""
        row = self.extra[step - 1]
        if rounds < 1 or rounds - 1 > len(row):
            return None
        return [e if k < rounds - 1 else -e for k, e in enumerate(row)]

    def send_literal(self, chunk: int, src: int, dst: int, step: int) -> int | None:
        """The literal of that send (None: not in the encoding: pruned, or not a
        representative of its orbit under the instance's symmetries)."""
        return self.send.get((chunk, src, dst, step))

    def check(self, assumptions: list, time_limit: float | None = None, work: float | None = None,
              prove: bool = False) -> SolveResult:
        """Is there a schedule with every literal in ``assumptions`` true? SOLVED carries the
        decoded schedule (not verified here); TIMEOUT when ``time_limit`` seconds or ``work``
        work seconds run out (proves nothing); ERROR when the engine failed. ``prove``: an
        INFEASIBLE carries a ``SatRefutation`` (details["refutation"]) whose DRAT proof has
        been checked here; a proof that does not check is an ERROR."""
        started = time.perf_counter()
        literals = [lit for lit in assumptions if lit is not True]
        answer = self.engine.check(literals, work, time_limit, proof=prove)
        seconds = time.perf_counter() - started
        if answer.verdict == Verdict.UNSAT:
            if prove:
                return self._refuted(literals, answer, seconds)
            return SolveResult(Status.INFEASIBLE, None, seconds)
        if answer.verdict == Verdict.SAT:
            return SolveResult(Status.SOLVED, self._decode(answer, seconds), seconds)
        status = Status.ERROR if answer.error else Status.TIMEOUT
        return SolveResult(status, None, seconds, answer.reason)

    def _refuted(self, literals: list[int], answer: Answer, seconds: float) -> SolveResult:
        """An UNSAT with its proof checked against the formula plus the assumptions."""
        from synth.smt.certificates import SatRefutation
        from synth.smt.sat.proofs import check_drat

        why = check_drat(self.formula.dimacs(literals), answer.proof or b"")
        if why is not None:
            return SolveResult(Status.ERROR, None, seconds,
                               f"{answer.engine}'s proof of infeasibility was rejected by the checker: {why}")
        refutation = SatRefutation(None, answer.engine, self.encoding_key(), tuple(literals), answer.proof,
                                   self.formula.dimacs())
        return SolveResult(Status.INFEASIBLE, None, seconds, details={"refutation": refutation})

    ENCODING_KIND = "plain"

    def encoding_key(self):
        """What rebuilds this formula as it is now (``synth.smt.certificates.EncodingKey``)."""
        from synth.smt.certificates import EncodingKey

        return EncodingKey(self.steps, self.collective.chunks, self.max_rounds, tuple(self._selectors),
                           self.ENCODING_KIND, self.options.encoding_fields())

    @property
    def engine(self) -> Engine:
        """The SAT engine the checks run on (made at the first check)."""
        from synth.smt.sat.choice import resolve_sat

        if self._engine is None:
            name = resolve_sat(self.options.sat, self.options.certify, self.formula.num_clauses)
            if self.options.portfolio > 1:
                from synth.smt.sat.portfolio import PortfolioEngine

                self._engine = PortfolioEngine(self.formula, name, self.options.portfolio, self.options.memory_mb)
            else:
                self._engine = make_engine(name, self.formula, self.options.random_seed, self.options.memory_mb)
        return self._engine

    def _decode(self, answer: Answer, seconds: float) -> Schedule:
        coll = self.collective
        chosen: dict[int, dict[tuple[int, int], Send]] = {s: {} for s in range(1, self.steps + 1)}
        for (c, a, b, s), var in sorted(self.send.items()):
            if answer.value(var) and (b, c) not in chosen[s]:
                chosen[s][(b, c)] = Send(c, a, b)
        steps = []
        for s in range(1, self.steps + 1):
            extra = sum(answer.value(e) for e in self.extra[s - 1])
            entries = (switch_sends.decode(answer.value, self.switch_vars, s, set(chosen[s]))
                       if self.switch_vars else ())
            steps.append(Step(tuple(sorted(chosen[s].values())), 1 + extra, tuple(entries)))
        meta = {"synthesizer": "smt", "solve_seconds": round(seconds, 4)}
        return Schedule(self.topology, coll, tuple(steps), meta)
