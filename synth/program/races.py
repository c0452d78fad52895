"""Data-race detection for the replay (synth.program.replay): vector clocks over thread blocks.

Happens-before in an MSCCL program is static: program order within a block, a dependency wait
after the transfer that releases it (the first publishing transfer at or past the awaited step),
the k-th receive on a connection after the k-th send, and a switch op (a rendezvous of its
participants, ``meet``) after everything each participant did before it. A replay executes one linearization of
it; along the way every transfer gets a vector clock (per block: how many of its transfers happen
before), and two accesses to one chunk of one rank from different blocks, at least one a write,
race when neither clock covers the other. Any interleaving finds the same races.

>>> d = RaceDetector(2)
>>> d.begin(0, 0, [], None); d.access(("r0", "o", 0), 0, 0, "tb 0 step 0 (r)", True)
>>> _ = d.end(0, 0, publish=False)
>>> d.begin(1, 0, [], None); d.access(("r0", "o", 0), 1, 0, "tb 1 step 0 (s)", False)
'tb 1 step 0 (s) reads it, unordered with the write by tb 0 step 0 (r)'
"""

from __future__ import annotations

import numpy as np


class RaceDetector:
    """Vector clocks for ``blocks`` thread blocks (all ranks together)."""

    def __init__(self, blocks: int):
        self.clock = [np.zeros(blocks, dtype=np.int32) for _ in range(blocks)]
        self.published: dict[tuple[int, int], np.ndarray] = {}
        self.now = np.zeros(blocks, dtype=np.int32)
        self.writes: dict[tuple, tuple[int, int, str]] = {}
        self.reads: dict[tuple, dict[int, tuple[int, str]]] = {}

    def begin(self, b: int, k: int, releases: list[tuple[int, int]], message: np.ndarray | None) -> None:
        """Block b starts its transfer k after the transfers ``releases`` and the send of ``message``."""
        now = self.clock[b].copy()
        for key in releases:
            other = self.published.get(key)
            if other is not None:
                np.maximum(now, other, out=now)
        if message is not None:
            np.maximum(now, message, out=now)
        now[b] = k + 1
        self.now = now

    def meet(self, parts: list[tuple[int, int, list[tuple[int, int]]]]) -> None:
        """A rendezvous (a switch op): every participant block b at its transfer k, after the
        transfers its waits release; the op is ordered after what any of them knew, and ``now``
        (for the op's accesses and each participant's ``end``) is that joined clock."""
        now = np.zeros_like(self.now)
        for b, _, releases in parts:
            np.maximum(now, self.clock[b], out=now)
            for key in releases:
                other = self.published.get(key)
                if other is not None:
                    np.maximum(now, other, out=now)
        for b, k, _ in parts:
            now[b] = k + 1
        self.now = now

    def end(self, b: int, k: int, publish: bool) -> np.ndarray:
        """Block b finished transfer k; returns its clock (what a message it sent carries)."""
        self.clock[b] = self.now
        if publish:
            self.published[(b, k)] = self.now
        return self.now

    def _before(self, b: int, k: int) -> bool:
        return int(self.now[b]) >= k + 1

    def access(self, slot: tuple, b: int, k: int, label: str, write: bool) -> str | None:
        """Record an access by block b's transfer k; a description of the race it makes, if any."""
        last = self.writes.get(slot)
        race = None
        if last is not None and last[0] != b and not self._before(last[0], last[1]):
            race = f"{label} {'writes' if write else 'reads'} it, unordered with the write by {last[2]}"
        if write:
            for rb, (rk, rlabel) in self.reads.get(slot, {}).items():
                if race is None and rb != b and not self._before(rb, rk):
                    race = f"{label} writes it, unordered with the read by {rlabel}"
            self.writes[slot] = (b, k, label)
            self.reads.pop(slot, None)
        else:
            self.reads.setdefault(slot, {})[b] = (k, label)
        return race
