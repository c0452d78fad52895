"""Certified infeasibility: every INFEASIBLE of a certified search carries parts that refute
every split, each checked; ``synth check-proof`` accepts what ``synth pareto --certify``
writes and rejects every tampered certificate."""

from __future__ import annotations

import gzip
import json
import shutil
from fractions import Fraction
from pathlib import Path

import pytest

from synth.bounds.lp_certificate import check_lp_certificate
from synth.bounds.step_lp import compositions
from synth.cli.main import main
from synth.core.errors import InputError
from synth.core.library import resolve_topology
from synth.core.schedule import Status
from synth.smt.certificates import LpRefutation, SatRefutation
from synth.smt.encoding import SmtOptions
from synth.smt.sat.choice import resolve_sat
from synth.smt.sat.formula import with_units
from synth.smt.sat.proofs import check_drat
from synth.smt.session import SmtSession


@pytest.mark.parametrize("sat", ["cadical", "kissat"])
def test_a_certified_infeasible_budget_refutes_every_split(sat):
    session = SmtSession(resolve_topology("uring:4"), "allgather", None, SmtOptions(sat=sat, certify=True))
    for rounds in (3, 4, 5):
        result = session.solve(3, rounds, 2, time_limit=60)
        assert result.status == Status.INFEASIBLE
        certificate = result.details["certificate"]
        assert {part.split for part in certificate.parts} == set(map(tuple, compositions(rounds, 3).tolist()))
        for part in certificate.parts:
            if isinstance(part, SatRefutation):
                inst = session._instances[(3, 2)]
                assert part.engine == sat and part.cnf.startswith(b"p cnf")
                assert check_drat(with_units(part.cnf, part.assumptions), part.proof) is None
                assert inst.formula.num_vars >= max(abs(lit) for lit in part.assumptions)
            else:
                assert isinstance(part, LpRefutation)
                assert check_lp_certificate(session.topology, session.collective(2), part.certificate) is None
    assert session.solve(3, 6, 2, time_limit=60).status == Status.SOLVED


def test_certifying_needs_an_engine_that_writes_proofs():
    with pytest.raises(InputError, match="DRAT"):
        resolve_sat("z3", certify=True)
    assert resolve_sat("auto", certify=True) in ("cadical", "kissat")


@pytest.fixture(scope="module")
def certified(tmp_path_factory) -> Path:
    """line:4 broadcast up to 3 chunks: three infeasible budgets, DRAT proofs and LP certificates."""
    folder = tmp_path_factory.mktemp("certified") / "line4"
    assert main(["pareto", "line:4", "broadcast", "--max-chunks", "3", "--certify", "-o", str(folder)]) == 0
    return folder


def _copy(certified: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(certified, copy)
    return copy


def _certificate_with(folder: Path, kind: str) -> tuple[Path, dict]:
    for path in sorted((folder / "certificates").glob("*.json")):
        doc = json.loads(path.read_text())
        if any(part["kind"] == kind for part in doc["parts"]):
            return path, doc
    raise AssertionError(f"no certificate with a {kind} part")


def test_check_proof_accepts_what_pareto_certify_writes(certified, capsys):
    frontier = json.loads((certified / "frontier.json").read_text())
    infeasible = [a for a in frontier["attempts"] if a["status"] == "infeasible"]
    assert infeasible and all((certified / a["certificate"]).is_file() for a in infeasible)
    _certificate_with(certified, "drat")
    _certificate_with(certified, "lp")
    assert main(["check-proof", str(certified)]) == 0
    out = capsys.readouterr().out
    assert f"{len(infeasible)} of {len(infeasible)} certificate(s) hold" in out


def _rewrite_gz(path: Path, edit) -> None:
    path.write_bytes(gzip.compress(edit(gzip.decompress(path.read_bytes()))))


def test_a_proof_without_its_empty_clause_is_rejected(certified, tmp_path, capsys):
    folder = _copy(certified, tmp_path)
    path, doc = _certificate_with(folder, "drat")
    proof = next(part["proof"] for part in doc["parts"] if part["kind"] == "drat")

    def drop_empty_clause(text: bytes) -> bytes:
        lines = text.splitlines()
        return b"\n".join(line for line in lines if line.strip() != b"0") + b"\n"

    _rewrite_gz(path.parent / proof, drop_empty_clause)
    assert main(["check-proof", str(folder)]) == 4
    assert "empty clause" in capsys.readouterr().out


def test_a_formula_with_a_clause_deleted_is_rejected(certified, tmp_path, capsys):
    folder = _copy(certified, tmp_path)
    path, doc = _certificate_with(folder, "drat")
    cnf = next(part["cnf"] for part in doc["parts"] if part["kind"] == "drat")

    def drop_last_clause(text: bytes) -> bytes:
        header, *clauses = text.rstrip(b"\n").split(b"\n")
        fields = header.split()
        return b"p cnf %s %d\n" % (fields[2], int(fields[3]) - 1) + b"\n".join(clauses[:-1]) + b"\n"

    _rewrite_gz(path.parent / cnf, drop_last_clause)
    assert main(["check-proof", str(folder)]) == 4
    assert "does not hash" in capsys.readouterr().out


@pytest.mark.parametrize("tamper, words", [
    ("assumptions", "assumptions"), ("drop part", "cover every split"), ("split", "not a split"),
    ("lp multiplier", "combination"), ("no certificate", "without a certificate")])
def test_tampered_certificates_are_rejected(certified, tmp_path, capsys, tamper, words):
    folder = _copy(certified, tmp_path)
    if tamper == "no certificate":
        frontier = json.loads((folder / "frontier.json").read_text())
        next(a for a in frontier["attempts"] if a["status"] == "infeasible").pop("certificate")
        (folder / "frontier.json").write_text(json.dumps(frontier))
    else:
        path, doc = _certificate_with(folder, "lp" if tamper == "lp multiplier" else "drat")
        kind = "lp" if tamper == "lp multiplier" else "drat"
        index = next(i for i, part in enumerate(doc["parts"]) if part["kind"] == kind)
        part = doc["parts"][index]
        if tamper == "assumptions":
            part["assumptions"] = part["assumptions"][:-1]
        elif tamper == "drop part":
            doc["parts"].pop(index)
        elif tamper == "split":
            part["split"] = part["split"][:-1]
        else:
            row, value = part["certificate"]["multipliers"][0]  # same sign, 1000 times: Farkas fails
            scaled = Fraction(value) * 1000
            part["certificate"]["multipliers"][0] = [row, f"{scaled.numerator}/{scaled.denominator}"]
        path.write_text(json.dumps(doc))
    assert main(["check-proof", str(folder)]) == 4
    assert words in capsys.readouterr().out


def test_pareto_dgx1_allgather_certify_is_checked_again(tmp_path, capsys):
    folder = tmp_path / "dgx1"
    assert main(["pareto", "dgx1", "allgather", "--certify", "-o", str(folder)]) == 0
    frontier = json.loads((folder / "frontier.json").read_text())
    infeasible = [a for a in frontier["attempts"] if a["status"] == "infeasible"]
    assert infeasible and all("certificate" in a for a in infeasible)
    assert [(p["steps"], p["rounds"], p["chunks"]) for p in frontier["points"]] == [(2, 3, 2), (3, 7, 6)]
    assert main(["check-proof", str(folder)]) == 0


def test_check_proof_on_a_folder_that_is_not_a_pareto_folder(tmp_path, capsys):
    assert main(["check-proof", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("argv, words", [
    (["pareto", "ring:4", "allgather", "--sat", "z3", "--certify"], "writes no DRAT"),
    (["solve", "ring:4", "allgather", "--backend", "greedy", "--sat", "cadical"], "--sat applies"),
    (["pareto", "ring:4", "allgather", "--sat", "minisat"], "invalid choice"),
])
def test_bad_engine_choices_are_one_line_and_write_nothing(tmp_path, capsys, argv, words):
    folder = tmp_path / "out"
    assert main([*argv, "-o", str(folder)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
    assert not folder.exists()


@pytest.mark.parametrize("sat", ["z3", "cadical", "kissat"])
def test_solve_with_each_engine_gives_a_schedule_that_verifies(tmp_path, sat):
    from synth.verify import load_schedule, verify

    out = tmp_path / "s.json"
    assert main(["solve", "dgx1", "allgather", "--steps", "3", "--rounds", "7", "--chunks", "6", "--sat", sat,
                 "-o", str(out)]) == 0
    assert verify(load_schedule(out)) == []


def test_the_command_line_offers_every_engine():
    from synth.cli.common import SAT_CHOICES
    from synth.smt.sat import CHOICES

    assert SAT_CHOICES == CHOICES


@pytest.mark.parametrize("sat", ["z3", "auto"])
def test_a_portfolio_gives_the_serial_frontier_with_verified_schedules(tmp_path, sat):
    """--jobs 2 races z3 (or auto's pick) with CaDiCaL on every check: the same frontier as the
    serial walk, every schedule verified."""
    from synth.verify import load_schedule, verify

    folder = tmp_path / sat
    assert main(["pareto", "dgx1", "allgather", "--sat", sat, "--jobs", "2", "-o", str(folder)]) == 0
    frontier = json.loads((folder / "frontier.json").read_text())
    assert [(p["steps"], p["rounds"], p["chunks"]) for p in frontier["points"]] == [(2, 3, 2), (3, 7, 6)]
    schedules = sorted(folder.glob("*.schedule.json"))
    assert len(schedules) == 2 and all(verify(load_schedule(path)) == [] for path in schedules)
