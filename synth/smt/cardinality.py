"""CNF plumbing for the SMT encodings: literals, clauses and cardinality rows into a ``Formula``.

Literals are DIMACS-style ints (v > 0 a variable, -v its negation); Python bools stand for the
constants and are simplified away. Every cardinality row is our own CNF (a totalizer; a ladder
or pairwise clauses for at-most-one): z3 would otherwise rewrite AtMost/PbLe into a much
bigger, slower formula. The formula is what every SAT engine (``synth.smt.sat.engines``) reads;
nothing here knows which one will.
"""

from __future__ import annotations

from synth.smt.sat.formula import Formula


def neg(value):
    """Negation of a literal or of a Python bool constant."""
    return (not value) if isinstance(value, bool) else -value


class CnfBuilder:
    """Mixin: call ``_init_cnf`` first; then ``_var``, ``_clause``, ``_at_most``, ..."""

    def _init_cnf(self) -> None:
        self.formula = Formula()
        self._counters: dict = {}

    # ------------------------------------------------------------------ literals and clauses
    def _var(self, name: str = "") -> int:
        """A new variable (``name`` documents the call site; the formula keeps numbers only)."""
        return self.formula.new_var()

    def _clause(self, *lits) -> None:
        """Assert the disjunction of lits (ints or Python bools)."""
        out = []
        for lit in lits:
            if lit is True:
                return
            if lit is not False:
                out.append(lit)
        self.formula.add_clause(out)

    # ------------------------------------------------------------------ cardinality
    def _counter(self, lits: list, upto: int) -> list[int]:
        """Totalizer: out[k-1] <-> at least k of lits, k = 1..min(len, upto) (the last: >= upto).
        Cached, so a link-step's capacity and saturation rows share one."""
        lits = sorted(lits)
        key = (tuple(lits), upto)
        if key in self._counters:
            return self._counters[key]

        def build(vs: list) -> list:
            if len(vs) == 1:
                return [vs[0]]
            a, b = build(vs[: len(vs) // 2]), build(vs[len(vs) // 2:])
            m = min(len(a) + len(b), upto)
            o = [self._var() for _ in range(m)]
            for i in range(len(a) + 1):
                for j in range(len(b) + 1):
                    if i + j > 0:  # a >= i and b >= j  ->  o >= i + j
                        self._clause(*([-a[i - 1]] if i else []), *([-b[j - 1]] if j else []), o[min(i + j, m) - 1])
                    if i + j < m:  # a <= i and b <= j  ->  o <= i + j
                        self._clause(*([a[i]] if i < len(a) else []), *([b[j]] if j < len(b) else []), -o[i + j])
            return o

        out = build(lits)
        self._counters[key] = out
        return out

    def _at_most(self, lits: list, k: int, guard: tuple = ()) -> None:
        """Some guard literal, or at most k of lits."""
        if len(lits) <= k:
            return
        if k == 0:
            for lit in lits:
                self._clause(*guard, -lit)
        elif k == 1 and len(lits) <= 6:
            for i in range(len(lits)):
                for j in range(i + 1, len(lits)):
                    self._clause(*guard, -lits[i], -lits[j])
        elif k == 1:  # ladder: p[i] <- some of lits[0..i]
            p = [self._var() for _ in range(len(lits) - 1)]
            for i, lit in enumerate(lits):
                if i < len(p):
                    self._clause(-lit, p[i])
                if i > 0:
                    self._clause(*guard, -lit, -p[i - 1])
                    if i < len(p):
                        self._clause(-p[i - 1], p[i])
        else:
            self._clause(*guard, -self._counter(lits, k + 1)[k])

    def _at_most_unary_sum(self, rows: list, k: int, guard: tuple = ()) -> None:
        """Some guard literal, or the sum of unary numbers is at most k: every row is ordered
        (row[i] -> row[i - 1]), so row[i] <-> row >= i + 1. Rows are merged upward only (the
        bound needs no more), truncated at k + 1, and the last merge only yields > k: O(k) clauses
        for two rows where a totalizer over their literals would take O(k^2)."""
        rows = [row for row in rows if row]
        if sum(len(row) for row in rows) <= k:
            return

        def merge(a: list, b: list) -> list:
            m = min(len(a) + len(b), k + 1)
            o = [self._var() for _ in range(m)]
            for i in range(len(a) + 1):
                for j in range(len(b) + 1):
                    if 0 < i + j <= m:  # larger pairs follow from these
                        self._clause(*([-a[i - 1]] if i else []), *([-b[j - 1]] if j else []), o[min(i + j, m) - 1])
            return o

        def total(part: list) -> list:
            if len(part) == 1:
                return part[0]
            return merge(total(part[: len(part) // 2]), total(part[len(part) // 2:]))

        a, b = total(rows[: (len(rows) + 1) // 2]), total(rows[(len(rows) + 1) // 2:]) if len(rows) > 1 else []
        for i in range(len(a) + 1):  # a >= i and b >= k + 1 - i  ->  guard
            j = k + 1 - i
            if 0 <= j <= len(b):
                self._clause(*guard, *([-a[i - 1]] if i else []), *([-b[j - 1]] if j else []))

    def _exactly_one(self, lits: list) -> None:
        self._clause(*lits)
        self._at_most(lits, 1)
