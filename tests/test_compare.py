"""neuronprof.compare(): structure of the result, measurement procedure, renderers, refusals."""

from __future__ import annotations

import importlib
import io
import json
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import torch

import neuronprof
from neuronprof import VariantError, compare
from neuronprof.model import Comparison, ComparisonRow, OpRow, Table

# The module behind neuronprof.compare(), for its test seam (the clock).
compare_module = importlib.import_module("neuronprof._compare")

EPS = 1e-6


def rmsnorm_naive(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rmsnorm_fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.rms_norm(x, (x.shape[-1],), w, EPS)


class FakeClock:
    """A clock that only moves when a variant says it took time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Recorder:
    """A variant that logs each call and takes a scripted time on the fake clock."""

    def __init__(self, name: str, log: list[str], clock: FakeClock, first_s: float, steady_s: float) -> None:
        self.name = name
        self.log = log
        self.clock = clock
        self.first_s = first_s
        self.steady_s = steady_s
        self.calls = 0

    def __call__(self, *args: object) -> None:
        self.clock.advance(self.first_s if self.calls == 0 else self.steady_s)
        self.calls += 1
        self.log.append(self.name)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(compare_module, "_clock", fake)
    return fake


@pytest.fixture
def opts(tmp_path: Path) -> dict[str, Any]:
    return {"backend": "cpu", "output_dir": tmp_path / "out", "quiet": True}


@pytest.fixture(scope="module")
def rms(tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    """One real comparison of the three RMSNorms, compiled once for the whole module."""
    with pytest.MonkeyPatch.context() as mp:
        # torch.compile's cache defaults to a folder shared by every process on the machine.
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
        torch.manual_seed(0)
        x = torch.randn(8, 64)
        w = torch.randn(64)
        variants = {
            "naive": rmsnorm_naive,
            "torch.rms_norm": rmsnorm_fused,
            "torch.compile": torch.compile(rmsnorm_naive, fullgraph=True),
        }
        with torch.no_grad():
            return compare(
                variants,
                x,
                w,
                repeats=3,
                warmup=1,
                quiet=True,
                backend="cpu",
                output_dir=tmp_path_factory.mktemp("out"),
            )


# -- a real comparison -----------------------------------------------------------------


@pytest.mark.slow
def test_op_calls_per_variant(rms: Comparison) -> None:
    assert rms.row("naive").op_calls == 6
    assert rms.row("torch.rms_norm").op_calls == 1
    assert rms.row("torch.compile").op_calls == 1


@pytest.mark.slow
def test_rows_keep_order_and_first_is_baseline(rms: Comparison) -> None:
    assert rms.names() == ["naive", "torch.rms_norm", "torch.compile"]
    assert rms.baseline == "naive"
    assert rms.row("naive").speedup == 1.0
    assert rms.backend == "cpu"
    assert rms.device_label is None
    assert (rms.repeats, rms.warmup, rms.profiled_steps) == (3, 1, 3)


@pytest.mark.slow
def test_speedup_is_ratio_of_reported_medians(rms: Comparison) -> None:
    base = rms.row("naive").wall_us
    for row in rms:
        assert len(row.wall_samples_us) == 3
        assert row.wall_us == pytest.approx(statistics.median(row.wall_samples_us))
        assert row.wall_us_min == min(row.wall_samples_us) <= row.wall_us <= max(row.wall_samples_us) == row.wall_us_max
        assert row.speedup == pytest.approx(base / row.wall_us)
        assert row.calls_per_sample >= 1


@pytest.mark.slow
def test_compile_time_is_kept_apart(rms: Comparison) -> None:
    compiled = rms.row("torch.compile")
    assert compiled.compile_s > 0
    # Compilation takes seconds; no steady-state sample may contain it.
    assert all(sample < compiled.compile_s * 1e6 for sample in compiled.wall_samples_us)


@pytest.mark.slow
def test_each_variant_keeps_its_full_table(rms: Comparison) -> None:
    naive = rms.row("naive").table
    assert isinstance(naive, Table)
    assert naive.steps == 3
    assert {"aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"} <= set(naive.names())
    compiled = rms.row("torch.compile").table
    assert compiled is not None
    assert any(name.startswith("Torch-Compiled Region") for name in compiled.names())


@pytest.mark.slow
def test_self_times_are_per_step_without_the_step_row(rms: Comparison) -> None:
    for row in rms:
        assert row.table is not None
        ops = [r for r in row.table.rows if not r.name.startswith("ProfilerStep")]
        assert row.self_cpu_us == pytest.approx(sum(r.self_cpu_us for r in ops) / row.table.steps)
        assert row.self_device_us is None


@pytest.mark.slow
def test_text_marks_baseline_and_best(rms: Comparison) -> None:
    text = str(rms)
    assert "naive (baseline)" in text
    for header in ("Ops", "Self CPU (µs)", "Median (µs)", "Min–max (µs)", "Speedup", "1st call (s)"):
        assert header in text
    assert " *" in text
    assert "Self NEURON" not in text
    lines = text.splitlines()
    assert len({len(line) for line in lines[:2]}) == 1  # header and rule line up


@pytest.mark.slow
def test_markdown_html_and_json(rms: Comparison) -> None:
    md = rms.to_markdown()
    assert md.startswith("| Variant |")
    assert "**" in md
    html = rms._repr_html_()
    assert html.startswith("<table") and "<b>" in html
    data = json.loads(rms.to_json())
    assert data["schema"] == "neuronprof.comparison/1"
    again = Comparison.from_json(rms.to_json())
    assert again == rms
    assert again.row("naive").table == rms.row("naive").table


@pytest.mark.slow
def test_plot_png(rms: Comparison, tmp_path: Path) -> None:
    target = tmp_path / "sub" / "cmp.png"
    assert rms.plot(target) == target
    assert target.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert [p.name for p in target.parent.iterdir()] == ["cmp.png"]  # no temporary file left


def _hand_built(faster: bool) -> Comparison:
    """Three RMSNorms measured by hand: with ``faster``, ``fused`` is measurably faster than ``naive``."""
    fused = (40.0, 2.5, 2.2, 2.8) if faster else (98.0, 100 / 98, 0.9, 1.1)  # wall, speedup and its interval
    rows = (
        ComparisonRow("naive", 6.0, 30.0, None, 100.0, 95.0, 110.0, 1.0, 0.01),
        ComparisonRow(
            "fused",
            1.0,
            5.0,
            None,
            fused[0],
            fused[0] - 2,
            fused[0] + 5,
            fused[1],
            0.01,
            speedup_low=fused[2],
            speedup_high=fused[3],
        ),
        ComparisonRow(
            "compiled", 1.0, 6.0, None, 120.0, 110.0, 130.0, 100 / 120, 2.0, speedup_low=0.7, speedup_high=0.9
        ),
    )
    return Comparison(rows=rows, baseline="naive", backend="cpu", repeats=5, warmup=1, profiled_steps=2)


@pytest.mark.parametrize("faster", [True, False], ids=["a variant faster", "none faster"])
def test_figure_has_a_legend_and_a_title_naming_the_variants(faster: bool) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    from neuronprof.render import render_comparison_figure

    cmp = _hand_built(faster)
    figure = render_comparison_figure(cmp, title="RMSNorm")
    title = figure._suptitle.get_text()  # noqa: SLF001 - matplotlib has no public getter
    assert title.startswith("RMSNorm: ")
    assert all(row.name in title for row in cmp)
    assert f"backend {cmp.backend}" in title
    labels = [text.get_text() for legend in figure.legends for text in legend.get_texts()]
    assert f"baseline ({cmp.baseline})" in labels
    # "best" is listed exactly when a bar is drawn green: in the wall panel only for a variant
    # whose speedup's interval excludes 1, in the self-time panel for the least self time.
    wall, own = ([to_hex(p.get_facecolor()) for p in ax.patches] for ax in figure.axes)
    green = "#2ca02c"
    assert (wall[1] == green) is faster and wall[0] != green and wall[2] != green
    assert own[1] == green, "fused has the least self CPU time in both"
    assert "best" in labels and "other variants" in labels


@pytest.mark.slow
@pytest.mark.parametrize("baseline_fastest", [True, False])
def test_figure_colours_match_its_legend(rms: Comparison, baseline_fastest: bool) -> None:
    """The baseline is grey in both panels, never green, and the legend lists exactly the colours drawn."""
    pytest.importorskip("matplotlib")
    import dataclasses

    from matplotlib.colors import to_hex

    from neuronprof.render import render_comparison_figure

    base, other = rms.rows[0], rms.rows[1]
    fast, slow = (10.0, 8.0), (14.0, 11.0)  # (wall, self CPU)
    mine, theirs = (fast, slow) if baseline_fastest else (slow, fast)
    rows = (
        dataclasses.replace(base, wall_us=mine[0], wall_us_min=mine[0], wall_us_max=mine[0], self_cpu_us=mine[1]),
        dataclasses.replace(
            other, wall_us=theirs[0], wall_us_min=theirs[0], wall_us_max=theirs[0], self_cpu_us=theirs[1]
        ),
    )
    two = dataclasses.replace(rms, rows=rows, baseline=base.name)
    figure = render_comparison_figure(two, title="Two")
    legend = {
        to_hex(handle.get_facecolor()): text.get_text()
        for lg in figure.legends
        for handle, text in zip(lg.legend_handles, lg.get_texts())
    }
    drawn = set()
    for ax in figure.axes:
        bars = [to_hex(patch.get_facecolor()) for patch in ax.patches]
        assert len(bars) == 2
        assert legend[bars[0]] == f"baseline ({base.name})"  # the baseline's bar, in every panel
        drawn.update(bars)
    assert drawn == set(legend)
    assert ("best" in legend.values()) is not baseline_fastest


@pytest.mark.slow
def test_plot_svg_replaces_existing_file(rms: Comparison, tmp_path: Path) -> None:
    target = tmp_path / "cmp.SVG"
    target.write_text("old")
    rms.plot(str(target))
    root = ET.parse(target).getroot()
    assert root.tag.endswith("svg")
    assert "naive" in target.read_text()


@pytest.mark.slow
def test_plot_refuses_unknown_suffix(rms: Comparison, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\.png.*\.svg"):
        rms.plot(tmp_path / "cmp.jpg")
    assert not (tmp_path / "cmp.jpg").exists()


@pytest.mark.slow
def test_plot_without_matplotlib_says_how_to_install(
    rms: Comparison, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install 'neuronprof\[plot\]'"):
        rms.plot(tmp_path / "cmp.png")


# -- the procedure, on a fake clock ------------------------------------------------------


@pytest.mark.slow
def test_first_call_is_timed_alone(clock: FakeClock, opts: dict[str, Any]) -> None:
    log: list[str] = []
    slow_first = Recorder("compiled", log, clock, first_s=7.0, steady_s=0.004)
    eager = Recorder("eager", log, clock, first_s=0.008, steady_s=0.008)
    cmp = compare({"eager": eager, "compiled": slow_first}, repeats=3, **opts)
    row = cmp.row("compiled")
    assert row.compile_s == pytest.approx(7.0)
    assert row.wall_us == pytest.approx(4000.0)
    assert row.wall_us_max == pytest.approx(4000.0)
    assert row.calls_per_sample == 3  # at least 10 ms a sample, 4 ms a call
    assert row.speedup == pytest.approx(2.0)
    assert cmp.row("eager").speedup == 1.0


@pytest.mark.slow
def test_rounds_are_interleaved_and_rotated(clock: FakeClock, opts: dict[str, Any]) -> None:
    log: list[str] = []
    # 20 ms a call: one call per sample, so the log shows the timing order directly.
    variants = {n: Recorder(n, log, clock, first_s=0.02, steady_s=0.02) for n in ("a", "b", "c")}
    compare(variants, repeats=4, warmup=2, **opts)
    setup = 1 + 2 + 1  # first call, warm-up, calibration
    assert log[: 3 * setup] == ["a"] * setup + ["b"] * setup + ["c"] * setup
    timing = log[3 * setup : 3 * setup + 12]
    assert timing == [*"abc", *"bca", *"cab", *"abc"]  # each round starts one later
    profiled = log[3 * setup + 12 :]
    steps = 0 + 2 + 3  # compare's defaults: wait=0, warmup as given, active=3
    assert profiled == ["a"] * steps + ["b"] * steps + ["c"] * steps


@pytest.mark.slow
def test_baseline_can_be_chosen(clock: FakeClock, opts: dict[str, Any]) -> None:
    log: list[str] = []
    slow = Recorder("slow", log, clock, first_s=0.03, steady_s=0.03)
    fast = Recorder("fast", log, clock, first_s=0.01, steady_s=0.01)
    cmp = compare({"slow": slow, "fast": fast}, baseline="fast", repeats=1, warmup=0, **opts)
    assert cmp.baseline == "fast"
    assert cmp.row("fast").speedup == 1.0
    assert cmp.row("slow").speedup == pytest.approx(1 / 3)
    assert cmp.fastest == "fast"


def test_session_options_reach_every_session(clock: FakeClock, opts: dict[str, Any]) -> None:
    def add(t: torch.Tensor) -> torch.Tensor:
        clock.advance(0.02)
        return t + 1

    cmp = compare({"add": add}, torch.ones(4, 4), repeats=1, active=2, record_shapes=True, **opts)
    for row in cmp:
        assert row.table is not None
        assert row.table.steps == 2
        assert row.table.row("aten::add").input_shapes == ((4, 4), (), ())
    assert cmp.profiled_steps == 2


def test_noisy_samples_are_noted(clock: FakeClock, opts: dict[str, Any]) -> None:
    times = iter([0.02, 0.02, 0.02, 0.02, 0.06, 0.02] + [0.02] * 10)

    def jittery() -> None:
        clock.advance(next(times))

    cmp = compare({"jittery": jittery}, repeats=3, warmup=1, **opts)
    assert any("jittery" in note and "busy" in note for note in cmp.notes)
    assert "note: jittery" in str(cmp)


# -- progress ------------------------------------------------------------------------------


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal(clock: FakeClock, opts: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    err = FakeTTY()
    monkeypatch.setattr(sys, "stderr", err)
    log: list[str] = []
    opts = {**opts, "quiet": False}
    compare({"only": Recorder("only", log, clock, 0.02, 0.02)}, repeats=2, **opts)
    out = err.getvalue()
    for phase in ("only: first call", "only: warm-up", "only: calibrating", "timing, round 2/2", "only: profiling"):
        assert phase in out
    assert "only: calibrating\r\x1b[K" in out  # the status line is rewritten in place
    assert out.endswith("only: profiling\n")  # ... and ends before the profiler's own output


@pytest.mark.parametrize("tty, quiet", [(False, False), (True, True)])
def test_progress_is_silent_off_a_terminal_or_when_quiet(
    tty: bool, quiet: bool, clock: FakeClock, opts: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    err = FakeTTY() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    log: list[str] = []
    compare({"only": Recorder("only", log, clock, 0.02, 0.02)}, repeats=1, **{**opts, "quiet": quiet})
    assert err.getvalue() == ""


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "variants, match",
    [
        ({}, "empty"),
        ([lambda: None], "dict"),
        ({"f": 3}, "'f' is not callable"),
        ({"": lambda: None}, "non-empty strings"),
    ],
)
def test_bad_variants_are_refused(variants: object, match: str, opts: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=match):
        compare(variants, **opts)  # type: ignore[arg-type]


def test_nothing_runs_before_a_refusal(opts: dict[str, Any]) -> None:
    calls: list[int] = []
    with pytest.raises(ValueError, match="'bad' is not callable"):
        compare({"ok": lambda: calls.append(1), "bad": None}, **opts)  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="mode"):
        compare({"ok": lambda: calls.append(1)}, modes=("bogus",), **opts)
    assert calls == []


def test_unknown_keyword_is_named(opts: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="'eps'.*functools.partial"):
        compare({"f": lambda: None}, eps=1e-6, **opts)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"baseline": "nope"}, "baseline 'nope'"),
        ({"repeats": 0}, "repeats"),
        ({"repeats": True}, "repeats"),
        ({"warmup": -1}, "warmup"),
        ({"quiet": "yes"}, "quiet"),
        ({"repeat": 0}, "repeat must be at least 1"),
        ({"active": 0}, "active"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, object], match: str, opts: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=match):
        compare({"f": lambda: None}, **{**opts, **kwargs})


def test_refused_inside_a_session(opts: dict[str, Any], tmp_path: Path) -> None:
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=tmp_path / "s") as s:
        with pytest.raises(neuronprof.SessionStateError, match="outside"):
            compare({"f": lambda: None}, **opts)
        for _ in s.steps():
            pass


@pytest.mark.parametrize("fail_at", [1, 3, 4])
def test_failing_variant_stops_the_run(fail_at: int, clock: FakeClock, opts: dict[str, Any], tmp_path: Path) -> None:
    # Calls of the failing variant: 1 first call, 2 warm-up, 3 calibration, then profiled steps.
    later: list[str] = []
    count = 0

    def later_variant() -> None:
        clock.advance(0.02)
        later.append("x")

    def broken() -> None:
        nonlocal count
        count += 1
        clock.advance(0.02)
        if count == fail_at:
            raise RuntimeError("boom")

    phases = {1: "first call", 3: "calibration", 4: "timing"}
    with pytest.raises(VariantError, match="'broken' raised RuntimeError during its") as info:
        compare({"broken": broken, "later": later_variant}, warmup=1, **opts)
    assert info.value.variant == "broken"
    assert info.value.phase == phases[fail_at]
    assert isinstance(info.value.__cause__, RuntimeError)
    assert isinstance(info.value, neuronprof.NeuronProfError)
    if fail_at == 1:
        assert later == []


@pytest.mark.slow
def test_failure_while_profiled_closes_the_session(opts: dict[str, Any], tmp_path: Path) -> None:
    def fails_under_profiler() -> None:
        if torch._C._autograd._profiler_enabled():
            raise ValueError("only when profiled")

    with pytest.raises(VariantError, match="during its profiling") as info:
        compare({"p": fails_under_profiler}, repeats=1, **opts)
    assert info.value.phase == "profiling"
    # The failed session released the profiler: a new one starts.
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=tmp_path / "s") as s:
        for _ in s.steps():
            pass


def test_variant_error_pickles() -> None:
    import pickle

    err = pickle.loads(pickle.dumps(VariantError("v", "timing", "variant 'v' raised")))
    assert (err.variant, err.phase, str(err)) == ("v", "timing", "variant 'v' raised")


# -- the model, built by hand ----------------------------------------------------------------


def _row(
    name: str,
    wall: float,
    speedup: float = 1.0,
    table: Table | None = None,
    interval: tuple[float, float] | None = None,
) -> ComparisonRow:
    return ComparisonRow(
        name=name,
        op_calls=2.0,
        self_cpu_us=10.0,
        self_device_us=5.0,
        wall_us=wall,
        wall_us_min=wall * 0.9,
        wall_us_max=wall * 1.1,
        speedup=speedup,
        compile_s=0.5,
        table=table,
        wall_samples_us=[wall * 0.9, wall, wall * 1.1],  # type: ignore[arg-type]
        speedup_low=None if interval is None else interval[0],
        speedup_high=None if interval is None else interval[1],
    )


def test_device_column_by_label() -> None:
    table = Table(rows=(OpRow("aten::mul", 1, 1.0, 1.0, 2.0, 2.0),), backend="neuron", device_label="NEURON", steps=1)
    cmp = Comparison(
        rows=(_row("a", 100.0, table=table), _row("b", 50.0, 2.0, interval=(1.8, 2.2))),
        baseline="a",
        backend="neuron",
        device_label="NEURON",
        repeats=3,
    )
    text = str(cmp)
    assert "Self NEURON (µs)" in text
    assert "2.00× (1.80–2.20) *" in text
    assert cmp.row("b").wall_samples_us == pytest.approx((45.0, 50.0, 55.0))
    assert Comparison.from_json(cmp.to_json()) == cmp
    assert "Self NEURON (µs)" in cmp.to_markdown()


def test_model_refusals() -> None:
    with pytest.raises(ValueError, match="unique"):
        Comparison(rows=(_row("a", 1.0), _row("a", 2.0)), baseline="a")
    with pytest.raises(ValueError, match="baseline 'z'"):
        Comparison(rows=(_row("a", 1.0),), baseline="z")
    with pytest.raises(KeyError, match="variants: a"):
        Comparison(rows=(_row("a", 1.0),), baseline="a").row("b")
    with pytest.raises(ValueError, match="not a neuronprof comparison"):
        Comparison.from_json(json.dumps({"schema": "other"}))
    with pytest.raises(ValueError, match="not JSON"):
        Comparison.from_json("{")
    with pytest.raises(ValueError, match="missing field 'wall_us'"):
        ComparisonRow.from_dict({"name": "a"})


def test_public_api() -> None:
    assert neuronprof.compare is compare
    assert neuronprof.Comparison is Comparison
    assert neuronprof.VariantError is VariantError
    assert {"compare", "Comparison", "ComparisonRow", "VariantError"} <= set(neuronprof.__all__)


@pytest.mark.parametrize(("interval", "marked"), [((1.8, 2.2), True), ((0.9, 2.4), False), (None, False)])
def test_the_best_speedup_is_marked_only_when_its_interval_excludes_1(
    interval: tuple[float, float] | None, marked: bool
) -> None:
    cmp = Comparison(rows=(_row("a", 100.0), _row("b", 50.0, 2.0, interval=interval)), baseline="a", repeats=3)
    cell = "2.00×" + ("" if interval is None else f" ({interval[0]:.2f}–{interval[1]:.2f})")
    assert cell in str(cmp)
    assert (f"{cell} *" in str(cmp)) is marked
    assert (f"**{cell}**" in cmp.to_markdown()) is marked


@pytest.mark.slow
def test_compare_gives_each_speedup_its_interval(clock: FakeClock, opts: dict[str, Any]) -> None:
    log: list[str] = []
    slow = Recorder("slow", log, clock, first_s=0.02, steady_s=0.02)
    fast = Recorder("fast", log, clock, first_s=0.01, steady_s=0.01)
    same = Recorder("same", log, clock, first_s=0.02, steady_s=0.02)
    cmp = compare({"slow": slow, "fast": fast, "same": same}, repeats=5, warmup=0, **opts)
    assert cmp.row("slow").speedup_low is None  # the baseline
    row = cmp.row("fast")
    assert (row.speedup_low, row.speedup_high) == pytest.approx((2.0, 2.0)) and row.measurably_different
    twin = cmp.row("same")
    assert (twin.speedup_low, twin.speedup_high) == pytest.approx((1.0, 1.0)) and not twin.measurably_different
    assert "2.00× (2.00–2.00) *" in str(cmp)
    assert Comparison.from_json(cmp.to_json()) == cmp


@pytest.mark.slow
def test_a_speedup_without_an_interval_says_why(clock: FakeClock, opts: dict[str, Any]) -> None:
    log: list[str] = []
    slow = Recorder("slow", log, clock, first_s=0.02, steady_s=0.02)
    fast = Recorder("fast", log, clock, first_s=0.01, steady_s=0.01)
    cmp = compare({"slow": slow, "fast": fast}, repeats=3, warmup=0, **opts)
    assert cmp.row("fast").speedup_low is None
    assert "2.00× *" not in str(cmp)  # no interval: no mark
    assert "too few timed samples for one (at least 4 on each side: repeats=4 or more)" in str(cmp)


@pytest.mark.parametrize(("interval", "marked"), [((0.9, 1.2), False), ((1.8, 2.2), True), (None, False)])
def test_the_fastest_median_is_marked_only_beyond_noise(interval: tuple[float, float] | None, marked: bool) -> None:
    """A median 0.07 % lower than the baseline's is not "best" when the speedup's interval holds 1."""
    cmp = Comparison(
        rows=(_row("a", 100.0), _row("b", 99.93 if marked is False else 50.0, 2.0, interval=interval)),
        baseline="a",
        backend="cpu",
        repeats=5,
    )
    median = [line for line in str(cmp).splitlines() if line.startswith("b ")][0]
    assert ("50.0 *" in median) is marked and "99.9 *" not in median
