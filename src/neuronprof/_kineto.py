"""The one module that reads torch.profiler objects: a cycle's kineto events become its event table.

Everything downstream (tables, findings, roofline, report) reads the
[`EventTable`][neuronprof.analysis.trace.EventTable] a trace file's reader also
writes, never profiler internals, so changes in torch's private API are absorbed here.

Some 600 lines, kept in one module on purpose: every call into torch.profiler's private
objects (kineto's event getters, their chunked reading, the event tree) stays behind this
one boundary, as the design's "only module that reads torch.profiler objects" asks.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from array import array
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, cast

from neuronprof import _vocabulary as vocab

if TYPE_CHECKING:
    from neuronprof.analysis.trace import EventTable

__all__ = ["Cycle", "native_dtypes", "read_cycle"]


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
        save: Takes kineto's own save of the cycle into ``cache``; set when the cycle
            ends, run (once) by the first export that needs the file
            (``_cycle_files.take_save``), so a cycle nobody exports is never written.
        cache: kineto's own save of the cycle, once taken (read-only); every export
            is a copy of it (a reflink where the file system has them), never a
            second name of it.
        cache_stamp: ``(inode, size, mtime_ns, ctime_ns)`` of the cache when it was
            saved, to notice that anything changed it before an export.
        closed_at_exit: The cycle was ended by the session's exit, so its last
            step may have been opened by ``step()`` and never run.
        events: The cycle's events as an event table, converted once from kineto's
            (``read_cycle``); kept after the profile is dropped.
        read: Returns ``events``, converting them first if need be, as the session
            converts its cycles (its event keys, its backend's ``cycle_notes``): set
            when the cycle ends, for exports that read the events (stacks).
        notes: The backend's remarks on the cycle's events, made when they were converted.
        memory: Self host/device memory per ``(name, input shapes)``, torch's own
            figures (``profile_memory=True``), taken with the events.
    """

    index: int
    profile: Any
    backend_trace: Optional[Path] = None
    save: Optional[Callable[[Cycle], None]] = None
    cache: Optional[Path] = None
    cache_stamp: Optional[tuple[int, ...]] = None
    closed_at_exit: bool = False
    events: Optional[EventTable] = None
    read: Optional[Callable[[Cycle], EventTable]] = None
    notes: tuple[str, ...] = ()
    memory: Mapping[tuple[str, Any], tuple[int, int]] = dataclasses.field(default_factory=dict)


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


# Instants, not spans (a trace writes them with "ph": "i"): torch.profiler's allocation records,
# kept apart from the spans (``EventTable.memory``), as a trace file's reader keeps them.
_INSTANTS = frozenset({"[memory]", "[OutOfMemory]"})
_INSTANT_ACTIVITY = "cpu_instant_event"


def read_cycle(cycle: Cycle, keys: Any, metadata: Mapping[str, Any]) -> EventTable:
    """Convert a cycle's kineto events into its event table, once (later calls return the same table).

    Reads kineto's own event list (``profile.kineto_results.events()``): the
    events, integer-ns times, threads, correlation ids and recorded inputs kineto
    writes into the cycle's Chrome trace, through the columns a trace file's reader
    fills, so the live read-outs and those of the export agree by construction
    (FLOP counts excepted: live they are torch's own, with ``with_flops=True``; a
    saved trace that holds none gets the roofline's formulas instead).
    Builds without kineto results fall back to ``function_events`` (µs times, no
    device links). With ``profile_memory=True``, torch's memory per op is taken too, and its
    allocation records (``[memory]`` events) are kept in the table's ``memory``, as a trace
    file's reader keeps them (``_feed_memory``).

    Args:
        cycle: A cycle whose profile is still held (or whose events were read already).
        keys: The session's event keys (shared by its cycles: the first table's), or
            None for the first cycle read.
        metadata: The header keys its export would have (the session's ``neuronprof``
            metadata); how the cycle ended is added.
    """
    if cycle.events is not None:
        return cycle.events
    from neuronprof.analysis._gc import collector_paused
    from neuronprof.analysis.trace import EventAggregator

    profile = cycle.profile
    agg = EventAggregator("<session>", keys=keys)
    with collector_paused():  # (kineto's getters make lists by the million, none of them cyclic)
        _feed(agg, profile)
    if getattr(profile, "profile_memory", False):
        cycle.memory = _memory_by_row(profile)
    own = {**metadata.get("neuronprof", {}), vocab.STOPPED_IN_LAST_STEP: cycle.closed_at_exit}
    cycle.events = agg.events_table({**metadata, "neuronprof": own})
    return cycle.events


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
    memory: list[Any] = []
    _feed_events(
        agg,
        events,
        memory=memory,
        with_flops=bool(getattr(profile, "with_flops", True)),
        record_shapes=bool(getattr(profile, "record_shapes", True)),
    )
    if memory:
        _feed_memory(agg, profile, memory)


def _feed_memory(agg: Any, profile: Any, records: list[Any]) -> None:
    """Keep torch's allocation records (``[memory]`` events) as the trace writes them, with the allocator's totals.

    kineto's events carry each record's bytes, device and thread, not the allocator's
    totals that the trace writes beside them ("Total Allocated", "Total Reserved"):
    those are read from torch's event tree (``experimental_event_tree()``, the records
    torch's own memory timeline reads), matched by start time and bytes. A live
    ``[OutOfMemory]`` record has no totals there: they are kept as -1 (the exported trace has them).
    """
    totals = _allocation_totals(profile)
    missing = 0
    for evt in records:
        name, ts, nbytes = evt.name(), int(evt.start_ns()), int(evt.nbytes())
        found = totals.get((ts, nbytes))
        if name == "[OutOfMemory]":
            allocated = reserved = -1
        elif found:
            allocated, reserved = found.popleft()
        else:
            missing += 1
            continue
        device = (_device_type_number(evt.device_type()), int(evt.device_index()))
        agg.add_memory(name, device, ts, nbytes, allocated, reserved, ("host", int(evt.start_thread_id())))
    if missing:
        agg.sums.notes.append(
            f"{missing:,} of torch's [memory] record(s) are not in its event tree, which holds the allocator's "
            "totals: left out of memory over time"
        )


def _allocation_totals(profile: Any) -> dict[tuple[int, int], deque[tuple[int, int]]]:
    """torch's allocation records in its event tree: (total allocated, total reserved) by (start ns, bytes)."""
    import torch

    allocation = torch._C._profiler._EventType.Allocation
    out: dict[tuple[int, int], deque[tuple[int, int]]] = {}
    try:
        stack = list(profile.kineto_results.experimental_event_tree())
    except (AttributeError, RuntimeError):  # a torch without the tree: no totals, said by the caller
        return out
    while stack:
        e = stack.pop()
        if e.tag == allocation:
            f = e.extra_fields
            out.setdefault((int(e.start_time_ns), int(f.alloc_size)), deque()).append(
                (int(f.total_allocated), int(f.total_reserved))
            )
        stack.extend(e.children)
    return out


def _device_type_number(device_type: Any) -> int:
    """c10's number of a kineto event's device type (``DeviceType.CPU`` is 0), as a trace's "Device Type" has it."""
    try:
        return int(device_type)
    except TypeError:
        return int(device_type.value)


# How the live reader reads an event, by its (name, activity): an op (with its recorded
# inputs), another host span, a runtime call, device work, or an instant (left out).
_READ_OP, _READ_HOST, _READ_RUNTIME, _READ_DEVICE, _READ_OUT = range(5)
_HOST_KIND = 8  # added to the above: not a runtime call nor device work (an op's thread is learnt from it)
_OP_CODE = _READ_OP + _HOST_KIND
# Events read at a time: kineto's getters run over a chunk one at a time (``map``), and a
# chunk this size stays in the CPU's cache between getters, as one event does in a loop.
_CHUNK = 1024


def _reader(first: Any, method: str) -> Callable[[Any], Any]:
    """A kineto event's getter as a function of the event: its class's own (one call an event), else a method call."""
    found = getattr(type(first), method, None)
    return found if callable(found) else operator.methodcaller(method)


def _blob() -> Callable[[Any], Any]:
    """A cheap exact key of an op's recorded inputs (its shapes, dtypes and concrete inputs, a tuple of lists).

    msgpack's bytes (``1``, ``1.0``, ``True``, nan and None all apart, where JSON would merge
    some); ``repr`` without msgspec, or for lists msgpack cannot hold.
    """
    try:
        import msgspec
    except ImportError:  # the pure-Python path
        return repr
    return msgspec.msgpack.encode


def _recorded_inputs(evt: Any, encode: Callable[[Any], bytes]) -> tuple[Optional[bytes], ...]:
    """An op's recorded inputs as its key holds them: kineto's lists as they are, as JSON; None where empty.

    Shapes are lists of ints, dtypes text; concrete inputs are read where there are
    dtypes, as kineto writes them (text, ``""`` for a tensor).
    """
    shapes = evt.shapes()
    dims = encode(shapes) if shapes else None
    dtypes = evt.dtypes()
    if not dtypes:
        return dims, None, None
    values = evt.concrete_inputs()
    return dims, encode(dtypes), encode([_concrete_text(v) for v in values]) if values else None


def _feed_events(
    agg: Any,
    events: list[Any],
    *,
    memory: Optional[list[Any]] = None,
    with_flops: bool = True,
    record_shapes: bool = True,
) -> None:
    """Put kineto's events into ``agg``, in their order, a chunk of events at a time.

    Each of kineto's getters runs over the events of a chunk that need it (``map``,
    no Python code an event): names, activities, times, threads and ids of the events
    kept; recorded inputs of ops only, and only where the profile recorded them
    (``record_shapes``: torch records none without); links of runtime calls and device
    work only; FLOP counts only where the profile was asked for them (``with_flops``:
    torch computes none without). Keys are made in the order the events first name
    them, as ``put`` one by one makes them; the events go to ``agg`` one timeline at a
    time (``put_columns``).

    A runtime call sits on the thread of the op that made it, as in the trace (kineto
    may give it another thread id; torch's own table moves it the same way): see
    ``_link_threads``. torch's allocation records (``[memory]`` events) are put in
    ``memory``, for ``_feed_memory``.

    ``events`` is emptied as it is read (each chunk's places set to None), so that each
    event is freed right after its chunk is read, while its memory is still in the cache.
    """
    import numpy as np

    from neuronprof.analysis.trace import encoder
    from neuronprof.analysis.trace._rules import _add_flops

    if not events:
        return
    first = events[0]
    get_name, get_cat = _reader(first, "name"), _activity_reader(first)
    get_start, get_dur = _reader(first, "start_ns"), _reader(first, "duration_ns")
    get_corr, get_tid = _reader(first, "correlation_id"), _reader(first, "start_thread_id")
    get_shapes, get_dtypes = _reader(first, "shapes"), _reader(first, "dtypes")
    get_concrete, get_flops = _reader(first, "concrete_inputs"), _reader(first, "flops")
    get_linked = _reader(first, "linked_correlation_id")
    get_hidden = _reader(first, "is_hidden_event") if hasattr(first, "is_hidden_event") else None
    encode, blob_of = encoder(), _blob()
    how: dict[tuple[str, str], int] = {}  # _READ_* (+ _HOST_KIND) by (name, activity)
    instants = outs = False  # any [memory] record yet; any event left out by its (name, activity) yet
    index: dict[tuple[Any, ...], int] = {}  # key index by (name, activity, inputs' blob); < 0: skipped
    skipped: dict[str, int] = {}  # skipped category -> j (its events' key index is -1 - j)
    inputs: dict[Any, tuple[Optional[bytes], ...]] = {None: (None, None, None)}  # by blob: dims, types, concrete
    codes, kept_at = array("b"), array("q")  # every event's code; each kept event's position
    kid, start, dur, corr = array("q"), array("q"), array("q"), array("q")
    where: list[Any] = []  # each kept event's thread id (its lane, once linked)
    flops: list[tuple[int, Any]] = []  # (kept row, FLOPs) where not 0
    link_rows, links = array("q"), array("q")
    left_out_threads: dict[int, tuple[int, int]] = {}  # (correlation id, thread) of left-out host events
    nothing = [None] * _CHUNK
    for s in range(0, len(events), _CHUNK):
        # The chunk's events leave the list: each is freed once read, while its memory is at hand.
        part, events[s : s + _CHUNK] = events[s : s + _CHUNK], nothing[: len(events) - s]
        names, cats = list(map(get_name, part)), list(map(get_cat, part))
        reads: list[Any] = list(map(how.get, zip(names, cats)))
        if None in reads:
            for pair in dict.fromkeys(zip(names, cats)):
                if pair not in how:
                    how[pair] = _how(*pair)
                    instants |= pair[0] in _INSTANTS
                    outs |= how[pair] & 7 == _READ_OUT
            reads = list(map(how.__getitem__, zip(names, cats)))
        codes.extend(reads)
        if instants and memory is not None:
            memory.extend(evt for evt, name in zip(part, names) if name in _INSTANTS)
        at: Any = range(s, s + len(part))
        out = [r & 7 == _READ_OUT for r in reads] if outs else None
        if get_hidden is not None:
            hid = list(map(get_hidden, part))
            if any(hid):
                out = hid if out is None else list(map(operator.or_, out, hid))
        if out is not None and any(out):
            for j, o in enumerate(out):
                if o and reads[j] & _HOST_KIND:  # left out, yet it names its op's thread
                    left_out_threads[s + j] = (int(get_corr(part[j])), int(get_tid(part[j])))
            keep = [j for j, o in enumerate(out) if not o]
            part, names, cats = [part[j] for j in keep], [names[j] for j in keep], [cats[j] for j in keep]
            reads, at = [reads[j] for j in keep], [s + j for j in keep]
            if not part:
                continue
        kept_at.extend(at)
        row0 = len(start)
        start.extend(map(get_start, part))
        dur.extend(map(get_dur, part))
        corr.extend(map(get_corr, part))
        where.extend(map(get_tid, part))
        all_ops = reads.count(_OP_CODE) == len(reads)
        if not all_ops and (_READ_RUNTIME in reads or _READ_DEVICE in reads):
            linked = [j for j, r in enumerate(reads) if r in (_READ_RUNTIME, _READ_DEVICE)]
            link_rows.extend(row0 + j for j in linked)
            links.extend(map(get_linked, [part[j] for j in linked]))
            for j in linked:
                if reads[j] == _READ_DEVICE:
                    evt = part[j]
                    where[row0 + j] = (f"device {evt.device_index()}", int(evt.device_resource_id()))
        # Recorded inputs of ops (shapes, dtypes, concrete inputs), told apart by one cheap
        # exact key of the three lists; each key's JSON columns are made once (``_recorded_inputs``).
        op_rows = range(len(part)) if all_ops else [j for j, r in enumerate(reads) if r == _OP_CODE]
        ops = part if all_ops else [part[j] for j in op_rows]
        blobs: list[Any]
        if record_shapes:
            try:
                blobs = list(map(blob_of, zip(map(get_shapes, ops), map(get_dtypes, ops), map(get_concrete, ops))))
            except (TypeError, OverflowError, ValueError):  # lists msgpack cannot hold: told by their repr
                blobs = list(map(repr, zip(map(get_shapes, ops), map(get_dtypes, ops), map(get_concrete, ops))))
            if not all(map(inputs.__contains__, blobs)):
                for blob, j in dict(zip(reversed(blobs), range(len(blobs) - 1, -1, -1))).items():
                    if blob not in inputs:
                        inputs[blob] = _recorded_inputs(ops[j], encode)
        else:
            blobs = [None] * len(ops)
        if with_flops:
            flops.extend((row0 + op_rows[j], f) for j, f in enumerate(map(get_flops, ops)) if f)
        if not all_ops:
            full: list[Any] = [None] * len(part)
            for j, blob in zip(op_rows, blobs):
                full[j] = blob
            blobs = full
        kids: list[Any] = list(map(index.get, zip(names, cats, blobs)))
        if None in kids:
            for j, raw in enumerate(zip(names, cats, blobs)):
                if kids[j] is None:
                    found = index.get(raw)
                    if found is None:
                        found = index[raw] = _key_index(agg, raw[0], raw[1], inputs[raw[2]], skipped)
                    kids[j] = found
        kid.extend(kids)
    if not len(start):
        return
    kids_np = np.frombuffer(kid, np.int64)
    corr_np = np.frombuffer(corr, np.int64)
    put = kids_np >= 0
    if skipped:
        counts = np.bincount(-1 - kids_np[~put], minlength=len(skipped))
        for cat, j in skipped.items():
            agg.skip(cat, int(counts[j]))
    for row, f in flops:
        if kid[row] >= 0:
            _add_flops(agg.sums.flops, kid[row], int(f))
    # As kineto writes them: runtime calls and device work carry a "correlation" and their
    # op's id as "External id"; an op's "External id" is its own correlation id.
    if len(link_rows):
        rows = np.frombuffer(link_rows, np.int64)
        ids = np.frombuffer(links, np.int64)
        table_corr = np.full(len(start), -1, np.int64)
        table_corr[rows] = corr_np[rows]
        table_ext = corr_np.copy()
        table_ext[rows] = np.where(ids == 0, -1, ids)
        _link_threads(codes, kept_at, corr, where, link_rows, links, left_out_threads)
        kinds = np.frombuffer(codes, np.int8)[np.frombuffer(kept_at, np.int64)] & 7
        runtime = put & (kinds == _READ_RUNTIME) & (corr_np >= 0)
        agg.runtime_corr.update(corr_np[runtime].tolist())
    else:
        table_corr = np.full(len(start), -1, np.int64)
        table_ext = corr_np
    columns = [np.frombuffer(start, np.int64), np.frombuffer(dur, np.int64), kids_np, table_corr, table_ext]
    if not put.all():
        rows = np.flatnonzero(put)
        columns = [c[rows] for c in columns]
        where = [where[i] for i in rows.tolist()]
        if not where:
            return
    lanes = dict.fromkeys(where)
    groups: list[tuple[Any, Any]]
    if len(lanes) == 1:
        groups = [(next(iter(lanes)), slice(None))]
    else:
        number = {lane: j for j, lane in enumerate(lanes)}
        lane_of = np.fromiter(map(number.__getitem__, where), np.int64, len(where))
        order = np.argsort(lane_of, kind="stable")
        ends = np.cumsum(np.bincount(lane_of, minlength=len(number)))
        groups = [(lane, order[(ends[j - 1] if j else 0) : ends[j]]) for lane, j in number.items()]
    for lane, sel in groups:
        thread = lane if isinstance(lane, tuple) else ("host", lane)
        agg.put_columns(thread, *(c[sel] for c in columns))


def _how(name: str, cat: str) -> int:
    """How the live reader reads events of a (name, activity): ``_READ_*``, plus ``_HOST_KIND`` for host kinds."""
    kind = vocab.event_kind(name, cat)
    host = 0 if kind in (vocab.K_RUNTIME, vocab.K_DEVICE) else _HOST_KIND
    if name in _INSTANTS or cat == _INSTANT_ACTIVITY:
        return _READ_OUT + host
    if kind == vocab.K_DEVICE:
        return _READ_DEVICE
    if kind == vocab.K_RUNTIME:
        return _READ_RUNTIME
    return (_READ_OP if kind == vocab.K_OP else _READ_HOST) + host


def _key_index(agg: Any, name: str, cat: str, inputs: tuple[Optional[bytes], ...], skipped: dict[str, int]) -> int:
    """The key index of an event (its recorded inputs as ``_recorded_inputs`` gives them); < 0: skipped."""
    kid: int = agg.key_of(name, cat, *inputs)
    if kid < 0:
        if cat not in skipped:
            skipped[cat] = len(skipped)
            agg.skip(cat, 0)  # the category counted in the order its first event comes
        kid = -1 - skipped[cat]
    return kid


def _link_threads(
    codes: Any,
    kept_at: Any,
    corr: Any,
    where: list[Any],
    link_rows: Any,
    links: Any,
    left_out_threads: dict[int, tuple[int, int]],
) -> None:
    """Put each kept runtime call on its op's thread, in ``where``.

    A call's op is the one listed before it with the call's linked correlation id (the
    last such); should a call name an op listed after it, every call takes the thread of
    the last op of its id, as one pass with every op's thread known first would give.
    Events of host kinds that were left out (instants, hidden events) name their thread
    too (``left_out_threads``, by position).
    """
    kept = dict(zip(kept_at, range(len(kept_at))))
    link_of = dict(zip(link_rows, links))
    threads: dict[int, int] = {}
    guessed: set[int] = set()
    calls: list[tuple[int, int, int]] = []  # (kept row, linked id, own thread)
    for i, code in enumerate(codes):
        j = kept.get(i)
        if code & _HOST_KIND:
            if j is None:
                op_corr, op_thread = left_out_threads[i]
                threads[op_corr] = op_thread
            else:
                threads[corr[j]] = where[j]
            continue
        if j is None or code != _READ_RUNTIME:  # left out, or device work (on its device's lane)
            continue
        link, own = link_of[j], where[j]
        op = threads.get(link)
        if op is None:
            op = own
            guessed.add(link)
        calls.append((j, link, own))
        where[j] = op
    if guessed and not guessed.isdisjoint(threads):  # a call came before its op: every op's thread, known first
        for j, link, own in calls:
            where[j] = threads.get(link, own)


def _activity_reader(first: Any) -> Callable[[Any], str]:
    """``activity_of``, with the question of which torch this is settled once for a list of events."""
    get = getattr(type(first), "activity_type", None)
    if get is not None and isinstance(first.activity_type(), str):
        return cast("Callable[[Any], str]", get)  # the method itself: one call an event
    if get is not None:
        return lambda evt: str(evt.activity_type())
    return activity_of


def _memory_by_row(profile: Any) -> dict[tuple[str, Any], tuple[int, int]]:
    """Self host/device memory per (name, input shapes): torch's own figures (``key_averages()``).

    A trace has none per op. Shapes are ``None`` when they were not recorded.
    """
    out: dict[tuple[str, Any], tuple[int, int]] = {}
    for evt in profile.key_averages(group_by_input_shape=bool(getattr(profile, "record_shapes", False))):
        cpu_mem = int(getattr(evt, "self_cpu_memory_usage", 0) or 0)
        dev_mem = getattr(evt, "self_device_memory_usage", None)
        if dev_mem is None:
            dev_mem = getattr(evt, "self_cuda_memory_usage", 0)
        out[(str(evt.key), _shapes(evt))] = (cpu_mem, int(dev_mem or 0))
    return out


def _shapes(evt: Any) -> Optional[tuple[tuple[int, ...], ...]]:
    """torch's ``input_shapes`` of a ``key_averages()`` row, as the trace reader's rows have them."""
    from neuronprof.analysis.trace._rules import _flat_shapes, _freeze_any

    raw = getattr(evt, "input_shapes", None)
    return _flat_shapes(_freeze_any(list(raw))) if raw else None


def _concrete_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_concrete_text(v) for v in value) + "]"
    return str(value)


# -- what the findings need to know of this machine ------------------------------------------


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
