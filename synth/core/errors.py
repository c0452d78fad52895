"""Error hierarchy. Every error a user can cause is a SynthError with an exit code.

Exit codes (documented in README.md):
  0  success
  1  internal error (a bug in synth)
  2  bad input: unreadable/malformed file, unknown name, impossible request
  3  infeasible: a budget was proven too small
  4  invalid schedule (the verifier found violations)
  5  unknown: a solver ran out of time before proving anything
  130 interrupted (Ctrl-C)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_INVALID = 4
EXIT_UNKNOWN = 5
EXIT_INTERRUPTED = 130


class SynthError(Exception):
    """Base class: a problem the user can fix; printed as one line, ``synth: VERDICT: message``."""

    exit_code = EXIT_INPUT
    verdict = "error"


class InputError(SynthError):
    """Malformed, unreadable or inconsistent input (files, names, arguments)."""

    exit_code = EXIT_INPUT


class TopologyError(InputError):
    """A topology that violates the synth.topology rules."""


class CollectiveError(InputError):
    """A collective that is malformed or impossible on the topology."""


class ScheduleFormatError(InputError):
    """A schedule document that cannot be read as synth.schedule v1."""


class InvalidScheduleError(SynthError):
    """A schedule that parses but fails verification."""

    exit_code = EXIT_INVALID

    def __init__(self, message: str, violations=()):
        super().__init__(message)
        self.violations = tuple(violations)


class InfeasibleError(SynthError):
    """A budget (steps, rounds, chunks) proven too small."""

    exit_code = EXIT_INFEASIBLE
    verdict = "infeasible"


class UnknownResultError(SynthError):
    """A solver timed out: nothing was proven either way."""

    exit_code = EXIT_UNKNOWN
    verdict = "unknown"


class SolverError(SynthError):
    """A solver failed (neither an answer nor a timeout)."""

    exit_code = EXIT_INTERNAL


class SynthesisBug(SynthError):
    """A synthesizer, stage or baseline built a schedule that the verifier rejects (a bug in synth)."""

    exit_code = EXIT_INTERNAL
