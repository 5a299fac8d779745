"""Golden renders: hand-built models rendered to text, Markdown, HTML and CSV, compared exactly.

Each model is built by hand (no profiler, no clock), so every render is the same on every
machine; the expected output lives in ``tests/golden/<model>.<format>``. A change to a
renderer that alters a golden fails here and shows the difference; when the change is
meant, rewrite the files with one command and review them in the diff::

    pytest tests/test_golden_renders.py --update-goldens      # or: make goldens

JSON is compared as parsed data (the same keys and values), so a change of key order or
indentation alone does not fail; every other format is compared character for character.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from neuronprof.analysis import Evidence, Finding, Insights, TraceDiff, shift
from neuronprof.analysis._diff import DiffRow
from neuronprof.model import Comparison, ComparisonRow, OpRow, RankOpRow, RankTable, Table

GOLDEN = Path(__file__).parent / "golden"

LONG_NAME = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float>>, at::detail::Array<char*, 3>>(int, float)"
)


# -- the models ----------------------------------------------------------------------------


def _table() -> Table:
    """Host ops and device kernels, blank cells, a long name, shapes, a cut and notes."""
    rows = [
        OpRow("aten::mm", 4, 120.0, 180.5, 2400.0, 2400.0, input_shapes=((64, 128), (128, 256)), flops=16777216),
        OpRow("nki_matmul_kernel", 4, 0.0, 0.0, 2400.0, 2400.0, on_device=True),
        OpRow("aten::mul", 8, 40.25, 60.0, 250.0, 250.0, input_shapes=((64, 256), ())),
        OpRow(LONG_NAME, 8, 0.0, 0.0, 250.0, 250.0, on_device=True),
        OpRow("aten::copy_", 2, 15.0, 15.0, None, None, input_shapes=((64, 256), (64, 256))),
        OpRow("gloo:all_reduce", 1, 0.0, 900.0),
    ]
    return Table(
        rows=tuple(rows),
        backend="neuron",
        device_label="NEURON",
        sort_by="device",
        steps=2,
        top_level_calls=12,
        notes=("sorted by self device time", "a note with a | pipe\nand a line break"),
        total_rows=9,
        total_self_cpu_us=190.0,
        total_self_device_us=2700.0,
        communication_us=900.0,
        step_us=5000.0,
        collective_wait_us=1000.0,
    )


def _cpu_table() -> Table:
    """A CPU table: no device columns at all (not blank ones)."""
    return Table(
        rows=(
            OpRow("aten::add", 3, 30.0, 30.0),
            OpRow("aten::empty", 1, 0.5, 0.5),
        ),
        backend="cpu",
        sort_by="cpu",
        steps=1,
    )


def _rank_table() -> RankTable:
    """Two ranks: one op rank 1 never ran, a collective, per-rank tables for the footer."""
    rank0 = Table(
        rows=(OpRow("aten::mm", 4, 100.0, 100.0, 2000.0, 2000.0),),
        backend="neuron",
        device_label="NEURON",
        steps=2,
        step_us=4000.0,
        collective_wait_us=400.0,
    )
    rank1 = Table(
        rows=(OpRow("aten::mm", 4, 110.0, 110.0, 3000.0, 3000.0),),
        backend="neuron",
        device_label="NEURON",
        steps=2,
        step_us=6000.0,
        collective_wait_us=300.0,
        communication_us=120.0,
    )
    rows = (
        RankOpRow("aten::mm", "self_device_us", (2000.0, 3000.0), (4, 4), 2000.0, 2500.0, 3000.0, 1),
        RankOpRow("c10d::allreduce_", "self_device_us", (500.0, 100.0), (2, 2), 100.0, 300.0, 500.0, 1),
        RankOpRow("aten::add", "self_device_us", (10.0, None), (1, 0), 10.0, 10.0, 10.0, 0, input_shapes=((8,), (8,))),
    )
    return RankTable(
        rows=rows, world_size=2, metric="self_device_us", tables=(rank0, rank1), notes=("rank 2 wrote no trace",)
    )


def _comparison() -> Comparison:
    """A baseline, a variant measurably faster, one without an interval, and their findings."""
    table = Table(rows=(OpRow("aten::mul", 6, 12.0, 12.0),), backend="cpu", steps=2)
    found = Insights(
        findings=(
            Finding(
                "unfused_chain",
                "6 elementwise ops in a row",
                Evidence(
                    ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul"), 1.0, 30.0, 0.5
                ),
                20.0,
                "fuse them",
            ),
        ),
        steps=2,
        step_us=60.0,
    )
    rows = (
        ComparisonRow("naive", 6.0, 30.0, None, 100.0, 90.0, 130.0, 1.0, 0.012, table=table, insights=found),
        ComparisonRow(
            "torch.rms_norm",
            1.0,
            5.0,
            None,
            40.0,
            38.0,
            45.0,
            2.5,
            0.004,
            speedup_low=2.2,
            speedup_high=2.8,
            insights=Insights(findings=(), steps=2),
        ),
        ComparisonRow(
            "compiled", 1.5, 6.0, None, 55.0, 50.0, 70.0, 100 / 55, 1.75, speedup_low=0.9993, speedup_high=1.0007
        ),
        ComparisonRow("slow one", 9.0, 80.0, None, 1e6, 9e5, 1.1e6, 1e-4, 0.0),
    )
    return Comparison(
        rows=rows, baseline="naive", backend="cpu", repeats=7, warmup=3, profiled_steps=2, notes=("a noisy machine",)
    )


def _device_comparison() -> Comparison:
    rows = (
        ComparisonRow("eager", 6.0, 30.0, 250.0, 400.0, 390.0, 420.0, 1.0, 0.5),
        ComparisonRow("fused", 1.0, 8.0, 120.0, 200.0, 195.0, 210.0, 2.0, 3.25, speedup_low=1.9, speedup_high=2.1),
    )
    return Comparison(
        rows=rows, baseline="eager", backend="neuron", device_label="NEURON", repeats=9, warmup=1, profiled_steps=1
    )


def _diff() -> TraceDiff:
    """Ops in both, only in A, only in B; a host op and a kernel of one name; verdicts from fixed samples."""
    rows = (
        DiffRow("aten::mm", None, False, 4, 4, 100.0, 160.0, 2000.0, 3000.0, 60.0, 1.6),
        DiffRow("aten::mm", None, True, 4, 4, 0.0, 0.0, 2000.0, 3000.0, 0.0, None),
        DiffRow("aten::gelu", None, False, None, 2, None, 20.0, None, 80.0, 20.0, None),
        DiffRow("aten::relu", None, False, 2, None, 10.0, None, 40.0, None, -10.0, None),
        DiffRow(LONG_NAME, None, False, 3, 3, 5.0, 5.5, None, None, 0.5, 1.1),
    )
    step = shift([100.0, 101.0, 99.0, 100.5, 100.2, 99.8], [120.0, 121.0, 119.0, 120.5, 120.2, 119.8])
    same = shift([10.0, 11.0, 9.0, 10.5], [10.2, 10.8, 9.1, 10.4])
    return TraceDiff(
        rows=rows,
        a="before.pt.trace.json",
        b="after.pt.trace.json",
        metric="cpu",
        match="name",
        device_label="NEURON",
        steps_a=6,
        steps_b=6,
        per_step=True,
        notes=("the traces come from different torch releases",),
        step=step,
        op_shifts=(("aten::mm", step), (LONG_NAME, same)),
    )


def _insights() -> Insights:
    """A finding that matters, one without an estimate, a minor one, and notes."""
    findings = (
        Finding(
            "input_pipeline",
            "the step waits on the data loader",
            Evidence(("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",), 1.0, 800.0, 0.4),
            800.0,
            "raise num_workers and set pin_memory=True",
        ),
        Finding(
            "unfused_chain",
            "5 elementwise ops in a row",
            Evidence(("aten::mul", "aten::add", "aten::mul", "aten::add", "aten::sigmoid"), 2.0, 40.0, 0.02, "float32"),
            None,
            "torch.compile the function",
        ),
        Finding(
            "dominant_op",
            "aten::mm | takes most of the step",
            Evidence(("aten::mm",), 4.0, 0.01, 0.0),
            0.01,
            "nothing to do",
        ),
    )
    return Insights(
        findings=findings,
        backend="neuron",
        device_label="NEURON",
        steps=3,
        step_us=2000.0,
        host_op_us=600.0,
        device_busy_us=900.0,
        bound="neither",
        notes=("device_sync skipped: no device time",),
        source="trace.json",
    )


# -- the renders ---------------------------------------------------------------------------

Render = Callable[[], str]

RENDERS: dict[str, Render] = {
    "table.txt": lambda: _table().to_text(),
    "table.md": lambda: _table().to_markdown(),
    "table.html": lambda: _table()._repr_html_(),
    "table.csv": lambda: _table().to_csv(notes=True),
    "table.json": lambda: _table().to_json(),
    "table_head.txt": lambda: _table().head(2).to_text(),
    "table_device_only.txt": lambda: _table().device_only().to_text(),
    "table_cpu.txt": lambda: _cpu_table().to_text(),
    "table_cpu.md": lambda: _cpu_table().to_markdown(),
    "table_cpu.html": lambda: _cpu_table()._repr_html_(),
    "table_cpu.csv": lambda: _cpu_table().to_csv(),
    "rank_table.txt": lambda: str(_rank_table()),
    "rank_table.md": lambda: _rank_table().to_markdown(),
    "rank_table.csv": lambda: _rank_table().to_csv(notes=True),
    "rank_table.json": lambda: _rank_table().to_json(),
    "comparison.txt": lambda: _comparison().to_text(),
    "comparison.md": lambda: _comparison().to_markdown(),
    "comparison.html": lambda: _comparison()._repr_html_(),
    "comparison.json": lambda: _comparison().to_json(),
    "comparison_device.txt": lambda: _device_comparison().to_text(),
    "diff.txt": lambda: _diff().to_text(),
    "diff.md": lambda: _diff().to_markdown(),
    "diff_head.txt": lambda: _diff().to_text(row_limit=2),
    "diff.json": lambda: _diff().to_json(),
    "insights.txt": lambda: _insights().to_text(),
    "insights.md": lambda: _insights().to_markdown(),
    "insights.json": lambda: _insights().to_json(),
}


def _golden_files() -> list[Path]:
    # .gitattributes keeps git from changing the files' line ends on checkout.
    return [p for p in GOLDEN.iterdir() if not p.name.startswith(".")]


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_render_matches_its_golden(name: str, request: pytest.FixtureRequest) -> None:
    rendered = RENDERS[name]()
    path = GOLDEN / name
    if request.config.getoption("--update-goldens"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(rendered, encoding="utf-8", newline="")
        return
    assert path.exists(), f"no golden {path.name}: run `pytest {Path(__file__).name} --update-goldens`"
    with path.open(encoding="utf-8", newline="") as f:
        expected = f.read()
    if name.endswith(".json"):
        assert json.loads(rendered) == json.loads(expected)
    else:
        assert rendered == expected


def test_every_golden_file_has_a_render() -> None:
    # A render removed from RENDERS leaves its file behind; it would be kept, unchecked, forever.
    assert sorted(p.name for p in _golden_files()) == sorted(RENDERS)


def test_goldens_hold_nothing_of_the_machine() -> None:
    # The renders are of hand-built models: no path, version or time may leak into them.
    import neuronprof

    for path in _golden_files():
        text = path.read_text(encoding="utf-8")
        assert str(Path(__file__).parents[1]) not in text, path.name
        assert f"neuronprof {neuronprof.__version__}" not in text, path.name
        assert path.stat().st_size < 8_000, f"{path.name} is too large for a golden"
