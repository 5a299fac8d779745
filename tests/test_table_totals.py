"""Totals travel with a table: a limit or filter keeps them, new rows bring their own."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neuronprof import OpRow, Table

_rows = st.lists(
    st.builds(
        OpRow,
        name=st.sampled_from(["aten::mm", "aten::add", "kernel"]),
        calls=st.integers(1, 5),
        self_cpu_us=st.floats(0, 1e6),
        cpu_total_us=st.floats(0, 1e6),
        self_device_us=st.one_of(st.none(), st.floats(0, 1e6)),
        device_total_us=st.none(),
        on_device=st.booleans(),
    ),
    max_size=8,
)


@pytest.mark.slow
@given(_rows, _rows, st.integers(0, 8))
def test_limits_keep_totals_and_new_rows_bring_theirs(first, second, limit):
    table = Table(rows=tuple(first), device_label="NEURON")
    cut = table.head(limit)
    assert (cut.total_rows, cut.self_cpu_us, cut.self_device_us) == (
        table.total_rows,
        table.self_cpu_us,
        table.self_device_us,
    )
    replaced = cut.with_rows(second, notes=("from elsewhere",))
    fresh = Table(rows=tuple(second), device_label="NEURON")
    assert (replaced.total_rows, replaced.self_cpu_us, replaced.self_device_us) == (
        fresh.total_rows,
        fresh.self_cpu_us,
        fresh.self_device_us,
    )
    assert replaced.notes == ("from elsewhere",)
