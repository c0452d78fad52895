"""Switch ops run emulated with point-to-point messages (synth.runtime.executor; needs torch).

torch.distributed has no switch that computes, so a switch op (synth.program.ir: ``glre``,
``gstore``, ``glres``) is emulated on the transport every other op uses, through its root
(``Op.root``: the one src of a multicast, else the first dst):

- every src but the root sends its chunks to the root;
- the root adds them up in ``srcs`` order (one src: its chunks as they are), then sends the result
  to every dst but itself, and writes it where its own op says if it is a dst;
- every dst but the root takes the result and writes it where its own op says.

Each switch op has a connection of its own (channel ``SWITCH_CHANNEL + switch_id``, its own gloo
tag), one message per pair, so switch ops and thread-block FIFOs never mix. A src's message is
sent, not awaited (the block goes on, as a port's load leaves the GPU); the block waits for it
to be taken before it finishes. What lands is exactly the sum the switch would deliver: the
inputs ``synth run`` feeds are integers, exact in any order of additions. Real multimem (NVLS) is
not used: on ``--backend nccl`` a program with switch ops is refused (synth.runtime.runnable).
"""

from __future__ import annotations

import torch

SWITCH_CHANNEL = 1 << 16  # above every thread-block channel a program can have


def channel_of(op) -> int:
    """The transport channel of switch op ``op``."""
    return SWITCH_CHANNEL + op.switch_id


def run_switch(op, rank: int, src: torch.Tensor | None, dst: torch.Tensor | None, transport, deadline: float,
               reduce, sent: list) -> None:
    """This rank's part of switch op ``op``: ``src`` its chunks when it is a src, ``dst`` where
    the result lands when it is a dst; every (peer, channel) it sends on is added to ``sent``."""
    root, channel = op.root, channel_of(op)
    like = src if src is not None else dst
    numel = like.numel()
    if rank != root:
        if src is not None:
            transport.send(root, channel, src.clone(), deadline)
            sent.append((root, channel))
        if dst is not None:
            transport.expect(root, channel, [numel], like.dtype, like.device)
            dst.copy_(transport.recv(root, channel, numel, deadline))
        return
    for peer in op.srcs:
        if peer != rank:
            transport.expect(peer, channel, [numel], like.dtype, like.device)
    total = None
    for peer in op.srcs:
        value = src if peer == rank else transport.recv(peer, channel, numel, deadline)
        total = value.clone() if total is None else reduce(total, value)
    for peer in op.dsts:
        if peer != rank:
            transport.send(peer, channel, total, deadline)
            sent.append((peer, channel))
    if dst is not None:
        dst.copy_(total)
