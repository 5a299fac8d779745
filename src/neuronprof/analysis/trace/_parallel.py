"""Reading a folder's trace files side by side: in worker processes, or on a Dask cluster.

Each file is read by one function wherever it runs, [`read_file`][neuronprof.analysis.trace._parallel.read_file]:
with keys of its own, it reads the file's events and sums them (the nesting walk,
most of the work, is done in the worker too). What comes back is that file's
event table (its columns pickle as raw bytes, 36 bytes an event: 1.5 MB for a
19 MB kineto trace, pickled in milliseconds) and its per-key sums; the findings
read the events, so the table comes back whole rather than the sums alone. The
parent gives every file's keys one shared set, in file order (``shared_keys``),
so the result is what one process reading the files one after another gets;
``jobs=1`` is that process, through the same function and the same merge.

Where: the standard library's ``ProcessPoolExecutor`` on this machine, or a Dask
cluster's ``Client.get_executor()``: both are a ``concurrent.futures.Executor``, so
one loop (``read_each``) runs them and no scheduler of our own is written (work
sharing, a worker that dies, cancelling the rest are theirs, tried by many).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Optional, Union

from neuronprof._executors import check_jobs, cores, dask_address
from neuronprof.analysis.trace import _reader_columns
from neuronprof.analysis.trace._aggregate import sum_events
from neuronprof.analysis.trace._events import EventTable
from neuronprof.analysis.trace._files import read_each
from neuronprof.analysis.trace._reader import read_events
from neuronprof.analysis.trace._sums import EventKeys, _Sums, shared_keys

if TYPE_CHECKING:  # imported on use: logging and multiprocessing cost a command's start-up
    from concurrent.futures import Executor

__all__ = ["SMALL_FOLDER", "ExecutorLike", "Readers", "merge_reads", "read_file", "readers_for", "reading"]

ExecutorLike = Union[str, "Executor"]
"""Where to read a folder's files: ``"dask://HOST:PORT"`` (a running Dask scheduler) or any
``concurrent.futures.Executor`` (e.g. a Dask ``Client.get_executor()``)."""

FileRead = tuple[EventTable, _Sums]
"""One file read: its event table and per-key sums, under keys of its own."""

SMALL_FOLDER = 1 << 20
"""Bytes on disk under which a folder is read here unless ``jobs`` is given: starting
workers (tens of ms where they fork, seconds where they spawn) would cost more than
reading the files (1 MiB of JSON reads in a few tens of ms)."""

_CURRENT: ContextVar[Optional[Readers]] = ContextVar("neuronprof_readers", default=None)


def _is_executor(value: object) -> bool:
    from concurrent.futures import Executor

    return isinstance(value, Executor)


def _total_size(files: Sequence[str]) -> int:
    total = 0
    for f in files:
        with contextlib.suppress(OSError):  # a file that cannot be read is named when it is read
            total += os.path.getsize(f)
    return total


def read_file(path: str) -> FileRead:
    """Read one trace file into its event table and per-key sums, with keys of its own (what a worker runs).

    Raises:
        TraceError: The file is missing, empty, or not a readable trace.
    """
    table = read_events(path, EventKeys())
    return table, sum_events(table)


def merge_reads(reads: Sequence[FileRead]) -> tuple[tuple[EventTable, ...], list[_Sums]]:
    """The files' tables and sums under one shared set of keys, in file order (as one process reading them gives)."""
    keys, maps = shared_keys([table.keys for table, _ in reads])
    tables, sums = [], []
    for (table, file_sums), new in zip(reads, maps):
        if table.keys is not keys:
            file_sums.rekey(new, len(keys.keys))
        tables.append(table.rekeyed(keys, new))
        sums.append(file_sums)
    return tuple(tables), sums


class Readers:
    """Where the files of a folder are read: here, in worker processes, or on a Dask cluster.

    Args:
        jobs: Worker processes (``None``: one per core; ``1``: read here, one file after another).
        executor: ``"dask://HOST:PORT"``, or an executor of your own; excludes ``jobs``.

    Raises:
        TypeError: ``jobs`` is not a whole number, or ``executor`` neither a string nor an executor.
        ValueError: ``jobs`` is below 1, ``executor`` is not ``dask://HOST:PORT``, or both are given.
    """

    def __init__(self, jobs: Optional[int] = None, executor: Optional[ExecutorLike] = None) -> None:
        self.jobs = check_jobs(jobs)
        self.address: Optional[str] = None
        self.given: Optional[Executor] = None
        if isinstance(executor, str):
            self.address = dask_address(executor)
        elif executor is not None and _is_executor(executor):
            self.given = executor
        elif executor is not None:
            raise TypeError(
                f"executor must be 'dask://HOST:PORT' or a concurrent.futures.Executor, got {type(executor).__name__}"
            )
        if executor is not None and jobs is not None:
            raise ValueError("pass jobs or executor, not both: the executor's workers read the files")
        self.shown = executor if isinstance(executor, str) else None
        self.client: Any = None
        self.pool: Optional[Executor] = None
        self.workers = 0

    def open(self) -> None:
        """Connect to the Dask scheduler, if one was named: before any file is read.

        Raises:
            ImportError: Dask's ``distributed`` is not installed (the ``dask`` extra).
            ConnectionError: The scheduler cannot be reached (within Dask's
                ``distributed.comm.timeouts.connect``, 30 s unless set).
        """
        if self.address is None or self.client is not None:
            return
        try:
            from distributed import Client
        except ImportError as exc:
            raise ImportError(
                f"executor {self.shown} needs Dask's distributed scheduler, an optional extra: "
                "pip install 'neuronprof[dask]'"
            ) from exc
        try:
            self.client = Client(self.address, set_as_default=False)
        except OSError as exc:  # Dask's own "Timed out trying to connect to ..." (TimeoutError is one)
            raise ConnectionError(
                f"cannot reach the Dask scheduler at {self.shown}: {exc}; start one (`dask scheduler`) "
                "or check the address"
            ) from None
        # pure=False: a file read twice may have changed; never take an earlier result for it.
        self.pool = self.client.get_executor(pure=False)

    def read(self, files: Sequence[str]) -> tuple[list[tuple[str, FileRead]], str]:
        """Read ``files`` with ``read_file`` (see ``read_each``: files left out, the note naming them).

        Raises:
            TraceError: As ``read_each``.
            ValueError: ``jobs`` above 1 in a daemon process (a worker of a pool), which cannot start workers.
            ChildProcessError: A worker process stopped abruptly (killed, out of memory).
        """
        executor = self._executor(files)
        if executor is None:
            return read_each(files, read_file)
        import multiprocessing
        from concurrent.futures import BrokenExecutor

        try:
            return read_each(files, read_file, executor)
        except BrokenExecutor as exc:
            if self.client is None:
                self.close()  # a broken pool takes no more work: a later read starts another
            spawned = ""
            if multiprocessing.get_start_method() != "fork":
                spawned = (
                    "; here each worker starts a fresh interpreter that imports the main script, so call "
                    'from under `if __name__ == "__main__":`'
                )
            raise ChildProcessError(
                f"a worker process reading the traces stopped abruptly ({exc}); it may have run out of memory: "
                f"read with fewer jobs (--jobs N, jobs=N), or with 1 to read in this process{spawned}"
            ) from None

    def _executor(self, files: Sequence[str]) -> Optional[Executor]:
        if len(files) < 2:
            return None
        if self.given is not None:
            return self.given
        if self.client is not None:
            return self.pool
        workers = min(self.jobs or cores(), len(files))
        if workers < 2:
            return None
        import multiprocessing

        if multiprocessing.current_process().daemon:
            # A pool's or a cluster's worker may not start processes of its own.
            if self.jobs is None:
                return None
            raise ValueError(
                f"jobs={self.jobs}: this process is a worker of a pool (a daemon process), which cannot start "
                "worker processes of its own; pass jobs=1"
            )
        if self.jobs is None and _total_size(files) < SMALL_FOLDER:
            return None
        if self.pool is None or self.workers < workers:  # started for a folder of fewer files
            from concurrent.futures import ProcessPoolExecutor

            self.close()
            if multiprocessing.get_context().get_start_method() == "fork" and any(
                map(_reader_columns.large_file, files)
            ):
                # The workers read a large file into columns with numpy, as this process merges them: imported here,
                # before the fork, numpy is imported once (about 0.1 s of CPU) rather than once more in each worker.
                import numpy  # noqa: F401
            self.pool, self.workers = ProcessPoolExecutor(workers), workers
        return self.pool

    def close(self) -> None:
        """Stop the worker processes started here, or close the connection to the cluster."""
        pool, self.pool = self.pool, None
        if self.client is not None:
            client, self.client = self.client, None
            client.close()
        elif pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def reading(jobs: Optional[int] = None, executor: Optional[ExecutorLike] = None) -> Iterator[Readers]:
    """Read the folders loaded inside the block with ``jobs`` worker processes, or on ``executor``.

    One pool (or one connection) serves every load in the block (``neuronprof diff``
    reads two folders); a Dask scheduler is reached before the block starts.

    Raises:
        As ``Readers`` and ``Readers.open``.
    """
    readers = Readers(jobs, executor)
    try:
        readers.open()
        token = _CURRENT.set(readers)
        try:
            yield readers
        finally:
            _CURRENT.reset(token)
    finally:
        readers.close()


@contextmanager
def readers_for(jobs: Optional[int], executor: Optional[ExecutorLike]) -> Iterator[Readers]:
    """The readers of one load: those of an enclosing ``reading`` block unless ``jobs`` or ``executor`` is given."""
    current = _CURRENT.get()
    if current is not None and jobs is None and executor is None:
        yield current
        return
    with reading(jobs, executor) as readers:
        yield readers
