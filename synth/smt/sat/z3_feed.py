"""A ``Formula`` fed to z3's SAT core through its C API (the Python API costs ~50 us a clause).

The feed keeps a *pristine* solver that gets every clause and is never checked; checks run on
a copy of it (z3's translate into the same context: the assertions and the parameters, no
search state), dropped after an interrupted check, because z3 5.4's incremental SAT core was
seen answering "sat" with models that break hard constraints after one. Re-asserting from
Python instead took ~2 s per timed-out try on mi250 with 5 steps, and ~30 s with 8.

Each feed has a z3 context of its own: z3 numbers terms per context and its search follows
those numbers, so sharing one would make a schedule depend on whatever else the process built.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import z3
from z3 import z3core

from synth.smt.sat.answer import STOPPED, TIME_SPENT, WORK_SPENT, Answer, Verdict
from synth.smt.sat.formula import Formula


class Z3Feed:
    def __init__(self, formula: Formula, seed: int, sat_params: tuple, memory_mb: int) -> None:
        self.formula, self.seed, self.sat_params = formula, seed, sat_params
        z3.set_param("memory_max_size", memory_mb)
        self._ctx_obj = z3.Context()
        self._ctx = self._ctx_obj.ref()
        self._bool_sort = z3.BoolSort(self._ctx_obj).ast
        self._pos: list = [None]  # variable v -> AST pointer (one reference held by us)
        self._neg: list = [None]  # -> its negation's, made on demand
        self._fed = 0
        self._pristine = self._new_solver()
        self._working: z3.Solver | None = None

    def __del__(self) -> None:  # give back the references taken
        try:
            dec = z3core.Z3_dec_ref
            for ptr in self._pos[1:] + [p for p in self._neg[1:] if p is not None]:
                dec(self._ctx, ptr)
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to free
            pass

    def _new_solver(self) -> z3.Solver:
        solver = z3.SolverFor("QF_FD", ctx=self._ctx_obj)
        solver.set("random_seed", self.seed)
        for name, value in self.sat_params:
            solver.set(name, value)
        return solver

    # ------------------------------------------------------------------ feeding
    def _literal(self, lit: int):
        if lit > 0:
            return self._pos[lit]
        ptr = self._neg[-lit]
        if ptr is None:
            ptr = z3core.Z3_mk_not(self._ctx, self._pos[-lit])
            z3core.Z3_inc_ref(self._ctx, ptr)
            self._neg[-lit] = ptr
        return ptr

    def _sync(self) -> None:
        """Make the variables and assert the clauses added since the last sync."""
        while len(self._pos) <= self.formula.num_vars:
            name = z3core.Z3_mk_int_symbol(self._ctx, len(self._pos))
            ast = z3core.Z3_mk_const(self._ctx, name, self._bool_sort)
            z3core.Z3_inc_ref(self._ctx, ast)
            self._pos.append(ast)
            self._neg.append(None)
        for clause in self.formula.clauses_from(self._fed):
            self._assert([self._literal(lit) for lit in clause])
        self._fed = self.formula.size

    def _assert(self, ptrs: list) -> None:
        if not ptrs:
            ast = z3.BoolVal(False, self._ctx_obj).as_ast()
        elif len(ptrs) == 1:
            ast = ptrs[0]
        else:
            ast = z3core.Z3_mk_or(self._ctx, len(ptrs), (z3.Ast * len(ptrs))(*ptrs))
        for solver in (self._pristine, self._working):
            if solver is not None:
                z3core.Z3_solver_assert(self._ctx, solver.solver, ast)

    @property
    def _solver(self) -> z3.Solver:
        if self._working is None:
            self._working = self._pristine.translate(self._ctx_obj)
        return self._working

    def renew(self) -> None:
        self._working = None

    def prepare(self) -> None:
        """Feed the new clauses and make the solver the next check runs on."""
        self._sync()
        _ = self._solver

    def _ref(self, lit: int) -> z3.BoolRef:
        return z3.BoolRef(self._literal(lit), self._ctx_obj)

    # ------------------------------------------------------------------ checking
    def check(self, assumptions, rlimit: int | None, seconds: float | None,
              stop: threading.Event | None = None) -> Answer:
        """One check; UNKNOWN when ``rlimit`` units or ``seconds`` run out, or when another
        thread sets ``stop`` (z3's context is interrupted; an interrupt does not outlive the
        check). Ctrl-C (z3 says "canceled") raises KeyboardInterrupt."""
        self._sync()
        solver = self._solver
        solver.set("timeout", max(1, int(seconds * 1000)) if seconds is not None else 4294967295)
        solver.set("rlimit", int(rlimit) if rlimit else 0)
        spent_before = _rlimit_count(solver)
        started = time.perf_counter()
        with _interrupted_on(stop, self._ctx_obj):
            verdict = solver.check(*[self._ref(lit) for lit in assumptions])
        if verdict == z3.unsat:
            return Answer(Verdict.UNSAT, "z3")
        if verdict == z3.sat:
            return Answer(Verdict.SAT, "z3", model=self._model(solver.model()))
        reason = solver.reason_unknown()
        self._working = None  # see the module's doc
        if rlimit and _rlimit_count(solver) - spent_before >= rlimit:
            return Answer(Verdict.UNKNOWN, "z3", reason=WORK_SPENT)
        if stop is not None and stop.is_set():
            return Answer(Verdict.UNKNOWN, "z3", reason=STOPPED)
        if "canceled" in reason or "interrupted" in reason:
            raise KeyboardInterrupt
        if "timeout" in reason or (seconds is not None and time.perf_counter() - started >= seconds):
            return Answer(Verdict.UNKNOWN, "z3", reason=TIME_SPENT)
        if "memory" in reason:
            return Answer(Verdict.UNKNOWN, "z3", reason="memory")
        return Answer(Verdict.UNKNOWN, "z3", reason=reason, error=True)

    def _model(self, model: z3.ModelRef) -> np.ndarray:
        """Every variable's value (those the model leaves free: false)."""
        values = np.zeros(self.formula.num_vars + 1, dtype=bool)
        for decl in model.decls():
            values[decl.name() if isinstance(decl.name(), int) else int(str(decl.name()).lstrip("k!"))] = \
                z3.is_true(model.get_interp(decl))
        return values


class _interrupted_on:
    """While in the block, a watcher interrupts ``context`` once ``stop`` is set (looking every
    STOP_POLL seconds; z3's check runs in C without the GIL, so the watcher gets to run)."""

    STOP_POLL = 0.05

    def __init__(self, stop: threading.Event | None, context: z3.Context) -> None:
        self.stop, self.context, self.done = stop, context, threading.Event()

    def _watch(self) -> None:
        while not self.done.wait(self.STOP_POLL):
            if self.stop.is_set():
                self.context.interrupt()
                return

    def __enter__(self) -> None:
        if self.stop is not None:
            self.watcher = threading.Thread(target=self._watch, daemon=True)
            self.watcher.start()

    def __exit__(self, *exc) -> None:
        if self.stop is not None:
            self.done.set()
            self.watcher.join()


def _rlimit_count(solver: z3.Solver) -> int:
    """z3's running work counter ("rlimit count"; 0 before the first check)."""
    stats = solver.statistics()
    for key in stats.keys():
        if key == "rlimit count":
            return int(stats.get_key_value(key))
    return 0
