"""Where the project's shared test data lives: ``shared/`` beside the repository (or beside the
working directory), or the folder an environment variable names."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def shared_folder(name: str, marker: str, env: str) -> Path | None:
    """``$env`` or ``shared/<name>`` that holds ``marker``; None when neither is there."""
    given = os.environ.get(env)
    for candidate in ([Path(given)] if given else []) + [ROOT.parent / "shared" / name,
                                                         Path.cwd().resolve().parent / "shared" / name]:
        if (candidate / marker).is_file():
            return candidate
    return None
