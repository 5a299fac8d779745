"""The kernels pane names the op behind each kernel: by External id, else by the runtime call's correlation id."""

from __future__ import annotations

from neuronprof.analysis.insights import DeviceEvent, HostEvent, Timeline
from neuronprof.model import Table
from neuronprof.report import render_report
from test_report import embedded


def _launched_by(timeline: Timeline) -> dict[str, str]:
    rows = embedded(render_report(Table(()), timeline=timeline))["grids"]["kernels"]["rows"]
    return {r["name"]: r["launched_by"] for r in rows}


def test_a_kernel_without_an_external_id_is_linked_to_the_innermost_op_around_its_runtime_call() -> None:
    host = (
        HostEvent("ProfilerStep#1", 0, 10_000, category="step"),
        HostEvent("aten::linear", 100, 5_000, ext_id=1),
        HostEvent("aten::addmm", 200, 4_000, ext_id=2),
        HostEvent("cudaLaunchKernel", 300, 400, category="runtime", correlation=7),
        HostEvent("aten::relu", 6_000, 7_000, ext_id=3),
        HostEvent("cudaLaunchKernel", 6_100, 6_200, category="runtime", correlation=8),
        HostEvent("cudaLaunchKernel", 8_000, 8_100, category="runtime", correlation=9),  # in no op
    )
    device = (
        DeviceEvent("gemm", 500, 900, correlation=7),
        DeviceEvent("relu_kernel", 6_300, 6_400, correlation=8),
        DeviceEvent("relu_kernel", 6_500, 6_600, ext_id=2),  # its External id wins
        DeviceEvent("orphan", 8_200, 8_300, correlation=9),
    )
    links = _launched_by(Timeline(host, device, "cuda", "CUDA"))
    assert links == {
        "gemm": "aten::addmm (1 of 1)",
        "relu_kernel": "aten::relu (1 of 2), aten::addmm (1 of 2)",
        "orphan": None,
    }


def test_a_kernel_s_launchers_are_listed_by_count_the_first_seen_first_on_a_tie() -> None:
    ops = ("aten::mul", "aten::add", "aten::add", "aten::sub", "aten::mul", "aten::div")
    host = tuple(HostEvent(name, 100 * i, 100 * i + 50, ext_id=i) for i, name in enumerate(ops))
    device = tuple(DeviceEvent("k", 1_000 + 10 * i, 1_005 + 10 * i, ext_id=i) for i in range(len(ops)))
    links = _launched_by(Timeline(host, device, "cuda", "CUDA"))
    assert links == {"k": "aten::mul (2 of 6), aten::add (2 of 6), aten::sub (1 of 6)"}


def test_each_ranks_kernels_are_linked_to_its_own_ops_though_ids_repeat_across_ranks(tmp_path) -> None:
    # Pipeline stages: each rank runs other ops, with the same External ids (each rank counts from 1).
    from analysis.trace_builders import op, write_trace
    from neuronprof.analysis import load_trace
    from neuronprof.report import trace_report

    for rank, name in ((0, "aten::mm"), (1, "aten::bmm")):
        events = [
            op("ProfilerStep#1", 0, 100, cat="user_annotation", pid=1, tid=1),
            op(name, 10, 50, pid=1, tid=1, External_id=1),
            op("cudaLaunchKernel", 20, 5, cat="cuda_runtime", pid=1, tid=1, External_id=1, correlation=5),
            op("gemm", 30, 20, cat="kernel", pid=0, tid=7, External_id=1, correlation=5),
        ]
        write_trace(tmp_path / f"rank-{rank}.json", events, distributedInfo={"rank": rank, "world_size": 2})
    trace = load_trace(tmp_path)
    rows = embedded(trace_report(trace, trace.table(), settings={}))["grids"]["kernels"]["rows"]
    assert {r["name"]: r["launched_by"] for r in rows} == {"gemm": "aten::mm (1 of 2), aten::bmm (1 of 2)"}
