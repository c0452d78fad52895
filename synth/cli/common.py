"""What the command modules share: the argparse class with one-line errors, resolving a topology
or collective from its spec, writing a document to a file or stdout, progress lines."""

from __future__ import annotations

import argparse
import sys

from synth.core.errors import InputError


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) instead of usage dumps."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        raise InputError(f"{message} (see '{self.prog} --help')")


def topology_of(spec: str):
    from synth.core.library import resolve_topology

    return resolve_topology(spec)


def collective_of(spec: str, ranks: int, root: int | None, chunks: int):
    from synth.core.collectives import make_collective

    return make_collective(spec, ranks, root=root, chunks=chunks)


def write_or_print(doc, output: str | None) -> None:
    from synth.core.io import dumps, write_text_atomic

    if output in (None, "-"):
        sys.stdout.write(dumps(doc))
    else:
        write_text_atomic(output, dumps(doc))
        print(f"wrote {output}", file=sys.stderr)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def add_problem(p: argparse.ArgumentParser) -> None:
    p.add_argument("topology")
    p.add_argument("collective")
    p.add_argument("--root", type=int, help="root rank of a rooted collective (default 0)")
    p.add_argument("--time-limit", type=float, default=120.0, help="seconds per solver attempt (default 120)")


# synth.smt.sat.CHOICES, spelt out so that building the parser loads no solver stage
# (tests/smt/test_certify.py keeps the two equal)
SAT_CHOICES = ("auto", "z3", "cadical", "kissat")


def add_sat_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sat", choices=SAT_CHOICES, default="auto",
                   help="smt: the SAT engine under the encoding (default auto: the fastest installed one, as "
                        "measured in docs/smt.md)")


def smt_options(args, certify: bool = False, portfolio: int = 1):
    """The SmtOptions of ``--sat`` (its engine resolved; one line when it is not installed),
    ``--certify`` and a portfolio of that many racing engines."""
    from synth.smt.encoding import SmtOptions
    from synth.smt.sat.choice import resolve_sat

    sat = getattr(args, "sat", "auto")
    resolve_sat(sat, certify)  # unknown, not installed or unable to certify: one line now
    return SmtOptions(sat=sat, certify=certify, portfolio=portfolio)


def add_coll_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=int, help="root rank of a rooted collective (default 0)")
    p.add_argument("--chunks", type=int, default=1, help="chunks per rank (default 1)")


CALIBRATION_HELP = ("cost under a runtime's terms: a synth.calibration file (synth calibrate), or 'default' for the "
                    "built-in parameters fitted to the shared nccl-tests runs (docs/cost-model.md)")


def add_calibration_option(p: argparse.ArgumentParser, help_text: str = CALIBRATION_HELP) -> None:
    p.add_argument("--calibration", metavar="CAL", help=help_text)


def terms_of(args, topology=None):
    """The RuntimeTerms of ``--calibration`` on ``topology`` (its GPU generation's defaults fill
    what the calibration leaves unset), for calls replayed from a CUDA graph where ``--launch
    graph`` says so; None without it: the contract model."""
    from synth.measure.calibration import load_terms

    graph = getattr(args, "launch", None) == "graph"
    return load_terms(getattr(args, "calibration", None), getattr(topology, "arch", None), graph)


def protocol_choice(text: str) -> str:
    """argparse type for ``synth cost --protocol``: a cost-model protocol name in any case
    (ideal, simple, ll128, ll, best), returned in its canonical lower-case spelling."""
    from synth.cost import PROTOCOL_CHOICES

    name = text.strip().lower()
    if name not in PROTOCOL_CHOICES:
        raise argparse.ArgumentTypeError(f"unknown protocol {text!r}; known: {', '.join(PROTOCOL_CHOICES)} (any case)")
    return name
