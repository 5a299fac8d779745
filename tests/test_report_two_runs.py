"""Two runs side by side as differences: ``cmp.report()`` and ``neuronprof report A B``, on real profiles.

Naive RMSNorm (six ops) against ``torch.rms_norm`` (one op calling a fused one), profiled
with torch.profiler on the CPU, and once on the PrivateUse1 test backend (the
``torch_neuronx`` stand-in: its kernel times are the test plugin's, not a Trainium's).
What a browser makes of these panes is in ``test_report_browser.py``.
"""

from __future__ import annotations

import html
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import neuronprof
from neuronprof.analysis import diff, load_trace
from neuronprof.analysis._verdict import min_samples
from neuronprof.cli import main as analysis_main
from neuronprof.model import Comparison
from test_report import embedded, no_external_reference

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

from run_in_subprocess import result, run_script, unavailable_reason  # noqa: E402

X, W = torch.randn(32, 128), torch.randn(128)


def naive() -> torch.Tensor:
    return X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + 1e-6) * W


def fused() -> torch.Tensor:
    return torch.rms_norm(X, (X.shape[-1],), W, 1e-6)


def text_of(page: str, section: str) -> str:
    m = re.search(rf'<section id="{section}">(.*?)</section>', page, re.S)
    assert m, section
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", m.group(1))))


def _num(cell: str) -> float | None:
    return None if cell == "" else float(cell.replace(",", "").replace("+", ""))


def overview_diff(page: str, table_id: str) -> dict[str, list[float | None]]:
    """The overview diff read back from the page: label → A, B, B − A, B − A (%), A share, B share."""
    table = re.search(rf'<table id="{table_id}".*?</table>', page, re.S)
    assert table, table_id
    out = {}
    for label, cells in re.findall(r'<td class="left name">(.*?)</td>((?:<td>[^<]*</td>){6})', table.group(0)):
        out[html.unescape(label)] = [_num(c) for c in re.findall(r"<td>([^<]*)</td>", cells)]
    return out


def check_overview(rows: dict[str, list[float | None]], mean_a: float, mean_b: float) -> None:
    """The step row is each run's mean step; the categories add up to it; differences and shares follow."""
    assert rows["step time"][0] == pytest.approx(mean_a, abs=0.06)
    assert rows["step time"][1] == pytest.approx(mean_b, abs=0.06)
    cats = {k: v for k, v in rows.items() if k != "step time"}
    assert {"host compute in ops", "idle", "device compute"} <= set(cats)
    for side in (0, 1):
        assert sum(v[side] or 0.0 for v in cats.values()) == pytest.approx(rows["step time"][side], abs=0.1 * len(cats))
        assert sum(v[4 + side] or 0.0 for v in cats.values()) == pytest.approx(100.0, abs=0.1 * len(cats))
    for a, b, delta, pct, _, _ in rows.values():
        # B − A is rounded once (± 0.05), A and B each once (± 0.05 each): 0.15 at most.
        assert a is not None and b is not None and delta == pytest.approx(b - a, abs=0.15 + 1e-9)
        assert pct is None if a == 0 else pct == pytest.approx(100 * (b - a) / a, abs=_pct_read_off(a, b))


def _pct_read_off(a: float, b: float, half: float = 0.05) -> float:
    """How far 100 (B − A) / A may be from the page's %, A and B read off it to 0.1 µs (± ``half``).

    The page's % is of the figures before they were rounded; a small category's % moves a lot with
    its last digit (live timings): the widest move over the rounding's box, plus the %'s own rounding.
    """
    shown = 100 * (b - a) / a
    corners = [100 * (y - x) / x for x in (a - half, a + half) for y in (b - half, b + half) if x > 0]
    return max([0.6, *(abs(c - shown) + 0.05 for c in corners)]) if len(corners) == 4 else float("inf")


def ops_diff(page: str, key: str = "diff-0") -> dict[str, dict[str, Any]]:
    grid = embedded(page)["grids"][key]
    headers = [c["header"] for c in grid["columns"]]
    assert headers[:5] == ["Name", "On", "In", "Calls A", "Calls B"]
    return {r["name"]: r for r in grid["rows"] if r["where"] == "host"}


# -- cmp.report() -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Comparison, str]:
    out = tmp_path_factory.mktemp("cmp")
    cmp = neuronprof.compare({"naive": naive, "torch.rms_norm": fused}, repeats=3, quiet=True, output_dir=out)
    return cmp, cmp.report(out / "cmp.html").read_text(encoding="utf-8")


def test_comparison_report_shows_each_variant_against_the_baseline_as_differences(
    compared: tuple[Comparison, str],
) -> None:
    cmp, page = compared
    no_external_reference(page)
    base, fast = cmp.row("naive"), cmp.row("torch.rms_norm")
    assert base.table is not None and fast.table is not None
    text = text_of(page, "against-1")
    assert text.startswith(" torch.rms_norm against the baseline naive")
    # The overview: each variant's mean profiled step, as its own table's steps hold it.
    mean = {r.name: (r.table.step_us or 0.0) / r.table.steps for r in (base, fast) if r.table is not None}
    check_overview(overview_diff(page, "against-1-overview"), mean["naive"], mean["torch.rms_norm"])
    # The operators: per profiled step, from each variant's table; the ops of one variant only are marked.
    ops = ops_diff(page)
    steps = cmp.profiled_steps
    for name, row in ops.items():
        in_a = [r for r in base.table.rows if r.name == name and not r.on_device]
        in_b = [r for r in fast.table.rows if r.name == name and not r.on_device]
        assert (
            row["status"]
            == {(True, True): "both", (True, False): "only in A", (False, True): "only in B"}[(bool(in_a), bool(in_b))]
        )
        assert row["calls_a"] == (in_a[0].calls if in_a else None)
        assert row["cpu_a"] == (pytest.approx(in_a[0].self_cpu_us / steps) if in_a else None)
        assert row["cpu_b"] == (pytest.approx(in_b[0].self_cpu_us / steps) if in_b else None)
        assert row["delta"] == pytest.approx((row["cpu_b"] or 0.0) - (row["cpu_a"] or 0.0), abs=1e-3)
    assert ops["aten::rms_norm"]["status"] == "only in B" and ops["aten::mul"]["status"] == "both"
    assert "appeared in B (not in A): " in text and "aten::rms_norm" in text
    # Three timing rounds give no interval: said plainly, with what gives one.
    assert fast.speedup_low is None and fast.speedup_high is None
    need = min_samples()
    verdict = text_of(page, "against-1").split("Did it get faster?")[1]
    assert "not enough repeats for a verdict: 3 and 3 timing rounds give no 95% interval" in verdict
    assert f"compare(..., repeats={need}) or more gives one" in verdict
    assert 'href="#against-1"' in page


def test_a_saved_comparison_reports_the_same_differences(compared: tuple[Comparison, str], tmp_path: Path) -> None:
    cmp, page = compared
    again = Comparison.from_json(cmp.to_json())
    assert again.rows[1].breakdown == cmp.rows[1].breakdown is not None
    other = again.report(tmp_path / "again.html").read_text(encoding="utf-8")
    assert overview_diff(other, "against-1-overview") == overview_diff(page, "against-1-overview")
    assert embedded(other)["grids"]["diff-0"] == embedded(page)["grids"]["diff-0"]


def test_comparison_verdict_reads_the_speedup_interval(tmp_path: Path) -> None:
    need = min_samples()
    cmp = neuronprof.compare({"naive": naive, "torch.rms_norm": fused}, repeats=need, quiet=True, output_dir=tmp_path)
    row = cmp.row("torch.rms_norm")
    assert row.speedup_low is not None and row.speedup_high is not None
    word = "faster" if row.speedup_low > 1 else "slower" if row.speedup_high < 1 else "no measurable change"
    page = cmp.report(tmp_path / "cmp.html").read_text(encoding="utf-8")
    verdict = text_of(page, "against-1").split("Did it get faster?")[1]
    assert verdict.lstrip().startswith(f"{word}: speedup")
    # One speedup on the page: the table's (baseline median / variant median) with its interval.
    cell = f"{row.speedup:.2f}× ("
    assert row.speedup == pytest.approx(cmp.row("naive").wall_us / row.wall_us)
    assert f"speedup {cell}" in verdict and cell in text_of(page, "comparison")
    low, high = re.search(r"speedup [\d.]+× \(([\d.]+)–([\d.]+)\)", verdict).groups()  # type: ignore[union-attr]
    assert float(low) == pytest.approx(row.speedup_low, abs=0.005) and float(high) == pytest.approx(
        row.speedup_high, abs=0.005
    )
    box = verdict.split("Operators")[0]
    assert "95% confidence interval (Hodges–Lehmann" in box and "B/A" not in box
    assert f"from {need} and {need} timing rounds" in verdict and "not enough repeats" not in verdict


# -- neuronprof report A B --------------------------------------------------------------


def _record(fn: Callable[[], Any], target: Path, out: Path, active: int = 3) -> Path:
    with neuronprof.session(wait=0, warmup=1, active=active, output_dir=out) as s:
        for _ in s.steps():
            fn()
    return s.export(target)


def test_report_a_b_shows_the_overview_and_ops_as_differences_and_says_a_verdict_needs_repeats(
    tmp_path: Path,
) -> None:
    a = _record(naive, tmp_path / "a.pt.trace.json", tmp_path / "s")
    b = _record(fused, tmp_path / "b.pt.trace.json", tmp_path / "s")
    target = tmp_path / "two.html"
    assert analysis_main(["report", str(a), str(b), "-o", str(target)]) == 0
    page = target.read_text(encoding="utf-8")
    no_external_reference(page)
    ta, tb = load_trace(a), load_trace(b)
    check_overview(
        overview_diff(page, "two-runs-overview"),
        statistics.fmean(s.wall_us for s in ta.samples),
        statistics.fmean(s.wall_us for s in tb.samples),
    )
    # The ops per step, as `neuronprof diff --per-step` pairs them.
    d = diff(a, b, per_step=True)
    ops = ops_diff(page)
    expected = {r.name: r for r in d.rows if not r.on_device}
    assert set(ops) == set(expected)
    for name, row in ops.items():
        assert row["cpu_a"] == expected[name].self_cpu_us_a and row["cpu_b"] == expected[name].self_cpu_us_b
    assert ops["aten::rms_norm"]["status"] == "only in B" and ops["aten::rms_norm"]["cpu_a"] is None
    # Two single runs of three steps: no interval, and the page says what gives a verdict.
    text = text_of(page, "two-runs")
    verdict = text.split("Did it get faster?")[1]
    assert "not enough repeats for a verdict" in verdict and "3 and 3 sample(s) are too few" in verdict
    need = min_samples()
    assert "A verdict needs repeats. Here A holds 1 run(s) and B 1" in verdict
    assert f"Record at least {need} runs of each" in verdict and "neuronprof report RUNS_A RUNS_B" in verdict


def test_report_of_two_folders_of_runs_gives_the_verdict_of_diff(tmp_path: Path) -> None:
    need = min_samples()
    for side, fn in (("a", naive), ("b", fused)):
        for i in range(need):
            _record(fn, tmp_path / side / f"run-{i}.pt.trace.json", tmp_path / "s", active=need)
    target = tmp_path / "runs.html"
    assert analysis_main(["report", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(target)]) == 0
    d = diff(tmp_path / "a", tmp_path / "b", per_step=True)
    assert d.step is not None and d.step.verdict != "cannot tell"
    verdict = text_of(target.read_text(encoding="utf-8"), "two-runs").split("Did it get faster?")[1]
    assert f"step time (host): {d.step.describe()}" in verdict
    assert "A verdict needs repeats" not in verdict and "not enough repeats" not in verdict


_DEVICE_COMPARE = """
import torch, neuronprof, testbackend
# The stand-in reports a kernel of 200 µs per op to torch.profiler: the test plugin's time, not a Trainium's.
testbackend.set_kernel_ns(200_000)
x, w = torch.randn(32, 64), torch.randn(64)
cmp = neuronprof.compare(
    {"naive": lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
     "torch.rms_norm": lambda: torch.rms_norm(x, (64,), w, 1e-6)},
    backend="neuron", repeats=2, quiet=True, output_dir=OUT,
)
report({"page": cmp.report(OUT + "/cmp.html").read_text(encoding="utf-8"), "json": cmp.to_json()})
"""


def test_comparison_report_on_a_device_backend_compares_device_time(tmp_path: Path) -> None:
    """On the PrivateUse1 test backend (the torch_neuronx stand-in), the panes speak of the device's time."""
    code = _DEVICE_COMPARE.replace("OUT", repr(str(tmp_path)))
    proc = run_script(code, backend="neuron", env={"NEURONPROF_STANDIN_NEURON_BUILD": "correlating"}, cwd=tmp_path)
    why = unavailable_reason(proc)
    if why is not None:
        pytest.skip(why)
    info = result(proc)
    cmp, page = Comparison.from_json(info["json"]), info["page"]
    rows = overview_diff(page, "against-1-overview")
    assert "NEURON compute" in rows and rows["NEURON compute"][0] and rows["NEURON compute"][1]
    grid = embedded(page)["grids"]["diff-0"]
    headers = [c["header"] for c in grid["columns"]]
    assert "Self NEURON A (µs per step)" in headers and "Δ self NEURON (µs per step)" in headers
    # The change compared is the device's: each op's self device time per step, B less A.
    base, fast = cmp.row("naive").table, cmp.row("torch.rms_norm").table
    assert base is not None and fast is not None
    kernels = {r["name"]: r for r in grid["rows"] if r["where"] == "device"}
    assert kernels
    for name, row in kernels.items():
        a = next((r.self_device_us for r in base.rows if r.name == name and r.on_device), None)
        assert row["dev_a"] == (None if a is None else pytest.approx(a / base.steps))
        assert row["delta"] == pytest.approx((row["dev_b"] or 0.0) - (row["dev_a"] or 0.0), abs=1e-3)
    assert "not enough repeats for a verdict: 2 and 2 timing rounds" in text_of(page, "against-1")


def test_report_of_one_file_twice_says_a_and_b_are_the_same(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _record(naive, tmp_path / "runs" / "a.pt.trace.json", tmp_path / "s")
    other_path = tmp_path / "runs" / ".." / "runs" / "a.pt.trace.json"  # another path to the same file
    cases = {"file": (a, other_path), "folder": (a.parent, tmp_path / "runs" / ".." / "runs")}
    for kind, (first, second) in cases.items():
        target = tmp_path / f"{kind}.html"
        assert analysis_main(["report", str(first), str(second), "-o", str(target)]) == 0
        said = f"A and B are the same {kind} ({second}): the comparison shows no change by construction"
        assert said in capsys.readouterr().err
        verdict = text_of(target.read_text(encoding="utf-8"), "two-runs").split("Did it get faster?")[1]
        assert verdict.lstrip().startswith(said)
    # Two files with the same content are two runs: nothing is said.
    b = tmp_path / "b.pt.trace.json"
    b.write_bytes(a.read_bytes())
    assert analysis_main(["report", str(a), str(b), "-o", str(tmp_path / "two.html")]) == 0
    assert "same file" not in capsys.readouterr().err
    assert "same file" not in (tmp_path / "two.html").read_text(encoding="utf-8")
