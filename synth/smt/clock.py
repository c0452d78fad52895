"""One attempt's time limit, counted from when the attempt began: every phase of it (split
LPs, restricted search, builds, exact search) asks the same clock what is left.

>>> clock = Clock(None)
>>> clock.left() is None, clock.share(0.5) is None
(True, True)
>>> Clock(10.0).left() <= 10.0
True
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Clock:
    """``limit`` seconds from ``started`` (perf_counter); None: no limit."""

    limit: float | None
    started: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float | None:
        """Seconds still left (negative once past the limit; None: no limit)."""
        return None if self.limit is None else self.limit - self.elapsed()

    def share(self, fraction: float, floor: float = 0.05) -> float | None:
        """That fraction of what is left, and at least ``floor`` seconds (a solver call with
        no time at all is not made; its TIMEOUT says the limit was spent)."""
        left = self.left()
        return None if left is None else max(floor, left * fraction)

    def at_most(self, seconds: float | None, reserve: float = 0.0) -> float | None:
        """``seconds`` cut to what is left once ``reserve`` seconds are kept back for what
        comes after (None: no limit on either)."""
        left = self.left()
        if left is None:
            return seconds
        left -= reserve
        return max(0.0, left if seconds is None else min(seconds, left))

    def has(self, seconds: float) -> bool:
        """At least ``seconds`` left (always, with no limit)."""
        left = self.left()
        return left is None or left >= seconds
