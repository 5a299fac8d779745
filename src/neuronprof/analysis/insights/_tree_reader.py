"""Events read into the findings' call trees on numpy columns: the one reader of a trace's event tables.

It makes the public timeline's [`HostEvent`][neuronprof.analysis.insights.HostEvent]s
(``timeline_of``), the report's events (``read_of``) and the findings' call trees, a
``_Forest`` of columns: per thread, sorted and nested by numpy, the device work linked
from the table's own columns. A timeline made by hand or by a live session's feeder is
read into the same forest the same way (``nodes_of``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis.insights._timeline import DeviceEvent, HostCategory, HostEvent
from neuronprof.analysis.insights._tree import _MEMCPY, _is_region
from neuronprof.analysis.trace._rules import _decode_input, _flat_shapes

if TYPE_CHECKING:
    from neuronprof.analysis.insights._forest import _Forest
    from neuronprof.analysis.trace import EventTable


class _TreeReader:
    """A ``_timeline`` reader: it appends each table's device events, then its host events thread by thread.

    Each thread's host events come by start, then longest first (ties as read): the order
    of their call tree. The reader keeps, per thread, the table's own columns and each
    event's key (``whats``: what the timeline reads of a name); ``forest`` then nests the
    events (``_parents``), each the child of the innermost open event it starts and ends
    within, and links the device work to the ops that launched it, on those columns: the
    findings' ``_Forest``, and the report's columns (``pieces``). Host and device events
    are made as objects only for the public timeline (``events``).
    """

    def __init__(self, events: bool = False) -> None:
        """``events``: make the public timeline's ``HostEvent``s and ``DeviceEvent``s (and keep no columns);
        else keep the columns, for the forest and the report's panes."""
        self.cls, self.ids, self.tree = (HostEvent if events else None), events, not events
        # What each key read is: (host category, device category, shapes, dtypes, name); threads' names.
        self.whats: list[tuple[Any, ...]] = []
        self.labels: list[str] = []
        # Per thread: where its rows start among this reader's, which of the thread's events they are (in
        # the tree's order), the thread's columns (the table's own, not copies), whether each row is a
        # runtime call, an op or compiled region, its key, its thread, and (once nested) its parent row.
        self.threads: list[tuple[Any, ...]] = []
        self.count = 0  # the host events read so far (a rank's reader reads only its rank's tables)
        self.device: list[list[Any]] = [[], [], [], [], []]  # device events: correlation, External id, start, end, key
        self.files: list[int] = []  # per thread, and per piece of device events: the table it was read from
        self.device_files: list[int] = []

    def __call__(
        self, fi: int, table: EventTable, host: list[Any], device: list[DeviceEvent], evidence: set[str]
    ) -> None:
        import numpy as np

        keys = table.keys
        raw_names = keys.raw_names
        seen: dict[bool, dict[int, int]] = {False: {}, True: {}}
        whats = self.whats
        for (pid, tid), th, device_process in table.timelines():
            if not len(th.ts):
                continue
            known = seen[device_process]
            kid = np.frombuffer(th.kid, np.int32)
            used = np.flatnonzero(np.bincount(kid)).tolist()  # the keys used here, in order
            for k in used:
                if k not in known:
                    known[k] = len(whats)
                    whats.append((*_what(keys, k, device_process, evidence), raw_names[k]))
            # Each key used here, by its position in ``used``: its place in ``whats``.
            mine = np.array([known[k] for k in used], np.int32)
            position = np.zeros(used[-1] + 1, np.int32)
            position[used] = np.arange(len(used), dtype=np.int32)
            at = position[kid]
            role = np.array(
                [0 if whats[w][0] is not None else 1 if whats[w][1] is not None else 2 for w in mine.tolist()], np.int8
            )[at]
            t = np.frombuffer(th.ts, np.int64)
            d = np.frombuffer(th.dur, np.int64)
            c = np.frombuffer(th.corr, np.int64)
            x = np.frombuffer(th.ext, np.int64)
            work = np.flatnonzero(role == 1)
            if len(work):
                which, starts = mine[at[work]], t[work]
                if self.tree:
                    _append(self.device, c[work], x[work], starts, starts + d[work], which)
                    self.device_files.append(fi)
                if self.cls is not None:
                    device += _made(
                        DeviceEvent,
                        len(work),
                        name=_column(whats, 4, which),
                        start_ns=starts.tolist(),
                        end_ns=(starts + d[work]).tolist(),
                        category=_column(whats, 1, which),
                        ext_id=self._ids(x[work]),
                        correlation=self._ids(c[work]),
                    )
                del which, starts
            ops = np.flatnonzero(role == 0)
            if not len(ops):
                continue
            starts, ends = t[ops], t[ops] + d[ops]
            order = np.lexsort((-ends, starts))  # stable: ties keep the order they were read in
            ops, starts, ends = ops[order], starts[order], ends[order]
            del order
            which = mine[at[ops]]
            label = f"{fi}:{pid}:{tid}"
            runtime = np.array([w[0] == "runtime" for w in whats], bool)[which]
            if self.cls is not None:
                host += map(
                    self.cls,
                    _column(whats, 4, which),
                    starts.tolist(),
                    ends.tolist(),
                    repeat(label),
                    _column(whats, 0, which),
                    self._ids(x[ops]),
                    self._ids(np.where(runtime, c[ops], -1)),
                    _column(whats, 2, which),
                    _column(whats, 3, which),
                )
            if self.tree:
                op = np.array([w[0] == "op" or _is_region(w[4]) for w in whats], bool)[which]
                self.threads.append(
                    (self.count, ops.astype(np.int32), t, d, c, x, runtime, op, which, len(self.labels))
                )
                self.labels.append(label)
                self.files.append(fi)
            self.count += len(ops)

    def nodes_of(self, host: Sequence[HostEvent], device: Sequence[DeviceEvent]) -> None:
        """Read a timeline's events (made by hand, or by a live session's feeder) as a table's are.

        Their threads come in the order they first appear; ``forest`` then nests them and links
        ``device`` to them. An id is a non-negative int64, as a trace's are.
        """
        import numpy as np

        def ids(values: Iterable[Optional[int]]) -> Any:
            return np.array([-1 if v is None else v for v in values], np.int64)

        whats = self.whats
        known: dict[tuple[Any, ...], int] = {}

        def key(what: tuple[Any, ...]) -> int:
            found = known.get(what)
            if found is None:
                found = known[what] = len(whats)
                whats.append(what)
            return found

        by_thread: dict[str, list[HostEvent]] = {}
        for ev in host:
            by_thread.setdefault(ev.thread, []).append(ev)
        for thread, events in by_thread.items():
            t, end = np.array([e.start_ns for e in events], np.int64), np.array([e.end_ns for e in events], np.int64)
            rows = np.lexsort((-end, t))  # stable: ties keep the order given
            mine = [events[i] for i in rows.tolist()]
            which = np.array(
                [key((e.category, None, _frozen(e.input_shapes), _frozen(e.input_dtypes), e.name)) for e in mine],
                np.int32,
            )
            runtime = np.array([e.category == "runtime" for e in mine], bool)
            op = np.array([e.category == "op" or _is_region(e.name) for e in mine], bool)
            corr, ext = ids(e.correlation for e in events), ids(e.ext_id for e in events)
            self.threads.append(
                (self.count, rows.astype(np.int32), t, end - t, corr, ext, runtime, op, which, len(self.labels))
            )
            self.labels.append(thread)
            self.files.append(0)
            self.count += len(mine)
        _append(
            self.device,
            ids(d.correlation for d in device),
            ids(d.ext_id for d in device),
            np.array([d.start_ns for d in device], np.int64),
            np.array([d.end_ns for d in device], np.int64),
            np.array([key((None, d.category, None, None, d.name)) for d in device], np.int32),
        )
        self.device_files.append(0)

    def _ids(self, ids: Any) -> Any:
        """The ids as each event keeps them (None for none), or None for every event when they are not kept."""
        if not self.ids:
            return repeat(None)
        kept = ids.astype(object)
        kept[ids < 0] = None
        return kept.tolist()

    def pieces(self, key_offset: int = 0) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The events read, as columns a piece at a time, without letting go of them (``forest`` does).

        Host pieces, one per thread: ``(table, key, start, end, thread name, External id, correlation)``,
        the events in tree order (a correlation only on runtime calls); device pieces, one per
        timeline read: ``(table, key, start, end, External id, correlation)``. Ids are -1 for none;
        keys are offset by ``key_offset`` (the readers of several ranks put their keys in one list).
        """
        import numpy as np

        host = []
        for (_, rows, t, d, c, x, runtime, _, which, label), fi in zip(self.threads, self.files):
            starts = t[rows]
            corr = np.where(runtime, c[rows], -1)
            host.append((fi, which + key_offset, starts, starts + d[rows], self.labels[label], x[rows], corr))
        pieces = zip(self.device_files, *self.device)
        device = [(fi, k + key_offset, s, e, x, c) for fi, c, x, s, e, k in pieces]
        return host, device

    def forest(self) -> _Forest:
        """The events read, nested in their trees, each device event linked to the op that launched it.

        Each row is the child of the innermost open row of its thread it starts and ends
        within (``_parents``). The correlation id comes first: it ties the device event to
        the runtime call that launched it, and that call to its op (the op whose External
        id the call carries, else the innermost op around the call). The External id is the
        fallback. The reader lets go of its columns.
        """
        import numpy as np

        from neuronprof.analysis.insights._forest import _Forest

        parents = []
        for i, (first, rows, t, d, *columns) in enumerate(self.threads):
            starts = t[rows]
            parent = _parents(starts, starts + d[rows])
            parent = np.where(parent >= 0, parent + first, -1).astype(np.int32)
            parents.append(parent)
            self.threads[i] = (first, rows, t, d, *columns, parent)
        dev_corr, dev_ext, dev_start, dev_end, dev_key = (
            _joined(self.device) if any(len(p) for p in self.device[0]) else [np.empty(0, np.int64)] * 5
        )
        target = self._targets(dev_corr, dev_ext)
        del dev_corr, dev_ext
        threads, self.threads = self.threads, []
        empty = np.empty(0, np.int64)

        def joined(pieces: list[Any]) -> Any:
            return np.concatenate(pieces) if pieces else empty

        host = (
            joined([th[8] for th in threads]),
            joined([th[2][th[1]] for th in threads]),
            joined([th[2][th[1]] + th[3][th[1]] for th in threads]),
            joined([th[10] for th in threads]),
            joined([np.full(len(th[1]), th[9], np.int32) for th in threads]),
        )
        del threads
        return _Forest(self.whats, self.labels, host, (dev_key, dev_start, dev_end, target))

    def _targets(self, dev_corr: Any, dev_ext: Any) -> Any:
        """Each device event's owner row (-1: none), from the threads' columns (nested already)."""
        import numpy as np

        target = np.full(len(dev_corr), -1, np.int64)
        if not len(dev_corr) or not self.count:
            return target
        # The runtime calls with a correlation id and the ops with an External id, in row order:
        # their rows and their ids.
        calls: list[list[Any]] = [[], [], []]
        ops: list[list[Any]] = [[], []]
        for first, rows, _, _, c, x, runtime, op, *_ in self.threads:
            corr, ext = c[rows], x[rows]
            mine = np.flatnonzero(runtime & (corr >= 0))
            _append(calls, mine + first, corr[mine], ext[mine])
            mine = np.flatnonzero(op & (ext >= 0))
            _append(ops, mine + first, ext[mine])
            del corr, ext, mine
        call_at, call_corr, call_ext = _joined(calls)
        op_at, op_ext = _joined(ops)
        # The first runtime call of each correlation id, the first op of each External id.
        by_corr, by_ext = _first_of(call_corr), _first_of(op_ext)
        del call_corr, op_ext
        rt = by_corr(dev_corr)
        del by_corr
        launched = np.flatnonzero(rt >= 0)
        rt = rt[launched]
        rt_at, owner = call_at[rt], by_ext(call_ext[rt])
        del rt, call_at, call_ext
        owner_at = _pick(op_at, owner)
        (rt_start, rt_end), (owner_start, owner_end) = self._spans(rt_at), self._spans(owner_at)
        ok = (owner >= 0) & (owner_start <= rt_start) & (rt_end <= owner_end)
        del rt_start, rt_end, owner_start, owner_end, owner
        target[launched[ok]] = owner_at[ok]
        if not ok.all():
            parent, op = (np.concatenate(column) for column in zip(*((th[10], th[7]) for th in self.threads)))
            for i, n in zip(launched[~ok].tolist(), parent[rt_at[~ok]].tolist()):  # else the innermost op around it
                while n >= 0 and not op[n]:
                    n = int(parent[n])
                target[i] = n
            del parent, op
        del rt_at, owner_at, ok, launched
        left = target < 0
        target[left] = _pick(op_at, by_ext(dev_ext[left]))
        return target

    def _spans(self, at: Any) -> tuple[Any, Any]:
        """The start and end of the rows ``at`` (-1: none, read as 0), from the columns."""
        import numpy as np

        start, end = np.zeros(len(at), np.int64), np.zeros(len(at), np.int64)
        for first, rows, t, d, *_ in self.threads:
            mine = np.flatnonzero((at >= first) & (at < first + len(rows)))
            i = rows[at[mine] - first]
            start[mine] = t[i]
            end[mine] = t[i] + d[i]
        return start, end


def _frozen(value: Any) -> Any:
    """Recorded inputs as tuples all the way down (a timeline built from JSON may hold lists)."""
    return tuple(map(_frozen, value)) if isinstance(value, (list, tuple)) else value


def _pick(values: Any, i: Any) -> Any:
    """``values[i]``, -1 where ``i`` is -1."""
    import numpy as np

    return np.where(i >= 0, values[np.maximum(i, 0)], -1) if len(values) else np.full(len(i), -1, np.int64)


def _append(columns: list[list[Any]], *values: Any) -> None:
    for column, value in zip(columns, values):
        column.append(value)


def _joined(columns: list[list[Any]]) -> list[Any]:
    """Each column's pieces joined, and let go of one column at a time (they are read once)."""
    import numpy as np

    out = []
    for i, pieces in enumerate(columns):
        out.append(np.concatenate(pieces))
        columns[i] = []
    return out


def _first_of(ids: Any) -> Callable[[Any], Any]:
    """A lookup of the first place of each id in ``ids``: ids to places, -1 for none."""
    import numpy as np

    known, first = np.unique(ids, return_index=True)  # the first place of each: a stable sort

    def lookup(wanted: Any) -> Any:
        if not len(known):
            return np.full(len(wanted), -1, np.int64)
        i = np.minimum(np.searchsorted(known, wanted), len(known) - 1)
        return np.where(known[i] == wanted, first[i], -1)

    return lookup


def _made(cls: type, n: int, **columns: Any) -> list[Any]:
    """``n`` objects of a slotted class, each slot set from its column in one pass.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, a
    call apiece; its slots' own setters, mapped over the objects, cost a fraction of it.
    Every slot is set.
    """
    made: list[Any] = list(map(object.__new__, repeat(cls, n)))
    for name, values in columns.items():
        deque(map(getattr(cls, name).__set__, made, values), maxlen=0)
    return made


def _column(whats: list[tuple[Any, ...]], field: int, which: Any) -> list[Any]:
    """Field ``field`` of ``whats[i]`` for each ``i`` of ``which``."""
    import numpy as np

    values = np.empty(len(whats), object)
    values[:] = [w[field] for w in whats]
    return values[which].tolist()


def _parents(starts: Any, ends: Any) -> Any:
    """Each event's parent (its index, -1 for none) by a stack, of events sorted parents first.

    An event is the child of the innermost open event it starts and ends within; one that
    starts as an open event ends, or outlasts it, closes it.
    """
    import numpy as np

    from neuronprof.analysis.trace._nesting_columns import _nesting

    nested = _nesting(starts, ends - starts, ends) if len(starts) > 1 else None
    if nested is not None:
        return nested[1]
    parent = []
    stack: list[int] = []
    open_ends: list[int] = []
    for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
        while open_ends and (start >= open_ends[-1] or end > open_ends[-1]):
            open_ends.pop()
            stack.pop()
        parent.append(stack[-1] if stack else -1)
        stack.append(i)
        open_ends.append(end)
    return np.array(parent, np.int64)


def _what(keys: Any, k: int, device_process: bool, evidence: set[str]) -> tuple[Any, ...]:
    """How the timeline reads the events of key ``k``: ``(host category, device category, shapes, dtypes)``."""
    name, cat, dims, types, _concrete = keys.keys[k]
    cat = cat if isinstance(cat, str) else ""
    kind = keys.kind[k]
    if kind == vocab.K_STEP and device_process:
        return (None, None, None, None)  # the device-side copy of a step annotation (as the table reader)
    if kind == vocab.K_RUNTIME:
        evidence.add(f"{cat}\n{name}")
    if vocab.on_device(kind, device_process):
        evidence.add(cat)
        dcat = vocab.DEVICE_CATEGORY.get(cat.lower()) or ("memcpy" if _MEMCPY.search(name) else "kernel")
        return (None, dcat, None, None)
    hcat: HostCategory
    if kind == vocab.K_STEP:
        hcat = "step"
    elif kind == vocab.K_OP:
        hcat = "op"
    elif kind == vocab.K_PY:
        hcat = "python"
    elif kind == vocab.K_RUNTIME:
        hcat = "runtime"
    elif cat.lower() == "user_annotation":
        hcat = "annotation"
    else:
        hcat = "other"
    decoded_types = _decode_input(types)
    return (
        hcat,
        None,
        _flat_shapes(_decode_input(dims)),
        tuple(str(t) for t in decoded_types) if isinstance(decoded_types, tuple) else None,
    )
