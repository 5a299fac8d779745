"""A session's read-outs come from kineto's own save of each cycle, or from kineto's event list: the same.

Without ``with_flops=True`` a cycle's events are read from kineto's save (written
once, into the session's private cache, which every export then copies); with it, from
kineto's event list (the save holds no FLOP counts). Both give the same table,
findings, memory records and report page, so which one a session takes is not seen in
what it shows.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

import neuronprof
from neuronprof import _cycle_files, _kineto
from test_report import embedded


def _model() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    return model, torch.randn(16, 32)


def _record(out: Path, **options: Any) -> neuronprof.Session:
    model, x = _model()
    with neuronprof.session(wait=0, warmup=1, active=2, repeat=2, output_dir=out, **options) as s:
        for _ in s.steps():
            model(x).sum().backward()
    return s


def _read_outs(s: neuronprof.Session, page: Path) -> dict[str, Any]:
    report = s.report(page).read_text(encoding="utf-8")
    return {
        "table": _rounded(s.table()),
        "insights": s.insights().to_json(),
        # torch's allocation records, with the allocator's totals (the lanes are the threads' as each names them).
        "memory": [
            [(d, list(m.ts), list(m.nbytes), list(m.allocated), list(m.reserved)) for d, m in t.memory.items()]
            for t in s.recording.event_tables
        ],
        "memory_rows": embedded(report)["grids"].get("memory"),
        "notes": s.notes,
        "report": report,  # every pane, the timeline and the memory pane too
        "stacks": [
            s.export(page.with_name(f"{page.stem}-{i}.stacks"), format="stacks", cycle=i).read_text(encoding="utf-8")
            for i in range(2)
        ]
        if s.with_stack
        else None,
    }


def _rounded(table: neuronprof.Table) -> neuronprof.Table:
    # Its threads come in another order: the sum of every thread's self time may differ in the last bit.
    total = table.total_self_cpu_us
    return dataclasses.replace(table, total_self_cpu_us=None if total is None else round(total, 6))


def _reread_from_kineto_events(s: neuronprof.Session, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget what the session read, and make it read its cycles again from kineto's event list."""
    monkeypatch.setattr(_kineto, "_read_save", lambda *args: None)
    for cycle in s._cycles:
        cycle.events, cycle.notes = None, ()
    s._recorded = None
    s._keys = None


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"record_shapes": True, "profile_memory": True},
        {"record_shapes": True, "with_stack": True},
    ],
    ids=["plain", "shapes-memory", "shapes-stack"],
)
def test_the_save_and_kineto_events_give_the_same_read_outs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    s = _record(tmp_path, **options)
    from_save = _read_outs(s, tmp_path / "save.html")
    assert all(c.cache is not None for c in s._cycles)  # read from the save, which the session keeps
    _reread_from_kineto_events(s, monkeypatch)
    from_events = _read_outs(s, tmp_path / "events.html")
    assert from_save == from_events
    if options.get("profile_memory"):
        assert any(t.memory for t in s.recording.event_tables)
        assert from_save["memory_rows"]["rows"]
    if options.get("with_stack"):
        assert all(from_save["stacks"])


def test_with_flops_reads_kinetos_events_and_keeps_torchs_flop_counts(tmp_path: Path) -> None:
    s = _record(tmp_path, with_flops=True, record_shapes=True)
    table = s.table()
    assert any(r.flops for r in table.rows if r.name == "aten::addmm")
    assert all(c.cache is None for c in s._cycles)  # no save taken for a read-out
    s.export(tmp_path / "trace.json", cycle=0)
    assert s._cycles[0].cache is not None and s._cycles[1].cache is None


def test_the_save_is_taken_once_and_every_export_copies_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saves: list[int] = []
    save = _cycle_files.save_native_trace

    def counted(cycle: Any, dest: Path) -> bool:
        saves.append(cycle.index)
        return save(cycle, dest)

    monkeypatch.setattr(_cycle_files, "save_native_trace", counted)
    s = _record(tmp_path, record_shapes=True)
    assert saves == []  # the end of the block writes nothing
    s.table()
    assert saves == [0, 1]
    first = s.export(tmp_path / "a.json", cycle=1)
    second = s.export(tmp_path / "b.json", cycle=1)
    s.profiler.export_chrome_trace(str(tmp_path / "c.json"))
    assert saves == [0, 1]
    cache = s._cycles[1].cache
    assert cache is not None
    assert first.read_bytes() == second.read_bytes() == cache.read_bytes() == (tmp_path / "c.json").read_bytes()


def test_a_save_that_fails_falls_back_to_kinetos_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cycle_files, "save_native_trace", lambda cycle, dest: False)
    s = _record(tmp_path, record_shapes=True)
    table = s.table()
    assert table.steps == 4 and any(r.name == "aten::addmm" for r in table.rows)
    assert all(c.cache is None for c in s._cycles)
    assert any("could not keep torch's own save" in n for n in s.notes)
