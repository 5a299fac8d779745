"""The offline feeder: a Chrome/Perfetto trace file read into a [`Timeline`][neuronprof.analysis.insights.Timeline]."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, Optional, Union

from neuronprof import _vocabulary as vocab
from neuronprof.analysis.insights._timeline import DeviceEvent, HostCategory, HostEvent, Timeline
from neuronprof.analysis.insights._tree import _MEMCPY

_DEVICE_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "memcpy": "memcpy",
    "memset": "memset",
    "mtia_ccp_events": "kernel",
}


def _shapes(dims: Any) -> Optional[tuple[tuple[int, ...], ...]]:
    if not isinstance(dims, list):
        return None
    out = []
    for d in dims:
        if isinstance(d, list) and all(type(x) is int for x in d):
            out.append(tuple(d))
        else:
            out.append(())
    return tuple(out)


def timeline_from_trace(path: Union[str, os.PathLike[str]]) -> Timeline:
    """Read a Chrome/Perfetto trace file or folder into a [`Timeline`][neuronprof.analysis.insights.Timeline].

    What an event is (device work, a step, an op, a runtime call) and which processes
    and lanes are left out (derived views such as torch_npu's "Overlap Analysis", the
    XLA viewer's "Steps"/"XLA Modules" lanes) is decided by the same rules as
    [`load_trace`][neuronprof.analysis.load_trace] uses for the tables, so the findings
    and the tables read the same events.

    Args:
        path: A Chrome/Perfetto trace (``.json`` or ``.json.gz``) or a folder of them.

    Returns:
        The host and device events of every trace file, with the backend and device label they name.

    Raises:
        TraceError: The path is missing, or a file is not a readable trace.
    """
    from neuronprof.analysis._jsonstream import EventStream
    from neuronprof.analysis.errors import TraceError
    from neuronprof.analysis.trace import event_kind, find_trace_files, process_roles
    from neuronprof.analysis.trace._files import empty_trace, read_each
    from neuronprof.analysis.trace._rules import (
        _K_OP,
        _K_PY,
        _K_RUNTIME,
        _K_STEP,
        _SKIP_CATS,
        _device_label,
        _id,
        _ns,
        _rank_of,
        _time_error,
        derived_lanes,
        process_evidence,
    )

    def _int_or_none(value: Any) -> Optional[int]:
        found = _id(value)  # the table loader's rule: an int or the text of one ("7"); 0 is an id
        return found if found >= 0 else None

    files = find_trace_files(path)
    host: list[HostEvent] = []
    device: list[DeviceEvent] = []
    notes: list[str] = []
    backend, label = "cpu", None
    record_shapes: Optional[bool] = None
    native: Optional[tuple[str, ...]] = None
    evidence: set[str] = set()  # text the device label is read from, as the table reader reads it
    # Per file: its rank, and where its events start and end in ``host``, ``device`` and ``notes``.
    parts: list[tuple[Optional[int], tuple[int, ...]]] = []
    def read_one(fi: int, f: str) -> None:
        nonlocal backend, label, record_shapes, native
        first = (len(host), len(device), len(notes))
        stream = EventStream(f)
        skipped = 0
        procs: dict[Any, list[str]] = {}
        lanes: dict[Any, str] = {}
        read: list[tuple[str, str, int, int, Any, Any, dict[str, Any]]] = []
        for index, ev in enumerate(stream):
            ph = ev.get("ph")
            if ph == "M":
                meta_args = ev.get("args")
                value = (
                    meta_args.get("name" if ev.get("name") != "process_labels" else "labels")
                    if isinstance(meta_args, dict)
                    else None
                )
                if isinstance(value, str):
                    with _suppress_unhashable():
                        if ev.get("name") in ("process_name", "process_labels"):
                            procs.setdefault(ev.get("pid"), []).append(value)
                        elif ev.get("name") == "thread_name":
                            lanes[(ev.get("pid"), ev.get("tid"))] = value
                continue
            if ph != "X":
                if ph in ("B", "E", "b", "e"):
                    skipped += 1
                continue
            name, cat, ts, dur = ev.get("name"), ev.get("cat"), ev.get("ts"), ev.get("dur")
            if not isinstance(name, str):
                raise TraceError(f"{f}: event #{index} is not a complete event with name, ts and dur")
            start, length = _ns(ts), _ns(dur)
            if start is None:
                raise TraceError(_time_error(f, index, name, "ts", ts))
            if length is None:
                raise TraceError(_time_error(f, index, name, "dur", dur))
            if length < 0:
                raise TraceError(f"{f}: event #{index} ({name!r}) has a negative duration ({dur})")
            cat = cat if isinstance(cat, str) else ""
            if cat in _SKIP_CATS and vocab.skipped(name, cat):
                continue
            raw_args = ev.get("args")
            args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
            read.append((name, cat, start, start + length, ev.get("pid"), ev.get("tid"), args))
        if not stream.events:
            raise empty_trace(f)
        analysis_pids, device_pids = process_roles(procs)
        views = derived_lanes(lanes, device_pids)
        for name, cat, start, end, pid, tid, args in read:
            with _suppress_unhashable():
                if pid in analysis_pids:
                    continue
                if (pid, tid) in views:
                    continue
            kind = event_kind(name, cat)
            device_process = False
            with _suppress_unhashable():
                device_process = pid in device_pids
            if kind == _K_STEP and device_process:
                continue  # the device-side copy of a step annotation (as the table reader)
            if kind == _K_RUNTIME:
                evidence.add(f"{cat}\n{name}")
            if vocab.on_device(kind, device_process):
                evidence.add(cat)
                dcat = _DEVICE_CATS.get(cat.lower()) or ("memcpy" if _MEMCPY.search(name) else "kernel")
                device.append(
                    DeviceEvent(
                        name,
                        start,
                        end,
                        dcat,  # type: ignore[arg-type]
                        ext_id=_int_or_none(args.get("External id", args.get("external id"))),
                        correlation=_int_or_none(args.get("correlation")),
                    )
                )
                continue
            hcat: HostCategory
            if kind == _K_STEP:
                hcat = "step"
            elif kind == _K_OP:
                hcat = "op"
            elif kind == _K_PY:
                hcat = "python"
            elif kind == _K_RUNTIME:
                hcat = "runtime"
            elif cat.lower() == "user_annotation":
                hcat = "annotation"
            else:
                hcat = "other"
            dtypes = args.get("Input type")
            host.append(
                HostEvent(
                    name,
                    start,
                    end,
                    thread=f"{fi}:{pid}:{tid}",
                    category=hcat,
                    ext_id=_int_or_none(args.get("External id", args.get("external id"))),
                    correlation=_int_or_none(args.get("correlation")) if hcat == "runtime" else None,
                    input_shapes=_shapes(args.get("Input Dims", args.get("Input dims"))),
                    input_dtypes=tuple(str(t) for t in dtypes) if isinstance(dtypes, list) else None,
                )
            )
        notes.extend(stream.repair_notes())
        if skipped:
            notes.append(f"{os.path.basename(f)}: {skipped} begin/end or async event(s) not read")
        meta = stream.metadata.get("neuronprof")
        if isinstance(meta, dict) and isinstance(meta.get("backend"), str):
            backend = meta["backend"]
            label = meta.get("device_label") if isinstance(meta.get("device_label"), str) else None
            # neuronprof writes the "record_shapes" key only when shapes were recorded.
            record_shapes = bool(stream.metadata.get("record_shapes")) or bool(record_shapes)
            dtypes = meta.get("native_dtypes")
            if isinstance(dtypes, list) and all(isinstance(d, str) for d in dtypes):
                native = tuple(dtypes)
        evidence.update(process_evidence(procs, device_pids, stream.metadata))
        parts.append((_rank_of(f, stream.metadata), (*first, len(host), len(device), len(notes))))

    index = {f: i for i, f in enumerate(files)}

    def read_or_undo(f: str) -> None:
        # A file that fails part-way leaves none of its events behind.
        first = (len(host), len(device), len(notes))
        try:
            read_one(index[f], f)
        except TraceError:
            del host[first[0] :], device[first[1] :], notes[first[2] :]
            raise

    done, unreadable = read_each(files, read_or_undo)
    files = [f for f, _ in done]
    if unreadable:
        notes.append(unreadable)  # after every file's notes: the merged timeline's only
    if label is None and evidence:
        # The table reader's rule: the label read from the trace itself (device processes,
        # deviceProperties, device and runtime events), never a default; no such evidence: CPU only.
        label = _device_label(evidence)
        backend = label.lower() if backend == "cpu" else backend
    merged = Timeline(
        tuple(host),
        tuple(device),
        backend,
        label,
        ", ".join(files),
        tuple(notes),
        record_shapes=record_shapes,
        native_dtypes=native,
    )
    return _by_rank(merged, files, parts)


def _by_rank(merged: Timeline, files: list[str], parts: list[tuple[Optional[int], tuple[int, ...]]]) -> Timeline:
    """The timeline of one rank with its rank, or of several with one timeline per rank (as ``load_trace`` splits).

    Files of one rank (several cycles) make one timeline; a rank between the lowest and
    the highest without a file gets an empty one, with a note; files that name no rank
    are in the merged timeline only.
    """
    ranks = {r for r, *_ in parts if r is not None}
    if len(ranks) == 1 and all(r is not None for r, *_ in parts):
        return dataclasses.replace(merged, rank=next(iter(ranks)))
    if len(ranks) < 2:
        if len(files) > 1:
            # Several recordings of one process (or of unrelated runs): their steps are read together.
            note = f"{len(files)} trace files read as one recording: their steps are counted together"
            return dataclasses.replace(merged, notes=(*merged.notes, note))
        return merged
    per_rank = []
    for rank in range(max(ranks) + 1):
        host: list[HostEvent] = []
        device: list[DeviceEvent] = []
        notes: list[str] = []
        mine = [i for i, p in enumerate(parts) if p[0] == rank]
        for i in mine:
            h0, d0, n0, h1, d1, n1 = parts[i][1]
            host += merged.host[h0:h1]
            device += merged.device[d0:d1]
            notes += merged.notes[n0:n1]
        if not mine:
            notes.append(f"rank {rank} has no trace")
        source = ", ".join(files[i] for i in mine)
        # Everything else (backend, device label, what the files say of the run) is the folder's.
        per_rank.append(
            dataclasses.replace(
                merged, host=tuple(host), device=tuple(device), source=source, notes=tuple(notes), rank=rank
            )
        )
    notes = list(merged.notes)
    no_rank = sum(1 for r, *_ in parts if r is None)
    if no_rank:
        notes.append(f"{no_rank} trace file(s) name no rank: their events are in no rank's findings")
    return dataclasses.replace(merged, notes=tuple(notes), ranks=tuple(per_rank))


def _suppress_unhashable() -> contextlib.AbstractContextManager[None]:
    """An unhashable pid/tid names no process: it matches nothing (as in the table reader)."""
    return contextlib.suppress(TypeError)
