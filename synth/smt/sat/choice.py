"""Which SAT engine a search runs on: ``--sat z3|cadical|kissat|auto``.

``auto`` goes by the formula's size, on measurements (docs/smt.md, "SAT engines";
``benchmarks/smt_frontiers.py --sat ENGINE``), not on a guess: up to LARGE_FORMULA clauses the
first installed of cadical, kissat, z3 (on the nine dgx1, torus:4x4 and hypercube:4 rows, whose
formulas have at most 288K clauses, CaDiCaL spent 4.7-17x less time in its checks than z3, with
the same frontiers); above it z3 first (mi250 allgather at 8-16 steps, 450K-2M clauses: z3 found
(12, 17, 7) in 50 s, CaDiCaL and Kissat settled none of (8..16, 17, 7) in 120 s each; at 5-6
steps, 250K clauses, CaDiCaL was still the faster). Certifying, z3 (no DRAT) is never picked.

>>> resolve_sat("z3")
'z3'
>>> resolve_sat("auto", clauses=20_000) in ("cadical", "kissat", "z3")
True
"""

from __future__ import annotations

from synth.core.errors import InputError
from synth.smt.sat import AUTO, CHOICES, PROOF_ENGINES
from synth.smt.sat.engines import available

LARGE_FORMULA = 350_000  # clauses: between the nine rows' largest (287K) and mi250's at 8 steps (450K)
AUTO_ORDER = ("cadical", "kissat", "z3")
AUTO_ORDER_LARGE = ("z3", "cadical", "kissat")


def resolve_sat(name: str, certify: bool = False, clauses: int = 0) -> str:
    """The engine ``name`` stands for on a formula of ``clauses`` clauses; InputError when it is
    unknown or not installed, or when ``certify`` asks for proofs it cannot write (z3)."""
    if name not in CHOICES:
        raise InputError(f"unknown SAT engine {name!r}; choose from {', '.join(CHOICES)}")
    if name == AUTO:
        order = AUTO_ORDER_LARGE if clauses > LARGE_FORMULA else AUTO_ORDER
        for engine in [e for e in order if not certify or e in PROOF_ENGINES]:
            if available(engine):
                return engine
        raise InputError("no SAT engine that writes DRAT proofs is installed (pip install python-sat)")
    if not available(name):
        raise InputError(f"the {name} engine is not installed: pip install "
                         + ("python-sat" if name == "cadical" else "passagemath-kissat"))
    if certify and name not in PROOF_ENGINES:
        raise InputError(f"{name} writes no DRAT proof, so --certify needs --sat {' or '.join(PROOF_ENGINES)} or auto")
    return name
