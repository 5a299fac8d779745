"""The session on the real torch.profiler, CPU backend: structure, never timings."""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import warnings
from pathlib import Path

import pytest
import torch

import neuronprof
from neuronprof import BackendUnavailableError, NeuronProfWarning, SessionStateError
from neuronprof.backends import CpuBackend, register_backend, unregister_backend

X = torch.randn(32, 64)
W = torch.ones(64)


def naive_rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def profile(fn, out: Path, **kwargs) -> neuronprof.Session:
    with neuronprof.session(backend="cpu", output_dir=out, **kwargs) as s:
        for _ in s.steps():
            fn()
    return s


def top_level_per_step(table: neuronprof.Table) -> float:
    assert table.top_level_calls is not None and table.steps
    return table.top_level_calls / table.steps


# -- what a profile contains ------------------------------------------------------------


@pytest.mark.slow
def test_naive_rmsnorm_has_six_top_level_ops(out):
    s = profile(lambda: naive_rmsnorm(X, W), out)
    t = s.table(row_limit=None)
    assert top_level_per_step(t) == 6
    names = t.names()
    for op in ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt"):
        assert t.row(op).calls == 1, op
    assert t.row("aten::mul").calls == 2
    assert "ProfilerStep*" in names or any(n.startswith("ProfilerStep#") for n in names)


@pytest.mark.slow
def test_fused_rms_norm_is_one_op_over_the_fused_kernel(out):
    s = profile(lambda: torch.rms_norm(X, (64,), W, 1e-6), out)
    t = s.table(row_limit=None)
    assert top_level_per_step(t) == 1
    outer, inner = t.row("aten::rms_norm"), t.row("aten::_fused_rms_norm")
    assert outer.calls == inner.calls == 1
    assert outer.cpu_total_us >= inner.cpu_total_us
    trace = json.loads(s.export(out / "fused.json").read_text())
    spans = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"] if e.get("ph") == "X"}
    (a0, a1), (b0, b1) = spans["aten::rms_norm"], spans["aten::_fused_rms_norm"]
    assert a0 <= b0 and b1 <= a1, "aten::_fused_rms_norm must run inside aten::rms_norm"


@pytest.mark.slow
def test_compiled_function_is_one_compiled_region(out):
    torch._dynamo.reset()
    compiled = torch.compile(naive_rmsnorm, fullgraph=True)
    compiled(X, W)  # compile outside the profile; the schedule's warmup would absorb it too
    s = profile(lambda: compiled(X, W), out)
    t = s.table(row_limit=None)
    assert any(n.startswith("Torch-Compiled Region") for n in t.names())
    assert not any(n in ("aten::pow", "aten::rsqrt") for n in t.names())


@pytest.mark.slow
@pytest.mark.parametrize(("active", "repeat"), [(1, 1), (3, 1), (2, 2)])
def test_exactly_active_steps_are_recorded(out, active, repeat):
    seen = []
    with neuronprof.session(backend="cpu", wait=1, warmup=1, active=active, repeat=repeat, output_dir=out) as s:
        for i in s.steps():
            seen.append(i)
            naive_rmsnorm(X, W)
    assert seen == list(range((1 + 1 + active) * repeat))
    t = s.table(row_limit=None)
    step_rows = [r for r in t.rows if r.name.startswith("ProfilerStep")]
    assert sum(r.calls for r in step_rows) == active * repeat
    assert t.steps == active * repeat
    assert t.row("aten::rsqrt").calls == active * repeat


def test_run_returns_last_result_and_steps_the_schedule(out):
    calls = []

    def fn(a, *, b):
        calls.append(1)
        return a + b

    with neuronprof.session(backend="cpu", output_dir=out) as s:
        result = s.run(fn, 1, b=2)
    assert result == 3
    assert len(calls) == s.total_steps == 4
    assert s.steps_taken == 4


@pytest.mark.slow
def test_hand_written_loop_with_step(out):
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=2, output_dir=out) as s:
        for _ in range(3):
            naive_rmsnorm(X, W)
            s.step()
    assert s.table(row_limit=None).row("aten::rsqrt").calls == 2


# -- the table ------------------------------------------------------------------------


@pytest.mark.slow
def test_table_sorting_limits_and_cpu_columns(out):
    s = profile(lambda: naive_rmsnorm(X, W) @ X.T, out)
    full = s.table(row_limit=None)
    assert full.device_label is None
    assert all(r.self_device_us is None and r.device_total_us is None for r in full.rows)
    by_cpu = s.table(sort_by="cpu", row_limit=None)
    values = [r.self_cpu_us for r in by_cpu.rows]
    assert values == sorted(values, reverse=True)
    # "device" on a CPU backend falls back to CPU time, silently.
    assert [r.name for r in s.table(row_limit=None).rows] == [r.name for r in by_cpu.rows]
    by_name = s.table(sort_by="name", row_limit=None)
    assert by_name.names() == sorted(by_name.names())
    by_calls = s.table(sort_by="count", row_limit=None)
    assert [r.calls for r in by_calls.rows] == sorted((r.calls for r in by_calls.rows), reverse=True)
    three = s.table(sort_by="cpu", row_limit=3)
    assert len(three.rows) == 3 and three.total_rows == len(full.rows)
    assert "showing 3 of" in str(three)
    text = str(full)
    assert "Self CPU (µs)" in text and "aten::rsqrt" in text
    assert "NEURON" not in text
    assert s.table(device_only=True).rows == ()


@pytest.mark.slow
def test_table_renderings_round_trip(out):
    s = profile(lambda: naive_rmsnorm(X, W), out, record_shapes=True)
    t = s.table(row_limit=None)
    assert neuronprof.Table.from_json(t.to_json()) == t
    md = t.to_markdown()
    assert md.splitlines()[0].startswith("| Name |")
    csv_text = t.to_csv()
    assert csv_text.splitlines()[0].split(",")[:3] == ["name", "calls", "self_cpu_us"]
    assert "<table" in t._repr_html_()
    frame = t.to_dataframe()
    assert list(frame["name"]) == t.names()
    rsqrt = t.row("aten::rsqrt")
    assert rsqrt.input_shapes == ((32, 1),)


@pytest.mark.slow
def test_unknown_sort_key_is_refused(out):
    s = profile(lambda: naive_rmsnorm(X, W), out)
    with pytest.raises(ValueError, match="unknown sort_by 'gpu'.*device"):
        s.table(sort_by="gpu")  # type: ignore[arg-type]


@pytest.mark.slow
def test_modes_the_backend_cannot_capture_become_notes(out, caplog):
    caplog.set_level(logging.INFO, logger="neuronprof")
    s = profile(lambda: naive_rmsnorm(X, W), out, modes=("device", "cpu_util"))
    assert any("'device'" in n and "cpu backend" in n for n in s.notes)
    assert any("'cpu_util'" in n for n in s.notes)
    logged = [r.getMessage() for r in caplog.records if "cpu_util" in r.getMessage()]
    assert len(logged) == 1


# -- exports --------------------------------------------------------------------------


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def test_export_any_number_of_times_in_any_format(out):
    s = profile(lambda: naive_rmsnorm(X, W), out)
    first, second = s.export(), s.export()
    assert first != second and first.parent == second.parent == out.absolute()
    assert re.match(rf"neuronprof_cpu_\d{{8}}-\d{{6}}_pid{os.getpid()}(-\d+)?\.json$", first.name)
    gz = s.export(out / "run.json.gz")
    with gzip.open(gz) as f:
        assert f.read(1) == b"{"
    tb = s.export(format="tensorboard")
    tb_files = list(tb.glob("*.pt.trace.json"))
    assert len(tb_files) == 1
    for path in (first, second, gz, tb_files[0]):
        names = {e.get("name") for e in _events(path)}
        assert "aten::rsqrt" in names, path
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]


def test_export_refuses_to_overwrite(out):
    s = profile(lambda: naive_rmsnorm(X, W), out)
    target = s.export(out / "t.json")
    before = target.read_bytes()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        s.export(target)
    assert target.read_bytes() == before
    assert s.export(target, overwrite=True) == target


def test_failed_write_raises_the_os_error_and_leaves_nothing(out, monkeypatch):
    import errno

    from neuronprof import _cycle_files

    s = profile(lambda: naive_rmsnorm(X, W), out)

    def disk_full(cycle, dest, metadata):
        Path(dest).write_text('{"traceEvents": [')  # a partial file, as a real failure leaves
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_cycle_files, "write_chrome_trace", disk_full)
    with pytest.raises(OSError) as info:
        s.export(out / "full.json")
    assert info.value.errno == errno.ENOSPC
    assert sorted(p.name for p in out.iterdir()) == []


def test_neuron_format_needs_the_neuron_backend(out):
    s = profile(lambda: naive_rmsnorm(X, W), out)
    with pytest.raises(ValueError, match="neuron backend"):
        s.export(format="neuron")
    with pytest.raises(ValueError, match="unknown export format"):
        s.export(format="perfetto")  # type: ignore[arg-type]


# -- state errors and bad input ---------------------------------------------------------


def test_results_before_the_block_ends_are_refused(out):
    s = neuronprof.session(backend="cpu", output_dir=out)
    with pytest.raises(SessionStateError, match="with-block"):
        s.table()
    with pytest.raises(SessionStateError, match="with-block"):
        s.step()
    with s:
        with pytest.raises(SessionStateError, match="after the block"):
            s.table()
        with pytest.raises(SessionStateError, match="after the block"):
            s.export()
        for _ in s.steps():
            naive_rmsnorm(X, W)
    with pytest.raises(SessionStateError, match="has ended"):
        s.step()
    with pytest.raises(SessionStateError, match="runs once"):
        with s:
            pass


@pytest.mark.slow
def test_second_session_while_one_is_active(out):
    with neuronprof.session(backend="cpu", output_dir=out) as s:
        inner = neuronprof.session(backend="cpu", output_dir=out)
        with pytest.raises(SessionStateError, match="already profiling"):
            with inner:
                pass
        s.run(naive_rmsnorm, X, W)
    # The refused one did not disturb the first, and a new one works afterwards.
    assert s.table(row_limit=None).row("aten::rsqrt").calls == 1
    again = profile(lambda: naive_rmsnorm(X, W), out)
    assert again.table(row_limit=None).row("aten::rsqrt").calls == 1


def test_raw_torch_profiler_running_is_refused(out):
    with torch.profiler.profile():
        with pytest.raises(SessionStateError, match="torch.profiler profile is already running"):
            with neuronprof.session(backend="cpu", output_dir=out):
                pass


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"modes": ("device", "gpu")}, "unknown mode 'gpu'; valid modes: device, runtime, cpu_util, host_memory"),
        ({"wait": -1}, "wait must be a non-negative int"),
        ({"warmup": 1.5}, "warmup must be a non-negative int"),
        ({"active": 0}, "active must be at least 1"),
        ({"repeat": "2"}, "repeat must be a non-negative int"),
        ({"wait": True}, "wait must be a non-negative int"),
        ({"core": "0-"}, "invalid core"),
        ({"core": "5-2"}, "runs backwards"),
        ({"core": "first"}, "invalid core"),
        ({"core": -1}, "non-negative"),
        ({"record_shapes": "yes"}, "record_shapes must be True or False"),
    ],
)
def test_bad_input_is_refused_before_profiling(out, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        neuronprof.session(backend="cpu", output_dir=out, **kwargs)
    assert not out.exists()


@pytest.mark.parametrize("core", ["0", "0,1", "2-5", "all", "0,2-3", 3])
def test_core_grammar(out, core):
    s = neuronprof.session(backend="cpu", core=core, output_dir=out)
    assert s.core == str(core)


def test_output_dir_that_is_a_file_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(NotADirectoryError):
        neuronprof.session(backend="cpu", output_dir=blocker)
    with pytest.raises(NotADirectoryError):
        neuronprof.session(backend="cpu", output_dir=blocker / "sub")


def test_unknown_and_unavailable_backends(out):
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        neuronprof.session(backend="nope", output_dir=out)
    if not torch.cuda.is_available():
        with pytest.raises(BackendUnavailableError, match="cuda"):
            neuronprof.session(backend="cuda", output_dir=out)


def test_neuron_unavailable_says_where_it_comes_from(out):
    with pytest.raises(BackendUnavailableError, match="Neuron package repository|placeholder"):
        neuronprof.session(backend="neuron", output_dir=out)


# -- interruptions and short loops ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("exc_type", [RuntimeError, KeyboardInterrupt])
def test_exception_in_block_stops_profiler_keeps_data_and_propagates(out, exc_type):
    error = exc_type("boom")
    with pytest.raises(exc_type) as info:
        with neuronprof.session(backend="cpu", wait=0, warmup=0, active=3, output_dir=out) as s:
            for i in s.steps():
                naive_rmsnorm(X, W)
                if i == 1:
                    raise error
    assert info.value is error
    assert not torch._C._autograd._profiler_enabled()
    t = s.table(row_limit=None)
    assert t.row("aten::rsqrt").calls == 2
    assert s.export(out / "partial.json").exists()
    assert any("interrupted" in n for n in s.notes)
    profile(lambda: naive_rmsnorm(X, W), out / "again")


def test_short_loop_warns_and_keeps_what_was_collected(out):
    # The step the loop left is recorded too (torch saves it at exit): 3 steps, as the table says.
    with pytest.warns(NeuronProfWarning, match=r"needs 7 steps .* only 4 completed;.*cut short; 3 recorded step\(s\)"):
        with neuronprof.session(backend="cpu", wait=1, warmup=1, active=5, output_dir=out) as s:
            for i in s.steps():
                naive_rmsnorm(X, W)
                if i == 4:
                    break
    t = s.table(row_limit=None)
    assert t.row("aten::rsqrt").calls == 3


def test_no_step_at_all_warns_with_the_fix(out):
    with pytest.warns(NeuronProfWarning, match=r"s\.step\(\).*nothing was recorded"):
        with neuronprof.session(backend="cpu", output_dir=out) as s:
            naive_rmsnorm(X, W)
    assert s.table().rows == ()
    with pytest.raises(SessionStateError, match="nothing was recorded"):
        s.export()


def test_single_pass_without_steps_when_schedule_starts_active(out):
    with neuronprof.session(backend="cpu", wait=0, warmup=0, active=1, output_dir=out) as s:
        naive_rmsnorm(X, W)
    assert s.table(row_limit=None).row("aten::rsqrt").calls == 1


# -- injectable backends ----------------------------------------------------------------


class CountingBackend(CpuBackend):
    """A CPU backend that records the order of syncs and schedule steps."""

    name = "counting"

    def __init__(self) -> None:
        self.events: list[str] = []

    def synchronize(self, ctx) -> None:
        self.events.append("sync")


def test_registered_backend_is_synced_before_every_step(out, monkeypatch):
    backend = CountingBackend()
    register_backend(backend)
    try:
        with neuronprof.session(backend="counting", output_dir=out) as s:
            real_step = s.profiler.step
            monkeypatch.setattr(s.profiler, "step", lambda: (backend.events.append("step"), real_step()))
            for _ in s.steps():
                naive_rmsnorm(X, W)
    finally:
        unregister_backend("counting")
    assert backend.events == ["sync", "step"] * 4
    assert s.backend == "counting"
    with pytest.raises(ValueError, match="already registered"):
        register_backend(CpuBackend())


def test_nothing_is_written_unless_exported(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with neuronprof.session(backend="cpu") as s:
        s.run(naive_rmsnorm, X, W)
    s.table()
    assert list(tmp_path.iterdir()) == [], "no folder or file before export()"
    path = s.export()
    assert path.parent == tmp_path / "neuronprof_output"


def test_roofline_of_naive_rmsnorm_is_memory_bound(out):
    x = torch.randn(512, 512)
    w = torch.ones(512)
    s = profile(lambda: naive_rmsnorm(x, w), out, record_shapes=True)
    rl = s.roofline(device="trn2")
    bounds = {r.name: r.bound for r in rl.rows}
    # An op whose time is mostly in the ops it calls is left out (on the CPU,
    # aten::mean's time is in aten::sum); which ones depends on the host's timing.
    placed = [op for op in ("aten::pow", "aten::add", "aten::rsqrt", "aten::mul", "aten::sum") if op in bounds]
    assert len(placed) >= 3, bounds
    assert all(bounds[op] == "memory" for op in placed), bounds
    assert "compute" not in bounds.values()
    assert "memory" in str(rl)


def test_loop_stopped_before_the_active_step_says_nothing_was_recorded(out):
    with pytest.warns(NeuronProfWarning, match=r"but only 3 completed, so nothing was recorded"):
        with neuronprof.session(backend="cpu", output_dir=out) as s:
            for i in s.steps():
                naive_rmsnorm(X, W)
                if i == 2:
                    s.step()
                    break
    assert s.table(row_limit=None).row("ProfilerStep*").calls == 1


def test_table_totals_are_there_with_or_without_a_row_limit(out):
    s = profile(lambda: naive_rmsnorm(X, W), out)
    full = json.loads(s.table(row_limit=None).to_json())
    cut = json.loads(s.table(row_limit=2).to_json())
    assert full["total_rows"] == len(full["rows"]) == cut["total_rows"] > 2
    assert full["total_self_cpu_us"] == cut["total_self_cpu_us"] > 0
    assert type(full["total_self_cpu_us"]) is float
    only = s.table(device_only=True)
    assert only.rows == () and only.total_rows == full["total_rows"]
    assert any("no row has device time" in n for n in only.notes)


def _table_shape(table: neuronprof.Table) -> tuple:
    """What two runs of the same loop agree on: ops, calls, steps and notes (times vary run to run)."""
    return ([(r.name, r.calls) for r in table.rows], table.steps, table.top_level_calls, table.total_rows, table.notes)


def test_start_and_stop_give_the_tables_of_the_with_block(out):
    with neuronprof.session(backend="cpu", output_dir=out / "block") as block:
        for _ in block.steps():
            naive_rmsnorm(X, W)
    manual = neuronprof.session(backend="cpu", output_dir=out / "manual")
    manual.start()
    for _ in manual.steps():
        naive_rmsnorm(X, W)
    manual.stop()
    assert manual.notes == block.notes
    tables = [s.table(sort_by="name", row_limit=None) for s in (manual, block)]
    assert _table_shape(tables[0]) == _table_shape(tables[1])
    assert manual.export(out / "manual.json").is_file()
    # Stopped, the process's one profiler is free for the next session.
    profile(lambda: naive_rmsnorm(X, W), out / "next")


def test_start_and_stop_in_the_wrong_order_say_what_to_do(out):
    s = neuronprof.session(backend="cpu", output_dir=out)
    with pytest.raises(SessionStateError, match=r"stop\(\) was called before start\(\).*call s.start\(\) first"):
        s.stop()
    s.start()
    with pytest.raises(SessionStateError, match=r"already profiling: start\(\) was called twice.*call s.stop\(\)"):
        s.start()
    with pytest.raises(SessionStateError, match=r"already profiling.*inside its with-block"):
        with s:
            pass
    with pytest.raises(SessionStateError, match=r"after the with-block ends; call it after the block \(or after s\."):
        s.table()
    s.run(naive_rmsnorm, X, W)
    s.stop()
    assert s.table().rows
    with pytest.raises(SessionStateError, match=r"already stopped: stop\(\) was called twice.*s.table\(\)"):
        s.stop()
    with pytest.raises(SessionStateError, match="runs once; create a new one"):
        s.start()


def test_stop_inside_the_block_leaves_the_block_nothing_to_end(out):
    with neuronprof.session(backend="cpu", output_dir=out) as s:
        s.run(naive_rmsnorm, X, W)
        s.stop()
        assert s.table().rows
    assert s.table().rows


def test_stop_with_the_error_that_ended_the_work_keeps_the_recording_and_says_so(out):
    s = neuronprof.session(backend="cpu", wait=0, warmup=0, active=2, output_dir=out)
    s.start()
    naive_rmsnorm(X, W)
    s.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an interrupted run is noted, not warned about
        s.stop(exc=RuntimeError("training diverged"))
    assert any("interrupted after 1 of 2 steps" in note for note in s.notes), s.notes
    assert s.recorded_steps == 1
    assert s.table().rows
