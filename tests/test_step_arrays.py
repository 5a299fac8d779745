"""Property tests of the step rules' array paths against the list paths they replace.

``communication_wait``/``host_overhead`` and ``idle_device``/``cpu_bound`` read every step of
a trace at once, on arrays; times too far apart for that (or beyond int64) still go step by
step, on Python ints. Each
array helper is checked against the list one here, and the rules' findings on both paths
against each other: same result, ties, empty spans and overlapping windows included.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuronprof.analysis.insights import _device_rules, _step_rules
from neuronprof.analysis.insights._device_rules import _idle_and_bound, _span_ids
from neuronprof.analysis.insights._intervals import (
    _clip,
    _firsts_of_pairs,
    _grouped_gaps,
    _grouped_lengths,
    _grouped_union,
    _LargestGaps,
    _length,
    _positions,
    _shifts,
    _Spans,
    _subtract,
    _union,
)
from neuronprof.analysis.insights._step_rules import _step_time
from neuronprof.analysis.insights._timeline import DeviceEvent, HostEvent, Timeline
from neuronprof.analysis.insights._tree import _Profile

_GROUPS = 4
_grouped_spans = st.lists(
    st.tuples(st.integers(0, _GROUPS - 1), st.integers(-20, 60), st.integers(0, 12)).map(
        lambda t: (t[0], t[1], t[1] + t[2])  # empty spans (length 0) and touching ones are common
    ),
    max_size=40,
)
_windows = st.lists(st.tuples(st.integers(-30, 80), st.integers(-30, 80)), min_size=_GROUPS, max_size=_GROUPS)


def _arrays(spans: list[tuple[int, int, int]]) -> tuple[Any, Any, Any]:
    return tuple(np.array([s[i] for s in spans], np.int64) for i in range(3))  # type: ignore[return-value]


def _of_group(spans: list[tuple[int, int, int]], g: int) -> list[tuple[int, int]]:
    return [(s, e) for h, s, e in spans if h == g]


@given(_grouped_spans, st.sampled_from([0, 10**15, -(10**15)]))
def test_each_groups_union_is_its_union(spans: list[tuple[int, int, int]], offset: int) -> None:
    group, starts, ends = _arrays([(g, s + offset, e + offset) for g, s, e in spans])
    got_group, got_starts, got_ends = _grouped_union(group, starts, ends, _shifts(_GROUPS, starts, ends))
    got = list(zip(got_group.tolist(), got_starts.tolist(), got_ends.tolist()))
    expected = [(g, s, e) for g in range(_GROUPS) for s, e in _union(_of_group(spans, g))]
    assert got == [(g, s + offset, e + offset) for g, s, e in expected]
    lengths = _grouped_lengths(group, starts, ends, _GROUPS, _shifts(_GROUPS, starts, ends))
    assert lengths.tolist() == [_length(_union(_of_group(spans, g))) for g in range(_GROUPS)]


@given(_grouped_spans, _windows)
def test_each_groups_gaps_are_its_window_less_its_union(
    spans: list[tuple[int, int, int]], windows: list[tuple[int, int]]
) -> None:
    group, starts, ends = _arrays(spans)
    lo, hi = (np.array(c, np.int64) for c in zip(*windows))
    got = _grouped_gaps(group, starts, ends, lo, hi, _shifts(_GROUPS, starts, ends, lo, hi))
    # The list path: the window less the union, an empty span inside it splitting a gap in two.
    expected = [
        (g, s, e) for g, window in enumerate(windows) for s, e in _subtract([window], _union(_of_group(spans, g)))
    ]
    assert list(zip(*(a.tolist() for a in got))) == expected


@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)).map(lambda t: (t[0], t[0] + t[1])), max_size=25),
    st.lists(st.tuples(st.integers(-10, 90), st.integers(-10, 90)), min_size=1, max_size=8),
)
def test_the_spans_lengths_in_windows_are_the_clipped_lengths(
    spans: list[tuple[int, int]], windows: list[tuple[int, int]]
) -> None:
    merged = _Spans(_union(spans))
    lo, hi = (np.array(c, np.int64) for c in zip(*windows))
    assert merged.lengths_in(lo, hi).tolist() == [_length(_clip(_union(spans), a, b)) for a, b in windows]


def test_times_that_do_not_fit_are_refused_for_the_list_path() -> None:
    with pytest.raises(OverflowError):
        _shifts(2, np.array([2**63], object))
    with pytest.raises(OverflowError):
        _shifts(4, np.array([0, 2**61], np.int64))  # too far apart for four bands
    with pytest.raises(OverflowError):
        _Spans([(0, 2**62)]).lengths_in(np.array([0], np.int64), np.array([1], np.int64))
    assert _shifts(3, np.array([5, 9], np.int64), np.empty(0, np.int64)) == (5, 5)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=30))
def test_positions_are_the_ranges_laid_end_to_end(ranges: list[tuple[int, int]]) -> None:
    lo, counts = (np.array([r[i] for r in ranges], np.int64) for i in range(2))
    assert _positions(lo, counts).tolist() == [a + i for a, n in ranges for i in range(n)]


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), max_size=30))
def test_span_ids_are_equal_for_equal_spans_by_start_then_end(spans: list[tuple[int, int]]) -> None:
    starts = np.array([s for s, _ in spans], np.int64)
    ends = np.array([s + d for s, d in spans], np.int64)
    ids = _span_ids(starts, ends).tolist()
    distinct = sorted(set(zip(starts.tolist(), ends.tolist())))
    assert ids == [distinct.index(span) for span in zip(starts.tolist(), ends.tolist())]


_NAMES = ["a", "b", "a", "x", "b", "y"]
"""Two ids may name one op (two keys of one name)."""


@given(
    st.lists(st.tuples(st.integers(1, 6), st.integers(0, 5), st.integers(0, 5), st.integers(0, 3)), max_size=40),
    st.integers(0, 8),
)
def test_every_steps_gaps_at_once_are_the_gaps_added_one_by_one(gaps: list[tuple[int, int, int, int]], k: int) -> None:
    gaps.sort(key=lambda g: g[3])  # by step, as the rules add them
    one_by_one, at_once = _LargestGaps(), _LargestGaps()
    places = [f"step {i}" for i in range(4)]
    for gap, before, after, step in gaps:
        one_by_one.add(gap, _NAMES[before], _NAMES[after], places[step])
    gap, before, after, step = (np.array([g[j] for g in gaps], np.int64) for j in range(4))
    at_once.add_all(gap, before, after, _NAMES, places, step)
    assert at_once.shown(k) == one_by_one.shown(k)
    assert at_once._best == one_by_one._best


@pytest.mark.parametrize("ids", [6, 400])
def test_the_largest_gap_of_each_pair_is_the_first_of_a_sort(ids: int) -> None:
    # Few pairs: a table of them; many (400 ids a side): a sort by pair, then by gap.
    r = np.random.default_rng(ids)
    gaps, before, after = r.integers(1, 5, 600), r.integers(0, ids, 600), r.integers(0, ids, 600)
    pair = before * (ids + 1) + after
    order = np.lexsort((np.arange(600), -gaps, pair))
    expected = order[np.concatenate(([True], pair[order][1:] != pair[order][:-1]))]
    assert _firsts_of_pairs(gaps, before, after, ids).tolist() == expected.tolist()


# -- the rules on their array paths give the list paths' findings ---------------------------

_TOP = ["aten::add", "aten::mm", "aten::item", "c10d::allreduce_", "aten::copy_"]
_INSIDE = [
    ("cudaLaunchKernel", "runtime"),
    ("cudaStreamSynchronize", "runtime"),
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "annotation"),
    ("aten::empty", "op"),
]
_KERNELS = ["gemm_kernel", "ncclDevKernel_AllReduce", "add_kernel"]


def _timeline(seed: int, offset: int = 0) -> Timeline:
    """Steps on one or two threads (overlapping), or none; ops that touch, nest, last no time; their kernels.

    In µs (the findings print tenths of them), from ``offset`` ns.
    """
    r = random.Random(seed)
    host: list[HostEvent] = []
    device: list[DeviceEvent] = []
    ids = itertools.count(1)

    def ns(us: int) -> int:
        return us * 1000 + offset

    def ops(t: int, until: int, thread: str, depth: int) -> None:
        while t < until and r.random() < 0.85:
            t += r.choice([0, 0, 1, r.randint(0, 40)])  # touching ops, and gaps
            end = min(t + r.choice([0, r.randint(1, 60)]), until)  # some last no time
            ext = next(ids)
            if depth:
                name, category = r.choice(_INSIDE)
            else:
                name, category = r.choice(_TOP), "op"
            host.append(HostEvent(name, ns(t), ns(end), thread, category, ext_id=ext))  # type: ignore[arg-type]
            if r.random() < 0.4:
                start = end + r.randint(-5, 30)
                device.append(DeviceEvent(r.choice(_KERNELS), ns(start), ns(start + r.randint(0, 50)), ext_id=ext))
            if depth < 2 and end > t and r.random() < 0.5:
                ops(t, end, thread, depth + 1)
            t = end

    if r.random() < 0.8:
        t = 0
        for step in range(1, r.randint(1, 4) + 1):
            length = r.randint(20, 400)
            for thread in ("0", "1")[: r.randint(1, 2)]:
                begin = t + r.randint(0, 30)  # the threads' steps overlap
                host.append(HostEvent(f"ProfilerStep#{step}", ns(begin), ns(begin + length), thread, "step"))
                ops(begin + 1, begin + length - 1, thread, 0)
                if r.random() < 0.5:  # device work up to the step's start exactly, or from its end
                    at = r.choice([begin, begin + length])
                    device.append(DeviceEvent("edge_kernel", ns(at - r.randint(0, 20)), ns(at)))
                    device.append(DeviceEvent("edge_kernel", ns(at), ns(at + r.randint(0, 20))))
            t += length + r.randint(-10, 30)
        if r.random() < 0.3:
            host.append(HostEvent("nccl:all_reduce", ns(50), ns(180), "0:gloo", "annotation"))
    else:  # no step: the whole recording is the step, from its first op to its last
        ops(10, 600, "0", 0)
        for start, end in ((0, r.randint(0, 20)), (600, 600 + r.randint(0, 20))):
            host.append(HostEvent("cudaDeviceSynchronize", ns(start), ns(end), "0", "runtime"))
    r.shuffle(host)
    return Timeline(tuple(host), tuple(device), backend="cuda", device_label="CUDA")


def _findings(timeline: Timeline, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """The two rules' findings, every threshold lowered so that they show their figures and all their gaps."""
    lowered = {
        _step_rules: ("COMMUNICATION_SHARE", "HOST_OVERHEAD_SHARE"),
        _device_rules: ("IDLE_SHARE", "CPU_BOUND_SHARE"),
    }
    for module, names in lowered.items():
        for name in names:
            monkeypatch.setattr(module, name, -1.0)
        monkeypatch.setattr(module, "GAPS_SHOWN", 100)
    monkeypatch.setattr(_step_rules, "HOST_OVERHEAD_MIN_OPS", 0)
    p = _Profile(timeline)
    found = (_step_time(p), _idle_and_bound(p))
    return (*found, p.host_op_us, p.device_busy_us, p.bound)


def _list_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any) -> Any:
        raise OverflowError

    monkeypatch.setattr(_step_rules, "_shifts", refuse)
    monkeypatch.setattr(_device_rules, "_shifts", refuse)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32))
def test_the_rules_read_every_step_at_once_as_they_read_them_one_by_one(seed: int) -> None:
    timeline = _timeline(seed)
    with pytest.MonkeyPatch.context() as m:
        at_once = _findings(timeline, m)
    with pytest.MonkeyPatch.context() as m:
        _list_paths(m)
        one_by_one = _findings(timeline, m)
    assert at_once == one_by_one


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32))
def test_the_rules_read_steps_far_from_zero_as_near_it(seed: int) -> None:
    # Near 2**62 the steps are shifted no more (the list path); epoch nanoseconds still are.
    found = []
    for offset in (0, 1_700_000_000_000_000_000, 2**62):
        with pytest.MonkeyPatch.context() as m:
            found.append(_findings(_timeline(seed, offset), m))
    assert found[1] == found[0]
    assert found[2] == found[0]
