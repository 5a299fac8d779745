"""Renderers: pure functions from the model to text, Markdown, CSV and HTML.

They read [`Table`][neuronprof.Table] objects only, never torch, so a table
loaded from JSON on a laptop renders exactly as it did on the Trainium host.

A little over 500 lines, kept in one module on purpose: the table, cross-rank and
comparison renderers share the column, cell and alignment helpers at the top, and
keeping them together keeps every view's text, Markdown, CSV and HTML forms alike.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.model import limit_rows

if TYPE_CHECKING:
    from neuronprof.model import OpRow, RankTable, Shape, Table

__all__ = [
    "align_columns",
    "format_shapes",
    "format_us",
    "host_and_device_names",
    "render_csv",
    "render_html",
    "render_markdown",
    "render_text",
    "one_line",
    "short_names",
    "truncate",
]

_NAME_WIDTH = 60


def format_us(value: Optional[float]) -> str:
    """Format microseconds for a table cell: blank for ``None``, one decimal otherwise."""
    if value is None:
        return ""
    return f"{value:.1f}"


def _format_int(value: Optional[int]) -> str:
    return "" if value is None else str(value)


def format_shapes(shapes: Optional[tuple[Shape, ...]]) -> str:
    """Format input shapes for a table cell: ``[[4096, 4096], []]``; blank for ``None``."""
    if shapes is None:
        return ""
    return "[" + ", ".join("[" + ", ".join(str(d) for d in s) + "]" for s in shapes) + "]"


def _format_shapes(row: OpRow) -> str:
    return format_shapes(row.input_shapes)


@dataclasses.dataclass(frozen=True)
class _Column:
    header: str
    cell: Callable[[OpRow], str]
    align_left: bool = False


def host_and_device_names(rows: Iterable[Any]) -> set[str]:
    """Names that are both a host op and a device kernel among ``rows`` (e.g. a Triton kernel and its launcher).

    Args:
        rows: Rows with ``name`` and ``on_device`` ([`OpRow`][neuronprof.OpRow], diff rows).
    """
    rows = list(rows)
    host = {r.name for r in rows if not r.on_device}
    return {r.name for r in rows if r.on_device and r.name in host}


def _columns(table: Table) -> list[_Column]:
    cols = [_Column("Name", lambda r: r.name, align_left=True)]
    if host_and_device_names(table.rows):
        # A host op and a kernel of the same name would print as identical rows.
        cols.append(_Column("On", lambda r: "device" if r.on_device else "host", align_left=True))
    cols += [
        _Column("Calls", lambda r: str(r.calls)),
        _Column("Self CPU (µs)", lambda r: format_us(r.self_cpu_us)),
        _Column("CPU total (µs)", lambda r: format_us(r.cpu_total_us)),
    ]
    label = table.device_label
    if label and table.self_device_us is not None:
        # No row has a device value (not even 0.0) where no device time reaches torch: no columns.
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


# Control characters (a newline in a record_function label) would split a row of a
# text or Markdown table; they are shown as their escapes instead.
# str.splitlines() also breaks at C1 controls (U+0085) and U+2028/U+2029.
_CONTROL = {c: chr(c).encode("unicode_escape").decode() for c in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)}


def one_line(text: str) -> str:
    """Return ``text`` on one line: newlines, tabs and other control characters as escapes (``\\n``)."""
    return text.translate(_CONTROL)


def truncate(text: str, width: int = _NAME_WIDTH) -> str:
    """Fit ``text`` on one line of at most ``width`` characters, cutting the middle.

    Long kernel and template names differ at their ends
    (``...BinaryFunctor<float, float, float, MulFunctor>>``), so both ends are kept
    and ``…`` replaces the middle.

    Args:
        text: The name to shorten.
        width: The most characters to keep, the ``…`` included.

    Returns:
        ``text`` itself when it fits, else its start, ``…`` and its end.
    """
    text = one_line(text)
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    tail = width - 1 - head
    return text[:head] + "…" + text[-tail:]


def short_names(names: Sequence[str], width: int = _NAME_WIDTH) -> list[str]:
    """Shorten names for a text table, keeping different names different.

    Each name is [`truncate`][neuronprof.render.truncate]d; names that would
    still print identically are shown whole (on one line).
    """
    short = [truncate(n, width) for n in names]
    owners: dict[str, set[str]] = {}
    for name, cut in zip(names, short):
        owners.setdefault(cut, set()).add(name)
    return [one_line(n) if len(owners[cut]) > 1 else cut for n, cut in zip(names, short)]


def align_columns(cells: Sequence[Sequence[str]], left: Sequence[bool]) -> list[str]:
    """Lay out formatted cells (header row first) as aligned text lines, with a rule under the header.

    Args:
        cells: Rows of cell strings; the first row is the header.
        left: Per column, True to align left (names), False to align right (numbers).
    """
    widths = [max(len(row[i]) for row in cells) for i in range(len(left))]
    lines = []
    for n, row in enumerate(cells):
        out = [cell.ljust(widths[i]) if left[i] else cell.rjust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(out).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def communication_line(table: Table) -> str:
    """The footer's line for the time in async collective spans, naming their rows."""
    comm = table.communication_us or 0.0
    names = [r.name for r in table.rows if vocab.is_async_span(r.name, vocab.K_OTHER)]
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    per_step = f" ({format_us(comm / table.steps)} µs per step)" if table.steps else ""
    rank = f" on rank {table.rank}" if table.rank is not None else ""
    return (
        f"Communication{rank}: {format_us(comm)} µs{per_step} in async collective spans"
        + (f" ({shown})" if shown else "")
        + "; in their CPU total, not in self CPU (they run on the process group's threads)"
    )


def _footer(table: Table) -> list[str]:
    parts = [f"Self CPU total: {format_us(table.self_cpu_us)} µs"]
    if table.device_label and table.self_device_us is not None:
        device_total = table.self_device_us
        parts.append(f"Self {table.device_label} total: {format_us(device_total) or '-'} µs")
    parts.append(f"{table.steps} profiled step{'s' if table.steps != 1 else ''}")
    parts.append(f"sorted by {table.sort_by}")
    lines = ["; ".join(parts)]
    if table.communication_us is not None:
        lines.append(communication_line(table))
    if table.total_rows is not None and table.total_rows > len(table.rows):
        lines.append(f"showing {len(table.rows)} of {table.total_rows} rows")
    lines.extend(f"note: {one_line(n)}" for n in table.notes)
    return lines


def _text_cells(columns: Sequence[tuple[bool, Sequence[str]]]) -> list[list[str]]:
    """Turn columns of raw cells into rows of text cells; left-aligned (name) columns are shortened."""
    shaped = [short_names(values) if left else list(values) for left, values in columns]
    return [list(row) for row in zip(*shaped)] if shaped else []


def render_text(table: Table) -> str:
    """Render a table as aligned plain text, with totals and notes underneath."""
    cols = _columns(table)
    cells: list[Sequence[str]] = [[c.header for c in cols]]
    cells += _text_cells([(c.align_left, [c.cell(r) for r in table.rows]) for c in cols])
    lines = align_columns(cells, [c.align_left for c in cols])
    if not table.rows:
        lines.append("(no rows)")
    lines.append("")
    lines.extend(_footer(table))
    return "\n".join(lines)


def _md_escape(text: str) -> str:
    return one_line(text).replace("|", "\\|")


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


def render_csv(table: Table, notes: bool = False) -> str:
    """Render a table as CSV with one column per OpRow field; ``None`` is an empty cell.

    With ``notes=True`` the table's notes follow the rows as ``# note: ...`` comment lines.

    Args:
        table: The table to render.
        notes: Append the table's notes as comment lines.

    Returns:
        The CSV text, a header row first; times in microseconds, memory in bytes.
    """
    from neuronprof.model import OpRow

    names = [f.name for f in dataclasses.fields(OpRow)]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for r in table.rows:
        values: list[object] = []
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
    return buf.getvalue() + (csv_notes(table.notes) if notes else "")


def csv_notes(notes: Iterable[str]) -> str:
    """Notes as ``# note: ...`` comment lines after the CSV rows (``pandas.read_csv(..., comment="#")`` skips them).

    A line break inside a note becomes a space, so every note stays one comment line.
    """
    return "".join(f"# note: {' '.join(str(n).splitlines())}\n" for n in notes)


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


def rank_metric_unit(metric: str) -> str:
    """The words for a cross-rank metric in column headers: ``"self device"``, ``"total CPU"``..."""
    words = {
        "self_device_us": "self device",
        "device_total_us": "total device",
        "self_cpu_us": "self CPU",
        "cpu_total_us": "total CPU",
    }
    return words.get(metric, metric)


def rank_footer(table: RankTable) -> list[str]:
    """The lines under a cross-rank table: ranks, what it is sorted by, per-rank totals, notes."""
    n = table.world_size
    unit = "device" if table.metric in ("self_device_us", "device_total_us") else "CPU"
    lines = [f"{n} rank{'s' if n != 1 else ''}; {table.sort_description}"]
    compute = table.compute_per_step_us
    waited = table.collective_wait_per_step_us
    for rank, t in enumerate(table.tables):
        total = t.self_device_us if unit == "device" else t.self_cpu_us
        steps = f"{t.steps} profiled step{'s' if t.steps != 1 else ''}"
        comm = t.communication_us
        comm_text = f", communication {format_us(comm)} µs (async collectives)" if comm is not None else ""
        work = compute[rank]
        work_text = (
            f", compute {format_us(work)} µs/step (its step less {format_us(waited[rank])} µs/step in collectives)"
            if work is not None
            else ""
        )
        lines.append(f"rank {rank}: self {unit} total {format_us(total) or '-'} µs, {steps}{work_text}{comm_text}")
    if n > 1:
        lines.append(straggler_line(table.straggler, compute))
    lines.extend(f"note: {note}" for note in table.notes)
    return lines


def straggler_line(straggler: Optional[int], compute_per_step_us: Sequence[Optional[float]]) -> str:
    """The line that names the straggler of several ranks, or says why none is named.

    Args:
        straggler: The rank the others wait for (``neuronprof._vocabulary.straggler``), or ``None``.
        compute_per_step_us: Per rank, its compute per step (µs), ``None`` without steps.
    """
    if straggler is not None:
        others = [v for r, v in enumerate(compute_per_step_us) if r != straggler and v is not None]
        return (
            f"straggler: rank {straggler}, the rank the others wait for: {format_us(compute_per_step_us[straggler])} "
            f"µs of compute per step, the most of {len(others) + 1} ranks (next: {format_us(max(others))} µs); "
            "compute is step time less time in collectives"
        )
    known = [v for v in compute_per_step_us if v is not None]
    if len(known) < 2:
        return "straggler: not known (fewer than two ranks recorded steps)"
    return "straggler: none (no rank computes 25 % longer per step than every other: within a shared machine's noise)"


def render_rank_table(table: RankTable, row_limit: Optional[int] = 20) -> str:
    """Render a cross-rank table: min / median / max per op and the slowest rank."""
    unit = rank_metric_unit(table.metric)
    both = host_and_device_names(table.rows)
    shapes = any(r.input_shapes is not None for r in table.rows)
    header = ["Name", *(["On"] if both else []), *(["Input shapes"] if shapes else [])]
    header += [f"Min {unit} (µs)", "Median (µs)", "Max (µs)", "Max/median", "Slowest rank"]
    rows = limit_rows(table.rows, row_limit)
    names = short_names([r.name for r in rows])
    cells = [header] + [
        [
            name,
            *(["device" if r.on_device else "host"] if both else []),
            *([format_shapes(r.input_shapes)] if shapes else []),
            format_us(r.min_us),
            format_us(r.median_us),
            format_us(r.max_us),
            f"{r.spread:.2f}",
            str(r.slowest_rank),
        ]
        for name, r in zip(names, rows)
    ]
    lines = align_columns(cells, [i < len(header) - 5 for i in range(len(header))])
    if not rows:
        lines.append("(no rows)")
    lines.append("")
    total = len(table.rows) if table.total_rows is None else table.total_rows
    if len(rows) < total:
        lines.append(f"showing {len(rows)} of {total} rows")
    lines.extend(rank_footer(table))
    return "\n".join(lines)


# -- comparisons --------------------------------------------------------------------------

if TYPE_CHECKING:
    from matplotlib.figure import Figure  # noqa: E402

    from neuronprof.model import Comparison, ComparisonRow  # noqa: E402

__all__ += [
    "render_comparison_figure",
    "render_comparison_html",
    "render_comparison_markdown",
    "render_comparison_text",
]


@dataclasses.dataclass(frozen=True)
class _CmpColumn:
    header: str
    cell: Callable[[ComparisonRow], str]
    # Which value is best in this column: "low", "high", or None (not marked).
    best: Optional[str] = None
    value: Optional[Callable[[ComparisonRow], Optional[float]]] = None
    align_left: bool = False


def _format_calls(value: Optional[float]) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def _format_speedup(value: float) -> str:
    # Two decimals read well around 1×; a variant 1000× slower still needs digits.
    return f"{value:.2f}×" if value >= 0.1 else f"{value:.2g}×"


def _format_speedup_cell(r: ComparisonRow) -> str:
    """The speedup with its 95 % interval: ``2.10× (1.95–2.30)``."""
    if r.speedup_low is None or r.speedup_high is None:
        return _format_speedup(r.speedup)
    # A bound that rounds to 1.00 gets a third decimal: the interval excludes 1 or holds it.
    low, high = (
        f"{v:.3f}" if f"{v:.2f}" == "1.00" else _format_speedup(v).rstrip("×") for v in (r.speedup_low, r.speedup_high)
    )
    return f"{_format_speedup(r.speedup)} ({low}–{high})"


def _cmp_columns(cmp: Comparison) -> list[_CmpColumn]:
    cols = [
        _CmpColumn(
            "Variant",
            lambda r: r.name + (" (baseline)" if r.name == cmp.baseline else ""),
            align_left=True,
        ),
        _CmpColumn("Ops", lambda r: _format_calls(r.op_calls)),
        _CmpColumn("Self CPU (µs)", lambda r: format_us(r.self_cpu_us), "low", lambda r: r.self_cpu_us),
    ]
    if cmp.device_label and any(r.self_device_us is not None for r in cmp.rows):
        cols.append(
            _CmpColumn(
                f"Self {cmp.device_label} (µs)",
                lambda r: format_us(r.self_device_us),
                "low",
                lambda r: r.self_device_us,
            )
        )
    cols += [
        # Short headers with the unit in them, so that the table fits a 1280 px page;
        # the footer says what each one measures.
        _CmpColumn("Median (µs)", lambda r: format_us(r.wall_us), "low", lambda r: r.wall_us),
        _CmpColumn("Min–max (µs)", lambda r: f"{format_us(r.wall_us_min)}–{format_us(r.wall_us_max)}"),
        # The best speedup is marked only where its interval excludes 1.0 (beyond noise).
        _CmpColumn(
            "Speedup (95% CI)",
            _format_speedup_cell,
            "high",
            lambda r: r.speedup if r.measurably_different or r.name == cmp.baseline else None,
        ),
        _CmpColumn("1st call (s)", lambda r: f"{r.compile_s:.3f}"),
    ]
    return cols


def _best_cells(cmp: Comparison, cols: Sequence[_CmpColumn]) -> set[tuple[int, int]]:
    """Return (row, column) positions holding the best value of a marked column."""
    marked: set[tuple[int, int]] = set()
    if len(cmp.rows) < 2:
        return marked
    for j, col in enumerate(cols):
        if col.best is None or col.value is None:
            continue
        values = [col.value(r) for r in cmp.rows]
        present = [v for v in values if v is not None]
        if len(present) < 2:
            continue
        target = min(present) if col.best == "low" else max(present)
        marked.update((i, j) for i, v in enumerate(values) if v == target)
    return marked


def _cmp_footer(cmp: Comparison) -> list[str]:
    rounds = f"{cmp.repeats} interleaved round{'s' if cmp.repeats != 1 else ''}"
    steps = f"{cmp.profiled_steps} step{'s' if cmp.profiled_steps != 1 else ''}"
    lines = [
        f"Speedup: median wall time of {cmp.baseline!r} ÷ the variant's, with its 95% interval (Hodges–Lehmann "
        "over the timed samples); * marks the best value in a column, a speedup only where its interval excludes 1.",
        f"Median, Min–max: wall time per call over {rounds}, timed outside the profiler after {cmp.warmup} "
        "warm-up call(s); 1st call: the first call (compilation), reported apart and left out.",
        f"Ops and self times: per step, from one profiled session per variant ({steps}; backend {cmp.backend}).",
    ]
    if any(r.speedup_low is None for r in cmp.rows if r.name != cmp.baseline):
        from neuronprof.analysis._verdict import min_samples

        lines.append(
            f"note: a speedup without an interval has too few timed samples for one (at least {min_samples()} "
            "on each side: repeats=4 or more)"
        )
    lines.extend(f"note: {n}" for n in cmp.notes)
    lines.extend(_cmp_findings(cmp))
    return lines


def _cmp_findings(cmp: Comparison) -> list[str]:
    """The findings that tell the variants apart (``insights.md`` explains each kind)."""
    differ = cmp.finding_differences()
    if not differ or not any(differ.values()):
        return []
    lines = ["Findings that differ between variants (see insights.md):"]
    for name, kinds in differ.items():
        lines.append(f"  {name}: {', '.join(kinds) if kinds else 'none of them'}")
    return lines


def render_comparison_text(cmp: Comparison) -> str:
    """Render a comparison as aligned plain text; the best value of each column is marked ``*``."""
    cols = _cmp_columns(cmp)
    best = _best_cells(cmp, cols)
    cells: list[list[str]] = [[c.header for c in cols]]
    texts = _text_cells([(c.align_left, [c.cell(r) for r in cmp.rows]) for c in cols])
    for i in range(len(cmp.rows)):
        row = []
        for j, c in enumerate(cols):
            text = texts[i][j]
            if c.best is not None:
                # A fixed-width marker slot keeps the numbers aligned whether marked or not.
                text += " *" if (i, j) in best else "  "
            row.append(text)
        cells.append(row)
    lines = align_columns(cells, [c.align_left for c in cols])
    if not cmp.rows:
        lines.append("(no variants)")
    lines.append("")
    lines.extend(_cmp_footer(cmp))
    return "\n".join(lines)


def render_comparison_markdown(cmp: Comparison) -> str:
    """Render a comparison as a GitHub-flavoured Markdown table; the best value of each column is bold."""
    cols = _cmp_columns(cmp)
    best = _best_cells(cmp, cols)
    lines = [
        "| " + " | ".join(c.header for c in cols) + " |",
        "| " + " | ".join(":---" if c.align_left else "---:" for c in cols) + " |",
    ]
    for i, r in enumerate(cmp.rows):
        cells = []
        for j, c in enumerate(cols):
            text = _md_escape(c.cell(r))
            cells.append(f"**{text}**" if (i, j) in best and text else text)
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.extend(line.replace("* marks", "bold marks") for line in _cmp_footer(cmp))
    return "\n".join(lines) + "\n"


def render_comparison_html(cmp: Comparison) -> str:
    """Render a comparison as an HTML ``<table>`` for notebooks; the best value of each column is bold."""
    cols = _cmp_columns(cmp)
    best = _best_cells(cmp, cols)
    out = ['<table class="neuronprof-comparison">', "<thead><tr>"]
    out += [f'<th style="text-align:{"left" if c.align_left else "right"}">{html.escape(c.header)}</th>' for c in cols]
    out.append("</tr></thead><tbody>")
    for i, r in enumerate(cmp.rows):
        out.append("<tr>")
        for j, c in enumerate(cols):
            text = html.escape(c.cell(r))
            if (i, j) in best:
                text = f"<b>{text}</b>"
            out.append(f'<td style="text-align:{"left" if c.align_left else "right"}">{text}</td>')
        out.append("</tr>")
    out.append("</tbody></table>")
    footer = [line.replace("* marks", "bold marks") for line in _cmp_footer(cmp)]
    out.append("<p>" + "<br>".join(html.escape(line) for line in footer) + "</p>")
    return "".join(out)


def render_comparison_figure(cmp: Comparison, title: Optional[str] = None) -> Figure:
    """Draw a comparison as a matplotlib ``Figure``, off screen.

    Top: median wall time per call, with the fastest and slowest sample as a
    whisker and the speedup written beside each bar. Bottom: self device time per
    step (self CPU time when there is no device). The baseline is always grey, the
    best other variant green (only where it beats the baseline), the rest blue; the
    legend under the title lists exactly the colours drawn. The two panels are
    stacked and the text is large, so the figure stays readable when a page scales
    it down to a phone's width. ``pyplot`` is not used, so no global matplotlib
    state changes.

    Args:
        cmp: The comparison to draw.
        title: What is compared, e.g. ``"RMSNorm three ways"``; the figure's title
            is this, then the variants and the backend. Default: the variants only.

    Returns:
        The figure, 5.6 inches wide; save it with ``fig.savefig(path)``.

    Raises:
        ImportError: matplotlib is not installed (``pip install 'neuronprof[plot]'``).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("plotting a comparison needs matplotlib: pip install 'neuronprof[plot]'") from None
    import textwrap

    from matplotlib.patches import Patch

    baseline_colour, best_colour, other_colour = "#9e9e9e", "#2ca02c", "#1f77b4"
    names = [r.name for r in cmp.rows]
    positions = list(range(len(names)))

    def colours(values: list[Optional[float]]) -> list[str]:
        # Green only for a variant that beats the baseline: a green baseline would read as "a variant".
        by_name = dict(zip(names, values))
        others = [(v, n) for n, v in by_name.items() if v is not None and n != cmp.baseline]
        base = by_name.get(cmp.baseline)
        best = min(others)[1] if others and (base is None or min(others)[0] < base) else None
        return [baseline_colour if n == cmp.baseline else best_colour if n == best else other_colour for n in names]

    use_device = cmp.device_label is not None and any(r.self_device_us is not None for r in cmp.rows)
    right_label = f"Self {cmp.device_label} per step (µs)" if use_device else "Self CPU per step (µs)"
    right_values = [(r.self_device_us if use_device else r.self_cpu_us) for r in cmp.rows]

    compared = " vs ".join(names)
    heading = textwrap.fill(f"{title}: {compared}" if title else compared, 40) + f"\n(backend {cmp.backend})"
    # Margins in inches, turned into figure fractions: title lines and legend on top, an
    # x label under each panel, the longest variant name on the left (14 pt ~ 0.12 inch a letter).
    top_in = 0.2 + 0.28 * (heading.count("\n") + 1) + 0.5
    panel_in = 0.9 + 0.45 * max(len(names), 1)
    gap_in, bottom_in = 0.85, 0.7
    height = top_in + 2 * panel_in + gap_in + bottom_in
    width = 5.6
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(
        top=1 - top_in / height,
        bottom=bottom_in / height,
        left=min(0.2 + 0.12 * max((len(n) for n in names), default=4), 2.8) / width,
        right=1 - 0.2 / width,
        hspace=gap_in / panel_in,
    )
    wall_ax, self_ax = fig.subplots(2, 1)
    medians = [r.wall_us for r in cmp.rows]
    low = [max(r.wall_us - r.wall_us_min, 0.0) for r in cmp.rows]
    high = [max(r.wall_us_max - r.wall_us, 0.0) for r in cmp.rows]
    # The wall panel's green is a verdict: only for a variant measurably faster than the baseline.
    wall_colours = colours([r.wall_us if r.name == cmp.baseline or r.measurably_different else None for r in cmp.rows])
    wall_ax.barh(positions, medians, xerr=[low, high], color=wall_colours, capsize=3)
    for y, r in zip(positions, cmp.rows):
        wall_ax.annotate(
            _format_speedup(r.speedup),
            (r.wall_us_max, y),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=14,
        )
    wall_ax.set_xlabel("Wall time per call (µs): median, whiskers min–max", fontsize=14)
    self_colours = colours(right_values)
    self_ax.barh(positions, [v or 0.0 for v in right_values], color=self_colours)
    self_ax.set_xlabel(right_label, fontsize=14)
    for ax, margin in ((wall_ax, 0.25), (self_ax, 0.1)):
        # A few ticks only: six-digit microsecond labels run into each other otherwise.
        ax.locator_params(axis="x", nbins=4)
        ax.set_yticks(positions, labels=names)
        ax.tick_params(labelsize=14)
        ax.invert_yaxis()
        ax.margins(x=margin)
    fig.suptitle(heading, fontsize=15, y=1 - 0.1 / height, va="top")
    handles = [Patch(color=baseline_colour, label=f"baseline ({cmp.baseline})")]
    drawn = set(wall_colours) | set(self_colours)
    if best_colour in drawn:
        handles.append(Patch(color=best_colour, label="best"))
    if other_colour in drawn:
        handles.append(Patch(color=other_colour, label="other variants"))
    fig.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 1 - (top_in - 0.5) / height),
        ncol=len(handles),
        frameon=False,
        fontsize=14,
    )
    return fig
