"""The nesting of a thread's spans on arrays: parents found a pass per level (shallow trees) as by sorting by level."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuronprof.analysis.trace import _nesting_arrays


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 15)), min_size=1, max_size=40), st.booleans())
def test_parents_by_level_passes_are_those_the_sort_by_level_finds(spans: list[tuple[int, int]], nest: bool) -> None:
    if nest:  # each span cut to end within those still open at its start: a clean nesting
        cut: list[tuple[int, int]] = []
        for s, d in sorted(spans):
            cut.append((s, min([s + d] + [e for b, e in cut if b <= s < e])))
        spans = [(s, e - s) for s, e in cut]
    rows = sorted(((s, s + d) for s, d in spans), key=lambda r: (r[0], -r[1]))
    t = np.array([s for s, _ in rows], np.int64)
    e = np.array([x for _, x in rows], np.int64)
    by_pass = _nesting_arrays._nesting(t, e - t, e)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_nesting_arrays, "_LEVELS_BY_PASS", 0)
        by_sort = _nesting_arrays._nesting(t, e - t, e)
    if by_sort is None:
        assert by_pass is None
    else:
        assert by_pass is not None
        assert by_pass[0].tolist() == by_sort[0].tolist() and by_pass[1].tolist() == by_sort[1].tolist()
    if nest:
        assert by_pass is not None, "a clean nesting is read on arrays"
