"""The live table and the offline table of the same run agree, row by row.

``s.table()`` and ``neuronprof.analysis.summarize(s.export())`` (and
``load_trace(...).rows()``) are built by one aggregation from the same events
(kineto's event list live, the trace kineto writes from it offline), so they
agree on every row's calls, self CPU, CPU total and device times, and on steps
and top-level calls. Trace times are µs with three decimals, written from
integer ns: the only tolerance is that rounding.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import neuronprof
from neuronprof import Table
from neuronprof.analysis import load_trace, summarize

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

from run_in_subprocess import check, result, run_script  # noqa: E402


def _key(row: Any) -> tuple[Any, ...]:
    return (row.name, row.on_device, row.input_shapes)


def assert_rows_agree(live_rows: Any, offline_rows: Any) -> None:
    """Every row of one table is a row of the other, with the same calls and times."""
    live = {_key(r): r for r in live_rows}
    offline = {_key(r): r for r in offline_rows}
    assert set(live) == set(offline)
    for key, a in live.items():
        b = offline[key]
        tolerance = 0.001 * a.calls + 1e-9  # the trace's µs with three decimals
        assert a.calls == b.calls, key
        assert a.self_cpu_us == pytest.approx(b.self_cpu_us, abs=tolerance), key
        assert a.cpu_total_us == pytest.approx(b.cpu_total_us, abs=tolerance), key
        assert (a.self_device_us or 0) == pytest.approx(b.self_device_us or 0, abs=tolerance), key
        assert (a.device_total_us or 0) == pytest.approx(b.device_total_us or 0, abs=tolerance), key


def assert_tables_agree(live: Table, offline: Table) -> None:
    assert_rows_agree(live.rows, offline.rows)
    assert (live.steps, live.top_level_calls) == (offline.steps, offline.top_level_calls)
    assert live.self_cpu_us == pytest.approx(offline.self_cpu_us, abs=0.001 * len(live.rows) + 1e-9)
    assert (live.self_device_us or 0) == pytest.approx(offline.self_device_us or 0, abs=0.001 * len(live.rows) + 1e-9)


def assert_matches_key_averages(table: Table, s: neuronprof.Session) -> None:
    """Every host row torch's ``key_averages()`` also has: the same calls, self CPU and CPU total."""
    theirs = {e.key: e for e in s.profiler.key_averages()}
    compared = 0
    for row in table.rows:
        evt = theirs.get(row.name)
        if row.on_device or evt is None or evt.device_type != torch.autograd.DeviceType.CPU:
            continue
        tolerance = 0.002 * row.calls + 1e-6  # torch's µs are floats of the same integer ns
        assert row.calls == evt.count, row.name
        assert row.self_cpu_us == pytest.approx(evt.self_cpu_time_total, abs=tolerance), row.name
        assert row.cpu_total_us == pytest.approx(evt.cpu_time_total, abs=tolerance), row.name
        compared += 1
    assert compared >= 3


def assert_self_times_add_up_to_the_steps(table: Table) -> None:
    """Self times add up to the steps, plus what a note says ran on threads without steps."""
    steps = sum(r.cpu_total_us for r in table.rows if r.name == "ProfilerStep*")
    assert steps > 0
    assert all(r.self_cpu_us >= 0 for r in table.rows)
    # Other Python threads of the test process (torch.compile's workers) may show up
    # with with_stack=True: the table says how much, and it comes on top.
    elsewhere = [
        float(n.split(" µs of self CPU time is on ")[0].replace(",", ""))
        for n in table.notes
        if " µs of self CPU time is on " in n
    ]
    expected = steps + sum(elsewhere)
    assert sum(r.self_cpu_us for r in table.rows) == pytest.approx(expected, abs=0.001 * len(table.rows) + 1e-6)


def _run(tmp_path: Path, body: Callable[[], Any], **options: Any) -> neuronprof.Session:
    with neuronprof.session(backend="cpu", output_dir=tmp_path, **options) as s:
        for _ in s.steps():
            body()
    return s


def _workload() -> Callable[[], Any]:
    x = torch.randn(32, 64)
    w = torch.randn(64, 64)

    def body() -> Any:
        # aten::sum redispatches to an inner aten::sum: key_averages() folds it, the trace does not.
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return torch.nn.functional.linear(y, w).relu().sum()

    return body


@pytest.mark.slow
def test_eager_live_and_offline_tables_agree(tmp_path: Path) -> None:
    s = _run(tmp_path, _workload(), wait=0, warmup=1, active=2)
    live = s.table(row_limit=None)
    offline = summarize(s.export())
    assert_tables_agree(live, offline)
    assert live.steps == 2 and live.top_level_calls == 2 * 8
    # Calls as key_averages() counts them: the trace (read here with json, not the
    # loader) holds the inner, re-dispatched aten::sum too; it is its parent's call.
    events = json.loads(Path(s.export()).read_text())["traceEvents"]
    in_trace = sum(1 for e in events if e.get("ph") == "X" and e.get("name") == "aten::sum")
    assert live.row("aten::sum").calls < in_trace
    assert_matches_key_averages(live, s)
    # Sorting and limiting are one rule too: the same values in the same order.
    for sort_by in ("cpu", "cpu_total", "calls"):
        a = s.table(sort_by=sort_by, row_limit=5)
        b = summarize(s.export(), sort_by=sort_by, row_limit=5)
        field = {"cpu": "self_cpu_us", "cpu_total": "cpu_total_us", "calls": "calls"}[sort_by]
        assert [getattr(r, field) for r in a.rows] == pytest.approx([getattr(r, field) for r in b.rows], abs=0.01)
        assert (a.total_rows, a.self_cpu_us) == pytest.approx((b.total_rows, b.self_cpu_us), abs=0.01)


def test_record_shapes_tables_agree_per_signature(tmp_path: Path) -> None:
    s = _run(tmp_path, _workload(), wait=0, warmup=1, active=2, record_shapes=True)
    live = s.table(row_limit=None)
    trace = load_trace(s.export())
    assert_rows_agree(live.rows, trace.rows("shape"))
    assert any(r.input_shapes for r in live.rows)
    assert (live.steps, live.top_level_calls) == (trace.steps, trace.top_level_calls)


def test_repeated_cycles_agree_with_their_exports_summed(tmp_path: Path) -> None:
    s = _run(tmp_path / "run", _workload(), wait=0, warmup=1, active=1, repeat=3)
    live = s.table(row_limit=None)
    folder = tmp_path / "exports"
    folder.mkdir()
    for cycle in range(3):
        s.export(folder / f"cycle{cycle}.pt.trace.json", cycle=cycle)
    offline = summarize(folder)
    assert_tables_agree(live, offline)
    assert live.steps == 3


def test_step_opened_at_exit_is_no_step_live_or_offline(tmp_path: Path) -> None:
    # step() after the work, then the block exits mid-cycle: torch opens one more
    # ProfilerStep#N that never runs. Neither table counts it.
    body = _workload()
    with neuronprof.session(backend="cpu", output_dir=tmp_path, wait=0, warmup=1, active=5) as s:
        for _ in range(4):
            body()
            s.step()
    live = s.table(row_limit=None)
    offline = summarize(s.export())
    assert live.steps == offline.steps == 3
    assert_tables_agree(live, offline)


def test_ops_inside_a_label_are_the_steps_calls_live_offline_and_in_the_findings(tmp_path: Path) -> None:
    # record_function labels group work without being a call: the ops under them are
    # the step's top-level calls (compare()'s "Ops" column divides these by the steps).
    from neuronprof.analysis.insights import timeline_from_trace
    from neuronprof.analysis.insights._tree import _Profile

    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)

    def body() -> Any:
        with torch.profiler.record_function("block"):
            return lin(x).relu()

    s = _run(tmp_path, body, wait=0, warmup=1, active=3)
    live = s.table(row_limit=None)
    offline = summarize(s.export())
    assert live.steps == 3
    assert live.top_level_calls == 3 * 2  # aten::linear and aten::relu, once a step
    assert_tables_agree(live, offline)
    found = _Profile(timeline_from_trace(s.export(tmp_path / "again.json"))).steps
    assert [sorted(node.name for node in step.top) for step in found] == [["aten::linear", "aten::relu"]] * 3


@pytest.mark.slow
def test_compiled_function_counts_once_live_and_offline(tmp_path: Path) -> None:
    x = torch.randn(64, 64)

    def rmsnorm(t: torch.Tensor) -> torch.Tensor:
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)

    compiled = torch.compile(rmsnorm, fullgraph=True)
    compiled(x)  # compile before profiling
    # with_stack=True puts Python frames between the step and the region: they are no calls.
    for i, options in enumerate(({}, {"with_stack": True})):
        s = _run(tmp_path / str(i), lambda: compiled(x), wait=0, warmup=1, active=2, **options)
        live = s.table(row_limit=None)
        offline = summarize(s.export())
        assert_tables_agree(live, offline)
        assert any(n.startswith("Torch-Compiled Region") for n in live.names())
        assert any(n.startswith("TorchDynamo Cache Lookup") for n in live.names())
        # The compiled region is the one call per step; the guard check is no call.
        assert live.top_level_calls == offline.top_level_calls == 2, options


_NEURON = """
import torch, neuronprof
from neuronprof.analysis import summarize, load_trace
lin = torch.nn.Linear(16, 16)
x = torch.randn(8, 16)
with neuronprof.session(output_dir={out!r}, wait=0, warmup=1, active=2, record_shapes={shapes}) as s:
    for _ in s.steps():
        lin(x).relu().sum()
def rows(rs):
    return [[r.name, r.on_device, [list(x) for x in r.input_shapes] if r.input_shapes else None, r.calls,
             r.self_cpu_us, r.cpu_total_us, r.self_device_us, r.device_total_us] for r in rs]
t = s.table(row_limit=None)
path = s.export()
report(dict(path=str(path), label=t.device_label, steps=t.steps, top=t.top_level_calls,
            device=t.self_device_us, rows=rows(t.rows)))
"""


class _Row:
    def __init__(self, name: str, on_device: bool, shapes: Any, calls: int, *times: Any) -> None:
        self.name, self.on_device, self.calls = name, on_device, calls
        self.input_shapes = tuple(tuple(s) for s in shapes) if shapes is not None else None
        self.self_cpu_us, self.cpu_total_us, self.self_device_us, self.device_total_us = times


@pytest.mark.parametrize("shapes", [False, True], ids=["by-name", "by-shape"])
@pytest.mark.slow
def test_privateuse1_device_kernels_agree(tmp_path: Path, shapes: bool) -> None:
    # The correlating TorchNeuron stand-in: the build whose device time reaches torch.profiler.
    # Its times are the test plugin's, not a Trainium's.
    env = {"NEURONPROF_STANDIN_NEURON_BUILD": "correlating"}
    code = _NEURON.format(out=str(tmp_path), shapes=shapes)
    live = result(check(run_script(code, backend="neuron", env=env)))
    trace = load_trace(live["path"])
    live_rows = [_Row(*r) for r in live["rows"]]
    assert any(r.on_device for r in live_rows), "the plugin recorded no kernels"
    assert_rows_agree(live_rows, trace.rows("shape" if shapes else "name"))
    assert (live["steps"], live["top"]) == (trace.steps, trace.top_level_calls)
    assert trace.device_label == live["label"] == "NEURON"
    assert live["device"] == pytest.approx(trace.table().self_device_us, abs=0.01)


def test_empty_last_step_ended_by_the_schedule_counts_live_and_offline(tmp_path: Path) -> None:
    # The schedule (not the block's exit) ends the cycle after a step in which nothing ran:
    # that step ran, so both tables count it; the trace's neuronprof metadata says how it ended.
    body = _workload()
    with neuronprof.session(backend="cpu", output_dir=tmp_path, wait=0, warmup=1, active=3) as s:
        for index in s.steps():
            if index < 3:
                body()
    live = s.table(row_limit=None)
    path = s.export()
    offline = summarize(path)
    assert live.steps == offline.steps == 3
    assert_tables_agree(live, offline)
    header = json.loads(path.read_text())
    assert header["neuronprof"]["stopped_in_last_step"] is False


def test_empty_last_step_opened_at_exit_is_marked_in_the_trace(tmp_path: Path) -> None:
    body = _workload()
    with neuronprof.session(backend="cpu", output_dir=tmp_path, wait=0, warmup=1, active=5) as s:
        for _ in range(3):
            body()
            s.step()
    path = s.export()
    assert json.loads(path.read_text())["neuronprof"]["stopped_in_last_step"] is True
    assert s.table().steps == summarize(path).steps == 2


@pytest.mark.slow
def test_roofline_from_memory_counts_the_table_rows(tmp_path: Path) -> None:
    # roofline() reads the table's own aggregation of the events: each placed op's calls,
    # summed over dtypes and scalar arguments, are its table row's, for every cycle kept.
    lin = torch.nn.Linear(32, 32)
    x = torch.randn(16, 32)
    s = _run(tmp_path, lambda: torch.sum(lin(x).relu() @ x.T, dim=1), wait=0, warmup=1, active=2, record_shapes=True)
    table = {(r.name, r.input_shapes): r.calls for r in s.table(row_limit=None).rows}
    placed: dict[tuple[Any, ...], int] = {}
    for r in s.roofline("trn2").rows:
        key = (r.name, r.input_shapes)
        placed[key] = placed.get(key, 0) + r.calls
    assert {"aten::addmm", "aten::mm", "aten::sum"} <= {name for name, _ in placed}
    for key, calls in placed.items():
        assert calls <= table[key], key
        if key[0] in ("aten::addmm", "aten::mm"):
            assert calls == table[key] == 2, key


# -- numbers that agree with torch.profiler where a convention matters --------------------


def test_a_redispatched_op_is_one_call_live_offline_and_in_key_averages(tmp_path: Path) -> None:
    # On CPU, x.mean(-1) runs aten::mean -> aten::div_ -> aten::div_ (re-dispatched).
    x = torch.randn(64, 64)
    s = _run(tmp_path, lambda: x.mean(-1), wait=0, warmup=1, active=3)
    live = s.table(row_limit=None)
    assert live.row("aten::div_").calls == 3
    assert_matches_key_averages(live, s)
    assert_tables_agree(live, summarize(s.export()))


@pytest.mark.slow
def test_bf16_autocast_training_step_agrees_with_key_averages(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 10))
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    s = _run(tmp_path, step, wait=0, warmup=1, active=2)
    live = s.table(row_limit=None)
    assert_matches_key_averages(live, s)
    assert_tables_agree(live, summarize(s.export()))
    assert_self_times_add_up_to_the_steps(live)


def test_an_async_collective_adds_no_self_time_live_or_offline(tmp_path: Path) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        x = torch.randn(256, 256)

        def body() -> None:
            dist.all_reduce(x)
            x.sum()

        s = _run(tmp_path / "out", body, wait=0, warmup=1, active=3)
    finally:
        dist.destroy_process_group()
    live = s.table(row_limit=None)
    gloo = live.row("gloo:all_reduce")
    evt = {e.key: e for e in s.profiler.key_averages()}["gloo:all_reduce"]
    assert evt.is_async and gloo.calls == evt.count == 3
    assert gloo.self_cpu_us == evt.self_cpu_time_total == 0
    assert gloo.cpu_total_us > 0
    assert live.communication_us == pytest.approx(gloo.cpu_total_us)
    assert "gloo:all_reduce" in str(live).split("Communication on rank 0:")[1]
    assert_self_times_add_up_to_the_steps(live)
    assert_tables_agree(live, summarize(s.export()))


def test_with_stack_python_frames_add_up_to_the_steps_live_and_offline(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    x = torch.randn(4, 16)
    # repeat=2: between the cycles neuronprof's own code calls the standard library
    # (warnings -> re, json): its work, never rows, whether a module or a package.
    s = _run(tmp_path, lambda: model(x), wait=1, warmup=1, active=2, repeat=2, with_stack=True)
    live = s.table(row_limit=None)
    assert any(".py(" in r.name for r in live.rows)  # Python frames are rows
    assert not [r.name for r in live.rows if r.name.startswith(("re/", "json/", "warnings.py", "neuronprof/"))]
    assert not [n for n in live.notes if "neuronprof/" in n or "torch/" in n]
    assert_self_times_add_up_to_the_steps(live)
    folder = tmp_path / "exports"
    for cycle in range(2):
        s.export(folder / f"cycle{cycle}.pt.trace.json", cycle=cycle)
    assert_tables_agree(live, summarize(folder))


@pytest.mark.slow
def test_a_label_across_a_step_boundary_is_one_rule_live_and_offline(tmp_path: Path) -> None:
    x = torch.randn(64, 64)
    with neuronprof.session(backend="cpu", output_dir=tmp_path, wait=1, warmup=1, active=3) as s:
        for _ in range(5):
            torch.tanh(x @ x)
            label = torch.profiler.record_function("prefetch")
            label.__enter__()
            torch.relu(x)
            s.step()
            torch.sigmoid(x)
            label.__exit__(None, None, None)
    live = s.table(row_limit=None)
    assert_self_times_add_up_to_the_steps(live)
    assert any("'prefetch' ran across a step boundary" in n for n in live.notes)
    offline = summarize(s.export())
    assert_tables_agree(live, offline)
    # The same note: the last label, still open when recording stopped, is clipped as any span is.
    (live_note,) = [n for n in live.notes if "'prefetch'" in n]
    (offline_note,) = [n for n in offline.notes if "'prefetch'" in n]
    assert offline_note.endswith(live_note) and "2 time(s)" in live_note


def test_the_sessions_own_per_step_work_is_outside_the_recorded_steps(tmp_path: Path) -> None:
    # What the session does between steps (the guard's checks, the signal guard, the
    # schedule's bookkeeping) runs between the ProfilerStep spans, not inside one.
    model = torch.nn.Linear(16, 16)
    x = torch.randn(4, 16)
    s = _run(tmp_path, lambda: model(x), wait=0, warmup=1, active=3, with_stack=True)
    events = [e for e in json.loads(Path(s.export()).read_text())["traceEvents"] if e.get("ph") == "X"]
    steps = [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events if e["name"].startswith("ProfilerStep#")
    ]
    assert len(steps) == 3
    own_work = ("neuronprof/_guard.py", "signal.py", "_foreign_profiler", "torch/profiler/profiler.py")
    inside = [
        e["name"]
        for e in events
        if e.get("cat") == "python_function"
        and any(w in e["name"] for w in own_work)
        and any(a <= float(e["ts"]) and float(e["ts"]) + float(e["dur"]) <= b for a, b in steps)
    ]
    assert inside == []
    assert s.steps_taken == 4 and s.table().steps == 3  # warmup 1, active 3


@pytest.mark.slow
def test_a_llama_built_from_its_config_agrees_with_key_averages(tmp_path: Path) -> None:
    # Real model code (Hugging Face's Llama, from a config: no download): its RMSNorm
    # re-dispatches, its attention and MLP nest deeply. Live, offline and torch agree.
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, 16))

    def forward() -> None:
        with torch.no_grad():
            model(ids)

    forward()
    s = _run(tmp_path, forward, wait=0, warmup=1, active=2)
    live = s.table(row_limit=None)
    assert_matches_key_averages(live, s)
    assert_self_times_add_up_to_the_steps(live)
    assert_tables_agree(live, summarize(s.export()))
