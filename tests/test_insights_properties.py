"""Property tests of the findings engine's fast paths against straightforward references.

The engine reads traces of millions of events, so it finds things by bisection, keeps
running bests instead of lists, and reads a trace's events straight into its call tree.
Each of those is checked here, on generated inputs, against the plain version it
replaces (a scan, a full sort, the ``HostEvent`` timeline): same result, ties included.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any, Optional

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.trace_builders import op, write_trace
from neuronprof import _vocabulary as vocab
from neuronprof._report_timeline import timeline_data
from neuronprof.analysis import load_trace
from neuronprof.analysis.insights import analyze_timeline
from neuronprof.analysis.insights._columns import EventColumns, of_timeline
from neuronprof.analysis.insights._forest import KINDS, _Forest, _union_lengths
from neuronprof.analysis.insights._intervals import _clip, _LargestGaps, _Spans, _union
from neuronprof.analysis.insights._step_rules import _Neighbours
from neuronprof.analysis.insights._timeline import DeviceEvent, HostEvent, Timeline
from neuronprof.analysis.insights._trace import read_of
from neuronprof.analysis.insights._tree import _is_region, _Profile
from neuronprof.analysis.insights._tree_reader import forest_of

_spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)).map(lambda t: (t[0], t[0] + t[1])), max_size=25)


def _reference_union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


@given(_spans)
def test_the_union_is_the_plain_merge(spans: list[tuple[int, int]]) -> None:
    assert _union(spans) == _reference_union(spans)


@given(_spans, st.integers(-5, 80), st.integers(-5, 80))
def test_a_window_cut_by_bisection_is_the_scan(spans: list[tuple[int, int]], lo: int, hi: int) -> None:
    merged = _union(spans)
    assert _Spans(merged).clip(lo, hi) == _clip(merged, lo, hi)


@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10)), min_size=1, max_size=20),
    st.lists(st.tuples(st.integers(-5, 60), st.integers(0, 10)), max_size=20),
)
def test_the_ops_beside_a_gap_are_the_scans(ops: list[tuple[int, int]], gaps: list[tuple[int, int]]) -> None:
    starts = np.array([s for s, _ in ops], np.int64)  # equal ends and starts: ties
    ends = np.array([s + d for s, d in ops], np.int64)
    windows = [(s, s + d) for s, d in gaps]
    before, after = _Neighbours(starts, ends).beside(windows)
    expected = []
    for lo, hi in windows:
        # The scan it replaces: the last-ending op before the gap, the first-starting one after (first on a tie).
        earlier = [i for i in range(len(ops)) if ends[i] <= lo]
        later = [i for i in range(len(ops)) if starts[i] >= hi]
        expected.append(
            (
                max(earlier, key=lambda i: ends[i]) if earlier else -1,
                min(later, key=lambda i: starts[i]) if later else -1,
            )
        )
    assert list(zip(before.tolist(), after.tolist())) == expected


@given(
    st.lists(st.tuples(st.integers(1, 6), st.sampled_from("abc"), st.sampled_from("xy"), st.sampled_from("PQ"))),
    st.integers(0, 8),
)
def test_the_largest_gaps_are_the_sorted_firsts(gaps: list[tuple[int, str, str, str]], k: int) -> None:
    largest = _LargestGaps()
    for g in gaps:
        largest.add(*g)
    # The reference: every gap, longest first (a stable sort), the first of each pair of ops.
    firsts: dict[tuple[str, str], tuple[int, str, str, str]] = {}
    for g in sorted(gaps, key=lambda g: -g[0]):
        firsts.setdefault((g[1], g[2]), g)
    assert largest.shown(k) == list(firsts.values())[:k]


_ID = st.integers(0, 5)
"""An index into ``_GAP_NAMES``: two indices may name one op (two keys of one name, other shapes)."""
_GAP_NAMES = ["a", "b", "a", "x", "b", "y"]


@given(st.lists(st.lists(st.tuples(st.integers(1, 6), _ID, _ID), max_size=12), max_size=4), st.integers(0, 8))
def test_gaps_added_a_step_at_a_time_are_the_gaps_added_one_by_one(
    steps: list[list[tuple[int, int, int]]], k: int
) -> None:
    one_by_one, at_once = _LargestGaps(), _LargestGaps()
    for i, gaps in enumerate(steps):
        for gap, before, after in gaps:
            one_by_one.add(gap, _GAP_NAMES[before], _GAP_NAMES[after], f"step {i}")
        gap, before, after = (np.array([g[j] for g in gaps], np.int64) for j in range(3))
        at_once.add_all(gap, before, after, _GAP_NAMES, f"step {i}")
    assert at_once.shown(k) == one_by_one.shown(k)
    assert at_once._best == one_by_one._best  # each pair's gap and its place: what orders ties between pairs


# -- a trace read straight into the call tree reads as its HostEvent timeline does ----------

_OPS = ["aten::add", "aten::mul", "aten::pow", "aten::mean", "aten::mm", "aten::copy_", "aten::_to_copy", "aten::item"]
_OTHER = [
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation"),
    ("Torch-Compiled Region: 0/1", "cpu_op"),
    ("model.py(12): forward", "python_function"),
    ("nccl:all_reduce", "user_annotation"),
]
_DEVICE = [("gemm_kernel", "kernel"), ("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy"), ("ncclDevKernel_x", "kernel")]


def _random_trace(seed: int) -> list[dict[str, Any]]:
    """Steps of nested ops, frames, runtime calls and the kernels they launch, on one or two threads."""
    r = random.Random(seed)
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
    ]
    ids = iter(range(1, 10**6))

    def fill(t0: int, t1: int, tid: int, depth: int, owner: int) -> None:
        t = t0
        while t < t1 - 2 and r.random() < 0.9:
            t += r.randint(0, 20)
            end = min(t + r.randint(1, max(1, 120 // (depth + 1))), t1)
            if end <= t:
                return
            ext = next(ids)
            if depth and r.random() < 0.25:
                name = r.choice(["cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize"])
                events.append(op(name, t, end - t, cat="cuda_runtime", tid=tid, External_id=owner, correlation=ext))
                kernel, cat = r.choice(_DEVICE)
                start = end + r.randint(0, 20)
                dur = r.randint(1, 60)
                events.append(op(kernel, start, dur, cat=cat, pid=0, tid=7, External_id=owner, correlation=ext))
            elif r.random() < 0.2:
                name, cat = r.choice(_OTHER)
                events.append(op(name, t, end - t, cat=cat, tid=tid, External_id=ext))
                if depth < 3:
                    fill(t, end, tid, depth + 1, ext)
            else:
                shapes = [r.choice([[4, 8], [8], []]) for _ in range(2)]
                types = [r.choice(["float", "c10::BFloat16", "Scalar"]) for _ in range(2)]
                name = r.choice(_OPS)
                events.append(op(name, t, end - t, tid=tid, External_id=ext, Input_Dims=shapes, Input_type=types))
                if depth < 3 and r.random() < 0.6:
                    fill(t, end, tid, depth + 1, ext)
            t = end

    t = 100
    for step in range(1, r.randint(1, 3) + 1):
        length = r.randint(100, 1500)
        for tid in (1, 2)[: r.randint(1, 2)]:
            events.append(op(f"ProfilerStep#{step}", t, length, cat="user_annotation", tid=tid))
            fill(t + 1, t + length - 1, tid, 0, 0)
        t += length + r.randint(0, 50)
    r.shuffle(events)
    return events


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32))
def test_a_trace_read_into_columns_gives_its_timelines_findings_and_drawing(tmp_path: Path, seed: int) -> None:
    path = write_trace(tmp_path / f"{seed}.json", _random_trace(seed))
    trace = load_trace(path)
    events = trace.timeline()  # one HostEvent per event: the public timeline
    columns = read_of(trace).columns  # what the report's panes read
    assert _column_rows(columns) == _event_rows(events)
    assert trace.insights() == analyze_timeline(events)
    assert timeline_data(columns) == timeline_data(of_timeline(events))


def _column_rows(cols: EventColumns) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The columns' events as the timeline's fields: host then device, ids None for none."""

    def some(i: int) -> Optional[int]:
        return None if i < 0 else i

    host = [
        (cols.names[k], s, e, cols.threads[t], cols.categories[k], some(x), some(c), cols.shapes[k], cols.dtypes[k])
        for k, s, e, t, x, c in zip(
            *(a.tolist() for a in (cols.key, cols.start, cols.end, cols.thread, cols.ext, cols.corr))
        )
    ]
    device = [
        (cols.names[k], s, e, cols.categories[k], some(x), some(c))
        for k, s, e, x, c in zip(*(a.tolist() for a in (cols.dkey, cols.dstart, cols.dend, cols.dext, cols.dcorr)))
    ]
    return host, device


def _event_rows(tl: Timeline) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    host = [
        (e.name, e.start_ns, e.end_ns, e.thread, e.category, e.ext_id, e.correlation, e.input_shapes, e.input_dtypes)
        for e in tl.host
    ]
    return host, [(d.name, d.start_ns, d.end_ns, d.category, d.ext_id, d.correlation) for d in tl.device]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32), st.integers(1, 3), st.lists(st.integers(0, 2), max_size=3))
def test_a_trace_read_as_columns_holds_its_timelines_events(
    tmp_path: Path, seed: int, ranks: int, more: list[int]
) -> None:
    if ranks == 1:
        path = write_trace(tmp_path / f"{seed}.json", _random_trace(seed))
    else:  # a folder of ranks' traces
        path = Path(tempfile.mkdtemp(dir=tmp_path))  # a new folder each example: tmp_path is shared by them
        # A file per rank, and ``more`` files of some ranks: read in the folder's order, a rank's
        # files may come apart (its columns are then its own, else views into the whole run's).
        owners = list(range(ranks)) + [r % ranks for r in more]
        random.Random(seed).shuffle(owners)
        for i, r in enumerate(owners):
            info = {"rank": r, "world_size": ranks}
            write_trace(path / f"{i:02d}.pt.trace.json", _random_trace(seed + i), distributedInfo=info)
    trace = load_trace(path)
    timeline = trace.timeline()
    columns = read_of(trace).columns
    assert _column_rows(columns) == _event_rows(timeline) == _column_rows(of_timeline(timeline))
    assert [_column_rows(c) for c in columns.ranks] == [_event_rows(t) for t in timeline.ranks]
    assert (columns.backend, columns.device_label, columns.notes) == (
        timeline.backend,
        timeline.device_label,
        timeline.notes,
    )


_TANGLED = [
    ("aten::add", "cpu_op"),
    ("aten::mm", "cpu_op"),
    ("Torch-Compiled Region: 0/1", "cpu_op"),
    ("model.py(1): f", "python_function"),
    ("range", "user_annotation"),
    ("cudaLaunchKernel", "cuda_runtime"),
    ("cudaDeviceSynchronize", "cuda_runtime"),
]


def _tangled_trace(seed: int) -> list[dict[str, Any]]:
    """Spans that cross, touch, last no time or share a start, and ids repeated, missing or pointing nowhere."""
    r = random.Random(seed)
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
    ]
    for step in range(r.randint(0, 3)):
        events.append(op(f"ProfilerStep#{step + 1}", 100 * step, r.randint(0, 300), cat="user_annotation"))
    for _ in range(r.randint(0, 60)):
        name, cat = r.choice(_TANGLED)
        ids = {"External_id": r.randint(0, 12)} if r.random() < 0.7 else {}
        if cat == "cuda_runtime" or r.random() < 0.2:
            ids["correlation"] = r.randint(0, 12)
        span = r.choice([0, 0, 1, 5, 20, 50, 200])
        events.append(op(name, r.randint(0, 400), span, cat=cat, tid=r.choice([1, 2]), **ids))
    for _ in range(r.randint(0, 30)):
        ids = {"External_id": r.randint(0, 12)} if r.random() < 0.7 else {}
        if r.random() < 0.8:
            ids["correlation"] = r.randint(0, 12)
        kernel, cat = r.choice(_DEVICE)
        events.append(op(kernel, r.randint(0, 500), r.randint(0, 30), cat=cat, pid=0, tid=7, **ids))
    r.shuffle(events)
    return events


class _Ref:
    """A node of the reference tree: an event, its parent, children and device work."""

    def __init__(self, ev: HostEvent) -> None:
        self.ev, self.parent = ev, None
        self.children: list[_Ref] = []
        self.device: list[DeviceEvent] = []


def _reference_tree(host: tuple[HostEvent, ...], device: tuple[DeviceEvent, ...]) -> tuple[list[_Ref], int]:
    """The call tree built event by event, its re-dispatches folded, and how many device events stayed unlinked.

    Per thread, by start then longest first, each node the child of the innermost open one it
    starts and ends within; each piece of device work the op's whose External id its runtime
    call carries (when that op holds the call), else the innermost op around the call, else the
    op of its own External id. Then, parents first, an only child the vocabulary folds into its
    parent (``folds_into_parent``) gives the parent its children and its device work.
    """
    nodes: list[_Ref] = []
    by_thread: dict[str, list[_Ref]] = {}
    for ev in host:
        by_thread.setdefault(ev.thread, []).append(_Ref(ev))
    for events in by_thread.values():
        events.sort(key=lambda n: (n.ev.start_ns, -n.ev.end_ns))
        stack: list[_Ref] = []
        for n in events:
            while stack and (n.ev.start_ns >= stack[-1].ev.end_ns or n.ev.end_ns > stack[-1].ev.end_ns):
                stack.pop()
            if stack:
                n.parent = stack[-1]
                stack[-1].children.append(n)
            stack.append(n)
        nodes += events
    runtime_by_corr: dict[Optional[int], _Ref] = {}
    op_by_ext: dict[Optional[int], _Ref] = {}
    for n in nodes:
        if n.ev.category == "runtime" and n.ev.correlation is not None:
            runtime_by_corr.setdefault(n.ev.correlation, n)
        elif (n.ev.category == "op" or _is_region(n.ev.name)) and n.ev.ext_id is not None:
            op_by_ext.setdefault(n.ev.ext_id, n)
    unlinked = 0
    for d in device:
        target = None
        rt = runtime_by_corr.get(d.correlation)
        if rt is not None:
            owner = op_by_ext.get(rt.ev.ext_id)
            if owner is not None and owner.ev.start_ns <= rt.ev.start_ns and rt.ev.end_ns <= owner.ev.end_ns:
                target = owner
            else:
                target = rt.parent
                while target is not None and target.ev.category != "op" and not _is_region(target.ev.name):
                    target = target.parent
        target = target or op_by_ext.get(d.ext_id)
        if target is None:
            unlinked += 1
        else:
            target.device.append(d)
    folded = set()
    for n in nodes:
        up = n.parent
        kind = KINDS.get(n.ev.category, vocab.K_OTHER)
        if up is not None and len(up.children) == 1 and vocab.folds_into_parent(up.ev.name, n.ev.name, kind):
            up.children = n.children
            for c in n.children:
                c.parent = up
            up.device = [*up.device, *n.device]
            folded.add(id(n))
    return [n for n in nodes if id(n) not in folded], unlinked


def _shape(nodes: list[_Ref], unlinked: int) -> tuple[Any, ...]:
    place = {id(n): i for i, n in enumerate(nodes)}
    return unlinked, [
        (
            n.ev.name,
            n.ev.start_ns,
            n.ev.end_ns,
            n.ev.thread,
            n.ev.category,
            place[id(n.parent)] if n.parent is not None else None,
            [place[id(c)] for c in n.children],
            [(d.name, d.start_ns, d.end_ns) for d in n.device],
            n.ev.end_ns
            - n.ev.start_ns
            - sum(e - s for s, e in _union((c.ev.start_ns, c.ev.end_ns) for c in n.children)),
        )
        for n in nodes
    ]


def _forest_shape(f: _Forest) -> tuple[Any, ...]:
    """The forest's rows as ``_shape`` gives the reference's nodes, read through the rows' nodes."""
    rows = []
    for i in range(len(f)):
        n = f.node(i)
        parent = n.parent
        rows.append(
            (
                n.name,
                n.start_ns,
                n.end_ns,
                n.thread,
                n.category,
                parent._i if parent is not None else None,
                [c._i for c in n.children],
                [(d.name, d.start_ns, d.end_ns) for d in n.device],
                n.self_ns(),
            )
        )
        # A row's subtree is the rows from it to its last one, in tree order.
        assert [m._i for m in n.walk()] == list(range(i, int(f.last[i]) + 1))
    # Self times read for many rows at once are each row's own.
    assert f.self_ns(np.arange(len(f))).tolist() == [row[-1] for row in rows]
    return f.unlinked, rows


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32))
def test_a_tree_built_as_it_is_read_is_the_tree_built_event_by_event(tmp_path: Path, seed: int) -> None:
    path = write_trace(tmp_path / f"{seed}.json", _tangled_trace(seed))
    trace = load_trace(path)
    events = trace.timeline()
    expected = _shape(*_reference_tree(events.host, events.device))
    _, columns, ((offset, whats),) = read_of(trace)
    assert _forest_shape(forest_of(columns, whats, offset)) == expected
    assert _forest_shape(_Profile(events).forest) == expected  # a timeline made by hand, or by a session's feeder
    assert trace.insights() == analyze_timeline(events)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["t1", "t2"]), st.integers(0, 50), st.integers(1, 30), st.sampled_from(["op", "runtime"])
        ),
        max_size=60,
    ),
    st.integers(2, 40),
)
def test_the_report_draws_the_shallowest_events_first_as_a_full_sort_does(
    monkeypatch: Any, spans: list[tuple[str, int, int, str]], cap: int
) -> None:
    import neuronprof._report_timeline as drawing
    from neuronprof.analysis.insights import HostEvent, Timeline

    monkeypatch.setattr(drawing, "MAX_TIMELINE_EVENTS", cap)
    host = [HostEvent(f"e{i}", s, s + d, thread=t, category=c) for i, (t, s, d, c) in enumerate(spans)]
    out = timeline_data(of_timeline(Timeline(tuple(host))))
    # The reference: every event's depth, all of them sorted by (depth, order), cut to the budget.
    placed = []
    for thread in dict.fromkeys(e.thread for e in host):
        stack: list[int] = []
        for e in sorted((e for e in host if e.thread == thread), key=lambda e: (e.start_ns, -e.end_ns)):
            while stack and stack[-1] <= e.start_ns:
                stack.pop()
            placed.append((len(stack), thread, len(placed), e))
            stack.append(e.end_ns)
    kept = sorted((p for p in placed if p[0] < drawing.MAX_HOST_DEPTH), key=lambda p: (p[0], p[2]))[:cap]
    lanes = {t: f"host thread {i}" for i, t in enumerate(sorted({e.thread for e in host}))}
    expected = [
        (f"{lanes[thread]} · depth {depth}", e.name)
        for depth, thread, _, e in sorted(kept, key=lambda p: (lanes[p[1]], p[0]))
    ]
    drawn = [(out["lanes"][ev[0]]["name"], out["names"][ev[3]]) for ev in out["events"]]
    assert drawn == expected
    assert out["dropped"] == len(host) - len(kept)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2_000), st.integers(0, 300)), max_size=60), st.booleans())
def test_the_array_union_is_the_union_of_the_rules_and_of_the_report(
    spans: list[tuple[int, int]], by_start: bool
) -> None:
    """One rule of the union of spans, on lists (the findings' ``_union``, ``merged_intervals``) and on arrays.

    ``by_start``: spans in order of start already (spans of one start in any order), as a
    stream's are, which the arrays' union does not sort again.
    """
    from neuronprof import _vocabulary as vocab

    if by_start:
        spans = sorted(spans, key=lambda span: span[0])
    starts, ends = [s for s, _ in spans], [s + d for s, d in spans]
    for keep_empty, expected in ((False, vocab.merged_intervals(zip(starts, ends))), (True, _union(zip(starts, ends)))):
        merged_starts, merged_ends = vocab.merged_spans(starts, ends, keep_empty=keep_empty)
        assert list(zip(merged_starts.tolist(), merged_ends.tolist())) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(-10, 30)), max_size=30), st.randoms(use_true_random=False))
def test_the_array_union_does_not_depend_on_the_order_of_the_spans(spans: list[tuple[int, int]], rng: Any) -> None:
    # Spans in order of start and end are not sorted again; in any other order they are. Ties of one
    # start, and spans that end before they start (a hand-made timeline's event can), included.
    from neuronprof import _vocabulary as vocab

    shuffled = rng.sample(spans, len(spans))
    for keep_empty in (False, True):
        results = [
            [
                x.tolist()
                for x in vocab.merged_spans([s for s, _ in order], [s + d for s, d in order], keep_empty=keep_empty)
            ]
            for order in (sorted(spans, key=lambda sd: (sd[0], sd[0] + sd[1])), spans, shuffled)
        ]
        assert results[0] == results[1] == results[2]


@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 60), st.integers(0, 20)),
        max_size=40,
    ),
    st.sampled_from([1, 2**61]),
)
def test_the_union_of_each_group_is_the_plain_merge(spans: list[tuple[int, int, int]], scale: int) -> None:
    # Far-apart times (scale 2**61) take the span-by-span path; near ones the running maximum.
    group = np.array([g for g, _, _ in spans], np.int64)
    starts = np.array([s * scale for _, s, _ in spans], object if scale > 1 else np.int64)
    ends = np.array([(s + d) * scale for _, s, d in spans], object if scale > 1 else np.int64)
    got = _union_lengths(group, starts, ends, 5).tolist()
    expected = [
        sum(e - s for s, e in _union((s, e) for g2, s, e in zip(group, starts, ends) if g2 == g)) for g in range(5)
    ]
    assert got == expected
