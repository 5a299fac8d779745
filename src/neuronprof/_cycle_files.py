"""Files of a recorded cycle: kineto's one-time save kept as a cache, Chrome trace exports, collapsed stacks.

Split from ``_kineto``: what reads a cycle's events into the model stays there;
what writes a cycle's files is here.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import mmap
import os
import re
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from neuronprof._io import atomic_write, clone_or_copy, copy_trace
from neuronprof._vocabulary import K_DEVICE, K_PY, is_own_frame, is_step_row
from neuronprof.errors import warn_user

if TYPE_CHECKING:
    from neuronprof._kineto import Cycle
    from neuronprof.analysis.trace import EventTable

__all__ = ["escape_names", "route_torch_export", "save_native_trace", "take_save", "write_chrome_trace", "write_stacks"]


def take_save(cycle: Cycle) -> None:
    """Take kineto's save of ``cycle`` into its cache now, if it is still to be taken (see ``Cycle.save``)."""
    save, cycle.save = cycle.save, None
    if save is not None:
        save(cycle)


def save_native_trace(cycle: Cycle, dest: Path) -> bool:
    """Save the cycle with kineto's own writer (C++, streaming) into ``dest``, once.

    kineto's save works once per cycle ("Trace is already saved" afterwards), so
    the session takes it into a private cache, the first time an export needs
    it (or when the cycle ends, before a backend exporter that may consume it),
    and copies the cache for every export. The cycle's own ``export_chrome_trace``
    (what ``s.profiler.export_chrome_trace`` and backend exporters call) copies
    the cache too (``route_torch_export``), so torch's API keeps working.

    Returns:
        True when ``dest`` holds the trace; False when kineto could not save it
        (already consumed, or no kineto results), so the caller falls back.
    """
    results = getattr(cycle.profile, "kineto_results", None)
    save = getattr(results, "save", None)
    if save is None:
        return False
    try:
        save(str(dest))
    except RuntimeError:
        dest.unlink(missing_ok=True)
        return False
    if not _complete_json(dest):
        # kineto logs a failed write (a full disk) instead of raising: never keep half a trace.
        dest.unlink(missing_ok=True)
        return False
    escape_names(dest)
    # Read-only, and stamped: a change by anything else is noticed before the next export.
    dest.chmod(0o444)
    cycle.cache = dest
    cycle.cache_stamp = _stamp(dest)
    return True


# kineto writes an event's name as it is, one ``"name": "…",`` line per event: a Python frame's
# file path with a double quote (or a control character) in it makes the trace invalid JSON, for
# every JSON reader (torch's own exporter writes the same). A name line whose value is not a
# valid JSON string is found in one pass of the regex engine over the mapped file, without
# reading the file into Python; only then is the file rewritten, with those names escaped.
_NAME_LINE = re.compile(rb'^([ \t]*"name": ")(.*)(",?)(\r?)$', re.S)
# A name value that is a valid JSON string, then the end of the line, the next key or the end
# of the object (kineto's one-line metadata events). The
# patterns start with a literal, so the engine skips from one "name" key to the next; the
# first (atomic, no backtracking) finds names with anything but plain characters, the
# second, run only on those, tells a valid escape from an invalid name.
# ((?=(x*))\1 is an atomic x*, which Python's re spells x*+ only from 3.11.)
_AFTER_NAME = rb'(?:,?\r?$|, "[A-Za-z _]+": |\s*\})'
_PLAIN_NAME = re.compile(rb'"name": "(?=([^"\\\x00-\x1f]*))\1(?!"' + _AFTER_NAME + rb")", re.M)
_VALID_NAME = rb'(?:[^"\\\x00-\x1f]|\\["\\/bfnrtu])*"' + _AFTER_NAME
_BAD_NAME_LINE = re.compile(rb'"name": "(?!' + _VALID_NAME + rb")", re.M)


def _next_bad_name(view: Any, pos: int) -> Optional[re.Match[bytes]]:
    candidate = _PLAIN_NAME.search(view, pos)
    while candidate is not None:
        bad = _BAD_NAME_LINE.match(view, candidate.start())
        if bad is not None:
            return bad
        candidate = _PLAIN_NAME.search(view, candidate.end())
    return None


def escape_names(path: Path) -> bool:
    """Make the event names of kineto's save in ``path`` valid JSON strings, in place.

    Names kineto wrote unescaped (a ``"`` in a source path under ``with_stack``
    or in a ``record_function`` label, a control character) are escaped; in those
    names, bytes that are not UTF-8 are replaced by U+FFFD. Every other byte of
    the file is kept. (Names that are only not UTF-8 are not looked for: Python
    labels are UTF-8, and code from a path that is not is recorded without stacks.)

    Returns:
        True when a name had to be escaped (the file was rewritten).
    """
    with open(path, "rb") as fin:
        if os.fstat(fin.fileno()).st_size == 0:
            return False
        with _mapped(fin) as view:
            if _next_bad_name(view, 0) is None:
                return False
    atomic_write(path, functools.partial(_write_escaped, path), overwrite=True)
    return True


def _write_escaped(source: Path, dest: Path) -> None:
    """Copy ``source`` into ``dest`` as it is between the bad name lines; rewrite only those."""
    with open(source, "rb") as fin, _mapped(fin) as view, open(dest, "wb") as fout:
        done = 0
        bad = _next_bad_name(view, 0)
        while bad is not None:
            start = view.rfind(b"\n", 0, bad.start()) + 1
            end = view.find(b"\n", start)
            end = len(view) if end < 0 else end
            fout.write(view[done:start])
            fout.write(_escaped_name_line(view[start:end]))
            done = end
            bad = _next_bad_name(view, end)
        fout.write(view[done:])


def _mapped(f: Any) -> mmap.mmap:
    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _escaped_name_line(line: bytes) -> bytes:
    match = _NAME_LINE.match(line)
    if match is None:  # pragma: no cover - _BAD_NAME_LINE only finds lines of this shape
        return line
    text = match.group(2).decode("utf-8", "replace")
    escaped = json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8")
    return match.group(1) + escaped + match.group(3) + match.group(4)


def route_torch_export(cycle: Cycle) -> None:
    """Make the cycle's ``export_chrome_trace`` copy the cache (taken first if need be), not spend kineto's save."""
    profile = cycle.profile
    # Neither the profile nor the cycle is held strongly here: a reference cycle would keep
    # every cycle's events alive until a full garbage collection (repeat=0 would grow).
    own = weakref.ref(profile)
    record = weakref.ref(cycle)
    original = type(profile).export_chrome_trace

    def export_chrome_trace(path: str, metadata: Any = None, use_python_export: bool = False, **more: Any) -> None:
        # torch 2.15 adds cuda_graph_annotations, graph_lanes and default_stream (and its
        # torch.profiler.profile passes them on every export); any but their defaults asks
        # for torch's Python exporter, which rewrites the events, so the cache cannot serve it.
        rewrites = bool(more.get("cuda_graph_annotations")) or more.get("graph_lanes", "none") != "none"
        kept = record()
        plain_copy = not (use_python_export or rewrites)
        if plain_copy and kept is not None:
            take_save(kept)
        if plain_copy and kept is not None and kept.cache is not None and _cache_intact(kept, kept.cache):
            copy_trace(kept.cache, Path(path))
            return
        if use_python_export or more:
            original(own(), path, metadata, use_python_export=use_python_export, **more)
        else:
            original(own(), path, metadata)

    def export_stacks(path: str, metric: str = "self_cpu_time_total") -> None:
        # torch's export_stacks reads stacks that only kineto's verbose mode records; the
        # session reads them from the Python-frame events instead (see write_stacks).
        kept = record()
        if kept is not None:
            write_stacks(kept, Path(path), metric)

    export_chrome_trace.__doc__ = original.__doc__
    export_stacks.__doc__ = type(profile).export_stacks.__doc__
    # Attributes of this one profile object (the session's own), not a change to torch.
    profile.export_chrome_trace = export_chrome_trace
    profile.export_stacks = export_stacks


def _complete_json(path: Path) -> bool:
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            f.seek(max(0, size - 64))
            return size > 0 and f.read().rstrip().endswith(b"}")
    except OSError:
        return False


def _python_export_supported(profile: Any) -> bool:
    try:
        return "use_python_export" in inspect.signature(profile.export_chrome_trace).parameters
    except (TypeError, ValueError):
        return False


def _stamp(path: Path) -> tuple[int, ...]:
    # ctime changes with any write, truncation or chmod, and cannot be set back by a program.
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _cache_intact(cycle: Cycle, cache: Path) -> bool:
    """True while the cache is the file kineto wrote; else it is dropped (with a warning)."""
    try:
        intact = _stamp(cache) == cycle.cache_stamp
    except OSError:
        intact = False
    if not intact:
        warn_user(
            f"neuronprof's private copy of cycle {cycle.index}'s trace ({cache}) was changed or removed by "
            "another program; exports of this cycle are now written by torch's Python exporter from the "
            "recorded events, which differs from torch's own save (memory events as slices, fewer header keys)"
        )
        with contextlib.suppress(OSError):
            cache.unlink(missing_ok=True)
        cycle.cache = None
        cycle.cache_stamp = None
    return intact


def _export_cache(cycle: Cycle, cache: Path, dest: Path) -> bool:
    """Write the cached trace to ``dest``; False when the cache can no longer be trusted.

    The cache is checked against its stamp before and after the copy, so a cache
    changed by anything else is never exported as if it were kineto's save.
    """
    if not _cache_intact(cycle, cache):
        return False
    clone_or_copy(cache, dest)
    if not _cache_intact(cycle, cache):
        dest.unlink(missing_ok=True)
        return False
    return True


def write_chrome_trace(cycle: Cycle, dest: Path, metadata: dict[str, Any]) -> None:
    """Write ``cycle``'s Chrome trace to ``dest`` (gzipped when it ends in ``.gz``).

    The trace is kineto's own save of the cycle (the cache, or the file the
    backend's exporter wrote from it), so it holds exactly the events and header
    torch.profiler writes, neuronprof's metadata included (the session hands it
    to kineto while recording). Each export is a file of its own (a copy, or a
    reflink where the file system has them), never a second name of the cache.
    Without either (or when the cache was changed by another program), torch's
    Python exporter writes the trace from the cycle's events, with ``metadata`` added.

    Raises:
        OSError: The write failed (disk full, file too large, permission denied).
        RuntimeError: The cycle's events were dropped and no saved copy exists.
    """
    take_save(cycle)
    if cycle.cache is not None:
        if _export_cache(cycle, cycle.cache, dest):
            return
    elif cycle.backend_trace is not None and cycle.backend_trace.exists():
        copy_trace(cycle.backend_trace, dest)
        return
    profile = cycle.profile
    if profile is None or not _python_export_supported(profile):
        raise RuntimeError(
            "no trace of this cycle is left to export: kineto's one-time save was used by another tool "
            "(or neuronprof's copy of it was changed by another program) and its events are gone; "
            "upgrade torch (>= 2.13) for repeatable exports"
        )
    encoded = {k: json.dumps(v) for k, v in metadata.items()}
    profile.export_chrome_trace(str(dest), metadata=encoded, use_python_export=True)


def _frame_file(name: str) -> str:
    # torch writes a Python frame as "path/file.py(line): function".
    return name.replace("\\", "/").split("(", 1)[0]


def _is_library_frame(name: str) -> bool:
    """A Python-frame event of a torch or neuronprof file: their Python overhead, not an operator."""
    file = _frame_file(name)
    return file.endswith(".py") and (file.startswith("torch/") or file.startswith("neuronprof/") or is_own_frame(name))


@functools.lru_cache(maxsize=4096)
def _stdlib_file(file: str) -> bool:
    import sysconfig

    return file.endswith(".py") and os.path.isfile(os.path.join(sysconfig.get_paths()["stdlib"], file))


def _run_by_the_instrument(chain: list[str]) -> bool:
    """True when the nearest caller that is neither torch, the standard library nor a builtin is the profiler.

    ``chain`` is the event's stack, innermost first. Work that
    torch.profiler or neuronprof does around each step (signal handling,
    metadata, step counting) shows with the user's frame as its outermost caller,
    once their own frames are left out; this tells it from the user's work.
    """
    for name in chain:
        if is_own_frame(name):
            return True
        file = _frame_file(name)
        if name.startswith("<") or file.startswith("torch/") or _stdlib_file(file):
            continue
        return False
    return False


_UNSEEN: Any = object()


def write_stacks(cycle: Cycle, dest: Path, metric: str) -> None:
    """Write the cycle's collapsed stacks for flame-graph tools: ``frame;frame;op value`` per line.

    As torch's ``export_stacks`` (Python frames outermost first, blanks as ``_``,
    the value the op's ``metric`` in µs: ``self_cpu_time_total``, or
    ``self_device_time_total``, the device time of the work it launched), with the
    op itself as the innermost frame; equal stacks are summed. Left out: the
    profiler's and neuronprof's own frames, work they run around each step
    (whatever it calls), and leaf frames of torch's or neuronprof's Python files
    (their Python overhead).

    Read from the cycle's event table: an op's stack is the chain of Python-frame
    spans around it on its thread (torch's Python tracer), so with_stack needs no
    verbose mode (whose "Call stack" field kineto writes unescaped); an op's self
    time is its span less its children's, nested as torch nests them.

    Raises:
        RuntimeError: The cycle's events were dropped (``keep_cycles``).
    """
    if cycle.events is None and cycle.read is None:
        raise RuntimeError("this cycle's events were dropped; no stacks can be written for it")
    events = cycle.events if cycle.read is None else cycle.read(cycle)
    assert events is not None
    totals = _collapsed(events, device=metric != "self_cpu_time_total")
    with open(dest, "w", encoding="utf-8") as fout:
        fout.writelines(f"{k} {v}\n" for k, v in totals.items())


def _collapsed(events: EventTable, *, device: bool) -> dict[str, int]:
    """Value (µs) per collapsed stack of an event table's host ops; see ``write_stacks``."""
    kind, names = events.keys.kind, events.keys.raw_names
    device_ns: dict[int, int] = {}  # per op's correlation id: the device time of the work it launched
    if device:
        for _where, th, _on_device in events.timelines():
            for k, d, x in zip(th.kid, th.dur, th.ext):
                if kind[k] == K_DEVICE and x >= 0:
                    device_ns[x] = device_ns.get(x, 0) + d
    clean = str.maketrans({" ": "_", ";": ":", "\n": "_", "\t": "_"})
    # A step holds few distinct op names and enclosing frames, repeated by every call: each
    # is judged and cleaned once (None: left out).
    shown_of: dict[int, Optional[str]] = {}
    prefixes: dict[tuple[str, ...], Optional[str]] = {}
    totals: dict[str, int] = {}

    def add(k: int, chain: tuple[str, ...], self_ns: int, ext: int) -> None:
        shown = shown_of.get(k, _UNSEEN)
        if shown is _UNSEEN:
            name = names[k]
            own = kind[k] == K_PY or is_step_row(name) or is_own_frame(name) or _is_library_frame(name)
            shown = shown_of[k] = None if own else name.translate(clean)
        if shown is None:
            return
        prefix = prefixes.get(chain, _UNSEEN)
        if prefix is _UNSEEN:
            prefix = prefixes[chain] = (
                None
                if not chain or _run_by_the_instrument(list(chain))
                else "".join(f.translate(clean) + ";" for f in reversed(chain) if not is_own_frame(f))
            )
        value = (device_ns.get(ext, 0) if device else self_ns) // 1000
        if prefix is not None and value > 0:
            totals[prefix + shown] = totals.get(prefix + shown, 0) + value

    for _where, th, on_device in events.timelines():
        if on_device:
            continue
        ts, dur, kid, ext = th.ts, th.dur, th.kid, th.ext
        # Nested as torch nests a thread's events (start order, longest first; a span is a
        # parent while the next one starts before it ends and ends within it).
        # Open spans: [end, key, duration, children's time, Python frames innermost first, ext].
        stack: list[list[Any]] = []
        for i in sorted(range(len(ts)), key=lambda j: (ts[j], -dur[j])):
            start, end = ts[i], ts[i] + dur[i]
            while stack and (start >= stack[-1][0] or end > stack[-1][0]):
                e = stack.pop()
                add(e[1], e[4], e[2] - e[3], e[5])
            chain: tuple[str, ...] = stack[-1][4] if stack else ()
            if stack:
                stack[-1][3] += dur[i]
            k = kid[i]
            stack.append([end, k, dur[i], 0, (names[k], *chain) if kind[k] == K_PY else chain, ext[i]])
        while stack:
            e = stack.pop()
            add(e[1], e[4], e[2] - e[3], e[5])
    return totals
