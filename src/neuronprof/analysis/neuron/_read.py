"""Read Neuron's profile outputs (``summary-json`` and ``system_profile.json``) into the model.

Formats, as AWS documents them for ``neuron-explorer view`` (and the legacy
``neuron-profile view``, which takes the same inputs):

* ``--output-format summary-json``: ``{"n_<40 hex>": {metrics}, "s_<hex>": {metrics}}``,
  one flat object per device profile (``n_``) or system profile (``s_``). Times
  are in seconds (``total_time``, ``<engine>_engine_active_time`` for the
  tensor, vector, scalar, gpsimd and sync engines, ``dma_active_time``); every
  ``*_percent`` field is a fraction from 0 to 1; sizes in bytes
  (``hbm_read_bytes``, ``hbm_write_bytes``); FLOP counts (``hardware_flops``,
  ``model_flops``); ``mfu_estimated_percent`` and ``mbu_estimated_percent``. A
  negative value means "not available". New keys appear between versions.
* ``--output-format json`` of a session folder: ``system_profile.json``, an
  object whose ``trace_event`` list holds, among other runtime events,
  ``nc_exec_running`` records: ``timestamp`` (epoch ns, the host's CPU clock),
  ``duration`` (ns), ``exec_id``, ``model_id``, ``model_name`` (the NEFF),
  ``nc_idx``, ``lnc_idx``, ``device_core_idx`` and ``process_id`` (a string).
  With two physical cores per logical NeuronCore each execution is recorded
  twice with the same ``exec_id``.

Where the record is silent (whether the JSON carries flow ids linking an
execution to its framework op, how a ``n_`` key maps to a NEFF), nothing is
guessed: see the notes of the returned model.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import fnmatch
import gc
import glob
import math
import operator
import os
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union

from neuronprof.analysis._jsonstream import EventBatches
from neuronprof.analysis.errors import TraceError
from neuronprof.analysis.neuron._model import (
    ENGINES,
    DeviceSummary,
    EngineTime,
    NeffExecution,
    NeuronProfile,
    StepDevice,
)
from neuronprof.analysis.neuron._tool import (
    NeuronTool,
    NeuronToolError,
    NeuronToolMissing,
    extract_json,
    find_neuron_tool,
)
from neuronprof.errors import NeuronProfWarning

__all__ = ["ToolChoice", "neuron_profile", "parse_summary", "read_steps", "read_system_profile", "step_activity"]

ToolChoice = Union[Literal["auto", "never"], str, "os.PathLike[str]"]
"""Whether and which ``neuron-explorer`` runs when a folder holds Neuron Runtime files without their JSON.

* ``"auto"``: find it (``NEURONPROF_NEURON_EXPLORER``, ``PATH``, ``/opt/aws/neuron/bin``).
* ``"never"``: read JSON files that exist, never run a tool.
* a path: that executable.
"""

SYSTEM_JSON = "system_profile.json"
"""The file name ``neuron-explorer view --output-format json`` gives a session folder's system profile."""

SUMMARY_JSON = "neuron_summary.json"
"""The name neuronprof saves ``summary-json`` output under, beside the runtime's files."""

_EXEC = "nc_exec_running"
_RUNTIME_FILES = ("ntrace.pb", "trace_info.pb")
_FRAMEWORK_TRACES = (
    "trace.json",
    "trace.json.gz",
    "pytorch_trace.json",
    "neuron_framework_trace_rank_*.json",
    "*.pt.trace.json",
    "*.pt.trace.json.gz",
)
_SUMMARY_GLOB = "*summary*.json"
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_UNIT_NS = {"ns": 1, "us": 1000, "ms": 1_000_000, "s": 1_000_000_000}
_OLD_NTFF = re.compile(r"^(\d+)_instid_\d+_vnc_\d+$")
_NAME_FIELDS = ("model_name", "neff_name")
DEFAULT_TIMEOUT = 120.0
"""Seconds one ``neuron-explorer`` run may take (a run whose output is complete is stopped at once; after a
failure the tool is not run again, so a session's ``s.table()`` waits at most this long per tool run)."""

# Figures larger than these are not believable for one profile (a decoding error, or a sentinel such as
# 1e308): they are "not available", with a note. Seconds: 11 days; fractions: 10 000 %; bytes: 1 EB;
# FLOPs: 1e21 (a 1 PFLOP/s core busy for 11 days).
_LIMITS = {"s": 1e6, "fraction": 100.0, "bytes": 1e18, "flops": 1e21}


# -- summary-json ------------------------------------------------------------------------


def _metric(
    metrics: Mapping[str, Any], key: str, kind: str = "flops", bad: Optional[list[str]] = None
) -> Optional[float]:
    """A metric as a float: ``None`` when absent, not a number, not finite, negative or absurd (not available).

    ``bad`` gets the key of each non-finite or absurd value (above ``_LIMITS[kind]``).
    """
    value = metrics.get(key)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if not isinstance(value, (int, float)) or value < 0:
        return None
    if not math.isfinite(value) or value > _LIMITS[kind]:
        if bad is not None:
            bad.append(key)
        return None
    return float(value)


def _scaled(
    metrics: Mapping[str, Any], key: str, scale: float, kind: str, bad: Optional[list[str]] = None
) -> Optional[float]:
    value = _metric(metrics, key, kind, bad)
    return None if value is None else value * scale


def _as_int(value: Optional[float]) -> Optional[int]:
    return None if value is None else int(round(value))


def parse_summary(
    data: Any, *, source: str = "", label: Optional[str] = None, notes: Optional[list[str]] = None
) -> list[DeviceSummary]:
    """Turn ``summary-json`` output into [`DeviceSummary`][neuronprof.analysis.neuron.DeviceSummary] objects.

    Seconds become microseconds, 0-1 fractions become percentages, negative
    values ``None``; unknown keys are ignored. Non-finite or absurd values
    (such as ``1e308``) are ``None`` too, and ``notes`` (when given) says which.

    Args:
        data: The parsed JSON: ``{"n_<hex>": {...}, "s_<hex>": {...}}``.
        source: Where it came from, kept on each summary.
        label: Name for a lone device profile (the NEFF's file name for a
            ``.neff``/``.ntff`` pair).
        notes: Gets one line per profile with values left out as not believable.

    Raises:
        ValueError: ``data`` is not an object of metric objects.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"summary-json must be a JSON object of profiles, got {type(data).__name__}")
    profiles = {k: v for k, v in data.items() if isinstance(v, Mapping)}
    if not profiles and any(k in data for k in ("total_time", "tensor_engine_active_time")):
        profiles = {"n_profile": data}  # a lone metrics object, without the key around it
    if not profiles:
        raise ValueError("summary-json holds no profile (expected {\"n_<hex>\": {...}})")
    devices = [k for k in profiles if k.startswith("n_")]
    out = []
    for key, m in profiles.items():
        kind: Literal["device", "system"] = "device" if key.startswith("n_") else "system"
        bad: list[str] = []
        engines = []
        for engine in ENGINES:
            base = "dma_active_time" if engine == "dma" else f"{engine}_engine_active_time"
            engines.append(
                EngineTime(
                    engine, _scaled(m, base, 1e6, "s", bad), _scaled(m, f"{base}_percent", 100.0, "fraction", bad)
                )
            )
        name = next((str(m[f]) for f in _NAME_FIELDS if isinstance(m.get(f), str) and m[f]), None)
        if name is None and label is not None and kind == "device" and len(devices) == 1:
            name = label
        out.append(
            DeviceSummary(
                key=str(key),
                kind=kind,
                label=name or str(key),
                total_us=_scaled(m, "total_time", 1e6, "s", bad),
                engines=tuple(engines),
                hbm_read_bytes=_as_int(_metric(m, "hbm_read_bytes", "bytes", bad)),
                hbm_write_bytes=_as_int(_metric(m, "hbm_write_bytes", "bytes", bad)),
                hardware_flops=_metric(m, "hardware_flops", "flops", bad),
                model_flops=_metric(m, "model_flops", "flops", bad),
                mfu_pct=_scaled(m, "mfu_estimated_percent", 100.0, "fraction", bad),
                mbu_pct=_scaled(m, "mbu_estimated_percent", 100.0, "fraction", bad),
                source=source,
            )
        )
        if bad and notes is not None:
            notes.append(
                f"{name or key}: {', '.join(bad)} not finite or too large to be real; shown as not available"
            )
    return out


def _read_summary_file(
    path: str, label: Optional[str] = None, notes: Optional[list[str]] = None
) -> list[DeviceSummary]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not UTF-8 text; is this a summary-json file?") from None
    try:
        return parse_summary(extract_json(text, what=path), source=path, label=label, notes=notes)
    except ValueError as exc:
        raise TraceError(f"{path}: {exc}") from None


# -- system_profile.json --------------------------------------------------------------------


def _int(value: Any) -> Optional[int]:
    if type(value) is int:
        return value
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) else None


def read_system_profile(
    path: Union[str, os.PathLike[str]], *, label: Optional[str] = None
) -> tuple[list[NeffExecution], list[str]]:
    """Stream a ``system_profile.json`` and return its NEFF executions (merged across physical cores) and notes.

    Only ``nc_exec_running`` records are kept; everything else is dropped as it
    streams by, so memory holds the executions, not the file. Records that share
    ``process_id``, logical core (``lnc_idx``, else ``nc_idx``), ``model_id`` and
    ``exec_id`` and overlap in time are one execution on several physical cores
    (``device_core_idx``): it spans from the earliest start to the latest end.

    Args:
        path: The ``system_profile.json`` (``.json.gz`` too).
        label: How the notes name it (default: the file name).

    Returns:
        The executions in start order, and remarks (records skipped or kept apart).

    Raises:
        TraceError: The file is missing, not JSON, or has no ``trace_event`` list.
    """
    p = os.fspath(path)
    state = _Merge()
    # Only the executions are decoded, straight into _ExecRecord (msgspec skips every other field);
    # other runtime events are skipped unread. A stretch the fast path cannot cut comes as dicts.
    stream = EventBatches(p, events_key="trace_event", containing=_EXEC, decode=_DECODE)
    with _collector_paused():
        for batch in stream:
            if _DECODE is not None and type(batch[0]) is _ExecRecord:
                state.add(batch)
            else:
                state.add([_record(ev) for ev in batch if ev.get("name") == _EXEC])
        executions = state.executions()
    name = label or os.path.basename(p)
    notes = [f"{name}: {state.records} {_EXEC} record(s), {len(executions)} execution(s)"]
    if state.duplicates:
        notes.append(
            f"{state.duplicates} record(s) were the same execution on a second physical NeuronCore "
            "(same exec_id) and were merged into one"
        )
    if state.reused:
        notes.append(f"{state.reused} record(s) reused an exec_id at another time and were kept as executions")
    if state.bad:
        notes.append(f"{state.bad} {_EXEC} record(s) without a valid timestamp/duration were skipped")
    if stream.events and not state.records and not state.bad:
        notes.append(f"{name} holds no {_EXEC} records (no NEFF ran on a profiled NeuronCore)")
    return executions, notes


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    # Reading creates millions of short-lived dicts and no reference cycles, while the
    # executions kept grow: every full collection would walk them all again. Restored
    # whatever happens.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_RECORD_FIELDS = (
    "name",
    "process_id",
    "lnc_idx",
    "model_id",
    "exec_id",
    "timestamp",
    "duration",
    "model_name",
    "nc_idx",
    "device_core_idx",
    "timestamp_unit",
)
"""The fields of an ``nc_exec_running`` record that the reader uses (all others are skipped)."""

def _record_type() -> tuple[Any, Optional[Callable[[str], list[Any]]]]:
    """The record class, and a decoder of a JSON array of records into it (``None`` without msgspec)."""
    try:
        import msgspec
    except ImportError:  # msgspec is optional at import: plain dicts, read field by field
        return collections.namedtuple("_ExecRecord", _RECORD_FIELDS, defaults=[None] * len(_RECORD_FIELDS)), None
    # Typed as Any: values are checked where they are used, as the tool's output may change between
    # releases. gc=False: records hold no cycles. The decoder builds only these fields.
    record = msgspec.defstruct("_ExecRecord", [(n, Any, None) for n in _RECORD_FIELDS], gc=False)
    return record, msgspec.json.Decoder(list[record]).decode  # type: ignore[valid-type]


_ExecRecord, _DECODE = _record_type()


def _record(ev: Mapping[str, Any]) -> Any:
    """An event the fast path did not decode (a dict), as the record the merge reads."""
    return _ExecRecord(*(ev.get(n) for n in _RECORD_FIELDS))


class _Merge:
    """Folds records into executions as they stream by (one dict entry per execution)."""

    def __init__(self) -> None:
        # key -> the execution's fields, in NeffExecution's order, still open to merging
        self.merged: dict[tuple[Any, ...], list[Any]] = {}
        self.apart: list[list[Any]] = []
        self.names: dict[Any, str] = {}
        self.records = self.duplicates = self.reused = self.bad = 0

    def add(self, records: Iterable[Any]) -> None:
        # The hot loop (two records per execution on Trn2): kept inline on purpose.
        merged = self.merged
        get = merged.get
        names = self.names
        n = dups = 0
        for r in records:
            if r.name != _EXEC:
                continue  # its text held the name, but it is another event
            ts = r.timestamp
            dur = r.duration
            if r.timestamp_unit is not None and r.timestamp_unit != "ns":
                ts, dur = _in_ns(ts, dur, r.timestamp_unit)
            if type(ts) is not int or type(dur) is not int or dur < 0:
                ts, dur = _int(ts), _int(dur)
                if ts is None or dur is None or dur < 0:
                    self.bad += 1
                    continue
            n += 1
            core = r.device_core_idx
            nc = r.nc_idx
            if core is None:
                core = nc
            lnc = r.lnc_idx
            if lnc is None:
                lnc = nc  # no logical core index: the core index names it
            exec_id = r.exec_id
            key = (r.process_id, lnc, r.model_id, exec_id)
            end = ts + dur
            old = get(key)
            if old is not None:
                if ts <= old[2] and end >= old[1]:
                    if ts < old[1]:
                        old[1] = ts
                    if end > old[2]:
                        old[2] = end
                    cores = old[4]
                    if core is not None and core not in cores:
                        if len(cores) == 1 and type(core) is int and type(cores[0]) is int:
                            old[4] = (cores[0], core) if cores[0] < core else (core, cores[0])
                        else:
                            old[4] = _with_core(cores, core)
                    dups += 1
                    continue
                self.reused += 1  # same ids but apart in time: a reused id, not a second core
            name = r.model_name
            neff = names.get(name)
            if neff is None:
                neff = _neff_name(name, r.model_id, names)
            pid = r.process_id
            if type(pid) is not str and pid is not None:
                pid = str(pid)
            entry = [neff, ts, end, exec_id, () if core is None else (core,), nc, lnc, r.model_id, pid]
            if old is None and exec_id is not None:
                merged[key] = entry
            else:
                self.apart.append(entry)
        self.records += n
        self.duplicates += dups

    def executions(self) -> list[NeffExecution]:
        new = tuple.__new__
        out = [new(NeffExecution, e) for e in self.merged.values()]
        out += [new(NeffExecution, e) for e in self.apart]
        out.sort(key=_START)
        return out


def _with_core(cores: tuple[Any, ...], core: Any) -> tuple[Any, ...]:
    try:
        return tuple(sorted((*cores, core)))
    except TypeError:  # indices of mixed types: keep the order seen
        return (*cores, core)


def _neff_name(name: Any, model_id: Any, names: dict[Any, str]) -> str:
    if not isinstance(name, str) or not name:
        # No NEFF name: name it by its model id (not cached by name, since ids differ).
        return f"model {model_id}" if model_id is not None else "(unnamed NEFF)"
    return names.setdefault(name, name)


def _in_ns(ts: Any, dur: Any, unit: Any) -> tuple[Optional[int], Optional[int]]:
    """``timestamp`` and ``duration`` given in ``timestamp_unit``, in nanoseconds (``None`` when unknown)."""
    scale = _UNIT_NS.get(unit) if isinstance(unit, str) else None
    ts, dur = _int(ts), _int(dur)
    if scale is None or ts is None or dur is None:
        return None, None
    return ts * scale, dur * scale


def _start(ex: NeffExecution) -> int:
    return ex.start_ns


_START = operator.itemgetter(1)  # NeffExecution.start_ns, read in C


# -- framework trace and steps ------------------------------------------------------------


def read_steps(path: Union[str, os.PathLike[str]]) -> list[tuple[int, int, int]]:
    """Return the ``ProfilerStep#N`` spans of a framework (torch.profiler) trace as ``(N, start_ns, end_ns)``.

    Times are put on the epoch-nanosecond CPU clock of Neuron's records: kineto
    writes ``ts`` in microseconds from ``baseTimeNanoseconds`` (older traces:
    from the epoch).

    Raises:
        TraceError: The trace cannot be read.
    """
    stream = EventBatches(os.fspath(path), containing="ProfilerStep#")
    raw: list[tuple[int, float, float]] = []
    with _collector_paused():
        for batch in stream:
            for ev in batch:
                name = ev.get("name")
                if type(name) is str and name.startswith("ProfilerStep#") and ev.get("ph") == "X":
                    m = _STEP.match(name)
                    ts, dur = ev.get("ts"), ev.get("dur")
                    if m and isinstance(ts, (int, float)) and isinstance(dur, (int, float)) and dur >= 0:
                        raw.append((int(m.group(1)), float(ts), float(dur)))
    base = _int(stream.metadata.get("baseTimeNanoseconds")) or 0
    steps = [(n, base + round(ts * 1000), base + round((ts + dur) * 1000)) for n, ts, dur in raw]
    steps.sort(key=lambda s: s[1])
    return steps


def step_activity(executions: Sequence[NeffExecution], steps: Iterable[tuple[int, int, int]]) -> list[StepDevice]:
    """Busy and idle NeuronCore time in each step.

    Args:
        executions: Executions in start order.
        steps: ``(N, start_ns, end_ns)`` per step, as [`read_steps`][neuronprof.analysis.neuron.read_steps] returns.
    """
    starts = [ex.start_ns for ex in executions]
    longest = max((ex.end_ns - ex.start_ns for ex in executions), default=0)
    out = []
    for n, s, e in steps:
        lo = bisect.bisect_left(starts, s - longest)
        hi = bisect.bisect_left(starts, e)
        busy = 0
        gaps: list[int] = []
        cursor = s
        started = 0
        for ex in executions[lo:hi]:
            a, b = max(ex.start_ns, s), min(ex.end_ns, e)
            if ex.start_ns >= s:
                started += 1
            if b <= a:
                continue
            if a > cursor:
                gaps.append(a - cursor)
            if b > cursor:
                busy += b - max(a, cursor)
                cursor = b
        if e > cursor:
            gaps.append(e - cursor)
        out.append(
            StepDevice(
                step=n,
                start_ns=s,
                end_ns=e,
                executions=started,
                busy_us=busy / 1000.0,
                idle_us=(e - s - busy) / 1000.0,
                gaps=len(gaps),
                largest_gap_us=max(gaps, default=0) / 1000.0,
            )
        )
    return out


# -- folders ------------------------------------------------------------------------------------


@dataclass
class _Folder:
    """One folder of Neuron Runtime output (a session folder), or of the tool's JSON."""

    path: Path
    runtime: bool = False
    system_json: Optional[Path] = None
    summaries: list[Path] = field(default_factory=list)
    framework: Optional[Path] = None
    neffs: list[Path] = field(default_factory=list)
    ntffs: list[Path] = field(default_factory=list)

    @property
    def has_system(self) -> bool:
        return self.runtime or self.system_json is not None


def _scan(root: Path, pid: Optional[int]) -> list[_Folder]:
    folders = []
    for here, dirs, files in os.walk(root):
        dirs.sort()
        names = set(files)
        d = Path(here)
        if pid is not None and not any(part.endswith(f"_pid_{pid}") for part in d.parts):
            continue
        folder = _Folder(d, runtime=any(n in names for n in _RUNTIME_FILES))
        if SYSTEM_JSON in names:
            folder.system_json = d / SYSTEM_JSON
        folder.summaries = sorted(d / n for n in names if fnmatch.fnmatch(n, _SUMMARY_GLOB))
        folder.neffs = sorted(d / n for n in names if n.endswith(".neff"))
        folder.ntffs = sorted(d / n for n in names if n.endswith(".ntff"))
        for pattern in _FRAMEWORK_TRACES:
            hits = sorted(glob.glob(os.path.join(glob.escape(here), pattern)))
            if hits:
                folder.framework = Path(hits[0])
                break
        if folder.has_system or folder.summaries or folder.ntffs:
            folders.append(folder)
    return folders


def _pairs(folder: _Folder) -> tuple[list[tuple[Path, Path]], list[Path]]:
    """Pair each ``.ntff`` of a device-only folder with its ``.neff``; return the pairs and the unpaired."""
    by_hash: dict[str, Path] = {}
    for path in folder.neffs:
        stem = path.stem
        by_hash[stem[5:] if stem.startswith("neff_") else stem] = path
    pairs: list[tuple[Path, Path]] = []
    lost: list[Path] = []
    for ntff in folder.ntffs:
        m = _OLD_NTFF.match(ntff.stem)
        neff: Optional[Path] = by_hash.get(m.group(1)) if m else None
        if neff is None and len(folder.neffs) == 1:
            neff = folder.neffs[0]
        if neff is None:
            lost.append(ntff)
        else:
            pairs.append((neff, ntff))
    return pairs, lost


class _Runner:
    """Finds the tool once, runs it, and turns each failure into one warning (a missing tool: maybe a note)."""

    def __init__(self, tool: ToolChoice, timeout: float, *, warn_missing: bool = True) -> None:
        self.choice = tool
        self.timeout = timeout
        self.warn_missing = warn_missing
        self._tool: Optional[NeuronTool] = None
        self.failed = False
        self.missing: Optional[str] = None
        self.used: Optional[str] = None
        self.notes: list[str] = []
        self.error: Optional[str] = None

    def tool(self) -> Optional[NeuronTool]:
        if self.choice == "never" or self.failed:
            return None
        if self._tool is None:
            try:
                self._tool = find_neuron_tool(None if self.choice == "auto" else os.fspath(self.choice))
            except NeuronToolError as exc:
                self.fail(exc)
                return None
        return self._tool

    def fail(self, exc: Exception) -> None:
        self.failed = True
        self.error = str(exc)
        if isinstance(exc, NeuronToolMissing):
            self.missing = str(exc)
            if not self.warn_missing:
                return
        warnings.warn(
            f"{exc} (NeuronCore time from Neuron's profile is left out; the profile data itself is kept)",
            NeuronProfWarning,
            stacklevel=4,
        )

    def view(
        self, inputs: Sequence[tuple[str, Union[str, os.PathLike[str]]]], fmt: str, consume: Callable[[str], Any]
    ) -> Any:
        tool = self.tool()
        if tool is None:
            return None
        try:
            result = tool.view(inputs, fmt, consume, timeout=self.timeout, notes=self.notes)
        except NeuronToolError as exc:
            self.fail(exc)
            return None
        self.used = tool.label
        return result


def _save(src: str, dest: Path, notes: list[str]) -> None:
    from neuronprof._io import atomic_write, copy_file

    try:
        atomic_write(dest, lambda tmp: copy_file(Path(src), tmp), overwrite=False)
    except FileExistsError:
        pass
    except OSError as exc:
        notes.append(f"could not save {dest.name} beside the profile ({exc.strerror or exc})")


def _read_folders(
    folders: list[_Folder],
    runner: _Runner,
    *,
    save: bool,
    framework_trace: Optional[Path],
    notes: list[str],
) -> tuple[list[DeviceSummary], list[NeffExecution], list[tuple[int, int, int]]]:
    summaries: list[DeviceSummary] = []
    executions: list[NeffExecution] = []
    steps: list[tuple[int, int, int]] = []
    system_folders = [f for f in folders if f.has_system]
    device_only = [f for f in folders if not f.has_system and f.ntffs]
    if system_folders and device_only:
        # A bundle holds copies of the device files beside the system profile.
        notes.append(
            f"{len(device_only)} device-only folder(s) skipped: the system profile's folder holds the same profiles"
        )
        device_only = []
    for f in folders:
        for s in f.summaries:
            summaries.extend(_read_summary_file(str(s), notes=notes))
    for f in system_folders:
        if f.system_json is not None:
            try:
                found, more = read_system_profile(f.system_json, label=str(f.system_json))
            except TraceError as exc:
                if not summaries:
                    raise
                # The engine breakdown beside it is still worth reading.
                notes.append(f"{exc}; its NEFF executions are left out")
            else:
                executions.extend(found)
                notes.extend(more)
        elif f.runtime:

            def consume_system(path: str, f: _Folder = f) -> tuple[list[NeffExecution], list[str]]:
                result = read_system_profile(path, label=f"system profile of {f.path}")
                if save:
                    _save(path, f.path / SYSTEM_JSON, notes)
                return result

            got = runner.view([("-d", f.path)], "json", consume_system)
            if got is not None:
                executions.extend(got[0])
                notes.extend(got[1])
        if not f.summaries and f.runtime:

            def consume_summary(path: str, f: _Folder = f) -> list[DeviceSummary]:
                result = _read_summary_file(path, notes=notes)
                if save:
                    _save(path, f.path / SUMMARY_JSON, notes)
                return result

            got_s = runner.view([("-d", f.path)], "summary-json", consume_summary)
            if got_s is not None:
                summaries.extend(got_s)
        if framework_trace is None and f.framework is not None:
            steps.extend(read_steps(f.framework))
    if framework_trace is not None:
        steps = read_steps(framework_trace)
    for f in device_only:
        pairs, lost = _pairs(f)
        if lost:
            notes.append(f"{len(lost)} .ntff file(s) in {f.path} have no .neff to pair with and were skipped")
        if f.summaries:
            continue
        for neff, ntff in pairs:

            def consume_pair(path: str, neff: Path = neff) -> list[DeviceSummary]:
                return _read_summary_file(path, label=neff.name, notes=notes)

            got_p = runner.view([("-n", neff), ("-s", ntff)], "summary-json", consume_pair)
            if got_p is not None:
                summaries.extend(got_p)
    return summaries, executions, steps


def neuron_profile(
    path: Union[str, os.PathLike[str]],
    ntff: Union[str, os.PathLike[str], None] = None,
    *,
    framework_trace: Union[str, os.PathLike[str], None] = None,
    tool: ToolChoice = "auto",
    timeout: float = DEFAULT_TIMEOUT,
    save: bool = False,
    pid: Optional[int] = None,
    warn_missing: bool = True,
) -> NeuronProfile:
    """Read Neuron's own profile: engine breakdown per device profile, NEFF executions, busy time per step.

    ``path`` may be:

    * a TorchNeuron profile output folder, or one session folder in it
      (``<instance>_pid_<pid>/<timestamp>/``, holding ``ntrace.pb`` and
      ``trace_info.pb``, with any ``.neff``/``.ntff``);
    * a bundle written by ``Session.export(format="neuron")``;
    * a folder holding the tool's JSON (``system_profile.json``, ``*summary*.json``);
    * a ``.neff`` file, with its ``.ntff`` as ``ntff``;
    * a ``system_profile.json`` or a ``*summary*.json`` file.

    JSON files that exist are read directly, without the tool, so a bundle
    copied to a machine without the Neuron tools still reads. Where only
    Neuron Runtime's files exist, ``neuron-explorer view`` (or ``neuron-profile
    view``) turns them into JSON: ``--output-format json`` for the system
    profile and ``summary-json`` for the engine breakdown. When the tool is
    missing, fails, hangs or writes something unreadable, one
    ``NeuronProfWarning`` names it and the fix (install ``aws-neuronx-tools``)
    and the rest is still returned.

    Per-step busy time needs the framework trace (``trace.json`` beside the
    runtime's files, as ``NeuronProfiler.export_trace`` writes it, or
    ``framework_trace``).

    Args:
        path: What to read (see above).
        ntff: The ``.ntff`` of a ``.neff`` given as ``path``.
        framework_trace: A torch.profiler Chrome trace whose ``ProfilerStep#N``
            spans define the steps; default: the one in each session folder.
        tool: See [`ToolChoice`][neuronprof.analysis.neuron.ToolChoice].
        timeout: Seconds each run of the tool may take before it is stopped.
        save: Keep the tool's JSON beside the runtime's files (``system_profile.json``,
            ``neuron_summary.json``), so later reads need no tool.
        pid: Only read session folders of this process (``*_pid_<pid>``).
        warn_missing: Warn when the tool is needed but not installed; when False the
            notes say so instead (a failing tool always warns).

    Returns:
        A [`NeuronProfile`][neuronprof.analysis.NeuronProfile].

    Raises:
        TraceError: ``path`` does not exist, holds no Neuron profile, or a JSON
            file in it is not the documented format.
        ValueError: ``ntff`` without a ``.neff``, or a bad ``timeout``.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not (tool in ("auto", "never") or isinstance(tool, (str, os.PathLike))):
        raise ValueError(f"tool must be 'auto', 'never' or a path, got {tool!r}")
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file or folder")
    runner = _Runner(tool, float(timeout), warn_missing=warn_missing)
    notes: list[str] = []
    summaries: list[DeviceSummary] = []
    executions: list[NeffExecution] = []
    steps: list[tuple[int, int, int]] = []
    trace = Path(framework_trace) if framework_trace is not None else None
    if ntff is not None or p.suffix == ".neff":
        if p.suffix != ".neff" or ntff is None:
            raise ValueError("give a device profile as a .neff file and its .ntff: neuron_profile('x.neff', 'x.ntff')")
        if not Path(ntff).is_file():
            raise TraceError(f"{ntff}: no such file")
        got = runner.view(
            [("-n", p), ("-s", ntff)],
            "summary-json",
            lambda out: _read_summary_file(out, label=p.name, notes=notes),
        )
        summaries.extend(got or ())
    elif p.is_file():
        if fnmatch.fnmatch(p.name, _SUMMARY_GLOB) or _looks_like_summary(p):
            summaries.extend(_read_summary_file(str(p), notes=notes))
        else:
            executions, more = read_system_profile(p)
            notes.extend(more)
            if trace is not None:
                steps = read_steps(trace)
    else:
        folders = _scan(p, pid)
        if not folders:
            raise TraceError(
                f"{p}: no Neuron profile here (looked for ntrace.pb/trace_info.pb, {SYSTEM_JSON}, "
                f"{_SUMMARY_GLOB} and .ntff files)"
            )
        summaries, executions, steps = _read_folders(folders, runner, save=save, framework_trace=trace, notes=notes)
    executions.sort(key=_START)
    step_rows = step_activity(executions, steps) if executions and steps else []
    if executions and not steps:
        notes.append("no framework trace with ProfilerStep spans beside the system profile: no per-step busy time")
    notes.extend(runner.notes)
    if runner.error is not None:
        notes.append(runner.error)  # the whole message, with its fix, once
    if steps and executions:
        notes.extend(_outside_steps(executions, steps))
    if executions:
        notes.append(
            "executions are not linked to framework ops: the JSON output documents no link (flow ids are "
            "documented only in the Parquet output)"
        )
    return NeuronProfile(
        summaries=tuple(summaries),
        executions=tuple(executions),
        steps=tuple(step_rows),
        source=str(p),
        tool=runner.used,
        notes=tuple(notes),
        tool_error=runner.error,
        tool_missing=runner.missing is not None,
    )


_SUMMARY_KEY = re.compile(rb'"[ns]_[0-9a-fA-F]+"\s*:\s*\{|"(total_time|tensor_engine_active_time)"\s*:')


def _looks_like_summary(path: Path) -> bool:
    """True when a file's start reads like ``summary-json`` rather than a system profile (whatever its name)."""
    if path.suffix == ".gz":
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return False
    return b'"trace_event"' not in head and _SUMMARY_KEY.search(head) is not None


def _outside_steps(executions: Sequence[NeffExecution], steps: Sequence[tuple[int, int, int]]) -> list[str]:
    """A note on executions that overlap no ``ProfilerStep`` span (counted in the NEFF totals, in no step)."""
    spans = sorted((s, e) for _, s, e in steps)
    starts = [s for s, _ in spans]
    # The latest end among the spans starting at or before each one (spans may overlap).
    reach: list[int] = []
    for _, e in spans:
        reach.append(max(e, reach[-1]) if reach else e)
    count = 0
    ns = 0
    for ex in executions:
        i = bisect.bisect_left(starts, ex.end_ns) - 1  # the last span starting before the execution ends
        if i < 0 or reach[i] <= ex.start_ns:
            count += 1
            ns += ex.end_ns - ex.start_ns
    if not count:
        return []
    return [
        f"{count} execution(s) ({ns / 1000.0:.1f} µs) fell outside the profiled steps (no ProfilerStep span "
        "overlaps them); they are counted in the NEFF totals but in no step"
    ]
