"""What switch channels and the plan's ``requires`` must satisfy (synth.mscclpp.rules).

Switch channels (shared/reference/mscclpp-format.md sections 5, 9.5, 9.6):

- a rank declares only groups it is in, each rank once, ranks of the plan (R13);
- every member of a group declares the same channel (buffer type and ranks), and any two members
  list the groups they share in the same order: the executor sets each group up collectively, in
  declaration order, and a member that is missing or out of order hangs the set-up (R13);
- ``glres`` reads and writes switch references only; ``gstore`` stores a local reference into a
  switch one (R17).

``requires`` (synth writes it for plans with switch channels; the executor reads no such key):
the release named must know every op the plan uses (``recpkt``/``recspkt`` need 0.9,
``gstore``/``gstorepkt`` 0.10; an older executor throws "Invalid operation type", R4), and switch
ops need sm_90 or newer (below it they compile to nothing and silently do nothing, R18).

>>> from synth.mscclpp.plan import read_plan
>>> gpu = lambda r, groups: {"id": r, "input_chunks": 1, "output_chunks": 1, "scratch_chunks": 0,
...     "channels": [{"channel_type": "switch", "buffer_type": "i", "rank_groups": groups}],
...     "remote_buffers": [], "threadblocks": []}
>>> doc = {"name": "p", "collective": "allreduce", "protocol": "Simple", "inplace": True,
...        "gpus": [gpu(0, [{"size": 2, "ranks": [0, 1]}]), gpu(1, [])]}
>>> for problem in switch_rules(read_plan(doc)[0]): print(problem.path, problem.rule, problem.text[:43])
gpus[1].channels R13 rank 1 declares no switch channel for group
"""

from __future__ import annotations

from synth.mscclpp.plan import Op, Plan, Problem

RELEASES = ("0.8", "0.9", "0.10")
OP_SINCE = {"recpkt": "0.9", "recspkt": "0.9", "gstore": "0.10", "gstorepkt": "0.10"}  # others: 0.8
SWITCH_OPS = frozenset({"glres", "gstore", "gstorepkt"})


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def switch_rules(plan: Plan) -> list[Problem]:
    """Every problem with the plan's switch channels and its ``requires`` (see the module)."""
    return _groups(plan) + _requires(plan)


def switch_note(plan: Plan) -> str | None:
    """One line for a plan with switch ops: where they run (None without switch ops)."""
    names = sorted({op.name for op in _ops(plan) if op.name in SWITCH_OPS})
    if not names:
        return None
    return (f"switch ops ({', '.join(names)}) run on sm_90+ GPUs with NVLS only, never on uint8 data (below sm_90 "
            "they silently do nothing; mscclpp-format.md 9.6)")


def _groups(plan: Plan) -> list[Problem]:
    out = []
    declared = [gpu.switch_groups() for gpu in plan.gpus]
    for r, groups in enumerate(declared):
        for buffer, ranks in groups:
            label = f"group {list(ranks)} ({buffer})"
            if r not in ranks or len(set(ranks)) < len(ranks) or not all(0 <= x < plan.ranks for x in ranks):
                out.append(Problem(f"gpus[{r}].channels", f"{label}: a rank declares groups it is in, each rank "
                                                          f"once, ranks 0..{plan.ranks - 1}", "R13"))
                continue
            for m in ranks:
                if m != r and (buffer, ranks) not in declared[m]:
                    out.append(Problem(f"gpus[{m}].channels", f"rank {m} declares no switch channel for {label}, "
                                                              f"which rank {r} declares: the collective set-up waits "
                                                              "for it", "R13"))
    for r, groups in enumerate(declared):
        for m in range(r + 1, plan.ranks):
            shared_r = [g for g in groups if g in declared[m]]
            shared_m = [g for g in declared[m] if g in groups]
            if shared_r != shared_m:
                out.append(Problem(f"gpus[{m}].channels", f"ranks {r} and {m} declare the switch groups they share "
                                                          "in different orders: the collective set-up hangs", "R13"))
    return out


def _ops(plan: Plan):
    for gpu in plan.gpus:
        for block in gpu.blocks:
            for op in block.ops:
                yield op
                yield from op.body


def _requires(plan: Plan) -> list[Problem]:
    out = [problem for op in _ops(plan) for problem in _operands(op)]
    needs = plan.requires
    if needs is None:
        return out
    version = needs.get("mscclpp")
    if version is not None and version not in RELEASES:
        return out + [Problem("requires.mscclpp", f"{version!r}: the current schema is "
                                                  f"{', '.join(RELEASES)}", "R4")]
    names = sorted({op.name for op in _ops(plan)})
    for name in names:
        since = OP_SINCE.get(name, "0.8")
        if version is not None and _release(version) < _release(since):
            out.append(Problem("requires.mscclpp", f"{name} needs mscclpp >= {since}; the plan says it is for "
                                                   f"{version} (that executor throws \"Invalid operation type\")",
                               "R4"))
    sm = needs.get("sm")
    if any(name in SWITCH_OPS for name in names) and (not isinstance(sm, int) or sm < 90 or not needs.get("nvls")):
        out.append(Problem("requires", f"switch ops (glres, gstore) need sm_90+ with NVLS; the plan says sm {sm!r}, "
                                       f"nvls {needs.get('nvls')!r} (below sm_90 they silently do nothing)", "R18"))
    return out


def _operands(op: Op) -> list[Problem]:
    """glres: one switch source and one switch destination; gstore(pkt): local into switch."""
    if op.name not in SWITCH_OPS:
        return []
    kinds = ([r.kind for r in op.src], [r.kind for r in op.dst])
    want = (["switch"], ["switch"]) if op.name == "glres" else (["local"], ["switch"])
    if kinds != want:
        return [Problem(op.path, f"{op.name} takes {want[0][0]} -> {want[1][0]} (one reference each), got "
                                 f"{kinds[0]} -> {kinds[1]}", "R17")]
    return []
