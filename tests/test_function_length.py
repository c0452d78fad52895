"""No function in synth/ is longer than one screen (issue 26: named state and steps instead)."""

from __future__ import annotations

import ast
from pathlib import Path

SYNTH = Path(__file__).resolve().parents[1] / "synth"
MAX_LINES = 80


def long_functions(root: Path = SYNTH, limit: int = MAX_LINES) -> list[str]:
    """'path:line name (N lines)' for every function or method over ``limit`` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_over_80_lines():
    assert long_functions() == []


def test_the_check_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n")
    assert long_functions(tmp_path) == [f"{tmp_path.name}/m.py:1 f ({MAX_LINES + 1} lines)"]
