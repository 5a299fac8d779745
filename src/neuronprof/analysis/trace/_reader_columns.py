"""Reading a piece of a trace as kineto writes it column by column: one pass per field, one lookup per span.

A piece of a few thousand typed events (``_typed_reader.TypedSpan``...) is read
with a comprehension per field (the interpreter's own loop reads a struct's fields
faster than ``attrgetter`` or ``astuple`` do), its times parsed from their text in
one call (``_rules.ns_column``), and each span looked up once by its name,
category, lane and recorded inputs: what the event-by-event reader
(``_reader._FileReader._each``) decides per event (the key, the lane, whether it is
left out) is decided here once per new combination. The events then go to their
timelines with numpy. A piece that does not fit is left to ``_each``: the same
columns, keys, counts and notes come out either way, in the same order.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Set
from itertools import compress
from typing import Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis._arrays import present
from neuronprof.analysis._typed_reader import EMPTY_RAW, Piece, raw_number
from neuronprof.analysis.trace._events import MEMORY_EVENTS, IdSet, _Filling
from neuronprof.analysis.trace._rules import _K_DEVICE, _K_RUNTIME, _MAX_ID, _SKIP_CATS, _add_flops, ns_column
from neuronprof.analysis.trace._sums import EventColumns, EventKeys

# Pieces with fewer events, and files smaller than this (when numpy is not imported yet), are
# read event by event: numpy's set-up and import cost more than the columns save there.
COLUMNS_MIN = 256
COLUMNS_FILE = 16 << 20
# A span's key and lane, packed in one int64: the key above, the lane in the low bits.
_LANE_BITS = 24
_LANE_MASK = (1 << _LANE_BITS) - 1
_NEW = -2  # a span not seen before (-1: one of a category left out)


class _ColumnReader(_Filling):
    """The columns of one file as the column reader fills them (``_reader._FileReader`` adds the rest)."""

    def __init__(self, path: str, keys: EventKeys) -> None:
        super().__init__(path, keys)
        # The timelines by number, in the order of ``threads`` (the column reader groups by number).
        self.thread_at: dict[Any, int] = {}
        self.columns: list[EventColumns] = []
        # The spans seen: (name, cat, pid, tid[, inputs as JSON text]) -> key and lane, packed.
        self.seen: dict[tuple[Any, ...], int] = _Seen()
        self.kinds: Any = None  # keys.kind as a numpy array, grown with the keys
        # Runtime calls' correlation ids, a numpy array per piece: one sorted array (``IdSet``) once
        # the file is read, not a million Python ints.
        self.runtime_parts: list[Any] = []

    def _runtime_ids(self) -> Set[int]:
        if not self.runtime_parts:
            return super()._runtime_ids()
        import numpy as np

        parts = self.runtime_parts
        if self.runtime_corr:  # pieces read event by event too
            parts.append(np.fromiter(self.runtime_corr, np.int64, len(self.runtime_corr)))
        ids = np.sort(np.concatenate(parts), kind="stable")  # each part rises, mostly: a timsort merges runs
        parts.clear()
        ids = ids[np.append(True, ids[1:] != ids[:-1])]  # not np.unique: it imports numpy.ma
        return IdSet(ids)

    def _thread(self, tkey: tuple[Any, Any]) -> EventColumns:
        thread = self.threads[tkey] = EventColumns()
        self.thread_at[tkey] = len(self.columns)
        self.columns.append(thread)
        return thread

    def _metadata(self, ev: Any) -> None:  # pragma: no cover - the file reader's
        raise NotImplementedError

    def _columns(self, piece: Piece) -> bool:
        """Read a piece of typed events column by column; False (having changed nothing) when it cannot.

        The same columns, keys, counts and notes as ``_each``, in the same order. Each
        span is looked up once, by its name, category, lane and inputs (their JSON
        text): what ``_each`` decides per event (its key, its lane, whether it is left
        out) is decided here once per new combination. A piece with a time that is not
        a plain number, a negative duration, a span without a name, an unhashable lane
        or an id past int64 is left to ``_each``.
        """
        import numpy as np

        from neuronprof.analysis._typed_reader import SKIPPED_PHASES, TypedArgs, TypedInstant, TypedMeta

        global _NO_ARGS
        if _NO_ARGS is None:
            _NO_ARGS = TypedArgs()
        events = piece.typed
        if events is None:
            return False
        span_type = piece.span
        # The fields of every span, a column each, in one loop (the interpreter's own attribute
        # reads of msgspec's structs beat attrgetter and astuple); the other events' phases. The
        # lookup key of a span is (name, cat, pid, tid), and a fifth item, the JSON text of its
        # recorded inputs, when it has any: the three in one bytes with NUL between (no JSON text
        # holds one). One flat tuple: cheaper to build and to hash than a pair of tuples.
        others: list[type] = []
        add_other = others.append
        # Lists made to the piece's size and filled by index (cheaper than appending), cut to size after.
        size = len(events)
        keys: list[Any] = [None] * size
        starts: list[Any] = [None] * size
        durations: list[Any] = [None] * size
        corrs: list[Any] = [None] * size
        exts: list[Any] = [None] * size
        args: list[Any] = [None] * size if piece.extras else []
        empty, no_args, join = EMPTY_RAW, _NO_ARGS, b"\0".join
        n = 0
        for e in events:
            if type(e) is not span_type:
                add_other(type(e))
                continue
            a = e.args
            if a is None:
                a = no_args
            dims, types, concrete = a.dims, a.types, a.concrete
            if dims is empty and types is empty and concrete is empty:
                keys[n] = (e.name, e.cat, e.pid, e.tid)
            else:
                keys[n] = (e.name, e.cat, e.pid, e.tid, join((dims, types, concrete)))
            starts[n] = e.ts
            durations[n] = e.dur
            corrs[n] = a.correlation
            exts[n] = a.ext
            if args:
                args[n] = a
            n += 1
        if n < size:
            for column in (keys, starts, durations, corrs, exts, args):
                del column[n:]
        counts: Counter[Any] = Counter(others)
        seen = self.seen
        try:
            found = np.fromiter(map(seen.__getitem__, keys), np.int64, n)
        except TypeError:  # an unhashable lane: ``_each`` says which
            return False
        ts = _fixed_width_ns(starts)
        if ts is None:
            ts = ns_column(starts, raw_number)
        dur = _durations(np.array(durations, np.float64))
        if ts is None or dur is None:
            return False  # a time that is not a plain number, a negative or huge duration: ``_each`` reads them
        try:  # fromiter: no pass to find the values' type first (they are ints: the typed decode's)
            corr = np.fromiter(corrs, np.int64, n)
            ext = np.fromiter(exts, np.int64, n)
        except OverflowError:
            return False
        # New spans, in the order they first come (the order keys and lanes are made in).
        unseen = np.flatnonzero(found == _NEW).tolist()
        new = list(dict.fromkeys([keys[i] for i in unseen]))
        for key in new:
            name, cat = _parts(key)[:2]
            if name is None and not (cat in _SKIP_CATS and vocab.skipped(name, cat)):
                return False  # a span without a name: ``_each`` says which

        memory: list[tuple[int, Any, int]] = []  # torch's allocation records: (position, event, ts ns)
        instants: list[tuple[int, Any]] = []
        if counts.get(TypedInstant):
            instants = [(i, e) for i, e in enumerate(events) if type(e) is TypedInstant]
            records = [
                (i, e) for i, e in instants if e.args is not None and type(e.name) is str and e.name in MEMORY_EVENTS
            ]
            times = ns_column([e.ts for _, e in records], raw_number)
            if times is None:
                return False  # a time that is not a plain number: ``_each`` reads it
            memory = [(i, e, t) for (i, e), t in zip(records, times.tolist())]

        # Nothing can fail from here on: add the piece.
        skipped = self.sums.skipped
        left_out = [
            # Where a phase is first seen matters only for one not counted yet (the note's order).
            (0 if SKIPPED_PHASES[cls] in skipped else _first(events, cls), SKIPPED_PHASES[cls], k)
            for cls, k in counts.items()
            if cls in SKIPPED_PHASES
        ]
        if instants:
            kept = {i for i, e, t in memory if self._typed_memory(e, t)}
            not_kept = [i for i, _e in instants if i not in kept]
            if not_kept:
                left_out.append((0 if "i" in skipped else not_kept[0], "i", len(not_kept)))
        if counts.get(TypedMeta):
            for ev in [e for e in events if type(e) is TypedMeta]:
                self._metadata(ev)
        for key in new:
            seen[key] = self._lookup(key)
        if unseen:
            found[unseen] = [seen[keys[i]] for i in unseen]
        packed = found
        if n and packed.min() < 0:  # spans of a category left out (kineto's own span...), counted by category
            out = packed < 0
            where = np.flatnonzero(out)
            if counts:  # positions among all the events, not the spans
                where = np.flatnonzero(np.fromiter((type(e) is span_type for e in events), bool, len(events)))[where]
            first: dict[Any, list[int]] = {}
            for i, at in zip(np.flatnonzero(out).tolist(), where.tolist()):
                seen_at = first.setdefault(_parts(keys[i])[1], [at, 0])
                seen_at[1] += 1
            left_out += [(at, cat, count) for cat, (at, count) in first.items()]
            keep = ~out
            packed, ts, dur, corr, ext = packed[keep], ts[keep], dur[keep], corr[keep], ext[keep]
            args = list(compress(args, keep.tolist()))
        for _at, what, count in sorted(left_out, key=lambda item: item[0]):
            skipped[what] = skipped.get(what, 0) + count
        kid = packed >> _LANE_BITS
        lane = packed & _LANE_MASK
        kinds = self.kinds
        if kinds is None or len(kinds) != len(self.keys.kind):
            kinds = self.kinds = np.array(self.keys.kind, np.int8)
        if piece.extras:  # FLOPs, device types or Neuron Runtime's ids in the file: added span by span
            lanes_at: Optional[dict[int, tuple[Any, Any]]] = None
            for i, a in enumerate(args):
                if a is None:
                    continue
                if a.flops is not None:
                    _add_flops(self.sums.flops, int(kid[i]), a.flops)
                if type(a.device_type) is str and kinds[kid[i]] == _K_DEVICE:
                    self.sums.evidence.append(a.device_type)
                if a.sequence_id is not None:
                    if lanes_at is None:
                        lanes_at = {at: tkey for tkey, at in self.thread_at.items()}
                    on = lanes_at[int(lane[i])]
                    self.sequence_ids.append((a.sequence_id, on, int(ts[i]), int(dur[i]), int(kid[i])))
        corr[(corr < 0) | (corr >= _MAX_ID)] = -1
        ext[(ext < 0) | (ext >= _MAX_ID)] = -1
        runtime = corr[(kinds[kid] == _K_RUNTIME) & (corr >= 0)]
        if len(runtime):
            self.runtime_parts.append(runtime)  # made a set once, at the end (see ``freeze``)
        kid = kid.astype(np.int32)
        if not len(kid):
            return True
        first_lane = lane[0]
        if (lane == first_lane).all():
            _extend(self.columns[first_lane], ts, dur, kid, corr, ext)
            return True
        lanes = present(lane)
        if len(lanes) <= 4:  # a few lanes: a mask each is cheaper than a sort
            for one in lanes:
                on = lane == one
                _extend(self.columns[one], ts[on], dur[on], kid[on], corr[on], ext[on])
            return True
        order = np.argsort(lane, kind="stable")
        lane = lane[order]
        bounds = np.flatnonzero(lane[1:] != lane[:-1]) + 1
        ts, dur, kid, corr, ext = ts[order], dur[order], kid[order], corr[order], ext[order]
        for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(lane)]):
            _extend(self.columns[lane[lo]], ts[lo:hi], dur[lo:hi], kid[lo:hi], corr[lo:hi], ext[lo:hi])
        return True

    def _typed_memory(self, ev: Any, ts: int) -> bool:
        """Keep a typed instant named as an allocation record, its time read (``keep_memory``)."""
        a = ev.args
        return self.keep_memory(
            ev.name, ev.pid, ev.tid, ts, a.device_type, a.device_id, a.nbytes, a.total_allocated, a.total_reserved
        )

    def _lookup(self, span: tuple[Any, ...]) -> int:
        """A new (name, cat, pid, tid[, inputs]) as the column reader packs it: key and lane, or -1 when left out."""
        name, cat, pid, tid, dims, types, concrete = _parts(span)
        if cat in _SKIP_CATS and vocab.skipped(name, cat):
            return -1
        key = (name, cat, dims or None, types or None, concrete or None)
        kid = self.keys.index.get(key)
        if kid is None:
            kid = self.keys.add(key)
        where = self.thread_at.get((pid, tid))
        if where is None:
            self._thread((pid, tid))
            where = len(self.columns) - 1
        return kid << _LANE_BITS | where


def _first(events: list[Any], cls: type) -> int:
    """Where the first event of class ``cls`` is in ``events``."""
    return next(i for i, e in enumerate(events) if type(e) is cls)


def _parts(span: tuple[Any, ...]) -> tuple[Any, ...]:
    """The column reader's lookup key as (name, cat, pid, tid, dims, types, concrete), inputs b"" when none."""
    if len(span) == 5:
        return (*span[:4], *span[4].split(b"\0"))
    return (*span, b"", b"", b"")


def large_file(path: str) -> bool:
    """Whether a file is large enough to be read into columns even before numpy is imported (``COLUMNS_FILE``)."""
    return size_hint(path) >= COLUMNS_FILE


def size_hint(path: str) -> int:
    """About how many bytes of JSON a trace file holds (a gzipped one, some eight times its size)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return 0
    return size * 8 if path.endswith(".gz") else size


def _durations(dur: Any) -> Any:
    """Durations in µs (float64) as int64 ns, when each is exactly what ``_time_ns`` makes of its text; else None.

    A duration under 2**33 µs is within 2**-10 ns of its text times 1000 as a float, so
    its nearest integer is the text's own when it is closer than a quarter; one that is
    not (four decimals or more, near a half), negative, or longer is left to ``_time_ns``.
    """
    import numpy as np

    if not len(dur):
        return dur.astype(np.int64)
    ns = dur * 1000.0
    whole = np.rint(ns)
    if not (dur.min() >= 0 and dur.max() < 2.0**33 and np.abs(ns - whole).max() < 0.25):
        return None
    return whole.astype(np.int64)


def _extend(th: EventColumns, ts: Any, dur: Any, kid: Any, corr: Any, ext: Any) -> None:
    th.ts.frombytes(ts.tobytes())
    th.dur.frombytes(dur.tobytes())
    th.kid.frombytes(kid.tobytes())
    th.corr.frombytes(corr.tobytes())
    th.ext.frombytes(ext.tobytes())


def _fixed_width_ns(raws: list[Any]) -> Any:
    """Times in µs all written alike, digits and three decimals (``"5106267470000.500"``), as int64 ns; else None.

    What ``ns_column`` makes of them (the digits without their point, read as an
    integer), read from a table of their characters, one row per time, without a
    Python int for each. A column with times of different widths, fewer or more
    decimals, a sign or an exponent is left to ``ns_column``.
    """
    import numpy as np

    n = len(raws)
    if not n:
        return None
    width = len(raws[0])
    text = b",".join(raws)
    # 5 to 19 characters: at least one digit before the point, at most 18 digits (within int64).
    if not 5 <= width <= 19 or len(text) != n * (width + 1) - 1:
        return None
    rows = np.frombuffer(text + b",", np.uint8).reshape(n, width + 1)
    point = width - 4
    # Every separator where a time of this width ends: no time is longer or shorter than the first.
    if not ((rows[:, width] == 44).all() and (rows[:, point] == 46).all()):
        return None
    digits = rows[:, :width] - np.uint8(48)  # a byte below "0" wraps past 9
    digits[:, point] = 0
    if digits.max() > 9:
        return None
    weights = _DIGIT_WEIGHTS.get(width)
    if weights is None:  # each digit's power of ten, none for the point
        powers = [10 ** (j - 1) for j in range(width - 1, 3, -1)] + [0, 100, 10, 1]
        weights = _DIGIT_WEIGHTS[width] = np.array(powers, np.int64)
    return digits.astype(np.int64) @ weights


_DIGIT_WEIGHTS: dict[int, Any] = {}  # by width, for ``_fixed_width_ns``


_NO_ARGS: Any = None  # ``TypedArgs()``: what a span without args reads as (made with the first piece)


class _Seen(dict[tuple[Any, ...], int]):
    """The column reader's spans seen, packed key and lane by span; ``_NEW`` for one not seen yet."""

    def __missing__(self, span: Any) -> int:
        return _NEW
