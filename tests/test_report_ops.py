"""The operators pane's time per ``nn.Module`` and call tree, read from a timeline's events as columns.

The panes read ``EventColumns`` (a trace's, from the findings' reader, or any timeline's).
Checked against a plain reading of the events one object at a time (``reference_tree``,
``reference_modules``): the same output, on hand-made timelines, random ones and the corpus.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuronprof._report_ops import TREE_CHILDREN, TREE_DEPTH, TREE_NODES, call_tree, modules_data
from neuronprof.analysis import load_trace
from neuronprof.analysis.insights import HostEvent, Timeline
from neuronprof.analysis.insights._columns import of_timeline
from neuronprof.analysis.insights._trace import read_of

TRACES = Path(__file__).resolve().parent / "corpus" / "traces"


def reference_modules(timeline: Timeline) -> dict[str, Any]:
    """Time per module frame, summed event by event."""
    sums: dict[str, list[Any]] = {}
    for e in timeline.host:
        if e.category == "python" and e.name.startswith("nn.Module: "):
            s = sums.setdefault(e.name[len("nn.Module: ") :], [0, 0.0])
            s[0] += 1
            s[1] += (e.end_ns - e.start_ns) / 1000
    rows = [
        {"name": name, "calls": c, "total_us": round(us, 3), "mean_us": round(us / c, 3)}
        for name, (c, us) in sorted(sums.items(), key=lambda kv: -kv[1][1])
    ]
    return {"modules": rows}


def reference_tree(timeline: Timeline) -> Optional[dict[str, Any]]:
    """The heaviest top-level op's merged call tree, nested by a stack of node objects per thread."""
    threads: dict[str, list[HostEvent]] = {}
    for e in timeline.host:
        if e.category == "op":
            threads.setdefault(e.thread, []).append(e)
    for evs in threads.values():
        evs.sort(key=lambda e: -e.end_ns)
        evs.sort(key=lambda e: e.start_ns)
    totals: dict[str, int] = {}
    for evs in threads.values():
        until = None
        for e in evs:
            if until is None or e.start_ns >= until:
                totals[e.name] = totals.get(e.name, 0) + e.end_ns - e.start_ns
                until = e.end_ns
    if not totals:
        return None
    root = max(totals, key=totals.__getitem__)
    roots: list[dict[str, Any]] = []
    for evs in threads.values():
        stack: list[dict[str, Any]] = []
        until = None
        for e in evs:
            if until is not None and e.start_ns >= until:
                stack, until = [], None
            if until is None:
                until = e.end_ns
                if e.name != root:
                    continue
            elif not stack:
                continue
            while stack and stack[-1]["end"] <= e.start_ns:
                stack.pop()
            node = {"name": e.name, "start": e.start_ns, "end": e.end_ns, "children": []}
            (stack[-1]["children"] if stack else roots).append(node)
            stack.append(node)

    def merge(nodes: list[dict[str, Any]], depth: int, budget: list[int]) -> list[dict[str, Any]]:
        by_name: dict[str, dict[str, Any]] = {}
        for n in nodes:
            total = n["end"] - n["start"]
            inner = sum(min(c["end"], n["end"]) - c["start"] for c in n["children"])
            m = by_name.setdefault(n["name"], {"name": n["name"], "calls": 0, "total": 0, "self": 0, "kids": []})
            m["calls"] += 1
            m["total"] += total
            m["self"] += max(total - inner, 0)
            m["kids"] += n["children"]
        out = []
        for m in sorted(by_name.values(), key=lambda m: -m["total"])[:TREE_CHILDREN]:
            if budget[0] <= 0:
                break
            budget[0] -= 1
            kids = merge(m["kids"], depth + 1, budget) if depth + 1 < TREE_DEPTH else []
            out.append(
                {
                    "name": m["name"],
                    "calls": m["calls"],
                    "total_us": round(m["total"] / 1000, 3),
                    "self_us": round(m["self"] / 1000, 3),
                    "children": kids,
                    "hidden": len({k["name"] for k in m["kids"]}) - len(kids),
                }
            )
        return out

    return merge(roots, 0, [TREE_NODES])[0]


def same_as_reference(timeline: Timeline) -> None:
    cols = of_timeline(timeline)
    assert json.dumps(call_tree(cols)) == json.dumps(reference_tree(timeline))
    modules = modules_data(cols)
    assert json.dumps(modules["modules"]) == json.dumps(reference_modules(timeline)["modules"])


def test_the_call_tree_merges_calls_by_name_and_counts_a_childs_part_inside_its_parent() -> None:
    host = (
        HostEvent("aten::linear", 0, 1000),
        HostEvent("aten::addmm", 100, 900, input_shapes=((2, 2),)),
        HostEvent("aten::copy_", 200, 300),
        HostEvent("aten::linear", 2000, 2600),
        HostEvent("aten::addmm", 2100, 2500, input_shapes=((4, 4),)),  # another key, the same name
        HostEvent("aten::relu", 3000, 3100),
        HostEvent("aten::linear", 5000, 5500, thread="1"),
        HostEvent("aten::t", 5400, 5800, thread="1"),  # cut at a step's edge: it runs past its parent
        HostEvent("nn.Module: Linear_0", 4990, 6000, thread="1", category="python"),  # frames are transparent
    )
    tree = call_tree(of_timeline(Timeline(host)))
    assert tree is not None
    assert (tree["name"], tree["calls"], tree["total_us"]) == ("aten::linear", 3, 2.1)
    assert tree["self_us"] == pytest.approx(2.1 - 0.8 - 0.4 - 0.1)  # aten::t's 0.1 µs inside linear
    kids = {k["name"]: k for k in tree["children"]}
    assert list(kids) == ["aten::addmm", "aten::t"]  # the heaviest first
    assert (kids["aten::addmm"]["calls"], kids["aten::addmm"]["total_us"]) == (2, 1.2)
    assert [k["name"] for k in kids["aten::addmm"]["children"]] == ["aten::copy_"]
    assert kids["aten::t"]["total_us"] == 0.4
    same_as_reference(Timeline(host))


def test_no_op_makes_no_tree_and_no_module_frame_says_to_pass_with_stack() -> None:
    cols = of_timeline(Timeline((HostEvent("f", 0, 10, category="python"),)))
    assert call_tree(cols) is None
    assert modules_data(cols)["modules"] == []
    assert "pass with_stack=True" in modules_data(cols)["notes"][0]


def test_time_per_module_sums_each_instances_frames_heaviest_first() -> None:
    host = (
        HostEvent("nn.Module: Linear_0", 0, 1500, category="python"),
        HostEvent("nn.Module: ReLU_0", 1500, 1600, category="python"),
        HostEvent("nn.Module: Linear_0", 2000, 2500, category="python", thread="1"),
        HostEvent("nn.Module: Linear_1", 3000, 3300, category="op"),  # not a frame
    )
    data = modules_data(of_timeline(Timeline(host)))
    assert data["modules"] == [
        {"name": "Linear_0", "calls": 2, "total_us": 2.0, "mean_us": 1.0},
        {"name": "ReLU_0", "calls": 1, "total_us": 0.1, "mean_us": 0.1},
    ]
    same_as_reference(Timeline(host))


@pytest.mark.parametrize(
    "name", ["gpt2_train.json.gz", "resnet_infer.json.gz", "ddp_straggler", "llama_compile.json.gz"]
)
def test_a_traces_columns_give_the_panes_of_its_timeline(name: str) -> None:
    # A rank folder's columns hold every rank's events together, as its timeline does.
    trace = load_trace(TRACES / name)
    timeline = trace.timeline()
    cols = read_of(load_trace(TRACES / name)).columns
    assert json.dumps(call_tree(cols)) == json.dumps(reference_tree(timeline))
    assert modules_data(cols) == modules_data(of_timeline(timeline))


NAMES = ["aten::a", "aten::b", "aten::c", "nn.Module: M_0", "nn.Module: M_1"]


@st.composite
def timelines(draw: st.DrawFn) -> Timeline:
    events = draw(
        st.lists(
            st.tuples(
                st.sampled_from(NAMES),
                st.integers(0, 60),
                st.sampled_from([0, 0, 1, 3, 10, 40]),
                st.sampled_from(["0", "1"]),
                st.sampled_from(["op", "op", "python", "annotation"]),
                st.sampled_from([None, ((2,),)]),
            ),
            max_size=40,
        )
    )
    return Timeline(
        tuple(HostEvent(n, s, s + d, thread=t, category=c, input_shapes=sh) for n, s, d, t, c, sh in events)
    )


@settings(max_examples=300, deadline=None)
@given(timelines())
def test_random_timelines_give_what_a_stack_of_objects_gives(timeline: Timeline) -> None:
    same_as_reference(timeline)


def test_a_wide_deep_tree_is_cut_to_its_node_budget_as_a_stack_of_objects_cuts_it() -> None:
    import random

    r = random.Random(7)
    host: list[HostEvent] = []

    def nest(t0: int, t1: int, depth: int) -> None:
        t = t0
        while t < t1 and depth < 8:
            d = r.randint(0, max(0, (t1 - t) // 2)) + (r.randint(1, 50) if r.random() < 0.05 else 0)
            host.append(HostEvent(f"aten::n{r.randrange(3 if depth == 0 else 25)}", t, t + d))
            if d > 4:
                nest(t, t + d, depth + 1)
            t += d + r.choice([0, 1, 3])

    nest(0, 100_000, 0)
    timeline = Timeline(tuple(host))
    tree = call_tree(of_timeline(timeline))
    assert tree is not None

    def count(node: dict[str, Any]) -> int:
        return 1 + sum(count(k) for k in node["children"])

    assert count(tree) == TREE_NODES
    same_as_reference(timeline)


def test_long_threads_are_walked_a_window_at_a_time_with_the_same_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    from neuronprof import _report_ops

    monkeypatch.setattr(_report_ops, "_CHUNK", 5)
    r = random.Random(3)
    for _ in range(40):
        host = []
        for _ in range(r.randint(1, 80)):
            start = r.randint(0, 300)
            name = r.choice(["aten::a", "aten::b", "aten::c"])
            host.append(HostEvent(name, start, start + r.choice([0, 1, 5, 30, 120]), thread=r.choice("01")))
        same_as_reference(Timeline(tuple(host)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(0, 4)), max_size=12))
def test_rows_already_in_tree_order_are_those_the_sort_leaves_where_they_are(rows: list[tuple[int, int, int]]) -> None:
    # The call tree sorts the ops by thread, start and the longer first, unless they are in that order already.
    import numpy as np

    from neuronprof._report_ops import _in_tree_order

    thread, start, length = (np.array(c, np.int64).reshape(-1) for c in zip(*rows)) if rows else [np.empty(0)] * 3
    end = start + length
    order = np.lexsort((-end, start, thread))
    assert _in_tree_order(thread, start, end) == bool((order == np.arange(len(rows))).all())


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 12)), max_size=14),
    st.booleans(),
)
def test_top_level_ops_are_those_the_walk_from_one_to_the_next_finds(spans: list[tuple[int, int]], nest: bool) -> None:
    # A top-level op, then the first op to start at or after its end, and so on; found on arrays
    # where every op ends within the one it follows, and by the walk where one outlasts it.
    import numpy as np

    from neuronprof._report_ops import _top_level

    if nest:  # each span cut to end within the one before it where it starts inside it: nested cleanly
        cut: list[tuple[int, int]] = []
        for s, d in sorted(spans):
            open_ = [c for c in cut if c[0] <= s < c[1]]
            cut.append((s, min(s + d, min((c[1] for c in open_), default=s + d))))
        spans = [(s, e - s) for s, e in cut]
    rows = sorted(((s, s + d) for s, d in spans), key=lambda r: (r[0], -r[1]))
    starts = np.array([s for s, _ in rows], np.int64)
    ends = np.array([e for _, e in rows], np.int64)
    half = len(rows) // 2  # two threads: each walked on its own
    bounds = np.array([0, half, len(rows)])
    expected = []
    for lo, hi in ((0, half), (half, len(rows))):
        i = lo
        while i < hi:
            expected.append(i)
            i = next((j for j in range(i + 1, hi) if starts[j] >= ends[i]), hi)
    assert _top_level(starts, ends, bounds).tolist() == expected


@st.composite
def nested_timelines(draw: st.DrawFn) -> Timeline:
    """Ops on two threads, each cut to end within the op it starts in: nested cleanly (zero-length ones too)."""
    host = []
    for thread in "01":
        spans = draw(st.lists(st.tuples(st.integers(0, 60), st.sampled_from([0, 0, 1, 3, 10, 40])), max_size=25))
        cut: list[tuple[int, int]] = []
        for s, d in sorted(spans, key=lambda sd: (sd[0], -sd[1])):
            inside = [c for c in cut if c[0] <= s < c[1]]
            cut.append((s, min([s + d, *(c[1] for c in inside)])))
        host += [HostEvent(draw(st.sampled_from(NAMES[:3])), s, e, thread=thread) for s, e in cut]
    return Timeline(tuple(host))


@settings(max_examples=300, deadline=None)
@given(nested_timelines())
def test_ops_that_nest_cleanly_are_nested_on_arrays_with_the_stacks_tree(timeline: Timeline) -> None:
    # The stack, op by op, is left for threads whose spans cross; clean ones give the same tree at once.
    from neuronprof import _report_ops

    walked: list[int] = []
    stack_walk = _report_ops._stack_walk
    _report_ops._stack_walk = lambda *a: walked.append(1) or stack_walk(*a)  # type: ignore[assignment]
    try:
        same_as_reference(timeline)
    finally:
        _report_ops._stack_walk = stack_walk  # type: ignore[assignment]
    assert not walked
