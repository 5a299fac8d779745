"""EventBatches: the same events as json.load, whatever the chunk cuts, nesting and separators."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuronprof.analysis import TraceError
from neuronprof.analysis._eventstream import EventBatches

NEEDLE = "nc_exec_running"

# Values that try to fool a cut between events: "}, {" inside strings and nested arrays of objects.
_tricky = st.sampled_from(["}, {", "},{", '"}, {"', "]", "[{}]", NEEDLE, 'x\\"}, {', "\u00e9\u4e2d"])
_leaf = st.one_of(st.integers(-(10**20), 10**20), st.booleans(), st.none(), st.text(max_size=6), _tricky)
_value = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "c", "name"]), inner, max_size=3)
    ),
    max_leaves=8,
)
_event = st.fixed_dictionaries(
    {"name": st.sampled_from([NEEDLE, "nrt_model_submit", "kbl_exec_pre"])},
    optional={"args": _value, "list": st.lists(st.dictionaries(st.sampled_from(["k", "v"]), _value), max_size=3)},
)


def _write(path: Path, events: list, indent, sep: str) -> None:
    body = sep.join(json.dumps(e, indent=indent, ensure_ascii=False) for e in events)
    path.write_text('{"meta": {"x": [1, {"y": "}, {"}]}, "trace_event": [' + body + '], "after": 1}', encoding="utf-8")


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    st.lists(_event, max_size=30),
    st.sampled_from([None, 1, 2]),
    st.sampled_from([",", ", ", ",\n", "\n,\n  ", ",\n "]),
    st.sampled_from([64, 257, 4096]),
)
def test_batches_match_json_load(tmp_path_factory, events, indent, sep, chunk):
    path = tmp_path_factory.mktemp("b") / "p.json"
    _write(path, events, indent, sep)
    stream = EventBatches(str(path), chunk_size=chunk, events_key="trace_event")
    got = [e for batch in stream for e in batch]
    assert got == events
    assert stream.metadata == {"meta": {"x": [1, {"y": "}, {"}]}, "after": 1}
    # With a filter: every event that mentions the needle, in order, and only real events.
    kept = [
        e
        for batch in EventBatches(str(path), chunk_size=chunk, events_key="trace_event", containing=NEEDLE)
        for e in batch
    ]
    wanted = [e for e in events if NEEDLE in json.dumps(e, ensure_ascii=False)]
    it = iter(events)
    assert all(any(k == e for e in it) for k in kept), "kept events must be events of the file, in order"
    assert [e for e in kept if e in wanted] == wanted


def test_batches_report_bad_json(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"trace_event": [{"name": "a"}, {"name": nope}]}')
    with pytest.raises(TraceError, match="invalid JSON"):
        [e for b in EventBatches(str(path), events_key="trace_event") for e in b]
    path.write_text('{"trace_event": [{"name": "a"}, 3]}')
    with pytest.raises(TraceError, match="not a JSON object"):
        [e for b in EventBatches(str(path), events_key="trace_event") for e in b]
    path.write_text('{"trace_event": [{"name": "a"}, {"name": "b"')
    with pytest.raises(TraceError, match="truncated"):
        [e for b in EventBatches(str(path), events_key="trace_event", containing="a") for e in b]
