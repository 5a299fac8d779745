"""The streaming JSON reader: same events as json.load, whatever the chunk boundaries."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from trace_builders import cuda_trace_events

from neuronprof.analysis import TraceError
from neuronprof.analysis._eventstream import EventStream


def _read(path: Path, chunk_size: int = 1 << 20) -> tuple[list[dict], dict]:
    stream = EventStream(str(path), chunk_size=chunk_size)
    events = list(stream)
    return events, stream.metadata


@pytest.mark.parametrize("chunk_size", [16, 17, 61, 4096])
@pytest.mark.parametrize("indent", [None, 2])
def test_events_and_metadata_match_json_load(tmp_path: Path, chunk_size: int, indent) -> None:
    data = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "GPU \u00e9\u4e2d"}],  # multi-byte text across chunk edges
        "traceEvents": cuda_trace_events(),
        "traceName": "x" * 100,
        "baseTimeNanoseconds": 1790857026000000000,
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data, indent=indent, ensure_ascii=False), encoding="utf-8")
    events, meta = _read(path, chunk_size)
    assert events == data["traceEvents"]
    assert meta == {k: v for k, v in data.items() if k != "traceEvents"}


def test_gzip_streams_the_same_events(tmp_path: Path) -> None:
    data = {"traceEvents": cuda_trace_events()}
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(data, f)
    assert _read(path, 64)[0] == data["traceEvents"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ('[{"a": 1}, {"b": 2}]', [{"a": 1}, {"b": 2}]),
        ('[{"a": 1}, {"b": 2},', [{"a": 1}, {"b": 2}]),  # array format without "]"
        ('[{"a": 1}\n', [{"a": 1}]),
        ("[]", []),
        ('{"traceEvents": []}', []),
        ('\ufeff{"traceEvents": [{"a": 1},]}', [{"a": 1}]),  # byte-order mark, trailing comma
    ],
)
def test_layouts_chrome_accepts(tmp_path: Path, text: str, expected: list) -> None:
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8")
    assert _read(path, 16)[0] == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("   ", "empty"),
        ("hello", "not a JSON trace"),
        ('"a string"', "not a JSON trace"),
        ('{"foo": 1}', "no 'traceEvents'"),
        ("{}", "no 'traceEvents'"),
        ('{"traceEvents": {"a": 1}}', "not a list"),
        ('{"traceEvents": [1, 2]}', "not a JSON object"),
        ('{"traceEvents": [{"a": 1}', "truncated"),
        ('{"traceEvents": [{"a": 1}]', "truncated"),
        ('{"traceEvents": [{"a": 1} {"b": 2}]}', "expected ','"),
        ('{"traceEvents": [{"a": tru}]}', "invalid JSON"),
        ('{"traceEvents": []} extra', "extra data"),
        ('{"traceEvents": [{"a": "unterminated', "truncated"),
    ],
)
def test_malformed_json_raises_trace_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceError, match=message):
        _read(path, 16)


def test_absurdly_deep_nesting_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"args": ' + "[" * 100_000 + "]" * 100_000 + "}]}")
    with pytest.raises(TraceError, match="nested too deeply"):
        _read(path)


def test_an_error_deep_in_a_large_file_does_not_read_the_rest_first(tmp_path: Path) -> None:
    # The bad byte sits near the start of a file with plenty after it; the
    # error must name its position rather than buffer everything looking for more.
    good = json.dumps(cuda_trace_events()[0])
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + good + ", @" + (", " + good) * 2000 + "]}")
    with pytest.raises(TraceError, match="near character"):
        _read(path, 4096)


def test_bad_utf8_and_bad_gzip(tmp_path: Path) -> None:
    binary = tmp_path / "image.json"
    binary.write_bytes(b"\x89PNG\xff\xfe" + b"\x00" * 40)
    with pytest.raises(TraceError, match="UTF-8"):
        _read(binary)
    # A trace whose names hold bytes that are not UTF-8 (torch writes them as it finds them) is read.
    bad_text = tmp_path / "latin1.json"
    bad_text.write_bytes(b'{"traceEvents": [{"name": "\xff\xfe"}]}')
    assert [e["name"] for e in _read(bad_text)[0]] == ["\ufffd\ufffd"]
    truncated = tmp_path / "t.json.gz"
    truncated.write_bytes(gzip.compress(json.dumps({"traceEvents": cuda_trace_events()}).encode())[:300])
    with pytest.raises(TraceError, match="truncated"):
        _read(truncated)
    corrupt = tmp_path / "c.json.gz"
    corrupt.write_bytes(b"\x1f\x8b" + b"\x00" * 40)
    with pytest.raises(TraceError, match="gzip"):
        _read(corrupt)


def _fields(events: list) -> list[tuple]:
    def raw(v: object) -> object:
        return None if v is None else json.loads(bytes(v))  # type: ignore[call-overload]

    out = []
    for e in events:
        a = e.args
        args = None if a is None else (a.correlation, a.ext, a.ext_lower, raw(a.dims), raw(a.types), a.name, a.labels)
        out.append((e.ph, e.name, e.cat, e.pid, e.tid, e.ts, e.dur, args))
    return out


@pytest.mark.parametrize("chunk", [16, 61, 4096])
@pytest.mark.parametrize("indent", [None, 2])
def test_fast_reader_cuts_pieces_at_event_boundaries_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, indent
) -> None:
    pytest.importorskip("msgspec")
    import neuronprof.analysis._typed_reader as jsonstream

    tricky = [
        {"ph": "X", "name": 'a"}, {"b', "ts": 1.5, "dur": 2, "args": {"grid": [{"x": 1}, {"y": 2}], "s": "},{" * 9}},
        {"ph": "X", "name": "big", "ts": "17.125", "dur": 1e-3, "args": {"Input Dims": [[2, 3], []], "s": "x" * 500}},
    ]
    data = {"traceName": "traceEvents", "traceEvents": cuda_trace_events() + tricky, "after": [1, {"a": 2}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data, indent=indent))
    monkeypatch.setattr(jsonstream, "_FAST_CHUNK", chunk)
    fast = jsonstream.TraceReader(str(path), fast=True)
    slow = jsonstream.TraceReader(str(path), fast=False)
    fast_events = [e for batch in fast.batches() for e in batch]
    slow_events = [e for batch in slow.batches() for e in batch]
    assert _fields(fast_events) == _fields(slow_events)
    assert len(fast_events) == len(data["traceEvents"]) == fast.events
    assert fast.metadata == slow.metadata == {"traceName": "traceEvents", "after": [1, {"a": 2}]}
    assert fast_events[-1].ts == "17.125" and fast_events[-2].ts == "1.5"  # numbers with a fraction stay text
