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
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from neuronprof import _vocabulary as vocab

if TYPE_CHECKING:
    from neuronprof.analysis.insights import Timeline

__all__ = [
    "CATEGORIES",
    "category_events",
    "first_owner_ns",
    "first_with",
    "overview_data",
    "rank_windows",
    "step_windows",
]

Window = tuple[str, int, int]
"""A step, or the whole recording, as ``(name, start_ns, end_ns)``."""

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


def category_events(timeline: Timeline) -> tuple[np.ndarray, np.ndarray, np.ndarray, set[str]]:
    """Each event of one timeline as ``starts, ends, categories`` (index in ``CATEGORIES``), and its host categories.

    A step has no category of its own (it is a window): its index is ``len(CATEGORIES)``, past every category.
    """
    placed = _Placed({key: i for i, (key, _) in enumerate(CATEGORIES)})
    host, device = timeline.host, timeline.device
    host_codes = np.fromiter((placed[e.name, e.category] for e in host), np.int8, len(host))
    device_codes = np.fromiter((placed[d.name, d.category, True] for d in device), np.int8, len(device))
    n = len(host) + len(device)
    starts = np.fromiter((e.start_ns for events in (host, device) for e in events), np.int64, n)
    ends = np.fromiter((e.end_ns for events in (host, device) for e in events), np.int64, n)
    return starts, ends, np.concatenate((host_codes, device_codes)), {key[1] for key in placed if len(key) == 2}


class _Placed(dict[tuple[Any, ...], int]):
    """An event's category index by ``(name, category)``, or ``(name, category, True)`` for device work.

    A trace repeats a few thousand names millions of times: each is placed once, when first asked for.
    """

    def __init__(self, index: dict[str, int]) -> None:
        super().__init__()
        self.index = {**index, "step": len(CATEGORIES)}

    def __missing__(self, key: tuple[Any, ...]) -> int:
        name, category = key[:2]
        if len(key) == 2:
            where = _host_category(name, category)
        elif vocab.is_collective(name, vocab.K_DEVICE):
            where = "communication"
        else:
            where = "device" if category == "kernel" else "memory"
        self[key] = self.index[where]
        return self[key]


def first_owner_ns(
    starts: np.ndarray, ends: np.ndarray, owners: np.ndarray, windows: Sequence[Window], n: int
) -> list[list[int]]:
    """Per window ``(name, lo, hi)``, the ns of ``[lo, hi)`` each owner ``0..n-1`` takes, each instant counted once.

    An instant belongs to the lowest-numbered owner with a span ``[start, end)`` over it (owners
    ``n`` and above take nothing).
    """
    if not windows:
        return []
    lo = np.fromiter((w[1] for w in windows), np.int64, len(windows))
    hi = np.fromiter((w[2] for w in windows), np.int64, len(windows))
    unions = [vocab.merged_spans(starts[owners == k], ends[owners == k]) for k in range(n)]
    # The instants between two consecutive points are all under the same owners' spans.
    points = np.sort(np.concatenate([*(x for union in unions for x in union), lo, hi]))
    first = np.full(len(points) - 1, n, np.int8)
    for k in reversed(range(n)):
        union_starts, union_ends = unions[k]
        if not len(union_starts):
            continue
        # Disjoint spans that do not touch: each point opens or closes at most one.
        opens = np.zeros(len(points), np.int8)
        opens[np.searchsorted(points, union_starts)] = 1
        opens[np.searchsorted(points, union_ends)] = -1
        first[np.cumsum(opens, dtype=np.int8)[:-1] > 0] = k
    lengths = np.diff(points)
    a, b = np.searchsorted(points, lo), np.searchsorted(points, hi)
    out = np.zeros((len(windows), n), np.int64)
    taken = np.zeros(len(points), np.int64)  # what the owner takes before each point
    for k in range(n):
        if len(unions[k][0]):
            np.cumsum(np.where(first == k, lengths, 0), out=taken[1:])
            out[:, k] = taken[b] - taken[a]
    return out.tolist()


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


def rank_windows(timeline: Timeline) -> list[list[Window]]:
    """``step_windows`` of each rank's timeline (``timeline.ranks``), or of the timeline itself when it has no ranks."""
    return [step_windows(part) for part in list(timeline.ranks) or [timeline]]


def step_windows(timeline: Timeline) -> list[Window]:
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
    device = timeline.device
    calls = [e for e in timeline.host if e.category == "runtime" and e.correlation is not None]
    launcher = first_with(calls, "correlation", device)
    if (launcher < 0).any():
        ops = [e for e in timeline.host if e.category in ("op", "annotation") and e.ext_id is not None]
        via_op = first_with(ops, "ext_id", device)
        launcher = np.where((launcher < 0) & (via_op >= 0), len(calls) + via_op, launcher)
        calls += ops
    launched = np.flatnonzero(launcher >= 0)
    used, call = np.unique(launcher[launched], return_inverse=True)  # ``call``: index into ``used``
    threads = {thread: k for k, thread in enumerate(dict.fromkeys(t for _, _, _, t in steps))}
    thread = np.fromiter((threads.get(calls[i].thread, -1) for i in used), np.intp, len(used))
    call_start = np.fromiter((calls[i].start_ns for i in used), np.int64, len(used))
    call_end = np.fromiter((calls[i].end_ns for i in used), np.int64, len(used))
    device_end = np.fromiter((device[i].end_ns for i in launched), np.int64, len(launched))
    step_end = np.array([e for _, e, _, _ in steps], np.int64)
    ends = step_end.copy()
    for name, k in threads.items():
        mine = np.array([i for i, st in enumerate(steps) if st[3] == name])  # the thread's steps, by start
        work = np.flatnonzero(thread[call] == k)  # index into ``launched``
        # The call's step: the last of its thread's steps to start at or before it, if the call ends in it.
        j = np.searchsorted(np.array([steps[i][0] for i in mine], np.int64), call_start[call[work]], "right") - 1
        work, step = work[j >= 0], mine[j[j >= 0]]
        inside = call_end[call[work]] <= step_end[step]
        np.maximum.at(ends, step[inside], device_end[work[inside]])
    return ends.tolist()


def first_with(calls: Sequence[Any], key: str, device: Sequence[Any]) -> np.ndarray:
    """For each device event, the index in ``calls`` of the first call whose ``key`` id is the event's (-1: none)."""
    none = np.iinfo(np.int64).min  # no id
    ids = np.fromiter(map(attrgetter(key), calls), np.int64, len(calls))
    wanted = np.fromiter((none if (i := getattr(d, key)) is None else i for d in device), np.int64, len(device))
    ids, first = np.unique(ids, return_index=True)
    if not len(ids):
        return np.full(len(device), -1)
    at = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
    return np.where(ids[at] == wanted, first[at], -1)


def breakdown(events: tuple[np.ndarray, np.ndarray, np.ndarray], windows: Sequence[Window]) -> list[dict[str, Any]]:
    """Per window, ``{"name", "start_ns", "us": step µs, "parts": {category: µs}}``, each instant counted once.

    ``events``: ``category_events``'s starts, ends and categories. Each instant of a window
    goes to the first category, in ``CATEGORIES`` order, with an event over it; idle is what is left.
    """
    busy = len(CATEGORIES) - 1
    out = []
    for (name, lo, hi), taken in zip(windows, first_owner_ns(*events, windows, busy)):
        parts = {key: ns / 1000 for (key, _), ns in zip(CATEGORIES, taken)}
        parts["idle"] = max(hi - lo - sum(taken), 0) / 1000
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


def overview_data(
    timeline: Timeline, backend_known: bool = True, windows: Optional[Sequence[Sequence[Window]]] = None
) -> dict[str, Any]:
    """The overview pane: each step's time and its breakdown by category, and the mean step's.

    Returns:
        ``{"categories": [{"key", "label"}], "steps": [{"name", "us", "parts", "outlier"}],
        "mean": {category: µs}, "mean_us", "notes": [str]}``; times in µs. A timeline of
        several ranks gives each rank's steps, named ``rank N · ProfilerStep#M``. ``backend_known``:
        the timeline's backend was the session's, as in ``kernels_data``. ``windows``: ``rank_windows(timeline)``,
        when the caller has it already.
    """
    parts = list(timeline.ranks) or [timeline]
    steps: list[dict[str, Any]] = []
    extended = python = False
    for part, part_windows in zip(parts, rank_windows(timeline) if windows is None else windows):
        prefix = f"rank {part.rank} · " if timeline.ranks else ""
        host_ends = sorted((e.start_ns, e.end_ns) for e in part.host if e.category == "step")
        extended = extended or any(w[2] > h[1] for w, h in zip(part_windows, host_ends))
        starts, ends, codes, host_categories = category_events(part)
        python = python or "python" in host_categories
        mine = [
            {"name": prefix + s["name"], "us": round(s["us"], 3), "parts": _rounded(s["parts"])}
            for s in breakdown((starts, ends, codes), part_windows)
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
    if not python:
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
