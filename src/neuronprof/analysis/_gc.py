"""The memory of a large read: the cyclic garbage collector paused while a reader makes many objects,
none of them garbage yet, and the memory freed between phases handed back to the system."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

__all__ = ["TRIM_FROM_EVENTS", "collector_paused", "return_freed_memory"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block; restored whatever happens.

    Reading a large trace makes millions of short-lived objects and no reference cycles,
    while what it keeps grows: each of the collector's passes would walk it all again.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


TRIM_FROM_EVENTS = 100_000
"""Events (about a 30 MB trace's) below which ``return_freed_memory(events)`` does nothing."""


def return_freed_memory(events: Optional[int] = None) -> None:
    """Give the memory freed so far back to the system (glibc's ``malloc_trim``), where there is glibc.

    A large trace is read and analysed in phases (decoding piece by piece, tables into
    columns, the report's panes before its timeline), each freeing arrays and objects
    that lie between others still held. glibc keeps the freed pages for later
    allocations, but numpy's next arrays seldom fit in them: without this, each phase's
    memory adds to the previous ones' instead of taking its place. Pages given back are
    paged in again when used (a page fault each), so callers do not call this between
    phases whose arrays are of the sizes just freed (one rank's call trees after another's).
    A call costs well under a millisecond on a heap of few free blocks, and tens of
    milliseconds on one of hundreds of thousands; a no-op elsewhere (macOS, Windows, musl).

    Args:
        events: How many events the phase read: below ``TRIM_FROM_EVENTS`` nothing is done
            (little memory is at stake). ``None``: always.
    """
    if events is not None and events < TRIM_FROM_EVENTS:
        return
    import ctypes

    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # the C library the interpreter runs on
    except (OSError, TypeError):  # no such handle on this platform
        return
    if trim is not None:
        trim(0)
