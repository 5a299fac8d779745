"""The column reader and the column walk give what the event-by-event reader and walk give, on generated traces.

A large trace is read a piece at a time column by column (``_reader_columns``:
msgspec's typed decode, times parsed in bulk) and its long timelines nested with
numpy (``_nesting_columns``); anything unusual is left to the event-by-event
reader and walk, which are also what runs without msgspec. Here the column paths
are switched on for every size, and each generated trace is read both ways: the
event tables (columns, keys, lanes, names, counts, notes) and the sums (calls,
self and total times, device time, steps, samples, notes) must be the same.

The traces are kineto-like: steps, nested ops (same-name only children, bookkeeping
ops, the profiler's own Python frames and the frames they call), runtime calls
linked to kernels on device streams by correlation or External id, flows, async
collectives, zero-length and same-start spans, spans that run past their parent or
across a step's edge, begin/end pairs, FLOPs, ids written as text and times in every
spelling a producer writes (three decimals, integers, six decimals, strings).
"""

from __future__ import annotations

import json
import pickle
import random
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import neuronprof.analysis._typed_reader as typed_reader
from neuronprof.analysis.trace import (
    EventKeys,
    EventTable,
    _nesting_columns,
    _reader,
    _reader_columns,
    read_events,
    sum_events,
)
from neuronprof.analysis.trace._events import IdSet
from neuronprof.analysis.trace._rules import _decode_input, _time_ns, ns_column
from neuronprof.analysis.trace._sums import _build

msgspec = pytest.importorskip("msgspec")

_HOST = [
    ("aten::mm", "cpu_op"),
    ("aten::add", "cpu_op"),
    ("aten::div_", "cpu_op"),
    ("aten::is_leaf", "cpu_op"),  # not a row: hands its self time to its parent
    ("label", "user_annotation"),
    ("train.py(12): forward", "python_function"),
    ("neuronprof/_session.py(3): run", "python_function"),  # an own frame
    ("<built-in method foo>", "python_function"),  # hidden under an own frame
    ("gloo:all_reduce", "user_annotation"),  # async
    ("cudaLaunchKernel", "cuda_runtime"),
    ("Torch-Compiled Region: 0/0", "cpu_op"),
    ("TorchDynamo Cache Lookup", "cpu_op"),
    ("c10d::allreduce_", "cpu_op"),
]
_KERNELS = [("gemm", "kernel"), ("elementwise", "kernel"), ("Memcpy HtoD", "gpu_memcpy"), ("ncclDevKernel_X", "kernel")]
_BASES = (0, 5_106_267_470_000_000, 1_712_195_495_520_835_103)


def _us(ns: int, spelling: int) -> str:
    """A time in ns as a trace writes it in µs: three decimals, an integer, six decimals, or a string."""
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if spelling == 0:
        return f"{sign}{ns // 1000}.{ns % 1000:03d}"
    if spelling == 1:
        return f"{sign}{ns // 1000}"
    if spelling == 2:
        return f"{sign}{ns / 1000:.6f}"
    return json.dumps(f"{sign}{ns // 1000}.{ns % 1000:03d}")


def _trace(seed: int) -> str:
    """A kineto-like trace, mostly clean, with a chance of each thing the column paths leave to the exact ones."""
    rng = random.Random(seed)
    spelling = rng.choice([0, 0, 0, 1, 2, None])
    events: list[dict[str, Any]] = []
    corr = 0

    def time(ns: int) -> str:
        return "@" + _us(ns, spelling if spelling is not None else rng.choice([0, 1, 2, 3]))

    def span(name: str, cat: str, pid: Any, tid: Any, t: int, d: int, args: Any = None) -> None:
        ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid}
        ev.update(ts=time(t), dur=time(d))
        if args is not None:
            ev["args"] = args
        events.append(ev)

    def nest(tid: int, t0: int, t1: int, depth: int) -> None:
        nonlocal corr
        t = t0
        while t < t1 and rng.random() < 0.8:
            name, cat = rng.choice(_HOST)
            d = 0 if rng.random() < 0.1 else rng.randint(0, t1 - t)
            if rng.random() < 0.03:
                d += rng.randint(1, 5000)  # runs past its parent
            args: Any = None
            if cat == "cuda_runtime":
                corr += 1
                c = corr if rng.random() < 0.9 else rng.randint(0, corr)
                args = {"correlation": c if rng.random() < 0.97 else str(c), "External id": rng.randint(0, 40)}
                for _ in range(rng.choice([0, 1, 1, 2])):
                    kname, kcat = rng.choice(_KERNELS)
                    kargs: dict[str, Any] = {"correlation": c, "External id": args["External id"]}
                    if rng.random() < 0.2:
                        kargs = {"External id": rng.randint(0, 40)}
                    if rng.random() < 0.05:
                        kargs["device_type"] = "cuda"
                    span(kname, kcat, 0, rng.choice([7, 8]), t + rng.randint(0, 3000), rng.randint(0, 3000), kargs)
            elif rng.random() < 0.5:
                args = {
                    "External id": rng.randint(0, 40),
                    "Input Dims": rng.choice([[[2, 3], []], [[4]], [[[1], [2]]]]),
                    "Input type": rng.choice([["float", "Scalar"], ["c10::BFloat16"]]),
                    "Concrete Inputs": rng.choice([["", "2"], [""]]),
                }
                if rng.random() < 0.05:
                    args["flops"] = rng.choice([100, 2.5e3])
            elif rng.random() < 0.2:
                args = {}
            if args is not None and rng.random() < 0.05:  # Neuron Runtime's id (TorchNeuron's framework trace)
                args = {**args, "nrt_sequence_id": rng.choice([rng.randint(0, 99), str(rng.randint(0, 99))])}
            span(name, cat, 1, tid, t, d, args)
            if d > 2 and depth < 5 and rng.random() < 0.6:
                nest(tid, t + rng.randint(0, 2), t + d, depth + 1)
            if rng.random() < 0.05:
                span(name, cat, 1, tid, t, d, args)  # a same-name only child, or a twin
            t += d + rng.choice([0, 0, 1, 100])

    base = rng.choice(_BASES)
    for tid in range(rng.randint(1, 3)):
        cursor = base + rng.randint(0, 10_000)
        steps = rng.choice([0, 0, 1, 3])
        for n in range(steps):
            d = rng.randint(20_000, 60_000)
            span(f"ProfilerStep#{n + 1}", "user_annotation", 1, tid, cursor, d)
            crossing = rng.randint(0, 3000) if rng.random() < 0.05 else 0
            nest(tid, cursor + rng.choice([0, 1]), cursor + d + crossing, 0)
            cursor += d + rng.choice([0, 0, 500])
        if not steps:
            nest(tid, cursor, cursor + 100_000, 0)
    if rng.random() < 0.1:
        events.append({"ph": "B", "name": "region", "pid": 1, "tid": 9, "ts": time(base + 10)})
        events.append({"ph": "E", "pid": 1, "tid": 9, "ts": time(base + 900)})
    for _ in range(rng.randint(0, 5)):
        ph = rng.choice(["s", "f", "i", "C"])
        events.append({"ph": ph, "name": "ac2g", "cat": "ac2g", "pid": 1, "tid": 0, "ts": time(base), "id": 3})
    if rng.random() < 0.4:  # torch's allocation records (profile_memory=True); now and then one that is not
        for _ in range(rng.randint(1, 40)):
            args: dict[str, Any] = {"Total Reserved": rng.choice([0, 1 << 21]), "Total Allocated": rng.randint(0, 9999)}
            args.update(
                {"Bytes": rng.randint(-999, 999), "Device Id": rng.choice([-1, 0]), "Device Type": rng.choice([0, 1])}
            )
            if rng.random() < 0.05:
                args[rng.choice(list(args))] = rng.choice(["1", 1.5, None])
            name = "[memory]" if rng.random() < 0.95 else "[OutOfMemory]"
            t = base + rng.randint(0, 200_000)
            events.append(
                {
                    "ph": "i",
                    "cat": "cpu_instant_event",
                    "s": "t",
                    "name": name,
                    "pid": 1,
                    "tid": rng.randint(0, 2),
                    "ts": time(t),
                    "args": args,
                }
            )
    if rng.random() < 0.3:
        span("PyTorch Profiler (0)", "Trace", "Spans", "PyTorch Profiler", base, 1000)
    if rng.random() < 0.2:
        span("label", "gpu_user_annotation", 0, 7, base, 1000)
    if rng.random() < 0.5:
        rng.shuffle(events)
    events[:0] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    ]
    text = json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=rng.choice([None, 1]))
    # "@123.456" -> 123.456 (a JSON number); "@\"1.000\"" -> "1.000" (a JSON string)
    text = re.sub(r'"@\\"([^"\\]*)\\""', r'"\1"', text)
    return re.sub(r'"@([^"]*)"', r"\1", text)


def _columns_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch the column reader and the column walk on for every piece and timeline, however small."""
    monkeypatch.setattr(_reader_columns, "COLUMNS_MIN", 0)
    monkeypatch.setattr(_reader_columns, "COLUMNS_FILE", 0)
    monkeypatch.setattr(_nesting_columns, "COLUMNS_MIN", 0)
    monkeypatch.setattr(_nesting_columns, "COLUMNS_MIN_COLD", 0)
    monkeypatch.setattr(_nesting_columns, "BLOCK", 64)  # several blocks of top-level spans


def _read(path: Path, *, columns: bool, fast: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as m:
        if columns:
            _columns_everywhere(m)
        else:
            m.setattr(_reader_columns, "COLUMNS_MIN", 1 << 60)
        if not fast:
            m.setattr(typed_reader, "msgspec", None)
        try:
            return read_events(str(path), EventKeys(), empty_ok=True)
        except Exception as exc:  # noqa: BLE001 - both readers must fail alike
            return f"{type(exc).__name__}: {exc}"


def _table_view(table: EventTable) -> dict[str, Any]:
    """What an event table holds, with keys as what they mean (name, category, decoded inputs)."""

    def key(k: int) -> tuple[Any, ...]:
        name, cat, dims, types, concrete = table.keys.keys[k]
        return (name, cat, _decode_input(dims), _decode_input(types), _decode_input(concrete))

    return {
        "lanes": [
            (where, list(th.ts), list(th.dur), [key(k) for k in th.kid], list(th.corr), list(th.ext))
            for where, th in table.threads.items()
        ],
        "procs": dict(table.procs),
        "thread_names": dict(table.thread_names),
        "runtime_corr": table.runtime_corr,
        "events": table.events,
        "skipped": list(table.skipped.items()),
        "flops": sorted(((key(k), v) for k, v in table.flops.items()), key=repr),
        "evidence": table.evidence,
        "notes": table.notes,
        "sequence_ids": [(seq, where, t, d, key(k)) for seq, where, t, d, k in table.sequence_ids],
        "memory": {
            device: (list(m.ts), list(m.nbytes), list(m.allocated), list(m.reserved), [m.lanes[i] for i in m.lane])
            + (m.out_of_memory,)
            for device, m in table.memory.items()
        },
    }


def _sums_view(table: EventTable, *, columns: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Everything the walk adds up for ``table`` (per key, per step, notes) and the table and samples it makes."""
    with monkeypatch.context() as m:
        m.setattr(_nesting_columns, "COLUMNS_MIN", 0 if columns else 1 << 60)
        m.setattr(_nesting_columns, "COLUMNS_MIN_COLD", 0)
        m.setattr(_nesting_columns, "BLOCK", 64)
        sums = sum_events(table)
    view = {name: list(value) if isinstance(value, list) else value for name, value in vars(sums).items()}
    view["skipped"] = list(sums.skipped.items())
    view["samples"] = [[*s[:2], list(s[2].items()), list(s[3].items()), *s[4:]] for s in sums.samples]
    view["async_keys"] = sorted(sums.async_keys)
    trace = _build(sums, table.keys, (table.source,))
    view["table"] = trace.table(row_limit=None)
    view["steps"] = trace.samples
    return view


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_columns_and_event_by_event_give_the_same_tables_and_sums(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    path = tmp_path_factory.mktemp("columns") / "t.json"
    path.write_text(_trace(seed), encoding="utf-8")
    columns = _read(path, columns=True, fast=True, monkeypatch=monkeypatch)
    each = _read(path, columns=False, fast=True, monkeypatch=monkeypatch)
    stdlib = _read(path, columns=False, fast=False, monkeypatch=monkeypatch)
    if isinstance(columns, str):  # a trace none of the readers reads: the same error from each
        assert columns == each == stdlib
        return
    assert _table_view(columns) == _table_view(each) == _table_view(stdlib)
    # The walk: the same sums from both walks on one table (keys numbered alike) ...
    fast = _sums_view(columns, columns=True, monkeypatch=monkeypatch)
    assert fast == _sums_view(columns, columns=False, monkeypatch=monkeypatch)
    exact = _sums_view(stdlib, columns=False, monkeypatch=monkeypatch)
    assert _sums_view(stdlib, columns=True, monkeypatch=monkeypatch) == exact
    # ... and the same table and step samples from the fast paths as from the pure-Python ones.
    assert (fast["table"], fast["steps"]) == (exact["table"], exact["steps"])


def test_a_kineto_trace_takes_the_column_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The property above means something only if the column paths run: here a clean trace takes them.
    path = tmp_path / "t.json"
    seed = next(s for s in range(100) if "ProfilerStep" in _trace(s) and '"correlation"' in _trace(s))
    path.write_text(_trace(seed), encoding="utf-8")
    ran: list[str] = []
    columns, walk = _reader._FileReader._columns, _nesting_columns.walk_columns
    monkeypatch.setattr(_reader._FileReader, "_columns", lambda self, p: ran.append("read") or columns(self, p))
    monkeypatch.setattr(_nesting_columns, "walk_columns", lambda *a: ran.append("walk") or walk(*a))
    _columns_everywhere(monkeypatch)
    table = read_events(str(path), EventKeys())
    sum_events(table)
    assert "read" in ran and "walk" in ran


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.integers(0, 10**17), st.integers(0, 999)).map(lambda p: f"{p[0]}.{p[1]:03d}"),
            st.integers(-(10**6), 10**20).map(str),
            st.tuples(st.floats(0, 1e15), st.integers(0, 6)).map(lambda p: f"{p[0]:.{p[1]}f}"),
            st.sampled_from(['"1.500"', "1.5e3", "-0.500", "-12.250", "0.050", "1e400", "[1.5]", "null"]),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_times_read_in_bulk_are_the_times_read_one_by_one(texts: list[str]) -> None:
    raws = msgspec.json.decode(("[" + ",".join(texts) + "]").encode(), type=list[msgspec.Raw])
    one_by_one = [_time_ns(typed_reader.raw_number(raw)) for raw in raws]
    bulk = ns_column(raws, typed_reader.raw_number)
    if None in one_by_one or any(not -(2**63) <= ns < 2**63 for ns in one_by_one if ns is not None):
        assert bulk is None
    else:
        assert bulk is not None and bulk.tolist() == one_by_one


def test_bytes_the_typed_decode_skips_but_the_loose_one_reads_still_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not UTF-8 in a span's args "name": the typed decode skips that field, the loose one (read
    # when the piece is left to the event-by-event reader) refuses it: the stdlib reader reads it.
    span = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2, "args": {}}
    text = json.dumps({"traceEvents": [{**span, "args": {"name": "XX"}}, {**span, "ts": "3.0"}]})
    path = tmp_path / "t.json"
    path.write_bytes(text.encode().replace(b"XX", b"\x80"))
    for columns in (True, False):
        table = _read(path, columns=columns, fast=True, monkeypatch=monkeypatch)
        assert not isinstance(table, str), table
        assert [len(th.ts) for th in table.threads.values()] == [2]


def test_runtime_ids_from_pieces_read_both_ways_are_one_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Pieces of a few events: one holds an id written as text (read event by event), the others
    # are read column by column; the runtime calls' ids of both end in one set, as the stdlib reads them.
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 2,
         "args": {"correlation": str(i) if i == 7 else i}}
        for i in range(40)
    ]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    monkeypatch.setattr(typed_reader, "_FAST_CHUNK", 512)
    ran: list[str] = []
    columns, each = _reader._FileReader._columns, _reader._FileReader._each
    monkeypatch.setattr(_reader._FileReader, "_columns", lambda self, p: columns(self, p) and not ran.append("columns"))
    monkeypatch.setattr(_reader._FileReader, "_each", lambda self, *a: ran.append("each") or each(self, *a))
    with monkeypatch.context() as m:
        _columns_everywhere(m)
        table = read_events(str(path), EventKeys())
    assert "columns" in ran and "each" in ran  # both ways
    assert isinstance(table.runtime_corr, IdSet)
    stdlib = _read(path, columns=False, fast=False, monkeypatch=monkeypatch)
    assert table.runtime_corr == set(range(40)) == stdlib.runtime_corr
    assert 7 in table.runtime_corr and 40 not in table.runtime_corr and -1 not in table.runtime_corr
    assert pickle.loads(pickle.dumps(table.runtime_corr)) == table.runtime_corr


def test_spans_with_neuron_sequence_ids_read_column_by_column_are_kept_as_read_event_by_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # TorchNeuron's framework trace: some spans carry nrt_sequence_id; the column reader keeps
    # them (with their lane, start, duration and key) in file order, as the other readers do.
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i % 3}", "pid": 1, "tid": 1 + i % 2, "ts": f"{10 * i}.125",
         "dur": 2.5, "args": {"External id": i, **({"nrt_sequence_id": 100 + i} if i % 4 == 0 else {})}}
        for i in range(30)
    ]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    ran: list[str] = []
    columns = _reader._FileReader._columns
    monkeypatch.setattr(_reader._FileReader, "_columns", lambda self, p: columns(self, p) and not ran.append("columns"))
    ways = ((True, True), (False, True), (False, False))  # columns, event by event, stdlib
    tables = [_read(path, columns=c, fast=f, monkeypatch=monkeypatch) for c, f in ways]
    assert ran
    views = [_table_view(t) for t in tables]
    assert views[0] == views[1] == views[2]
    assert [s[:4] for s in tables[0].sequence_ids] == [
        (100 + i, (1, 1 + i % 2), 10_000 * i + 125, 2500) for i in range(0, 30, 4)
    ]
