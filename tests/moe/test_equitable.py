"""Equitable step counts: every vertex gets floor or ceil of its degree / depth in every step."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.moe.equitable import equitable_counts


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 5), st.data())
def test_every_vertex_is_levelled_in_every_step(left, right, log_depth, data):
    pairs = [(a, b) for a in range(left) for b in range(right)]
    chosen = data.draw(st.lists(st.sampled_from(pairs), min_size=1, unique=True))
    count = np.array(data.draw(st.lists(st.integers(0, 40), min_size=len(chosen), max_size=len(chosen))))
    src = np.array([a for a, _ in chosen])
    dst = np.array([b for _, b in chosen])
    depth = 1 << log_depth
    counts = equitable_counts(src, dst, count, depth)
    assert counts.shape == (depth, len(chosen)) and (counts >= 0).all()
    assert (counts.sum(axis=0) == count).all()
    for side, size in ((src, left), (dst, right)):
        degree = np.array([np.bincount(side, weights=row, minlength=size) for row in counts])
        total = degree.sum(axis=0)
        assert (degree >= np.floor(total / depth)).all() and (degree <= np.ceil(total / depth)).all()


def test_depth_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        equitable_counts(np.array([0]), np.array([0]), np.array([3]), 3)
