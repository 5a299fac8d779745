"""Events read into the findings' call tree on numpy columns: the one reader of a trace's event tables.

It makes the public timeline's [`HostEvent`][neuronprof.analysis.insights.HostEvent]s
(``timeline_of``) or the findings' call tree (``read_of``): per thread, sorted and nested
by numpy, the nodes made in the tree's order, and the device work linked from the table's
own columns. A timeline made by hand or by a live session's feeder is read into the same
tree the same way (``nodes_of``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis.insights._timeline import DeviceEvent, HostCategory, HostEvent
from neuronprof.analysis.insights._tree import _MEMCPY, _is_region, _Node
from neuronprof.analysis.trace._rules import _decode_input, _flat_shapes

if TYPE_CHECKING:
    from neuronprof.analysis.trace import EventTable

_SLICE = 1 << 13
"""How many owners of device work ``link`` gives theirs at a time (their indices made Python ints a slice at once)."""


class _TreeReader:
    """A ``_timeline`` reader: it appends each table's device events, then its host events thread by thread.

    Each thread's host events come by start, then longest first (ties as read). ``link``
    nests ``_Node``s, each one the child of the innermost open node it starts and ends
    within (``_parents``), on the thread's columns rather than event by event, then
    attaches the device work, on the columns: the ids that link them are read there,
    and kept on the events only when asked (the rules never read them), so that a large
    trace holds no int object apiece for them.
    """

    def __init__(self, cls: type = _Node, ids: bool = False) -> None:
        """``cls``: ``_Node`` (the tree, linked by ``link``) or ``HostEvent`` (the public timeline, events only);
        ``ids``: whether each event keeps its External and correlation ids (the report's panes read them)."""
        self.cls, self.ids, self.tree = cls, ids or cls is not _Node, cls is _Node
        # Per thread: where its nodes start among this reader's, which of the timeline's events they are
        # (in the tree's order), the timeline's columns (the table's own, not copies), whether each
        # node is a runtime call, an op or compiled region, and (once ``link`` has nested them) its parent's
        # place among this reader's.
        self.threads: list[tuple[Any, ...]] = []
        self.count = 0  # the host events read so far (a rank's reader reads only its rank's tables)
        self.device: list[list[Any]] = [[], []]  # per timeline, its device events' correlation and External ids

    def __call__(
        self, fi: int, table: EventTable, host: list[Any], device: list[DeviceEvent], evidence: set[str]
    ) -> None:
        import numpy as np

        keys = table.keys
        raw_names = keys.raw_names
        seen: dict[bool, dict[int, tuple[Any, ...]]] = {False: {}, True: {}}
        for (pid, tid), th, device_process in table.timelines():
            if not len(th.ts):
                continue
            known = seen[device_process]
            kid = np.frombuffer(th.kid, np.int32)
            used = np.flatnonzero(np.bincount(kid)).tolist()  # the keys used here, in order
            for k in used:
                if k not in known:
                    known[k] = (*_what(keys, k, device_process, evidence), raw_names[k])
            # What each key used here is, indexed by its position in ``used``.
            whats = [known[k] for k in used]
            position = np.zeros(used[-1] + 1, np.int32)
            position[used] = np.arange(len(used), dtype=np.int32)
            at = position[kid]
            role = np.array([0 if w[0] is not None else 1 if w[1] is not None else 2 for w in whats], np.int8)[at]
            t = np.frombuffer(th.ts, np.int64)
            d = np.frombuffer(th.dur, np.int64)
            c = np.frombuffer(th.corr, np.int64)
            x = np.frombuffer(th.ext, np.int64)
            work = np.flatnonzero(role == 1)
            if len(work):
                which, starts = at[work], t[work]
                if self.tree:
                    _append(self.device, c[work], x[work])
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
            which = at[ops]
            runtime = np.array([w[0] == "runtime" for w in whats], bool)[which]
            nodes = list(
                map(
                    self.cls,
                    _column(whats, 4, which),
                    starts.tolist(),
                    ends.tolist(),
                    repeat(f"{fi}:{pid}:{tid}"),
                    _column(whats, 0, which),
                    self._ids(x[ops]),
                    self._ids(np.where(runtime, c[ops], -1)),
                    _column(whats, 2, which),
                    _column(whats, 3, which),
                )
            )
            host += nodes
            if self.tree:
                op = np.array([w[0] == "op" or _is_region(w[4]) for w in whats], bool)[which]
                self.threads.append((self.count, ops.astype(np.int32), t, d, c, x, runtime, op))
            self.count += len(nodes)

    def nodes_of(self, host: Sequence[HostEvent], device: Sequence[DeviceEvent]) -> list[_Node]:
        """A timeline's events (made by hand, or by a live session's feeder) as nodes, read as a table's.

        Returns the nodes, thread by thread in the order their threads first appear; ``link`` then nests
        them and attaches ``device`` to them. An id is a non-negative int64, as a trace's are.
        """
        import numpy as np

        def ids(values: Iterable[Optional[int]]) -> Any:
            return np.array([-1 if v is None else v for v in values], np.int64)

        by_thread: dict[str, list[HostEvent]] = {}
        for ev in host:
            by_thread.setdefault(ev.thread, []).append(ev)
        nodes: list[_Node] = []
        for events in by_thread.values():
            t, end = np.array([e.start_ns for e in events], np.int64), np.array([e.end_ns for e in events], np.int64)
            rows = np.lexsort((-end, t))  # stable: ties keep the order given
            mine = [_Node.of(events[i]) for i in rows.tolist()]
            runtime = np.array([n.category == "runtime" for n in mine], bool)
            op = np.array([n.category == "op" or _is_region(n.name) for n in mine], bool)
            corr, ext = ids(e.correlation for e in events), ids(e.ext_id for e in events)
            self.threads.append((self.count, rows.astype(np.int32), t, end - t, corr, ext, runtime, op))
            self.count += len(mine)
            nodes += mine
        _append(self.device, ids(d.correlation for d in device), ids(d.ext_id for d in device))
        return nodes

    def _ids(self, ids: Any) -> Any:
        """The ids as each event keeps them (None for none), or None for every event when they are not kept."""
        if not self.ids:
            return repeat(None)
        kept = ids.astype(object)
        kept[ids < 0] = None
        return kept.tolist()

    def link(self, host: Sequence[Any], device: Sequence[DeviceEvent]) -> int:
        """Nest the nodes read in their tree, then attach each device event to the op that launched it.

        Returns how many device events stayed unlinked. Each node is the child of the innermost
        open node of its thread it starts and ends within (``_parents``).

        The correlation id comes first: it ties the device event to the runtime call that
        launched it, and that call to its op (the op whose External id the call carries,
        else the innermost op around the call). The External id is the fallback.

        ``host`` and ``device``: the events this reader read, in the order it read them."""
        import numpy as np

        for i, (first, rows, t, d, *columns) in enumerate(self.threads):
            starts = t[rows]
            parent = _nest(host[first : first + len(rows)], starts, starts + d[rows])
            self.threads[i] = (first, rows, t, d, *columns, np.where(parent >= 0, parent + first, -1).astype(np.int32))
        if not device:
            return 0
        if not host:
            return len(device)
        dev_corr, dev_ext = _joined(self.device)
        # The runtime calls with a correlation id and the ops with an External id, in the order of
        # ``host``: their places there and their ids.
        calls: list[list[Any]] = [[], [], []]
        ops: list[list[Any]] = [[], []]
        for first, rows, _, _, c, x, runtime, op, _ in self.threads:
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
        del by_corr, dev_corr
        launched = np.flatnonzero(rt >= 0)
        rt = rt[launched]
        rt_at, owner = call_at[rt], by_ext(call_ext[rt])
        del rt, call_at, call_ext
        owner_at = _pick(op_at, owner)
        (rt_start, rt_end), (owner_start, owner_end) = self._spans(rt_at), self._spans(owner_at)
        ok = (owner >= 0) & (owner_start <= rt_start) & (rt_end <= owner_end)
        del rt_start, rt_end, owner_start, owner_end, owner
        target = np.full(len(device), -1, np.int64)
        target[launched[ok]] = owner_at[ok]
        if not ok.all():
            parent, op = (np.concatenate(column) for column in zip(*((th[8], th[7]) for th in self.threads)))
            for i, n in zip(launched[~ok].tolist(), parent[rt_at[~ok]].tolist()):  # else the innermost op around it
                while n >= 0 and not op[n]:
                    n = int(parent[n])
                target[i] = n
            del parent, op
        del rt_at, owner_at, ok, launched
        self.threads = []
        left = target < 0
        target[left] = _pick(op_at, by_ext(dev_ext[left]))
        linked = np.flatnonzero(target >= 0)
        if len(linked):
            # Each op's work in the order read: a 1-tuple for one kernel (the most common), a list from the second.
            by_target = linked[np.argsort(target[linked], kind="stable")]
            owners = target[by_target]
            firsts = np.flatnonzero(np.concatenate(([True], owners[1:] != owners[:-1])))
            lasts = np.append(firsts[1:], len(by_target))
            work = [device[i] for i in by_target.tolist()]
            # A slice of the groups at a time: their ints as Python objects are made for one slice only.
            for at in range(0, len(firsts), _SLICE):
                cut = slice(at, at + _SLICE)
                for n, lo, hi in zip(owners[firsts[cut]].tolist(), firsts[cut].tolist(), lasts[cut].tolist()):
                    host[n].device = (work[lo],) if hi - lo == 1 else work[lo:hi]
        return int(len(device) - len(linked))

    def _spans(self, at: Any) -> tuple[Any, Any]:
        """The start and end of the nodes at places ``at`` of ``host`` (-1: none, read as 0), from the columns."""
        import numpy as np

        start, end = np.zeros(len(at), np.int64), np.zeros(len(at), np.int64)
        for first, rows, t, d, *_ in self.threads:
            mine = np.flatnonzero((at >= first) & (at < first + len(rows)))
            i = rows[at[mine] - first]
            start[mine] = t[i]
            end[mine] = t[i] + d[i]
        return start, end


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


def _nest(nodes: Sequence[_Node], starts: Any, ends: Any) -> Any:
    """Place one thread's nodes, sorted parents first, in their tree; return each one's parent."""
    import numpy as np

    parent = _parents(starts, ends)
    nested = np.flatnonzero(parent >= 0)
    if not len(nested):
        return parent  # every node a root, as made
    # Children grouped by parent, in order (a stable sort); a 1-tuple for an only child, a list from the second.
    by_parent = nested[np.argsort(parent[nested], kind="stable")]
    owners = parent[by_parent]
    cut = np.flatnonzero(owners[1:] != owners[:-1]) + 1
    kids = [nodes[i] for i in by_parent.tolist()]
    deque(map(_Node.__dict__["parent"].__set__, kids, [nodes[i] for i in owners.tolist()]), maxlen=0)
    lo = 0
    for owner, hi in zip(owners[np.concatenate(([0], cut))].tolist(), [*cut.tolist(), len(by_parent)]):
        nodes[owner].children = (kids[lo],) if hi - lo == 1 else kids[lo:hi]
        lo = hi
    return parent


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
