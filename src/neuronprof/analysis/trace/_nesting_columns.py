"""The walk of ``_nesting`` done on numpy columns, for a long timeline whose spans nest cleanly.

``_Nesting._walk`` visits a timeline's events one by one with a stack: torch's
rule, exact for any input, and some microseconds an event. Most timelines of a
large trace nest cleanly: no span crosses a step's edge and none runs past the end
of the span it starts in. For those, what the walk computes is a function of each
event's parent, and the parent of every event is found at once: sorted by start
(longest first), an event's depth is the number of earlier events still open at its
start, and its parent is the last earlier event one level up. Self time, device
time, the fold of an only child, hidden frames, steps and top-level calls then
follow level by level (a few numpy calls per level of nesting), one block of
top-level spans at a time, so that memory holds one block's working arrays.

``walk_columns`` gives the same sums, samples, notes and pops from the device-time
maps as ``_walk``, in the same order; it declines (returns False, having changed
nothing) any timeline that does not nest cleanly, which ``_walk`` then reads.
"""

from __future__ import annotations

import sys
from itertools import repeat
from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis.trace._nesting_arrays import _by_level, _nesting
from neuronprof.analysis.trace._rules import _K_PY, _K_RUNTIME, _K_STEP
from neuronprof.analysis.trace._sums import EventColumns, EventKeys

if TYPE_CHECKING:
    from neuronprof.analysis.trace._nesting import _Nesting

__all__ = ["COLUMNS_MIN", "COLUMNS_MIN_COLD", "KeyColumns", "walk_columns", "worth_it"]

COLUMNS_MIN = 4096
"""Timelines with fewer events than this are walked event by event (numpy's set-up costs more there)."""

COLUMNS_MIN_COLD = 32768
"""The same before numpy is imported: importing it costs about what walking this many events does."""


def worth_it(events: int) -> bool:
    """Whether a timeline of this many events is walked on columns (``walk_columns``, its device rows too)."""
    return events >= (COLUMNS_MIN if "numpy" in sys.modules else max(COLUMNS_MIN, COLUMNS_MIN_COLD))


BLOCK = 1 << 14
"""About how many events one block of top-level spans holds (its working arrays are some 100 bytes an event)."""

_LIMIT = 1 << 61  # times and durations beyond this (ns) are left to the exact walk (int64 sums stay exact)


class KeyColumns:
    """What the walk asks of each key, as numpy arrays indexed by key (built once per aggregation)."""

    def __init__(self, keys: EventKeys) -> None:
        import numpy as np

        n = len(keys.kind)
        self.size = n
        kind = self.kind = np.array(keys.kind, np.int8)
        self.asynchronous = np.array(keys.asynchronous, bool)
        self.not_row = np.array(keys.not_row, bool)
        names, raw_names = keys.names, keys.raw_names
        self.own_frame = np.zeros(n, bool)
        self.support_frame = np.zeros(n, bool)
        for k in np.flatnonzero(kind == _K_PY).tolist():
            self.own_frame[k] = vocab.is_own_frame(names[k])
            self.support_frame[k] = vocab.is_support_frame(names[k])
        self.counts_as_call = np.array([vocab.counts_as_call(kd, name) for kd, name in zip(keys.kind, names)], bool)
        self.transparent = np.array([vocab.is_transparent(kd) for kd in keys.kind], bool)
        ids: dict[str, int] = {}
        self.raw_name = np.array([ids.setdefault(name, len(ids)) for name in raw_names], np.int64)


class _Totals:
    """What the blocks of one timeline add up to, committed to the aggregation at the end."""

    def __init__(self, n_keys: int) -> None:
        import numpy as np

        self.calls = np.zeros(n_keys, np.int64)
        self.cpu_self = np.zeros(n_keys, np.int64)
        self.cpu_total = np.zeros(n_keys, np.int64)
        self.dev_self = np.zeros(n_keys, np.int64)
        self.dev_total = np.zeros(n_keys, np.int64)
        # Self time of the rows per key on a timeline without steps, and when each key was first added.
        self.row_self = np.zeros(n_keys, np.int64)
        self.row_first = np.full(n_keys, -1, np.int64)
        self.top_level = 0
        self.linked = False
        self.step_work: list[bool] = []


def walk_columns(
    nesting: _Nesting,
    th: EventColumns,
    rows: Optional[list[int]],
    dev_by_corr: dict[int, int],
    dev_by_ext: dict[int, int],
    kc: KeyColumns,
) -> bool:
    """``nesting._walk(th, rows, ...)`` on numpy columns; False (nothing changed) when the timeline is not clean."""
    import numpy as np

    t = np.frombuffer(th.ts, np.int64)
    d = np.frombuffer(th.dur, np.int64)
    k = np.frombuffer(th.kid, np.int32)
    c = np.frombuffer(th.corr, np.int64)
    x = np.frombuffer(th.ext, np.int64)
    if rows is not None:
        pick = np.asarray(rows, np.int64)
        t, d, k, c, x = t[pick], d[pick], k[pick], c[pick], x[pick]
        del pick
    if not len(t):
        return True
    if t.max() >= _LIMIT or t.min() <= -_LIMIT or d.max() >= _LIMIT:
        return False
    # torch's order: by start, longest first; ties in file order (the sort is stable). A timeline
    # is most often in that order already.
    step = np.diff(t)
    if (step < 0).any() or ((step == 0) & (d[1:] > d[:-1])).any():
        order = np.lexsort((-d, t))
        t, d, k, c, x = t[order], d[order], k[order], c[order], x[order]
        del order
    del step
    e = t + d
    is_step = kc.kind[k] == _K_STEP
    has_steps = bool(is_step.any())
    asynchronous = kc.asynchronous[k]
    if has_steps and _crosses_a_step(t, e, is_step, asynchronous):
        return False  # cut at the steps' edges: the exact walk does that
    async_k = async_d = None
    if asynchronous.any():
        async_k, async_d = k[asynchronous], d[asynchronous]
        keep = ~asynchronous
        t, d, e, k, c, x, is_step = t[keep], d[keep], e[keep], k[keep], c[keep], x[keep], is_step[keep]
        del keep
    del asynchronous
    sums = nesting.sums
    if not len(t):  # only async spans
        _add_async(sums, async_k, async_d)
        return True
    nested = _nesting(t, d, e)
    if nested is None:
        return False  # a span runs past the end of the span it starts in: cut there by the exact walk
    depth, parent = nested
    under = parent >= 0
    if has_steps and (kc.raw_name[k[is_step & under]] == kc.raw_name[k[parent[is_step & under]]]).any():
        return False  # a step inside a span of its own name: the exact walk's bookkeeping for folds

    # Nothing declines from here on: the blocks, each a run of whole top-level spans.
    totals = _Totals(kc.size)
    samples = sums.samples
    first_sample = len(samples)
    roots = np.flatnonzero(depth == 0)  # the first event is one
    at_roots = np.searchsorted(roots, np.arange(0, len(t), BLOCK))
    starts = roots[at_roots[at_roots < len(roots)]]
    starts = starts[np.append(True, starts[1:] != starts[:-1])]  # sorted: drop repeats
    del roots, at_roots
    for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(t)]):
        sl = slice(lo, hi)
        p = parent[sl]
        _block(
            totals,
            samples,
            t[sl],
            d[sl],
            k[sl].astype(np.int64),
            c[sl],
            x[sl],
            depth[sl],
            np.where(p >= 0, p - lo, -1),
            lo,
            not has_steps,
            dev_by_corr,
            dev_by_ext,
            kc,
        )
    for target, values in (
        (sums.calls, totals.calls),
        (sums.cpu_self, totals.cpu_self),
        (sums.cpu_total, totals.cpu_total),
        (sums.dev_self, totals.dev_self),
        (sums.dev_total, totals.dev_total),
    ):
        _commit(target, values)
    _add_async(sums, async_k, async_d)
    if not has_steps:
        shown = np.flatnonzero(totals.row_first >= 0)
        if len(shown):
            total = int(totals.row_self[shown].sum())
            if total > 0:
                best = totals.row_self[shown].max()
                tied = shown[totals.row_self[shown] == best]
                nesting.off_steps.append((total, int(tied[np.argmin(totals.row_first[tied])])))
    sums.top_level += totals.top_level
    steps = vocab.step_count(totals.step_work, stopped_in_last=nesting.stopped_in_last_step)
    del samples[first_sample + steps :]  # the empty step torch opened as it stopped
    sums.steps += steps
    sums.linked |= totals.linked
    return True


def _block(
    totals: _Totals,
    samples: list[Any],
    t: Any,
    d: Any,
    k: Any,
    c: Any,
    x: Any,
    depth: Any,
    parent: Any,
    offset: int,
    track_rows: bool,
    dev_by_corr: dict[int, int],
    dev_by_ext: dict[int, int],
    kc: KeyColumns,
) -> None:
    """Walk one block of whole top-level spans (parents within the block) into ``totals`` and ``samples``.

    ``offset`` is the block's first event in the timeline; ``track_rows``: add up the
    self time of rows per key (a timeline without steps, for the note on it).
    """
    import numpy as np

    n = len(t)
    at = np.arange(n)
    kd = kc.kind[k]
    is_step = kd == _K_STEP
    nested = parent >= 0
    by_level = _by_level(depth)
    cuts = np.searchsorted(depth[by_level], np.arange(int(depth.max()) + 2))
    levels = [by_level[cuts[i] : cuts[i + 1]] for i in range(len(cuts) - 1)]

    # Top down: hidden frames, the own-frame flag, steps, anchors of top-level calls, device targets.
    is_py = kd == _K_PY
    own_flag = kc.own_frame[k]
    in_own = is_py & own_flag
    hidden = np.zeros(n, bool)
    step_rank = np.cumsum(is_step) - 1
    step_of = np.where(is_step, step_rank, -1)
    anchored = is_step.copy()
    takes_device = (kd != _K_RUNTIME) & ~is_py
    target = np.full(n, -1, np.int64)
    counts_call = kc.counts_as_call[k]
    transparent = kc.transparent[k]
    support = kc.support_frame[k]
    for here in levels[1:]:
        p = parent[here]
        parent_own = in_own[p]
        hid = is_py[here] & support[here] & parent_own
        hidden[here] = hid
        in_own[here] = np.where(is_py[here], hid | own_flag[here], parent_own)
        under_anchor = anchored[p]
        totals.top_level += int((under_anchor & counts_call[here]).sum())
        anchored[here] = is_step[here] | (under_anchor & ~counts_call[here] & transparent[here])
        step_of[here] = np.where(is_step[here], step_rank[here], step_of[p])
        target[here] = np.where(takes_device[p], p, target[p])
    hide = hidden | kc.not_row[k]
    row_child = nested & ~hide
    row_children = np.bincount(parent[row_child], minlength=n)
    only = np.full(n, -1, np.int64)
    only[parent[row_child]] = np.flatnonzero(row_child)
    fold = (row_children == 1) & ~hidden
    if fold.any():
        oc = only[fold]
        fold[fold] = (kd[oc] != _K_PY) & (kc.raw_name[k[oc]] == kc.raw_name[k[fold]])
    folded = np.zeros(n, bool)
    folded[only[fold]] = True
    kept = ~folded

    # Device time: the first runtime call of each correlation takes its kernels' time (to
    # the innermost op around it, else itself); the first other event of each External
    # id takes the time linked through it.
    own = np.zeros(n, np.int64)
    if dev_by_corr:
        calls_at = np.flatnonzero((kd == _K_RUNTIME) & (c >= 0))
        if len(calls_at):
            ids, first = _first_of_each(c[calls_at])
            found = np.fromiter(map(dev_by_corr.pop, ids.tolist(), repeat(0)), np.int64, len(ids))
            hit = found != 0
            if hit.any():
                totals.linked = True
                where = calls_at[first[hit]]
                to = target[where]
                np.add.at(own, np.where(to >= 0, to, where), found[hit])
    if dev_by_ext:
        others_at = np.flatnonzero((kd != _K_RUNTIME) & (x >= 0))
        if len(others_at):
            ids, first = _first_of_each(x[others_at])
            found = np.fromiter(map(dev_by_ext.pop, ids.tolist(), repeat(0)), np.int64, len(ids))
            hit = found != 0
            if hit.any():
                totals.linked = True
                own[others_at[first[hit]]] += found[hit]

    # Bottom up: self time (duration less the children's, plus what hidden children and
    # non-rows hand up, plus a folded only child's), device time, subtree sizes.
    children_ns = np.zeros(n, np.int64)
    np.add.at(children_ns, parent[nested], d[nested])
    handed_up = np.zeros(n, np.int64)
    dev_total = own.copy()
    size = np.ones(n, np.int64)
    self_ns = np.zeros(n, np.int64)
    for here in reversed(levels):
        s = d[here] - children_ns[here] + handed_up[here]
        f = fold[here]
        if f.any():
            folding = here[f]
            child = only[folding]
            s[f] += self_ns[child]
            own[folding] += own[child]
        self_ns[here] = s
        p = parent[here]
        up = p >= 0
        if up.any():
            h = hide[here] & up
            np.add.at(handed_up, p[h], s[h])
            np.add.at(dev_total, p[up], dev_total[here[up]])
            np.add.at(size, p[up], size[here[up]])

    # Per key: what each event adds, less what a folded child gave back to its parent.
    shown = ~hidden & kept
    np.add.at(totals.calls, k[shown], 1)
    np.add.at(totals.cpu_self, k[shown], self_ns[shown])
    np.add.at(totals.cpu_total, k[shown], d[shown])
    np.add.at(totals.dev_self, k[kept], own[kept])
    np.add.at(totals.dev_total, k[kept], dev_total[kept])

    # Per step, and on a timeline without steps, the self time by key, keys in the order
    # the exact walk first adds them: the order frames close (a subtree's end, innermost first).
    closes = np.lexsort((-depth, at + size))
    rank = np.empty(n, np.int64)
    rank[closes] = at
    own_kept = np.where(kept, own, 0)
    self_kept = np.where(kept, self_ns, 0)
    if is_step.any():
        steps_at = np.flatnonzero(is_step)
        first_sample = len(samples)
        samples.extend([dd, 0, {}, {}, 0, tt, 0] for dd, tt in zip(d[steps_at].tolist(), t[steps_at].tolist()))
        worked = np.zeros(len(steps_at), bool)
        under_step = nested & is_step[np.maximum(parent, 0)]
        worked[step_rank[parent[under_step]]] = True
        totals.step_work += worked.tolist()
        counted = np.flatnonzero(~hide & (step_of >= 0))
        _by_step_and_key(
            samples, first_sample, 2, step_of[counted], k[counted], self_kept[counted], rank[counted], kc.size
        )
        with_device = counted[own[counted] != 0]
        if len(with_device):
            _by_step_and_key(
                samples,
                first_sample,
                3,
                step_of[with_device],
                k[with_device],
                own_kept[with_device],
                rank[with_device],
                kc.size,
            )
            per_step = np.zeros(len(steps_at), np.int64)
            np.add.at(per_step, step_of[with_device], own_kept[with_device])
            for s, ns in zip(np.flatnonzero(per_step).tolist(), per_step[per_step != 0].tolist()):
                samples[first_sample + s][1] += ns
    rows_shown = np.flatnonzero(~hide) if track_rows else ()
    if len(rows_shown):
        np.add.at(totals.row_self, k[rows_shown], self_kept[rows_shown])
        first_rank = np.full(kc.size, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(first_rank, k[rows_shown], rank[rows_shown] + offset)
        new = (totals.row_first < 0) & (first_rank < np.iinfo(np.int64).max)
        totals.row_first[new] = first_rank[new]


def _first_of_each(ids: Any) -> tuple[Any, Any]:
    """``np.unique(ids, return_index=True)``, without its sort when the ids rise already (a timeline's, most often)."""
    import numpy as np

    if len(ids) < 2 or (ids[1:] > ids[:-1]).all():
        return ids, np.arange(len(ids))
    return np.unique(ids, return_index=True)


def _crosses_a_step(t: Any, e: Any, is_step: Any, asynchronous: Any) -> bool:
    """Whether a span crosses a step's edge (``_nesting._crossing``), or the steps overlap (left to the exact walk)."""
    import numpy as np

    starts, ends = t[is_step], e[is_step]
    by_start = np.lexsort((ends, starts))
    starts, ends = starts[by_start], ends[by_start]
    if len(ends) > 1 and (ends[1:] < ends[:-1]).any():
        return True
    spans = ~is_step & ~asynchronous
    ts, es = t[spans], e[spans]
    j = np.searchsorted(ends, ts, side="right")
    inside = j < len(ends)
    j = np.minimum(j, len(ends) - 1)
    s0, s1 = starts[j], ends[j]
    return bool((inside & (((ts < s0) & (s0 < es)) | ((s0 <= ts) & (es > s1)))).any())


def _add_async(sums: Any, keys: Any, durations: Any) -> None:
    """Async spans (a collective's work): a call and CPU total each, no self time, the communication figure."""
    import numpy as np

    if keys is None:
        return
    n_keys = int(keys.max()) + 1
    calls = np.bincount(keys, minlength=n_keys).astype(np.int64)
    total = np.zeros(n_keys, np.int64)
    np.add.at(total, keys, durations)
    _commit(sums.calls, calls)
    _commit(sums.cpu_total, total)
    sums.async_ns += int(durations.sum())
    sums.async_keys.update(np.flatnonzero(calls).tolist())


def _commit(target: list[int], values: Any) -> None:
    """Add the per-key int64 ``values`` into the per-key list of Python ints ``target``."""
    import numpy as np

    for key in np.flatnonzero(values).tolist():
        target[key] += int(values[key])


def _by_step_and_key(
    samples: list[Any], first: int, slot: int, step: Any, key: Any, value: Any, rank: Any, n_keys: int
) -> None:
    """Add ``value`` into ``samples[first + step][slot][key]``, keys entered in the order of ``rank`` within a step."""
    import numpy as np

    pair = step * n_keys + key
    by_rank = np.lexsort((rank, step))
    pair, value = pair[by_rank], value[by_rank]
    uniq, first_at, inverse = np.unique(pair, return_index=True, return_inverse=True)
    totals = np.zeros(len(uniq), np.int64)
    np.add.at(totals, inverse, value)
    entered = np.argsort(first_at, kind="stable")
    steps = (uniq[entered] // n_keys).tolist()
    keys = (uniq[entered] % n_keys).tolist()
    for s, kk, v in zip(steps, keys, totals[entered].tolist()):
        per_key = samples[first + s][slot]
        per_key[kk] = per_key.get(kk, 0) + v
