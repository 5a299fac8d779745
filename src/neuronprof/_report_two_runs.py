"""The report's two-run panes: a baseline (A) and a run (B) side by side, as differences, with a verdict.

And the comparison page (``Comparison.report()``), whose variants each get such a pane.

A renderer's part (see ``report``): plain data for the template's ``two_runs_pane`` macro,
which ``neuronprof report A B`` (``Session.report(baseline=...)``) and
``Comparison.report()`` (one pane per variant against the baseline) share:

- the verdict of "Did it get faster?": ``neuronprof diff``'s verdict on the step time
  (each step a sample, or each run's median step), or a comparison's on its wall-time
  samples, both the Hodges–Lehmann interval of ``analysis._verdict``; or, plainly, why
  there is none and what gives one;
- the overview as a diff: the mean step and each category per step, A and B, the
  difference in µs and in %, and each category's share of its step;
- the operators as a diff: ``neuronprof diff``'s rows (a
  [`TraceDiff`][neuronprof.analysis.TraceDiff]) as a sortable, filterable table, the ops
  in only one run marked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from neuronprof.analysis import Shift, Trace, TraceDiff
    from neuronprof.model import Comparison, ComparisonRow, StepBreakdown

__all__ = [
    "MAX_DIFF_ROWS",
    "against_baseline",
    "comparison_page",
    "comparison_panes",
    "overview_of",
    "pane_notes",
    "speed_verdict",
    "trace_pane",
]

MAX_DIFF_ROWS = 300
"""Ops listed in a two-run pane's operator diff at most (those with the largest change); the totals cover all."""

_STATUS = {"both": "both", "only_a": "only in A", "only_b": "only in B"}


def overview_of(breakdown: StepBreakdown, device_label: Optional[str]) -> dict[str, Any]:
    """A comparison variant's kept breakdown in the form of the overview pane's data (``overview_data``)."""
    from neuronprof._report_overview import labels

    names = labels(device_label)
    parts = dict(breakdown.parts_us)
    return {
        "categories": [{"key": key, "label": names.get(key, key)} for key in parts],
        "steps": [{"us": us} for us in breakdown.steps_us],
        "mean": parts,
        "mean_us": breakdown.mean_us or 0.0,
        "notes": list(breakdown.notes),
    }


def pane_notes(notes: Iterable[str]) -> list[str]:
    """An overview's notes that hold in a two-run pane: not the one on outlier marks, which only its step list shows."""
    return [n for n in notes if not n.startswith("outlier steps")]


def _pct(part: Optional[float], whole: Optional[float]) -> Optional[float]:
    return None if part is None or not whole or whole <= 0 else round(100 * part / whole, 1)


def _overview_diff(a: Optional[Mapping[str, Any]], b: Optional[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The mean step and each category per step (µs), A and B, B − A in µs and %, each one's share of its step."""
    if not a or not b or not a["steps"] or not b["steps"]:
        return []
    rows = [{"key": "step", "label": "step time", "a": a["mean_us"], "b": b["mean_us"]}]
    rows += [
        {"key": c["key"], "label": c["label"], "a": a["mean"].get(c["key"], 0.0), "b": b["mean"].get(c["key"], 0.0)}
        for c in b["categories"]
    ]
    for r in rows:
        r["delta"] = round(r["b"] - r["a"], 3)
        r["delta_pct"] = _pct(r["delta"], r["a"])
        step = r["key"] == "step"
        r["share_a"] = None if step else _pct(r["a"], a["mean_us"])
        r["share_b"] = None if step else _pct(r["b"], b["mean_us"])
    return rows


def _ops_grid(d: TraceDiff) -> dict[str, Any]:
    """The op diff as a sortable table for the page's script: every op's A, B and change, largest change first."""
    label = d.device_label
    per = " per step" if d.per_step else ""
    cols: list[tuple[str, str, str]] = [("name", "Name", "text"), ("where", "On", "text"), ("status", "In", "text")]
    cols += [("calls_a", "Calls A", "int"), ("calls_b", "Calls B", "int")]
    cols += [("cpu_a", f"Self CPU A (µs{per})", "us"), ("cpu_b", f"Self CPU B (µs{per})", "us")]
    if label:
        cols += [("dev_a", f"Self {label} A (µs{per})", "us"), ("dev_b", f"Self {label} B (µs{per})", "us")]
    which = label if d.metric == "device" and label else "CPU"
    cols += [("delta", f"Δ self {which} (µs{per})", "delta"), ("ratio", "B/A", "ratio")]
    if d.op_shifts:
        # The verdicts are per op name: with rows per input shape, a row's verdict is its name's.
        of_name = " (the op name, all shapes)" if d.match == "shape" else ""
        cols.append(("verdict", f"Verdict per step{of_name}", "text"))
    if d.match == "shape":
        cols.append(("shapes", "Input shapes", "text"))
    from neuronprof.analysis.render import short_verdict
    from neuronprof.render import format_shapes

    def row(r: Any) -> dict[str, Any]:
        return {
            "name": r.name,
            "where": "device" if r.on_device else "host",
            "status": _STATUS[r.status],
            "calls_a": r.calls_a,
            "calls_b": r.calls_b,
            "cpu_a": r.self_cpu_us_a,
            "cpu_b": r.self_cpu_us_b,
            "dev_a": r.self_device_us_a,
            "dev_b": r.self_device_us_b,
            "delta": round(r.delta_us, 3),
            "ratio": None if r.ratio is None else round(r.ratio, 3),
            "verdict": None if r.on_device else (short_verdict(d.op_shift(r.name)) or None),
            "shapes": None if r.input_shapes is None else format_shapes(r.input_shapes),
        }

    return {
        "columns": [{"key": k, "header": h, "kind": kind} for k, h, kind in cols],
        "rows": [row(r) for r in d.rows[:MAX_DIFF_ROWS]],
        "sort_by": None,
    }


def _pane(
    d: TraceDiff,
    key: str,
    *,
    a: Optional[Mapping[str, Any]],
    b: Optional[Mapping[str, Any]],
    verdict: dict[str, Any],
    header: list[str],
) -> dict[str, Any]:
    from neuronprof.analysis.render import _diff_footer

    shown = (
        [] if len(d.rows) <= MAX_DIFF_ROWS else [f"showing the {MAX_DIFF_ROWS} largest changes of {len(d.rows)} ops"]
    )
    b_notes = pane_notes((b or {}).get("notes", ()))
    notes = b_notes + [n for n in pane_notes((a or {}).get("notes", ())) if n not in b_notes]
    return {
        "key": key,
        "a": d.a,
        "b": d.b,
        "verdict": verdict,
        "header": header,
        "overview": _overview_diff(a, b),
        "categories": [] if not b else list(b["categories"]),
        "stacks": [
            {"side": side, "total": ov["mean_us"], "parts": ov["mean"]} for side, ov in (("A", a), ("B", b)) if ov
        ],
        "overview_notes": notes,
        "only": {
            "a": sum(1 for r in d.rows if r.status == "only_a"),
            "b": sum(1 for r in d.rows if r.status == "only_b"),
        },
        "grid": _ops_grid(d),
        "footer": shown + _diff_footer(d),
    }


# -- neuronprof report A B ------------------------------------------------------------


def against_baseline(baseline: Any, trace: Trace) -> tuple[TraceDiff, dict[str, Any], Optional[tuple[int, int]]]:
    """``neuronprof diff BASELINE TRACE`` for the pane, the baseline's overview, and the runs each side holds.

    The diff is per step (as the overview beside it) when both runs have steps; ``baseline`` is
    a trace file or folder, a ``Trace`` or a session. The runs are ``None`` for a folder of ranks
    (one job, whose verdict the diff refuses for its own reason).
    """
    from neuronprof._report_overview import overview_data
    from neuronprof.analysis._diff import diff
    from neuronprof.analysis._samples import trace_of
    from neuronprof.analysis.insights._trace import read_of
    from neuronprof.analysis.trace import load_trace

    base = load_trace(trace_of(baseline))
    d = diff(base, trace, per_step=bool(base.steps and trace.steps))
    runs = [len({s.run for s in t.samples}) or 1 for t in (base, trace)]
    return d, overview_data(read_of(base).columns), None if base.ranks or trace.ranks else (runs[0], runs[1])


def _shift_verdict(s: Shift, what: str) -> dict[str, Any]:
    return {"word": s.verdict, "lines": [f"{what}: {s.describe()}"]}


def trace_pane(
    d: TraceDiff,
    a: Optional[Mapping[str, Any]],
    b: Optional[Mapping[str, Any]],
    *,
    runs: Optional[tuple[int, int]],
    same: Optional[str] = None,
) -> dict[str, Any]:
    """The pane of ``neuronprof report A B``: ``neuronprof diff A B``'s verdicts, the overview and ops as diffs.

    Args:
        d: ``diff(A, B)``.
        a: A's overview data (``overview_data``), ``None`` without a timeline.
        b: B's overview data.
        runs: How many runs (trace files) each side holds: fewer than a verdict needs
            means its samples are steps of one run, which the pane says plainly; ``None``
            when not known (or a folder of ranks).
        same: The sentence saying that A and B are one file or folder, said first; ``None`` when they differ.
    """
    from neuronprof.analysis._verdict import min_samples
    from neuronprof.analysis.render import _diff_header

    need = min_samples()
    if d.step is None:
        why = next((n[len("no verdict: ") :] for n in d.notes if n.startswith("no verdict: ")), "see the notes below")
        verdict: dict[str, Any] = {"word": "none", "lines": [f"no verdict: {why}"]}
    else:
        verdict = _shift_verdict(d.step, "step time (host)")
        if d.step_device is not None:
            verdict["lines"] += _shift_verdict(d.step_device, f"{d.device_label or 'device'} time per step")["lines"]
    if d.step is not None and d.step.verdict == "cannot tell":
        verdict["lines"].insert(0, "not enough repeats for a verdict")
    if d.step is not None and runs is not None and min(runs) < need:
        verdict["repeats"] = (
            f"A verdict needs repeats. Here A holds {runs[0]} run(s) and B {runs[1]}, so each recorded step is a "
            "sample: steps of one run share its machine's state, and a slower machine at the time of one run reads "
            f"as a change. Record at least {need} runs of each and pass the two folders of traces "
            "(neuronprof report RUNS_A RUNS_B): each run's median step is then a sample."
        )
    if same is not None:
        verdict["lines"].insert(0, same)
    # neuronprof diff's header, less its verdict lines: the verdict has a box of its own.
    header = [line for line in _diff_header(d) if not line.startswith("verdict")]
    return _pane(d, "diff-0", a=a, b=b, verdict=verdict, header=header)


# -- Comparison.report() ---------------------------------------------------------------


def speed_verdict(cmp: Comparison, row: ComparisonRow) -> dict[str, Any]:
    """A variant against the comparison's baseline: the verdict on their wall-time samples, or why there is none.

    The same Hodges–Lehmann interval as the comparison's ``speedup_low``/``speedup_high``
    (``analysis._verdict.shift`` of the baseline's samples and the variant's), read as
    ``neuronprof diff`` reads its verdicts.
    """
    from neuronprof.analysis._verdict import min_samples, shift
    from neuronprof.render import _format_speedup_cell

    base = cmp.row(cmp.baseline)
    need = min_samples()
    if not base.wall_samples_us or not row.wall_samples_us:
        return {"word": "none", "lines": ["no verdict: this comparison kept no wall-time samples"]}
    s = shift(list(base.wall_samples_us), list(row.wall_samples_us))
    rounds = f"{s.n_a} and {s.n_b} timing rounds"
    if s.verdict == "cannot tell" or s.ratio is None or s.low is None or s.high is None:
        return {
            "word": "cannot tell",
            "lines": [
                f"not enough repeats for a verdict: {rounds} give no {s.confidence:.0%} interval of the speedup; "
                f"compare(..., repeats={need}) or more gives one"
            ],
        }
    # The comparison table's figure, as its cell writes it: one speedup per meaning on the page.
    line = (
        f"{s.verdict}: speedup {_format_speedup_cell(row)}: the baseline's median wall time per call over "
        f"{row.name}'s, with its {s.confidence:.0%} confidence interval (Hodges–Lehmann, from {rounds})"
    )
    return {"word": s.verdict, "lines": [line]}


def comparison_panes(cmp: Comparison) -> list[dict[str, Any]]:
    """One pane per variant but the baseline: its verdict, its overview and its ops as diffs against the baseline."""
    from neuronprof.analysis._diff import diff_tables

    base = cmp.row(cmp.baseline)
    a = None if base.breakdown is None else overview_of(base.breakdown, cmp.device_label)
    panes = []
    for i, row in enumerate(r for r in cmp.rows if r.name != cmp.baseline):
        if base.table is None or row.table is None:
            continue
        d = diff_tables(base.table, row.table, a_label=cmp.baseline, b_label=row.name)
        b = None if row.breakdown is None else overview_of(row.breakdown, cmp.device_label)
        which = f"self {d.device_label} time" if d.metric == "device" and d.device_label else "self CPU time"
        header = [
            f"A: {cmp.baseline} (the baseline)",
            f"B: {row.name}",
            f"operators: {which}{' per profiled step' if d.per_step else ''}, matched by {d.match}, largest change "
            f"first, from one profiled session of each ({cmp.profiled_steps} steps)",
        ]
        pane = _pane(d, f"diff-{i}", a=a, b=b, verdict=speed_verdict(cmp, row), header=header)
        pane["name"] = row.name
        if a is None or b is None:
            pane["overview_notes"].insert(
                0, "this comparison kept no step breakdown, so the overview cannot be compared"
            )
        panes.append(pane)
    return panes


def comparison_page(
    cmp: Comparison, settings: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """``render_comparison_report``'s page: the data for its script, its settings, its comparison part.

    The settings are the comparison's, the environment's and ``settings``; the comparison part
    holds the comparison table with its best cells, the wall-time chart, each variant's op table
    and findings, and each variant's pane against the baseline (``comparison_panes``).
    """
    from neuronprof._report_parts import chart
    from neuronprof.render import Grid, comparison_columns, comparison_footer
    from neuronprof.report import _fact, _findings_data, _table_data, environment

    facts = {
        "backend": cmp.backend,
        "device": cmp.device_label or "none (CPU only)",
        "baseline": cmp.baseline,
        "timing": f"{cmp.repeats} interleaved rounds after {cmp.warmup} warm-up call(s)",
        "profiled steps per variant": str(cmp.profiled_steps),
        **environment(),
        **{str(k): _fact(v) for k, v in settings.items() if v is not None},
    }

    cols = comparison_columns(cmp)
    best = Grid(cols, cmp.rows).best_cells()
    rows = [
        [{"text": c.cell(r), "best": (i, j) in best, "left": c.left} for j, c in enumerate(cols)]
        for i, r in enumerate(cmp.rows)
    ]
    variants = [
        {
            "name": r.name,
            "table": None if r.table is None else _table_data(r.table.sorted("device")),
            "findings": _findings_data(r.insights),
        }
        for r in cmp.rows
    ]
    against = comparison_panes(cmp)
    data = {
        "table": None,
        "timeline": None,
        "variants": variants,
        "grids": {pane["key"]: pane.pop("grid") for pane in against},
    }
    comparison = {
        "headers": [{"text": c.header, "left": c.left} for c in cols],
        "rows": rows,
        # The text footer marks best values with "*"; here they are highlighted.
        "footer": [
            line.replace("* marks the best value in a column", "the best value of each column is highlighted")
            for line in comparison_footer(cmp)
        ],
        "chart": chart(cmp),
        "variants": variants,
        "against": against,
    }
    return data, facts, comparison
