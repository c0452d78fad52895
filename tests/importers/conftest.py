"""The real topology outputs in shared/topo-samples (beside the repository, or $SYNTH_TOPO_SAMPLES)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def samples_root() -> Path | None:
    env = os.environ.get("SYNTH_TOPO_SAMPLES")
    for candidate in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "topo-samples",
                                                     Path.cwd().resolve().parent / "shared" / "topo-samples"]:
        if (candidate / "EXPECTED.md").is_file():
            return candidate
    return None


@pytest.fixture
def sample():
    """sample(name) -> the sample's text (skips the test when the samples are not beside the repo)."""
    root = samples_root()
    if root is None:
        pytest.skip("shared/topo-samples not found beside the repository (set SYNTH_TOPO_SAMPLES)")

    def read(name: str) -> str:
        return (root / name).read_bytes().decode("utf-8", errors="replace")

    return read
