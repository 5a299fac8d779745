"""What a loaded trace is: [`Trace`][neuronprof.analysis.Trace] and its [`TraceOp`][neuronprof.analysis.TraceOp]s.

A plain frozen model, torch-free; ``Trace.table()`` turns it into the same
[`Table`][neuronprof.Table] that ``session.table()`` returns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

from neuronprof import _vocabulary as vocab
from neuronprof._deprecation import renamed_keyword
from neuronprof.analysis.trace._rules import _flat_shapes
from neuronprof.typing import SORT_KEYS, GroupBy, SortKey

if TYPE_CHECKING:
    from neuronprof.analysis.insights import Insights, RankInsights, Timeline
    from neuronprof.analysis.trace._events import EventTable
    from neuronprof.model import OpRow, RankTable, Shape, Table


def check_table_options(sort_by: Any, row_limit: Any, device_only: Any, group_by: Any) -> None:
    """Refuse a table option that is not one, before any work (a trace read, a table built).

    Raises:
        ValueError: An unknown ``sort_by`` or ``group_by``, a ``row_limit`` that is not an
            int or None, or a ``device_only`` that is not a bool.
    """
    if sort_by not in SORT_KEYS:
        raise ValueError(f"unknown sort_by {sort_by!r}; use one of: {', '.join(SORT_KEYS)}")
    vocab.check_row_limit(row_limit)
    if not isinstance(device_only, bool):
        raise ValueError(f"device_only must be True or False, got {device_only!r}")
    if group_by not in ("name", "shape"):
        raise ValueError(f"unknown group_by {group_by!r}; use 'name' or 'shape'")


def table_of(trace: Trace, rows: tuple[OpRow, ...], **facts: Any) -> Table:
    """A [`Table`][neuronprof.Table] of ``rows`` with the trace's own facts (backend, steps, times); ``facts`` win."""
    samples = trace.samples
    own: dict[str, Any] = {
        "backend": trace.backend,
        "device_label": trace.device_label,
        "steps": trace.steps,
        "top_level_calls": trace.top_level_calls,
        "notes": trace.notes,
        "rank": trace.rank,
        "communication_us": trace.communication_us,
        "step_us": sum(s.wall_us for s in samples) if samples else None,
        "collective_wait_us": sum(s.collective_wait_us for s in samples) if samples else None,
    }
    from neuronprof.model import Table  # on use: reading a trace needs no result model

    return Table(rows=rows, **{**own, **facts})


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
        self_cpu_memory_bytes: Host memory the op allocated itself (bytes), torch's own
            figure (``profile_memory=True``); only a live session has it, a trace does not.
        self_device_memory_bytes: Device memory the op allocated itself (bytes), likewise.
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
    self_cpu_memory_bytes: Optional[int] = None
    self_device_memory_bytes: Optional[int] = None

    @property
    def input_shapes(self) -> Optional[tuple[Shape, ...]]:
        """Input shapes in [`OpRow`][neuronprof.OpRow] form: ``()`` for a scalar, a non-tensor or a tensor list."""
        return _flat_shapes(self.input_dims)


@dataclass(frozen=True)
class StepSample:
    """One recorded step's figures: what a verdict between two runs compares.

    Attributes:
        wall_us: The step's host time: its ``ProfilerStep#N`` span (µs).
        device_us: Device time of the kernels its ops launched (µs); ``None`` without a device.
        ops: Per host op name, ``(name, self CPU µs, self device µs or None)`` in this step.
        run: Which of the trace's files (runs) the step is from, from 0.
        collective_wait_us: Time inside the step during which one of the rank's collectives
            was in flight (µs), on any thread or stream, each instant once: what the
            straggler's rule takes out of the step (``neuronprof._vocabulary.straggler``).
    """

    wall_us: float
    device_us: Optional[float] = None
    ops: tuple[tuple[str, float, Optional[float]], ...] = ()
    run: int = 0
    collective_wait_us: float = 0.0

    def op(self, name: str) -> Optional[tuple[float, Optional[float]]]:
        """``(self CPU µs, self device µs)`` of an op in this step; ``None`` when it did not run.

        Args:
            name: The op's name, e.g. ``"aten::mm"``.
        """
        for found, cpu, dev in self.ops:
            if found == name:
                return cpu, dev
        return None


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
        communication_us: Time in async collective spans (µs), as
            ``communication_us`` of [`Table`][neuronprof.Table]; ``None`` when there are none.
        samples: One [`StepSample`][neuronprof.analysis.StepSample] per recorded step,
            in order (several files: one after another): the samples a verdict reads.
        event_tables: The events the sums were made from, one
            [`EventTable`][neuronprof.analysis.trace.EventTable] per file (or live
            cycle): what [`timeline`][neuronprof.analysis.Trace.timeline] and
            [`insights`][neuronprof.analysis.Trace.insights] read. Not compared.
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
    communication_us: Optional[float] = None
    samples: tuple[StepSample, ...] = field(default=(), repr=False)
    event_tables: tuple[EventTable, ...] = field(default=(), repr=False, compare=False)

    @property
    def source(self) -> str:
        """The trace file, or the files joined with ``", "``."""
        return ", ".join(self.files)

    def timeline(self) -> Timeline:
        """The findings engine's input: the host and device events of the recorded steps.

        Read from ``event_tables`` (no file is read again); one timeline per rank when
        the trace holds several. See
        [`Timeline`][neuronprof.analysis.insights.Timeline].
        """
        from neuronprof.analysis.insights._trace import timeline_of

        # A pure function of the record: read once, then kept with it (the record never changes).
        cached = self.__dict__.get("_timeline")
        if cached is None:
            cached = self.__dict__["_timeline"] = timeline_of(self)
        return cached

    def insights(self) -> Union[Insights, RankInsights]:
        """Say what to fix first: the findings of [`advise`][neuronprof.analysis.advise], read from the events held.

        Returns:
            [`Insights`][neuronprof.analysis.insights.Insights], or
            [`RankInsights`][neuronprof.analysis.insights.RankInsights] when the trace
            holds several ranks.
        """
        from neuronprof.analysis.insights._trace import insights_of

        return insights_of(self)

    @renamed_keyword("limit", "row_limit")
    def table(
        self,
        sort_by: SortKey = "device",
        row_limit: Optional[int] = None,
        device_only: bool = False,
        *,
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
            ValueError: Unknown ``sort_by`` or ``group_by``, a ``row_limit`` that is not
                an int or None, or a ``device_only`` that is not a bool.
        """
        check_table_options(sort_by, row_limit, device_only, group_by)
        rows = self.rows(group_by)
        table = table_of(self, rows)
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
        from neuronprof.model import RankTable

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
        from neuronprof.model import OpRow

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
                self_cpu_memory_bytes=op.self_cpu_memory_bytes,
                self_device_memory_bytes=op.self_device_memory_bytes,
            )
            for op in self.ops
            if vocab.is_row(op.name)
        )
        return tuple(vocab.merge_rows([rows]))
