"""The array idioms the reader, the findings and the report share."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from neuronprof.analysis._arrays import present


@given(st.lists(st.integers(0, 300)), st.sampled_from([np.int8, np.int16, np.int32, np.int64]), st.integers(0, 400))
def test_present_is_the_distinct_values_rising_whatever_the_type_and_length(
    values: list[int], dtype: type, n: int
) -> None:
    ids = np.array(values, np.int64).astype(dtype) if values else np.empty(0, dtype)
    if ids.size and int(ids.min()) < 0:  # wrapped in a narrow type: refused, as bincount refuses it
        with pytest.raises(ValueError):
            present(ids, n)
        return
    assert present(ids, n) == sorted(set(ids.tolist()))
