"""Start-up (issue 26, item 8): a command imports only the stages it runs. Building the parser
(every command, ``synth --version`` included) loads no numpy, networkx, pulp, z3, matplotlib, report
runner, bounds or MSCCL checker. Checked on the modules a fresh interpreter has imported, which is
deterministic, never on wall-clock time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numpy", "networkx", "pulp", "z3", "matplotlib", "scipy", "highspy", "torch")
# synth's own heavy stages: the report runner, bounds (networkx, LP), the MSCCL checker, the solvers.
# (synth.lower.lowering is still loaded by ``synth export``'s parser for CHANNEL_POLICIES: stdlib only.)
STAGES = ("synth.report", "synth.bounds", "synth.msccl.load_rules", "synth.program.replay", "synth.smt",
          "synth.milp", "synth.greedy", "synth.runtime", "synth.measure", "synth.verify", "synth.baselines")


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def _offending(modules: set[str], names) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


# What building the parser may import of synth (issue 43, item 2): the CLI's modules, the error
# types, and the leaf modules that only name the choices a parser offers. Anything else is a stage
# that a command loads when it runs.
PARSER_MODULES = {"synth", "synth.__main__", "synth.cli", "synth.core", "synth.core.errors", "synth.exporters",
                  "synth.lower", "synth.lower.policies", "synth.msccl", "synth.msccl.runtimes", "synth.program",
                  "synth.program.ir", "synth.synthesizers"}


def test_version_imports_only_the_parser_s_modules():
    code = ("import contextlib, io\nfrom synth.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(['--version'])\n    except SystemExit:\n        pass\n")
    loaded = {m for m in _loaded_after(code) if m == "synth" or m.startswith("synth.")}
    assert sorted(m for m in loaded if not m.startswith("synth.cli.") and m not in PARSER_MODULES) == []


def test_importing_the_cli_loads_nothing_heavy():
    modules = _loaded_after("import synth.cli.main")
    assert _offending(modules, (*HEAVY, *STAGES, "synth.msccl")) == []


@pytest.mark.parametrize("argv", [["--version"], ["topo", "list"], ["coll", "list"]],
                         ids=lambda argv: " ".join(argv))
def test_light_commands_load_no_heavy_stage(argv):
    code = ("import contextlib, io\nfrom synth.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    try:\n"
            f"        code = main({argv!r})\n"
            "    except SystemExit as exc:\n"
            "        code = exc.code\n"
            "assert code in (0, None), code\n")
    assert _offending(_loaded_after(code), (*HEAVY, *STAGES)) == []


def test_building_the_parser_loads_no_heavy_stage():
    modules = _loaded_after("from synth.cli.main import build_parser\nbuild_parser()")
    assert _offending(modules, (*HEAVY, *STAGES)) == []


def test_report_sizes_default_is_the_runners():
    """``--sizes`` is resolved when a report runs (the runner is heavy); its help still names the
    runner's default."""
    from synth.cli.main import build_parser
    from synth.cli.report import DEFAULT_SIZES_TEXT
    from synth.report.runner import DEFAULT_SIZES

    assert DEFAULT_SIZES_TEXT == DEFAULT_SIZES
    parser = build_parser()
    assert parser.parse_args(["report", "dgx1", "allgather"]).sizes is None
    assert parser.parse_args(["report", "dgx1", "allgather", "--sizes", "1K..1M"]).sizes == "1K..1M"


def test_check_keeps_its_names():
    """synth.cli.check imports its checker and the profiles on use; the runtimes it offers are the
    profiles', in their order, and the names it exports still resolve."""
    import synth.cli.check as check
    from synth.msccl.load_rules import PROFILES
    from synth.program.deps import Problem

    assert check.RUNTIMES == tuple(PROFILES)
    assert check.Problem is Problem
    for name in check.__all__:
        assert getattr(check, name) is not None
