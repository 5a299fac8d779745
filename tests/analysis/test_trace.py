"""Loading traces: nesting and self time, device attribution, labels, folders."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from trace_builders import cuda_trace_events, op, write_trace

from neuronprof.analysis import Trace, TraceError, find_trace_files, load_trace, summarize


def _row(trace: Trace, name: str):
    return next(r for r in trace.rows() if r.name == name)


def test_self_time_is_duration_minus_direct_children(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path / "t.json",
        [
            op("outer", 0, 100),
            op("mid", 10, 50),
            op("leaf", 20, 10),
            op("leaf", 40, 10),
            op("other_thread", 0, 30, tid=2),
        ],
    )
    trace = load_trace(path)
    assert (_row(trace, "outer").self_cpu_us, _row(trace, "outer").cpu_total_us) == (50, 100)
    assert _row(trace, "mid").self_cpu_us == 30
    assert (_row(trace, "leaf").calls, _row(trace, "leaf").self_cpu_us) == (2, 20)
    assert _row(trace, "other_thread").self_cpu_us == 30
    assert trace.backend == "cpu" and trace.device_label is None
    assert all(r.self_device_us is None for r in trace.rows())


def test_out_of_order_events_give_the_same_table(tmp_path: Path) -> None:
    events = cuda_trace_events()
    ordered = load_trace(write_trace(tmp_path / "a.json", events))
    shuffled = list(events)
    random.Random(7).shuffle(shuffled)
    mixed = load_trace(write_trace(tmp_path / "b.json", shuffled))
    assert {r.name: r for r in ordered.rows()} == {r.name: r for r in mixed.rows()}
    assert (ordered.steps, ordered.top_level_calls) == (mixed.steps, mixed.top_level_calls)


def test_equal_start_times_nest_the_longer_event_outside(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", [op("inner", 0, 5), op("outer", 0, 10)]))
    assert _row(trace, "outer").self_cpu_us == 5
    assert _row(trace, "inner").self_cpu_us == 5


def test_a_redispatched_op_is_one_call_and_recursion_counts_every_call(tmp_path: Path) -> None:
    # aten::div_ (Scalar) redispatching to aten::div_ (Tensor), its only child: one call,
    # as key_averages() counts it. A parent with another child too is recursion: each counts.
    path = write_trace(
        tmp_path / "t.json",
        [
            op("aten::div_", 0, 30),
            op("aten::div_", 5, 20),
            op("aten::to", 10, 5),
            op("aten::div_", 100, 10),
            op("aten::div_", 200, 40),
            op("aten::div_", 205, 10),
            op("aten::empty", 220, 5),
        ],
    )
    div = _row(load_trace(path), "aten::div_")
    assert div.calls == 1 + 1 + 2
    assert div.self_cpu_us == pytest.approx(25 + 10 + 25 + 10)
    assert div.cpu_total_us == pytest.approx(30 + 10 + 40 + 10)


def test_top_level_calls_see_through_python_frames_and_annotations(tmp_path: Path) -> None:
    events = [
        op("ProfilerStep#3", 0, 100, cat="user_annotation"),
        op("model.py(10): forward", 1, 60, cat="python_function"),
        op("aten::mul", 2, 10),  # under a Python frame: still called by the step
        op("aten::add", 20, 10),
        op("aten::empty", 21, 1),  # nested in aten::add: not top-level
        op("block", 70, 20, cat="user_annotation"),
        op("aten::sub", 71, 5),  # under a record_function label: the label groups, the op is the call
        op("aten::relu", 92, 5),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    # mul, add, sub and relu; the label itself is no call (as in the findings, see _vocabulary.is_transparent).
    assert (trace.steps, trace.top_level_calls) == (1, 4)


def test_cuda_kernels_are_rows_and_are_attributed_to_the_launching_op(cuda_trace: Path) -> None:
    trace = load_trace(cuda_trace)
    assert (trace.backend, trace.device_label, trace.device_name) == ("cuda", "CUDA", "NVIDIA H100 80GB HBM3")
    assert trace.steps == 2
    assert trace.top_level_calls == 4  # aten::linear and aten::copy_ in each step
    kernel = _row(trace, "sm90_gemm_bf16")
    assert kernel.on_device and kernel.calls == 2
    assert (kernel.self_device_us, kernel.self_cpu_us) == (80, 0)
    addmm = _row(trace, "aten::addmm")
    # Step 1 links by External id, step 2 by the runtime call's correlation.
    assert (addmm.self_device_us, addmm.device_total_us, addmm.self_cpu_us) == (80, 80, 120)
    linear = _row(trace, "aten::linear")
    assert (linear.self_device_us, linear.device_total_us, linear.self_cpu_us) == (0, 80, 40)
    assert _row(trace, "aten::copy_").self_device_us == 10
    assert _row(trace, "cudaLaunchKernel").self_device_us == 0
    step = _row(trace, "ProfilerStep*")
    assert (step.calls, step.self_cpu_us, step.device_total_us) == (2, 60, 90)
    assert "PyTorch Profiler (0)" not in {r.name for r in trace.rows()}


def test_table_sorts_limits_and_filters_like_session_table(cuda_trace: Path) -> None:
    table = summarize(cuda_trace, row_limit=3)
    assert table.device_label == "CUDA" and table.steps == 2 and table.top_level_calls == 4
    assert len(table) == 3 and table.total_rows is not None and table.total_rows > 3
    assert table.rows[0].self_device_us == 80
    device_rows = summarize(cuda_trace, device_only=True)
    assert all((r.self_device_us or 0) > 0 or (r.device_total_us or 0) > 0 for r in device_rows)
    by_calls = summarize(cuda_trace, sort_by="calls")
    assert by_calls.rows[0].calls == max(r.calls for r in by_calls.rows)


def test_cpu_trace_sorted_by_device_falls_back_to_cpu(tmp_path: Path) -> None:
    table = summarize(write_trace(tmp_path / "t.json", [op("a", 0, 5), op("b", 10, 50)]))
    assert table.names() == ["b", "a"]
    assert table.sort_by == "cpu"


def test_group_by_shape_splits_rows_by_input_shapes(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path / "t.json",
        [
            op("aten::mul", 0, 5, Input_Dims=[[2, 2], [2, 2]], Input_type=["float", "float"]),
            op("aten::mul", 10, 5, Input_Dims=[[4, 4], []], Input_type=["float", "Scalar"]),
            op("aten::mul", 20, 5, Input_Dims=[[4, 4], []], Input_type=["float", "Scalar"]),
            op("aten::cat", 30, 5, Input_Dims=[[[2, 2], [2, 2]], []], Input_type=["TensorList", "Scalar"]),
        ],
    )
    trace = load_trace(path)
    assert len([r for r in trace.rows("name") if r.name == "aten::mul"]) == 1
    muls = {r.input_shapes: r.calls for r in trace.rows("shape") if r.name == "aten::mul"}
    assert muls == {((2, 2), (2, 2)): 1, ((4, 4), ()): 2}
    cat = next(r for r in trace.rows("shape") if r.name == "aten::cat")
    assert cat.input_shapes == ((), ())  # a tensor list has no single shape
    with pytest.raises(ValueError, match="group_by"):
        trace.rows("stack")  # type: ignore[arg-type]


def test_begin_end_pairs_count_like_complete_events(tmp_path: Path) -> None:
    events = [
        {"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 0},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 30},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 100},
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert (_row(trace, "outer").self_cpu_us, _row(trace, "inner").self_cpu_us) == (80, 20)


def test_flops_recorded_by_the_profiler_are_summed(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", [op("aten::mm", 0, 5, flops=100), op("aten::mm", 10, 5, flops=50)])
    assert _row(load_trace(path), "aten::mm").flops == 150


def test_gzip_and_array_format_are_read(tmp_path: Path) -> None:
    events = [op("a", 0, 5), op("b", 10, 5)]
    gz = write_trace(tmp_path / "t.json.gz", events)
    array = tmp_path / "array.json"
    array.write_text(json.dumps(events)[:-1] + ",\n")  # the array format may omit "]"
    for path in (gz, array):
        assert {r.name for r in load_trace(path).rows()} == {"a", "b"}


def test_tensorboard_folder_sums_every_trace(tmp_path: Path) -> None:
    write_trace(tmp_path / "tb" / "host_1.1.pt.trace.json", [op("aten::add", 0, 5)])
    write_trace(tmp_path / "tb" / "host_1.2.pt.trace.json.gz", [op("aten::add", 0, 7)])
    (tmp_path / "tb" / "notes.txt").write_text("not a trace")
    trace = load_trace(tmp_path / "tb")
    assert len(trace.files) == 2
    assert (_row(trace, "aten::add").calls, _row(trace, "aten::add").self_cpu_us) == (2, 12)
    assert any("2 trace files" in n for n in trace.notes)


def test_torchneuron_output_folder_is_found_and_labelled_neuron(tmp_path: Path) -> None:
    run = tmp_path / "out" / "ip-10-0-0-1_pid_4242" / "1732880000000"
    events = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "NeuronCore 0"}},
        op("aten::mm", 0, 50, pid=1),
        op("neuron_kernel_0", 10, 30, cat="device", pid=7, tid=0),
    ]
    write_trace(run / "trace.json", events)
    (run / "trace_info.pb").write_bytes(b"\x00\x01")
    assert find_trace_files(tmp_path / "out") == [str(run / "trace.json")]
    trace = load_trace(tmp_path / "out")
    assert (trace.backend, trace.device_label) == ("neuron", "NEURON")
    kernel = _row(trace, "neuron_kernel_0")
    assert kernel.on_device and kernel.self_device_us == 30 and kernel.self_cpu_us == 0
    # No link from kernels to ops: host ops get no device time (blank, not zero).
    assert _row(trace, "aten::mm").self_device_us is None
    assert any("no link" in n for n in trace.notes)


def test_tpu_device_label_comes_from_process_names(tmp_path: Path) -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "/device:TPU:0"}},
        op("fusion.1", 0, 10, cat="", pid=3, tid=1),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    assert (trace.device_label, trace.backend) == ("TPU", "tpu")


def test_unknown_device_falls_back_to_device_label(tmp_path: Path) -> None:
    events = [op("k", 0, 10, cat="kernel", pid=0, tid=1)]
    assert load_trace(write_trace(tmp_path / "t.json", events)).device_label == "DEVICE"


def test_load_trace_passes_a_loaded_trace_through(cuda_trace: Path) -> None:
    trace = load_trace(cuda_trace)
    assert load_trace(trace) is trace
    with pytest.raises(TypeError):
        load_trace(42)  # type: ignore[arg-type]


def test_folder_without_traces_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="no trace files"):
        load_trace(tmp_path / "empty")
