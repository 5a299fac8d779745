"""Property test: self times are never negative and add up to the steps, whatever the nesting.

Generated host timelines of steps (back to back or with gaps between them) and spans
that start inside a step and end anywhere: nested ops with the same name (an only
child of the same name is folded, as ``key_averages()`` does), children that overlap
each other (a Python frame and the ``record_function`` it opens), spans that cross a
step boundary, and async collective spans on the main thread and on gloo's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuronprof.analysis import load_trace, summarize

_NAMES = {
    "aten::div_": ("cpu_op", 1),
    "aten::add": ("cpu_op", 1),
    "label": ("user_annotation", 1),
    "train.py(12): forward": ("python_function", 1),
    "gloo:all_reduce": ("user_annotation", 2),
    "nccl:broadcast": ("user_annotation", 1),
}
_BASE_NS = 1_712_195_495_520_835_103


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


_span = st.tuples(
    st.sampled_from(sorted(_NAMES)),
    st.integers(0, 2),  # the step it starts in
    st.floats(0, 0.99),  # where in that step
    st.integers(1, 250_000),  # duration, ns
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    step_durs=st.lists(st.integers(20_000, 200_000), min_size=1, max_size=3),
    gaps=st.lists(st.integers(0, 30_000), min_size=2, max_size=2),
    spans=st.lists(_span, max_size=14),
)
@pytest.mark.slow
def test_self_times_are_never_negative_and_add_up_to_the_steps(
    tmp_path_factory: pytest.TempPathFactory, reader: str, step_durs: list[int], gaps: list[int], spans: list
) -> None:
    events = []
    steps = []
    cursor = _BASE_NS
    for n, d in enumerate(step_durs):
        steps.append((cursor, d))
        events.append((f"ProfilerStep#{n + 1}", "user_annotation", 1, cursor, d))
        events.append(("aten::empty", "cpu_op", 1, cursor + 1, 1))  # each step holds work
        cursor += d + (gaps[n] if n < len(gaps) else 0)
    end_of_steps = steps[-1][0] + steps[-1][1]
    for name, which, where, dur in spans:
        start, length = steps[min(which, len(steps) - 1)]
        ts = start + int(where * length)
        cat, tid = _NAMES[name]
        events.append((name, cat, tid, ts, min(dur, end_of_steps + 50_000 - ts)))
    text = ",\n".join(
        f'{{"ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": 1, "tid": {tid}, '
        f'"ts": {_us(ts)}, "dur": {_us(dur)}}}'
        for name, cat, tid, ts, dur in events
    )
    path = Path(tmp_path_factory.mktemp("selftime")) / "t.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + text + "\n]}")

    trace = load_trace(path)
    rows = trace.rows()
    assert all(r.self_cpu_us >= 0 for r in rows), [(r.name, r.self_cpu_us) for r in rows if r.self_cpu_us < 0]
    assert all(r.calls >= 1 and r.cpu_total_us >= r.self_cpu_us for r in rows)
    step_total_ns = sum(d for _, d in steps)
    assert sum(r.self_cpu_us for r in rows) == pytest.approx(step_total_ns / 1000, abs=1e-6 * (len(rows) + 1))
    for r in rows:
        if r.name in ("gloo:all_reduce", "nccl:broadcast"):  # async: communication, no self time
            assert r.self_cpu_us == 0 and r.cpu_total_us > 0
    table = summarize(trace)
    assert table.steps == len(steps)
    async_spans = [e for e in events if e[0] in ("gloo:all_reduce", "nccl:broadcast")]
    if async_spans:
        assert table.communication_us == pytest.approx(sum(e[4] for e in async_spans) / 1000, abs=1e-6 * len(events))
    else:
        assert table.communication_us is None
