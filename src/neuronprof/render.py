"""Renderers: one column engine, and the views of the live table, the cross-rank table and comparisons.

Pure functions from the model to text, Markdown, CSV and HTML; they read the models
only, never torch, so a table loaded from JSON on a laptop renders exactly as it did on
the Trainium host. Every model's view is a list of blocks, lines and [`Grid`][neuronprof.render.Grid]s
of [`Column`][neuronprof.render.Column]s, and [`lay_out`][neuronprof.render.lay_out] sets
them in each format (torch.utils.benchmark's one ``_Column``/``Table`` engine, in spirit).

About 700 lines, kept in one module on purpose: the engine, the cell helpers and the views of
the three top-level models (and the comparison's figure) are read together when a column
changes, which keeps every view's forms alike.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import html
import io
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Optional, TypeVar, Union

from neuronprof import _vocabulary as vocab

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from neuronprof.model import Comparison, ComparisonRow, OpRow, RankOpRow, RankTable, Shape, Table

__all__ = [
    "Column",
    "Grid",
    "align_columns",
    "format_shapes",
    "format_us",
    "host_and_device_names",
    "lay_out",
    "one_line",
    "render_comparison_figure",
    "short_names",
    "truncate",
]

_NAME_WIDTH = 60

# The forms every result model renders to: "text", "markdown", "csv" and "html" (to_text, to_markdown,
# to_csv, to_html). Private to the models and views, so a plain str and not an option of neuronprof.typing.
Format = str

R = TypeVar("R")


def format_us(value: Optional[float]) -> str:
    """Format microseconds for a table cell: blank for ``None``, one decimal otherwise."""
    return "" if value is None else f"{value:.1f}"


def format_int(value: Optional[int]) -> str:
    """An integer cell: blank for ``None``."""
    return "" if value is None else str(value)


def format_shapes(shapes: Optional[tuple[Shape, ...]]) -> str:
    """Format input shapes for a table cell: ``[[4096, 4096], []]``; blank for ``None``."""
    if shapes is None:
        return ""
    return "[" + ", ".join("[" + ", ".join(str(d) for d in s) + "]" for s in shapes) + "]"


def host_and_device_names(rows: Iterable[Any]) -> set[str]:
    """Names that are both a host op and a device kernel among ``rows`` (e.g. a Triton kernel and its launcher).

    Args:
        rows: Rows with ``name`` and ``on_device`` ([`OpRow`][neuronprof.OpRow], diff rows).
    """
    rows = list(rows)
    host = {r.name for r in rows if not r.on_device}
    return {r.name for r in rows if r.on_device and r.name in host}


def on_column(rows: Sequence[Any]) -> list[Column[Any]]:
    """The "On" column (host or device), where a host op and a kernel share a name and would print alike."""
    if not host_and_device_names(rows):
        return []
    return [Column("On", lambda r: "device" if r.on_device else "host", left=True)]


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


def csv_notes(notes: Iterable[str]) -> str:
    """Notes as ``# note: ...`` comment lines after the CSV rows (``pandas.read_csv(..., comment="#")`` skips them).

    A line break inside a note becomes a space, so every note stays one comment line.
    """
    return "".join(f"# note: {' '.join(str(n).splitlines())}\n" for n in notes)


# -- the column engine -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Column(Generic[R]):
    """One column of a rendered table: its header, how a row reads in it, and its alignment.

    Attributes:
        header: The header, its unit in it (``"Self CPU (µs)"``).
        cell: A row's cell as text (blank for a missing value).
        left: Align left (names, shapes); numbers align right.
        best: ``"low"`` or ``"high"``: mark the best value of the column (``*`` in text,
            bold elsewhere), where two rows or more have one; ``None`` marks nothing.
        value: The number ``best`` compares; ``None`` for a row that takes no part.
        short: Shorten long cells in text (different names stay different); by default the left-aligned ones.
    """

    header: str
    cell: Callable[[R], str]
    left: bool = False
    best: Optional[str] = None
    value: Optional[Callable[[R], Optional[float]]] = None
    short: Optional[bool] = None


@dataclasses.dataclass(frozen=True)
class Grid(Generic[R]):
    """A table of a view: columns over rows.

    Attributes:
        columns: The columns, in order.
        rows: The rows, in order.
        empty: The text form's line under the header when there is no row.
        strong: Rows set in bold in HTML (the top device row of an op table).
        css: The HTML table's class.
    """

    columns: Sequence[Column[R]]
    rows: Sequence[R]
    empty: str = "(no rows)"
    strong: Optional[Callable[[R], bool]] = None
    css: str = "neuronprof-table"

    def best_cells(self) -> set[tuple[int, int]]:
        """(row, column) positions holding the best value of a marked column."""
        marked: set[tuple[int, int]] = set()
        if len(self.rows) < 2:
            return marked
        for j, col in enumerate(self.columns):
            if col.best is None or col.value is None:
                continue
            values = [col.value(r) for r in self.rows]
            present = [v for v in values if v is not None]
            if len(present) < 2:
                continue
            target = min(present) if col.best == "low" else max(present)
            marked.update((i, j) for i, v in enumerate(values) if v == target)
        return marked


Block = Union[str, Grid[Any]]
"""One piece of a view: a line of text, or a table."""


def _text(g: Grid[Any]) -> list[str]:
    cols, best = g.columns, g.best_cells()
    shaped = [
        short_names(values) if (c.left if c.short is None else c.short) else values
        for c, values in ((c, [c.cell(r) for r in g.rows]) for c in cols)
    ]
    cells: list[Sequence[str]] = [[c.header for c in cols]]
    for i in range(len(g.rows)):
        # A fixed-width marker slot keeps a marked column's numbers aligned whether marked or not.
        marks = [(" *" if (i, j) in best else "  ") if c.best is not None else "" for j, c in enumerate(cols)]
        cells.append([shaped[j][i] + marks[j] for j in range(len(cols))])
    lines = align_columns(cells, [c.left for c in cols])
    return lines if g.rows else [*lines, g.empty]


def _md_escape(text: str) -> str:
    return one_line(text).replace("|", "\\|")


def _markdown(g: Grid[Any]) -> list[str]:
    best = g.best_cells()
    lines = [
        "| " + " | ".join(c.header for c in g.columns) + " |",
        "| " + " | ".join(":---" if c.left else "---:" for c in g.columns) + " |",
    ]
    for i, r in enumerate(g.rows):
        cells = [_md_escape(c.cell(r)) for c in g.columns]
        lines.append("| " + " | ".join(f"**{t}**" if (i, j) in best and t else t for j, t in enumerate(cells)) + " |")
    return lines


def _html(g: Grid[Any]) -> str:
    best = g.best_cells()

    def align(c: Column[Any]) -> str:
        return f'style="text-align:{"left" if c.left else "right"}"'

    out = [f'<table class="{g.css}">', "<thead><tr>"]
    out += [f"<th {align(c)}>{html.escape(c.header)}</th>" for c in g.columns]
    out.append("</tr></thead><tbody>")
    for i, r in enumerate(g.rows):
        strong = g.strong is not None and g.strong(r)
        out.append("<tr>")
        for j, c in enumerate(g.columns):
            text = html.escape(c.cell(r))
            out.append(f"<td {align(c)}>{f'<b>{text}</b>' if strong or (i, j) in best else text}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _csv(g: Grid[Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([c.header for c in g.columns])
    writer.writerows([c.cell(r) for c in g.columns] for r in g.rows)
    return buf.getvalue()


def lay_out(blocks: Sequence[Block], fmt: Format) -> str:
    """Set a view's blocks in one format.

    Text: lines and aligned tables, joined by line breaks. Markdown: the same with
    pipe tables, ending in a line break. HTML: each table, and each run of lines as a
    paragraph (``<br>`` between lines). CSV: the view's one table.

    Args:
        blocks: Lines and [`Grid`][neuronprof.render.Grid]s, in order.
        fmt: ``"text"``, ``"markdown"``, ``"html"`` or ``"csv"``.
    """
    if fmt == "csv":
        return "".join(_csv(b) for b in blocks if isinstance(b, Grid))
    if fmt == "html":
        out: list[str] = []
        para: list[str] = []
        for b in [*blocks, ""]:
            if isinstance(b, str) and b:
                para.append(html.escape(b))
                continue
            if para:
                out.append("<p>" + "<br>".join(para) + "</p>")
                para = []
            if isinstance(b, Grid):
                out.append(_html(b))
        return "".join(out)
    table = _text if fmt == "text" else _markdown
    lines = [line for b in blocks for line in ([b] if isinstance(b, str) else table(b))]
    return "\n".join(lines) + ("\n" if fmt == "markdown" else "")


def titled(head: Sequence[str], fmt: Format) -> list[str]:
    """Lines above a table: in Markdown each ends in a hard line break (two spaces)."""
    return [line + "  " for line in head] if fmt == "markdown" else list(head)


def shown(rows: Sequence[object], total_rows: Optional[int], what: str = "rows") -> list[str]:
    """``showing 20 of 143 rows`` when a limit cut the rows; nothing otherwise."""
    total = len(rows) if total_rows is None else total_rows
    return [f"showing {len(rows)} of {total} {what}"] if len(rows) < total else []


# -- the live table ----------------------------------------------------------------------


def _table_columns(table: Table) -> list[Column[OpRow]]:
    cols: list[Column[OpRow]] = [Column("Name", lambda r: r.name, left=True), *on_column(table.rows)]
    cols += [
        Column("Calls", lambda r: str(r.calls)),
        Column("Self CPU (µs)", lambda r: format_us(r.self_cpu_us)),
        Column("CPU total (µs)", lambda r: format_us(r.cpu_total_us)),
    ]
    label = table.device_label
    if label and table.self_device_us is not None:
        # No row has a device value (not even 0.0) where no device time reaches torch: no columns.
        total = table.self_device_us or 0.0
        cols += [
            Column(f"Self {label} (µs)", lambda r: format_us(r.self_device_us)),
            Column(f"{label} total (µs)", lambda r: format_us(r.device_total_us)),
            Column(
                f"Self {label} (%)",
                lambda r: "" if r.self_device_us is None or total <= 0 else f"{100 * r.self_device_us / total:.1f}",
            ),
        ]
    if any(r.flops is not None for r in table.rows):
        cols.append(Column("FLOPs", lambda r: format_int(r.flops)))
    if any(r.self_cpu_memory_bytes is not None for r in table.rows):
        cols.append(Column("Self CPU mem (B)", lambda r: format_int(r.self_cpu_memory_bytes)))
    if any(r.self_device_memory_bytes is not None for r in table.rows):
        cols.append(Column(f"Self {label or 'device'} mem (B)", lambda r: format_int(r.self_device_memory_bytes)))
    if any(r.input_shapes is not None for r in table.rows):
        cols.append(Column("Input shapes", lambda r: format_shapes(r.input_shapes), left=True))
    return cols


def csv_value(v: object) -> str:
    """A raw figure in CSV: blank for ``None``, floats to 3 decimals."""
    if v is None:
        return ""
    return str(round(v, 3)) if isinstance(v, float) else str(v)


def _csv_field(row: Any, name: str) -> str:
    """A row's field in CSV; input shapes and dtypes as one cell each."""
    v = getattr(row, name)
    if v is not None and name == "input_shapes":
        return format_shapes(v)
    if v is not None and name == "input_dtypes":
        return " ".join(v)
    return csv_value(v)


def fields_grid(row_type: type, rows: Sequence[Any], skip: Sequence[str] = ()) -> Grid[Any]:
    """A model's rows as CSV wants them: one column per field of ``row_type`` (a dataclass), raw values.

    Args:
        row_type: The rows' dataclass; its field names are the headers.
        rows: The rows.
        skip: Fields left out (nested models, samples).
    """
    names = [f.name for f in dataclasses.fields(row_type) if f.name not in skip]
    return Grid([Column(n, functools.partial(_csv_field, name=n)) for n in names], rows)


def tuple_grid(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> Grid[Sequence[str]]:
    """A table of ready cells, one tuple a row (a long-form CSV: one line per figure)."""
    return Grid([Column(h, operator.itemgetter(i)) for i, h in enumerate(headers)], rows)


def communication_line(table: Table) -> str:
    """The footer's line for the time in async collective spans, naming their rows."""
    comm = table.communication_us or 0.0
    names = [r.name for r in table.rows if vocab.is_async_span(r.name, vocab.K_OTHER)]
    listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    per_step = f" ({format_us(comm / table.steps)} µs per step)" if table.steps else ""
    rank = f" on rank {table.rank}" if table.rank is not None else ""
    return (
        f"Communication{rank}: {format_us(comm)} µs{per_step} in async collective spans"
        + (f" ({listed})" if listed else "")
        + "; in their CPU total, not in self CPU (they run on the process group's threads)"
    )


def _table_footer(table: Table) -> list[str]:
    parts = [f"Self CPU total: {format_us(table.self_cpu_us)} µs"]
    if table.device_label and table.self_device_us is not None:
        parts.append(f"Self {table.device_label} total: {format_us(table.self_device_us) or '-'} µs")
    parts.append(f"{table.steps} profiled step{'s' if table.steps != 1 else ''}")
    parts.append(f"sorted by {table.sort_by}")
    lines = ["; ".join(parts)]
    if table.communication_us is not None:
        lines.append(communication_line(table))
    lines += shown(table.rows, table.total_rows)
    lines.extend(f"note: {one_line(n)}" for n in table.notes)
    return lines


def table_view(table: Table, fmt: Format) -> list[Block]:
    """A [`Table`][neuronprof.Table]: its columns (blank ones left out), then the totals and notes.

    CSV has one column per [`OpRow`][neuronprof.OpRow] field instead, its raw values
    (times in µs, memory in bytes); HTML sets the row with the most device time in bold.
    """
    if fmt == "csv":
        from neuronprof.model import OpRow

        return [fields_grid(OpRow, table.rows)]
    top = max((r.self_device_us or 0 for r in table.rows), default=0)
    grid = Grid(_table_columns(table), table.rows, strong=lambda r: top > 0 and r.self_device_us == top)
    return [grid, "", *_table_footer(table)]


# -- several ranks -----------------------------------------------------------------------


def rank_metric_unit(metric: str) -> str:
    """The words for a cross-rank metric in column headers: ``"self device"``, ``"total CPU"``..."""
    from neuronprof._model_ranks import _METRIC_WORDS

    return _METRIC_WORDS.get(metric, metric)


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


def _rank_cell(r: RankOpRow, rank: int) -> str:
    return format_us(r.values[rank])


def rank_view(t: RankTable, fmt: Format) -> list[Block]:
    """A [`RankTable`][neuronprof.model.RankTable]: min / median / max per op in text, one column per rank elsewhere.

    CSV is one line per op and rank: ``name, on_device, input_shapes, rank, calls, <metric>``.
    """
    if fmt == "csv":
        header = ("name", "on_device", "input_shapes", "rank", "calls", t.metric)
        cells = [
            (r.name, str(r.on_device), format_shapes(r.input_shapes), str(rank), str(r.calls[rank]), csv_value(v))
            for r in t.rows
            for rank, v in enumerate(r.values)
        ]
        return [tuple_grid(header, cells)]
    unit = rank_metric_unit(t.metric)
    cols: list[Column[RankOpRow]] = [Column("Name", lambda r: r.name, left=True), *on_column(t.rows)]
    if any(r.input_shapes is not None for r in t.rows):
        cols.append(Column("Input shapes", lambda r: format_shapes(r.input_shapes), left=True, short=False))
    if fmt == "text":
        cols += [
            Column(f"Min {unit} (µs)", lambda r: format_us(r.min_us)),
            Column("Median (µs)", lambda r: format_us(r.median_us)),
            Column("Max (µs)", lambda r: format_us(r.max_us)),
        ]
    else:
        cols += [Column(f"Rank {i} {unit} (µs)", functools.partial(_rank_cell, rank=i)) for i in range(t.world_size)]
        cols.append(Column("Median (µs)", lambda r: format_us(r.median_us)))
    cols += [Column("Max/median", lambda r: f"{r.spread:.2f}"), Column("Slowest rank", lambda r: str(r.slowest_rank))]
    return [Grid(cols, t.rows), "", *shown(t.rows, t.total_rows), *rank_footer(t)]


# -- comparisons --------------------------------------------------------------------------


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


def comparison_columns(cmp: Comparison) -> list[Column[ComparisonRow]]:
    """The columns of a comparison: variant, ops, self times, wall time, speedup, first call."""
    cols: list[Column[ComparisonRow]] = [
        Column("Variant", lambda r: r.name + (" (baseline)" if r.name == cmp.baseline else ""), left=True),
        Column("Ops", lambda r: _format_calls(r.op_calls)),
        Column("Self CPU (µs)", lambda r: format_us(r.self_cpu_us), best="low", value=lambda r: r.self_cpu_us),
    ]
    if cmp.device_label and any(r.self_device_us is not None for r in cmp.rows):
        cols.append(
            Column(
                f"Self {cmp.device_label} (µs)",
                lambda r: format_us(r.self_device_us),
                best="low",
                value=lambda r: r.self_device_us,
            )
        )
    cols += [
        # Short headers with the unit in them, so that the table fits a 1280 px page;
        # the footer says what each one measures.
        # Marked best only beyond noise, as the speedup and the chart are.
        Column(
            "Median (µs)",
            lambda r: format_us(r.wall_us),
            best="low",
            value=lambda r: r.wall_us if r.measurably_different or r.name == cmp.baseline else None,
        ),
        Column("Min–max (µs)", lambda r: f"{format_us(r.wall_us_min)}–{format_us(r.wall_us_max)}"),
        # The best speedup is marked only where its interval excludes 1.0 (beyond noise).
        Column(
            "Speedup (95% CI)",
            _format_speedup_cell,
            best="high",
            value=lambda r: r.speedup if r.measurably_different or r.name == cmp.baseline else None,
        ),
        Column("1st call (s)", lambda r: f"{r.compile_s:.3f}"),
    ]
    return cols


def comparison_footer(cmp: Comparison, marks: str = "* marks") -> list[str]:
    """The lines under a comparison: what each figure measures, then notes and the findings that differ."""
    rounds = f"{cmp.repeats} interleaved round{'s' if cmp.repeats != 1 else ''}"
    steps = f"{cmp.profiled_steps} step{'s' if cmp.profiled_steps != 1 else ''}"
    lines = [
        f"Speedup: median wall time of {cmp.baseline!r} ÷ the variant's, with its 95% interval (Hodges–Lehmann "
        f"over the timed samples); {marks} the best value in a column, a speedup only where its interval excludes 1.",
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
    differ = cmp.finding_differences()
    if differ and any(differ.values()):
        # The findings that tell the variants apart (``insights.md`` explains each kind).
        lines.append("Findings that differ between variants (see insights.md):")
        lines += [f"  {name}: {', '.join(kinds) if kinds else 'none of them'}" for name, kinds in differ.items()]
    return lines


def comparison_view(cmp: Comparison, fmt: Format) -> list[Block]:
    """A [`Comparison`][neuronprof.model.Comparison]: the best value of each column marked, then what the figures are.

    CSV has one line per variant, its raw figures (as ``to_dataframe()``).
    """
    if fmt == "csv":
        from neuronprof.model import ComparisonRow

        return [fields_grid(ComparisonRow, cmp.rows, skip=("table", "wall_samples_us", "insights"))]
    grid = Grid(comparison_columns(cmp), cmp.rows, empty="(no variants)", css="neuronprof-comparison")
    return [grid, "", *comparison_footer(cmp, "* marks" if fmt == "text" else "bold marks")]


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
