"""Reading the files of a folder: the readable ones are read, every other one is named with its reason.

A 200-rank folder with a few broken files is still a profile of the other
ranks: each reader of a folder (the tables, the findings) goes through
[`read_each`][neuronprof.analysis.trace._files.read_each], which leaves out the
files that cannot be read, says which and why in a note, and records them for
[`collect_unreadable`][neuronprof.analysis.trace.collect_unreadable] (how the
CLI tells a partial result by its exit status). A single file that cannot be
read is still an error, as is a folder none of whose files can be.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Optional, TypeVar

from neuronprof.analysis.errors import TraceError

if TYPE_CHECKING:
    from concurrent.futures import Executor

__all__ = ["collect_unreadable", "empty_trace", "read_each"]

T = TypeVar("T")

_UNREADABLE: ContextVar[Optional[dict[str, str]]] = ContextVar("neuronprof_unreadable", default=None)


@contextmanager
def collect_unreadable() -> Iterator[dict[str, str]]:
    """Collect the files left out as unreadable by every folder read inside the block.

    Yields:
        A dict, filled as the block runs: each left-out file's path and the reason it could not be read.
    """
    found: dict[str, str] = {}
    token = _UNREADABLE.set(found)
    try:
        yield found
    finally:
        _UNREADABLE.reset(token)


def empty_trace(path: str) -> TraceError:
    """The error for a trace file that holds no events at all (``{"traceEvents": []}``)."""
    return TraceError(f"{path}: empty trace: it holds no events (the profiler recorded nothing)")


def _reason(path: str, exc: TraceError) -> str:
    text = str(exc)
    return text[len(path) + 2 :] if text.startswith(f"{path}: ") else text


def read_each(
    files: Sequence[str], read: Callable[[str], T], executor: Optional[Executor] = None
) -> tuple[list[tuple[str, T]], str]:
    """Read every file with ``read``; leave out those that raise ``TraceError`` when others can be read.

    Args:
        files: The trace files of a source (one file, or a folder's).
        read: Reads one file (a module-level function when ``executor`` is given: it is pickled).
        executor: Where to run ``read`` on several files, side by side (worker processes,
            a Dask cluster); ``None`` reads them here, one after another. A single file is
            always read here. Either way the outcome is the same, in file order.

    Returns:
        Each file read with what ``read`` returned, in order, and a note naming every
        file left out and why (``""`` when none was).

    Raises:
        TraceError: A single file cannot be read (its own error), or none of several can
            (naming each, with its reason).
    """
    if len(files) == 1:
        return [(files[0], read(files[0]))], ""
    outcomes: Iterable[Callable[[], T]]
    if executor is None:
        outcomes = (functools.partial(read, f) for f in files)
    else:
        futures = [executor.submit(read, f) for f in files]
        outcomes = (future.result for future in futures)
    done: list[tuple[str, T]] = []
    bad: list[tuple[str, str]] = []
    try:
        for f, outcome in zip(files, outcomes):
            try:
                done.append((f, outcome()))
            except TraceError as exc:
                bad.append((f, _reason(f, exc)))
    finally:
        if executor is not None:
            for future in futures:  # after an error other than an unreadable file: nothing more to read
                future.cancel()
    listed = "; ".join(f"{os.path.basename(f)} ({why})" for f, why in bad)
    if not done:
        raise TraceError(f"none of the {len(files)} trace files can be read: {listed}")
    record = _UNREADABLE.get()
    if record is not None:
        for f, why in bad:
            record.setdefault(f, why)
    if not bad:
        return done, ""
    return done, f"left out {len(bad)} of {len(files)} trace files that cannot be read: {listed}"
