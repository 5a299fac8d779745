"""Stream the events of a Chrome/Perfetto JSON trace one at a time (or a chunk at a time), in bounded memory.

``json.load`` builds every event of a trace before the first one can be looked
at, which for a 1 GB trace means several GB of Python objects. Here the text is
read in chunks and each element of the ``traceEvents`` array is decoded on its
own with the C scanner behind :class:`json.JSONDecoder`, so memory holds one
chunk plus one event, whatever the size of the file. Only JSON is parsed: nothing
in a trace is evaluated, imported or unpickled.

A few lines over 500, kept in one module on purpose: ``EventBatches`` is
``EventStream`` with a faster decode and shares its chunking, boundary and
error-reporting state; apart, each would need the other's internals.
"""

from __future__ import annotations

import codecs
import errno
import gzip
import json
import os
import re
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any, Optional, Union, cast

from neuronprof.analysis._mend import TextMender
from neuronprof.analysis.errors import TraceError

__all__ = ["EventBatches", "EventStream", "open_trace"]

_CHUNK = 1 << 20
_WS = re.compile(r"[ \t\n\r]*")
_COMMA = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")
_GZIP_MAGIC = b"\x1f\x8b"
_VALUE_START = frozenset('{["-0123456789tfnNI')
# How close to the end of the buffer a decode error must be to mean "read more".
_MARGIN = 64
# No single JSON value in a trace is this large; past it, an error is an error.
_MAX_VALUE = 64 << 20


def missing_reason(path: str) -> str:
    """Why ``path``, which does not exist, is not there: a link loop, a link to nowhere, or no such file."""
    if os.path.islink(path):
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return "a loop of symbolic links (following the link leads back to it)"
        try:
            target = os.readlink(path)
        except OSError:  # pragma: no cover - removed in between
            target = "?"
        return f"broken symbolic link (to {target}, which does not exist)"
    return "no such file or folder"


def open_trace(path: str) -> Union[IO[bytes], gzip.GzipFile]:
    """Open ``path`` for reading bytes, transparently un-gzipping it by its magic number.

    Raises:
        TraceError: The file is missing or unreadable.
    """
    try:
        raw = open(path, "rb")  # noqa: SIM115 - the stream owns it and closes it
    except FileNotFoundError:
        raise TraceError(f"{path}: {missing_reason(path)}") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a folder, not a trace file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TraceError(f"{path}: {missing_reason(path)}") from None
        raise TraceError(f"{path}: cannot open: {exc.strerror or exc}") from None
    try:
        magic = raw.read(2)
        raw.seek(0)
    except OSError as exc:
        raw.close()
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return _GzipOwningFile(raw) if magic == _GZIP_MAGIC else raw


class _GzipOwningFile(gzip.GzipFile):
    """Un-gzips an open file and closes it with itself (``GzipFile(fileobj=)`` would leave it open).

    So a gzipped trace is opened once, not once for its magic number and again to read it.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


class EventStream:
    """Iterate over the ``traceEvents`` of one trace file without loading it whole.

    Both Chrome trace layouts are accepted: the JSON object format
    (``{"traceEvents": [...], ...}``, what torch.profiler writes) and the JSON
    array format (``[{...}, {...}]``, whose closing bracket may be missing).
    Top-level members other than ``traceEvents`` (``deviceProperties``,
    ``schemaVersion``, ...) are collected in :attr:`metadata`; those after the
    events are there once iteration has finished.

    Iterating yields each event as the dict ``json`` decodes it; with
    ``exact=True`` numbers with a fraction or exponent stay text (``str``).
    ``events_key`` names the member that holds the events in the object format
    (Neuron's ``system_profile.json`` calls it ``trace_event``).

    Raises:
        TraceError: While iterating, for anything that is not a well-formed trace.
    """

    def __init__(
        self, path: str, *, chunk_size: int = _CHUNK, exact: bool = False, events_key: str = "traceEvents"
    ) -> None:
        self.path = path
        self._key = events_key
        self.metadata: dict[str, Any] = {}
        self._chunk = max(16, int(chunk_size))
        self._binary = open_trace(path)
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        # exact=True keeps the text of non-integer numbers (str), so that timestamps
        # such as 1712195495520835.103 can be read without binary-float rounding.
        self._exact = exact
        json_decoder = json.JSONDecoder(parse_float=str) if exact else json.JSONDecoder()
        self._scan: Callable[[str, int], tuple[Any, int]] = json_decoder.scan_once  # type: ignore[attr-defined]
        # Switched on at the first decode error only (see ``_mend``); None while the text is valid.
        self.mender: Optional[TextMender] = None
        self.replaced_bytes = False  # bytes that are not UTF-8, shown as U+FFFD
        self._first = b""
        self._buf = ""
        self._pos = 0
        self._consumed = 0  # characters dropped from the front of the buffer so far
        self._bytes_read = 0
        self._eof = False
        self.events = 0

    # -- buffer management ------------------------------------------------------
    def close(self) -> None:
        """Close the underlying file."""
        self._binary.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fail(self, what: str) -> TraceError:
        return TraceError(f"{self.path}: {what}")

    def _read_more(self, at_least: int = 0) -> bool:
        """Append more text to the buffer, dropping what was consumed; False at end of file."""
        if self._eof:
            return False
        size = max(self._chunk, at_least)
        try:
            data = self._binary.read(size)
            if not self._first:
                self._first = data.lstrip()[:1]
            try:
                text = self._decoder.decode(data, final=not data)
            except UnicodeDecodeError:
                # torch writes names as it finds them: a byte that is not UTF-8 in a
                # trace that began as JSON is shown as U+FFFD, not a reason to refuse it.
                if self._first not in (b"{", b"["):
                    raise
                self._decoder.errors = "replace"
                text = self._decoder.decode(data, final=not data)
                self.replaced_bytes = True
            if self.mender is not None:
                text = self.mender.mend(text, final=not data)
        except gzip.BadGzipFile as exc:
            raise self._fail(f"not a valid gzip file ({exc})") from None
        except EOFError:
            raise self._fail("gzip file is truncated (compressed stream ended early)") from None
        except zlib.error as exc:
            raise self._fail(f"gzip file is corrupt ({exc})") from None
        except UnicodeDecodeError as exc:
            where = self._bytes_read + exc.start
            raise self._fail(f"not UTF-8 text (byte offset about {where}); is this a trace file?") from None
        except OSError as exc:
            raise self._fail(f"cannot read: {exc.strerror or exc}") from None
        if not data:
            self._eof = True
        self._bytes_read += len(data)
        self._consumed += self._pos
        self._buf = self._buf[self._pos :] + text
        self._pos = 0
        return bool(data) or bool(text)

    def _skip_ws(self) -> None:
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buf) or not self._read_more():
                return

    def _peek(self) -> str:
        self._skip_ws()
        return self._buf[self._pos] if self._pos < len(self._buf) else ""

    def _value(self) -> Any:
        """Decode one JSON value at the current position, reading more text as needed."""
        while True:
            buf, pos = self._buf, self._pos
            detail = "expected a JSON value"
            err_at = len(buf)
            error: Optional[str] = None
            try:
                value, end = self._scan(buf, pos)
            except StopIteration as exc:
                # The C scanner reports "no value here" with the index it failed at.
                end = -1
                at = exc.value if isinstance(exc.value, int) else pos
                if pos < len(buf) and buf[pos] not in _VALUE_START:
                    error = f"invalid JSON near character {self._consumed + pos}: {detail}"
                err_at = max(at, pos)
                if err_at + _MARGIN < len(buf):
                    error = error or f"invalid JSON near character {self._consumed + err_at}: {detail}"
            except json.JSONDecodeError as exc:
                end = -1
                detail = exc.msg
                if not exc.msg.startswith("Unterminated string"):
                    err_at = exc.pos
                # An error well before the end of the buffer is real; one at the end
                # may only mean the value continues in the next chunk.
                if err_at + _MARGIN < len(buf):
                    error = f"invalid JSON near character {self._consumed + err_at}: {detail}"
            except RecursionError:
                raise self._fail(f"JSON nested too deeply near character {self._consumed + pos}") from None
            # A value that runs to the end of the buffer may continue in the next
            # chunk (a number, or a truncated container): decide only with more text.
            if error is None and end != -1 and (end < len(buf) or self._eof):
                self._pos = end
                return value
            if error is None and self._eof:
                if pos >= len(buf):
                    raise self._fail("unexpected end of file (the trace is truncated)")
                if err_at < len(buf):
                    error = f"invalid JSON near character {self._consumed + err_at}: {detail}"
                else:
                    error = f"unexpected end of file inside a JSON value ({detail}); the trace is truncated"
            if error is not None:
                if self._start_mending():
                    continue
                raise self._fail(error)
            if len(buf) - pos > _MAX_VALUE:
                raise self._fail(
                    f"invalid JSON near character {self._consumed + pos}: {detail} "
                    f"(or a single value larger than {_MAX_VALUE >> 20} MiB)"
                )
            self._read_more(at_least=len(buf) - pos)

    def _start_mending(self) -> bool:
        """At the first decode error: mend the rest of the text (see ``_mend``); True when that changed it.

        From here on a raw tab in a string is accepted too, and every chunk read is mended.
        """
        if self.mender is not None:
            return False
        self.mender = TextMender()
        rest = self._buf[self._pos :]
        mended = self.mender.mend(rest, final=self._eof)
        self._buf = self._buf[: self._pos] + mended
        decoder = json.JSONDecoder(parse_float=str, strict=False) if self._exact else json.JSONDecoder(strict=False)
        self._scan = decoder.scan_once  # type: ignore[attr-defined]
        # The text held back (a partial last line) is the next chunk's start.
        return mended != rest or bool(self.mender.quotes or self.mender.controls)

    def repair_notes(self) -> list[str]:
        """What reading this file changed in its text, one true sentence each (empty for a valid file)."""
        name = os.path.basename(self.path)
        out = [] if self.mender is None else self.mender.notes(name)
        if self.replaced_bytes:
            out.append(f"{name}: bytes that are not UTF-8 (names as torch found them) shown as U+FFFD")
        return out

    def _expect(self, char: str, context: str) -> None:
        got = self._peek()
        if got != char:
            found = repr(got) if got else "end of file"
            raise self._fail(
                f"invalid JSON near character {self._consumed + self._pos}: expected {char!r} {context}, found {found}"
            )
        self._pos += 1

    # -- structure --------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            first = self._peek()
            if first == "\ufeff":  # a byte-order mark some editors write
                self._pos += 1
                first = self._peek()
            if first == "{":
                yield from self._object_format()
            elif first == "[":
                self._pos += 1
                yield from self._events(array_format=True)
            elif not first:
                raise self._fail("file is empty")
            else:
                raise self._fail("not a JSON trace (expected '{' or '[' at the start)")
        finally:
            self.close()

    def _object_format(self) -> Iterator[dict[str, Any]]:
        self._pos += 1
        seen_events = False
        if self._peek() == "}":
            raise self._fail(f"not a trace: the JSON object has no {self._key!r}")
        while True:
            if self._peek() != '"':
                raise self._fail(f"invalid JSON near character {self._consumed + self._pos}: expected a key")
            key = self._value()
            self._expect(":", f"after key {key!r}")
            if key == self._key and not seen_events:
                seen_events = True
                if self._peek() != "[":
                    raise self._fail(f"not a trace: {self._key!r} is not a list")
                self._pos += 1
                yield from self._events(array_format=False)
            else:
                self._skip_ws()
                self.metadata[key] = self._value()
            sep = self._peek()
            if sep == ",":
                self._pos += 1
                continue
            if sep == "}":
                self._pos += 1
                break
            found = repr(sep) if sep else "end of file"
            if not sep:
                raise self._fail("unexpected end of file (the trace is truncated)")
            raise self._fail(
                f"invalid JSON near character {self._consumed + self._pos}: expected ',' or '}}', found {found}"
            )
        if self._peek():
            raise self._fail(f"invalid JSON near character {self._consumed + self._pos}: extra data after the trace")
        if not seen_events:
            raise self._fail(f"not a trace: the JSON object has no {self._key!r}")

    def _events(self, *, array_format: bool) -> Iterator[dict[str, Any]]:
        # The hot loop: one scan per event, then a regex for the separator.
        scan = self._scan
        comma = _COMMA
        index = 0
        nxt = self._peek()
        if nxt == "]":
            self._pos += 1
            return
        while True:
            if not nxt:
                self._end_of_file(array_format=array_format)
                return
            buf, pos = self._buf, self._pos
            try:
                event, end = scan(buf, pos)
                if end >= len(buf) and not self._eof:
                    raise StopIteration
            except (StopIteration, json.JSONDecodeError):
                event = self._value()
                buf, end = self._buf, self._pos
            except RecursionError:
                raise self._fail(f"JSON nested too deeply in event #{index}") from None
            if type(event) is not dict:
                raise self._fail(f"event #{index} is not a JSON object (got {_json_type(event)})")
            index += 1
            self.events = index
            yield event
            m = comma.match(buf, end)
            if m is not None and m.end() < len(buf):
                self._pos = m.end()
                nxt = buf[self._pos]
                if nxt == "]":  # a trailing comma, which Chrome's viewer tolerates
                    self._pos += 1
                    return
                continue
            self._pos = end
            if not self._after_event(array_format=array_format, last=index - 1):
                return
            nxt = self._peek()

    def _after_event(self, *, array_format: bool, last: int) -> bool:
        """Read the separator after event #``last``: True when another event follows, False at the end of the events.

        ``,`` goes on, except in a trailing ``,]`` (which Chrome's viewer tolerates); ``]``
        ends; the end of the file ends the array format and is a truncated trace otherwise.
        """
        sep = self._peek()
        if sep == ",":
            self._pos += 1
            if self._peek() != "]":
                return True
            sep = "]"
        if sep == "]":
            self._pos += 1
            return False
        if not sep:
            self._end_of_file(array_format=array_format)
            return False
        where = self._consumed + self._pos
        raise self._fail(f"invalid JSON near character {where}: expected ',' or ']' after event #{last}")

    def _end_of_file(self, *, array_format: bool) -> None:
        """The file ends where an event or the closing ``]`` was due: fine only in the array format."""
        if not array_format:  # the array format may legally stop without ']'
            raise self._fail("unexpected end of file (the trace is truncated)")


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


_BOUNDARY = re.compile(r"\}[ \t\n\r]*(?:,[ \t\n\r]*(?=\{)|(?=\]))")
_SEPARATOR = re.compile(r"\}[ \t\n\r]*,[ \t\n\r]*\{")
_SCANNER: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _last_boundary(buf: str, pos: int) -> int:
    """The position just after the last ``}`` in ``buf[pos:]`` that is followed by ``,{`` or ``]``; -1 if none."""
    limit = len(buf)
    start = max(pos, limit - (1 << 16))
    while True:
        found = [m for m in _BOUNDARY.finditer(buf, start, limit)]
        if found:
            return found[-1].start() + 1
        if start == pos:
            return -1
        start = max(pos, start - (1 << 20))


class EventBatches(EventStream):
    """Like [`EventStream`][neuronprof.analysis._eventstream.EventStream], but yields lists of events.

    Where ``EventStream`` decodes one event per call into the C scanner, this
    decodes about a chunk of events with one ``json.loads``, which is close to
    ``json.load``'s own speed while memory still holds one chunk. A chunk is cut
    after an event's closing ``}`` that is followed by ``,{`` or ``]``, and only
    ``"[" + chunk + "]"`` is decoded: JSON's balanced brackets and strings mean
    the decode succeeds only when the cut falls between two top-level events. When
    it does not (a cut inside an event), that stretch is decoded one event at a
    time, as ``EventStream`` does. Errors are reported as ``EventStream`` reports them.

    With ``containing``, when the file puts a line break between events (one event
    per line, or indented JSON), a chunk is split on that separator with
    ``str.split`` and only the events whose text contains that string are decoded
    (all together, with one ``json.loads``); the others are skipped unread, so their
    own content is not checked. The separator is taken after decoding the first
    event, so it is the file's own; a JSON string cannot hold a line break, and
    inside an indented event a line break is followed by deeper indentation, so the
    split falls between events. Should the kept pieces not decode, that stretch is
    decoded in full instead. Without a line break between events every event is
    decoded, as without ``containing``.

    ``decode`` (with ``containing``) replaces ``json.loads`` for the kept events:
    it gets the JSON array text of them and returns a list (e.g. a typed
    ``msgspec`` decoder that builds only the fields a reader needs). A
    ``ValueError`` from it sends that stretch down the full path, so a batch holds
    either what ``decode`` returns or plain ``dict`` events.
    """

    def __init__(
        self,
        path: str,
        *,
        chunk_size: int = _CHUNK,
        events_key: str = "traceEvents",
        containing: Union[str, None] = None,
        decode: Optional[Callable[[str], list[Any]]] = None,
    ) -> None:
        super().__init__(path, chunk_size=chunk_size, events_key=events_key)
        self._needle = containing
        self._decode = decode

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:  # type: ignore[override]
        return cast(Iterator[list[dict[str, Any]]], super().__iter__())

    @staticmethod
    def _filtered(
        buf: str, pos: int, needle: str, decode: Optional[Callable[[str], list[Any]]] = None
    ) -> tuple[int, int, Any]:
        """Decode the events between ``pos`` and a checked cut that contain ``needle``.

        Returns ``(cut, pieces, events)``, or ``(0, 0, None)`` when no cut can be
        trusted or the kept events do not decode (the caller then decodes in full).
        """
        if buf[pos] != "{":
            return 0, 0, None
        # The separator between the first two events, as the file writes it (e.g. "},\n{"):
        # found after decoding the first event, so it is a real one, not one inside an event.
        try:
            _, first_end = _SCANNER(buf, pos)
        except (StopIteration, ValueError, RecursionError):
            return 0, 0, None
        first = _SEPARATOR.match(buf, first_end - 1)
        if first is None or "\n" not in first.group():
            # Only a separator with a line break is trusted: a JSON string cannot hold
            # one, and inside an event a line break is followed by deeper indentation.
            return 0, 0, None
        sep = first.group()
        end = len(buf)
        cut = 0
        for _ in range(4):
            at = buf.rfind(sep, pos, end)
            if at < pos:
                return 0, 0, None
            prev = buf.rfind(sep, pos, at)
            last = buf[pos if prev < pos else prev + len(sep) - 1 : at + 1]
            # The last event before the cut must be balanced, or the cut is inside an event.
            if last.count("{") == last.count("}") and last.count("[") == last.count("]"):
                cut = at + 1
                break
            end = at
        if cut <= pos:
            return 0, 0, None
        parts = buf[pos + 1 : cut - 1].split(sep)
        kept = [part for part in parts if needle in part]
        if not kept:
            return cut, len(parts), []
        try:
            return cut, len(parts), (decode or json.loads)("[{" + "},{".join(kept) + "}]")
        except ValueError:
            return 0, 0, None

    def _events(self, *, array_format: bool) -> Iterator[Any]:
        loads = json.loads
        while True:
            if len(self._buf) - self._pos < self._chunk and not self._eof:
                self._read_more()
            nxt = self._peek()
            if nxt == "]":
                self._pos += 1
                return
            if not nxt:
                self._end_of_file(array_format=array_format)
                return
            buf, pos = self._buf, self._pos
            batch: Any = None
            cut = pieces = 0
            typed = False
            if self._needle is not None:
                cut, pieces, batch = self._filtered(buf, pos, self._needle, self._decode)
                typed = batch is not None and self._decode is not None
            if batch is None:
                pieces = 0
                cut = _last_boundary(buf, pos)
                if cut > pos:
                    try:
                        batch = loads("[" + buf[pos:cut] + "]")
                    except ValueError:
                        batch = None
            if batch is None:
                # No safe cut here: one event the careful way, then try batches again.
                event = self._value()
                if type(event) is not dict:
                    raise self._fail(f"event #{self.events} is not a JSON object (got {_json_type(event)})")
                self.events += 1
                yield [event]
            else:
                for i, event in enumerate(() if typed else batch):  # ``decode`` checked its own events
                    if type(event) is not dict:
                        raise self._fail(f"event #{self.events + i} is not a JSON object (got {_json_type(event)})")
                self.events += pieces or len(batch)
                self._pos = cut
                if batch:
                    yield batch
            if not self._after_event(array_format=array_format, last=self.events - 1):
                return
