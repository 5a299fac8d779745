"""The nesting of one thread's spans on arrays: each event's depth and parent, found at once.

Sorted by start (the longer first), an event's depth is the number of earlier events
still open at its start, and its parent is the last earlier event one level up, when
every span lies within its parent (a clean nesting). The trace reader's nesting walk
(``walk_columns``), the report's timeline and the findings' call trees read it.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["_by_level", "_nesting"]


def _nesting(t: Any, d: Any, e: Any) -> Optional[tuple[Any, Any]]:
    """Each event's depth and parent (-1 for none), when every event lies within its parent; else None.

    The depth is the number of earlier events still open at an event's start (a
    zero-length event at the same start that sorts after it is not one); the parent
    is the last earlier event one level up.
    """
    import numpy as np

    n = len(t)
    at = np.arange(n)
    depth = at - np.searchsorted(
        np.sort(e, kind="stable"), t, side="right"
    )  # ends come in long rising runs: a timsort merges them
    zero = d == 0
    if zero.any():
        zt = t[zero]
        zeros_here = np.searchsorted(zt, t, side="right") - np.searchsorted(zt, t, side="left")
        block_end = np.searchsorted(t, t, side="right")
        depth += block_end - np.maximum(at, block_end - zeros_here)
        del zt, zeros_here, block_end
    del zero
    if depth.min() < 0:
        return None
    parent = np.full(n, -1, np.int32)
    nested = depth > 0
    if nested.any():
        cand, found = _one_level_up(depth)
        within = np.maximum(cand, 0)
        if not (found & (e[within] > t) & (e <= e[within]))[nested].all():
            return None
        parent[nested] = cand[nested]
    return depth.astype(np.int32), parent


def _one_level_up(depth: Any) -> tuple[Any, Any]:
    """Each event's last earlier event one level up (-1: none), and whether there is one.

    Up to ``_LEVELS_BY_PASS`` levels, one pass over the events per level; a deeper tree (of
    many Python frames) is sorted by level and searched. On a million events the whole
    ``_nesting`` took 0.05 s against 0.08 s one level deep, 0.07 s against 0.09 s four levels
    deep; from about six levels the passes cost as much as the sort.
    """
    import numpy as np

    n, levels = len(depth), int(depth.max())
    at = np.arange(n)
    if levels <= _LEVELS_BY_PASS:
        cand = np.full(n, -1, np.int64)
        for level in range(levels):
            below = depth == level + 1
            cand[below] = np.maximum.accumulate(np.where(depth == level, at, -1))[below]
        return cand, cand >= 0
    by_level = _by_level(depth)
    q = np.searchsorted(depth[by_level] * n + by_level, (depth - 1) * n + at) - 1
    cand = by_level[np.maximum(q, 0)]
    return cand, (q >= 0) & (depth[cand] == depth - 1)


_LEVELS_BY_PASS = 4


def _by_level(depth: Any) -> Any:
    """The events in order of depth, and of position within a depth (a stable sort: radix for small depths)."""
    import numpy as np

    if int(depth.max()) < 1 << 15:
        return np.argsort(depth.astype(np.int16), kind="stable")
    return np.argsort(depth, kind="stable")
