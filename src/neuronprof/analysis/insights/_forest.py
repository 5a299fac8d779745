"""The findings' call trees as columns: one row per host event, its device work beside it.

A trace of millions of events holds, per event, a few numbers here (its key, start,
end, parent, thread: about 32 bytes) instead of a Python object (about 250 bytes with
its ints and lists). The rules ask for the events they read: those of a name, the
ones with a host↔device copy. Only those become ``_Node`` objects (``node``), made
when asked and let go with the rule that asked; a rule compares them by row.

Rows are in tree order: thread by thread, each thread's events by start, the longer
first (parents before their children, children in order). The subtree of a row is then
the rows from it to its ``last`` one, and its device work the device rows whose owner
lies in that range.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis._arrays import present

if TYPE_CHECKING:
    from neuronprof.analysis.insights._timeline import DeviceEvent
    from neuronprof.analysis.insights._tree import _Node

_HCAT, _DCAT, _SHAPES, _DTYPES, _NAME = range(5)
"""The fields of a key (a ``_TreeReader`` what): host category, device category, input shapes, input dtypes, name."""

# The vocabulary's kinds of the timeline's host categories; annotations and the rest are K_OTHER.
KINDS = {"op": vocab.K_OP, "python": vocab.K_PY, "step": vocab.K_STEP, "runtime": vocab.K_RUNTIME}


class _Forest:
    """One rank's host events as columns in tree order, re-dispatches folded, and their device work.

    Attributes (numpy arrays, one entry per host row unless said):
        whats: Per key: ``(host category, device category, shapes, dtypes, name)``.
        key, start, end, parent, thread, last: Each row's key, start and end (ns), parent row
            (-1: a root), thread (an index into ``threads``) and the last row of its subtree.
        dkey, dstart, dend, owner: Per device event, in the order read: its key, start and end, and
            the row that launched it (-1: none).
        unlinked: How many device events have no owner.
    """

    def __init__(
        self,
        whats: Sequence[tuple[Any, ...]],
        threads: Sequence[str],
        host: tuple[Any, Any, Any, Any, Any],
        device: tuple[Any, Any, Any, Any],
    ) -> None:
        """``host``: ``(key, start, end, parent, thread)`` per row, in tree order, before folding;
        ``device``: ``(key, start, end, owner)`` per device event, in the order read (owners: host rows)."""
        import numpy as np

        self.whats, self.threads = whats, threads
        key, start, end, parent, thread = host
        dkey, dstart, dend, owner = device
        self.record_shapes = any(whats[k][_SHAPES] is not None for k in present(key, len(whats)))
        self.figures = self._figures(key, start, end, thread, dkey, dstart, dend)  # of every event, none folded
        folded = self._folded(key, parent)
        if folded.any():
            # Each folded row's children and device work go to its nearest unfolded ancestor.
            up = parent.copy()
            while True:
                hop = (up >= 0) & folded[np.maximum(up, 0)]
                if not hop.any():
                    break
                up[hop] = parent[up[hop]]
            first_owner = owner
            at_owner = np.maximum(owner, 0)
            owner = np.where((owner >= 0) & folded[at_owner], up[at_owner], owner)
            keep = ~folded
            new = np.cumsum(keep) - 1
            parent = np.where(up >= 0, new[np.maximum(up, 0)], -1)[keep]
            owner = np.where(owner >= 0, new[np.maximum(owner, 0)], -1)
            key, start, end, thread = key[keep], start[keep], end[keep], thread[keep]
        else:
            first_owner = owner
        # The columns as given where they have their dtype already (a trace's: the report's own, not copies).
        self.key, self.start, self.end, self.parent, self.thread = (
            key.astype(np.int32, copy=False),
            start,
            end,
            parent.astype(np.int32, copy=False),
            thread.astype(np.int32, copy=False),
        )
        self.dkey, self.dstart, self.dend = dkey.astype(np.int32, copy=False), dstart, dend
        self.owner = owner.astype(np.int32, copy=False)
        n = len(key)
        self.levels = _levels(_depths(self.parent))
        size = np.ones(n, np.int64)
        for nodes in reversed(self.levels[1:]):
            np.add.at(size, self.parent[nodes], size[nodes])
        self.last = (np.arange(n) + size - 1).astype(np.int32)
        # Device work by owner: an owner's own first, then what folded into it (in tree order), each in the order read.
        linked = np.flatnonzero(owner >= 0)
        by = linked[np.lexsort((linked, first_owner[linked], owner[linked]))].astype(np.int32)
        self.by_owner, self.owners = by, self.owner[by]
        self.unlinked = int(len(owner) - len(linked))
        # Children by parent, in tree order.
        nested = np.flatnonzero(self.parent >= 0)
        self.kids = nested[np.argsort(self.parent[nested], kind="stable")].astype(np.int32)
        self.kid_parents = self.parent[self.kids]

    def _figures(self, key: Any, start: Any, end: Any, thread: Any, dkey: Any, dstart: Any, dend: Any) -> Any:
        """The rank's ``rank_figures``: its compute and its time in collectives per step."""
        from neuronprof.analysis.insights._ranks import figures_of

        host = self.key_mask(lambda name, _category: vocab.is_collective(name, vocab.K_OTHER))[key]
        device = self.dkey_mask(lambda name, _category: vocab.is_collective(name, vocab.K_DEVICE))[dkey]
        spans = list(zip(start[host].tolist(), end[host].tolist()))
        spans += zip(dstart[device].tolist(), dend[device].tolist())
        is_step = self.key_mask(lambda _name, category: category == "step")[key]
        return figures_of(thread, start, end, is_step, spans) if len(key) else (None, None)

    def rank_figures(self) -> tuple[Optional[float], Optional[float]]:
        """``rank_figures`` of the rank's events: ``(compute per step, time in collectives per step)`` in µs."""
        return self.figures

    def _folded(self, key: Any, parent: Any) -> Any:
        """The rows folded into their parent: the vocabulary's ``folds_into_parent``, asked of an only child."""
        import numpy as np

        folded = np.zeros(len(key), bool)
        nested = np.flatnonzero(parent >= 0)
        if not len(nested):
            return folded
        count = np.bincount(parent[nested], minlength=len(key))
        only = nested[count[parent[nested]] == 1]
        if not len(only):
            return folded
        # Each (parent's key, child's key) pair as one number: a sort of numbers, not of rows of two.
        width = len(self.whats)
        found, back = np.unique(key[parent[only]].astype(np.int64) * width + key[only], return_inverse=True)
        w = self.whats
        folds = np.array(
            [
                vocab.folds_into_parent(w[a][_NAME], w[b][_NAME], KINDS.get(w[b][_HCAT], vocab.K_OTHER))
                for a, b in zip(*(x.tolist() for x in np.divmod(found, width)))
            ],
            bool,
        )
        folded[only] = folds[back.reshape(-1)]
        return folded

    def __len__(self) -> int:
        return len(self.key)

    # -- what a key is ----------------------------------------------------------------

    def key_mask(self, test: Callable[[str, str], Any]) -> Any:
        """Per key, ``test(name, host category)``: a mask to index with ``key``."""
        import numpy as np

        return np.fromiter((bool(test(w[_NAME], w[_HCAT])) for w in self.whats), bool, len(self.whats))

    def dkey_mask(self, test: Callable[[str, str], Any]) -> Any:
        """Per key, ``test(name, device category)`` (device keys only; False for host keys)."""
        import numpy as np

        return np.fromiter(
            (w[_DCAT] is not None and bool(test(w[_NAME], w[_DCAT])) for w in self.whats), bool, len(self.whats)
        )

    def row_mask(self, rows: Any) -> Any:
        """A per-row mask, true at ``rows``."""
        import numpy as np

        mask = np.zeros(len(self.key), bool)
        mask[rows] = True
        return mask

    def self_ns(self, rows: Any) -> Any:
        """Each of ``rows``' self time (ns): its duration less the union of its children's spans."""
        import numpy as np

        rows = np.asarray(rows, np.int64)
        lo = find(self.kid_parents, rows)
        counts = find(self.kid_parents, rows + 1) - lo
        kids = self.kids[_ranges(lo, counts)]  # each row's children, by start
        group = np.repeat(np.arange(len(rows)), counts)
        covered = _union_lengths(group, self.start[kids], self.end[kids], len(rows), ordered=True)
        return self.end[rows] - self.start[rows] - covered

    def device_costs(self, chains: Sequence[Any]) -> tuple[list[list[int]], list[int]]:
        """For each group of rows: each row's device time (the union of its subtree's device work, ns),
        and the gaps between the group's device work, all rows' together (ns)."""
        import numpy as np

        sizes = [len(c) for c in chains]
        rows = np.concatenate(chains) if chains else np.empty(0, np.int64)
        lo = find(self.owners, rows)
        counts = find(self.owners, self.last[rows] + 1) - lo
        work = self.by_owner[_ranges(lo, counts)]
        member = np.repeat(np.arange(len(rows)), counts)
        starts, ends = self.dstart[work], self.dend[work]
        costs = _union_lengths(member, starts, ends, len(rows)).tolist()
        chain = np.repeat(np.arange(len(chains)), sizes)[member]
        covered = _union_lengths(chain, starts, ends, len(chains))
        first, last = np.zeros(len(chains), np.int64), np.zeros(len(chains), np.int64)
        if len(work):
            first[:] = ends.max()
            last[:] = starts.min()
            np.minimum.at(first, chain, starts)
            np.maximum.at(last, chain, ends)
        gaps = np.where(np.bincount(chain, minlength=len(chains)) > 0, last - first - covered, 0).tolist()
        cuts = np.cumsum([0, *sizes]).tolist()
        return [costs[a:b] for a, b in zip(cuts, cuts[1:])], gaps

    # -- the rows as the rules read them -----------------------------------------------

    def node(self, i: int) -> _Node:
        """Row ``i`` as a ``_Node`` (a new one at each call: nodes are compared by row, ``_i``)."""
        from neuronprof.analysis.insights._tree import _Node

        w = self.whats[self.key[i]]
        s, e = int(self.start[i]), int(self.end[i])
        return _Node(w[_NAME], s, e, self.threads[self.thread[i]], w[_HCAT], w[_SHAPES], w[_DTYPES], self, int(i))

    def nodes(self, rows: Any) -> list[_Node]:
        """Rows (an int array) as ``_Node``s, in the order given, made column by column."""
        from neuronprof.analysis.insights._tree import _Node

        if not len(rows):
            return []
        whats, threads = self.whats, self.threads
        keys = [whats[k] for k in self.key[rows].tolist()]
        starts, ends, on = self.start[rows].tolist(), self.end[rows].tolist(), self.thread[rows].tolist()
        return [
            _Node(w[_NAME], s, e, threads[t], w[_HCAT], w[_SHAPES], w[_DTYPES], self, i)
            for i, w, s, e, t in zip(rows.tolist(), keys, starts, ends, on)
        ]

    def children(self, i: int) -> list[int]:
        """The rows of row ``i``'s children, in order."""
        lo, hi = find(self.kid_parents, (i, i + 1))
        return self.kids[lo:hi].tolist()

    def own_device(self, i: int) -> list[int]:
        """The device events row ``i`` launched (its folded children's included), in order."""
        lo, hi = find(self.owners, (i, i + 1))
        return self.by_owner[lo:hi].tolist()

    def subtree_device(self, i: int) -> Any:
        """The device events of row ``i`` and every row under it."""
        lo, hi = find(self.owners, (i, int(self.last[i]) + 1))
        return self.by_owner[lo:hi]

    def device_spans(self, i: int) -> list[tuple[int, int]]:
        """The ``(start, end)`` of the device work of row ``i`` and every row under it, in no set order."""
        rows = self.subtree_device(i)
        return list(zip(self.dstart[rows].tolist(), self.dend[rows].tolist()))

    def device_event(self, j: int) -> DeviceEvent:
        """Device event ``j`` as a ``DeviceEvent``."""
        from neuronprof.analysis.insights._timeline import DeviceEvent

        w = self.whats[self.dkey[j]]
        return DeviceEvent(w[_NAME], int(self.dstart[j]), int(self.dend[j]), w[_DCAT])


def _ranges(lo: Any, counts: Any) -> Any:
    """The positions ``lo[i]``, ``lo[i] + 1``... ``lo[i] + counts[i] - 1`` of every ``i``, in one array."""
    import numpy as np

    total = int(counts.sum())
    return np.repeat(lo, counts) + np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)


def _union_lengths(group: Any, starts: Any, ends: Any, n: int, ordered: bool = False) -> Any:
    """Per group ``0..n-1``, how long the union of its spans is (ns); ``ordered``: spans by group, then start.

    Each span adds what it reaches past the furthest end before it in its group: a running
    maximum over the spans in order, each group shifted past the one before so that the maximum
    never crosses into the next.
    """
    import numpy as np

    out = np.zeros(n, np.int64)
    if not len(starts):
        return out
    if not ordered:
        order = np.lexsort((starts, group))
        group, starts, ends = group[order], starts[order], ends[order]
    first = np.ones(len(starts), bool)
    first[1:] = group[1:] != group[:-1]
    origin = int(min(starts.min(), ends.min()))
    span = int(max(starts.max(), ends.max())) - origin + 1
    if span * (n + 1) < 1 << 62:
        furthest = np.maximum.accumulate(ends - origin + group * span) - group * span + origin
        before = np.where(first, starts, np.concatenate(([0], furthest[:-1])))
        np.add.at(out, group, np.maximum(ends - np.maximum(starts, before), 0))
        return out
    # Times too far apart for the shift: span by span.
    added = out.tolist()
    furthest_end = 0
    for g, s, e, new in zip(group.tolist(), starts.tolist(), ends.tolist(), first.tolist()):
        added[g] += e - s if new else max(e - max(s, furthest_end), 0)
        furthest_end = e if new else max(furthest_end, e)
    return np.array(added, object)


def find(ordered: Any, values: Any) -> Any:
    """``np.searchsorted(ordered, values)``, ``values`` taken in ``ordered``'s dtype.

    numpy searches in the two arrays' common dtype: int64 values would have it copy a whole
    int32 column at each search.
    """
    import numpy as np

    return np.searchsorted(ordered, np.asarray(values, ordered.dtype))


def _depths(parent: Any) -> Any:
    """Each row's depth (0 for a root), by pointer jumping: a few passes however deep the trees."""
    import numpy as np

    depth = (parent >= 0).astype(np.int32)
    up = parent.astype(np.int64)
    while True:
        on = up >= 0
        if not on.any():
            return depth
        at = np.maximum(up, 0)
        depth = depth + np.where(on, depth[at], 0)
        up = np.where(on, up[at], -1)


def _levels(depth: Any) -> list[Any]:
    """The rows of each depth, shallowest first, each level's in tree order."""
    import numpy as np

    if not len(depth):
        return []
    from neuronprof.analysis.trace._nesting_arrays import _by_level

    order = _by_level(depth).astype(np.int32)  # (a radix sort where the depths fit 16 bits)
    cuts = np.flatnonzero(np.diff(depth[order])) + 1
    return np.split(order, cuts)


def reach(forest: _Forest, is_step: Any, call: Any, transparent: Any, open_roots: bool) -> Any:
    """Per row, the step whose top-level call it is (its row; ``len(forest)`` for the whole recording), or -1.

    The step's walk: the ops it calls directly are its calls; Python frames, annotations
    and other ranges are transparent (their calls are the step's); anything else (a
    runtime call, another step) ends the walk there. ``open_roots``: no step in the profile,
    so the roots are the whole recording's calls.
    """
    import numpy as np

    n = len(forest)
    via = np.full(n, -1, np.int32 if n < 1 << 31 else np.int64)
    none = n if open_roots else -1
    parent = forest.parent
    passes = is_step | (transparent & ~call)  # a row its step's walk goes through
    for level, rows in enumerate(forest.levels):
        if level == 0:
            via[rows] = np.where(is_step[rows], rows, none)
            continue
        up = parent[rows]
        through = (via[up] >= 0) & passes[up]
        via[rows] = np.where(is_step[rows], rows, np.where(through, via[up], -1))
    top = call & ~is_step & (via >= 0)
    # A step's own row is not its call: its calls are the rows it reaches.
    return np.where(top, via, -1)
