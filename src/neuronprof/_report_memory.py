"""The report's memory pane, as plain data for the page: memory over time per device, its peak, the allocating ops.

A renderer's part (see ``report``): it reads the allocation records torch writes with
``profile_memory=True`` (``[memory]`` events, kept per device in
[`EventTable.memory`][neuronprof.analysis.trace.EventTable] by every reader, live and
offline) and the op table, and writes nothing. The chart is drawn by the template as
inline SVG from the geometry made here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from neuronprof.analysis.trace._events import step_windows, time_base
from neuronprof.analysis.trace._rules import _K_OP, _K_STEP

if TYPE_CHECKING:
    from neuronprof.analysis.trace import EventTable, MemoryColumns
    from neuronprof.model import Table

__all__ = ["MEMORY_BUCKETS", "MEMORY_CHARTS", "MEMORY_OPS_SHOWN", "buckets", "memory_data"]

MEMORY_OPS_SHOWN = 15
"""Allocating ops listed at most."""
MEMORY_BUCKETS = 300
"""Time buckets of a device's memory chart: each keeps at most four records (the least and most allocated and
reserved in it), so a chart draws at most ``4 * MEMORY_BUCKETS`` points (plus the first, the last and the peak)."""
MEMORY_CHARTS = 8
"""Devices charted at most (those with the highest peaks, e.g. of a folder of many ranks): the page stays small."""
AROUND_PEAK_SHOWN = 8
"""Ops around a peak listed at most (the innermost ones)."""
CHART_W, CHART_H = 600.0, 150.0
"""The chart's drawing box (SVG user units; the page scales it to its width)."""

_TOP_MARGIN = 6.0
# c10's device types by number, for a device the run's label does not name (the host is "CPU").
_C10_TYPES = {0: "CPU", 1: "CUDA", 9: "XLA", 12: "XPU", 13: "MPS", 20: "PrivateUse1"}


def buckets(ts: Sequence[int], values: Sequence[Sequence[int]], n: int) -> list[int]:
    """The records to draw of a series: per time bucket its extremes, so no peak or dip is lost; in time order.

    Args:
        ts: The records' times (ns), in order.
        values: Columns of the same length (allocated, reserved bytes): each bucket keeps
            the record of the least and of the most value of each column.
        n: How many equal time buckets span ``ts[0]`` to ``ts[-1]``.

    Returns:
        Indices into ``ts``: all of them when there are at most ``4 * n``; otherwise the
        first, the last and each bucket's extremes (the first record of each extreme value),
        so the largest value of every column is always among them.
    """
    count = len(ts)
    if count <= 4 * n:
        return list(range(count))
    import numpy as np

    t = np.asarray(ts, np.int64)
    span = max(int(t[-1]) - int(t[0]), 1)
    # Integer arithmetic: a float scale would round 1e18-ns clocks into the wrong bucket.
    bucket = np.minimum((t - t[0]) * n // span, n - 1)
    bounds = np.flatnonzero(np.diff(bucket)) + 1
    starts = np.concatenate(([0], bounds))
    keep = {0, count - 1}
    for column in values:
        v = np.asarray(column, np.int64)
        for reduce in (np.minimum, np.maximum):
            best = reduce.reduceat(v, starts)
            # The first record of each bucket that holds its extreme.
            hit = v == np.repeat(best, np.diff(np.append(starts, count)))
            first_hit = np.flatnonzero(hit)
            owner = bucket[first_hit]
            firsts = first_hit[np.concatenate(([True], owner[1:] != owner[:-1]))]
            keep.update(firsts.tolist())
    return sorted(keep)


def _device_name(device: tuple[int, int], label: Optional[str]) -> str:
    kind, index = device
    if kind == 0:
        return "CPU"
    name = label or _C10_TYPES.get(kind, f"device type {kind}")
    return name if index < 0 else f"{name} {index}"


def _host_spans(table: EventTable, lane: Any) -> list[tuple[int, int, int]]:
    """The ops and steps of one host timeline as ``(start, end, key)``, by start, longest first."""
    th = table.threads.get(lane)
    if th is None:
        return []
    kind = table.keys.kind
    spans = [(t, t + d, k) for t, d, k in zip(th.ts, th.dur, th.kid) if kind[k] == _K_OP or kind[k] == _K_STEP]
    spans.sort(key=lambda s: (s[0], -s[1]))
    return spans


def around(table: EventTable, lane: Any, t: int) -> tuple[list[str], str]:
    """The ops around time ``t`` on a host timeline, outermost first, and which rule found them.

    The rule: the ops (and the step) whose spans contain ``t`` on the timeline of the host
    thread that made the record; when none does, the last op to end before ``t`` and the
    first to start after it.
    """
    spans = _host_spans(table, lane)
    names = table.keys.raw_names
    inside = [names[k] for s, e, k in spans if s <= t <= e]
    if inside:
        return inside, "running at the peak"
    before = max((s for s in spans if s[1] < t), key=lambda s: s[1], default=None)
    after = min((s for s in spans if s[0] > t), key=lambda s: s[0], default=None)
    return [names[s[2]] for s in (before, after) if s is not None], "nearest to the peak (none was running)"


def _innermost(table: EventTable, memory: MemoryColumns) -> list[Optional[int]]:
    """The key of the innermost op or step around each record, on its thread's timeline (None: none was open)."""
    out: list[Optional[int]] = [None] * len(memory)
    by_lane: dict[int, list[int]] = {}
    for i, lane in enumerate(memory.lane):
        by_lane.setdefault(lane, []).append(i)
    for lane, rows in by_lane.items():
        spans = _host_spans(table, memory.lanes[lane])
        # One sweep in time order: spans open so far on a stack (those that ended are dropped).
        stack: list[tuple[int, int, int]] = []
        j = 0
        for i in rows:  # records are in time order
            t = memory.ts[i]
            while j < len(spans) and spans[j][0] <= t:
                while stack and stack[-1][1] < spans[j][0]:
                    stack.pop()
                stack.append(spans[j])
                j += 1
            while stack and stack[-1][1] < t:
                stack.pop()
            out[i] = stack[-1][2] if stack else None
    return out


def _series(
    name: str, parts: list[tuple[EventTable, MemoryColumns]], base_of: dict[int, int]
) -> tuple[dict[str, Any], tuple[EventTable, MemoryColumns, int]]:
    """One device's chart: its records (of one or more cycles) bucketed, scaled; and where its peak is."""
    ts: list[int] = []
    allocated: list[int] = []
    reserved: list[int] = []
    peak: Optional[tuple[int, EventTable, MemoryColumns, int]] = None
    steps: list[tuple[str, int, int]] = []
    for table, m in parts:
        ts.extend(m.ts)
        allocated.extend(m.allocated)
        reserved.extend(m.reserved)
        top = max(range(len(m)), key=m.allocated.__getitem__)  # the first record of the largest value
        if peak is None or m.allocated[top] > peak[0]:
            peak = (m.allocated[top], table, m, top)
        base = base_of[id(table)]
        steps += [(f"ProfilerStep#{n}", s - base, e - base) for n, s, e in step_windows(table)]
    assert peak is not None
    order = sorted(range(len(ts)), key=ts.__getitem__) if len(parts) > 1 else range(len(ts))
    ts = [ts[i] for i in order]
    allocated = [allocated[i] for i in order]
    reserved = [reserved[i] for i in order]
    kept = buckets(ts, (allocated, reserved), MEMORY_BUCKETS)
    lo = min([ts[0], *(s for _, s, _ in steps)])
    hi = max([ts[-1], *(e for _, _, e in steps)])
    width = max(hi - lo, 1)
    top_bytes = max(max(allocated), max(reserved), 1)

    def x(t: int) -> float:
        return round(CHART_W * (t - lo) / width, 2)

    def y(v: int) -> float:  # the top few units left free for the peak's mark
        return round(CHART_H - (CHART_H - _TOP_MARGIN) * max(v, 0) / top_bytes, 2)

    def path(values: list[int]) -> str:
        # Memory holds its value until the next record: a step line.
        first = kept[0]
        out = [f"M{x(ts[first])} {y(values[first])}"]
        out += [f"H{x(ts[i])}V{y(values[i])}" for i in kept[1:]]
        out.append(f"H{x(hi)}")
        return "".join(out)

    _, table, m, at = peak
    return (
        {
            "name": name,
            "records": len(ts),
            "drawn": len(kept),
            "allocated_path": path(allocated),
            "reserved_path": path(reserved) if any(reserved) else None,
            "top_bytes": top_bytes,
            "span_us": round(width / 1000, 3),
            "steps": [{"name": s, "x": x(a), "w": round(x(b) - x(a), 2)} for s, a, b in steps],
            "peak": {
                "x": x(m.ts[at]),
                "y": y(m.allocated[at]),
                "t_us": round((m.ts[at] - lo) / 1000, 3),
                "allocated": m.allocated[at],
                "reserved": m.reserved[at],
                "step": next((s for s, a, b in steps if a <= m.ts[at] <= b), None),
            },
            "max_reserved": max(reserved),
            "out_of_memory": sum(len(mm.out_of_memory) for _, mm in parts),
        },
        (table, m, at),
    )


def _top_from_records(tables: Sequence[EventTable]) -> list[dict[str, Any]]:
    """Self memory per op name: each record's bytes to the innermost op around it, host and device apart.

    torch's own figure is the same sum (``key_averages()``: each record to the op it
    was made in, less what that op's children made); ``calls`` here counts the
    allocations (records of more than 0 bytes) made in the op itself.
    """
    per: dict[str, list[int]] = {}
    for t in tables:
        names = t.keys.names
        for (kind, _index), m in t.memory.items():
            column = 1 if kind == 0 else 2
            for k, b in zip(_innermost(t, m), m.nbytes):
                if k is None:
                    continue
                sums = per.setdefault(names[k], [0, 0, 0])
                sums[column] += b
                sums[0] += b > 0
    return [{"name": n, "calls": a, "cpu_bytes": c, "device_bytes": d} for n, (a, c, d) in per.items()]


def memory_data(table: Table, *, source: str = "table", tables: Sequence[EventTable] = ()) -> dict[str, Any]:
    """The memory pane: memory over time per device, the peak and the ops around it, the top allocating ops.

    Memory over time is torch's own: after each allocation record (``[memory]`` event,
    ``profile_memory=True``) the allocator's "Total Allocated" and "Total Reserved" bytes.
    The peak is the record with the most allocated (the first, if several); the ops around
    it are those whose spans contain its time on the host thread that made the record (the
    op that allocated it innermost), or, when none does, the nearest before and after.
    A long run's records are bucketed for the chart (``buckets``): the peak and each
    bucket's extremes are always drawn, and the pane says how many records it drew.

    The top allocating ops are torch's self memory per op (bytes allocated less bytes
    freed inside the op itself, summed over the recorded steps, by op name), summed from
    the records, each to the innermost op or step around it on its thread: the rule of
    torch's own ``key_averages()``, so live and from the export the same. Without records
    (a page made from a table alone) the table's memory columns are listed.

    Args:
        table: The op table.
        source: ``"table"`` (a session's table) or ``"trace"`` (a trace file's, which holds no memory per op).
        tables: The event tables of the run (their ``memory``); none: the chart is not drawn.

    Returns:
        ``{"recorded": bool, "label", "device": bool (a device besides the host), "devices": [{"name",
        "records", "drawn", "allocated_path",
        "reserved_path", "top_bytes", "span_us", "steps", "peak": {"t_us", "allocated", "reserved",
        "step", "ops", "rule"}, ...}], "ops": [{"name", "calls", "cpu_bytes", "device_bytes"}],
        "ops_from": "torch" | "records" | None, "notes": [str]}``; bytes are integers, times µs from the
        start of the device's chart.
    """
    label = table.device_label or "device"
    notes: list[str] = []
    groups: dict[tuple[str, tuple[int, int]], list[tuple[EventTable, MemoryColumns]]] = {}
    sources = {t.source for t in tables if t.memory}
    base_of: dict[int, int] = {}
    for t in tables:
        base_of[id(t)] = time_base(t)
        for device, m in t.memory.items():
            if len(m):
                groups.setdefault((t.source, device), []).append((t, m))
    devices = []
    for (src, device), parts in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1])):
        name = _device_name(device, table.device_label)
        if len(sources) > 1:
            name = f"{os.path.basename(src)} · {name}"
        series, (t, m, at) = _series(name, parts, base_of)
        ops, rule = around(t, m.lanes[m.lane[at]], m.ts[at])
        series["peak"]["ops"] = ops[-AROUND_PEAK_SHOWN:]
        series["peak"]["rule"] = rule
        devices.append(series)
        if series["out_of_memory"]:
            notes.append(f"{name}: torch recorded {series['out_of_memory']:,} failed allocation(s) ([OutOfMemory])")

    if len(devices) > MEMORY_CHARTS:
        drawn = sorted(sorted(devices, key=lambda d: -d["peak"]["allocated"])[:MEMORY_CHARTS], key=devices.index)
        notes.append(
            f"{MEMORY_CHARTS} of {len(devices)} devices are drawn: those with the highest peaks "
            f"({', '.join(d['name'] for d in devices if d not in drawn)} left out)"
        )
        devices = drawn
    for series in devices:
        if series["drawn"] < series["records"]:
            notes.append(
                f"{series['name']}: {series['drawn']:,} of {series['records']:,} allocation records are drawn (the "
                f"least and most allocated and reserved of each of {MEMORY_BUCKETS} time buckets, the peak among them)"
            )
    rows = [r for r in table.rows if r.self_cpu_memory_bytes is not None or r.self_device_memory_bytes is not None]
    ops_from: Optional[str] = None
    top: list[dict[str, Any]] = []
    if devices:  # the records themselves: a session and its export list the same ops
        ops_from = "records"
        top = _top_from_records(tables)
    elif rows:
        ops_from = "torch"
        top = [
            {
                "name": r.name,
                "calls": r.calls,
                "cpu_bytes": r.self_cpu_memory_bytes,
                "device_bytes": r.self_device_memory_bytes,
            }
            for r in rows
        ]

    def allocated(r: dict[str, Any]) -> int:
        return max(r["cpu_bytes"] or 0, 0) + max(r["device_bytes"] or 0, 0)

    top = [r for r in sorted(top, key=allocated, reverse=True) if allocated(r) > 0][:MEMORY_OPS_SHOWN]
    recorded = bool(devices or rows)
    if not recorded:
        if source == "trace":
            notes.append(
                "memory was not recorded: this trace holds no [memory] events. Record them with "
                "profile_memory=True (neuronprof.session(profile_memory=True), or torch.profiler.profile's own)"
            )
        else:
            notes.append("memory was not recorded: pass profile_memory=True to the session to fill this pane")
    elif not devices:
        notes.append(
            "memory over time is not drawn: the recorded events hold no [memory] records with the allocator's "
            "totals (this torch does not give them)"
            if tables
            else "memory over time is not drawn: this page was made from a table and a timeline, not a recording"
        )
    return {
        "recorded": recorded,
        "label": label,
        "device": table.device_label is not None or any(k != 0 for t in tables for k, _ in t.memory),
        "devices": devices,
        "ops": top,
        "ops_from": ops_from,
        "notes": notes,
    }
