"""The report's step timeline laid out on arrays, against the plain event-by-event lay-out.

``timeline_data`` finds depths, the events kept and their lanes on numpy columns; the
reference below walks the events one by one with a stack of open intervals and a
first-fit of device lanes. On generated timelines (spans that nest, cross, share a
start or last no time; several threads, more than ten of them; several ranks; times
far from the origin; a small cap) both must give the same data, to the byte.
"""

from __future__ import annotations

import json
from itertools import islice
from operator import attrgetter
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import neuronprof._report_timeline as drawing
from neuronprof import _vocabulary as vocab
from neuronprof._report_overview import _host_category
from neuronprof._report_timeline import timeline_data
from neuronprof.analysis.insights import DeviceEvent, HostEvent, Timeline
from neuronprof.analysis.insights._columns import of_timeline

_HOST_CATEGORIES = ("step", "op", "annotation", "runtime", "other")
_START, _END = attrgetter("start_ns"), attrgetter("end_ns")


def _reference(timeline: Timeline) -> dict[str, Any]:
    """The lay-out event by event: each thread's events by start (the later end first) on a stack."""
    parts = list(timeline.ranks) or [timeline]
    firsts = [
        min((e.start_ns for t in parts for e in t.host if e.category in _HOST_CATEGORIES), default=None),
        min((e.start_ns for t in parts for e in t.device), default=None),
    ]
    origin = min((f for f in firsts if f is not None), default=0)
    names: dict[str, int] = {}
    out: dict[str, Any] = {"lanes": [], "names": [], "events": [], "steps": [], "dropped": 0}
    for part in parts:
        rank = part.rank if timeline.ranks else None
        _reference_part(part, out, names, origin, drawing.MAX_TIMELINE_EVENTS // len(parts), rank)
    out["names"] = list(names)
    out["end_us"] = max((ev[1] + ev[2] for ev in out["events"]), default=0.0)
    if timeline.ranks:
        out["ranks"] = [t.rank for t in parts]
    return out


def _reference_part(
    timeline: Timeline, out: dict[str, Any], names: dict[str, int], origin: int, cap: int, rank: Optional[int]
) -> None:
    prefix = "" if rank is None else f"rank {rank} · "
    device = list(timeline.device)
    lanes: list[dict[str, Any]] = out["lanes"]
    events: list[list[Any]] = out["events"]

    def us(ns: int) -> float:
        return round((ns - origin) / 1000, 3)

    def lane(name: str, kind: str) -> int:
        lanes.append({"name": prefix + name, "kind": kind, **({} if rank is None else {"rank": rank})})
        return len(lanes) - 1

    def add(at: int, e: Any, kind: int) -> None:
        name = names.setdefault(e.name, len(names))
        events.append([at, us(e.start_ns), round((e.end_ns - e.start_ns) / 1000, 3), name, kind])

    by_depth: list[list[Any]] = [[] for _ in range(drawing.MAX_HOST_DEPTH)]
    threads: dict[str, list[Any]] = {}
    steps = sorted((e for e in timeline.host if e.category == "step"), key=_START)
    for e in timeline.host:
        if e.category in _HOST_CATEGORIES and e.category != "step":
            threads.setdefault(e.thread, []).append(e)
    too_deep = 0
    for per_thread in threads.values():
        stack: list[int] = []
        for e in sorted(per_thread, key=lambda e: (e.start_ns, -e.end_ns)):
            while stack and stack[-1] <= e.start_ns:
                stack.pop()
            if len(stack) < drawing.MAX_HOST_DEPTH:
                by_depth[len(stack)].append(e)
            else:
                too_deep += 1
            stack.append(e.end_ns)
    budget = max(cap - len(steps) - min(len(device), cap // 2), 0)
    placed = list(islice(((depth, e.thread, e) for depth, level in enumerate(by_depth) for e in level), budget))
    dropped = too_deep + sum(map(len, by_depth)) - len(placed)
    if steps:
        at = lane("steps", "step")
        for e in steps:
            add(at, e, 1)
    thread_names = {t: f"host thread {i}" for i, t in enumerate(sorted(threads, key=str))}
    lane_of: dict[tuple[str, int], int] = {}
    for depth, thread, e in sorted(placed, key=lambda p: (thread_names[p[1]], p[0])):
        if (thread, depth) not in lane_of:
            lane_of[thread, depth] = lane(f"{thread_names[thread]} · depth {depth}", "host")
        kind = 4 if _host_category(e.name, e.category) == "communication" else 0 if e.category == "op" else 2
        add(lane_of[thread, depth], e, kind)
    device = sorted(device, key=_START)[: cap // 2]
    dropped += len(timeline.device) - len(device)
    ends: list[int] = []
    first = len(lanes)
    for d in device:
        free = [i for i, end in enumerate(ends) if end <= d.start_ns]
        if free:
            ends[free[0]] = d.end_ns
        else:
            ends.append(d.end_ns)
            lane(f"{timeline.device_label or 'device'} · lane {len(ends) - 1}", "device")
        add(first + (free[0] if free else len(ends) - 1), d, 4 if vocab.is_collective(d.name, vocab.K_DEVICE) else 3)
    out["steps"] += [[prefix + e.name, us(e.start_ns), us(e.end_ns)] for e in steps]
    out["dropped"] += dropped


_HOST_NAMES = ["aten::mm", "aten::add", "nccl:all_reduce", "cudaLaunchKernel", "range", "f.py(1): g"]
_CATEGORY = {
    "aten::mm": "op",
    "aten::add": "op",
    "nccl:all_reduce": "op",
    "cudaLaunchKernel": "runtime",
    "range": "annotation",
    "f.py(1): g": "python",
}
_DEVICE_NAMES = ["gemm", "ncclDevKernel_AllReduce", "Memcpy HtoD"]


@st.composite
def _timelines(draw: st.DrawFn, base: int) -> Timeline:
    """Host events on a few threads (nested, crossing, equal starts, zero or negative lengths), steps, device work."""
    threads = draw(st.sampled_from([["0"], ["0", "1"], [str(i) for i in range(12)], ["b", "a", "1", "10", "2"]]))
    nested = draw(st.booleans())
    host: list[HostEvent] = []
    for i in range(draw(st.integers(0, 50))):
        name = draw(st.sampled_from(_HOST_NAMES))
        thread = draw(st.sampled_from(threads))
        start = draw(st.integers(0, 400))
        length = draw(st.sampled_from([0, 0, 1, 3, 10, 40, 150]) if nested else st.integers(-2, 120))
        if nested:  # inside the last event of its thread that is still open: a clean nesting, mostly
            mine = [e for e in host if e.thread == thread and e.category != "step"]
            if mine and draw(st.booleans()):
                parent = mine[-1]
                start = draw(st.integers(parent.start_ns, parent.end_ns))
                length = min(length, parent.end_ns - start)
        host.append(HostEvent(f"{name}#{i % 7}", base + start, base + start + length, thread, _CATEGORY[name]))
    for i in range(draw(st.integers(0, 3))):
        start = draw(st.integers(0, 300))
        host.append(HostEvent(f"ProfilerStep#{i}", base + start, base + start + 100, threads[0], "step"))
    device = []
    for _ in range(draw(st.integers(0, 30))):
        start, length = draw(st.integers(0, 500)), draw(st.sampled_from([0, 1, 5, 20, 80]))
        device.append(DeviceEvent(draw(st.sampled_from(_DEVICE_NAMES)), base + start, base + start + length))
    if draw(st.integers(0, 3)) == 0:  # far from the others: microseconds beyond a float's exact thousandths
        far = base + (1 << draw(st.sampled_from([49, 52, 60]))) + draw(st.integers(0, 999))
        host.append(HostEvent("aten::mm#far", far, far + draw(st.integers(0, 5000)), threads[-1]))
        device.append(DeviceEvent("gemm", far + 7, far + 1007))
    order = draw(st.permutations(range(len(host))))
    return Timeline(tuple(host[i] for i in order), tuple(device), device_label=draw(st.sampled_from([None, "CUDA"])))


def _same(timeline: Timeline) -> None:
    out = timeline_data(of_timeline(timeline))
    assert json.dumps(out, ensure_ascii=False) == json.dumps(_reference(timeline), ensure_ascii=False)


_BASES = st.sampled_from([0, 1_700_000_000_000_000_000, -(1 << 40), 1 << 62, 1 << 70])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data(), _BASES, st.integers(2, 60), st.integers(1, 6), st.sampled_from([0, 5, 256]))
def test_the_timeline_is_laid_out_as_event_by_event(
    monkeypatch: pytest.MonkeyPatch, data: st.DataObject, base: int, cap: int, depth: int, stack_below: int
) -> None:
    monkeypatch.setattr(drawing, "MAX_TIMELINE_EVENTS", cap)
    monkeypatch.setattr(drawing, "MAX_HOST_DEPTH", depth)
    monkeypatch.setattr(drawing, "_STACK_BELOW", stack_below)  # 0: every thread's depths on arrays
    _same(data.draw(_timelines(base)))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data(), st.integers(1, 4), st.integers(4, 80))
def test_ranks_are_laid_out_as_event_by_event(
    monkeypatch: pytest.MonkeyPatch, data: st.DataObject, n_ranks: int, cap: int
) -> None:
    monkeypatch.setattr(drawing, "MAX_TIMELINE_EVENTS", cap)
    monkeypatch.setattr(drawing, "_STACK_BELOW", 0)
    parts = [data.draw(_timelines(1_000_000 * r)) for r in range(n_ranks)]
    ranks = tuple(Timeline(p.host, p.device, device_label=p.device_label, rank=r) for r, p in enumerate(parts))
    whole = Timeline(tuple(e for p in parts for e in p.host), tuple(d for p in parts for d in p.device), ranks=ranks)
    _same(whole)


def test_a_long_nested_thread_and_crossing_spans_are_laid_out_as_event_by_event() -> None:
    # Thousands of events: the arrays' path at its default size, a clean nesting and then one that crosses.
    host = []
    for i in range(3000):
        t = i * 100
        host += [
            HostEvent("aten::linear", t, t + 90, "main"),
            HostEvent("aten::mm", t + 10, t + 60, "main"),
            HostEvent("cudaLaunchKernel", t + 20, t + 20, "main", "runtime"),
            HostEvent("aten::add", t + 60, t + 80, "side"),
        ]
    device = [DeviceEvent("gemm", 50 * i, 50 * i + 70 + i % 3) for i in range(6000)]
    clean = Timeline(tuple(host), tuple(device), device_label="CUDA")
    _same(clean)
    crossing = Timeline((*host, HostEvent("range", 55, 150_005, "main", "annotation")), tuple(device))
    _same(crossing)


def test_times_too_far_for_an_exact_float_give_python_s_division() -> None:
    # 2**60 + ... ns from the origin: as a float first, then divided, it would end in .75, not .0.
    far = 1_152_921_763_400_397_884
    host = (HostEvent("aten::mm", 0, 10), HostEvent("aten::add", far, far + 1, "1"))
    _same(Timeline(host, (DeviceEvent("gemm", far, far + 3),)))
    assert timeline_data(of_timeline(Timeline(host)))["events"][1][1] == far / 1000
