"""Roofline analysis of a trace: is each op compute-bound or memory-bound, and how close to the roof?

For every operator call signature with recorded shapes, the FLOPs and bytes
moved are estimated (see [`op_cost`][neuronprof.analysis.op_cost], or taken from
the trace when it was recorded with ``with_flops=True``). Their ratio, the
arithmetic intensity, places the op left (memory-bound) or right
(compute-bound) of the device's ridge point ``peak FLOP/s ÷ peak bytes/s``.
Dividing by the measured time gives the achieved FLOP/s and bytes/s, shown as
a percentage of the roof at that intensity.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Optional, Union, cast, get_args

from neuronprof import _vocabulary as vocab
from neuronprof.analysis.errors import TraceError
from neuronprof.analysis.flops import op_cost
from neuronprof.analysis.trace import TraceSource, load_trace
from neuronprof.model import Shape, loads, row_from_dict, row_to_dict

__all__ = [
    "DEVICE_PEAKS",
    "Bound",
    "DevicePeak",
    "Roofline",
    "RooflineRow",
    "TimeSource",
    "device_peak",
    "roofline",
]

ROOFLINE_SCHEMA = "neuronprof.roofline/1"

Bound = Literal["compute", "memory"]
"""Which roof limits an op: ``"compute"`` (right of the ridge point) or ``"memory"`` (left of it)."""

TimeSource = Literal["auto", "device", "cpu"]
"""Which measured time the achieved rates use.

* ``"auto"``: device time when the trace attributes device time to host ops,
  else host CPU time.
* ``"device"``: self device time (kernels launched by the op).
* ``"cpu"``: self CPU time (for CPU-only traces, or to look at the host side).
"""


@dataclass(frozen=True)
class DevicePeak:
    """The two roofs of a device: peak compute and peak memory bandwidth.

    Attributes:
        name: Short name shown in reports, e.g. ``"trn2"`` or ``"my-gpu"``.
        flops_per_s: Peak dense FLOP/s for 16-bit floating point (BF16/FP16),
            the roof for ops whose inputs are 16-bit or smaller.
        bytes_per_s: Peak memory (HBM) bandwidth in bytes per second.
        fp32_flops_per_s: Peak dense FP32 FLOP/s, the roof for ops on 32/64-bit
            floats; ``None`` to use ``flops_per_s`` for every dtype.
        description: What the numbers are (chip, core, source).
    """

    name: str
    flops_per_s: float
    bytes_per_s: float
    fp32_flops_per_s: Optional[float] = None
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("DevicePeak.name must be a non-empty string")
        for attr in ("flops_per_s", "bytes_per_s", "fp32_flops_per_s"):
            value = getattr(self, attr)
            if value is None and attr == "fp32_flops_per_s":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"DevicePeak.{attr} must be a positive number, got {value!r}")

    @property
    def ridge(self) -> float:
        """Ridge point in FLOP/byte: intensities below it are memory-bound (16-bit roof)."""
        return self.flops_per_s / self.bytes_per_s

    def peak_for(self, dtypes: Optional[tuple[str, ...]]) -> float:
        """Return the compute roof for an op with these input dtypes (FP32 roof for 32/64-bit floats)."""
        if self.fp32_flops_per_s is not None and dtypes and any(d in _WIDE_FLOATS for d in dtypes):
            return self.fp32_flops_per_s
        return self.flops_per_s

    def to_dict(self) -> dict[str, Any]:
        """Return the peak as a JSON-ready dict."""
        return asdict(self)


_WIDE_FLOATS = frozenset({"float", "double", "float32", "float64", "c10::complex<float>", "c10::complex<double>"})

# Published dense peaks (no structured sparsity). The roofline of one op is the
# roofline of the unit that runs it: one NeuronCore (logical or physical) on
# Trainium, one whole GPU on NVIDIA parts. Chip-level presets are there to
# compare against data sheets.
DEVICE_PEAKS: dict[str, DevicePeak] = {
    # AWS Neuron docs, "Trainium Architecture" (about-neuron/arch/neuron-hardware/trainium):
    # per Trainium chip, two NeuronCore-v2 deliver 190 FP16/BF16/cFP8/TF32 TFLOPS and
    # 47.5 FP32 TFLOPS, with 32 GiB of HBM at 820 GB/s. trn1 supports LNC=1 only, so
    # one NeuronCore-v2 is half of each.
    "trn1": DevicePeak(
        "trn1",
        95e12,
        410e9,
        23.75e12,
        "one Trainium1 NeuronCore-v2 (half a chip): 95 BF16 / 23.75 FP32 TFLOP/s, 410 GB/s",
    ),
    "trn1-chip": DevicePeak(
        "trn1-chip",
        190e12,
        820e9,
        47.5e12,
        "one Trainium1 chip (2 NeuronCore-v2): 190 BF16 / 47.5 FP32 TFLOP/s, 820 GB/s",
    ),
    # AWS Neuron docs, "Trainium2 Architecture" (about-neuron/arch/neuron-hardware/trainium2):
    # per Trainium2 chip, eight NeuronCore-v3 deliver 667 BF16/FP16/TF32 TFLOPS and 181
    # FP32 TFLOPS, with 96 GiB of HBM at 2.9 TB/s. neuronx-cc defaults to LNC=2 on Trn2
    # (one logical NeuronCore = two physical cores = a quarter of the chip), hence "trn2".
    "trn2": DevicePeak(
        "trn2",
        667e12 / 4,
        2900e9 / 4,
        181e12 / 4,
        "one Trainium2 logical NeuronCore at the default LNC=2 (2 NeuronCore-v3, a quarter chip): "
        "166.75 BF16 / 45.25 FP32 TFLOP/s, 725 GB/s",
    ),
    "trn2-core": DevicePeak(
        "trn2-core",
        667e12 / 8,
        2900e9 / 8,
        181e12 / 8,
        "one Trainium2 physical NeuronCore-v3 (LNC=1, an eighth of a chip): 83.4 BF16 / 22.6 FP32 TFLOP/s, 362.5 GB/s",
    ),
    "trn2-chip": DevicePeak(
        "trn2-chip",
        667e12,
        2900e9,
        181e12,
        "one Trainium2 chip (8 NeuronCore-v3): 667 BF16 / 181 FP32 TFLOP/s, 2.9 TB/s",
    ),
    # NVIDIA H100 Tensor Core GPU datasheet, SXM5: BF16 Tensor Core 1,979 TFLOPS with
    # sparsity (989.4 dense), FP32 67 TFLOPS, 80 GB HBM3 at 3.35 TB/s.
    "h100": DevicePeak("h100", 989.4e12, 3350e9, 67e12, "NVIDIA H100 SXM: 989.4 BF16 / 67 FP32 TFLOP/s, 3.35 TB/s"),
    # NVIDIA H200 Tensor Core GPU datasheet, SXM: same Hopper GH100 compute as the H100
    # SXM (1,979 TFLOPS BF16 with sparsity, 989.4 dense; FP32 67 TFLOPS), 141 GB HBM3e
    # at 4.8 TB/s.
    "h200": DevicePeak("h200", 989.4e12, 4800e9, 67e12, "NVIDIA H200 SXM: 989.4 BF16 / 67 FP32 TFLOP/s, 4.8 TB/s"),
    # NVIDIA A100 Tensor Core GPU datasheet: BF16 Tensor Core 312 TFLOPS (624 with
    # sparsity), FP32 19.5 TFLOPS; 80 GB HBM2e SXM at 2,039 GB/s (40 GB: 1,555 GB/s).
    "a100": DevicePeak(
        "a100", 312e12, 2039e9, 19.5e12, "NVIDIA A100 SXM 80GB: 312 BF16 / 19.5 FP32 TFLOP/s, 2.039 TB/s"
    ),
    "a100-40gb": DevicePeak(
        "a100-40gb", 312e12, 1555e9, 19.5e12, "NVIDIA A100 40GB: 312 BF16 / 19.5 FP32 TFLOP/s, 1.555 TB/s"
    ),
}
"""Peak compute and bandwidth presets, by the name ``roofline(device=...)`` takes.

``trn1``/``trn2`` are one NeuronCore as a workload sees it (a Trainium1
NeuronCore-v2; a Trainium2 logical NeuronCore at the default LNC=2);
``trn2-core`` is one physical NeuronCore-v3; ``*-chip`` are whole chips; the
NVIDIA presets are whole GPUs. Values are dense (no sparsity) peaks from the
vendors' published specifications.
"""


def device_peak(
    device: Union[str, DevicePeak] = "trn2",
    *,
    peak_flops: Optional[float] = None,
    peak_bw: Optional[float] = None,
) -> DevicePeak:
    """Return the [`DevicePeak`][neuronprof.analysis.DevicePeak] for a preset name, optionally overridden.

    Args:
        device: A key of [`DEVICE_PEAKS`][neuronprof.analysis.DEVICE_PEAKS] or a ``DevicePeak``.
        peak_flops: Peak FLOP/s to use instead of the preset's (for every dtype).
        peak_bw: Peak memory bandwidth in bytes/s to use instead of the preset's.

    Raises:
        ValueError: Unknown preset name, or a peak that is not a positive number.
    """
    if isinstance(device, DevicePeak):
        base = device
    elif isinstance(device, str):
        base = DEVICE_PEAKS.get(device.lower())  # type: ignore[assignment]
        if base is None:
            raise ValueError(
                f"unknown device {device!r}; use one of {', '.join(DEVICE_PEAKS)}, "
                "or give DevicePeak(name, flops_per_s, bytes_per_s)"
            )
    else:
        raise TypeError(f"device must be a preset name or a DevicePeak, got {type(device).__name__}")
    if peak_flops is None and peak_bw is None:
        return base
    return DevicePeak(
        name=f"{base.name} (custom)",
        flops_per_s=base.flops_per_s if peak_flops is None else peak_flops,
        bytes_per_s=base.bytes_per_s if peak_bw is None else peak_bw,
        fp32_flops_per_s=base.fp32_flops_per_s if peak_flops is None else None,
        description="custom peaks" + (f" over {base.name}" if base.description else ""),
    )


@dataclass(frozen=True)
class RooflineRow:
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
    time_source: Literal["device", "cpu"]
    flops: float
    bytes: float
    flops_source: Literal["trace", "formula", "counters"]
    intensity: float
    peak_flops_per_s: float
    attainable_flops_per_s: float
    achieved_flops_per_s: Optional[float]
    achieved_bytes_per_s: Optional[float]
    bound: Bound
    pct_of_peak: Optional[float]

    def to_dict(self) -> dict[str, Any]:
        """Return the row as a JSON-ready dict."""
        return row_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RooflineRow:
        """Build a row from [`to_dict`][neuronprof.analysis.RooflineRow.to_dict] output.

        Raises:
            ValueError: Missing or unknown fields.
        """
        return row_from_dict(cls, data, "roofline row")


@dataclass(frozen=True)
class Roofline:
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
    """

    rows: tuple[RooflineRow, ...]
    device: DevicePeak
    time_source: Literal["device", "cpu"] = "device"
    source: str = ""
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.rows, tuple):
            object.__setattr__(self, "rows", tuple(self.rows))
        if not isinstance(self.notes, tuple):
            object.__setattr__(self, "notes", tuple(self.notes))

    def __iter__(self) -> Iterator[RooflineRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    # -- totals -------------------------------------------------------------------
    @property
    def total_flops(self) -> float:
        """FLOPs of all rows."""
        return sum(r.flops for r in self.rows)

    @property
    def total_bytes(self) -> float:
        """Bytes moved by all rows."""
        return sum(r.bytes for r in self.rows)

    @property
    def total_time_us(self) -> float:
        """Measured time of all rows, in microseconds."""
        return sum(r.time_us for r in self.rows)

    @property
    def intensity(self) -> Optional[float]:
        """Arithmetic intensity of all rows together, FLOP/byte."""
        moved = self.total_bytes
        return self.total_flops / moved if moved > 0 else None

    @property
    def bound(self) -> Optional[Bound]:
        """Which roof limits the time of these ops: the bound of the rows holding most of the time."""
        memory = sum(r.time_us for r in self.rows if r.bound == "memory")
        compute = sum(r.time_us for r in self.rows if r.bound == "compute")
        if not self.rows:
            return None
        return "memory" if memory >= compute else "compute"

    def row(self, name: str) -> RooflineRow:
        """Return the row with the most time among those called ``name``.

        Raises:
            KeyError: No row has that name.
        """
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"no roofline row named {name!r}; rows: {', '.join(sorted({r.name for r in self.rows}))}")

    # -- renderers ------------------------------------------------------------------
    def __str__(self) -> str:
        return self.to_text()

    def to_text(self, limit: Optional[int] = None) -> str:
        """Return the roofline as an aligned text table with the device's peaks above it (first ``limit`` rows)."""
        from neuronprof.analysis.render import render_roofline_text

        return render_roofline_text(self, limit=limit)

    def to_markdown(self, limit: Optional[int] = None) -> str:
        """Return the roofline as a GitHub-flavoured Markdown table (first ``limit`` rows)."""
        from neuronprof.analysis.render import render_roofline_markdown

        return render_roofline_markdown(self, limit=limit)

    def to_dict(self, limit: Optional[int] = None) -> dict[str, Any]:
        """Return the roofline as a JSON-ready dict with a ``schema`` tag (first ``limit`` rows)."""
        return {
            "schema": ROOFLINE_SCHEMA,
            "device": self.device.to_dict(),
            "time_source": self.time_source,
            "source": self.source,
            "notes": list(self.notes),
            "bound": self.bound,
            "total_rows": len(self.rows),
            "rows": [r.to_dict() for r in vocab.limit_rows(self.rows, limit)],
        }

    def to_json(self, indent: Optional[int] = 2, limit: Optional[int] = None) -> str:
        """Return the roofline as JSON; [`from_json`][neuronprof.analysis.Roofline.from_json] reads it back.

        Args:
            indent: Spaces per indentation level; None for one line.
            limit: Keep the first ``limit`` rows; None for all.

        Returns:
            A JSON document (a ``str``)."""
        return json.dumps(self.to_dict(limit), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Roofline:
        """Build a roofline from [`to_dict`][neuronprof.analysis.Roofline.to_dict] output.

        Raises:
            ValueError: Not a neuronprof roofline.
        """
        if not isinstance(data, Mapping) or data.get("schema") != ROOFLINE_SCHEMA:
            raise ValueError(f"not a neuronprof roofline (expected schema {ROOFLINE_SCHEMA!r})")
        rows = data.get("rows")
        if not isinstance(rows, list):
            raise ValueError("neuronprof roofline JSON has no 'rows' list")
        time_source = data.get("time_source", "device")
        if time_source not in ("device", "cpu"):
            raise ValueError(f"invalid time_source {time_source!r}")
        try:
            device = DevicePeak(**data["device"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"neuronprof roofline JSON has no valid 'device': {exc}") from None
        return cls(
            rows=tuple(RooflineRow.from_dict(r) for r in rows),
            device=device,
            time_source=time_source,
            source=str(data.get("source", "")),
            notes=tuple(data.get("notes", ())),
        )

    @classmethod
    def from_json(cls, text: Union[str, bytes]) -> Roofline:
        """Read a roofline written by [`to_json`][neuronprof.analysis.Roofline.to_json].

        Raises:
            ValueError: Not JSON, or not a neuronprof roofline.
        """
        return cls.from_dict(loads(text))

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
        from neuronprof.analysis.render import plot_roofline

        plot_roofline(self, path, label_top=label_top)


def roofline(
    source: TraceSource,
    device: Union[str, DevicePeak] = "trn2",
    *,
    peak_flops: Optional[float] = None,
    peak_bw: Optional[float] = None,
    time: TimeSource = "auto",
) -> Roofline:
    """Place every op of a trace on a device's roofline.

    Ops need recorded shapes (``record_shapes=True``) for an estimate; FLOPs
    recorded with ``with_flops=True`` are used where present. An op whose time
    is mostly spent in ops it calls (``aten::linear`` calling ``aten::addmm``,
    say) is left out, since its children are on the roofline themselves.

    Args:
        source: A trace file or folder, or a loaded [`Trace`][neuronprof.analysis.Trace].
        device: A preset name from [`DEVICE_PEAKS`][neuronprof.analysis.DEVICE_PEAKS]
            (``"trn2"``, ``"trn1"``, ``"h100"``, ``"h200"``, ``"a100"``, ...) or a
            [`DevicePeak`][neuronprof.analysis.DevicePeak].
        peak_flops: Peak FLOP/s overriding the device's.
        peak_bw: Peak memory bandwidth (bytes/s) overriding the device's.
        time: Which measured time to use (see [`TimeSource`][neuronprof.analysis.TimeSource]).

    Raises:
        TraceError: The trace cannot be read.
        ValueError: Unknown device or time source, or a peak that is not positive.
    """
    if time not in get_args(TimeSource):
        raise ValueError(f"unknown time {time!r}; use one of {', '.join(get_args(TimeSource))}")
    peak = device_peak(device, peak_flops=peak_flops, peak_bw=peak_bw)
    trace = load_trace(source)
    has_attributed = any(not o.on_device and o.self_device_us is not None for o in trace.ops) and any(
        (o.self_device_us or 0) > 0 for o in trace.ops if not o.on_device
    )
    if time == "auto":
        use: Literal["device", "cpu"] = "device" if has_attributed else "cpu"
    elif time == "device" and not has_attributed:
        raise TraceError(f"{trace.source}: no device time is attributed to host ops in this trace; use time='cpu'")
    else:
        use = cast(Literal["device", "cpu"], time)

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

    rows = []
    for (name, shapes, dtypes), g in groups.items():
        if g["bytes"] <= 0:
            continue
        intensity = g["flops"] / g["bytes"]
        roof = peak.peak_for(dtypes)
        attainable = min(roof, intensity * peak.bytes_per_s)
        seconds = g["time"] / 1e6
        achieved_f = g["flops"] / seconds if seconds > 0 else None
        achieved_b = g["bytes"] / seconds if seconds > 0 else None
        bound: Bound = "compute" if intensity * peak.bytes_per_s >= roof else "memory"
        pct = None
        if achieved_f is not None and attainable > 0 and g["flops"] > 0:
            pct = 100.0 * achieved_f / attainable
        elif achieved_b is not None and bound == "memory":
            pct = 100.0 * achieved_b / peak.bytes_per_s  # a pure copy: all bandwidth, no FLOPs
        rows.append(
            RooflineRow(
                name=name,
                input_shapes=shapes,
                input_dtypes=dtypes,
                calls=g["calls"],
                time_us=g["time"],
                time_source=use,
                flops=g["flops"],
                bytes=g["bytes"],
                flops_source="trace" if g["trace_flops"] else "formula",
                intensity=intensity,
                peak_flops_per_s=roof,
                attainable_flops_per_s=attainable,
                achieved_flops_per_s=achieved_f,
                achieved_bytes_per_s=achieved_b,
                bound=bound,
                pct_of_peak=pct,
            )
        )
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
    return Roofline(rows=tuple(rows), device=peak, time_source=use, source=trace.source, notes=tuple(notes))
