"""Parts of the report's page: the panes' sortable tables, the comparison's bar chart, the page's data,
and the time format and breakdown bar the template calls.

A renderer's part (see ``report``): plain data or HTML for the template, from data the panes
already gathered; it writes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from neuronprof.render import format_us

if TYPE_CHECKING:
    from neuronprof.model import Comparison

__all__ = ["chart", "grids", "json_for_script", "stack", "us"]


def _grid(columns: Sequence[tuple[str, str, str]], rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A sortable table for the page's script: columns ``(key, header, kind)``, rows by key; ``name`` is the first."""
    return {
        "columns": [{"key": k, "header": h, "kind": kind} for k, h, kind in columns],
        "rows": [dict(r) for r in rows],
        "sort_by": None,
    }


def grids(panes: Mapping[str, Any]) -> dict[str, Any]:
    """The panes' sortable tables: modules, kernels, memory, ranks (those the run fills)."""
    out: dict[str, Any] = {}
    modules = panes.get("modules")
    if modules and modules["modules"]:
        out["modules"] = _grid(
            [
                ("name", "Module", "text"),
                ("calls", "Calls", "int"),
                ("total_us", "Total (µs)", "us"),
                ("mean_us", "Mean (µs)", "us"),
            ],
            modules["modules"],
        )
    kernels = panes.get("kernels")
    if kernels and kernels["kernels"]:
        label = kernels["label"]
        out["kernels"] = _grid(
            [
                ("name", "Kernel", "text"),
                ("category", "Kind", "text"),
                ("calls", "Calls", "int"),
                ("total_us", f"{label} total (µs)", "us"),
                ("mean_us", "Mean (µs)", "us"),
                ("share", f"Share of {label} time (%)", "pct"),
                ("launched_by", "Launched by", "text"),
            ],
            kernels["kernels"],
        )
    neuron = (kernels or {}).get("neuron")
    if neuron and neuron["neffs"]:
        out["neffs"] = _grid(
            [
                ("name", "NEFF", "text"),
                ("calls", "Executions", "int"),
                ("device_us", "NeuronCore time (µs)", "us"),
                ("min_us", "Shortest (µs)", "us"),
                ("max_us", "Longest (µs)", "us"),
                ("cores", "Cores", "text"),
            ],
            neuron["neffs"],
        )
    if neuron and neuron["engines"]:
        out["engines"] = _grid(
            [
                ("name", "Device profile · engine", "text"),
                ("active_us", "Active (µs)", "us"),
                ("share_pct", "Share (%)", "pct"),
            ],
            neuron["engines"],
        )
    memory = panes.get("memory")
    if memory and memory["ops"]:
        out["memory"] = _grid(
            [
                ("name", "Name", "text"),
                ("calls", "Allocations" if memory.get("ops_from") == "records" else "Calls", "int"),
                ("cpu_bytes", "Self CPU memory (B)", "int"),
                *(
                    [("device_bytes", f"Self {memory['label']} memory (B)", "int")]
                    if memory.get("device", True) and any(r["device_bytes"] for r in memory["ops"])
                    else []  # a column of zeros says nothing: the pane's note says why it is left out
                ),
            ],
            memory["ops"],
        )
    ranks = panes.get("ranks")
    if ranks:
        rows = [{"name": f"rank {r['rank']}", **r} for r in ranks["ranks"]]
        out["ranks"] = _grid(
            [
                ("name", "Rank", "text"),
                ("steps", "Steps", "int"),
                ("step_us", "Step (µs)", "us"),
                ("compute_us", "Busy outside collectives (µs)", "us"),
                ("communication_us", "Communication (µs)", "us"),
                ("waiting_us", "Waiting (µs)", "us"),
                ("idle_us", "Idle (µs)", "us"),
            ],
            rows,
        )
    return out


@dataclasses.dataclass(frozen=True)
class _Bar:
    name: str
    y: float
    width: float
    lo: float
    hi: float
    label: str
    best: bool


def chart(cmp: Comparison) -> dict[str, Any]:
    """Geometry of the wall-time bar chart (drawn as inline SVG by the template)."""
    rows: Sequence[Any] = cmp.rows
    top = max((r.wall_us_max for r in rows), default=1.0) or 1.0
    plot_w, bar_h, gap = 560.0, 22.0, 10.0
    bars = [
        _Bar(
            name=r.name,
            y=i * (bar_h + gap),
            width=plot_w * r.wall_us / top,
            lo=plot_w * r.wall_us_min / top,
            hi=plot_w * r.wall_us_max / top,
            label=f"{format_us(r.wall_us)} µs ({r.speedup:.2f}×)",
            best=r.name == cmp.fastest and r.measurably_different,
        )
        for i, r in enumerate(rows)
    ]
    return {"bars": bars, "plot_w": plot_w, "bar_h": bar_h, "height": len(bars) * (bar_h + gap) + 30, "top": top}


def json_for_script(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">`` (no ``</script>`` break-out).

    Written by msgspec where it is installed (the page's data of a large trace, half a
    megabyte, in a seventh of the stdlib's time), else by the stdlib; numbers that are not
    finite are written as ``null`` either way, as JavaScript's ``JSON.stringify`` writes them.
    """
    try:
        import msgspec

        text = msgspec.json.encode(data).decode()
    # No msgspec; or what it refuses and the stdlib writes: keys that are None or bools, a lone surrogate in a name.
    except (ImportError, TypeError, UnicodeEncodeError):
        text = json.dumps(_finite(data), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _finite(data: Any) -> Any:
    """``data`` with each float that is not finite made ``None`` (strict JSON has no NaN or Infinity)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def us(value: float) -> str:
    """A time in µs as the page shows it: ``1,234.5``."""
    return f"{value:,.1f}"


def stack(parts: Mapping[str, float], total: float, categories: Sequence[Mapping[str, str]]) -> Any:
    """A breakdown's bar (HTML): one span per category with time, its width its share of ``total`` (µs).

    ``parts``: µs per category key; ``categories``: ``{"key", "label"}`` in the order drawn.
    Written here, not as a template macro: a page draws one per step shown (up to 200), and a
    macro's call costs jinja's attribute lookups and escaping of every part (about a fifth of the
    page's rendering time with 200 steps).
    """
    from markupsafe import Markup, escape

    label = "; ".join(f"{escape(c['label'])} {us(parts[c['key']])} µs" for c in categories)
    spans = "".join(
        f'<span style="width:{100 * parts[c["key"]] / total:.3f}%;background:var(--c-{escape(c["key"])})" '
        f'title="{escape(c["label"])}: {us(parts[c["key"]])} µs"></span>'
        for c in categories
        if total > 0 and parts[c["key"]] > 0
    )
    return Markup(f'<div class="stack" role="img" aria-label="{label}">\n{spans}</div>')
