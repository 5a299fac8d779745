"""The report's step timeline: lanes and events, as plain data for the page's script to draw.

A renderer's part (see ``report``): it gathers numbers from a timeline's events as
columns (``EventColumns``, the events of a
[`Timeline`][neuronprof.analysis.insights.Timeline]) and writes nothing. A timeline of
several ranks gets each rank's own lanes.

The lay-out reads each event's fields once into numpy columns: depths, the events
kept and their lanes are found on arrays, and only the events drawn (a few
thousand at most) are visited one by one.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from neuronprof import _vocabulary as vocab
from neuronprof._report_overview import _host_category  # the overview's rule, so that both panes agree

if TYPE_CHECKING:
    from neuronprof.analysis.insights._columns import EventColumns

__all__ = ["MAX_HOST_DEPTH", "MAX_TIMELINE_EVENTS", "timeline_data"]

MAX_TIMELINE_EVENTS = 20_000
"""Events drawn on the timeline at most; beyond it the deepest host events are left out
(with a note on the page), which keeps a report of a long step at a few hundred KB."""

MAX_HOST_DEPTH = 6
"""Nesting levels drawn per host thread; deeper calls are summarised by their parents."""

# Host categories drawn, as the codes the columns hold: 0 an op, 1 a step, 2 the others drawn, -1 not drawn.
_OP, _STEP, _OTHER, _NOT_DRAWN = 0, 1, 2, -1

_STACK_BELOW = 256
"""Threads with fewer events than this get their depths from the stack event by event (numpy's set-up costs more)."""

_EXACT_NS = 1 << 52
"""Times within this of the origin (ns) and their differences are exact as floats, so dividing them on arrays
gives Python's correctly rounded ``n / 1000``; and ``round(x, 3)`` of that quotient is ``x`` itself (the
three-decimal number nearest it is ``n`` thousandths, whose nearest float it is), so it is left out."""


class _Codes(dict[Any, int]):
    """Small integer codes given in order of first sight (a dict that numbers what it has not seen)."""

    def __missing__(self, key: Any) -> int:
        code = self[key] = len(self)
        return code


class _CategoryCodes(dict[str, int]):
    """The drawing's code of each host category (``_NOT_DRAWN`` for a Python frame or one it does not know)."""

    def __missing__(self, key: Any) -> int:
        return _NOT_DRAWN


_CATEGORY = _CategoryCodes(op=_OP, step=_STEP, annotation=_OTHER, runtime=_OTHER, other=_OTHER)


class _HostKinds(dict[tuple[str, str], int]):
    """The kind drawn of a host event, by ``(name, category)``: 4 communication, 0 an op, 2 another (filled on use)."""

    def __missing__(self, key: tuple[str, str]) -> int:
        kind = self[key] = 4 if _host_category(*key) == "communication" else 0 if key[1] == "op" else 2
        return kind


class _DeviceKinds(dict[str, int]):
    """The kind drawn of a device event, by name: 4 communication, else 3 (filled on use)."""

    def __missing__(self, name: str) -> int:
        kind = self[name] = 4 if vocab.is_collective(name, vocab.K_DEVICE) else 3
        return kind


class _Columns:
    """One timeline's columns as the lay-out reads them: each host event's drawing category."""

    def __init__(self, events: EventColumns) -> None:
        self.events = events
        self.start, self.end = events.start, events.end
        codes = np.array([_CATEGORY[c] if isinstance(c, str) else _NOT_DRAWN for c in events.categories], np.int8)
        self.category = codes[events.key] if len(codes) else np.empty(0, np.int8)
        self.threads = events.threads  # each thread, by its code
        self.thread = events.thread
        self.device_start = events.dstart

    def first_ns(self) -> tuple[Optional[int], Optional[int]]:
        """The first start of a host event drawn, and of a device event (``None`` where there is none)."""
        drawn = self.start[self.category != _NOT_DRAWN]
        return (
            int(drawn.min()) if len(drawn) else None,
            int(self.device_start.min()) if len(self.device_start) else None,
        )


def timeline_data(timeline: EventColumns) -> dict[str, Any]:
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
    columns = [_Columns(part) for part in parts]
    firsts = [f for c in columns for f in c.first_ns() if f is not None]
    origin = min(firsts, default=0)
    names = _Codes()
    out: dict[str, Any] = {"lanes": [], "names": [], "events": [], "steps": [], "dropped": 0}
    # Each rank gets an equal share of the events drawn.
    budget = MAX_TIMELINE_EVENTS // len(parts)
    for part, cols in zip(parts, columns):
        _lay_out(part, cols, out, names, origin, budget, rank=part.rank if timeline.ranks else None)
    out["names"] = list(names)
    out["end_us"] = max((ev[1] + ev[2] for ev in out["events"]), default=0.0)
    if timeline.ranks:
        out["ranks"] = [t.rank for t in parts]
    return out


def _lay_out(
    timeline: EventColumns,
    cols: _Columns,
    out: dict[str, Any],
    names: _Codes,
    origin: int,
    cap: int,
    *,
    rank: Optional[int],
) -> None:
    """Add one timeline's lanes and events to ``out`` (``timeline_data``), at most ``cap`` events."""
    prefix = "" if rank is None else f"rank {rank} · "
    lanes: list[dict[str, Any]] = out["lanes"]
    events: list[list[Any]] = out["events"]
    n_device = len(cols.device_start)
    ev = cols.events

    def lane(name: str, kind: str) -> int:
        lanes.append({"name": prefix + name, "kind": kind, **({} if rank is None else {"rank": rank})})
        return len(lanes) - 1

    def add(lane_of: list[int], start: Any, end: Any, keys: list[int], kinds: list[int]) -> None:
        """Append events of keys ``keys``, which start at ``start`` and end at ``end`` (arrays), with their lanes."""
        starts, durations = _microseconds(start, end, origin)
        index = [names[ev.names[k]] for k in keys]
        events.extend(map(list, zip(lane_of, starts, durations, index, kinds)))

    category = cols.category
    steps = np.flatnonzero(category == _STEP)
    steps = steps[np.argsort(cols.start[steps], kind="stable")]
    drawn = np.flatnonzero((category != _NOT_DRAWN) & (category != _STEP))
    budget = max(cap - len(steps) - min(n_device, cap // 2), 0)
    kept, depth, thread, lane_name = _host_kept(cols, drawn, budget)

    step_keys = ev.key[steps].tolist()
    if len(steps):
        steps_lane = lane("steps", "step")
        add([steps_lane] * len(steps), cols.start[steps], cols.end[steps], step_keys, [1] * len(steps))
    if len(kept):
        # One lane per thread and depth, in the order drawn (by the thread's lane name, then depth).
        new = np.ones(len(kept), bool)
        new[1:] = (thread[1:] != thread[:-1]) | (depth[1:] != depth[:-1])
        for at in np.flatnonzero(new).tolist():
            lane(f"{lane_name[int(thread[at])]} · depth {depth[at]}", "host")
        lane_of = (len(lanes) - int(new.sum()) - 1 + np.cumsum(new)).tolist()
        keys = ev.key[kept].tolist()
        host_kinds = _HostKinds()
        kinds = [host_kinds[ev.names[k], ev.categories[k]] for k in keys]
        add(lane_of, cols.start[kept], cols.end[kept], keys, kinds)
    out["dropped"] += len(drawn) - len(kept)

    # Device: greedy lanes, so that overlapping work (several streams) stays visible.
    order = np.argsort(cols.device_start, kind="stable")[: cap // 2]
    out["dropped"] += n_device - len(order)
    if len(order):
        keys = ev.dkey[order].tolist()
        start, end = cols.device_start[order], ev.dend[order]
        at_lane = _first_fit(start, end)
        label = timeline.device_label or "device"
        first_device_lane = len(lanes)
        for at in range(max(at_lane) + 1):
            lane(f"{label} · lane {at}", "device")
        device_kinds = _DeviceKinds()
        kinds = [device_kinds[ev.names[k]] for k in keys]
        add([first_device_lane + at for at in at_lane], start, end, keys, kinds)
    starts, ends = _microseconds(cols.start[steps], cols.end[steps], origin, durations=False)
    out["steps"] += [[prefix + ev.names[k], s, x] for k, s, x in zip(step_keys, starts, ends)]


def _host_kept(cols: _Columns, drawn: Any, budget: int) -> tuple[Any, Any, Any, dict[int, str]]:
    """The host events drawn, at most ``budget``: rows of the columns, depths and threads' codes, and each code's name.

    Each thread's events are taken by start, then the later end first (then in the
    timeline's order), and nested by a stack of open intervals; the shallowest are
    kept first, each depth in thread order (by first event), then by start. They
    come back in the order drawn: by the thread's lane name, then depth, then start.
    """
    if not len(drawn):
        return np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, np.int32), {}
    thread = cols.thread[drawn]
    by_thread = drawn[_stable_order(thread)]  # each thread's events together, in the timeline's order
    counts = np.bincount(thread, minlength=len(cols.threads))
    del thread
    bounds = np.concatenate(([0], np.cumsum(counts)))
    present = np.flatnonzero(counts)
    # Threads in order of their first event drawn, as the lay-out visits them.
    visited = present[np.argsort(by_thread[bounds[present]])].tolist()
    bounds = bounds.tolist()
    rows, depths = [], []
    for code in visited:
        mine = by_thread[bounds[code] : bounds[code + 1]]
        start, end = cols.start[mine], cols.end[mine]
        step = np.diff(start)
        if (step < 0).any() or ((step == 0) & (end[1:] > end[:-1])).any():  # most often in that order already
            order = np.lexsort((~end, start))  # by start, the later end first; stable, so ties in timeline order
            mine, start, end = mine[order], start[order], end[order]
        rows.append(mine)
        depths.append(_depths(start, end).astype(np.int32))
    del by_thread, mine, start, end, step
    row = np.concatenate(rows)
    depth = np.concatenate(depths)
    del rows, depths
    # The shallowest first, each depth in the order laid out, up to the budget.
    placed, left = [], budget
    for level in range(min(MAX_HOST_DEPTH, int(depth.max()) + 1)):
        if left <= 0:
            break
        placed.append(np.flatnonzero(depth == level)[:left])
        left -= len(placed[-1])
    kept = np.concatenate(placed) if placed else np.empty(0, np.int64)
    # Threads are numbered by str(thread) (ties in the order visited); lanes go by name ("... 10" before "... 2").
    thread_of = list(cols.threads)
    numbered = sorted(visited, key=lambda code: str(thread_of[code]))
    names = [f"host thread {i}" for i in range(len(numbered))]
    lane_name = dict(zip(numbered, names))
    by_name = np.empty(len(thread_of), np.int64)
    by_name[numbered] = np.argsort(np.argsort(names, kind="stable"))  # each name's place in order
    row, depth = row[kept], depth[kept]
    code = cols.thread[row]
    drawn_order = np.lexsort((kept, depth, by_name[code]))
    return row[drawn_order], depth[drawn_order], code[drawn_order], lane_name


def _depths(start: Any, end: Any) -> Any:
    """The nesting depth of each event of one thread, sorted by start and then the later end first.

    A stack of open intervals: an event closes those on top that end by its start
    and sits on the rest. When every event lies within the one it sits on, the
    stack holds exactly the earlier events still open, so the depth is their
    number: found on arrays and checked by the trace reader's own nesting
    (``_nesting``). Else (spans that cross) the stack, event by event.
    """
    from neuronprof.analysis.trace._nesting_arrays import _nesting

    if len(start) < _STACK_BELOW or (end < start).any():
        return _depths_by_stack(start, end)
    nested = _nesting(start, end - start, end)
    return _depths_by_stack(start, end) if nested is None else nested[0]


def _stable_order(small: Any) -> Any:
    """``argsort(small, kind="stable")`` of small non-negative integers (a radix sort where they fit 16 bits)."""
    if len(small) and int(small.max()) < 1 << 15:
        return np.argsort(small.astype(np.int16), kind="stable")
    return np.argsort(small, kind="stable")


def _depths_by_stack(start: Any, end: Any) -> Any:
    """``_depths`` event by event, for any events (spans that cross sit on whatever is still on the stack)."""
    depth = []
    stack: list[int] = []
    for s, e in zip(start.tolist(), end.tolist()):
        while stack and stack[-1] <= s:
            stack.pop()
        depth.append(len(stack))
        stack.append(e)
    return np.array(depth, np.int64)


def _first_fit(start: Any, end: Any) -> list[int]:
    """Each event's lane (events by start): the first lane whose last event has ended by its start, else a new one."""
    if len(start) < 2 or (end[:-1] <= start[1:]).all():
        return [0] * len(start)
    lanes: list[int] = []
    busy: list[tuple[int, int]] = []  # (end, lane): lanes whose last event may still run
    free: list[int] = []  # lanes whose last event has ended, as a heap: the first one is taken
    opened = 0
    for s, e in zip(start.tolist(), end.tolist()):
        # Starts only grow: a lane free for one event is free for every later one.
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            at = heapq.heappop(free)
        else:
            at, opened = opened, opened + 1
        heapq.heappush(busy, (e, at))
        lanes.append(at)
    return lanes


def _microseconds(start: Any, end: Any, origin: int, durations: bool = True) -> tuple[list[float], list[float]]:
    """``round((start - origin) / 1000, 3)`` of each, and of the durations (or of ``end - origin``), as floats."""
    if not len(start):
        return [], []
    near = (
        start.dtype != object
        and end.dtype != object
        and int(start.min()) >= origin - _EXACT_NS
        and int(start.max()) <= origin + _EXACT_NS
        and int(end.min()) >= origin - _EXACT_NS
        and int(end.max()) <= origin + _EXACT_NS
    )
    if near:
        second = end - start if durations else end - origin
        return ((start - origin) / 1000).tolist(), (second / 1000).tolist()
    starts, ends = start.tolist(), end.tolist()  # Python ints: no overflow, and the division rounds once
    return (
        [round((s - origin) / 1000, 3) for s in starts],
        [round(((e - s) if durations else (e - origin)) / 1000, 3) for s, e in zip(starts, ends)],
    )
