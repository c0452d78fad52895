"""The package import graph: which stage imports which (every import statement, lazy ones in
functions included), and no cycle between stages beyond the ones listed here with their reason."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

SYNTH = Path(__file__).resolve().parents[1] / "synth"

# Cycles still to break, each with what closes it (none now: schedule files are read and verified
# by synth.verify, which imports core; core never imports the verifier)
KNOWN_CYCLES: dict[frozenset, str] = {}


def stage_of(path: Path) -> str:
    """synth/<stage>/... or synth/<module>.py -> the stage's name ("synth" for the package itself)."""
    parts = path.relative_to(SYNTH).with_suffix("").parts
    return "synth" if parts[0] == "__init__" else parts[0]


def imported_stages(path: Path) -> set[str]:
    """The stages a module imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "synth" else [f"synth.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(name.split(".")[1] for name in names if name.startswith("synth.") and len(name.split(".")) > 1)
    return found


def import_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for path in sorted(SYNTH.rglob("*.py")):
        source = stage_of(path)
        graph.add_node(source)
        graph.add_edges_from((source, stage) for stage in imported_stages(path) if stage != source)
    return graph


def test_no_import_cycle_between_stages_beyond_the_known_ones():
    graph = import_graph()
    for pair in KNOWN_CYCLES:
        graph.remove_edges_from([(a, b) for a in pair for b in pair if a != b and graph.has_edge(a, b)][:1])
    cycles = list(nx.simple_cycles(graph))
    assert cycles == [], f"import cycles between stages: {cycles}"


def test_the_known_cycles_are_still_there():
    """When one is broken, take it off KNOWN_CYCLES (so it cannot come back unnoticed)."""
    graph = import_graph()
    for pair in KNOWN_CYCLES:
        a, b = sorted(pair)
        assert graph.has_edge(a, b) and graph.has_edge(b, a), f"{a} <-> {b} is broken: remove it from KNOWN_CYCLES"


def test_the_graph_sees_lazy_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from synth.bounds.lp import solve_lp\n    import synth.core.io\n")
    assert imported_stages(module) == {"bounds", "core"}
