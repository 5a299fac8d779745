"""The report's panes (overview, operators, kernels / device, memory, distributed), through the public API.

Each pane is checked on a real recording: a CPU session of a small ``nn.Sequential``, a
session on the PrivateUse1 test backend (the ``torch_neuronx`` stand-in: its kernel
times are the test plugin's, not a Trainium's) and the recorded two-rank gloo run of
the findings corpus. What a browser makes of the panes is in ``test_report_browser.py``.
"""

from __future__ import annotations

import html
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import neuronprof
from neuronprof.analysis import load_trace
from neuronprof.analysis.insights import HostEvent, Timeline
from neuronprof.cli import main as analysis_main
from neuronprof.model import Table
from neuronprof.report import MAX_FINDINGS, render_report
from test_report import embedded, no_external_reference

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

from run_in_subprocess import result, run_script, unavailable_reason  # noqa: E402

RANKS = Path(__file__).resolve().parent / "corpus" / "traces" / "ddp_straggler"
CATEGORIES = ["device", "memory", "communication", "runtime", "dataloader", "host_ops", "python", "idle"]


def text_of(page: str, section: str) -> str:
    """The visible text of one ``<section id=...>`` of the page."""
    m = re.search(rf'<section id="{section}">(.*?)</section>', page, re.S)
    assert m, section
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", m.group(1))))


def overview(page: str) -> dict[str, Any]:
    """The overview's steps, read back from the page's step table (name, time, parts in µs)."""
    table = re.search(r'<table id="steps-table".*?</table>', page, re.S)
    assert table, "no step table"
    rows = re.findall(r"<tr><td class=\"left name\">(.*?)</td><td>([\d,.]+)</td>(.*?)</tr>", table.group(0), re.S)
    out = {}
    for name, us, rest in rows:
        cells = [float(c.replace(",", "")) for c in re.findall(r"<td>([\d,.]+)</td>", rest)]
        out[html.unescape(name).lstrip("! ")] = (float(us.replace(",", "")), cells)
    return out


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> neuronprof.Session:
    out = tmp_path_factory.mktemp("panes")
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x = torch.randn(16, 32)
    with neuronprof.session(
        wait=0, warmup=1, active=3, output_dir=out, with_stack=True, record_shapes=True, profile_memory=True
    ) as s:
        for _ in s.steps():
            model(x).sum().backward()
    return s


def test_overview_breaks_each_recorded_step_down_and_lists_the_top_findings(mlp: neuronprof.Session) -> None:
    page = mlp.report().read_text(encoding="utf-8")
    no_external_reference(page)
    steps = overview(page)
    # One row per recorded step, its time the step's own (ProfilerStep span) as the recording holds it.
    samples = mlp.recording.samples
    assert list(steps) == [f"ProfilerStep#{i + 1}" for i in range(len(samples))]
    for (us, parts), sample in zip(steps.values(), samples):
        assert us == pytest.approx(sample.wall_us, abs=0.06)
        assert len(parts) == len(CATEGORIES)
        # Each instant counted once: the categories add up to the step.
        assert sum(parts) == pytest.approx(us, abs=0.1 * len(parts))
        by = dict(zip(CATEGORIES, parts))
        assert by["host_ops"] > 0 and by["python"] > 0  # with_stack: Python frames between ops
        assert by["device"] == by["memory"] == by["communication"] == 0  # a CPU run
    text = text_of(page, "overview")
    assert "a CPU run has no device" in text
    assert "pass with_stack=True" not in text  # frames were recorded
    # The top findings, with their time at stake, and the settings folded below.
    kinds = mlp.insights().kinds()
    top = re.findall(r'<ol class="findings" id="top-findings">(.*?)</ol>', page, re.S)
    if kinds:
        assert top and re.findall(r'<span class="kind">(.*?)</span>', top[0]) == list(kinds)[:3]
        assert "at stake" in top[0] or "not estimated" in top[0]
    assert re.search(r'<details id="settings">\s*<summary>', page)


def test_operators_pane_groups_by_shape_and_module_and_shows_the_heaviest_call_tree(
    mlp: neuronprof.Session,
) -> None:
    page = mlp.report().read_text(encoding="utf-8")
    data = embedded(page)
    # The main table is by input shape (shapes were recorded); the other grouping is by name.
    assert data["table_by"]["key"] == "name"
    by_name = [r["name"] for r in data["table_by"]["table"]["rows"]]
    assert len(by_name) == len(set(by_name)) and "aten::addmm" in by_name
    assert sum(r["name"] == "aten::addmm" for r in data["table"]["rows"]) >= 2  # two Linear shapes
    modules = {r["name"]: r for r in data["grids"]["modules"]["rows"]}
    assert {"Sequential_0", "Linear_0", "Linear_1", "ReLU_0"} <= set(modules)
    assert all(r["calls"] == 3 for r in modules.values())  # once per recorded step
    assert modules["Sequential_0"]["total_us"] >= modules["Linear_0"]["total_us"] + modules["Linear_1"]["total_us"]
    # The call tree: its root is a top-level op, self never above total, children inside their parent.
    tree = re.search(r'<div class="tree" id="call-tree">(.*)</div>\s*<p class="muted">The heaviest', page, re.S)
    assert tree
    lines = re.findall(r"<summary>(.*?) <span class=\"muted\">× (\d+) · total ([\d,.]+) µs · self ([\d,.]+) µs", page)
    assert lines
    for _, _, total, self_ in lines:
        assert float(self_.replace(",", "")) <= float(total.replace(",", "")) + 1e-6
    root_total = float(lines[0][2].replace(",", ""))
    assert root_total > 0


def test_memory_pane_lists_the_allocating_ops_of_a_profile_memory_session(mlp: neuronprof.Session) -> None:
    data = embedded(mlp.report().read_text(encoding="utf-8"))
    rows = data["grids"]["memory"]["rows"]
    # Self memory per op name, summed from torch's allocation records (equal to torch's own
    # key_averages(): test_report_memory.py), largest first; every op's own row.
    bytes_ = [r["cpu_bytes"] for r in rows]
    assert bytes_ == sorted(bytes_, reverse=True) and all(b > 0 for b in bytes_)
    assert len({r["name"] for r in rows}) == len(rows)
    assert any(r["name"] in ("aten::addmm", "aten::mm") for r in rows)


def test_a_plain_run_says_what_each_pane_cannot_show(tmp_path: Path) -> None:
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    with neuronprof.session(wait=0, warmup=1, active=2, output_dir=tmp_path) as s:
        for _ in s.steps():
            (x @ w).relu()
    page = s.report(tmp_path / "plain.html").read_text(encoding="utf-8")
    assert "pass with_stack=True" in text_of(page, "overview")
    ops = text_of(page, "ops")
    assert "pass record_shapes=True" in ops and "pass with_stack=True to group time by module" in ops
    assert "a CPU run: there is no device" in text_of(page, "kernels")
    assert "memory was not recorded: pass profile_memory=True" in text_of(page, "memory")
    assert "This run has one rank" in text_of(page, "distributed")
    # From its trace file: no [memory] events in it, and the page says how to record them.
    trace = s.export(tmp_path / "plain.json")
    assert analysis_main(["report", str(trace), "-o", str(tmp_path / "offline.html")]) == 0
    offline = (tmp_path / "offline.html").read_text(encoding="utf-8")
    assert "this trace holds no [memory] events" in text_of(offline, "memory")


def test_outlier_steps_are_marked() -> None:
    steps = [(0, 1000), (2000, 3000), (4000, 5000), (6000, 9000), (10_000, 11_000)]
    host = tuple(HostEvent(f"ProfilerStep#{i}", s, e, category="step") for i, (s, e) in enumerate(steps))
    host += tuple(HostEvent("aten::mm", s + 100, e - 100) for s, e in steps)
    page = render_report(Table(()), timeline=Timeline(host))
    marked = re.findall(r'<div class="outlier"[^>]*title="([^"]*)"', page)
    assert marked == ["ProfilerStep#3: 3.0 µs (outlier)"]
    assert "outlier steps (marked !)" in text_of(page, "overview")


def test_device_panes_name_the_backend_and_link_kernels_to_their_ops(tmp_path: Path) -> None:
    script = """
import os, torch, neuronprof, testbackend
testbackend.set_kernel_ns(200_000)
x, w = torch.randn(32, 64), torch.randn(64)
with neuronprof.session(backend="neuron", wait=0, warmup=1, active=2, output_dir=os.getcwd()) as s:
    for _ in s.steps():
        x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
report({"live": str(s.report("live.html").resolve()), "trace": str(s.export("trace.json").resolve())})
"""
    proc = run_script(script, backend="neuron", env={"NEURONPROF_STANDIN_NEURON_BUILD": "correlating"}, cwd=tmp_path)
    if unavailable_reason(proc) is not None:
        pytest.skip(unavailable_reason(proc) or "")
    assert proc.returncode == 0, proc.stderr
    made = result(proc)
    assert analysis_main(["report", made["trace"], "-o", str(tmp_path / "offline.html")]) == 0
    for path in (Path(made["live"]), tmp_path / "offline.html"):
        page = path.read_text(encoding="utf-8")
        data = embedded(page)
        kernels = data["grids"]["kernels"]
        headers = [c["header"] for c in kernels["columns"]]
        assert "NEURON total (µs)" in headers and "Share of NEURON time (%)" in headers
        rows = kernels["rows"]
        assert rows and sum(r["share"] for r in rows) == pytest.approx(100, abs=0.1)
        assert all(r["launched_by"] and r["launched_by"].startswith("aten::") for r in rows)
        kernels_text = text_of(page, "kernels")
        assert "NEURON busy per step" in kernels_text and "engine breakdown" in kernels_text
        steps = overview(page)
        assert len(steps) == 2
        for us, parts in steps.values():
            by = dict(zip(CATEGORIES, parts))
            assert by["device"] > 0
            assert sum(parts) == pytest.approx(us, abs=0.1 * len(parts))
        assert "NEURON compute" in text_of(page, "overview")


def test_distributed_pane_of_a_rank_folder_names_the_straggler(tmp_path: Path) -> None:
    target = tmp_path / "ranks.html"
    assert analysis_main(["report", str(RANKS), "-o", str(target)]) == 0
    page = target.read_text(encoding="utf-8")
    rows = {r["rank"]: r for r in embedded(page)["grids"]["ranks"]["rows"]}
    assert set(rows) == {0, 1}
    straggler = load_trace(RANKS).insights().straggler  # type: ignore[union-attr]
    assert straggler == 1  # the corpus's planted straggler
    assert "Straggler: rank 1" in text_of(page, "distributed")
    # A CPU run recorded before the header named the captured modes: Neuron's modes are not its settings.
    assert "modes" not in settings_of(page)
    # Its record_function ranges are host time between ops: the note does not call all of it idle.
    said = text_of(page, "overview")
    assert "no Python frames were recorded" in said and "counted as idle:" not in said
    # Rank 1 computes longer; rank 0 waits for it in the all-reduce.
    assert rows[1]["compute_us"] > rows[0]["compute_us"]
    assert rows[0]["waiting_us"] > rows[1]["waiting_us"] == 0
    for r in rows.values():
        parts = r["compute_us"] + r["communication_us"] + r["waiting_us"] + r["idle_us"]
        assert parts == pytest.approx(r["step_us"], rel=1e-6)
    # Each rank's steps in the overview, named by rank.
    assert {name.split(" · ")[0] for name in overview(page)} == {"rank 0", "rank 1"}


def _run(tmp_path: Path, name: str, size: int) -> Path:
    x, w = torch.randn(size, size), torch.randn(size, size)
    with neuronprof.session(wait=0, warmup=1, active=4, output_dir=tmp_path / name) as s:
        for _ in s.steps():
            (x @ w).relu().sum()
    return s.export(tmp_path / f"{name}.json")


def test_two_runs_show_the_overview_side_by_side_and_the_op_verdicts(tmp_path: Path, capsys) -> None:
    a, b = _run(tmp_path, "a", 16), _run(tmp_path, "b", 96)
    target = tmp_path / "two.html"
    assert analysis_main(["report", str(a), str(b), "-o", str(target)]) == 0
    page = target.read_text(encoding="utf-8")
    no_external_reference(page)
    text = text_of(page, "two-runs")
    assert "verdict" in text  # neuronprof diff's verdict on the step time (or why there is none)
    table = re.search(r'<table id="two-runs-overview".*?</table>', page, re.S)
    assert table
    rows = {
        html.unescape(label): [float(v.replace(",", "").replace("+", "")) for v in (va, vb, vd)]
        for label, va, vb, vd in re.findall(
            r'<td class="left name">(.*?)</td><td>([\d,.]+)</td><td>([\d,.]+)</td><td>([-+\d,.]+)</td>',
            table.group(0),
        )
    }
    # The mean step of each run, as each recording holds it; B's the run reported (the larger matmul).
    mean = {p: sum(s.wall_us for s in load_trace(p).samples) / len(load_trace(p).samples) for p in (a, b)}
    assert rows["step time"][0] == pytest.approx(mean[a], abs=0.06)
    assert rows["step time"][1] == pytest.approx(mean[b], abs=0.06)
    assert rows["step time"][2] == pytest.approx(mean[b] - mean[a], abs=0.1)
    assert set(rows) >= {"host compute in ops", "idle"}
    assert 'id="two-runs-table"' in page  # the ops' changes with their verdicts
    # The same page as --baseline; both at once is refused before any work.
    assert analysis_main(["report", str(b), "--baseline", str(a), "-o", str(tmp_path / "same.html")]) == 0
    assert analysis_main(["report", str(a), str(b), "--baseline", str(a), "-o", str(tmp_path / "x.html")]) == 2
    assert "give the baseline once" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()


@pytest.mark.slow
def test_a_huge_recording_makes_a_bounded_page_that_says_what_it_left_out() -> None:
    """Events far beyond what is drawn (steps, kernels, nested calls): every bounded part stays bounded."""
    from neuronprof.analysis.insights import DeviceEvent
    from neuronprof.report import MAX_CHART_STEPS, MAX_TIMELINE_EVENTS

    steps, per_step = MAX_CHART_STEPS + 100, 60
    host: list[HostEvent] = []
    device: list[DeviceEvent] = []
    for i in range(steps):
        t0 = i * 100_000
        host.append(HostEvent(f"ProfilerStep#{i}", t0, t0 + 90_000, category="step"))
        for j in range(per_step):
            s = t0 + 1000 * j
            host.append(HostEvent(f"aten::op{j % 20}", s, s + 900, ext_id=i * per_step + j))
            host.append(HostEvent(f"aten::inner{j % 30}", s + 100, s + 800))
            device.append(DeviceEvent(f"kernel_{(i * per_step + j) % 400}", s + 200, s + 700, ext_id=i * per_step + j))
    table = Table(())
    page = render_report(table, timeline=Timeline(tuple(host), tuple(device), "cuda", "CUDA"))
    size = len(page.encode())
    assert size < 3_000_000, size  # 72 600 events in, a few MB out at most
    data = embedded(page)
    assert len(data["timeline"]["events"]) <= MAX_TIMELINE_EVENTS and data["timeline"]["dropped"] > 0
    assert len(data["grids"]["kernels"]["rows"]) == 50
    assert "the 50 heaviest of 400 kernel names are listed" in text_of(page, "kernels")
    assert page.count('data-us="') == MAX_CHART_STEPS
    assert f"the first {MAX_CHART_STEPS} of {steps} steps" in text_of(page, "overview")
    assert "the first 200 of" in text_of(page, "overview")


def settings_of(page: str) -> dict[str, str]:
    """The settings list of a page, label → value."""
    m = re.search(r"<dl[^>]*>(.*?)</dl>", page, re.S)
    assert m, "no settings"
    return {html.unescape(k): html.unescape(v) for k, v in re.findall(r"<dt>(.*?)</dt>\s*<dd>(.*?)</dd>", m.group(1))}


def test_the_session_report_and_the_report_of_its_export_show_the_same_settings(tmp_path: Path) -> None:
    model = torch.nn.Linear(8, 8)
    with neuronprof.session(output_dir=tmp_path, wait=0, warmup=1, active=1, profile_memory=True) as s:
        for _ in s.steps():
            model(torch.ones(4, 8))
    live = settings_of(s.report(tmp_path / "live.html").read_text())
    trace = s.export(tmp_path / "run.pt.trace.json")
    assert analysis_main(["report", str(trace), "-o", str(tmp_path / "file.html")]) == 0
    offline = settings_of((tmp_path / "file.html").read_text())
    assert {k: v for k, v in offline.items() if k in live} == live
    assert set(offline) - set(live) == {"trace", "steps", "report made with neuronprof"}
    assert "profile_memory=True" in live["options"] and "record_shapes=False" in live["options"]
    assert {"python (recording)", "platform (recording)", "started", "torch"} <= set(live)
    assert "modes" not in live  # Neuron's capture modes mean nothing to a CPU run


@pytest.mark.parametrize("count", [MAX_FINDINGS - 1, MAX_FINDINGS, MAX_FINDINGS + 1, 3 * MAX_FINDINGS])
def test_the_findings_pane_lists_a_bounded_number_and_counts_every_finding(count: int) -> None:
    """Thousands of findings would make a page of tens of MB: the first ones are listed, all are counted."""
    from neuronprof.analysis.insights import Evidence, Finding, Insights

    found = Insights(
        tuple(
            Finding("unfused_chain", f"chain {i}", Evidence((f"aten::op{i}",), 1.0, float(i + 1), 0.01), i + 1.0, "s")
            for i in range(count)
        ),
        steps=1,
        step_us=10_000.0,
    )
    page = render_report(Table(()), insights=found)
    listed = re.findall(r"<strong>chain (\d+)</strong>", page)
    assert len(listed) == min(count, MAX_FINDINGS)
    assert listed == [str(count - 1 - i) for i in range(len(listed))]  # the most time at stake first
    said = text_of(page, "findings")
    assert f"{count} finding(s)" in said
    assert (f"the first {MAX_FINDINGS} of {count} findings are listed here" in said) == (count > MAX_FINDINGS)


def test_tpu_kernel_rows_are_listed_and_said_to_be_unlinked(tmp_path: Path) -> None:
    """The TorchTPU stand-in (its kernel rows and times are the stand-in's, not a TPU's): rows with no launcher."""
    script = """
import os, torch, neuronprof
with neuronprof.session(backend="tpu", wait=0, warmup=1, active=2, output_dir=os.getcwd()) as s:
    for _ in s.steps():
        (torch.ones(16, 16) @ torch.ones(16, 16)).relu()
report(str(s.report("tpu.html").resolve()))
"""
    proc = run_script(script, backend="tpu", cwd=tmp_path)
    if unavailable_reason(proc) is not None:
        pytest.skip(unavailable_reason(proc) or "")
    assert proc.returncode == 0, proc.stderr
    page = Path(result(proc)).read_text(encoding="utf-8")
    rows = embedded(page)["grids"]["kernels"]["rows"]
    assert rows and all(r["launched_by"] is None for r in rows)
    assert "aten::mm" in " ".join(r["name"] for r in rows)
    text = text_of(page, "kernels")
    assert text.strip().startswith("Kernels / device (TPU)")
    assert "TPU kernel rows are not linked to the ops that launched them" in text
    assert "TPU busy per step" in text


def test_neuron_profile_adds_neff_rows_and_the_engine_breakdown(tmp_path: Path) -> None:
    """Neuron's own profile in AWS's documented formats (test inputs, not output captured on Trainium)."""
    import json

    sys.path.insert(0, str(Path(__file__).resolve().parent / "analysis"))
    from neuron_builders import BASE_NS, exec_record, framework_trace, summary_metrics, write_system_profile

    s1, s2 = BASE_NS, BASE_NS + 100_000
    folder = tmp_path / "neuron" / "host_pid_100" / "20260101_000000"
    records = [
        exec_record(s1 + 10_000, 20_000, exec_id=1),
        exec_record(s1 + 50_000, 10_000, exec_id=2, neff="neff_b", model_id=8),
        exec_record(s2 + 10_000, 20_000, exec_id=3),
    ]
    write_system_profile(folder / "system_profile.json", records)
    (folder / "neuron_summary.json").write_text(json.dumps({"n_" + "a" * 40: summary_metrics(2e-3)}))
    trace = framework_trace(folder / "trace.json", [(1, s1, s1 + 100_000), (2, s2, s2 + 100_000)])
    target = tmp_path / "neuron.html"
    assert analysis_main(["report", str(trace), "--neuron-profile", str(tmp_path / "neuron"), "-o", str(target)]) == 0
    page = target.read_text(encoding="utf-8")
    grids = embedded(page)["grids"]
    neffs = {r["name"]: r for r in grids["neffs"]["rows"]}
    assert neffs["neff_a"]["calls"] == 2 and neffs["neff_a"]["device_us"] == pytest.approx(40.0)
    assert neffs["neff_b"]["calls"] == 1 and neffs["neff_b"]["device_us"] == pytest.approx(10.0)
    engines = {r["engine"]: r for r in grids["engines"]["rows"]}
    assert {"tensor", "vector", "scalar", "gpsimd", "dma"} <= set(engines)
    assert engines["tensor"]["active_us"] == pytest.approx(1000.0) and engines["tensor"]["share_pct"] == 50.0
    text = text_of(page, "kernels")
    assert "NEFF executions (Neuron's own profile)" in text and "Engine breakdown" in text
    assert "read from Neuron's own profile" in text


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 9_000), st.integers(1, 3_000), st.sampled_from(["op", "runtime", "python"]))),
    st.lists(st.tuples(st.integers(0, 9_000), st.integers(1, 3_000), st.sampled_from(["kernel", "memcpy"]))),
)
def test_the_breakdown_counts_each_instant_once(
    host_spans: list[tuple[int, int, str]], dev_spans: list[tuple[int, int, str]]
) -> None:
    """Categories add up to the step; the first category takes exactly what its spans cover inside the step."""
    from neuronprof.analysis.insights import DeviceEvent

    step = HostEvent("ProfilerStep#1", 1_000, 8_000, category="step")
    host = (step, *(HostEvent(f"h{i}", s, s + d, category=c) for i, (s, d, c) in enumerate(host_spans)))  # type: ignore[arg-type]
    device = tuple(DeviceEvent(f"k{i}", s, s + d, c) for i, (s, d, c) in enumerate(dev_spans))  # type: ignore[arg-type]
    page = render_report(Table(()), timeline=Timeline(host, device, "cuda", "CUDA"))
    ((us, parts),) = overview(page).values()
    assert us == 7.0
    assert sum(parts) == pytest.approx(us, abs=0.1 * len(parts))  # shown to 0.1 µs
    kernels = sorted((max(s, 1_000), min(s + d, 8_000)) for s, d, c in dev_spans if c == "kernel")
    covered, end = 0, 1_000
    for s, e in kernels:
        if e > max(s, end):
            covered += e - max(s, end)
            end = e
    assert parts[0] == pytest.approx(covered / 1000, abs=0.0501)  # shown to 0.1 µs: off by half of it at most


def _busy_rows(page: str) -> dict[str, tuple[float, float]]:
    """The kernels pane's busy-per-step rows: step name -> (step µs, busy µs)."""
    rows = re.findall(
        r'<tr><td class="left name">([^<]*)</td><td>([\d,.]+)</td><td>([\d,.]+)</td>', _kernels_html(page)
    )
    return {html.unescape(n): (float(a.replace(",", "")), float(b.replace(",", ""))) for n, a, b in rows}


def _kernels_html(page: str) -> str:
    """The kernels pane's HTML."""
    m = re.search(r'<section id="kernels">(.*?)</section>', page, re.S)
    assert m, "no kernels pane"
    return m.group(1)


def test_overview_findings_and_kernels_pane_read_the_same_steps(tmp_path: Path) -> None:
    # 5 ms kernels (the plugin's times, run back to back), queued far faster than the device runs them: the
    # device works on past each step's end however slow the host is (a busy machine's host steps too).
    script = """
import os, torch, neuronprof, testbackend
testbackend.set_kernel_ns(5_000_000)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
x, w = torch.randn(32, 64), torch.randn(64)
with neuronprof.session(backend="neuron", wait=0, warmup=1, active=3, output_dir=os.getcwd(), profile_memory=True) as s:
    for _ in s.steps():
        y = model(x)
        (x * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6) * w).sum()
report({"trace": str(s.export("trace.json").resolve())})
"""
    proc = run_script(script, backend="neuron", env={"NEURONPROF_STANDIN_NEURON_BUILD": "correlating"}, cwd=tmp_path)
    if unavailable_reason(proc) is not None:
        pytest.skip(unavailable_reason(proc) or "")
    assert proc.returncode == 0, proc.stderr
    trace = result(proc)["trace"]
    tl = load_trace(trace).timeline()
    host_ends = {e.name: e.end_ns for e in tl.host if e.category == "step"}
    assert max(d.end_ns for d in tl.device) > max(host_ends.values())  # the case this test is about
    assert analysis_main(["report", trace, "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    found = load_trace(trace).insights()
    steps = overview(page)
    assert len(steps) == found.steps == 3  # type: ignore[union-attr]
    mean_step = sum(us for us, _ in steps.values()) / 3
    mean_device = sum(dict(zip(CATEGORIES, parts))["device"] for _, parts in steps.values()) / 3
    assert mean_step == pytest.approx(found.step_us, abs=0.05)  # type: ignore[union-attr]  # shown to 0.1 µs
    assert mean_device == pytest.approx(found.device_busy_us, abs=0.05)  # type: ignore[union-attr]
    header = text_of(page, "findings")
    assert found._header() in header  # type: ignore[union-attr]  # the page's findings say the figures above
    busy = _busy_rows(page)
    assert set(busy) == set(steps)
    for name, (us, busy_us) in busy.items():
        assert us == pytest.approx(steps[name][0], abs=0.11)
        assert busy_us == pytest.approx(dict(zip(CATEGORIES, steps[name][1]))["device"], abs=0.11)
    assert "device ran on past the end torch.profiler recorded" in text_of(page, "overview")
    # The test backend records no device memory: no column of zeros, and the pane says why.
    headers = [c["header"] for c in embedded(page)["grids"]["memory"]["columns"]]
    assert "Self CPU memory (B)" in headers and "Self NEURON memory (B)" not in headers
    assert "so the Self NEURON memory column is left out" in text_of(page, "memory")


def runtime_files_without_the_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Neuron Runtime's files of one capture under ``tmp_path``, and no neuron-explorer to read them."""
    capture = tmp_path / "neuron_profile" / "i-0_pid_1" / "20260101_000000"
    capture.mkdir(parents=True)
    for name in ("profile_nc_0_session_0.ntff", "ntrace.pb", "trace_info.pb"):
        (capture / name).write_bytes(b"t")
    monkeypatch.setenv("NEURONPROF_NEURON_EXPLORER", str(tmp_path / "no-such-tool"))
    return tmp_path / "neuron_profile"


def test_kernels_pane_says_neuron_explorer_is_missing_not_that_the_profile_is_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Neuron Runtime's files only: reading them needs neuron-explorer, which is not there.
    runtime_files_without_the_tool(tmp_path, monkeypatch)
    trace = Path(__file__).resolve().parent / "corpus" / "traces" / "planted_float64.json.gz"
    target = tmp_path / "r.html"
    with pytest.warns(neuronprof.NeuronProfWarning, match="aws-neuronx-tools"):
        code = analysis_main(
            ["report", str(trace), "--neuron-profile", str(tmp_path / "neuron_profile"), "-o", str(target)]
        )
    assert code == 0
    text = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", _kernels_html(target.read_text("utf-8")))))
    assert "No NEFF execution was read: neuron-explorer, which reads Neuron's profile, was not found" in text
    assert "no engine breakdown: neuron-explorer" in text
    assert "holds no NEFF execution" not in text and "holds no device profile" not in text
    assert "aws-neuronx-tools" in text and text.count("is not an executable neuron-explorer") == 1  # said once


def test_top_findings_of_a_rank_folder_are_the_most_time_at_stake_across_ranks(tmp_path: Path) -> None:
    target = tmp_path / "ranks.html"
    assert analysis_main(["report", str(RANKS), "-o", str(target)]) == 0
    page = target.read_text(encoding="utf-8")
    top = re.search(r'<ol class="findings" id="top-findings">(.*?)</ol>', page, re.S)
    assert top
    shown = [html.unescape(t) for t in re.findall(r"<strong>(.*?)</strong>", top.group(1))]
    found = load_trace(RANKS).insights()
    every = [(f.estimated_us, f"rank {r}: {f.title}") for r, one in enumerate(found.ranks) for f in one.findings]  # type: ignore[union-attr]
    stakes = {title: us for us, title in every}
    assert len(shown) == 3
    estimated = sorted((us for us, _ in every if us is not None), reverse=True)
    # Largest first, those not estimated last, whichever rank they belong to.
    want = estimated[:3] + [None] * (3 - len(estimated[:3]))
    assert [stakes[t] for t in shown] == want
    assert not all(t.startswith(f"rank {found.straggler}:") for t in shown)  # type: ignore[union-attr]


def test_a_cpu_run_says_it_has_no_device_and_a_bare_trace_says_what_it_cannot_tell(tmp_path: Path) -> None:
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    with neuronprof.session(wait=0, warmup=1, active=2, output_dir=tmp_path) as s:
        for _ in s.steps():
            (x @ w).relu()
    exported = s.export(tmp_path / "cpu.json")
    assert analysis_main(["report", str(exported), "-o", str(tmp_path / "off.html")]) == 0
    for page in (s.report(tmp_path / "live.html").read_text("utf-8"), (tmp_path / "off.html").read_text("utf-8")):
        kernels = text_of(page, "kernels")
        assert kernels.strip().startswith("Kernels / device (CPU run: no device)")
        assert "a CPU run: there is no device" in kernels and "device build" not in kernels
        assert "a CPU run has no device" in text_of(page, "overview")
        # The device-rows filter has nothing to show, and says so.
        box = re.search(r"<label[^>]*><input id=\"op-device-only\"[^>]*>[^<]*</label>", page)
        assert box and "disabled" in box.group(0) and "(none in this run)" in box.group(0)
    # A plain torch.profiler trace names no backend: without device work it may be a CPU run or a device build.
    with torch.profiler.profile() as prof:
        (x @ w).relu()
    prof.export_chrome_trace(str(tmp_path / "plain.json"))
    assert analysis_main(["report", str(tmp_path / "plain.json"), "-o", str(tmp_path / "plain.html")]) == 0
    kernels = text_of((tmp_path / "plain.html").read_text("utf-8"), "kernels")
    assert "a CPU run, or a device build that does not report its kernels" in kernels
    assert kernels.strip().startswith("Kernels / device ") and "(CPU run" not in kernels


def test_distributed_pane_names_its_busy_column_apart_from_the_straggler_rules_compute(tmp_path: Path) -> None:
    target = tmp_path / "ranks.html"
    assert analysis_main(["report", str(RANKS), "-o", str(target)]) == 0
    page = target.read_text(encoding="utf-8")
    headers = [c["header"] for c in embedded(page)["grids"]["ranks"]["columns"]]
    assert "Busy outside collectives (µs)" in headers and not any(h.startswith("Compute") for h in headers)
    found = load_trace(RANKS).insights()
    text = html.unescape(text_of(page, "distributed"))
    # The rule's own figure per rank, as the findings give it, and what it counts.
    for r, us in enumerate(found.compute_per_step_us):  # type: ignore[union-attr]
        assert f"rank {r}: {us:,.1f} µs" in text
    assert "step time less the time in collectives, idle included" in text
    assert "none is named when no rank stands out so" not in text


def test_the_command_line_prints_a_warning_as_one_plain_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime_files_without_the_tool(tmp_path, monkeypatch)

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))  # as Python's default does

    trace = Path(__file__).resolve().parent / "corpus" / "traces" / "planted_float64.json.gz"
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        monkeypatch.setattr(warnings, "showwarning", show)
        args = [
            "report",
            str(trace),
            "--neuron-profile",
            str(tmp_path / "neuron_profile"),
            "-o",
            str(tmp_path / "r.html"),
        ]
        assert analysis_main(args) == 0
        err = capsys.readouterr().err
        (line,) = [x for x in err.splitlines() if "neuron-explorer" in x]
        assert line.startswith("neuronprof: warning: ") and "aws-neuronx-tools" in line
        assert "NeuronProfWarning" not in err and ".py:" not in err
        # Outside the command, Python's own format is back.
        warnings.warn("outside", neuronprof.NeuronProfWarning, stacklevel=1)
        assert "NeuronProfWarning: outside" in capsys.readouterr().err


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 60), st.integers(0, 3)), max_size=60),
    st.lists(st.tuples(st.integers(0, 400), st.integers(-20, 120)), min_size=1, max_size=12),
)
def test_each_instant_of_a_window_goes_to_the_first_owner_over_it_in_windows_that_may_overlap(
    events: list[tuple[int, int, int]], windows: list[tuple[int, int]]
) -> None:
    # What the union of owners 0..k covers less what the union of 0..k-1 covers, window by window
    # (one that ends before it starts has no instant: it takes nothing).
    from neuronprof import _report_overview

    starts = np.array([s for s, _, _ in events], np.int64)
    ends = np.array([s + d for s, d, _ in events], np.int64)
    owners = np.array([k for _, _, k in events], np.int8)
    steps = sorted((f"step {i}", lo, lo + d) for i, (lo, d) in enumerate(windows))
    expected = []  # instant by instant: the lowest owner (below 3) with a span over it
    for _, lo, hi in steps:
        row = [0, 0, 0]
        for t in range(lo, hi):
            over = [k for s, d, k in events if s <= t < s + d and k < 3]
            if over:
                row[min(over)] += 1
        expected.append(row)
    assert _report_overview.first_owner_ns(starts, ends, owners, steps, 3) == expected


def test_each_steps_bar_is_escaped_and_its_widths_are_the_categories_shares() -> None:
    # The bar of a breakdown names each category by the backend's label, as the page escapes any text.
    from neuronprof.analysis.insights import DeviceEvent

    host = (HostEvent("ProfilerStep#1", 0, 10_000, category="step"), HostEvent("aten::mm", 0, 4_000))
    device = (DeviceEvent("gemm", 5_000, 7_500, "kernel"),)
    page = render_report(Table(()), timeline=Timeline(host, device, "cuda", 'A<&"B'))
    bars = re.findall(r'<div class="stack" role="img" aria-label="([^"]*)">\n(.*?)</div>', page)
    assert bars, "no breakdown bar"
    for label, spans in bars:
        assert "A&lt;&amp;&#34;B compute 2.5 µs" in label and "<" not in label
        widths = {
            k: float(w) for w, k in re.findall(r'<span style="width:([\d.]+)%;background:var\(--c-(\w+)\)"', spans)
        }
        # Of the 10 µs step: 2.5 on the device, 4 in an op, the rest idle; a category without time has no span.
        assert widths == {"device": 25.0, "host_ops": 40.0, "idle": 35.0}
        assert re.findall(r'title="([^"]*)"', spans)[0] == "A&lt;&amp;&#34;B compute: 2.5 µs"
