"""Compare two traces op by op: what got slower, what got faster, what appeared or vanished."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, get_args

from neuronprof import _vocabulary as vocab
from neuronprof._model_base import ResultModel, ResultRow
from neuronprof._model_rows import Shape, _opt_int
from neuronprof.analysis._samples import trace_of, verdicts
from neuronprof.analysis._verdict import Shift
from neuronprof.analysis.trace import Trace, TraceSource, load_trace
from neuronprof.typing import DiffMatch, DiffMetric, DiffStatus, GroupBy, MeasuredTime

if TYPE_CHECKING:
    from neuronprof.model import OpRow, Table
    from neuronprof.render import Block, Format

__all__ = ["DiffRow", "TraceDiff", "diff", "diff_tables"]

DIFF_SCHEMA = "neuronprof.diff/1"


@dataclass(frozen=True)
class DiffRow(ResultRow):
    """One op in both traces (or only one), side by side.

    ``_a`` fields come from the first trace (the baseline), ``_b`` from the
    second. A side where the op does not appear is ``None``.

    Attributes:
        name: Operator or kernel name.
        input_shapes: Input shapes when matched by shape, else ``None``.
        on_device: True for a device kernel row.
        calls_a: Calls in the first trace (a total, also with ``per_step``).
        calls_b: Calls in the second trace.
        self_cpu_us_a: Self CPU time in the first trace (µs).
        self_cpu_us_b: Self CPU time in the second trace (µs).
        self_device_us_a: Self device time in the first trace (µs).
        self_device_us_b: Self device time in the second trace (µs).
        delta_us: Change of the compared time, ``b - a`` (an op missing on one
            side counts as zero there).
        ratio: ``b / a`` of the compared time; ``None`` when a side is missing or zero.
    """

    name: str
    input_shapes: Optional[tuple[Shape, ...]]
    on_device: bool
    calls_a: Optional[int]
    calls_b: Optional[int]
    self_cpu_us_a: Optional[float]
    self_cpu_us_b: Optional[float]
    self_device_us_a: Optional[float]
    self_device_us_b: Optional[float]
    delta_us: float
    ratio: Optional[float]

    _KIND: ClassVar[str] = "diff row"

    @property
    def status(self) -> DiffStatus:
        """Whether the op is in both traces, only the first, or only the second."""
        if self.calls_a is None:
            return "only_b"
        if self.calls_b is None:
            return "only_a"
        return "both"


@dataclass(frozen=True)
class TraceDiff(ResultModel):
    """Two traces compared op by op, largest absolute change first.

    Print it for a text table; [`to_markdown`][neuronprof.analysis.TraceDiff.to_markdown]
    and [`to_json`][neuronprof.analysis.TraceDiff.to_json] render it otherwise.

    Attributes:
        rows: One row per op, sorted by ``|delta_us|``, largest first.
        a: Label of the first trace (its file).
        b: Label of the second trace.
        metric: ``"device"`` or ``"cpu"``: which self time ``delta_us``/``ratio`` compare.
        match: ``"name"`` or ``"shape"``: how ops were paired.
        device_label: Label of the device columns (``"CUDA"``, ``"NEURON"``...), if any.
        steps_a: Profiled steps in the first trace.
        steps_b: Profiled steps in the second trace.
        per_step: True when times were divided by each trace's step count.
        notes: Remarks about the comparison.
        total_rows: How many rows there were before any limit
            ([`head`][neuronprof.analysis.TraceDiff.head]); filled in from ``rows`` when not given.
        step: The verdict on the step's host time (each ``ProfilerStep#N`` span a
            sample): [`Shift`][neuronprof.analysis.Shift] of B against A; ``None``
            when there is none (a note says why: no steps, a folder of ranks...).
        step_device: The verdict on device time per step; ``None`` without device time in both.
        op_shifts: ``(name, Shift)`` of the ops that matter (see ``diff``): each op's
            compared self time per step.
    """

    rows: tuple[DiffRow, ...]
    a: str
    b: str
    metric: MeasuredTime = "cpu"
    match: GroupBy = "name"
    device_label: Optional[str] = None
    steps_a: int = 0
    steps_b: int = 0
    per_step: bool = False
    notes: tuple[str, ...] = field(default=())
    total_rows: Optional[int] = None
    step: Optional[Shift] = None
    step_device: Optional[Shift] = None
    op_shifts: tuple[tuple[str, Shift], ...] = ()
    # The totals of every row, taken before any limit. Not __init__ parameters: filled in from
    # the rows, carried through head() and the JSON form by the base (``_TOTALS``).
    _total_a_us: Optional[float] = field(default=None, init=False, repr=False)
    _total_b_us: Optional[float] = field(default=None, init=False, repr=False)

    SCHEMA: ClassVar[str] = DIFF_SCHEMA
    _ROW_TYPE: ClassVar[Optional[type]] = DiffRow
    _KIND: ClassVar[str] = "a neuronprof diff"
    _TOTALS: ClassVar[tuple[str, ...]] = ("total_rows", "_total_a_us", "_total_b_us")

    def __post_init__(self) -> None:
        self._as_tuples("rows", "notes")
        if self.total_rows is None:
            object.__setattr__(self, "total_rows", len(self.rows))
        for side in ("a", "b"):
            if getattr(self, f"_total_{side}_us") is None:
                times = (getattr(r, f"self_{self.metric}_us_{side}") for r in self._counted())
                object.__setattr__(self, f"_total_{side}_us", float(sum(t or 0.0 for t in times)))

    @property
    def total_a_us(self) -> float:
        """Compared time of the first trace (µs): every op's, or only the kernels' for device time.

        Counted over every row, also after [`head`][neuronprof.analysis.TraceDiff.head].
        """
        assert self._total_a_us is not None  # set by __post_init__
        return self._total_a_us

    @property
    def total_b_us(self) -> float:
        """Compared time of the second trace (µs), counted as for ``total_a_us``."""
        assert self._total_b_us is not None  # set by __post_init__
        return self._total_b_us

    def _counted(self) -> tuple[DiffRow, ...]:
        # Kernel rows and the ops that launched them carry the same device time:
        # count the kernels only, as torch.profiler's device total does.
        if self.metric == "device":
            return tuple(vocab.device_counted(self.rows))
        return self.rows

    def op_shift(self, name: str) -> Optional[Shift]:
        """The verdict on one op (``None`` when it is not among the ops judged).

        Args:
            name: The op's name, e.g. ``"aten::mm"``.
        """
        return dict(self.op_shifts).get(name)

    # -- the model's own parts of the shared verbs (see neuronprof._model_base) ---------------
    def _view(self, fmt: Format, row_limit: Optional[int]) -> list[Block]:
        from neuronprof.analysis.render import diff_view

        return diff_view(self, fmt, row_limit)

    def _data(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "metric": self.metric,
            "match": self.match,
            "device_label": self.device_label,
            "steps_a": self.steps_a,
            "steps_b": self.steps_b,
            "per_step": self.per_step,
            "notes": list(self.notes),
            "total_rows": self.total_rows,
            "total_a_us": self.total_a_us,
            "total_b_us": self.total_b_us,
            "step": None if self.step is None else self.step.to_dict(),
            "step_device": None if self.step_device is None else self.step_device.to_dict(),
            "op_shifts": [{"name": name, **s.to_dict()} for name, s in self.op_shifts],
            "rows": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def _from_data(cls, data: Mapping[str, Any]) -> TraceDiff:
        metric = data.get("metric", "cpu")
        match = data.get("match", "name")
        if metric not in ("device", "cpu") or match not in ("name", "shape"):
            raise ValueError(f"invalid metric/match {metric!r}/{match!r}")
        return cls(
            rows=tuple(DiffRow.from_dict(r) for r in data["rows"]),
            a=str(data.get("a", "")),
            b=str(data.get("b", "")),
            metric=metric,
            match=match,
            device_label=data.get("device_label"),
            steps_a=int(data.get("steps_a", 0)),
            steps_b=int(data.get("steps_b", 0)),
            per_step=bool(data.get("per_step", False)),
            notes=tuple(data.get("notes", ())),
            total_rows=_opt_int(data.get("total_rows")),
            step=_shift_or_none(data.get("step")),
            step_device=_shift_or_none(data.get("step_device")),
            op_shifts=tuple(
                (str(o["name"]), Shift.from_dict({k: v for k, v in o.items() if k != "name"}))
                for o in data.get("op_shifts", ())
            ),
        )


def _shift_or_none(data: Any) -> Optional[Shift]:
    return None if data is None else Shift.from_dict(data)


def diff(
    a: TraceSource,
    b: TraceSource,
    *,
    match: DiffMatch = "auto",
    metric: DiffMetric = "auto",
    per_step: bool = False,
    confidence: float = 0.95,
) -> TraceDiff:
    """Compare two traces op by op, largest absolute change of self time first, with verdicts.

    Every recorded step is a sample (a folder of runs adds the steps of each): the
    step's host time, its device time and each op's self time in it. The verdicts
    ([`Shift`][neuronprof.analysis.Shift]: faster, slower, no measurable change or
    cannot tell, with the ratio's confidence interval) are for the step and for the
    ops that matter: the ten ops with the most compared time per step (on either side,
    at least 1 % of the step) that ran in every recorded step; a note names those left
    without a verdict and says why.

    Args:
        a: The baseline: a trace file or folder, or a loaded [`Trace`][neuronprof.analysis.Trace];
            or a session (``Session.trace()`` is read).
        b: The trace to compare with it.
        match: How to pair ops (see [`DiffMatch`][neuronprof.typing.DiffMatch]).
        metric: Which self time to compare (see [`DiffMetric`][neuronprof.typing.DiffMetric]).
        per_step: Divide each trace's times by its number of profiled steps, for
            traces that profiled different numbers of steps (calls stay totals).
        confidence: Confidence level of the verdicts' intervals (0.95 for 95 %).

    Returns:
        One row per op (or op and shape), largest absolute change of self time first;
        times in microseconds; the verdicts in ``step``, ``step_device`` and ``op_shifts``.

    Raises:
        TraceError: A trace cannot be read.
        ValueError: Unknown ``match`` or ``metric``; ``metric="device"`` when a
            trace has no device time; ``per_step`` when a trace has no steps;
            ``confidence`` out of range.
    """
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be at least 0.5 and below 1, got {confidence!r}")
    if match not in get_args(DiffMatch):
        raise ValueError(f"unknown match {match!r}; use one of {', '.join(get_args(DiffMatch))}")
    if metric not in get_args(DiffMetric):
        raise ValueError(f"unknown metric {metric!r}; use one of {', '.join(get_args(DiffMetric))}")
    ta, tb = load_trace(trace_of(a)), load_trace(trace_of(b))
    shapes_in_both = _has_shapes(ta) and _has_shapes(tb)
    if match == "shape" and not shapes_in_both:
        raise ValueError("match='shape' needs both traces recorded with record_shapes=True; use match='name'")
    group: GroupBy = "shape" if match == "shape" or (match == "auto" and shapes_in_both) else "name"
    rows_a, rows_b = ta.rows(group), tb.rows(group)
    dev_a = any(r.self_device_us is not None for r in rows_a)
    dev_b = any(r.self_device_us is not None for r in rows_b)
    if metric == "device" and not (dev_a and dev_b):
        raise ValueError("metric='device' needs device time in both traces; use metric='cpu'")
    use: MeasuredTime = "device" if metric == "device" or (metric == "auto" and dev_a and dev_b) else "cpu"
    if per_step and (ta.steps == 0 or tb.steps == 0):
        raise ValueError("per_step=True needs ProfilerStep annotations in both traces")
    scale_a = 1.0 / ta.steps if per_step else 1.0
    scale_b = 1.0 / tb.steps if per_step else 1.0
    rows = _paired(rows_a, rows_b, use, scale_a, scale_b)

    notes: list[str] = []
    if not per_step and ta.steps and tb.steps and ta.steps != tb.steps:
        notes.append(
            f"the traces profiled {ta.steps} and {tb.steps} steps; per_step=True (--per-step) compares per step"
        )
    if per_step:
        notes.append("times are per profiled step; calls are totals")
    for side, t in (("a", ta), ("b", tb)):
        if t.ranks:
            # The same rule as `summarize --ranks sum`: a sum of ranks is never silent.
            notes.append(
                f"{side} ({_label(t)}) is summed over {sum(1 for r in t.ranks if r.files)} ranks; "
                "diff one rank's trace file to compare rank by rank"
            )
    if match == "auto" and group == "name" and (_has_shapes(ta) or _has_shapes(tb)):
        notes.append("matched by name: only one trace recorded input shapes")
    step, step_device, op_shifts, verdict_notes = verdicts(ta, tb, use, confidence)
    notes += verdict_notes
    return TraceDiff(
        rows=tuple(rows),
        a=ta.source or "(a session)",
        b=tb.source or "(a session)",
        metric=use,
        match=group,
        device_label=ta.device_label or tb.device_label,
        steps_a=ta.steps,
        steps_b=tb.steps,
        per_step=per_step,
        notes=tuple(notes),
        step=step,
        step_device=step_device,
        op_shifts=op_shifts,
    )


def diff_tables(a: Table, b: Table, *, a_label: str, b_label: str) -> TraceDiff:
    """Compare two op tables per step, as ``diff(..., per_step=True)`` compares two traces, without verdicts.

    The op rows of [`Comparison`][neuronprof.model.Comparison] variants (each from one
    profiled session) are paired by name, or by name and input shapes when both were
    grouped by shape; self device time is compared when both have it, else self CPU
    time. A table keeps no steps' samples, so there is no verdict per op or per step
    (a comparison's own verdict is on its wall-time samples).

    Args:
        a: The baseline's table.
        b: The table to compare with it.
        a_label: What to call A (a variant's label).
        b_label: What to call B.

    Returns:
        One row per op, largest absolute change first; times in µs per profiled step
        (a table without steps: its totals), calls as totals.
    """
    shapes = any(r.input_shapes is not None for r in a.rows) and any(r.input_shapes is not None for r in b.rows)
    use: MeasuredTime = "device" if a.has_device_time and b.has_device_time else "cpu"
    per_step = a.steps > 0 and b.steps > 0
    notes = ["times are per profiled step; calls are totals"] if per_step else []
    if per_step and a.steps != b.steps:
        notes.append(f"A profiled {a.steps} steps and B {b.steps}")
    rows = _paired(a.rows, b.rows, use, 1.0 / a.steps if per_step else 1.0, 1.0 / b.steps if per_step else 1.0)
    return TraceDiff(
        rows=tuple(rows),
        a=a_label,
        b=b_label,
        metric=use,
        match="shape" if shapes else "name",
        device_label=a.device_label or b.device_label,
        steps_a=a.steps,
        steps_b=b.steps,
        per_step=per_step,
        notes=tuple(notes),
    )


def _paired(
    rows_a: Sequence[OpRow], rows_b: Sequence[OpRow], use: MeasuredTime, scale_a: float, scale_b: float
) -> list[DiffRow]:
    """Each op of either side beside its match on the other, largest absolute change first."""
    index_a = {_key(r): r for r in rows_a}
    index_b = {_key(r): r for r in rows_b}
    keys = list(index_a) + [k for k in index_b if k not in index_a]
    rows = [_pair(index_a.get(k), index_b.get(k), use, scale_a, scale_b) for k in keys]
    rows.sort(key=lambda r: (-abs(r.delta_us), r.name))
    return rows


def _label(trace: Trace) -> str:
    folders = sorted({os.path.dirname(f) or "." for f in trace.files})
    return folders[0] if len(folders) == 1 else trace.source


def _has_shapes(trace: Trace) -> bool:
    return any(o.input_dims for o in trace.ops if not o.on_device)


def _key(row: OpRow) -> tuple[Any, ...]:
    return (row.name, row.on_device, row.input_shapes, row.input_dtypes)


def _scaled(value: Optional[float], scale: float) -> Optional[float]:
    return None if value is None else value * scale


def _pair(ra: Optional[OpRow], rb: Optional[OpRow], metric: MeasuredTime, scale_a: float, scale_b: float) -> DiffRow:
    ref = ra if ra is not None else rb
    assert ref is not None
    calls_a = None if ra is None else ra.calls
    calls_b = None if rb is None else rb.calls
    cpu_a = None if ra is None else ra.self_cpu_us * scale_a
    cpu_b = None if rb is None else rb.self_cpu_us * scale_b
    dev_a = None if ra is None else _scaled(ra.self_device_us, scale_a)
    dev_b = None if rb is None else _scaled(rb.self_device_us, scale_b)
    va, vb = (dev_a, dev_b) if metric == "device" else (cpu_a, cpu_b)
    delta = (vb or 0.0) - (va or 0.0)
    ratio = vb / va if va and vb is not None and va > 0 else None
    return DiffRow(
        name=ref.name,
        input_shapes=ref.input_shapes,
        on_device=ref.on_device,
        calls_a=calls_a,
        calls_b=calls_b,
        self_cpu_us_a=cpu_a,
        self_cpu_us_b=cpu_b,
        self_device_us_a=dev_a,
        self_device_us_b=dev_b,
        delta_us=delta,
        ratio=ratio,
    )
