"""A command's own trace holds its events once: read into columns, its tables let go of them.

``advise`` and ``report`` load a trace for their findings and panes only: ``read_of(trace,
release=True)`` reads each table's events into the columns the panes and the findings
read, then empties the table's columns (tables with allocation records keep theirs: the
memory pane reads the ops around each record). What they print is what a trace that kept
its events gives; the emptied trace refuses to be read again rather than read as empty.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import neuronprof
from neuronprof.analysis import load_trace
from neuronprof.analysis.insights._trace import insights_of, read_of
from neuronprof.cli import main as cli_main
from neuronprof.report import trace_report

RECORDED = Path(__file__).parent / "recorded" / "training_step.pt.trace.json.gz"


def _columns(read: Any) -> list[Any]:
    cols = read.columns
    fields = ("key", "start", "end", "thread", "ext", "corr", "dkey", "dstart", "dend", "dext", "dcorr")
    return [list(cols.names), list(cols.threads), *(getattr(cols, f).tolist() for f in fields)]


def test_a_trace_whose_tables_let_go_of_their_events_gives_the_same_columns_and_findings() -> None:
    kept, released = load_trace(RECORDED), load_trace(RECORDED)
    read = read_of(released, release=True)
    assert _columns(read) == _columns(read_of(kept))
    assert all(len(th.ts) == 0 for table in released.event_tables for th in table.threads.values())
    assert insights_of(released, read) == kept.insights()
    # Its table is read from its sums, which stay.
    assert released.table().to_text() == kept.table().to_text()
    # Its events are never read again as if there were none.
    with pytest.raises(RuntimeError, match="load the trace again"):
        released.timeline()
    with pytest.raises(RuntimeError, match="load the trace again"):
        read_of(released)


def test_the_commands_print_what_a_trace_that_kept_its_events_gives(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(*args: str) -> str:
        assert cli_main([*args]) == 0
        return capsys.readouterr().out

    released = [run("advise", str(RECORDED), "--format", "json")]
    assert cli_main(["report", str(RECORDED), "-o", str(tmp_path / "released.html")]) == 0
    # The same commands on a trace that keeps its events.
    from neuronprof.analysis.insights import _trace

    keep = _trace.read_of
    monkeypatch.setattr(_trace, "read_of", lambda trace, release=False: keep(trace))
    assert [run("advise", str(RECORDED), "--format", "json")] == released
    assert cli_main(["report", str(RECORDED), "-o", str(tmp_path / "kept.html")]) == 0
    assert (tmp_path / "released.html").read_bytes() == (tmp_path / "kept.html").read_bytes()
    assert json.loads(released[0])["findings"], "the recorded step has findings to compare"


def test_allocation_records_keep_the_ops_around_them_for_the_memory_pane(tmp_path: Path) -> None:
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, profile_memory=True, output_dir=tmp_path) as s:
        for _ in s.steps():
            torch.relu(torch.randn(64, 64)).sum()
    path = s.export(tmp_path / "memory.json")
    kept, released = load_trace(path), load_trace(path)
    read = read_of(released, release=True)
    assert any(table.memory for table in released.event_tables)
    # The tables with allocation records keep their events; the memory pane reads the same ops.
    assert all(any(len(th.ts) for th in t.threads.values()) for t in released.event_tables if t.memory)
    settings: dict[str, Any] = {}
    table = kept.table()
    assert trace_report(released, table, settings=settings, read=read) == trace_report(kept, table, settings=settings)


def test_report_lets_the_columns_go_before_it_makes_the_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The page (the template, the panes' JSON) is made once the columns are freed: its memory takes their place.
    import gc
    import weakref

    from neuronprof import report
    from neuronprof.analysis.insights import _trace

    columns: list[Any] = []
    read = _trace.read_of
    monkeypatch.setattr(
        _trace, "read_of", lambda *a, **k: (r := read(*a, **k), columns.append(weakref.ref(r.columns.start)))[0]
    )
    alive: list[bool] = []
    page = report._profile_page

    def profile_page(*args: Any, **kwargs: Any) -> str:
        gc.collect()
        alive.append(columns[0]() is not None)
        return page(*args, **kwargs)

    monkeypatch.setattr(report, "_profile_page", profile_page)
    assert cli_main(["report", str(RECORDED), "-o", str(tmp_path / "r.html")]) == 0
    assert alive == [False]
