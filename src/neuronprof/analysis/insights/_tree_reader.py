"""Events read into the findings' call trees on numpy columns: the one reader of a trace's event tables.

It makes the public timeline's [`HostEvent`][neuronprof.analysis.insights.HostEvent]s
(``timeline_of``), or the events as columns (``read_of``): per thread, sorted by numpy,
what the report's panes read and what ``forest_of`` nests into the findings' call trees,
a ``_Forest``, the device work linked to its ops. A timeline made by hand or by a live
session's feeder is read into the same columns the same way (``nodes_of``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis._arrays import present
from neuronprof.analysis.insights._timeline import DeviceEvent, HostCategory, HostEvent
from neuronprof.analysis.insights._tree import _MEMCPY, _is_region
from neuronprof.analysis.trace._rules import _decode_input, _flat_shapes

if TYPE_CHECKING:
    from neuronprof.analysis.insights._columns import EventColumns
    from neuronprof.analysis.insights._forest import _Forest
    from neuronprof.analysis.trace import EventTable


class _TreeReader:
    """A ``_timeline`` reader: it appends each table's device events, then its host events thread by thread.

    Each thread's host events come by start, then longest first (ties as read): the order
    of their call tree. The reader keeps each event's key (``whats``: what the timeline
    reads of a name) and, unless it makes the public timeline's objects (``events``), the
    events as columns a piece at a time (``pieces``), which ``columns_of`` joins.
    """

    def __init__(self, events: bool = False) -> None:
        """``events``: make the public timeline's ``HostEvent``s and ``DeviceEvent``s (and keep no columns);
        else keep the columns, for the report's panes and the forest (``pieces``)."""
        self.cls, self.ids, self.tree = (HostEvent if events else None), events, not events
        # What each key read is: (host category, device category, shapes, dtypes, name).
        self.whats: list[tuple[Any, ...]] = []
        # The events read, a piece per thread (host) and per timeline (device): see ``pieces``.
        self.host: list[list[Any]] = []
        self.device: list[list[Any]] = []

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
            used = present(kid)  # the keys used here, in order
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
                    self.device.append([fi, which, starts, starts + d[work], x[work], c[work]])
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
            corr = np.where(runtime, c[ops], -1)  # a correlation id is a runtime call's only
            if self.cls is not None:
                host += map(
                    self.cls,
                    _column(whats, 4, which),
                    starts.tolist(),
                    ends.tolist(),
                    repeat(label),
                    _column(whats, 0, which),
                    self._ids(x[ops]),
                    self._ids(corr),
                    _column(whats, 2, which),
                    _column(whats, 3, which),
                )
            if self.tree:
                self.host.append([fi, which, starts, ends, label, x[ops], corr])

    def nodes_of(self, host: Sequence[HostEvent], device: Sequence[DeviceEvent]) -> None:
        """Read a timeline's events (made by hand, or by a live session's feeder) as a table's are.

        Their threads come in the order they first appear, each thread's events in tree order;
        ``device`` after them, in its order. An id is a non-negative int64, as a trace's are.
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
            corr = np.where(runtime, ids(e.correlation for e in mine), -1)
            self.host.append([0, which, t[rows], end[rows], thread, ids(e.ext_id for e in mine), corr])
        self.device.append(
            [
                0,
                np.array([key((None, d.category, None, None, d.name)) for d in device], np.int32),
                np.array([d.start_ns for d in device], np.int64),
                np.array([d.end_ns for d in device], np.int64),
                ids(d.ext_id for d in device),
                ids(d.correlation for d in device),
            ]
        )

    def _ids(self, ids: Any) -> Any:
        """The ids as each event keeps them (None for none), or None for every event when they are not kept."""
        if not self.ids:
            return repeat(None)
        kept = ids.astype(object)
        kept[ids < 0] = None
        return kept.tolist()

    def pieces(self, key_offset: int = 0) -> tuple[list[list[Any]], list[list[Any]]]:
        """The events read, as columns a piece at a time; the reader lets go of them.

        Host pieces, one per thread: ``(table, key, start, end, thread name, External id, correlation)``,
        the events in tree order (a correlation only on runtime calls); device pieces, one per
        timeline read: ``(table, key, start, end, External id, correlation)``. Ids are -1 for none;
        keys are offset by ``key_offset`` (the readers of several ranks put their keys in one list).
        """
        host, device, self.host, self.device = self.host, self.device, [], []
        if key_offset:
            host = [[fi, k + key_offset, *rest] for fi, k, *rest in host]
            device = [[fi, k + key_offset, *rest] for fi, k, *rest in device]
        return host, device


def forest_of(cols: EventColumns, whats: Sequence[tuple[Any, ...]], key_offset: int = 0) -> _Forest:
    """The findings' call trees of one rank's events read as columns (a ``_TreeReader``'s, in tree order).

    Each row is the child of the innermost open row of its thread it starts and ends
    within (``_parents``). Each device event is linked to the op that launched it: the
    correlation id comes first, tying the device event to the runtime call that launched
    it, and that call to its op (the op whose External id the call carries, else the
    innermost op around the call); the External id is the fallback.

    Args:
        cols: The rank's events: host rows thread by thread, each thread's by start then the
            longer first; threads numbered in the order they come.
        whats: Per key of the rank: ``(host category, device category, shapes, dtypes, name)``.
        key_offset: Where the rank's keys start in ``cols``' (the readers of several ranks put
            their keys in one list).
    """
    import numpy as np

    from neuronprof.analysis.insights._forest import _Forest

    key = cols.key - key_offset if key_offset else cols.key
    dkey = cols.dkey - key_offset if key_offset else cols.dkey
    start, end, thread = np.asarray(cols.start, np.int64), np.asarray(cols.end, np.int64), cols.thread
    parent = np.full(len(key), -1, np.int32)
    edges = [0, *(np.flatnonzero(np.diff(thread)) + 1).tolist(), len(key)]
    for a, b in zip(edges, edges[1:]):
        if b > a:
            mine = _parents(start[a:b], end[a:b])
            parent[a:b] = np.where(mine >= 0, mine + a, -1)
    is_runtime = np.array([w[0] == "runtime" for w in whats], bool)
    is_op = np.array([w[0] == "op" or _is_region(w[4]) for w in whats], bool)
    target = _targets(
        (key, start, end, parent, is_runtime[key], is_op[key], cols.corr, cols.ext), cols.dcorr, cols.dext
    )
    return _Forest(whats, cols.threads, (key, start, end, parent, thread), (dkey, cols.dstart, cols.dend, target))


def _targets(host: tuple[Any, ...], dev_corr: Any, dev_ext: Any) -> Any:
    """Each device event's owner row (-1: none), from the host rows' columns (nested already):
    ``(key, start, end, parent, runtime, op, correlation, External id)``."""
    import numpy as np

    _, start, end, parent, runtime, op, corr, ext = host
    target = np.full(len(dev_corr), -1, np.int64)
    if not len(dev_corr) or not len(start):
        return target
    # The runtime calls with a correlation id and the ops with an External id, in row order.
    call_at = np.flatnonzero(runtime & (corr >= 0))
    call_corr, call_ext = corr[call_at], ext[call_at]
    op_at = np.flatnonzero(op & (ext >= 0))
    # The first runtime call of each correlation id, the first op of each External id.
    by_corr, by_ext = _first_of(call_corr), _first_of(ext[op_at])
    del call_corr
    rt = by_corr(dev_corr)
    del by_corr
    launched = np.flatnonzero(rt >= 0)
    rt = rt[launched]
    rt_at, owner = call_at[rt], by_ext(call_ext[rt])
    del rt, call_at, call_ext
    owner_at = _pick(op_at, owner)
    at = np.maximum(owner_at, 0)  # -1 (none) read as row 0: such an owner is refused below
    ok = (owner >= 0) & (start[at] <= start[rt_at]) & (end[rt_at] <= end[at])
    del owner, at
    target[launched[ok]] = owner_at[ok]
    if not ok.all():
        for i, n in zip(launched[~ok].tolist(), parent[rt_at[~ok]].tolist()):  # else the innermost op around it
            while n >= 0 and not op[n]:
                n = int(parent[n])
            target[i] = n
    del rt_at, owner_at, ok, launched
    left = target < 0
    target[left] = _pick(op_at, by_ext(dev_ext[left]))
    return target


def _frozen(value: Any) -> Any:
    """Recorded inputs as tuples all the way down (a timeline built from JSON may hold lists)."""
    return tuple(map(_frozen, value)) if isinstance(value, (list, tuple)) else value


def _pick(values: Any, i: Any) -> Any:
    """``values[i]``, -1 where ``i`` is -1."""
    import numpy as np

    return np.where(i >= 0, values[np.maximum(i, 0)], -1) if len(values) else np.full(len(i), -1, np.int64)


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

    from neuronprof.analysis.trace._nesting_arrays import _nesting

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
