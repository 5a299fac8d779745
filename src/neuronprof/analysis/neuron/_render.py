"""Text, Markdown, CSV and a stacked-bar plot of a [`NeuronProfile`][neuronprof.analysis.NeuronProfile].

Pure functions of the model that return text or a figure and write no file; matplotlib
is imported only by ``render_engines_figure``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Optional

from neuronprof.analysis.render import _Col, _md_table, _text_table
from neuronprof.render import format_us

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from neuronprof.analysis.neuron._join import JoinedOp
    from neuronprof.analysis.neuron._model import DeviceSummary, NeffStats, NeuronProfile, StepDevice

__all__ = ["render_csv", "render_engines_figure", "render_markdown", "render_text"]

_ENGINE_TITLES = {
    "tensor": "Tensor",
    "vector": "Vector",
    "scalar": "Scalar",
    "gpsimd": "GpSimd",
    "sync": "Sync",
    "dma": "DMA",
}
_COLOURS = {
    "tensor": "tab:red",
    "vector": "tab:blue",
    "scalar": "tab:green",
    "gpsimd": "tab:purple",
    "sync": "tab:gray",
    "dma": "tab:orange",
}


def _num(v: Optional[float], scale: float = 1.0, digits: int = 1) -> str:
    return "" if v is None else f"{v / scale:.{digits}f}"


def _engine_cell(name: str) -> Callable[[DeviceSummary], str]:
    def cell(s: DeviceSummary) -> str:
        e = s.engine(name)
        if e.active_us is None and e.share_pct is None:
            return ""
        pct = "" if e.share_pct is None else f" ({e.share_pct:.1f}%)"
        return f"{format_us(e.active_us) or '-'}{pct}"

    return cell


def _engine_cols() -> list[_Col[DeviceSummary]]:
    from neuronprof.analysis.neuron._model import ENGINES

    cols: list[_Col[DeviceSummary]] = [
        _Col("Profile", lambda s: s.label, left=True),
        _Col("Kind", lambda s: s.kind, left=True),
        _Col("Total (µs)", lambda s: format_us(s.total_us)),
    ]
    cols += [_Col(f"{_ENGINE_TITLES[e]} µs (share)", _engine_cell(e)) for e in ENGINES]
    cols.append(_Col("Bottleneck", lambda s: _ENGINE_TITLES[s.bottleneck] if s.bottleneck else "", left=True))
    cols += [
        _Col("HBM read (MB)", lambda s: _num(None if s.hbm_read_bytes is None else float(s.hbm_read_bytes), 1e6, 2)),
        _Col("HBM write (MB)", lambda s: _num(None if s.hbm_write_bytes is None else float(s.hbm_write_bytes), 1e6, 2)),
        _Col("HW GFLOP", lambda s: _num(s.hardware_flops, 1e9, 3)),
        _Col("Model GFLOP", lambda s: _num(s.model_flops, 1e9, 3)),
        _Col("MFU (%)", lambda s: _num(s.mfu_pct)),
        _Col("MBU (%)", lambda s: _num(s.mbu_pct)),
    ]
    return cols


def _neff_cols(profile: NeuronProfile) -> list[_Col[NeffStats]]:
    total = profile.device_us or 0.0
    return [
        _Col("NEFF", lambda s: s.neff, left=True),
        _Col("Executions", lambda s: str(s.calls)),
        _Col("Device (µs)", lambda s: format_us(s.device_us)),
        _Col("Device (%)", lambda s: f"{100 * s.device_us / total:.1f}" if total > 0 else ""),
        _Col("Mean (µs)", lambda s: format_us(s.mean_us)),
        _Col("Min (µs)", lambda s: format_us(s.min_us)),
        _Col("Max (µs)", lambda s: format_us(s.max_us)),
        _Col("Cores", lambda s: ",".join(str(c) for c in s.cores), left=True),
    ]


def _step_cols() -> list[_Col[StepDevice]]:
    return [
        _Col("Step", lambda s: f"ProfilerStep#{s.step}", left=True),
        _Col("Length (µs)", lambda s: format_us(s.duration_us)),
        _Col("Busy, any core (µs)", lambda s: format_us(s.busy_us)),
        _Col("Busy (%)", lambda s: f"{s.busy_pct:.1f}"),
        _Col("Idle (µs)", lambda s: format_us(s.idle_us)),
        _Col("Executions", lambda s: str(s.executions)),
        _Col("Idle gaps", lambda s: str(s.gaps)),
        _Col("Largest gap (µs)", lambda s: format_us(s.largest_gap_us)),
    ]


def _join_cols() -> list[_Col[JoinedOp]]:
    return [
        _Col("Op", lambda j: j.op, left=True),
        _Col("NEFF", lambda j: j.neff, left=True),
        _Col("Executions", lambda j: str(j.executions)),
        _Col("Device (µs)", lambda j: format_us(j.device_us)),
    ]


def _tool_state(profile: NeuronProfile) -> str:
    return "is not installed" if profile.tool_missing else "failed"


def _header(profile: NeuronProfile) -> list[str]:
    if profile.tool_error is not None:
        how = f"neuron-explorer was needed and {_tool_state(profile)}: see the note below"
        if profile.tool:
            how = f"read with {profile.tool}; {how}"
    elif profile.tool:
        how = f"read with {profile.tool}"
    else:
        how = "read from existing JSON files"
    return [f"Neuron profile of {profile.source} ({how})"]


def _footer(profile: NeuronProfile) -> list[str]:
    lines = []
    if profile.executions:
        lines.append(
            f"NeuronCore time: {format_us(profile.device_us)} µs over {len(profile.executions)} execution(s) "
            f"of {len(profile.neffs)} NEFF(s)"
        )
    if any(s.bottleneck for s in profile.summaries):
        lines.append(
            "Bottleneck: by AWS's rule, the engine with the most active time among Tensor, Vector, Scalar, GpSimd "
            "and DMA (not verified on hardware here)"
        )
    lines += [f"note: {n}" for n in profile.notes]
    return lines


def _sections(
    profile: NeuronProfile, table: Callable[[Sequence[_Col[object]], Sequence[object]], list[str]], title: str
) -> list[str]:
    out: list[str] = []
    parts: list[tuple[str, Sequence[_Col[object]], Sequence[object]]] = [
        ("Engines per device profile", _engine_cols(), profile.summaries),  # type: ignore[list-item]
        ("NEFF executions", _neff_cols(profile), profile.neffs),  # type: ignore[list-item]
        ("NeuronCore activity per step", _step_cols(), profile.steps),  # type: ignore[list-item]
    ]
    if profile.flow_join is not None:
        # Only where Neuron's Parquet output was read: the section says the join was tried.
        parts.append((_JOINED, _join_cols(), profile.flow_join.ops))  # type: ignore[arg-type]
    for name, cols, rows in parts:
        out += ["", title.format(name)]
        if rows:
            out += table(cols, rows)
        else:
            out.append(_empty(name, profile))
    return out


_JOINED = "Device time per op (a join through SystemProfileEvents.flow_id)"


def _empty(section: str, profile: NeuronProfile) -> str:
    if section == _JOINED:
        return "(no execution matched a framework event: match rate 0%; the time stays on the NEFF rows)"
    if profile.tool_error is not None and section != "NeuronCore activity per step":
        return f"(not read: neuron-explorer {_tool_state(profile)}; see the note below)"
    if section == "NeuronCore activity per step" and not profile.executions:
        return "(no steps: no NEFF executions to place in them)"
    return {
        "Engines per device profile": "(no device profile: capture with modes including 'device')",
        "NEFF executions": "(no system profile with nc_exec_running records)",
        "NeuronCore activity per step": "(no steps: needs the framework trace beside the system profile)",
    }[section]


def render_text(profile: NeuronProfile) -> str:
    """Render the profile as aligned plain text: engines, NEFF executions, steps, then notes."""
    lines = _header(profile) + _sections(profile, _text_table, "{}:")
    return "\n".join([*lines, "", *_footer(profile)])


def render_markdown(profile: NeuronProfile) -> str:
    """Render the profile as GitHub-flavoured Markdown, one table per section."""
    lines = [line + "  " for line in _header(profile)]
    lines += _sections(profile, _md_table, "**{}**\n")
    return "\n".join([*lines, "", *(line + "  " for line in _footer(profile))]) + "\n"


def render_csv(profile: NeuronProfile) -> str:
    """Render every figure as CSV in long form: ``section,name,field,value``.

    ``section`` is ``engines``, ``neffs``, ``steps``, ``join`` (the flow_id join, where
    Neuron's Parquet output was read) or ``peaks`` (the profile's own); values are in the
    model's units (µs, %, bytes, FLOPs); a figure that is not available is an
    empty value.
    """
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["section", "name", "field", "value"])

    def put(section: str, name: str, fld: str, value: object) -> None:
        w.writerow([section, name, fld, "" if value is None else value])

    for s in profile.summaries:
        put("engines", s.label, "kind", s.kind)
        put("engines", s.label, "total_us", s.total_us)
        for e in s.engines:
            put("engines", s.label, f"{e.engine}_active_us", e.active_us)
            put("engines", s.label, f"{e.engine}_share_pct", e.share_pct)
        for fld in ("hbm_read_bytes", "hbm_write_bytes", "hardware_flops", "model_flops", "mfu_pct", "mbu_pct"):
            put("engines", s.label, fld, getattr(s, fld))
    for n in profile.neffs:
        put("neffs", n.neff, "calls", n.calls)
        put("neffs", n.neff, "device_us", n.device_us)
        put("neffs", n.neff, "mean_us", n.mean_us)
        put("neffs", n.neff, "min_us", n.min_us)
        put("neffs", n.neff, "max_us", n.max_us)
        put("neffs", n.neff, "cores", " ".join(str(c) for c in n.cores))
    if profile.flow_join is not None:
        j = profile.flow_join
        put("join", "flow_id", "executions", j.executions)
        put("join", "flow_id", "matched", j.matched)
        put("join", "flow_id", "match_rate", j.match_rate)
        for o in j.ops:
            put("join", f"{o.op} / {o.neff}", "executions", o.executions)
            put("join", f"{o.op} / {o.neff}", "device_us", o.device_us)
    if profile.peak is not None:
        put("peaks", "profile", "flops_per_s", profile.peak.flops_per_s)
        put("peaks", "profile", "bytes_per_s", profile.peak.bytes_per_s)
    for st in profile.steps:
        name = f"ProfilerStep#{st.step}"
        for fld in ("duration_us", "busy_us", "busy_pct", "idle_us", "executions", "gaps", "largest_gap_us"):
            put("steps", name, fld, getattr(st, fld))
    return buf.getvalue()


def _share(s: DeviceSummary, engine: str) -> float:
    """An engine's active time as a percentage of the profile's total time (0 when not available)."""
    e = s.engine(engine)
    if e.active_us is not None and s.total_us:
        return 100.0 * e.active_us / s.total_us
    return e.share_pct or 0.0


def render_engines_figure(profile: NeuronProfile, *, normalize: bool = False) -> Figure:
    """Draw a stacked bar of engine active time per device profile (see ``NeuronProfile.plot``).

    Returns:
        A matplotlib ``Figure``, drawn off screen; ``NeuronProfile.plot(path)`` saves it.

    Raises:
        ValueError: No device profile with engine times.
        ImportError: matplotlib is missing.
    """
    from neuronprof.analysis.neuron._model import ENGINES

    shown = [s for s in profile.summaries if any(e.active_us is not None for e in s.engines)]
    if not shown:
        raise ValueError("no device profile with engine active times to draw (capture with modes including 'device')")
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("NeuronProfile.plot() needs matplotlib: pip install 'neuronprof[plot]'") from None

    fig = Figure(figsize=(10, 2.2 + 0.5 * len(shown)), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    ys = list(range(len(shown)))
    left = [0.0] * len(shown)
    for engine in ENGINES:
        widths = [_share(s, engine) if normalize else s.engine(engine).active_us or 0.0 for s in shown]
        ax.barh(ys, widths, left=left, color=_COLOURS[engine], label=_ENGINE_TITLES[engine], height=0.6)
        left = [a + b for a, b in zip(left, widths)]
    if normalize:
        totals = [(y, 100.0) for y, s in zip(ys, shown) if s.total_us is not None]
    else:
        totals = [(y, s.total_us) for y, s in zip(ys, shown) if s.total_us is not None]
    if totals:
        ax.scatter([t for _, t in totals], [y for y, _ in totals], marker="|", s=600, color="black", label="total time")
    ax.set_yticks(ys)
    ax.set_yticklabels([s.label if len(s.label) <= 40 else s.label[:39] + "…" for s in shown], fontsize=8)
    ax.invert_yaxis()
    if normalize:
        ax.set_xlabel("engine active time, % of each profile's total time; engines overlap, so a bar can pass 100")
    else:
        ax.set_xlabel("engine active time (µs); engines overlap, so a bar can pass the total time")
    ax.set_title("Engine active time per device profile (from Neuron's summary-json)", fontsize=10)
    # Outside the axes, so it never covers a bar.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, borderaxespad=0.0, markerscale=0.4)
    ax.grid(True, axis="x", alpha=0.25)
    fig.tight_layout()
    return fig
