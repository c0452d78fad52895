"""Worlds of worker processes shared by the runtime tests (one per rank count, started once)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the runtime tests need torch (pip install '.[torch]')")


@pytest.fixture(scope="session")
def worlds():
    """worlds(n) -> a running World of n gloo workers, reused by every test that asks for n ranks."""
    from synth.runtime.launcher import World

    made: dict[int, World] = {}

    def get(n: int, timeout: float = 30.0) -> World:
        if n not in made:
            made[n] = World(n, "gloo", timeout)
        return made[n]

    yield get
    for world in made.values():
        world.close()
