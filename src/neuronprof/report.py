"""One self-contained HTML report: overview, findings, operators, kernels, memory, ranks, timeline, two runs.

The report is one file that opens offline in any browser and can be attached to a
bug report or a chat: no network request, no CDN, every style, script and drawing
inline. ``Session.report()``, ``Comparison.report()`` and ``neuronprof report``
all end here.

The page is laid out by a Jinja2 template (``templates/report.html.j2``); the
renderers below only gather plain data for it (the panes' own data comes from the
``_report_*`` modules) and return text; they write no file (the callers save the
text through neuronprof's one atomic writer). This module imports neither torch nor
a session, so the offline command uses it as it is.
"""

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Union

from neuronprof._host import host_platform
from neuronprof._report_findings import MAX_FINDINGS as MAX_FINDINGS  # the findings listed at most, re-exported
from neuronprof._report_findings import _findings_data
from neuronprof._report_parts import grids, json_for_script, stack, us
from neuronprof._report_timeline import MAX_TIMELINE_EVENTS, timeline_data
from neuronprof.model import Comparison, OpRow, Table
from neuronprof.render import format_shapes, format_us

if TYPE_CHECKING:
    from neuronprof.analysis import Trace, TraceDiff
    from neuronprof.analysis.insights import Insights, RankInsights, Timeline
    from neuronprof.analysis.insights._columns import EventColumns
    from neuronprof.analysis.insights._trace import Read
    from neuronprof.analysis.neuron import NeuronProfile

__all__ = [
    "MAX_TIMELINE_EVENTS",
    "REPORT_SCHEMA",
    "environment",
    "render_comparison_report",
    "render_report",
    "trace_settings",
]

MAX_CHART_STEPS = 500
"""Steps drawn in the overview's step-time chart at most (the first ones); the breakdown covers them all."""

REPORT_SCHEMA = "neuronprof.report/1"
"""Tag of the data embedded in the page (``<script id="neuronprof-data">``)."""


def _jinja_env() -> Any:
    try:
        import jinja2
    except ImportError:  # pragma: no cover - jinja2 is a dependency (torch needs it too)
        raise ImportError("the HTML report needs Jinja2: pip install jinja2") from None
    try:
        # Jinja compiles the page's template at every start (about 0.2 s, as long as drawing a 100 MB
        # trace's panes); its own cache keeps the compiled code in a private folder of the user's
        # temporary directory, checked against the template's source at each load.
        cache: Any = jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):  # no private temporary folder to be had: compiled each time
        cache = None
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("neuronprof", "templates"),
        autoescape=jinja2.select_autoescape(("html", "j2")),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        bytecode_cache=cache,
    )
    env.filters["us"] = us  # a filter, not a macro: a page of many steps calls it thousands of times
    env.globals["stack"] = stack
    return env


def environment() -> dict[str, str]:
    """Return the host's facts for the report's settings: Python, platform, neuronprof version."""
    from neuronprof import __version__

    return {
        "neuronprof": __version__,
        "python": platform.python_version(),
        "platform": host_platform(),
    }


def trace_settings(trace: Trace) -> dict[str, Any]:
    """Return what a trace says about the session that recorded it, for the report's settings.

    Reads the ``neuronprof`` block that ``Session.export()`` writes into a trace
    (versions, the modes the backend captured, core, schedule, the recording options,
    Python, platform and start time) and kineto's ``distributedInfo``, from the header of
    the first file read (no file is read again); a trace from plain torch.profiler has
    neither, and gives ``{}``. A session's own report reads the same block.

    Args:
        trace: A loaded trace ([`load_trace`][neuronprof.analysis.load_trace]).
    """
    metadata: Mapping[str, Any] = trace.event_tables[0].metadata if trace.event_tables else {}
    meta = metadata.get("neuronprof")
    out: dict[str, Any] = {}
    if isinstance(meta, Mapping):
        # Older exports name every mode asked for, the default ones on a CPU run too: only Neuron captures modes.
        captured = meta.get("captured_modes", meta.get("modes") if meta.get("backend") == "neuron" else None)
        for label, value in (
            ("device", meta.get("device_label")),
            ("core", meta.get("core")),
            ("modes", captured or None),
            ("schedule", meta.get("schedule")),
            ("options", meta.get("options")),
            ("torch", meta.get("torch")),
            ("neuronprof (recording)", meta.get("version")),
            ("python (recording)", meta.get("python")),
            ("platform (recording)", meta.get("platform")),
            ("started", meta.get("started")),
        ):
            if value is not None:
                out[label] = value
    info = metadata.get("distributedInfo")
    if isinstance(info, Mapping) and info.get("world_size") is not None:
        out["world size"] = info["world_size"]
    return out


# -- the op table ---------------------------------------------------------------------


def _table_data(table: Table) -> dict[str, Any]:
    """Columns (key, header, kind) and rows (raw values) for the sortable table."""
    label = table.device_label
    cols: list[dict[str, Any]] = [{"key": "name", "header": "Name", "kind": "text"}]
    cols.append({"key": "where", "header": "On", "kind": "text"})
    cols += [
        {"key": "calls", "header": "Calls", "kind": "int"},
        {"key": "self_cpu_us", "header": "Self CPU (µs)", "kind": "us"},
        {"key": "cpu_total_us", "header": "CPU total (µs)", "kind": "us"},
        {"key": "self_cpu_pct", "header": "Self CPU (%)", "kind": "pct"},
    ]
    if label:
        cols += [
            {"key": "self_device_us", "header": f"Self {label} (µs)", "kind": "us"},
            {"key": "device_total_us", "header": f"{label} total (µs)", "kind": "us"},
            {"key": "self_device_pct", "header": f"Self {label} (%)", "kind": "pct"},
        ]
    if any(r.flops is not None for r in table.rows):
        cols.append({"key": "flops", "header": "FLOPs", "kind": "int"})
    if any(r.input_shapes is not None for r in table.rows):
        cols.append({"key": "shapes", "header": "Input shapes", "kind": "text"})
    cpu_total = table.self_cpu_us
    dev_total = table.self_device_us or 0.0

    def row(r: OpRow) -> dict[str, Any]:
        return {
            "name": r.name,
            "where": "device" if r.on_device else "host",
            "calls": r.calls,
            "self_cpu_us": r.self_cpu_us,
            "cpu_total_us": r.cpu_total_us,
            "self_cpu_pct": None if cpu_total <= 0 else round(100 * r.self_cpu_us / cpu_total, 2),
            "self_device_us": r.self_device_us,
            "device_total_us": r.device_total_us,
            "self_device_pct": None
            if r.self_device_us is None or dev_total <= 0
            else round(100 * r.self_device_us / dev_total, 2),
            "flops": r.flops,
            "shapes": format_shapes(r.input_shapes) if r.input_shapes is not None else None,
        }

    return {"columns": cols, "rows": [row(r) for r in table.rows], "sort_by": table.sort_by}


# -- findings -------------------------------------------------------------------------


# -- pages ----------------------------------------------------------------------------


def render_report(
    table: Table,
    *,
    insights: Union[Insights, RankInsights, None] = None,
    timeline: Optional[Timeline] = None,
    settings: Optional[Mapping[str, Any]] = None,
    title: str = "neuronprof report",
    baseline: Optional[TraceDiff] = None,
    neuron: Optional[NeuronProfile] = None,
) -> str:
    """Return one self-contained HTML page for a profile.

    Args:
        table: The op table (rows in display order; the page sorts and filters them).
        insights: The findings to list; ``None`` leaves the section out. Findings of
            several ranks ([`RankInsights`][neuronprof.analysis.insights.RankInsights])
            are listed rank by rank, the straggler's first, each titled with its rank.
        timeline: The recorded steps' events for the step timeline; ``None`` leaves it out.
            A timeline of several ranks is drawn with each rank on its own lanes.
        settings: Settings and environment shown at the top (backend, device,
            versions, schedule...), as label → value; values are shown as text.
        title: The page title.
        baseline: The comparison of a baseline run (A) with this one (B), as
            ``neuronprof diff`` makes it: the two-run pane, with its verdicts, shown
            after the overview; ``None`` leaves it out.
        neuron: Neuron's own profile of the run
            ([`neuron_profile`][neuronprof.analysis.neuron_profile]): its NEFF rows and engine
            breakdown join the kernels pane (drawn only with a ``timeline``).

    Returns:
        The page as text (UTF-8 when written). It requests nothing from the network.
    """
    if not isinstance(table, Table):
        raise TypeError(f"render_report() takes a Table, got {type(table).__name__}")
    from neuronprof.analysis.insights._columns import of_timeline

    drawn = None if timeline is None else _draw(of_timeline(timeline), neuron)
    return _profile_page(table, insights=insights, drawn=drawn, settings=settings, title=title, baseline=baseline)


class _Drawn(NamedTuple):
    """The panes a timeline fills: the step timeline (what ``timeline_data`` gives), its notes, and the others."""

    data: dict[str, Any]
    notes: tuple[str, ...]
    panes: dict[str, Any]


def _draw(
    timeline: EventColumns,
    neuron: Optional[NeuronProfile] = None,
    device_note: Optional[str] = None,
    backend_known: bool = True,
) -> _Drawn:
    """Everything the page reads from the timeline's events (columns), read while they are held, and Neuron's profile.

    ``backend_known``: the backend is the session's (live, or in the trace's neuronprof settings).
    """
    from neuronprof._report_device import kernels_data, neuron_data, neuron_note
    from neuronprof._report_ops import call_tree, modules_data
    from neuronprof._report_overview import overview_data, rank_windows
    from neuronprof.analysis._gc import collector_paused, return_freed_memory

    # The panes make many objects and no garbage, beside the events: each pass of the collector would walk them all.
    with collector_paused():
        windows = rank_windows(timeline)
        kernels = kernels_data(timeline, backend_known, windows)
        note = neuron_note(timeline)
        if neuron is not None:
            kernels["neuron"] = neuron_data(neuron)
        else:
            kernels["notes"] += [n for n in (note, device_note) if n is not None]
        panes = {
            "overview": overview_data(timeline, backend_known, windows),
            "kernels": kernels,
            "modules": modules_data(timeline),
            "call_tree": call_tree(timeline),
        }
        # The panes' arrays are given back once, before the timeline's pane, the largest. Trims between the
        # other panes lowered no peak measured by more than 3 MiB (rank folders and traces of 100 and
        # 600 MB), and the next pane paged the pages they gave back in again.
        return_freed_memory(timeline.host_count + timeline.device_count)
        return _Drawn(timeline_data(timeline), timeline.notes, panes)


def _profile_page(
    table: Table,
    *,
    insights: Union[Insights, RankInsights, None],
    drawn: Optional[_Drawn],
    settings: Optional[Mapping[str, Any]],
    title: str,
    baseline: Optional[TraceDiff],
    by_other: Optional[tuple[str, Table]] = None,
    memory_source: str = "table",
    memory_tables: tuple[Any, ...] = (),
    runs: Optional[tuple[int, int]] = None,
    same: Optional[str] = None,
) -> str:
    """``render_report``'s page, its timeline panes drawn already (``None``: none).

    ``by_other`` is the table grouped the other way (``("shape", table)``: by input shape),
    offered beside the main one; ``memory_source``: ``"table"`` (a session's) or ``"trace"`` (a
    file's); ``memory_tables``: the event tables whose allocation records the memory pane draws;
    ``runs``: the runs (trace files) of the baseline and of this run, for the two-run pane's word on repeats;
    ``same``: the sentence saying that the baseline is this run's own file, for the two-run pane.
    """
    from neuronprof._report_device import memory_data
    from neuronprof._report_ops import ranks_data

    facts = {str(k): _fact(v) for k, v in (settings or {}).items() if v is not None}
    data: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "table": _table_data(table),
        "timeline": drawn.data if drawn is not None else None,
    }
    if by_other is not None:
        data["table_by"] = {"key": by_other[0], "table": _table_data(by_other[1])}
    panes = dict(drawn.panes) if drawn is not None else {}
    findings = _findings_data(insights)
    if "overview" in panes and findings is not None:
        # The most time at stake first, across ranks too (a rank folder lists its findings rank by rank).
        by_stake = sorted(findings["findings"], key=lambda f: (f["estimated_us"] is None, -(f["estimated_us"] or 0)))
        panes["overview"]["top"] = by_stake[:3]
    from neuronprof.analysis.insights import RankInsights

    rank_insights = insights if isinstance(insights, RankInsights) else None
    panes["ranks"] = ranks_data(panes["overview"], rank_insights) if "overview" in panes else None
    mem = panes["memory"] = memory_data(table, source=memory_source, tables=memory_tables)
    if mem["device"] and mem["ops"] and not any(r["device_bytes"] for r in mem["ops"]):
        mem["notes"].append(
            f"no op's self {mem['label']} memory is above 0 (this backend recorded no {mem['label']} memory, or each "
            f"op freed what it allocated), so the Self {mem['label']} memory column is left out"
        )
    data["grids"] = grids(panes)
    two_runs = None
    if baseline is not None:
        from neuronprof._report_two_runs import trace_pane

        two_runs = trace_pane(baseline, panes.get("baseline_overview"), panes.get("overview"), runs=runs, same=same)
        data["grids"][two_runs["key"]] = two_runs.pop("grid")
    notes = list(table.notes)
    if drawn is not None:
        notes.extend(n for n in drawn.notes if n not in notes)
    return _page(
        data,
        title=title,
        settings=facts,
        table=table,
        table_notes=notes,
        totals=_totals(table),
        findings=findings,
        has_timeline=drawn is not None,
        panes=panes,
        by_other=None if by_other is None else by_other[0],
        two_runs=two_runs,
    )


def _page(data: Mapping[str, Any], **panes: Any) -> str:
    """The report template filled in; a pane not given (table, findings, comparison...) is left out."""
    blank: dict[str, Any] = {
        "table": None,
        "table_notes": [],
        "totals": None,
        "findings": None,
        "has_timeline": False,
        "panes": {},
        "by_other": None,
    }
    fields = {
        **blank,
        "comparison": None,
        "two_runs": None,
        **panes,
        "max_timeline_events": MAX_TIMELINE_EVENTS,
        "max_chart_steps": MAX_CHART_STEPS,
        "data_json": json_for_script(data),
    }
    return str(_jinja_env().get_template("report.html.j2").render(**fields))


def trace_report(
    trace: Trace,
    table: Table,
    *,
    settings: Mapping[str, Any],
    timeline: Optional[Timeline] = None,
    title: str = "neuronprof report",
    baseline: Any = None,
    neuron: Optional[NeuronProfile] = None,
    device_note: Optional[str] = None,
    same: Optional[str] = None,
    read: Optional[Read] = None,
    names: Optional[Mapping[str, str]] = None,
) -> str:
    """``render_report`` of a loaded trace (a file's, or a session's record): its findings, timeline, two-run pane.

    ``timeline`` defaults to the trace's own events, whose findings are the trace's own; ``baseline``
    (a trace file, folder or ``Trace``) adds the pane of ``neuronprof diff BASELINE TRACE``;
    ``device_note``, without ``neuron``, says in the kernels pane why the device's own profile is absent;
    ``same``, that ``baseline`` is the trace's own file or folder (said first in the two-run pane);
    ``read``, ``read_of(trace)`` when the caller has read the trace's events already (let go, and its memory
    given back, before the page is made: a caller that holds no other reference frees it); ``names``, what
    the two-run pane calls the ``"baseline"`` and the ``"trace"`` when not their files (a piped input: ``-``).
    """
    from neuronprof.analysis._gc import return_freed_memory
    from neuronprof.analysis.insights import analyze_timeline
    from neuronprof.analysis.insights._columns import of_timeline
    from neuronprof.analysis.insights._trace import insights_of, read_of

    insights: Union[Insights, RankInsights]
    # A trace without neuronprof's settings names its backend from its events: "cpu" when it has no device work.
    known = any(isinstance((t.metadata.get("neuronprof") or {}).get("backend"), str) for t in trace.event_tables)
    if timeline is None:
        # The trace's events read once: drawn first, then the readers' columns read by the findings,
        # then let go before the page is made.
        read = read or read_of(trace)
        drawn = _draw(read.columns, neuron, device_note, known)
        insights = insights_of(trace, read)
        events = read.columns.host_count + read.columns.device_count
        del read
        return_freed_memory(events)  # the columns, when the caller handed them over
    else:
        insights = trace.insights() if timeline is trace.timeline() else analyze_timeline(timeline)
        drawn = _draw(of_timeline(timeline), neuron, device_note, known)
    two_runs = runs = None
    if baseline is not None:
        from neuronprof._report_two_runs import against_baseline

        two_runs, drawn.panes["baseline_overview"], runs = against_baseline(baseline, trace)
        if names:  # a piped input by the name it was given, not by its private copy's
            two_runs = dataclasses.replace(
                two_runs, a=names.get("baseline", two_runs.a), b=names.get("trace", two_runs.b)
            )
    live = bool(trace.event_tables) and not trace.event_tables[0].file_notes
    return _profile_page(
        table,
        insights=insights,
        drawn=drawn,
        settings=settings,
        title=title,
        baseline=two_runs,
        by_other=_other_grouping(trace, table),
        memory_source="table" if live else "trace",
        memory_tables=trace.event_tables,
        runs=runs,
        same=same,
    )


def _other_grouping(trace: Trace, table: Table) -> Optional[tuple[str, Table]]:
    """The trace's table grouped the other way from ``table``: by input shape when shapes were recorded, else none."""
    if not any(op.input_dims is not None for op in trace.ops):
        return None
    if any(r.input_shapes is not None for r in table.rows):
        return ("name", trace.table("device", group_by="name"))
    return ("shape", trace.table("device", group_by="shape"))


def render_comparison_report(
    cmp: Comparison, *, settings: Optional[Mapping[str, Any]] = None, title: str = "neuronprof comparison"
) -> str:
    """Return one self-contained HTML page for a [`Comparison`][neuronprof.model.Comparison].

    The page holds the comparison table (best value per column marked), a bar chart
    of the median wall time per call with its min–max range, then each variant
    against the baseline (the verdict on their wall times, the overview of a step and
    the op table as differences), and each variant's op table and findings.

    Args:
        cmp: The comparison.
        settings: Extra settings and environment to show, as label → value.
        title: The page title.
    """
    if not isinstance(cmp, Comparison):
        raise TypeError(f"render_comparison_report() takes a Comparison, got {type(cmp).__name__}")
    from neuronprof._report_two_runs import comparison_page

    data, facts, comparison = comparison_page(cmp, settings or {})
    return _page({"schema": REPORT_SCHEMA, **data}, title=title, settings=facts, comparison=comparison)


def _fact(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def _totals(table: Table) -> dict[str, str]:
    out = {"rows": str(table.total_rows if table.total_rows is not None else len(table.rows))}
    out["steps"] = str(table.steps)
    out["self CPU total"] = f"{format_us(table.self_cpu_us)} µs"
    if table.device_label:
        dev = table.self_device_us
        out[f"self {table.device_label} total"] = "none recorded" if not dev else f"{format_us(dev)} µs"
    if table.top_level_calls is not None:
        out["top-level op calls"] = str(table.top_level_calls)
    return out
