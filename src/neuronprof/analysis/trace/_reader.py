"""Reading one trace file (streamed, bounded memory) into the aggregation's per-thread arrays.

A piece of a few thousand events that fits kineto's own types is read column by
column (``_reader_columns``). Anything that does not fit (begin/end pairs, ids
written as text, a time that is not a plain number, a malformed event) is read
event by event here (``_each``), which is also the pure-Python reader and what
reports errors. Both give the same columns, keys and notes, in the same order.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis._gc import collector_paused
from neuronprof.analysis._typed_reader import DECODE_ERRORS, FastPathFailed, PyEvent, TraceReader
from neuronprof.analysis.errors import TraceError
from neuronprof.analysis.trace import _reader_columns
from neuronprof.analysis.trace._events import MEMORY_EVENTS, EventTable
from neuronprof.analysis.trace._files import empty_trace
from neuronprof.analysis.trace._reader_columns import _ColumnReader
from neuronprof.analysis.trace._rules import (
    _K_DEVICE,
    _K_RUNTIME,
    _MAX_ID,
    _MISSING,
    _SKIP_CATS,
    _add_flops,
    _id,
    _ns,
    _time_error,
    _time_ns,
    _us_text,
)
from neuronprof.analysis.trace._sums import EventKeys


def read_events(path: str, keys: EventKeys, *, empty_ok: bool = False) -> EventTable:
    """Read one trace file into an event table; the fast reader first, the stdlib reader when it cannot.

    Args:
        path: The trace file.
        keys: The event keys of the load (shared by its files).
        empty_ok: Return an empty table for a trace without events instead of refusing it.

    Raises:
        TraceError: The file is missing or is not a readable trace, or (unless
            ``empty_ok``) holds no events.
    """
    try:
        table = _FileReader(path, keys, fast=None).read()
    except FastPathFailed:
        table = _FileReader(path, keys, fast=False).read()
    if not table.events and not empty_ok:
        raise empty_trace(path)
    return table


class _FileReader(_ColumnReader):
    """Reads the events of one file, streamed, into the columns of an event table."""

    def __init__(self, path: str, keys: EventKeys, *, fast: Optional[bool]) -> None:
        super().__init__(path, keys)
        self.reader = TraceReader(path, fast=fast)
        self.open_b: dict[Any, list[Any]] = {}
        self.stray_e = 0

    def read(self) -> EventTable:
        index = 0
        # Columns need numpy: worth importing for a large file only.
        columns = "numpy" in sys.modules or _reader_columns.large_file(self.path)
        try:
            with collector_paused():
                for piece in self.reader.pieces():
                    typed = piece.typed
                    if (
                        typed is None
                        or not columns
                        or len(typed) < _reader_columns.COLUMNS_MIN
                        or not self._columns(piece)
                    ):
                        self._each(piece.plain(), index)
                    index += piece.count
        except DECODE_ERRORS as exc:
            # A piece that decoded typed may still hold what msgspec refuses in a field only
            # the loose decode reads (bytes that are not UTF-8): the stdlib reader's to say.
            raise FastPathFailed(str(exc)) from None
        path = self.path
        self.sums.events = self.reader.events
        self.sums.notes.extend(self.reader.repair_notes)
        open_b = sum(map(len, self.open_b.values()))
        if open_b:
            self.sums.notes.append(f"{os.path.basename(path)}: {open_b} 'B' event(s) never ended")
        if self.stray_e:
            self.sums.notes.append(
                f"{os.path.basename(path)}: {self.stray_e} 'E' event(s) end no 'B' event and are left out"
            )
        return self.freeze(self.reader.metadata)

    # -- event by event: any event, and the errors ------------------------------------------
    def _each(self, batch: list[Any], index: int) -> None:
        """Read ``batch`` (``Event`` or ``PyEvent``), whose first event is event #``index`` of the file."""
        path = self.path
        keys = self.keys
        index_get = keys.index.get
        kinds = keys.kind
        threads = self.threads
        skipped = self.sums.skipped
        runtime_corr = self.runtime_corr
        flops_by_key = self.sums.flops
        last_pid: Any = _MISSING
        last_tid: Any = _MISSING
        append: Any = None
        index -= 1
        ev: Any = None
        try:
            for ev in batch:
                index += 1
                ph = ev.ph
                if ph != "X":
                    if ph == "M":
                        self._metadata(ev)
                        continue
                    if ph != "B" and ph != "E":
                        if ph == "i" and self._memory(ev):
                            continue
                        skipped[ph] = skipped.get(ph, 0) + 1
                        continue
                    ev = self._begin_end(ev, ph, index)
                    if ev is None:
                        continue
                cat = ev.cat
                name = ev.name
                if cat in _SKIP_CATS and vocab.skipped(name, cat):
                    skipped[cat] = skipped.get(cat, 0) + 1
                    continue
                if type(name) is not str:
                    raise TraceError(f"{path}: event #{index} (ph 'X') has no 'name' string")
                ts = ev.ts
                t = _time_ns(ts)
                if t is None:
                    raise TraceError(_time_error(path, index, name, "ts", ts))
                dur = ev.dur
                d = _time_ns(dur)
                if d is None:
                    raise TraceError(_time_error(path, index, name, "dur", dur))
                if d < 0:
                    raise TraceError(f"{path}: event #{index} ({name!r}) has a negative duration ({dur})")
                a = ev.args
                if a is None:
                    key: tuple[Any, ...] = (name, cat, None, None, None)
                    corr = ext = -1
                else:
                    dims = a.dims
                    if dims is None:
                        dims = a.dims_legacy
                    types = a.types
                    concrete = a.concrete
                    key = (
                        name,
                        cat,
                        None if dims is None else bytes(dims),
                        None if types is None else bytes(types),
                        None if concrete is None else bytes(concrete),
                    )
                    corr = a.correlation
                    if type(corr) is not int or not 0 <= corr < _MAX_ID:
                        corr = _id(corr)
                    ext = a.ext
                    if ext is None:
                        ext = a.ext_lower
                    if type(ext) is not int or not 0 <= ext < _MAX_ID:
                        ext = _id(ext)
                try:
                    kid = index_get(key)
                except TypeError:  # an unhashable category: not one we know
                    key = (name, None, *key[2:])
                    kid = index_get(key)
                if kid is None:
                    kid = keys.add(key)
                if a is not None:
                    flops = a.flops
                    if flops is not None:
                        _add_flops(flops_by_key, kid, flops)
                    kd = kinds[kid]
                    if kd == _K_RUNTIME:
                        if corr >= 0:
                            runtime_corr.add(corr)
                    elif kd == _K_DEVICE and type(a.device_type) is str:
                        self.sums.evidence.append(a.device_type)
                    if a.sequence_id is not None:
                        self.sequence_ids.append((a.sequence_id, (ev.pid, ev.tid), t, d, kid))
                pid = ev.pid
                tid = ev.tid
                if append is None or pid != last_pid or tid != last_tid:
                    tkey = (pid, tid)
                    try:
                        thread = threads.get(tkey)
                    except TypeError:
                        raise TraceError(
                            f"{path}: event #{index} ({name!r}) has an invalid 'pid'/'tid' {tkey!r}"
                        ) from None
                    if thread is None:
                        thread = self._thread(tkey)
                    append = (
                        thread.ts.append,
                        thread.dur.append,
                        thread.kid.append,
                        thread.corr.append,
                        thread.ext.append,
                    )
                    last_pid, last_tid = pid, tid
                append[0](t)
                append[1](d)
                append[2](kid)
                append[3](corr)
                append[4](ext)
        except (TraceError, FastPathFailed):
            raise
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
            raise TraceError(f"{path}: malformed event #{index}: {exc}") from None

    def _memory(self, ev: Any) -> bool:
        """Keep an instant that is one of torch's allocation records (``keep_memory``); False when it is not one."""
        name, a = ev.name, ev.args
        if type(name) is not str or name not in MEMORY_EVENTS or a is None:
            return False
        return self.keep_memory(
            name,
            ev.pid,
            ev.tid,
            _time_ns(ev.ts),
            a.memory_device_type,
            a.memory_device_id,
            a.nbytes,
            a.total_allocated,
            a.total_reserved,
        )

    def _metadata(self, ev: Any) -> None:
        args = ev.args
        if args is None:
            return
        what = ev.name
        if what == "process_name":
            value = args.name
        elif what == "thread_name":
            if isinstance(args.name, str):
                with contextlib.suppress(TypeError):
                    self.thread_names[(ev.pid, ev.tid)] = args.name
            return
        elif what == "process_labels":
            value = args.labels
        else:
            return
        if isinstance(value, str):
            # An unhashable pid names nothing events could be matched to.
            with contextlib.suppress(TypeError):
                self.procs.setdefault(ev.pid, []).append(value)

    def _begin_end(self, ev: Any, ph: str, index: int) -> Any:
        """Track a 'B'/'E' pair; return the equivalent complete event when a pair closes."""
        path = self.path
        ts = _ns(ev.ts)
        if ts is None:
            raise TraceError(_time_error(path, index, f"ph {ph!r}", "ts", ev.ts))
        pid, tid = ev.pid, ev.tid
        try:
            stack = self.open_b.setdefault((pid, tid), [])
        except TypeError:
            raise TraceError(f"{path}: event #{index} has an invalid 'pid'/'tid' ({pid!r}, {tid!r})") from None
        if ph == "B":
            if type(ev.name) is not str:
                raise TraceError(f"{path}: event #{index} (ph 'B') has no 'name' string")
            stack.append((ev, ts))
            return None
        if not stack:
            self.stray_e += 1  # an 'E' whose 'B' came before the trace started, or never was
            return None
        begin, start = stack.pop()
        if ts < start:
            raise TraceError(f"{path}: event #{index} ({begin.name!r}) ends before it begins")
        span = PyEvent({})
        span.ph, span.name, span.cat, span.pid, span.tid, span.args = "X", begin.name, begin.cat, pid, tid, begin.args
        # Already in ns: give the text of the µs value, which the loop reads exactly.
        span.ts = _us_text(start)
        span.dur = _us_text(ts - start)
        return span
