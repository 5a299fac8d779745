"""The rules about the device and the host↔device boundary.

Host↔device copies, hidden synchronisations, an idle device and a CPU-bound loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from neuronprof.analysis.insights._copies import (
    DEVICE_TO_DEVICE,
    DEVICE_TO_HOST,
    HOST_TO_DEVICE,
    _cause,
    _claimed_ancestor,
    _copy_evidence,
    _direction,
    _dtype_pair,
    _in_sync_op,
    _is_scalar_source,
    _outer_wrapper,
)
from neuronprof.analysis.insights._findings import CPU_BOUND_SHARE, GAPS_SHOWN, IDLE_SHARE, Evidence, Finding
from neuronprof.analysis.insights._intervals import _grouped_lengths, _LargestGaps, _length, _positions, _shifts
from neuronprof.analysis.insights._tally import (
    _per_step,
    _share,
    _steady,
    _Tally,
)

if TYPE_CHECKING:
    from neuronprof.analysis.insights._forest import _Forest
from neuronprof.analysis.insights._tree import (
    _MEMCPY,
    _SYNC_RUNTIME,
    COPY_OPS,
    ELEMENTWISE_OPS,
    SYNC_OPS,
    _NameMemo,
    _Node,
    _Profile,
)


def _copies(p: _Profile) -> list[Finding]:
    """``host_device_copy``: data moved between host and device inside the steps.

    Rule: a copy op (``aten::copy_``, ``aten::_copy_from``...) counts when

    1. a device memcpy or a runtime copy call that belongs to it names a
       host↔device direction (``Memcpy HtoD``/``DtoH``, ``cuMemcpyHtoDAsync``),
       anywhere in the step. The direction is the trace's own words: a copy named
       device-to-device (``Memcpy DtoD``, ``PtoP``) is never host↔device, and a bare
       ``cudaMemcpyAsync`` with no device event names no direction, so it is not
       reported; or
    2. on a profile with device time, the copy is *implicit*, made inside a
       compute op the step calls directly (``aten::add`` → ``aten::to`` →
       ``aten::_to_copy`` → ``aten::copy_``), it launched device work, and its
       source is a host value: a 0-dim tensor (a Python scalar or CPU scalar) when
       shapes were recorded, else a copy made for an elementwise op (where Python
       scalars meet device tensors). Reported as host→device. Other implicit copies
       (autocast's casts for a matmul) are dtype conversions.

    Host↔device memcpys not under any copy op (e.g. inside ``aten::nonzero``) count under
    rule 1 too, with the op that launched them as the cause. Copies inside the
    hidden-synchronisation ops are left to ``hidden_sync``. Threshold: any
    occurrence in the recorded steps. Time at stake: the copies' device time per
    step (their host time where there is no device time).
    """
    tally = _Tally()
    claimed = p.claimed  # the rows of the copies this rule explains; the dtype-conversion rule leaves them out
    # A device event's copy direction in the trace's words, by (name, category): None when not a memcpy.
    ways = _NameMemo(lambda key: _direction([key[0]]) if key[1] == "memcpy" or _MEMCPY.search(key[0]) else None)
    f = p.forest
    copy_ops = f.key_mask(lambda name, _category: name in COPY_OPS)
    # The rows that launched a host↔device memcpy: the others have nothing for the second loop.
    moves = f.dkey_mask(lambda name, category: ways[name, category] in (HOST_TO_DEVICE, DEVICE_TO_HOST))[f.dkey]
    launched_moves = f.row_mask(f.owner[moves & (f.owner >= 0)])
    for tally.step, step in enumerate(p.steps):
        top_rows = set(step.top_rows.tolist()) if len(step.top_rows) else set()
        for node in p.find(step, copy_ops):
            if node.parent is not None and node.parent.name in COPY_OPS:
                continue
            if _in_sync_op(node):
                continue
            certain, device_work, direction = _copy_evidence(node)
            if direction == DEVICE_TO_DEVICE:
                continue  # the trace names it device-side: no host↔device claim
            cause = _cause(node)
            implicit = cause is not None and cause._i in top_rows and _host_source(node, cause)
            if not (certain or (p.has_device_time and device_work and implicit)):
                continue
            claimed.add(node._i)
            dev = node.device_ns()
            cost = dev if dev else node.dur
            cause_name = cause.name if cause is not None else _outer_wrapper(node).name
            scalar = _is_scalar_source(node)
            if direction is None:
                direction = HOST_TO_DEVICE  # rule 2: a host value brought to the device for its op
            tally.add((cause_name, direction), cost, (_dtype_pair(node), scalar, bool(dev)))
        # Memcpys the host ops above did not claim (launched by other ops).
        for node in p.find_rows(step, launched_moves):
            left_out = None  # a copy op's, or a synchronising op's: asked at its first host↔device memcpy
            for d in node.device:
                way = ways[d.name, d.category]
                if way not in (HOST_TO_DEVICE, DEVICE_TO_HOST):
                    continue
                if left_out is None:
                    left_out = node.name in COPY_OPS or _in_sync_op(node)
                if left_out:
                    break
                if not _claimed_ancestor(node, claimed):
                    tally.add((node.name, way), d.end_ns - d.start_ns, (None, None, True))
    findings = []
    for key in tally.calls:
        cause_name, direction = key
        dtypes, scalar, on_device = tally.extra.get(key, (None, None, False))
        what = direction
        detail = f"{cause_name} copies data {what} on every call"
        if scalar:
            detail += "; the source is a 0-dim tensor: a Python scalar or CPU scalar meeting a device tensor"
        if dtypes:
            detail += f"; {dtypes[0]} → {dtypes[1]}"
        if not on_device:
            detail += "; host time (the copy has no device time here)"
        ops = (cause_name, "aten::copy_") if cause_name not in COPY_OPS else (cause_name,)
        findings.append(
            tally.finding(
                p,
                key,
                "host_device_copy",
                f"{cause_name} copies data {what} {tally.when(key, p.n)}",
                ops,
                detail,
                _copy_suggestion(cause_name, direction, scalar),
            )
        )
    return findings


def _copy_suggestion(cause_name: str, direction: Optional[str], scalar: Optional[bool]) -> str:
    if direction == DEVICE_TO_HOST:
        return "keep results on the device and read them on the host once, after the loop (or every N steps)"
    if scalar or cause_name not in ("aten::to", "aten::_to_copy"):
        return (
            "create constants and inputs on the device once, before the loop (torch.tensor(value, device=...)), "
            "or use a fused op that takes the scalar as a parameter (torch.rms_norm takes eps)"
        )
    return "move the tensor to the device once, before the loop, and keep it there"


def _host_source(copy: _Node, cause: _Node) -> bool:
    """Whether an implicit copy brings a host value to the device (rule 2 of ``_copies``).

    With recorded shapes: the source is 0-dim (a Python scalar or a CPU scalar tensor).
    Without them: the copy is made for an elementwise op, where Python scalars meet
    device tensors; casts made for a matmul (autocast's) are device-side conversions.
    """
    scalar = _is_scalar_source(copy)
    if scalar is not None:
        return scalar
    return cause.name in ELEMENTWISE_OPS


def _syncs(p: _Profile) -> list[Finding]:
    """``hidden_sync``: the host waits for the device in the middle of a step.

    Rule: an op whose result the host must read (``aten::item``,
    ``aten::_local_scalar_dense``, ``aten::nonzero``, ``aten::masked_select``, the
    ``unique`` family; see ``SYNC_OPS``), counted once at its outermost call; a
    device→host copy (``.cpu()``, ``.tolist()``: a ``Memcpy DtoH`` under
    ``aten::copy_``); or a runtime call named ``*Synchronize*``
    (``cudaStreamSynchronize``) inside an op,
    or outside any op except the last one of the step (the loop's own end-of-step
    synchronisation). Only on profiles with a device (on the CPU there is nothing
    to wait for). Threshold: any occurrence. Time at stake: the host time of the
    waiting ops per step.
    """
    if not p.has_device:
        return []
    tally = _Tally()
    read = p.forest.key_mask(
        lambda name, category: (
            name in SYNC_OPS or name in COPY_OPS or (category == "runtime" and _SYNC_RUNTIME.search(name))
        )
    )
    for tally.step, step in enumerate(p.steps):
        loose: list[_Node] = []
        for node in p.find(step, read):
            if node.name in SYNC_OPS:
                if node.parent is not None and _in_sync_op(node.parent):
                    continue
                tally.add(node.name, node.dur)
            elif node.name in COPY_OPS and not (node.parent is not None and node.parent.name in COPY_OPS):
                certain, _, direction = _copy_evidence(node)
                waits = any(n.category == "runtime" and _SYNC_RUNTIME.search(n.name) for n in node.walk())
                # A synchronise call inside the copy is counted below, by its own name.
                if certain and direction == DEVICE_TO_HOST and not waits and not _in_sync_op(node):
                    made_for = _cause(node)
                    source = made_for.name if made_for is not None else _outer_wrapper(node).name
                    tally.add(f"{source} → aten::copy_", node.dur, "a device→host copy")
            elif node.category == "runtime" and _SYNC_RUNTIME.search(node.name):
                parent = node.parent
                while parent is not None and parent.category not in ("op", "step"):
                    parent = parent.parent
                if parent is None or parent.category == "step":
                    loose.append(node)
                elif not _in_sync_op(parent):
                    tally.add(f"{parent.name} → {node.name}", node.dur)
        for node in sorted(loose, key=lambda n: n.start_ns)[:-1]:
            tally.add(node.name, node.dur)
    return [
        tally.finding(
            p,
            name,
            "hidden_sync",
            f"{name} makes the host wait for the device {tally.when(name, p.n)}",
            tuple(name.split(" → ")),
            ("a device→host copy (.cpu(), .tolist(), printing a tensor): " if name in tally.extra else "")
            + "the host stops launching work until the device has finished everything queued",
            "keep values on the device (no .item(), .cpu(), .tolist() or printing of tensors inside "
            "the loop); read them once after the loop, or every N steps",
        )
        for name in tally.calls
    ]


def _idle_and_bound(p: _Profile) -> list[Finding]:
    """``idle_device`` and ``cpu_bound``: how the step's time splits between host and device.

    Per step, the window runs from the start of ``ProfilerStep#N`` to the later of
    its end and the end of its device work. *Device busy* is the union of every
    device event inside the window; *host in ops* is the union of the ops the step
    calls directly, except the synchronising ones (their time is spent waiting).

    * ``idle_device`` fires when the device is idle for at least ``IDLE_SHARE``
      (50 %) of the mean step; it lists the ``GAPS_SHOWN`` largest gaps between two
      device executions with the ops on either side and the step they were in (each
      pair of ops once, with its largest gap). Time at stake: the idle time
      per step.
    * ``cpu_bound`` fires when the host is in ops for at least ``CPU_BOUND_SHARE``
      (50 %) of the step and longer than the device is busy: the device waits for
      launches. Time at stake: host-in-ops minus device-busy per step.

    Both need device time; without it they are skipped with a note. Both are shares
    of the step: they fire only when at least half of the steps reach the threshold
    on their own as well (``_steady``), so one slow step cannot raise them.
    """
    import numpy as np

    host_per_step = _host_in_ops(p)
    host_us = _per_step(sum(host_per_step), p.n) if p.n else None
    p.host_op_us = host_us
    if not p.has_device_time:
        return []
    step_us = p.mean_step_ns / 1000
    largest = _LargestGaps()
    f = p.forest
    dev_sorted = np.argsort(f.dstart, kind="stable")
    starts, ends = f.dstart[dev_sorted], f.dend[dev_sorted]
    names, named = _gap_names(f, dev_sorted)
    longest = int((ends - starts).max()) if len(starts) else 0
    wheres = [st.node.name if st.node.name.startswith("ProfilerStep#") else "the recording" for st in p.steps]
    try:
        # Every step at once: the device's busy time in each window, and the events in it.
        lo, hi = np.array([st.start for st in p.steps], np.int64), np.array([st.end for st in p.steps], np.int64)
        _shifts(p.n, starts, ends, lo, hi)  # the times (and one longest duration before a window) fit in int64
        busy_per_step = p.busy.lengths_in(lo, hi).tolist()
    except OverflowError:  # times the arrays cannot hold (too far apart, beyond int64): step by step
        busy_per_step = [_length(p.busy_in(st)) for st in p.steps]
        for where, st in zip(wheres, p.steps):
            # Only events starting within one longest duration before the window can overlap it.
            first, stop = np.searchsorted(starts, (st.start - longest, st.end))
            events = np.flatnonzero(ends[first:stop] > st.start) + first
            gaps = starts[events[1:]] - ends[events[:-1]]
            k = np.flatnonzero(gaps > 0)
            largest.add_all(gaps[k], named[events[k]], named[events[k + 1]], names, where)
    else:
        first, stop = np.searchsorted(starts, lo - longest), np.searchsorted(starts, hi)
        counts = np.maximum(stop - first, 0)
        events, step = _positions(first, counts), np.repeat(np.arange(p.n), counts)
        inside = ends[events] > lo[step]
        events, step = events[inside], step[inside]
        gaps = starts[events[1:]] - ends[events[:-1]]
        k = np.flatnonzero((gaps > 0) & (step[1:] == step[:-1]))  # between two events of one step
        largest.add_all(gaps[k], named[events[k]], named[events[k + 1]], names, wheres, step[k])
    busy_ns = sum(busy_per_step)
    idle_ns = [p.step_ns(st) - busy for st, busy in zip(p.steps, busy_per_step)]
    busy_us = _per_step(busy_ns, p.n)
    idle_us = max(step_us - busy_us, 0.0)
    findings = []
    words = _steady(p, idle_ns, IDLE_SHARE)
    if words:
        # The largest gap of each pair of ops only: a loop repeats the same gap every step.
        gaps = largest.shown(GAPS_SHOWN)
        shown = "; ".join(f"{g[0] / 1000:.1f} µs between {g[1]} and {g[2]} (in {g[3]})" for g in gaps)
        detail = f"device busy {busy_us:.1f} of {step_us:.1f} µs per step"
        if shown:
            detail += f"; largest gaps: {shown}"
        findings.append(
            Finding(
                kind="idle_device",
                title=f"The device is idle {words}",
                evidence=Evidence(
                    tuple(dict.fromkeys(n for g in gaps for n in g[1:3])),
                    None,
                    idle_us,
                    _share(idle_us, step_us),
                    detail,
                ),
                estimated_us=idle_us,
                suggestion=(
                    "give the device more work per launch (larger batches, fused ops, torch.compile) and keep "
                    "Python work (logging, data preparation) out of the step"
                ),
            )
        )
    bound = "neither"
    if busy_us >= CPU_BOUND_SHARE * step_us and busy_us >= (host_us or 0):
        bound = "device"
    elif host_us is not None and host_us > busy_us and _steady(p, host_per_step, CPU_BOUND_SHARE):
        bound = "cpu"
        stake = host_us - busy_us
        findings.append(
            Finding(
                kind="cpu_bound",
                title="The loop is CPU-bound: launching ops takes longer than running them",
                evidence=Evidence(
                    (),
                    sum(len(st.top_rows) for st in p.steps) / p.n,
                    host_us,
                    _share(host_us, step_us),
                    f"host in ops {host_us:.1f} µs, device busy {busy_us:.1f} µs per step",
                ),
                estimated_us=stake,
                suggestion=(
                    "launch fewer, larger ops: torch.compile the step (or use CUDA graphs on a GPU), "
                    "fuse small ops, or increase the batch size"
                ),
            )
        )
    p.device_busy_us, p.bound = busy_us, bound
    return findings


def _host_in_ops(p: _Profile) -> list[int]:
    """How long the host is in ops in each step (``_length(p.host_busy_in(st))``), every step at once.

    On arrays where the times allow (``_shifts``, and no op that ends before it starts), else step by step.
    """
    import numpy as np

    f = p.forest
    counts = np.array([len(st.top_rows) for st in p.steps], np.int64)
    top = np.concatenate([np.asarray(st.top_rows, np.int64) for st in p.steps]) if p.n else np.empty(0, np.int64)
    step = np.repeat(np.arange(p.n), counts)
    keep = ~p.sync_keys[f.key[top]]  # a synchronising op's time is spent waiting for the device
    top, step = top[keep], step[keep]
    starts, ends = f.start[top], f.end[top]
    try:
        shift = _shifts(p.n, starts, ends)
    except OverflowError:
        shift = None
    if shift is None or (ends < starts).any():
        return [_length(p.host_busy_in(st)) for st in p.steps]
    return _grouped_lengths(step, starts, ends, p.n, shift).tolist()


def _gap_names(f: _Forest, order: Any) -> tuple[list[str], Any]:
    """The device events' names in the gaps, in ``order``: the op that launched work of the event's span
    (the last such op in tree order, for a span launched twice), else the event's own name.

    Returns the keys' names and, per event, the index of its name there.
    """
    import numpy as np

    names = [w[4] for w in f.whats]
    own = f.dkey[order].astype(np.int64)
    by = f.by_owner
    if not len(by):
        return names, own
    # Each span launched, and its last launcher; then each event's span among them (a span: its start and end).
    span = _span_ids(f.dstart, f.dend)
    last = np.full(int(span.max()) + 1, -1, np.int64)
    np.maximum.at(last, span[by], np.arange(len(by)))  # the last launch of each span, in tree order
    at = last[span[order]]
    return names, np.where(at >= 0, f.key[f.owners[np.maximum(at, 0)]], own)


def _span_ids(starts: Any, ends: Any) -> Any:
    """An id for each span, the same for equal spans (``starts[i]``, ``ends[i]``), numbered by start, then end.

    Sorted by start; only the spans that share a start with another are then sorted by end
    (a device's events rarely share one).
    """
    import numpy as np

    order = np.argsort(starts, kind="stable")
    s = starts[order]
    apart = np.ones(len(s) + 1, bool)  # where a start differs from the one before
    apart[1:-1] = s[1:] != s[:-1]
    shared = np.flatnonzero(~(apart[:-1] & apart[1:]))  # the spans that share their start (runs, in place)
    if len(shared):
        order[shared] = order[shared[np.lexsort((ends[order[shared]], s[shared]))]]
    s, e = starts[order], ends[order]
    new = np.ones(len(s), bool)
    new[1:] = (s[1:] != s[:-1]) | (e[1:] != e[:-1])
    ids = np.empty(len(s), np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


RULES = (_copies, _syncs, _idle_and_bound)
"""The rules of this module, in the order ``analyze`` applies them."""
