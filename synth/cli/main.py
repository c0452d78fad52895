"""``synth``: the argument parser of every command group, and ``main(argv) -> exit code``.

Each group lives in its own module (model, evaluate, synthesis, sketch, report, export, check)
and adds its subcommands with ``add_*_parser(s)(sub)``. Exit codes: see synth.core.errors
(0 ok, 1 internal error, 2 bad input, 3 infeasible, 4 invalid schedule, 5 unknown/timeout,
130 interrupted).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from synth import __version__
from synth.cli.common import Parser
from synth.core.errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, SynthError


def build_parser() -> argparse.ArgumentParser:
    from synth.cli.check import add_check_parser
    from synth.cli.evaluate import add_evaluate_parsers
    from synth.cli.export import add_export_parser
    from synth.cli.measure import add_measure_parsers
    from synth.cli.model import add_model_parsers
    from synth.cli.proofs import add_check_proof_parser
    from synth.cli.report import add_report_parser
    from synth.cli.routing import add_routing_parser
    from synth.cli.run import add_run_parser
    from synth.cli.sketch import add_sketch_parser
    from synth.cli.synthesis import add_synthesis_parsers
    from synth.cli.tune import add_tune_parser

    parser = Parser(prog="synth", description="Collective-communication schedule synthesizer.")
    parser.add_argument("--version", action="version", version=f"synth {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    add_model_parsers(sub)
    add_evaluate_parsers(sub)
    add_synthesis_parsers(sub)
    add_sketch_parser(sub)
    add_routing_parser(sub)
    add_report_parser(sub)
    add_export_parser(sub)
    add_tune_parser(sub)
    add_check_parser(sub)
    add_check_proof_parser(sub)
    add_measure_parsers(sub)
    add_run_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        func = getattr(args, "func", None)
        if func is None:
            parser.print_help(sys.stderr)
            return EXIT_INPUT
        return func(args)
    except SynthError as exc:
        print(f"synth: {exc.verdict}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("synth: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug in synth: one line, traceback only on request
        if os.environ.get("SYNTH_DEBUG"):
            raise
        print(f"synth: internal error: {type(exc).__name__}: {exc} (set SYNTH_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL
