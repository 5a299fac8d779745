"""Minimal traces reduced from real producers (tests/analysis/cases/), each with its right values.

Every case runs with both readers: msgspec's (the ``fast`` extra) and the pure-Python one.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from trace_builders import op, write_trace

from neuronprof.analysis import Trace, load_trace, summarize
from neuronprof.cli import main as analysis_main
from neuronprof.model import OpRow, Table

CASES = Path(__file__).parent / "cases"


def _rows(trace: Trace, name: str) -> list[OpRow]:
    return [r for r in trace.rows() if r.name == name]


def _host(trace: Trace, name: str) -> OpRow:
    (row,) = [r for r in _rows(trace, name) if not r.on_device]
    return row


def _device(trace: Trace, name: str) -> OpRow:
    (row,) = [r for r in _rows(trace, name) if r.on_device]
    return row


def test_device_time_follows_correlation_not_a_clashing_external_id(reader: str) -> None:
    trace = load_trace(CASES / "extid_equals_correlation_wrong_op.json")
    copy = _host(trace, "aten::copy_")
    assert (copy.self_device_us, copy.device_total_us) == (30, 30)
    view = _host(trace, "aten::view")
    assert (view.self_device_us, view.device_total_us) == (0, 0)
    assert _device(trace, "Memcpy HtoD (Pageable -> Device)").self_device_us == 30
    assert _host(trace, "cudaMemcpyAsync").self_device_us == 0


def test_pytorch_1_8_categories_and_spellings(reader: str) -> None:
    trace = load_trace(CASES / "legacy_kineto_2021_no_link.json")
    kernel = _device(trace, "add_kernel")
    assert (kernel.calls, kernel.self_device_us, kernel.self_cpu_us) == (1, 100, 0)
    add = _host(trace, "aten::add")
    assert (add.self_device_us, add.device_total_us, add.self_cpu_us) == (100, 100, 30)
    assert trace.device_label == "CUDA"


def test_pytorch_1_8_input_dims_are_shapes(tmp_path: Path, reader: str) -> None:
    events = [
        op("aten::mm", 0, 10, cat="Operator", tid="100", Input_dims=[[8, 4], [4, 2]]),
        op("aten::mm", 20, 10, cat="Operator", tid="100", Input_dims=[[8, 4], [4, 2]]),
    ]
    (row,) = load_trace(write_trace(tmp_path / "t.json", events)).rows("shape")
    assert (row.input_shapes, row.calls) == (((8, 4), (4, 2)), 2)


def test_absolute_ns_timestamps_give_exact_self_times(reader: str) -> None:
    trace = load_trace(CASES / "ns_timestamp_precision.json")
    grad = _host(trace, "torch::autograd::AccumulateGrad")
    detach = _host(trace, "aten::detach")
    assert (grad.self_cpu_us, grad.cpu_total_us) == (1.266, 2.916)
    assert (detach.self_cpu_us, detach.cpu_total_us) == (1.650, 1.650)


def test_kernels_never_nest_on_a_stream(reader: str) -> None:
    trace = load_trace(CASES / "device_overlap_same_stream.json")
    assert _device(trace, "kernel_A").self_device_us == 4
    assert _device(trace, "kernel_B").self_device_us == 2
    launch = _host(trace, "cudaGraphLaunch")
    assert (launch.self_device_us, launch.device_total_us) == (6, 6)
    text = summarize(trace).to_text()
    percents = [float(c) for line in text.splitlines()[2:] for c in line.split()[-1:] if c.replace(".", "").isdigit()]
    assert percents and max(percents) <= 100.0


def test_ascend_string_timestamps_and_hardware_process(reader: str) -> None:
    trace = load_trace(CASES / "torch_npu_string_ts.json")
    add = _device(trace, "Add")
    assert (add.calls, add.self_device_us, add.self_cpu_us) == (1, 100, 0)
    assert _host(trace, "aten::add").self_cpu_us == 40
    assert (trace.device_label, trace.backend) == ("NPU", "npu")


def test_mtia_trace_is_labelled_mtia(reader: str) -> None:
    trace = load_trace(CASES / "mtia_labelled_cuda.json")
    assert (trace.device_label, trace.backend) == ("MTIA", "mtia")
    assert _device(trace, "pe_exe").self_device_us == 69
    assert "Self MTIA" in summarize(trace).to_text()


def test_async_only_trace_says_what_was_left_out(reader: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = CASES / "async_events_only.json"
    table = summarize(path)
    assert len(table) == 0
    assert any("4 event(s)" in n and "async" in n and "'b'" in n and "'e'" in n for n in table.notes)
    assert analysis_main(["summarize", str(path)]) == 0
    out = capsys.readouterr().out
    assert "(no rows)" in out and "note: 4 event(s)" in out


def test_same_name_host_op_and_kernel_are_told_apart_in_every_format(
    reader: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = CASES / "same_name_host_and_kernel.json"
    name = "triton_poi_fused_add_cos_sin_0"
    trace = load_trace(path)
    assert _host(trace, name).self_cpu_us == pytest.approx(48.044)
    assert _host(trace, name).self_device_us == pytest.approx(1.76)
    assert _device(trace, name).self_device_us == pytest.approx(1.76)
    table = summarize(path)

    def name_lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if name in line]

    for rendered in (table.to_text(), table.to_markdown(), table._repr_html_()):
        assert len(name_lines(rendered)) >= 1
        joined = "\n".join(name_lines(rendered)) if "<table" not in rendered else rendered
        assert "device" in joined and "host" in joined
    lines = name_lines(table.to_text())
    assert len(lines) == 2 and lines[0] != lines[1]
    md = name_lines(table.to_markdown())
    assert len(md) == 2 and md[0] != md[1]
    csv_rows = [r for r in csv.DictReader(io.StringIO(table.to_csv())) if r["name"] == name]
    assert sorted(r["on_device"] for r in csv_rows) == ["False", "True"]
    json_rows = [r for r in json.loads(table.to_json())["rows"] if r["name"] == name]
    assert sorted(r["on_device"] for r in json_rows) == [False, True]
    assert analysis_main(["diff", str(path), str(path)]) == 0
    diff_lines = name_lines(capsys.readouterr().out)
    assert len(diff_lines) == 2 and diff_lines[0] != diff_lines[1]


def test_json_always_carries_totals(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(CASES / "extid_equals_correlation_wrong_op.json")
    totals = []
    for extra in ([], ["--row-limit", "1"], ["--device-only"]):
        assert analysis_main(["summarize", path, "--format", "json", *extra]) == 0
        data = json.loads(capsys.readouterr().out)
        totals.append((data["total_rows"], data["total_self_cpu_us"], data["total_self_device_us"]))
        assert Table.from_json(json.dumps(data)).self_device_us == 30
    assert totals == [(4, 52.0, 30.0)] * 3
    for extra in ([], ["--row-limit", "1"]):
        assert analysis_main(["diff", path, path, "--format", "json", *extra]) == 0
        data = json.loads(capsys.readouterr().out)
        assert (data["total_rows"], data["total_a_us"], data["total_b_us"]) == (4, 30.0, 30.0)


def test_long_names_that_differ_at_the_end_stay_distinguishable(tmp_path: Path) -> None:
    stem = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
    events = [op(stem + "_variant_one", 0, 5), op(stem + "_variant_two", 10, 5)]
    text = summarize(write_trace(tmp_path / "t.json", events)).to_text()
    lines = [line.split("  ")[0] for line in text.splitlines()[2:4]]
    assert len(set(lines)) == 2 and all("…" in line for line in lines)
    assert {line[-3:] for line in lines} == {"one", "two"}


def test_device_label_is_read_from_the_trace_never_defaulted(tmp_path: Path) -> None:
    def label(events: list[dict], **top: object) -> str | None:
        return load_trace(write_trace(tmp_path / "t.json", events, **top)).device_label

    gpu = {"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}}
    kernel = op("k", 10, 5, cat="kernel", pid=0, tid=7, correlation=1)

    def runtime(name: str, cat: str = "cuda_runtime") -> dict:
        return op(name, 0, 5, cat=cat, pid=1, tid=1, correlation=1)

    assert label([gpu, runtime("cudaLaunchKernel"), kernel]) == "CUDA"
    assert label([gpu, runtime("hipLaunchKernel"), kernel]) == "HIP"
    assert label([gpu, runtime("zeKernel", "xpu_runtime"), kernel]) == "XPU"
    assert label([gpu, kernel]) == "GPU"
    assert label([kernel]) == "DEVICE"
    assert label([kernel], deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]) == "CUDA"
    assert label([kernel], deviceProperties=[{"id": 0, "name": "AMD Instinct MI300X"}]) == "HIP"
    assert label([kernel], deviceProperties=[{"id": 0, "name": "MTIA-chip"}]) == "MTIA"
    tpu = {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "/device:TPU:0"}}
    assert label([tpu, op("fusion", 0, 5, cat="", pid=3)]) == "TPU"


def test_compiled_region_counts_once_and_cache_lookup_never(tmp_path: Path) -> None:
    events = [
        op("ProfilerStep#1", 0, 100, cat="user_annotation"),
        op("TorchDynamo Cache Lookup", 1, 2),
        op("Torch-Compiled Region: 0/0", 5, 50),
        op("aten::mul", 10, 5),
        op("aten::add", 60, 5),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert (trace.steps, trace.top_level_calls) == (1, 2)


def test_profiler_step_carries_device_time_launched_directly_under_it(tmp_path: Path) -> None:
    events = [
        op("ProfilerStep#1", 0, 100, cat="user_annotation", pid=1, tid=1, External_id=1),
        op("cudaLaunchKernel", 10, 5, cat="cuda_runtime", pid=1, tid=1, correlation=7),
        op("k", 20, 30, cat="kernel", pid=0, tid=7, correlation=7),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    step = _host(trace, "ProfilerStep*")
    assert (step.self_device_us, step.device_total_us) == (30, 30)


# -- every number agrees with torch.profiler and with the trace ----------------------------


def test_python_frames_under_pid_0_are_host_time(reader: str) -> None:
    # kineto writes some threads' Python frames with pid 0, also the "GPU 0" process.
    trace = load_trace(CASES / "pid0_python_frames_as_device.json")
    table = summarize(trace)
    assert table.self_device_us == 10.0  # the gemm only, on aten::addmm
    assert table.self_cpu_us == 1800.0
    assert _host(trace, "aten::addmm").self_device_us == 10
    assert _host(trace, "tqdm/_monitor.py(60): run").self_cpu_us == 998
    assert not any("launch call is missing" in n for n in table.notes)
    assert [r.name for r in trace.rows() if r.on_device] == ["gemm_kernel"]


def test_python_frame_self_time_is_its_duration_less_the_union_of_its_children(reader: str) -> None:
    trace = load_trace(CASES / "python_frame_overlapping_children.json")
    step = _host(trace, "train.py(10): step")
    assert (step.self_cpu_us, step.cpu_total_us) == (15.0, 100.0)
    assert all(r.self_cpu_us >= 0 for r in trace.rows())


def test_xla_lanes_derived_from_a_stream_are_not_time(reader: str) -> None:
    trace = load_trace(CASES / "xla_gpu_derived_lanes.json")
    assert [(r.name, r.self_device_us) for r in trace.rows() if r.on_device] == [("Cijk_gemm.kd", 50.0)]
    table = summarize(trace)
    assert table.self_device_us == 50.0
    assert any("'XLA Ops - from #16'" in n and "left out" in n for n in table.notes)


def test_xla_ops_beside_a_stream_is_a_view_of_it(tmp_path: Path, reader: str) -> None:
    # On a GPU process the stream is the time; "XLA Ops" (no suffix) copies it.
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "Stream #16(Kernel)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "XLA Ops"}},
        op("sm80_gemm", 10, 50, cat="", pid=1, tid=1),
        op("cudnn-conv.1", 10, 50, cat="", pid=1, tid=2),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert [(r.name, r.self_device_us) for r in trace.rows() if r.on_device] == [("sm80_gemm", 50.0)]


@pytest.mark.parametrize("lane", ["XLA Modules - from #3", "Steps - from #3", "Source code", "XLA Ops - from #3"])
def test_derived_lanes_are_left_out_on_tpu_processes_too(tmp_path: Path, reader: str, lane: str) -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "/device:TPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 3, "tid": 1, "args": {"name": "XLA Ops"}},
        {"ph": "M", "name": "thread_name", "pid": 3, "tid": 2, "args": {"name": lane}},
        op("fusion.2", 10, 40, cat="", pid=3, tid=1),
        op("jit_step", 10, 40, cat="", pid=3, tid=2),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert [(r.name, r.self_device_us) for r in trace.rows() if r.on_device] == [("fusion.2", 40.0)]


def test_a_host_span_named_like_a_device_op_stays_its_own_row(reader: str) -> None:
    trace = load_trace(CASES / "xla_host_event_named_like_device_op.json")
    host, device = _host(trace, "fusion.1"), _device(trace, "fusion.1")
    assert (host.calls, host.self_cpu_us) == (1, 5.0)
    assert (device.calls, device.self_device_us, device.self_cpu_us) == (1, 50.0, 0.0)
    table = summarize(trace)
    assert table.self_cpu_us == 5.0
    # Every format tells them apart.
    lines = [line for line in table.to_csv().splitlines() if not line.startswith("#")]
    assert sorted(row["on_device"] for row in csv.DictReader(lines) if row["name"] == "fusion.1") == ["False", "True"]
    assert {(r["name"], r["on_device"]) for r in json.loads(table.to_json())["rows"]} == {
        ("fusion.1", True),
        ("fusion.1", False),
    }
    markdown = table.to_markdown()
    assert "| On " in markdown and "device" in markdown and "host" in markdown


def _hip_trace(tmp_path: Path) -> Path:
    events = [
        {"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}},
        op("ProfilerStep#1", 0, 200, cat="user_annotation", pid=1, tid=1),
        op("aten::mm", 10, 95, pid=1, tid=1, Input_Dims=[[64, 64], [64, 64]], Input_type=["float", "float"]),
        op("hipExtModuleLaunchKernel", 40, 40, cat="cuda_runtime", pid=1, tid=1, correlation=35),
        op("Cijk_Alik_Bljk", 90, 20, cat="kernel", pid=0, tid=1, correlation=35),
    ]
    return write_trace(tmp_path / "hip.json", events, deviceProperties=[{"id": 0, "name": "AMD Instinct MI300X"}])


def test_every_command_labels_an_amd_trace_hip(tmp_path: Path, reader: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(_hip_trace(tmp_path))
    for command in (["summarize"], ["diff", path], ["advise"], ["roofline", "--device", "h100"]):
        code = analysis_main([command[0], path, *command[1:]])
        out = capsys.readouterr().out
        assert code == 0, command
        assert "HIP" in out and "CUDA" not in out, (command, out)
    # No preset holds an MI300X's peaks: without --device the roofline is refused, naming it.
    assert analysis_main(["roofline", path]) == 2
    assert "AMD Instinct MI300X (HIP), which has no peak preset" in capsys.readouterr().err
    html_path = tmp_path / "report.html"
    assert analysis_main(["report", path, "-o", str(html_path)]) == 0
    html = html_path.read_text()
    assert "Self HIP" in html and "CUDA" not in html


def test_an_only_child_of_the_same_name_is_one_call_as_key_averages_counts(tmp_path: Path, reader: str) -> None:
    # mean -> div_ -> div_ (the inner one re-dispatched): one call of div_.
    events = [
        op("ProfilerStep#1", 0, 100, cat="user_annotation"),
        op("aten::mean", 10, 50),
        op("aten::div_", 20, 30),
        op("aten::div_", 22, 20),
        op("aten::empty", 25, 5),
        # genuine recursion: the parent has another child too, so each call counts
        op("block", 62, 30),
        op("block", 63, 10),
        op("aten::add", 80, 5),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    div = _host(trace, "aten::div_")
    assert (div.calls, div.self_cpu_us, div.cpu_total_us) == (1, 25.0, 30.0)
    assert _host(trace, "aten::mean").self_cpu_us == 20.0
    block = _host(trace, "block")
    assert (block.calls, block.self_cpu_us, block.cpu_total_us) == (2, 25.0, 40.0)


def test_an_async_collective_adds_no_self_time_and_is_communication(tmp_path: Path, reader: str) -> None:
    # gloo runs the collective on its own thread; c10d records it as an async span.
    events = [
        op("ProfilerStep#1", 0, 100, cat="user_annotation", tid=1),
        op("c10d::allreduce_", 10, 20, tid=1),
        op("aten::sum", 40, 30, tid=1),
        op("gloo:all_reduce", 12, 70, cat="user_annotation", tid=2),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    gloo = _host(trace, "gloo:all_reduce")
    assert (gloo.calls, gloo.self_cpu_us, gloo.cpu_total_us) == (1, 0.0, 70.0)
    table = summarize(trace)
    assert table.self_cpu_us == 100.0  # the step, and nothing more
    assert table.communication_us == 70.0
    assert "Communication: 70.0 µs (70.0 µs per step) in async collective spans (gloo:all_reduce)" in str(table)
    assert Table.from_json(table.to_json()).communication_us == 70.0


def test_a_label_across_a_step_boundary_is_cut_at_it(tmp_path: Path, reader: str) -> None:
    events = [
        op("ProfilerStep#1", 0, 100, cat="user_annotation"),
        op("ProfilerStep#2", 110, 100, cat="user_annotation"),
        op("prefetch", 80, 60, cat="user_annotation"),  # 20 µs in step 1, 10 between, 30 in step 2
        op("aten::relu", 85, 5),
        op("aten::sigmoid", 120, 10),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    prefetch = _host(trace, "prefetch")
    assert (prefetch.calls, prefetch.self_cpu_us, prefetch.cpu_total_us) == (1, 35.0, 50.0)
    table = summarize(trace)
    assert table.self_cpu_us == 200.0  # self times add up to the steps
    (note,) = [n for n in table.notes if "'prefetch'" in n]
    assert "step boundary" in note and "10.000 µs between steps left out" in note


def test_findings_count_a_redispatched_op_once_as_the_tables_do(tmp_path: Path, reader: str) -> None:
    from neuronprof.analysis.insights import timeline_from_trace
    from neuronprof.analysis.insights._tree import _Profile

    events = [
        op("ProfilerStep#1", 0, 100, cat="user_annotation"),
        op("aten::div_", 10, 50),
        op("aten::div_", 12, 40),
        op("aten::div_", 14, 30),  # a chain: one call
        op("aten::empty", 20, 5),
    ]
    path = write_trace(tmp_path / "t.json", events)
    (step,) = _Profile(timeline_from_trace(path)).steps
    names = [n.name for top in step.top for n in top.walk()]
    assert names == ["aten::div_", "aten::empty"]
    (div,) = step.top
    assert div.self_ns() == 45_000  # 50 µs less the empty's 5
    assert _host(load_trace(path), "aten::div_").calls == 1


def test_findings_read_python_frames_under_pid_0_as_host_time(reader: str) -> None:
    from neuronprof.analysis.insights import analyze, timeline_from_trace

    timeline = timeline_from_trace(CASES / "pid0_python_frames_as_device.json")
    assert [(e.name, e.end_ns - e.start_ns) for e in timeline.device] == [("gemm_kernel", 10_000)]
    insights = analyze(timeline)
    assert insights.device_label == "CUDA"
    assert "device-bound" not in str(insights).lower()
