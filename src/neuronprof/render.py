"""Renderers: pure functions from the model to text, Markdown, CSV and HTML.

They read [`Table`][neuronprof.Table] objects only, never torch, so a table
loaded from JSON on a laptop renders exactly as it did on the Trainium host.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from neuronprof.model import OpRow, RankTable, Table

__all__ = ["render_csv", "render_html", "render_markdown", "render_text", "format_us"]

_NAME_WIDTH = 60


def format_us(value: Optional[float]) -> str:
    """Format microseconds for a table cell: blank for ``None``, one decimal otherwise."""
    if value is None:
        return ""
    return f"{value:.1f}"


def _format_int(value: Optional[int]) -> str:
    return "" if value is None else str(value)


def _format_shapes(row: OpRow) -> str:
    if row.input_shapes is None:
        return ""
    return "[" + ", ".join("[" + ", ".join(str(d) for d in s) + "]" for s in row.input_shapes) + "]"


@dataclasses.dataclass(frozen=True)
class _Column:
    header: str
    cell: Callable[[OpRow], str]
    align_left: bool = False


def _columns(table: Table) -> list[_Column]:
    cols = [
        _Column("Name", lambda r: r.name, align_left=True),
        _Column("Calls", lambda r: str(r.calls)),
        _Column("Self CPU (µs)", lambda r: format_us(r.self_cpu_us)),
        _Column("CPU total (µs)", lambda r: format_us(r.cpu_total_us)),
    ]
    label = table.device_label
    if label:
        total = table.self_device_us or 0.0
        cols += [
            _Column(f"Self {label} (µs)", lambda r: format_us(r.self_device_us)),
            _Column(f"{label} total (µs)", lambda r: format_us(r.device_total_us)),
            _Column(
                f"Self {label} (%)",
                lambda r: "" if r.self_device_us is None or total <= 0 else f"{100 * r.self_device_us / total:.1f}",
            ),
        ]
    if any(r.flops is not None for r in table.rows):
        cols.append(_Column("FLOPs", lambda r: _format_int(r.flops)))
    if any(r.self_cpu_memory_bytes is not None for r in table.rows):
        cols.append(_Column("Self CPU mem (B)", lambda r: _format_int(r.self_cpu_memory_bytes)))
    if any(r.self_device_memory_bytes is not None for r in table.rows):
        cols.append(_Column(f"Self {label or 'device'} mem (B)", lambda r: _format_int(r.self_device_memory_bytes)))
    if any(r.input_shapes is not None for r in table.rows):
        cols.append(_Column("Input shapes", _format_shapes, align_left=True))
    return cols


def _truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _footer(table: Table) -> list[str]:
    parts = [f"Self CPU total: {format_us(table.self_cpu_us)} µs"]
    if table.device_label:
        device_total = table.self_device_us
        parts.append(f"Self {table.device_label} total: {format_us(device_total) or '-'} µs")
    parts.append(f"{table.steps} profiled step{'s' if table.steps != 1 else ''}")
    parts.append(f"sorted by {table.sort_by}")
    lines = ["; ".join(parts)]
    if table.total_rows is not None and table.total_rows > len(table.rows):
        lines.append(f"showing {len(table.rows)} of {table.total_rows} rows")
    lines.extend(f"note: {n}" for n in table.notes)
    return lines


def render_text(table: Table) -> str:
    """Render a table as aligned plain text, with totals and notes underneath."""
    cols = _columns(table)
    cells: list[Sequence[str]] = [[c.header for c in cols]]
    for r in table.rows:
        cells.append([_truncate(c.cell(r), _NAME_WIDTH) if c.align_left else c.cell(r) for c in cols])
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = []
    for n, row in enumerate(cells):
        out = [
            cell.ljust(widths[i]) if cols[i].align_left else cell.rjust(widths[i]) for i, cell in enumerate(row)
        ]
        lines.append("  ".join(out).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    if not table.rows:
        lines.append("(no rows)")
    lines.append("")
    lines.extend(_footer(table))
    return "\n".join(lines)


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(table: Table) -> str:
    """Render a table as a GitHub-flavoured Markdown table followed by its totals."""
    cols = _columns(table)
    lines = [
        "| " + " | ".join(c.header for c in cols) + " |",
        "| " + " | ".join(":---" if c.align_left else "---:" for c in cols) + " |",
    ]
    for r in table.rows:
        lines.append("| " + " | ".join(_md_escape(c.cell(r)) for c in cols) + " |")
    lines.append("")
    lines.extend(_footer(table))
    return "\n".join(lines) + "\n"


def render_csv(table: Table) -> str:
    """Render a table as CSV with one column per OpRow field; ``None`` is an empty cell."""
    from neuronprof.model import OpRow

    names = [f.name for f in dataclasses.fields(OpRow)]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for r in table.rows:
        values = []
        for name in names:
            v = getattr(r, name)
            if v is None:
                values.append("")
            elif name == "input_shapes":
                values.append(_format_shapes(r))
            elif name == "input_dtypes":
                values.append(" ".join(v))
            elif isinstance(v, float):
                values.append(round(v, 3))
            else:
                values.append(v)
        writer.writerow(values)
    return buf.getvalue()


def render_html(table: Table) -> str:
    """Render a table as an HTML ``<table>`` for notebooks; the top device row is bold."""
    cols = _columns(table)
    out = ['<table class="neuronprof-table">', "<thead><tr>"]
    out += [f'<th style="text-align:{"left" if c.align_left else "right"}">{html.escape(c.header)}</th>' for c in cols]
    out.append("</tr></thead><tbody>")
    best = max((r.self_device_us or 0 for r in table.rows), default=0)
    for r in table.rows:
        strong = best > 0 and r.self_device_us == best
        out.append("<tr>")
        for c in cols:
            text = html.escape(c.cell(r))
            if strong:
                text = f"<b>{text}</b>"
            out.append(f'<td style="text-align:{"left" if c.align_left else "right"}">{text}</td>')
        out.append("</tr>")
    out.append("</tbody></table>")
    out.append("<p>" + "<br>".join(html.escape(line) for line in _footer(table)) + "</p>")
    return "".join(out)


def render_rank_table(table: RankTable, row_limit: Optional[int] = 20) -> str:
    """Render a cross-rank table: min / median / max per op and the slowest rank."""
    unit = "device" if table.metric == "self_device_us" else "CPU"
    header = ["Name", f"Min self {unit} (µs)", "Median (µs)", "Max (µs)", "Max/median", "Slowest rank"]
    rows = table.rows if row_limit is None else table.rows[:row_limit]
    cells = [header] + [
        [
            _truncate(r.name, _NAME_WIDTH),
            format_us(r.min_us),
            format_us(r.median_us),
            format_us(r.max_us),
            f"{r.spread:.2f}",
            str(r.slowest_rank),
        ]
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(f"{table.world_size} ranks; sorted by the slowest rank's self {unit} time")
    return "\n".join(lines)
