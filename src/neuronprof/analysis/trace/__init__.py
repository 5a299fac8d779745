"""Read Chrome/Perfetto trace files into per-operator aggregates, without torch.

A trace captured on a Trainium, TPU or GPU host is read here on any machine
with Python: [`load_trace`][neuronprof.analysis.load_trace] streams the events
(bounded memory, see ``_typed_reader``), rebuilds the call nesting per thread to
get self times, attributes device kernels to the op that launched them, and
returns a [`Trace`][neuronprof.analysis.Trace]. ``Trace.table()`` turns that into
the same [`Table`][neuronprof.Table] that ``session.table()`` returns.

The package's modules, each one concern: ``_rules`` (numbers, ids and producer
rules), ``_model`` (``Trace``, ``TraceOp``), ``_sums`` (per-key sums and how they
become a ``Trace``), ``_aggregate`` (the one aggregation, shared with the live
session), ``_reader`` (one trace file), ``_parallel`` (a folder's files side by
side, in worker processes or on a Dask cluster); this module finds the files and loads them.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional, Union

from neuronprof._deprecation import renamed_keyword
from neuronprof._vocabulary import event_kind
from neuronprof.analysis._eventstream import missing_reason
from neuronprof.analysis._gc import return_freed_memory
from neuronprof.analysis.errors import TraceError
from neuronprof.analysis.trace._aggregate import EventAggregator, encoder, sum_events
from neuronprof.analysis.trace._events import EventTable, MemoryColumns, step_windows
from neuronprof.analysis.trace._files import collect_unreadable
from neuronprof.analysis.trace._model import StepSample, Trace, TraceOp, check_table_options
from neuronprof.analysis.trace._parallel import ExecutorLike, Readers, merge_reads, readers_for, reading
from neuronprof.analysis.trace._reader import read_events
from neuronprof.analysis.trace._rules import is_container_lane, process_roles
from neuronprof.analysis.trace._sums import EventKeys, _build, _Sums
from neuronprof.typing import GroupBy, SortKey

if TYPE_CHECKING:  # the result models are imported when a table is made, not to read a trace
    from neuronprof.model import RankTable, Table

__all__ = [
    "EventAggregator",
    "EventKeys",
    "EventTable",
    "ExecutorLike",
    "GroupBy",
    "MemoryColumns",
    "StepSample",
    "Trace",
    "TraceOp",
    "TraceSource",
    "collect_unreadable",
    "encoder",
    "event_kind",
    "find_trace_files",
    "is_container_lane",
    "load_trace",
    "process_roles",
    "read_events",
    "reading",
    "summarize",
    "step_windows",
    "sum_events",
    "summarize_ranks",
    "trace_of",
]

TraceSource = Union[str, "os.PathLike[str]", "Trace"]
"""A trace file, a folder of traces, or a [`Trace`][neuronprof.analysis.Trace] already loaded."""


# -- loading ------------------------------------------------------------------------


def find_trace_files(path: Union[str, os.PathLike[str]]) -> list[str]:
    """Return the trace files at ``path``: the file itself, or the traces in a folder.

    A folder may be a TensorBoard log folder (``*.pt.trace.json[.gz]``, as
    ``tensorboard_trace_handler`` writes), an HTA-style multi-rank folder
    (``rank-0.json.gz``, ``rank-1.json.gz``...), a folder of neuronprof's own
    exports (``neuronprof_<backend>_....json``), a TorchNeuron output folder
    (``<host>_pid_<pid>/<timestamp>/trace.json``), or any folder holding such
    files a few levels down.

    Args:
        path: A trace file (``.json``, ``.json.gz``) or a folder to search.

    Raises:
        TraceError: ``path`` does not exist, or the folder holds no trace.
    """
    p = os.fspath(path)
    if not os.path.exists(p):
        raise TraceError(f"{p}: {missing_reason(p)}")
    if not os.path.isdir(p):
        return [p]
    patterns = (
        ("*.pt.trace.json", "*.pt.trace.json.gz"),
        ("rank-*.json", "rank-*.json.gz", "rank_*.json", "rank_*.json.gz"),
        ("neuronprof_*.json", "neuronprof_*.json.gz"),
        ("trace.json", "trace.json.gz"),
        ("*_pid_*/*/trace.json", "*_pid_*/*/trace.json.gz", "*_pid_*/trace.json", "*_pid_*/trace.json.gz"),
        (
            "**/*.pt.trace.json",
            "**/*.pt.trace.json.gz",
            "**/rank-*.json",
            "**/rank-*.json.gz",
            "**/rank_*.json",
            "**/rank_*.json.gz",
            "**/neuronprof_*.json",
            "**/neuronprof_*.json.gz",
            "**/trace.json",
            "**/trace.json.gz",
        ),
    )
    for group in patterns:
        found: set[str] = set()
        for pattern in group:
            found.update(glob.glob(os.path.join(glob.escape(p), pattern), recursive=True))
        # A link to nowhere (or a loop) named like a trace is one of them, and is named as unreadable.
        files = sorted(f for f in found if os.path.isfile(f) or (os.path.islink(f) and not os.path.exists(f)))
        if files:
            _refuse_twins(files)
            return files
    raise TraceError(
        f"{p}: no trace files in this folder (looked for *.pt.trace.json[.gz], rank-N.json[.gz], "
        "neuronprof_*.json, trace.json and <host>_pid_<pid>/<timestamp>/trace.json)"
    )


def _refuse_twins(files: Sequence[str]) -> None:
    """Refuse ``x.json`` beside ``x.json.gz``: most likely one trace twice, which would be summed.

    Raises:
        TraceError: Naming both files.
    """
    present = set(files)
    for f in files:
        if f.endswith(".json") and f + ".gz" in present:
            raise TraceError(
                f"{f} and {f}.gz are both in the folder: the same trace twice? Keep one of them "
                "(otherwise both would be summed), or pass the file itself"
            )


def _stray_files(folder: str, files: Sequence[str]) -> list[str]:
    """JSON traces directly in ``folder`` that ``find_trace_files`` did not pick."""
    picked = {os.path.abspath(f) for f in files}
    out = []
    for pattern in ("*.json", "*.json.gz"):
        for f in glob.glob(os.path.join(glob.escape(folder), pattern)):
            if os.path.isfile(f) and os.path.abspath(f) not in picked:
                out.append(os.path.basename(f))
    return sorted(out)


def load_trace(source: TraceSource, *, jobs: Optional[int] = None, executor: Optional[ExecutorLike] = None) -> Trace:
    """Read a trace file or folder into a [`Trace`][neuronprof.analysis.Trace].

    Accepts Chrome/Perfetto JSON traces (``.json`` or ``.json.gz``) such as
    torch.profiler's ``export_chrome_trace`` writes, TensorBoard trace folders
    and TorchNeuron output folders; several files are summed. Events are
    streamed, never loaded whole, and kept in compact columns of machine numbers (a
    few tens of bytes an event: [`Trace.event_tables`][neuronprof.analysis.Trace],
    what the findings read).

    The files of a folder are read side by side, one worker process per core
    (each reads one file at a time, in bounded memory), and merged in file order:
    the result is the one a single process gives. A folder of under 1 MiB, or a
    single file, is read in this process. On platforms that start workers by
    spawning a fresh interpreter (macOS, Windows), call this from a script's
    ``if __name__ == "__main__":`` block, or pass ``jobs=1``.

    Args:
        source: A path, or a ``Trace`` (returned unchanged).
        jobs: Worker processes for a folder's files (default: one per core, at most
            one per file, for a folder of 1 MiB or more); ``1`` reads them here, one
            after another.
        executor: Read the files on a Dask cluster instead: ``"dask://HOST:PORT"``
            (a running scheduler; needs the ``dask`` extra, and the files at the same
            path on its workers), or any ``concurrent.futures.Executor`` (e.g. a Dask
            ``Client.get_executor()``). Excludes ``jobs``.

    Raises:
        TraceError: The path is missing, or a file is not a readable trace.
        TypeError: ``jobs`` is not a whole number, or ``executor`` not a string or an executor.
        ValueError: ``jobs`` below 1, an executor not written ``dask://HOST:PORT``, or both given.
        ImportError: A ``dask://`` executor without Dask's ``distributed`` installed.
        ConnectionError: The Dask scheduler cannot be reached.
        ChildProcessError: A worker process stopped abruptly (e.g. killed for memory).
    """
    if isinstance(source, Trace):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"load_trace() takes a path or a Trace, got {type(source).__name__}")
    with readers_for(jobs, executor) as readers:  # checks jobs and executor before any file is read
        return _load(source, readers)


def _load(source: Union[str, os.PathLike[str]], readers: Readers) -> Trace:
    files = find_trace_files(source)
    folder_notes: list[str] = []
    if os.path.isdir(source):
        stray = _stray_files(os.fspath(source), files)
        if stray:
            shown = ", ".join(stray[:5]) + (f" and {len(stray) - 5} more" if len(stray) > 5 else "")
            folder_notes.append(
                f"left out {len(stray)} other JSON file(s) in the folder (not named like the traces read): {shown}"
            )
    read, unreadable = readers.read(files)
    return_freed_memory(sum(table.events for _, (table, _) in read))  # the decoded pieces, before the tables merge
    if unreadable:
        files = [f for f, _ in read]
        folder_notes.insert(0, unreadable)
    tables, sums = merge_reads([each for _, each in read])
    return _traces(tables, files, folder_notes, sums=sums)


def trace_of(tables: Sequence[EventTable], *, earlier: Optional[_Sums] = None) -> Trace:
    """Sum event tables (one per file or live cycle, sharing their keys) into a Trace, one per rank when several.

    Args:
        tables: The tables, in order; each is summed on its own, then the sums are added.
        earlier: Sums of earlier tables that are no longer held (a session's dropped
            cycles), counted first.
    """
    # A live session's tables are no files: no "summed over N files" for its cycles.
    return _traces(tuple(tables), [t.source for t in tables if t.file_notes], [], earlier=earlier)


def _traces(
    tables: tuple[EventTable, ...],
    files: Sequence[str],
    folder_notes: list[str],
    *,
    earlier: Optional[_Sums] = None,
    sums: Optional[Sequence[_Sums]] = None,
) -> Trace:
    """Sum the tables (or take their ``sums``, made where they were read) into a Trace."""
    if not tables:
        raise ValueError("no event tables to sum")
    keys = tables[0].keys
    first = 0 if earlier is None else 1
    per_file = ([] if earlier is None else [earlier]) + (list(sums) if sums else [sum_events(t) for t in tables])
    ranks: dict[int, list[int]] = {}
    for i, s in enumerate(per_file):
        if s.rank is not None:
            ranks.setdefault(s.rank, []).append(i)
    total = _Sums()
    for s in per_file:
        total.add(s)
    if len(ranks) < 2:
        rank = next(iter(ranks)) if len(ranks) == 1 and all(s.rank is not None for s in per_file) else None
        one = _build(total, keys, files, rank=rank, tables=tables)
        return dataclasses.replace(one, notes=(*one.notes, *folder_notes)) if folder_notes else one
    # Several ranks: one Trace each (files of the same rank summed), and their sum.
    world = max(ranks) + 1
    per_rank: list[Trace] = []
    for r in range(world):
        group = _Sums()
        for i in ranks.get(r, ()):
            group.add(per_file[i])
        mine = tuple(tables[i - first] for i in ranks.get(r, ()) if i >= first)
        per_rank.append(_build(group, keys, group.files, rank=r, tables=mine))
    merged = _build(total, keys, files, tables=tables)
    missing = [r for r in range(world) if r not in ranks]
    if missing:
        which = ", ".join(map(str, missing))
        gap = (
            f"rank {which} has no trace" if len(missing) == 1 else f"ranks {which} have no trace"
        ) + f" (of ranks 0 to {world - 1}; their columns are empty)"
        folder_notes.append(gap)
        per_rank = [
            dataclasses.replace(t, notes=(*t.notes, f"rank {t.rank} has no trace")) if t.rank in missing else t
            for t in per_rank
        ]
    note = f"summed over {len(ranks)} ranks; `neuronprof summarize` shows them side by side"
    no_rank = sum(1 for s in per_file if s.rank is None)
    if no_rank:
        note += f" ({no_rank} file(s) name no rank and are in this sum only)"
    return dataclasses.replace(merged, ranks=tuple(per_rank), notes=(*merged.notes, note, *folder_notes))


@renamed_keyword("limit", "row_limit")
def summarize(
    source: TraceSource,
    *,
    sort_by: SortKey = "device",
    row_limit: Optional[int] = None,
    device_only: bool = False,
    group_by: GroupBy = "name",
    jobs: Optional[int] = None,
    executor: Optional[ExecutorLike] = None,
) -> Table:
    """Return a trace's per-operator [`Table`][neuronprof.Table] (what ``neuronprof summarize`` prints).

    Args:
        source: A trace file or folder, or a loaded [`Trace`][neuronprof.analysis.Trace].
        sort_by: A [`SortKey`][neuronprof.typing.SortKey] (default: self device time).
        row_limit: Keep at most this many rows.
        device_only: Keep only rows with device time.
        group_by: ``"name"`` or ``"shape"`` (see [`GroupBy`][neuronprof.typing.GroupBy]).
        jobs: Worker processes reading a folder's files, as for [`load_trace`][neuronprof.analysis.load_trace].
        executor: A Dask cluster reading them instead, as for ``load_trace``.

    Raises:
        TraceError: The trace cannot be read.
        ValueError: Unknown ``sort_by`` or ``group_by``, a ``row_limit`` that is not an int
            or None, a ``device_only`` that is not a bool (each refused before the trace is
            read); bad ``jobs`` or ``executor`` (see ``load_trace``).
    """
    check_table_options(sort_by, row_limit, device_only, group_by)
    trace = load_trace(source, jobs=jobs, executor=executor)
    return trace.table(sort_by, row_limit=row_limit, device_only=device_only, group_by=group_by)


def summarize_ranks(
    source: TraceSource,
    *,
    sort_by: SortKey = "device",
    group_by: GroupBy = "name",
    device_only: bool = False,
    jobs: Optional[int] = None,
    executor: Optional[ExecutorLike] = None,
) -> RankTable:
    """Return every rank's table side by side (``session.table(ranks="all")`` offline).

    For an HTA-style folder (``rank-0.json.gz``...) or traces whose
    ``distributedInfo`` names their rank; a one-rank trace gives one column.

    Args:
        source: A trace file, a folder of per-rank traces, or a loaded trace.
        sort_by: The sort key, as for ``Session.table()`` (``"device"``, ``"cpu"``,
            ``"calls"``, ``"name"`` ...).
        group_by: ``"name"`` (one row per op) or ``"shape"`` (per op and input shapes).
        device_only: Keep only rows with device time.
        jobs: Worker processes reading the ranks' files, as for [`load_trace`][neuronprof.analysis.load_trace].
        executor: A Dask cluster reading them instead, as for ``load_trace``.

    Returns:
        A [`RankTable`][neuronprof.model.RankTable] with, per op, each rank's self times (µs)
        and calls, and the slowest rank; and the straggler, the rank the others wait for:
        the most compute per step (step time less the time in collectives).

    Raises:
        TraceError: The trace cannot be read.
        ValueError: Unknown ``sort_by`` or ``group_by``, or a key the cross-rank view cannot sort by;
            bad ``jobs`` or ``executor`` (see ``load_trace``).
    """
    check_table_options(sort_by, None, device_only, group_by)
    trace = load_trace(source, jobs=jobs, executor=executor)
    return trace.rank_table(sort_by, group_by=group_by, device_only=device_only)
