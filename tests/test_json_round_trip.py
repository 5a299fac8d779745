"""One rule for limits and totals: every model reads back from its JSON as it was written.

Totals are computed from every row before any limit, and travel through JSON:
``M.from_json(m.to_json(row_limit=n)) == m.head(n)``, with the totals of ``m``.
Models are generated field by field from their type annotations, so a field
added later is covered without touching this file.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import neuronprof
from neuronprof.analysis import DevicePeak, NeuronProfile, Roofline, TraceDiff, diff, roofline, summarize
from neuronprof.analysis.insights import Insights
from neuronprof.model import Comparison, ComparisonRow, RankTable, StepBreakdown, Table

_FLOATS = st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False)
_TEXT = st.text(max_size=6)


def _strategy(tp: Any, owner: type) -> st.SearchStrategy[Any]:
    """A strategy for one annotated type: scalars, Optional, Literal, tuples and nested models."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is str:
        return _TEXT
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(0, 10**9)
    if tp is float:
        return _FLOATS
    if origin is Union:
        return st.one_of(*(st.none() if a is type(None) else _strategy(a, owner) for a in args))
    if origin is Literal:
        return st.sampled_from(args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(_strategy(args[0], owner), max_size=4).map(tuple)
        return st.tuples(*(_strategy(a, owner) for a in args))
    if tp is StepBreakdown:  # its categories are unique (its JSON keys them)
        return _model(tp, parts_us=st.dictionaries(_TEXT, _FLOATS, max_size=4).map(lambda d: tuple(d.items())))
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or hasattr(tp, "_fields")):
        return _model(tp)
    raise TypeError(f"no strategy for {tp!r} (a field of {owner.__name__})")


def _hints(cls: type) -> dict[str, Any]:
    # Names a model module imports only for type checking.
    return typing.get_type_hints(cls, localns={"Insights": Insights, "Table": Table})


def _model(cls: type, **given_fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Every field of ``cls`` drawn from its annotation, except its totals: those come from its rows."""
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else list(cls._fields)
    fields = {n: _strategy(hints[n], cls) for n in names if not n.startswith(("_", "total_")) and n not in given_fields}
    return st.builds(cls, **fields, **given_fields)


_op_rows = st.lists(_model(neuronprof.OpRow, calls=st.integers(0, 1000)), max_size=6).map(tuple)
_tables = _model(Table, rows=_op_rows)
_insights = _model(Insights)


@st.composite
def _comparisons(draw: st.DrawFn) -> Comparison:
    names = draw(st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=3, unique=True))
    rows = tuple(
        draw(_model(ComparisonRow, name=st.just(n), table=st.none() | _tables, insights=st.none() | _insights))
        for n in names
    )
    return draw(_model(Comparison, rows=st.just(rows), baseline=st.sampled_from(names)))


# A device's peaks are positive (DevicePeak refuses anything else).
_peaks = _model(
    DevicePeak,
    name=st.text(min_size=1, max_size=6),
    flops_per_s=st.floats(1.0, 1e18),
    bytes_per_s=st.floats(1.0, 1e15),
    fp32_flops_per_s=st.none() | st.floats(1.0, 1e18),
)

_MODELS: dict[str, st.SearchStrategy[Any]] = {
    "Table": _tables,
    "RankTable": _model(RankTable, tables=st.lists(_tables, max_size=3).map(tuple)),
    "TraceDiff": _model(TraceDiff),
    "Roofline": _model(Roofline, device=_peaks),
    "Comparison": _comparisons(),
    "NeuronProfile": _model(NeuronProfile, peak=st.none() | _peaks),
    "Insights": _insights,
}


def _totals(m: Any) -> tuple[Any, ...]:
    """Every total a model reports (a limit must change none of them)."""
    if isinstance(m, Table):
        return (m.total_rows, m.self_cpu_us, m.self_device_us)
    if isinstance(m, RankTable):
        return (m.total_rows, m.total_self_cpu_us, m.total_self_device_us)
    if isinstance(m, TraceDiff):
        return (m.total_rows, m.total_a_us, m.total_b_us)
    if isinstance(m, Roofline):
        return (m.total_rows, m.total_flops, m.total_bytes, m.total_time_us, m.intensity, m.bound)
    raise AssertionError(f"no totals for {type(m).__name__}")


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(_MODELS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_model_reads_back_equal_from_its_json(kind: str, data: st.DataObject) -> None:
    model = data.draw(_MODELS[kind])
    back = type(model).from_json(model.to_json())
    assert back == model
    assert back.to_json() == model.to_json()


@pytest.mark.parametrize("kind", ["Table", "RankTable", "TraceDiff", "Roofline"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), limit=st.none() | st.integers(-1, 6))
def test_a_limit_cuts_rows_and_keeps_every_total_through_json(kind: str, data: st.DataObject, limit: int) -> None:
    model = data.draw(_MODELS[kind])
    back = type(model).from_json(model.to_json(row_limit=limit))
    assert back == model.head(limit)
    assert _totals(back) == _totals(model.head(limit)) == _totals(model)
    kept = len(model.rows) if limit is None or limit < 0 else min(limit, len(model.rows))
    assert len(back.rows) == kept


# -- on real torch.profiler traces, through the public API ------------------------------------


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, neuronprof.Table]:
    """Two exported CPU sessions of different workloads, and the first one's live table."""
    torch = pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("round_trip")
    x = torch.randn(64, 64)
    paths = []
    table = None
    for i, work in enumerate((lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), lambda: x @ x)):
        with neuronprof.session(backend="cpu", record_shapes=True, warmup=1, active=2) as s:
            for _ in s.steps():
                work()
        paths.append(s.export(folder / f"t{i}.json"))
        table = table or s.table(row_limit=None)
    assert table is not None
    return paths[0], paths[1], table


def test_a_limited_diff_reads_back_with_the_totals_of_every_row(traces) -> None:
    a, b, _ = traces
    d = diff(a, b)
    assert len(d.rows) > 1
    back = TraceDiff.from_json(d.to_json(row_limit=1))
    assert len(back.rows) == 1
    assert (back.total_rows, back.total_a_us, back.total_b_us) == (len(d.rows), d.total_a_us, d.total_b_us)
    # What the first row alone would give: the totals read back are not that.
    assert back.total_a_us != pytest.approx(back.rows[0].self_cpu_us_a or 0.0) or len(d.rows) == 1
    assert back.to_text().splitlines()[-1] == d.to_text().splitlines()[-1]


def test_limited_tables_and_rooflines_of_a_real_session_read_back_with_their_totals(traces) -> None:
    a, _, live = traces
    for model in (live, summarize(a), roofline(a, device="trn2", time_source="cpu")):
        assert len(model.rows) > 1
        back = type(model).from_json(model.to_json(row_limit=1))
        assert back == model.head(1)
        assert _totals(back) == _totals(model)
        assert type(model).from_json(model.to_json()) == model
    cut = live.head(1)
    assert f"showing 1 of {live.total_rows} rows" in str(Table.from_json(cut.to_json()))


def test_a_step_breakdown_refuses_a_category_named_twice() -> None:
    with pytest.raises(ValueError, match="twice"):
        StepBreakdown(steps_us=(1.0,), parts_us=(("device", 1.0), ("device", 2.0)))
