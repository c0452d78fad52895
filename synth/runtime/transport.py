"""Point-to-point connections over torch.distributed, kept apart as MSCCL keeps them apart.

MSCCL gives every (sender, receiver, channel) its own FIFO of 8 slots. Here:

- **gloo** matches messages by (peer, tag): connection (s, d, channel) uses tag ``TAG_BASE + channel``,
  so two channels between one pair can never be confused, and messages of one connection arrive in
  order (one thread block owns each end);
- **nccl** ignores tags and serialises a pair's operations on one stream, so every (channel,
  direction) gets its own process group (its own communicators): a connection is alone on its
  stream.

``send`` is non-blocking like a FIFO write: at most ``SLOTS`` sends of one connection are in flight,
the next waits for the oldest. The payload must not change while in flight (the executor hands a
private tensor). The receiving end announces its messages (``expect``) and keeps ``SLOTS`` receives
posted ahead, as MSCCL's FIFO has slots ready: with gloo's rendezvous sends this cuts a hop from
three one-way messages to one (8 ranks on 2 cores: a ring of 7 hops 24.6 -> 7.5 ms). ``recv``
blocks until the data is there or the deadline passes (``Stuck``). Any error
torch raises (a peer that died, a closed connection, a size mismatch) becomes ``PeerFailure``.
"""

from __future__ import annotations

import time
from collections import deque
from datetime import timedelta

import torch
import torch.distributed as dist

TAG_BASE = 0x53_0000  # "S": keeps clear of small tags user code may use on the same group
SLOTS = 8  # NCCL_STEPS: FIFO slots per connection


class Stuck(Exception):
    """The deadline passed while waiting; the message says for what."""


class PeerFailure(Exception):
    """torch.distributed failed under us (a peer died, a connection closed, sizes disagreed)."""


class Transport:
    """Connections of one rank of a Program on ``group`` (None = the default group)."""

    def __init__(self, backend: str, channels: int, group=None):
        self.backend = backend
        self.group = group
        self.rank = dist.get_rank(group)
        self.groups: dict[tuple[int, bool], object] = {}
        if backend == "nccl":
            ranks = list(range(dist.get_world_size(group)))
            members = ranks if group is None else [dist.get_global_rank(group, r) for r in ranks]
            for channel in range(max(1, channels)):
                for upward in (True, False):  # every rank creates the groups in the same order
                    self.groups[(channel, upward)] = dist.new_group(members)
        self.inflight: dict[tuple[int, int], deque] = {}
        self.expected: dict[tuple[int, int], _Expected] = {}
        self.unbounded = False

    def _peer(self, rank: int) -> int:
        return rank if self.group is None else dist.get_global_rank(self.group, rank)

    def _pg(self, src: int, dst: int, channel: int):
        if self.backend != "nccl":
            return self.group
        return self.groups[(channel, src < dst)]

    def send(self, peer: int, channel: int, tensor: torch.Tensor, deadline: float) -> None:
        """Post ``tensor`` to ``peer`` on ``channel``; waits only when SLOTS sends are in flight."""
        window = self.inflight.setdefault((peer, channel), deque())
        if len(window) >= SLOTS and not self.unbounded:
            self._wait(window.popleft(), deadline, f"waits for rank {peer} to take its messages on channel {channel}")
        try:
            work = dist.isend(tensor, dst=self._peer(peer), group=self._pg(self.rank, peer, channel),
                              tag=TAG_BASE + channel)
        except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError subclasses of many kinds
            raise PeerFailure(_short(exc)) from None
        window.append((work, tensor))

    def expect(self, peer: int, channel: int, sizes: list[int], dtype: torch.dtype, device) -> None:
        """Announce the messages (element counts, in order) this rank will take from (peer, channel):
        the first SLOTS receives are posted at once into private tensors, like an empty FIFO, so a
        sender's data flows as soon as it is sent."""
        state = _Expected(peer, channel, list(sizes), dtype, device)
        self.expected[(peer, channel)] = state
        for _ in range(min(SLOTS, len(sizes))):
            self._post(state)

    def _post(self, state: "_Expected") -> None:
        numel = state.sizes[state.next]
        state.next += 1
        into = torch.empty(numel, dtype=state.dtype, device=state.device)
        try:
            work = dist.irecv(into, src=self._peer(state.peer), group=self._pg(state.peer, self.rank, state.channel),
                              tag=TAG_BASE + state.channel)
        except Exception as exc:  # noqa: BLE001
            raise PeerFailure(_short(exc)) from None
        state.posted.append((work, into))

    def recv(self, peer: int, channel: int, numel: int, deadline: float) -> torch.Tensor:
        """The next message of (peer -> self, channel): a private tensor of ``numel`` elements."""
        state = self.expected.get((peer, channel))
        if state is None or not state.posted:
            raise PeerFailure(f"receive from rank {peer} on channel {channel} that was not announced")
        item = state.posted.popleft()
        if state.next < len(state.sizes):
            self._post(state)
        self._wait(item, deadline, f"waits for data from rank {peer} on channel {channel}")
        if item[1].numel() != numel:
            raise PeerFailure(f"message of {item[1].numel()} elements where {numel} were expected")
        return item[1]

    def drain(self, peer: int, channel: int, deadline: float) -> None:
        """Wait until every send to ``peer`` on ``channel`` has been taken."""
        window = self.inflight.get((peer, channel))
        while window:
            self._wait(window[0], deadline, f"waits for rank {peer} to take its messages on channel {channel}")
            window.popleft()

    def _wait(self, item, deadline: float, what: str) -> None:
        work, tensor = item
        left = deadline - time.monotonic()
        if left <= 0:
            raise Stuck(what)
        try:
            if self.backend == "nccl":
                work.wait()
                while not work.is_completed():
                    if time.monotonic() > deadline:
                        raise Stuck(what)
                    time.sleep(50e-6)
                torch.cuda.current_stream(tensor.device).synchronize()
            else:
                work.wait(timeout=timedelta(seconds=left))
        except Stuck:
            raise
        except Exception as exc:  # noqa: BLE001
            if time.monotonic() >= deadline - 1e-3 or "imed out" in str(exc):
                raise Stuck(what) from None
            raise PeerFailure(_short(exc)) from None

    def reset(self, unbounded: bool = False) -> None:
        """Forget the last call's connections; ``unbounded``: never wait for a free send slot (the
        single-threaded executor's order relies on sends that never block)."""
        self.inflight.clear()
        self.expected.clear()
        self.unbounded = unbounded


class _Expected:
    """The receives one connection will take, and those posted so far (oldest first)."""

    def __init__(self, peer: int, channel: int, sizes: list[int], dtype, device):
        self.peer, self.channel, self.sizes, self.dtype, self.device = peer, channel, sizes, dtype, device
        self.next = 0
        self.posted: deque = deque()


def _short(exc: BaseException) -> str:
    """torch's error message without its C++ file prefix, on one line."""
    text = " ".join(str(exc).split())
    if text.startswith("[") and "] " in text:
        text = text.split("] ", 1)[1]
    if ". " in text[20:]:  # torch's advice after the first sentence is not the news
        text = text[:20 + text[20:].index(". ")]
    return f"{type(exc).__name__}: {text[:200]}"
