"""The report's overview: where each step's time goes, by category, and which steps stand out.

A renderer's part (see ``report``): it reads a run's events as numpy columns
(``EventColumns``, one row per event, no object apiece) and returns plain data for the page.
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
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from neuronprof import _vocabulary as vocab
from neuronprof.analysis._arrays import present

if TYPE_CHECKING:
    from neuronprof.analysis.insights._columns import EventColumns

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


def category_events(cols: EventColumns) -> tuple[np.ndarray, np.ndarray, np.ndarray, set[str]]:
    """Each event of one rank's columns as ``starts, ends, categories``, and the host events' categories.

    Args:
        cols: The events (one rank's, or a run's of one rank).

    Returns:
        ``starts`` and ``ends`` (int64 ns) and ``categories`` (int8, an index in ``CATEGORIES``),
        one per event, the host events first then the device events (``host_count + device_count``
        long); and the set of the host events' ``HostCategory``s. A step has no category of its
        own (it is a window): its index is ``len(CATEGORIES)``, past every category.
    """
    index = {**{key: i for i, (key, _) in enumerate(CATEGORIES)}, "step": len(CATEGORIES)}
    names, categories = cols.names, cols.categories
    # A trace repeats a few thousand keys millions of times: each is placed once.
    host_keys = present(cols.key, len(names))
    device_keys = present(cols.dkey, len(names))
    host_code = np.zeros(len(names), np.int8)
    for k in host_keys:
        host_code[k] = index[_host_category(names[k], categories[k] or "other")]  # a host key has one
    device_code = np.zeros(len(names), np.int8)
    for k in device_keys:
        device_code[k] = index[_device_category(names[k], categories[k])]
    starts = np.concatenate((cols.start, cols.dstart)).astype(np.int64, copy=False)
    ends = np.concatenate((cols.end, cols.dend)).astype(np.int64, copy=False)
    codes = np.concatenate((host_code[cols.key], device_code[cols.dkey]))
    return starts, ends, codes, {c for k in host_keys if (c := categories[k]) is not None}


def _device_category(name: str, category: Optional[str]) -> str:
    """The overview's category of device work: communication, else compute (kernels) or memory."""
    if vocab.is_collective(name, vocab.K_DEVICE):
        return "communication"
    return "device" if category == "kernel" else "memory"


def first_owner_ns(
    starts: np.ndarray, ends: np.ndarray, owners: np.ndarray, windows: Sequence[Window], n: int
) -> list[list[int]]:
    """Per window ``(name, lo, hi)``, the ns of ``[lo, hi)`` each owner ``0..n-1`` takes, each instant counted once.

    An instant belongs to the lowest-numbered owner with a span ``[start, end)`` over it (owners
    ``n`` and above take nothing). So owner ``k`` takes what the union of owners ``0..k``'s spans
    covers of a window less what the union of owners ``0..k-1``'s covers: each union is the one
    before merged with the union of owner ``k``'s spans, and what it covers of every window is
    read off its running length at the windows' ends (a sorted search per window end).

    Args:
        starts: The spans' starts (int ns, shape ``(spans,)``).
        ends: Their ends (int ns).
        owners: Each one's owner (an integer).
        windows: ``(name, lo, hi)`` in int ns, any order; they may overlap. One that ends before
            it starts takes nothing.
        n: How many owners take time.

    Returns:
        One row per window, of ``n`` int ns.
    """
    if not windows:
        return []
    lo = np.fromiter((w[1] for w in windows), np.int64, len(windows))
    hi = np.maximum(np.fromiter((w[2] for w in windows), np.int64, len(windows)), lo)
    out = np.zeros((len(windows), n), np.int64)
    union = (np.empty(0, np.int64), np.empty(0, np.int64))
    before = np.zeros(len(windows), np.int64)  # what the union of the owners so far covers of each window
    for k in range(n):
        mine = owners == k
        if not mine.any():
            continue
        own = vocab.merged_spans(starts[mine], ends[mine])  # (merged first: the union below joins two short lists)
        union = vocab.merged_spans(np.concatenate((union[0], own[0])), np.concatenate((union[1], own[1])))
        covered = _covered_before(*union, hi) - _covered_before(*union, lo)
        out[:, k] = covered - before
        before = covered
    return out.tolist()


def _covered_before(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How long sorted disjoint spans ``[starts, ends)`` cover before each instant of ``at`` (int ns)."""
    if not len(starts):
        return np.zeros(len(at), np.int64)
    lengths = ends - starts
    done = np.concatenate(([0], np.cumsum(lengths)))  # what the spans before each one cover
    last = np.searchsorted(starts, at, side="right") - 1  # the last span to start by the instant (-1: none)
    return np.where(last >= 0, done[last] + np.clip(at - starts[last], 0, lengths[last]), 0)


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


def rank_windows(cols: EventColumns) -> list[list[Window]]:
    """``step_windows`` of each rank's columns (``cols.ranks``), or of the columns themselves when they have no ranks.

    Returns:
        One list of ``(name, start_ns, end_ns)`` windows per rank, in the ranks' order.
    """
    return [step_windows(part) for part in list(cols.ranks) or [cols]]


def _category_rows(cols: EventColumns, *wanted: str) -> np.ndarray:
    """The host events (indices, in order) whose ``HostCategory`` is one of ``wanted``."""
    mask = np.fromiter((c in wanted for c in cols.categories), bool, len(cols.categories))
    return np.flatnonzero(mask[cols.key])


def _steps(cols: EventColumns) -> list[tuple[int, int, str, str, int]]:
    """The step events as ``(start_ns, end_ns, name, thread, row)``, sorted (the few of a run, as Python values)."""
    rows = _category_rows(cols, "step")
    names, threads = cols.names, cols.threads
    return sorted(
        zip(
            cols.start[rows].tolist(),
            cols.end[rows].tolist(),
            [names[k] for k in cols.key[rows].tolist()],
            [threads[t] for t in cols.thread[rows].tolist()],
            rows.tolist(),
        )
    )


def step_windows(cols: EventColumns) -> list[Window]:
    """The recorded steps of one rank's columns as ``(name, start_ns, end_ns)`` in order.

    The findings' rule (``neuronprof.analysis.insights``): a step lasts until the device work
    launched inside it ends, as torch.profiler may close the step before the device catches up
    when nothing synchronises. So the overview, the kernels pane and the findings read the same steps.

    Returns:
        The steps by start (times in ns), or the whole recording, ``("(whole recording)", first
        start, last end)``, when it has no step; ``[]`` when it has no event.
    """
    steps = [step[:4] for step in _steps(cols)]
    if steps:
        step_ends = _device_ends(cols, steps) if cols.device_count else [e for _, e, _, _ in steps]
        return [(name, s, end) for (s, _, name, _), end in zip(steps, step_ends)]
    if not cols.host_count and not cols.device_count:
        return []
    lo = min(int(x.min()) for x in (cols.start, cols.dstart) if len(x))
    hi = max(int(x.max()) for x in (cols.end, cols.dend) if len(x))
    return [("(whole recording)", lo, hi)]


def _device_ends(cols: EventColumns, steps: Sequence[tuple[int, int, str, str]]) -> list[int]:
    """Each step's end (ns), extended to the end of the device work launched by a call nested in it.

    As the findings link them: device work to the runtime call of its correlation id, else to
    the op of its External id; the call counts for the step that encloses it on its thread.
    ``steps``: ``(start_ns, end_ns, name, thread)``, sorted.
    """
    calls = _category_rows(cols, "runtime")
    calls = calls[cols.corr[calls] != -1]
    launcher = first_with(cols.corr[calls], cols.dcorr)
    if (launcher < 0).any():
        ops = _category_rows(cols, "op", "annotation")
        ops = ops[cols.ext[ops] != -1]
        via_op = first_with(cols.ext[ops], cols.dext)
        launcher = np.where((launcher < 0) & (via_op >= 0), len(calls) + via_op, launcher)
        calls = np.concatenate((calls, ops))
    launched = np.flatnonzero(launcher >= 0)
    used, call = np.unique(launcher[launched], return_inverse=True)  # ``call``: index into ``used``
    used_rows = calls[used]  # host events
    threads = {thread: k for k, thread in enumerate(dict.fromkeys(t for _, _, _, t in steps))}
    step_thread = np.array([threads.get(name, -1) for name in cols.threads], np.intp)  # per thread index
    thread = step_thread[cols.thread[used_rows]] if len(used_rows) else np.zeros(0, np.intp)
    call_start = cols.start[used_rows].astype(np.int64, copy=False)
    call_end = cols.end[used_rows].astype(np.int64, copy=False)
    device_end = cols.dend[launched].astype(np.int64, copy=False)
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


def first_with(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each wanted id, the index in ``ids`` of its first occurrence (-1: none).

    Args:
        ids: The calls' ids (int64, shape ``(calls,)``; none is -1).
        wanted: The ids looked for (int64, shape ``(events,)``; -1, no id, finds nothing).

    Returns:
        An int64 array of shape ``(events,)``.
    """
    none = -1
    ids, first = np.unique(np.asarray(ids, np.int64), return_index=True)
    wanted = np.asarray(wanted, np.int64)
    if not len(ids):
        return np.full(len(wanted), -1, np.int64)
    at = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
    return np.where((ids[at] == wanted) & (wanted != none), first[at], -1)


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
    cols: EventColumns,
    backend_known: bool = True,
    windows: Optional[Sequence[Sequence[Window]]] = None,
) -> dict[str, Any]:
    """The overview pane: each step's time and its breakdown by category, and the mean step's.

    Args:
        cols: The run's events; with several ranks, ``cols.ranks`` holds each rank's.
        backend_known: The run's backend was the session's, as in ``kernels_data``.
        windows: ``rank_windows(cols)``, when the caller has it already.

    Returns:
        ``{"categories": [{"key", "label"}], "steps": [{"name", "us", "parts", "outlier"}],
        "mean": {category: µs}, "mean_us", "ranks", "notes": [str]}``; times in µs. A run of
        several ranks gives each rank's steps, named ``rank N · ProfilerStep#M``.
    """
    parts = list(cols.ranks) or [cols]
    steps: list[dict[str, Any]] = []
    extended = python = False
    for part, part_windows in zip(parts, rank_windows(cols) if windows is None else windows):
        prefix = f"rank {part.rank} · " if cols.ranks else ""
        host_ends = [step[:2] for step in _steps(part)]
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
    names = labels(cols.device_label)
    n = len(steps) or 1
    mean = {key: round(sum(s["parts"][key] for s in steps) / n, 3) for key, _ in CATEGORIES}
    notes = []
    if not cols.device_label:
        notes.append(
            "a CPU run has no device: the device categories are empty"
            if cols.backend == "cpu" and backend_known
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
            f"{OUTLIER_SHARE:.0%} from the median step time" + (" of their rank" if cols.ranks else "")
        )
    return {
        "categories": [{"key": key, "label": names[key]} for key, _ in CATEGORIES],
        "steps": steps,
        "mean": mean,
        "mean_us": round(sum(s["us"] for s in steps) / n, 3),
        "ranks": len(cols.ranks),
        "notes": notes,
    }


def _rounded(parts: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in parts.items()}
