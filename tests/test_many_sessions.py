"""Session after session in one process: nothing of the ended sessions is kept (benchmarks/sessions.py measures it)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import neuronprof  # noqa: E402

SESSIONS = 5


@pytest.mark.slow
def test_sessions_that_ended_leave_nothing_behind_as_raw_torch_with_gc_collect(tmp_path: Path) -> None:
    x = torch.ones(32, 32)
    raw: list[weakref.ref] = []
    ours: list[weakref.ref] = []
    was_enabled = gc.isenabled()
    # With the automatic collector off, what is left is exactly what reference cycles keep:
    # torch leaves every profile in one (pytorch#193348) until a collection frees it.
    gc.disable()
    try:
        for _ in range(SESSIONS):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                torch.relu(x @ x)
            prof.key_averages()
            raw.append(weakref.ref(prof))
            del prof
            gc.collect()  # what raw torch.profiler users are told to do
        for _ in range(SESSIONS):
            with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=tmp_path) as s:
                for _ in s.steps():
                    torch.relu(x @ x)
            s.table()
            ours.append(weakref.ref(s.profiler))
            del s
        alive_raw = sum(r() is not None for r in raw)
        alive_ours = sum(r() is not None for r in ours)
    finally:
        if was_enabled:
            gc.enable()
    assert alive_raw == 0
    # Each session's end collects what the ones before it left: at most the last one's
    # profiler is alive (its Session was dropped only after its end), whatever the count.
    assert alive_ours <= 1, f"{alive_ours} of {SESSIONS} ended sessions' profilers are still in memory"
