"""Certificates of infeasibility: why a (steps, rounds, chunks) budget has no schedule.

A budget is infeasible when no split of its rounds over its steps has a schedule. Its
certificate lists one refutation per split (or one for the whole budget, when the search
asked the engine about the whole budget at once):
  SatRefutation  a SAT engine's DRAT proof that the exact encoding, with the split's
                 assumptions as unit clauses, is unsatisfiable; it names the encoding
                 (steps, chunks, max rounds, the totals whose selector rows were built, in
                 order, and the options), so ``synth check-proof`` rebuilds the formula and
                 compares it with the one refuted before checking the proof;
  LpRefutation   an exact-rational Farkas certificate that the step LP has no flow with the
                 split's rounds (``synth.bounds.lp_certificate``).
Both are checked before the budget is pruned or printed (``SmtInstance.check``, the session);
``synth check-proof`` checks them again from the files (``synth.smt.proof_files``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EncodingKey:
    """What rebuilds a refuted formula: the instance's shape, the rounds totals whose rows
    were built (in order), which encoding (plain or direct) and its options."""

    steps: int
    chunks: int
    max_rounds: int
    selectors: tuple[int, ...]
    kind: str  # "plain" or "direct"
    options: tuple[tuple[str, Any], ...]  # the SmtOptions fields that shape the formula

    def to_dict(self) -> dict:
        return {"steps": self.steps, "chunks": self.chunks, "max_rounds": self.max_rounds,
                "selectors": list(self.selectors), "kind": self.kind, "options": dict(self.options)}

    @classmethod
    def from_dict(cls, doc: dict) -> EncodingKey:
        return cls(int(doc["steps"]), int(doc["chunks"]), int(doc["max_rounds"]),
                   tuple(int(r) for r in doc["selectors"]), str(doc["kind"]),
                   tuple(sorted(dict(doc["options"]).items())))


@dataclass(frozen=True)
class SatRefutation:
    """``engine``'s DRAT ``proof`` that the formula named by ``encoding`` (its DIMACS ``cnf``)
    with ``assumptions`` as unit clauses is unsatisfiable; ``split`` is the rounds per step
    those assumptions fix (None: the whole budget)."""

    split: tuple[int, ...] | None
    engine: str
    encoding: EncodingKey
    assumptions: tuple[int, ...]
    proof: bytes
    cnf: bytes

    @property
    def formula(self) -> str:
        """The refuted formula's name: the sha256 of its DIMACS."""
        return hashlib.sha256(self.cnf).hexdigest()


@dataclass(frozen=True)
class LpRefutation:
    """The step LP's exact certificate that no flow has ``split``'s rounds."""

    split: tuple[int, ...]
    certificate: Any  # synth.bounds.lp_certificate.LpCertificate


@dataclass(frozen=True)
class BudgetCertificate:
    """Why (steps, rounds, chunks) of ``collective`` (root, direct encoding or not) has no
    schedule: ``parts`` refute every split of the rounds, or the whole budget."""

    collective: str
    root: int | None
    direct: bool
    steps: int
    rounds: int
    chunks: int
    parts: tuple[SatRefutation | LpRefutation, ...]
