"""The cyclic garbage collector paused while a reader makes many objects, none of them garbage yet."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


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
