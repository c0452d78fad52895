"""What a newcomer is promised about installing and the layout: the wheel's package list matches
the tree, the library machines ship inside it, CI runs the README's own command, and solver
imports stay inside their packages (DESIGN.md principle 3)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYNTH = ROOT / "synth"


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_wheel_package_list_is_the_tree():
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    tree = {".".join(p.parent.relative_to(ROOT).parts) for p in SYNTH.rglob("__init__.py")}
    assert listed == tree | {"synth.topologies"}


def test_library_machines_live_at_the_top_level():
    setuptools = _pyproject()["tool"]["setuptools"]
    assert setuptools["package-dir"]["synth.topologies"] == "topologies"
    assert sorted(p.name for p in (ROOT / "topologies").glob("*.json"))
    assert not (SYNTH / "topologies").exists()


def test_top_level_modules_are_the_documented_ones():
    assert sorted(p.name for p in SYNTH.glob("*.py")) == ["__init__.py", "__main__.py", "cost.py", "synthesizers.py",
                                                          "verify.py"]


def _readme_block(after: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(re.escape(after) + r"\s*```sh\n(.*?)\n```", text, re.S)
    assert match, f"README has no command block after {after!r}"
    return match.group(1).strip()


def test_ci_runs_the_readme_test_command_verbatim():
    command = _readme_block("Install and pass the tests:")
    lines = [l.strip() for l in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert command in lines
    installs = [l for l in lines if "pip install" in l]
    assert installs == [command], "CI must install nothing the README does not say"


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


SOLVER_HOMES = [("z3", ("smt",)), ("pysat", ("smt",)), ("dratify", ("smt",)), ("pulp", ("milp", "bounds")),
                ("highspy", ("milp", "bounds"))]  # DESIGN principle 3: a solver stays in its package


@pytest.mark.parametrize("solver, home", SOLVER_HOMES)
def test_solver_imports_stay_in_their_package(solver, home):
    offenders = [str(p.relative_to(ROOT)) for p in sorted(SYNTH.rglob("*.py"))
                 if solver in _imported_modules(p) and p.relative_to(SYNTH).parts[0] not in home]
    assert offenders == []


def test_verify_imports_core_only():
    synth_imports = {node.module for node in ast.walk(ast.parse((SYNTH / "verify.py").read_text(encoding="utf-8")))
                     if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("synth")}
    assert synth_imports and all(m.startswith("synth.core.") for m in synth_imports)


@pytest.mark.slow
def test_built_wheel_ships_the_library_and_schemas(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True)
    (wheel,) = tmp_path.glob("synth-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for machine in (ROOT / "topologies").glob("*.json"):
        assert f"synth/topologies/{machine.name}" in names
    assert "synth/schemas/program.schema.json" in names
    assert "synth/smt/encoding.py" in names and "synth/cli/main.py" in names
