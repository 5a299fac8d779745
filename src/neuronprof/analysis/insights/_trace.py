"""The findings engine's input, live or offline: a [`Timeline`][neuronprof.analysis.insights.Timeline] of events."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Union, cast

from neuronprof.analysis._gc import collector_paused, return_freed_memory
from neuronprof.analysis.insights._columns import EventColumns
from neuronprof.analysis.insights._timeline import DeviceEvent, HostEvent, Timeline
from neuronprof.analysis.insights._tree_reader import _TreeReader, forest_of
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


class Read(NamedTuple):
    """A trace read once for the report and the findings (``read_of``)."""

    timeline: Timeline
    """Its timeline, without an object per event (the events are in ``columns``)."""
    columns: EventColumns
    """Its events, every rank's together, and each rank's in ``columns.ranks``."""
    keys: tuple[tuple[int, list[tuple[Any, ...]]], ...]
    """Per rank (one for a trace without ranks): where its keys start in ``columns``' and what each is
    (``(host category, device category, shapes, dtypes, name)``)."""


def insights_of(trace: Trace, read: Optional[Read] = None) -> Union[Insights, RankInsights]:
    """A trace's findings, made once and kept with it (what ``Trace.insights()`` returns).

    The events are read from the trace's tables as columns (``read_of``), then nested in
    the engine's call trees, a ``_Forest`` per rank, one rank after the other. The findings
    are those of ``analyze_timeline(trace.timeline())``: the same events, in the same order.

    Args:
        trace: The loaded trace.
        read: ``read_of(trace)`` when the caller has read it already (the report draws it first).
    """
    from neuronprof.analysis.insights import _analyze
    from neuronprof.analysis.insights._ranks import rank_insights

    # A pure function of the record: made once, then kept with it (the record never changes).
    cached = trace.__dict__.get("_insights")
    if cached is None:
        timeline, columns, keys = read or read_of(trace)
        del read
        found, figures = [], []
        for cols, (offset, whats), part in zip(columns.ranks or (columns,), keys, timeline.ranks or (timeline,)):
            with collector_paused():
                forest = forest_of(cols, whats, offset)
            found.append(_analyze(part, forest))
            figures.append(forest.rank_figures())
            del forest  # (its arrays' pages are the next rank's, of about the same sizes: not given back between)
        cached = rank_insights(timeline, found, figures) if timeline.ranks else found[0]
        del timeline, columns
        trace.__dict__["_insights"] = cached
    return cast("Union[Insights, RankInsights]", cached)


def read_of(trace: Trace, *, release: bool = False) -> Read:
    """A trace's timeline and its events as columns, every rank's and each rank's.

    Each rank's events are read by a reader of their own (ids repeat across ranks), whose
    keys come after the previous rank's in the columns' (``Read.keys``). The events are in
    ``trace.timeline()``'s order; a rank's columns are views into the whole run's where its
    files' events come together in it (one file per rank, or a rank's files one after another).

    Args:
        trace: The loaded trace.
        release: Let each event table's events go once they are read (a command's own trace,
            loaded for its findings or its report only): the events are then held once, as
            these columns, not twice. Tables with allocation records keep theirs (the memory
            pane reads the ops around each record). The trace's events cannot be read again.

    Raises:
        RuntimeError: The trace's events were let go of by an earlier ``read_of``.
    """
    _check_held(trace)
    readers: dict[Optional[int], _TreeReader] = {}

    def read(fi: int, table: EventTable, *into: Any) -> None:
        rank = _rank_of(table.source, table.metadata) if trace.ranks else None
        (readers.get(rank) or readers.setdefault(rank, _TreeReader()))(fi, table, *into)
        if release and not table.memory:
            table.let_go_of_events()  # the reader's pieces hold what the rules and the panes read of them
            return_freed_memory(table.events)

    if release:
        trace.__dict__[_LET_GO] = True
    timeline = _timeline(trace, read)
    keys = [t.rank for t in timeline.ranks] if trace.ranks else [None]
    ranks = [readers.get(k, _TreeReader()) for k in keys]
    offsets = [0]
    for reader in ranks:
        offsets.append(offsets[-1] + len(reader.whats))
    columns = columns_of(timeline, ranks, release=release)
    return Read(timeline, columns, tuple((o, r.whats) for o, r in zip(offsets, ranks)))


_LET_GO = "_events_let_go"
"""The key a trace whose event tables let go of their events (``read_of(release=True)``) is marked with."""


def _check_held(trace: Trace) -> None:
    if trace.__dict__.get(_LET_GO):
        raise RuntimeError(
            "this trace's events were read once, for a command's findings or report, and let go of; "
            "load the trace again to read them"
        )


def timeline_of(trace: Trace) -> Timeline:
    """The findings engine's input from a trace's event tables (a pure function of them).

    What an event is (device work, a step, an op, a runtime call) and which processes
    and lanes are left out (derived views such as torch_npu's "Overlap Analysis", the
    XLA viewer's "Steps"/"XLA Modules" lanes) is the event table's rule, the one the
    sums follow. A live session's tables (no file) make a timeline whose source is
    ``"session"``. The host events come thread by thread, each thread's by start, the
    longer first (the order of its call tree, ``_TreeReader``).

    Raises:
        RuntimeError: The trace's events were let go of (``read_of(release=True)``).
    """
    _check_held(trace)
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


_ARRAYS = ("key", "start", "end", "ext", "corr", "dkey", "dstart", "dend", "dext", "dcorr")
"""The columns a rank's ``EventColumns`` take as views of the whole run's (its ``thread`` is its own)."""


def columns_of(timeline: Timeline, readers: list[_TreeReader], *, release: bool = False) -> EventColumns:
    """The events the readers read (one per rank), as columns: every rank's together and each rank's.

    The same events as the timeline's, in its order: by table, then each table's in the order read.
    The readers let go of them, and each piece is let go of as its column is joined: the columns
    are not held twice. A rank's columns are views into the whole run's where its tables' events
    come together there (one file per rank, or a rank's files one after another). ``release``
    (``read_of``'s): the freed pieces' memory goes back to the system column by column.
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
    # Each piece's table and length, per rank, known before the pieces are let go of.
    host_rows = [[(p[0], len(p[1])) for p in h] for h, _ in parts]
    device_rows = [[(p[0], len(p[1])) for p in d] for _, d in parts]
    tables = [{fi for fi, _ in (*h, *d)} for h, d in zip(host_rows, device_rows)]
    together = not any(
        min(mine) < fi < max(mine)
        for r, mine in enumerate(tables)
        if mine
        for o, other in enumerate(tables)
        if o != r
        for fi in other
    )
    empty = np.empty(0, np.int64)

    def joined(pieces: list[list[Any]], at: int, dtype: Any, let_go: bool) -> Any:
        if not pieces:
            return empty.astype(dtype)
        if len(pieces) == 1 and let_go:  # the piece's own array (the reader made it)
            out = pieces[0][at].astype(dtype, copy=False)
        else:
            out = np.concatenate([p[at] for p in pieces]).astype(dtype, copy=False)
        for p in pieces if let_go else ():
            p[at] = None
        if let_go and release:  # the pieces lie between others: their pages are not reused for the next column
            return_freed_memory(len(out))
        return out

    def threads_of(host: list[tuple[str, int]]) -> tuple[list[str], Any]:
        """Each thread's name, and each row's thread, of pieces ``(thread name, rows)``."""
        threads: dict[str, int] = {}
        thread = [np.full(n, threads.setdefault(label, len(threads)), np.int32) for label, n in host]
        return list(threads), np.concatenate(thread) if thread else empty.astype(np.int32)

    def assemble(host: list[list[Any]], device: list[list[Any]], tl: Timeline, let_go: bool = True) -> EventColumns:
        # Read table by table (a stable sort: one table's pieces are one reader's, in the order read).
        host = sorted(host, key=lambda p: p[0])
        device = sorted(device, key=lambda p: p[0])
        threads, thread = threads_of([(p[4], len(p[1])) for p in host])
        return EventColumns(
            names,
            categories,
            shapes,
            dtypes,
            threads,
            joined(host, 1, np.int32, let_go),
            joined(host, 2, np.int64, let_go),
            joined(host, 3, np.int64, let_go),
            thread,
            joined(host, 5, np.int64, let_go),
            joined(host, 6, np.int64, let_go),
            joined(device, 1, np.int32, let_go),
            joined(device, 2, np.int64, let_go),
            joined(device, 3, np.int64, let_go),
            joined(device, 4, np.int64, let_go),
            joined(device, 5, np.int64, let_go),
            backend=tl.backend,
            device_label=tl.device_label,
            source=tl.source,
            notes=tl.notes,
            rank=tl.rank,
        )

    if not timeline.ranks:
        return assemble(*parts[0], timeline)
    whole = assemble([p for h, _ in parts for p in h], [p for _, d in parts for p in d], timeline, let_go=together)
    if together:  # the ranks' columns are views of these: neither may change the other's
        for name in _ARRAYS:
            getattr(whole, name).flags.writeable = False

    def rank(r: int, tl: Timeline) -> EventColumns:
        if not together:
            return assemble(*parts[r], tl)
        # The whole run's rows are by table: this rank's come after every earlier table's.
        first = min(tables[r], default=0)
        h0 = sum(n for rows in host_rows for fi, n in rows if fi < first)
        d0 = sum(n for rows in device_rows for fi, n in rows if fi < first)
        h = slice(h0, h0 + sum(n for _, n in host_rows[r]))
        d = slice(d0, d0 + sum(n for _, n in device_rows[r]))
        mine = sorted(zip(parts[r][0], host_rows[r]), key=lambda pn: pn[0][0])
        threads, thread = threads_of([(p[4], n) for p, (_, n) in mine])
        return dataclasses.replace(
            whole,
            threads=threads,
            key=whole.key[h],
            start=whole.start[h],
            end=whole.end[h],
            thread=thread,
            ext=whole.ext[h],
            corr=whole.corr[h],
            dkey=whole.dkey[d],
            dstart=whole.dstart[d],
            dend=whole.dend[d],
            dext=whole.dext[d],
            dcorr=whole.dcorr[d],
            source=tl.source,
            notes=tl.notes,
            rank=tl.rank,
        )

    return dataclasses.replace(whole, ranks=tuple(rank(r, tl) for r, tl in enumerate(timeline.ranks)))
