"""Time intervals for the rules: unions, windows, lengths, and the largest gaps between neighbours.

Every interval is ``(start, end)`` in integer nanoseconds. The rules measure shares of a
step with them (device busy, host in ops, collectives) on traces of millions of events,
so a window is cut by bisection and gaps are kept as they come, never by rescanning.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Union

_MANY = 4096
"""From this many intervals, ``_Spans.covering`` merges them with numpy."""


def _union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint intervals covering what ``intervals`` cover; touching ones are joined, empty ones kept."""
    spans = sorted(intervals)
    if len(spans) < 2:
        return spans
    merged: list[tuple[int, int]] = []
    it = iter(spans)
    lo, hi = next(it)
    for s, e in it:
        if s <= hi:
            if e > hi:
                hi = e
        else:
            merged.append((lo, hi))
            lo, hi = s, e
    merged.append((lo, hi))
    return merged


def _covered(spans: Sequence[tuple[int, int]]) -> int:
    """How long the union of ``spans`` is (ns)."""
    if len(spans) < 2:
        return spans[0][1] - spans[0][0] if spans else 0
    return sum(e - s for s, e in _union(spans))


def _clip(intervals: Sequence[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """The parts of sorted, disjoint ``intervals`` inside ``[lo, hi)``."""
    out = []
    for s, e in intervals:
        if s >= hi:
            break
        if e > lo:
            out.append((max(s, lo), min(e, hi)))
    return out


def _zip(starts: Any, ends: Any) -> Iterable[tuple[int, int]]:
    """Intervals of two int arrays."""
    return zip(starts.tolist(), ends.tolist())


def _length(spans: Iterable[tuple[int, int]]) -> int:
    return sum(e - s for s, e in spans)


def _subtract(spans: Sequence[tuple[int, int]], cut: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of sorted, disjoint ``spans`` outside sorted, disjoint ``cut``."""
    out: list[tuple[int, int]] = []
    j = 0
    for s, e in spans:
        while j < len(cut) and cut[j][1] <= s:
            j += 1
        k = j
        while k < len(cut) and cut[k][0] < e:
            if cut[k][0] > s:
                out.append((s, cut[k][0]))
            s = max(s, cut[k][1])
            k += 1
        if s < e:
            out.append((s, e))
    return out


def _shifts(groups: int, *times: Any) -> tuple[int, int]:
    """``(origin, width)``: shifted by ``group * width - origin``, each group's times lie in a band of their own.

    One pass over several groups' spans (every step's) then reads each group alone: a sort
    keeps the groups apart, and a running maximum never crosses into the next group.

    Args:
        groups: How many groups.
        times: Int arrays of every time that is shifted (starts, ends, windows...).

    Raises:
        OverflowError: The times are not int64, or too far apart for so many bands to fit in
            int64: the caller reads the groups one by one, on Python ints.
    """
    import numpy as np

    present = [t for t in times if len(t)]
    if any(t.dtype != np.int64 for t in present):
        raise OverflowError("times beyond int64")
    if not present:
        return 0, 1
    origin = min(int(t.min()) for t in present)
    width = max(int(t.max()) for t in present) - origin + 1
    # Shifted, and one width before or after: every time and every difference of two fits in int64.
    if width * (groups + 1) >= 1 << 62 or not -(1 << 62) < origin < origin + width < 1 << 62:
        raise OverflowError("times too far apart to shift by group")
    return origin, width


def _grouped_union(group: Any, starts: Any, ends: Any, shift: tuple[int, int]) -> tuple[Any, Any, Any]:
    """``_union`` of each group's spans at once: the merged spans' groups, starts and ends, by group, then start.

    Touching spans are joined and empty ones kept, as ``_union`` does; no span may end before
    it starts (``_union`` reads those its own way: callers take the list path for them).

    Args:
        group: Each span's group (ints from 0).
        starts: The spans' starts (int64).
        ends: Their ends (int64).
        shift: ``_shifts`` of the groups and of these times.
    """
    import numpy as np

    origin, width = shift
    base = group.astype(np.int64) * width - origin
    order = np.argsort(starts + base, kind="stable")  # by group, then start (the order on a tie joins them anyway)
    group, starts, base = group[order], starts[order], base[order]
    reach = np.maximum.accumulate(ends[order] + base) - base  # each group's furthest end so far
    new = np.ones(len(starts), bool)  # where a span starts past every span before it in its group
    new[1:] = (starts[1:] > reach[:-1]) | (group[1:] != group[:-1])
    return group[new], starts[new], reach[np.roll(new, -1)]


def _grouped_gaps(group: Any, starts: Any, ends: Any, lo: Any, hi: Any, shift: tuple[int, int]) -> tuple[Any, Any, Any]:
    """Each group's window less its spans, every group at once: ``_subtract([(lo[g], hi[g])], _union(its spans))``.

    A gap runs up to each merged span that reaches into the window (from the window's start
    or the span before), and from the last one to the window's end: an empty span inside
    the window splits a gap in two, as ``_subtract`` does.

    Args:
        group: Each span's group (ints from 0, below ``len(lo)``).
        starts: The spans' starts (int64).
        ends: Their ends (int64); no span ends before it starts.
        lo: Each group's window start (int64).
        hi: Its end (an empty or reversed window has no gap).
        shift: ``_shifts`` of the groups and of every time above.

    Returns:
        The gaps' groups, starts and ends, by group, then start.
    """
    import numpy as np

    g, s, e = _grouped_union(group, starts, ends, shift)
    inside = (e > lo[g]) & (s < hi[g])  # the merged spans that reach into their window: a run per group
    g, s, e = g[inside], s[inside], e[inside]
    first = np.ones(len(g), bool)
    first[1:] = g[1:] != g[:-1]
    since = np.where(first, lo[g], np.roll(e, 1))  # where the time before each span is free from
    gap = s > since
    # After the last span in the window (or from its start, where none reaches into it): the rest of it.
    last = np.full(len(lo), np.iinfo(np.int64).min)
    ends_run = np.roll(first, -1)  # each group's last span in the window
    last[g[ends_run]] = e[ends_run]
    tail_from = np.maximum(lo, last)
    tail = np.flatnonzero(tail_from < hi)
    out_group = np.concatenate((g[gap], tail))
    order = np.argsort(out_group, kind="stable")  # a group's gaps before its tail
    return (
        out_group[order],
        np.concatenate((since[gap], tail_from[tail]))[order],
        np.concatenate((s[gap], hi[tail]))[order],
    )


def _grouped_lengths(group: Any, starts: Any, ends: Any, groups: int, shift: tuple[int, int]) -> Any:
    """How long the union of each group's spans is (an int64 array, ``_length(_union(...))`` per group).

    Args as ``_grouped_union``'s; ``groups``: how many groups.
    """
    g, s, e = _grouped_union(group, starts, ends, shift)
    return _sums(g, e - s, groups)


def _sums(group: Any, values: Any, groups: int) -> Any:
    """The sum of each group's ``values`` (int64), ``group`` sorted: exact, where a float ``bincount`` rounds."""
    import numpy as np

    bounds = np.searchsorted(group, np.arange(groups + 1))
    total = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
    return total[bounds[1:]] - total[bounds[:-1]]


class _Neighbours:
    """The ops on either side of a gap in a step (the step's start or end at its edges, not ops).

    Before a gap: the top-level op that ends last at or before its start (the first such op
    in the step's order on a tie); after it: the one that starts first at or after its end
    (likewise). Found by bisection in the ops sorted by end and by start: a step of n ops has
    about n gaps, and a scan of every op per gap made a long step quadratic.
    """

    def __init__(self, starts: Any, ends: Any) -> None:
        """The step's top-level ops, in the step's order: their starts and ends (int arrays)."""
        import numpy as np

        n = len(starts)
        # By end, ties in reverse order of the step (a stable sort of the positions, last first)...
        self._by_end = n - 1 - np.argsort(ends[::-1], kind="stable")
        self._ends = ends[self._by_end]
        # ...and by start, ties in the step's order.
        self._by_start = np.argsort(starts, kind="stable")
        self._starts = starts[self._by_start]

    def beside(self, gaps: Sequence[tuple[int, int]]) -> tuple[Any, Any]:
        """The positions of the ops before and after each gap in the step's order (-1: the step's edge)."""
        import numpy as np

        lo, hi = (np.array(c, np.int64) for c in zip(*gaps)) if gaps else (np.empty(0, np.int64),) * 2
        return self.at(lo, hi)

    def at(self, lo: Any, hi: Any) -> tuple[Any, Any]:
        """``beside`` the gaps from ``lo`` to ``hi`` (int arrays)."""
        import numpy as np

        n = len(self._starts)
        k = np.searchsorted(self._ends, lo, "right") - 1
        j = np.searchsorted(self._starts, hi, "left")
        before = np.where(k >= 0, self._by_end[np.maximum(k, 0)], -1)
        after = np.where(j < n, self._by_start[np.minimum(j, n - 1)], -1)
        return before, after


def _grouped_beside(
    group: Any, starts: Any, ends: Any, gap_group: Any, lo: Any, hi: Any, shift: tuple[int, int]
) -> tuple[Any, Any]:
    """``_Neighbours(starts, ends).at(lo, hi)`` of each group at once (each step's top-level ops, and its gaps).

    Args:
        group: Each op's group (ints from 0), the ops of a group in its order.
        starts: The ops' starts (int64).
        ends: Their ends.
        gap_group: Each gap's group.
        lo: The gaps' starts.
        hi: Their ends.
        shift: ``_shifts`` of the groups and of every time above.

    Returns:
        The positions of the ops before and after each gap among all (-1: none in its group).
    """
    import numpy as np

    origin, width = shift
    base, gap_base = group * width - origin, gap_group * width - origin
    before, after = _Neighbours(starts + base, ends + base).at(lo + gap_base, hi + gap_base)
    # An op found in another group's band: none in the gap's own group.
    before = np.where((before >= 0) & (group[np.maximum(before, 0)] == gap_group), before, -1)
    after = np.where((after >= 0) & (group[np.maximum(after, 0)] == gap_group), after, -1)
    return before, after


class _Spans:
    """Sorted, disjoint intervals (a ``_union``), cut to a window by bisection rather than by a scan.

    Kept as two numpy arrays (starts, ends), not as tuples: a trace's device work is one
    interval per kernel. Times beyond int64 are kept as Python ints (an object array).
    """

    __slots__ = ("starts", "ends")

    def __init__(self, spans: Sequence[tuple[int, int]]) -> None:
        self.starts, self.ends = _array([s for s, _ in spans]), _array([e for _, e in spans])

    @classmethod
    def covering(cls, starts: Any, ends: Any) -> _Spans:
        """``_Spans(_union(zip(starts, ends)))``, merged by numpy when there are many (a trace's kernels).

        The vocabulary's ``merged_spans``, empty intervals kept as ``_union`` keeps them.
        """
        if len(starts) < _MANY:
            return cls(_union(zip(_ints(starts), _ints(ends))))
        from neuronprof import _vocabulary as vocab

        try:
            merged_starts, merged_ends = vocab.merged_spans(starts, ends, keep_empty=True)
        except OverflowError:  # times beyond int64: merged as Python ints
            return cls(_union(zip(_ints(starts), _ints(ends))))
        spans = cls([])
        spans.starts, spans.ends = merged_starts, merged_ends
        return spans

    def __bool__(self) -> bool:
        return bool(len(self.starts))

    def clip(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """``_clip(spans, lo, hi)``, found by bisection: the intervals that end after ``lo`` and start before ``hi``.

        Of sorted, disjoint intervals only the first of them can start before ``lo`` and
        only the last end after ``hi``: those two are cut to the window.
        """
        import numpy as np

        first, stop = int(np.searchsorted(self.ends, lo, "right")), int(np.searchsorted(self.starts, hi, "left"))
        out = list(zip(self.starts[first:stop].tolist(), self.ends[first:stop].tolist()))
        if out:
            s, e = out[0]
            if s < lo or e > hi:
                out[0] = (max(s, lo), min(e, hi))
            s, e = out[-1]
            if e > hi:
                out[-1] = (s, hi)
        return out

    def lengths_in(self, lo: Any, hi: Any) -> Any:
        """``_length(self.clip(lo[i], hi[i]))`` of every window at once (an int64 array; ``lo``, ``hi`` int64 arrays).

        What the spans between each window's first and last cover (a running sum), less what
        the first starts before the window and the last ends after it.

        Raises:
            OverflowError: The times are beyond int64 or too far apart to add up in it.
        """
        import numpy as np

        starts, ends = self.starts, self.ends
        _shifts(1, starts, ends, lo, hi)
        first, stop = np.searchsorted(ends, lo, "right"), np.searchsorted(starts, hi, "left")
        total = np.concatenate(([0], np.cumsum(ends - starts)))
        some = stop > first
        head, tail = np.minimum(first, len(starts) - 1), np.maximum(stop - 1, 0)
        cut = np.maximum(lo - starts[head], 0) + np.maximum(ends[tail] - hi, 0) if len(starts) else 0
        return np.where(some, total[stop] - total[first] - cut, 0)


def _positions(lo: Any, counts: Any) -> Any:
    """The positions ``lo[i]``, ``lo[i] + 1``... ``lo[i] + counts[i] - 1`` of every ``i``, in one int64 array."""
    import numpy as np

    counts = np.asarray(counts, np.int64)
    starts = np.cumsum(counts) - counts
    return np.repeat(np.asarray(lo, np.int64) - starts, counts) + np.arange(int(counts.sum()))


def _ints(values: Any) -> list[int]:
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _array(values: list[int]) -> Any:
    """Ints as an int64 array, or an object array of Python ints when one does not fit."""
    import numpy as np

    try:
        return np.array(values, np.int64)
    except OverflowError:
        return np.array(values, object)


Gap = tuple[int, str, str, str]
"""A gap as the findings show it: ``(length ns, name before, name after, where)``."""


class _LargestGaps:
    """The largest gap of each pair of neighbours, kept as the gaps come: what a finding lists.

    ``shown(k)`` gives what sorting every gap longest first (a stable sort) and keeping the first
    gap of each ``(before, after)`` pair gives, its first ``k``, without holding every gap: a
    long trace has one gap per op or kernel.
    """

    __slots__ = ("_best", "_count")

    def __init__(self) -> None:
        self._best: dict[tuple[str, str], tuple[int, int, Gap]] = {}
        self._count = 0

    def add(self, gap: int, before: str, after: str, where: str) -> None:
        key = (before, after)
        best = self._best.get(key)
        if best is None or gap > best[0]:  # on a tie the earlier gap stays, as a stable sort keeps it
            self._best[key] = (gap, self._count, (gap, before, after, where))
        self._count += 1

    def add_all(
        self, gaps: Any, before: Any, after: Any, names: Sequence[str], where: Union[str, Sequence[str]], at: Any = None
    ) -> None:
        """``add`` each gap in turn: ``gaps`` and the ``names`` indices ``before`` and ``after`` are int arrays.

        Each pair's largest gap (its first on a tie) is found with numpy first: a step has a gap
        per kernel, and few pairs of names. ``where``: where the gaps are; or, with ``at`` (an
        int array: each gap's index into ``where``), where each one is (every step's gaps at once).
        """
        n = len(gaps)
        if not n:
            return
        firsts = _firsts_of_pairs(gaps, before, after, len(names))
        base, best = self._count, self._best
        places: list[str] = [where] * len(firsts) if isinstance(where, str) else [where[i] for i in at[firsts].tolist()]
        for i, gap, b, a, place in zip(
            firsts.tolist(), gaps[firsts].tolist(), before[firsts].tolist(), after[firsts].tolist(), places
        ):
            key = (names[b], names[a])
            kept = best.get(key)
            # On a tie the earlier gap stays, as in ``add`` (two ids may name one pair: the order is positions').
            if kept is None or gap > kept[0] or (gap == kept[0] and base + i < kept[1]):
                best[key] = (gap, base + i, (gap, key[0], key[1], place))
        self._count += n

    def shown(self, k: int) -> list[Gap]:
        """The ``k`` largest, one per pair, longest first (the earlier on a tie)."""
        return [g for _, _, g in sorted(self._best.values(), key=lambda b: (-b[0], b[1]))[:k]]


def _firsts_of_pairs(gaps: Any, before: Any, after: Any, ids: int) -> Any:
    """The position of each ``(before, after)`` pair's largest gap (its first on a tie), by pair.

    ``before`` and ``after`` are ids below ``ids``. Each side's ids are renumbered to those
    present, so that the pairs index a table: the largest gap of each is then a running
    maximum over the gaps, no sort (a trace's gaps run to hundreds of thousands, its pairs to
    tens); a sort by pair, then by gap, where the pairs are too many for a table.
    """
    import numpy as np

    n = len(gaps)
    dense = []
    for side in (before, after):
        present = np.zeros(ids + 1, bool)
        present[side] = True
        rank = np.cumsum(present) - 1
        dense.append((rank[side], int(rank[-1]) + 1))
    (b, nb), (a, na) = dense
    if gaps.dtype != np.int64 or nb * na > 4 * n + 4096:
        pair = before.astype(np.int64) * (ids + 1) + after
        order = np.lexsort((np.arange(n), -gaps, pair))
        return order[np.concatenate(([True], pair[order][1:] != pair[order][:-1]))]
    pair = b * na + a  # in the order of (before, after)
    best = np.full(nb * na, np.iinfo(np.int64).min)
    np.maximum.at(best, pair, gaps)
    top = np.flatnonzero(gaps == best[pair])
    first = np.full(nb * na, n)
    np.minimum.at(first, pair[top], top)
    return first[first < n]
