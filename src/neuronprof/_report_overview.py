"""The report's overview: where each step's time goes, by category, and which steps stand out.

A renderer's part (see ``report``): it reads a
[`Timeline`][neuronprof.analysis.insights.Timeline] and returns plain data for the page.
Each instant of a step is counted once, in the first of these categories busy at that
instant (the order TensorBoard's profiler overview used): device compute, memory
copies/sets, communication, runtime and launch, data loading, host compute in ops,
host time between ops (Python frames and ``record_function`` ranges), and idle (no
event recorded at all: waiting, or Python that ``with_stack=False`` did not record).
"""

from __future__ import annotations

import re
import statistics
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab

if TYPE_CHECKING:
    from neuronprof.analysis.insights import Timeline

__all__ = ["CATEGORIES", "category_spans", "clip", "overview_data", "step_windows"]

Span = tuple[int, int]

CATEGORIES: tuple[tuple[str, str], ...] = (
    ("device", "{label} compute"),
    ("memory", "{label} memory copies and sets"),
    ("communication", "communication"),
    ("runtime", "runtime and launch"),
    ("dataloader", "data loading"),
    ("host_ops", "host compute in ops"),
    ("python", "host between ops (Python)"),
    ("idle", "idle"),
)
"""The overview's categories, key and label, in the order an instant is given to the first busy one."""

# The findings' rule for a DataLoader's fetch (``neuronprof.analysis.insights``): its ``__next__`` frame or range.
_DATALOADER = re.compile(r"DataLoader.*__next__|__next__.*DataLoader")
_HOST_KINDS = {"op": vocab.K_OP, "python": vocab.K_PY, "runtime": vocab.K_RUNTIME, "step": vocab.K_STEP}

OUTLIER_MADS = 3.0
"""A step is marked an outlier when its time is this many scaled median absolute deviations from the median..."""
OUTLIER_SHARE = 0.1
"""...and at least this share away from the median (identical steps have a deviation of 0)."""


def category_spans(timeline: Timeline) -> dict[str, list[Span]]:
    """Each category's events of one timeline, as sorted disjoint ``(start_ns, end_ns)`` spans ("idle" has none)."""
    spans: dict[str, list[Span]] = {key: [] for key, _ in CATEGORIES}
    for d in timeline.device:
        if vocab.is_collective(d.name, vocab.K_DEVICE):
            spans["communication"].append((d.start_ns, d.end_ns))
        else:
            spans["device" if d.category == "kernel" else "memory"].append((d.start_ns, d.end_ns))
    # A trace repeats a few thousand names millions of times: each (name, category) is placed once.
    placed: dict[tuple[str, str], list[Span]] = {}
    spans["step"] = []  # the steps are the windows, not a category: set aside
    for e in timeline.host:
        key = (e.name, e.category)
        target = placed.get(key)
        if target is None:
            target = placed[key] = spans[_host_category(e.name, e.category)]
        target.append((e.start_ns, e.end_ns))
    del spans["step"]
    return {key: vocab.merged_intervals(v) for key, v in spans.items()}


def _host_category(name: str, category: str) -> str:
    """The overview's category of a host event (a step has none of its own: it is the window)."""
    if category == "step":
        return "step"
    if vocab.is_collective(name, _HOST_KINDS.get(category, vocab.K_OTHER)):
        return "communication"
    if category == "runtime":
        return "runtime"
    if "__next__" in name and _DATALOADER.search(name):
        return "dataloader"
    return "host_ops" if category == "op" else "python"


def step_windows(timeline: Timeline) -> list[tuple[str, int, int]]:
    """The recorded steps as ``(name, start_ns, end_ns)`` in order; the whole recording when it has no step.

    The findings' rule (``neuronprof.analysis.insights``): a step lasts until the device work
    launched inside it ends, as torch.profiler may close the step before the device catches up
    when nothing synchronises. So the overview, the kernels pane and the findings read the same steps.
    """
    steps = sorted((e.start_ns, e.end_ns, e.name, e.thread) for e in timeline.host if e.category == "step")
    if steps:
        step_ends = _device_ends(timeline, steps) if timeline.device else [e for _, e, _, _ in steps]
        return [(name, s, end) for (s, _, name, _), end in zip(steps, step_ends)]
    ends = [(e.start_ns, e.end_ns) for e in timeline.host] + [(d.start_ns, d.end_ns) for d in timeline.device]
    if not ends:
        return []
    return [("(whole recording)", min(s for s, _ in ends), max(e for _, e in ends))]


def _device_ends(timeline: Timeline, steps: Sequence[tuple[int, int, str, str]]) -> list[int]:
    """Each step's end, extended to the end of the device work launched by a call nested in it.

    As the findings link them: device work to the runtime call of its correlation id, else to
    the op of its External id; the call counts for the step that encloses it on its thread.
    """
    runtime_by_corr: dict[int, tuple[str, int, int]] = {}
    op_by_ext: dict[int, tuple[str, int, int]] = {}
    for e in timeline.host:
        if e.category == "runtime" and e.correlation is not None:
            runtime_by_corr.setdefault(e.correlation, (e.thread, e.start_ns, e.end_ns))
        elif e.category in ("op", "annotation") and e.ext_id is not None:
            op_by_ext.setdefault(e.ext_id, (e.thread, e.start_ns, e.end_ns))
    by_thread: dict[str, list[int]] = {}  # each thread's steps, as indexes into ``steps`` (sorted by start)
    for i, st in enumerate(steps):
        by_thread.setdefault(st[3], []).append(i)
    starts = {t: [steps[i][0] for i in idx] for t, idx in by_thread.items()}
    ends = [e for _, e, _, _ in steps]
    for d in timeline.device:
        launcher = runtime_by_corr.get(d.correlation) if d.correlation is not None else None
        if launcher is None and d.ext_id is not None:
            launcher = op_by_ext.get(d.ext_id)
        if launcher is None or launcher[0] not in by_thread:
            continue
        thread, lo, hi = launcher
        j = bisect_right(starts[thread], lo) - 1
        if j < 0:
            continue
        i = by_thread[thread][j]
        if hi <= steps[i][1] and d.end_ns > ends[i]:
            ends[i] = d.end_ns
    return ends


def clip(merged: Sequence[Span], ends: Sequence[int], lo: int, hi: int) -> list[Span]:
    """The part of sorted disjoint ``merged`` (``ends``: their ends) inside ``[lo, hi)``."""
    out = []
    i = bisect_right(ends, lo)
    while i < len(merged) and merged[i][0] < hi:
        s, e = merged[i]
        out.append((max(s, lo), min(e, hi)))
        i += 1
    return out


def _minus(a: Sequence[Span], b: Sequence[Span]) -> list[Span]:
    """Sorted disjoint ``a`` less sorted disjoint ``b``, in one pass over both."""
    out: list[Span] = []
    j, nb = 0, len(b)
    for s, e in a:
        while j < nb and b[j][1] <= s:
            j += 1
        k = j
        while k < nb and b[k][0] < e:
            if b[k][0] > s:
                out.append((s, b[k][0]))
            if b[k][1] > s:
                s = b[k][1]
            k += 1
        if s < e:
            out.append((s, e))
    return out


def _join(a: list[Span], b: list[Span]) -> list[Span]:
    """Two sorted, disjoint and mutually disjoint span lists as one sorted list (touching spans stay apart)."""
    if not a or not b:
        return a or b
    out: list[Span] = []
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] < b[j]:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    out += a[i:] or b[j:]
    return out


def breakdown(spans: dict[str, list[Span]], windows: Iterable[tuple[str, int, int]]) -> list[dict[str, Any]]:
    """Per window, ``{"name", "start_ns", "us": step µs, "parts": {category: µs}}``, each instant counted once.

    Category by category, in ``CATEGORIES`` order, each takes the part of the window its
    spans cover that no earlier category took; idle is what is left.
    """
    keys = [key for key, _ in CATEGORIES[:-1] if spans[key]]  # a category with no span takes nothing
    ends = {key: [e for _, e in spans[key]] for key in keys}
    out = []
    for name, lo, hi in windows:
        covered: list[Span] = []
        parts = dict.fromkeys((key for key, _ in CATEGORIES), 0.0)
        taken = 0
        for key in keys:
            mine = _minus(clip(spans[key], ends[key], lo, hi), covered)
            ns = sum(e - s for s, e in mine)
            parts[key] = ns / 1000
            taken += ns
            covered = _join(covered, mine)
        parts["idle"] = max(hi - lo - taken, 0) / 1000
        out.append({"name": name, "start_ns": lo, "us": (hi - lo) / 1000, "parts": parts})
    return out


def outliers(times: Sequence[float]) -> list[bool]:
    """Which step times stand out: ``OUTLIER_MADS`` scaled MADs and ``OUTLIER_SHARE`` off the median."""
    if len(times) < 3:
        return [False] * len(times)
    med = statistics.median(times)
    mad = 1.4826 * statistics.median(abs(t - med) for t in times)
    return [abs(t - med) > OUTLIER_MADS * mad and abs(t - med) > OUTLIER_SHARE * med for t in times]


def labels(device_label: Optional[str]) -> dict[str, str]:
    """The categories' labels in the backend's words (``NEURON compute``, ``CUDA memory copies and sets``)."""
    return {key: text.format(label=device_label or "device") for key, text in CATEGORIES}


def overview_data(timeline: Timeline, backend_known: bool = True) -> dict[str, Any]:
    """The overview pane: each step's time and its breakdown by category, and the mean step's.

    Returns:
        ``{"categories": [{"key", "label"}], "steps": [{"name", "us", "parts", "outlier"}],
        "mean": {category: µs}, "mean_us", "notes": [str]}``; times in µs. A timeline of
        several ranks gives each rank's steps, named ``rank N · ProfilerStep#M``. ``backend_known``:
        the timeline's backend was the session's, as in ``kernels_data``.
    """
    parts = list(timeline.ranks) or [timeline]
    steps: list[dict[str, Any]] = []
    extended = False
    for part in parts:
        prefix = f"rank {part.rank} · " if timeline.ranks else ""
        windows = step_windows(part)
        host_ends = sorted((e.start_ns, e.end_ns) for e in part.host if e.category == "step")
        extended = extended or any(w[2] > h[1] for w, h in zip(windows, host_ends))
        mine = [
            {"name": prefix + s["name"], "us": round(s["us"], 3), "parts": _rounded(s["parts"])}
            for s in breakdown(category_spans(part), windows)
        ]
        # Each rank's steps are judged among themselves: ranks may differ by design.
        for s, out in zip(mine, outliers([s["us"] for s in mine])):
            s["outlier"] = out
        steps += mine
    names = labels(timeline.device_label)
    n = len(steps) or 1
    mean = {key: round(sum(s["parts"][key] for s in steps) / n, 3) for key, _ in CATEGORIES}
    notes = []
    if not timeline.device_label:
        notes.append(
            "a CPU run has no device: the device categories are empty"
            if timeline.backend == "cpu" and backend_known
            else "no device time in this run: the device categories are empty (a CPU run, or a device build that "
            "does not report its time to torch.profiler)"
        )
    if extended:
        notes.append(
            "a step lasts until the device work launched in it ends, as in the findings: the device ran on past "
            "the end torch.profiler recorded for some steps, so steps overlap; the time in an overlap (and the "
            "device work in it) counts in both steps, and the steps add up to more than the recording"
        )
    if not any(e.category == "python" for t in parts for e in t.host):
        notes.append(
            "no Python frames were recorded: host time between ops counts as host between ops only inside a "
            "recorded range (record_function, annotations) and as idle elsewhere; pass with_stack=True to tell "
            "Python from idle"
        )
    if any(s["outlier"] for s in steps):
        notes.append(
            f"outlier steps (marked !) are more than {OUTLIER_MADS:g} scaled median absolute deviations and "
            f"{OUTLIER_SHARE:.0%} from the median step time" + (" of their rank" if timeline.ranks else "")
        )
    return {
        "categories": [{"key": key, "label": names[key]} for key, _ in CATEGORIES],
        "steps": steps,
        "mean": mean,
        "mean_us": round(sum(s["us"] for s in steps) / n, 3),
        "ranks": len(timeline.ranks),
        "notes": notes,
    }


def _rounded(parts: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in parts.items()}
