"""Switch ops in the data-level replay (synth.program.replay): each one a rendezvous.

A participant's thread block that reaches a switch op (its dependencies met) arrives and waits.
When the last participant arrives the op runs at once: every src's chunks are read where that
src's op says, summed (one src: copied; a contribution counted twice is caught as for any
reduction), and written over every dst's chunks where that dst's op says. Then every
participant goes on, its flag published if its op has ``has_dep``. For race detection the
participants' clocks are joined: what any of them did before is ordered before the op, and the
op before what any of them does after. A switch op whose participants are not all there (or
disagree, synth.program.switches) never runs: its arrivals wait forever and show as a deadlock.

``Rendezvous`` is mixed into the replay's run; it uses the run's ``blocks``, ``read``,
``write``, ``combine``, ``releases``, ``advance``, ``races`` and ``current``.
"""

from __future__ import annotations

from synth.program.buffers import Bad


class Rendezvous:
    """Arrivals at switch ops, and the op itself when everyone is there."""

    def setup_switches(self, groups: dict) -> None:
        self.groups = groups
        self.block_of = {(rank, index): b for b, (rank, index, _, _) in enumerate(self.blocks)}
        self.arrived: dict[int, dict[int, int]] = {}  # switch id -> {block: transfer index}

    def waiting_for(self, op) -> str:
        """Why a block at switch op ``op`` waits: the participants not there yet."""
        group = self.groups.get(op.switch_id)
        if group is None or not group.complete:
            return f"waits at switch op {op.switch_id}, which some participant lacks (it never runs)"
        here = {self.blocks[b][0] for b in self.arrived.get(op.switch_id, {})}
        missing = [r for r in group.participants if r not in here]
        return f"waits at switch op {op.switch_id} for rank(s) {', '.join(map(str, missing))}"

    def arrive(self, b: int, k: int, op):
        """Block b reached switch op ``op`` (its transfer k): None while others are missing (b
        waits), else the blocks the op wakes (the other participants and their flags' waiters)."""
        rank, index = self.blocks[b][0], self.blocks[b][1]
        group = self.groups.get(op.switch_id)
        pos = self.blocks[b][3][k].ops[0]
        if group is None or not group.complete or group.members.get(rank) != (index, pos):
            return None  # never runs: the block stays unfinished (a deadlock, said by the run)
        arrived = self.arrived.setdefault(op.switch_id, {})
        arrived[b] = k
        if len(arrived) < len(group.members):
            return None
        del self.arrived[op.switch_id]
        parts = sorted(arrived.items())
        if self.races is not None:
            self.races.meet([(p, kp, self.releases(p, self.blocks[p][3][kp])) for p, kp in parts])
        self._run_switch(group, parts)
        woken: list[int] = []
        for p, kp in parts:
            t = self.blocks[p][3][kp]
            if self.races is not None:
                self.races.end(p, kp, t.has_dep)
            woken += self.advance(p, t)
            if p != b and self.next[p] < len(self.blocks[p][3]):
                woken.append(p)
        return woken

    def _participant(self, group, rank: int, parts: dict):
        """(block, transfer, op, where) of ``rank``'s op in switch op ``group``."""
        index, pos = group.members[rank]
        b = self.block_of[(rank, index)]
        tb = self.blocks[b][2]
        return b, parts[b], tb.ops[pos], (rank, tb.id, pos)

    def _run_switch(self, group, parts: list[tuple[int, int]]) -> None:
        """Read every src, sum, write every dst (each where its own op says)."""
        by_block = dict(parts)
        total = None
        for rank in group.op.srcs:
            b, k, op, where = self._participant(group, rank, by_block)
            self.current = (b, k)
            values = self.read(rank, op.src_buf, op.src_off, op.count, where)
            total = values if total is None else tuple(self.combine(a, c, where) for a, c in zip(total, values))
        total = total if total is not None else (Bad("switch op without srcs"),) * group.op.count
        for rank in group.op.dsts:
            b, k, op, where = self._participant(group, rank, by_block)
            self.current = (b, k)
            self.write(rank, op.dst_buf, op.dst_off, total, where)
