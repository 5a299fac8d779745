"""Read a Chrome/Perfetto JSON trace as pieces of events: only the few fields the trace loader reads.

With msgspec installed, the text of the ``traceEvents`` array is cut into pieces
of about 1 MiB at event boundaries ([`Piece`][neuronprof.analysis._typed_reader.Piece])
and each piece is decoded in one call into structs that skip every other field:
several times faster than the stdlib scanner, and memory holds one piece at a
time. A piece is first decoded into strictly typed structs (``TypedSpan``:
times as their JSON text, ids as ``int``) that the loader reads column by
column; a piece that does not fit those types (an id written as text, a legacy
field name) is decoded again into loosely typed ones (``Event``) that it reads
event by event. Without msgspec, or for any file the fast path cannot read, the
stdlib [`EventStream`][neuronprof.analysis._eventstream.EventStream] is used: it
is slower, and it is what reports precise errors for malformed files.

``msgspec`` and ``_FAST_CHUNK`` are read from this module's globals at each read,
so a test (or a benchmark) can switch the fast path off here. It is kept in one module on
purpose: the typed structs, their pure-Python twins and the decoders that try them in
turn must name the same fields, which is easiest to check side by side.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Iterator
from typing import Any, Literal, Optional, Union

from neuronprof.analysis._eventstream import EventStream, open_trace
from neuronprof.analysis.errors import TraceError

__all__ = ["DECODE_ERRORS", "FastPathFailed", "Piece", "TraceReader"]

_FAST_CHUNK = 1 << 20  # a piece's structs (some 5x its text) stay a small part of a large trace's memory
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
        "memory_device_type",
        "memory_device_id",
        "nbytes",
        "total_allocated",
        "total_reserved",
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
        self.memory_device_type = get("Device Type")
        self.memory_device_id = get("Device Id")
        self.nbytes = get("Bytes")
        self.total_allocated = get("Total Allocated")
        self.total_reserved = get("Total Reserved")


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
EMPTY_RAW: Any = None  # an empty ``msgspec.Raw``: a typed field that is absent
# What msgspec raises for a text it cannot decode (nothing without it).
DECODE_ERRORS: tuple[type[Exception], ...] = () if msgspec is None else (msgspec.DecodeError,)
# Without msgspec: no typed decoders, no typed structs (see below).
SPAN_DECODERS: list[tuple[Any, Any]] = []
SKIPPED_PHASES: dict[Any, str] = {}
TypedInstant: Any = None  # an instant ("ph": "i"), whose torch allocation records are kept (below)
WITH_EXTRAS: tuple[Any, ...] = ()

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
        # torch's allocation records ("[memory]" instants, ``profile_memory=True``).
        memory_device_type: Any = msgspec.field(name="Device Type", default=None)
        memory_device_id: Any = msgspec.field(name="Device Id", default=None)
        nbytes: Any = msgspec.field(name="Bytes", default=None)
        total_allocated: Any = msgspec.field(name="Total Allocated", default=None)
        total_reserved: Any = msgspec.field(name="Total Reserved", default=None)

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

    _EMPTY = EMPTY_RAW = msgspec.Raw()

    class TypedArgs(msgspec.Struct, gc=False):
        """A span's ``args`` as kineto writes them: ids are ints; a field that is not is read by ``Event`` instead.

        A field the column reader does not handle (the lower-case ``external id``,
        the legacy ``Input dims``) is typed ``None``: any value fails the typed
        decode, and the piece is read event by event. FLOPs, device types and Neuron
        Runtime's ids are rare: typed ``None`` here too, and read by
        ``TypedArgsWithExtras`` in a file that has them.
        """

        ext: int = msgspec.field(name="External id", default=-1)
        concrete: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_EMPTY)
        types: msgspec.Raw = msgspec.field(name="Input type", default=_EMPTY)
        dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_EMPTY)
        correlation: int = -1
        ext_lower: None = msgspec.field(name="external id", default=None)
        dims_legacy: None = msgspec.field(name="Input dims", default=None)
        flops: None = None
        device_type: None = None
        sequence_id: None = msgspec.field(name="nrt_sequence_id", default=None)

    class TypedArgsWithExtras(TypedArgs, gc=False):
        """``TypedArgs`` with FLOPs (``with_flops=True``), device types and Neuron Runtime's
        ``nrt_sequence_id`` (TorchNeuron's framework trace), for a file that has them."""

        flops: Any = None
        device_type: Any = None
        sequence_id: Any = msgspec.field(name="nrt_sequence_id", default=None)

    # kineto's categories (its ActivityType names, and PyTorch 1.8's): decoded as these very
    # strings, which hash once, instead of a new string for every event.
    KinetoCategory = Literal[
        "cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset", "kernel",
        "external_correlation", "cuda_runtime", "cuda_driver", "cpu_instant_event", "python_function",
        "overhead", "cuda_sync", "glow_runtime", "mtia_runtime", "mtia_ccp_events", "mtia_insight",
        "cuda_profiler_range", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm",
        "privateuse1_runtime", "privateuse1_driver", "Trace", "ac2g",
        "Operator", "Kernel", "Memcpy", "Memset", "Runtime",
    ]  # fmt: skip

    class TypedSpan(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
        """A complete event (``"ph": "X"``): its start as JSON text (``Raw``, empty when absent), its duration a float.

        A duration is a small number of µs, which a float holds to far better than a
        nanosecond (the reader checks it, see ``_reader._durations``); a start is not.
        Its category is one of kineto's (``AnyCategorySpan`` reads a file with others).
        """

        # In the order kineto writes them (msgspec matches each key against the next field first).
        cat: Optional[KinetoCategory] = None
        name: Optional[str] = None
        pid: Any = None
        tid: Any = None
        ts: msgspec.Raw = _EMPTY
        dur: float = math.nan
        args: Optional[TypedArgs] = None

    class AnyCategorySpan(TypedSpan, tag="X"):
        """``TypedSpan`` of any category."""

        cat: Optional[str] = None  # type: ignore[assignment]  # wider than the base's, on purpose

    class SpanWithExtras(TypedSpan, tag="X"):
        """``TypedSpan`` whose ``args`` may hold FLOPs and device types."""

        args: Optional[TypedArgsWithExtras] = None

    class AnyCategorySpanWithExtras(AnyCategorySpan, tag="X"):
        """``AnyCategorySpan`` whose ``args`` may hold FLOPs and device types."""

        args: Optional[TypedArgsWithExtras] = None

    class MetaArgs(msgspec.Struct, gc=False):
        """The ``args`` of a metadata event: the process or thread name, the process labels."""

        name: Any = None
        labels: Any = None

    class TypedMeta(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
        """A metadata event (``"ph": "M"``): process and thread names and labels."""

        name: Any = None
        pid: Any = None
        tid: Any = None
        args: Optional[MetaArgs] = None

    class MemoryArgs(msgspec.Struct, gc=False):
        """The ``args`` of torch's allocation records (``[memory]``, ``[OutOfMemory]``); checked when read."""

        device_type: Any = msgspec.field(name="Device Type", default=None)
        device_id: Any = msgspec.field(name="Device Id", default=None)
        nbytes: Any = msgspec.field(name="Bytes", default=None)
        total_allocated: Any = msgspec.field(name="Total Allocated", default=None)
        total_reserved: Any = msgspec.field(name="Total Reserved", default=None)

    class TypedInstant(msgspec.Struct, gc=False, tag_field="ph", tag="i"):  # type: ignore[no-redef]
        """An instant (``"ph": "i"``): torch writes its allocation records so (``profile_memory=True``)."""

        name: Any = None
        pid: Any = None
        tid: Any = None
        ts: msgspec.Raw = _EMPTY
        args: Optional[MemoryArgs] = None

    # Every other phase the trace format defines, as an empty struct of its own (nothing
    # of it is read but its count). Begin/end pairs ("B"/"E") are not among them: a piece
    # that has them is read event by event.
    SKIPPED_PHASES = {
        msgspec.defstruct(f"Phase_{ord(ph)}", [], gc=False, tag_field="ph", tag=ph): ph for ph in "ICbnestfPONDRcSTpF()"
    }
    # The typed decoders, leanest first: a file is read with the first that fits its pieces
    # (see ``TraceReader._piece``); each gives its span class and whether args hold extras.
    for _span in (TypedSpan, AnyCategorySpan, SpanWithExtras, AnyCategorySpanWithExtras):
        _events: Any = Union.__getitem__((_span, TypedMeta, TypedInstant, *SKIPPED_PHASES))  # a union made at run time
        SPAN_DECODERS.append((msgspec.json.Decoder(list[_events], float_hook=str), _span))
    del _span, _events
    WITH_EXTRAS = (SpanWithExtras, AnyCategorySpanWithExtras)

    # float_hook=str: a number with a fraction or exponent arrives as its text, so
    # that timestamps are converted to integer nanoseconds without float rounding.
    _BATCH = msgspec.json.Decoder(list[Event], float_hook=str)
    _RAW_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])
    _ANY = msgspec.json.Decoder()
    _NUMBER = msgspec.json.Decoder(float_hook=str)


def raw_number(raw: Any) -> Any:
    """A ``TypedSpan`` time (JSON text) as ``Event`` has it: an int, the text of a number, or what else it is."""
    return _NUMBER.decode(raw) if raw else None


class Piece:
    """About 1 MiB of consecutive events, decoded as the reader needs them.

    Attributes:
        typed: The events as typed structs (spans of class ``span``, ``TypedMeta`` and one
            empty struct per other phase), or ``None`` when the piece does not fit their
            types (or the stdlib reader read it).
        span: The class of ``typed``'s spans (``TypedSpan`` or one of its variants).
        extras: Whether their args hold FLOPs and device types (``TypedArgsWithExtras``).
        count: How many events the piece holds.
    """

    __slots__ = ("typed", "span", "extras", "count", "_text", "_plain")

    def __init__(
        self, typed: Optional[list[Any]], text: Optional[bytes], plain: Optional[list[Any]], span: Any = None
    ) -> None:
        self.typed = typed
        self.span = span
        self.extras = span in WITH_EXTRAS
        self._text = text
        self._plain = plain
        self.count = len(typed if typed is not None else plain or ())

    def plain(self) -> list[Any]:
        """The events as ``Event`` structs (``PyEvent`` from the stdlib reader): every value as the file has it."""
        if self._plain is None:  # a piece of the fast reader: its text is kept
            self._plain = _BATCH.decode(self._text or b"[]")
        return self._plain


class TraceReader:
    """Read one trace file as pieces of events (objects with ``ph``, ``name``, ``ts``... attributes).

    In ``Event`` structs (``Piece.plain``) numbers with a fraction arrive as
    text (``str``), integers as ``int``, so that timestamps can be read exactly.
    Top-level members other than ``traceEvents`` are in :attr:`metadata` once
    iteration has finished.

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
        self._level = 0  # the typed decoder the file's pieces fit so far (``SPAN_DECODERS``)
        self._untyped = 0  # pieces in a row that did not fit the typed structs

    def batches(self) -> Iterator[list[Any]]:
        """Yield lists of events (``Event`` or ``PyEvent``), in file order.

        Raises:
            TraceError: The file cannot be read as a trace (stdlib reader).
            FastPathFailed: The fast reader cannot read it (only with ``fast=True``).
        """
        for piece in self.pieces():
            yield piece.plain()

    def pieces(self) -> Iterator[Piece]:
        """Yield the events in pieces, in file order (see [`Piece`][neuronprof.analysis._typed_reader.Piece]).

        Raises:
            TraceError: The file cannot be read as a trace (stdlib reader).
            FastPathFailed: The fast reader cannot read it (only with ``fast=True``).
        """
        if self.fast:
            yield from self._fast_pieces()
            return
        stream = EventStream(self.path, exact=True)
        batch: list[Any] = []
        for event in stream:
            batch.append(PyEvent(event))
            if len(batch) >= 4096:
                self.events = stream.events
                yield Piece(None, None, batch)
                batch = []
        self.events = stream.events
        self.metadata = stream.metadata
        self.repair_notes = stream.repair_notes()
        if batch:
            yield Piece(None, None, batch)

    # -- the msgspec reader --------------------------------------------------------------
    def _fast_pieces(self) -> Iterator[Piece]:
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

    def _piece(self, text: bytes) -> Piece:
        """Decode the JSON array ``text`` of events: typed when it fits, loosely typed otherwise.

        The leanest typed decoder is tried first (kineto's categories, no FLOPs); a
        piece that needs a fuller one moves the rest of the file to it. A file whose
        pieces keep failing every typed decoder is read loosely typed from then on.

        Raises:
            msgspec.DecodeError: ``text`` is not JSON (a cut inside an event).
            msgspec.ValidationError: An event is not an object, or its ``args`` is not.
        """
        if self._untyped < 2:
            for level in range(self._level, len(SPAN_DECODERS)):
                decoder, span = SPAN_DECODERS[level]
                try:
                    piece = Piece(decoder.decode(text), text, None, span)
                except msgspec.ValidationError:
                    continue
                self._level = level
                self._untyped = 0
                return piece
            self._untyped += 1
        # Not the types kineto writes (or not JSON at all: the loose decode says which).
        return Piece(None, text, _BATCH.decode(text))

    def _cut(self, before: list[bytes], last: bytes) -> Optional[tuple[Piece, bytes]]:
        """The events of ``before`` and ``last`` (one text, in pieces) up to a cut in ``last``, and what follows it.

        The cut is after an event's closing brace and the comma after it, the last such
        that decodes, within ``_SPLIT_TRIES`` braces from the end; None when there is none
        in ``last``.
        """
        end = len(last)
        for _ in range(_SPLIT_TRIES):
            brace = last.rfind(b"}", 0, end)
            if brace < 0:
                return None
            m = _COMMA_AFTER.match(last, brace + 1)
            end = brace
            if m is None or m.end() >= len(last):
                continue
            try:
                piece = self._piece(b"".join((b"[", *before, memoryview(last)[: brace + 1], b"]")))
            except msgspec.ValidationError:
                raise
            except msgspec.DecodeError:
                continue
            return piece, last[m.end() :]
        return None

    def _fast(self, binary: Any) -> Iterator[Piece]:
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
        rest = buf[pos:]  # what follows the head, then what follows each cut
        del buf
        need = _FAST_CHUNK
        while True:
            parts = [rest]
            size = len(rest)
            while not eof and size < need:
                data = binary.read(_FAST_CHUNK)
                if not data:
                    eof = True
                    break
                parts.append(data)
                size += len(data)
            if eof:
                rest = b"".join(parts)
                break
            # Most often a small rest and one new chunk that holds the cut: the chunk is copied
            # once, into the piece. Else the cut is looked for in all of it, joined.
            found = self._cut(parts[:-1], parts[-1])
            if found is None:
                rest = b"".join(parts)
                found = self._cut([], rest)
            if found is None:
                # No boundary in reach (one very large event): read further and try again.
                if size > _MAX_HEAD:
                    raise FastPathFailed("no event boundary")
                need = size + _FAST_CHUNK
                continue
            piece, rest = found
            need = _FAST_CHUNK
            self.events += piece.count
            yield piece

        # The tail: the last events, the closing bracket and the members after them.
        tail = rest
        if array_format:
            tail = tail.rstrip()
            if tail.endswith(b","):
                tail = tail[:-1]
            if not tail.endswith(b"]"):
                tail += b"]"
            text = b"[" + tail
        else:
            after: dict[str, Any] = _RAW_MEMBERS.decode(b'{"traceEvents":[' + tail)
            for key, raw in after.items():
                if key != "traceEvents":
                    self.metadata[key] = _ANY.decode(raw)
            text = bytes(after["traceEvents"])
        piece = self._piece(text)
        self.events += piece.count
        if piece.count:
            yield piece
