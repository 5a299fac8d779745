"""One recording, read once: a live session's record and a loaded trace are the same object.

kineto's events of each cycle are converted once into an event table, the same
columns a trace file's reader fills; ``s.recording`` (the type ``load_trace``
returns) is built once from them, and every read-out reads it.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

import neuronprof
from neuronprof import _kineto
from neuronprof.analysis import Trace


def _loop(s: neuronprof.Session) -> None:
    x = torch.randn(32, 32)
    w = torch.randn(32, 32)
    for _ in s.steps():
        y = torch.relu(x @ w)
        (y * 2).sum()


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """How many times each cycle's kineto events were converted (keyed by cycle index)."""
    counts: Counter[int] = Counter()
    original = _kineto._feed

    def counting(agg: Any, profile: Any) -> None:
        counts[id(profile)] += 1
        original(agg, profile)

    monkeypatch.setattr(_kineto, "_feed", counting)
    return counts


@pytest.mark.slow
def test_every_read_out_reads_the_record_converted_once(tmp_path: Path, conversions: Counter[int]) -> None:
    with neuronprof.session(
        backend="cpu", wait=0, warmup=1, active=2, repeat=2, record_shapes=True, with_stack=True, output_dir=tmp_path
    ) as s:
        _loop(s)
    assert not conversions  # nothing is converted inside the loop or at the block's end

    table = s.table()
    first = s.insights()
    again = s.insights()
    s.report(tmp_path / "report.html")
    s.roofline(peak_flops=1e12, peak_bw=1e11)
    trace = s.trace()
    _ = s.notes
    stacks = s.export(tmp_path / "stacks.txt", format="stacks").read_text()
    assert "aten::mm" in stacks

    # Two cycles, each converted exactly once, whatever was read and how often.
    assert sorted(conversions.values()) == [1, 1]
    assert first is again  # the findings are read once and kept with the record
    assert trace is s.recording
    assert table.steps == s.recording.steps == 4
    # Nor does torch convert them a second time into its own events (the stacks come from the table).
    if hasattr(s.profiler.profiler, "_function_events"):
        assert s.profiler.profiler._function_events is None


def test_reading_the_record_changes_nothing(tmp_path: Path) -> None:
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=3, output_dir=tmp_path) as s:
        _loop(s)
    record = s.recording
    notes = list(s.notes)
    for _ in range(2):
        s.table()
        s.insights()
        s.table(device_only=True)
    assert s.recording is record
    assert s.notes == notes
    assert hash(record) == hash(s.recording)  # a plain record: hashable, no torch object in it
    assert not any(isinstance(v, torch.profiler.profile) for v in vars(record).values())


def test_the_record_is_what_load_trace_returns_for_the_export(tmp_path: Path) -> None:
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=3, output_dir=tmp_path) as s:
        _loop(s)
    offline = neuronprof.load_trace(s.export(tmp_path / "run.json"))
    assert type(s.recording) is type(offline) is Trace
    live_events = s.recording.timeline()
    offline_events = offline.timeline()

    def host(t: Any) -> Counter[tuple[Any, ...]]:
        return Counter((e.name, e.category, e.end_ns - e.start_ns, e.input_shapes) for e in t.host)

    assert host(live_events) == host(offline_events)
    assert live_events.source == "session"
    # The table verbs take the same arguments live and offline.
    live_table = s.table("cpu", None)
    assert offline.table("cpu", None).rows == s.recording.table("cpu", None).rows
    assert [r.name for r in live_table.rows] == [r.name for r in offline.table("cpu", None).rows]
    # The findings are the same function of the same events.
    assert [f.kind for f in s.recording.insights().findings] == [f.kind for f in offline.insights().findings]


# Every open of a file, by any route (builtins.open, io.open, os.open, pathlib, gzip),
# raises the interpreter's "open" audit event; a hook cannot be removed, so it records
# only while a test listens.
_OPENS: list[list[str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _OPENS and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENS[-1].append(os.path.abspath(os.fsdecode(args[0])))


sys.addaudithook(_audit)


@pytest.mark.parametrize("name", ["run.json", "run.json.gz"])
def test_the_report_command_opens_the_trace_once(tmp_path: Path, name: str) -> None:
    from neuronprof.cli import main

    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=2, output_dir=tmp_path) as s:
        _loop(s)
    path = s.export(tmp_path / name)
    _OPENS.append([])
    try:
        assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    finally:
        opened = _OPENS.pop()
    assert opened.count(os.path.abspath(path)) == 1, opened
    assert (tmp_path / "r.html").stat().st_size > 0


def test_a_row_is_looked_up_by_name_and_a_number_is_refused_clearly(tmp_path: Path) -> None:
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=tmp_path) as s:
        _loop(s)
    table = s.table()
    assert table.row("aten::relu").calls >= 1
    with pytest.raises(TypeError, match="row's name"):
        table.row(0)  # type: ignore[arg-type]


def test_the_session_table_keeps_the_recorded_dtypes_as_the_record_and_the_export_do(tmp_path: Path) -> None:
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=2, record_shapes=True, output_dir=tmp_path) as s:
        _loop(s)
    offline = neuronprof.load_trace(s.export(tmp_path / "run.json"))

    def dtypes(table: Any) -> dict[tuple[str, Any], Any]:
        return {(r.name, r.input_shapes): r.input_dtypes for r in table.rows}

    live = dtypes(s.table("cpu", None))
    assert live[("aten::mm", ((32, 32), (32, 32)))] == ("float", "float")
    assert live == dtypes(s.recording.table("cpu", None, group_by="shape"))
    assert live == dtypes(offline.table("cpu", None, group_by="shape"))


def test_with_dropped_cycles_the_findings_are_read_once_too(tmp_path: Path) -> None:
    with neuronprof.session(
        backend="cpu", wait=0, warmup=1, active=1, repeat=3, keep_cycles=1, output_dir=tmp_path
    ) as s:
        _loop(s)
    first = s.insights()
    assert s.insights() is first
    assert any("keep_cycles" in n for n in first.notes)


def test_an_on_off_option_that_is_not_a_bool_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=tmp_path) as s:
        _loop(s)
    kept = tmp_path / "keep.json"
    kept.write_text("precious")
    for call in (
        lambda: s.export(kept, overwrite="no"),
        lambda: s.report(tmp_path / "keep.html", overwrite="no"),
        lambda: s.table(device_only="yes"),
    ):
        with pytest.raises(ValueError, match="must be True or False"):
            call()
    assert kept.read_text() == "precious"
    assert not (tmp_path / "keep.html").exists()


def test_torchs_own_schedule_warning_names_the_users_line(tmp_path: Path) -> None:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with neuronprof.session(backend="cpu", wait=0, warmup=0, active=1, output_dir=tmp_path) as s:
            _loop(s)
    [warmup] = [w for w in caught if "warmup" in str(w.message)]
    assert warmup.filename == __file__
