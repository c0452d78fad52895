"""CNF plumbing for the SMT encodings: literals, clauses and cardinality rows on z3's SAT core.

Literals are DIMACS-style ints (v > 0 a variable, -v its negation); Python bools stand for the
constants and are simplified away. Clauses go in through z3's low-level C API (the Python API
costs ~50 us a clause), and every cardinality row is our own CNF (a totalizer; a ladder or
pairwise clauses for at-most-one): z3 would otherwise rewrite AtMost/PbLe into a much bigger,
slower formula. Every assertion also goes to a *pristine* solver that is never checked, so
``_renew_solver`` gets a fresh solver exactly by copying it inside z3 (z3 5.4's incremental SAT
core is not to be trusted after an interrupted check; re-asserting from Python took ~2 s per
timed-out try on mi250 with 5 steps, and ~30 s with 8). Nothing here leaves synth/smt.
"""

from __future__ import annotations

import z3
from z3 import z3core


def neg(value):
    """Negation of a literal or of a Python bool constant."""
    return (not value) if isinstance(value, bool) else -value


class CnfBuilder:
    """Mixin: call ``_init_cnf`` first; then ``_var``, ``_clause``, ``_add``, ``_at_most``, ..."""

    def _init_cnf(self, random_seed: int, sat_params: tuple) -> None:
        self._random_seed, self._sat_params = random_seed, sat_params
        # a context of its own: z3 numbers terms per context, and its search follows those numbers,
        # so sharing the main context would make the schedule depend on whatever else the process
        # built before (a report in a pool worker would differ from the serial one)
        self._ctx_obj = z3.Context()
        self._ctx = self._ctx_obj.ref()
        self._bool_sort = z3.BoolSort(self._ctx_obj).ast
        self._ptr_pos: list = [None]  # variable v -> AST pointer (one reference held by us)
        self._ptr_neg: list = [None]  # -> AST pointer of its negation (made on demand)
        self._counters: dict = {}
        self._pristine = self._new_solver()  # every assertion, never checked
        self._working: z3.Solver | None = None  # the one checks run on (a copy of the pristine one)

    def __del__(self) -> None:  # give back the references _var and _clause took
        try:
            dec = z3core.Z3_dec_ref
            for ptr in self._ptr_pos[1:] + [p for p in self._ptr_neg[1:] if p is not None]:
                dec(self._ctx, ptr)
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to free
            pass

    # ------------------------------------------------------------------ solver and record
    def _new_solver(self) -> z3.Solver:
        solver = z3.SolverFor("QF_FD", ctx=self._ctx_obj)
        solver.set("random_seed", self._random_seed)
        for name, value in self._sat_params:
            solver.set(name, value)
        return solver

    @property
    def _solver(self) -> z3.Solver:
        """The solver checks run on: a copy of the pristine one, made when first needed (z3's
        translate into the same context: the assertions and the parameters, no search state)."""
        if self._working is None:
            self._working = self._pristine.translate(self._ctx_obj)
        return self._working

    def _renew_solver(self) -> None:
        """Drop the solver checks ran on (an interrupted z3 solver's assertion set is not to be
        trusted either); the next check gets a fresh copy of the pristine one."""
        self._working = None

    def _assert(self, item) -> None:
        """Assert a clause (a list of AST pointers: their disjunction) or a z3 expression into
        the pristine solver, and into the working one when there is one."""
        if not isinstance(item, list):
            ast = item.as_ast()
        elif not item:
            ast = z3.BoolVal(False, self._ctx_obj).as_ast()
        elif len(item) == 1:
            ast = item[0]
        else:
            arr = (z3.Ast * len(item))(*item)
            ast = z3core.Z3_mk_or(self._ctx, len(item), arr)
        for solver in (self._pristine, self._working):
            if solver is not None:
                z3core.Z3_solver_assert(self._ctx, solver.solver, ast)

    def _add(self, *constraints: z3.BoolRef) -> None:
        """Assert z3 expressions (build them over ``_ref(lit)``)."""
        for constraint in constraints:
            self._assert(constraint)

    # ------------------------------------------------------------------ literals and clauses
    def _var(self, name: str) -> int:
        ast = z3core.Z3_mk_const(self._ctx, z3core.Z3_mk_string_symbol(self._ctx, name), self._bool_sort)
        z3core.Z3_inc_ref(self._ctx, ast)
        self._ptr_pos.append(ast)
        self._ptr_neg.append(None)
        return len(self._ptr_pos) - 1

    def _ref(self, lit) -> z3.BoolRef:
        """The z3 expression of a literal (for assumptions, model evaluation, ``_add``)."""
        if isinstance(lit, bool):
            return z3.BoolVal(lit, self._ctx_obj)
        ref = z3.BoolRef(self._ptr_pos[abs(lit)], self._ctx_obj)
        return ref if lit > 0 else z3.Not(ref)

    def _clause(self, *lits) -> None:
        """Assert the disjunction of lits (ints or Python bools)."""
        out = []
        for lit in lits:
            if lit is True:
                return
            if lit is False:
                continue
            if lit > 0:
                out.append(self._ptr_pos[lit])
            else:
                ptr = self._ptr_neg[-lit]
                if ptr is None:
                    ptr = z3core.Z3_mk_not(self._ctx, self._ptr_pos[-lit])
                    z3core.Z3_inc_ref(self._ctx, ptr)
                    self._ptr_neg[-lit] = ptr
                out.append(ptr)
        self._assert(out)

    def _value(self, model: z3.ModelRef, lit) -> bool:
        if isinstance(lit, bool):
            return lit
        return z3.is_true(model.eval(self._ref(lit), model_completion=True))

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
            o = [self._var(f"t{len(self._ptr_pos)}") for _ in range(m)]
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
            p = [self._var(f"q{len(self._ptr_pos)}") for _ in range(len(lits) - 1)]
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
            o = [self._var(f"u{len(self._ptr_pos)}") for _ in range(m)]
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
