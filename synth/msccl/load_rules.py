"""Whether an MSCCL runtime loads a file and runs it as written (msccl-format.md sections 2-9, 11).

``check_profile(parsed, profile)`` applies, for one runtime profile, every rule the runtime's
parser enforces (severity "rejects") and every rule it does not check but needs for a correct
run (severity "misbehaves": shared FIFOs, ``chan >= nchannels``, dependency ids > 127,
``off + cnt`` out of bounds, mismatched send/receive sequences, deadlocks ...). ``ok(problems)``
is the verdict: no problem other than notes. ``check_program(program, profile)`` applies the
same rules to a Program that did not come from XML (no lexical or attribute rules).

>>> from synth.msccl.xml_reader import read_xml
>>> p = read_xml('<algo name="x" proto="LL" nchannels="1" nchunksperloop="1" ngpus="1" coll="allreduce" '
...              'inplace="1"><gpu id="0" i_chunks="1" o_chunks="0" s_chunks="0"><tb id="0" send="-1" '
...              'recv="-1" chan="0"><step s="0" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" '
...              'cnt="0" depid="-1" deps="-1" hasdep="0"/></tb></gpu></algo>')
>>> [str(x) for x in check_profile(p, PROFILES["legacy"]) if x.severity != "note"]
[]
>>> sorted({x.code for x in check_profile(p, PROFILES["executor"])})
['missing-attribute']
"""

from __future__ import annotations

from collections import Counter, defaultdict

from synth.msccl.profiles import (
    MAX_COUNT,
    MAX_DEP_TB,
    MAX_ELEMENTS_PER_RANK,
    MAX_FUSED_REDUCES,
    MAX_OFFSET,
    MAX_PEERS_PER_CHANNEL,
    PROFILES,
    Profile,
)
from synth.msccl.xml_reader import ParsedXml, strtol
from synth.program.deps import Problem, release, structure_problems, transfers
from synth.program.ir import BUFFERS, OP_TYPES, PROTOCOLS, RECEIVING, SENDING, Program

__all__ = ["Problem", "PROFILES", "check_profile", "check_program", "ok"]

# fields the parser bounds-checks, and fields the interpreter dereferences (section 6.1)
CHECKED = {"s": "s", "r": "d", "rcs": "d", "rrs": "s", "rrc": "", "rrcs": "sd", "cpy": "sd", "re": "sd", "ra": "sd"}
USED = {"s": "s", "r": "d", "rcs": "d", "rrs": "s", "rrc": "sd", "rrcs": "sd", "cpy": "sd", "re": "sd"}
MAX_CHILDREN = 1024


def ok(problems) -> bool:
    """The verdict of a profile: nothing that stops the load or makes the run go wrong."""
    return not any(p.severity != "note" for p in problems)


def check_profile(parsed: ParsedXml, profile: Profile) -> list[Problem]:
    """Every problem ``profile``'s runtime has with the file ``parsed``."""
    problems = [Problem(x.code, x.message, x.severity, line=x.line) for x in parsed.lexical]
    problems += _algo_rules(parsed, profile)
    skip = set()
    for m in parsed.missing:
        where = f"<{m.element}>"
        problems.append(Problem("missing-attribute", f"{where} lacks {', '.join(m.names)}", "rejects",
                                m.rank, m.tb, m.step, m.line))
        skip.add((m.rank, m.tb, m.step))
    problems += _raw_step_rules(parsed, profile, skip)
    problems += _rules(parsed.program, profile, parsed, skip)
    return problems


def check_program(program: Program, profile: Profile) -> list[Problem]:
    """The load rules that apply to a Program IR (no text, so no lexical or attribute rules)."""
    problems = []
    if program.switch_ops:
        problems.append(Problem("switch-op", f"{program.switch_ops} switch ops (glre/gstore/glres): MSCCL has no "
                                "switch operation (its runtimes run point-to-point sends only)", "rejects"))
    if program.collective not in profile.coll_names:
        problems.append(Problem("collective", f"{profile.name} has no {program.collective!r} collective", "rejects"))
    if program.protocol not in PROTOCOLS:
        problems.append(Problem("protocol", f"unknown protocol {program.protocol!r}", "rejects"))
    return problems + _rules(program, profile, None, set())


# ---------------------------------------------------------------------- <algo>
def _algo_rules(parsed: ParsedXml, profile: Profile) -> list[Problem]:
    algo, problems = parsed.algo, []
    if not parsed.algo_count:
        return problems
    line = parsed.lines.get(())
    if profile.name != "legacy" and parsed.first_element != "algo":
        problems.append(Problem("first-element", f"the first element is <{parsed.first_element}>, but the "
                                f"{profile.name} metadata loader reads only the first element and expects <algo>",
                                "rejects"))
    absent = [a for a in profile.requires if a not in algo]
    if absent:
        problems.append(Problem("missing-attribute", f"<algo> lacks {', '.join(absent)}", "rejects", line=line))
    proto = algo.get("proto")
    if proto is not None and proto not in PROTOCOLS:
        problems.append(Problem("protocol", f"unknown protocol {proto!r} (Simple, LL, LL128; case-sensitive)",
                                "rejects", line=line))
    coll = algo.get("coll")
    if coll is not None and coll not in profile.coll_names.values():
        hint = ""
        for other in PROFILES.values():
            if coll in other.coll_names.values():
                synth_name = next(k for k, v in other.coll_names.items() if v == coll)
                spelled = profile.coll_names.get(synth_name)
                hint = f" (spelled {spelled!r} there)" if spelled else f" ({coll} is {other.name}-only)"
                break
        problems.append(Problem("collective", f"{profile.name} does not know coll={coll!r}{hint}", "rejects",
                                line=line))
    prog = parsed.program
    if ("ngpus" in algo and prog.ranks != strtol(algo["ngpus"])[0]) or prog.ranks < 1:
        problems.append(Problem("ngpus", f"ngpus={algo.get('ngpus')!r} is not a usable world size", "rejects",
                                line=line))
    min_b = strtol(algo["minBytes"], 64)[0] if "minBytes" in algo else 0
    max_b = strtol(algo["maxBytes"], 64)[0] if "maxBytes" in algo else (1 << 27 if profile.name == "legacy" else None)
    if profile.name == "legacy":
        if min_b < 0 or (max_b is not None and max_b < 0):
            problems.append(Problem("byte-range", "minBytes and maxBytes must not be negative", "rejects", line=line))
        elif max_b is not None and min_b > max_b:
            problems.append(Problem("byte-range", f"minBytes {min_b} > maxBytes {max_b}", "rejects", line=line))
        elif max_b == 0:
            problems.append(Problem("byte-range", "maxBytes=0 means 'never' on legacy: the algorithm is never "
                                    "selected", "note", line=line))
        elif "maxBytes" not in algo:
            problems.append(Problem("byte-range", "no maxBytes: legacy only uses the algorithm below 128 MiB", "note",
                                    line=line))
        if len(algo.get("name", "")) > 63:
            problems.append(Problem("name", "legacy keeps only the first 63 characters of name", "note", line=line))
        if "nthreads" in algo and strtol(algo["nthreads"])[0] % 32:
            problems.append(Problem("nthreads", f"nthreads={algo['nthreads']} is not a multiple of 32", "rejects",
                                    line=line))
    elif max_b and min_b > max_b:
        problems.append(Problem("byte-range", f"minBytes {min_b} > maxBytes {max_b}: never selected", "misbehaves",
                                line=line))
    if "nchannels" in algo:
        if prog.channels < 1:
            problems.append(Problem("nchannels", f"nchannels={algo['nchannels']!r} must be at least 1", "misbehaves",
                                    line=line))
        elif prog.channels > profile.max_channels:
            severity = "rejects" if profile.name == "rccl" else "misbehaves"
            problems.append(Problem("nchannels", f"nchannels={prog.channels} exceeds {profile.name}'s "
                                    f"{profile.max_channels} channels", severity, line=line))
    if "nchunksperloop" in algo and prog.chunks_per_loop < 1:
        problems.append(Problem("nchunksperloop", f"nchunksperloop={algo['nchunksperloop']!r} must be positive",
                                "misbehaves"))
    if profile.checks_chunk_counts and "nchunksperloop" in algo:
        problems += _chunk_counts(prog, parsed)
    if len(parsed.gpu_ids) > MAX_CHILDREN:
        problems.append(Problem("elements", f"<algo> has {len(parsed.gpu_ids)} children: more than {MAX_CHILDREN} "
                                "overflows the reader", "misbehaves"))
    return problems


def _chunk_counts(prog: Program, parsed: ParsedXml) -> list[Problem]:
    """Legacy: non-zero i_chunks (x ngpus for allgather) / o_chunks (x ngpus for reduce-scatter) == N."""
    mult_in = prog.ranks if prog.collective == "allgather" else 1
    mult_out = prog.ranks if prog.collective == "reduce_scatter" else 1
    problems = []
    for g in prog.gpus:
        n = prog.chunks_per_loop
        bad_in = g.input_chunks > 0 and g.input_chunks * mult_in != n
        if bad_in or (g.output_chunks > 0 and g.output_chunks * mult_out != n):
            problems.append(Problem("chunk-counts", f"i_chunks/o_chunks {g.input_chunks}/{g.output_chunks} do not fit "
                                    f"nchunksperloop {n} for {prog.collective}", "rejects", g.rank,
                                    line=parsed.lines.get((g.rank,))))
    return problems


# ---------------------------------------------------------------------- raw step values
def _raw_step_rules(parsed: ParsedXml, profile: Profile, skip: set) -> list[Problem]:
    """``s`` (range, = position), ``hasdep`` in {0, 1}, tb id list, gpu ids, elements per rank."""
    problems = []
    prog = parsed.program
    counts = Counter(parsed.gpu_ids)
    for gid, n in sorted(counts.items()):
        if n > 1:
            problems.append(Problem("gpu-id", f"<gpu id={gid}> appears {n} times", "misbehaves", gid))
        if not 0 <= gid < prog.ranks:
            problems.append(Problem("gpu-id", f"<gpu id={gid}> is outside 0..ngpus-1 (never read)", "note"))
    for rank, ids in parsed.tb_ids.items():
        line = parsed.lines.get((rank,))
        seen = Counter(ids)
        for tid, n in seen.items():
            if n > 1:
                problems.append(Problem("tb-id", f"duplicate thread block id {tid}", "rejects", rank, tid, line=line))
            if tid < 0:
                problems.append(Problem("tb-id", f"thread block id {tid} is negative", "rejects", rank, tid, line=line))
        good = [t for t in seen if t >= 0]
        for gap in sorted(set(range(max(good, default=-1) + 1)) - set(good))[:3]:
            problems.append(Problem("tb-id", f"thread block {gap} is missing (ids must be 0..k-1)", "rejects", rank,
                                    line=line))
    for rank, n in parsed.elements.items():
        if n > MAX_ELEMENTS_PER_RANK:
            problems.append(Problem("elements", f"{n} XML elements to store when rank {rank} loads the file "
                                    f"(max {MAX_ELEMENTS_PER_RANK})", "rejects", rank))
    for (rank, index), raw in parsed.steps_raw.items():
        tb = prog.gpus[rank].threadblocks[index]
        limit = profile.max_steps
        for pos, (s, hasdep) in enumerate(raw):
            if s == pos < limit and (hasdep == 0 or hasdep == 1):
                continue
            op, line = tb.ops[pos], parsed.lines.get((rank, index, pos))
            if (rank, tb.id, pos) in skip:
                continue
            if s == pos:
                pass  # beyond the limit: reported once for the block
            elif not 0 <= s < profile.max_steps:
                problems.append(Problem("step-limit", f"s={s} is outside 0..{profile.max_steps - 1}", "rejects",
                                        rank, tb.id, pos, line))
            else:
                problems.append(Problem("step-number", f"s={s} but the step is at position {pos}: dependencies "
                                        "name positions", "misbehaves", rank, tb.id, pos, line))
            if hasdep not in (0, 1) and op.type != "nop":
                problems.append(Problem("hasdep", f"hasdep={hasdep} (must be 0 or 1)", "rejects", rank, tb.id, pos,
                                        line))
    return problems


# ---------------------------------------------------------------------- thread blocks and steps
_SHARED: dict[int, tuple[Program, list]] = {}


def _rules(prog: Program, profile: Profile, parsed: ParsedXml | None, skip: set) -> list[Problem]:
    """The profile's limits, plus the rules every profile shares (computed once per program)."""
    hit = _SHARED.get(id(prog))
    if hit is None or hit[0] is not prog:
        if len(_SHARED) > 8:
            _SHARED.clear()
        hit = _SHARED[id(prog)] = (prog, _shared_rules(prog, parsed, skip))
    problems = list(hit[1])
    line_of = _line_finder(parsed)
    for g in prog.gpus:
        if (g.rank, None, None) in skip:
            continue
        if len(g.threadblocks) > profile.max_threadblocks:
            problems.append(Problem("tb-limit", f"{len(g.threadblocks)} thread blocks > {profile.max_threadblocks} "
                                    f"({profile.name} limit)", "rejects", g.rank))
        for index, tb in enumerate(g.threadblocks):
            where = dict(rank=g.rank, tb=tb.id, line=line_of(g.rank, index))
            if (g.rank, tb.id, None) not in skip:
                if tb.id >= profile.max_threadblocks > len(g.threadblocks):
                    problems.append(Problem("tb-limit", f"thread block id {tb.id} >= {profile.max_threadblocks}",
                                            "rejects", **where))
                if not 0 <= tb.channel <= profile.max_channels:
                    problems.append(Problem("channel", f"chan={tb.channel} is invalid (every parser needs 0 <= chan <= "
                                            f"{profile.max_channels}, even for local-only blocks)", "rejects", **where))
            if len(tb.ops) > profile.max_steps:
                problems.append(Problem("step-limit", f"{len(tb.ops)} steps > {profile.max_steps} ({profile.name} "
                                        "limit)", "rejects", **where))
            for pos, op in enumerate(tb.ops):
                if op.type == "ra" and (g.rank, tb.id, pos) not in skip:
                    where["step"], where["line"] = pos, line_of(g.rank, index, pos)
                    if profile.name == "legacy":
                        problems.append(Problem("step-type", "type 'ra' parses on legacy but its kernel has no case "
                                                "for it: the block stops there and the collective hangs",
                                                "misbehaves", **where))
                    else:
                        problems.append(Problem("step-type", f"unknown step type 'ra' ({profile.name} rejects it)",
                                                "rejects", **where))
    return problems


def _line_finder(parsed: ParsedXml | None):
    if parsed is None:
        return lambda *key: None
    return lambda *key: parsed.lines.get(key)


def _shared_rules(prog: Program, parsed: ParsedXml | None, skip: set) -> list[Problem]:
    problems = []
    line_of = _line_finder(parsed)
    for g in prog.gpus:
        if (g.rank, None, None) in skip:
            continue
        if not g.threadblocks:
            problems.append(Problem("no-blocks", "this rank has no thread blocks (its kernel launches no block)",
                                    "misbehaves", g.rank, line=line_of(g.rank)))
            continue
        if g.scratch_chunks < 0:
            problems.append(Problem("chunks", f"s_chunks={g.scratch_chunks} is negative", "rejects", g.rank))
        peers: dict[tuple[str, int], int] = defaultdict(int)
        ids = {t.id: i for i, t in reversed(list(enumerate(g.threadblocks)))}
        for index, tb in enumerate(g.threadblocks):
            problems += _tb_rules(prog, g, index, tb, line_of, skip, peers, ids)
        for (direction, chan), n in peers.items():
            if n > MAX_PEERS_PER_CHANNEL:
                problems.append(Problem("peers-per-channel", f"{n} {direction} blocks on channel {chan} "
                                        f"(max {MAX_PEERS_PER_CHANNEL})", "rejects", g.rank))
    if not skip and not any(p.severity == "rejects" and p.code == "tb-id" for p in problems):
        problems += _located(structure_problems(prog), prog, parsed)
    return problems


def _located(problems: list[Problem], prog: Program, parsed: ParsedXml | None) -> list[Problem]:
    """Add line numbers to problems that name a rank (and tb, step)."""
    if parsed is None:
        return problems
    out = []
    for p in problems:
        if p.line is None and p.rank is not None and 0 <= p.rank < len(prog.gpus):
            key: tuple[int, ...] = (p.rank,)
            if p.tb is not None:
                index = next((i for i, t in enumerate(prog.gpus[p.rank].threadblocks) if t.id == p.tb), None)
                key = (p.rank,) if index is None else (p.rank, index) if p.step is None else (p.rank, index, p.step)
            p = Problem(p.code, p.message, p.severity, p.rank, p.tb, p.step, parsed.lines.get(key))
        out.append(p)
    return out


def _tb_rules(prog, g, index, tb, line_of, skip, peers, ids) -> list[Problem]:
    problems = []
    where = dict(rank=g.rank, tb=tb.id, line=line_of(g.rank, index))
    if (g.rank, tb.id, None) not in skip:
        for role, peer in (("send", tb.send), ("recv", tb.recv)):
            if peer == g.rank:
                problems.append(Problem("peer", f"{role} peer is the rank itself", "rejects", **where))
            elif not -1 <= peer < prog.ranks:
                problems.append(Problem("peer", f"{role}={peer} is not -1 or a rank 0..{prog.ranks - 1}", "rejects",
                                        **where))
        if 0 <= prog.channels <= tb.channel:
            problems.append(Problem("channel", f"chan={tb.channel} >= nchannels={prog.channels}: that channel's "
                                    "connections are never set up", "misbehaves", **where))
        if tb.send >= 0:
            peers[("send", tb.channel)] += 1
        if tb.recv >= 0:
            peers[("recv", tb.channel)] += 1
    sizes = {b: g.buffer_chunks(b) for b in BUFFERS}
    for pos, op in enumerate(tb.ops):
        if op.type == "nop" and op.src_buf in sizes and op.dst_buf in sizes or op.switches and op.switch_id >= 0:
            continue  # a Program's switch op: said once for the whole program (check_program)
        if (g.rank, tb.id, pos) not in skip:
            found = _step_rules(g, tb, op, sizes)
            if found:
                at = dict(rank=g.rank, tb=tb.id, step=pos, line=line_of(g.rank, index, pos))
                problems += [Problem(code, message, severity, **at) for code, message, severity in found]
    folded = transfers(tb)
    for t in folded:
        if t.waits and tb.ops[t.ops[0]].dep_tb < 0:
            problems.append(Problem("nop-chain", "nops carry dependencies but the step after them has depid=-1 (the "
                                    "parser rejects the file: put one dependency on the step itself)", "rejects",
                                    g.rank, tb.id, t.ops[0], line_of(g.rank, index, t.ops[0])))
        if len(t.ops) > MAX_FUSED_REDUCES:
            problems.append(Problem("fused-reduces", f"{len(t.ops)} fusable 're' steps in a row (max "
                                    f"{MAX_FUSED_REDUCES}): overflows the kernel's source list", "misbehaves",
                                    g.rank, tb.id, t.ops[0], line_of(g.rank, index, t.ops[0])))
    last = folded[-1].ops[-1] if folded else -1
    tail = [pos for pos in range(last + 1, len(tb.ops)) if tb.ops[pos].dep_tb >= 0]
    if tail:
        problems.append(Problem("nop-chain", "nops with dependencies at the end of the block wait for nothing",
                                "note", g.rank, tb.id, tail[0], line_of(g.rank, index, tail[0])))
    problems += _dependency_rules(g, index, tb, line_of, ids)
    return problems


def _step_rules(g, tb, op, sizes) -> list[tuple[str, str, str]]:
    """(code, message, severity) for one step; 'ra' is left to the profile rules."""
    problems = []
    if op.type not in OP_TYPES:
        if op.type != "ra":
            problems.append(("step-type", f"unknown step type {op.type!r}", "rejects"))
        return problems
    for buf in (op.src_buf, op.dst_buf):
        if buf not in sizes:
            problems.append(("buffer", f"buffer {buf!r} is not i, o or s", "rejects"))
    if op.type == "nop":
        return problems
    if not 0 <= op.count <= MAX_COUNT:
        problems.append(("count", f"cnt={op.count} outside 0..{MAX_COUNT}", "rejects"))
    elif op.count == 0:
        problems.append(("count", "cnt=0 on a data step moves nothing (and corrupts legacy's per-count "
                         "bookkeeping)", "misbehaves"))
    if op.type in SENDING and tb.send < 0:
        problems.append(("peer", f"a {op.type!r} step in a block without a send peer", "rejects"))
    if op.type in RECEIVING and tb.recv < 0:
        problems.append(("peer", f"a {op.type!r} step in a block without a recv peer", "rejects"))
    checked, used = CHECKED[op.type], USED[op.type]
    for field, buf, off in (("s", op.src_buf, op.src_off), ("d", op.dst_buf, op.dst_off)):
        size = sizes.get(buf)
        if size is None:
            continue
        name = "src" if field == "s" else "dst"
        if field in checked and not -1 <= off < size:
            problems.append(("offset", f"{name}off={off} outside -1..{size - 1} for buffer {buf}", "rejects"))
        elif field in used and (off < 0 or off + op.count > size or off > MAX_OFFSET):
            problems.append(("offset", f"{name} {buf}[{off}..{off + op.count}) is outside the buffer's {size} "
                             "chunks", "misbehaves"))
    return problems


def _dependency_rules(g, index, tb, line_of, ids) -> list[Problem]:
    problems = []
    for pos, op in enumerate(tb.ops):
        if op.dep_tb < 0:
            continue
        found = []
        if op.dep_tb > MAX_DEP_TB:
            found.append(("dep-id-overflow", f"depid={op.dep_tb} > {MAX_DEP_TB}: stored in 8 bits it wraps to another "
                          "block", "misbehaves"))
        target = ids.get(op.dep_tb)
        target_tb = None if target is None else g.threadblocks[target]
        if target_tb is None:
            found.append(("dependency", f"depends on thread block {op.dep_tb}, which does not exist", "misbehaves"))
        elif not 0 <= op.dep_op < len(target_tb.ops):
            found.append(("dependency", f"depends on step {op.dep_op} of tb {op.dep_tb}, which has "
                          f"{len(target_tb.ops)} steps", "misbehaves"))
        elif op.dep_tb == tb.id:
            found.append(("dependency", "depends on its own thread block (program order already holds)", "note"))
        elif not target_tb.ops[op.dep_op].has_dep:
            if release(transfers(target_tb), op.dep_op) is None:
                found.append(("dependency", f"waits for tb {op.dep_tb} step {op.dep_op}, but that block never "
                              "publishes that far (no hasdep=1 step at or after it): hangs", "misbehaves"))
            else:
                found.append(("dependency", f"tb {op.dep_tb} step {op.dep_op} has hasdep=0: released only by a later "
                              "hasdep step", "note"))
        if found:
            line = line_of(g.rank, index, pos)
            problems += [Problem(c, m, sev, g.rank, tb.id, pos, line) for c, m, sev in found]
    return problems
