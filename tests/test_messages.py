"""Messages, notes and labels agree with what was recorded."""

from __future__ import annotations

import re
import threading
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.profiler import record_function

import neuronprof
from neuronprof import NeuronProfWarning
from neuronprof.model import OpRow, Table
from neuronprof.render import short_names

PREFIX = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "


def _rows_of(text: str, names: list[str]) -> list[str]:
    return [line for line in text.splitlines() if any(line.startswith(n[:10]) for n in names)]


def test_long_names_stay_distinguishable_and_newlines_never_break_a_table(tmp_path):
    labels = (PREFIX + "MulFunctor>>", PREFIX + "AddFunctor>>", "line1\nline2")
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=tmp_path) as s:
        for _ in s.steps():
            for label in labels:
                with record_function(label):
                    torch.ones(1)
    t = s.table(sort_by="name", row_limit=None)
    text, markdown = str(t), t.to_markdown()
    mul, add = (line for line in text.splitlines() if line.startswith("void at::native"))
    assert mul.split("  ")[0] != add.split("  ")[0], "the two kernels print differently"
    assert "MulFunctor>>" in text and "AddFunctor>>" in text, "the distinguishing end is kept"
    # The label with a newline is one row, escaped, in text and Markdown.
    assert "line1\\nline2" in text and "line1\\nline2" in markdown
    assert not any(line.startswith("line2") for line in text.splitlines())
    table_lines = [ln for ln in markdown.splitlines() if ln.startswith("|")]
    assert len(table_lines) == 2 + len(t.rows)
    assert all(ln.endswith("|") for ln in table_lines)
    # CSV and JSON keep the full names.
    assert t.row("line1\nline2").calls == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=150), min_size=1, max_size=8, unique=True))
def test_short_names_are_one_line_and_keep_different_names_different(names):
    short = short_names(names)
    assert len(set(short)) == len(names)
    for full, cut in zip(names, short):
        assert "\n" not in cut and "\r" not in cut
        assert len(cut) <= 60 or cut == full.encode("unicode_escape").decode() or len(cut) >= len(full)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=90),
        min_size=1,
        max_size=6,
        unique=True,
    )
)
def test_text_and_markdown_tables_have_one_line_per_row(names):
    table = Table(rows=tuple(OpRow(name=n, calls=1, self_cpu_us=1.0, cpu_total_us=1.0) for n in names), steps=1)
    md_rows = [ln for ln in table.to_markdown().splitlines() if ln.startswith("|")]
    assert len(md_rows) == len(names) + 2
    text_lines = table.to_text().splitlines()
    assert len(text_lines) >= len(names) + 2
    assert text_lines[len(names) + 2] == "", "header, rule, one line per row, then the footer"


def test_device_only_on_a_backend_without_a_device_says_why(tmp_path):
    model = torch.nn.Linear(16, 16)
    with neuronprof.session(backend="cpu", output_dir=tmp_path) as s:
        for _ in s.steps():
            model(torch.randn(4, 16))
    full = s.table()
    t = s.table(device_only=True)
    assert t.rows == ()
    assert any("device_only=True" in n and "no device" in n for n in t.notes)
    assert len([n for n in t.notes if "device_only" in n]) == 1, "one note says why, not two"
    assert t.self_cpu_us == full.self_cpu_us > 0, "the totals are the session's, not 0"
    # The footer shows those totals, not zeros (read from the cell: "250.0 µs" ends in "0.0 µs" too).
    footer = re.search(r"^Self CPU total: ([0-9.]+) µs", str(t), re.MULTILINE)
    assert footer is not None, str(t)
    assert footer.group(1) == f"{full.self_cpu_us:.1f}" and float(footer.group(1)) > 0


@pytest.mark.slow
def test_work_in_other_threads_is_noted_and_can_be_recorded(tmp_path):
    def work():
        for _ in range(20):
            torch.add(torch.rand(1), torch.rand(1))

    def run(**kw):
        with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=tmp_path, **kw) as s:
            for _ in s.steps():
                threads = [threading.Thread(target=work) for _ in range(2)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
        return s

    alone = run()
    t = alone.table(row_limit=None)
    assert t.names() == ["ProfilerStep*"]
    assert any("other threads" in n and "profile_all_threads=True" in n for n in t.notes)
    every = run(profile_all_threads=True)
    t = every.table(row_limit=None)
    assert t.row("aten::add").calls == 40
    assert not any("other threads" in n for n in t.notes)


def _one_step(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x)


@pytest.mark.slow
def test_with_stack_exports_stacks_without_the_profilers_own_frames(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(100, 100), torch.nn.ReLU())
    x = torch.randn(32, 100)
    with neuronprof.session(backend="cpu", wait=1, warmup=1, active=3, with_stack=True, output_dir=tmp_path) as s:
        for _ in s.steps():
            model(x)
    lines = s.export(tmp_path / "stacks.txt", format="stacks").read_text().splitlines()
    assert lines, "flame-graph tools get stacks"
    assert all(line.rsplit(" ", 1)[1].isdigit() for line in lines)
    assert any("aten::addmm" in line for line in lines)
    own = ("torch/profiler/", "torch/autograd/profiler", "neuronprof/")
    assert not any(m in line for line in lines for m in own)
    # Nor what they run around each step, nor torch's or neuronprof's Python files as leaf frames.
    leaves = [line.rsplit(" ", 1)[0].split(";")[-1] for line in lines]
    assert not [leaf for leaf in leaves if leaf.startswith(("torch/", "neuronprof/"))]
    instrument = ("ProfilerStep", "signal.py", "torch/distributed", "_add_metadata_json", "contextlib.py")
    assert not [line for line in lines if any(m in line for m in instrument)]
    names = s.table(row_limit=None).names()
    assert not any(m in n for n in names for m in own)
    assert "aten::addmm" in names
    # The table leaves out what neuronprof's and the profiler's frames call around each
    # step (signal handling, metadata, rank lookups), as the stacks do.
    instrument_rows = ("signal.py", "enum.py", "contextlib.py", "<built-in function signal>", "_add_metadata")
    assert not [n for n in names if any(m in n for m in instrument_rows + ("torch/distributed",))]
    # The program's own frames called by neuronprof (Session.run) stay rows, with what they call.
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=2, with_stack=True, output_dir=tmp_path) as r:
        r.run(_one_step, model, x)
    run_names = r.table(row_limit=None).names()
    assert any(n.endswith(": _one_step") for n in run_names), run_names
    assert any(n.startswith("nn.Module: Sequential") for n in run_names), run_names
    assert not [n for n in run_names if any(m in n for m in instrument_rows)]
    with neuronprof.session(backend="cpu", output_dir=tmp_path) as plain:
        plain.run(lambda: model(x))
    with pytest.raises(ValueError, match="with_stack=True"):
        plain.export(tmp_path / "none.txt", format="stacks")


def test_break_in_the_active_step_warns_what_was_kept(tmp_path):
    model = torch.nn.Linear(16, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with neuronprof.session(backend="cpu", output_dir=tmp_path) as s:  # wait=2, warmup=1, active=1
            for i in s.steps():
                model(torch.randn(4, 16))
                if i == 3:
                    break
    (warning,) = [w for w in caught if issubclass(w.category, NeuronProfWarning)]
    message = str(warning.message)
    assert warning.filename == __file__, "the warning names the user's line, not neuronprof's"
    t = s.table()
    assert t.steps == 1 and t.rows
    assert "cut short" in message and "1 recorded step(s) are kept" in message
    assert "nothing was recorded" not in message


def test_table_is_a_pure_function_of_what_was_recorded(tmp_path):
    """table() twice gives equal tables, notes included (they are computed, never appended on the way)."""

    def work():
        for _ in range(5):
            torch.add(torch.rand(1), torch.rand(1))

    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=tmp_path) as s:
        for _ in s.steps():
            thread = threading.Thread(target=work)
            thread.start()
            thread.join()
    notes = s.notes
    first, second = s.table(), s.table()
    assert first == second
    assert any("other threads" in n for n in first.notes), "a note is present, and still equal"
    assert s.table(device_only=True) == s.table(device_only=True)
    assert s.table(sort_by="name", row_limit=None) == s.table(sort_by="name", row_limit=None)
    assert s.notes == notes


@pytest.mark.slow
def test_roofline_works_from_the_recorded_events_without_writing_a_trace(tmp_path, monkeypatch):
    from neuronprof import _cycle_files
    from neuronprof.analysis import roofline

    lin = torch.nn.Linear(64, 64)
    x = torch.randn(64, 64)
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, record_shapes=True, output_dir=tmp_path) as s:
        for _ in s.steps():
            torch.sum(lin(x).relu() @ x, dim=1)

    def no_writes(*args, **kwargs):
        raise AssertionError("roofline() must not write a trace")

    with monkeypatch.context() as m:
        m.setattr(_cycle_files, "write_chrome_trace", no_writes)
        m.setattr(neuronprof.Session, "export", no_writes)
        ours = s.roofline("trn2")
    text = str(ours)
    assert "trace:" not in text and "neuronprof-" not in text, "no (deleted) temporary path is printed"
    assert ours.source == ""
    assert list(tmp_path.iterdir()) == []
    # The same rows as the roofline of an exported trace of the same cycle.
    from_file = roofline(s.export(tmp_path / "t.json"), "trn2")

    def key(r):
        return (r.name, r.input_shapes, r.input_dtypes, r.calls, round(r.flops), round(r.bytes), r.bound)

    assert sorted(map(key, ours.rows)) == sorted(map(key, from_file.rows))
    # aten::addmm is left out when a preempted child makes it look like a wrapper (the roofline's
    # self-time rule reads timing), so only the ops without children are required here.
    assert {"aten::mm", "aten::sum"} <= {r.name for r in ours.rows}


def test_roofline_of_a_cpu_session_is_refused_before_any_work_unless_a_preset_is_named(tmp_path, monkeypatch):
    from neuronprof import _kineto
    from neuronprof.analysis import DEVICE_PEAKS, UnknownDeviceError

    x = torch.randn(32, 32)
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, record_shapes=True, output_dir=tmp_path) as s:
        for _ in s.steps():
            x @ x

    def no_work(*args, **kwargs):
        raise AssertionError("the refusal comes before the ops are read")

    with monkeypatch.context() as m:
        m.setattr(_kineto, "read_cycle", no_work)
        with pytest.raises(UnknownDeviceError) as err:
            s.roofline()
    message = str(err.value)
    assert "this session (backend 'cpu') records no device work" in message and "a CPU has no peak preset" in message
    assert "device=NAME" in message
    named = s.roofline("trn2")
    assert (named.device, named.peak_source) == (DEVICE_PEAKS["trn2"], "preset")
    assert "device: preset trn2, as asked, not the machine the run was on, which was the CPU only" in str(named)


@pytest.mark.slow
def test_roofline_of_a_session_takes_the_peaks_of_the_device_its_backend_names(tmp_path):
    from neuronprof.analysis import DEVICE_PEAKS
    from neuronprof.backends import CpuBackend, register_backend, unregister_backend

    class NamedDevice(CpuBackend):
        # Runs on the CPU but reports a device and its model, as the CUDA backend does.
        name = "named-device"
        device_label = "CUDA"

        def device_name(self, ctx):
            return "NVIDIA H200"

    x = torch.randn(32, 32)
    register_backend(NamedDevice())
    try:
        with neuronprof.session(
            backend="named-device", wait=0, warmup=1, active=1, record_shapes=True, output_dir=tmp_path
        ) as s:
            for _ in s.steps():
                x @ x
    finally:
        unregister_backend("named-device")
    rl = s.roofline()
    assert (rl.device, rl.peak_source, rl.device_name) == (DEVICE_PEAKS["h200"], "run", "NVIDIA H200")
    assert "device: the run's own, NVIDIA H200 (CUDA), with preset h200's published peaks" in str(rl)
    assert s.roofline("h100").peak_source == "preset"


def test_an_interrupted_session_says_so_when_nothing_was_recorded(tmp_path):
    model = torch.nn.Linear(16, 16)
    with pytest.raises(KeyboardInterrupt):
        with neuronprof.session(backend="cpu", wait=1, warmup=1, active=1, output_dir=tmp_path) as s:
            for _ in s.steps():
                model(torch.randn(4, 16))
                raise KeyboardInterrupt
    for call in (s.export, s.insights, s.report, s.roofline):
        with pytest.raises(neuronprof.SessionStateError, match="interrupted by KeyboardInterrupt during step 0") as err:
            call()
        assert "the loop ended" not in str(err.value)
    assert any("interrupted after 0 of 3 steps" in n for n in s.notes)
    assert not any("no step() was called" in n for n in s.notes)


_FIRST_SESSION = """
import json, sys
import torch
import neuronprof

x = torch.randn(16, 16)
with neuronprof.session(backend="cpu", wait=0, warmup=0, active=2, with_stack=True,
                        with_flops=sys.argv[1] == "flops", output_dir=sys.argv[2]) as s:
    for _ in s.steps():
        (x @ x).relu()
names = [r.name for r in s.table().rows]
events = json.load(open(s.export(sys.argv[2] + "/t.json")))["traceEvents"]
imports = sorted({e["name"] for e in events if "importlib" in e.get("name", "")})
print(json.dumps({"rows": len(names), "imports": imports}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("flops", ["flops", "no-flops"])
def test_no_module_is_imported_inside_the_first_recording_of_a_process(tmp_path, flops):
    """torch imports a module at a process's first record_function: with Python stacks, inside the
    recording, its top-level frame's name would point at code freed after the import (read later as
    garbage, or a UnicodeDecodeError that lost the table). The session makes that import before recording."""
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_SESSION, flops, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rows"] > 0
    assert out["imports"] == [], out["imports"]


def test_the_table_keeps_every_label_as_torch_records_it(tmp_path):
    """Names kineto's own save cannot write as they are (it drops a newline, turns a backslash into a
    slash, writes "unknown" for a non-ASCII character, a tab or a control character) are the table's as recorded."""
    labels = ["attention ü", "mlp ü", "tab\there", "ctrl\x01char", "line1\nline2", "back\\slash", "plain"]
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(2, 8)
    with neuronprof.session(backend="cpu", wait=0, warmup=0, active=1, output_dir=tmp_path) as s:
        for _ in s.steps():
            for label in labels:
                with record_function(label):
                    lin(x)
    names = {r.name for r in s.table(row_limit=None).rows}
    assert set(labels) <= names and "unknown" not in names


def test_sorting_by_memory_no_row_has_says_what_it_sorted_by(tmp_path, capsys):
    """A trace's table has no memory per op: sorted by memory it would keep its order under a header
    saying "sorted by self_cpu_memory_usage"; it sorts by self CPU time and says why."""
    from neuronprof.cli import main

    lin = torch.nn.Linear(8, 8)
    x = torch.randn(2, 8)
    with neuronprof.session(backend="cpu", wait=0, warmup=0, active=1, profile_memory=True, output_dir=tmp_path) as s:
        for _ in s.steps():
            lin(x).relu().sum()
    live = s.table(sort_by="self_cpu_memory_usage")
    assert live.sort_by == "self_cpu_memory_usage"  # live, torch's figures per op are there
    capsys.readouterr()
    assert main(["summarize", str(s.export(tmp_path / "t.json")), "--sort-by", "self_cpu_memory_usage"]) == 0
    out = capsys.readouterr().out
    assert "sorted by cpu" in out and "sorted by self_cpu_memory_usage" not in out
    assert "no op here has memory figures" in out
    table = neuronprof.load_trace(tmp_path / "t.json").table().sorted("self_cpu_memory_usage")
    times = [r.self_cpu_us for r in table.rows]
    assert times == sorted(times, reverse=True)
