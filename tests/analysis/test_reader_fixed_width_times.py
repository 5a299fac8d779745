"""The column reader's times of one width, read from a table of their characters, are the times read one by one.

kineto writes every time with three decimals, and the times of a piece most often
with as many digits: the column reader reads such a column without a Python int per
time. Any column it cannot read so (widths that differ, other decimals, a sign, an
exponent, a string) is left to the bulk reader that reads every spelling.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import neuronprof.analysis._typed_reader as typed_reader
from neuronprof.analysis.trace import _reader_columns
from neuronprof.analysis.trace._rules import _time_ns

msgspec = pytest.importorskip("msgspec")


def _raws(texts: list[str]) -> list[object]:
    return msgspec.json.decode(("[" + ",".join(texts) + "]").encode(), type=list[msgspec.Raw])


def _one_by_one(raws: list[object]) -> list[object]:
    return [_time_ns(typed_reader.raw_number(raw)) for raw in raws]


_SAME_WIDTH = st.integers(1, 15).flatmap(
    lambda digits: st.lists(
        st.tuples(st.integers(10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1), st.integers(0, 999)),
        min_size=1,
        max_size=40,
    ).map(lambda values: [f"{whole}.{frac:03d}" for whole, frac in values])
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        _SAME_WIDTH,
        st.lists(
            st.one_of(
                st.tuples(st.integers(0, 10**17), st.integers(0, 999)).map(lambda p: f"{p[0]}.{p[1]:03d}"),
                st.integers(0, 10**6).map(str),
                st.sampled_from(
                    ['"1.500"', "1.5e3", "1.50e3", "-0.500", "-1.500", "0.050", "0.5000", "10.50", "[1.5]"]
                ),
            ),
            min_size=1,
            max_size=40,
        ),
    )
)
def test_times_of_one_width_are_the_times_read_one_by_one(texts: list[str]) -> None:
    raws = _raws(texts)
    fixed = _reader_columns._fixed_width_ns(raws)
    if fixed is not None:
        assert fixed.dtype.name == "int64"
        assert fixed.tolist() == _one_by_one(raws)


@pytest.mark.parametrize(
    "texts",
    [
        ["5106267470000.500", "5106267470001.250", "5106267470002.000"],
        ["0.500", "1.000", "9.999"],
        ["10012.500", "12345.678"],
        ["999999999999999.999"],  # 18 digits: the most an int64 holds here
    ],
)
def test_kineto_columns_are_read_from_their_characters(texts: list[str]) -> None:
    raws = _raws(texts)
    fixed = _reader_columns._fixed_width_ns(raws)
    assert fixed is not None
    assert fixed.tolist() == _one_by_one(raws)


@pytest.mark.parametrize(
    "texts",
    [
        [],
        ["1.500", "12.500"],  # widths differ
        ["1.50", "2.50"],  # two decimals
        ["1.5000", "2.5000"],  # four decimals
        ["-1.500", "-2.500"],  # a sign
        ["1.5e3", "2.5e3"],  # an exponent
        ['"1.500"'],  # a string
        ["1500", "2500"],  # integers (µs): the bulk reader's
        ["1234567890123456789.500"],  # past int64
    ],
)
def test_other_columns_are_left_to_the_bulk_reader(texts: list[str]) -> None:
    assert _reader_columns._fixed_width_ns(_raws(texts)) is None


def test_a_file_whose_times_change_width_is_read_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Times from 9.5 µs to past 1 ms: pieces of one width and pieces of several, read column by column.
    from neuronprof.analysis.trace import EventKeys, read_events

    monkeypatch.setattr(_reader_columns, "COLUMNS_MIN", 0)
    monkeypatch.setattr(_reader_columns, "COLUMNS_FILE", 0)
    monkeypatch.setattr(typed_reader, "_FAST_CHUNK", 4096)  # many small pieces
    ran: list[bool] = []
    columns = _reader_columns._ColumnReader._columns

    def read_columns(self: _reader_columns._ColumnReader, piece: typed_reader.Piece) -> bool:
        ran.append(columns(self, piece))
        return ran[-1]

    monkeypatch.setattr(_reader_columns._ColumnReader, "_columns", read_columns)
    starts = [9500 + 37_125 * i for i in range(2000)]  # ns
    spans = ",".join(
        f'{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":{ns // 1000}.{ns % 1000:03d},"dur":1.250}}'
        for ns in starts
    )
    path = tmp_path / "t.json"
    path.write_text(f'{{"traceEvents":[{spans}]}}', encoding="utf-8")
    table = read_events(str(path), EventKeys())
    assert ran and all(ran)
    [thread] = table.threads.values()
    assert list(thread.ts) == starts
    assert list(thread.dur) == [1250] * len(starts)
