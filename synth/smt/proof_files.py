"""Certificates on disk, and ``synth check-proof``: every infeasible budget of a pareto folder,
checked again from its files.

Layout beside frontier.json (``synth pareto --certify -o DIR``):
  certificates/COLL.sS-rR-cC.json   one budget: its parts (a ``synth.certificate`` v1 document)
  certificates/COLL.sS-rR-cC.pI.drat.gz   part I's DRAT proof (text)
  certificates/formulas/SHA.cnf.gz        a refuted formula (DIMACS, without the assumptions)
frontier.json's attempts name their certificate (``certificate``).

The check (``check_folder``) takes nothing on trust: each INFEASIBLE attempt must name a
certificate; each formula file must hash to what the part says; the encoding it names is
rebuilt and must give that very formula; the assumptions must be exactly the ones that fix
the part's split (or the budget's total); the DRAT proof must refute formula + assumptions
(``synth.smt.sat.proofs``); an LP part's Farkas certificate is checked in exact rationals; and the
parts together must cover every split of the budget's rounds over its steps.
"""

from __future__ import annotations

import gzip
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from synth.core.errors import InputError
from synth.core.io import dumps, read_bytes, read_json, write_json_atomic, write_text_atomic
from synth.core.topology import Topology
from synth.smt.certificates import BudgetCertificate, EncodingKey, LpRefutation
from synth.smt.sat.formula import with_units

FORMAT = "synth.certificate"
VERSION = 1


# ------------------------------------------------------------------------------------ writing

def write_certificates(folder: str | Path, topology: Topology, attempts) -> int:
    """Write the certificate of every attempt that has one; how many were written."""
    from synth.core.io import certificate_file_name

    folder = Path(folder)
    written = 0
    for attempt in attempts:
        cert = getattr(attempt, "certificate", None)
        if cert is None:
            continue
        name = certificate_file_name(cert.collective, cert.steps, cert.rounds, cert.chunks, cert.direct)
        path = folder / name
        (path.parent / "formulas").mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, _document(cert, topology, path))
        written += 1
    return written


def _document(cert: BudgetCertificate, topology: Topology, path: Path) -> dict:
    parts = [_part_entry(part, index, path) for index, part in enumerate(cert.parts)]
    return {"format": FORMAT, "version": VERSION, "topology": topology.to_dict(), "collective": cert.collective,
            "root": cert.root, "direct": cert.direct, "steps": cert.steps, "rounds": cert.rounds,
            "chunks": cert.chunks, "parts": parts}


def _part_entry(part, index: int, path: Path) -> dict:
    if isinstance(part, LpRefutation):
        return {"kind": "lp", "split": list(part.split), "certificate": part.certificate.to_dict()}
    stem = path.name.removesuffix(".json")
    proof_name = f"{stem}.p{index}.drat.gz"
    write_text_atomic(path.parent / proof_name, part.proof.decode("ascii"))
    digest = part.formula
    formula_name = f"formulas/{digest}.cnf.gz"
    if not (path.parent / formula_name).exists():
        write_text_atomic(path.parent / formula_name, part.cnf.decode("ascii"))
    return {"kind": "drat", "split": None if part.split is None else list(part.split), "engine": part.engine,
            "encoding": part.encoding.to_dict(), "assumptions": list(part.assumptions), "formula": digest,
            "cnf": formula_name, "proof": proof_name}


# ------------------------------------------------------------------------------------ checking

@dataclass(frozen=True)
class Verdict:
    """One certificate's check: ``problem`` None when accepted."""

    name: str
    problem: str | None
    drat_parts: int
    lp_parts: int
    seconds: float


def check_folder(folder: str | Path) -> list[Verdict]:
    """Check every certificate a pareto folder's frontier.json names, and that every INFEASIBLE
    attempt names one. InputError when the folder is not a pareto folder."""
    folder = Path(folder)
    doc = read_json(folder / "frontier.json")
    attempts = doc.get("attempts") if isinstance(doc, dict) else None
    if not isinstance(attempts, list):
        raise InputError(f"{folder / 'frontier.json'}: no 'attempts' list (not written by synth pareto)")
    verdicts, seen = [], set()
    rebuilt = _Rebuilt()
    for entry in attempts:
        if not isinstance(entry, dict) or entry.get("status") != "infeasible":
            continue
        name = entry.get("certificate")
        label = f"(S={entry.get('steps')}, R={entry.get('rounds')}, C={entry.get('chunks')})"
        if not isinstance(name, str):
            verdicts.append(Verdict(label, "infeasible attempt without a certificate", 0, 0, 0.0))
            continue
        if name in seen:
            continue
        seen.add(name)
        verdicts.append(_check_file(folder, name, rebuilt))
    return verdicts


def _check_file(folder: Path, name: str, rebuilt: _Rebuilt) -> Verdict:
    started = time.perf_counter()
    path = folder / name
    kinds: list = []
    try:
        doc = read_json(path)
        cert, topology = _read(doc, str(path))
        kinds = [part.get("kind") if isinstance(part, dict) else None for part in cert["parts"]]
        problem = _check(cert, topology, path.parent, rebuilt)
    except InputError as error:
        problem = str(error)
    return Verdict(name, problem, kinds.count("drat"), kinds.count("lp"), time.perf_counter() - started)


def _read(doc, where: str) -> tuple[dict, Topology]:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise InputError(f"{where}: expected format '{FORMAT}' version {VERSION}")
    for key in ("collective", "steps", "rounds", "chunks", "parts", "topology"):
        if key not in doc:
            raise InputError(f"{where}: missing '{key}'")
    if not isinstance(doc["parts"], list) or not doc["parts"]:
        raise InputError(f"{where}: 'parts' must be a non-empty list")
    return doc, Topology.from_dict(doc["topology"], f"{where}: topology")


def _check(cert: dict, topology: Topology, folder: Path, rebuilt: _Rebuilt) -> str | None:
    """None when every part holds and the parts cover every split; else the first problem."""
    from synth.bounds.step_lp import compositions

    steps, rounds = int(cert["steps"]), int(cert["rounds"])
    splits = []
    for index, part in enumerate(cert["parts"]):
        problem = _check_part(cert, topology, part, folder, rebuilt)
        if problem is not None:
            return f"part {index}: {problem}"
        splits.append(None if part.get("split") is None else tuple(part["split"]))
    if splits == [None]:
        return None
    every = compositions(rounds, steps)
    wanted = set() if every is None else set(map(tuple, every.tolist()))
    if None in splits or set(splits) != wanted:
        return f"the parts do not cover every split of {rounds} rounds over {steps} steps exactly"
    return None


def _check_part(cert: dict, topology: Topology, part, folder: Path, rebuilt: _Rebuilt) -> str | None:
    if not isinstance(part, dict) or part.get("kind") not in ("drat", "lp"):
        return "a part is a drat or lp refutation"
    split = part.get("split")
    if split is not None and (not isinstance(split, list) or len(split) != int(cert["steps"])
                              or sum(split) != int(cert["rounds"]) or min(split) < 1):
        return f"split {split} is not a split of {cert['rounds']} rounds over {cert['steps']} steps"
    if part["kind"] == "lp":
        return _check_lp(cert, topology, part, rebuilt)
    return _check_drat_part(cert, topology, part, folder, rebuilt)


def _check_lp(cert: dict, topology: Topology, part: dict, rebuilt: _Rebuilt) -> str | None:
    from synth.bounds.lp_certificate import LpCertificate, check_lp_certificate

    session = rebuilt.session(topology, cert, ())
    try:
        certificate = LpCertificate.from_dict(part["certificate"])
    except (KeyError, TypeError, ValueError) as error:
        return f"unreadable LP certificate: {error}"
    if tuple(certificate.split) != tuple(part["split"]):
        return "the LP certificate is about another split"
    return check_lp_certificate(session.topology, session.collective(int(cert["chunks"])), certificate)


def _check_drat_part(cert: dict, topology: Topology, part: dict, folder: Path, rebuilt: _Rebuilt) -> str | None:
    from synth.smt.sat.proofs import check_drat

    cnf = _gunzip(folder / str(part.get("cnf")))
    if hashlib.sha256(cnf).hexdigest() != part.get("formula"):
        return "the formula file does not hash to the part's formula"
    key = EncodingKey.from_dict(part["encoding"])
    inst = rebuilt.instance(topology, cert, key)
    if inst.formula.digest() != part["formula"]:
        return "the encoding it names does not give the refuted formula"
    expected = _assumptions(inst, int(cert["rounds"]), part.get("split"))
    if expected is None or list(part.get("assumptions", [])) != expected:
        return "its assumptions are not the ones that fix its split"
    try:
        refuted = with_units(cnf, expected)
    except ValueError as error:
        return f"the formula file: {error}"
    return check_drat(refuted, _gunzip(folder / str(part.get("proof"))))


def _assumptions(inst, rounds: int, split) -> list[int] | None:
    """The literals a budget's check assumes: the total's selector, and each step's rounds."""
    if rounds not in inst._selectors:
        return None
    literals = [inst.total_literal(rounds)]
    for step, r in enumerate(split or (), 1):
        more = inst.step_rounds_literals(step, r)
        if more is None:
            return None
        literals += more
    return literals


def _gunzip(path: Path) -> bytes:
    try:
        return gzip.decompress(read_bytes(path))
    except (gzip.BadGzipFile, EOFError, OSError) as error:
        raise InputError(f"{path}: not a gzip file: {error}") from None


class _Rebuilt:
    """Sessions and encodings rebuilt for checking, reused while their keys allow (selectors
    recorded later extend those recorded earlier)."""

    def __init__(self) -> None:
        self._sessions: dict = {}
        self._instances: dict = {}

    def session(self, topology: Topology, cert: dict, options: tuple):
        from synth.smt.encoding import SmtOptions
        from synth.smt.session import SmtSession

        key = (dumps(topology.to_dict()), cert["collective"], cert.get("root"), bool(cert.get("direct")), options)
        if key not in self._sessions:
            self._sessions[key] = SmtSession(topology, cert["collective"], cert.get("root"),
                                             SmtOptions(**dict(options)), direct=bool(cert.get("direct")))
        return self._sessions[key]

    def instance(self, topology: Topology, cert: dict, key: EncodingKey):
        from synth.smt.direct_allreduce import DirectAllreduceInstance
        from synth.smt.encoding import SmtInstance, SmtOptions

        session = self.session(topology, cert, key.options)
        ident = (id(session), key.steps, key.chunks, key.max_rounds, key.kind)
        inst = self._instances.get(ident)
        if inst is None or tuple(inst._selectors) != key.selectors[:len(inst._selectors)]:
            collective = session.collective(int(cert["chunks"]))
            kind = DirectAllreduceInstance if key.kind == "direct" else SmtInstance
            inst = kind(session.topology, collective, key.steps, key.max_rounds, SmtOptions(**dict(key.options)),
                        dual=session.combining)
            self._instances[ident] = inst
        for rounds in key.selectors:
            inst.total_literal(rounds)
        return inst
