"""What a newcomer is promised about the README and docs/: the README is short, its first screen
has the install + main-job block and the test command, every relative link (and anchor) in the
README and docs/*.md resolves, the README's Python example runs, and the "your own machine" block
is the same in the README and docs/import.md."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces -> '-'."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in FENCE.sub("", _text(path)).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = _slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(path: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(_prose(_text(path)))]


def _sh_block(text: str, after: str) -> str:
    match = re.search(re.escape(after) + r".*?```sh\n(.*?)\n```", text, re.S)
    assert match, f"no sh block after {after!r}"
    return match.group(1).strip()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / unquote(file_part)).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif not dest.is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert broken == []


def test_every_docs_page_is_linked_from_the_readme_or_the_index():
    linked = set()
    for page in (README, ROOT / "docs" / "index.md"):
        linked |= {(page.parent / t.partition("#")[0]).resolve() for t in _links(page) if t.partition("#")[0]}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


def test_readme_is_short():
    assert len(_text(README).splitlines()) <= 200


def test_first_screen_has_install_main_job_and_test_command():
    first = "\n".join(_text(README).splitlines()[:60])
    main_job = _sh_block(first, "Install and run the main job")
    assert main_job.splitlines()[0].startswith("python3 -m venv .venv") and "pip install ." in main_job
    assert "synth pareto dgx1 allgather" in main_job
    test_command = _sh_block(first, "Install and pass the tests:")
    assert "pip install" in test_command and test_command.endswith("python -m pytest")
    for concept in ("topology", "collective", "schedule", "verifier", "cost model", "lower bounds",
                    "`smt`", "`milp`", "`greedy`"):
        assert concept in first.lower(), concept


def test_the_machine_block_is_the_same_in_readme_and_docs():
    assert _sh_block(_text(README), "## Your own machine") == _sh_block(
        _text(ROOT / "docs" / "import.md"), "`nvidia-smi topo -m` or `rocm-smi --showtopo` here")


def test_readme_python_example_runs(monkeypatch, capsys):
    (code,) = re.findall(r"```python\n(.*?)```", _text(README), re.S)
    monkeypatch.chdir(ROOT)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    assert "nccl_ring:" in out and "smt (3,7,6):" in out


def test_slugs_follow_github():
    assert _slug("Your own machine") == "your-own-machine"
    assert _slug("Commands, by stage") == "commands-by-stage"
    assert _slug("Lowering and MSCCL XML: `synth export`, `synth check`") == (
        "lowering-and-msccl-xml-synth-export-synth-check")
