"""The one aggregation of events into per-key sums, for trace files and for the live session's events.

[`EventAggregator`][neuronprof.analysis.trace.EventAggregator] takes kineto's
events one at a time or a timeline's columns at once; a trace file's reader
(``_reader``) fills the same per-thread arrays; both finish through ``_Aggregator._finish``.

A few lines over 500, kept in one module on purpose: the aggregation's rules and the
aggregator that fills its table (one event at a time, or a timeline's columns at once)
are one unit, so that trace files and live sessions are summed by the same code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis.trace import _nesting_columns
from neuronprof.analysis.trace._events import EventTable, _Filling
from neuronprof.analysis.trace._model import Trace
from neuronprof.analysis.trace._nesting import _Nesting
from neuronprof.analysis.trace._rules import (
    _K_DEVICE,
    _K_OP,
    _K_PY,
    _K_RUNTIME,
    _K_STEP,
    _NEURON_LAYOUT,
    _SKIP_CATS,
    _add_flops,
    _rank_of,
    derived_lanes,
    process_evidence,
    process_roles,
)
from neuronprof.analysis.trace._sums import EventColumns, EventKeys, _build, _Sums

_HOST_NOT_STEP = vocab.HOST_KINDS - {_K_STEP}

# -- the aggregation ------------------------------------------------------------------
#
# One rule each, for every producer (kineto of PyTorch 1.8 to 2.x, CUDA, HIP,
# XPU, MTIA, PrivateUse1 backends, torch_npu, plain Chrome traces):
#
# * Times are integer nanoseconds, read from the text of the numbers (never
#   through a binary float: 1.7e15 µs has a float resolution of 0.25 µs).
# * Device events (device categories, or any non-host event on a device process)
#   never nest: each is its own row with self time = duration, on every stream.
# * Host events nest per (pid, tid) as torch builds its tree (``_nesting``): sorted by
#   start, longest first; an event is a child of the innermost open event it fits in.
# * A device event belongs to the runtime/driver call with the same
#   ``correlation``, and its time to the innermost host op around that call
#   (a ProfilerStep or record_function span included; the call itself when no
#   op encloses it). Only a device event whose correlation matches no runtime
#   call is tied to a host op through its ``External id``.
# * Calls count as ``key_averages()`` counts them: an only child with its parent's
#   name is folded into it; genuine recursion counts every call (``_vocabulary``).


class _Aggregator(_Nesting):
    """The one aggregation: an [`EventTable`][neuronprof.analysis.trace.EventTable] in, per-key sums out.

    A trace file's table and the live session's (``EventAggregator``) are summed
    by ``sum_events`` alike, so both tables follow the same rules. The table is
    only read.
    """

    def __init__(self, table: EventTable) -> None:
        self.path = table.source
        self.keys = table.keys
        self.threads = table.threads
        self.procs = table.procs
        self.runtime_corr = table.runtime_corr
        self.thread_names = table.thread_names
        sums = self.sums = _Sums()
        sums.files.append(table.source)
        sums.events = table.events
        sums.skipped = dict(table.skipped)
        sums.flops = dict(table.flops)
        sums.evidence = list(table.evidence)
        sums.notes = list(table.notes)
        # Whether the profiler stopped inside the last step (see ``_vocabulary.step_count``);
        # taken to unless the table's ``neuronprof`` metadata says otherwise.
        self.stopped_in_last_step = True
        # The program's spans that ran in two steps or more, per key: (count, ns left out between steps).
        self.crossed: dict[int, tuple[int, int]] = {}
        # Self time on timelines without steps: (ns, the key with the most of it), per timeline.
        self.off_steps: list[tuple[int, int]] = []
        # Notes name the file they are about (a live session's events have none).
        self.file_notes = table.file_notes

    # -- per-file finish: device attribution, nesting, self time ---------------------------
    def _finish(self, metadata: Mapping[str, Any]) -> None:
        sums = self.sums
        keys = self.keys
        kind = keys.kind
        sums.grow(len(keys.keys))
        # A session's trace says whether its profiler stopped inside the last step.
        self.stopped_in_last_step = vocab.stopped_in_last_step(metadata, default=self.stopped_in_last_step)
        procs = self.procs
        analysis_pids, device_pids = process_roles(procs)
        sums.evidence.extend(process_evidence(procs, device_pids, metadata))
        props = metadata.get("deviceProperties")
        if isinstance(props, list):
            first = props[0] if props else None
            if isinstance(first, dict) and isinstance(first.get("name"), str):
                sums.device_name = first["name"]
        if _NEURON_LAYOUT.search(os.path.dirname(os.path.abspath(self.path))) and os.path.basename(
            self.path
        ).startswith("trace.json"):
            sums.evidence.append("neuron")
        sums.rank = _rank_of(self.path, metadata)

        is_device_kind = [k == _K_DEVICE for k in kind]
        calls, dev_self, dev_total, on_device = sums.calls, sums.dev_self, sums.dev_total, sums.on_device
        runtime_corr = self.runtime_corr
        dev_by_corr: dict[int, int] = {}
        dev_by_ext: dict[int, int] = {}
        unlinked = 0
        host: list[tuple[EventColumns, Optional[list[int]]]] = []
        seen_kids: set[int] = set()
        # Derived views and container lanes: left out, counted for a note.
        derived: dict[tuple[str, str], int] = {}
        views = derived_lanes(self.thread_names, device_pids)
        runtime_ids = None  # runtime_corr as a sorted array, for the column walk
        for (pid, tid), th in self.threads.items():
            device_rows: Iterable[int]
            host_rows: Optional[list[int]]
            if pid in analysis_pids:
                what = ("analysis", procs[pid][0])
                derived[what] = derived.get(what, 0) + len(th.kid)
                continue
            if (pid, tid) in views:
                what = ("lane", self.thread_names[(pid, tid)].strip())
                derived[what] = derived.get(what, 0) + len(th.kid)
                continue
            if _nesting_columns.worth_it(len(th.kid)):
                if runtime_ids is None:
                    runtime_ids = _sorted_ids(runtime_corr)
                rows, lost = _device_columns(
                    sums, keys, th, pid in device_pids, runtime_ids, dev_by_corr, dev_by_ext, seen_kids
                )
                unlinked += lost
                if rows is None or len(rows):
                    host.append((th, rows))
                continue
            if pid in device_pids:
                # Host spans are host spans whatever their pid (kineto writes some threads'
                # Python frames under pid 0, the "GPU 0" process); a step there is the
                # device-side copy of a step annotation, neither.
                device_rows = [i for i, k in enumerate(th.kid) if vocab.on_device(kind[k], True)]
                host_rows = [i for i, k in enumerate(th.kid) if kind[k] in _HOST_NOT_STEP]
            elif any(map(is_device_kind.__getitem__, th.kid)):
                device_rows = [i for i, k in enumerate(th.kid) if is_device_kind[k]]
                host_rows = [i for i, k in enumerate(th.kid) if not is_device_kind[k]]
            else:
                host.append((th, None))
                continue
            if host_rows:
                host.append((th, host_rows))
            kids, durs, corrs, exts = th.kid, th.dur, th.corr, th.ext
            for i in device_rows:
                k = kids[i]
                if kind[k] != _K_DEVICE:
                    # An event of a device process with no device category (XLA's ops): a
                    # device row of its own, apart from a host span of the same name.
                    k = keys.device_twin(k)
                    if k >= len(calls):
                        sums.grow(len(keys.keys))
                d = durs[i]
                calls[k] += 1
                dev_self[k] += d
                dev_total[k] += d
                on_device[k] = True
                seen_kids.add(k)
                c = corrs[i]
                if c >= 0 and c in runtime_corr:
                    dev_by_corr[c] = dev_by_corr.get(c, 0) + d
                elif exts[i] >= 0:
                    x = exts[i]
                    dev_by_ext[x] = dev_by_ext.get(x, 0) + d
                else:
                    unlinked += d
        if seen_kids:
            sums.has_device = True
            for k in seen_kids:
                sums.evidence.append(str(keys.keys[k][1]))
        runtime_names = {keys.names[k] for k in range(len(kind)) if kind[k] == _K_RUNTIME}
        sums.evidence.extend(sorted(runtime_names)[:16])
        sums.evidence.extend({str(keys.keys[k][1]) for k in range(len(kind)) if kind[k] == _K_RUNTIME})
        first_step = len(sums.samples)
        for th, only in host:
            self._walk(th, only, dev_by_corr, dev_by_ext)
        steps = sums.samples[first_step:]
        if steps:
            spans = self._collective_spans(analysis_pids, views, device_pids)
            waits = vocab.collective_wait_ns([(s[5], s[5] + s[0]) for s in steps], spans)
            for sample, waited in zip(steps, waits):
                sample[6] = waited
        where = f"{os.path.basename(self.path)}: " if self.file_notes else ""
        for k, (count, left_out) in sorted(self.crossed.items(), key=lambda item: self.keys.raw_names[item[0]]):
            sums.notes.append(
                f"{where}{self.keys.raw_names[k]!r} ran across a step boundary {count:,} time(s); each is one "
                "call, its time cut at the boundary into the steps it ran in"
                + (f" ({left_out / 1000:,.3f} µs between steps left out)" if left_out else "")
            )
        self.crossed.clear()
        if sums.steps and self.off_steps:
            ns = sum(n for n, _ in self.off_steps)
            biggest = max(self.off_steps)[1]
            sums.notes.append(
                f"{where}{ns / 1000:,.3f} µs of self CPU time is on {len(self.off_steps)} thread(s) without "
                f"steps (most in {self.keys.raw_names[biggest]!r}): self times add up to the steps on the "
                "steps' own thread, and these come on top"
            )
        self.off_steps.clear()
        for derived_kind, on, why in (
            ("analysis", "", "are an analysis view derived from other events, not events; left out"),
            ("lane", "the device lane(s) ", "contain or copy the ops of another lane; left out (only ops are counted)"),
        ):
            left_out_on = sorted(n for (k, n) in derived if k == derived_kind)
            if left_out_on:
                count = sum(v for (k, _n), v in derived.items() if k == derived_kind)
                sums.notes.append(f"{where}{count:,} span(s) on {on}{', '.join(map(repr, left_out_on))} {why}")
        if sums.linked:
            sums.unlinked_ns += unlinked + sum(dev_by_corr.values()) + sum(dev_by_ext.values())

    def _collective_spans(self, left_out: set[Any], views: set[Any], device_pids: set[Any]) -> list[tuple[int, int]]:
        """``(start, end)`` of the file's collectives (``vocab.is_collective``) on every timeline it counts."""
        keys = self.keys
        kind, raw_names = keys.kind, keys.raw_names
        # Per key, whether it is a collective by its own kind, and as an event of a device
        # process (device work there, whatever its category: XLA's ``all-reduce.3``).
        by_kind = {k for k in range(len(kind)) if vocab.is_collective(raw_names[k], kind[k])}
        on_device_process = by_kind | {
            k
            for k in range(len(kind))
            if vocab.on_device(kind[k], True) and vocab.is_collective(raw_names[k], _K_DEVICE)
        }
        if not on_device_process:
            return []
        spans: list[tuple[int, int]] = []
        for (pid, tid), th in self.threads.items():
            if pid in left_out or (pid, tid) in views:
                continue
            wanted = on_device_process if pid in device_pids else by_kind
            if wanted.isdisjoint(th.kid):
                continue
            spans.extend((t, t + d) for t, d, k in zip(th.ts, th.dur, th.kid) if k in wanted)
        return spans


class EventAggregator(_Filling):
    """Fills an [`EventTable`][neuronprof.analysis.trace.EventTable] with events handed over one at a time.

    The live session feeds kineto's own event list
    (``profile.kineto_results.events()``: the events kineto writes into the
    Chrome trace, with integer-ns times) through this, so the live table and
    ``neuronprof summarize`` of the same run's export come from one aggregation:
    the same rows, calls, self and total times, device attribution, steps and
    top-level calls. torch's allocation records (``profile_memory=True``) are kept
    with ``add_memory``, as a trace file's reader keeps its ``[memory]`` events.

    Args:
        source: What the events come from, for notes (e.g. ``"<session>"``).
        stopped_in_last_step: Whether the profiler stopped while the last step was
            open (the live session knows; see ``neuronprof._vocabulary.step_count``).
    """

    def __init__(
        self, source: str = "<events>", *, stopped_in_last_step: bool = True, keys: Optional[EventKeys] = None
    ) -> None:
        super().__init__(source, EventKeys() if keys is None else keys)
        self.stopped_in_last_step = stopped_in_last_step
        self.file_notes = False

    def add(
        self,
        name: str,
        cat: str,
        start_ns: int,
        duration_ns: int,
        thread: tuple[Any, Any],
        *,
        input_dims: Optional[list[Any]] = None,
        input_types: Optional[list[str]] = None,
        correlation: int = -1,
        external_id: int = -1,
        flops: Optional[int] = None,
        concrete_inputs: Optional[list[str]] = None,
    ) -> None:
        """Add one event (a span: an op, an annotation, a runtime call, a kernel...).

        Args:
            name: The event's name, as the trace writes it.
            cat: Its category: kineto's activity type (``"cpu_op"``, ``"kernel"``...).
            start_ns: Start, integer ns (any origin, the same for every event).
            duration_ns: Duration, integer ns.
            thread: The timeline it is on, e.g. ``("host", tid)`` or ``("device 0", stream)``.
            input_dims: Recorded input shapes (``record_shapes=True``), as the trace's ``Input Dims``.
            input_types: Recorded input dtypes, as the trace's ``Input type``.
            correlation: The trace's ``correlation`` (runtime calls and device work), -1 when none.
            external_id: The trace's ``External id``, -1 when none.
            flops: Estimated FLOPs (``with_flops=True``).
            concrete_inputs: Recorded scalar inputs as text (``""`` for a tensor), as the
                trace's ``Concrete Inputs``: the FLOP formulas of ops with scalar arguments read them.
        """
        encode = encoder()
        self.put(
            name,
            cat,
            start_ns,
            duration_ns,
            thread,
            None if input_dims is None else encode(input_dims),
            None if input_types is None else encode(input_types),
            None if concrete_inputs is None else encode(concrete_inputs),
            correlation,
            external_id,
            flops,
        )

    def put(
        self,
        name: str,
        cat: str,
        start_ns: int,
        duration_ns: int,
        thread: tuple[Any, Any],
        dims: Optional[bytes],
        types: Optional[bytes],
        concrete: Optional[bytes],
        correlation: int,
        external_id: int,
        flops: Optional[int],
    ) -> None:
        """``add`` with the recorded inputs already as JSON bytes (``encoder()``'s)."""
        kid = self.key_of(name, cat, dims, types, concrete)
        if kid < 0:
            self.skip(cat, 1)
            return
        if flops:
            _add_flops(self.sums.flops, kid, flops)
        if self.keys.kind[kid] == _K_RUNTIME and correlation >= 0:
            self.runtime_corr.add(correlation)
        th = self.threads.get(thread)
        if th is None:
            th = self.threads[thread] = EventColumns()
        th.ts.append(start_ns)
        th.dur.append(duration_ns)
        th.kid.append(kid)
        th.corr.append(correlation)
        th.ext.append(external_id)
        self.sums.events += 1

    def key_of(
        self, name: str, cat: str, dims: Optional[bytes], types: Optional[bytes], concrete: Optional[bytes]
    ) -> int:
        """The index of the key ``put`` files such an event under (made if new); -1 for one left out (``skip``)."""
        if cat in _SKIP_CATS and vocab.skipped(name, cat):  # as a trace file's reader does
            return -1
        key = (name, cat, dims, types, concrete)
        kid = self.keys.index.get(key)
        return self.keys.add(key) if kid is None else kid

    def skip(self, cat: str, count: int) -> None:
        """Count ``count`` events of category ``cat`` that ``key_of`` left out."""
        self.sums.skipped[cat] = self.sums.skipped.get(cat, 0) + count

    def put_columns(self, thread: tuple[Any, Any], ts: Any, dur: Any, kid: Any, corr: Any, ext: Any) -> None:
        """Events of one timeline (numpy arrays of equal length, ``kid`` from ``key_of``), as ``put`` adds them.

        FLOP counts and runtime calls' correlation ids are the caller's to add.
        """
        import numpy as np

        th = self.threads.get(thread)
        if th is None:
            th = self.threads[thread] = EventColumns()
        for column, values in zip((th.ts, th.dur, th.kid, th.corr, th.ext), (ts, dur, kid, corr, ext)):
            column.frombytes(np.ascontiguousarray(values, np.int32 if column.typecode == "i" else np.int64).tobytes())
        self.sums.events += len(ts)

    def events_table(self, metadata: Optional[Mapping[str, Any]] = None) -> EventTable:
        """The events added so far as a frozen table (the aggregator is not used again).

        Args:
            metadata: The header keys a trace of these events would have (a session's
                own, with ``stopped_in_last_step``); without it, the
                ``stopped_in_last_step`` given to the constructor is written in.
        """
        if metadata is None:
            metadata = {"neuronprof": {vocab.STOPPED_IN_LAST_STEP: self.stopped_in_last_step}}
        return self.freeze(metadata)

    def trace(self) -> Trace:
        """Nest, attribute and sum the events added so far into a [`Trace`][neuronprof.analysis.Trace]; once."""
        table = self.events_table()
        return _build(sum_events(table), table.keys, (table.source,), tables=(table,))


def encoder() -> Callable[[Any], bytes]:
    """JSON text of a list (recorded inputs), as bytes: msgspec's encoder, the standard library's without it.

    A key holds its inputs as JSON text, decoded once per key (``_decode_input``): any
    encoder gives the same keys, and msgspec's is some 30 times faster on these small lists.
    """
    try:
        import msgspec
    except ImportError:  # the pure-Python path
        return lambda value: json.dumps(value).encode()
    return msgspec.json.encode


def sum_events(table: EventTable) -> _Sums:
    """Nest, attribute and sum one table's events into per-key sums (a pure function of the table)."""
    agg = _Aggregator(table)
    agg._finish(table.metadata)
    return agg.sums


def _sorted_ids(ids: Any) -> Any:
    """A set of ids (ints) as a sorted int64 array, for ``_device_columns``."""
    import numpy as np

    return np.sort(np.fromiter(ids, np.int64, len(ids)), kind="stable")  # ids rise, mostly: runs merged


def _device_columns(
    sums: _Sums,
    keys: EventKeys,
    th: EventColumns,
    device_process: bool,
    runtime_corr: Any,
    dev_by_corr: dict[int, int],
    dev_by_ext: dict[int, int],
    seen: set[int],
) -> tuple[Any, int]:
    """The device rows of one timeline added up, as ``_Aggregator._finish`` does row by row.

    Each device event is a call of its own row (an event of a device process that is
    not device work by its category gets a device twin of its key), and its time is
    linked for the walk: by ``correlation`` to a runtime call (``runtime_corr``: their
    ids, a sorted int64 array), else by ``External id``.

    Returns:
        The timeline's host rows (``None`` when every event is one) and the device time
        that could be linked to nothing (ns).
    """
    import numpy as np

    k = np.frombuffer(th.kid, np.int32)
    kind = np.array(keys.kind, np.int8)[k]
    if device_process:
        host = (kind == _K_OP) | (kind == _K_PY) | (kind == _K_RUNTIME)
        device = (kind == _K_DEVICE) | ~(host | (kind == _K_STEP))  # vocab.on_device(kind, True)
    else:
        device = kind == _K_DEVICE
        if not device.any():
            return None, 0
        host = ~device
    rows = np.flatnonzero(device)
    kids = k[rows].astype(np.int64)
    twin = kind[rows] != _K_DEVICE
    if twin.any():
        # An event of a device process with no device category (XLA's ops): a device row
        # of its own, apart from a host span of the same name; twins made in row order.
        plain, first = np.unique(kids[twin], return_index=True)
        made = {int(kk): keys.device_twin(int(kk)) for kk in plain[np.argsort(first)].tolist()}
        sums.grow(len(keys.keys))
        kids[twin] = [made[kk] for kk in kids[twin].tolist()]
    d = np.frombuffer(th.dur, np.int64)[rows]
    calls = np.bincount(kids)
    took = np.zeros(len(calls), np.int64)
    np.add.at(took, kids, d)
    for kk in np.flatnonzero(calls).tolist():
        sums.calls[kk] += int(calls[kk])
        sums.dev_self[kk] += int(took[kk])
        sums.dev_total[kk] += int(took[kk])
        sums.on_device[kk] = True
    # The keys in the order they first come: each key's first row (np.minimum.at, not np.unique's stable sort).
    present = np.flatnonzero(calls)
    first = np.full(len(calls), len(kids), np.int64)
    np.minimum.at(first, kids, np.arange(len(kids)))
    seen.update(present[np.argsort(first[present])].tolist())
    c = np.frombuffer(th.corr, np.int64)[rows]
    by_corr = c >= 0
    if by_corr.any() and len(runtime_corr):
        at = np.minimum(np.searchsorted(runtime_corr, c), len(runtime_corr) - 1)
        by_corr &= runtime_corr[at] == c
    else:
        by_corr[:] = False
    x = np.frombuffer(th.ext, np.int64)[rows]
    by_ext = ~by_corr & (x >= 0)
    for link, by in ((dev_by_corr, by_corr), (dev_by_ext, by_ext)):
        ids = (c if link is dev_by_corr else x)[by]
        if len(ids):
            # The time per id, ids in ascending order (most often they are already), summed per run of one id.
            took_by = d[by]
            if (ids[1:] < ids[:-1]).any():
                order = np.argsort(ids)
                ids, took_by = ids[order], took_by[order]
            starts = np.flatnonzero(np.append(True, ids[1:] != ids[:-1]))
            add = zip(ids[starts].tolist(), np.add.reduceat(took_by, starts).tolist())
            if not link:
                link.update(add)
                continue
            per_id = dict(add)
            for i in per_id.keys() & link.keys():  # ids of this timeline's kernels seen on another already
                per_id[i] += link[i]
            link.update(per_id)
    return np.flatnonzero(host), int(d[~by_corr & ~by_ext].sum())
