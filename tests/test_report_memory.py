"""The memory pane and the allocation records behind it, live and from a trace file, through the public API.

torch.profiler with ``profile_memory=True`` writes one ``[memory]`` instant per
allocation and free, with the allocator's totals after it ("Total Allocated", "Total
Reserved"). Every reader keeps them (``EventTable.memory``): a session's kineto events
and its exported trace give the same records; the pane draws them per device, marks the
peak (the most allocated torch reported) and the ops around it, and sums self memory
per op from them as torch's own ``key_averages()`` does.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import neuronprof
from neuronprof._report_memory import MEMORY_BUCKETS, MEMORY_CHARTS, buckets
from neuronprof.analysis import load_trace
from neuronprof.analysis.trace import EventKeys, read_events
from neuronprof.cli import main as analysis_main
from test_report import embedded
from test_report_panes import text_of


def _train(steps: int = 3) -> tuple[torch.nn.Module, torch.Tensor]:
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    return model, torch.randn(16, 32)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[neuronprof.Session, Path, Path]:
    """A session with profile_memory=True (an MLP with backward), its report and its exported trace."""
    out = tmp_path_factory.mktemp("memory")
    model, x = _train()
    with neuronprof.session(wait=0, warmup=1, active=3, output_dir=out, profile_memory=True) as s:
        for _ in s.steps():
            model(x).sum().backward()
    return s, s.report(out / "live.html"), s.export(out / "trace.json")


def _records(trace_file: Path) -> list[dict[str, Any]]:
    """torch's own [memory] events of a trace, read with the standard library."""
    events = json.loads(trace_file.read_text(encoding="utf-8"))["traceEvents"]
    return [e for e in events if e.get("name") == "[memory]" and e.get("ph") == "i"]


def _peak(page: str) -> tuple[int, str]:
    """The pane's peak: bytes allocated and the ops listed around it."""
    text = text_of(page, "memory")
    m = re.search(r"Peak: .*? allocated \(([\d,]+) B.*?Ops (?:running at|nearest to) the peak[^:]*: (.*?)\.", text)
    assert m, text
    return int(m.group(1).replace(",", "")), m.group(2)


def test_a_session_and_its_export_hold_the_same_memory_records(run: tuple[neuronprof.Session, Path, Path]) -> None:
    s, _, trace_file = run
    live = [t for t in s.recording.event_tables if t.memory]
    offline = load_trace(trace_file).event_tables
    assert live and len(offline) == 1
    (table,) = offline
    base = int(table.metadata["baseTimeNanoseconds"])
    assert set(table.memory) == {device for t in live for device in t.memory} == {(0, -1)}  # the host: CPU
    records = _records(trace_file)
    assert len(table.memory[(0, -1)]) == len(records) > 0
    for device, m in table.memory.items():
        mine = [(t, b, a, r) for lt in live for t, b, a, r in _columns(lt.memory[device])]
        theirs = [(t + base, b, a, r) for t, b, a, r in _columns(m)]
        assert mine == theirs  # times on kineto's clock: the trace writes them from its base
    # Kept, no longer left out: the trace's other instants are still counted.
    others = sum(1 for e in json.loads(trace_file.read_text())["traceEvents"] if e.get("ph") == "i") - len(records)
    assert table.skipped.get("i", 0) == others
    # The records travel to worker processes with the table.
    again = pickle.loads(pickle.dumps(table))
    assert dict(again.memory) == dict(table.memory)


def _columns(m: Any) -> list[tuple[int, int, int, int]]:
    return list(zip(m.ts, m.nbytes, m.allocated, m.reserved))


def test_the_peak_is_torchs_largest_total_with_the_ops_around_it_live_and_offline(
    run: tuple[neuronprof.Session, Path, Path], tmp_path: Path
) -> None:
    _, live_page, trace_file = run
    torch_peak = max(e["args"]["Total Allocated"] for e in _records(trace_file))
    assert analysis_main(["report", str(trace_file), "-o", str(tmp_path / "offline.html")]) == 0
    offline_page = (tmp_path / "offline.html").read_text(encoding="utf-8")
    live = _peak(live_page.read_text(encoding="utf-8"))
    assert live == _peak(offline_page)
    assert live[0] == torch_peak
    assert "ProfilerStep#" in live[1] and "aten::" in live[1]  # the step and the op that allocated
    text = text_of(offline_page, "memory")
    assert "CPU: allocated and reserved memory over time" in text
    assert 'id="memory-chart-0"' in offline_page and 'id="memory-peak-0"' in offline_page
    # The same top allocating ops, live and from the file.
    live_rows = embedded(live_page.read_text(encoding="utf-8"))["grids"]["memory"]["rows"]
    assert live_rows == embedded(offline_page)["grids"]["memory"]["rows"] != []


def test_the_top_allocating_ops_are_torchs_own_self_memory(tmp_path: Path) -> None:
    model, x = _train()
    with torch.profiler.profile(profile_memory=True) as prof:
        for _ in range(2):
            model(x).sum().backward()
    path = tmp_path / "plain.json"
    prof.export_chrome_trace(str(path))
    assert analysis_main(["report", str(path), "-o", str(tmp_path / "plain.html")]) == 0
    rows = embedded((tmp_path / "plain.html").read_text(encoding="utf-8"))["grids"]["memory"]["rows"]
    own = {e.key: e.self_cpu_memory_usage for e in prof.key_averages() if e.self_cpu_memory_usage > 0}
    assert {r["name"]: r["cpu_bytes"] for r in rows} == own
    assert "Self NEURON memory" not in json.dumps(rows)  # a CPU run: no device column


def test_a_trace_without_memory_says_so_and_how_to_record_it(tmp_path: Path) -> None:
    model, x = _train()
    with neuronprof.session(wait=0, warmup=1, active=2, output_dir=tmp_path) as s:
        for _ in s.steps():
            model(x)
    live = text_of(s.report(tmp_path / "live.html").read_text(encoding="utf-8"), "memory")
    assert "memory was not recorded: pass profile_memory=True" in live
    trace = s.export(tmp_path / "t.json")
    assert all(not t.memory for t in load_trace(trace).event_tables)
    assert analysis_main(["report", str(trace), "-o", str(tmp_path / "off.html")]) == 0
    offline = text_of((tmp_path / "off.html").read_text(encoding="utf-8"), "memory")
    assert "memory was not recorded: this trace holds no [memory] events" in offline
    assert "profile_memory=True" in offline and "Peak" not in offline


def _long_trace(path: Path, n: int, peak_at: int, spike: int = 1000) -> int:
    """A trace of one op and ``n`` allocation records of a device (CUDA 0), the most allocated at record ``peak_at``."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": n + 10},
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 1, "dur": n + 5},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "mark", "pid": 1, "tid": 1, "ts": 2},
    ]
    allocated = 0
    for i in range(n):
        size = spike if i == peak_at else (-7 if i % 2 else 7)
        allocated += size
        args = {"Total Reserved": 1 << 20, "Total Allocated": allocated, "Bytes": size, "Device Id": 0}
        events.append(
            {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
             "ts": f"{2 + i}.500", "args": {**args, "Device Type": 1, "Addr": i}}
        )  # fmt: skip
        if i == peak_at:
            peak, allocated = allocated, allocated - size  # freed at once
            freed = {**args, "Bytes": -size, "Total Allocated": allocated, "Device Type": 1}
            events.append({**events[-1], "ts": f"{2 + i}.600", "args": freed})
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}), encoding="utf-8")
    return peak


def test_a_long_run_is_drawn_bounded_and_keeps_its_peak(tmp_path: Path) -> None:
    n = 20 * MEMORY_BUCKETS
    peak = _long_trace(tmp_path / "long.json", n, peak_at=n // 3)
    table = read_events(str(tmp_path / "long.json"), EventKeys())
    assert len(table.memory[(1, 0)]) == n + 1 and table.skipped == {"i": 1}
    assert analysis_main(["report", str(tmp_path / "long.json"), "-o", str(tmp_path / "long.html")]) == 0
    page = (tmp_path / "long.html").read_text(encoding="utf-8")
    assert _peak(page) == (peak, "ProfilerStep#1 › aten::empty")
    text = text_of(page, "memory")
    drawn = re.search(r"([\d,]+) of ([\d,]+) allocation records are drawn", text)
    assert drawn and int(drawn.group(2).replace(",", "")) == n + 1
    assert int(drawn.group(1).replace(",", "")) <= 4 * MEMORY_BUCKETS + 2
    chart = re.search(r'<path class="alloc" d="([^"]+)"', page)
    assert chart and chart.group(1).count("V") < 4 * MEMORY_BUCKETS + 2  # bounded, whatever the records
    assert "CUDA 0" in text  # no device label in a trace of host ops only: c10's name of device type 1


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.integers(0, 10**6), min_size=1, max_size=3000),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 50),
)
def test_bucketing_keeps_the_first_last_and_every_columns_extremes(gaps: list[int], seed: int, n: int) -> None:
    import random

    rng = random.Random(seed)
    ts, t = [], rng.randint(0, 2**62)
    for g in gaps:
        t += g
        ts.append(t)
    columns = [[rng.randint(-(2**40), 2**40) for _ in ts] for _ in range(2)]
    kept = buckets(ts, columns, n)
    assert kept == sorted(set(kept)) and kept[0] == 0 and kept[-1] == len(ts) - 1
    assert len(kept) <= max(4 * n + 2, len(ts)) and (len(ts) > 4 * n or kept == list(range(len(ts))))
    for column in columns:
        assert max(column) in [column[i] for i in kept] and min(column) in [column[i] for i in kept]
        assert column.index(max(column)) in kept  # the first record of the peak: its time is the peak's


def test_a_folder_of_traces_keeps_each_files_records_and_charts_the_highest_peaks(tmp_path: Path) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    peaks = [_long_trace(folder / f"rank-{i}.json", 40 + i, 4, spike=1000 + 10 * i) for i in range(MEMORY_CHARTS + 1)]
    tables = load_trace(folder).event_tables  # read apart and merged under one set of keys
    assert [len(t.memory[(1, 0)]) for t in tables] == [41 + i for i in range(MEMORY_CHARTS + 1)]
    assert analysis_main(["report", str(folder), "-o", str(tmp_path / "ranks.html")]) == 0
    page = (tmp_path / "ranks.html").read_text(encoding="utf-8")
    charted = re.findall(r"<h3[^>]*>rank-(\d+)\.json · CUDA 0: allocated and reserved", page)
    assert len(charted) == MEMORY_CHARTS and "0" not in charted  # the lowest peak is the one left out
    assert min(peaks) == peaks[0]
    assert f"{MEMORY_CHARTS} of {MEMORY_CHARTS + 1} devices are drawn" in text_of(page, "memory")


def test_the_cycles_of_a_session_are_drawn_as_one_series_per_device(tmp_path: Path) -> None:
    model, x = _train()
    with neuronprof.session(wait=0, warmup=1, active=1, repeat=2, output_dir=tmp_path, profile_memory=True) as s:
        for _ in s.steps():
            model(x).sum().backward()
    cycles = [t for t in s.recording.event_tables if t.memory]
    assert len(cycles) == 2
    text = text_of(s.report(tmp_path / "r.html").read_text(encoding="utf-8"), "memory")
    records = sum(len(m) for t in cycles for m in t.memory.values())
    assert text.count("allocated and reserved memory over time") == 1  # the host, both cycles
    assert f"{records:,} allocation records" in text
    peak = max(max(m.allocated) for t in cycles for m in t.memory.values())
    assert _peak(s.report(tmp_path / "r2.html").read_text(encoding="utf-8"))[0] == peak
