"""What a session recorded, and what is read from it: table, findings, report, roofline.

A [`Session`][neuronprof.Session] runs the profiler; when its block has ended it
hands a ``Recording`` (a read-only view of its state, made for each read-out) to
the functions here. What they read of the events is ``s.recording``, built once and
never changed, so calling one twice gives equal results. Exports are in
``_recording_export``.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from neuronprof import _kineto
from neuronprof import _vocabulary as vocab
from neuronprof._config import PathLike, SessionConfig
from neuronprof._io import atomic_write, ensure_writable_dir, into_folder, text_writer, unique_path
from neuronprof.errors import SessionStateError
from neuronprof.export import default_trace_name
from neuronprof.model import RankTable, SortKey, Table

if TYPE_CHECKING:
    from neuronprof.analysis import DevicePeak, Roofline, Trace
    from neuronprof.analysis.insights import Insights, Timeline
    from neuronprof.analysis.trace import EventTable
    from neuronprof.typing import DevicePreset

__all__ = [
    "Recording",
    "data_notes",
    "gather_rank_table",
    "insights",
    "local_table",
    "record_trace",
    "report",
    "require_recorded",
    "roofline",
    "sort_and_cut",
    "target_path",
]


@dataclasses.dataclass(frozen=True, eq=False)
class Recording:
    """What a session recorded: everything ``table()``, ``export()``, ``roofline()``, ``insights()`` read.

    A read-only view of the session's state, made for each read-out (compared and
    hashed by identity): the events are read through ``read`` (``s.recording``, built
    once); the kept cycles hold torch's profiles and trace caches for the exports.

    Attributes:
        config: The session's options.
        backend: The backend's name (``"neuron"``, ``"cpu"``...).
        device_label: Label of the device columns, or None without a device.
        device_name: The device's model as the backend names it (``"NVIDIA H200"``), or
            None when it names none.
        core: The captured cores.
        cycles: The kept cycles (``keep_cycles``), oldest first: their profiles and trace
            caches, for exports and ``s.profiler``.
        cycle_count: How many cycles completed, kept or dropped.
        read: Returns what was recorded, read once (``s.recording``): every cycle's
            sums (dropped ones too) and the kept cycles' event tables; called only by the
            read-outs that need it (an export does not).
        notes: The session's own notes (modes, short loops, interrupts...).
        interrupted: The exception type that interrupted the block, if one did.
        steps_taken: How many steps ended.
        rank: The ``torch.distributed`` rank, when the session ran under it.
        started: When the session started (seconds since the epoch).
        output_dir: Folder for files written by default.
        metadata: The trace header keys neuronprof writes (``{"neuronprof": {...}, ...}``).
    """

    config: SessionConfig
    backend: str
    device_label: Optional[str]
    core: Optional[str]
    cycles: tuple[_kineto.Cycle, ...]
    cycle_count: int
    read: Callable[[], Trace]
    notes: tuple[str, ...]
    interrupted: Optional[str]
    steps_taken: int
    rank: Optional[int]
    started: float
    output_dir: Path
    metadata: dict[str, Any]
    device_name: Optional[str] = None

    @property
    def trace(self) -> Trace:
        """What was recorded (``s.recording``), read on first use."""
        return self.read()


def require_recorded(rec: Recording, what: str) -> None:
    """Raise ``SessionStateError`` when no cycle was kept, saying why (an interrupt, or too short a loop)."""
    if rec.cycles:
        return
    if rec.interrupted is not None:
        raise SessionStateError(
            f"nothing was recorded, so {what}: the session was interrupted by {rec.interrupted} during "
            f"step {rec.steps_taken}, before a profiling cycle completed (see s.notes)"
        )
    raise SessionStateError(
        f"nothing was recorded, so {what}: the loop ended before the schedule's active steps (see s.notes)"
    )


def record_trace(
    tables: Sequence[EventTable],
    *,
    earlier: Optional[Any],
    memory: Mapping[tuple[str, Any], tuple[int, int]],
    backend: str,
    device_label: Optional[str],
    has_device: bool,
    device_name: Optional[str],
    notes: Sequence[str] = (),
) -> Trace:
    """The kept cycles' event tables (oldest first) summed, with the dropped cycles' sums (``earlier``).

    Device columns are None unless device time reaches torch.profiler (``has_device``). ``memory``,
    self host/device bytes per ``(name, input shapes)`` (``profile_memory=True``), is torch's, put
    on the first op of each key. ``notes``, the backend's ``cycle_notes``, come first.
    """
    from neuronprof.analysis.trace import Trace, trace_of

    trace = trace_of(tables, earlier=earlier) if tables else Trace(ops=())
    ops = []
    given: set[tuple[str, Any]] = set()
    for op in trace.ops:
        changes: dict[str, Any] = {}
        if not has_device:
            changes.update(self_device_us=None, device_total_us=None)
        elif not op.on_device and op.self_device_us is None:
            changes.update(self_device_us=0.0, device_total_us=0.0)
        key = (op.name, op.input_shapes)
        if memory and not op.on_device and key not in given and key in memory:
            given.add(key)
            cpu_mem, dev_mem = memory[key]
            changes.update(
                self_cpu_memory_bytes=cpu_mem or None,
                self_device_memory_bytes=dev_mem if dev_mem and has_device else None,
            )
        ops.append(dataclasses.replace(op, **changes) if changes else op)
    return dataclasses.replace(
        trace,
        ops=tuple(ops),
        files=(),
        backend=backend,
        device_label=device_label if has_device else None,
        device_name=device_name or trace.device_name,
        notes=tuple(dict.fromkeys((*notes, *trace.notes))),
    )


def data_notes(rec: Recording) -> tuple[str, ...]:
    """Notes that follow from what was recorded."""
    trace = rec.trace
    ops = sum(op.calls for op in trace.ops if op.name != vocab.STEP_ROW and vocab.is_row(op.name))
    if trace.steps and not ops:
        hint = "" if rec.config.profile_all_threads else "; pass profile_all_threads=True to record every thread"
        return (
            "the recorded steps hold nothing but ProfilerStep*: the work may have run in other threads, "
            f"which torch.profiler records only in the thread that started it{hint}",
        )
    config = rec.config
    if (
        config.profile_memory
        and config.profile_all_threads
        and ops
        and not any(op.self_cpu_memory_bytes or op.self_device_memory_bytes for op in trace.ops)
    ):
        # A known torch limitation (pytorch#192290): with profile_all_threads, torch attributes no
        # allocation to any op, so the memory columns are blank rather than zero.
        return (
            "no memory per op: with profile_all_threads=True torch attributes no allocation to any op although "
            "profile_memory=True (pytorch#192290), so the memory columns are empty; profile memory in a session "
            "without profile_all_threads",
        )
    return ()


def local_table(rec: Recording) -> Table:
    """Every recorded cycle of this process (kept or dropped) as one table, unsorted and uncut."""
    from neuronprof.analysis.trace._model import table_of

    trace = rec.trace
    rows = trace.rows("shape" if rec.config.record_shapes else "name")
    notes = tuple(dict.fromkeys((*rec.notes, *data_notes(rec), *trace.notes)))
    facts = {"backend": rec.backend, "device_label": rec.device_label, "rank": rec.rank}
    return table_of(trace, rows, sort_by="none", notes=notes, **facts)


def sort_and_cut(
    rec: Recording, table: Table, *, sort_by: SortKey, row_limit: Optional[int], device_only: bool
) -> Table:
    """Sort, filter and cut a table as ``Session.table()`` is asked to."""
    table = table.sorted(sort_by)
    if device_only:
        kept = table.device_only()
        if rec.device_label is None:
            # One note, the one that says why: Table.device_only()'s own cannot know the backend.
            kept = dataclasses.replace(
                kept,
                notes=(
                    *table.notes,
                    f"device_only=True keeps rows with device time, and no row has device time: the "
                    f"{rec.backend} backend has no device, so every row was left out (totals are of the "
                    "whole session)",
                ),
            )
        table = kept
    return table.head(row_limit)


def insights(rec: Recording) -> Insights:
    """The findings engine's reading of the kept cycles (see ``Session.insights``): read once, then kept."""
    from neuronprof.analysis.insights import analyze

    require_recorded(rec, "there is nothing to advise on")
    trace = rec.trace
    if not _dropped(rec):
        return trace.insights()  # type: ignore[return-value]  # the record's own findings, kept with it
    # With a note for the dropped cycles: kept with the record too, as the record keeps its own.
    kept = trace.__dict__.get("_insights_of_kept_cycles")
    if kept is None:
        kept = trace.__dict__["_insights_of_kept_cycles"] = analyze(timeline(rec))
    return kept


def _dropped(rec: Recording) -> bool:
    """Whether cycles beyond ``keep_cycles`` were dropped (the findings then say so)."""
    return len(rec.cycles) < rec.cycle_count


def timeline(rec: Recording) -> Timeline:
    """The findings engine's input: the kept cycles' events (read from the record, not from torch)."""
    events = rec.trace.timeline()
    if _dropped(rec):
        note = "cycles beyond keep_cycles were dropped; the findings cover the cycles still kept"
        events = dataclasses.replace(events, notes=(*events.notes, note))
    return events


def target_path(rec: Recording, path: Optional[PathLike], *, suffix: str) -> Path:
    """The file to write: ``path`` (its folder created), or a fresh timestamped name in a folder.

    The folder is ``output_dir`` when ``path`` is None, or ``path`` itself when it
    names a folder (see [`into_folder`][neuronprof._io.into_folder]).
    """
    folder = rec.output_dir if path is None else into_folder(path)
    if folder is not None:
        ensure_writable_dir(folder, create=True)
        name = default_trace_name(rec.backend, rec.started, rank=rec.rank, suffix=suffix)
        return unique_path(folder / name)
    target = Path(path)  # type: ignore[arg-type]
    ensure_writable_dir(target.parent, create=True)
    return target


def report(
    rec: Recording,
    path: Optional[PathLike],
    *,
    overwrite: bool,
    world_size: Optional[int],
    baseline: Any = None,
    device_profile: Any = None,
    device_note: Optional[str] = None,
) -> Path:
    """Write the HTML report of the recording (see ``Session.report``).

    ``device_profile`` is the device's own profile that the session's backend read (Neuron's:
    its NEFF rows and engine breakdown join the kernels pane); ``device_note`` says why there
    is none, in that pane.
    """
    from neuronprof.report import trace_report, trace_settings

    require_recorded(rec, "there is nothing to report")
    # The settings the report of the session's export shows, read from the same header block.
    settings: dict[str, Any] = {
        "backend": rec.backend,
        **trace_settings(rec.trace),
        "device": rec.device_label or "none (CPU only)",
        "rank": None if rec.rank is None else f"{rec.rank} of {world_size}",
    }
    table = local_table(rec).sorted("device")
    # The record's own events (read once, into the findings' nodes) unless a note is added for dropped cycles.
    events = timeline(rec) if _dropped(rec) else None
    text = trace_report(
        rec.trace,
        table,
        settings=settings,
        timeline=events,
        baseline=baseline,
        neuron=device_profile,
        device_note=device_note,
    )
    target = target_path(rec, path, suffix=".html")
    return atomic_write(target, text_writer(text), overwrite=overwrite)


def roofline(
    rec: Recording,
    device: Optional[Union[DevicePreset, DevicePeak]],
    *,
    peak_flops: Optional[float],
    peak_bw: Optional[float],
) -> Roofline:
    """Place the kept cycles' ops on a roofline, from the events in memory (see ``Session.roofline``)."""
    from neuronprof.analysis._peaks import resolve_peaks
    from neuronprof.analysis._roofline import place_trace

    require_recorded(rec, "there is nothing to place on a roofline")
    # The session's backend says what the run was on, even when no device time reached
    # torch.profiler (its trace then has no device label); a refusal comes before any work.
    peak, origin = resolve_peaks(
        device,
        peak_flops=peak_flops,
        peak_bw=peak_bw,
        device_label=rec.device_label,
        device_name=rec.device_name,
        subject=f"this session (backend {rec.backend!r})",
    )
    return place_trace(
        rec.trace,
        peak,
        peak_source=origin,
        time_source="auto",
        device_label=rec.device_label,
        device_name=rec.device_name,
    )


def gather_rank_table(rec: Recording, timeout: float) -> RankTable:
    """Every rank's table, gathered on every rank (a collective call); see ``Session.table(ranks="all")``."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise SessionStateError(
            "table(ranks='all') gathers from every rank: call it after "
            "torch.distributed.init_process_group(), on every rank"
        )
    local = local_table(rec)
    gathered: list[Any] = [None] * dist.get_world_size()
    hint = (
        f"table(ranks='all') is a collective call and must be called on every rank: rank {dist.get_rank()} of "
        f"{dist.get_world_size()} waited up to {timeout:g} s for the others. Call it on every rank (not inside "
        "`if rank == 0:`), or use table() for this rank's own table"
    )
    try:
        # A barrier with a deadline first: a rank that never calls would otherwise
        # block this one until the process group's own timeout (30 min on gloo).
        work = dist.barrier(async_op=True)
        if work is not None and work.wait(timeout=datetime.timedelta(seconds=timeout)) is False:
            raise SessionStateError(hint)
        # Plain dicts travel well over every backend's object collectives (gloo, nccl, neuron).
        dist.all_gather_object(gathered, local.to_dict())
    except SessionStateError:
        raise
    except Exception as exc:  # gloo/nccl report a missing peer as RuntimeError or DistBackendError
        raise SessionStateError(f"{hint} ({type(exc).__name__}: {str(exc)[:300]})") from exc
    return RankTable.from_tables([Table.from_dict(d) for d in gathered])
