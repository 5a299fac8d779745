"""Read ``system_profile.json`` (NEFF executions) and a framework trace's steps, and place one on the other.

``neuron-explorer view --output-format json`` of a session folder writes
``system_profile.json``, an object whose ``trace_event`` list holds, among other
runtime events, ``nc_exec_running`` records: ``timestamp`` (epoch ns, the host's CPU
clock), ``duration`` (ns), ``exec_id``, ``model_id``, ``model_name`` (the NEFF),
``nc_idx``, ``lnc_idx``, ``device_core_idx`` and ``process_id`` (a string). With two
physical cores per logical NeuronCore each execution is recorded twice with the
same ``exec_id``.
"""

from __future__ import annotations

import bisect
import collections
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

from neuronprof.analysis._eventstream import EventBatches, open_trace
from neuronprof.analysis._gc import collector_paused
from neuronprof.analysis.errors import TraceError
from neuronprof.analysis.neuron._model import _START, NeffExecution, StepDevice, sorted_cores

if TYPE_CHECKING:
    from neuronprof.analysis.trace import EventTable

__all__ = ["SYSTEM_JSON", "outside_steps", "read_framework", "read_steps", "read_system_profile", "step_activity"]

SYSTEM_JSON = "system_profile.json"
"""The file name ``neuron-explorer view --output-format json`` gives a session folder's system profile."""

_EXEC = "nc_exec_running"
_HEAD = 1 << 16
"""Bytes of a file's start read to tell a Chrome trace from a system profile before reading it."""
_CHROME_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
_UNIT_NS = {"ns": 1, "us": 1000, "ms": 1_000_000, "s": 1_000_000_000}


def _int(value: Any) -> Optional[int]:
    if type(value) is int:
        return value
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) else None


def read_system_profile(
    path: Union[str, os.PathLike[str]], *, label: Optional[str] = None
) -> tuple[list[NeffExecution], list[str]]:
    """Stream a ``system_profile.json`` and return its NEFF executions (merged across physical cores) and notes.

    Only ``nc_exec_running`` records are kept; everything else is dropped as it
    streams by, so memory holds the executions, not the file. Records that share
    ``process_id``, logical core (``lnc_idx``, else ``nc_idx``), ``model_id`` and
    ``exec_id`` and overlap in time are one execution on several physical cores
    (``device_core_idx``): it spans from the earliest start to the latest end.

    Args:
        path: The ``system_profile.json`` (``.json.gz`` too).
        label: How the notes name it (default: the file name).

    Returns:
        The executions in start order, and remarks (records skipped or kept apart).

    Raises:
        TraceError: The file is missing, not JSON, or has no ``trace_event`` list.
    """
    p = os.fspath(path)
    _refuse_chrome_trace(p)
    state = _Merge()
    # Only the executions are decoded, straight into _ExecRecord (msgspec skips every other field);
    # other runtime events are skipped unread. A stretch the fast path cannot cut comes as dicts.
    stream = EventBatches(p, events_key="trace_event", containing=_EXEC, decode=_DECODE)
    with collector_paused():
        for batch in stream:
            if _DECODE is not None and type(batch[0]) is _ExecRecord:
                state.add(batch)
            else:
                state.add([_record(ev) for ev in batch if ev.get("name") == _EXEC])
        executions = state.executions()
    name = label or os.path.basename(p)
    notes = [f"{name}: {state.records} {_EXEC} record(s), {len(executions)} execution(s)"]
    if state.duplicates:
        notes.append(
            f"{state.duplicates} record(s) were the same execution on a second physical NeuronCore "
            "(same exec_id) and were merged into one"
        )
    if state.reused:
        notes.append(f"{state.reused} record(s) reused an exec_id at another time and were kept as executions")
    if state.bad:
        notes.append(f"{state.bad} {_EXEC} record(s) without a valid timestamp/duration were skipped")
    if stream.events and not state.records and not state.bad:
        notes.append(f"{name} holds no {_EXEC} records (no NEFF ran on a profiled NeuronCore)")
    return executions, notes


def _refuse_chrome_trace(path: str) -> None:
    """Refuse a Chrome trace (torch.profiler's ``traceEvents``) from its first bytes, before it is read.

    A system profile's events are under ``trace_event``; streaming a large Chrome trace
    to find that out would read all of it (its events decoded as one other member).

    Raises:
        TraceError: The file's start names ``traceEvents`` and no ``trace_event``.
    """
    with open_trace(path) as f:
        try:
            head = f.read(_HEAD)
        except (OSError, EOFError):
            return  # the stream names what is wrong with the file
    if b'"trace_event"' not in head and _CHROME_EVENTS.search(head):
        raise TraceError(
            f"{path}: a Chrome trace (its events are under 'traceEvents', as torch.profiler writes them), not "
            "Neuron's system profile (events under 'trace_event'): read it with `neuronprof summarize`; beside "
            "Neuron's profile, a trace.json is read as the framework trace"
        )


_RECORD_FIELDS = (
    "name",
    "process_id",
    "lnc_idx",
    "model_id",
    "exec_id",
    "timestamp",
    "duration",
    "model_name",
    "nc_idx",
    "device_core_idx",
    "timestamp_unit",
)
"""The fields of an ``nc_exec_running`` record that the reader uses (all others are skipped)."""


def _record_type() -> tuple[Any, Optional[Callable[[str], list[Any]]]]:
    """The record class, and a decoder of a JSON array of records into it (``None`` without msgspec)."""
    try:
        import msgspec
    except ImportError:  # msgspec is optional at import: plain dicts, read field by field
        return collections.namedtuple("_ExecRecord", _RECORD_FIELDS, defaults=[None] * len(_RECORD_FIELDS)), None
    # Typed as Any: values are checked where they are used, as the tool's output may change between
    # releases. gc=False: records hold no cycles. The decoder builds only these fields.
    record = msgspec.defstruct("_ExecRecord", [(n, Any, None) for n in _RECORD_FIELDS], gc=False)
    return record, msgspec.json.Decoder(list[record]).decode  # type: ignore[valid-type]


_ExecRecord, _DECODE = _record_type()


def _record(ev: Mapping[str, Any]) -> Any:
    """An event the fast path did not decode (a dict), as the record the merge reads."""
    return _ExecRecord(*(ev.get(n) for n in _RECORD_FIELDS))


class _Merge:
    """Folds records into executions as they stream by (one dict entry per execution)."""

    def __init__(self) -> None:
        # key -> the execution's fields, in NeffExecution's order, still open to merging
        self.merged: dict[tuple[Any, ...], list[Any]] = {}
        self.apart: list[list[Any]] = []
        self.names: dict[Any, str] = {}
        self.records = self.duplicates = self.reused = self.bad = 0

    def add(self, records: Iterable[Any]) -> None:
        # The hot loop (two records per execution on Trn2): kept inline on purpose.
        merged = self.merged
        get = merged.get
        names = self.names
        n = dups = 0
        for r in records:
            if r.name != _EXEC:
                continue  # its text held the name, but it is another event
            ts = r.timestamp
            dur = r.duration
            if r.timestamp_unit is not None and r.timestamp_unit != "ns":
                ts, dur = _in_ns(ts, dur, r.timestamp_unit)
            if type(ts) is not int or type(dur) is not int or dur < 0:
                ts, dur = _int(ts), _int(dur)
                if ts is None or dur is None or dur < 0:
                    self.bad += 1
                    continue
            n += 1
            core = r.device_core_idx
            nc = r.nc_idx
            if core is None:
                core = nc
            lnc = r.lnc_idx
            if lnc is None:
                lnc = nc  # no logical core index: the core index names it
            exec_id = r.exec_id
            key = (r.process_id, lnc, r.model_id, exec_id)
            end = ts + dur
            old = get(key)
            if old is not None:
                if ts <= old[2] and end >= old[1]:
                    if ts < old[1]:
                        old[1] = ts
                    if end > old[2]:
                        old[2] = end
                    cores = old[4]
                    if core is not None and core not in cores:
                        if len(cores) == 1 and type(core) is int and type(cores[0]) is int:
                            old[4] = (cores[0], core) if cores[0] < core else (core, cores[0])
                        else:
                            old[4] = sorted_cores((*cores, core))
                    dups += 1
                    continue
                self.reused += 1  # same ids but apart in time: a reused id, not a second core
            name = r.model_name
            neff = names.get(name)
            if neff is None:
                neff = _neff_name(name, r.model_id, names)
            pid = r.process_id
            if type(pid) is not str and pid is not None:
                pid = str(pid)
            entry = [neff, ts, end, exec_id, () if core is None else (core,), nc, lnc, r.model_id, pid]
            if old is None and exec_id is not None:
                merged[key] = entry
            else:
                self.apart.append(entry)
        self.records += n
        self.duplicates += dups

    def executions(self) -> list[NeffExecution]:
        new = tuple.__new__
        out = [new(NeffExecution, e) for e in self.merged.values()]
        out += [new(NeffExecution, e) for e in self.apart]
        out.sort(key=_START)
        return out


def _neff_name(name: Any, model_id: Any, names: dict[Any, str]) -> str:
    if not isinstance(name, str) or not name:
        # No NEFF name: name it by its model id (not cached by name, since ids differ).
        return f"model {model_id}" if model_id is not None else "(unnamed NEFF)"
    return names.setdefault(name, name)


def _in_ns(ts: Any, dur: Any, unit: Any) -> tuple[Optional[int], Optional[int]]:
    """``timestamp`` and ``duration`` given in ``timestamp_unit``, in nanoseconds (``None`` when unknown)."""
    scale = _UNIT_NS.get(unit) if isinstance(unit, str) else None
    ts, dur = _int(ts), _int(dur)
    if scale is None or ts is None or dur is None:
        return None, None
    return ts * scale, dur * scale


# -- framework trace and steps ------------------------------------------------------------


def read_steps(path: Union[str, os.PathLike[str]]) -> list[tuple[int, int, int]]:
    """Return the ``ProfilerStep#N`` spans of a framework (torch.profiler) trace as ``(N, start_ns, end_ns)``.

    Times are put on the epoch-nanosecond CPU clock of Neuron's records: kineto
    writes ``ts`` in microseconds from ``baseTimeNanoseconds`` (older traces:
    from the epoch).

    Args:
        path: A framework trace (``.json`` or ``.json.gz``) written by torch.profiler.

    Raises:
        TraceError: The trace cannot be read.
    """
    from neuronprof.analysis.trace import step_windows

    return step_windows(read_framework(path))


def read_framework(path: Union[str, os.PathLike[str]]) -> EventTable:
    """Read a framework (torch.profiler) trace into an event table, by the one trace reader.

    Its steps (``step_windows``) and its ``nrt_sequence_id`` links (``framework_links``)
    are read from it, so the file is read once. A trace that recorded nothing gives an
    empty table.

    Raises:
        TraceError: The trace cannot be read.
    """
    from neuronprof.analysis.trace import EventKeys, read_events

    return read_events(os.fspath(path), EventKeys(), empty_ok=True)


def step_activity(executions: Sequence[NeffExecution], steps: Iterable[tuple[int, int, int]]) -> list[StepDevice]:
    """Busy and idle NeuronCore time in each step.

    Args:
        executions: Executions in start order.
        steps: ``(N, start_ns, end_ns)`` per step, as [`read_steps`][neuronprof.analysis.neuron.read_steps] returns.
    """
    starts = [ex.start_ns for ex in executions]
    longest = max((ex.end_ns - ex.start_ns for ex in executions), default=0)
    out = []
    for n, s, e in steps:
        lo = bisect.bisect_left(starts, s - longest)
        hi = bisect.bisect_left(starts, e)
        busy = 0
        gaps: list[int] = []
        cursor = s
        started = 0
        for ex in executions[lo:hi]:
            a, b = max(ex.start_ns, s), min(ex.end_ns, e)
            if ex.start_ns >= s:
                started += 1
            if b <= a:
                continue
            if a > cursor:
                gaps.append(a - cursor)
            if b > cursor:
                busy += b - max(a, cursor)
                cursor = b
        if e > cursor:
            gaps.append(e - cursor)
        out.append(
            StepDevice(
                step=n,
                start_ns=s,
                end_ns=e,
                executions=started,
                busy_us=busy / 1000.0,
                idle_us=(e - s - busy) / 1000.0,
                gaps=len(gaps),
                largest_gap_us=max(gaps, default=0) / 1000.0,
            )
        )
    return out


def outside_steps(executions: Sequence[NeffExecution], steps: Sequence[tuple[int, int, int]]) -> list[str]:
    """A note on executions that overlap no ``ProfilerStep`` span (counted in the NEFF totals, in no step)."""
    spans = sorted((s, e) for _, s, e in steps)
    starts = [s for s, _ in spans]
    # The latest end among the spans starting at or before each one (spans may overlap).
    reach: list[int] = []
    for _, e in spans:
        reach.append(max(e, reach[-1]) if reach else e)
    count = 0
    ns = 0
    for ex in executions:
        i = bisect.bisect_left(starts, ex.end_ns) - 1  # the last span starting before the execution ends
        if i < 0 or reach[i] <= ex.start_ns:
            count += 1
            ns += ex.end_ns - ex.start_ns
    if not count:
        return []
    return [
        f"{count} execution(s) ({ns / 1000.0:.1f} µs) fell outside the profiled steps (no ProfilerStep span "
        "overlaps them); they are counted in the NEFF totals but in no step"
    ]
