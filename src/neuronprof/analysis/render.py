"""Views of the analysis models: diffs and rooflines as columns and lines, and the roofline plot.

Pure functions (they return blocks, text or a figure and write no file) of
[`TraceDiff`][neuronprof.analysis.TraceDiff] and [`Roofline`][neuronprof.analysis.Roofline];
the one column engine of [`neuronprof.render`][neuronprof.render] sets them as text,
Markdown, CSV and HTML, and JSON lives on the models themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from neuronprof._vocabulary import limit_rows
from neuronprof.render import (
    Block,
    Column,
    Format,
    Grid,
    fields_grid,
    format_int,
    format_shapes,
    format_us,
    on_column,
    shown,
    titled,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from neuronprof.analysis._diff import DiffRow, TraceDiff
    from neuronprof.analysis._roofline import Roofline, RooflineRow
    from neuronprof.analysis._verdict import Shift

__all__ = ["diff_view", "render_roofline_figure", "roofline_view", "short_verdict"]


# -- diff ------------------------------------------------------------------------------


def _delta(v: float) -> str:
    return f"{v:+.1f}"


def _ratio(v: Optional[float]) -> str:
    return "" if v is None else f"{v:.2f}x"


def _diff_name(r: DiffRow) -> str:
    return r.name + {"both": "", "only_a": " (only A)", "only_b": " (only B)"}[r.status]


def _diff_cols(d: TraceDiff) -> list[Column[DiffRow]]:
    cols: list[Column[DiffRow]] = [Column("Name", _diff_name, left=True), *on_column(d.rows)]
    cols += [
        Column("Calls A", lambda r: format_int(r.calls_a)),
        Column("Calls B", lambda r: format_int(r.calls_b)),
        Column("Self CPU A (µs)", lambda r: format_us(r.self_cpu_us_a)),
        Column("Self CPU B (µs)", lambda r: format_us(r.self_cpu_us_b)),
    ]
    label = d.device_label
    if label:
        cols += [
            Column(f"Self {label} A (µs)", lambda r: format_us(r.self_device_us_a)),
            Column(f"Self {label} B (µs)", lambda r: format_us(r.self_device_us_b)),
        ]
    which = label if d.metric == "device" and label else "CPU"
    cols += [
        Column(f"Δ self {which} (µs)", lambda r: _delta(r.delta_us)),
        Column("B/A", lambda r: _ratio(r.ratio)),
    ]
    if d.op_shifts:
        # The verdicts are per op name: with rows per input shape, a row's verdict is its name's.
        head = "Verdict per step" + (" (the op name, all shapes)" if d.match == "shape" else "")
        cols.append(Column(head, lambda r: "" if r.on_device else short_verdict(d.op_shift(r.name)), left=True))
    if d.match == "shape":
        cols.append(Column("Input shapes", lambda r: format_shapes(r.input_shapes), left=True))
    return cols


def short_verdict(s: Optional[Shift]) -> str:
    """A verdict in a table cell: ``slower 1.12× (1.05–1.20)``; blank when there is none."""
    if s is None:
        return ""
    if s.verdict == "cannot tell" or s.ratio is None or s.low is None or s.high is None:
        return "cannot tell"
    # "no measurable change", in full: the interval holds 1, which is not "no change" (a wide
    # interval around a large ratio holds 1 too).
    return f"{s.verdict} {s.ratio:.2f}× ({s.low:.2f}–{s.high:.2f})"


def _diff_header(d: TraceDiff) -> list[str]:
    which = f"self {d.device_label} time" if d.metric == "device" and d.device_label else "self CPU time"
    lines = [
        f"A: {d.a}",
        f"B: {d.b}",
        f"compared: {which}{' per step' if d.per_step else ''}, ops matched by {d.match}, largest change first",
    ]
    if d.step is not None:
        lines.append(f"verdict, step time (host): {d.step.describe()}")
    else:
        lines.append("verdict: none (a note below says why)")
    if d.step_device is not None:
        lines.append(f"verdict, {d.device_label or 'device'} time per step: {d.step_device.describe()}")
    return lines


def _diff_footer(d: TraceDiff) -> list[str]:
    a, b = d.total_a_us, d.total_b_us
    ratio = f", B/A {b / a:.2f}x" if a > 0 else ""
    lines = [f"total: A {format_us(a)} µs, B {format_us(b)} µs, change {_delta(b - a)} µs{ratio}"]
    for status, words in (("only_b", "appeared in B (not in A)"), ("only_a", "vanished (only in A)")):
        names = [r.name for r in d.rows if r.status == status]
        if names:
            shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
            lines.append(f"{words}: {shown}")
    lines += [f"note: {n}" for n in d.notes]
    return lines


def diff_view(d: TraceDiff, fmt: Format, row_limit: Optional[int] = None) -> list[Block]:
    """A [`TraceDiff`][neuronprof.analysis.TraceDiff]: the verdicts above the table, the totals under it.

    CSV has one line per op, the [`DiffRow`][neuronprof.analysis.DiffRow] fields. The footer speaks of every
    row, also those past ``row_limit`` (the ops that appeared or vanished, the totals).
    """
    rows = limit_rows(d.rows, row_limit)
    if fmt == "csv":
        from neuronprof.analysis._diff import DiffRow

        return [fields_grid(DiffRow, rows)]
    return [
        *titled(_diff_header(d), fmt),
        "",
        Grid(_diff_cols(d), rows),
        "",
        *shown(rows, d.total_rows),
        *_diff_footer(d),
    ]


# -- roofline --------------------------------------------------------------------------


def _num(v: Optional[float], scale: float, digits: int) -> str:
    """Fixed decimals for ordinary values; three significant digits for tiny ones (CPU traces)."""
    if v is None:
        return ""
    x = v / scale
    if x != 0 and abs(x) < 10 ** (1 - digits):
        return f"{x:.3g}"
    return f"{x:.{digits}f}"


def _roofline_cols(rl: Roofline) -> list[Column[RooflineRow]]:
    where = (rl.device_label or "device") if rl.time_source == "device" else "CPU"
    cols: list[Column[RooflineRow]] = [
        Column("Name", lambda r: r.name, left=True),
        Column("Calls", lambda r: str(r.calls)),
        Column(f"Self {where} (µs)", lambda r: format_us(r.time_us)),
        Column("GFLOP", lambda r: _num(r.flops, 1e9, 3)),
        Column("MB moved", lambda r: _num(r.bytes, 1e6, 1)),
        Column("FLOP/byte", lambda r: _num(r.intensity, 1, 2)),
        Column("Bound", lambda r: r.bound),
        Column("Achieved TFLOP/s", lambda r: _num(r.achieved_flops_per_s, 1e12, 3)),
        Column("Achieved GB/s", lambda r: _num(r.achieved_bytes_per_s, 1e9, 1)),
        Column("Roof TFLOP/s", lambda r: _num(r.attainable_flops_per_s, 1e12, 3)),
        Column("% of roof", lambda r: _num(r.pct_of_peak, 1, 1)),
    ]
    if not _of_counters(rl):  # rows from hardware counters (one per NEFF) have no input shapes
        cols.append(Column("Input shapes", lambda r: format_shapes(r.input_shapes), left=True))
    return cols


def _of_counters(rl: Roofline) -> bool:
    """True when every row is a device profile measured by hardware counters (a NEFF), not an operator."""
    return bool(rl.rows) and all(r.flops_source == "counters" and r.input_shapes is None for r in rl.rows)


def _roofline_header(rl: Roofline) -> list[str]:
    p = rl.device
    peaks = f"{p.flops_per_s / 1e12:g} TFLOP/s"
    ridge = f"{p.ridge:.1f} FLOP/byte"
    if p.fp32_flops_per_s is not None:
        peaks += f" (16-bit), {p.fp32_flops_per_s / 1e12:g} TFLOP/s (FP32)"
        ridge += f" (16-bit), {p.fp32_flops_per_s / p.bytes_per_s:.1f} (FP32)"
    lines = [f"roofline on {p.name}" + (f": {p.description}" if p.description else "")]
    lines.append(f"peaks: {peaks}, {p.bytes_per_s / 1e9:g} GB/s; ridge point {ridge}")
    lines.append(_whose_peaks(rl))
    if rl.source:
        lines.append(f"trace: {rl.source}")
    return lines


def _whose_peaks(rl: Roofline) -> str:
    """Say whose peaks these are: the run's own device's, or a preset or peaks asked for, and what the run was on."""
    from neuronprof.analysis._peaks import DEVICE_PEAKS, describe_run_device, preset_of_run

    p = rl.device
    ran_on = describe_run_device(rl.device_label, rl.device_name)
    if rl.peak_source == "run":
        return f"device: the run's own, {ran_on}, with preset {p.name}'s published peaks"
    if rl.peak_source == "profile":
        return "device: the peaks Neuron's profile carries (its Parquet Metadata table), not a preset"
    if rl.peak_source == "custom" or DEVICE_PEAKS.get(p.name) != p:
        # Peaks of the user's own may well be the run's device's: nothing is claimed either way.
        what = "custom peaks (peak_flops/peak_bw given)" if rl.peak_source == "custom" else f"peaks {p.name!r} as given"
        return f"device: {what}; the run was on {ran_on}"
    own = preset_of_run(rl.device_label, rl.device_name)
    if own == p.name:
        return f"device: preset {p.name}, as asked, which is the machine the run was on: {ran_on}"
    if own is None and rl.device_label is not None and not rl.device_name:
        return (
            f"device: preset {p.name}, as asked; the run was on {ran_on}, "
            "so whether these peaks are its own is not known"
        )
    # The CPU, a named model without a preset, or another preset's model: not this preset's machine.
    return f"device: preset {p.name}, as asked, not the machine the run was on, which was {ran_on}"


def _roofline_footer(rl: Roofline) -> list[str]:
    lines = []
    if rl.total_rows:
        intensity = rl.intensity
        what = "device profile(s) (NEFFs)" if _of_counters(rl) else "op signature(s)"
        lines.append(
            f"overall (by time: the bound of the rows holding most of the time): {rl.bound}-bound; "
            f"{format_us(rl.total_time_us)} µs over {rl.total_rows} {what}, "
            f"intensity {'' if intensity is None else f'{intensity:.2f}'} FLOP/byte (all FLOPs over all bytes)"
        )
    lines += [f"note: {n}" for n in rl.notes]
    return lines


def roofline_view(rl: Roofline, fmt: Format, row_limit: Optional[int] = None) -> list[Block]:
    """A [`Roofline`][neuronprof.analysis.Roofline]: the device's peaks above the table, the overall bound under it.

    CSV has one line per op, the [`RooflineRow`][neuronprof.analysis.RooflineRow] fields; the first ``row_limit``
    rows are shown, the columns and the footer those of every row.
    """
    rows = limit_rows(rl.rows, row_limit)
    if fmt == "csv":
        from neuronprof.analysis._roofline import RooflineRow

        return [fields_grid(RooflineRow, rows)]
    grid = Grid(_roofline_cols(rl), rows)
    return [*titled(_roofline_header(rl), fmt), "", grid, "", *shown(rows, rl.total_rows), *_roofline_footer(rl)]


def render_roofline_figure(rl: Roofline, *, label_top: int = 8) -> Figure:
    """Draw a roofline chart as a matplotlib ``Figure``, off screen (``pyplot`` is not used).

    Args:
        rl: The roofline to draw.
        label_top: How many ops, those with the most time, get a name label.

    Returns:
        The figure, 8 by 5.5 inches; ``Roofline.plot(path)`` saves it.

    Raises:
        ImportError: matplotlib is not installed (``pip install neuronprof[plot]``).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("Roofline.plot() needs matplotlib: pip install neuronprof[plot]") from None

    peak = rl.device
    points = [(r, r.achieved_flops_per_s) for r in rl.rows if r.achieved_flops_per_s and r.intensity > 0]
    xs = [r.intensity for r, _ in points]
    ys = [y for _, y in points if y is not None]
    lo = min([*xs, peak.ridge / 1000, 0.01])
    hi = max([*xs, peak.ridge * 100])
    fig = Figure(figsize=(8, 5.5), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log")
    ax.set_yscale("log")

    def roof(flops: float, style: str, label: str) -> None:
        ridge = flops / peak.bytes_per_s
        ax.plot([lo, ridge, hi], [lo * peak.bytes_per_s, flops, flops], style, color="black", lw=1.4, label=label)

    roof(peak.flops_per_s, "-", f"{peak.name} roof (16-bit)" if peak.fp32_flops_per_s else f"{peak.name} roof")
    if peak.fp32_flops_per_s is not None:
        roof(peak.fp32_flops_per_s, "--", f"{peak.name} roof (FP32)")
    if points:
        longest = max(r.time_us for r, _ in points) or 1.0
        colors = ["tab:blue" if r.bound == "memory" else "tab:red" for r, _ in points]
        sizes = [20 + 300 * r.time_us / longest for r, _ in points]
        ax.scatter(xs, ys, s=sizes, c=colors, alpha=0.7, edgecolors="none")
        for r, y in sorted(points, key=lambda p: p[0].time_us, reverse=True)[:label_top]:
            ax.annotate(r.name.split("::")[-1], (r.intensity, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel(f"achieved FLOP/s ({'device' if rl.time_source == 'device' else 'CPU'} time)")
    ax.set_title(f"Roofline: {peak.name} (blue: memory-bound, red: compute-bound)", fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
