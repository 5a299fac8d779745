"""Every reported reproducer in tests/cases/scripts/ behaves as its docstring says is right.

The scripts are copies of the reports, unchanged except where a test must be
shorter than the report (fewer ops or steps, a shorter collective timeout):
those substitutions are listed in ``_SHORTER`` and change sizes only (or skip
what the report skipped), never what is checked; and the folder they write to is the test's own. Each runs
in its own interpreter, so a crash fails its test instead of killing pytest.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "cases" / "scripts"

_SHORTER: dict[str, list[tuple[str, str]]] = {
    "big_export_slow.py": [("range(200_000)", "range(20_000)")],
    "sigterm_leftovers.py": [("range(60000)", "range(20000)")],
    # The report skipped the first two notes, which were two mode notes no longer made.
    "other_thread_ops_missing.py": [("s.notes[2:]", "s.notes")],
    "repeat0_memory_growth.py": [("range(1, 3001)", "range(1, 241)"), ("step % 600 == 0", "step % 60 == 0")],
}
# Scripts whose right answer another test already holds, the same way (a slow multi-process run).
_ELSEWHERE = {
    "rank0_only_table_all.py": (
        "tests/test_distributed.py::test_ranks_all_on_one_rank_fails_fast_and_says_it_is_collective"
    ),
    # Two gloo ranks, rank 1 doing more work before an all-reduce each step; advise and report
    # on the folder of their exports: per rank, the straggler named, each rank on its own lanes.
    "advise_rank_folder.py": "tests/test_distributed.py::test_two_ranks_write_own_traces_and_gather_statistics",
    # It prints timings (medians of ProfilerStep* self time); the test holds the structure
    # behind them and benchmarks/overhead.py the ratio, so no test depends on timing.
    "own_work_inside_the_step.py": (
        "tests/test_agreement.py::test_the_sessions_own_per_step_work_is_outside_the_recorded_steps"
    ),
}


def run_script(name: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # The reports write under one shared folder; each test writes under its own.
    source = (SCRIPTS / name).read_text().replace("/tmp/neuronprof-cases/", "cases-out/")
    for old, new in _SHORTER.get(name, []):
        assert old in source, (name, old)
        source = source.replace(old, new)
    script = tmp_path / name
    script.write_text(source)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONWARNINGS="default")
    command = [sys.executable, str(script), *args]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_every_reported_script_has_a_test():
    source = Path(__file__).read_text()
    for script in SCRIPTS.glob("*.py"):
        assert f'"{script.name}"' in source, f"{script.name} has no test here"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reports' regexes are not raw strings
            assert ast.get_docstring(ast.parse(script.read_text())), script.name
    for name, test in _ELSEWHERE.items():
        path, func = test.split("::")
        assert f"def {func}(" in (ROOT / path).read_text(), name


@pytest.mark.slow
def test_big_export_slow(tmp_path):
    out = ok(run_script("big_export_slow.py", tmp_path=tmp_path))
    assert re.search(r"^export [\d.]+s, peak RSS \+-?\d+ MB$", out, re.M), out
    # torch's own export of the same cycle still works after the session's exports.
    assert re.search(r"^kineto save of the same cycle: [\d.]+s$", out, re.M), out


@pytest.mark.slow
def test_break_in_active_step_wrong_warning(tmp_path):
    proc = run_script("break_in_active_step_wrong_warning.py", tmp_path=tmp_path)
    out = ok(proc)
    rows, steps = map(int, re.search(r"table rows: (\d+) steps: (\d+)", out).groups())
    assert rows > 0 and steps == 1
    assert "1 recorded step(s) are kept" in proc.stderr and "cut short" in proc.stderr
    assert "nothing was recorded" not in proc.stderr


@pytest.mark.slow
def test_ctrl_c_cycle_boundary_segfault(tmp_path):
    out = ok(run_script("ctrl_c_cycle_boundary_segfault.py", tmp_path=tmp_path))
    assert "KeyboardInterrupt reached the user (expected)" in out
    assert "process alive" in out


@pytest.mark.slow
def test_ctrl_c_in_step_assertion(tmp_path):
    out = ok(run_script("ctrl_c_in_step_assertion.py", tmp_path=tmp_path))
    assert "user sees: KeyboardInterrupt" in out, out


@pytest.mark.slow
def test_device_only_cpu_empty(tmp_path):
    out = ok(run_script("device_only_cpu_empty.py", tmp_path=tmp_path))
    notes = [line for line in out.splitlines() if line.startswith("note:") and "device_only" in line]
    assert len(notes) == 1, f"one note says why the table is empty: {notes}"
    assert "no device" in notes[0]
    assert "0.0 µs" not in out


@pytest.mark.slow
def test_long_names_truncated(tmp_path):
    out = ok(run_script("long_names_truncated.py", tmp_path=tmp_path))
    kernels = [line for line in out.splitlines() if line.startswith("void at::native")]
    text_rows = kernels[:2]
    assert len({row.split("  ")[0] for row in text_rows}) == 2, "the two kernels print differently"
    assert not any(line.startswith("line2") or line.startswith("| line2") for line in out.splitlines())
    assert out.count("line1\\nline2") == 2, "escaped in the text and the Markdown table"


@pytest.mark.slow
def test_memory_events_as_slices(tmp_path):
    out = ok(run_script("memory_events_as_slices.py", tmp_path=tmp_path))
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line.startswith(("np ", "kineto ")))
    assert lines["np"] == lines["kineto"], "the same events as torch's own save"
    events = ast.literal_eval(lines["np"])
    assert events and set(events) == {("i", 0)}, "memory events are instants"


@pytest.mark.slow
def test_other_thread_ops_missing(tmp_path):
    out = ok(run_script("other_thread_ops_missing.py", tmp_path=tmp_path))
    assert "other threads" in out and "profile_all_threads=True" in out


@pytest.mark.parametrize("at", ["1", "2"], ids=["warmup", "active"])
@pytest.mark.slow
def test_raw_profiler_inside_session(tmp_path, at):
    proc = run_script("raw_profiler_inside_session.py", at, tmp_path=tmp_path)
    assert proc.returncode == 1, f"a SessionStateError, not a crash: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    assert "neuronprof.errors.SessionStateError: another torch.profiler was started" in proc.stderr


@pytest.mark.slow
def test_repeat0_memory_growth(tmp_path):
    out = ok(run_script("repeat0_memory_growth.py", tmp_path=tmp_path))
    growth = [int(m) for m in re.findall(r"cycles kept: RSS \+(-?\d+) MB", out)]
    assert len(growth) == 4, out
    assert growth[-1] - growth[0] < 15, f"memory stays flat from 20 to 80 cycles: {growth}"


@pytest.mark.slow
def test_repeat0_steps_overcount(tmp_path):
    out = ok(run_script("repeat0_steps_overcount.py", tmp_path=tmp_path))
    assert "aten::add calls: 5 steps: 5" in out


@pytest.mark.slow
def test_tensorboard_cycles_as_workers(tmp_path):
    out = ok(run_script("tensorboard_cycles_as_workers.py", tmp_path=tmp_path))
    workers = re.findall(r"-> worker (\S+)", out)
    assert len(workers) == 2 and len(set(workers)) == 1, out


@pytest.mark.slow
def test_with_stack_stacks_empty(tmp_path):
    out = ok(run_script("with_stack_stacks_empty.py", tmp_path=tmp_path))
    assert int(re.search(r"stack lines: (\d+)", out).group(1)) > 0
    assert "python-frame rows: []" in out
    assert float(re.search(r"sum self / step total: ([\d.]+)", out).group(1)) <= 1.0


@pytest.mark.slow
def test_same_name_child_calls(tmp_path):
    out = ok(run_script("same_name_child_calls.py", tmp_path=tmp_path))
    assert re.search(r"aten::div_ calls: neuronprof (\d+), key_averages \1$", out, re.M), out


def _self_and_steps(out: str) -> tuple[float, float]:
    found = re.search(r"sum of self CPU ([\d.]+) us vs steps ([\d.]+) us", out)
    assert found, out
    return float(found.group(1)), float(found.group(2))


@pytest.mark.slow
def test_async_collective_self_time(tmp_path):
    out = ok(run_script("async_collective_self_time.py", tmp_path=tmp_path))
    assert "gloo:all_reduce self CPU: neuronprof 0.0 us; torch 0.0 us (is_async=True)" in out, out
    total, steps = _self_and_steps(out)
    assert total == pytest.approx(steps, abs=0.2), "self times add up to the steps"


@pytest.mark.slow
def test_label_across_step_boundary(tmp_path):
    out = ok(run_script("label_across_step_boundary.py", tmp_path=tmp_path))
    total, steps = _self_and_steps(out)
    assert total == pytest.approx(steps, abs=0.2), "self times add up to the steps"
    live, offline = map(float, re.search(r"prefetch self CPU: live ([\d.]+) us, offline ([\d.]+) us", out).groups())
    assert live == pytest.approx(offline, abs=0.01)


@pytest.mark.slow
def test_export_to_folder(tmp_path):
    (tmp_path / "cases-out" / "f07" / "traces").mkdir(parents=True)
    out = ok(run_script("export_to_folder.py", tmp_path=tmp_path))
    results = [line for line in out.splitlines() if line.startswith("RESULT s.")]
    assert len(results) == 6 and all(": ok -> " in line for line in results), out
    # An existing folder, with or without a trailing separator, is a folder to write into.
    for line in results[:3]:
        assert re.search(r"f07/traces/neuronprof_cpu_[\w-]+\.json$", line), line
    assert re.search(r"f07/traces/neuronprof_cpu_[\w-]+\.html$", results[3]), results[3]
    assert re.search(r"f07/newdir/neuronprof_cpu_[\w-]+\.json$", results[4]), results[4]
    assert "tmp" not in out.replace("cases-out", ""), "no internal file is named"
    left = sorted(p.name for p in (tmp_path / "cases-out" / "f07").iterdir())
    assert left == ["newdir", "o", "traces"], "nothing hidden is left beside the targets"
    assert not [p for p in (tmp_path / "cases-out" / "f07").rglob(".*")], "no temporary file is left"


@pytest.mark.slow
def test_fork_during_session(tmp_path):
    out = ok(run_script("fork_during_session.py", tmp_path=tmp_path))
    assert "RESULT child: ('ok', ['ProfilerStep*', 'aten::tanh'])" in out, out
    assert "RESULT child exit code: 0" in out
    assert "RESULT parent rows: ['ProfilerStep*', 'aten::clamp_min', 'aten::relu']" in out


@pytest.mark.parametrize("phase", ["exit", "export"])
@pytest.mark.slow
def test_sigterm_leftovers(tmp_path, phase):
    out = ok(run_script("sigterm_leftovers.py", phase, tmp_path=tmp_path))
    rc = int(re.search(r"child rc=(-?\d+)", out).group(1))
    assert rc in (-15, 0), out  # ended by the signal as it would have been (or done before it came)
    left = ast.literal_eval(re.search(r"RESULT files left: (\{.*\})", out).group(1))
    # Only a finished export may be there: no temporary file, no private cycle copy.
    assert set(left) <= {f"f04_{phase}/big.json.gz"}, left


@pytest.mark.slow
def test_with_stack_non_utf8_path(tmp_path):
    out = ok(run_script("with_stack_non_utf8_path.py", "np", tmp_path=tmp_path))
    assert "RESULT np raised" not in out, out
    assert "RESULT np export: utf-8 ok, json ok" in out
    assert "RESULT summarize rc 0" in out
    rows = int(re.search(r"AFTER table rows (\d+)", out).group(1))
    assert rows > 0, "what was recorded is kept"
    notes = out.split("notes", 1)[1]
    assert "with_stack is off" in notes and "not valid UTF-8" in notes and "badmod.py" in notes
    assert "folder whose name is UTF-8" in notes, "says how to avoid it"


@pytest.mark.slow
def test_with_stack_quote_in_path(tmp_path):
    out = ok(run_script("with_stack_quote_in_path.py", tmp_path=tmp_path))
    assert "RESULT np export: valid JSON" in out, out
    assert "RESULT summarize rc 0" in out
    for what in ("s.report()", "s.insights()", "s.export(tensorboard)", "s.export(.json.gz)"):
        assert f"RESULT {what}: ok" in out
