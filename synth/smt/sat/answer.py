"""What a SAT engine says about a formula under assumptions: one vocabulary for every engine.

>>> Answer(Verdict.UNKNOWN, "cadical", reason=WORK_SPENT).proves_nothing
True
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

WORK_SPENT = "work budget spent"
TIME_SPENT = "time limit"
STOPPED = "stopped: another engine answered first"


class Verdict(enum.StrEnum):
    SAT = "sat"  # a model: every clause and assumption holds under it
    UNSAT = "unsat"  # no model with the assumptions true
    UNKNOWN = "unknown"  # a budget ran out, or the engine failed: proves nothing


@dataclass(frozen=True)
class Answer:
    """``model``: truth value per variable (index 0 unused) when SAT. ``proof``: DRAT text
    refuting the formula with each assumption as a unit clause, when UNSAT and asked for.
    ``reason``: why UNKNOWN (WORK_SPENT, TIME_SPENT, "memory", or the engine's words).
    ``error``: UNKNOWN because the engine failed, not because a budget ran out."""

    verdict: Verdict
    engine: str
    model: np.ndarray | None = None
    reason: str = ""
    proof: bytes | None = None
    error: bool = False

    @property
    def proves_nothing(self) -> bool:
        return self.verdict == Verdict.UNKNOWN

    def value(self, lit) -> bool:
        """The model's value of a literal (or of a Python bool constant)."""
        if isinstance(lit, bool):
            return lit
        if self.model is None:
            raise ValueError("no model: the answer is not SAT")
        truth = bool(self.model[abs(lit)])
        return truth if lit > 0 else not truth
