"""One rank of the API test (tests/runtime/test_api.py runs it under torchrun): every method of a
loaded ScheduledCollective against torch.distributed's own collective on the same tensors (moe
dispatch and combine: against the reference built from every rank's input)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

import synth.runtime
from synth.runtime.data import moe_reference, pattern


def check(name, ours, theirs) -> None:
    if not torch.equal(ours, theirs):
        k = int((ours != theirs).nonzero()[0])
        raise SystemExit(f"rank {dist.get_rank()}: {name}: element {k}: ours {ours.reshape(-1)[k]}, "
                         f"torch {theirs.reshape(-1)[k]}")


def main(folder: Path) -> None:
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()

    def load(name, executor="threads"):
        return synth.runtime.load(str(folder / name), timeout=60, executor=executor)

    x = pattern(rank, 24, torch.float32, n)

    ag = load("allgather.json")
    out, ref = torch.empty(n * 24), torch.empty(n * 24)
    ag.all_gather_into_tensor(out, x)
    dist.all_gather_into_tensor(ref, x)
    check("all_gather_into_tensor", out, ref)
    ag(out.zero_(), x)  # __call__ is the program's own collective
    check("__call__", out, ref)

    rs = load("reduce_scatter.json")
    big = pattern(rank, n * 6, torch.float32, n)
    out, ref = torch.empty(6), torch.empty(6)
    rs.reduce_scatter_tensor(out, big)
    dist.reduce_scatter_tensor(ref, big)
    check("reduce_scatter_tensor", out, ref)

    ar = load("allreduce.json", "ordered")
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.AVG):
        ours, theirs = x.clone(), x.clone()
        ar.all_reduce(ours, op=op)
        dist.all_reduce(theirs, op=op)
        check(f"all_reduce {op}", ours, theirs)
    try:
        ar.all_gather_into_tensor(out, x)
        raise SystemExit("calling the wrong collective did not raise")
    except ValueError:
        pass

    a2a = load("alltoall.json")
    ours, theirs = torch.empty(24), torch.empty(24)
    a2a.all_to_all_single(ours, x)
    dist.all_to_all_single(theirs, x)
    check("all_to_all_single", ours, theirs)

    a2av = load("alltoallv.json", "ordered")
    matrix = [[0, 2, 1, 3], [1, 0, 2, 0], [2, 2, 0, 1], [1, 1, 1, 0]]
    chunk = 5
    send = [matrix[rank][d] * chunk for d in range(n)]
    recv = [matrix[s][rank] * chunk for s in range(n)]
    data = pattern(rank, sum(send), torch.float32, n)
    ours, theirs = torch.empty(sum(recv)), torch.empty(sum(recv))
    a2av.all_to_all_single(ours, data, recv, send)
    dist.all_to_all_single(theirs, data, recv, send)
    check("all_to_all_single (alltoallv)", ours, theirs)

    bc = load("broadcast.json")
    ours, theirs = x.clone(), x.clone()
    bc.broadcast(ours, src=2)
    dist.broadcast(theirs, src=2)
    check("broadcast", ours, theirs)

    rd = load("reduce.json")
    ours, theirs = x.clone(), x.clone()
    rd.reduce(ours, dst=1)
    dist.reduce(theirs, dst=1)
    if rank == 1:
        check("reduce", ours, theirs)

    ga = load("gather.json")
    ours = [torch.empty(24) for _ in range(n)] if rank == 3 else None
    theirs = [torch.empty(24) for _ in range(n)] if rank == 3 else None
    ga.gather(x, ours, dst=3)
    dist.gather(x, theirs, dst=3)
    if rank == 3:
        check("gather", torch.cat(ours), torch.cat(theirs))

    sc = load("scatter.json")
    parts = list(pattern(rank, n * 24, torch.float32, n).chunk(n)) if rank == 0 else None
    ours, theirs = torch.empty(24), torch.empty(24)
    sc.scatter(ours, parts, src=0)
    dist.scatter(theirs, parts, src=0)
    check("scatter", ours, theirs)

    md = load("moe_dispatch.json")  # 64-byte tokens: rows of 16 float32
    tokens = md.runnable.binding.tokens
    rows = pattern(rank, len(tokens.own(rank)) * 16, torch.float32, n).view(-1, 16)
    ours = torch.empty(len(tokens.received(rank)), 16)
    md.moe_dispatch(ours, rows)
    check("moe_dispatch", ours.reshape(-1), moe_reference(tokens, rank, 16, torch.float32))

    mc = load("moe_combine.json", "ordered")
    tokens = mc.runnable.binding.tokens
    rows = pattern(rank, len(tokens.received(rank)) * 16, torch.float32, n).view(-1, 16)
    ours = torch.empty(len(tokens.own(rank)), 16)
    mc(ours, rows)
    check("moe_combine", ours.reshape(-1), moe_reference(tokens, rank, 16, torch.float32))
    try:
        mc.moe_combine(torch.empty(len(tokens.own(rank)), 8), rows)
        raise SystemExit("rows of the wrong width did not raise")
    except ValueError:
        pass

    pair = dist.new_group([1, 3])  # a subgroup: program ranks 0, 1 are global ranks 1, 3
    if rank in (1, 3):
        two = load("allreduce2.json")
        ours, theirs = x.clone(), x.clone()
        two.all_reduce(ours, group=pair)
        dist.all_reduce(theirs, group=pair)
        check("all_reduce on a subgroup", ours, theirs)

    dist.barrier()
    if rank == 0:
        print("API OK")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
