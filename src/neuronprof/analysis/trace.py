"""Read Chrome/Perfetto trace files into per-operator aggregates, without torch.

A trace captured on a Trainium, TPU or GPU host is read here on any machine
with Python: [`load_trace`][neuronprof.analysis.load_trace] streams the events
(bounded memory, see ``_jsonstream``), rebuilds the call nesting per thread to
get self times, attributes device kernels to the op that launched them, and
returns a [`Trace`][neuronprof.analysis.Trace]. ``Trace.table()`` turns that into
the same [`Table`][neuronprof.Table] that ``session.table()`` returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import glob
import json
import operator
import os
import re
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from itertools import islice
from typing import Any, Optional, Union

from neuronprof import _vocabulary as vocab
from neuronprof._deprecation import renamed_keyword
from neuronprof._vocabulary import event_kind
from neuronprof.analysis._jsonstream import FastPathFailed, PyEvent, TraceReader
from neuronprof.analysis.errors import TraceError
from neuronprof.model import OpRow, RankTable, Shape, Table
from neuronprof.typing import GroupBy, SortKey

__all__ = [
    "EventAggregator",
    "GroupBy",
    "Trace",
    "TraceOp",
    "TraceSource",
    "find_trace_files",
    "load_trace",
    "summarize",
    "summarize_ranks",
]

TraceSource = Union[str, "os.PathLike[str]", "Trace"]
"""A trace file, a folder of traces, or a [`Trace`][neuronprof.analysis.Trace] already loaded."""

# What each event is (its kind, its row, whether it is a step or a top-level call)
# is the vocabulary's rule, shared with the live table.
_SKIP_CATS = vocab.SKIP_CATS
_K_OTHER, _K_OP, _K_PY, _K_RUNTIME, _K_STEP, _K_DEVICE = (
    vocab.K_OTHER,
    vocab.K_OP,
    vocab.K_PY,
    vocab.K_RUNTIME,
    vocab.K_STEP,
    vocab.K_DEVICE,
)
_RANK_FILE = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE)

# Process names/labels that mark a device timeline (kineto labels GPU pids "GPU 0";
# XLA/TPU traces name them "/device:TPU:0").
# torch_npu names its device process "Ascend Hardware".
_DEVICE_PROC = re.compile(
    r"(\bGPU\b|\bTPU\b|/device:|neuron\s*core|neuron\s*device|\bNC\s*\d|\bXPU\b|\bNPU\b|\bMTIA\b|\bHPU\b"
    r"|Ascend Hardware|\bHCCL\b|\bHIP\b)",
    re.IGNORECASE,
)
# Processes that hold views derived from other events, not events: torch_npu's
# "Overlap Analysis" ("Computing", "Communication", "Free" spans over the device
# timeline). Counting them would add their time a second time, as host time.
_ANALYSIS_PROC = re.compile(r"^\s*Overlap Analysis\s*$", re.IGNORECASE)
# Lanes of a device process whose spans contain the ops of another lane: the XLA/TPU
# trace viewer's "Steps" and "XLA Modules" (and the framework views derived from
# "XLA Ops"). Only the op lanes are device op time.
_CONTAINER_LANE = re.compile(
    r"^\s*(Steps|XLA Modules|Framework (Name Scope|Ops)|TensorFlow (Name Scope|Ops)|Source code|XLA TraceMe)\s*$",
    re.IGNORECASE,
)
_NEURON_LAYOUT = re.compile(r"_pid_\d+")

_MAX_ID = 1 << 62
# Times are stored as signed 64-bit nanoseconds: anything at or beyond this many µs is out of range.
_MAX_US = (1 << 63) // 1000
_MISSING: Any = object()


@dataclass(frozen=True)
class TraceOp:
    """Everything a trace says about one operator (or device kernel) and one input signature.

    Times are in microseconds, summed over every call in the trace; ``None``
    means the trace does not say (e.g. device time on a CPU-only trace).

    Attributes:
        name: Operator or kernel name (``ProfilerStep#N`` annotations are all
            called ``ProfilerStep*``, as in ``key_averages()``).
        on_device: True for device work (kernels, copies) rather than host ops.
        calls: Number of events.
        self_cpu_us: Host time excluding nested events on the same thread.
        cpu_total_us: Host time including nested events.
        self_device_us: Device time of the op itself: its own duration for a
            kernel; for a host op, the kernels it launched.
        device_total_us: Device time including what nested ops launched.
        input_dims: ``Input Dims`` as recorded (``record_shapes=True``): one entry
            per input, a tuple of ints for a tensor, nested tuples for a tensor list.
        input_dtypes: ``Input type`` as recorded (``"float"``, ``"c10::BFloat16"``, ``"Scalar"``...).
        concrete_inputs: ``Concrete Inputs`` as recorded (scalar arguments as text).
        flops: FLOPs the profiler estimated (``with_flops=True``), when the trace has them.
    """

    name: str
    on_device: bool
    calls: int
    self_cpu_us: float
    cpu_total_us: float
    self_device_us: Optional[float] = None
    device_total_us: Optional[float] = None
    input_dims: Optional[tuple[Any, ...]] = None
    input_dtypes: Optional[tuple[str, ...]] = None
    concrete_inputs: Optional[tuple[str, ...]] = None
    flops: Optional[int] = None

    @property
    def input_shapes(self) -> Optional[tuple[Shape, ...]]:
        """Input shapes in [`OpRow`][neuronprof.OpRow] form: ``()`` for a scalar, a non-tensor or a tensor list."""
        return _flat_shapes(self.input_dims)


@dataclass(frozen=True)
class Trace:
    """A loaded trace: per-operator aggregates plus what the trace says about its run.

    Build one with [`load_trace`][neuronprof.analysis.load_trace]; turn it into
    a [`Table`][neuronprof.Table] with [`table`][neuronprof.analysis.Trace.table].

    Attributes:
        ops: One entry per operator name and input signature, in first-seen order.
        files: The trace files read (a folder may hold several; they are summed).
        backend: ``"cuda"``, ``"neuron"``, ``"tpu"``, ... or ``"cpu"`` without device events.
        device_label: Label of the device columns (``"CUDA"``, ``"NEURON"``,
            ``"TPU"``, ``"DEVICE"`` when unknown); ``None`` without device events.
        device_name: Device model when the trace records one (``deviceProperties``).
        steps: Number of recorded steps: ``ProfilerStep#N`` spans, less an
            empty one that ends a timeline (see ``neuronprof._vocabulary.step_count``).
        top_level_calls: Ops called directly by the profiled steps, summed over
            steps; ``None`` when the trace has no steps.
        events: Number of trace events read.
        notes: Remarks about how the trace was read.
        rank: The distributed rank of a one-rank trace (kineto's ``distributedInfo``
            or a ``rank-N`` file name), when known.
        ranks: One ``Trace`` per rank, indexed by rank, when the source holds
            several ranks (an HTA-style folder); the fields above are then their sum.
    """

    ops: tuple[TraceOp, ...]
    files: tuple[str, ...] = ()
    backend: str = "cpu"
    device_label: Optional[str] = None
    device_name: Optional[str] = None
    steps: int = 0
    top_level_calls: Optional[int] = None
    events: int = 0
    notes: tuple[str, ...] = field(default=())
    rank: Optional[int] = None
    ranks: tuple[Trace, ...] = field(default=())

    @property
    def source(self) -> str:
        """The trace file, or the files joined with ``", "``."""
        return ", ".join(self.files)

    @renamed_keyword("limit", "row_limit")
    def table(
        self,
        sort_by: SortKey = "device",
        *,
        row_limit: Optional[int] = None,
        device_only: bool = False,
        group_by: GroupBy = "name",
    ) -> Table:
        """Return the trace as a [`Table`][neuronprof.Table], as ``session.table()`` would.

        Args:
            sort_by: A [`SortKey`][neuronprof.typing.SortKey]; device keys fall
                back to CPU time when the trace has no device time.
            row_limit: Keep at most this many rows (all when ``None``).
            device_only: Keep only rows with device time above zero.
            group_by: ``"name"`` (like ``key_averages()``) or ``"shape"`` (one row
                per name and input shapes, like ``group_by_input_shape=True``;
                ``input_dtypes`` is kept where the merged calls agree on it).

        Raises:
            ValueError: Unknown ``sort_by`` or ``group_by``.
        """
        rows = self.rows(group_by)
        table = Table(
            rows=rows,
            backend=self.backend,
            device_label=self.device_label,
            steps=self.steps,
            top_level_calls=self.top_level_calls,
            notes=self.notes,
            rank=self.rank,
        )
        # The totals of the whole trace travel with the table (and its JSON),
        # whether or not rows are filtered or cut.
        table = dataclasses.replace(
            table,
            total_rows=len(rows),
            total_self_cpu_us=table.self_cpu_us,
            total_self_device_us=table.self_device_us,
        ).sorted(sort_by)
        if device_only:
            table = table.device_only()
        return table.head(row_limit)

    def rank_table(
        self, sort_by: SortKey = "device", *, group_by: GroupBy = "name", device_only: bool = False
    ) -> RankTable:
        """Return every rank's table side by side, as ``session.table(ranks="all")`` does.

        A one-rank trace gives a table of one rank. Rows are keyed by name,
        host/device and (``group_by="shape"``) input shapes.

        Args:
            sort_by: A [`SortKey`][neuronprof.typing.SortKey]; see
                [`RankTable.from_tables`][neuronprof.model.RankTable.from_tables] for what each orders by.
            group_by: ``"name"`` or ``"shape"``.
            device_only: Keep only rows with device time.

        Raises:
            ValueError: Unknown ``sort_by`` or ``group_by``, or a key the cross-rank view cannot sort by.
        """
        per_rank = self.ranks or (self,)
        # The sum's own notes, except the one about summing: the view is side by side.
        notes = [n for n in self.notes if not n.startswith("summed over")] if self.ranks else []
        return RankTable.from_tables(
            [t.table(sort_by, group_by=group_by) for t in per_rank],
            sort_by,
            device_only=device_only,
            notes=notes,
        )

    def rows(self, group_by: GroupBy = "name") -> tuple[OpRow, ...]:
        """Return one [`OpRow`][neuronprof.OpRow] per operator (``group_by="name"``) or signature (``"shape"``).

        Args:
            group_by: ``"name"`` or ``"shape"``; see [`GroupBy`][neuronprof.typing.GroupBy].

        Raises:
            ValueError: Unknown ``group_by``.
        """
        if group_by not in ("name", "shape"):
            raise ValueError(f"unknown group_by {group_by!r}; use 'name' or 'shape'")
        by_shape = group_by == "shape"
        # Like key_averages(group_by_input_shape=True): shapes, not dtypes, split rows.
        rows = (
            OpRow(
                name=op.name,
                calls=op.calls,
                self_cpu_us=op.self_cpu_us,
                cpu_total_us=op.cpu_total_us,
                self_device_us=op.self_device_us,
                device_total_us=op.device_total_us,
                input_shapes=op.input_shapes if by_shape else None,
                input_dtypes=op.input_dtypes if by_shape else None,
                flops=op.flops,
                on_device=op.on_device,
            )
            for op in self.ops
            if vocab.is_row(op.name)
        )
        return tuple(vocab.merge_rows([rows]))


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
        raise TraceError(f"{p}: no such file or folder")
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
        files = sorted(f for f in found if os.path.isfile(f))
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


def load_trace(source: TraceSource) -> Trace:
    """Read a trace file or folder into a [`Trace`][neuronprof.analysis.Trace].

    Accepts Chrome/Perfetto JSON traces (``.json`` or ``.json.gz``) such as
    torch.profiler's ``export_chrome_trace`` writes, TensorBoard trace folders
    and TorchNeuron output folders; several files are summed. Memory stays
    bounded whatever the file size: events are streamed, never loaded whole.

    Args:
        source: A path, or a ``Trace`` (returned unchanged).

    Raises:
        TraceError: The path is missing, or a file is not a readable trace.
    """
    if isinstance(source, Trace):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"load_trace() takes a path or a Trace, got {type(source).__name__}")
    files = find_trace_files(source)
    folder_notes: list[str] = []
    if os.path.isdir(source):
        stray = _stray_files(os.fspath(source), files)
        if stray:
            shown = ", ".join(stray[:5]) + (f" and {len(stray) - 5} more" if len(stray) > 5 else "")
            folder_notes.append(
                f"left out {len(stray)} other JSON file(s) in the folder (not named like the traces read): {shown}"
            )
    keys = _Keys()
    per_file = [_read_file(f, keys) for f in files]
    ranks: dict[int, list[_Sums]] = {}
    for s in per_file:
        if s.rank is not None:
            ranks.setdefault(s.rank, []).append(s)
    total = _Sums()
    for s in per_file:
        total.add(s)
    if len(ranks) < 2:
        rank = next(iter(ranks)) if len(ranks) == 1 and all(s.rank is not None for s in per_file) else None
        one = _build(total, keys, files, rank=rank)
        return dataclasses.replace(one, notes=(*one.notes, *folder_notes)) if folder_notes else one
    # Several ranks: one Trace each (files of the same rank summed), and their sum.
    world = max(ranks) + 1
    per_rank: list[Trace] = []
    for r in range(world):
        group = _Sums()
        for s in ranks.get(r, ()):
            group.add(s)
        per_rank.append(_build(group, keys, group.files, rank=r))
    merged = _build(total, keys, files)
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
) -> Table:
    """Return a trace's per-operator [`Table`][neuronprof.Table] (what ``neuronprof summarize`` prints).

    Args:
        source: A trace file or folder, or a loaded [`Trace`][neuronprof.analysis.Trace].
        sort_by: A [`SortKey`][neuronprof.typing.SortKey] (default: self device time).
        row_limit: Keep at most this many rows.
        device_only: Keep only rows with device time.
        group_by: ``"name"`` or ``"shape"`` (see [`GroupBy`][neuronprof.typing.GroupBy]).

    Raises:
        TraceError: The trace cannot be read.
        ValueError: Unknown ``sort_by`` or ``group_by``.
    """
    return load_trace(source).table(sort_by, row_limit=row_limit, device_only=device_only, group_by=group_by)


def summarize_ranks(
    source: TraceSource, *, sort_by: SortKey = "device", group_by: GroupBy = "name", device_only: bool = False
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

    Returns:
        A [`RankTable`][neuronprof.model.RankTable] with, per op, each rank's self times (µs)
        and calls, and the slowest rank.

    Raises:
        TraceError: The trace cannot be read.
        ValueError: Unknown ``sort_by`` or ``group_by``, or a key the cross-rank view cannot sort by.
    """
    return load_trace(source).rank_table(sort_by, group_by=group_by, device_only=device_only)


# -- the aggregation ------------------------------------------------------------------
#
# One rule each, for every producer (kineto of PyTorch 1.8 to 2.x, CUDA, HIP,
# XPU, MTIA, PrivateUse1 backends, torch_npu, plain Chrome traces):
#
# * Times are integer nanoseconds, read from the text of the numbers (never
#   through a binary float: 1.7e15 µs has a float resolution of 0.25 µs).
# * Device events (device categories, or any event on a device process) never
#   nest: each is its own row with self time = duration, on every stream.
# * Host events nest per (pid, tid) as torch builds its tree: sorted by start,
#   longest first; an event is a child of the innermost open event it fits in.
# * A device event belongs to the runtime/driver call with the same
#   ``correlation``, and its time to the innermost host op around that call
#   (a ProfilerStep or record_function span included; the call itself when no
#   op encloses it). Only a device event whose correlation matches no runtime
#   call is tied to a host op through its ``External id``.
# * Every event is counted once, recursive same-name ops included.


class _Thread:
    """The host or device events of one (pid, tid) timeline, stored compactly until the file ends."""

    __slots__ = ("ts", "dur", "kid", "corr", "ext")

    def __init__(self) -> None:
        self.ts = array("q")  # start, integer nanoseconds
        self.dur = array("q")  # duration, integer nanoseconds
        self.kid = array("i")  # index of the event's key
        self.corr = array("q")  # correlation id, -1 when none (0 is a valid id)
        self.ext = array("q")  # External id, -1 when none (0 is a valid id)


def process_roles(procs: Mapping[Any, Sequence[str]]) -> tuple[set[Any], set[Any]]:
    """Split a file's processes by their names/labels: ``(derived-view pids, device pids)``.

    Derived views (torch_npu's "Overlap Analysis") are left out; every event of a
    device process (kineto's "GPU 0", XLA's "/device:TPU:0", "Ascend Hardware") is
    device work. Shared by the table reader and the findings' trace adapter.
    """
    analysis = {pid for pid, names in procs.items() if any(_ANALYSIS_PROC.search(n) for n in names)}
    device = {pid for pid, names in procs.items() if pid not in analysis and any(_DEVICE_PROC.search(n) for n in names)}
    return analysis, device


def is_container_lane(lane: Optional[str]) -> bool:
    """Whether a device process's lane (thread name) holds spans that contain other lanes' ops.

    The XLA/TPU trace viewer's "Steps" and "XLA Modules" (and the framework views):
    left out, only the op lanes are device op time.
    """
    return lane is not None and bool(_CONTAINER_LANE.match(lane))


class _Keys:
    """The operator keys of one load, shared by its files: ``(name, cat, dims, types, concrete)``."""

    def __init__(self) -> None:
        self.index: dict[tuple[Any, ...], int] = {}
        self.keys: list[tuple[Any, ...]] = []
        self.names: list[str] = []  # display name (every ProfilerStep#N is "ProfilerStep*")
        self.kind: list[int] = []

    def add(self, key: tuple[Any, ...]) -> int:
        kid = len(self.keys)
        self.index[key] = kid
        self.keys.append(key)
        name, cat = key[0], key[1]
        kind = event_kind(name, cat)
        self.names.append(vocab.row_name(name, kind))
        self.kind.append(kind)
        return kid


class _Sums:
    """Per-key sums (integer ns) and what a file (or several) says about its run."""

    def __init__(self, n: int = 0) -> None:
        self.calls = [0] * n
        self.cpu_self = [0] * n
        self.cpu_total = [0] * n
        self.dev_self = [0] * n
        self.dev_total = [0] * n
        self.on_device = [False] * n
        self.flops: dict[int, int] = {}
        self.steps = 0
        self.top_level = 0
        self.events = 0
        self.has_device = False
        self.linked = False
        self.unlinked_ns = 0  # device time that no host op could be found for (when others were linked)
        self.evidence: list[str] = []  # text the device label is read from
        self.device_name: Optional[str] = None
        self.skipped: dict[str, int] = {}
        self.notes: list[str] = []
        self.files: list[str] = []
        self.rank: Optional[int] = None

    def grow(self, n: int) -> None:
        extra = n - len(self.calls)
        if extra > 0:
            for lst in (self.calls, self.cpu_self, self.cpu_total, self.dev_self, self.dev_total):
                lst.extend([0] * extra)
            self.on_device.extend([False] * extra)

    def add(self, other: _Sums) -> None:
        self.grow(len(other.calls))
        other.grow(len(self.calls))
        for mine, theirs in (
            (self.calls, other.calls),
            (self.cpu_self, other.cpu_self),
            (self.cpu_total, other.cpu_total),
            (self.dev_self, other.dev_self),
            (self.dev_total, other.dev_total),
        ):
            mine[:] = map(operator.add, mine, theirs)
        self.on_device[:] = map(operator.or_, self.on_device, other.on_device)
        for k, v in other.flops.items():
            self.flops[k] = self.flops.get(k, 0) + v
        self.steps += other.steps
        self.top_level += other.top_level
        self.events += other.events
        self.has_device |= other.has_device
        self.linked |= other.linked
        self.unlinked_ns += other.unlinked_ns
        self.evidence += other.evidence
        self.device_name = self.device_name or other.device_name
        for what, n in other.skipped.items():
            self.skipped[what] = self.skipped.get(what, 0) + n
        self.notes += other.notes
        self.files += other.files


def _ns(value: Any) -> Optional[int]:
    """A trace time in µs (int, or the text of a number) as integer nanoseconds; None when not a number."""
    kind = type(value)
    if kind is int:
        return int(value) * 1000 if -_MAX_US < value < _MAX_US else None
    if kind is str:
        try:
            d = Decimal(value.strip())
        except InvalidOperation:
            return None
    elif kind is float:
        d = Decimal(repr(value))
    else:
        return None
    if not d.is_finite() or abs(d) >= _MAX_US:
        return None
    return int((d * 1000).to_integral_value())


def _time_ns(value: Any) -> Optional[int]:
    """``ts``/``dur`` as integer ns: kineto's "1712195495520835.103" read exactly and fast, anything else by ``_ns``."""
    if type(value) is str and value[-4:-3] == ".":
        try:
            return int(value.replace(".", ""))
        except ValueError:
            pass
    return _ns(value)


def _id(value: Any) -> int:
    """A correlation or External id: an int, or the text of one (``"7"``); -1 when none or out of range.

    0 is a valid id (kineto numbers from 0 on some builds), so "none" is -1, never 0.
    """
    if type(value) is str:
        text = value.strip()
        if text.isascii() and text.isdigit():
            value = int(text)
    if type(value) is int and 0 <= value < _MAX_ID:
        return value
    return -1


def _time_error(path: str, index: int, what: str, key: str, value: Any) -> str:
    """The message for an event whose ``ts``/``dur`` cannot be read: missing, not a number, or out of range."""
    label = what if what.startswith("ph ") else repr(what)
    number: Optional[Decimal] = None
    if type(value) in (int, float):
        number = Decimal(repr(value)) if type(value) is float else Decimal(value)
    elif type(value) is str:
        with contextlib.suppress(InvalidOperation):
            number = Decimal(value.strip())
    if number is not None and not number.is_nan():
        return f"{path}: event #{index} ({label}) has a '{key}' out of range ({value!r} µs)"
    return f"{path}: event #{index} ({label}) has no numeric '{key}'"


def _read_file(path: str, keys: _Keys) -> _Sums:
    """Read one trace file into per-key sums; the fast reader first, the stdlib reader when it cannot."""
    try:
        return _FileReader(path, keys, fast=None).read()
    except FastPathFailed:
        return _FileReader(path, keys, fast=False).read()


class _Aggregator:
    """The one aggregation: per-timeline events in, per-key sums out (self/total times, device time, steps).

    A trace file's reader and the live session's kineto events
    (``EventAggregator``) both fill
    ``threads`` and call ``_finish``, so both tables follow the same rules.
    """

    def __init__(self, path: str, keys: _Keys) -> None:
        self.path = path
        self.keys = keys
        self.threads: dict[Any, _Thread] = {}
        self.procs: dict[Any, list[str]] = {}
        self.runtime_corr: set[int] = set()
        self.thread_names: dict[Any, str] = {}
        self.sums = _Sums()
        self.sums.files.append(path)
        # Whether the profiler stopped inside the last step (see ``_vocabulary.step_count``);
        # taken to unless the trace's ``neuronprof`` metadata says otherwise.
        self.stopped_in_last_step = True

    # -- per-file finish: device attribution, nesting, self time ---------------------------
    def _finish(self, metadata: Mapping[str, Any]) -> None:
        sums = self.sums
        keys = self.keys
        kind = keys.kind
        sums.grow(len(keys.keys))
        # A session's trace says whether its profiler stopped inside the last step.
        self.stopped_in_last_step = vocab.stopped_in_last_step(metadata, default=self.stopped_in_last_step)
        procs = self.procs
        analysis_pids, device_pids = process_roles(procs)
        for pid in device_pids:
            sums.evidence.extend(procs[pid])
        props = metadata.get("deviceProperties")
        if isinstance(props, list):
            for p in props:
                if isinstance(p, dict):
                    sums.evidence.extend(f"{k}={v}" for k, v in p.items() if isinstance(v, str))
            first = props[0] if props else None
            if isinstance(first, dict) and isinstance(first.get("name"), str):
                sums.device_name = first["name"]
        if _NEURON_LAYOUT.search(os.path.dirname(os.path.abspath(self.path))) and os.path.basename(
            self.path
        ).startswith("trace.json"):
            sums.evidence.append("neuron")
        sums.rank = _rank_of(self.path, metadata)

        is_device_kind = [k == _K_DEVICE for k in kind]
        calls, dev_self, dev_total, on_device = sums.calls, sums.dev_self, sums.dev_total, sums.on_device
        runtime_corr = self.runtime_corr
        dev_by_corr: dict[int, int] = {}
        dev_by_ext: dict[int, int] = {}
        unlinked = 0
        host: list[tuple[_Thread, Optional[list[int]]]] = []
        seen_kids: set[int] = set()
        # Derived views and container lanes: left out, counted for a note.
        derived: dict[tuple[str, str], int] = {}
        for (pid, tid), th in self.threads.items():
            device_rows: Iterable[int]
            host_rows: Optional[list[int]]
            if pid in analysis_pids:
                what = ("analysis", procs[pid][0])
                derived[what] = derived.get(what, 0) + len(th.kid)
                continue
            lane = self.thread_names.get((pid, tid)) if pid in device_pids else None
            if lane is not None and is_container_lane(lane):
                what = ("lane", lane.strip())
                derived[what] = derived.get(what, 0) + len(th.kid)
                continue
            if pid in device_pids:
                device_rows = range(len(th.kid))
                host_rows = []
            elif any(map(is_device_kind.__getitem__, th.kid)):
                device_rows = [i for i, k in enumerate(th.kid) if is_device_kind[k]]
                host_rows = [i for i, k in enumerate(th.kid) if not is_device_kind[k]]
            else:
                host.append((th, None))
                continue
            if host_rows:
                host.append((th, host_rows))
            kids, durs, corrs, exts = th.kid, th.dur, th.corr, th.ext
            for i in device_rows:
                k = kids[i]
                if kind[k] == _K_STEP:
                    continue  # the device-side copy of a step annotation
                d = durs[i]
                calls[k] += 1
                dev_self[k] += d
                dev_total[k] += d
                on_device[k] = True
                seen_kids.add(k)
                c = corrs[i]
                if c >= 0 and c in runtime_corr:
                    dev_by_corr[c] = dev_by_corr.get(c, 0) + d
                elif exts[i] >= 0:
                    x = exts[i]
                    dev_by_ext[x] = dev_by_ext.get(x, 0) + d
                else:
                    unlinked += d
        if seen_kids:
            sums.has_device = True
            for k in seen_kids:
                sums.evidence.append(str(keys.keys[k][1]))
        runtime_names = {keys.names[k] for k in range(len(kind)) if kind[k] == _K_RUNTIME}
        sums.evidence.extend(sorted(runtime_names)[:16])
        sums.evidence.extend({str(keys.keys[k][1]) for k in range(len(kind)) if kind[k] == _K_RUNTIME})
        for th, only in host:
            self._walk(th, only, dev_by_corr, dev_by_ext)
        self.threads.clear()
        base = os.path.basename(self.path)
        views = sorted(n for (k, n) in derived if k == "analysis")
        if views:
            count = sum(v for (k, _n), v in derived.items() if k == "analysis")
            sums.notes.append(
                f"{base}: {count:,} span(s) on {', '.join(map(repr, views))} are an analysis view derived from "
                "other events, not events; left out"
            )
        lanes = sorted(n for (k, n) in derived if k == "lane")
        if lanes:
            count = sum(v for (k, _n), v in derived.items() if k == "lane")
            sums.notes.append(
                f"{base}: {count:,} span(s) on the device lane(s) {', '.join(map(repr, lanes))} contain the ops of "
                "another lane; left out (only ops are counted)"
            )
        if sums.linked:
            sums.unlinked_ns += unlinked + sum(dev_by_corr.values()) + sum(dev_by_ext.values())

    def _walk(
        self, th: _Thread, rows: Optional[list[int]], dev_by_corr: dict[int, int], dev_by_ext: dict[int, int]
    ) -> None:
        """Nest the host events of one timeline (torch's rule) and add up self/total and device times."""
        ts, dur, kids, corrs, exts = th.ts, th.dur, th.kid, th.corr, th.ext
        if rows is None:
            n = len(ts)
            if n == 0:
                return
            order: Iterable[int] = range(n)
            if not _is_sorted(ts, dur):
                # Parents before children: by start, then longest first (what torch sorts by).
                idx = sorted(range(n), key=dur.__getitem__, reverse=True)
                idx.sort(key=ts.__getitem__)
                order = idx
        else:
            rows = sorted(rows, key=dur.__getitem__, reverse=True)
            rows.sort(key=ts.__getitem__)
            order = rows
        sums = self.sums
        kind, names = self.keys.kind, self.keys.names
        calls, cpu_self, cpu_total = sums.calls, sums.cpu_self, sums.cpu_total
        dev_self, dev_total = sums.dev_self, sums.dev_total
        # A frame: [end, key, duration, children's duration, own device time,
        #           device time incl. children, directly under a step (through Python frames),
        #           index of the step span in ``step_work`` (-1 when not a step)]
        stack: list[list[Any]] = []
        top_level = 0
        step_work: list[bool] = []  # per step span, in start order: whether any event is nested in it
        linked = False
        pop = stack.pop

        for i in order:
            t = ts[i]
            d = dur[i]
            e = t + d
            while stack:
                top = stack[-1]
                if t >= top[0] or e > top[0]:
                    pop()
                    k = top[1]
                    cpu_self[k] += top[2] - top[3]
                    cpu_total[k] += top[2]
                    dev_self[k] += top[4]
                    dev_total[k] += top[5]
                    if stack:
                        stack[-1][5] += top[5]
                else:
                    break
            k = kids[i]
            kd = kind[k]
            own = 0
            if kd == _K_RUNTIME:
                c = corrs[i]
                if c >= 0 and dev_by_corr:
                    found = dev_by_corr.pop(c, 0)
                    if found:
                        linked = True
                        for frame in reversed(stack):
                            if kind[frame[1]] not in (_K_RUNTIME, _K_PY):
                                frame[4] += found
                                frame[5] += found
                                break
                        else:  # no op around the call (e.g. a graph launch): the call carries it
                            own = found
            else:
                x = exts[i]
                if x >= 0 and dev_by_ext:
                    own = dev_by_ext.pop(x, 0)
                    if own:
                        linked = True
            calls[k] += 1
            anchored = False
            if stack:
                parent = stack[-1]
                parent[3] += d
                if parent[7] >= 0:
                    step_work[parent[7]] = True
                if parent[6]:
                    if kd == _K_PY:
                        anchored = True  # Python frames are transparent for "called by the step"
                    elif vocab.counts_as_call(kd, names[k]):
                        top_level += 1
            if kd == _K_STEP:
                anchored = True
                step_work.append(False)
            stack.append([e, k, d, 0, own, own, anchored, len(step_work) - 1 if kd == _K_STEP else -1])
        while stack:
            top = pop()
            k = top[1]
            cpu_self[k] += top[2] - top[3]
            cpu_total[k] += top[2]
            dev_self[k] += top[4]
            dev_total[k] += top[5]
            if stack:
                stack[-1][5] += top[5]
        sums.top_level += top_level
        sums.steps += vocab.step_count(step_work, stopped_in_last=self.stopped_in_last_step)
        sums.linked |= linked


class _FileReader(_Aggregator):
    """Reads the events of one file into per-thread arrays, then nests and sums them."""

    def __init__(self, path: str, keys: _Keys, *, fast: Optional[bool]) -> None:
        super().__init__(path, keys)
        self.reader = TraceReader(path, fast=fast)
        self.open_b: dict[Any, list[Any]] = {}
        self.stray_e = 0

    def read(self) -> _Sums:
        path = self.path
        keys = self.keys
        index_get = keys.index.get
        kinds = keys.kind
        threads = self.threads
        skipped = self.sums.skipped
        runtime_corr = self.runtime_corr
        flops_by_key = self.sums.flops
        last_pid: Any = _MISSING
        last_tid: Any = _MISSING
        append: Any = None
        index = -1
        ev: Any = None
        # The collector only slows this loop down: it creates millions of short-lived
        # objects and no reference cycles. Restored whatever happens.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for batch in self.reader.batches():
                for ev in batch:
                    index += 1
                    ph = ev.ph
                    if ph != "X":
                        if ph == "M":
                            self._metadata(ev)
                            continue
                        if ph != "B" and ph != "E":
                            skipped[ph] = skipped.get(ph, 0) + 1
                            continue
                        ev = self._begin_end(ev, ph, index)
                        if ev is None:
                            continue
                    cat = ev.cat
                    if cat in _SKIP_CATS:
                        skipped[cat] = skipped.get(cat, 0) + 1
                        continue
                    name = ev.name
                    if type(name) is not str:
                        raise TraceError(f"{path}: event #{index} (ph 'X') has no 'name' string")
                    ts = ev.ts
                    t = _time_ns(ts)
                    if t is None:
                        raise TraceError(_time_error(path, index, name, "ts", ts))
                    dur = ev.dur
                    d = _time_ns(dur)
                    if d is None:
                        raise TraceError(_time_error(path, index, name, "dur", dur))
                    if d < 0:
                        raise TraceError(f"{path}: event #{index} ({name!r}) has a negative duration ({dur})")
                    a = ev.args
                    if a is None:
                        key: tuple[Any, ...] = (name, cat, None, None, None)
                        corr = ext = -1
                    else:
                        dims = a.dims
                        if dims is None:
                            dims = a.dims_legacy
                        types = a.types
                        concrete = a.concrete
                        key = (
                            name,
                            cat,
                            None if dims is None else bytes(dims),
                            None if types is None else bytes(types),
                            None if concrete is None else bytes(concrete),
                        )
                        corr = a.correlation
                        if type(corr) is not int or not 0 <= corr < _MAX_ID:
                            corr = _id(corr)
                        ext = a.ext
                        if ext is None:
                            ext = a.ext_lower
                        if type(ext) is not int or not 0 <= ext < _MAX_ID:
                            ext = _id(ext)
                    try:
                        kid = index_get(key)
                    except TypeError:  # an unhashable category: not one we know
                        key = (name, None, *key[2:])
                        kid = index_get(key)
                    if kid is None:
                        kid = keys.add(key)
                    if a is not None:
                        flops = a.flops
                        if flops is not None:
                            _add_flops(flops_by_key, kid, flops)
                        kd = kinds[kid]
                        if kd == _K_RUNTIME:
                            if corr >= 0:
                                runtime_corr.add(corr)
                        elif kd == _K_DEVICE and type(a.device_type) is str:
                            self.sums.evidence.append(a.device_type)
                    pid = ev.pid
                    tid = ev.tid
                    if append is None or pid != last_pid or tid != last_tid:
                        tkey = (pid, tid)
                        try:
                            thread = threads.get(tkey)
                        except TypeError:
                            raise TraceError(
                                f"{path}: event #{index} ({name!r}) has an invalid 'pid'/'tid' {tkey!r}"
                            ) from None
                        if thread is None:
                            thread = threads[tkey] = _Thread()
                        append = (
                            thread.ts.append,
                            thread.dur.append,
                            thread.kid.append,
                            thread.corr.append,
                            thread.ext.append,
                        )
                        last_pid, last_tid = pid, tid
                    append[0](t)
                    append[1](d)
                    append[2](kid)
                    append[3](corr)
                    append[4](ext)
        except (TraceError, FastPathFailed):
            raise
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
            raise TraceError(f"{path}: malformed event #{index}: {exc}") from None
        finally:
            if gc_was_enabled:
                gc.enable()
        self.sums.events = self.reader.events
        open_b = sum(map(len, self.open_b.values()))
        if open_b:
            self.sums.notes.append(f"{os.path.basename(path)}: {open_b} 'B' event(s) never ended")
        if self.stray_e:
            self.sums.notes.append(
                f"{os.path.basename(path)}: {self.stray_e} 'E' event(s) end no 'B' event and are left out"
            )
        self._finish(self.reader.metadata)
        return self.sums

    def _metadata(self, ev: Any) -> None:
        args = ev.args
        if args is None:
            return
        what = ev.name
        if what == "process_name":
            value = args.name
        elif what == "thread_name":
            if isinstance(args.name, str):
                with contextlib.suppress(TypeError):
                    self.thread_names[(ev.pid, ev.tid)] = args.name
            return
        elif what == "process_labels":
            value = args.labels
        else:
            return
        if isinstance(value, str):
            # An unhashable pid names nothing events could be matched to.
            with contextlib.suppress(TypeError):
                self.procs.setdefault(ev.pid, []).append(value)

    def _begin_end(self, ev: Any, ph: str, index: int) -> Any:
        """Track a 'B'/'E' pair; return the equivalent complete event when a pair closes."""
        path = self.path
        ts = _ns(ev.ts)
        if ts is None:
            raise TraceError(_time_error(path, index, f"ph {ph!r}", "ts", ev.ts))
        pid, tid = ev.pid, ev.tid
        try:
            stack = self.open_b.setdefault((pid, tid), [])
        except TypeError:
            raise TraceError(f"{path}: event #{index} has an invalid 'pid'/'tid' ({pid!r}, {tid!r})") from None
        if ph == "B":
            if type(ev.name) is not str:
                raise TraceError(f"{path}: event #{index} (ph 'B') has no 'name' string")
            stack.append((ev, ts))
            return None
        if not stack:
            self.stray_e += 1  # an 'E' whose 'B' came before the trace started, or never was
            return None
        begin, start = stack.pop()
        if ts < start:
            raise TraceError(f"{path}: event #{index} ({begin.name!r}) ends before it begins")
        span = PyEvent({})
        span.ph, span.name, span.cat, span.pid, span.tid, span.args = "X", begin.name, begin.cat, pid, tid, begin.args
        # Already in ns: give the text of the µs value, which the loop reads exactly.
        span.ts = _us_text(start)
        span.dur = _us_text(ts - start)
        return span


class EventAggregator(_Aggregator):
    """Sums events handed over one at a time exactly as a trace file's events are summed.

    The live ``session.table()`` feeds kineto's own event list
    (``profile.kineto_results.events()``: the events kineto writes into the
    Chrome trace, with integer-ns times) through this, so the live table and
    ``neuronprof summarize`` of the same run's export come from one aggregation:
    the same rows, calls, self and total times, device attribution, steps and
    top-level calls.

    Args:
        source: What the events come from, for notes (e.g. ``"<session>"``).
        stopped_in_last_step: Whether the profiler stopped while the last step was
            open (the live session knows; see ``neuronprof._vocabulary.step_count``).
    """

    def __init__(self, source: str = "<events>", *, stopped_in_last_step: bool = True) -> None:
        super().__init__(source, _Keys())
        self.stopped_in_last_step = stopped_in_last_step

    def add(
        self,
        name: str,
        cat: str,
        start_ns: int,
        duration_ns: int,
        thread: tuple[Any, Any],
        *,
        input_dims: Optional[list[Any]] = None,
        input_types: Optional[list[str]] = None,
        correlation: int = -1,
        external_id: int = -1,
        flops: Optional[int] = None,
        concrete_inputs: Optional[list[str]] = None,
    ) -> None:
        """Add one event (a span: an op, an annotation, a runtime call, a kernel...).

        Args:
            name: The event's name, as the trace writes it.
            cat: Its category: kineto's activity type (``"cpu_op"``, ``"kernel"``...).
            start_ns: Start, integer ns (any origin, the same for every event).
            duration_ns: Duration, integer ns.
            thread: The timeline it is on, e.g. ``("host", tid)`` or ``("device 0", stream)``.
            input_dims: Recorded input shapes (``record_shapes=True``), as the trace's ``Input Dims``.
            input_types: Recorded input dtypes, as the trace's ``Input type``.
            correlation: The trace's ``correlation`` (runtime calls and device work), -1 when none.
            external_id: The trace's ``External id``, -1 when none.
            flops: Estimated FLOPs (``with_flops=True``).
            concrete_inputs: Recorded scalar inputs as text (``""`` for a tensor), as the
                trace's ``Concrete Inputs``: the FLOP formulas of ops with scalar arguments read them.
        """
        if cat in _SKIP_CATS:  # as a trace file's reader does
            self.sums.skipped[cat] = self.sums.skipped.get(cat, 0) + 1
            return
        dims = None if input_dims is None else json.dumps(input_dims).encode()
        types = None if input_types is None else json.dumps(input_types).encode()
        concrete = None if concrete_inputs is None else json.dumps(concrete_inputs).encode()
        key = (name, cat, dims, types, concrete)
        keys = self.keys
        kid = keys.index.get(key)
        if kid is None:
            kid = keys.add(key)
        if flops:
            _add_flops(self.sums.flops, kid, flops)
        if keys.kind[kid] == _K_RUNTIME and correlation >= 0:
            self.runtime_corr.add(correlation)
        th = self.threads.get(thread)
        if th is None:
            th = self.threads[thread] = _Thread()
        th.ts.append(start_ns)
        th.dur.append(duration_ns)
        th.kid.append(kid)
        th.corr.append(correlation)
        th.ext.append(external_id)
        self.sums.events += 1

    def trace(self) -> Trace:
        """Nest, attribute and sum the events added so far into a [`Trace`][neuronprof.analysis.Trace]; once."""
        self._finish({})
        return _build(self.sums, self.keys, self.sums.files)


def _add_flops(flops_by_key: dict[int, int], kid: int, flops: Any) -> None:
    if type(flops) is str:
        try:
            flops = float(flops)
        except ValueError:
            return
    if type(flops) in (int, float) and 0 <= flops < float("inf"):
        flops_by_key[kid] = flops_by_key.get(kid, 0) + int(flops)


def _us_text(ns: int) -> str:
    """Integer nanoseconds as the text of a µs value with three decimals."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}"


def _rank_of(path: str, metadata: Mapping[str, Any]) -> Optional[int]:
    """The distributed rank a trace file belongs to: kineto's ``distributedInfo``, else its file name."""
    info = metadata.get("distributedInfo")
    if isinstance(info, dict):
        rank = info.get("rank")
        if type(rank) is int and rank >= 0:
            return rank
        if isinstance(rank, str) and rank.isdigit():
            return int(rank)
    m = _RANK_FILE.search(os.path.basename(path))
    return int(m.group(1)) if m else None


_LEFT_OUT = {
    "s": "flow",
    "t": "flow",
    "f": "flow",
    "b": "async",
    "e": "async",
    "n": "async",
    "S": "async",
    "T": "async",
    "p": "async",
    "F": "async",
    "i": "instant",
    "I": "instant",
    "R": "mark",
    "C": "counter",
    "P": "sample",
    "O": "object",
    "N": "object",
    "D": "object",
    "c": "clock sync",
    "Trace": "profiler span",
    "gpu_user_annotation": "device copy of an annotation",
}


def _left_out_note(skipped: Mapping[str, int]) -> Optional[str]:
    """Say which events are not rows and how many, e.g. "flow ('s', 'f') ×120"."""
    if not skipped:
        return None
    groups: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for what, n in skipped.items():
        label = _LEFT_OUT.get(what, "unknown") if isinstance(what, str) else "unknown"
        groups.setdefault(label, []).append(repr(what))
        counts[label] = counts.get(label, 0) + n
    total = sum(counts.values())
    parts = []
    for label in sorted(groups, key=lambda g: -counts[g]):
        kinds = ", ".join(groups[label])
        what = "cat" if label in ("profiler span", "device copy of an annotation") else "ph"
        parts.append(f"{label} ({what} {kinds}) ×{counts[label]:,}")
    return f"{total:,} event(s) are not op or kernel spans and are left out: " + "; ".join(parts)


def _build(sums: _Sums, keys: _Keys, files: Sequence[str], *, rank: Optional[int] = None) -> Trace:
    """Turn per-key sums into a Trace: keys with the same display name and decoded inputs are merged."""
    sums.grow(len(keys.keys))
    label = _device_label(sums.evidence) if sums.has_device else None
    merged: dict[tuple[Any, ...], list[Any]] = {}
    decoded: dict[Optional[bytes], Any] = {None: None}
    for kid, key in enumerate(keys.keys):
        calls = sums.calls[kid]
        if calls == 0:
            continue
        _name, _cat, dims, types, concrete = key
        for raw in (dims, types, concrete):
            if raw not in decoded:
                decoded[raw] = _decode_input(raw)
        name = keys.names[kid]
        dev = sums.on_device[kid]
        mkey = (name, dev, decoded[dims], decoded[types], decoded[concrete])
        flops = sums.flops.get(kid)
        values = [
            calls,
            sums.cpu_self[kid],
            sums.cpu_total[kid],
            sums.dev_self[kid],
            sums.dev_total[kid],
            flops,
        ]
        prev = merged.get(mkey)
        if prev is None:
            merged[mkey] = values
        else:
            for i in range(5):
                prev[i] += values[i]
            if flops is not None:
                prev[5] = flops + (prev[5] or 0)
    ops: list[TraceOp] = []
    for (name, dev, dims, types, concrete), (calls, cpu_self, cpu_total, d_self, d_total, flops) in merged.items():
        has_dev = dev or sums.linked
        ops.append(
            TraceOp(
                name=name,
                on_device=dev,
                calls=calls,
                self_cpu_us=0.0 if dev else cpu_self / 1000,
                cpu_total_us=0.0 if dev else cpu_total / 1000,
                self_device_us=d_self / 1000 if has_dev else None,
                device_total_us=d_total / 1000 if has_dev else None,
                input_dims=dims if isinstance(dims, tuple) else None,
                input_dtypes=types if _all_str(types) else None,
                concrete_inputs=concrete if _all_str(concrete) else None,
                flops=flops,
            )
        )
    notes = list(sums.notes)
    if len(files) > 1:
        notes.append(f"summed over {len(files)} trace files")
    left_out = _left_out_note(sums.skipped)
    if left_out:
        notes.append(left_out)
    if sums.has_device and not sums.linked and any(not o.on_device for o in ops):
        notes.append("device events carry no link to host ops; host ops show no device time")
    if sums.unlinked_ns:
        notes.append(
            f"{sums.unlinked_ns / 1000:,.3f} µs of device time is tied to no host op in the trace "
            "(its launch call is missing); it shows on the device rows only"
        )
    return Trace(
        ops=tuple(ops),
        files=tuple(files),
        backend=label.lower() if label else "cpu",
        device_label=label,
        device_name=sums.device_name,
        steps=sums.steps,
        top_level_calls=sums.top_level if sums.steps else None,
        events=sums.events,
        notes=tuple(notes),
        rank=rank,
    )


def _decode_input(raw: Optional[bytes]) -> Any:
    """``Input Dims`` / ``Input type`` / ``Concrete Inputs`` JSON text as nested tuples (hashable)."""
    if raw is None:
        return None
    try:
        return _freeze_any(json.loads(raw))
    except ValueError:
        return None


# -- helpers -------------------------------------------------------------------------


def _is_sorted(ts: array[int], dur: array[int]) -> bool:
    """True when events are ordered by start, and equal starts by longest first."""
    after = islice(ts, 1, None)
    if not all(map(operator.le, ts, after)):
        return False
    if not any(map(operator.eq, ts, islice(ts, 1, None))):
        return True
    return all(dur[i] >= dur[i + 1] for i in range(len(ts) - 1) if ts[i] == ts[i + 1])


def _freeze_any(value: Any) -> Any:
    """Turn nested lists into nested tuples; anything else that is not a plain scalar becomes None."""
    if type(value) is list:
        return tuple(_freeze_any(v) for v in value)
    if value is None or type(value) in (int, float, str, bool):
        return value
    return None


def _all_str(values: Any) -> bool:
    return isinstance(values, tuple) and all(isinstance(v, str) for v in values)


def _flat_shapes(dims: Optional[tuple[Any, ...]]) -> Optional[tuple[Shape, ...]]:
    if dims is None:
        return None
    out: list[Shape] = []
    for d in dims:
        if isinstance(d, tuple) and all(type(x) is int for x in d):
            out.append(d)
        else:
            out.append(())
    return tuple(out)


# The device label, read from the trace itself: process names and labels of device
# timelines, deviceProperties, device and runtime categories, runtime call names.
# First match wins; nothing defaults to CUDA.
_LABELS = (
    (re.compile(r"ascend|\bnpu\b|\bhccl\b", re.IGNORECASE), "NPU"),
    (re.compile(r"mtia", re.IGNORECASE), "MTIA"),
    (re.compile(r"\btpu\b", re.IGNORECASE), "TPU"),
    (re.compile(r"neuron|\bNC\s*\d", re.IGNORECASE), "NEURON"),
    (re.compile(r"\bxpu", re.IGNORECASE), "XPU"),
    (re.compile(r"\bhpu", re.IGNORECASE), "HPU"),
    (re.compile(r"\bhip|\brocm|\bamd\b|gcnArchName", re.IGNORECASE), "HIP"),
    (re.compile(r"\bcuda|\bcu[A-Z]|(?i:nvidia)"), "CUDA"),
    (re.compile(r"\bgpu\b", re.IGNORECASE), "GPU"),
)


def _device_label(evidence: Iterable[str]) -> str:
    text = "\n".join(evidence)
    for pattern, label in _LABELS:
        if pattern.search(text):
            return label
    return "DEVICE"
