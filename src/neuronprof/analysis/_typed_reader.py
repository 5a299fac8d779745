"""Read a Chrome/Perfetto JSON trace as batches of the few fields the trace loader reads.

With msgspec installed (the ``fast`` extra), the text of the ``traceEvents`` array
is cut into pieces of a few MiB at event boundaries and each piece is decoded in
one call into typed structs that skip every other field: several times faster than
the stdlib scanner, and memory holds one piece at a time. Without msgspec, or for
any file the fast path cannot read, the stdlib
[`EventStream`][neuronprof.analysis._eventstream.EventStream] is used: it is
slower, and it is what reports precise errors for malformed files.

``msgspec`` and ``_FAST_CHUNK`` are read from this module's globals at each read,
so a test (or a benchmark) can switch the fast path off here.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from typing import Any, Optional

from neuronprof.analysis._eventstream import EventStream, open_trace
from neuronprof.analysis.errors import TraceError

__all__ = ["FastPathFailed", "TraceReader"]

_FAST_CHUNK = 4 << 20
_TRACE_EVENTS_KEY = b'"traceEvents"'
_COMMA_AFTER = re.compile(rb"[ \t\n\r]*,")
_OPEN_ARRAY = re.compile(rb"[ \t\n\r]*:[ \t\n\r]*\[")
_MAX_HEAD = 64 << 20  # metadata before the events larger than this: not a trace we can cut up
_SPLIT_TRIES = 8

try:  # optional: the ``fast`` extra
    import msgspec
except ImportError:  # pragma: no cover - exercised by the fallback tests through TraceReader(fast=False)
    msgspec = None  # type: ignore[assignment]


class FastPathFailed(Exception):
    """The fast reader cannot read this file; read it again with the stdlib reader."""


class PyArgs:
    """The ``args`` fields the loader reads, as the stdlib reader builds them (the msgspec ``Args`` twin).

    ``dims``, ``types`` and ``concrete`` hold the JSON text of the value (bytes),
    which is hashable and decoded only once per distinct value.
    """

    __slots__ = (
        "correlation",
        "ext",
        "ext_lower",
        "dims",
        "dims_legacy",
        "types",
        "concrete",
        "flops",
        "device_type",
        "sequence_id",
        "name",
        "labels",
    )

    def __init__(self, d: dict[str, Any]) -> None:
        get = d.get
        self.correlation = get("correlation")
        self.ext = get("External id")
        self.ext_lower = get("external id")
        self.dims = _json_bytes(get("Input Dims"))
        self.dims_legacy = _json_bytes(get("Input dims"))
        self.types = _json_bytes(get("Input type"))
        self.concrete = _json_bytes(get("Concrete Inputs"))
        self.flops = get("flops")
        self.device_type = get("device_type")
        self.sequence_id = get("nrt_sequence_id")
        self.name = get("name")
        self.labels = get("labels")


class PyEvent:
    """The fields of one event the loader reads (the msgspec ``Event`` twin)."""

    __slots__ = ("ph", "name", "cat", "pid", "tid", "ts", "dur", "args")

    def __init__(self, d: dict[str, Any]) -> None:
        get = d.get
        self.ph = get("ph")
        self.name = get("name")
        self.cat = get("cat")
        self.pid = get("pid")
        self.tid = get("tid")
        self.ts = get("ts")
        self.dur = get("dur")
        args = get("args")
        self.args = PyArgs(args) if type(args) is dict else None


def _json_bytes(value: Any) -> Optional[bytes]:
    return None if value is None else json.dumps(value, separators=(",", ":")).encode()


_NO_RAW: Any = None

if msgspec is not None:

    class Args(msgspec.Struct, gc=False):
        """The ``args`` fields the loader reads; every other field is skipped unparsed."""

        correlation: Any = None
        ext: Any = msgspec.field(name="External id", default=None)
        ext_lower: Any = msgspec.field(name="external id", default=None)
        # Raw: kept as JSON text (skipped, not decoded); None when absent.
        dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_NO_RAW)
        dims_legacy: msgspec.Raw = msgspec.field(name="Input dims", default=_NO_RAW)
        types: msgspec.Raw = msgspec.field(name="Input type", default=_NO_RAW)
        concrete: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_NO_RAW)
        flops: Any = None
        device_type: Any = None
        # Neuron Runtime's id of the execution an event ran (TorchNeuron's framework trace).
        sequence_id: Any = msgspec.field(name="nrt_sequence_id", default=None)
        name: Any = None
        labels: Any = None

    class Event(msgspec.Struct, gc=False):
        """The fields of one event the loader reads; every other field is skipped unparsed."""

        ph: Any = None
        name: Any = None
        cat: Any = None
        pid: Any = None
        tid: Any = None
        ts: Any = None
        dur: Any = None
        args: Optional[Args] = None

    class _Tail(msgspec.Struct, gc=False):
        traceEvents: list[Event]  # noqa: N815 - the trace's own key

    # float_hook=str: a number with a fraction or exponent arrives as its text, so
    # that timestamps are converted to integer nanoseconds without float rounding.
    _BATCH = msgspec.json.Decoder(list[Event], float_hook=str)
    _TAIL = msgspec.json.Decoder(_Tail, float_hook=str)
    _RAW_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])
    _ANY = msgspec.json.Decoder()


class TraceReader:
    """Read one trace file as batches of events (objects with ``ph``, ``name``, ``ts``... attributes).

    Numbers with a fraction arrive as text (``str``), integers as ``int``, so
    that timestamps can be read exactly. Top-level members other than
    ``traceEvents`` are in :attr:`metadata` once iteration has finished.

    Args:
        path: The trace file (``.json`` or ``.json.gz``).
        fast: Use the msgspec reader (raises [`FastPathFailed`] on anything it
            cannot read; read the file again with ``fast=False`` then). ``None``:
            fast when msgspec is installed.
    """

    def __init__(self, path: str, *, fast: Optional[bool] = None) -> None:
        self.path = path
        self.fast = (msgspec is not None) if fast is None else (fast and msgspec is not None)
        self.metadata: dict[str, Any] = {}
        self.events = 0
        self.repair_notes: list[str] = []  # what the stdlib reader changed to read a file torch wrote unescaped

    def batches(self) -> Iterator[list[Any]]:
        """Yield lists of events, in file order.

        Raises:
            TraceError: The file cannot be read as a trace (stdlib reader).
            FastPathFailed: The fast reader cannot read it (only with ``fast=True``).
        """
        if self.fast:
            yield from self._fast_batches()
            return
        stream = EventStream(self.path, exact=True)
        batch: list[Any] = []
        for event in stream:
            batch.append(PyEvent(event))
            if len(batch) >= 4096:
                self.events = stream.events
                yield batch
                batch = []
        self.events = stream.events
        self.metadata = stream.metadata
        self.repair_notes = stream.repair_notes()
        if batch:
            yield batch

    # -- the msgspec reader --------------------------------------------------------------
    def _fast_batches(self) -> Iterator[list[Any]]:
        try:
            binary = open_trace(self.path)
        except TraceError:
            raise FastPathFailed from None
        try:
            yield from self._fast(binary)
        except (msgspec.DecodeError, msgspec.ValidationError, OSError, EOFError, zlib.error, RecursionError) as exc:
            raise FastPathFailed(str(exc)) from None
        finally:
            binary.close()

    def _fast(self, binary: Any) -> Iterator[list[Any]]:
        buf = b""
        eof = False

        def more() -> bool:
            nonlocal buf, eof
            data = binary.read(_FAST_CHUNK)
            if not data:
                eof = True
                return False
            buf += data
            return True

        # The head: up to the '[' that opens the events.
        more()
        if buf.startswith(b"\xef\xbb\xbf"):
            buf = buf[3:]
        start = len(buf) - len(buf.lstrip())
        while start == len(buf) and more():
            start = len(buf) - len(buf.lstrip())
        if start == len(buf):
            raise FastPathFailed("empty")
        array_format = buf[start : start + 1] == b"["
        if array_format:
            pos = start + 1
        elif buf[start : start + 1] == b"{":
            pos = -1
            search_from = start
            while pos < 0:
                at = buf.find(_TRACE_EVENTS_KEY, search_from)
                if at < 0:
                    if len(buf) > _MAX_HEAD or not more():
                        raise FastPathFailed("no traceEvents")
                    continue
                m = _OPEN_ARRAY.match(buf, at + len(_TRACE_EVENTS_KEY))
                if m is None or m.end() >= len(buf):
                    if m is None and at + 64 < len(buf):
                        search_from = at + 1
                    elif not more():
                        raise FastPathFailed("no traceEvents array")
                    continue
                head = buf[start:at].rstrip()
                # The members before the events: `{` alone, or `{..., ` ending in a comma.
                try:
                    members = _ANY.decode(head[:-1] + b"}" if head.endswith(b",") else head + b"}")
                except msgspec.DecodeError:
                    search_from = at + 1
                    continue
                if type(members) is not dict:
                    raise FastPathFailed("not an object")
                self.metadata.update(members)
                pos = m.end()
        else:
            raise FastPathFailed("not JSON")

        # The events: pieces cut after an event's closing brace and its comma. A cut
        # inside a string or a nested value leaves invalid JSON (an unterminated
        # string or an unclosed bracket), so a piece that decodes was cut right;
        # one that does not is cut again earlier.
        need = _FAST_CHUNK
        while True:
            while not eof and len(buf) - pos < need:
                more()
            if eof:
                break
            end = len(buf)
            cut = -1
            for _ in range(_SPLIT_TRIES):
                brace = buf.rfind(b"}", pos, end)
                if brace < 0:
                    break
                m = _COMMA_AFTER.match(buf, brace + 1)
                end = brace
                if m is None or m.end() >= len(buf):
                    continue
                try:
                    batch = _BATCH.decode(b"".join((b"[", memoryview(buf)[pos : brace + 1], b"]")))
                except msgspec.ValidationError:
                    raise
                except msgspec.DecodeError:
                    continue
                cut = m.end()
                break
            if cut < 0:
                # No boundary in reach (one very large event): read further and try again.
                if len(buf) - pos > _MAX_HEAD:
                    raise FastPathFailed("no event boundary")
                need = len(buf) - pos + _FAST_CHUNK
                continue
            need = _FAST_CHUNK
            self.events += len(batch)
            yield batch
            buf = buf[cut:]
            pos = 0

        # The tail: the last events, the closing bracket and the members after them.
        tail = buf[pos:]
        if array_format:
            tail = tail.rstrip()
            if tail.endswith(b","):
                tail = tail[:-1]
            if not tail.endswith(b"]"):
                tail += b"]"
            batch = _BATCH.decode(b"[" + tail)
        else:
            text = b'{"traceEvents":[' + tail
            batch = _TAIL.decode(text).traceEvents
            for key, raw in _RAW_MEMBERS.decode(text).items():
                if key != "traceEvents":
                    self.metadata[key] = _ANY.decode(raw)
        self.events += len(batch)
        if batch:
            yield batch
