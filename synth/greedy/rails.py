"""Plans across machines that each have a switch with reduce and multicast (NVLS), joined by
rails: rank g of every machine linked to rank g of every other (NCCL's rails; the rail-aligned
fabric of ``NAMExK``, and a subset of the full mesh). The allreduce (``rail_allreduce``) is the
one ``synth.greedy.switches`` describes; the allgather is this:

N machines of G ranks; each rank's shard is cut into P pieces. Piece t of every rank moves in two
steps, pipelined (the second step of piece t runs with the first of piece t + 1):

- step t: every rank multicasts its piece into its machine (one entry, NVLS ``multimem.st``) and
  sends it over its rail to its peer in every other machine;
- step t + 1: every rank multicasts the pieces its rail brought into its machine, and sends its
  rail peers *extras*: pieces of other ranks of its own machine that its switch delivered in
  step t (rank g of machine m sends rank g of machine m' the pieces of ranks g+1 .. g+e of m);
  those peers are left out of the multicasts of the same pieces in m'.

Per piece a rank then receives N-1+x pieces through its NIC and (G-1)N-x through its switch port
(x: its extras, spread over its N-1 peers). The allgather bound counts both: what a rank must
receive, over its port and its NIC together; x moves load from the port onto the NIC until the
two finish together (``balanced_extras``). The planner times a few x around that balance, every
depth P, and keeps the fastest at the size (``synth.greedy.switches``).

>>> from synth.core.library import resolve_topology
>>> from synth.greedy.switches import machine_switches
>>> from synth.verify import verify
>>> t = resolve_topology("h100x2")
>>> s = rail_allgather(t, machine_switches(t), 2, 3)
>>> verify(s), len(s.steps), s.meta["extras"]
([], 3, 3)
"""

from __future__ import annotations

from synth.core import collectives
from synth.core.schedule import SEND_ORDER, Schedule, Send, Step, SwitchSend, rounds_needed
from synth.core.topology import Switch, Topology


def extras_per_offset(extras: int, machines: int, size: int) -> list[int]:
    """How many extras rank g of machine m sends its peer in machine m + d, for d = 0 .. N-1
    (0 for d = 0): ``extras`` spread as evenly as possible, at most G-1 per peer."""
    peers = machines - 1
    extras = max(0, min(extras, peers * (size - 1)))
    return [0] + [extras // peers + (1 if d <= extras % peers else 0) for d in range(1, machines)]


def balanced_extras(topology: Topology, switches) -> float:
    """The x at which a rank's NIC and switch port finish a piece together, at their rates (a
    rail link under its groups; the switch's bandwidth under the port's in-group)."""
    count, size = len(topology.machines), len(topology.machines[0])
    nic, port = _rates(topology, switches)
    return (nic * (size - 1) * count - port * (count - 1)) / (nic + port)


def rail_allgather(topology: Topology, switches, pieces: int, extras: int) -> Schedule:
    """The pipeline of the module with ``pieces`` pieces per rank and ``extras`` per rank and
    piece (chunk r * pieces + t is piece t of rank r's shard)."""
    machines = topology.machines
    count, size = len(machines), len(machines[0])
    per = extras_per_offset(extras, count, size)
    others = {r: tuple(x for x in machine if x != r) for machine in machines for r in machine}
    forward: dict[tuple[int, int], tuple[int, ...]] = {}  # (rank, extras) -> its multicast's dsts
    for machine in machines:
        for g, r in enumerate(machine):
            for e in set(per[1:]):
                skip = {machine[(g - i) % size] for i in range(1, e + 1)}
                forward[(r, e)] = tuple(x for x in others[r] if x not in skip)
    steps: list[tuple[list[Send], list[SwitchSend]]] = [([], []) for _ in range(pieces + 1)]
    for t in range(pieces):
        (sends, entries), (later, later_entries) = steps[t], steps[t + 1]
        for m, machine in enumerate(machines):
            for g, r in enumerate(machine):
                chunk = r * pieces + t
                entries.append(SwitchSend(chunk, switches[m].name, (r,), others[r]))
                for d in range(1, count):
                    m2 = (m + d) % count
                    peer = machines[m2][g]
                    sends.append(Send(chunk, r, peer))
                    later.extend(Send(machine[(g + i) % size] * pieces + t, r, peer) for i in range(1, per[d] + 1))
                    if forward[(peer, per[d])]:  # empty when every other rank there had it as an extra
                        later_entries.append(SwitchSend(chunk, switches[m2].name, (peer,), forward[(peer, per[d])]))
    built = tuple(Step(tuple(sorted(s, key=SEND_ORDER)), rounds_needed(topology, s, e), tuple(e)) for s, e in steps)
    meta = {"synthesizer": "greedy", "algorithm": "switch", "pieces": pieces, "rails": size,
            "extras": sum(per), "switch": ", ".join(s.name for s in switches)}
    return Schedule(topology, collectives.allgather(topology.ranks, pieces), built, meta)


def fabric_switch(topology: Topology) -> Switch | None:
    """A switch with reduce_multicast that has every rail rank as a port (SHARP); None: none."""
    machines = topology.machines or ()
    for switch in topology.switches:
        if switch.reduce_multicast and all(r in switch.port_index for machine in machines for r in machine):
            return switch
    return None


def _rates(topology: Topology, switches) -> tuple[float, float]:
    """(NIC, switch port) in-rates of rank 0 of machine 0: a rail link under its groups, the
    switch's bandwidth under the port's in-group."""
    machines = topology.machines
    rank, peer = machines[0][0], machines[1][0]
    link = topology.link(rank, peer)
    nic = min([link.bandwidth] + [g.bandwidth for g in topology.groups_of_link.get(link.key, ())])
    switch, groups = switches[0], topology.group_map
    name = switch.in_group(rank)
    return nic, (min(switch.bandwidth, groups[name].bandwidth) if name in groups else switch.bandwidth)


def shares_tried(topology: Topology, switches) -> list[int]:
    """Rail shares per slice the rail allreduce is timed with: N (every rail rank owns one share
    of every slice), and N/2, N/4 where those are whole and a share's owner still keeps up with
    the switch ports: in one step it takes N-1 partials of its share and r-1 other shares through
    its NIC while its port moves (G+1) r chunks, so r >= k (N-1) / (G+1-k) with k = port / NIC.
    Fewer shares: fewer chunks per set, so more sets and a shorter fill for the chunk budget."""
    count, size = len(topology.machines), len(topology.machines[0])
    nic, port = _rates(topology, switches)
    ratio = port / nic
    if size + 1 <= ratio:
        return [count]
    least = ratio * (count - 1) / (size + 1 - ratio)
    return sorted({count} | {count // d for d in (2, 4) if count % d == 0 and count // d >= least})


def rail_allreduce(topology: Topology, switches, pieces: int, shares: int | None = None) -> Schedule:
    """Allreduce across machines (``synth.greedy.switches``, the module there): ``pieces`` slice
    sets of G slices, each slice cut into ``shares`` rail shares (default N; fewer: a multiple of
    N / shares sets). Chunk (t * G + g) * shares + j is share j of slice g in set t; its owner on
    the rail is machine j (every one, with N shares) or (j * N / shares + g + t) mod N, so each
    rank owns at most one share per set and the owners rotate."""
    machines = topology.machines
    count, size = len(machines), len(machines[0])
    shares = count if shares is None else shares
    sharp = fabric_switch(topology)
    depth = 3 if sharp is None else 2  # steps from a set's first to its last
    others = {(m, g): tuple(r for r in machine if r != machine[g]) for m, machine in enumerate(machines)
              for g in range(size)}
    steps: list[tuple[list[Send], list[SwitchSend]]] = [([], []) for _ in range(pieces + depth)]
    for t in range(pieces):
        for g in range(size):
            rail = tuple(machine[g] for machine in machines)
            for j in range(shares):
                chunk = (t * size + g) * shares + j
                for m, machine in enumerate(machines):
                    steps[t][1].append(SwitchSend(chunk, switches[m].name, machine, (machine[g],)))
                    steps[t + depth][1].append(SwitchSend(chunk, switches[m].name, (machine[g],), others[(m, g)]))
                if sharp is not None:
                    steps[t + 1][1].append(SwitchSend(chunk, sharp.name, rail, rail))
                    continue
                owner = rail[j if shares == count else (j * (count // shares) + g + t) % count]
                steps[t + 1][0].extend(Send(chunk, r, owner, "reduce") for r in rail if r != owner)
                steps[t + 2][0].extend(Send(chunk, owner, r) for r in rail if r != owner)
    built = tuple(Step(tuple(sorted(s, key=SEND_ORDER)), rounds_needed(topology, s, e), tuple(e)) for s, e in steps)
    used = [*switches, *([] if sharp is None else [sharp])]
    meta = {"synthesizer": "greedy", "algorithm": "switch", "pieces": pieces, "rails": size,
            "switch": ", ".join(s.name for s in used)}
    if shares != count:
        meta["shares"] = shares
    return Schedule(topology, collectives.allreduce(topology.ranks, pieces * shares // count), built, meta)
