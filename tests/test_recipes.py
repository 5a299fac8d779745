"""The recipes' claims, through the public API on the real torch.profiler.

"Profile a window of a long job": ``wait=N - 1, warmup=1, active=M - N + 1`` records
exactly steps N to M of a longer loop, and ``repeat`` records one window per cycle.
Notes about modes appear only when the user passed modes.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

import neuronprof


def _steps_in(trace: Path) -> list[int]:
    events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    names = {e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    return sorted(int(n.split("#", 1)[1]) for n in names)


def test_a_window_of_a_long_loop_records_steps_n_to_m_and_the_loop_runs_on(tmp_path: Path) -> None:
    model, x = torch.nn.Linear(16, 16), torch.randn(4, 16)
    n, m, total = 20, 24, 60
    with neuronprof.session(wait=n - 1, warmup=1, active=m - n + 1, output_dir=tmp_path) as s:
        for _ in range(total):
            model(x)
            s.step()
    assert s.steps_taken == total
    assert s.table().steps == m - n + 1
    assert _steps_in(s.export()) == list(range(n, m + 1))


def test_repeat_records_one_window_per_cycle_each_exported_alone(tmp_path: Path) -> None:
    model, x = torch.nn.Linear(16, 16), torch.randn(4, 16)
    with neuronprof.session(wait=7, warmup=1, active=2, repeat=3, output_dir=tmp_path) as s:
        for _ in range(40):
            model(x)
            s.step()
    assert s.table().steps == 6
    windows = [_steps_in(s.export(cycle=c)) for c in range(3)]
    assert windows == [[8, 9], [18, 19], [28, 29]]


def test_mode_notes_only_for_modes_the_user_passed(tmp_path: Path) -> None:
    x = torch.randn(4, 4)
    with neuronprof.session(backend="cpu", output_dir=tmp_path) as quiet:
        for _ in quiet.steps():
            x @ x
    with neuronprof.session(modes=("device", "runtime"), backend="cpu", output_dir=tmp_path) as asked:
        for _ in asked.steps():
            x @ x
    assert quiet.modes == asked.modes == ("device", "runtime")
    assert not [n for n in quiet.notes if "mode" in n]
    assert "mode 'device'" not in str(quiet.table())
    assert asked.notes[:2] == [
        "mode 'device' is not captured by the cpu backend; ignored",
        "mode 'runtime' is not captured by the cpu backend; ignored",
    ]
    config = neuronprof.SessionConfig()
    assert config.modes == ("device", "runtime") and config == neuronprof.SessionConfig(modes=("device", "runtime"))
