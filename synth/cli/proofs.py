"""``synth check-proof DIR``: re-check every certificate of infeasibility a pareto folder holds."""

from __future__ import annotations

import sys

from synth.core.errors import EXIT_INVALID


def add_check_proof_parser(sub) -> None:
    p = sub.add_parser("check-proof", help="re-check the certificates of infeasibility a 'synth pareto --certify -o "
                                           "DIR' folder holds (DRAT proofs, exact LP certificates)")
    p.add_argument("folder", help="a pareto folder (frontier.json, certificates/)")
    p.set_defaults(func=cmd_check_proof)


def cmd_check_proof(args) -> int:
    """One line per certificate; exit 0 when all hold, 4 when one does not, 2 when unreadable."""
    from synth.smt.proof_files import check_folder
    from synth.smt.sat.proofs import checker_name

    verdicts = check_folder(args.folder)
    for verdict in verdicts:
        parts = f"{verdict.drat_parts} DRAT proof(s), {verdict.lp_parts} LP certificate(s)"
        if verdict.problem is None:
            print(f"ok        {verdict.name}: {parts}, {verdict.seconds:.2f} s")
        else:
            print(f"REJECTED  {verdict.name}: {verdict.problem}")
    rejected = sum(v.problem is not None for v in verdicts)
    print(f"{len(verdicts) - rejected} of {len(verdicts)} certificate(s) hold (checker: {checker_name()})")
    if rejected:
        print(f"synth: error: {rejected} certificate(s) rejected", file=sys.stderr)
        return EXIT_INVALID
    return 0
