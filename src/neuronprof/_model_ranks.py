"""The cross-rank view: [`RankTable`][neuronprof.model.RankTable] and its [`RankOpRow`][neuronprof.model.RankOpRow].

Part of [`neuronprof.model`][neuronprof.model], which re-exports every public name;
import from there.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, cast

from neuronprof import _vocabulary as vocab
from neuronprof._model_base import ResultModel
from neuronprof._model_rows import (
    _DEVICE_FIELDS,
    RANK_TABLE_SCHEMA,
    Shape,
    _opt_int,
    _sort_field,
    row_from_dict,
    row_to_dict,
)
from neuronprof._vocabulary import is_step_row, limit_rows
from neuronprof.typing import RankMetric, RankSort, SortKey

if TYPE_CHECKING:
    from neuronprof.model import Table
    from neuronprof.render import Block, Format

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
        slowest_rank: The rank the others wait for at this op. For an op of the ranks' own
            work, the rank with the largest value. For a collective (``c10d::*``,
            ``gloo:*``, ``nccl:*``, a communication kernel...: its time is mostly waiting
            for the others) never the largest, which is the rank that waited most: the
            view's [`straggler`][neuronprof.model.RankTable.straggler], or, when the
            traces hold no steps to tell it, the rank with the least time in it (the
            last to arrive waits least).
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
class RankTable(ResultModel):
    """Per-op statistics of every rank side by side: what ``s.table(ranks="all")`` returns.

    By default rows are sorted by ``max_us``, largest first, so the op with the most
    time on any rank comes first (for a collective that time is mostly waiting);
    ``slowest_rank`` names the rank to look at. Rows are
    keyed by name, host/device (``on_device``) and, when grouped by shape, input
    shapes: a host op and a kernel of the same name are never merged.

    The [`straggler`][neuronprof.model.RankTable.straggler] is the rank the others
    wait for: the one with the most compute per step, a rank's compute being its
    step time less the time it spends in collectives
    ([`Table.compute_us`][neuronprof.Table.compute_us]). The time in a collective does
    not decide it: the rank with the longest is most often the one that waited most.

    Attributes:
        rows: One [`RankOpRow`][neuronprof.model.RankOpRow] per operator.
        world_size: Number of ranks.
        metric: The time compared across ranks: ``"self_device_us"`` (default when
            any rank has device time), ``"self_cpu_us"``, ``"device_total_us"`` or ``"cpu_total_us"``.
        tables: Each rank's own [`Table`][neuronprof.Table], indexed by rank.
        sort_by: How rows are ordered: ``"max"`` (the largest value of ``metric`` on
            any rank, largest first), ``"calls"`` (most calls on any rank) or ``"name"``.
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

    SCHEMA: ClassVar[str] = RANK_TABLE_SCHEMA
    _ROW_TYPE: ClassVar[Optional[type]] = RankOpRow
    _KIND: ClassVar[str] = "a neuronprof cross-rank table"
    _TOTALS: ClassVar[tuple[str, ...]] = ("total_rows",)
    # print() shows the 20 rows with the most time; to_text(row_limit=None) shows every row.
    _STR_ROW_LIMIT: ClassVar[Optional[int]] = 20

    def __post_init__(self) -> None:
        self._as_tuples("rows", "tables", "notes")
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
        return self._carry(rows=tuple(rows), tables=tables)

    def _view(self, fmt: Format, row_limit: Optional[int]) -> list[Block]:
        from neuronprof.render import rank_view

        return rank_view(self.head(row_limit), fmt)

    @property
    def sort_description(self) -> str:
        """What the rows are sorted by, in words (the renderers print it)."""
        if self.sort_by == "name":
            return "sorted by name"
        if self.sort_by == "calls":
            return "sorted by calls (the most on any rank)"
        # A collective's largest value is the rank that waited most, not its slowest rank.
        return f"sorted by the largest {_METRIC_WORDS.get(self.metric, self.metric)} time on any rank"

    @property
    def compute_per_step_us(self) -> tuple[Optional[float], ...]:
        """Per rank (indexed by rank), its mean compute per step (µs): step time less time in collectives.

        ``None`` for a rank whose table has no steps (or was made before the figure was
        recorded). See [`Table.compute_us`][neuronprof.Table.compute_us].
        """
        return _per_step(self.tables, "compute_us")

    @property
    def collective_wait_per_step_us(self) -> tuple[Optional[float], ...]:
        """Per rank (indexed by rank), its mean time in collectives per step (µs); ``None`` without steps."""
        return _per_step(self.tables, "collective_wait_us")

    @property
    def straggler(self) -> Optional[int]:
        """The rank the others wait for: the most compute per step.

        Compute is step time less the time in collectives
        ([`compute_per_step_us`][neuronprof.model.RankTable.compute_per_step_us]).
        ``None`` when fewer than two ranks recorded steps, or when two ranks share the
        largest figure. The time in a collective does not decide it: the rank with the
        longest is most often the one that waited most.
        """
        return vocab.straggler(self.compute_per_step_us)

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
        if on_device is None:
            return cast(RankOpRow, super().row(name))
        for r in self.rows:
            if r.name == name and r.on_device == on_device:
                return r
        raise KeyError(f"no {'device' if on_device else 'host'} row named {name!r}")

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
                choose the time compared across ranks, sorted by its largest value on any rank;
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
                if is_step_row(r.name):
                    continue
                # A host op and a kernel of the same name (a Triton kernel and its
                # launcher) are two rows, as in each rank's own table.
                key = (r.name, r.on_device, r.input_shapes)
                values = per_key.setdefault(key, [None] * len(tables))
                counts = calls.setdefault(key, [0] * len(tables))
                value = getattr(r, metric)
                values[rank] = (values[rank] or 0.0) + (value or 0.0)
                counts[rank] += r.calls
        straggler = vocab.straggler(_per_step(tables, "compute_us"))
        rows = []
        for key, values in per_key.items():
            present = [v for v in values if v is not None]
            if not present:
                continue
            rows.append(
                RankOpRow(
                    name=key[0],
                    metric=cast(RankMetric, metric),
                    values=tuple(values),
                    calls=tuple(calls[key]),
                    min_us=min(present),
                    median_us=statistics.median(present),
                    max_us=max(present),
                    slowest_rank=_slowest_rank(values, key[0], key[1], straggler),
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

    def _data(self) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "metric": self.metric,
            "sort_by": self.sort_by,
            "notes": list(self.notes),
            "total_rows": self.total_rows,
            "total_self_cpu_us": self.total_self_cpu_us,
            "total_self_device_us": self.total_self_device_us,
            # Derived from the tables (read back from them, not from here).
            "straggler": self.straggler,
            "compute_per_step_us": list(self.compute_per_step_us),
            "rows": [r.to_dict() for r in self.rows],
            "tables": [t.to_dict() for t in self.tables],
        }

    @classmethod
    def _from_data(cls, data: Mapping[str, Any]) -> RankTable:
        # Table lives in neuronprof.model, which imports this module: imported on use.
        from neuronprof.model import Table

        tables = data.get("tables")
        if not isinstance(tables, list):
            raise ValueError(f"{cls._KIND} needs a 'tables' list in its JSON")
        try:
            return cls(
                rows=tuple(RankOpRow.from_dict(r) for r in data["rows"]),
                world_size=int(data["world_size"]),
                metric=cast(RankMetric, str(data["metric"])),
                tables=tuple(Table.from_dict(t) for t in tables),
                sort_by=cast(RankSort, str(data.get("sort_by", "max"))),
                notes=tuple(str(n) for n in data.get("notes", ())),
                total_rows=_opt_int(data.get("total_rows")),
            )
        except KeyError as exc:
            raise ValueError(f"invalid cross-rank table: missing field {exc.args[0]!r}") from None


def _per_step(tables: Sequence[Table], figure: str) -> tuple[Optional[float], ...]:
    """Per rank, the table's ``figure`` (µs) per step; ``None`` without steps or without the figure."""
    values = [getattr(t, figure) for t in tables]
    return tuple(None if v is None or t.steps <= 0 else v / t.steps for v, t in zip(values, tables))


def _slowest_rank(values: Sequence[Optional[float]], name: str, on_device: bool, straggler: Optional[int]) -> int:
    """The rank the others wait for at one op (see ``RankOpRow.slowest_rank``)."""
    ran = [i for i, v in enumerate(values) if v is not None]
    if vocab.is_collective(name, vocab.K_DEVICE if on_device else vocab.K_OP):
        # A collective's time is waiting: its largest value is the rank that waited most.
        if straggler is not None and straggler in ran:
            return straggler
        return min(ran, key=lambda i: values[i] or 0.0)
    return max(ran, key=lambda i: values[i] or 0.0)
