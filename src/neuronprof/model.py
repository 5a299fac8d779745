"""The data a profile turns into: plain, frozen, JSON-round-trippable.

Nothing here imports torch. A [`Table`][neuronprof.Table] can be built by hand,
loaded from JSON written on another machine, or produced from a trace file by
``neuronprof summarize``; every renderer reads only these classes.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, Union, cast

from neuronprof import _vocabulary
from neuronprof._deprecation import renamed_keyword
from neuronprof._vocabulary import limit_rows
from neuronprof.typing import SORT_KEYS, RankMetric, RankSort, SortKey

if TYPE_CHECKING:
    import pandas

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
]

Shape = tuple[int, ...]
"""The shape of one input tensor, e.g. ``(4096, 4096)``; ``()`` for a scalar or non-tensor."""


TABLE_SCHEMA = "neuronprof.table/1"
RANK_TABLE_SCHEMA = "neuronprof.rank_table/1"

# Which OpRow field each sort key orders by: one map, in the vocabulary.
_SORT_FIELD = _vocabulary.SORT_FIELD
_DEVICE_FIELDS = _vocabulary.DEVICE_FIELDS


RowT = TypeVar("RowT")


def row_to_dict(row: Any) -> dict[str, Any]:
    """Return a frozen row dataclass as a JSON-ready dict (shape and dtype tuples as lists).

    Shared by every row type with ``input_shapes``/``input_dtypes``
    ([`OpRow`][neuronprof.OpRow] and the analysis rows).
    """
    data = dataclasses.asdict(row)
    if data.get("input_shapes") is not None:
        data["input_shapes"] = [list(s) for s in data["input_shapes"]]
    if data.get("input_dtypes") is not None:
        data["input_dtypes"] = list(data["input_dtypes"])
    return data


def row_from_dict(cls: Callable[..., RowT], data: Mapping[str, Any], what: str) -> RowT:
    """Build a row of type ``cls`` from [`row_to_dict`][neuronprof.model.row_to_dict] output.

    Raises:
        ValueError: A required field is missing, or one is unknown (``what`` names the row type).
    """
    kwargs = dict(data)
    if kwargs.get("input_shapes") is not None:
        kwargs["input_shapes"] = tuple(tuple(int(d) for d in s) for s in kwargs["input_shapes"])
    if kwargs.get("input_dtypes") is not None:
        kwargs["input_dtypes"] = tuple(str(d) for d in kwargs["input_dtypes"])
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a missing or unknown field
        raise ValueError(f"invalid {what}: {exc}") from None


def loads(text: Union[str, bytes]) -> Any:
    """Parse JSON for a model's ``from_json``, reporting bad text as ``ValueError``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None


@dataclass(frozen=True)
class OpRow:
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

    def to_dict(self) -> dict[str, Any]:
        """Return the row as a JSON-ready dict (shapes as lists)."""
        return row_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OpRow:
        """Build a row from [`to_dict`][neuronprof.OpRow.to_dict] output.

        Args:
            data: A dict as ``to_dict()`` returns it (e.g. parsed from JSON).

        Raises:
            ValueError: A required field is missing or has the wrong type.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown OpRow field(s): {', '.join(sorted(unknown))}")
        return row_from_dict(cls, data, "OpRow")


@dataclass(frozen=True)
class Table:
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

    def __post_init__(self) -> None:
        # Accept any iterable of rows but store a tuple so the table stays immutable.
        if not isinstance(self.rows, tuple):
            object.__setattr__(self, "rows", tuple(self.rows))
        if not isinstance(self.notes, tuple):
            object.__setattr__(self, "notes", tuple(self.notes))
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
    def __iter__(self) -> Iterator[OpRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def has_device_time(self) -> bool:
        """True when at least one row has device time above zero."""
        return any(_vocabulary.has_device_time(r) for r in self.rows)

    @property
    def self_cpu_us(self) -> float:
        """Sum of self CPU time over all rows (before any ``row_limit``), in microseconds."""
        if self.total_self_cpu_us is not None:
            return self.total_self_cpu_us
        return sum(r.self_cpu_us for r in self.rows)

    @property
    def self_device_us(self) -> Optional[float]:
        """Total device time of the kernels; ``None`` without a device.

        Kernel rows (``on_device``) and the ops that launched them both carry the
        kernel's time, so only kernel rows are summed when there are any, as
        torch.profiler does for its "Self DEVICE time total".
        """
        if self.total_self_device_us is not None:
            return self.total_self_device_us
        return _vocabulary.device_total(self.rows)

    def row(self, name: str) -> OpRow:
        """Return the first row called ``name``.

        Args:
            name: The operator or kernel name, e.g. ``"aten::mm"``.

        Raises:
            KeyError: No row has that name; the message lists close matches.
        """
        for r in self.rows:
            if r.name == name:
                return r
        close = [r.name for r in self.rows if name.lower() in r.name.lower()][:5]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"no row named {name!r}{hint}")

    def names(self) -> list[str]:
        """Return the row names in display order."""
        return [r.name for r in self.rows]

    # -- derived tables ----------------------------------------------------------
    def sorted(self, by: SortKey = "device") -> Table:
        """Return a copy sorted by ``by`` (see [`SortKey`][neuronprof.typing.SortKey]).

        Rows without a value for the key (``None``) go last. Sorting by a device key
        when no row has device time falls back to self CPU time, and says so in
        ``notes``.

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
        rows = _vocabulary.sort_rows(self.rows, field_name)
        return dataclasses.replace(self, rows=tuple(rows), sort_by=effective, notes=tuple(notes))

    def head(self, n: Optional[int]) -> Table:
        """Return a copy with at most ``n`` rows (all rows when ``n`` is None or negative).

        ``total_rows`` and the totals stay those of the whole table.

        Args:
            n: How many rows to keep; None or negative keeps all.
        """
        rows = limit_rows(self.rows, n)
        if len(rows) == len(self.rows):
            return self
        total = self.total_rows if self.total_rows is not None else len(self.rows)
        return dataclasses.replace(
            self,
            rows=tuple(rows),
            total_rows=total,
            total_self_cpu_us=self.self_cpu_us,
            total_self_device_us=self.self_device_us,
        )

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
        total = self.total_rows if self.total_rows is not None else len(self.rows)
        return dataclasses.replace(
            self,
            rows=rows,
            notes=notes,
            total_rows=total,
            total_self_cpu_us=self.self_cpu_us,
            total_self_device_us=self.self_device_us,
        )

    # -- renderers ----------------------------------------------------------------
    def __str__(self) -> str:
        from neuronprof.render import render_text

        return render_text(self)

    def to_text(self) -> str:
        """Return the table as aligned plain text (what ``print(table)`` shows)."""
        return str(self)

    def to_markdown(self) -> str:
        """Return the table as a GitHub-flavoured Markdown table."""
        from neuronprof.render import render_markdown

        return render_markdown(self)

    def to_csv(self, notes: bool = False) -> str:
        """Return the table as CSV, one column per [`OpRow`][neuronprof.OpRow] field.

        Args:
            notes: Also write the table's notes after the rows, as ``# note: ...``
                comment lines (read it back with ``pandas.read_csv(..., comment="#")``).
                ``neuronprof summarize --format csv`` writes the same lines to stderr.
        """
        from neuronprof.render import render_csv

        return render_csv(self, notes=notes)

    def _repr_html_(self) -> str:
        from neuronprof.render import render_html

        return render_html(self)

    def to_dict(self, row_limit: Optional[int] = None) -> dict[str, Any]:
        """Return the table as a JSON-ready dict, including a ``schema`` tag.

        Args:
            row_limit: Keep the first ``row_limit`` rows (as [`head`][neuronprof.Table.head]);
                ``total_rows`` and the totals still cover every row. None for all.
        """
        if row_limit is not None:
            return self.head(row_limit).to_dict()
        return {
            "schema": TABLE_SCHEMA,
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
            "rows": [r.to_dict() for r in self.rows],
        }

    def to_json(self, indent: Optional[int] = 2, row_limit: Optional[int] = None) -> str:
        """Return the table as JSON; [`Table.from_json`][neuronprof.Table.from_json] reads it back.

        Args:
            indent: Spaces per indentation level; None for one line.
            row_limit: Keep the first ``row_limit`` rows; the totals still cover every row. None for all.

        Returns:
            A JSON document (a ``str``), such that ``Table.from_json(t.to_json(row_limit=n)) == t.head(n)``.
        """
        return json.dumps(self.to_dict(row_limit), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Table:
        """Build a table from [`to_dict`][neuronprof.Table.to_dict] output.

        Args:
            data: A dict as ``to_dict()`` returns it (e.g. parsed from JSON).

        Raises:
            ValueError: The data is not a neuronprof table.
        """
        if isinstance(data, Mapping) and data.get("schema") == RANK_TABLE_SCHEMA:
            raise ValueError(
                f"this is a cross-rank table (schema {RANK_TABLE_SCHEMA!r}): read it with RankTable.from_json()"
            )
        if not isinstance(data, Mapping) or data.get("schema") != TABLE_SCHEMA:
            raise ValueError(f"not a neuronprof table (expected schema {TABLE_SCHEMA!r})")
        rows = data.get("rows")
        if not isinstance(rows, list):
            raise ValueError("neuronprof table JSON has no 'rows' list")
        return cls(
            rows=tuple(OpRow.from_dict(r) for r in rows),
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
        )

    @classmethod
    def from_json(cls, text: Union[str, bytes]) -> Table:
        """Read a table written by [`to_json`][neuronprof.Table.to_json].

        Args:
            text: JSON as ``to_json()`` writes it (``str`` or ``bytes``).

        Raises:
            ValueError: The text is not JSON, or not a neuronprof table.
        """
        return cls.from_dict(loads(text))

    def to_dataframe(self) -> pandas.DataFrame:
        """Return the rows as a pandas DataFrame, one column per OpRow field.

        Raises:
            ImportError: pandas is not installed (``pip install pandas``).
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Table.to_dataframe() needs pandas: pip install pandas") from None
        columns = [f.name for f in dataclasses.fields(OpRow)]
        return pd.DataFrame([r.to_dict() for r in self.rows], columns=columns)


def _sort_field(by: str) -> str:
    if not isinstance(by, str) or by not in _SORT_FIELD:
        raise ValueError(f"unknown sort_by {by!r}; use one of: {', '.join(SORT_KEYS)}")
    return _vocabulary.sort_field(by)


def merge_rows(groups: Iterable[Sequence[OpRow]]) -> list[OpRow]:
    """Sum rows with the same name (and shapes) across several tables' rows.

    Used to combine profiling cycles (``repeat > 1``) into one table. Order
    follows first appearance. The rule is the vocabulary's one merge.
    """
    return _vocabulary.merge_rows(groups)


# -- several ranks ------------------------------------------------------------------------


@dataclass(frozen=True)
class RankOpRow:
    """One operator across the ranks of a distributed job.

    Attributes:
        name: Operator name.
        metric: What the values measure: ``"self_device_us"``, ``"device_total_us"``,
            ``"self_cpu_us"`` or ``"cpu_total_us"`` (see [`RankMetric`][neuronprof.typing.RankMetric]).
        values: The metric per rank, indexed by rank; ``None`` where a rank never ran the op.
        calls: Calls per rank, indexed by rank (0 where it never ran).
        min_us: Smallest value across the ranks that ran the op.
        median_us: Median across those ranks.
        max_us: Largest value.
        slowest_rank: Rank with the largest value: the straggler.
        on_device: True for a device kernel, False for a host op: a host op and a
            kernel of the same name are two rows.
        input_shapes: Input shapes when the ranks' tables are grouped by shape, else ``None``.
    """

    name: str
    metric: RankMetric
    values: tuple[Optional[float], ...]
    calls: tuple[int, ...]
    min_us: float
    median_us: float
    max_us: float
    slowest_rank: int
    on_device: bool = False
    input_shapes: Optional[tuple[Shape, ...]] = None

    @property
    def spread(self) -> float:
        """``max / median``: 1.0 when every rank takes as long; large for a straggler."""
        return self.max_us / self.median_us if self.median_us > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        """Return the row as a JSON-ready dict (tuples as lists)."""
        data = row_to_dict(self)
        data["values"] = list(self.values)
        data["calls"] = list(self.calls)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RankOpRow:
        """Build a row from [`to_dict`][neuronprof.model.RankOpRow.to_dict] output.

        Args:
            data: A dict as ``to_dict()`` returns it (e.g. parsed from JSON).

        Raises:
            ValueError: A field is missing, unknown or of the wrong type.
        """
        kwargs = dict(data)
        try:
            kwargs["values"] = tuple(None if v is None else float(v) for v in kwargs["values"])
            kwargs["calls"] = tuple(int(c) for c in kwargs["calls"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"invalid cross-rank row: {exc}") from None
        return row_from_dict(cls, kwargs, "cross-rank row")


# Sort keys of the cross-rank view: the per-rank metric they compare, or how rows are ordered.
_RANK_METRICS = frozenset({"self_device_us", "device_total_us", "self_cpu_us", "cpu_total_us"})
_METRIC_WORDS = {
    "self_device_us": "self device",
    "device_total_us": "total device",
    "self_cpu_us": "self CPU",
    "cpu_total_us": "total CPU",
}


@dataclass(frozen=True)
class RankTable:
    """Per-op statistics of every rank side by side: what ``s.table(ranks="all")`` returns.

    By default rows are sorted by ``max_us``, largest first, so the op that holds
    the job back comes first; ``slowest_rank`` names the rank to look at. Rows are
    keyed by name, host/device (``on_device``) and, when grouped by shape, input
    shapes: a host op and a kernel of the same name are never merged.

    Attributes:
        rows: One [`RankOpRow`][neuronprof.model.RankOpRow] per operator.
        world_size: Number of ranks.
        metric: The time compared across ranks: ``"self_device_us"`` (default when
            any rank has device time), ``"self_cpu_us"``, ``"device_total_us"`` or ``"cpu_total_us"``.
        tables: Each rank's own [`Table`][neuronprof.Table], indexed by rank.
        sort_by: How rows are ordered: ``"max"`` (the slowest rank's value of
            ``metric``, largest first), ``"calls"`` (most calls on any rank) or ``"name"``.
        notes: Remarks about the view (e.g. a rank without a trace).
        total_rows: How many rows there were before any limit
            ([`head`][neuronprof.model.RankTable.head]); filled in from ``rows`` when not given.
    """

    rows: tuple[RankOpRow, ...]
    world_size: int
    metric: RankMetric
    tables: tuple[Table, ...] = ()
    sort_by: RankSort = "max"
    notes: tuple[str, ...] = field(default=())
    total_rows: Optional[int] = None

    def __post_init__(self) -> None:
        for name in ("rows", "tables", "notes"):
            if not isinstance(getattr(self, name), tuple):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.total_rows is None:
            object.__setattr__(self, "total_rows", len(self.rows))

    def head(self, n: Optional[int]) -> RankTable:
        """Return a copy with the first ``n`` rows (and the first ``n`` rows of each rank's table).

        ``total_rows`` and the totals stay those of the whole view; all rows when
        ``n`` is None or negative.

        Args:
            n: How many rows to keep; None or negative keeps all.
        """
        rows = limit_rows(self.rows, n)
        tables = tuple(t.head(n) for t in self.tables)
        if len(rows) == len(self.rows) and all(a is b for a, b in zip(tables, self.tables)):
            return self
        return dataclasses.replace(self, rows=tuple(rows), tables=tables, total_rows=self.total_rows)

    def __str__(self) -> str:
        from neuronprof.render import render_rank_table

        return render_rank_table(self)

    @property
    def sort_description(self) -> str:
        """What the rows are sorted by, in words (the renderers print it)."""
        if self.sort_by == "name":
            return "sorted by name"
        if self.sort_by == "calls":
            return "sorted by calls (the most on any rank)"
        return f"sorted by the slowest rank's {_METRIC_WORDS.get(self.metric, self.metric)} time"

    @property
    def total_self_cpu_us(self) -> float:
        """Self CPU time of every rank, summed (µs), over all rows of each rank's table."""
        return float(sum(t.self_cpu_us for t in self.tables))

    @property
    def total_self_device_us(self) -> Optional[float]:
        """Device time of every rank, summed (µs); ``None`` when no rank has any."""
        values = [t.self_device_us for t in self.tables if t.self_device_us is not None]
        return float(sum(values)) if values else None

    def row(self, name: str, on_device: Optional[bool] = None) -> RankOpRow:
        """Return the first row of operator ``name`` (the host op or the kernel when ``on_device`` says which).

        Args:
            name: The operator or kernel name, e.g. ``"aten::mm"``.
            on_device: True for the device-kernel row, False for the host op, None for
                whichever comes first.

        Returns:
            The row, with one figure per rank.

        Raises:
            KeyError: No such operator.
        """
        for r in self.rows:
            if r.name == name and (on_device is None or r.on_device == on_device):
                return r
        raise KeyError(f"no row named {name!r}")

    @classmethod
    def from_tables(
        cls,
        tables: Sequence[Table],
        sort_by: SortKey = "device",
        *,
        device_only: bool = False,
        notes: Sequence[str] = (),
    ) -> RankTable:
        """Combine per-rank tables (indexed by rank) into one cross-rank view.

        Args:
            tables: One table per rank, indexed by rank.
            sort_by: A [`SortKey`][neuronprof.typing.SortKey]. Time keys (``"device"``,
                ``"device_total"``, ``"cpu"``, ``"cpu_total"`` and torch's names for them)
                choose the time compared across ranks, sorted by the slowest rank's value;
                a device key falls back to CPU time when no rank has device time.
                ``"calls"`` sorts by the most calls on any rank, ``"name"`` by name.
            device_only: Keep only rows with device time on some rank.
            notes: Remarks to carry with the view.

        Raises:
            ValueError: ``sort_by`` is unknown, or orders something the cross-rank
                view does not compare (``flops``, memory).
        """
        field_name = _sort_field(sort_by)
        use_device = any(t.has_device_time for t in tables)
        if field_name in _RANK_METRICS:
            metric = field_name
            if field_name in _DEVICE_FIELDS and not use_device:
                metric = "self_cpu_us" if field_name == "self_device_us" else "cpu_total_us"
            order = "max"
        elif field_name in ("calls", "name"):
            metric = "self_device_us" if use_device else "self_cpu_us"
            order = field_name
        else:
            raise ValueError(
                f"the cross-rank view cannot sort by {sort_by!r}: use device, device_total, cpu, cpu_total, "
                "calls or name (or sum the ranks to sort by it)"
            )
        if device_only:
            tables = [t.device_only() for t in tables]
        per_key: dict[tuple[Any, ...], list[Optional[float]]] = {}
        calls: dict[tuple[Any, ...], list[int]] = {}
        for rank, table in enumerate(tables):
            for r in table.rows:
                if r.name.startswith("ProfilerStep"):
                    continue
                # A host op and a kernel of the same name (a Triton kernel and its
                # launcher) are two rows, as in each rank's own table.
                key = (r.name, r.on_device, r.input_shapes)
                values = per_key.setdefault(key, [None] * len(tables))
                counts = calls.setdefault(key, [0] * len(tables))
                value = getattr(r, metric)
                values[rank] = (values[rank] or 0.0) + (value or 0.0)
                counts[rank] += r.calls
        rows = []
        for key, values in per_key.items():
            present = sorted(v for v in values if v is not None)
            if not present:
                continue
            mid = len(present) // 2
            median = present[mid] if len(present) % 2 else (present[mid - 1] + present[mid]) / 2
            slowest = max(range(len(values)), key=lambda i: _or_minus_one(values[i]))
            rows.append(
                RankOpRow(
                    name=key[0],
                    metric=cast(RankMetric, metric),
                    values=tuple(values),
                    calls=tuple(calls[key]),
                    min_us=present[0],
                    median_us=median,
                    max_us=present[-1],
                    slowest_rank=slowest,
                    on_device=key[1],
                    input_shapes=key[2],
                )
            )
        if order == "name":
            rows.sort(key=lambda r: r.name)
        elif order == "calls":
            rows.sort(key=lambda r: max(r.calls), reverse=True)
        else:
            rows.sort(key=lambda r: r.max_us, reverse=True)
        all_notes = list(notes)
        if metric != field_name and order == "max":
            all_notes.append(f"no device time recorded; sorted by {_METRIC_WORDS[metric]} time instead")
        return cls(
            rows=tuple(rows),
            world_size=len(tables),
            metric=cast(RankMetric, metric),
            tables=tuple(tables),
            sort_by=cast(RankSort, order),
            notes=tuple(all_notes),
        )

    @renamed_keyword("limit", "row_limit")
    def to_dict(self, row_limit: Optional[int] = None) -> dict[str, Any]:
        """Return the view as a JSON-ready dict with a ``schema`` tag.

        Args:
            row_limit: Keep the first ``row_limit`` rows (and rows of each rank's table);
                ``total_rows`` and the totals still cover every row.
        """
        if row_limit is not None:
            return self.head(row_limit).to_dict()
        return {
            "schema": RANK_TABLE_SCHEMA,
            "world_size": self.world_size,
            "metric": self.metric,
            "sort_by": self.sort_by,
            "notes": list(self.notes),
            "total_rows": self.total_rows,
            "total_self_cpu_us": self.total_self_cpu_us,
            "total_self_device_us": self.total_self_device_us,
            "rows": [r.to_dict() for r in self.rows],
            "tables": [t.to_dict() for t in self.tables],
        }

    @renamed_keyword("limit", "row_limit")
    def to_json(self, indent: Optional[int] = 2, row_limit: Optional[int] = None) -> str:
        """Return the view as JSON; [`RankTable.from_json`][neuronprof.model.RankTable.from_json] reads it back.

        Args:
            indent: Spaces per indentation level; None for one line.
            row_limit: Keep the first ``row_limit`` rows; None for all.

        Returns:
            A JSON document (a ``str``)."""
        return json.dumps(self.to_dict(row_limit), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RankTable:
        """Build a view from [`to_dict`][neuronprof.model.RankTable.to_dict] output.

        Args:
            data: A dict as ``to_dict()`` returns it (e.g. parsed from JSON).

        Raises:
            ValueError: The data is not a neuronprof cross-rank table.
        """
        if not isinstance(data, Mapping) or data.get("schema") != RANK_TABLE_SCHEMA:
            raise ValueError(f"not a neuronprof cross-rank table (expected schema {RANK_TABLE_SCHEMA!r})")
        rows, tables = data.get("rows"), data.get("tables")
        if not isinstance(rows, list) or not isinstance(tables, list):
            raise ValueError("neuronprof cross-rank table JSON needs 'rows' and 'tables' lists")
        try:
            return cls(
                rows=tuple(RankOpRow.from_dict(r) for r in rows),
                world_size=int(data["world_size"]),
                metric=cast(RankMetric, str(data["metric"])),
                tables=tuple(Table.from_dict(t) for t in tables),
                sort_by=cast(RankSort, str(data.get("sort_by", "max"))),
                notes=tuple(str(n) for n in data.get("notes", ())),
                total_rows=_opt_int(data.get("total_rows")),
            )
        except KeyError as exc:
            raise ValueError(f"invalid cross-rank table: missing field {exc.args[0]!r}") from None

    @classmethod
    def from_json(cls, text: Union[str, bytes]) -> RankTable:
        """Read a view written by [`to_json`][neuronprof.model.RankTable.to_json].

        Args:
            text: JSON as ``to_json()`` writes it (``str`` or ``bytes``).

        Raises:
            ValueError: The text is not JSON, or not a neuronprof cross-rank table.
        """
        return cls.from_dict(loads(text))


def _or_minus_one(value: Optional[float]) -> float:
    return -1.0 if value is None else value


# -- comparisons --------------------------------------------------------------------------

if TYPE_CHECKING:
    import os  # noqa: E402
    from pathlib import Path  # noqa: E402

    from neuronprof.analysis.insights import Insights  # noqa: E402

__all__ += ["COMPARISON_SCHEMA", "Comparison", "ComparisonRow"]

COMPARISON_SCHEMA = "neuronprof.comparison/1"


def _opt_float(value: Any) -> Optional[float]:
    return None if value is None else float(value)


def _opt_int(value: Any) -> Optional[int]:
    return None if value is None else int(value)


@dataclass(frozen=True)
class ComparisonRow:
    """One variant of a [`Comparison`][neuronprof.model.Comparison]: its op count, times and speedup.

    Wall-clock figures are per call, timed outside the profiler; op counts and
    self times are per step, from one profiled session of the variant. A value
    that was not measured is ``None``.

    Attributes:
        name: The variant's label, as given to ``compare()``.
        op_calls: Operators called directly by one step (naive RMSNorm: 6;
            ``torch.rms_norm``: 1; a ``torch.compile``d function: 1, its compiled
            region, since torch.compile's guard check is not counted).
        self_cpu_us: Host time spent in operators per step, in microseconds; the
            Python time between operators is left out.
        self_device_us: Device (NeuronCore, TPU, GPU) time per step, in microseconds;
            ``None`` without a device, or when none was recorded.
        wall_us: Median wall-clock time per call, in microseconds, device work included.
        wall_us_min: Fastest timed sample, per call.
        wall_us_max: Slowest timed sample, per call.
        speedup: The baseline's ``wall_us`` divided by this variant's: 2.0 means twice
            as fast as the baseline; 1.0 for the baseline itself.
        compile_s: Seconds taken by the first call (``torch.compile`` compiles here;
            eager code initialises lazily). Kept out of every other figure.
        table: The variant's full profile ([`Table`][neuronprof.Table]).
        wall_samples_us: Every timed sample (per call, microseconds), in the order taken.
        calls_per_sample: Calls timed back to back in each sample, so that short
            calls are timed well above the clock's resolution.
        insights: What to fix first in the variant's profile
            ([`Insights`][neuronprof.analysis.insights.Insights]), from the same session.
    """

    name: str
    op_calls: Optional[float]
    self_cpu_us: Optional[float]
    self_device_us: Optional[float]
    wall_us: float
    wall_us_min: float
    wall_us_max: float
    speedup: float
    compile_s: float
    table: Optional[Table] = None
    wall_samples_us: tuple[float, ...] = ()
    calls_per_sample: int = 1
    insights: Optional[Insights] = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ComparisonRow.name must be a non-empty str, got {self.name!r}")
        if not isinstance(self.wall_samples_us, tuple):
            object.__setattr__(self, "wall_samples_us", tuple(float(v) for v in self.wall_samples_us))
        if self.table is not None and not isinstance(self.table, Table):
            raise TypeError(f"ComparisonRow.table must be a Table or None, got {type(self.table).__name__}")

    def to_dict(self) -> dict[str, Any]:
        """Return the row as a JSON-ready dict (its table nested as a dict)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["table"] = None if self.table is None else self.table.to_dict()
        data["wall_samples_us"] = list(self.wall_samples_us)
        data["insights"] = None if self.insights is None else self.insights.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ComparisonRow:
        """Build a row from [`to_dict`][neuronprof.model.ComparisonRow.to_dict] output.

        Args:
            data: A dict as ``to_dict()`` returns it (e.g. parsed from JSON).

        Raises:
            ValueError: A field is missing, unknown or of the wrong type.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown ComparisonRow field(s): {', '.join(sorted(unknown))}")
        try:
            table = data.get("table")
            found = data.get("insights")
            if found is not None:
                from neuronprof.analysis.insights import Insights

                found = Insights.from_dict(found)
            return cls(
                name=str(data["name"]),
                op_calls=_opt_float(data.get("op_calls")),
                self_cpu_us=_opt_float(data.get("self_cpu_us")),
                self_device_us=_opt_float(data.get("self_device_us")),
                wall_us=float(data["wall_us"]),
                wall_us_min=float(data["wall_us_min"]),
                wall_us_max=float(data["wall_us_max"]),
                speedup=float(data["speedup"]),
                compile_s=float(data["compile_s"]),
                table=None if table is None else Table.from_dict(table),
                wall_samples_us=tuple(float(v) for v in data.get("wall_samples_us", ())),
                calls_per_sample=int(data.get("calls_per_sample", 1)),
                insights=found,
            )
        except KeyError as exc:
            raise ValueError(f"invalid ComparisonRow: missing field {exc.args[0]!r}") from None
        except TypeError as exc:
            raise ValueError(f"invalid ComparisonRow: {exc}") from None


@dataclass(frozen=True)
class Comparison:
    """Variants of one computation measured side by side: what ``neuronprof.compare()`` returns.

    ``print()`` it for an aligned table (the best value of each column is marked
    ``*``); notebooks show it as HTML. Render it with
    [`to_markdown`][neuronprof.model.Comparison.to_markdown], save it with
    [`to_json`][neuronprof.model.Comparison.to_json] (read back with
    [`from_json`][neuronprof.model.Comparison.from_json]) or draw it with
    [`plot`][neuronprof.model.Comparison.plot].

    Attributes:
        rows: One [`ComparisonRow`][neuronprof.model.ComparisonRow] per variant, in
            the order the variants were given.
        baseline: Label of the variant speedups are relative to.
        backend: Backend of the profiled sessions (``"neuron"``, ``"cuda"``, ``"cpu"``...).
        device_label: Label of the device column (``"NEURON"``); ``None`` without a device.
        repeats: Interleaved timing rounds: each variant's wall figures are the
            median, min and max of this many samples.
        warmup: Untimed calls per variant after the first call, before any measurement.
        profiled_steps: Steps recorded in each variant's profiled session.
        notes: Remarks about the measurement (e.g. a noisy machine).
    """

    rows: tuple[ComparisonRow, ...]
    baseline: str
    backend: str = "cpu"
    device_label: Optional[str] = None
    repeats: int = 0
    warmup: int = 0
    profiled_steps: int = 0
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.rows, tuple):
            object.__setattr__(self, "rows", tuple(self.rows))
        if not isinstance(self.notes, tuple):
            object.__setattr__(self, "notes", tuple(self.notes))
        names = [r.name for r in self.rows]
        for r in self.rows:
            if not isinstance(r, ComparisonRow):
                raise TypeError(f"Comparison.rows must hold ComparisonRow objects, got {type(r).__name__}")
        if len(set(names)) != len(names):
            raise ValueError(f"variant labels must be unique, got {names}")
        if self.rows and self.baseline not in names:
            raise ValueError(f"baseline {self.baseline!r} is not one of the variants: {', '.join(names)}")

    # -- queries -------------------------------------------------------------------
    def __iter__(self) -> Iterator[ComparisonRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def names(self) -> list[str]:
        """Return the variant labels in order."""
        return [r.name for r in self.rows]

    def row(self, name: str) -> ComparisonRow:
        """Return the row of the variant labelled ``name``.

        Args:
            name: The variant's label, as given to ``compare()``.

        Raises:
            KeyError: No variant has that label; the message lists them.
        """
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"no variant named {name!r}; variants: {', '.join(self.names())}")

    def finding_differences(self) -> dict[str, tuple[str, ...]]:
        """Return, per variant, the finding kinds that not every variant has.

        Naive RMSNorm against ``torch.rms_norm``: ``{"naive": ("unfused_chain", ...),
        "torch.rms_norm": ()}``. Kinds every variant shares are left out; variants
        without insights are left out.
        """
        kinds = {r.name: tuple(dict.fromkeys(r.insights.kinds())) for r in self.rows if r.insights is not None}
        if not kinds:
            return {}
        shared = set.intersection(*(set(k) for k in kinds.values()))
        return {name: tuple(k for k in ks if k not in shared) for name, ks in kinds.items()}

    @property
    def fastest(self) -> Optional[str]:
        """Label of the variant with the lowest median wall time (None when empty)."""
        if not self.rows:
            return None
        return min(self.rows, key=lambda r: r.wall_us).name

    # -- renderers ----------------------------------------------------------------
    def __str__(self) -> str:
        from neuronprof.render import render_comparison_text

        return render_comparison_text(self)

    def to_text(self) -> str:
        """Return the comparison as aligned plain text (what ``print(cmp)`` shows)."""
        return str(self)

    def to_markdown(self) -> str:
        """Return the comparison as a GitHub-flavoured Markdown table; best values in bold."""
        from neuronprof.render import render_comparison_markdown

        return render_comparison_markdown(self)

    def _repr_html_(self) -> str:
        from neuronprof.render import render_comparison_html

        return render_comparison_html(self)

    def to_dict(self) -> dict[str, Any]:
        """Return the comparison as a JSON-ready dict, including a ``schema`` tag."""
        return {
            "schema": COMPARISON_SCHEMA,
            "baseline": self.baseline,
            "backend": self.backend,
            "device_label": self.device_label,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "profiled_steps": self.profiled_steps,
            "notes": list(self.notes),
            "rows": [r.to_dict() for r in self.rows],
        }

    def to_json(self, indent: Optional[int] = 2) -> str:
        """Return the comparison as JSON, each variant's full table included.

        [`Comparison.from_json`][neuronprof.model.Comparison.from_json] reads it back.

        Args:
            indent: Spaces per indentation level; None for one line.
        """
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        """Build a comparison from [`to_dict`][neuronprof.model.Comparison.to_dict] output.

        Args:
            data: A dict as ``to_dict()`` returns it (e.g. parsed from JSON).

        Raises:
            ValueError: The data is not a neuronprof comparison.
        """
        if not isinstance(data, Mapping) or data.get("schema") != COMPARISON_SCHEMA:
            raise ValueError(f"not a neuronprof comparison (expected schema {COMPARISON_SCHEMA!r})")
        rows = data.get("rows")
        if not isinstance(rows, list):
            raise ValueError("neuronprof comparison JSON has no 'rows' list")
        return cls(
            rows=tuple(ComparisonRow.from_dict(r) for r in rows),
            baseline=str(data.get("baseline", "")),
            backend=str(data.get("backend", "cpu")),
            device_label=data.get("device_label"),
            repeats=int(data.get("repeats", 0)),
            warmup=int(data.get("warmup", 0)),
            profiled_steps=int(data.get("profiled_steps", 0)),
            notes=tuple(str(n) for n in data.get("notes", ())),
        )

    @classmethod
    def from_json(cls, text: Union[str, bytes]) -> Comparison:
        """Read a comparison written by [`to_json`][neuronprof.model.Comparison.to_json].

        Args:
            text: JSON as ``to_json()`` writes it (``str`` or ``bytes``).

        Raises:
            ValueError: The text is not JSON, or not a neuronprof comparison.
        """
        return cls.from_dict(loads(text))

    def to_dataframe(self) -> pandas.DataFrame:
        """Return one DataFrame row per variant (every field except the nested table, samples and findings).

        Raises:
            ImportError: pandas is not installed (``pip install pandas``).
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Comparison.to_dataframe() needs pandas: pip install pandas") from None
        nested = ("table", "wall_samples_us", "insights")
        columns = [f.name for f in dataclasses.fields(ComparisonRow) if f.name not in nested]
        return pd.DataFrame([{c: getattr(r, c) for c in columns} for r in self.rows], columns=columns)

    def report(self, path: Union[str, os.PathLike[str]], *, overwrite: bool = False) -> Path:
        """Write one self-contained HTML page of the comparison, to look at and share.

        The page holds the comparison table (best value per column marked), a bar
        chart of the median wall time per call with its min–max range, and each
        variant's findings and sortable, filterable op table. It opens offline in
        any browser: nothing is loaded from the network.

        Args:
            path: The ``.html`` file to write; missing parent folders are created.
            overwrite: Replace an existing file instead of raising ``FileExistsError``.

        Returns:
            The path written.

        Raises:
            FileExistsError: The file exists and ``overwrite`` is False.
            OSError: The disk refused the write; no partial file is left.
        """
        # Rendering and writing live above the model; they are imported on use.
        from neuronprof.export import save_comparison_report

        return save_comparison_report(self, path, overwrite=overwrite)

    def plot(self, path: Union[str, os.PathLike[str]]) -> Path:
        """Draw the comparison as a bar chart: wall time per call, and self time per step.

        The image format follows the suffix: ``.png`` or ``.svg``. An existing file
        is replaced; a failed write leaves nothing behind. Matplotlib draws off
        screen, without touching ``pyplot`` or its global backend, so this is safe
        in notebooks and on headless machines.

        Args:
            path: The image file to write; missing parent folders are created.

        Returns:
            The path written.

        Raises:
            ValueError: The suffix is neither ``.png`` nor ``.svg``.
            ImportError: matplotlib is not installed (``pip install 'neuronprof[plot]'``).
        """
        from neuronprof.export import save_comparison_plot

        return save_comparison_plot(self, path)
