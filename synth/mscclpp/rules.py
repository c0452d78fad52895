"""What the MSCCL++ executor needs to load and run a plan (shared/reference/mscclpp-format.md,
section 17, rules R2 and R5-R19), each problem at its JSON path; switch channels and the plan's
``requires`` in synth.mscclpp.switch_rules.

The executor itself checks little (section 13): most of these, broken, corrupt memory, hang or
compute garbage on the GPU. ``check_plan`` applies them to a plan ``plan.read_plan`` read.

>>> from synth.mscclpp.plan import read_plan
>>> doc = {"name": "p", "collective": "allreduce", "protocol": "Simple", "inplace": True, "gpus": [
...     {"id": 0, "input_chunks": 2, "output_chunks": 0, "scratch_chunks": 0, "channels": [],
...      "remote_buffers": [], "threadblocks": [{"id": 0, "channels": [], "ops": [
...          {"name": "copy", "src_buff": [{"type": "i", "index": 0, "size": 1}],
...           "dst_buff": [{"type": "i", "index": 2, "size": 1}]}]}]}]}
>>> for p in check_plan(read_plan(doc)[0]): print(p)
gpus[0].output_chunks: 0: the executor divides the message size by it (must be > 0) [R6]
gpus[0].threadblocks[0].ops[0].dst_buff[0]: chunks 2..2 of i, which has 2 chunks [R16]
"""

from __future__ import annotations

from synth.mscclpp.plan import Block, Gpu, Op, Plan, Problem, Ref
from synth.mscclpp.switch_rules import switch_rules

MAX_OPS = 64  # per thread block, pipeline bodies counted
MAX_CHANNELS_PER_BLOCK = 16  # per type, and remote buffers per access type
MAX_IDS_PER_OP = 8
MAX_REFS = 10  # per side of an op
MAX_SEMAPHORES_PER_OP = 16
MAX_BARRIERS = 16
PACKET_OPS = frozenset({"ppkt", "rppkt", "cpkt", "upkt", "repkt", "respkt", "recpkt", "recspkt", "gstorepkt"})
SWITCH_OPS = frozenset({"glres", "gstore", "gstorepkt"})
PORT_ONLY = frozenset({"pws", "pwsf", "flush"})
MEMORY_ONLY = frozenset({"get", "res", "rre", "rres", "respkt", "recspkt"})
SYNC_OPS = frozenset({"signal", "rlxsignal", "wait", "rlxwait"})
CHUNK_RATIO = {  # collective -> (input chunks, output chunks) per unit, n = ranks
    "allreduce": lambda n: (1, 1), "alltoall": lambda n: (1, 1),
    "allgather": lambda n: (1, n), "reducescatter": lambda n: (n, 1),
    "broadcast": lambda n: (1, 1), "reduce": lambda n: (1, 1),
}


def check_plan(plan: Plan) -> list[Problem]:
    """Every problem of R2 and R5-R19 in ``plan`` (a current-schema plan)."""
    out = _top(plan)
    for r, gpu in enumerate(plan.gpus):
        out += _gpu(plan, gpu, r)
    return out + switch_rules(plan)


def _top(plan: Plan) -> list[Problem]:
    out = []
    if plan.alignment <= 0 or plan.alignment % 16:
        out.append(Problem("buffer_alignment", f"{plan.alignment}: must be a positive multiple of 16", "R9"))
    if not 1 <= plan.threads <= 1024:
        out.append(Problem("num_threads_per_block", f"{plan.threads}: must be 1..1024", "R10"))
    if not 0 <= plan.min_size < 2**31:
        out.append(Problem("min_message_size", f"{plan.min_size}: the executor reads it as an int (0..2^31-1)", "R11"))
    if plan.min_size > plan.max_size:
        out.append(Problem("max_message_size", f"{plan.max_size} < min_message_size {plan.min_size}: no size fits",
                           "R11"))
    if not plan.gpus:
        out.append(Problem("gpus", "empty: a plan runs one entry per rank", "R2"))
    return out


def _gpu(plan: Plan, gpu: Gpu, r: int) -> list[Problem]:
    path = f"gpus[{r}]"
    out = []
    if gpu.id != r:
        out.append(Problem(f"{path}.id", f"{gpu.id}: the loader reads gpus[rank] and needs id == {r}", "R2"))
    for key in ("input_chunks", "output_chunks"):
        if getattr(gpu, key) <= 0:
            out.append(Problem(f"{path}.{key}", f"{getattr(gpu, key)}: the executor divides the message size by it "
                                                "(must be > 0)", "R6"))
    if gpu.scratch_chunks < 0:
        out.append(Problem(f"{path}.scratch_chunks", f"{gpu.scratch_chunks}: must be >= 0", "R6"))
    ratio = CHUNK_RATIO.get(plan.collective)
    if ratio is not None and gpu.input_chunks > 0 and gpu.output_chunks > 0:
        a, b = ratio(plan.ranks)
        if gpu.input_chunks * b != gpu.output_chunks * a:
            out.append(Problem(path, f"{gpu.input_chunks} input and {gpu.output_chunks} output chunks give unequal "
                                     f"chunk sizes for {plan.collective} (the executor throws \"Size per chunks "
                                     "inconsistent\")", "R7"))
    for i, remote in enumerate(gpu.remote_buffers):
        if not 0 <= remote.rank < plan.ranks or remote.rank == r:
            out.append(Problem(f"{path}.remote_buffers[{i}].rank", f"{remote.rank}: must be another rank of the "
                                                                   f"plan's {plan.ranks}", "R15"))
    for c, channel in enumerate(gpu.channels):
        bad = [p for p in channel.peers if not 0 <= p < plan.ranks or p == r]
        if bad:
            out.append(Problem(f"{path}.channels[{c}].connected_to", f"{bad[0]}: must be another rank of the plan's "
                                                                     f"{plan.ranks}", "R13"))
    for k, block in enumerate(gpu.blocks):
        if block.id != k:
            out.append(Problem(f"{block.path}.id", f"{block.id}: blocks must be numbered 0..n-1 in order (the "
                                                   f"loader takes channels by id, ops by position)", "R5"))
        out += _block(plan, gpu, block)
    return out


def _block(plan: Plan, gpu: Gpu, block: Block) -> list[Problem]:
    out = []
    for kind, ids in block.channels.items():
        if len(ids) > MAX_CHANNELS_PER_BLOCK:
            out.append(Problem(f"{block.path}.channels", f"{len(ids)} {kind} channels: at most "
                                                         f"{MAX_CHANNELS_PER_BLOCK} per type", "R13"))
        have = len(gpu.peers(kind)) if kind != "switch" else len(gpu.switch_groups())
        bad = [i for i in ids if not 0 <= i < have]
        if bad:
            out.append(Problem(f"{block.path}.channels", f"{kind} channel {bad[0]}: this rank has {have}", "R13"))
    for kind, ids in block.remote_refs.items():
        if len(ids) > MAX_CHANNELS_PER_BLOCK:
            out.append(Problem(f"{block.path}.remote_buffer_refs", f"{len(ids)} {kind} buffers: at most "
                                                                   f"{MAX_CHANNELS_PER_BLOCK}", "R13"))
        for i in ids:
            if not 0 <= i < len(gpu.remote_buffers):
                out.append(Problem(f"{block.path}.remote_buffer_refs", f"remote buffer {i}: this rank declares "
                                                                       f"{len(gpu.remote_buffers)}", "R15"))
            elif kind not in gpu.remote_buffers[i].access:
                out.append(Problem(f"{block.path}.remote_buffer_refs", f"remote buffer {i} is not declared for "
                                                                       f"{kind} access", "R15"))
    count = sum(1 + len(op.body) for op in block.ops)
    if count > MAX_OPS:
        out.append(Problem(f"{block.path}.ops", f"{count} ops (pipeline bodies counted): at most {MAX_OPS}", "R19"))
    for op in block.ops:
        out += _op(plan, gpu, block, op)
        for inner in op.body:
            out += _pipeline_body(inner) + _op(plan, gpu, block, inner)
        if op.name == "pipeline":
            out += _pipeline(op)
    return out


def _pipeline(op: Op) -> list[Problem]:
    out = []
    if not op.body:
        out.append(Problem(op.path, "a pipeline with no ops", "R19"))
    if not op.unit_size or op.unit_size <= 0 or not op.num_chunks or op.num_chunks <= 0:
        out.append(Problem(f"{op.path}.iter_context", "unit_size and num_chunks must be > 0", "R19"))
    return out


def _pipeline_body(op: Op) -> list[Problem]:
    if op.name == "pipeline":
        return [Problem(op.path, "a pipeline inside a pipeline: the executor does not nest them", "R19")]
    if op.name in PACKET_OPS:
        return [Problem(op.path, f"{op.name} in a pipeline: packet ops ignore the iteration offset", "R19")]
    return []


def _op(plan: Plan, gpu: Gpu, block: Block, op: Op) -> list[Problem]:
    out = []
    channels = block.channels.get(op.channel_type, ())
    if len(op.channel_ids) > MAX_IDS_PER_OP:
        out.append(Problem(f"{op.path}.channel_ids", f"{len(op.channel_ids)} ids: at most {MAX_IDS_PER_OP}", "R14"))
    bad = [i for i in op.channel_ids if not 0 <= i < len(channels)]
    if bad:
        out.append(Problem(f"{op.path}.channel_ids", f"{bad[0]}: the block has {len(channels)} {op.channel_type} "
                                                     "channels", "R14"))
    if op.name in SYNC_OPS and not op.channel_ids:
        out.append(Problem(op.path, f"{op.name} on no channel", "R14"))
    if len(op.src) > MAX_REFS or len(op.dst) > MAX_REFS:
        out.append(Problem(op.path, f"more than {MAX_REFS} buffer references on one side", "R16"))
    if len(op.semaphore_ids) > MAX_SEMAPHORES_PER_OP:
        out.append(Problem(f"{op.path}.semaphore_ids", f"at most {MAX_SEMAPHORES_PER_OP}", "R10"))
    out += [Problem(f"{op.path}.semaphore_ids", f"semaphore {s}: the rank declares {len(gpu.semaphores)}", "R21")
            for s in op.semaphore_ids if not 0 <= s < len(gpu.semaphores)]
    if op.name == "barrier" and (op.barrier_id is None or not 0 <= op.barrier_id < MAX_BARRIERS):
        out.append(Problem(f"{op.path}.barrier_id", f"{op.barrier_id}: must be 0..{MAX_BARRIERS - 1}", "R22"))
    if max(len(op.channel_ids), len(op.semaphore_ids)) > plan.threads:
        out.append(Problem(op.path, "more channels or semaphores than threads per block (thread i serves entry i)",
                           "R10"))
    for ref in op.src + op.dst:
        out += _ref(plan, gpu, block, op, ref)
    return out + _shape(plan, op)


def _ref(plan: Plan, gpu: Gpu, block: Block, op: Op, ref: Ref) -> list[Problem]:
    if ref.index < 0 or ref.size < 1:
        return [Problem(ref.path, f"index {ref.index}, size {ref.size}: need index >= 0 and size >= 1", "R16")]
    if ref.kind == "local":
        return _range(ref, ref.buffer, gpu.chunks(ref.buffer))
    if ref.kind == "switch":
        groups = gpu.switch_groups()
        if op.channel_type != "switch" or not 0 <= ref.buffer < len(block.channels.get("switch", ())):
            return [Problem(ref.path, f"switch channel {ref.buffer}: the block has "
                                      f"{len(block.channels.get('switch', ()))} switch channels", "R16")]
        gpu_id = block.channels["switch"][ref.buffer]
        buffer = groups[gpu_id][0] if gpu_id < len(groups) else None
        return _range(ref, buffer, gpu.chunks(buffer)) if buffer in ("i", "o", "s") else []
    if op.channel_type not in ("memory", "port"):
        return [Problem(ref.path, f"a remote buffer on an op whose channel_type is {op.channel_type} (memory or "
                                  "port needed: the executor throws \"Invalid channel type\")", "R16")]
    refs = block.remote_refs.get(op.channel_type, ())
    if not 0 <= ref.buffer < len(refs):
        return [Problem(ref.path, f"buffer_id {ref.buffer}: the block has {len(refs)} {op.channel_type} remote "
                                  "buffers", "R16")]
    declared = refs[ref.buffer]
    if not 0 <= declared < len(gpu.remote_buffers):
        return []  # said at the block
    remote = gpu.remote_buffers[declared]
    if not 0 <= remote.rank < plan.ranks:
        return []
    peer = plan.gpus[remote.rank]
    return _range(ref, remote.type, peer.chunks(remote.type), f"rank {remote.rank}'s ")


def _range(ref: Ref, buffer: str, chunks: int, whose: str = "") -> list[Problem]:
    if ref.index + ref.size > chunks:
        return [Problem(ref.path, f"chunks {ref.index}..{ref.index + ref.size - 1} of {whose}{buffer}, which has "
                                  f"{chunks} chunks", "R16")]
    return []


def _shape(plan: Plan, op: Op) -> list[Problem]:
    """Operand shapes (R17) and protocol gates (R18)."""
    out = []
    if op.name in PORT_ONLY and op.channel_type != "port":
        out.append(Problem(op.path, f"{op.name} works on port channels only (on memory channels it puts without the "
                                    "signal)", "R17"))
    if op.name in MEMORY_ONLY and op.channel_type != "memory":
        out.append(Problem(op.path, f"{op.name} reads or writes peers through memory channels only", "R17"))
    if op.name in SWITCH_OPS and op.channel_type != "switch":
        out.append(Problem(op.path, f"{op.name} needs a switch channel", "R17"))
    if op.name in PACKET_OPS and plan.protocol != "LL":
        out.append(Problem(op.path, f"{op.name} moves LL packets: only in an \"LL\" plan", "R18"))
    if op.name in ("put", "pws", "pwsf", "ppkt", "get") and len(op.src) != len(op.dst):
        out.append(Problem(op.path, f"{op.name} pairs src_buff and dst_buff: {len(op.src)} and {len(op.dst)}", "R17"))
    if op.name in ("copy", "re", "res", "rre", "rres", "cpkt", "upkt", "repkt", "respkt", "recpkt", "recspkt",
                   "rppkt") and (not op.src or not op.dst or op.src[0].kind != "local"):
        out.append(Problem(op.path, f"{op.name} needs a local first source and a first destination", "R17"))
    sizes = {ref.size for ref in op.src + op.dst}
    if len(sizes) > 1 and op.name not in ("pipeline",):
        out.append(Problem(op.path, f"buffer references of different sizes {sorted(sizes)}: the op moves one size",
                           "R17"))
    return out
