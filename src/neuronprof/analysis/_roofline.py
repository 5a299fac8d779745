"""Roofline analysis of a trace: is each op compute-bound or memory-bound, and how close to the roof?

For every operator call signature with recorded shapes, the FLOPs and bytes
moved are estimated (see [`op_cost`][neuronprof.analysis.op_cost], or taken from
the trace when it was recorded with ``with_flops=True``). Their ratio, the
arithmetic intensity, places the op left (memory-bound) or right
(compute-bound) of the device's ridge point ``peak FLOP/s ÷ peak bytes/s``.
Dividing by the measured time gives the achieved FLOP/s and bytes/s, shown as
a percentage of the roof at that intensity.

About 600 lines, kept in one module on purpose: the model (``Roofline``,
``RooflineRow``), its JSON form and the one function that places ops on the roof
are one formula's input, output and arithmetic; the peaks (and which preset a run's
own device is) and the FLOP estimates live in their own modules.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union, cast, get_args

from neuronprof._deprecation import renamed_keyword
from neuronprof._model_base import ResultModel, ResultRow
from neuronprof._model_rows import Shape, _opt_int
from neuronprof.analysis._peaks import DevicePeak, device_peak, resolve_peaks
from neuronprof.analysis.errors import TraceError
from neuronprof.analysis.flops import op_cost
from neuronprof.analysis.trace import Trace, TraceSource, load_trace
from neuronprof.typing import Bound, DevicePreset, FlopsSource, MeasuredTime, PeakSource, TimeSource

if TYPE_CHECKING:
    from neuronprof.render import Block, Format

__all__ = ["Roofline", "RooflineRow", "roofline"]

ROOFLINE_SCHEMA = "neuronprof.roofline/1"


@dataclass(frozen=True)
class RooflineRow(ResultRow):
    """One operator and input signature on the roofline; totals over all its calls.

    Attributes:
        name: Operator name.
        input_shapes: Input shapes as recorded (``()`` for scalars and tensor lists).
        input_dtypes: Input dtypes as recorded.
        calls: Number of calls.
        time_us: Measured self time over all calls, in microseconds.
        time_source: ``"device"`` or ``"cpu"``: which time ``time_us`` is.
        flops: Floating-point operations over all calls.
        bytes: Bytes moved over all calls.
        flops_source: ``"trace"`` (recorded with ``with_flops=True``), ``"formula"``, or
            ``"counters"`` (hardware counters of Neuron's own profile).
        intensity: Arithmetic intensity, FLOP per byte.
        peak_flops_per_s: The compute roof used for this op's dtypes.
        attainable_flops_per_s: ``min(peak FLOP/s, intensity × peak bytes/s)``.
        achieved_flops_per_s: ``flops / time``.
        achieved_bytes_per_s: ``bytes / time``.
        bound: ``"memory"`` left of the ridge point, ``"compute"`` right of it.
        pct_of_peak: Achieved as a percentage of the roof that bounds it
            (bandwidth for memory-bound ops, compute for compute-bound ops).
    """

    name: str
    input_shapes: Optional[tuple[Shape, ...]]
    input_dtypes: Optional[tuple[str, ...]]
    calls: int
    time_us: float
    time_source: MeasuredTime
    flops: float
    bytes: float
    flops_source: FlopsSource
    intensity: float
    peak_flops_per_s: float
    attainable_flops_per_s: float
    achieved_flops_per_s: Optional[float]
    achieved_bytes_per_s: Optional[float]
    bound: Bound
    pct_of_peak: Optional[float]

    _KIND: ClassVar[str] = "roofline row"


@dataclass(frozen=True)
class Roofline(ResultModel):
    """Every op with a FLOPs/bytes estimate, placed on a device's roofline.

    Print it for a text table; [`to_markdown`][neuronprof.analysis.Roofline.to_markdown],
    [`to_json`][neuronprof.analysis.Roofline.to_json] and
    [`plot`][neuronprof.analysis.Roofline.plot] render it otherwise.

    Attributes:
        rows: Ops by measured time, largest first.
        device: The peaks the ops are compared against.
        time_source: ``"device"`` or ``"cpu"``: which measured time the rates use.
        source: The trace it was computed from.
        notes: Remarks (ops skipped, time source, ...).
        total_rows: How many rows there were before any limit
            ([`head`][neuronprof.analysis.Roofline.head]); filled in from ``rows`` when not given.
        device_label: The device the run was on, as its trace or session names it
            (``"CUDA"``, ``"HIP"``, ``"NEURON"``...); ``None`` for the CPU only (a trace
            without device events).
        device_name: That device's model, when the trace or session records it
            (``"NVIDIA H200"``); ``None`` otherwise.
        peak_source: Where ``device``'s peaks come from: ``"run"`` (the preset of the
            device the run was on), ``"preset"`` (named with ``device=``, maybe another
            machine's) or ``"custom"`` (see [`PeakSource`][neuronprof.typing.PeakSource]).
    """

    rows: tuple[RooflineRow, ...]
    device: DevicePeak
    time_source: MeasuredTime = "device"
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    total_rows: Optional[int] = None
    device_label: Optional[str] = None
    device_name: Optional[str] = None
    peak_source: PeakSource = "preset"
    # The totals of every row, taken before any limit: FLOPs, bytes, time, and the time of the
    # memory- and compute-bound rows. Not __init__ parameters: filled in from the rows, carried
    # through head() and the JSON form by the base (``_TOTALS``).
    _total_flops: Optional[float] = field(default=None, init=False, repr=False)
    _total_bytes: Optional[float] = field(default=None, init=False, repr=False)
    _total_time_us: Optional[float] = field(default=None, init=False, repr=False)
    _memory_bound_time_us: Optional[float] = field(default=None, init=False, repr=False)
    _compute_bound_time_us: Optional[float] = field(default=None, init=False, repr=False)

    SCHEMA: ClassVar[str] = ROOFLINE_SCHEMA
    _ROW_TYPE: ClassVar[Optional[type]] = RooflineRow
    _KIND: ClassVar[str] = "a neuronprof roofline"
    _TOTALS: ClassVar[tuple[str, ...]] = (
        "total_rows",
        "_total_flops",
        "_total_bytes",
        "_total_time_us",
        "_memory_bound_time_us",
        "_compute_bound_time_us",
    )

    def __post_init__(self) -> None:
        self._as_tuples("rows", "notes")
        if self.total_rows is None:
            object.__setattr__(self, "total_rows", len(self.rows))
        sums = {
            "_total_flops": lambda r: r.flops,
            "_total_bytes": lambda r: r.bytes,
            "_total_time_us": lambda r: r.time_us,
            "_memory_bound_time_us": lambda r: r.time_us if r.bound == "memory" else 0.0,
            "_compute_bound_time_us": lambda r: r.time_us if r.bound == "compute" else 0.0,
        }
        for name, value in sums.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, float(sum(value(r) for r in self.rows)))

    # -- totals -------------------------------------------------------------------
    @property
    def total_flops(self) -> float:
        """FLOPs of all rows (also after [`head`][neuronprof.analysis.Roofline.head])."""
        return _set(self._total_flops)

    @property
    def total_bytes(self) -> float:
        """Bytes moved by all rows."""
        return _set(self._total_bytes)

    @property
    def total_time_us(self) -> float:
        """Measured time of all rows, in microseconds."""
        return _set(self._total_time_us)

    @property
    def intensity(self) -> Optional[float]:
        """Arithmetic intensity of all rows together, FLOP/byte."""
        moved = self.total_bytes
        return self.total_flops / moved if moved > 0 else None

    @property
    def bound(self) -> Optional[Bound]:
        """Which roof limits the time of these ops: the bound of the rows holding most of the time."""
        if not self.total_rows:
            return None
        return "memory" if _set(self._memory_bound_time_us) >= _set(self._compute_bound_time_us) else "compute"

    # -- the model's own parts of the shared verbs (see neuronprof._model_base) ---------------
    def _view(self, fmt: Format, row_limit: Optional[int]) -> list[Block]:
        from neuronprof.analysis.render import roofline_view

        return roofline_view(self, fmt, row_limit)

    def _data(self) -> dict[str, Any]:
        return {
            "device": self.device.to_dict(),
            "time_source": self.time_source,
            "source": self.source,
            "device_label": self.device_label,
            "device_name": self.device_name,
            "peak_source": self.peak_source,
            "notes": list(self.notes),
            "bound": self.bound,
            "total_rows": self.total_rows,
            "total_flops": self.total_flops,
            "total_bytes": self.total_bytes,
            "total_time_us": self.total_time_us,
            "memory_bound_time_us": self._memory_bound_time_us,
            "compute_bound_time_us": self._compute_bound_time_us,
            "rows": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def _from_data(cls, data: Mapping[str, Any]) -> Roofline:
        time_source = data.get("time_source", "device")
        if time_source not in ("device", "cpu"):
            raise ValueError(f"invalid time_source {time_source!r}")
        peak_source = data.get("peak_source", "preset")
        if peak_source not in get_args(PeakSource):
            raise ValueError(f"invalid peak_source {peak_source!r}")
        try:
            device = DevicePeak(**data["device"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"neuronprof roofline JSON has no valid 'device': {exc}") from None
        return cls(
            rows=tuple(RooflineRow.from_dict(r) for r in data["rows"]),
            device=device,
            time_source=time_source,
            source=str(data.get("source", "")),
            notes=tuple(data.get("notes", ())),
            total_rows=_opt_int(data.get("total_rows")),
            device_label=data.get("device_label") if isinstance(data.get("device_label"), str) else None,
            device_name=data.get("device_name") if isinstance(data.get("device_name"), str) else None,
            peak_source=peak_source,
        )

    def plot(self, path: Union[str, os.PathLike[str]], *, label_top: int = 8) -> None:
        """Draw the roofline and the ops on it into a PNG or SVG file (chosen by the suffix).

        Each op is a point at (intensity, achieved FLOP/s), its area growing with
        its time; the ``label_top`` ops with the most time are labelled.

        Args:
            path: The file to write; its suffix (``.png`` or ``.svg``) chooses the format.
            label_top: How many ops, those with the most time, get a name label.

        Raises:
            ImportError: matplotlib is not installed (``pip install neuronprof[plot]``).
            ValueError: The suffix is not ``.png`` or ``.svg``.
        """
        # Drawing and writing live above the model; they are imported on use.
        from neuronprof.export import save_roofline_plot

        save_roofline_plot(self, path, label_top=label_top)


def _set(value: Optional[float]) -> float:
    assert value is not None  # every total is set by Roofline.__post_init__
    return value


def place_on_roof(
    name: str,
    *,
    input_shapes: Optional[tuple[Shape, ...]],
    input_dtypes: Optional[tuple[str, ...]],
    calls: int,
    time_us: float,
    time_source: MeasuredTime,
    flops: float,
    moved: float,
    flops_source: FlopsSource,
    peak: DevicePeak,
) -> RooflineRow:
    """Place one op (or one device profile) on ``peak``'s roofline: the one roofline formula of neuronprof.

    The roofline model (Williams, Waterman and Patterson, "Roofline: an insightful
    visual performance model", CACM 2009): intensity ``I = flops / bytes`` (FLOP/byte);
    the compute roof is ``peak.peak_for(input_dtypes)`` (the 16-bit roof without
    dtypes); attainable ``min(roof, I × peak bytes/s)``; the op is compute-bound when
    ``I × peak bytes/s >= roof`` (right of the ridge point), else memory-bound. Achieved
    rates are ``flops / time`` and ``bytes / time``; ``pct_of_peak`` is achieved FLOP/s
    over attainable, or, for an op without FLOPs (a pure copy), achieved bytes/s over
    the peak bandwidth. No time: no achieved rates and no percentage.

    Args:
        name: Row name (the op, or a NEFF's label).
        input_shapes: Input shapes as recorded, or ``None``.
        input_dtypes: Input dtypes as recorded, or ``None``; they choose the compute roof.
        calls: Number of calls.
        time_us: Measured time over all calls, in microseconds.
        time_source: ``"device"`` or ``"cpu"``: which time ``time_us`` is.
        flops: FLOPs over all calls.
        moved: Bytes moved over all calls; must be positive.
        flops_source: Where ``flops`` came from (see [`RooflineRow`][neuronprof.analysis.RooflineRow]).
        peak: The device's roofs.

    Raises:
        ValueError: ``moved`` is not positive (no intensity without bytes).
    """
    if not moved > 0:
        raise ValueError(f"a roofline row needs a positive byte count, got {moved!r}")
    intensity = flops / moved
    roof = peak.peak_for(input_dtypes)
    attainable = min(roof, intensity * peak.bytes_per_s)
    seconds = time_us / 1e6
    achieved_f = flops / seconds if seconds > 0 else None
    achieved_b = moved / seconds if seconds > 0 else None
    bound: Bound = "compute" if intensity * peak.bytes_per_s >= roof else "memory"
    pct = None
    if achieved_f is not None and attainable > 0 and flops > 0:
        pct = 100.0 * achieved_f / attainable
    elif achieved_b is not None and bound == "memory":
        pct = 100.0 * achieved_b / peak.bytes_per_s  # a pure copy: all bandwidth, no FLOPs
    return RooflineRow(
        name=name,
        input_shapes=input_shapes,
        input_dtypes=input_dtypes,
        calls=calls,
        time_us=time_us,
        time_source=time_source,
        flops=flops,
        bytes=moved,
        flops_source=flops_source,
        intensity=intensity,
        peak_flops_per_s=roof,
        attainable_flops_per_s=attainable,
        achieved_flops_per_s=achieved_f,
        achieved_bytes_per_s=achieved_b,
        bound=bound,
        pct_of_peak=pct,
    )


@renamed_keyword("time", "time_source")
def roofline(
    source: TraceSource,
    device: Optional[Union[DevicePreset, DevicePeak]] = None,
    *,
    peak_flops: Optional[float] = None,
    peak_bw: Optional[float] = None,
    time_source: TimeSource = "auto",
) -> Roofline:
    """Place every op of a trace on a device's roofline.

    Ops need recorded shapes (``record_shapes=True``) for an estimate; FLOPs
    recorded with ``with_flops=True`` are used where present. An op whose time
    is mostly spent in ops it calls (``aten::linear`` calling ``aten::addmm``,
    say) is left out, since its children are on the roofline themselves.

    Without ``device``, the roofs are those of the device the trace was recorded on:
    its model, as the trace's ``deviceProperties`` name it, chooses the preset
    (``"NVIDIA H100 80GB HBM3"`` is ``"h100"``). A trace of the CPU only, of a device
    without a preset, or of one whose model it does not record (a Neuron trace does
    not say which Trainium generation ran it) is refused; name a preset then, and the
    result says that its peaks are a preset's (``Roofline.peak_source``).

    Args:
        source: A trace file or folder, or a loaded [`Trace`][neuronprof.analysis.Trace].
        device: A preset name from [`DEVICE_PEAKS`][neuronprof.analysis.DEVICE_PEAKS]
            (``"trn2"``, ``"trn1"``, ``"h100"``, ``"h200"``, ``"a100"``, ...) or a
            [`DevicePeak`][neuronprof.analysis.DevicePeak]; ``None`` (the default) for
            the trace's own device.
        peak_flops: Peak FLOP/s overriding the device's.
        peak_bw: Peak memory bandwidth (bytes/s) overriding the device's. Given with
            ``peak_flops`` and no ``device``, the two are the peaks.
        time_source: Which measured time to use (see [`TimeSource`][neuronprof.typing.TimeSource]).

    Raises:
        UnknownDeviceError: No ``device`` was given and the trace's device has no known
            peaks; raised before any op is placed, naming what the trace was recorded on.
        TraceError: The trace cannot be read.
        ValueError: Unknown device or time source, or a peak that is not positive.
    """
    if time_source not in get_args(TimeSource):
        raise ValueError(f"unknown time_source {time_source!r}; use one of {', '.join(get_args(TimeSource))}")
    if device is not None:
        device_peak(device, peak_flops=peak_flops, peak_bw=peak_bw)  # a bad preset fails before the trace is read
    trace = load_trace(source)
    peak, origin = resolve_peaks(
        device,
        peak_flops=peak_flops,
        peak_bw=peak_bw,
        device_label=trace.device_label,
        device_name=trace.device_name,
        subject=f"the trace {trace.source}" if trace.source else "the trace",
    )
    return place_trace(
        trace,
        peak,
        peak_source=origin,
        time_source=time_source,
        device_label=trace.device_label,
        device_name=trace.device_name,
    )


def place_trace(
    trace: Trace,
    peak: DevicePeak,
    *,
    peak_source: PeakSource,
    time_source: TimeSource,
    device_label: Optional[str],
    device_name: Optional[str],
) -> Roofline:
    """Place the ops of a loaded trace on ``peak``'s roofline (see ``roofline``; peaks already chosen).

    Args:
        trace: The loaded trace.
        peak: The roofs to compare with.
        peak_source: Where ``peak`` comes from.
        time_source: Which measured time to use.
        device_label: The device the run was on (``None``: the CPU only); a session's
            may differ from its trace's, which has no label without device events.
        device_name: That device's model, when recorded.

    Raises:
        TraceError: ``time_source="device"`` and no device time is attributed to host ops.
    """
    has_attributed = any((o.self_device_us or 0) > 0 for o in trace.ops if not o.on_device)
    if time_source == "auto":
        use: MeasuredTime = "device" if has_attributed else "cpu"
    elif time_source == "device" and not has_attributed:
        raise TraceError(
            f"{trace.source}: no device time is attributed to host ops in this trace; use the CPU time "
            "(time_source='cpu'; on the command line, --time-source cpu)"
        )
    else:
        use = cast(MeasuredTime, time_source)

    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    wrappers: set[str] = set()
    for op in trace.ops:
        if op.on_device:
            continue
        self_t = op.self_device_us if use == "device" else op.self_cpu_us
        total_t = op.device_total_us if use == "device" else op.cpu_total_us
        if not self_t or self_t <= 0:
            continue
        if total_t and self_t < 0.5 * total_t:
            wrappers.add(op.name)
            continue
        cost = op_cost(op.name, op.input_dims, op.input_dtypes, op.concrete_inputs)
        if cost is None:
            continue  # no formula or no shapes: even recorded FLOPs need the bytes
        flops = float(op.flops) if op.flops is not None else cost.flops * op.calls
        key = (op.name, op.input_shapes, op.input_dtypes)
        g = groups.setdefault(
            key,
            {"calls": 0, "time": 0.0, "flops": 0.0, "bytes": 0.0, "trace_flops": op.flops is not None},
        )
        g["calls"] += op.calls
        g["time"] += self_t
        g["flops"] += flops
        g["bytes"] += cost.bytes * op.calls
        g["trace_flops"] = g["trace_flops"] and op.flops is not None

    rows = [
        place_on_roof(
            name,
            input_shapes=shapes,
            input_dtypes=dtypes,
            calls=g["calls"],
            time_us=g["time"],
            time_source=use,
            flops=g["flops"],
            moved=g["bytes"],
            flops_source="trace" if g["trace_flops"] else "formula",
            peak=peak,
        )
        for (name, shapes, dtypes), g in groups.items()
        if g["bytes"] > 0
    ]
    rows.sort(key=lambda r: r.time_us, reverse=True)

    notes: list[str] = []
    if use == "cpu":
        notes.append(
            "achieved rates use host CPU time (no device time attributed to ops in this trace); "
            "the bound compares intensity with the device's ridge point"
        )
    if wrappers:
        shown = ", ".join(sorted(wrappers)[:6]) + (", ..." if len(wrappers) > 6 else "")
        notes.append(f"left out {len(wrappers)} op(s) whose time is mostly in the ops they call: {shown}")
    if not rows:
        if trace.ops and all(o.input_dims is None for o in trace.ops if not o.on_device):
            notes.append("the trace has no input shapes; profile with record_shapes=True")
        else:
            notes.append("no op in the trace has a FLOPs/bytes estimate")
    return Roofline(
        rows=tuple(rows),
        device=peak,
        time_source=use,
        source=trace.source,
        notes=tuple(notes),
        device_label=device_label,
        device_name=device_name,
        peak_source=peak_source,
    )
