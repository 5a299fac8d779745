"""The recipes' claims, through the public API on the real torch.profiler.

"Profile a window of a long job": ``wait=N - 1, warmup=1, active=M - N + 1`` records
exactly steps N to M of a longer loop, and ``repeat`` records one window per cycle.
Notes about modes appear only when the user passed modes.
"Find your code from an op": with ``with_stack=True`` the stacks export leads from each
``aten::addmm`` to the ``nn.Module:`` frame of its layer and the caller's own line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import neuronprof

ROOT = Path(__file__).resolve().parents[1]


def _steps_in(trace: Path) -> list[int]:
    events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    names = {e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    return sorted(int(n.split("#", 1)[1]) for n in names)


@pytest.mark.slow
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


@pytest.mark.slow
def test_repeat_records_one_window_per_cycle_each_exported_alone(tmp_path: Path) -> None:
    model, x = torch.nn.Linear(16, 16), torch.randn(4, 16)
    with neuronprof.session(wait=7, warmup=1, active=2, repeat=3, output_dir=tmp_path) as s:
        for _ in range(40):
            model(x)
            s.step()
    assert s.table().steps == 6
    windows = [_steps_in(s.export(cycle=c)) for c in range(3)]
    assert windows == [[8, 9], [18, 19], [28, 29]]


@pytest.mark.slow
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


@pytest.mark.slow
def test_find_your_code_leads_from_addmm_to_its_linear_module_through_the_stacks(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10))
    x = torch.randn(32, 64)
    with neuronprof.session(with_stack=True, output_dir=tmp_path) as s:
        for _ in s.steps():
            model(x)
    # The recipe's way: the lines of the stacks file that end in the operator.
    stacks = s.export(format="stacks").read_text(encoding="utf-8").splitlines()
    addmm = [line.rsplit(" ", 1)[0].split(";") for line in stacks if line.rsplit(" ", 1)[0].endswith(";aten::addmm")]
    modules = [[f for f in frames if f.startswith("nn.Module:_")] for frames in addmm]
    assert sorted(m[-1] for m in modules) == ["nn.Module:_Linear_0", "nn.Module:_Linear_1"], stacks
    for frames in addmm:
        # Outside the module frames: the line of this file that called the model.
        caller = frames[frames.index("nn.Module:_Sequential_0") - 1]
        assert caller.split("(", 1)[0].endswith(Path(__file__).name), frames
    # torch.profiler's own name for it writes the same stacks.
    theirs = tmp_path / "theirs.txt"
    s.profiler.export_stacks(str(theirs))
    assert sorted(theirs.read_text(encoding="utf-8").splitlines()) == sorted(stacks)
    # The table lists the module frames as rows of their own.
    names = {row.name for row in s.table(sort_by="cpu_total", row_limit=None).rows}
    assert {"nn.Module: Linear_0", "nn.Module: Linear_1", "aten::addmm"} <= names
    # The page shows this way, not a torch view that needs kineto's verbose mode.
    for page in ("docs/recipes/find-your-code.md", "docs/training-step.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        assert 'format="stacks"' in text and "group_by_stack_n" not in text and "Source Location" not in text, page
