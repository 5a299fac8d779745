"""The report's kernels / device pane and memory pane, as plain data for the page.

A renderer's part (see ``report``): it reads a
[`Timeline`][neuronprof.analysis.insights.Timeline] (device work, and the host ops
that launched it), and writes nothing; the memory pane is ``_report_memory``'s (``memory_data``, named here too).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from neuronprof import _vocabulary as vocab
from neuronprof._report_memory import memory_data
from neuronprof._report_overview import Window, first_owner_ns, first_with, rank_windows

if TYPE_CHECKING:
    from neuronprof.analysis.insights import HostEvent, Timeline
    from neuronprof.analysis.neuron import NeuronProfile

__all__ = ["kernels_data", "memory_data", "neuron_data", "neuron_note"]

KERNELS_SHOWN = 50
"""Kernel names listed at most (the heaviest); the rest are counted in a note."""
_ENCLOSING_LOOKBACK = 64  # ops looked at before a runtime call for the one around it (nested ops start just before)


def _by_correlation(timeline: Timeline) -> dict[int, str]:
    """The host op behind each runtime call's correlation id: the op around the call."""
    ops: dict[str, list[HostEvent]] = {}
    runtime = []
    for e in timeline.host:
        if e.category == "op":
            ops.setdefault(e.thread, []).append(e)
        elif e.category == "runtime" and e.correlation is not None:
            runtime.append(e)
    by_corr: dict[int, str] = {}
    starts: dict[str, list[int]] = {}
    for thread, evs in ops.items():
        evs.sort(key=lambda e: (e.start_ns, -e.end_ns))
        starts[thread] = [e.start_ns for e in evs]
    for r in runtime:
        evs = ops.get(r.thread, [])
        i = bisect_right(starts.get(r.thread, []), r.start_ns)
        # The innermost op around the call: the latest to start that is still open at the call's end.
        for e in reversed(evs[max(0, i - _ENCLOSING_LOOKBACK) : i]):
            if e.end_ns >= r.end_ns:
                by_corr[r.correlation] = e.name  # type: ignore[index]
                break
    return by_corr


def no_device_sentence(timeline: Timeline, backend_known: bool) -> str:
    """Why a run shows no device work: a CPU run has no device; otherwise the build did not report it."""
    if timeline.backend == "cpu" and backend_known:
        return "a CPU run: there is no device, so there are no kernels and no device time"
    return (
        f"no device work was recorded (backend {timeline.backend}): a CPU run, or a device build that does "
        "not report its kernels to torch.profiler"
    )


def kernels_data(
    timeline: Timeline, backend_known: bool = True, windows: Optional[Sequence[Sequence[Window]]] = None
) -> dict[str, Any]:
    """The kernels pane: device work grouped by name, the op that launched it, device busy per step.

    Returns:
        ``{"label", "kernels": [{"name", "category", "calls", "total_us", "mean_us", "share",
        "launched_by"}], "busy": [{"name", "us", "busy_us", "share"}], "total_us", "notes": [str]}``;
        ``share`` is the share of all device time (%), a step's ``share`` the share of the step
        the device was busy (%). ``kernels`` is empty when no device work was recorded.
        ``backend_known``: the timeline's backend was the session's (a trace without neuronprof's
        settings says ``cpu`` for any trace without device work). ``title``: what the pane's
        heading names (``None``: nothing). ``windows``: ``rank_windows(timeline)``, when the caller has it already.
    """
    label = timeline.device_label or "device"
    cpu = timeline.backend == "cpu" and backend_known
    title = timeline.device_label or ("CPU run: no device" if cpu else None)
    notes: list[str] = []
    if not timeline.device:
        notes.append(no_device_sentence(timeline, backend_known))
        return {"label": label, "title": title, "kernels": [], "busy": [], "total_us": 0.0, "notes": notes}
    # The host op behind each External id (kineto's link from device work to the op that launched it).
    ops = [e for e in timeline.host if e.category == "op" and e.ext_id is not None]
    by_ext = first_with(ops, "ext_id", timeline.device).tolist()
    by_corr: Optional[dict[int, str]] = None  # read only when some device work has no External id to follow
    groups: dict[tuple[str, str], list[Any]] = {}
    for d, op in zip(timeline.device, by_ext):
        g = groups.get((d.name, d.category))
        if g is None:
            g = groups[d.name, d.category] = [0, 0, Counter()]
        g[0] += 1
        g[1] += d.end_ns - d.start_ns
        launcher = ops[op].name if op >= 0 else None
        if launcher is None and d.correlation is not None:
            if by_corr is None:
                by_corr = _by_correlation(timeline)
            launcher = by_corr.get(d.correlation)
        g[2][launcher] += 1
    total = sum(g[1] for g in groups.values()) or 1
    rows = []
    for (name, category), (calls, ns, launched) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        named = [(op, n) for op, n in launched.most_common() if op is not None]
        rows.append(
            {
                "name": name,
                "category": category,
                "calls": calls,
                "total_us": round(ns / 1000, 3),
                "mean_us": round(ns / 1000 / calls, 3),
                "share": round(100 * ns / total, 2),
                "launched_by": ", ".join(f"{op} ({n} of {calls})" for op, n in named[:3]) or None,
            }
        )
    if len(rows) > KERNELS_SHOWN:
        notes.append(f"the {KERNELS_SHOWN} heaviest of {len(rows)} kernel names are listed")
    if all(r["launched_by"] is None for r in rows):
        if timeline.backend == "tpu":
            notes.append("TPU kernel rows are not linked to the ops that launched them: TorchTPU records no link")
        else:
            notes.append("the trace links no device work to the op that launched it (no External id or correlation)")
    busy, busy_notes = _busy(timeline, rank_windows(timeline) if windows is None else windows)
    return {
        "label": label,
        "title": title,
        "kernels": rows[:KERNELS_SHOWN],
        "busy": busy,
        "total_us": round(total / 1000, 3),
        "notes": notes + busy_notes,
    }


def _busy(timeline: Timeline, windows: Sequence[Sequence[Window]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Per step (per rank's step), how long the device was busy in it: the union of its device work.

    The steps are the findings' (``windows``: ``rank_windows``); the notes say what the rows cannot: device
    time outside every step, and device time counted in two steps whose windows overlap.
    """
    out = []
    outside = 0
    overlap = False
    for part, steps in zip(list(timeline.ranks) or [timeline], windows):
        prefix = f"rank {part.rank} · " if timeline.ranks else ""
        overlap = overlap or any(a[2] > b[1] for a, b in zip(steps, steps[1:]))
        n = len(part.device)
        starts = np.fromiter((d.start_ns for d in part.device), np.int64, n)
        ends = np.fromiter((d.end_ns for d in part.device), np.int64, n)
        # Then the steps' union and the whole recording: what lies outside the union is outside every step.
        covered = [("", lo, hi) for lo, hi in vocab.merged_intervals((lo, hi) for _, lo, hi in steps)]
        whole = ("", int(starts.min()), int(ends.max())) if n else ("", 0, 0)
        taken = [row[0] for row in first_owner_ns(starts, ends, np.zeros(n, np.intp), [*steps, *covered, whole], 1)]
        outside += taken[-1] - sum(taken[len(steps) : -1])
        for (name, lo, hi), ns in zip(steps, taken):
            out.append(
                {
                    "name": prefix + name,
                    "us": round((hi - lo) / 1000, 3),
                    "busy_us": round(ns / 1000, 3),
                    "share": round(100 * ns / (hi - lo), 1) if hi > lo else None,
                }
            )
    notes = ["a step lasts until the device work launched in it ends, as in the findings and the overview"]
    if overlap:
        notes.append(
            "some steps' device work runs on into the next step's host time: there the two steps overlap, and "
            "device time in the overlap counts in both steps' busy time"
        )
    if outside > 0:
        notes.append(f"{outside / 1000:,.1f} µs of device busy time lies outside every recorded step")
    return out, notes


def neuron_note(timeline: Timeline) -> Optional[str]:
    """What the device pane of a Neuron run cannot show without Neuron's own profile."""
    if timeline.backend != "neuron":
        return None
    return (
        "the NeuronCore engine breakdown (Tensor, Vector, Scalar, GpSimd, DMA) is not in torch.profiler's trace: "
        "it comes from Neuron's own profile (see `neuronprof neuron`)"
    )


def neuron_data(profile: NeuronProfile) -> dict[str, Any]:
    """NEFF rows and the engine breakdown of Neuron's own profile (read by ``neuronprof.analysis.neuron_profile``).

    Returns:
        ``{"neffs": [{"name", "calls", "device_us", "min_us", "max_us", "cores"}], "engines": [{"name",
        "profile", "engine", "active_us", "share_pct"}], "no_neffs": str, "notes": [str]}``: per NEFF its executions and
        NeuronCore time (µs), per device profile each engine's active time (µs) and share (%).
    """
    neffs = [
        {
            "name": n.neff,
            "calls": n.calls,
            "device_us": round(n.device_us, 3),
            "min_us": round(n.min_us, 3),
            "max_us": round(n.max_us, 3),
            "cores": ", ".join(map(str, n.cores)) or None,
        }
        for n in profile.neffs
    ]
    engines = [
        {
            "name": f"{summary.label or summary.key} · {e.engine}",
            "profile": summary.label or summary.key,
            "engine": e.engine,
            "active_us": e.active_us,
            "share_pct": e.share_pct,
        }
        for summary in profile.summaries
        for e in summary.engines
    ]
    notes = [f"read from Neuron's own profile: {profile.source}" + (f" ({profile.tool})" if profile.tool else "")]
    # The profile's notes carry the tool's error with its fix: said once, from there.
    if profile.tool_error and not any(profile.tool_error in n for n in profile.notes):
        notes.append(f"part of Neuron's profile was not read: {profile.tool_error}")
    if profile.tool_missing:
        why = "neuron-explorer, which reads Neuron's profile, was not found (see below)"
    elif profile.tool_error:
        why = "neuron-explorer could not read Neuron's profile (see below)"
    else:
        why = None
    if why and not neffs and not engines:
        notes[0] = f"Neuron's own profile: {profile.source}"
    no_neffs = f"No NEFF execution was read: {why}." if why else "Neuron's profile holds no NEFF execution."
    if not engines:
        notes.append(
            f"no engine breakdown: {why}"
            if why
            else "Neuron's profile holds no device profile, so there is no engine breakdown (capture mode device)"
        )
    return {"neffs": neffs, "engines": engines, "no_neffs": no_neffs, "notes": notes + list(profile.notes)}
