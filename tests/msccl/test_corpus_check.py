"""``synth check`` against the corpus's reference verdicts (shared/corpus/SOURCES.md and REPLAY.md).

The corpus lives beside the repository (../shared/corpus, or $SYNTH_CORPUS); without it these
tests are skipped. Run with ``-s`` to see the agreement table.
"""

from __future__ import annotations

import pytest

from synth.msccl.corpus import corpus_agreement, corpus_root, format_agreement
from synth.msccl.load_rules import PROFILES

ROOT = corpus_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="shared/corpus not found beside the repository (set SYNTH_CORPUS)")


@pytest.fixture(scope="module")
def agreement():
    result = corpus_agreement(ROOT)
    print("\n" + format_agreement(result))
    return result


def test_every_corpus_file_is_checked(agreement):
    on_disk = {str(path.relative_to(ROOT)) for path in (ROOT / "msccl-xml").rglob("*.xml")}
    assert {f.path for f in agreement.files} == on_disk and len(on_disk) >= 81


@pytest.mark.parametrize("profile", list(PROFILES))
def test_load_verdicts_agree_with_the_reference_checker(agreement, profile):
    agree, total = agreement.profile(profile)
    assert agree / total >= 0.95, format_agreement(agreement)


def test_overall_agreement(agreement):
    assert agreement.overall >= 0.95


def test_every_negative_example_defect_is_found(agreement):
    negatives = agreement.negatives
    assert len(negatives) == 5
    for f in negatives:
        assert f.defect_codes, f"no known defect words in {f.negative!r}"
        assert f.defect_found, f"{f.path}: expected {f.defect_codes}, found {f.problems}"


def test_replay_verdicts_agree_with_the_reference_replay(agreement):
    agree, total = agreement.replay
    assert agree / total >= 0.97, format_agreement(agreement)
