"""neuronprof diff: pairing, ordering, ratios and the JSON round trip."""

from __future__ import annotations

from pathlib import Path

import pytest
from trace_builders import cuda_trace_events, op, write_trace

from neuronprof.analysis import TraceDiff, diff


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    a = write_trace(
        tmp_path / "a.json",
        [
            op("aten::mm", 0, 100, Input_Dims=[[8, 8], [8, 8]], Input_type=["float", "float"]),
            op("aten::mm", 200, 10, Input_Dims=[[2, 2], [2, 2]], Input_type=["float", "float"]),
            op("aten::add", 300, 20),
            op("aten::gone", 400, 5),
        ],
    )
    b = write_trace(
        tmp_path / "b.json",
        [
            op("aten::mm", 0, 40, Input_Dims=[[8, 8], [8, 8]], Input_type=["float", "float"]),
            op("aten::mm", 200, 10, Input_Dims=[[2, 2], [2, 2]], Input_type=["float", "float"]),
            op("aten::add", 300, 30),
            op("aten::new", 400, 15),
        ],
    )
    return a, b


def test_rows_sorted_by_largest_absolute_change(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    d = diff(a, b, match="name")
    assert d.metric == "cpu" and d.match == "name"
    assert [r.name for r in d.rows] == ["aten::mm", "aten::new", "aten::add", "aten::gone"]
    mm = d.row("aten::mm")
    assert (mm.calls_a, mm.calls_b, mm.self_cpu_us_a, mm.self_cpu_us_b) == (2, 2, 110, 50)
    assert mm.delta_us == -60 and mm.ratio == pytest.approx(50 / 110)
    new, gone = d.row("aten::new"), d.row("aten::gone")
    assert (new.status, new.calls_a, new.delta_us, new.ratio) == ("only_b", None, 15, None)
    assert (gone.status, gone.calls_b, gone.delta_us) == ("only_a", None, -5)
    assert (d.total_a_us, d.total_b_us) == (135, 95)
    assert d.row("aten::add").self_device_us_a is None  # CPU traces: no device column, not zeros


def test_auto_matches_by_shape_when_both_traces_recorded_shapes(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    d = diff(a, b)
    assert d.match == "shape"
    big = next(r for r in d.rows if r.name == "aten::mm" and r.input_shapes == ((8, 8), (8, 8)))
    small = next(r for r in d.rows if r.name == "aten::mm" and r.input_shapes == ((2, 2), (2, 2)))
    assert (big.delta_us, small.delta_us, small.ratio) == (-60, 0, 1)
    assert "Input shapes" in d.to_text()


def test_device_metric_and_per_step(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.json", cuda_trace_events())
    b = write_trace(tmp_path / "b.json", [e for e in cuda_trace_events() if e.get("ts", 0) < 190 or e.get("ph") == "M"])
    d = diff(a, b)
    assert d.metric == "device" and d.device_label == "CUDA"
    assert (d.steps_a, d.steps_b) == (2, 1)
    assert any("2 and 1 steps" in n for n in d.notes)
    kernel = d.row("sm90_gemm_bf16")
    assert (kernel.self_device_us_a, kernel.self_device_us_b, kernel.ratio) == (80, 40, 0.5)
    assert (d.total_a_us, d.total_b_us) == (90, 45)  # kernels and copies only, not their ops again
    per_step = diff(a, b, per_step=True)
    assert per_step.row("sm90_gemm_bf16").ratio == pytest.approx(1.0)
    assert per_step.row("sm90_gemm_bf16").calls_a == 2  # calls stay totals
    assert "Self CUDA A (µs)" in per_step.to_text()


def test_invalid_options(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    cpu_only = write_trace(tmp_path / "c.json", [op("x", 0, 1)])
    with pytest.raises(ValueError, match="match"):
        diff(a, b, match="fuzzy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="device time"):
        diff(a, b, metric="device")
    with pytest.raises(ValueError, match="record_shapes"):
        diff(a, cpu_only, match="shape")
    with pytest.raises(ValueError, match="ProfilerStep"):
        diff(a, b, per_step=True)


def test_json_round_trip_and_renderers(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    d = diff(a, b)
    assert TraceDiff.from_json(d.to_json()) == d
    md = d.to_markdown()
    assert any(line.startswith("| Name |") for line in md.splitlines()) and "(only B)" in md
    text = d.to_text(row_limit=2)
    assert "showing 2 of" in text and "+15.0" in text
    with pytest.raises(ValueError):
        TraceDiff.from_json('{"schema": "other"}')
