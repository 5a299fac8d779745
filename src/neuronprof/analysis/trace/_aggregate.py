"""The one aggregation of events into per-key sums, for trace files and for the live session's events.

[`EventAggregator`][neuronprof.analysis.trace.EventAggregator] takes kineto's
events one at a time; a trace file's reader (``_reader``) fills the same
per-thread arrays; both finish through ``_Aggregator._finish``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis.trace._model import Trace
from neuronprof.analysis.trace._rules import (
    _K_DEVICE,
    _K_PY,
    _K_RUNTIME,
    _K_STEP,
    _NEURON_LAYOUT,
    _SKIP_CATS,
    _add_flops,
    _is_sorted,
    _rank_of,
    is_container_lane,
    process_roles,
)
from neuronprof.analysis.trace._sums import _build, _Keys, _Sums, _Thread

# -- the aggregation ------------------------------------------------------------------
#
# One rule each, for every producer (kineto of PyTorch 1.8 to 2.x, CUDA, HIP,
# XPU, MTIA, PrivateUse1 backends, torch_npu, plain Chrome traces):
#
# * Times are integer nanoseconds, read from the text of the numbers (never
#   through a binary float: 1.7e15 µs has a float resolution of 0.25 µs).
# * Device events (device categories, or any event on a device process) never
#   nest: each is its own row with self time = duration, on every stream.
# * Host events nest per (pid, tid) as torch builds its tree: sorted by start,
#   longest first; an event is a child of the innermost open event it fits in.
# * A device event belongs to the runtime/driver call with the same
#   ``correlation``, and its time to the innermost host op around that call
#   (a ProfilerStep or record_function span included; the call itself when no
#   op encloses it). Only a device event whose correlation matches no runtime
#   call is tied to a host op through its ``External id``.
# * Every event is counted once, recursive same-name ops included.


class _Aggregator:
    """The one aggregation: per-timeline events in, per-key sums out (self/total times, device time, steps).

    A trace file's reader and the live session's kineto events
    (``EventAggregator``) both fill
    ``threads`` and call ``_finish``, so both tables follow the same rules.
    """

    def __init__(self, path: str, keys: _Keys) -> None:
        self.path = path
        self.keys = keys
        self.threads: dict[Any, _Thread] = {}
        self.procs: dict[Any, list[str]] = {}
        self.runtime_corr: set[int] = set()
        self.thread_names: dict[Any, str] = {}
        self.sums = _Sums()
        self.sums.files.append(path)
        # Whether the profiler stopped inside the last step (see ``_vocabulary.step_count``);
        # taken to unless the trace's ``neuronprof`` metadata says otherwise.
        self.stopped_in_last_step = True

    # -- per-file finish: device attribution, nesting, self time ---------------------------
    def _finish(self, metadata: Mapping[str, Any]) -> None:
        sums = self.sums
        keys = self.keys
        kind = keys.kind
        sums.grow(len(keys.keys))
        # A session's trace says whether its profiler stopped inside the last step.
        self.stopped_in_last_step = vocab.stopped_in_last_step(metadata, default=self.stopped_in_last_step)
        procs = self.procs
        analysis_pids, device_pids = process_roles(procs)
        for pid in device_pids:
            sums.evidence.extend(procs[pid])
        props = metadata.get("deviceProperties")
        if isinstance(props, list):
            for p in props:
                if isinstance(p, dict):
                    sums.evidence.extend(f"{k}={v}" for k, v in p.items() if isinstance(v, str))
            first = props[0] if props else None
            if isinstance(first, dict) and isinstance(first.get("name"), str):
                sums.device_name = first["name"]
        if _NEURON_LAYOUT.search(os.path.dirname(os.path.abspath(self.path))) and os.path.basename(
            self.path
        ).startswith("trace.json"):
            sums.evidence.append("neuron")
        sums.rank = _rank_of(self.path, metadata)

        is_device_kind = [k == _K_DEVICE for k in kind]
        calls, dev_self, dev_total, on_device = sums.calls, sums.dev_self, sums.dev_total, sums.on_device
        runtime_corr = self.runtime_corr
        dev_by_corr: dict[int, int] = {}
        dev_by_ext: dict[int, int] = {}
        unlinked = 0
        host: list[tuple[_Thread, Optional[list[int]]]] = []
        seen_kids: set[int] = set()
        # Derived views and container lanes: left out, counted for a note.
        derived: dict[tuple[str, str], int] = {}
        for (pid, tid), th in self.threads.items():
            device_rows: Iterable[int]
            host_rows: Optional[list[int]]
            if pid in analysis_pids:
                what = ("analysis", procs[pid][0])
                derived[what] = derived.get(what, 0) + len(th.kid)
                continue
            lane = self.thread_names.get((pid, tid)) if pid in device_pids else None
            if lane is not None and is_container_lane(lane):
                what = ("lane", lane.strip())
                derived[what] = derived.get(what, 0) + len(th.kid)
                continue
            if pid in device_pids:
                device_rows = range(len(th.kid))
                host_rows = []
            elif any(map(is_device_kind.__getitem__, th.kid)):
                device_rows = [i for i, k in enumerate(th.kid) if is_device_kind[k]]
                host_rows = [i for i, k in enumerate(th.kid) if not is_device_kind[k]]
            else:
                host.append((th, None))
                continue
            if host_rows:
                host.append((th, host_rows))
            kids, durs, corrs, exts = th.kid, th.dur, th.corr, th.ext
            for i in device_rows:
                k = kids[i]
                if kind[k] == _K_STEP:
                    continue  # the device-side copy of a step annotation
                d = durs[i]
                calls[k] += 1
                dev_self[k] += d
                dev_total[k] += d
                on_device[k] = True
                seen_kids.add(k)
                c = corrs[i]
                if c >= 0 and c in runtime_corr:
                    dev_by_corr[c] = dev_by_corr.get(c, 0) + d
                elif exts[i] >= 0:
                    x = exts[i]
                    dev_by_ext[x] = dev_by_ext.get(x, 0) + d
                else:
                    unlinked += d
        if seen_kids:
            sums.has_device = True
            for k in seen_kids:
                sums.evidence.append(str(keys.keys[k][1]))
        runtime_names = {keys.names[k] for k in range(len(kind)) if kind[k] == _K_RUNTIME}
        sums.evidence.extend(sorted(runtime_names)[:16])
        sums.evidence.extend({str(keys.keys[k][1]) for k in range(len(kind)) if kind[k] == _K_RUNTIME})
        for th, only in host:
            self._walk(th, only, dev_by_corr, dev_by_ext)
        self.threads.clear()
        base = os.path.basename(self.path)
        views = sorted(n for (k, n) in derived if k == "analysis")
        if views:
            count = sum(v for (k, _n), v in derived.items() if k == "analysis")
            sums.notes.append(
                f"{base}: {count:,} span(s) on {', '.join(map(repr, views))} are an analysis view derived from "
                "other events, not events; left out"
            )
        lanes = sorted(n for (k, n) in derived if k == "lane")
        if lanes:
            count = sum(v for (k, _n), v in derived.items() if k == "lane")
            sums.notes.append(
                f"{base}: {count:,} span(s) on the device lane(s) {', '.join(map(repr, lanes))} contain the ops of "
                "another lane; left out (only ops are counted)"
            )
        if sums.linked:
            sums.unlinked_ns += unlinked + sum(dev_by_corr.values()) + sum(dev_by_ext.values())

    def _walk(
        self, th: _Thread, rows: Optional[list[int]], dev_by_corr: dict[int, int], dev_by_ext: dict[int, int]
    ) -> None:
        """Nest the host events of one timeline (torch's rule) and add up self/total and device times."""
        ts, dur, kids, corrs, exts = th.ts, th.dur, th.kid, th.corr, th.ext
        if rows is None:
            n = len(ts)
            if n == 0:
                return
            order: Iterable[int] = range(n)
            if not _is_sorted(ts, dur):
                # Parents before children: by start, then longest first (what torch sorts by).
                idx = sorted(range(n), key=dur.__getitem__, reverse=True)
                idx.sort(key=ts.__getitem__)
                order = idx
        else:
            rows = sorted(rows, key=dur.__getitem__, reverse=True)
            rows.sort(key=ts.__getitem__)
            order = rows
        sums = self.sums
        kind, names = self.keys.kind, self.keys.names
        calls, cpu_self, cpu_total = sums.calls, sums.cpu_self, sums.cpu_total
        dev_self, dev_total = sums.dev_self, sums.dev_total
        # A frame: [end, key, duration, children's duration, own device time,
        #           device time incl. children, directly under a step (through Python frames),
        #           index of the step span in ``step_work`` (-1 when not a step),
        #           inside the profiler's or neuronprof's own frames, left out as such]
        stack: list[list[Any]] = []
        frame_flags: dict[int, tuple[bool, bool]] = {}  # per key: (own frame, support frame)
        own_cut_end = -1  # end of the latest own frame that a crossing span cut off the stack
        top_level = 0
        step_work: list[bool] = []  # per step span, in start order: whether any event is nested in it
        linked = False
        pop = stack.pop

        for i in order:
            t = ts[i]
            d = dur[i]
            e = t + d
            while stack:
                top = stack[-1]
                if t >= top[0] or e > top[0]:
                    pop()
                    if top[8] and t < top[0] and top[0] > own_cut_end:
                        own_cut_end = top[0]
                    k = top[1]
                    if not top[9]:
                        cpu_self[k] += top[2] - top[3]
                        cpu_total[k] += top[2]
                    dev_self[k] += top[4]
                    dev_total[k] += top[5]
                    if stack:
                        stack[-1][5] += top[5]
                else:
                    break
            k = kids[i]
            kd = kind[k]
            own = 0
            if kd == _K_RUNTIME:
                c = corrs[i]
                if c >= 0 and dev_by_corr:
                    found = dev_by_corr.pop(c, 0)
                    if found:
                        linked = True
                        for frame in reversed(stack):
                            if kind[frame[1]] not in (_K_RUNTIME, _K_PY):
                                frame[4] += found
                                frame[5] += found
                                break
                        else:  # no op around the call (e.g. a graph launch): the call carries it
                            own = found
            else:
                x = exts[i]
                if x >= 0 and dev_by_ext:
                    own = dev_by_ext.pop(x, 0)
                    if own:
                        linked = True
            # Python frames called by the profiler's or neuronprof's own frames (signal
            # handling, metadata) are their work, not the program's: no row, as the
            # profiler's own frames themselves (``vocab.is_row``).
            # Under them means nested in one, or inside the span of one that a crossing
            # span (a ProfilerStep opened inside the frame) cut off the stack. The
            # program's own frames under them (``Session.run``, ``compare``) stay rows,
            # and so does all they call.
            parent_own = bool(stack) and stack[-1][8]
            hidden = False
            in_own = parent_own
            if kd == _K_PY:
                flags = frame_flags.get(k)
                if flags is None:
                    flags = frame_flags[k] = (vocab.is_own_frame(names[k]), vocab.is_support_frame(names[k]))
                cut = e <= own_cut_end and not (stack and kind[stack[-1][1]] == _K_PY)
                hidden = flags[1] and (parent_own or cut)
                in_own = hidden or flags[0]
            if not hidden:
                calls[k] += 1
            anchored = False
            if stack:
                parent = stack[-1]
                parent[3] += d
                if parent[7] >= 0:
                    step_work[parent[7]] = True
                if parent[6]:
                    if vocab.counts_as_call(kd, names[k]):
                        top_level += 1
                    elif vocab.is_transparent(kd):
                        anchored = True  # Python frames and annotations: the ops under them count
            if kd == _K_STEP:
                anchored = True
                step_work.append(False)
            stack.append([e, k, d, 0, own, own, anchored, len(step_work) - 1 if kd == _K_STEP else -1, in_own, hidden])
        while stack:
            top = pop()
            k = top[1]
            if not top[9]:
                cpu_self[k] += top[2] - top[3]
                cpu_total[k] += top[2]
            dev_self[k] += top[4]
            dev_total[k] += top[5]
            if stack:
                stack[-1][5] += top[5]
        sums.top_level += top_level
        sums.steps += vocab.step_count(step_work, stopped_in_last=self.stopped_in_last_step)
        sums.linked |= linked


class EventAggregator(_Aggregator):
    """Sums events handed over one at a time exactly as a trace file's events are summed.

    The live ``session.table()`` feeds kineto's own event list
    (``profile.kineto_results.events()``: the events kineto writes into the
    Chrome trace, with integer-ns times) through this, so the live table and
    ``neuronprof summarize`` of the same run's export come from one aggregation:
    the same rows, calls, self and total times, device attribution, steps and
    top-level calls.

    Args:
        source: What the events come from, for notes (e.g. ``"<session>"``).
        stopped_in_last_step: Whether the profiler stopped while the last step was
            open (the live session knows; see ``neuronprof._vocabulary.step_count``).
    """

    def __init__(self, source: str = "<events>", *, stopped_in_last_step: bool = True) -> None:
        super().__init__(source, _Keys())
        self.stopped_in_last_step = stopped_in_last_step

    def add(
        self,
        name: str,
        cat: str,
        start_ns: int,
        duration_ns: int,
        thread: tuple[Any, Any],
        *,
        input_dims: Optional[list[Any]] = None,
        input_types: Optional[list[str]] = None,
        correlation: int = -1,
        external_id: int = -1,
        flops: Optional[int] = None,
        concrete_inputs: Optional[list[str]] = None,
    ) -> None:
        """Add one event (a span: an op, an annotation, a runtime call, a kernel...).

        Args:
            name: The event's name, as the trace writes it.
            cat: Its category: kineto's activity type (``"cpu_op"``, ``"kernel"``...).
            start_ns: Start, integer ns (any origin, the same for every event).
            duration_ns: Duration, integer ns.
            thread: The timeline it is on, e.g. ``("host", tid)`` or ``("device 0", stream)``.
            input_dims: Recorded input shapes (``record_shapes=True``), as the trace's ``Input Dims``.
            input_types: Recorded input dtypes, as the trace's ``Input type``.
            correlation: The trace's ``correlation`` (runtime calls and device work), -1 when none.
            external_id: The trace's ``External id``, -1 when none.
            flops: Estimated FLOPs (``with_flops=True``).
            concrete_inputs: Recorded scalar inputs as text (``""`` for a tensor), as the
                trace's ``Concrete Inputs``: the FLOP formulas of ops with scalar arguments read them.
        """
        if cat in _SKIP_CATS:  # as a trace file's reader does
            self.sums.skipped[cat] = self.sums.skipped.get(cat, 0) + 1
            return
        dims = None if input_dims is None else json.dumps(input_dims).encode()
        types = None if input_types is None else json.dumps(input_types).encode()
        concrete = None if concrete_inputs is None else json.dumps(concrete_inputs).encode()
        key = (name, cat, dims, types, concrete)
        keys = self.keys
        kid = keys.index.get(key)
        if kid is None:
            kid = keys.add(key)
        if flops:
            _add_flops(self.sums.flops, kid, flops)
        if keys.kind[kid] == _K_RUNTIME and correlation >= 0:
            self.runtime_corr.add(correlation)
        th = self.threads.get(thread)
        if th is None:
            th = self.threads[thread] = _Thread()
        th.ts.append(start_ns)
        th.dur.append(duration_ns)
        th.kid.append(kid)
        th.corr.append(correlation)
        th.ext.append(external_id)
        self.sums.events += 1

    def trace(self) -> Trace:
        """Nest, attribute and sum the events added so far into a [`Trace`][neuronprof.analysis.Trace]; once."""
        self._finish({})
        return _build(self.sums, self.keys, self.sums.files)
