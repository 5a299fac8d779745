"""Read Chrome/Perfetto trace files into per-operator aggregates, without torch.

A trace captured on a Trainium, TPU or GPU host is read here on any machine
with Python: [`load_trace`][neuronprof.analysis.load_trace] streams the events
(bounded memory, see ``_jsonstream``), rebuilds the call nesting per thread to
get self times, attributes device kernels to the op that launched them, and
returns a [`Trace`][neuronprof.analysis.Trace]. ``Trace.table()`` turns that into
the same [`Table`][neuronprof.Table] that ``session.table()`` returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import glob
import operator
import os
import re
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Callable, Literal, Optional, Union

from neuronprof.analysis._jsonstream import EventStream
from neuronprof.analysis.errors import TraceError
from neuronprof.model import OpRow, Shape, Table

__all__ = ["GroupBy", "Trace", "TraceOp", "TraceSource", "find_trace_files", "load_trace", "summarize"]

GroupBy = Literal["name", "shape"]
"""How ``Trace.table()`` groups operators.

* ``"name"``: one row per operator name, like ``key_averages()``.
* ``"shape"``: one row per name and input shapes, like
  ``key_averages(group_by_input_shape=True)``; needs ``record_shapes=True``.
"""

TraceSource = Union[str, "os.PathLike[str]", "Trace"]
"""A trace file, a folder of traces, or a [`Trace`][neuronprof.analysis.Trace] already loaded."""

# Categories that are not operator time: the profiler's own span, and GPU-side
# copies of CPU annotations (they would count their kernels' time twice).
_SKIP_CATS = frozenset({"Trace", "gpu_user_annotation"})
_DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events"})
_STEP_PREFIX = "ProfilerStep#"
_STEP_NAME = "ProfilerStep*"  # what key_averages() calls every step

# What kind of event a key is; drives nesting and device attribution.
_K_OTHER, _K_OP, _K_PY, _K_RUNTIME, _K_STEP, _K_DEVICE = range(6)

# Process names/labels that mark a device timeline (kineto labels GPU pids "GPU 0";
# XLA/TPU traces name them "/device:TPU:0").
_DEVICE_PROC = re.compile(
    r"(\bGPU\b|\bTPU\b|/device:|neuron\s*core|neuron\s*device|\bNC\s*\d|\bXPU\b|\bNPU\b|\bMTIA\b|\bHPU\b)",
    re.IGNORECASE,
)
_NEURON_LAYOUT = re.compile(r"_pid_\d+")

_NUM = (int, float)
_MAX_ID = 1 << 62
_EMPTY: dict[str, Any] = {}


@dataclass(frozen=True)
class TraceOp:
    """Everything a trace says about one operator (or device kernel) and one input signature.

    Times are in microseconds, summed over every call in the trace; ``None``
    means the trace does not say (e.g. device time on a CPU-only trace).

    Attributes:
        name: Operator or kernel name (``ProfilerStep#N`` annotations are all
            called ``ProfilerStep*``, as in ``key_averages()``).
        on_device: True for device work (kernels, copies) rather than host ops.
        calls: Number of events.
        self_cpu_us: Host time excluding nested events on the same thread.
        cpu_total_us: Host time including nested events.
        self_device_us: Device time of the op itself: its own duration for a
            kernel; for a host op, the kernels it launched.
        device_total_us: Device time including what nested ops launched.
        input_dims: ``Input Dims`` as recorded (``record_shapes=True``): one entry
            per input, a tuple of ints for a tensor, nested tuples for a tensor list.
        input_dtypes: ``Input type`` as recorded (``"float"``, ``"c10::BFloat16"``, ``"Scalar"``...).
        concrete_inputs: ``Concrete Inputs`` as recorded (scalar arguments as text).
        flops: FLOPs the profiler estimated (``with_flops=True``), when the trace has them.
    """

    name: str
    on_device: bool
    calls: int
    self_cpu_us: float
    cpu_total_us: float
    self_device_us: Optional[float] = None
    device_total_us: Optional[float] = None
    input_dims: Optional[tuple[Any, ...]] = None
    input_dtypes: Optional[tuple[str, ...]] = None
    concrete_inputs: Optional[tuple[str, ...]] = None
    flops: Optional[int] = None

    @property
    def input_shapes(self) -> Optional[tuple[Shape, ...]]:
        """Input shapes in [`OpRow`][neuronprof.OpRow] form: ``()`` for a scalar, a non-tensor or a tensor list."""
        return _flat_shapes(self.input_dims)


@dataclass(frozen=True)
class Trace:
    """A loaded trace: per-operator aggregates plus what the trace says about its run.

    Build one with [`load_trace`][neuronprof.analysis.load_trace]; turn it into
    a [`Table`][neuronprof.Table] with [`table`][neuronprof.analysis.Trace.table].

    Attributes:
        ops: One entry per operator name and input signature, in first-seen order.
        files: The trace files read (a folder may hold several; they are summed).
        backend: ``"cuda"``, ``"neuron"``, ``"tpu"``, ... or ``"cpu"`` without device events.
        device_label: Label of the device columns (``"CUDA"``, ``"NEURON"``,
            ``"TPU"``, ``"DEVICE"`` when unknown); ``None`` without device events.
        device_name: Device model when the trace records one (``deviceProperties``).
        steps: Number of ``ProfilerStep#N`` annotations.
        top_level_calls: Ops called directly by the profiled steps, summed over
            steps; ``None`` when the trace has no steps.
        events: Number of trace events read.
        notes: Remarks about how the trace was read.
    """

    ops: tuple[TraceOp, ...]
    files: tuple[str, ...] = ()
    backend: str = "cpu"
    device_label: Optional[str] = None
    device_name: Optional[str] = None
    steps: int = 0
    top_level_calls: Optional[int] = None
    events: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def source(self) -> str:
        """The trace file, or the files joined with ``", "``."""
        return ", ".join(self.files)

    def table(
        self,
        sort_by: str = "device",
        *,
        limit: Optional[int] = None,
        device_only: bool = False,
        group_by: GroupBy = "name",
    ) -> Table:
        """Return the trace as a [`Table`][neuronprof.Table], as ``session.table()`` would.

        Args:
            sort_by: A [`SortKey`][neuronprof.model.SortKey]; device keys fall
                back to CPU time when the trace has no device time.
            limit: Keep at most this many rows (all when ``None``).
            device_only: Keep only rows with device time above zero.
            group_by: ``"name"`` (like ``key_averages()``) or ``"shape"`` (one row
                per name and input shapes, like ``group_by_input_shape=True``;
                ``input_dtypes`` is kept where the merged calls agree on it).

        Raises:
            ValueError: Unknown ``sort_by`` or ``group_by``.
        """
        rows = self.rows(group_by)
        table = Table(
            rows=rows,
            backend=self.backend,
            device_label=self.device_label,
            steps=self.steps,
            top_level_calls=self.top_level_calls,
            notes=self.notes,
        ).sorted(sort_by)
        if device_only:
            table = table.device_only()
        return table.head(limit)

    def rows(self, group_by: GroupBy = "name") -> tuple[OpRow, ...]:
        """Return one [`OpRow`][neuronprof.OpRow] per operator (``group_by="name"``) or signature (``"shape"``).

        Raises:
            ValueError: Unknown ``group_by``.
        """
        if group_by not in ("name", "shape"):
            raise ValueError(f"unknown group_by {group_by!r}; use 'name' or 'shape'")
        merged: dict[tuple[Any, ...], OpRow] = {}
        for op in self.ops:
            shapes = op.input_shapes if group_by == "shape" else None
            dtypes = op.input_dtypes if group_by == "shape" else None
            # Like key_averages(group_by_input_shape=True): shapes, not dtypes, split rows.
            key = (op.name, op.on_device, shapes)
            row = OpRow(
                name=op.name,
                calls=op.calls,
                self_cpu_us=op.self_cpu_us,
                cpu_total_us=op.cpu_total_us,
                self_device_us=op.self_device_us,
                device_total_us=op.device_total_us,
                input_shapes=shapes,
                input_dtypes=dtypes,
                flops=op.flops,
                on_device=op.on_device,
            )
            prev = merged.get(key)
            merged[key] = row if prev is None else _add_rows(prev, row)
        return tuple(merged.values())


# -- loading ------------------------------------------------------------------------


def find_trace_files(path: Union[str, os.PathLike[str]]) -> list[str]:
    """Return the trace files at ``path``: the file itself, or the traces in a folder.

    A folder may be a TensorBoard log folder (``*.pt.trace.json[.gz]``, as
    ``tensorboard_trace_handler`` writes), a TorchNeuron output folder
    (``<host>_pid_<pid>/<timestamp>/trace.json``), or any folder holding such
    files a few levels down.

    Raises:
        TraceError: ``path`` does not exist, or the folder holds no trace.
    """
    p = os.fspath(path)
    if not os.path.exists(p):
        raise TraceError(f"{p}: no such file or folder")
    if not os.path.isdir(p):
        return [p]
    patterns = (
        ("*.pt.trace.json", "*.pt.trace.json.gz"),
        ("trace.json", "trace.json.gz"),
        ("*_pid_*/*/trace.json", "*_pid_*/*/trace.json.gz", "*_pid_*/trace.json", "*_pid_*/trace.json.gz"),
        ("**/*.pt.trace.json", "**/*.pt.trace.json.gz", "**/trace.json", "**/trace.json.gz"),
    )
    for group in patterns:
        found: set[str] = set()
        for pattern in group:
            found.update(glob.glob(os.path.join(glob.escape(p), pattern), recursive=True))
        files = sorted(f for f in found if os.path.isfile(f))
        if files:
            return files
    raise TraceError(
        f"{p}: no trace files in this folder (looked for *.pt.trace.json[.gz], trace.json and "
        "<host>_pid_<pid>/<timestamp>/trace.json)"
    )


def load_trace(source: TraceSource) -> Trace:
    """Read a trace file or folder into a [`Trace`][neuronprof.analysis.Trace].

    Accepts Chrome/Perfetto JSON traces (``.json`` or ``.json.gz``) such as
    torch.profiler's ``export_chrome_trace`` writes, TensorBoard trace folders
    and TorchNeuron output folders; several files are summed. Memory stays
    bounded whatever the file size: events are streamed, never loaded whole.

    Args:
        source: A path, or a ``Trace`` (returned unchanged).

    Raises:
        TraceError: The path is missing, or a file is not a readable trace.
    """
    if isinstance(source, Trace):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"load_trace() takes a path or a Trace, got {type(source).__name__}")
    files = find_trace_files(source)
    loader = _Loader()
    for f in files:
        loader.read_file(f)
    return loader.result(files)


def summarize(
    source: TraceSource,
    *,
    sort_by: str = "device",
    limit: Optional[int] = None,
    device_only: bool = False,
    group_by: GroupBy = "name",
) -> Table:
    """Return a trace's per-operator [`Table`][neuronprof.Table] (what ``neuronprof summarize`` prints).

    Args:
        source: A trace file or folder, or a loaded [`Trace`][neuronprof.analysis.Trace].
        sort_by: A [`SortKey`][neuronprof.model.SortKey] (default: self device time).
        limit: Keep at most this many rows.
        device_only: Keep only rows with device time.
        group_by: ``"name"`` or ``"shape"`` (see [`GroupBy`][neuronprof.analysis.GroupBy]).

    Raises:
        TraceError: The trace cannot be read.
        ValueError: Unknown ``sort_by`` or ``group_by``.
    """
    return load_trace(source).table(sort_by, limit=limit, device_only=device_only, group_by=group_by)


# -- the aggregation ------------------------------------------------------------------


class _Thread:
    """The events of one (pid, tid) timeline, stored compactly until the file ends."""

    __slots__ = ("ts", "dur", "kid", "link")

    def __init__(self) -> None:
        self.ts = array("q")  # start, integer nanoseconds
        self.dur = array("q")  # duration, integer nanoseconds
        self.kid = array("i")  # index of the event's key
        self.link = array("q")  # >0: External id; <0: -correlation; 0: none


class _Loader:
    """Aggregates events file by file into per-key sums."""

    def __init__(self) -> None:
        self.keys: dict[tuple[Any, ...], int] = {}
        self.key_list: list[tuple[Any, ...]] = []
        self.kind: list[int] = []
        self.names: list[str] = []
        self.calls: list[int] = []
        self.cpu_self: list[int] = []
        self.cpu_total: list[int] = []
        self.dev_self: list[int] = []
        self.dev_total: list[int] = []
        self.on_device: list[bool] = []
        self.flops: list[Optional[float]] = []
        self.steps = 0
        self.top_level = 0
        self.events = 0
        self.has_device = False
        self.linked = False
        self.labels: set[str] = set()
        self.device_name: Optional[str] = None
        self.notes: list[str] = []

    # -- keys -------------------------------------------------------------------
    def _new_key(self, key: tuple[Any, ...], cat: Any) -> int:
        kid = len(self.key_list)
        self.keys[key] = kid
        self.key_list.append(key)
        name = key[0]
        self.names.append(name)
        if name == _STEP_NAME:
            kind = _K_STEP
        elif cat in _DEVICE_CATS:
            kind = _K_DEVICE
        elif cat == "cpu_op":
            kind = _K_OP
        elif cat == "python_function":
            kind = _K_PY
        elif isinstance(cat, str) and (cat.endswith("_runtime") or cat.endswith("_driver")):
            kind = _K_RUNTIME
        else:
            kind = _K_OTHER
        self.kind.append(kind)
        for lst in (self.calls, self.cpu_self, self.cpu_total, self.dev_self, self.dev_total):
            lst.append(0)
        self.on_device.append(False)
        self.flops.append(None)
        return kid

    # -- reading ----------------------------------------------------------------
    def read_file(self, path: str) -> None:
        stream = EventStream(path)
        threads: dict[Any, _Thread] = {}
        appenders: dict[Any, tuple[Callable[[int], None], ...]] = {}
        procs: dict[Any, list[str]] = {}
        open_b: dict[Any, list[tuple[Any, ...]]] = {}
        keys_get = self.keys.get
        kinds = self.kind
        index = -1
        # The collector only slows this loop down: it creates millions of short-lived
        # dicts and no reference cycles. Restored whatever happens.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for index, event in enumerate(stream):
                ev: Mapping[str, Any] = event
                ph = ev.get("ph")
                if ph != "X":
                    if ph == "M":
                        self._metadata(ev, procs)
                        continue
                    if ph != "B" and ph != "E":
                        continue
                    ended = self._begin_end(ev, ph, index, open_b, path)
                    if ended is None:
                        continue
                    ev = ended
                # -- a complete event: validate, key it, store it compactly --------------
                cat = ev.get("cat")
                if cat in _SKIP_CATS:
                    continue
                name: Any = ev.get("name")
                ts: Any = ev.get("ts")
                dur: Any = ev.get("dur")
                if type(name) is not str:
                    raise TraceError(f"{path}: event #{index} (ph 'X') has no 'name' string")
                if type(ts) not in _NUM or ts - ts:
                    raise TraceError(f"{path}: event #{index} ({name!r}) has no numeric 'ts'")
                if type(dur) not in _NUM or dur - dur:
                    raise TraceError(f"{path}: event #{index} ({name!r}) has no numeric 'dur'")
                if dur < 0:
                    raise TraceError(f"{path}: event #{index} ({name!r}) has a negative duration ({dur})")
                args: Any = ev.get("args")
                if type(args) is not dict:
                    args = _EMPTY
                if name.startswith(_STEP_PREFIX) and cat not in _DEVICE_CATS:
                    name = _STEP_NAME
                    self.steps += 1
                dims = args.get("Input Dims")
                types = args.get("Input type")
                concrete = args.get("Concrete Inputs")
                key = (
                    name,
                    cat,
                    None if dims is None else _freeze_dims(dims),
                    None if types is None else _freeze_strs(types),
                    None if concrete is None else _freeze_strs(concrete),
                )
                try:
                    kid = keys_get(key)
                except TypeError:  # something unhashable slipped through: freeze it the slow way
                    plain_cat = cat if isinstance(cat, str) else None
                    key = (name, plain_cat, _freeze_any(dims), _freeze_any(types), _freeze_any(concrete))
                    kid = keys_get(key)
                if kid is None:
                    kid = self._new_key(key, cat)
                flops = args.get("flops")
                if flops is not None:
                    self._add_flops(kid, flops)
                kind = kinds[kid]
                # The id that ties device work to its host op: >0 External id, <0 -correlation.
                if kind == _K_RUNTIME:
                    link = args.get("correlation")
                    link = -link if type(link) is int and 0 < link < _MAX_ID else 0
                else:
                    link = args.get("External id")
                    if type(link) is not int or not 0 < link < _MAX_ID:
                        link = 0
                    if kind == _K_DEVICE:
                        if not link:
                            corr = args.get("correlation")
                            link = -corr if type(corr) is int and 0 < corr < _MAX_ID else 0
                        device_type = args.get("device_type")
                        if type(device_type) is str and len(self.labels) < 64:
                            self.labels.add(device_type)
                tkey = (ev.get("pid", 0), ev.get("tid", 0))
                try:
                    append = appenders.get(tkey)
                except TypeError:
                    raise TraceError(f"{path}: event #{index} ({name!r}) has an invalid 'pid'/'tid' {tkey!r}") from None
                if append is None:
                    thread = threads[tkey] = _Thread()
                    append = appenders[tkey] = (
                        thread.ts.append,
                        thread.dur.append,
                        thread.kid.append,
                        thread.link.append,
                    )
                append[0](round(ts * 1000))
                append[1](round(dur * 1000))
                append[2](kid)
                append[3](link)
        except TraceError:
            raise
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
            raise TraceError(f"{path}: malformed event #{index}: {exc}") from None
        finally:
            if gc_was_enabled:
                gc.enable()
        self.events += stream.events
        if any(open_b.values()):
            self.notes.append(f"{os.path.basename(path)}: {sum(map(len, open_b.values()))} 'B' event(s) never ended")
        self._finish_file(path, stream.metadata, threads, procs)

    def _add_flops(self, kid: int, flops: Any) -> None:
        if type(flops) in _NUM and flops >= 0 and not flops - flops:
            prev = self.flops[kid]
            self.flops[kid] = flops if prev is None else prev + flops

    def _metadata(self, ev: Mapping[str, Any], procs: dict[Any, list[str]]) -> None:
        args = ev.get("args")
        if type(args) is not dict:
            return
        what = ev.get("name")
        if what == "process_name":
            value = args.get("name")
        elif what == "process_labels":
            value = args.get("labels")
        else:
            return
        if isinstance(value, str):
            # An unhashable pid names nothing events could be matched to.
            with contextlib.suppress(TypeError):
                procs.setdefault(ev.get("pid"), []).append(value)

    def _begin_end(
        self,
        ev: Mapping[str, Any],
        ph: str,
        index: int,
        open_b: dict[Any, list[tuple[Any, ...]]],
        path: str,
    ) -> Optional[dict[str, Any]]:
        """Track a 'B'/'E' pair; return the equivalent complete event when a pair closes."""
        ts: Any = ev.get("ts")
        if type(ts) not in _NUM or ts - ts:
            raise TraceError(f"{path}: event #{index} (ph {ph!r}) has no numeric 'ts'")
        pid, tid = ev.get("pid", 0), ev.get("tid", 0)
        try:
            stack = open_b.setdefault((pid, tid), [])
        except TypeError:
            raise TraceError(f"{path}: event #{index} has an invalid 'pid'/'tid' ({pid!r}, {tid!r})") from None
        if ph == "B":
            name = ev.get("name")
            if type(name) is not str:
                raise TraceError(f"{path}: event #{index} (ph 'B') has no 'name' string")
            stack.append((name, ev.get("cat"), ts, ev.get("args")))
            return None
        if not stack:
            return None  # an 'E' whose 'B' came before the trace started
        name, cat, start, args = stack.pop()
        if ts < start:
            raise TraceError(f"{path}: event #{index} ({name!r}) ends before it begins")
        return {
            "ph": "X",
            "name": name,
            "cat": cat,
            "ts": start,
            "dur": ts - start,
            "pid": pid,
            "tid": tid,
            "args": args,
        }

    # -- per-file finish: nesting, self time, device attribution -------------------------
    def _finish_file(
        self, path: str, metadata: Mapping[str, Any], threads: dict[Any, _Thread], procs: dict[Any, list[str]]
    ) -> None:
        device_pids = {pid for pid, names in procs.items() if any(_DEVICE_PROC.search(n) for n in names)}
        for pid in device_pids:
            self.labels.update(procs[pid])
        props = metadata.get("deviceProperties")
        if isinstance(props, list) and props:
            self.labels.add("CUDA")
            first = props[0]
            if isinstance(first, dict) and isinstance(first.get("name"), str) and self.device_name is None:
                self.device_name = first["name"]
        if _NEURON_LAYOUT.search(os.path.dirname(os.path.abspath(path))) and os.path.basename(path).startswith(
            "trace.json"
        ):
            self.labels.add("NEURON")

        kind = self.kind
        # Device time per link id, from the device events of every timeline.
        device_by_link: dict[int, int] = {}
        for (pid, _tid), th in threads.items():
            on_dev_thread = pid in device_pids
            for k, link, d in zip(th.kid, th.link, th.dur):
                if on_dev_thread or kind[k] == _K_DEVICE:
                    self.has_device = True
                    if link:
                        device_by_link[link] = device_by_link.get(link, 0) + d
        for (pid, _tid), th in list(threads.items()):
            self._walk(th, pid in device_pids, device_by_link)
            del threads[(pid, _tid)]

    def _walk(self, th: _Thread, device_thread: bool, device_by_link: dict[int, int]) -> None:
        """Rebuild the nesting of one timeline (torch's rule) and add up self/total times."""
        ts, dur, kids, links = th.ts, th.dur, th.kid, th.link
        n = len(ts)
        if n == 0:
            return
        order: Iterable[int] = range(n)
        if not _is_sorted(ts, dur):
            # Parents before children: by start, then longest first (what torch sorts by).
            idx = sorted(range(n), key=dur.__getitem__, reverse=True)
            idx.sort(key=ts.__getitem__)
            order = idx
        kind, names = self.kind, self.names
        calls, cpu_self, cpu_total = self.calls, self.cpu_self, self.cpu_total
        dev_self, dev_total, on_device = self.dev_self, self.dev_total, self.on_device
        # A frame: [end, kid, duration, children's duration, own device time,
        #           device time incl. children, is-device, anchored-under-a-step,
        #           deferred only child, number of children, name]
        stack: list[list[Any]] = []
        top_level = 0

        def commit(k: int, own: int, d: int, own_dev: int, total_dev: int, is_dev: bool) -> None:
            if is_dev:
                dev_self[k] += own
                dev_total[k] += d
                on_device[k] = True
            else:
                cpu_self[k] += own
                cpu_total[k] += d
                dev_self[k] += own_dev
                dev_total[k] += total_dev

        def close(frame: list[Any]) -> None:
            own = frame[2] - frame[3]
            only = frame[8]
            if only is not None:
                # torch drops an op's only child when it has the same name (e.g. a
                # redispatched aten::div_) and lifts the child's work into the parent.
                calls[only[0]] -= 1
                own += only[1]
                frame[4] = only[3]
                frame[5] = only[4]
            if stack:
                parent = stack[-1]
                parent[5] += frame[5]
                if not frame[6] and parent[9] == 1 and parent[10] == frame[10] and not parent[6]:
                    parent[8] = (frame[1], own, frame[2], frame[4], frame[5], False)
                    return
            k = frame[1]
            if frame[6]:
                dev_self[k] += own
                dev_total[k] += frame[2]
                on_device[k] = True
            else:
                cpu_self[k] += own
                cpu_total[k] += frame[2]
                dev_self[k] += frame[4]
                dev_total[k] += frame[5]

        for i in order:
            t = ts[i]
            d = dur[i]
            e = t + d
            while stack:
                top = stack[-1]
                if t >= top[0] or e > top[0]:
                    stack.pop()
                    close(top)
                else:
                    break
            k = kids[i]
            kd = kind[k]
            is_dev = device_thread or kd == _K_DEVICE
            own_dev = 0
            link = links[i]
            if link and not is_dev:
                found = device_by_link.get(link)
                if found:
                    self.linked = True
                    if link > 0 or not stack:
                        own_dev = found
                    else:
                        # A runtime call matched by correlation: the device time belongs
                        # to the op that made the call, the nearest enclosing op frame.
                        target = stack[-1]
                        for frame in reversed(stack):
                            if kind[frame[1]] not in (_K_RUNTIME, _K_PY):
                                target = frame
                                break
                        target[4] += found
                        target[5] += found
            calls[k] += 1
            if stack:
                parent = stack[-1]
                parent[3] += d
                parent[9] += 1
                if parent[8] is not None:  # a second child: the first was not a duplicate
                    commit(*parent[8])
                    parent[8] = None
                anchored = parent[7]
                if kd == _K_OP and anchored:
                    top_level += 1
            else:
                anchored = False
            # Python frames are transparent for "called directly by the step".
            stack.append(
                [e, k, d, 0, own_dev, own_dev, is_dev, kd == _K_STEP or (kd == _K_PY and anchored), None, 0, names[k]]
            )
        while stack:
            close(stack.pop())
        self.top_level += top_level

    # -- result -----------------------------------------------------------------
    def result(self, files: Sequence[str]) -> Trace:
        label = _device_label(self.labels) if self.has_device else None
        ops: list[TraceOp] = []
        for kid, key in enumerate(self.key_list):
            if self.calls[kid] == 0:
                continue
            name, _cat, dims, types, concrete = key
            dev = self.on_device[kid]
            if dev:
                self_dev: Optional[float] = self.dev_self[kid] / 1000
                total_dev: Optional[float] = self.dev_total[kid] / 1000
            elif self.linked:
                self_dev, total_dev = self.dev_self[kid] / 1000, self.dev_total[kid] / 1000
            else:
                self_dev = total_dev = None
            flops = self.flops[kid]
            ops.append(
                TraceOp(
                    name=name,
                    on_device=dev,
                    calls=self.calls[kid],
                    self_cpu_us=self.cpu_self[kid] / 1000,
                    cpu_total_us=self.cpu_total[kid] / 1000,
                    self_device_us=self_dev,
                    device_total_us=total_dev,
                    input_dims=dims if isinstance(dims, tuple) else None,
                    input_dtypes=types if _all_str(types) else None,
                    concrete_inputs=concrete if _all_str(concrete) else None,
                    flops=None if flops is None else int(flops),
                )
            )
        notes = list(self.notes)
        if len(files) > 1:
            notes.append(f"summed over {len(files)} trace files")
        if self.has_device and not self.linked and any(not o.on_device for o in ops):
            notes.append("device events carry no link to host ops; host ops show no device time")
        return Trace(
            ops=tuple(ops),
            files=tuple(files),
            backend=label.lower() if label else "cpu",
            device_label=label,
            device_name=self.device_name,
            steps=self.steps,
            top_level_calls=self.top_level if self.steps else None,
            events=self.events,
            notes=tuple(notes),
        )


# -- helpers -------------------------------------------------------------------------


def _is_sorted(ts: array[int], dur: array[int]) -> bool:
    """True when events are ordered by start, and equal starts by longest first."""
    after = islice(ts, 1, None)
    if not all(map(operator.le, ts, after)):
        return False
    if not any(map(operator.eq, ts, islice(ts, 1, None))):
        return True
    return all(dur[i] >= dur[i + 1] for i in range(len(ts) - 1) if ts[i] == ts[i + 1])


def _freeze_dims(dims: Any) -> Any:
    # The common case, a list of shapes (lists of ints), as one C-level pass; a
    # tensor list or odd value raises TypeError later (unhashable) or here.
    if type(dims) is list:
        try:
            return tuple(map(tuple, dims))
        except TypeError:
            return _freeze_any(dims)
    return None


def _freeze_strs(values: Any) -> Any:
    return tuple(values) if type(values) is list else None


def _freeze_any(value: Any) -> Any:
    """Turn nested lists into nested tuples; anything else that is not a plain scalar becomes None."""
    if type(value) is list:
        return tuple(_freeze_any(v) for v in value)
    if value is None or type(value) in (int, float, str, bool):
        return value
    return None


def _all_str(values: Any) -> bool:
    return isinstance(values, tuple) and all(isinstance(v, str) for v in values)


def _flat_shapes(dims: Optional[tuple[Any, ...]]) -> Optional[tuple[Shape, ...]]:
    if dims is None:
        return None
    out: list[Shape] = []
    for d in dims:
        if isinstance(d, tuple) and all(type(x) is int for x in d):
            out.append(d)
        else:
            out.append(())
    return tuple(out)


def _device_label(labels: Iterable[str]) -> str:
    text = " ".join(labels)
    for pattern, label in (
        (r"neuron|\bNC\s*\d", "NEURON"),
        (r"\bTPU\b", "TPU"),
        (r"\bCUDA\b|\bGPU\b", "CUDA"),
        (r"\bXPU\b", "XPU"),
        (r"\bMTIA\b", "MTIA"),
        (r"\bHPU\b", "HPU"),
    ):
        if re.search(pattern, text, re.IGNORECASE):
            return label
    return "DEVICE"


def _add_opt(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None and b is None:
        return None
    return (a or 0.0) + (b or 0.0)


def _add_rows(a: OpRow, b: OpRow) -> OpRow:
    flops = _add_opt(a.flops, b.flops)
    return dataclasses.replace(
        a,
        input_dtypes=a.input_dtypes if a.input_dtypes == b.input_dtypes else None,
        calls=a.calls + b.calls,
        self_cpu_us=a.self_cpu_us + b.self_cpu_us,
        cpu_total_us=a.cpu_total_us + b.cpu_total_us,
        self_device_us=_add_opt(a.self_device_us, b.self_device_us),
        device_total_us=_add_opt(a.device_total_us, b.device_total_us),
        flops=None if flops is None else int(flops),
    )
