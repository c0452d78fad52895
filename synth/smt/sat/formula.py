"""A CNF formula under construction: what the SMT encodings build and every SAT engine reads.

Variables are 1..n; a literal is v or -v (DIMACS). Clauses live in one flat int32 array, each
ended by 0, so a million clauses cost a few megabytes rather than a million Python tuples.
The formula only grows: an engine that has read it up to some ``size`` later reads on from
there (``clauses_from``), which is how incremental engines stay in step with an encoding that
adds rows lazily (a rounds budget's selector rows).

>>> f = Formula()
>>> a, b = f.new_var(), f.new_var()
>>> f.add_clause([a, -b]); f.add_clause([b])
>>> f.num_vars, f.num_clauses, list(f.clauses_from(0))
(2, 2, [[1, -2], [2]])
>>> print(f.dimacs(units=[-1]).decode(), end="")
p cnf 2 3
1 -2 0
2 0
-1 0
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections.abc import Iterator, Sequence

import numpy as np


class Formula:
    """Variables and clauses; ``size`` is how many ints the clause array holds (a position
    to read on from)."""

    def __init__(self) -> None:
        self.literals = array("i")
        self.num_vars = 0
        self.num_clauses = 0
        self._text = bytearray()  # DIMACS lines of the clauses up to _text_upto
        self._text_upto = 0
        self._whole: tuple | None = None  # (state, DIMACS without units) of the last dimacs() call
        self._digest: tuple | None = None  # (that DIMACS, its sha256)
        self._text_lock = threading.Lock()  # racing engines (a portfolio's threads) write DIMACS at once

    @property
    def size(self) -> int:
        return len(self.literals)

    def new_var(self) -> int:
        self.num_vars += 1
        return self.num_vars

    def add_clause(self, lits: Sequence[int]) -> None:
        """Append a clause (non-zero ints, each variable already made)."""
        self.literals.extend(lits)
        self.literals.append(0)
        self.num_clauses += 1

    def clauses_from(self, position: int) -> Iterator[list[int]]:
        """The clauses stored from ``position`` (a ``size`` read earlier) on."""
        clause: list[int] = []
        for lit in self.literals[position:]:
            if lit:
                clause.append(lit)
            else:
                yield clause
                clause = []

    def array(self, position: int = 0) -> np.ndarray:
        """The flat clause array from ``position`` on (a view: no copy)."""
        return np.frombuffer(self.literals, dtype=np.int32)[position:]

    def dimacs(self, units: Sequence[int] = ()) -> bytes:
        """The formula in DIMACS, with each of ``units`` as a unit clause after it (without
        units: one bytes object per state of the formula, shared by every caller)."""
        if not units and self._whole is not None and self._whole[0] == (self.size, self.num_vars):
            return self._whole[1]
        body = self._body()
        extra = "".join(f"{lit} 0\n" for lit in units).encode()
        header = f"p cnf {self.num_vars} {self.num_clauses + len(units)}\n".encode()
        text = header + body + extra
        if not units:
            self._whole = ((self.size, self.num_vars), text)
        return text

    def digest(self) -> str:
        """sha256 of ``dimacs()``: what names a refuted formula (once per state of the formula)."""
        text = self.dimacs()
        if self._digest is None or self._digest[0] is not text:
            self._digest = (text, hashlib.sha256(text).hexdigest())
        return self._digest[1]

    def _body(self) -> bytes:
        """The clause lines, converted once and extended as the formula grows (one thread at a
        time: two extending at once would write clauses twice)."""
        with self._text_lock:
            if self._text_upto < self.size:
                self._text += clause_lines(self.array(self._text_upto))
                self._text_upto = self.size
            return bytes(self._text)


def clause_lines(flat: np.ndarray) -> bytes:
    """DIMACS lines of a flat 0-ended clause array: one clause a line."""
    ends = np.flatnonzero(flat == 0).tolist()
    values = flat.tolist()
    lines, start = [], 0
    for end in ends:
        lines.append(" ".join(map(str, values[start:end + 1])))
        start = end + 1
    return ("\n".join(lines) + "\n").encode() if lines else b""


def with_units(cnf: bytes, units: Sequence[int]) -> bytes:
    """The DIMACS text ``cnf`` with each of ``units`` as one more unit clause at its end.

    >>> with_units(b"p cnf 2 1\\n1 2 0\\n", [-1])
    b'p cnf 2 2\\n1 2 0\\n-1 0\\n'
    """
    header, _, body = cnf.partition(b"\n")
    fields = header.split()
    if len(fields) != 4 or fields[:2] != [b"p", b"cnf"]:
        raise ValueError("not DIMACS: no 'p cnf' header")
    extra = "".join(f"{lit} 0\n" for lit in units).encode()
    return b"p cnf %s %d\n" % (fields[2], int(fields[3]) + len(units)) + body + extra
