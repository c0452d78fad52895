"""Running the CLI from a test: ``run(capsys, *argv)`` -> (exit code, stdout, stderr)."""

from __future__ import annotations

from synth.cli.main import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
