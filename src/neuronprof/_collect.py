"""The one module that reads torch.profiler objects and turns them into the model.

Everything downstream (tables, renderers, exports, comparisons) works on
[`Table`][neuronprof.Table] and files, never on profiler internals, so changes
in torch's private API are absorbed here.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof._cycle_files import save_native_trace, write_chrome_trace, write_stacks
from neuronprof._vocabulary import is_own_frame
from neuronprof.model import OpRow, Table, merge_rows

if TYPE_CHECKING:
    from neuronprof.analysis.insights import HostCategory, Timeline
    from neuronprof.analysis.trace import Trace

__all__ = [
    "Cycle",
    "aggregate_cycle",
    "aggregate_cycles",
    "CycleStats",
    "build_table",
    "build_timeline",
    "build_trace",
    "fold_stats",
    "is_own_frame",
    "save_native_trace",
    "summarize_cycle",
    "write_chrome_trace",
    "write_stacks",
]


@dataclasses.dataclass
class CycleStats:
    """What a cycle contributes to the table, kept after its events are dropped.

    Attributes:
        rows: Per-operator rows of the cycle (unsorted).
        steps: Recorded steps (the vocabulary's rule: ``ProfilerStep#N`` spans,
            less the empty one torch opens just before it stops).
        top_level_calls: Ops directly under the recorded steps.
        ops: Calls of every row other than ``ProfilerStep*``.
        communication_us: Time in async collective spans (µs); None when there are none.
        notes: What the aggregation said of the cycle's events (spans cut at a step, ...).
        step_us: Wall time of the recorded steps (µs, summed); None without steps.
        collective_wait_us: Time in them during which a collective was in flight (µs, summed);
            None without steps.
    """

    rows: list[OpRow]
    steps: int
    top_level_calls: int
    ops: int
    communication_us: Optional[float] = None
    notes: tuple[str, ...] = ()
    step_us: Optional[float] = None
    collective_wait_us: Optional[float] = None


@dataclasses.dataclass
class Cycle:
    """One finished profiling cycle (``wait``/``warmup``/``active``) of a session.

    Attributes:
        index: Position of the cycle in the session, from 0.
        profile: The ``torch.autograd.profiler.profile`` holding the cycle's events;
            None once the session dropped them (``keep_cycles``).
            torch.profiler replaces it at the next cycle, so each one is kept here.
        backend_trace: A Chrome trace the backend saved itself (TorchNeuron's
            ``NeuronProfiler`` does), used when kineto's own save was consumed.
        cache: kineto's own save of the cycle, taken once when the cycle ended
            (read-only); every export is a copy of it (a reflink where the file
            system has them), never a second name of it.
        cache_stamp: ``(inode, size, mtime_ns, ctime_ns)`` of the cache when it was
            saved, to notice that anything changed it before an export.
        closed_at_exit: The cycle was ended by the session's exit, so its last
            step may have been opened by ``step()`` and never run.
        stats: The cycle's table contribution, computed once (needed before the
            events are dropped).
    """

    index: int
    profile: Any
    backend_trace: Optional[Path] = None
    cache: Optional[Path] = None
    cache_stamp: Optional[tuple[int, ...]] = None
    closed_at_exit: bool = False
    stats: Optional[CycleStats] = None



def activity_of(evt: Any) -> str:
    """A kineto event's activity type (``"cpu_op"``, ``"kernel"``...); before torch 2.12 (``gpu_check``) inferred."""
    get = getattr(evt, "activity_type", None)
    if get is not None:
        return str(get())
    name = evt.name()
    if str(evt.device_type()) != "DeviceType.CPU":
        return {"Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}.get(name[:6], "kernel")
    if getattr(evt, "is_user_annotation", lambda: False)():
        return "user_annotation"
    return "cuda_runtime" if name.startswith(("cu", "hip")) and not name.startswith("cudnn") else "cpu_op"

def _is_device_event(evt: Any) -> bool:
    device_type = getattr(evt, "device_type", None)
    if callable(device_type):
        device_type = device_type()
    return device_type is not None and str(device_type) not in ("DeviceType.CPU", "CPU")


def _kineto_events(profile: Any) -> Optional[list[Any]]:
    """kineto's own event list of a profile (what its Chrome trace holds); None on builds without it."""
    results = getattr(profile, "kineto_results", None)
    events = getattr(results, "events", None)
    return None if events is None else list(events())


# Instants, not spans (a trace writes them with "ph": "i"): torch.profiler's allocation records.
_INSTANTS = frozenset({"[memory]", "[OutOfMemory]"})
_INSTANT_ACTIVITY = "cpu_instant_event"


def aggregate_cycle(profile: Any, *, stopped_in_last_step: bool = True) -> Trace:
    """Sum a cycle's events with the offline reader's aggregator: the table ``neuronprof summarize`` makes.

    Reads kineto's own event list (``profile.kineto_results.events()``): the
    events, integer-ns times, threads, correlation ids and recorded inputs kineto
    writes into the cycle's Chrome trace, so the live table and the offline table
    of the export agree by construction. Builds without kineto results fall back
    to ``function_events`` (µs times, no device links).

    Args:
        profile: The cycle's ``torch.autograd.profiler.profile``.
        stopped_in_last_step: The profiler stopped while the last step was open
            (the session's exit ended the cycle).
    """
    return aggregate_cycles([profile], stopped_in_last_step=stopped_in_last_step)


def aggregate_cycles(profiles: list[Any], *, stopped_in_last_step: bool = True, source: str = "<session>") -> Trace:
    """Sum several cycles' events (in order, disjoint in time) as one trace: ``aggregate_cycle`` of them all.

    Args:
        profiles: The cycles' ``torch.autograd.profiler.profile`` objects, oldest first.
        stopped_in_last_step: The profiler stopped while the last cycle's last step was open
            (only the last cycle can be ended by the session's exit).
        source: What the events come from, as the trace's ``source``.
    """
    from neuronprof.analysis.trace import EventAggregator

    agg = EventAggregator(source, stopped_in_last_step=stopped_in_last_step)
    for profile in profiles:
        _feed(agg, profile)
    return agg.trace()


def _text_list(values: Any) -> Optional[list[Any]]:
    if not values:
        return None
    return [list(v) if isinstance(v, (list, tuple)) else v for v in values]


def _feed(agg: Any, profile: Any) -> None:
    """Hand one cycle's events to an ``EventAggregator`` as its trace would hold them."""
    events = _kineto_events(profile)
    if events is None:
        for evt in profile.function_events:
            on_device = _is_device_event(evt)
            cat = "kernel" if on_device else "cpu_op"
            where = ("device", evt.device_index) if on_device else ("host", evt.thread)
            start = round(evt.time_range.start * 1000)
            agg.add(evt.name, cat, start, round(evt.time_range.end * 1000) - start, where)
        return
    # A runtime call sits on the thread of the op that made it, as in the trace (kineto may
    # give it another thread id; torch's own table moves it the same way).
    op_thread = {
        int(evt.correlation_id()): int(evt.start_thread_id())
        for evt in events
        if vocab.event_kind(evt.name(), activity_of(evt)) not in (vocab.K_RUNTIME, vocab.K_DEVICE)
    }
    for evt in events:
        name = evt.name()
        cat = activity_of(evt)
        if name in _INSTANTS or cat == _INSTANT_ACTIVITY or getattr(evt, "is_hidden_event", lambda: False)():
            continue
        kind = vocab.event_kind(name, cat)
        linked_kind = kind in (vocab.K_RUNTIME, vocab.K_DEVICE)
        if kind == vocab.K_DEVICE:
            thread: tuple[Any, Any] = (f"device {evt.device_index()}", int(evt.device_resource_id()))
        elif kind == vocab.K_RUNTIME:
            tid = int(evt.start_thread_id())
            thread = ("host", op_thread.get(int(evt.linked_correlation_id()), tid))
        else:
            thread = ("host", int(evt.start_thread_id()))
        corr, linked = int(evt.correlation_id()), int(evt.linked_correlation_id())
        is_op = kind == vocab.K_OP
        dtypes = evt.dtypes() if is_op else None
        concrete = evt.concrete_inputs() if is_op and dtypes else None
        agg.add(
            name,
            cat,
            int(evt.start_ns()),
            int(evt.duration_ns()),
            thread,
            input_dims=_text_list(evt.shapes()) if is_op else None,
            input_types=[str(t) for t in dtypes] if dtypes else None,
            # As kineto writes them: runtime calls and device work carry a "correlation" and
            # their op's id as "External id"; an op's "External id" is its own correlation id.
            correlation=corr if linked_kind else -1,
            external_id=(linked or -1) if linked_kind else corr,
            flops=int(evt.flops() or 0) or None,
            # As kineto writes "Concrete Inputs": text, "" for a tensor or None.
            concrete_inputs=[_concrete_text(v) for v in concrete] if concrete else None,
        )


def _memory_by_row(profile: Any, *, record_shapes: bool) -> dict[tuple[str, Any], tuple[int, int]]:
    """Self host/device memory per row: torch's own figures (``key_averages()``); a trace has none per op."""
    out: dict[tuple[str, Any], tuple[int, int]] = {}
    for evt in profile.key_averages(group_by_input_shape=record_shapes):
        cpu_mem = int(getattr(evt, "self_cpu_memory_usage", 0) or 0)
        dev_mem = getattr(evt, "self_device_memory_usage", None)
        if dev_mem is None:
            dev_mem = getattr(evt, "self_cuda_memory_usage", 0)
        shapes = _shapes(evt) if record_shapes else None
        out[(str(evt.key), shapes)] = (cpu_mem, int(dev_mem or 0))
    return out


def _shapes(evt: Any) -> Optional[tuple[tuple[int, ...], ...]]:
    raw = getattr(evt, "input_shapes", None)
    if not raw:
        return None
    out = []
    for shape in raw:
        # Tensor lists arrive nested; anything that is not a flat int list counts as no tensor.
        if isinstance(shape, (list, tuple)) and all(isinstance(d, int) for d in shape):
            out.append(tuple(shape))
        else:
            out.append(())
    return tuple(out)


def summarize_cycle(cycle: Cycle, *, has_device: bool, record_shapes: bool) -> CycleStats:
    """Compute (once) what ``cycle`` contributes to the table.

    The rows, steps and top-level calls are those of
    ``aggregate_cycle``: what ``neuronprof
    summarize`` reads from the cycle's export. Device columns are ``None`` when
    the session has no device, and 0 (not ``None``) on rows without device time
    when it has one. Memory columns (``profile_memory=True``) are torch's own.
    """
    if cycle.stats is not None:
        return cycle.stats
    profile = cycle.profile
    trace = aggregate_cycle(profile, stopped_in_last_step=cycle.closed_at_exit)
    rows = trace.rows("shape" if record_shapes else "name")
    memory = _memory_by_row(profile, record_shapes=record_shapes) if getattr(profile, "profile_memory", False) else {}
    out = []
    for r in rows:
        cpu_mem, dev_mem = (0, 0) if r.on_device else memory.get((r.name, r.input_shapes), (0, 0))
        out.append(
            dataclasses.replace(
                r,
                self_device_us=(r.self_device_us or 0.0) if has_device else None,
                device_total_us=(r.device_total_us or 0.0) if has_device else None,
                input_dtypes=None,
                self_cpu_memory_bytes=cpu_mem or None,
                self_device_memory_bytes=dev_mem if dev_mem and has_device else None,
            )
        )
    ops = sum(r.calls for r in rows if r.name != vocab.STEP_ROW)
    cycle.stats = CycleStats(
        rows=out,
        steps=trace.steps,
        top_level_calls=trace.top_level_calls or 0,
        ops=ops,
        communication_us=trace.communication_us,
        notes=trace.notes,
        step_us=sum(x.wall_us for x in trace.samples) if trace.samples else None,
        collective_wait_us=sum(x.collective_wait_us for x in trace.samples) if trace.samples else None,
    )
    return cycle.stats


def fold_stats(a: CycleStats, b: CycleStats) -> CycleStats:
    """Return the statistics of two cycles as one (what a dropped cycle leaves behind)."""
    return CycleStats(
        rows=merge_rows([a.rows, b.rows]),
        steps=a.steps + b.steps,
        top_level_calls=a.top_level_calls + b.top_level_calls,
        ops=a.ops + b.ops,
        communication_us=_add_opt(a.communication_us, b.communication_us),
        notes=tuple(dict.fromkeys((*a.notes, *b.notes))),
        step_us=_add_opt(a.step_us, b.step_us),
        collective_wait_us=_add_opt(a.collective_wait_us, b.collective_wait_us),
    )


def _add_opt(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None and b is None else (a or 0.0) + (b or 0.0)


def build_table(
    stats: list[CycleStats],
    *,
    backend: str,
    device_label: Optional[str],
    rank: Optional[int] = None,
    notes: tuple[str, ...] = (),
) -> Table:
    """Sum the statistics of every recorded cycle into one unsorted [`Table`][neuronprof.Table]."""
    steps = sum(s.steps for s in stats)
    top = sum(s.top_level_calls for s in stats)
    comm = [s.communication_us for s in stats if s.communication_us is not None]
    step_us = [s.step_us for s in stats if s.step_us is not None]
    waited = [s.collective_wait_us for s in stats if s.collective_wait_us is not None]
    return Table(
        rows=tuple(merge_rows(s.rows for s in stats)),
        backend=backend,
        device_label=device_label,
        sort_by="none",
        steps=steps,
        top_level_calls=top if steps else None,
        notes=tuple(dict.fromkeys((*notes, *(n for s in stats for n in s.notes)))),
        rank=rank,
        communication_us=float(sum(comm)) if comm else None,
        step_us=float(sum(step_us)) if step_us else None,
        collective_wait_us=float(sum(waited)) if waited else None,
    )


# -- the trace the roofline reads (neuronprof.analysis.roofline) ---------------------------


def _concrete_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_concrete_text(v) for v in value) + "]"
    return str(value)


def build_trace(cycles: list[Cycle], *, has_device: bool, device_label: Optional[str]) -> Trace:
    """Sum the kept cycles' events into an offline [`Trace`][neuronprof.analysis.Trace], in memory.

    What ``load_trace`` reads from exports of them, without writing one: the
    table's own aggregation (``aggregate_cycles``), with the recorded inputs
    (``Input Dims``, ``Input type``, ``Concrete Inputs``) and FLOPs the roofline
    reads. Device columns are None when the session has no device time.
    """
    kept = [c for c in cycles if c.profile is not None]
    last = cycles[-1] if cycles else None
    stopped = last is not None and last.profile is not None and last.closed_at_exit
    trace = aggregate_cycles([c.profile for c in kept], stopped_in_last_step=stopped, source="")
    notes = list(trace.notes)
    if len(kept) < len(cycles):
        notes.append("cycles beyond keep_cycles were dropped; this covers the cycles still kept")
    if not has_device:
        ops = tuple(dataclasses.replace(o, self_device_us=None, device_total_us=None) for o in trace.ops)
        trace = dataclasses.replace(trace, ops=ops, device_label=None)
    return dataclasses.replace(trace, files=(), notes=tuple(dict.fromkeys(notes)))


# -- the timeline the findings engine reads (neuronprof.analysis.insights) -------------------

_DEVICE_ACTIVITIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_HOST_CATEGORY: dict[int, HostCategory] = {
    vocab.K_STEP: "step",
    vocab.K_OP: "op",
    vocab.K_PY: "python",
    vocab.K_RUNTIME: "runtime",
}


@functools.cache  # a property of the machine: asked once per process
def native_dtypes() -> tuple[str, ...]:
    """The low-precision dtypes this machine's CPU computes natively, as torch's oneDNN reports them.

    ``torch.bfloat16`` needs AVX512-BF16 or AMX (x86) or the BF16 extension (Arm);
    ``torch.float16`` needs AVX512-FP16 or AMX-FP16. Without them, CPU kernels in
    those dtypes convert through float32. ``()`` when torch cannot tell.
    """
    import torch

    checks = (
        ("torch.bfloat16", "_is_mkldnn_bf16_supported"),
        ("torch.float16", "_is_mkldnn_fp16_supported"),
    )
    out = []
    for dtype, name in checks:
        try:
            if bool(getattr(torch.ops.mkldnn, name)()):
                out.append(dtype)
        except (AttributeError, RuntimeError):  # an older torch or a build without oneDNN: not known
            continue
    return tuple(out)


def build_timeline(
    cycles: list[Cycle],
    *,
    backend: str,
    device_label: Optional[str],
    record_shapes: Optional[bool] = None,
    native_dtypes: Optional[tuple[str, ...]] = None,
) -> Timeline:
    """Turn the recorded cycles' events into the findings engine's ``Timeline``.

    Reads kineto's own event list (``profile.kineto_results.events()``): integer
    nanosecond times, threads, correlation ids and recorded input shapes and types,
    without writing a trace file. Builds without kineto results fall back to
    ``function_events`` (microsecond times, no device links).
    """
    from neuronprof.analysis.insights import DeviceEvent, HostEvent, Timeline

    host: list[HostEvent] = []
    device: list[DeviceEvent] = []
    notes: list[str] = []
    for index, cycle in enumerate(cycles):
        if cycle.profile is None:
            notes.append("cycles beyond keep_cycles were dropped; the findings cover the cycles still kept")
            continue
        results = getattr(cycle.profile, "kineto_results", None)
        events = results.events() if results is not None and hasattr(results, "events") else None
        if events is None:
            notes.append("this torch build gives no kineto events; device work is not linked to ops")
            for evt in cycle.profile.function_events:
                start = round(evt.time_range.start * 1000)
                end = round(evt.time_range.end * 1000)
                if _is_device_event(evt):
                    device.append(DeviceEvent(evt.name, start, end))
                    continue
                kind: HostCategory = "step" if evt.name.startswith(vocab.STEP_PREFIX) else "op"
                host.append(HostEvent(evt.name, start, end, thread=f"{index}:{evt.thread}", category=kind))
            continue
        for evt in events:
            name = evt.name()
            activity = activity_of(evt)
            start = int(evt.start_ns())
            end = start + int(evt.duration_ns())
            if str(evt.device_type()) not in ("DeviceType.CPU", "CPU") and activity in _DEVICE_ACTIVITIES:
                device.append(
                    DeviceEvent(
                        name,
                        start,
                        end,
                        _DEVICE_ACTIVITIES[activity],  # type: ignore[arg-type]
                        ext_id=int(evt.linked_correlation_id()) or None,
                        correlation=int(evt.correlation_id()) or None,
                    )
                )
                continue
            # The vocabulary's kinds, as the table reads them.
            event_kind = vocab.event_kind(name, activity)
            category: HostCategory = _HOST_CATEGORY.get(event_kind, "other")
            if event_kind == vocab.K_OTHER and getattr(evt, "is_python_function", lambda: False)():
                category = "python"
            elif event_kind == vocab.K_OTHER and activity == "user_annotation":
                category = "annotation"
            shapes = evt.shapes() if category == "op" else None
            dtypes = evt.dtypes() if category == "op" else None
            host.append(
                HostEvent(
                    name,
                    start,
                    end,
                    thread=f"{index}:{evt.start_thread_id()}",
                    category=category,
                    ext_id=(int(evt.linked_correlation_id()) if category == "runtime" else int(evt.correlation_id()))
                    or None,
                    correlation=int(evt.correlation_id()) or None if category == "runtime" else None,
                    input_shapes=tuple(
                        tuple(s) if isinstance(s, list) and all(isinstance(d, int) for d in s) else () for s in shapes
                    )
                    if shapes
                    else None,
                    input_dtypes=tuple(str(t) for t in dtypes) if dtypes else None,
                )
            )
    return Timeline(
        tuple(host),
        tuple(device),
        backend,
        device_label,
        "session",
        tuple(dict.fromkeys(notes)),
        record_shapes=record_shapes,
        native_dtypes=native_dtypes,
    )
