"""The findings engine's input, live or offline: a [`Timeline`][neuronprof.analysis.insights.Timeline] of events."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Optional, Union, cast

from neuronprof.analysis._gc import collector_paused
from neuronprof.analysis.insights._timeline import DeviceEvent, HostEvent, Timeline
from neuronprof.analysis.insights._tree import _Node
from neuronprof.analysis.insights._tree_reader import _TreeReader, _what
from neuronprof.analysis.trace._rules import (
    _device_label,
    _rank_of,
    process_evidence,
    process_roles,
)

if TYPE_CHECKING:
    from neuronprof.analysis.insights import Insights, RankInsights
    from neuronprof.analysis.trace import EventTable, Trace


def timeline_from_trace(path: Union[str, os.PathLike[str]]) -> Timeline:
    """Read a Chrome/Perfetto trace file or folder into a [`Timeline`][neuronprof.analysis.insights.Timeline].

    The same as ``load_trace(path).timeline()``: the file is read once, by the
    reader the tables use, so the findings and the tables read the same events.

    Args:
        path: A Chrome/Perfetto trace (``.json`` or ``.json.gz``) or a folder of them.

    Returns:
        The host and device events of every trace file, with the backend and device label they name.

    Raises:
        TraceError: The path is missing, or a file is not a readable trace.
    """
    from neuronprof.analysis.trace import load_trace

    return load_trace(path).timeline()


def insights_of(trace: Trace, events: Optional[Timeline] = None) -> Union[Insights, RankInsights]:
    """A trace's findings, made once and kept with it (what ``Trace.insights()`` returns).

    The events are read from the trace's tables straight into the engine's call tree: no
    [`HostEvent`][neuronprof.analysis.insights.HostEvent] is made, which halves the objects
    (and much of the time and memory) on a large trace. One profile's tree is built as it is
    read, on the table's columns (``_TreeReader``); a trace of several ranks is read with
    ``timeline_of(trace, _Node)`` and each rank's tree built by the engine. The findings are
    those of ``analyze_timeline(trace.timeline())``: the same events, in the same order.

    Args:
        trace: The loaded trace.
        events: ``timeline_of(trace, _Node)`` when the caller has made it already (the
            report draws it); its tree is rebuilt by the engine.
    """
    from neuronprof.analysis.insights import _analyze, analyze_timeline

    # A pure function of the record: made once, then kept with it (the record never changes).
    cached = trace.__dict__.get("_insights")
    if cached is None:
        if events is None and not trace.ranks:
            # One profile: its events read straight into the call tree, sorted and nested on columns.
            reader = _TreeReader()
            timeline = _timeline(trace, reader)
            with collector_paused():
                unlinked = reader.link(timeline.host, timeline.device)
            cached = _analyze(timeline, unlinked)
            del reader, timeline
        else:
            cached = analyze_timeline(events or timeline_of(trace, _Node))
        trace.__dict__["_insights"] = cached
    return cast("Union[Insights, RankInsights]", cached)


def timeline_of(trace: Trace, host_event: Callable[..., Any] = HostEvent) -> Timeline:
    """The findings engine's input from a trace's event tables (a pure function of them).

    What an event is (device work, a step, an op, a runtime call) and which processes
    and lanes are left out (derived views such as torch_npu's "Overlap Analysis", the
    XLA viewer's "Steps"/"XLA Modules" lanes) is the event table's rule, the one the
    sums follow. A live session's tables (no file) make a timeline whose source is
    ``"session"``.

    ``host_event`` makes each host event from ``HostEvent``'s fields, in its order; the
    engine's own ``_Node`` reads them straight into its call tree (``insights_of``).
    """
    return _timeline(trace, partial(_read_events, host_event=host_event))


def _timeline(
    trace: Trace, read: Callable[[int, EventTable, list[Any], list[DeviceEvent], set[str]], None]
) -> Timeline:
    """``timeline_of``, each table's events appended by ``read(fi, table, host, device, evidence)``."""
    host: list[Any] = []
    device: list[DeviceEvent] = []
    backend, label = "cpu", None
    record_shapes: Optional[bool] = None
    native: Optional[tuple[str, ...]] = None
    evidence: set[str] = set()  # text the device label is read from, as the table reader reads it
    # Per table: its rank, and where its events start and end in ``host`` and ``device``.
    parts: list[tuple[Optional[int], tuple[int, int, int, int]]] = []
    for fi, table in enumerate(trace.event_tables):
        first = (len(host), len(device))
        with collector_paused():
            read(fi, table, host, device, evidence)
        meta = table.metadata.get("neuronprof")
        if isinstance(meta, dict) and isinstance(meta.get("backend"), str):
            backend = meta["backend"]
            label = meta.get("device_label") if isinstance(meta.get("device_label"), str) else None
            # neuronprof writes the "record_shapes" key only when shapes were recorded.
            record_shapes = bool(table.metadata.get("record_shapes")) or bool(record_shapes)
            dtypes = meta.get("native_dtypes")
            if isinstance(dtypes, (list, tuple)) and all(isinstance(d, str) for d in dtypes):
                native = tuple(dtypes)
        _, device_pids = process_roles(table.procs)
        evidence.update(process_evidence(table.procs, device_pids, table.metadata))
        parts.append((_rank_of(table.source, table.metadata), (*first, len(host), len(device))))
    if label is None and evidence:
        # The table reader's rule: the label read from the trace itself (device processes,
        # deviceProperties, device and runtime events), never a default; no such evidence: CPU only.
        label = _device_label(evidence)
        backend = label.lower() if backend == "cpu" else backend
    live = bool(trace.event_tables) and not any(t.file_notes for t in trace.event_tables)
    merged = Timeline(
        tuple(host),
        tuple(device),
        backend,
        label,
        "session" if live else trace.source,
        tuple(dict.fromkeys(trace.notes)),
        record_shapes=record_shapes,
        native_dtypes=native,
    )
    if not trace.ranks:
        ranks = {r for r, _ in parts}
        one = next(iter(ranks)) if len(ranks) == 1 else None
        return dataclasses.replace(merged, rank=one) if one is not None else merged
    per_rank = []
    for r in trace.ranks:
        mine = [i for i, p in enumerate(parts) if p[0] == r.rank]
        rank_host: list[HostEvent] = []
        rank_device: list[DeviceEvent] = []
        for i in mine:
            h0, d0, h1, d1 = parts[i][1]
            rank_host += merged.host[h0:h1]
            rank_device += merged.device[d0:d1]
        # Everything else (backend, device label, what the files say of the run) is the folder's.
        per_rank.append(
            dataclasses.replace(
                merged,
                host=tuple(rank_host),
                device=tuple(rank_device),
                source=r.source,
                notes=tuple(dict.fromkeys(r.notes)),
                rank=r.rank,
            )
        )
    return dataclasses.replace(merged, ranks=tuple(per_rank))


def _read_events(
    fi: int,
    table: EventTable,
    host: list[Any],
    device: list[DeviceEvent],
    evidence: set[str],
    host_event: Callable[..., Any] = HostEvent,
) -> None:
    """Append one table's events to the timeline's host and device events."""
    keys = table.keys
    raw_names = keys.raw_names
    # Per key, what the timeline calls it: (host category or None for device work, device
    # category, input shapes, input dtypes, name); decided once per key and timeline role.
    seen: dict[bool, dict[int, tuple[Any, ...]]] = {False: {}, True: {}}
    add_host, add_device = host.append, device.append
    for (pid, tid), th, device_process in table.timelines():
        thread = f"{fi}:{pid}:{tid}"
        known = seen[device_process]
        for t, d, k, c, x in zip(th.ts, th.dur, th.kid, th.corr, th.ext):
            what = known.get(k)
            if what is None:
                what = known[k] = (*_what(keys, k, device_process, evidence), raw_names[k])
            hcat, dcat, shapes, dtypes, name = what
            if hcat is None:
                if dcat is not None:
                    add_device(DeviceEvent(name, t, t + d, dcat, x if x >= 0 else None, c if c >= 0 else None))
                continue
            add_host(
                host_event(
                    name,
                    t,
                    t + d,
                    thread,
                    hcat,
                    x if x >= 0 else None,
                    c if c >= 0 and hcat == "runtime" else None,
                    shapes,
                    dtypes,
                )
            )
