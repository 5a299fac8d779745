"""Property tests of the shared vocabulary: steps, top-level calls and rows, both ways in.

Generated step timelines (ops, same-name recursion, Python frames, record_function
blocks, compiled regions and their guard checks, empty steps) go once through a
Chrome trace file (``load_trace``, the offline path) and once event by event
through ``EventAggregator`` (what the live session feeds kineto's events to). Both
must give the same rows, steps and top-level calls, and those must be the ones
the generated structure says (calls as ``key_averages()`` counts them).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuronprof._vocabulary import merge_rows
from neuronprof.analysis import load_trace
from neuronprof.analysis.trace import EventAggregator

# (name, cat, counts as a top-level call when directly under a step)
_LEAVES = (
    ("aten::add", "cpu_op", True),
    ("aten::sum", "cpu_op", True),
    ("Torch-Compiled Region: 0/0", "cpu_op", True),
    ("Torch-Compiled Region: 1/0", "user_annotation", True),
    ("TorchDynamo Cache Lookup", "cpu_op", False),
    ("block", "user_annotation", False),
    ("model.py(10): forward", "python_function", False),
)


@dataclass
class _Node:
    name: str
    cat: str
    call: bool
    children: list[_Node] = field(default_factory=list)


@st.composite
def _nodes(draw: st.DrawFn, depth: int = 0) -> _Node:
    name, cat, call = draw(st.sampled_from(_LEAVES))
    children = draw(st.lists(_nodes(depth + 1), max_size=2)) if depth < 3 else []
    if name == "aten::sum" and draw(st.booleans()):
        children = [_Node("aten::sum", "cpu_op", True, children)]  # redispatch to itself
    return _Node(name, cat, call, children)


def _folded(nodes: list[_Node]) -> Counter[str]:
    """Calls that key_averages() folds away: an only child with its parent's name, not a Python frame."""
    out: Counter[str] = Counter()
    for node in nodes:
        only = node.children[0] if len(node.children) == 1 else None
        if only is not None and only.name == node.name and only.cat != "python_function":
            out[only.name] += 1
        out += _folded(node.children)
    return out


def _top_level(children: list[_Node]) -> int:
    """Calls directly under a step; Python frames and annotations that are not calls are transparent."""
    n = 0
    for c in children:
        if c.cat == "python_function" or (c.cat == "user_annotation" and not c.call):
            n += _top_level(c.children)
        elif c.call:
            n += 1
    return n


class _Layout:
    """Lays nodes out in integer ns: each child after a gap, each parent around its children."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int, int]] = []

    def place(self, node: _Node, start: int) -> int:
        cursor = start + 3
        for child in node.children:
            cursor += self.place(child, cursor) + 2
        dur = cursor + 1 - start
        self.events.append((node.name, node.cat, start, dur))
        return dur


def _layout(steps: list[list[_Node]]) -> list[tuple[str, str, int, int]]:
    out = _Layout()
    cursor = 1_712_195_495_520_835_103
    for i, children in enumerate(steps):
        cursor += out.place(_Node(f"ProfilerStep#{i + 1}", "user_annotation", False, children), cursor) + 5
    return out.events


def _offline(path: Path, events: list[tuple[str, str, int, int]]) -> Any:
    text = ",\n".join(
        json.dumps({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": 0, "dur": 0})
        .replace('"ts": 0', f'"ts": {t // 1000}.{t % 1000:03d}')
        .replace('"dur": 0', f'"dur": {d // 1000}.{d % 1000:03d}')
        for name, cat, t, d in events
    )
    path.write_text('{"traceEvents": [\n' + text + "\n]}")
    return load_trace(path)


def _live(events: list[tuple[str, str, int, int]], *, stopped_in_last_step: bool = True) -> Any:
    agg = EventAggregator("<test>", stopped_in_last_step=stopped_in_last_step)
    for name, cat, t, d in events:
        agg.add(name, cat, t, d, ("host", 1))
    return agg.trace()


def _by_key(rows: Any) -> dict[Any, Any]:
    return {(r.name, r.on_device, r.input_shapes): r for r in rows}


_steps = st.lists(st.lists(_nodes(), max_size=3), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps, seed=st.integers(0, 2**16))
@pytest.mark.slow
def test_trace_file_and_event_feed_give_the_same_table(
    tmp_path_factory: pytest.TempPathFactory, steps: list[list[_Node]], seed: int
) -> None:
    events = _layout(steps)
    shuffled = list(events)
    random.Random(seed).shuffle(shuffled)
    offline = _offline(Path(tmp_path_factory.mktemp("v")) / "t.json", shuffled)
    live = _live(shuffled)
    assert _by_key(offline.rows()) == _by_key(live.rows())
    # What the structure says: every event is one call of its row, except an only child
    # with its parent's name (not a Python frame), which key_averages() folds into it.
    calls = Counter("ProfilerStep*" if n.startswith("ProfilerStep#") else n for n, *_ in events)
    calls.subtract(_folded([node for children in steps for node in children]))
    assert {r.name: r.calls for r in live.rows()} == {n: c for n, c in calls.items() if c}
    expected_steps = len(steps) - (1 if not steps[-1] else 0)
    assert live.steps == offline.steps == expected_steps
    expected_top = sum(_top_level(children) for children in steps)
    assert live.top_level_calls == offline.top_level_calls == (expected_top if expected_steps else None)
    # Self times partition each step: the rows' self CPU adds up to the steps' durations.
    span = sum(d for n, _c, _t, d in events if n.startswith("ProfilerStep#"))
    assert sum(r.self_cpu_us for r in live.rows()) == pytest.approx(span / 1000, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(steps=_steps)
@pytest.mark.slow
def test_an_empty_last_step_counts_only_when_the_schedule_ended_the_cycle(steps: list[list[_Node]]) -> None:
    events = _layout(steps)
    ended_by_exit = _live(events, stopped_in_last_step=True)
    ended_by_schedule = _live(events, stopped_in_last_step=False)
    assert ended_by_schedule.steps == len(steps)
    assert ended_by_exit.steps == len(steps) - (0 if steps[-1] else 1)


@settings(max_examples=40, deadline=None)
@given(steps=_steps, cut=st.integers(0, 4))
@pytest.mark.slow
def test_cycles_merged_equal_one_recording(steps: list[list[_Node]], cut: int) -> None:
    # repeat > 1: each cycle is summed on its own and the cycles' rows merged (the
    # vocabulary's one merge); that must equal summing all steps at once.
    cut = min(cut, len(steps))
    whole = _live(_layout(steps), stopped_in_last_step=False)
    first = _live(_layout(steps[:cut]), stopped_in_last_step=False) if cut else None
    second = _live(_layout(steps[cut:]), stopped_in_last_step=False) if cut < len(steps) else None
    parts = [t for t in (first, second) if t is not None]
    merged = merge_rows([t.rows() for t in parts])
    a, b = _by_key(whole.rows()), _by_key(merged)
    assert set(a) == set(b)
    for key, row in a.items():
        assert row.calls == b[key].calls
        assert row.self_cpu_us == pytest.approx(b[key].self_cpu_us, abs=1e-6)
        assert row.cpu_total_us == pytest.approx(b[key].cpu_total_us, abs=1e-6)
    assert whole.steps == sum(t.steps for t in parts)


def test_event_feed_leaves_out_what_a_trace_reader_leaves_out(tmp_path: Path) -> None:
    # A device-side copy of an annotation and the profiler's own span are no rows either way in;
    # neither are the profiler's own frames and bookkeeping ops.
    events = [
        ("ProfilerStep#1", "user_annotation", 0, 100_000),
        ("aten::add", "cpu_op", 10_000, 20_000),
        ("ProfilerStep#1", "gpu_user_annotation", 0, 90_000),
        ("PyTorch Profiler (0)", "Trace", 0, 200_000),
        ("torch/profiler/profiler.py(800): step", "python_function", 40_000, 5_000),
        ("profiler::_record_function_exit", "cpu_op", 50_000, 1_000),
    ]
    offline = _offline(tmp_path / "t.json", events)
    live = _live(events)
    assert _by_key(offline.rows()) == _by_key(live.rows())
    assert {r.name for r in live.rows()} == {"ProfilerStep*", "aten::add"}
    assert live.steps == offline.steps == 1


# -- the findings' call tree asks the same vocabulary ------------------------------------

# record_function blocks included: the findings and the tables both look inside them for the ops they hold.
_CALL_LEAVES = _LEAVES


@st.composite
def _call_nodes(draw: st.DrawFn, depth: int = 0) -> _Node:
    name, cat, call = draw(st.sampled_from(_CALL_LEAVES))
    children = draw(st.lists(_call_nodes(depth + 1), max_size=2)) if depth < 3 else []
    return _Node(name, cat, call, children)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.lists(_call_nodes(), max_size=3), min_size=1, max_size=4))
@pytest.mark.slow
def test_findings_count_the_top_level_calls_the_tables_count(
    tmp_path_factory: pytest.TempPathFactory, steps: list[list[_Node]]
) -> None:
    from neuronprof.analysis.insights import timeline_from_trace
    from neuronprof.analysis.insights._tree import _Profile

    path = Path(tmp_path_factory.mktemp("calls")) / "t.json"
    # Whole microseconds apart: the findings' timeline keeps µs, not the ns the tables keep.
    events = _layout(steps)
    base = min(t for _n, _c, t, _d in events)
    trace = _offline(path, [(n, c, (t - base) * 1000 + 10**9, d * 1000) for n, c, t, d in events])
    profile = _Profile(timeline_from_trace(path))
    found = [[node.name for node in s.top] for s in profile.steps]
    assert sum(map(len, found)) == sum(_top_level(children) for children in steps)
    if trace.steps:
        assert sum(map(len, found)) == trace.top_level_calls
    # A compiled region counts once; torch.compile's guard check never.
    assert not [n for names in found for n in names if n == "TorchDynamo Cache Lookup"]


@given(n=st.integers(0, 10**6), other=st.sampled_from(["aten::mm", "Profiler", "Torch-Compiled Region: 0/0", ""]))
def test_the_steps_row_is_one_rule(n: int, other: str) -> None:
    from neuronprof import _vocabulary as vocab
    from neuronprof.model import OpRow, RankTable, Table

    assert vocab.is_step_row(vocab.STEP_ROW)
    assert vocab.is_step_row(f"{vocab.STEP_PREFIX}{n}")
    assert not vocab.is_step_row(other)
    # The cross-rank view compares ops: it leaves the steps' row out, whatever the rank's table calls it.
    rows = [
        OpRow(name=f"{vocab.STEP_PREFIX}{n}", calls=1, self_cpu_us=5.0, cpu_total_us=9.0),
        OpRow(name=vocab.STEP_ROW, calls=1, self_cpu_us=5.0, cpu_total_us=9.0),
        OpRow(name="aten::mm", calls=2, self_cpu_us=3.0, cpu_total_us=3.0),
    ]
    view = RankTable.from_tables([Table(rows=tuple(rows)), Table(rows=tuple(rows[1:]))], "cpu")
    assert [r.name for r in view.rows] == ["aten::mm"]
