"""Producer layouts (torch_npu, XLA/TPU trace viewer, string ids), the cross-rank view and its outputs."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_builders import op, write_trace

from neuronprof.analysis import TraceError, diff, load_trace, summarize, summarize_ranks
from neuronprof.analysis.insights import advise
from neuronprof.cli import main as analysis_main
from neuronprof.model import SORT_KEYS, RankTable, Table

CASES = Path(__file__).parent / "cases"


def _rank_events(slow: float, *, shapes: bool = False) -> list[dict]:
    dims = {"Input_Dims": [[8, 8], [8, 8]]} if shapes else {}
    small = {"Input_Dims": [[2, 2], [2, 2]]} if shapes else {}
    return [
        {"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}},
        op("ProfilerStep#1", 0, 1000, cat="user_annotation", pid=1, tid=1),
        op("aten::mm", 10, 100, pid=1, tid=1, External_id=2, **dims),
        op("cudaLaunchKernel", 20, 5, cat="cuda_runtime", pid=1, tid=1, correlation=9),
        op("gemm", 30, slow, cat="kernel", pid=0, tid=7, correlation=9),
        op("aten::mm", 120, 30, pid=1, tid=1, External_id=3, **small),
        op("nccl:all_reduce", 200, 50 + slow, pid=1, tid=1),
        op("aten::zeros", 400, 1, pid=1, tid=1),
        op("aten::zeros", 402, 1, pid=1, tid=1),
        op("aten::zeros", 404, 1, pid=1, tid=1),
    ]


@pytest.fixture
def two_ranks(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    write_trace(run / "rank-0.json.gz", _rank_events(40, shapes=True), distributedInfo={"rank": 0})
    write_trace(run / "rank-1.json.gz", _rank_events(90, shapes=True), distributedInfo={"rank": 1})
    return run


# -- 1. a host op and a kernel of the same name stay two rows across ranks -------------------


def test_cross_rank_view_keeps_host_op_and_kernel_of_one_name_apart(
    tmp_path: Path, reader: str, capsys: pytest.CaptureFixture[str]
) -> None:
    case = CASES / "same_name_host_and_kernel.json"
    name = "triton_poi_fused_add_cos_sin_0"
    run = tmp_path / "sn"
    run.mkdir()
    for rank in (0, 1):
        shutil.copy(case, run / f"rank-{rank}.json")
    one = summarize(case)
    rt = summarize_ranks(run)
    rows = [r for r in rt.rows if r.name == name]
    assert sorted(r.on_device for r in rows) == [False, True]
    for r in rows:
        expected = next(x for x in one.rows if x.name == name and x.on_device == r.on_device).self_device_us
        assert r.values == (expected, expected)  # not host + kernel added up
    assert rt.row(name, on_device=True).values == (1.76, 1.76)

    assert analysis_main(["summarize", str(run), "--format", "csv"]) == 0
    import csv

    csv_rows = [r for r in csv.DictReader(io.StringIO(capsys.readouterr().out)) if r["name"] == name]
    assert sorted(r["on_device"] for r in csv_rows) == ["False", "False", "True", "True"]
    assert analysis_main(["summarize", str(run), "--format", "json"]) == 0
    json_rows = [r for r in json.loads(capsys.readouterr().out)["rows"] if r["name"] == name]
    assert sorted(r["on_device"] for r in json_rows) == [False, True]
    assert analysis_main(["summarize", str(run)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if name in line]
    assert len(lines) == 2 and "host" in "".join(lines) and "device" in "".join(lines)


# -- 2. torch_npu: analysis views are not events; HCCL collectives are device time -----------


def _npu_events() -> list[dict]:
    return [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "CANN"}},
        {"ph": "M", "name": "process_name", "pid": 4, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"ph": "M", "name": "process_name", "pid": 5, "tid": 0, "args": {"name": "HCCL"}},
        {"ph": "M", "name": "process_name", "pid": 6, "tid": 0, "args": {"name": "Overlap Analysis"}},
        {"ph": "X", "name": "aten::add", "pid": 1, "tid": 2, "ts": "1699529623106700.000", "dur": 40, "cat": "cpu_op"},
        {"ph": "X", "name": "AscendCL@aclnnAdd", "pid": 2, "tid": 2, "ts": "1699529623106710.000", "dur": 10.0},
        {"ph": "X", "name": "Add", "pid": 4, "tid": 3, "ts": "1699529623106750.125", "dur": 100.0},
        {"ph": "X", "name": "hcom_allReduce__123", "pid": 5, "tid": 8, "ts": "1699529623106900.000", "dur": 50.0},
        {"ph": "X", "name": "Computing", "pid": 6, "tid": 0, "ts": "1699529623106750.125", "dur": 100.0},
        {"ph": "X", "name": "Communication", "pid": 6, "tid": 1, "ts": "1699529623106900.000", "dur": 50.0},
    ]


def test_torch_npu_overlap_analysis_is_left_out_and_hccl_is_device_time(tmp_path: Path, reader: str) -> None:
    table = summarize(write_trace(tmp_path / "npu.json", _npu_events()))
    assert table.self_cpu_us == 50.0  # aten::add 40 + AscendCL@aclnnAdd 10
    assert table.device_label == "NPU"
    hcom = table.row("hcom_allReduce__123")
    assert hcom.on_device and hcom.self_device_us == 50.0
    assert table.self_device_us == 150.0
    assert "Computing" not in table.names() and "Communication" not in table.names()
    assert any("Overlap Analysis" in n and "left out" in n for n in table.notes)


# -- 3. XLA/TPU trace viewer: only the op lane is op time -----------------------------------


def _xla_events(ops_tid: int = 3) -> list[dict]:
    return [
        {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "/device:TPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 3, "tid": 1, "args": {"name": "Steps"}},
        {"ph": "M", "name": "thread_name", "pid": 3, "tid": 2, "args": {"name": "XLA Modules"}},
        {"ph": "M", "name": "thread_name", "pid": 3, "tid": ops_tid, "args": {"name": "XLA Ops"}},
        {"ph": "X", "name": "0", "pid": 3, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "name": "SyncTensorsGraph.12(123)", "pid": 3, "tid": 2, "ts": 0, "dur": 90},
        {"ph": "X", "name": "fusion.1", "pid": 3, "tid": ops_tid, "ts": 0, "dur": 50},
        {"ph": "X", "name": "convolution.2", "pid": 3, "tid": ops_tid, "ts": 50, "dur": 40},
    ]


def test_xla_trace_viewer_counts_the_op_lane_once(tmp_path: Path, reader: str) -> None:
    table = summarize(write_trace(tmp_path / "xla.json", _xla_events(), displayTimeUnit="ns"))
    assert table.device_label == "TPU"
    assert table.self_device_us == 90.0  # fusion.1 + convolution.2; steps and modules contain them
    assert sorted(table.names()) == ["convolution.2", "fusion.1"]
    assert any("'Steps'" in n and "'XLA Modules'" in n for n in table.notes)


# -- 4. the cross-rank view applies --sort-by, --device-only and --group-by shape --------------------


def test_cross_rank_sort_device_only_and_shapes_are_applied(two_ranks: Path, capsys) -> None:
    by_cpu = summarize_ranks(two_ranks, sort_by="cpu")
    assert by_cpu.metric == "self_cpu_us"
    maxima = [r.max_us for r in by_cpu.rows]
    assert maxima == sorted(maxima, reverse=True)
    assert by_cpu.row("nccl:all_reduce").values == (90.0, 140.0)
    assert by_cpu.sort_description == "sorted by the largest self CPU time on any rank"

    by_name = summarize_ranks(two_ranks, sort_by="name")
    assert [r.name for r in by_name.rows] == sorted(r.name for r in by_name.rows)
    by_calls = summarize_ranks(two_ranks, sort_by="calls")
    assert by_calls.rows[0].name == "aten::zeros"

    device = summarize_ranks(two_ranks, device_only=True)
    assert device.rows and all(any((v or 0) > 0 for v in r.values) for r in device.rows)
    assert "aten::zeros" not in {r.name for r in device.rows}

    shaped = summarize_ranks(two_ranks, group_by="shape")
    mm = [r for r in shaped.rows if r.name == "aten::mm"]
    assert sorted(r.input_shapes for r in mm) == [((2, 2), (2, 2)), ((8, 8), (8, 8))]

    assert analysis_main(["summarize", str(two_ranks), "--sort-by", "cpu"]) == 0
    assert "sorted by the largest self CPU time on any rank" in capsys.readouterr().out
    assert analysis_main(["summarize", str(two_ranks), "--device-only", "--format", "json"]) == 0
    assert "aten::zeros" not in {r["name"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert analysis_main(["summarize", str(two_ranks), "--group-by", "shape"]) == 0
    assert "[[8, 8], [8, 8]]" in capsys.readouterr().out
    assert analysis_main(["summarize", str(two_ranks), "--sort-by", "flops"]) == 2
    assert "cannot sort by 'flops'" in capsys.readouterr().err


@pytest.mark.parametrize("key", SORT_KEYS)
def test_every_sort_key_is_applied_or_refused_in_the_cross_rank_view(two_ranks: Path, key: str) -> None:
    try:
        rt = summarize_ranks(two_ranks, sort_by=key)
    except ValueError as exc:
        assert "cannot sort by" in str(exc)
        return
    if rt.sort_by == "name":
        assert [r.name for r in rt.rows] == sorted(r.name for r in rt.rows)
    elif rt.sort_by == "calls":
        assert [max(r.calls) for r in rt.rows] == sorted((max(r.calls) for r in rt.rows), reverse=True)
    else:
        words = {
            "self_device_us": "self device",
            "device_total_us": "total device",
            "self_cpu_us": "self CPU",
            "cpu_total_us": "total CPU",
        }
        assert rt.sort_by == "max" and words[rt.metric] in rt.sort_description
        is_total = not key.startswith("self_") and "total" in key
        assert is_total == ("total" in rt.metric) and ("cpu" in key) == ("cpu" in rt.metric)
        assert [r.max_us for r in rt.rows] == sorted((r.max_us for r in rt.rows), reverse=True)
    assert rt.sort_description in str(rt)


# -- 5. ids written as text ---------------------------------------------------------------


def _id_events(as_text: bool) -> list[dict]:
    def i(n: int) -> object:
        return str(n) if as_text else n

    return [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        op("aten::a", 0, 50, pid=100, tid=100, External_id=i(7)),
        op("aten::b", 60, 50, pid=100, tid=100, External_id=i(8)),
        op("cudaLaunchKernel", 10, 5, cat="cuda_runtime", pid=100, tid=100, correlation=i(1)),
        op("k", 20, 9, cat="kernel", pid=0, tid=7, correlation=i(1), External_id=8),
        op("k_ext_only", 40, 4, cat="kernel", pid=0, tid=7, External_id=i(7)),
    ]


def test_ids_written_as_text_link_device_time_like_numbers(tmp_path: Path, reader: str) -> None:
    as_text = summarize(write_trace(tmp_path / "text.json", _id_events(True)))
    as_int = summarize(write_trace(tmp_path / "int.json", _id_events(False)))
    assert as_text.rows == as_int.rows
    assert as_text.row("aten::a").self_device_us == 13.0  # k through correlation "1", k_ext_only through "7"
    assert as_text.row("aten::b").self_device_us == 0.0


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=1, max_value=2**61), st.sampled_from(["{}", " {} ", "{}"]))
def test_any_id_text_reads_as_its_number(ident: int, spelling: str) -> None:
    import tempfile

    events = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        op("aten::a", 0, 50, pid=100, tid=100),
        op("cudaLaunchKernel", 10, 5, cat="cuda_runtime", pid=100, tid=100, correlation=spelling.format(ident)),
        op("k", 20, 9, cat="kernel", pid=0, tid=7, correlation=ident),
    ]
    with tempfile.TemporaryDirectory() as d:
        assert summarize(write_trace(Path(d) / "t.json", events)).row("aten::a").self_device_us == 9.0


# -- 6. the cross-rank JSON: totals, read-back ----------------------------------------------


def test_cross_rank_json_has_totals_and_reads_back(two_ranks: Path, capsys) -> None:
    rt = summarize_ranks(two_ranks, group_by="shape")
    assert RankTable.from_json(rt.to_json()) == rt
    assert rt.total_self_device_us == 130.0
    assert analysis_main(["summarize", str(two_ranks), "--format", "json", "--row-limit", "2"]) == 0
    text = capsys.readouterr().out
    data = json.loads(text)
    assert data["schema"] == "neuronprof.rank_table/1" and len(data["rows"]) == 2
    assert (data["total_self_device_us"], data["total_rows"]) == (130.0, len(summarize_ranks(two_ranks).rows))
    assert data["total_self_cpu_us"] == sum(t.self_cpu_us for t in rt.tables)
    assert RankTable.from_json(text).world_size == 2
    with pytest.raises(ValueError, match=r"RankTable\.from_json"):
        Table.from_json(text)


# -- 7. diff of multi-rank folders says it sums them ------------------------------------------


def test_diff_of_rank_folders_says_it_sums_the_ranks(two_ranks: Path, capsys) -> None:
    d = diff(two_ranks, two_ranks)
    assert sum("summed over 2 ranks" in n for n in d.notes) == 2
    assert analysis_main(["diff", str(two_ranks), str(two_ranks)]) == 0
    assert "summed over 2 ranks" in capsys.readouterr().out


# -- 8. rank folders with gaps, twins and strays -------------------------------------------


def test_rank_folder_gap_twin_and_stray_files_are_said(tmp_path: Path, capsys) -> None:
    gap = tmp_path / "gap"
    write_trace(gap / "rank-0.json", _rank_events(40))
    write_trace(gap / "rank-2.json", _rank_events(40))
    rt = summarize_ranks(gap)
    assert rt.world_size == 3 and any("rank 1 " in n and "no trace" in n for n in rt.notes)
    assert analysis_main(["summarize", str(gap)]) == 0
    assert "no trace" in capsys.readouterr().out

    twins = tmp_path / "twins"
    write_trace(twins / "rank-0.json", _rank_events(40))
    write_trace(twins / "rank-0.json.gz", _rank_events(40))
    write_trace(twins / "rank-1.json", _rank_events(40))
    with pytest.raises(TraceError, match=r"rank-0\.json and .*rank-0\.json\.gz"):
        load_trace(twins)
    assert analysis_main(["summarize", str(twins)]) == 2

    stray = tmp_path / "stray"
    write_trace(stray / "rank-0.json", _rank_events(40))
    write_trace(stray / "rank-1.json", _rank_events(40))
    write_trace(stray / "other_trace.json", _rank_events(40))
    assert any("other_trace.json" in n for n in summarize_ranks(stray).notes)
    assert any("other_trace.json" in n for n in load_trace(stray).notes)


# -- 9. small truths: notes everywhere, ranges, singulars, float totals ---------------------


def test_notes_reach_every_format_and_small_messages_are_right(tmp_path: Path, capsys) -> None:
    pd = pytest.importorskip("pandas")
    cpu = write_trace(tmp_path / "cpu.json", [op("aten::add", 0, 10)])
    table = summarize(cpu, device_only=True)
    assert table.rows == () and any("no row has device time" in n for n in table.notes)
    assert analysis_main(["summarize", str(cpu), "--device-only"]) == 0
    out = capsys.readouterr().out
    assert "(no rows)" in out and "no row has device time" in out

    # CSV: rows on stdout, notes as "# note:" lines on stderr; to_csv(notes=True) appends them.
    assert analysis_main(["summarize", str(cpu), "--device-only", "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert "# note:" not in captured.out and "# note: device_only: no row has device time" in captured.err
    with_notes = table.to_csv(notes=True)
    assert with_notes.rstrip().splitlines()[-1].startswith("# note: ")
    frame = pd.read_csv(io.StringIO(summarize(cpu).to_csv(notes=True) + "# note: x\n"), comment="#")
    assert list(frame["name"]) == ["aten::add"]
    run = tmp_path / "hta"
    write_trace(run / "rank-0.json", _rank_events(40))
    write_trace(run / "rank-2.json", _rank_events(40))
    assert analysis_main(["summarize", str(run), "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert "no trace" in captured.err and "#" not in captured.out

    huge = tmp_path / "huge.json"
    huge.write_text('{"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":1e400,"dur":1}]}')
    with pytest.raises(TraceError, match="'ts' out of range"):
        load_trace(huge)
    stray_e = write_trace(
        tmp_path / "e.json", [op("aten::add", 0, 10), {"ph": "E", "name": "x", "pid": 1, "tid": 1, "ts": 20}]
    )
    assert any("'E' event(s) end no 'B'" in n for n in load_trace(stray_e).notes)

    one = tmp_path / "one"
    write_trace(one / "rank-0.json", _rank_events(40), distributedInfo={"rank": 0})
    assert analysis_main(["summarize", str(one), "--ranks", "all"]) == 0
    out = capsys.readouterr().out
    assert "1 rank;" in out and "1 ranks" not in out

    empty = summarize(write_trace(tmp_path / "dev.json", [op("k", 0, 5, cat="kernel", pid=0, tid=7)]))
    assert type(empty.to_dict()["total_self_cpu_us"]) is float and empty.to_dict()["total_self_cpu_us"] == 0.0


def test_advise_reads_string_timestamps_with_the_table_rules() -> None:
    # torch_npu writes "ts" as text; the findings read it exactly as the table does.
    insights = advise(CASES / "torch_npu_string_ts.json")
    assert insights.to_dict()["source"].endswith("torch_npu_string_ts.json")
