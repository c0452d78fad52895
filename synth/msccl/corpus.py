"""Agreement of ``synth check`` with the corpus's reference verdicts (shared/corpus/SOURCES.md, REPLAY.md).

``corpus_agreement()`` checks every MSCCL XML file of the corpus on every profile and replays it,
and compares: per profile, the reference checker's "ok" / not-ok column; per file, the reference
replay's correct / INCORRECT / not judged; and for every NEGATIVE EXAMPLE, whether the defect its
description names is among our problems. ``format_agreement()`` prints the table.
Used by tests/test_corpus_check.py and by notes/benchmark scripts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from synth.msccl.load_rules import PROFILES, check_profile, ok
from synth.msccl.xml_reader import read_xml_file
from synth.program.replay import replay

# words of a NEGATIVE EXAMPLE description -> the problem code that names that defect
NEGATIVE_DEFECTS = (
    ("deadlock", "deadlock"),
    ("share one (peer,channel)", "shared-fifo"),
    ("overflows the int8", "dep-id-overflow"),
    ('chan="-1"', "channel"),
)
REPLAY_WORDS = {"correct": True, "INCORRECT": False, "not judged": None}


@dataclass(frozen=True)
class FileResult:
    """One corpus file: reference verdicts beside ours."""

    path: str
    expected: Mapping[str, bool]  # profile -> the reference checker says "ok"
    expected_text: Mapping[str, str]
    found: Mapping[str, bool]
    problems: Mapping[str, tuple[str, ...]]  # profile -> our non-note problems
    replay_expected: bool | None
    replay_found: bool | None
    replay_problems: tuple[str, ...]
    negative: str | None = None  # the description of a NEGATIVE EXAMPLE
    defect_codes: tuple[str, ...] = ()  # the codes its description names
    defect_found: bool = True


@dataclass(frozen=True)
class Agreement:
    files: tuple[FileResult, ...]

    def profile(self, name: str) -> tuple[int, int]:
        """(files agreeing, files) for one profile."""
        return sum(f.found[name] == f.expected[name] for f in self.files), len(self.files)

    @property
    def overall(self) -> float:
        agree = sum(self.profile(n)[0] for n in PROFILES)
        return agree / max(1, len(self.files) * len(PROFILES))

    @property
    def replay(self) -> tuple[int, int]:
        return sum(f.replay_found == f.replay_expected for f in self.files), len(self.files)

    @property
    def negatives(self) -> tuple[FileResult, ...]:
        return tuple(f for f in self.files if f.negative is not None)


def corpus_root() -> Path | None:
    """$SYNTH_CORPUS, else shared/corpus beside the repository (or beside the working directory);
    None when absent."""
    env = os.environ.get("SYNTH_CORPUS")
    candidates = [Path(env)] if env else [Path(__file__).resolve().parents[3] / "shared" / "corpus",
                                          Path.cwd().resolve().parent / "shared" / "corpus"]
    for root in candidates:
        if (root / "SOURCES.md").is_file() and (root / "msccl-xml").is_dir():
            return root
    return None


def _table(path: Path, prefix: str = "| msccl-xml/") -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in path.read_text(encoding="utf-8").splitlines() if line.startswith(prefix)]


def corpus_agreement(root: Path | None = None, orders: int = 5) -> Agreement:
    """Check and replay every corpus file; compare with SOURCES.md and REPLAY.md."""
    root = root or corpus_root()
    if root is None:
        return Agreement(())
    replay_md = root / "REPLAY.md"
    replays = {row[0]: REPLAY_WORDS.get(row[1]) for row in _table(replay_md)} if replay_md.is_file() else {}
    results = []
    for row in _table(root / "SOURCES.md"):
        rel, verdicts, description = row[0], row[11], row[12]
        texts = dict(zip(PROFILES, (v.strip() for v in verdicts.split(" / "))))
        parsed = read_xml_file(root / rel)
        found = {name: check_profile(parsed, PROFILES[name]) for name in PROFILES}
        result = replay(parsed.program, orders=orders)
        codes: tuple[str, ...] = ()
        negative = description if description.startswith("NEGATIVE EXAMPLE") else None
        if negative:
            codes = tuple(code for words, code in NEGATIVE_DEFECTS if words in negative)
        ours = {p.code for problems in found.values() for p in problems if p.severity != "note"}
        results.append(FileResult(
            rel, {n: texts.get(n) == "ok" for n in PROFILES}, texts, {n: ok(found[n]) for n in PROFILES},
            {n: tuple(str(p) for p in found[n] if p.severity != "note") for n in PROFILES},
            replays.get(rel), result.correct, tuple(str(p) for p in result.problems), negative, codes,
            bool(codes) and all(code in ours for code in codes) if negative else True))
    return Agreement(tuple(results))


def format_agreement(agreement: Agreement) -> str:
    """The agreement table and every disagreement with its reasons."""
    lines = ["profile    agree / files", "---------  -------------"]
    for name in PROFILES:
        agree, total = agreement.profile(name)
        lines.append(f"{name:<9}  {agree:>5} / {total}")
    agree, total = agreement.replay
    lines.append(f"{'replay':<9}  {agree:>5} / {total}")
    for f in agreement.files:
        for name in PROFILES:
            if f.found[name] != f.expected[name]:
                ours = "; ".join(f.problems[name][:3]) or "ok"
                lines.append(f"DISAGREE {name} {f.path}: reference {f.expected_text[name]!r}, ours: {ours}")
        if f.replay_found != f.replay_expected:
            ours = "; ".join(f.replay_problems[:2])
            lines.append(f"DISAGREE replay {f.path}: reference {f.replay_expected}, ours {f.replay_found}: {ours}")
    for f in agreement.negatives:
        state = "found" if f.defect_found else "NOT FOUND"
        lines.append(f"negative example {f.path}: {', '.join(f.defect_codes) or '(no known defect words)'} {state}")
    return "\n".join(lines)
