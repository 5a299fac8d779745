"""The data a profile turns into: plain, frozen, JSON-round-trippable.

Nothing here imports torch. A [`Table`][neuronprof.Table] can be built by hand,
loaded from JSON written on another machine, or produced from a trace file by
``neuronprof summarize``; every renderer reads only these classes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from neuronprof import _vocabulary
from neuronprof._model_base import ResultModel, ResultRow

# The model's parts, each ≤ ~500 lines; this module is their one public face and
# re-exports every name (documented and importable as ``neuronprof.model.X``).
from neuronprof._model_comparison import Comparison, ComparisonRow, StepBreakdown
from neuronprof._model_ranks import RankOpRow, RankTable
from neuronprof._model_rows import (  # noqa: F401
    _DEVICE_FIELDS,
    _MEMORY_FIELDS,
    COMPARISON_SCHEMA,
    RANK_TABLE_SCHEMA,
    TABLE_SCHEMA,
    Shape,
    _opt_float,
    _opt_int,
    _sort_field,
    row_from_dict,
    row_to_dict,
)
from neuronprof.typing import SORT_KEYS, SortKey

if TYPE_CHECKING:
    from neuronprof.render import Block, Format

__all__ = [
    "OpRow",
    "RankOpRow",
    "RankTable",
    "Shape",
    "SortKey",
    "Table",
    "RANK_TABLE_SCHEMA",
    "SORT_KEYS",
    "TABLE_SCHEMA",
    "COMPARISON_SCHEMA",
    "Comparison",
    "ComparisonRow",
    "StepBreakdown",
]


@dataclass(frozen=True)
class OpRow(ResultRow):
    """One line of a profile table: an operator (or device kernel) and its times.

    All times are in microseconds, summed over every profiled step. A value that
    was not measured is ``None`` (shown as a blank cell), never ``0``.

    Attributes:
        name: Operator or kernel name, e.g. ``"aten::mul"``.
        calls: How many times it ran in the profiled steps.
        self_cpu_us: CPU time spent in the op itself, excluding its children.
        cpu_total_us: CPU time including children.
        self_device_us: Device (NeuronCore, TPU, GPU) time of the op itself;
            ``None`` on a backend without a device.
        device_total_us: Device time including children; ``None`` without a device.
        input_shapes: Input tensor shapes, when recorded with ``record_shapes=True``.
        input_dtypes: Input dtypes (e.g. ``"float"``), when a trace recorded them.
        flops: Estimated floating-point operations, when ``with_flops=True``.
        self_cpu_memory_bytes: Host memory allocated by the op itself, when
            ``profile_memory=True``.
        self_device_memory_bytes: Device memory allocated by the op itself, when
            ``profile_memory=True``.
        on_device: True for a row that is a device kernel rather than a CPU-side op.
    """

    name: str
    calls: int
    self_cpu_us: float
    cpu_total_us: float
    self_device_us: Optional[float] = None
    device_total_us: Optional[float] = None
    input_shapes: Optional[tuple[Shape, ...]] = None
    input_dtypes: Optional[tuple[str, ...]] = None
    flops: Optional[int] = None
    self_cpu_memory_bytes: Optional[int] = None
    self_device_memory_bytes: Optional[int] = None
    on_device: bool = False

    _KIND: ClassVar[str] = "OpRow"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"OpRow.name must be a str, got {type(self.name).__name__}")
        if isinstance(self.calls, bool) or not isinstance(self.calls, int) or self.calls < 0:
            raise ValueError(f"OpRow.calls must be a non-negative int, got {self.calls!r}")
        for name in ("self_cpu_us", "cpu_total_us", "self_device_us", "device_total_us"):
            value = getattr(self, name)
            if value is None and name.startswith(("self_cpu", "cpu")):
                raise ValueError(f"OpRow.{name} is required")
            if value is not None and (not isinstance(value, (int, float)) or math.isnan(value)):
                raise ValueError(f"OpRow.{name} must be a number or None, got {value!r}")


@dataclass(frozen=True)
class Table(ResultModel):
    """A profile summarised per operator: what ``session.table()`` returns.

    Print it for an aligned text table, or render it with
    [`to_markdown`][neuronprof.Table.to_markdown], [`to_csv`][neuronprof.Table.to_csv],
    [`to_json`][neuronprof.Table.to_json] or [`to_dataframe`][neuronprof.Table.to_dataframe].
    Notebooks (Jupyter, Marimo) show it as HTML.

    Attributes:
        rows: A tuple of [`OpRow`][neuronprof.OpRow], one per operator name (and per
            input shapes with ``record_shapes=True``), host ops and device kernels
            (``on_device``) as separate rows, ordered by ``sort_by``. Times are
            summed over the ``steps`` profiled steps (µs). After a ``row_limit`` or
            ``device_only`` it holds only the rows kept; ``total_rows`` and the
            totals still describe them all. A kernel's device time shows on its
            own row and on the op that launched it, so the device column does not
            sum to the total.
        backend: Backend that produced the profile (``"neuron"``, ``"tpu"``,
            ``"cuda"``, ``"cpu"`` or a PrivateUse1 name).
        device_label: Label of the device columns (``"NEURON"``, ``"TPU"``,
            ``"CUDA"``); ``None`` when the backend has no device.
        sort_by: The [`SortKey`][neuronprof.typing.SortKey] the rows are sorted by
            (after any fallback); ``"none"`` for rows in the order they were collected.
        steps: Number of profiled (active) steps the times are summed over.
        top_level_calls: Ops called directly by the profiled steps, summed over
            steps (naive RMSNorm: 6 per step); ``None`` when unknown.
        notes: Remarks about how the table was made (e.g. a sort fallback).
        rank: ``torch.distributed`` rank that produced it, if any.
        total_rows: How many rows there were before any filter (``device_only``) or
            ``row_limit`` cut the list; filled in from ``rows`` when not given.
        total_self_cpu_us: Self CPU total of all those rows (µs, a float), always present.
        total_self_device_us: Device total of all those rows (µs), counted as
            [`self_device_us`][neuronprof.Table.self_device_us] counts it; ``None`` without device time.
        communication_us: Time in async collective spans (µs, summed over the steps):
            a process group's work (``gloo:all_reduce``, ``nccl:broadcast``...), which
            runs beside the host's own work and is in no self time, as in
            ``key_averages()``; ``None`` when the profile has none.
        step_us: Wall time of the steps (``ProfilerStep#N`` spans), summed (µs); ``None`` without steps.
        collective_wait_us: Time in those steps with a collective of this process in flight (a process
            group's span, a ``c10d::*`` op, a communication kernel..., any thread), µs summed; or ``None``.
    """

    rows: tuple[OpRow, ...]
    backend: str = "cpu"
    device_label: Optional[str] = None
    sort_by: str = "device"
    steps: int = 0
    top_level_calls: Optional[int] = None
    notes: tuple[str, ...] = field(default=())
    rank: Optional[int] = None
    total_rows: Optional[int] = None
    total_self_cpu_us: Optional[float] = None
    total_self_device_us: Optional[float] = None
    communication_us: Optional[float] = None
    step_us: Optional[float] = None
    collective_wait_us: Optional[float] = None

    SCHEMA: ClassVar[str] = TABLE_SCHEMA
    _ROW_TYPE: ClassVar[Optional[type]] = OpRow
    _KIND: ClassVar[str] = "a neuronprof table"
    _TOTALS: ClassVar[tuple[str, ...]] = ("total_rows", "total_self_cpu_us", "total_self_device_us")

    def __post_init__(self) -> None:
        # Accept any iterable of rows but store a tuple so the table stays immutable.
        self._as_tuples("rows", "notes")
        for row in self.rows:
            if not isinstance(row, OpRow):
                raise TypeError(f"Table.rows must hold OpRow objects, got {type(row).__name__}")
        # The totals are those of every row the table was built with, before any
        # filter or row limit; a table built without them takes them from its rows.
        if self.total_rows is None:
            object.__setattr__(self, "total_rows", len(self.rows))
        if self.total_self_cpu_us is None:
            object.__setattr__(self, "total_self_cpu_us", float(sum(r.self_cpu_us for r in self.rows)))
        elif not isinstance(self.total_self_cpu_us, float):
            object.__setattr__(self, "total_self_cpu_us", float(self.total_self_cpu_us))
        if self.total_self_device_us is None:
            object.__setattr__(self, "total_self_device_us", _vocabulary.device_total(self.rows))

    # -- queries -------------------------------------------------------------------
    @property
    def has_device_time(self) -> bool:
        """True when at least one row has device time above zero."""
        return any(_vocabulary.has_device_time(r) for r in self.rows)

    @property
    def self_cpu_us(self) -> float:
        """Sum of self CPU time over all rows (before any ``row_limit``), in microseconds."""
        assert self.total_self_cpu_us is not None  # set by __post_init__
        return self.total_self_cpu_us

    @property
    def self_device_us(self) -> Optional[float]:
        """Total device time of the kernels; ``None`` without a device.

        Kernel rows (``on_device``) and the ops that launched them both carry the
        kernel's time, so only kernel rows are summed when there are any, as
        torch.profiler does for its "Self DEVICE time total".
        """
        return self.total_self_device_us  # set by __post_init__ (None only when no row has device time)

    @property
    def compute_us(self) -> Optional[float]:
        """Step time less time in collectives (µs, summed): what
        [`RankTable.straggler`][neuronprof.model.RankTable.straggler] compares, per step."""
        return None if self.step_us is None else max(self.step_us - (self.collective_wait_us or 0.0), 0.0)

    def names(self) -> list[str]:
        """Return the row names in display order."""
        return [r.name for r in self.rows]

    # -- derived tables ----------------------------------------------------------
    def sorted(self, by: SortKey = "device") -> Table:
        """Return a copy sorted by ``by`` (see [`SortKey`][neuronprof.typing.SortKey]).

        Rows without a value for the key (``None``) go last. Sorting by a device key
        when no row has device time, or by a memory key when no row has memory
        figures, falls back to self CPU time, and says so in ``notes``.

        Args:
            by: A [`SortKey`][neuronprof.typing.SortKey], e.g. ``"device"`` or ``"cpu"``.

        Raises:
            ValueError: ``by`` is not a known sort key.
        """
        field_name = _sort_field(by)
        notes = list(self.notes)
        effective: SortKey = by
        if field_name in _DEVICE_FIELDS and not self.has_device_time:
            field_name = "self_cpu_us" if field_name == "self_device_us" else "cpu_total_us"
            effective = "cpu" if field_name == "self_cpu_us" else "cpu_total"
            # A CPU-only table has nothing to explain; a device table without device
            # time is suspicious, so say what happened.
            note = f"no device time recorded; sorted by {effective!r} instead of {by!r}"
            if self.device_label is not None and note not in notes:
                notes.append(note)
        elif field_name in _MEMORY_FIELDS and all(getattr(r, field_name) is None for r in self.rows):
            # Sorting by a column no row has would keep the rows' order under a header naming that key.
            field_name, effective = "self_cpu_us", "cpu"
            note = (
                f"no op here has memory figures (torch gives them per op live, with profile_memory=True; "
                f"a trace file's allocation records are charted in the report's memory pane): "
                f"sorted by 'cpu' instead of {by!r}"
            )
            if note not in notes:
                notes.append(note)
        rows = _vocabulary.sort_rows(self.rows, field_name)
        return dataclasses.replace(self, rows=tuple(rows), sort_by=effective, notes=tuple(notes))

    def with_rows(self, rows: Iterable[OpRow], *, notes: Optional[Iterable[str]] = None) -> Table:
        """Return a copy holding ``rows`` instead, its totals those of the new rows.

        For adding or replacing rows (e.g. device rows from another source); a
        filter or a limit keeps the old totals instead (``device_only``, ``head``).

        Args:
            rows: The new rows, in display order.
            notes: Notes to use instead of the table's own; None keeps them.
        """
        return dataclasses.replace(
            self,
            rows=tuple(rows),
            notes=self.notes if notes is None else tuple(notes),
            total_rows=None,
            total_self_cpu_us=None,
            total_self_device_us=None,
        )

    def device_only(self) -> Table:
        """Return a copy with only the rows that have device time above zero.

        The totals (and the row count) stay those of the whole table, as with
        [`head`][neuronprof.Table.head], so the footer never reports 0 µs for
        work that was recorded.
        """
        rows = tuple(r for r in self.rows if _vocabulary.has_device_time(r))
        notes = self.notes
        if self.rows and not rows:
            why = "no row has device time" + ("" if self.device_label else " (a CPU-only profile)")
            notes = (*notes, f"device_only: {why}, so no row is left")
        if len(rows) == len(self.rows):
            return self
        return self._carry(rows=rows, notes=notes)

    # -- the model's own parts of the shared verbs (see neuronprof._model_base) ---------------
    def _view(self, fmt: Format, row_limit: Optional[int]) -> list[Block]:
        from neuronprof.render import table_view

        return table_view(self.head(row_limit), fmt)

    def _data(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "device_label": self.device_label,
            "sort_by": self.sort_by,
            "steps": self.steps,
            "top_level_calls": self.top_level_calls,
            "notes": list(self.notes),
            "rank": self.rank,
            "total_rows": self.total_rows,
            "total_self_cpu_us": self.total_self_cpu_us,
            "total_self_device_us": self.total_self_device_us,
            "communication_us": self.communication_us,
            "step_us": self.step_us,
            "collective_wait_us": self.collective_wait_us,
            "rows": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Table:
        """Build a table from [`to_dict`][neuronprof.Table.to_dict] output.

        Args:
            data: A dict as ``to_dict()`` returns it (e.g. parsed from JSON).

        Raises:
            ValueError: The data is not a neuronprof table (a cross-rank table's says which class reads it).
        """
        if isinstance(data, Mapping) and data.get("schema") == RANK_TABLE_SCHEMA:
            raise ValueError(
                f"this is a cross-rank table (schema {RANK_TABLE_SCHEMA!r}): read it with RankTable.from_json()"
            )
        return super().from_dict(data)

    @classmethod
    def _from_data(cls, data: Mapping[str, Any]) -> Table:
        return cls(
            rows=tuple(OpRow.from_dict(r) for r in data["rows"]),
            backend=str(data.get("backend", "cpu")),
            device_label=data.get("device_label"),
            sort_by=str(data.get("sort_by", "device")),
            steps=int(data.get("steps", 0)),
            top_level_calls=data.get("top_level_calls"),
            notes=tuple(data.get("notes", ())),
            rank=data.get("rank"),
            total_rows=_opt_int(data.get("total_rows")),
            total_self_cpu_us=_opt_float(data.get("total_self_cpu_us")),
            total_self_device_us=_opt_float(data.get("total_self_device_us")),
            communication_us=_opt_float(data.get("communication_us")),
            step_us=_opt_float(data.get("step_us")),
            collective_wait_us=_opt_float(data.get("collective_wait_us")),
        )
