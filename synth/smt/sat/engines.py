"""The SAT engines under the SMT encodings: z3's SAT core, CaDiCaL (python-sat) and Kissat.

Every engine answers ``check(assumptions, work, seconds, proof)`` on a ``Formula`` that may
have grown since its last call. ``work`` is a deterministic budget in *work seconds*: each
engine turns it into its own count (z3's rlimit units, CaDiCaL's and Kissat's conflicts) at a
fixed rate (``WORK_RATES``), so the same budget gives the same answer on a loaded machine as
on an idle one. ``seconds`` is the wall-clock safety net; an answer cut short by either is
UNKNOWN, never UNSAT.

- z3 and CaDiCaL are incremental: one solver per formula, fed the clauses added since its last
  call, assumptions per call. python-sat's CaDiCaL cannot be interrupted, so it runs in slices
  of conflicts (``cadical_slice``: fewer on a bigger formula) and reads the clock between them;
  it holds the GIL while it searches, so in a race it searches in a forked child (``forked``).
- Kissat is not: every call writes the formula with the assumptions as unit clauses and runs
  the binary that the ``passagemath-kissat`` wheel ships (or ``kissat`` on PATH).
- ``proof``: an UNSAT answer carries a DRAT proof (text) of the formula plus the assumptions
  as units; such a call is one-shot (a fresh solver), so the proof is about that formula alone.
  z3 writes no DRAT.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from synth.smt.sat import ENGINES, PROOF_ENGINES  # noqa: F401 - re-exported
from synth.smt.sat.answer import STOPPED, TIME_SPENT, WORK_SPENT, Answer, Verdict
from synth.smt.sat.forked import answer_in_child, can_fork
from synth.smt.sat.formula import Formula

# work units per work second (docs/smt.md, "SAT engines"): one work second is z3's 10M rlimit units
# (2.9 s on torus:4x4 alltoall, 4.9 s on mi250 allgather); CaDiCaL and Kissat make 5.9K-7.7K
# conflicts a second there and 1.0K-1.4K on mi250, so 10K conflicts are a work second of the same order
Z3_RLIMIT_PER_SECOND = 10_000_000
CADICAL_CONFLICTS_PER_SECOND = 10_000
CADICAL_SLICE = 10_000  # conflicts between two looks at the clock (python-sat's CaDiCaL cannot be interrupted)
PORTFOLIO_SLICE = 2_000  # and between two looks at a racing portfolio's stop flag
SLICE_CLAUSE_CONFLICTS = 1_000_000_000  # slice x clauses at most this: ~2 s a slice at mi250's conflict rates
MIN_SLICE = 500
KISSAT_CONFLICTS_PER_SECOND = 10_000
WORK_RATES = {"z3": Z3_RLIMIT_PER_SECOND, "cadical": CADICAL_CONFLICTS_PER_SECOND,
              "kissat": KISSAT_CONFLICTS_PER_SECOND}


def work_units(engine: str, work: float | None) -> int | None:
    """``work`` work seconds in ``engine``'s own units (None: no budget)."""
    return None if work is None else max(1, int(work * WORK_RATES[engine]))


class EngineUnavailable(RuntimeError):
    """The engine's package or binary is not installed."""


_SPENT: dict[str, float] = {}  # engine -> seconds inside its checks, in this process


def engine_seconds() -> dict[str, float]:
    """Seconds each engine has spent inside checks in this process (the solver time a benchmark
    reports: no encoding, LP or start-up time)."""
    return dict(_SPENT)


class Engine:
    """One engine over one formula; subclasses say ``name`` and implement ``_check``."""

    name = ""

    def __init__(self, formula: Formula, seed: int = 0, memory_mb: int = 4096) -> None:
        self.formula, self.seed, self.memory_mb = formula, seed, memory_mb

    def check(self, assumptions: Sequence[int], work: float | None = None, seconds: float | None = None,
              proof: bool = False, stop: threading.Event | None = None) -> Answer:
        """Is the formula satisfiable with every literal of ``assumptions`` true? ``work``: work
        seconds, ``seconds``: wall-clock seconds (either spent: UNKNOWN); ``proof``: an UNSAT
        answer carries its DRAT proof; ``stop``: set by another thread, it ends the check
        (UNKNOWN, STOPPED) as soon as the engine can tell."""
        started = time.perf_counter()
        try:
            return self._check(list(assumptions), work, seconds, proof, stop)
        finally:
            _SPENT[self.name] = _SPENT.get(self.name, 0.0) + time.perf_counter() - started

    def _check(self, assumptions: list[int], work: float | None, seconds: float | None, proof: bool,
               stop: threading.Event | None) -> Answer:
        raise NotImplementedError

    def prepare(self) -> None:
        """Do the Python side of the next check now (feed the clauses added since the last one):
        a race prepares every member before it starts, so no member's feeding waits for the GIL
        behind another member's search."""


# ---------------------------------------------------------------------------------------- z3

class Z3Engine(Engine):
    """z3's SAT core (QF_FD, CHB branching, Luby restarts), fed through its C API. A *pristine*
    solver gets every clause and is never checked; checks run on a copy of it, dropped after an
    interrupted check (z3's incremental SAT core is not to be trusted after one)."""

    name = "z3"
    SAT_PARAMS = (("sat.branching.heuristic", "chb"), ("sat.restart", "luby"))

    def __init__(self, formula: Formula, seed: int = 0, memory_mb: int = 4096) -> None:
        super().__init__(formula, seed, memory_mb)
        from synth.smt.sat.z3_feed import Z3Feed

        self._feed = Z3Feed(formula, seed, self.SAT_PARAMS, memory_mb)

    def _check(self, assumptions, work, seconds, proof, stop=None) -> Answer:
        if proof:
            raise ValueError("z3 writes no DRAT proof: certify with cadical or kissat")
        return self._feed.check(assumptions, work_units("z3", work), seconds, stop)

    def prepare(self) -> None:
        self._feed.prepare()

    def renew(self) -> None:
        """Drop the solver checks ran on, as an interrupted check does (the next check gets a
        fresh copy of the pristine one)."""
        self._feed.renew()


# ----------------------------------------------------------------------------------- CaDiCaL

class CadicalEngine(Engine):
    """CaDiCaL 1.9.5 through python-sat: incremental, conflict budgets, DRAT on request."""

    name = "cadical"

    def __init__(self, formula: Formula, seed: int = 0, memory_mb: int = 4096) -> None:
        super().__init__(formula, seed, memory_mb)
        _solver_class()
        self._solver = None
        self._fed = 0

    def prepare(self) -> None:
        self._synced()

    def _synced(self):
        if self._solver is None:
            self._solver = _new_cadical(self.seed)
        if self._fed < self.formula.size:
            self._solver.append_formula(list(self.formula.clauses_from(self._fed)))
            self._fed = self.formula.size
        return self._solver

    def _check(self, assumptions, work, seconds, proof, stop=None) -> Answer:
        if stop is not None and can_fork():  # racing: search in a child, away from the GIL (``forked``)
            return answer_in_child(lambda: self._check(assumptions, work, seconds, proof), "cadical", stop)
        conflicts = work_units("cadical", work)
        if proof:
            solver = _new_cadical(self.seed, with_proof=True)
            solver.append_formula(list(self.formula.clauses_from(0)))
            solver.append_formula([[lit] for lit in assumptions])
            answer = _cadical_answer(solver, [], conflicts, seconds, self.formula.num_vars, stop, proof=True,
                                     num_clauses=self.formula.num_clauses)
            solver.delete()
            return answer
        return _cadical_answer(self._synced(), list(assumptions), conflicts, seconds, self.formula.num_vars, stop,
                               num_clauses=self.formula.num_clauses)

    def __del__(self) -> None:
        if getattr(self, "_solver", None) is not None:
            self._solver.delete()


def _solver_class():
    try:
        from pysat.solvers import Cadical195
    except ImportError as error:
        raise EngineUnavailable("cadical needs python-sat (pip install python-sat)") from error
    return Cadical195


def _new_cadical(seed: int, with_proof: bool = False):
    solver = _solver_class()(with_proof=with_proof)
    solver.configure({"seed": seed})
    return solver


def cadical_slice(num_clauses: int, racing: bool = False) -> int:
    """Conflicts between two looks at the clock (and at a race's stop flag) on a formula of
    ``num_clauses``: CADICAL_SLICE (PORTFOLIO_SLICE when racing), fewer as the formula grows,
    since a conflict costs more there (1.0K-1.4K conflicts a second on mi250's 450K clauses
    against 6K-8K on 60K), so a slice stays about two seconds long. A count, not a time: the
    slices, and so the answer, are the same however loaded the machine is."""
    cap = PORTFOLIO_SLICE if racing else CADICAL_SLICE
    return max(MIN_SLICE, min(cap, SLICE_CLAUSE_CONFLICTS // max(1, num_clauses)))


def _cadical_answer(solver, assumptions: list[int], conflicts: int | None, seconds: float | None,
                    num_vars: int, stop: threading.Event | None = None, proof: bool = False,
                    num_clauses: int = 0) -> Answer:
    """One check in slices of ``cadical_slice`` conflicts (python-sat's CaDiCaL cannot be
    interrupted, so the clock and ``stop`` are read between slices)."""
    if conflicts is None and seconds is None and stop is None:
        verdict = solver.solve(assumptions=assumptions)
    else:
        verdict, spent, started = None, 0, time.perf_counter()
        size = cadical_slice(num_clauses, racing=stop is not None)
        while verdict is None:
            if conflicts is not None and spent >= conflicts:
                return Answer(Verdict.UNKNOWN, "cadical", reason=WORK_SPENT)
            if seconds is not None and time.perf_counter() - started >= seconds:
                return Answer(Verdict.UNKNOWN, "cadical", reason=TIME_SPENT)
            if stop is not None and stop.is_set():
                return Answer(Verdict.UNKNOWN, "cadical", reason=STOPPED)
            step = size if conflicts is None else min(size, conflicts - spent)
            before = solver.accum_stats().get("conflicts", 0)
            solver.conf_budget(step)
            verdict = solver.solve_limited(assumptions=assumptions)
            spent += max(step, solver.accum_stats().get("conflicts", 0) - before)
    if verdict:
        return Answer(Verdict.SAT, "cadical", model=_model_array(solver.get_model(), num_vars))
    text = ("\n".join(solver.get_proof()) + "\n").encode() if proof else None
    return Answer(Verdict.UNSAT, "cadical", proof=text)


def _model_array(model: Sequence[int], num_vars: int) -> np.ndarray:
    values = np.zeros(num_vars + 1, dtype=bool)
    lits = np.asarray(model, dtype=np.int64)
    lits = lits[np.abs(lits) <= num_vars]
    values[lits[lits > 0]] = True
    return values


# ------------------------------------------------------------------------------------ Kissat

class KissatEngine(Engine):
    """Kissat 4 as a process per call (not incremental): the formula and the assumptions as
    units, a conflicts limit, ``--time`` and a kill as the wall-clock net."""

    name = "kissat"

    def __init__(self, formula: Formula, seed: int = 0, memory_mb: int = 4096) -> None:
        super().__init__(formula, seed, memory_mb)
        self.binary = kissat_binary()

    def _check(self, assumptions, work, seconds, proof, stop=None) -> Answer:
        conflicts = work_units("kissat", work)
        with tempfile.TemporaryDirectory(prefix="synth-kissat-") as folder:
            cnf, trace = Path(folder) / "f.cnf", Path(folder) / "f.drat"
            cnf.write_bytes(self.formula.dimacs(list(assumptions)))
            command = [self.binary, "-q", f"--seed={self.seed}", str(cnf)]
            if conflicts is not None:
                command.insert(1, f"--conflicts={conflicts}")
            if seconds is not None:
                command.insert(1, f"--time={max(1, math.ceil(seconds))}")
            if proof:
                command[-1:] = [str(cnf), "--no-binary", str(trace)]
            done = _run_until(command, _kill_after(seconds), self.memory_mb, stop)
            if done is None:
                return Answer(Verdict.UNKNOWN, "kissat", reason=STOPPED if stop is not None and stop.is_set()
                              else TIME_SPENT)
            return _kissat_answer(done, self.formula.num_vars, trace if proof else None, conflicts)


def _run_until(command: list[str], timeout: float | None, memory_mb: int,
               stop: threading.Event | None) -> subprocess.CompletedProcess | None:
    """Run ``command`` to its end; None when ``timeout`` seconds pass or ``stop`` is set first
    (the process is killed)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, preexec_fn=_memory_cap(memory_mb))
        started = time.perf_counter()
        while process.poll() is None:
            late = timeout is not None and time.perf_counter() - started > timeout
            if late or (stop is not None and stop.is_set()):
                process.kill()
                process.wait()
                return None
            try:
                process.wait(timeout=0.02)
            except subprocess.TimeoutExpired:
                pass
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(command, process.returncode, out.read().decode(errors="replace"),
                                           err.read().decode(errors="replace"))


def kissat_binary() -> str:
    """The kissat binary: the one in the passagemath-kissat wheel, else ``kissat`` on PATH."""
    try:
        for file in importlib.metadata.files("passagemath-kissat") or ():
            if str(file).endswith("bin/kissat"):
                path = str(file.locate())
                if os.access(path, os.X_OK):
                    return path
    except importlib.metadata.PackageNotFoundError:
        pass
    found = shutil.which("kissat")
    if found is None:
        raise EngineUnavailable("kissat needs the passagemath-kissat wheel or a kissat binary on PATH")
    return found


def _kill_after(seconds: float | None) -> float | None:
    return None if seconds is None else seconds + 5.0


def _memory_cap(memory_mb: int):
    def cap() -> None:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return cap


def _kissat_answer(done: subprocess.CompletedProcess, num_vars: int, trace: Path | None,
                   conflicts: int | None) -> Answer:
    status = next((line[2:].strip() for line in done.stdout.splitlines() if line.startswith("s ")), None)
    if status == "SATISFIABLE" and done.returncode == 10:
        lits = [int(x) for line in done.stdout.splitlines() if line.startswith("v ") for x in line[2:].split()]
        return Answer(Verdict.SAT, "kissat", model=_model_array([x for x in lits if x], num_vars))
    if status == "UNSATISFIABLE" and done.returncode == 20:
        return Answer(Verdict.UNSAT, "kissat", proof=trace.read_bytes() if trace is not None else None)
    if status == "UNKNOWN":
        return Answer(Verdict.UNKNOWN, "kissat", reason=WORK_SPENT if conflicts is not None else TIME_SPENT)
    words = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()[-1]
    reason = "memory" if "memory" in words or done.returncode == -9 else f"kissat failed: {words}"
    return Answer(Verdict.UNKNOWN, "kissat", reason=reason, error=reason != "memory")


ENGINE_CLASSES = {"z3": Z3Engine, "cadical": CadicalEngine, "kissat": KissatEngine}


def make_engine(name: str, formula: Formula, seed: int = 0, memory_mb: int = 4096) -> Engine:
    """An engine by name (EngineUnavailable when its package is missing)."""
    return ENGINE_CLASSES[name](formula, seed, memory_mb)


def available(name: str) -> bool:
    """Is the engine installed?"""
    try:
        if name == "cadical":
            _solver_class()
        elif name == "kissat":
            kissat_binary()
        return True
    except EngineUnavailable:
        return False
