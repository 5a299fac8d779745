"""The report's kernels / device pane and memory pane, as plain data for the page.

A renderer's part (see ``report``): it reads a run's events as numpy columns
(``EventColumns``: device work, and the host ops that launched it), and writes nothing;
the memory pane is ``_report_memory``'s (``memory_data``, named here too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from neuronprof import _vocabulary as vocab
from neuronprof._report_memory import memory_data
from neuronprof._report_overview import (
    Window,
    _category_rows,
    first_owner_ns,
    first_with,
    rank_windows,
)
from neuronprof.analysis._arrays import present

if TYPE_CHECKING:
    from neuronprof.analysis.insights._columns import EventColumns
    from neuronprof.analysis.neuron import NeuronProfile

__all__ = ["kernels_data", "memory_data", "neuron_data", "neuron_note"]

KERNELS_SHOWN = 50
"""Kernel names listed at most (the heaviest); the rest are counted in a note."""
_ENCLOSING_LOOKBACK = 64  # ops looked at before a runtime call for the one around it (nested ops start just before)


def _by_correlation(cols: EventColumns) -> tuple[np.ndarray, np.ndarray]:
    """The host op behind each runtime call's correlation id: the op around the call.

    Returns:
        ``corr`` (int64, sorted) and ``op`` (int64, the op's host event), one per correlation id
        whose call is inside an op on its thread; a correlation id of several calls takes the
        last such call's op (in host order).
    """
    ops = _category_rows(cols, "op")
    runtime = _category_rows(cols, "runtime")
    runtime = runtime[cols.corr[runtime] != -1]
    found = np.full(len(runtime), -1, np.int64)  # per runtime call, its op (host event)
    r_thread = cols.thread[runtime]
    o_thread = cols.thread[ops]
    for t in present(r_thread, len(cols.threads)):
        mine = ops[o_thread == t]
        # The thread's ops by start then the longer first (a stable sort: ties keep their order).
        mine = mine[np.lexsort((-cols.end[mine].astype(np.int64), cols.start[mine]))]
        starts, ends = cols.start[mine].astype(np.int64), cols.end[mine].astype(np.int64)
        calls = np.flatnonzero(r_thread == t)
        call_start, call_end = cols.start[runtime[calls]], cols.end[runtime[calls]]
        i = np.searchsorted(starts, call_start, "right")
        # The innermost op around the call: the latest to start that is still open at the call's end.
        op = np.full(len(calls), -1, np.int64)
        for back in range(1, _ENCLOSING_LOOKBACK + 1):
            at = i - back
            open_ = (at >= 0) & (op < 0)
            if not open_.any():
                break
            hit = np.flatnonzero(open_)
            hit = hit[ends[at[hit]] >= call_end[hit]]
            op[hit] = mine[at[hit]]
        found[calls] = op
    corr, op = cols.corr[runtime[found >= 0]].astype(np.int64), found[found >= 0]
    # The last call of each id: the first in reverse.
    corr, last = np.unique(corr[::-1], return_index=True)
    return corr, op[::-1][last]


def no_device_sentence(cols: EventColumns, backend_known: bool) -> str:
    """Why a run shows no device work: a CPU run has no device; otherwise the build did not report it."""
    if cols.backend == "cpu" and backend_known:
        return "a CPU run: there is no device, so there are no kernels and no device time"
    return (
        f"no device work was recorded (backend {cols.backend}): a CPU run, or a device build that does "
        "not report its kernels to torch.profiler"
    )


def kernels_data(
    cols: EventColumns,
    backend_known: bool = True,
    windows: Optional[Sequence[Sequence[Window]]] = None,
) -> dict[str, Any]:
    """The kernels pane: device work grouped by name, the op that launched it, device busy per step.

    Args:
        cols: The run's events; with several ranks, ``cols.ranks`` holds each rank's.
        backend_known: The run's backend was the session's (a trace without neuronprof's
            settings says ``cpu`` for any trace without device work).
        windows: ``rank_windows(cols)``, when the caller has it already.

    Returns:
        ``{"label", "title", "kernels": [{"name", "category", "calls", "total_us", "mean_us", "share",
        "launched_by"}], "busy": [{"name", "us", "busy_us", "share"}], "total_us", "notes": [str]}``;
        times in µs, ``share`` the share of all device time (%), a step's ``share`` the share of the step
        the device was busy (%). ``title``: what the pane's heading names (``None``: nothing).
        ``kernels`` is empty when no device work was recorded.
    """
    label = cols.device_label or "device"
    cpu = cols.backend == "cpu" and backend_known
    title = cols.device_label or ("CPU run: no device" if cpu else None)
    notes: list[str] = []
    if not cols.device_count:
        notes.append(no_device_sentence(cols, backend_known))
        return {"label": label, "title": title, "kernels": [], "busy": [], "total_us": 0.0, "notes": notes}
    names = cols.names
    # Each rank's device work, linked to its own rank's ops (ids repeat across ranks), one rank after another.
    parts = list(cols.ranks) or [cols]
    launcher_of_name: dict[str, int] = {}
    name_id = np.array([launcher_of_name.setdefault(n, len(launcher_of_name)) for n in names], np.int64)
    launcher = np.concatenate([_launchers(part, name_id) for part in parts])
    dkey = np.concatenate([part.dkey for part in parts])
    # Device work grouped by (name, category), the groups in the order of their first event.
    group_keys: dict[tuple[str, Optional[str]], int] = {}
    device_keys = np.array(present(dkey, len(names)), np.int64)
    group_of = np.zeros(len(names), np.int64)
    group_of[device_keys] = [
        group_keys.setdefault((names[k], cols.categories[k]), len(group_keys)) for k in device_keys.tolist()
    ]
    group = group_of[dkey]
    _, first = np.unique(group, return_index=True)
    order = np.argsort(first, kind="stable")  # groups by first event
    rename = np.empty(len(order), np.int64)
    rename[order] = np.arange(len(order))
    group = rename[group]
    keyed = [k for k, _ in sorted(group_keys.items(), key=lambda kv: kv[1])]
    groups = [keyed[g] for g in order.tolist()]
    calls = np.bincount(group, minlength=len(groups))
    ns = np.zeros(len(groups), np.int64)
    for part, lo in zip(parts, np.cumsum([0, *(p.device_count for p in parts)]).tolist()):
        np.add.at(ns, group[lo : lo + part.device_count], (part.dend - part.dstart).astype(np.int64))
    launcher_names = list(launcher_of_name)
    # Per group, its launchers by count, ties in the order of their first event (``Counter.most_common``).
    pair, first, counts = np.unique(
        group * (len(launcher_names) + 1) + launcher + 1, return_index=True, return_counts=True
    )
    launched: list[list[tuple[int, int, str]]] = [[] for _ in groups]
    for p, f, n in zip(pair.tolist(), first.tolist(), counts.tolist()):
        g, op_id = divmod(p, len(launcher_names) + 1)
        if op_id:
            launched[g].append((-n, f, launcher_names[op_id - 1]))
    total = int(ns.sum()) or 1
    rows = []
    for g in sorted(range(len(groups)), key=lambda g: -int(ns[g])):
        (name, category), n_calls, g_ns = groups[g], int(calls[g]), int(ns[g])
        named = sorted(launched[g])
        rows.append(
            {
                "name": name,
                "category": category,
                "calls": n_calls,
                "total_us": round(g_ns / 1000, 3),
                "mean_us": round(g_ns / 1000 / n_calls, 3),
                "share": round(100 * g_ns / total, 2),
                "launched_by": ", ".join(f"{op} ({-n} of {n_calls})" for n, _, op in named[:3]) or None,
            }
        )
    if len(rows) > KERNELS_SHOWN:
        notes.append(f"the {KERNELS_SHOWN} heaviest of {len(rows)} kernel names are listed")
    if all(r["launched_by"] is None for r in rows):
        if cols.backend == "tpu":
            notes.append("TPU kernel rows are not linked to the ops that launched them: TorchTPU records no link")
        else:
            notes.append("the trace links no device work to the op that launched it (no External id or correlation)")
    busy, busy_notes = _busy(cols, rank_windows(cols) if windows is None else windows)
    return {
        "label": label,
        "title": title,
        "kernels": rows[:KERNELS_SHOWN],
        "busy": busy,
        "total_us": round(total / 1000, 3),
        "notes": notes + busy_notes,
    }


def _launchers(cols: EventColumns, name_id: np.ndarray) -> np.ndarray:
    """Per device event of one rank, the name (``name_id`` of its key) of the host op that launched it, -1 for none.

    The op behind its External id (kineto's link from device work to the op that launched it),
    else behind the runtime call of its correlation id (``_by_correlation``).
    """
    ops = _category_rows(cols, "op")
    ops = ops[cols.ext[ops] != -1]
    by_ext = first_with(cols.ext[ops], cols.dext)
    launcher = np.where(by_ext >= 0, name_id[cols.key[ops[np.maximum(by_ext, 0)]]] if len(ops) else -1, -1)
    unlinked = np.flatnonzero((by_ext < 0) & (cols.dcorr != -1))
    if len(unlinked):  # read only when some device work has no External id to follow
        corr, op = _by_correlation(cols)
        if len(corr):
            wanted = cols.dcorr[unlinked].astype(np.int64)
            at = np.minimum(np.searchsorted(corr, wanted), len(corr) - 1)
            hit = corr[at] == wanted
            launcher[unlinked[hit]] = name_id[cols.key[op[at[hit]]]]
    return launcher


def _busy(cols: EventColumns, windows: Sequence[Sequence[Window]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Per step (per rank's step), how long the device was busy in it: the union of its device work.

    The steps are the findings' (``windows``: ``rank_windows``); the notes say what the rows cannot: device
    time outside every step, and device time counted in two steps whose windows overlap.
    """
    out = []
    outside = 0
    overlap = False
    for part, steps in zip(list(cols.ranks) or [cols], windows):
        prefix = f"rank {part.rank} · " if cols.ranks else ""
        overlap = overlap or any(a[2] > b[1] for a, b in zip(steps, steps[1:]))
        n = part.device_count
        starts = np.asarray(part.dstart, np.int64)
        ends = np.asarray(part.dend, np.int64)
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


def neuron_note(cols: EventColumns) -> Optional[str]:
    """What the device pane of a Neuron run cannot show without Neuron's own profile."""
    if cols.backend != "neuron":
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
