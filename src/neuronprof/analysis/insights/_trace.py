"""The findings engine's input, live or offline: a [`Timeline`][neuronprof.analysis.insights.Timeline] of events."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional, Union, cast

from neuronprof.analysis._gc import collector_paused
from neuronprof.analysis.insights._timeline import DeviceEvent, HostEvent, Timeline
from neuronprof.analysis.insights._tree_reader import _TreeReader
from neuronprof.analysis.trace._rules import (
    _device_label,
    _rank_of,
    process_evidence,
    process_roles,
)

if TYPE_CHECKING:
    from neuronprof.analysis.insights import Insights, RankInsights
    from neuronprof.analysis.insights._columns import EventColumns
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


def insights_of(
    trace: Trace, read: Optional[tuple[Timeline, list[_TreeReader]]] = None
) -> Union[Insights, RankInsights]:
    """A trace's findings, made once and kept with it (what ``Trace.insights()`` returns).

    The events are read from the trace's tables straight into the engine's call trees, a
    ``_Forest`` of columns per rank (``read_of``), one rank after the other. The findings are
    those of ``analyze_timeline(trace.timeline())``: the same events, in the same order.

    Args:
        trace: The loaded trace.
        read: ``read_of(trace, ...)`` when the caller has read it already (the report draws it first).
    """
    from neuronprof.analysis.insights import _analyze
    from neuronprof.analysis.insights._ranks import rank_insights

    # A pure function of the record: made once, then kept with it (the record never changes).
    cached = trace.__dict__.get("_insights")
    if cached is None:
        timeline, readers = read or read_of(trace)
        del read
        found, figures = [], []
        for reader, part in zip(readers, timeline.ranks or (timeline,)):
            with collector_paused():
                forest = reader.forest()
            found.append(_analyze(part, forest))
            figures.append(forest.rank_figures())
            del forest
        cached = rank_insights(timeline, found, figures) if timeline.ranks else found[0]
        del timeline, readers
        trace.__dict__["_insights"] = cached
    return cast("Union[Insights, RankInsights]", cached)


def read_of(trace: Trace) -> tuple[Timeline, list[_TreeReader]]:
    """A trace's timeline (its events left in the readers' columns) and the readers that read it, one per rank.

    Each rank's events are read by a reader of their own (ids repeat across ranks): its
    ``forest`` nests them in their call trees and links their device work; ``columns_of``
    gives them as columns to the report's panes first.

    Args:
        trace: The loaded trace.
    """
    readers: dict[Optional[int], _TreeReader] = {}

    def read(fi: int, table: EventTable, *into: Any) -> None:
        rank = _rank_of(table.source, table.metadata) if trace.ranks else None
        (readers.get(rank) or readers.setdefault(rank, _TreeReader()))(fi, table, *into)

    timeline = _timeline(trace, read)
    keys = [t.rank for t in timeline.ranks] if trace.ranks else [None]
    return timeline, [readers.get(k, _TreeReader()) for k in keys]


def timeline_of(trace: Trace) -> Timeline:
    """The findings engine's input from a trace's event tables (a pure function of them).

    What an event is (device work, a step, an op, a runtime call) and which processes
    and lanes are left out (derived views such as torch_npu's "Overlap Analysis", the
    XLA viewer's "Steps"/"XLA Modules" lanes) is the event table's rule, the one the
    sums follow. A live session's tables (no file) make a timeline whose source is
    ``"session"``. The host events come thread by thread, each thread's by start, the
    longer first (the order of its call tree, ``_TreeReader``).
    """
    return _timeline(trace, _TreeReader(events=True))


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


def columns_of(timeline: Timeline, readers: list[_TreeReader]) -> EventColumns:
    """The events ``read_of`` read, as columns: its timeline's (every rank's together) and each rank's.

    The same events as ``trace.timeline()``'s, in its order, before the readers' ``forest`` lets go of them.
    """
    import numpy as np

    from neuronprof.analysis.insights._columns import EventColumns

    names: list[str] = []
    categories: list[Optional[str]] = []
    shapes: list[Any] = []
    dtypes: list[Any] = []
    parts = []
    for reader in readers:
        parts.append(reader.pieces(len(names)))
        for hcat, dcat, dims, types, name in reader.whats:
            names.append(name)
            categories.append(hcat if hcat is not None else dcat)
            shapes.append(dims)
            dtypes.append(types)
    empty = np.empty(0, np.int64)

    def joined(pieces: list[tuple[Any, ...]], at: int, dtype: Any) -> Any:
        return np.concatenate([p[at] for p in pieces]).astype(dtype) if pieces else empty.astype(dtype)

    def assemble(host: list[tuple[Any, ...]], device: list[tuple[Any, ...]], tl: Timeline) -> EventColumns:
        # Read table by table (a stable sort: one table's pieces are one reader's, in the order read).
        host = sorted(host, key=lambda p: p[0])
        device = sorted(device, key=lambda p: p[0])
        threads: dict[str, int] = {}
        thread = [np.full(len(p[1]), threads.setdefault(p[4], len(threads)), np.int32) for p in host]
        return EventColumns(
            names,
            categories,
            shapes,
            dtypes,
            list(threads),
            joined(host, 1, np.int32),
            joined(host, 2, np.int64),
            joined(host, 3, np.int64),
            np.concatenate(thread) if thread else empty.astype(np.int32),
            joined(host, 5, np.int64),
            joined(host, 6, np.int64),
            joined(device, 1, np.int32),
            joined(device, 2, np.int64),
            joined(device, 3, np.int64),
            joined(device, 4, np.int64),
            joined(device, 5, np.int64),
            backend=tl.backend,
            device_label=tl.device_label,
            source=tl.source,
            notes=tl.notes,
            rank=tl.rank,
        )

    if not timeline.ranks:
        return assemble(*parts[0], timeline)
    ranks = tuple(assemble(*part, tl) for part, tl in zip(parts, timeline.ranks))
    whole = assemble([p for h, _ in parts for p in h], [p for _, d in parts for p in d], timeline)
    return dataclasses.replace(whole, ranks=ranks)
