"""The real topology outputs in shared/topo-samples (beside the repository, or $SYNTH_TOPO_SAMPLES)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shared_data import shared_folder

ROOT = Path(__file__).resolve().parents[2]


def samples_root() -> Path | None:
    return shared_folder("topo-samples", "EXPECTED.md", "SYNTH_TOPO_SAMPLES")


@pytest.fixture
def sample():
    """sample(name) -> the sample's text (skips the test when the samples are not beside the repo)."""
    root = samples_root()
    if root is None:
        pytest.skip("shared/topo-samples not found beside the repository (set SYNTH_TOPO_SAMPLES)")

    def read(name: str) -> str:
        return (root / name).read_bytes().decode("utf-8", errors="replace")

    return read
