"""Exact certificates that the step LP rules a split out, and an exact checker for them.

``synth.bounds.step_lp`` rules a split r_1..r_S out when its LP says "no flows fit these rounds";
that answer comes from floating-point duals. Here it becomes a proof checked in rational
arithmetic. For a split, the step LP's *feasibility system* is: the flow rows as built
(conservation: equalities; uses: f - u <= 0), the capacity rows sum_k m_k u_{k,l,t} <=
cap x r_t / scale (the rounds are numbers here, fixed by the split), every column in [0, inf).

Farkas' lemma (the rule the checker applies): take a multiplier y_i per row, y_i > 0 only on a
row with a finite upper bound U_i, y_i < 0 only on one with a finite lower bound L_i (an
equality row takes either sign). Every x satisfying the rows has y^T A x <= rhs := sum_i y_i
(U_i if y_i > 0 else L_i), and every x in the column box has y^T A x >= the box's least value
of c^T x (c = A^T y: c_j l_j where c_j > 0, c_j u_j where c_j < 0, and there is no least value
when c_j < 0 and u_j = inf). If that least value exceeds rhs, no x satisfies both: the system
is infeasible, so (step_lp's relaxation argument) no schedule has exactly these rounds per step.
The checker computes c and both sides exactly (``fractions.Fraction``; integers over a common
denominator), never with floats.

The multipliers come from HiGHS's duals of the step LP's load LP at the split (min x with
capacity cap x r_t / scale x x): their negation is a Farkas vector for x = 1 with slack load - 1.
They are rounded to multiples of 2^-GRID_BITS and *repaired*: sign-constrained rows clipped to
their sign, then every column with c_j < 0 is mended by raising a row where it has a positive
coefficient (a use row first: free, its bound is 0; then the cheapest capacity row; an equality
row only for holds, which have no other). The repaired vector is checked exactly; when that
fails (no slack left, or the solve failed) there is no certificate, and callers must not prune.

A destination farther from every holder of its chunk than the steps allow gives the
"unreachable" certificate: (chunk, rank), checked by a breadth-first search over the links.

>>> from synth.core.library import resolve_topology
>>> from synth.core.collectives import make_collective
>>> topo = resolve_topology("hypercube:3")
>>> coll = make_collective("alltoall", topo.ranks, chunks=1)
>>> cert = split_certificate(topo, coll, (1, 1, 1))
>>> check_lp_certificate(topo, coll, cert) is None
True
>>> split_certificate(topo, coll, (1, 2, 1)) is None  # not ruled out: no certificate
True
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
import scipy.sparse as sp

from synth.bounds import step_lp
from synth.bounds.lp import solve_lp_with_duals
from synth.core.collective import Collective
from synth.core.topology import Topology

FORMAT = "synth.step-lp-farkas/1"
GRID_BITS = 40  # multipliers are rounded to multiples of 2^-GRID_BITS before the repair
REPAIR_PASSES = 64  # a hold chain needs up to S passes, then one for flows, one for uses
_INT64_ROOM = 2**62  # the repair's integer arithmetic stays below this (else: no certificate)
_RATIONAL = re.compile(r"-?\d+/[1-9]\d*")


@dataclass(frozen=True)
class LpCertificate:
    """A proof that the step LP of (steps, split, scale) has no solution.

    ``digest``: sha256 of the LP's rows (``_System``), so a checker knows it rebuilt the same LP.
    ``multipliers``: the non-zero Farkas multipliers, (row index, y) by row; rows are the flow
    rows then the capacity rows, as step_lp numbers them. ``unreachable``: instead of
    multipliers, (chunk, rank) of the collective with the rank farther than ``steps`` hops
    from every holder of the chunk (then the LP has no rows and ``multipliers`` is empty).
    """

    steps: int
    split: tuple[int, ...]
    scale: int
    digest: str
    multipliers: tuple[tuple[int, Fraction], ...] = ()
    unreachable: tuple[int, int] | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict; rationals as "p/q" strings."""
        return {"format": FORMAT, "steps": self.steps, "split": list(self.split), "scale": self.scale,
                "digest": self.digest,
                "multipliers": [[row, f"{y.numerator}/{y.denominator}"] for row, y in self.multipliers],
                "unreachable": None if self.unreachable is None else list(self.unreachable)}

    @classmethod
    def from_dict(cls, data: dict) -> LpCertificate:
        """The certificate ``to_dict`` wrote; ValueError when ``data`` is not one."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} certificate")
        try:
            reach = data["unreachable"]
            return cls(_whole(data["steps"]), tuple(_whole(r) for r in data["split"]), _whole(data["scale"]),
                       _digest_text(data["digest"]),
                       tuple((_whole(row), _rational(y)) for row, y in data["multipliers"]),
                       None if reach is None else (_whole(reach[0]), _whole(reach[1])))
        except (KeyError, TypeError, IndexError) as error:
            raise ValueError(f"malformed certificate: {error!r}") from error


def _whole(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _rational(text) -> Fraction:
    if not isinstance(text, str) or not _RATIONAL.fullmatch(text):
        raise ValueError(f"expected a rational 'p/q', got {text!r}")
    return Fraction(text)


def _digest_text(text) -> str:
    if not isinstance(text, str) or not re.fullmatch(r"[0-9a-f]{64}", text):
        raise ValueError(f"expected a sha256 hex digest, got {text!r}")
    return text


@dataclass(frozen=True, eq=False)
class _System:
    """The step LP's rows with the split left out: rows 0..flow_rows-1 are the flow rows with
    bounds ``lower``/``upper`` (+-inf where none), the rest the capacity rows (upper bound cap x
    r_step / scale, no lower); A in canonical COO (sorted by row then column, repeats added, no
    zeros); columns in [col_lower, col_upper] (0 and inf in the step LP)."""

    steps: int
    columns: int
    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    cap_of_row: np.ndarray
    step_of_row: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray

    @property
    def flow_rows(self) -> int:
        return len(self.lower)

    @property
    def row_count(self) -> int:
        return len(self.lower) + len(self.cap_of_row)

    @property
    def digest(self) -> str:
        """sha256 over every array (fixed dtypes and byte order, each with its length)."""
        h = hashlib.sha256(FORMAT.encode() + b"\0")
        h.update(np.array([self.steps, self.columns], dtype="<i8").tobytes())
        for array, dtype in ((self.rows, "<i8"), (self.cols, "<i8"), (self.vals, "<f8"), (self.lower, "<f8"),
                             (self.upper, "<f8"), (self.cap_of_row, "<f8"), (self.step_of_row, "<i8"),
                             (self.col_lower, "<f8"), (self.col_upper, "<f8")):
            h.update(np.array([len(array)], dtype="<i8").tobytes())
            h.update(np.ascontiguousarray(array, dtype=dtype).tobytes())
        return h.hexdigest()

    def bound(self, row: int, upper: bool, split: tuple[int, ...], scale: int) -> Fraction | None:
        """Row ``row``'s upper (else lower) bound, exactly; None when infinite."""
        if row >= self.flow_rows:
            if not upper:
                return None
            k = row - self.flow_rows
            return Fraction(float(self.cap_of_row[k])) * split[int(self.step_of_row[k])] / scale
        value = float(self.upper[row] if upper else self.lower[row])
        return None if math.isinf(value) else Fraction(value)

    def float_bounds(self, split: tuple[int, ...], scale: int) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) of every row as floats: for the repair's choices only."""
        per_unit = np.asarray(split, dtype=float)[self.step_of_row] / scale
        return (np.concatenate([self.lower, np.full(len(self.cap_of_row), -np.inf)]),
                np.concatenate([self.upper, self.cap_of_row * per_unit]))


@lru_cache(maxsize=64)
def _system(relax: step_lp.StepRelaxation) -> _System:
    """The relaxation's rows as a ``_System`` (its built arrays, capacity rows after the flow rows)."""
    p = relax.parts
    f_rows, f_cols, f_vals, lower, upper = p.flow_coo
    c_rows, c_cols, c_vals = p.capacity
    rows = np.concatenate([np.asarray(f_rows, dtype=np.int64), np.asarray(c_rows, dtype=np.int64) + p.flow_rows])
    cols = np.concatenate([np.asarray(f_cols, dtype=np.int64), np.asarray(c_cols, dtype=np.int64)])
    vals = np.concatenate([np.asarray(f_vals, dtype=float), np.asarray(c_vals, dtype=float)])
    rows, cols, vals = _canonical(rows, cols, vals)
    return _System(relax.steps, p.columns, rows, cols, vals, np.asarray(lower, dtype=float),
                   np.asarray(upper, dtype=float), np.asarray(p.cap_of_row, dtype=float),
                   np.asarray(p.step_of_row, dtype=np.int64), np.zeros(p.columns), np.full(p.columns, np.inf))


def _canonical(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, ...]:
    """COO sorted by (row, column), repeated entries added up, zero entries dropped."""
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    if len(rows):
        starts = np.flatnonzero(np.concatenate(([True], (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1]))))
        rows, cols, vals = rows[starts], cols[starts], np.add.reduceat(vals, starts)
    keep = vals != 0
    return rows[keep], cols[keep], vals[keep]


# ---------------------------------------------------------------- making a certificate


def split_certificate(topology: Topology, collective: Collective,
                      rounds_per_step: tuple[int, ...]) -> LpCertificate | None:
    """A certificate that no schedule has exactly these rounds per step, when
    ``step_lp.split_ruled_out(..., solve=True)`` says so and the proof can be made exact;
    else None (never a certificate for a split that function does not rule out)."""
    split = tuple(int(r) for r in rounds_per_step)
    if not split or min(split) < 1:
        return None
    found = step_lp._model(topology, collective, len(split))
    if found is None or not step_lp.split_ruled_out(topology, collective, split):
        return None
    relax, scale = found
    system = _system(relax)
    if relax.unreachable:
        reach = _unreachable_pair(topology, collective, len(split))
        return None if reach is None else LpCertificate(len(split), split, scale, system.digest, (), reach)
    duals = _load_duals(relax, split, scale)
    multipliers = None if duals is None else _repair(system, -duals, split, scale)
    if multipliers is None:
        return None
    certificate = LpCertificate(len(split), split, scale, system.digest, multipliers)
    return certificate if _farkas_failure(system, certificate) is None else None


def _load_duals(relax: step_lp.StepRelaxation, split: tuple[int, ...], scale: int) -> np.ndarray | None:
    """HiGHS's row duals of the load LP at the split (``StepRelaxation._load``'s model), when
    its load is over 1 (else None: nothing to prove)."""
    p = relax.parts
    n_cap = len(p.cap_of_row)
    per_unit = np.array(split, dtype=float)[p.step_of_row] / scale
    tail = (np.arange(n_cap), np.zeros(n_cap, dtype=np.int64), -p.cap_of_row * per_unit)
    cost, col_lower, coo, lo, up = relax._model(tail, np.ones(1), np.zeros(1))
    solved = solve_lp_with_duals(cost, np.full(len(cost), np.inf), coo, lo, up, step_lp.LP_SECONDS,
                                 col_lower=col_lower)
    if solved is None or not solved[0] > 1:
        return None
    return solved[1]


def _repair(system: _System, z: np.ndarray, split: tuple[int, ...],
            scale: int) -> tuple[tuple[int, Fraction], ...] | None:
    """Float Farkas multipliers ``z`` (one per row) made exact: scaled to max |z| = 1, rounded
    to multiples of 2^-GRID_BITS, clipped to each row's sign, then columns with c_j < 0 mended
    (``_mend``) until none is left; None when that does not settle or the numbers grow too big.
    The result is a candidate only: ``split_certificate`` checks it exactly."""
    top = float(np.max(np.abs(z))) if len(z) else 0.0
    if not math.isfinite(top) or top == 0 or not np.all(system.vals == np.rint(system.vals)):
        return None
    lower, upper = system.float_bounds(split, scale)
    n = np.rint(z / top * 2.0**GRID_BITS).astype(np.int64)
    n = np.where(np.isinf(upper), np.minimum(n, 0), n)
    n = np.where(np.isinf(lower), np.maximum(n, 0), n)
    a = sp.csr_matrix((system.vals.astype(np.int64), (system.cols, system.rows)),
                      shape=(system.columns, system.row_count))
    room = _INT64_ROOM // max(1, int(np.asarray(abs(a).sum(axis=1)).max(initial=0)))
    for _ in range(REPAIR_PASSES):
        if int(np.abs(n).max()) >= room:
            return None
        c = a @ n
        short = np.flatnonzero(c < 0)
        if not len(short):
            return tuple((int(i), Fraction(int(n[i]), 2**GRID_BITS)) for i in np.flatnonzero(n))
        n = _mend(system, n, c, short, lower, upper)
        if n is None:
            return None
    return None


def _mend(system: _System, n: np.ndarray, c: np.ndarray, short: np.ndarray, lower: np.ndarray,
          upper: np.ndarray) -> np.ndarray | None:
    """One pass: each short column j (c_j < 0) picks a row i with a_ij > 0 and a finite upper
    bound (so raising y_i keeps its sign valid): an inequality row before an equality row, then
    the least upper bound / a_ij (what raising costs the right-hand side), then the lowest
    index; each picked row rises by the most any of its columns needs (ceil(-c_j / a_ij)).
    None when a short column has no such row."""
    entries = np.flatnonzero(np.isin(system.cols, short) & (system.vals > 0) & np.isfinite(upper[system.rows]))
    rows, cols = system.rows[entries], system.cols[entries]
    coef = system.vals[entries].astype(np.int64)
    if len(np.unique(cols)) < len(short):
        return None
    order = np.lexsort((rows, upper[rows] / coef, np.isfinite(lower[rows]), cols))
    rows, cols, coef = rows[order], cols[order], coef[order]
    first = np.concatenate(([True], cols[1:] != cols[:-1]))
    rows, cols, coef = rows[first], cols[first], coef[first]
    need = (-c[cols] + coef - 1) // coef
    rise = np.zeros_like(n)
    np.maximum.at(rise, rows, need)
    return n + rise


def _unreachable_pair(topology: Topology, collective: Collective, steps: int) -> tuple[int, int] | None:
    """(chunk, rank): the first rank that needs a chunk and is over ``steps`` hops from all its holders."""
    for chunk, (pre, post) in enumerate(zip(collective.pre, collective.post)):
        near = _within(topology, pre, steps)
        for rank in sorted(post - pre):
            if rank not in near:
                return chunk, rank
    return None


# ---------------------------------------------------------------- checking a certificate


def check_lp_certificate(topology: Topology, collective: Collective, certificate: LpCertificate) -> str | None:
    """None when ``certificate`` proves that the step LP of (topology, collective, its steps)
    has no solution with its split's rounds; else one line saying what failed. Exact: the LP's
    rows are rebuilt as step_lp builds them, matched by digest, and the Farkas rule (module
    docstring) is checked in rational arithmetic; an "unreachable" one by a hop count."""
    problem = _header_failure(collective, certificate)
    if problem:
        return problem
    found = step_lp._model(topology, collective, certificate.steps)
    if found is None:
        return "the step LP does not apply to this topology and collective"
    system = _system(found[0])
    if system.digest != certificate.digest:
        return f"digest mismatch: the certificate is for LP {certificate.digest[:12]}, rebuilt {system.digest[:12]}"
    if certificate.unreachable is not None:
        return _reach_failure(topology, collective, certificate)
    return _farkas_failure(system, certificate)


def _header_failure(collective: Collective, certificate: LpCertificate) -> str | None:
    """What is wrong with the certificate's steps, split and scale, if anything."""
    if not isinstance(certificate, LpCertificate):
        return "not an LpCertificate"
    if not isinstance(certificate.steps, int) or certificate.steps < 1:
        return f"steps must be a positive integer, got {certificate.steps!r}"
    split = certificate.split
    if len(split) != certificate.steps or not all(isinstance(r, int) and r >= 1 for r in split):
        return f"split {split!r} is not {certificate.steps} positive whole rounds"
    scale = step_lp._classes(collective)[1]
    if certificate.scale != scale:
        return f"scale {certificate.scale!r} is not the collective's chunks per class ({scale})"
    return None


def _reach_failure(topology: Topology, collective: Collective, certificate: LpCertificate) -> str | None:
    """The (chunk, rank) claim: the rank needs the chunk and is over ``steps`` hops from its holders."""
    pair = certificate.unreachable
    if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(v, int) for v in pair)):
        return f"unreachable must be a (chunk, rank) pair of integers, got {pair!r}"
    chunk, rank = pair
    if certificate.multipliers:
        return "an unreachable certificate carries no multipliers"
    if not 0 <= chunk < len(collective.pre) or rank not in collective.post[chunk] - collective.pre[chunk]:
        return f"rank {rank} does not need chunk {chunk}"
    if rank in _within(topology, collective.pre[chunk], certificate.steps):
        return f"rank {rank} is within {certificate.steps} hops of chunk {chunk}'s holders"
    return None


def _within(topology: Topology, holders: frozenset, steps: int) -> set[int]:
    """Ranks at most ``steps`` hops from ``holders`` (breadth first over the links)."""
    reached, frontier = set(holders), set(holders)
    for _ in range(steps):
        frontier = {l.dst for l in topology.links if l.src in frontier} - reached
        reached |= frontier
    return reached


def _farkas_failure(system: _System, certificate: LpCertificate) -> str | None:
    """The Farkas rule, exactly: signs, then c = A^T y against the column box, then the sides."""
    y: dict[int, Fraction] = {}
    for pair in certificate.multipliers:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            return f"a multiplier must be a (row, value) pair, got {pair!r}"
        row, value = pair
        if not isinstance(row, int) or not 0 <= row < system.row_count or row in y:
            return f"row {row!r} is out of range or repeated"
        if not isinstance(value, Fraction) or value == 0:
            return f"row {row}: the multiplier must be a non-zero Fraction, got {value!r}"
        y[row] = value
    rhs = Fraction(0)
    for row, value in y.items():
        bound = system.bound(row, value > 0, certificate.split, certificate.scale)
        if bound is None:
            return f"row {row}: multiplier {value} has the wrong sign (that side of the row is unbounded)"
        rhs += value * bound
    least = _box_minimum(system, _combination(system, y))
    if least is None:
        return "the combination is unbounded below on the columns (c_j < 0 on a column with no upper bound)"
    if not least > rhs:
        return f"no contradiction: the combination's least value {least} is not above its bound {rhs}"
    return None


def _combination(system: _System, y: dict[int, Fraction]) -> tuple[dict[int, int], int]:
    """c = A^T y as integers over one denominator: ({column: numerator}, denominator)."""
    denominator = math.lcm(*(v.denominator for v in y.values())) if y else 1
    picked = np.flatnonzero(np.isin(system.rows, np.fromiter(y, dtype=np.int64, count=len(y))))
    exact = {v: Fraction(v) for v in set(system.vals[picked].tolist())}
    a_denominator = math.lcm(*(f.denominator for f in exact.values())) if exact else 1
    scaled = {i: v.numerator * (denominator // v.denominator) for i, v in y.items()}
    a_int = {v: f.numerator * (a_denominator // f.denominator) for v, f in exact.items()}
    numerators: dict[int, int] = {}
    for row, col, val in zip(system.rows[picked].tolist(), system.cols[picked].tolist(),
                             system.vals[picked].tolist()):
        numerators[col] = numerators.get(col, 0) + scaled[row] * a_int[val]
    return numerators, denominator * a_denominator


def _box_minimum(system: _System, combination: tuple[dict[int, int], int]) -> Fraction | None:
    """min c^T x over the columns' box; None when unbounded below (c_j < 0, no upper bound;
    or c_j > 0, no lower bound)."""
    numerators, denominator = combination
    total = Fraction(0)
    for col, numerator in numerators.items():
        if numerator == 0:
            continue
        end = float(system.col_lower[col] if numerator > 0 else system.col_upper[col])
        if math.isinf(end):
            return None
        total += numerator * Fraction(end)
    return total / denominator

