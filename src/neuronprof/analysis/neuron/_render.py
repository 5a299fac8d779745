"""Text, Markdown, CSV and a stacked-bar plot of a [`NeuronProfile`][neuronprof.analysis.NeuronProfile].

Pure functions of the model that return text or a figure and write no file; matplotlib
is imported only by ``render_engines_figure``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Optional

from neuronprof.render import Block, Column, Format, Grid, format_us, titled, tuple_grid

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from neuronprof.analysis.neuron._join import JoinedOp
    from neuronprof.analysis.neuron._model import DeviceSummary, NeffStats, NeuronProfile, StepDevice

__all__ = ["profile_view", "render_engines_figure"]

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


def _engine_cols() -> list[Column[DeviceSummary]]:
    from neuronprof.analysis.neuron._model import ENGINES

    cols: list[Column[DeviceSummary]] = [
        Column("Profile", lambda s: s.label, left=True),
        Column("Kind", lambda s: s.kind, left=True),
        Column("Total (µs)", lambda s: format_us(s.total_us)),
    ]
    cols += [Column(f"{_ENGINE_TITLES[e]} µs (share)", _engine_cell(e)) for e in ENGINES]
    cols.append(Column("Bottleneck", lambda s: _ENGINE_TITLES[s.bottleneck] if s.bottleneck else "", left=True))
    cols += [
        Column("HBM read (MB)", lambda s: _num(s.hbm_read_bytes, 1e6, 2)),
        Column("HBM write (MB)", lambda s: _num(s.hbm_write_bytes, 1e6, 2)),
        Column("HW GFLOP", lambda s: _num(s.hardware_flops, 1e9, 3)),
        Column("Model GFLOP", lambda s: _num(s.model_flops, 1e9, 3)),
        Column("MFU (%)", lambda s: _num(s.mfu_pct)),
        Column("MBU (%)", lambda s: _num(s.mbu_pct)),
    ]
    return cols


def _neff_cols(profile: NeuronProfile) -> list[Column[NeffStats]]:
    total = profile.device_us or 0.0
    return [
        Column("NEFF", lambda s: s.neff, left=True),
        Column("Executions", lambda s: str(s.calls)),
        Column("Device (µs)", lambda s: format_us(s.device_us)),
        Column("Device (%)", lambda s: f"{100 * s.device_us / total:.1f}" if total > 0 else ""),
        Column("Mean (µs)", lambda s: format_us(s.mean_us)),
        Column("Min (µs)", lambda s: format_us(s.min_us)),
        Column("Max (µs)", lambda s: format_us(s.max_us)),
        Column("Cores", lambda s: ",".join(str(c) for c in s.cores), left=True),
    ]


def _step_cols() -> list[Column[StepDevice]]:
    return [
        Column("Step", lambda s: f"ProfilerStep#{s.step}", left=True),
        Column("Length (µs)", lambda s: format_us(s.duration_us)),
        Column("Busy, any core (µs)", lambda s: format_us(s.busy_us)),
        Column("Busy (%)", lambda s: f"{s.busy_pct:.1f}"),
        Column("Idle (µs)", lambda s: format_us(s.idle_us)),
        Column("Executions", lambda s: str(s.executions)),
        Column("Idle gaps", lambda s: str(s.gaps)),
        Column("Largest gap (µs)", lambda s: format_us(s.largest_gap_us)),
    ]


def _join_cols() -> list[Column[JoinedOp]]:
    return [
        Column("Op", lambda j: j.op, left=True),
        Column("NEFF", lambda j: j.neff, left=True),
        Column("Executions", lambda j: str(j.executions)),
        Column("Device (µs)", lambda j: format_us(j.device_us)),
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


def profile_view(profile: NeuronProfile, fmt: Format) -> list[Block]:
    """A [`NeuronProfile`][neuronprof.analysis.NeuronProfile]: engines, NEFF executions, steps (and the join), notes.

    CSV is every figure in long form, ``section,name,field,value``: ``section`` is
    ``engines``, ``neffs``, ``steps``, ``join`` (the flow_id join, where Neuron's Parquet
    output was read) or ``peaks`` (the profile's own); values are in the model's units
    (µs, %, bytes, FLOPs); a figure that is not available is an empty value.
    """
    if fmt == "csv":
        cells = [(s, n, f, "" if v is None else str(v)) for s, n, f, v in _figures(profile)]
        return [tuple_grid(("section", "name", "field", "value"), cells)]
    parts: list[tuple[str, Sequence[Column[Any]], Sequence[Any]]] = [
        ("Engines per device profile", _engine_cols(), profile.summaries),
        ("NEFF executions", _neff_cols(profile), profile.neffs),
        ("NeuronCore activity per step", _step_cols(), profile.steps),
    ]
    if profile.flow_join is not None:
        # Only where Neuron's Parquet output was read: the section says the join was tried.
        parts.append((_JOINED, _join_cols(), profile.flow_join.ops))
    title = "**{}**\n" if fmt == "markdown" else "{}:"
    blocks: list[Block] = [*titled(_header(profile), fmt)]
    for name, cols, rows in parts:
        blocks += ["", title.format(name), Grid(cols, rows) if rows else _empty(name, profile)]
    return [*blocks, "", *titled(_footer(profile), fmt)]


def _figures(profile: NeuronProfile) -> Iterator[tuple[str, str, str, object]]:
    """Every figure of the profile as ``(section, name, field, value)``."""
    for s in profile.summaries:
        yield "engines", s.label, "kind", s.kind
        yield "engines", s.label, "total_us", s.total_us
        for e in s.engines:
            yield "engines", s.label, f"{e.engine}_active_us", e.active_us
            yield "engines", s.label, f"{e.engine}_share_pct", e.share_pct
        for fld in ("hbm_read_bytes", "hbm_write_bytes", "hardware_flops", "model_flops", "mfu_pct", "mbu_pct"):
            yield "engines", s.label, fld, getattr(s, fld)
    for n in profile.neffs:
        for fld in ("calls", "device_us", "mean_us", "min_us", "max_us"):
            yield "neffs", n.neff, fld, getattr(n, fld)
        yield "neffs", n.neff, "cores", " ".join(str(c) for c in n.cores)
    if profile.flow_join is not None:
        j = profile.flow_join
        for fld in ("executions", "matched", "match_rate"):
            yield "join", "flow_id", fld, getattr(j, fld)
        for o in j.ops:
            yield "join", f"{o.op} / {o.neff}", "executions", o.executions
            yield "join", f"{o.op} / {o.neff}", "device_us", o.device_us
    if profile.peak is not None:
        yield "peaks", "profile", "flops_per_s", profile.peak.flops_per_s
        yield "peaks", "profile", "bytes_per_s", profile.peak.bytes_per_s
    for st in profile.steps:
        for fld in ("duration_us", "busy_us", "busy_pct", "idle_us", "executions", "gaps", "largest_gap_us"):
            yield "steps", f"ProfilerStep#{st.step}", fld, getattr(st, fld)


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
    totals = [(y, 100.0 if normalize else s.total_us) for y, s in zip(ys, shown) if s.total_us is not None]
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
