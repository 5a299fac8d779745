"""The report's step timeline: lanes and events, as plain data for the page's script to draw.

A renderer's part (see ``report``): it gathers numbers from a
[`Timeline`][neuronprof.analysis.insights.Timeline] and writes nothing. A timeline of
several ranks gets each rank's own lanes.
"""

from __future__ import annotations

from itertools import islice
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof._report_overview import _host_category  # the overview's rule, so that both panes agree

if TYPE_CHECKING:
    from neuronprof.analysis.insights import Timeline

__all__ = ["MAX_HOST_DEPTH", "MAX_TIMELINE_EVENTS", "timeline_data"]

MAX_TIMELINE_EVENTS = 20_000
"""Events drawn on the timeline at most; beyond it the deepest host events are left out
(with a note on the page), which keeps a report of a long step at a few hundred KB."""

MAX_HOST_DEPTH = 6
"""Nesting levels drawn per host thread; deeper calls are summarised by their parents."""

_HOST_CATEGORIES = ("step", "op", "annotation", "runtime", "other")
_START, _END = attrgetter("start_ns"), attrgetter("end_ns")


def timeline_data(timeline: Timeline) -> dict[str, Any]:
    """Lanes and events for the step timeline, in microseconds from the first event.

    Host events are laid out per thread and nesting depth (rebuilt from their
    times); device events get as many lanes as they overlap. Python frames are
    left out (``with_stack`` can make them the bulk of a trace). A timeline of
    several ranks (``timeline.ranks``) gets each rank's own lanes, one rank after
    the other, named ``rank N · ...``, on the one clock the traces share: their
    steps ran side by side, so they are never drawn on one lane.

    Returns:
        ``{"lanes": [{"name", "kind"[, "rank"]}], "names": [str], "events": [[lane, start_us,
        dur_us, name_index, kind]], "steps": [[label, start_us, end_us]], "dropped": int[, "ranks": [int]]}``
        where kind is 0 host op, 1 step, 2 runtime/annotation/other, 3 device, 4 communication
        (a collective, host or device, as the overview counts it: ``gloo:all_reduce``, ``nccl:*``...).
    """
    parts = list(timeline.ranks) or [timeline]
    firsts = [
        min((e.start_ns for t in parts for e in t.host if e.category in _HOST_CATEGORIES), default=None),
        min((e.start_ns for t in parts for e in t.device), default=None),
    ]
    origin = min((f for f in firsts if f is not None), default=0)
    names: dict[str, int] = {}
    out: dict[str, Any] = {"lanes": [], "names": [], "events": [], "steps": [], "dropped": 0}
    # Each rank gets an equal share of the events drawn.
    budget = MAX_TIMELINE_EVENTS // len(parts)
    for part in parts:
        _lay_out(part, out, names, origin, budget, rank=part.rank if timeline.ranks else None)
    out["names"] = list(names)
    out["end_us"] = max((ev[1] + ev[2] for ev in out["events"]), default=0.0)
    if timeline.ranks:
        out["ranks"] = [t.rank for t in parts]
    return out


def _lay_out(
    timeline: Timeline, out: dict[str, Any], names: dict[str, int], origin: int, cap: int, *, rank: Optional[int]
) -> None:
    """Add one timeline's lanes and events to ``out`` (``_timeline_data``), at most ``cap`` events."""
    prefix = "" if rank is None else f"rank {rank} · "
    device = list(timeline.device)
    lanes: list[dict[str, Any]] = out["lanes"]
    events: list[list[Any]] = out["events"]

    def name_index(name: str) -> int:
        return names.setdefault(name, len(names))

    def us(ns: int) -> float:
        return round((ns - origin) / 1000, 3)

    def lane(name: str, kind: str) -> int:
        lanes.append({"name": prefix + name, "kind": kind, **({} if rank is None else {"rank": rank})})
        return len(lanes) - 1

    # Host: nesting depth per thread from a stack of open intervals.
    by_depth: list[list[Any]] = [[] for _ in range(MAX_HOST_DEPTH)]  # each depth's events, as laid out
    threads: dict[str, list[Any]] = {}
    steps_ev = []
    for e in timeline.host:
        category = e.category
        if category == "step":
            steps_ev.append(e)
        elif category in _HOST_CATEGORIES:
            threads.setdefault(e.thread, []).append(e)
    too_deep = 0
    for per_thread in threads.values():
        # By start, then the later end first: two stable sorts on plain keys.
        per_thread.sort(key=_END, reverse=True)
        per_thread.sort(key=_START)
        stack: list[int] = []
        for e in per_thread:
            start = e.start_ns
            while stack and stack[-1] <= start:
                stack.pop()
            depth = len(stack)
            if depth < MAX_HOST_DEPTH:
                by_depth[depth].append(e)
            else:
                too_deep += 1
            stack.append(e.end_ns)
    steps_ev.sort(key=_START)
    budget = max(cap - len(steps_ev) - min(len(device), cap // 2), 0)
    # The shallowest first, each depth in the order laid out, up to the budget.
    placed = list(islice(((depth, e.thread, e) for depth, level in enumerate(by_depth) for e in level), budget))
    dropped = too_deep + sum(map(len, by_depth)) - len(placed)

    lane_of: dict[tuple[str, int], int] = {}
    if steps_ev:
        steps_lane = lane("steps", "step")
        for e in steps_ev:
            events.append([steps_lane, us(e.start_ns), round((e.end_ns - e.start_ns) / 1000, 3), name_index(e.name), 1])
    thread_names = {t: f"host thread {i}" for i, t in enumerate(sorted(threads, key=str))}
    for depth, thread, e in sorted(placed, key=lambda p: (thread_names[p[1]], p[0])):
        key = (thread, depth)
        if key not in lane_of:
            lane_of[key] = lane(f"{thread_names[thread]} · depth {depth}", "host")
        kind = 4 if _host_category(e.name, e.category) == "communication" else 0 if e.category == "op" else 2
        events.append(
            [lane_of[key], us(e.start_ns), round((e.end_ns - e.start_ns) / 1000, 3), name_index(e.name), kind]
        )
    # Device: greedy lanes, so that overlapping work (several streams) stays visible.
    device.sort(key=_START)
    device = device[: cap // 2]
    dropped += max(0, len(timeline.device) - len(device))
    ends: list[int] = []
    first_device_lane = len(lanes)
    label = timeline.device_label or "device"
    for d in device:
        for i, end in enumerate(ends):
            if end <= d.start_ns:
                ends[i] = d.end_ns
                at = i
                break
        else:
            ends.append(d.end_ns)
            at = len(ends) - 1
            lane(f"{label} · lane {at}", "device")
        events.append(
            [
                first_device_lane + at,
                us(d.start_ns),
                round((d.end_ns - d.start_ns) / 1000, 3),
                name_index(d.name),
                4 if vocab.is_collective(d.name, vocab.K_DEVICE) else 3,
            ]
        )
    out["steps"] += [[prefix + e.name, us(e.start_ns), us(e.end_ns)] for e in steps_ev]
    out["dropped"] += dropped
