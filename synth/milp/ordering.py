"""Ordering stage: which sends go in which step, one step at a time, by a max-weight LP.

Every step is one round: each link carries at most its capacity, each group (NIC, switch
port) at most its capacity, and each (rank, chunk) is written at most once. Among the sends
that are possible now (the sender holds the chunk, the receiver lacks it and either needs it
or is closer to a rank that does, over the links the sketch allows), the step takes a set of
maximum total weight: a small transportation LP (HiGHS, or CBC through PuLP), solved exactly
and rounded to whole sends. The weights carry the schedule's long-range goals:

- a chunk delivered where it is needed is worth more than a relay hop;
- a chunk that is rare (in the receiver's machine, and overall) is worth more: it gives the
  next steps more senders;
- a receiver that still needs many chunks is worth more: ports finish together, no tail;
- a crossing on a link the routing stage planned to use is worth more while the link is
  behind its planned share.

Candidates are pruned to the best few per link before the LP (the LP stays small at 128 GPUs).

With switch hyperedges (``synth.milp.multicast``) the step's LP also holds switch deliveries and
the multicast entries they need, in one packing with the link sends: one chunk on an entry's
src out-port reaches every dst it delivers to.

With a ``Quotient`` (the sketch's symmetry, ``synth.core.orbits``) the state holds the
representative chunks only and every limit is per link orbit and per group class: a step of
representative sends stands for all their images, and the LP grows with the orbits, not the
ranks. The weights are the full schedule's (a rank's outstanding need is that of its orbit).

>>> from synth.core.generators import ring
>>> from synth.core.collectives import allgather
>>> from synth.verify import verify
>>> s = order_sends(ring(4), allgather(4, 2), OrderingRules.of(ring(4)))
>>> verify(s), len(s.steps)
([], 3)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from synth.bounds.lp import solve_lp_solution
from synth.core.collective import Collective
from synth.core.errors import InputError
from synth.core.orbits import Quotient
from synth.core.schedule import Schedule, Send, Step, SwitchSend
from synth.core.topology import Topology
from synth.milp.finish import finish_assignment, groups_of
from synth.milp.multicast import Hyperedges, LinkColumns, choose_step, switch_deliveries
from synth.verify import checked

_INF = np.inf
FINISH_LIMIT = 4000  # remaining needs up to which the last step is solved exactly (a MILP)
PRUNE_FACTOR = 3  # candidates kept per link: this many times its capacity,
PRUNE_MIN = 16  # and at least this many (slow links see the same few best chunks from every sender)


@dataclass(frozen=True, eq=False)
class OrderingRules:
    """What the sketch and the routing stage allow and prefer, as arrays over link indices.

    ``allowed[l]``: link l may be used at all. ``carries``: for each link, None (any chunk) or
    the ranks whose chunks it may carry (by origin). ``peers``: with a switch sketch of few
    peers, how many distinct intra-machine destinations a rank may send to in one step.
    ``planned``: copies the routing stage planned on each link (0 = no plan), which the
    ordering favours while a link is behind its share.
    """

    allowed: np.ndarray
    carries: tuple[frozenset[int] | None, ...]
    peers: int | None = None
    planned: np.ndarray | None = None

    @classmethod
    def of(cls, topology: Topology) -> "OrderingRules":
        """No restriction: every link, any chunk."""
        return cls(np.ones(len(topology.links), dtype=bool), (None,) * len(topology.links))


def order_sends(
    topology: Topology,
    collective: Collective,
    rules: OrderingRules,
    solver: str = "highs",
    progress: Callable[[int, int], None] | None = None,
    max_steps: int | None = None,
    block: int = 1,
    quotient: Quotient | None = None,
    hyperedges: Hyperedges | None = None,
) -> Schedule:
    """A verified one-round-per-step schedule for a non-combining collective.

    ``block`` > 1: a rank forwards only what it held when the current block of ``block`` steps
    began, so every block can be merged into one step of ``block`` rounds by the timing stage
    (alpha paid once per block instead of once per round). With a ``quotient`` of this
    topology and collective the result holds the representative sends (its collective is
    ``quotient.rep_collective``; ``quotient.expand`` gives the full schedule) and each step's
    full loads fit one round. With ``hyperedges`` (and no quotient: a switch's ports are not
    orbit resources) chunks also move through switch multicast entries
    (``synth.milp.multicast``).
    """
    if not isinstance(block, int) or block < 1:
        raise InputError(f"block must be a positive integer, got {block!r}")
    if collective.combining:
        raise InputError("the ordering stage takes a non-combining collective (reduce by duality)")
    if not topology.rounds_apply:
        raise InputError(f"{topology.name}: capacities are not whole numbers; the router needs them")
    collective.check_on(topology)
    if quotient is None:
        quotient = Quotient.of(topology, collective, [])
    elif quotient.topology is not topology or quotient.collective is not collective:
        raise InputError("order_sends: the quotient is of another topology or collective")
    symmetric = quotient.order > 1
    if symmetric:
        if hyperedges is not None:
            raise InputError("order_sends: switch hyperedges take no quotient (plan the full schedule)")
        collective = quotient.rep_collective
    state = _State.start(topology, collective, rules, quotient)
    state.hyper = hyperedges
    limit = max_steps or 8 * (collective.chunks + topology.ranks) + 64
    steps: list[Step] = []
    while state.need.any():
        if len(steps) >= limit:
            raise RuntimeError(f"ordering did not finish in {limit} steps (a bug)")
        steps.append(_one_step(state, len(steps), block, solver))
        if progress is not None:
            progress(len(steps), int(state.need.sum()))
    schedule = Schedule(topology, collective, tuple(steps),
                        {"synthesizer": "milp", "stage": "ordering",
                         "chunks_per_rank": collective.chunks_per_rank})
    checked(schedule, "the ordering stage")
    if symmetric:
        over = next((i for i, step in enumerate(steps) if quotient.rounds_needed(step.sends) != 1), None)
        if over is not None:
            raise RuntimeError(f"ordering: step {over}'s images overload a link or group (a bug)")
    return schedule


def _one_step(state, index: int, block: int, solver: str) -> Step:
    """The next step, applied to the state: what the block's holdings allow, else (the block's
    sends spent) what a new block's do."""
    if index % block == 0:
        state.sendable = state.holds.copy()
    sends, entries = _next_sends(state, index, solver)
    if not sends and not entries and index % block:  # what the block could send is spent: a new block starts
        state.sendable = state.holds.copy()
        sends, entries = _next_sends(state, index, solver)
    if not sends and not entries:
        raise RuntimeError("ordering is stuck: no useful send is possible (a bug)")
    state.apply(sends, entries)
    return Step(tuple(sorted(sends)), 1, tuple(sorted(entries)))


def _next_sends(state, index: int, solver: str) -> tuple[list[Send], list[SwitchSend]]:
    """The step's sends and switch entries: the finishing sends when they end the collective,
    else the step LP's. Through switches the packing plans every step (the finishing MILP
    knows links only, and relays what one multicast from the origin would reach)."""
    if state.hyper is not None:
        return state.step_with_switches(index, solver)
    sends = state.finishing_sends(solver)
    return (state.step_sends(index, solver) if sends is None else sends), []


@dataclass(eq=False)
class _State:
    """Who holds and needs what, and the static arrays of the topology."""

    topology: Topology
    rules: OrderingRules
    quotient: Quotient
    holds: np.ndarray        # [rank, chunk] bool (chunks: the quotient's representatives)
    need: np.ndarray         # [rank, chunk] bool: in post, not yet held
    src: np.ndarray          # [link]
    dst: np.ndarray          # [link]
    orbit: np.ndarray        # [link] its link orbit: the resource its capacity counts on
    cap: np.ndarray          # [orbit] chunks per round
    cross: np.ndarray        # [link] joins two machines
    machine: np.ndarray      # [rank]
    group_rows: list[np.ndarray]  # per orbit: the group classes a send on it loads (repeated per unit)
    group_cap: np.ndarray    # [group class]
    rank_orbit: np.ndarray   # [rank] number of its rank orbit
    carry_mask: np.ndarray   # [link, chunk] bool
    used: np.ndarray         # [orbit] sends so far
    intra_peers: list[list[int]]  # per rank: its intra-machine destinations, in rotation order
    sendable: np.ndarray | None = None  # [rank, chunk]: held when the current block began
    hyper: Hyperedges | None = None  # switch multicast the steps may use (no quotient then)
    _in_cap: np.ndarray | None = None
    _static: tuple | None = None  # (bounds, rows per link) of the link columns' fixed rows
    _dist: np.ndarray | None = None

    @classmethod
    def start(cls, topo: Topology, coll: Collective, rules: OrderingRules, quotient: Quotient) -> "_State":
        ranks, chunks = topo.ranks, coll.chunks
        holds = np.zeros((ranks, chunks), dtype=bool)
        post = np.zeros((ranks, chunks), dtype=bool)
        for c, (pre, want) in enumerate(zip(coll.pre, coll.post)):
            holds[list(pre), c] = True
            post[list(want), c] = True
        src = np.array([l.src for l in topo.links], dtype=np.int64)
        dst = np.array([l.dst for l in topo.links], dtype=np.int64)
        machine = np.array(topo.machine_of, dtype=np.int64)
        res = quotient.resources
        orbits = res.orbit_count
        group_rows = [np.array([r - orbits for r, k in row if r >= orbits for _ in range(k)], dtype=np.int64)
                      for row in res.of_orbit]
        origin = _origins(coll, ranks)
        carry_mask = np.ones((len(topo.links), chunks), dtype=bool)
        for i, allowed_origins in enumerate(rules.carries):
            if allowed_origins is not None:
                carry_mask[i] = np.isin(origin, sorted(allowed_origins))
        carry_mask &= rules.allowed[:, None]
        peers: list[list[int]] = [[] for _ in range(ranks)]
        for l in topo.links:
            if machine[l.src] == machine[l.dst]:
                peers[l.src].append(l.dst)
        for r in range(ranks):  # rotation order: the next ranks after r, wrapping around
            peers[r].sort(key=lambda d, r=r: (d - r) % ranks)
        _, rank_orbit = np.unique(quotient.ranks.min(axis=0), return_inverse=True)
        return cls(
            topology=topo, rules=rules, quotient=quotient, holds=holds, need=post & ~holds, src=src, dst=dst,
            orbit=quotient.link_orbit, cap=res.capacity[:orbits].copy(),
            cross=machine[src] != machine[dst], machine=machine, group_rows=group_rows,
            group_cap=res.capacity[orbits:].copy(), rank_orbit=rank_orbit.astype(np.int64),
            carry_mask=carry_mask, used=np.zeros(orbits), intra_peers=peers,
        )

    @property
    def dist(self) -> np.ndarray:
        """[rank, rank] hops over allowed links (computed on first use: relays only)."""
        if self._dist is None:
            allowed = self.rules.allowed
            self._dist = _hop_matrix(self.holds.shape[0], self.src[allowed], self.dst[allowed])
        return self._dist

    def full_need(self) -> np.ndarray:
        """[rank]: chunks the rank still needs in the full schedule: by symmetry, what the
        representatives still need at every rank of its orbit."""
        per_rank = self.need.sum(axis=1).astype(float)
        return np.bincount(self.rank_orbit, weights=per_rank)[self.rank_orbit]

    # ------------------------------------------------------------------ one step
    def step_sends(self, index: int, solver: str) -> list[Send]:
        links, chunks, weight = self._link_candidates(index)
        if len(links) == 0:
            return []
        take = self._assign(links, chunks, weight, solver)
        return [Send(int(c), int(self.src[l]), int(self.dst[l])) for l, c in zip(links[take], chunks[take])]

    def _link_candidates(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(links, chunks, weights) of the step's link candidates, the best few per link."""
        links, chunks = np.nonzero(self._candidates(index))
        weight = self._weights(links, chunks, index)
        keep = _prune(self.orbit[links], weight, np.maximum(PRUNE_FACTOR * self.cap, PRUNE_MIN))
        return links[keep], chunks[keep], weight[keep]

    def step_with_switches(self, index: int, solver: str) -> tuple[list[Send], list[SwitchSend]]:
        """The step's link sends and switch entries: one packing LP over both
        (``synth.milp.multicast``), link columns with the rows ``_assign`` gives them."""
        links, chunks, weight = self._link_candidates(index)
        held = self.holds if self.sendable is None else self.sendable
        origin = _origins(self.quotient.rep_collective if self.quotient.order > 1 else self.quotient.collective,
                          self.holds.shape[0])
        deliveries = switch_deliveries(self.hyper, held, origin, self.need, self._delivery_weights)
        columns = self._link_columns(links, chunks, weight)
        return choose_step(self.hyper, columns, deliveries, self.src, self.dst, self.holds.shape[1], solver)

    def _link_columns(self, links: np.ndarray, chunks: np.ndarray, weight: np.ndarray) -> LinkColumns:
        """Every link candidate's rows: its link, its groups (with the switch-port groups it
        shares by name, which switch entries load too), its write and its first entry."""
        upper: dict = dict(self._static_upper())
        in_machine = self._in_machine()
        chunk_count = self.holds.shape[1]
        static = self._static_rows
        rows = []
        for l, c in zip(links.tolist(), chunks.tolist()):
            d = int(self.dst[l])
            write = ("write", d * chunk_count + c)
            upper[write] = 1
            if self.cross[l] and not in_machine[self.machine[d], c]:
                entry = ("entry", int(self.machine[d]) * chunk_count + c)
                upper[entry] = 1
                rows.append(static[l] + (write, entry))
            else:
                rows.append(static[l] + (write,))
        return LinkColumns(links, chunks, weight, tuple(rows), upper)

    def _static_upper(self) -> dict:
        """The rows every step's link columns may load that do not change (links, group
        classes, switch-port groups) with their bounds; ``_static_rows`` per link, made once."""
        if self._static is None:
            port_groups = self.hyper.link_groups()
            topo = self.topology
            upper: dict = {}
            rows = []
            for l, link in enumerate(topo.links):
                o = int(self.orbit[l])
                keys = [("link", o)] + [("class", int(g)) for g in self.group_rows[o]]
                upper[("link", o)] = float(self.cap[o])
                upper.update({("class", int(g)): float(self.group_cap[g]) for g in self.group_rows[o]})
                for name in port_groups.get(link.key, ()):
                    keys.append(("group", name))
                    upper[("group", name)] = topo.group_capacity(topo.group_map[name])
                rows.append(tuple(keys))
            self._static = (upper, tuple(rows))
        return self._static[0]

    @property
    def _static_rows(self) -> tuple:
        self._static_upper()
        return self._static[1]

    def finishing_sends(self, solver: str) -> list[Send] | None:
        """The last step, when every remaining need can be met within one round from current
        holders: the assignment that minimises the step's longest resource time (a small MILP),
        so the final step is as short as it can be instead of a full round."""
        need_ranks, need_chunks = np.nonzero(self.need)
        if len(need_ranks) == 0 or len(need_ranks) > FINISH_LIMIT:
            return None
        candidates = self.holds[self.src] & self.need[self.dst] & self.carry_mask
        links, chunks = np.nonzero(candidates)
        write_key = self.dst[links] * self.holds.shape[1] + chunks
        needed_key = need_ranks * self.holds.shape[1] + need_chunks
        if not np.isin(needed_key, write_key).all():
            return None  # some rank needs a chunk no neighbour holds yet
        if not (self.full_need() <= self._in_capacity()).all():
            return None  # some rank cannot take all it needs in one round
        plan = finish_assignment(self.orbit[links], chunks, write_key, needed_key, self.cap, self.group_rows,
                                 self.group_cap, solver)
        if plan is None:
            return None
        take, rounds = plan
        if rounds > 1.0 + 1e-9:
            return None
        return [Send(int(c), int(self.src[l]), int(self.dst[l])) for l, c in zip(links[take], chunks[take])]

    def _in_capacity(self) -> np.ndarray:
        """[rank]: at most how many chunks a rank can receive in one round. Each in-link is
        charged to one of its groups (the one holding most of the rank's in-links) or to
        itself; a group passes at most its capacity, a link at most its own."""
        if self._in_cap is not None:
            return self._in_cap
        topo = self.topology
        ranks = self.holds.shape[0]
        group_index = {g.name: i for i, g in enumerate(topo.groups)}
        group_cap = [topo.group_capacity(g) for g in topo.groups]
        into: list[list[int]] = [[] for _ in range(ranks)]
        for i, b in enumerate(self.dst.tolist()):
            into[b].append(i)
        total = np.zeros(ranks)
        first = self._first_of_orbit()
        for b in range(ranks):
            lead = int(first[self.rank_orbit[b]])
            if lead != b:  # alike by symmetry (without one every rank is its own orbit)
                total[b] = total[lead]
                continue
            rows = {i: [group_index[g.name] for g in topo.groups_of_link.get(topo.links[i].key, ())] for i in into[b]}
            share: dict[int, int] = {}
            for groups in rows.values():
                for g in groups:
                    share[g] = share.get(g, 0) + 1
            charged: dict[int, float] = {}
            for i, groups in rows.items():
                cap = topo.link_capacity(topo.links[i])
                if not groups:
                    total[b] += cap
                    continue
                g = max(groups, key=lambda g: (share[g], -group_cap[g]))
                charged[g] = charged.get(g, 0.0) + cap
            total[b] += sum(min(load, group_cap[g]) for g, load in charged.items())
        self._in_cap = total
        return total

    def _first_of_orbit(self) -> np.ndarray:
        """[rank orbit]: its smallest rank."""
        first = np.full(int(self.rank_orbit.max()) + 1, -1)
        for r in range(len(self.rank_orbit) - 1, -1, -1):
            first[self.rank_orbit[r]] = r
        return first

    def _candidates(self, index: int) -> np.ndarray:
        """[link, chunk]: the sender holds it, the receiver lacks it and needs it or is closer."""
        src, dst = self.src, self.dst
        lacking = ~self.holds[dst]
        useful = self.need[dst]
        if not (self.need | self.holds).all():  # some ranks never need some chunks: relays matter
            potential = self._potential()
            useful = useful | (potential[dst] < potential[src])
            # a crossing into a machine where some rank needs the chunk is worth it even when the
            # needer could be reached directly: its own NIC may be the bottleneck (skewed traffic)
            useful = useful | (self.cross[:, None] & self._needed_in_machine()[self.machine[dst]])
        held = self.holds if self.sendable is None else self.sendable
        mask = held[src] & lacking & useful & self.carry_mask
        if self.rules.peers is not None:
            mask &= self._peer_mask(index)[:, None]
        return mask

    def _potential(self) -> np.ndarray:
        """[rank, chunk]: hops from the rank to the nearest rank that still needs the chunk."""
        ranks, chunks = self.need.shape
        best = np.full((ranks, chunks), _INF)
        for d in range(ranks):
            if self.need[d].any():
                column = np.where(self.need[d], 0.0, _INF)
                np.minimum(best, self.dist[:, d][:, None] + column[None, :], out=best)
        return best

    def _peer_mask(self, index: int) -> np.ndarray:
        """Few-peers switch policy: in step k a rank talks to ``peers`` intra-machine ranks, in rotation."""
        allowed = np.ones(len(self.src), dtype=bool)
        p = self.rules.peers or 1
        chosen = set()
        for r, peers in enumerate(self.intra_peers):
            if peers:
                start = (index * p) % len(peers)
                chosen.update((r, peers[(start + j) % len(peers)]) for j in range(min(p, len(peers))))
        for i, (a, b) in enumerate(zip(self.src, self.dst)):
            if not self.cross[i]:
                allowed[i] = (int(a), int(b)) in chosen
        return allowed

    def _weights(self, links: np.ndarray, chunks: np.ndarray, index: int) -> np.ndarray:
        weight = self._delivery_weights(self.dst[links], chunks, self.cross[links])
        if self.rules.planned is not None:
            planned = self.rules.planned[links]
            used = self.used[self.orbit[links]]
            behind = np.where(planned > 0, 1.0 - used / np.maximum(planned, 1.0), 0.0)
            weight = weight + 0.5 * np.clip(behind, 0.0, 1.0)
        return weight

    def _delivery_weights(self, dst: np.ndarray, chunks: np.ndarray, cross: np.ndarray | None = None) -> np.ndarray:
        """The worth of bringing each chunk to each dst (module docstring); ``cross``: over a
        link between machines (None: inside one)."""
        ranks = self.holds.shape[0]
        cross = np.zeros(len(dst), dtype=bool) if cross is None else cross
        need_left = self.full_need()
        balance = need_left[dst] / max(need_left.max(), 1.0)
        holders = self.holds.sum(axis=0).astype(float)
        rarity = 1.0 - holders[chunks] / ranks
        machines = int(self.machine.max()) + 1
        in_machine = np.zeros((machines, self.holds.shape[1]))
        np.add.at(in_machine, self.machine, self.holds.astype(float))
        size = np.bincount(self.machine, minlength=machines).astype(float)
        machine_rarity = 1.0 - in_machine[self.machine[dst], chunks] / size[self.machine[dst]]
        first_entry = (in_machine[self.machine[dst], chunks] == 0) & cross
        delivered = self.need[dst, chunks]
        return (np.where(delivered, 2.0, 1.0) + 0.5 * balance + 0.3 * rarity + 0.5 * machine_rarity
                + 1.0 * first_entry)

    def _assign(self, links: np.ndarray, chunks: np.ndarray, weight: np.ndarray, solver: str) -> np.ndarray:
        """Max-weight sends within link, group and one-write-per-(rank, chunk) limits."""
        n = len(links)
        orbits = self.orbit[links]
        rows, cols = [orbits], [np.arange(n)]
        offset = len(self.cap)
        group_count = len(self.group_cap)
        group_index, position = groups_of(orbits, self.group_rows)
        rows.append(group_index + offset)
        cols.append(position)
        offset += group_count
        write_key = self.dst[links] * self.holds.shape[1] + chunks
        unique, write_row = np.unique(write_key, return_inverse=True)
        rows.append(write_row + offset)
        cols.append(np.arange(n))
        offset += len(unique)
        # a chunk enters a machine that lacks it over one link per step: a second copy in the same
        # step would spend a NIC slot on what the switch spreads anyway
        entry = self.cross[links] & ~self._in_machine()[self.machine[self.dst[links]], chunks]
        entry_key = self.machine[self.dst[links]][entry] * self.holds.shape[1] + chunks[entry]
        entry_unique, entry_row = np.unique(entry_key, return_inverse=True)
        rows.append(entry_row + offset)
        cols.append(np.nonzero(entry)[0])
        row_count = offset + len(entry_unique)
        row_upper = np.concatenate([self.cap, self.group_cap, np.ones(len(unique)), np.ones(len(entry_unique))])
        r = np.concatenate(rows)
        c = np.concatenate(cols)
        solution = solve_lp_solution(-weight, np.ones(n), (r, c, np.ones(len(r))),
                                     np.full(row_count, -_INF), row_upper, solver=solver, method="simplex")
        x = np.zeros(n) if solution is None else solution[1]
        return self._round(x, links, write_row, weight, entry, entry_row)

    def _needed_in_machine(self) -> np.ndarray:
        """[machine, chunk]: some rank of the machine still needs the chunk."""
        machines = int(self.machine.max()) + 1
        out = np.zeros((machines, self.holds.shape[1]), dtype=bool)
        for m in range(machines):
            out[m] = self.need[self.machine == m].any(axis=0)
        return out

    def _in_machine(self) -> np.ndarray:
        """[machine, chunk]: some rank of the machine holds the chunk."""
        machines = int(self.machine.max()) + 1
        out = np.zeros((machines, self.holds.shape[1]), dtype=bool)
        for m in range(machines):
            out[m] = self.holds[self.machine == m].any(axis=0)
        return out

    def _round(self, x: np.ndarray, links: np.ndarray, write_row: np.ndarray, weight: np.ndarray,
               entry: np.ndarray, entry_row: np.ndarray) -> np.ndarray:
        """Whole sends: the LP's ones (together feasible: every limit is a whole number), then
        what rounding left room for, best weight first."""
        entry_of = np.full(len(links), -1)
        entry_of[np.nonzero(entry)[0]] = entry_row
        take = x > 1 - 1e-6
        orbits = self.orbit[links]
        link_left = self.cap - np.bincount(orbits[take], minlength=len(self.cap))
        group_index, _ = groups_of(orbits[take], self.group_rows)
        group_left = self.group_cap - np.bincount(group_index, minlength=len(self.group_cap))
        written = np.zeros(write_row.max() + 1, dtype=bool)
        written[write_row[take]] = True
        entered = np.zeros(len(entry_row) and entry_row.max() + 1, dtype=bool)
        entered[entry_of[take & (entry_of >= 0)]] = True
        open_ = ~take & ~written[write_row] & (link_left[orbits] >= 1)
        for i in np.nonzero(open_)[0][np.lexsort((-weight[open_], -np.round(x[open_], 6)))]:
            l = orbits[i]
            g = self.group_rows[l]
            if written[write_row[i]] or link_left[l] < 1 or (len(g) and (group_left[g] < np.bincount(g)[g]).any()):
                continue
            if entry_of[i] >= 0:
                if entered[entry_of[i]]:
                    continue
                entered[entry_of[i]] = True
            take[i] = True
            written[write_row[i]] = True
            link_left[l] -= 1
            np.subtract.at(group_left, g, 1)
        return take

    def apply(self, sends: list[Send], entries: list[SwitchSend] = ()) -> None:
        """The step's sends and switch entries land: their dsts hold the chunks."""
        for s in sends:
            self.holds[s.dst, s.chunk] = True
            self.need[s.dst, s.chunk] = False
        for entry in entries:
            self.holds[list(entry.dsts), entry.chunk] = True
            self.need[list(entry.dsts), entry.chunk] = False
        if sends:
            np.add.at(self.used, self.orbit[self.quotient.link_indices(sends)], 1)


def _prune(links: np.ndarray, weight: np.ndarray, room: np.ndarray) -> np.ndarray:
    """Indices of the best ``room[link]`` candidates of every link (stable by weight)."""
    order = np.lexsort((-weight, links))
    sorted_links = links[order]
    starts = np.searchsorted(sorted_links, sorted_links, side="left")
    position = np.arange(len(order)) - starts
    keep = position < room[sorted_links]
    return np.sort(order[keep])


def _origins(coll: Collective, ranks: int) -> np.ndarray:
    """The rank each chunk starts at (the first of its pre-holders)."""
    return np.array([min(pre) if pre else -1 for pre in coll.pre], dtype=np.int64)


def _hop_matrix(ranks: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """All-pairs hop distances over the given links (inf when unreachable), by BFS from each rank."""
    out_of: list[list[int]] = [[] for _ in range(ranks)]
    for a, b in zip(src.tolist(), dst.tolist()):
        out_of[a].append(b)
    dist = np.full((ranks, ranks), _INF)
    for start in range(ranks):
        dist[start, start] = 0
        frontier = [start]
        hops = 0
        while frontier:
            hops += 1
            nxt = []
            for node in frontier:
                for b in out_of[node]:
                    if dist[start, b] == _INF:
                        dist[start, b] = hops
                        nxt.append(b)
            frontier = nxt
    return dist
