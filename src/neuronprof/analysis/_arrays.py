"""Array idioms the trace reader, the findings and the report share."""

from __future__ import annotations

from typing import Any

__all__ = ["present"]


def present(ids: Any, n: int = 0) -> list[int]:
    """The distinct values of ``ids`` (non-negative ints, shape ``(k,)``), rising.

    A count per value (``np.bincount``) rather than ``np.unique``: no sort of ``ids``, which
    are often events by the million over a few thousand keys or threads, and no import of
    ``numpy.ma`` (about 10 ms), which a plain ``np.unique`` makes at its first call.

    Args:
        ids: The values, each at least 0; an array of any integer type.
        n: The number of values possible, when known (``0..n-1``): the count's length
            then, so a value past it is counted too.

    Raises:
        ValueError: A value is negative (``np.bincount``'s own error).
    """
    import numpy as np

    found: list[int] = np.flatnonzero(np.bincount(ids, minlength=n)).tolist()
    return found
