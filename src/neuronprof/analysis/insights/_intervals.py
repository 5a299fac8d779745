"""Time intervals for the rules: unions, windows, lengths, and the largest gaps between neighbours.

Every interval is ``(start, end)`` in integer nanoseconds. The rules measure shares of a
step with them (device busy, host in ops, collectives) on traces of millions of events,
so a window is cut by bisection and gaps are kept as they come, never by rescanning.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

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

    def add_all(self, gaps: Any, before: Any, after: Any, names: Sequence[str], where: str) -> None:
        """``add`` each gap in turn: ``gaps`` and the ``names`` indices ``before`` and ``after`` are int arrays.

        Each pair's largest gap (its first on a tie) is found with numpy first: a step has a gap
        per kernel, and few pairs of names.
        """
        import numpy as np

        n = len(gaps)
        if not n:
            return
        pair = before.astype(np.int64) * (len(names) + 1) + after
        order = np.lexsort((np.arange(n), -gaps, pair))
        firsts = order[np.concatenate(([True], pair[order][1:] != pair[order][:-1]))]
        base, best = self._count, self._best
        for at, gap, b, a in zip(
            firsts.tolist(), gaps[firsts].tolist(), before[firsts].tolist(), after[firsts].tolist()
        ):
            key = (names[b], names[a])
            kept = best.get(key)
            # On a tie the earlier gap stays, as in ``add`` (two ids may name one pair: the order is positions').
            if kept is None or gap > kept[0] or (gap == kept[0] and base + at < kept[1]):
                best[key] = (gap, base + at, (gap, key[0], key[1], where))
        self._count += n

    def shown(self, k: int) -> list[Gap]:
        """The ``k`` largest, one per pair, longest first (the earlier on a tie)."""
        return [g for _, _, g in sorted(self._best.values(), key=lambda b: (-b[0], b[1]))[:k]]
