"""Exact certificates for splits the step LP rules out: every ruled-out split gets one the exact
checker accepts, no other split gets one, and tampered certificates are refused."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.bounds import lp_certificate as lpc
from synth.bounds import step_lp
from synth.bounds.lp_certificate import LpCertificate, check_lp_certificate, split_certificate
from synth.bounds.step_lp import compositions, least_rounds, split_ruled_out
from synth.core.collectives import make_collective
from synth.core.library import resolve_topology

CASES = [("ring:4", "allgather", 3, 2), ("uring:4", "allgather", 2, 3), ("hypercube:3", "allgather", 2, 3),
         ("hypercube:3", "alltoall", 1, 3), ("torus:3x3", "alltoall", 1, 2), ("torus:3x3", "allgather", 2, 3),
         ("dgx1", "allgather", 4, 3), ("dgx1", "alltoall", 1, 2)]


def _setup(topo_name: str, name: str, chunks: int):
    topo = resolve_topology(topo_name)
    return topo, make_collective(name, topo.ranks, chunks=chunks)


def _splits_near_the_floor(topo, coll, steps: int) -> list[tuple[int, ...]]:
    """Every split of one round under ``least_rounds`` and of ``least_rounds`` itself."""
    least = least_rounds(topo, coll, steps)
    return [tuple(s) for rounds in (least - 1, least) if rounds >= steps for s in compositions(rounds, steps).tolist()]


def _naive_accepts(topo, coll, cert: LpCertificate) -> bool:
    """An independent Farkas check, straight from the relaxation's arrays with Fractions (no
    canonical form, no common denominator): signs, A^T y >= 0 on every column, y . bound < 0."""
    relax, scale = step_lp._model(topo, coll, cert.steps)
    p = relax.parts
    rows, cols, vals, lower, upper = p.flow_coo
    entries = list(zip(rows.tolist(), cols.tolist(), vals.tolist()))
    entries += [(r + p.flow_rows, c, v) for r, c, v in zip(*(a.tolist() for a in p.capacity))]
    bounds = list(zip(lower.tolist(), upper.tolist()))
    bounds += [(-math.inf, Fraction(cap) * cert.split[step] / scale)
               for cap, step in zip(p.cap_of_row.tolist(), p.step_of_row.tolist())]
    y = dict(cert.multipliers)
    if scale != cert.scale or any(not 0 <= r < len(bounds) for r in y):
        return False
    rhs = Fraction(0)
    for row, value in y.items():
        bound = bounds[row][1] if value > 0 else bounds[row][0]
        if math.isinf(bound):
            return False
        rhs += value * Fraction(bound)
    column = defaultdict(Fraction)
    for r, c, v in entries:
        if r in y:
            column[c] += y[r] * Fraction(v)
    return all(v >= 0 for v in column.values()) and rhs < 0


@pytest.mark.parametrize("topo_name,name,chunks,steps", CASES)
def test_every_ruled_out_split_gets_a_certificate_the_checker_accepts(topo_name, name, chunks, steps):
    topo, coll = _setup(topo_name, name, chunks)
    ruled_out = 0
    for split in _splits_near_the_floor(topo, coll, steps):
        cert = split_certificate(topo, coll, split)
        if not split_ruled_out(topo, coll, split):
            assert cert is None, split
            continue
        ruled_out += 1
        assert cert is not None and cert.split == split and cert.steps == steps
        assert check_lp_certificate(topo, coll, cert) is None
        assert _naive_accepts(topo, coll, cert)
    assert ruled_out > 0


def test_torus_4x4_alltoall_at_4_steps():
    topo, coll = _setup("torus:4x4", "alltoall", 1)
    splits = [s for s in _splits_near_the_floor(topo, coll, 4) if split_ruled_out(topo, coll, s)]
    assert len(splits) > 20
    for split in splits:
        assert check_lp_certificate(topo, coll, split_certificate(topo, coll, split)) is None


def test_unreachable_destinations_get_a_hop_certificate():
    """torus:4x4 has diameter 4: at 3 steps alltoall has no schedule at all."""
    topo, coll = _setup("torus:4x4", "alltoall", 1)
    cert = split_certificate(topo, coll, (2, 2, 2))
    assert cert is not None and cert.unreachable is not None and not cert.multipliers
    assert check_lp_certificate(topo, coll, cert) is None
    chunk, _ = cert.unreachable
    near = next((c, r) for c in range(len(coll.pre)) for r in coll.post[c] - coll.pre[c]
                if r in lpc._within(topo, coll.pre[c], 3))
    assert "within" in check_lp_certificate(topo, coll, replace(cert, unreachable=near))
    holder = (chunk, min(coll.pre[chunk]))
    assert "does not need" in check_lp_certificate(topo, coll, replace(cert, unreachable=holder))
    assert check_lp_certificate(topo, coll, replace(cert, multipliers=((0, Fraction(1)),))) is not None
    assert check_lp_certificate(topo, coll, replace(cert, steps=4, split=(2, 2, 2, 2))) is not None


@pytest.fixture(scope="module")
def dgx1_case():
    """dgx1 allgather, 4 chunks, 3 steps: a ruled-out split, its certificate, and a clearly feasible split."""
    topo, coll = _setup("dgx1", "allgather", 4)
    split = next(s for s in _splits_near_the_floor(topo, coll, 3) if split_ruled_out(topo, coll, s))
    feasible = tuple(r + 2 for r in split)
    relax, scale = step_lp._model(topo, coll, 3)
    assert not split_ruled_out(topo, coll, feasible) and relax.load(feasible, scale) < 0.99
    return topo, coll, split_certificate(topo, coll, split), feasible


def _capacity_rows(topo, coll, cert) -> list[int]:
    relax, _ = step_lp._model(topo, coll, cert.steps)
    return [row for row, _ in cert.multipliers if row >= relax.parts.flow_rows]


def test_tampered_headers_are_refused(dgx1_case):
    topo, coll, cert, feasible = dgx1_case
    assert check_lp_certificate(topo, coll, cert) is None
    assert "digest" in check_lp_certificate(topo, coll, replace(cert, digest="0" * 64))
    assert "scale" in check_lp_certificate(topo, coll, replace(cert, scale=cert.scale + 1))
    assert "split" in check_lp_certificate(topo, coll, replace(cert, split=cert.split[:-1]))
    assert "split" in check_lp_certificate(topo, coll, replace(cert, split=(0,) + cert.split[1:]))
    other = make_collective("allgather", topo.ranks, chunks=3)
    assert check_lp_certificate(topo, other, cert) is not None
    assert check_lp_certificate(resolve_topology("hypercube:3"), coll, cert) is not None


def test_the_multipliers_prove_nothing_for_a_feasible_split(dgx1_case):
    topo, coll, cert, feasible = dgx1_case
    assert "no contradiction" in check_lp_certificate(topo, coll, replace(cert, split=feasible))


def test_tampered_multipliers_are_refused(dgx1_case):
    topo, coll, cert, _ = dgx1_case
    cap_row = _capacity_rows(topo, coll, cert)[0]
    negated = tuple((r, -v if r == cap_row else v) for r, v in cert.multipliers)
    assert "sign" in check_lp_certificate(topo, coll, replace(cert, multipliers=negated))
    tripled = tuple((r, 3 * v) for r, v in cert.multipliers)  # a positive multiple proves the same
    assert check_lp_certificate(topo, coll, replace(cert, multipliers=tripled)) is None
    raised = tuple((r, v + 1000 if r == cap_row else v) for r, v in cert.multipliers)
    assert "no contradiction" in check_lp_certificate(topo, coll, replace(cert, multipliers=raised))
    no_capacity = tuple((r, v) for r, v in cert.multipliers if r not in _capacity_rows(topo, coll, cert))
    assert check_lp_certificate(topo, coll, replace(cert, multipliers=no_capacity)) is not None
    repeated = cert.multipliers + (cert.multipliers[0],)
    assert "repeated" in check_lp_certificate(topo, coll, replace(cert, multipliers=repeated))
    beyond = cert.multipliers + ((10**6, Fraction(1)),)
    assert "range" in check_lp_certificate(topo, coll, replace(cert, multipliers=beyond))
    zero = cert.multipliers + ((max(r for r, _ in cert.multipliers) + 1, Fraction(0)),)
    assert check_lp_certificate(topo, coll, replace(cert, multipliers=zero)) is not None


def test_dropping_a_multiplier_under_a_tight_column_is_refused(dgx1_case):
    """A row whose multiplier is all that keeps some column's coefficient at >= 0: dropping it
    leaves that column negative."""
    topo, coll, cert, _ = dgx1_case
    system = lpc._system(step_lp._model(topo, coll, cert.steps)[0])
    y = dict(cert.multipliers)
    numerators, _ = lpc._combination(system, y)
    for row, value in cert.multipliers:
        entries = system.rows == row
        if any(numerators.get(c, 0) == 0 and value * v > 0 for c, v in
               zip(system.cols[entries].tolist(), system.vals[entries].tolist())):
            dropped = tuple(pair for pair in cert.multipliers if pair[0] != row)
            assert "unbounded below" in check_lp_certificate(topo, coll, replace(cert, multipliers=dropped))
            return
    pytest.fail("no row under a tight column")


def test_a_json_round_trip_keeps_the_certificate(dgx1_case):
    topo, coll, cert, _ = dgx1_case
    text = json.dumps(cert.to_dict())
    back = LpCertificate.from_dict(json.loads(text))
    assert back == cert and check_lp_certificate(topo, coll, back) is None
    assert all(isinstance(v, str) and "/" in v for _, v in cert.to_dict()["multipliers"])
    reach = split_certificate(*_setup("torus:4x4", "alltoall", 1), (1, 1, 1))
    assert LpCertificate.from_dict(json.loads(json.dumps(reach.to_dict()))) == reach


@pytest.mark.parametrize("damage", [
    lambda d: {**d, "format": "other"},
    lambda d: {k: v for k, v in d.items() if k != "digest"},
    lambda d: {**d, "digest": "xyz"},
    lambda d: {**d, "multipliers": [[0, "0.5"]]},
    lambda d: {**d, "multipliers": [[0, "1/0"]]},
    lambda d: {**d, "multipliers": [[0]]},
    lambda d: {**d, "split": [1.5, 2]},
    lambda d: {**d, "steps": True},
    lambda d: {**d, "unreachable": [1]},
])
def test_malformed_dicts_are_refused(dgx1_case, damage):
    with pytest.raises(ValueError):
        LpCertificate.from_dict(damage(dgx1_case[2].to_dict()))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=10**6), st.sampled_from(["drop", "scale", "add"]),
                          st.fractions(min_value=-4, max_value=4, max_denominator=8)), min_size=1, max_size=4))
def test_the_checker_agrees_with_a_naive_exact_check_on_edited_certificates(dgx1_case, edits):
    """Random edits to a valid certificate (some keep it valid, e.g. scaling every
    multiplier): the checker's verdict is the naive check's."""
    topo, coll, cert, feasible = dgx1_case
    system = lpc._system(step_lp._model(topo, coll, cert.steps)[0])
    y = dict(cert.multipliers)
    for where, kind, amount in edits:
        row = where % system.row_count
        if kind == "drop":
            y.pop(row, None)
        elif kind == "scale":
            y = {r: v * amount for r, v in y.items()}
        else:
            y[row] = y.get(row, Fraction(0)) + amount
    edited = replace(cert, multipliers=tuple(sorted((r, v) for r, v in y.items() if v != 0)))
    assert (check_lp_certificate(topo, coll, edited) is None) == _naive_accepts(topo, coll, edited)
    assert check_lp_certificate(topo, coll, replace(edited, split=feasible)) is not None


@pytest.mark.parametrize("noise", [1e-9, 1e-7])
def test_the_repair_mends_noisy_duals(dgx1_case, noise):
    """Duals off by float noise (every row, signs and columns broken): clipped and mended,
    they still make a certificate the checker accepts."""
    topo, coll, cert, _ = dgx1_case
    relax, scale = step_lp._model(topo, coll, cert.steps)
    system = lpc._system(relax)
    duals = lpc._load_duals(relax, cert.split, scale)
    z = -duals + np.random.default_rng(7).normal(0.0, noise, len(duals))
    lower, upper = system.float_bounds(cert.split, scale)
    assert (z[np.isinf(lower)] < 0).any()  # the noise broke some signs
    multipliers = lpc._repair(system, z, cert.split, scale)
    assert multipliers is not None
    mended = replace(cert, multipliers=multipliers)
    assert check_lp_certificate(topo, coll, mended) is None and _naive_accepts(topo, coll, mended)


def _toy(col_upper: float) -> lpc._System:
    """One column x in [0, col_upper], one row x >= 2."""
    ints = np.zeros(1, dtype=np.int64)
    return lpc._System(1, 1, ints, ints, np.ones(1), np.array([2.0]), np.array([np.inf]), np.zeros(0),
                       np.zeros(0, dtype=np.int64), np.zeros(1), np.array([col_upper]))


def test_the_farkas_rule_uses_finite_column_upper_bounds():
    claim = LpCertificate(1, (1,), 1, "0" * 64, ((0, Fraction(-1)),))
    assert lpc._farkas_failure(_toy(1.0), claim) is None  # x <= 1 and x >= 2
    assert "no contradiction" in lpc._farkas_failure(_toy(2.0), claim)  # x = 2 fits
    assert "unbounded below" in lpc._farkas_failure(_toy(np.inf), claim)
    assert "sign" in lpc._farkas_failure(_toy(1.0), replace(claim, multipliers=((0, Fraction(1)),)))


def test_no_certificate_where_the_relaxation_does_not_apply():
    topo = resolve_topology("dgx1")
    allreduce = make_collective("allreduce", topo.ranks, chunks=1)
    assert split_certificate(topo, allreduce, (1, 1)) is None
    assert split_certificate(topo, make_collective("allgather", topo.ranks, chunks=1), ()) is None
