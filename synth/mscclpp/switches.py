"""Switch entries in an MSCCL++ plan: switch channels and ``glres`` / ``gstore`` (synth.mscclpp.lower).

A switch channel is an NVLS multicast object over a group of ranks, bound to one buffer type of
every member (shared/reference/mscclpp-format.md sections 5 and 9). ``glres`` loads the sum of
every member's chunks at an index and stores it into every member at an index; ``gstore`` stores
one rank's local chunks into every member. So each switch operation the planner placed
(synth.lower.plan.SwitchTransfer, reduces already fused with the multicast of their result,
synth.lower.switches) becomes:

- a reduce-multicast whose srcs and dsts are the same ranks: ``glres`` on the group, run by the
  rank that sums (its first dst, the head), reading at the srcs' common index and writing at the
  dsts' common index (a channel per buffer type);
- a multicast from a src that is among its dsts: ``gstore`` on the group of its dsts, run by the
  src, from where it holds the chunks to the dsts' common index (mscclpp >= 0.10).

Anything else is refused in one line naming why: a lone reduce (MSCCL++'s ``glre`` is not an op
the executor parses, section 9.5), a reduce-multicast whose dsts are not its srcs, a multicast
whose group cannot hold its src (another write of the src's copy in that step), ranks holding
the chunks at different places (a switch channel addresses the same index on every member), a
switch that is not NVLink SHARP (an InfiniBand SHARP switch is no multicast object), ``gstore``
for mscclpp 0.8 or 0.9, and LL plans (switch ops are not packet ops). Channels are declared in
one global order (buffer type, then ranks), so every member lists a group's channel in the same
order, as the collective set-up needs. The plan says what it needs (``requires``: the first
release with its ops, sm_90 and NVLS; the executor reads no such key): on an older GPU these ops silently do nothing
(section 9.6), and never with uint8 data.
"""

from __future__ import annotations

from collections import defaultdict

from synth.core.errors import InputError
from synth.lower.plan import SwitchTransfer

BUFFER_ORDER = "ios"
MAX_SWITCH_CHANNELS = 16  # per thread block (MAX_CHANNEL)
OP_VERSIONS = {"glres": (0, 8), "gstore": (0, 10)}  # the first current-schema release with the op


def version_tuple(text: str) -> tuple[int, ...]:
    """``"0.10"`` -> (0, 10)."""
    return tuple(int(part) for part in text.split("."))


class SwitchPlan:
    """The switch channels and ops of one plan (see the module); InputError when the schedule's
    switch entries cannot be written."""

    def __init__(self, schedule, switches: list[SwitchTransfer], version: str, protocol: str):
        self.topology = schedule.topology
        self.ops: dict[tuple[int, int], list[dict]] = defaultdict(list)  # (rank, step) -> ops it runs
        self.steps: set[int] = set()
        self.members: dict[int, set[int]] = defaultdict(set)  # rank -> ranks it shares a group with
        planned = [self._planned(sw, version, protocol) for sw in switches]
        keys = sorted({key for _, _, needs in planned for key in needs},
                      key=lambda k: (BUFFER_ORDER.index(k[0]), k[1]))
        self.groups = keys  # (buffer type, ranks), the global channel order
        for sw, (name, refs, _) in zip(switches, planned):
            issuer = sw.srcs[0] if name == "gstore" else sw.dsts[0]
            self.ops[(issuer, sw.step)].append((name, refs, sw.count))
            self.steps.add(sw.step)
        for _, ranks in keys:
            for r in ranks:
                self.members[r].update(x for x in ranks if x != r)
        for r in range(schedule.collective.ranks):
            if len(self.channel_keys(r)) > MAX_SWITCH_CHANNELS:
                raise InputError(f"rank {r} needs {len(self.channel_keys(r))} switch channels: a thread block "
                                 f"holds at most {MAX_SWITCH_CHANNELS}")

    def _planned(self, sw: SwitchTransfer, version: str, protocol: str) -> tuple[str, tuple, list]:
        """(op name, its (src, dst) references as (kind, buffer or group key, index), the
        channels it needs) for one switch transfer, or InputError."""
        label = f"switch entry for chunk {sw.chunk} in step {sw.step} ({list(sw.srcs)}->{list(sw.dsts)})"
        self._check_switch(sw, label, protocol)
        group = tuple(sorted(sw.dsts))
        write = _common(sw.writes, label, "write")
        if len(sw.srcs) == 1:
            if sw.srcs[0] not in sw.dsts:
                raise InputError(f"{label}: MSCCL++ multicasts (gstore) to a group that holds the src too, and rank "
                                 f"{sw.srcs[0]}'s copy is written by something else in that step")
            name, source = "gstore", ("local", sw.reads[0][1][0], sw.reads[0][1][1])
            needs = [(write[0], group)]
        elif len(sw.dsts) == 1:
            raise InputError(f"{label}: a reduce to one rank is MSCCL++'s glre, which the executor does not parse "
                             "(only glres, the reduce fused with a multicast of its result to every src)")
        elif set(sw.srcs) != set(sw.dsts):
            raise InputError(f"{label}: MSCCL++'s glres stores the sum into every rank it reads, so its dsts must "
                             "be its srcs")
        else:
            read = _common(sw.reads, label, "read")
            name, source = "glres", ("switch", (read[0], group), read[1])
            needs = [(read[0], group), (write[0], group)]
        if version_tuple(version) < OP_VERSIONS[name]:
            raise InputError(f"{label}: {name} needs mscclpp >= {'.'.join(map(str, OP_VERSIONS[name]))}; the plan is "
                             f"for {version} (--mscclpp-version)")
        return name, (source, ("switch", (write[0], group), write[1])), needs

    def _check_switch(self, sw: SwitchTransfer, label: str, protocol: str) -> None:
        if protocol != "Simple":
            raise InputError(f"{label}: switch channel ops are not packet ops; an MSCCL++ plan with switch entries "
                             "runs Simple")
        switch = self.topology.switch(sw.switch)
        if switch is not None and switch.kind not in (None, "nvlink"):
            raise InputError(f"{label}: switch {sw.switch!r} is a {switch.kind} switch; MSCCL++ switch channels "
                             "are NVLink SHARP multicast objects (NVLS, sm_90+) inside one NVLink domain")
        machines = {self.topology.machine_of[r] for r in (*sw.srcs, *sw.dsts)}
        if len(machines) > 1:
            raise InputError(f"{label}: its ranks span {len(machines)} machines; an NVLS multicast object lives "
                             "inside one NVLink domain")

    # ---------------------------------------------------------------- per rank
    def channel_keys(self, rank: int) -> list[tuple[str, tuple[int, ...]]]:
        """The rank's switch channels in gpu-level order: (buffer type, ranks) it is a member of."""
        return [key for key in self.groups if rank in key[1]]

    def channels(self, rank: int) -> list[dict]:
        """The rank's switch channel entries: one per buffer type, its groups in the global order."""
        out = []
        for buffer in BUFFER_ORDER:
            groups = [ranks for kind, ranks in self.channel_keys(rank) if kind == buffer]
            if groups:
                out.append({"channel_type": "switch", "buffer_type": buffer,
                            "rank_groups": [{"size": len(g), "ranks": list(g)} for g in groups]})
        return out

    def step_ops(self, rank: int, step: int) -> list[dict]:
        """The switch ops ``rank`` runs in ``step`` (switch references by the rank's channel index,
        which every block lists in full, so block-level = gpu-level)."""
        index = {key: i for i, key in enumerate(self.channel_keys(rank))}
        out = []
        for name, (source, target), count in self.ops.get((rank, step), []):
            op = {"name": name, "channel_type": "switch", "src_buff": [_ref(source, count, index)],
                  "dst_buff": [_ref(target, count, index)]}
            if name == "glres":
                op["reduce_op"] = "sum"
            out.append(op)
        return out

    def requires(self) -> dict:
        """What the plan needs to run (written as the plan's ``requires``; the executor reads no such
        key): the first release with every switch op it uses, sm_90 with NVLS, no uint8 data."""
        names = {name for ops in self.ops.values() for name, _, _ in ops}
        since = max(OP_VERSIONS[name] for name in names)
        return {"mscclpp": ".".join(map(str, since)), "sm": 90, "nvls": True,
                "dtypes": "not uint8 (multimem has no uint8 form)"}


def _ref(part: tuple, count: int, index: dict) -> dict:
    """A buffer reference: ("local", buffer, at) or ("switch", channel key, at)."""
    kind, where, at = part
    if kind == "local":
        return {"type": where, "index": at, "size": count}
    return {"switch_channel_id": index[where], "index": at, "size": count}


def _common(places, label: str, what: str) -> tuple[str, int]:
    """The one place every rank reads (or writes) at; InputError when they differ."""
    found = {loc for _, loc in places}
    if len(found) != 1:
        shown = ", ".join(f"rank {r}: {loc[0]}[{loc[1]}]" for r, loc in places[:4])
        raise InputError(f"{label}: the ranks {what} the chunks at different places ({shown}); a switch channel "
                         "addresses the same index on every member")
    return found.pop()
