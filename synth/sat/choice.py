"""Which SAT engine a search runs on: ``--sat z3|cadical|kissat|auto``.

``auto`` takes the first installed engine of ``AUTO_ORDER``, an order set by measurement
(``benchmarks/smt_frontiers.py --sat ENGINE``; the table is in docs/smt.md, "SAT engines"),
not by a guess. z3 is always installed (it is a dependency of synth itself).

>>> resolve_sat("z3")
'z3'
>>> resolve_sat("auto") in ("z3", "cadical", "kissat")
True
"""

from __future__ import annotations

from synth.core.errors import InputError
from synth.sat import AUTO, CHOICES, PROOF_ENGINES
from synth.sat.engines import available

AUTO_ORDER = ("cadical", "kissat", "z3")


def resolve_sat(name: str, certify: bool = False) -> str:
    """The engine ``name`` stands for; InputError when it is unknown or not installed, or when
    ``certify`` asks for proofs it cannot write (z3)."""
    if name not in CHOICES:
        raise InputError(f"unknown SAT engine {name!r}; choose from {', '.join(CHOICES)}")
    if name == AUTO:
        order = [e for e in AUTO_ORDER if not certify or e in PROOF_ENGINES]
        for engine in order:
            if available(engine):
                return engine
        raise InputError("no SAT engine that writes DRAT proofs is installed (pip install python-sat)")
    if not available(name):
        raise InputError(f"the {name} engine is not installed: pip install "
                         + ("python-sat" if name == "cadical" else "passagemath-kissat"))
    if certify and name not in PROOF_ENGINES:
        raise InputError(f"{name} writes no DRAT proof, so --certify needs --sat {' or '.join(PROOF_ENGINES)} or auto")
    return name
