"""Checking a SAT engine's refutation: a DRAT proof against the formula it refutes.

The checker is dratify (pure Python, differentially tested against drat-trim); with
cdclkit-native installed, dratify's Rust implementation of the same checker runs instead
(~15x faster on large proofs). Neither shares code with the engines that write the proofs
(CaDiCaL, Kissat). A proof is accepted only when every lemma checks (RUP, or RAT on its
first literal) and the empty clause is derived; forward checking, so a bad lemma is named
where it occurs.

>>> cnf = b"p cnf 1 2\\n1 0\\n-1 0\\n"
>>> check_drat(cnf, b"0\\n") is None
True
>>> check_drat(b"p cnf 2 1\\n1 2 0\\n", b"0\\n")
'proof step 1: clause is neither RUP nor RAT with respect to the clauses available at this point'
>>> check_drat(b"p cnf 2 1\\n1 2 0\\n", b"1 2 0\\n")
'every step verified, but the proof never derives the empty clause'
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _checker():
    """dratify's check_proof, with the native implementation registered when installed."""
    try:
        import dratify
    except ImportError as error:  # a dependency of synth: only a broken install gets here
        raise RuntimeError("checking proofs needs dratify (pip install dratify)") from error
    try:
        import cdclkit_native

        dratify.register_native(cdclkit_native)
    except ImportError:
        pass
    return dratify


def checker_name() -> str:
    """Which implementation checks proofs here (for reports)."""
    dratify = _checker()
    return f"dratify {dratify.__version__} ({'native' if dratify.native_available() else 'python'})"


def check_drat(cnf: bytes, proof: bytes) -> str | None:
    """None when ``proof`` (DRAT text) refutes ``cnf`` (DIMACS); else one line saying why not."""
    dratify = _checker()
    try:
        formula = dratify.parse_dimacs(cnf.decode("ascii"))
        result = dratify.check_proof(formula, proof.decode("ascii"), engine="auto")
    except (ValueError, UnicodeDecodeError) as error:
        return f"unreadable: {error}"
    if result.ok and result.reached_empty:
        return None
    where = f"proof step {result.failed_step}: " if result.failed_step >= 0 else ""
    return where + (result.reason or "rejected")
