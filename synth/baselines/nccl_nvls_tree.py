"""NCCL's NVLSTree allreduce (NVLS inside each NVLink domain, a tree across domains) as a
verified schedule with switch entries (reference/in-network.md sections 2.1 and 2.3).

The rule, per slice of the buffer:

- **Heads.** Every domain (a machine whose NVSwitch has reduce and multicast over all its GPUs)
  has H heads, the first GPU behind each of its NICs (``nccl_tree.nic_slots``), at most
  ``MAX_HEADS`` (16); H is the same in every domain (the fewest any has). The buffer is cut into
  H slices; slice j is headed in every domain by that domain's j-th head.
- **Reduce inside.** The domain's switch reduces the slice from every port to its head (one
  reduce entry: ``multimem.ld_reduce``), in every domain at once.
- **Across domains.** The heads of slice j combine their domain sums over the network: with two
  domains they exchange them directly (each head sends its sum to the other with ``reduce``, one
  step); with more, over NCCL's two complementary binary trees over the domains
  (``nccl_tree.machine_trees``): each slice is cut in two *lanes*, one per tree, as NCCL
  alternates its NVLS channels between the trees, so a head's NIC is interior in one lane's tree
  and a leaf in the other's; reduce up level by level, then copy down level by level.
- **Multicast inside.** A head holding the full sum multicasts it to every port of its domain,
  its own included (one multicast entry: ``multimem.st`` into NCCL's broadcast slot), in the
  step after it got it (the root's domain while the root still sends down).
- **Pipelining.** Each lane is cut into ``pieces``; piece t runs the one-piece template t steps
  after piece 0, so one step reduces piece t inside while piece t-1 crosses the network and
  piece t-2 is multicast.

The builder is *sized*: ``pieces`` (1, 2, 4, ... 256) is the count fastest at ``size`` in the
step model at its best protocol (Simple: switch entries run nothing else; 1 GiB when no size is
given); ``chunks`` fixes it instead. The buffer is pieces x lanes chunks (lanes: the heads, twice
that beyond two domains). It applies where NCCL runs NVLSTree: allreduce over at least two
machines, each one NVLink domain of at least 2 GPUs with such a switch, the heads of a slice joined by links both
ways; elsewhere ``BaselineNotApplicable`` says why (one domain: ``nccl_nvls``).

>>> from synth.core.library import resolve_topology
>>> s = build(resolve_topology("h100x2"), "allreduce", None, 1)
>>> len(s.steps), s.switch_count, s.meta["heads"][0], s.meta["variant"]
(3, 32, [0, 8], 'exchange between the 2 domains')
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.baselines import Baseline
from synth.baselines.common import BaselineNotApplicable
from synth.baselines.nccl_tree import allreduce_in, machine_trees, nic_slots
from synth.baselines.trees import tree_levels
from synth.core.schedule import SEND_ORDER, Schedule, Send, Step, SwitchSend, rounds_needed
from synth.core.topology import Switch, Topology
from synth.verify import checked

PIECES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_SIZE = 1 << 30
MAX_HEADS = 16  # NVLSTree heads per NVLink domain (the runtime model's NVLS_TREE_MAX_HEADS)

Entries = tuple[list[Send], list[SwitchSend]]  # one step: point-to-point sends, switch entries


@dataclass(frozen=True)
class Domains:
    """The NVLink domains NVLSTree runs over: each machine's ranks and switch, the heads of every
    slice (``heads[j][m]``: machine m's head of slice j) and the machine trees (none for two)."""

    machines: tuple[tuple[int, ...], ...]
    switches: tuple[Switch, ...]
    heads: tuple[tuple[int, ...], ...]
    trees: tuple[tuple[int, ...], ...]


def domains(topology: Topology) -> Domains:
    """Where NVLSTree runs on ``topology`` (module rule); BaselineNotApplicable with the reason."""
    machines = tuple(tuple(m) for m in topology.machines or ())
    if len(machines) < 2:
        raise BaselineNotApplicable(f"nccl_nvls_tree runs across NVLink domains; {topology.name} is one "
                                    "(NCCL turns NVLSTree off on one node: nccl_nvls runs there)")
    switches = tuple(_domain_switch(topology, m) for m in machines)
    if any(s is None for s in switches):
        raise BaselineNotApplicable(f"nccl_nvls_tree needs every machine of {topology.name} to be one switch "
                                    "with reduce and multicast over its GPUs, at least 2 (NVLS: NVSwitch on Hopper "
                                    "or newer)")
    slots = [nic_slots(topology, m) for m in machines]
    count = min(MAX_HEADS, min(len(s) for s in slots))
    heads = tuple(tuple(s[j][0] for s in slots) for j in range(count))
    for rail in heads:
        if not all(topology.has_link(a, b) for a in rail for b in rail if a != b):
            raise BaselineNotApplicable(f"nccl_nvls_tree needs links both ways between the heads {list(rail)} of "
                                        f"one slice on {topology.name}")
    trees = machine_trees(len(machines)) if len(machines) > 2 else ()
    return Domains(machines, switches, heads, trees)  # type: ignore[arg-type]


def _domain_switch(topology: Topology, machine: tuple[int, ...]) -> Switch | None:
    """The switch with reduce and multicast whose ports are exactly the machine's ranks (at least
    two: NCCL has no NVLS on one GPU)."""
    wanted = set(machine)
    if len(wanted) < 2:
        return None
    return next((s for s in topology.switches if s.reduce and s.multicast and set(s.ranks) == wanted), None)


def lanes(plan: Domains) -> list[tuple[int, int]]:
    """(slice, machine tree) of every lane: one per slice for two domains (no tree), else two."""
    if not plan.trees:
        return [(j, -1) for j in range(len(plan.heads))]
    return [(j, tree) for tree in (0, 1) for j in range(len(plan.heads))]


def lane_template(plan: Domains, j: int, tree: int) -> list[Entries]:
    """One piece (chunk 0) of slice j over machine tree ``tree`` (-1: the two-domain exchange):
    reduce inside, across the heads, multicast inside."""
    heads = plan.heads[j]
    reduce_in = [SwitchSend(0, sw.name, m, (h,)) for sw, m, h in zip(plan.switches, plan.machines, heads)]
    if tree < 0:
        exchange = [Send(0, heads[0], heads[1], "reduce"), Send(0, heads[1], heads[0], "reduce")]
        return [([], reduce_in), (exchange, []), ([], _multicasts(plan, heads, range(2)))]
    parents = plan.trees[tree]
    levels = tree_levels(list(parents))
    depth = len(levels)
    steps: list[Entries] = [([], reduce_in)] + [([], []) for _ in range(2 * depth + 1)]
    for i, level in enumerate(reversed(levels)):
        steps[1 + i][0].extend(Send(0, heads[c], heads[p], "reduce") for p, c in level)
    for i, level in enumerate(levels):
        steps[1 + depth + i][0].extend(Send(0, heads[p], heads[c], "copy") for p, c in level)
    steps[1 + depth][1].extend(_multicasts(plan, heads, [parents.index(-1)]))
    for i, level in enumerate(levels):  # a domain at depth i + 1 got the sum in step depth + i + 1
        steps[2 + depth + i][1].extend(_multicasts(plan, heads, [c for _, c in level]))
    return steps


def _multicasts(plan: Domains, heads: tuple[int, ...], machines) -> list[SwitchSend]:
    return [SwitchSend(0, plan.switches[m].name, (heads[m],), plan.machines[m]) for m in machines]


def pipelined(plan: Domains, pieces: int) -> list[Entries]:
    """Every lane's template on its pieces (chunk t x lanes + lane), piece t starting t steps later."""
    every = lanes(plan)
    steps: list[Entries] = []
    for lane, (j, tree) in enumerate(every):
        template = lane_template(plan, j, tree)
        for t in range(pieces):
            chunk = t * len(every) + lane
            for index, (sends, entries) in enumerate(template):
                while len(steps) <= t + index:
                    steps.append(([], []))
                steps[t + index][0].extend(Send(chunk, s.src, s.dst, s.op) for s in sends)
                steps[t + index][1].extend(SwitchSend(chunk, e.switch, e.srcs, e.dsts) for e in entries)
    return steps


def schedule_of(topology: Topology, plan: Domains, pieces: int) -> Schedule:
    """The pipelined schedule, not yet verified (``build`` verifies the one it returns)."""
    built = tuple(Step(tuple(sorted(sends, key=SEND_ORDER)), rounds_needed(topology, sends, entries), tuple(entries))
                  for sends, entries in pipelined(plan, pieces))
    variant = ("exchange between the 2 domains" if not plan.trees
               else f"double binary tree over the {len(plan.machines)} domains")
    meta = {"synthesizer": "baseline", "algorithm": "nccl_nvls_tree", "variant": variant, "pieces": pieces,
            "switches": [s.name for s in plan.switches], "heads": [list(h) for h in plan.heads],
            "machine_trees": [list(t) for t in plan.trees]}
    return Schedule(topology, allreduce_in(topology.ranks, len(lanes(plan)) * pieces), built, meta)


def _times(topology: Topology, plan: Domains, size: float) -> dict[int, float]:
    """Every depth's time at ``size`` (step model, best protocol)."""
    from synth.cost import step_loads

    return {p: step_loads(schedule_of(topology, plan, p)).best(size)[1] for p in PIECES}


def choices(topology: Topology, collective: str, root, sizes) -> dict:
    """{size: pieces build picks} (BaselineNotApplicable where it does not apply)."""
    from synth.cost import step_loads

    _check(collective, root)
    plan = domains(topology)
    loads = {p: step_loads(schedule_of(topology, plan, p)) for p in PIECES}
    return {size: min(PIECES, key=lambda p: (loads[p].best(size)[1], p)) for size in sizes}


def _check(collective: str, root: int | None) -> None:
    if collective != "allreduce":
        raise BaselineNotApplicable(f"nccl_nvls_tree builds allreduce only (NCCL runs NVLSTree for allreduce), "
                                    f"not {collective}")
    if root is not None:
        raise BaselineNotApplicable("allreduce takes no root")


def build(topology: Topology, collective_name: str, root: int | None, chunks: int | None,
          size: float | None = None) -> Schedule:
    """NCCL's NVLSTree allreduce (verified); ``chunks`` = pieces per slice, else the fastest at
    ``size``; see the module."""
    _check(collective_name, root)
    plan = domains(topology)
    if chunks is not None:
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
            raise BaselineNotApplicable(f"nccl_nvls_tree: --chunks is pieces per slice, a positive integer, "
                                        f"got {chunks!r}")
        pieces = chunks
    else:
        times = _times(topology, plan, DEFAULT_SIZE if size is None else size)
        pieces = min(times, key=lambda p: (times[p], p))
    return checked(schedule_of(topology, plan, pieces), f"baseline nccl_nvls_tree on {topology.name}")


BASELINES: tuple[Baseline, ...] = (
    Baseline(
        name="nccl_nvls_tree",
        collectives=frozenset({"allreduce"}),
        build=build,
        description=("NCCL's NVLSTree: the NVSwitch reduces each head's slice, heads combine across machines "
                     "(exchange for 2, tree beyond), the switch multicasts it back (switch entries)"),
        sized=True,
        choices=choices,
    ),
)
