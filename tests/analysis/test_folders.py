"""Folders: HTA-style multi-rank folders, TensorBoard runs, Neuron bundles, neuronprof's own exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trace_builders import op, write_trace

from neuronprof.analysis import find_trace_files, load_trace, summarize_ranks
from neuronprof.cli import main as analysis_main


def _rank_events(slow: float) -> list[dict]:
    return [
        {"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}},
        op("ProfilerStep#1", 0, 1000, cat="user_annotation", pid=1, tid=1),
        op("aten::mm", 10, 100, pid=1, tid=1, External_id=2),
        op("cudaLaunchKernel", 20, 5, cat="cuda_runtime", pid=1, tid=1, correlation=9),
        op("gemm", 30, slow, cat="kernel", pid=0, tid=7, correlation=9),
        op("nccl:all_reduce", 200, 50, pid=1, tid=1),
    ]


def test_hta_rank_folder_prints_ranks_side_by_side(tmp_path: Path, reader: str, capsys) -> None:
    run = tmp_path / "run"
    write_trace(run / "rank-0.json.gz", _rank_events(40), distributedInfo={"rank": 0, "world_size": 2})
    write_trace(run / "rank-1.json.gz", _rank_events(90), distributedInfo={"rank": 1, "world_size": 2})
    trace = load_trace(run)
    assert [t.rank for t in trace.ranks] == [0, 1]
    assert [t.rows()[0].calls for t in trace.ranks] == [1, 1]
    assert any("summed over 2 ranks" in n for n in trace.notes)  # the sum says so
    gemm = summarize_ranks(run).row("gemm")
    assert gemm.values == (40, 90) and gemm.slowest_rank == 1

    assert analysis_main(["summarize", str(run)]) == 0
    out = capsys.readouterr().out
    assert "2 ranks" in out and "Slowest rank" in out
    assert analysis_main(["summarize", str(run), "--format", "json", "--row-limit", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["world_size"] == 2 and len(data["rows"]) == 1 and data["total_rows"] > 1
    assert [t["total_self_device_us"] for t in data["tables"]] == [40, 90]
    assert [t["rank"] for t in data["tables"]] == [0, 1]
    for fmt in ("markdown", "csv"):
        assert analysis_main(["summarize", str(run), "--format", fmt]) == 0
        assert "gemm" in capsys.readouterr().out
    # Asked for, the sum is there too.
    assert analysis_main(["summarize", str(run), "--ranks", "sum", "--format", "json"]) == 0
    summed = json.loads(capsys.readouterr().out)
    assert next(r for r in summed["rows"] if r["name"] == "gemm")["self_device_us"] == 130


def test_rank_comes_from_file_names_without_distributed_info(tmp_path: Path) -> None:
    run = tmp_path / "exports"
    write_trace(run / "neuronprof_cuda_20260101-120000_pid41_rank0.json", _rank_events(10))
    write_trace(run / "neuronprof_cuda_20260101-120000_pid42_rank1.json", _rank_events(20))
    (run / "notes.json").write_text("{}")
    assert [Path(f).name for f in find_trace_files(run)] == [
        "neuronprof_cuda_20260101-120000_pid41_rank0.json",
        "neuronprof_cuda_20260101-120000_pid42_rank1.json",
    ]
    assert [t.rank for t in load_trace(run).ranks] == [0, 1]


def test_tensorboard_workers_with_distributed_info_are_ranks(tmp_path: Path) -> None:
    tb = tmp_path / "tb"
    write_trace(tb / "host_1.100.pt.trace.json", _rank_events(10), distributedInfo={"rank": 1})
    write_trace(tb / "host_0.100.pt.trace.json", _rank_events(20), distributedInfo={"rank": 0})
    ranks = load_trace(tb).ranks
    assert [t.rank for t in ranks] == [0, 1]
    assert [next(r for r in t.rows() if r.name == "gemm").self_device_us for t in ranks] == [20, 10]


def test_one_rank_trace_is_a_plain_table(tmp_path: Path, capsys) -> None:
    path = write_trace(tmp_path / "rank-3.json", _rank_events(10))
    trace = load_trace(path)
    assert (trace.rank, trace.ranks) == (3, ())
    assert analysis_main(["summarize", str(path)]) == 0
    assert "Slowest rank" not in capsys.readouterr().out


def test_neuron_bundle_system_folder_is_found(tmp_path: Path) -> None:
    run = tmp_path / "bundle" / "system" / "ip-10-0-0-1_pid_4242" / "1732880000000"
    events = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "NeuronCore 0"}},
        op("aten::mm", 0, 50, pid=1),
        op("neuron_kernel_0", 10, 30, cat="device", pid=7, tid=0),
    ]
    write_trace(run / "trace.json", events)
    (tmp_path / "bundle" / "device" / "g0").mkdir(parents=True)
    (tmp_path / "bundle" / "device" / "g0" / "g0.neff").write_bytes(b"\x00")
    trace = load_trace(tmp_path / "bundle")
    assert trace.files == (str(run / "trace.json"),)
    assert trace.device_label == "NEURON"


@pytest.mark.parametrize("name", ["host_1.1.pt.trace.json.gz", "rank-0.json.gz", "neuronprof_cpu_x_pid1.json"])
def test_each_layout_is_found_one_level_down(tmp_path: Path, name: str) -> None:
    write_trace(tmp_path / "logs" / "worker" / name, [op("aten::add", 0, 5)])
    assert [Path(f).name for f in find_trace_files(tmp_path / "logs")] == [name]
