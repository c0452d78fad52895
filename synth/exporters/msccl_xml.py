"""MSCCL algorithm XML for one runtime profile (legacy, executor, rccl).

The text has exactly the shape the runtimes' hand-written tokenizer reads (format reference,
section 2): no declaration, 2-space indentation, spaces only, every tag with all its attributes on
one line, double quotes, plain decimal integers. Every ``<algo>`` attribute any runtime requires is
written for every profile, with the collective spelled the profile's way. ``maxBytes``: legacy
reads it as an exclusive bound where 0 means "never", so a program without an upper bound gets a
finite one there (``LEGACY_MAX_BYTES``; ``LEGACY_MAX_BYTES_SCRATCH`` when the program uses scratch,
which legacy allocates from ``maxBytes`` at init; ``minBytes + 1`` when that is larger); executor
and RCCL read it inclusive with 0 = unbounded. A program the runtime would refuse, misread or hang
on is refused with one InputError line instead (section 15).

>>> from synth.program.ir import Op, Program, RankProgram, Threadblock
>>> gpu = lambda r: RankProgram(r, 1, 2, 0, (Threadblock(0, 1 - r, 1 - r, 0, (
...     Op("s", "i", 0, "o", r, 1), Op("r", "i", 0, "o", 1 - r, 1), Op("cpy", "i", 0, "o", r, 1))),))
>>> p = Program("ag2", "allgather", 2, "Simple", 2, False, True, 1, (gpu(0), gpu(1)))
>>> print(program_to_xml(p, "executor").splitlines()[0].replace(" coll=", "\\n coll="))
<algo name="ag2" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2"
 coll="allgather" inplace="0" outofplace="1" minBytes="0" maxBytes="0">
"""

from __future__ import annotations

from collections import Counter

from synth.core.errors import InputError
from synth.lower.lowering import NAME_RE
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
from synth.program.ir import BUFFERS, OP_TYPES, PROTOCOLS, READS_SRC, WRITES_DST, Program, RankProgram

LEGACY_MAX_BYTES = 2**31 - 1  # exclusive; the largest bound every parser reads as an int
LEGACY_MAX_BYTES_SCRATCH = 2**30  # legacy sizes its scratch from maxBytes once, at init


def program_to_xml(program: Program, runtime: str) -> str:
    """The MSCCL XML text of ``program`` for ``runtime``; InputError when the runtime cannot run it."""
    profile = PROFILES.get(runtime)
    if profile is None:
        raise InputError(f"unknown runtime {runtime!r}; known: {', '.join(PROFILES)}")
    check_program(program, profile)
    coll = profile.coll_names[program.collective]
    algo = _attrs(name=program.name, proto=program.protocol, nchannels=program.channels,
                  nchunksperloop=program.chunks_per_loop, ngpus=program.ranks, coll=coll,
                  inplace=int(program.inplace), outofplace=int(program.outofplace),
                  minBytes=program.min_bytes, maxBytes=_max_bytes(program, profile))
    lines = [f"<algo {algo}>"]
    for gpu in program.gpus:
        sizes = _attrs(id=gpu.rank, i_chunks=gpu.input_chunks, o_chunks=gpu.output_chunks,
                       s_chunks=gpu.scratch_chunks)
        lines.append(f"  <gpu {sizes}>")
        for tb in gpu.threadblocks:
            lines.append(f"    <tb {_attrs(id=tb.id, send=tb.send, recv=tb.recv, chan=tb.channel)}>")
            for pos, op in enumerate(tb.ops):
                lines.append("      <step " + _attrs(
                    s=pos, type=op.type, srcbuf=op.src_buf, srcoff=op.src_off, dstbuf=op.dst_buf,
                    dstoff=op.dst_off, cnt=op.count, depid=op.dep_tb, deps=op.dep_op,
                    hasdep=int(op.has_dep)) + "/>")
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def _attrs(**values) -> str:
    return " ".join(f'{key}="{value}"' for key, value in values.items())


def _max_bytes(program: Program, profile: Profile) -> int:
    if profile.max_bytes_exclusive:
        if program.max_bytes is not None:
            return program.max_bytes + 1
        scratch = any(g.scratch_chunks for g in program.gpus)
        # above minBytes even when the range starts beyond the default bound (legacy reads 64 bits)
        return max(LEGACY_MAX_BYTES_SCRATCH if scratch else LEGACY_MAX_BYTES, program.min_bytes + 1)
    return 0 if program.max_bytes is None else program.max_bytes


def check_program(program: Program, profile: Profile) -> None:
    """InputError (one line) at the first thing ``profile``'s runtime would refuse or misrun."""
    where = f"{profile.name} runtime"
    if program.switch_ops:
        raise InputError(f"MSCCL has no switch operation (its runtimes run point-to-point sends only); this program "
                         f"has {program.switch_ops} switch ops: write it as mscclpp-json or program-json")
    if program.collective not in profile.coll_names:
        raise InputError(f"{where} has no collective {program.collective!r} "
                         f"(it knows {', '.join(sorted(profile.coll_names))})")
    if not NAME_RE.fullmatch(program.name):
        raise InputError(f"program name {program.name!r}: use 1-63 characters among A-Z a-z 0-9 _ . + -")
    if program.protocol not in PROTOCOLS:
        raise InputError(f"unknown protocol {program.protocol!r}; known: {', '.join(PROTOCOLS)}")
    if not (program.inplace or program.outofplace):
        raise InputError("a program usable neither in place nor out of place would never be selected")
    if program.min_bytes < 0 or (program.max_bytes is not None and program.max_bytes < program.min_bytes):
        raise InputError(f"byte range {program.min_bytes}..{program.max_bytes} is empty or negative")
    if program.max_bytes == 0 and not profile.max_bytes_exclusive:
        raise InputError(f"{where} reads maxBytes 0 as unbounded; a program for 0-byte calls only cannot be written")
    if not 1 <= program.channels <= profile.max_channels:
        raise InputError(f"{program.channels} channels; {where} allows 1..{profile.max_channels}")
    if len(program.gpus) != program.ranks or [g.rank for g in program.gpus] != list(range(program.ranks)):
        raise InputError(f"the program must have one rank program per rank 0..{program.ranks - 1}, in order")
    for gpu in program.gpus:
        _check_rank(program, gpu, profile)


def _check_rank(program: Program, gpu: RankProgram, profile: Profile) -> None:
    rank, where = gpu.rank, f"rank {gpu.rank}"
    tbs = gpu.threadblocks
    if not tbs:
        raise InputError(f"{where} has no thread block (the runtime would launch an empty kernel)")
    if len(tbs) > profile.max_threadblocks:
        raise InputError(f"{where} has {len(tbs)} thread blocks; {profile.name} allows {profile.max_threadblocks}")
    if [tb.id for tb in tbs] != list(range(len(tbs))):
        raise InputError(f"{where}: thread block ids must be 0..{len(tbs) - 1} in order")
    elements = 1 + program.ranks + len(tbs) + sum(len(tb.ops) for tb in tbs)
    if elements > MAX_ELEMENTS_PER_RANK:
        raise InputError(f"{where} needs {elements} XML elements; MSCCL stores {MAX_ELEMENTS_PER_RANK}")
    if profile.checks_chunk_counts:
        _check_chunk_counts(program, gpu)
    for size in (gpu.input_chunks, gpu.output_chunks, gpu.scratch_chunks):
        if size > MAX_OFFSET + 1:
            raise InputError(f"{where}: {size} chunks in a buffer exceed MSCCL's int16 offsets")
    owners: Counter = Counter()
    peers: dict[tuple[str, int], set] = {}
    for tb in tbs:
        tw = f"{where} thread block {tb.id}"
        if not 0 <= tb.channel < program.channels:
            raise InputError(f"{tw}: channel {tb.channel} outside 0..{program.channels - 1}")
        for direction, peer in (("send", tb.send), ("recv", tb.recv)):
            if peer == rank or not -1 <= peer < program.ranks:
                raise InputError(f"{tw}: {direction} peer {peer} must be another rank or -1")
            if peer >= 0:
                owners[(direction, peer, tb.channel)] += 1
                peers.setdefault((direction, tb.channel), set()).add(peer)
        if len(tb.ops) > profile.max_steps:
            raise InputError(f"{tw} has {len(tb.ops)} steps; {profile.name} allows {profile.max_steps}")
        _check_ops(gpu, tb, tbs, tw)
    for (direction, peer, channel), count in owners.items():
        if count > 1:
            raise InputError(f"{where}: {count} thread blocks own the {direction} connection to {peer} on "
                             f"channel {channel} (one FIFO, one owner)")
    for (direction, channel), group in peers.items():
        if len(group) > MAX_PEERS_PER_CHANNEL:
            raise InputError(f"{where}: {len(group)} {direction} peers on channel {channel}; "
                             f"MSCCL allows {MAX_PEERS_PER_CHANNEL}")


def _check_chunk_counts(program: Program, gpu: RankProgram) -> None:
    n, per = program.chunks_per_loop, program.ranks
    want_in = n // per if program.collective in ("allgather", "gather") else n
    want_out = n // per if program.collective in ("reduce_scatter", "scatter") else n
    for size, want, letter in ((gpu.input_chunks, want_in, "i_chunks"), (gpu.output_chunks, want_out, "o_chunks")):
        if size and size != want:
            raise InputError(f"rank {gpu.rank}: {letter} {size} must be 0 or {want} for {program.collective} "
                             f"with nchunksperloop {n} (legacy rejects the file otherwise)")


def _check_ops(gpu: RankProgram, tb, tbs, tw: str) -> None:
    fusable, chain_dst = 0, None
    for pos, op in enumerate(tb.ops):
        at = f"{tw} step {pos} ({op.type})"
        if op.type not in OP_TYPES:
            raise InputError(f"{at}: unknown step type (never 'ra')")
        if op.src_buf not in BUFFERS or op.dst_buf not in BUFFERS:
            raise InputError(f"{at}: buffers must be i, o or s")
        if op.type == "nop":
            if op.dep_tb < 0:
                raise InputError(f"{at}: a nop carries a dependency")
        elif not 1 <= op.count <= MAX_COUNT:
            raise InputError(f"{at}: cnt {op.count} outside 1..{MAX_COUNT}")
        if op.sends and tb.send < 0 or op.receives and tb.recv < 0:
            raise InputError(f"{at}: the thread block has no {'send' if op.sends else 'receive'} peer")
        for used, buf, off, field in ((op.type in READS_SRC, op.src_buf, op.src_off, "src"),
                                      (op.type in WRITES_DST, op.dst_buf, op.dst_off, "dst")):
            if used and not (0 <= off and off + op.count <= gpu.buffer_chunks(buf)):
                raise InputError(f"{at}: {field} {buf}[{off}..{off + op.count}) outside the "
                                 f"{gpu.buffer_chunks(buf)} chunks of buffer {buf}")
            if not -1 <= off <= MAX_OFFSET:
                raise InputError(f"{at}: {field} offset {off} outside -1..{MAX_OFFSET}")
        if (op.dep_tb < 0) != (op.dep_op < 0):
            raise InputError(f"{at}: depid and deps must both be set or both be -1")
        if op.dep_tb >= 0:
            if op.dep_tb >= len(tbs) or op.dep_op >= len(tbs[op.dep_tb].ops):
                raise InputError(f"{at}: depends on a missing step (tb {op.dep_tb}, step {op.dep_op})")
            if op.dep_tb > MAX_DEP_TB:
                raise InputError(f"{at}: dependency on thread block {op.dep_tb} > {MAX_DEP_TB} (depid is 8 bits)")
            if not tbs[op.dep_tb].ops[op.dep_op].has_dep:
                raise InputError(f"{at}: depends on tb {op.dep_tb} step {op.dep_op}, which has hasdep=0")
        elif pos and tb.ops[pos - 1].type == "nop" and op.type != "nop":
            raise InputError(f"{at}: nops with dependencies must be followed by a step with one (parser rule)")
        # The parsers fold a step into the preceding re (without hasdep) when it has the same dst
        # and no dependency: fine for up to 16 re, a silent misread for anything else.
        same = chain_dst is not None and op.dep_tb < 0 and (op.dst_buf, op.dst_off) == chain_dst
        if same and op.type != "re":
            raise InputError(f"{at}: would be fused into the re before it (same dst, no dependency)")
        if op.type == "nop":
            continue
        fusable = fusable + 1 if same else int(op.type == "re")
        if fusable > MAX_FUSED_REDUCES:
            raise InputError(f"{at}: more than {MAX_FUSED_REDUCES} fusable re steps in a row")
        chain_dst = (op.dst_buf, op.dst_off) if op.type == "re" and not op.has_dep else None
