"""The HTML report: ``s.report()``, ``cmp.report()`` and ``neuronprof report``, through the public API.

What a browser makes of the page (no console error, no request, sorting, the
screenshot) is tested in ``test_report_browser.py``; here the page's content and
the data embedded in it are checked without a browser.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import neuronprof
from neuronprof.analysis.insights import DeviceEvent, HostEvent, Timeline
from neuronprof.cli import main as analysis_main
from neuronprof.errors import SessionStateError
from neuronprof.model import OpRow, Table
from neuronprof.report import MAX_TIMELINE_EVENTS, REPORT_SCHEMA, render_report


def embedded(page: str) -> dict[str, Any]:
    """The JSON the page's script reads."""
    m = re.search(r'<script type="application/json" id="neuronprof-data">(.*?)</script>', page, re.S)
    assert m, "no embedded data"
    data: dict[str, Any] = json.loads(m.group(1))
    assert data["schema"] == REPORT_SCHEMA
    return data


def no_external_reference(page: str) -> None:
    """Nothing the page loads (a src or <link> href, CSS url(), @import) points outside the file.

    A hyperlink (``<a href>``: the findings' guide sections) is followed only when clicked.
    """
    loaded = re.sub(r"<a\s[^>]*>", "", page)
    for attr in re.findall(r'\b(?:src|href)\s*=\s*"([^"]*)"', loaded):
        assert attr.startswith(("data:", "#")), attr
    assert "@import" not in page
    for url in re.findall(r"url\(([^)]*)\)", page):
        assert url.strip("'\"").startswith("data:"), url


def workload(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x @ w).relu().sum() * 2


@pytest.fixture(scope="module")
def cpu_session(tmp_path_factory: pytest.TempPathFactory) -> neuronprof.Session:
    out = tmp_path_factory.mktemp("report")
    x, w = torch.randn(32, 32), torch.randn(32, 32)
    with neuronprof.session(wait=0, warmup=1, active=2, output_dir=out) as s:
        for _ in s.steps():
            workload(x, w)
    return s


def test_session_report_holds_settings_table_findings_and_timeline(cpu_session: neuronprof.Session) -> None:
    path = cpu_session.report()
    assert path.parent == cpu_session.output_dir and path.suffix == ".html"
    page = path.read_text(encoding="utf-8")
    no_external_reference(page)
    for section in ('id="settings"', 'id="findings"', 'id="ops"', 'id="timeline"'):
        assert section in page
    assert f"<dd>{torch.__version__}</dd>" in page
    assert f"<dd>{neuronprof.__version__}</dd>" in page
    assert "wait=0, warmup=1, active=2, repeat=1" in page
    data = embedded(page)
    table = cpu_session.table()
    assert {r["name"] for r in data["table"]["rows"]} == set(table.names())
    assert [c["key"] for c in data["table"]["columns"]][:5] == ["name", "where", "calls", "self_cpu_us", "cpu_total_us"]
    tl = data["timeline"]
    assert [s[0] for s in tl["steps"]] == ["ProfilerStep#1", "ProfilerStep#2"]
    drawn = {tl["names"][e[3]] for e in tl["events"]}
    assert {"aten::matmul", "aten::relu", "aten::sum", "aten::mul"} <= drawn
    for kind in cpu_session.insights().kinds():
        assert f'<span class="kind">{kind}</span>' in page
    # A few tens of KB for a small step: far under the "few hundred KB" budget.
    assert len(page.encode()) < 300_000


def test_session_report_refuses_to_overwrite_and_before_the_block_ends(
    cpu_session: neuronprof.Session, tmp_path: Path
) -> None:
    target = cpu_session.report(tmp_path / "sub" / "r.html")
    assert target.exists()
    with pytest.raises(FileExistsError):
        cpu_session.report(target)
    assert cpu_session.report(target, overwrite=True) == target
    s = neuronprof.session(wait=0, warmup=0, active=1, output_dir=tmp_path)
    with pytest.raises(SessionStateError, match="report"):
        s.report(tmp_path / "early.html")
    assert not (tmp_path / "early.html").exists()


def test_report_command_reads_an_exported_trace(cpu_session: neuronprof.Session, tmp_path: Path, capsys) -> None:
    trace = cpu_session.export(tmp_path / "run.json.gz")
    assert analysis_main(["report", str(trace)]) == 0
    default = tmp_path / "run.html"
    page = default.read_text(encoding="utf-8")
    no_external_reference(page)
    data = embedded(page)
    assert {r["name"] for r in data["table"]["rows"]} == set(cpu_session.table().names())
    # What the session wrote into the trace comes back as settings.
    assert f"<dd>{torch.__version__}</dd>" in page
    assert "wait=0, warmup=1, active=2, repeat=1" in page
    assert [s[0] for s in data["timeline"]["steps"]] == ["ProfilerStep#1", "ProfilerStep#2"]
    # An existing output is an error (exit 2, one line), unless --overwrite.
    assert analysis_main(["report", str(trace), "-o", str(default)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert analysis_main(["report", str(trace), "-o", str(default), "--overwrite"]) == 0
    assert analysis_main(["report", str(tmp_path / "missing.json"), "-o", str(tmp_path / "m.html")]) == 2
    assert not (tmp_path / "m.html").exists()


def test_report_command_never_imports_torch(cpu_session: neuronprof.Session, tmp_path: Path) -> None:
    trace = cpu_session.export(tmp_path / "t.json")
    code = f"""
import sys
class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked")
sys.meta_path.insert(0, _NoTorch())
from neuronprof.cli import main
assert main(["report", {str(trace)!r}, "-o", {str(tmp_path / "t.html")!r}]) == 0
assert "torch" not in sys.modules
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "t.html").stat().st_size > 0


@pytest.mark.slow
def test_comparison_report_has_the_table_the_chart_and_each_variant(tmp_path: Path) -> None:
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    cmp = neuronprof.compare(
        {"matmul+relu": lambda: (x @ w).relu(), "relu(matmul)": lambda: torch.relu(x @ w)},
        repeats=1,
        quiet=True,
        output_dir=tmp_path,
    )
    page = cmp.report(tmp_path / "cmp.html").read_text(encoding="utf-8")
    no_external_reference(page)
    assert 'id="cmp-table"' in page and 'id="cmp-chart"' in page
    assert page.count("<rect") == 2  # one bar per variant
    for name in cmp.names():
        assert f"Variant {name}" in page
    data = embedded(page)
    assert [v["name"] for v in data["variants"]] == cmp.names()
    assert all(v["table"]["rows"] for v in data["variants"])
    with pytest.raises(FileExistsError):
        cmp.report(tmp_path / "cmp.html")


@pytest.mark.parametrize("msgspec", ["installed", "missing"])
def test_names_cannot_break_out_of_the_page(msgspec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if msgspec == "missing":  # the stdlib writes the page's data
        monkeypatch.setitem(sys.modules, "msgspec", None)
    evil = "</script><script>alert(1)</script><b>&"
    table = Table((OpRow(evil, 1, 1.0, 1.0), OpRow("aten::huge", 1, float("inf"), float("inf"))))
    timeline = Timeline((HostEvent(evil, 0, 1000),))
    page = render_report(table, timeline=timeline, settings={"backend": evil})
    assert evil not in page
    assert page.count("<script") == 2  # the data block and the page's own script
    rows = embedded(page)["table"]["rows"]
    assert rows[0]["name"] == evil
    # Strict JSON has no NaN or Infinity: written as null, as JavaScript's JSON.stringify writes them.
    assert (rows[1]["self_cpu_us"], rows[1]["cpu_total_us"]) == (None, None)
    # A name that is not valid Unicode (a lone surrogate, as a trace's JSON escape may give) is kept as it is.
    assert embedded(render_report(Table((OpRow("\ud800", 1, 1.0, 1.0),))))["table"]["rows"][0]["name"] == "\ud800"


def test_device_events_get_their_own_lanes() -> None:
    host = (
        HostEvent("ProfilerStep#1", 0, 10_000, category="step"),
        HostEvent("aten::mm", 1_000, 3_000),
        HostEvent("aten::add", 4_000, 5_000),
    )
    # Two overlapping kernels (two streams) need two lanes; the third reuses the first.
    device = (
        DeviceEvent("mm_kernel", 2_000, 6_000),
        DeviceEvent("add_kernel", 3_000, 7_000),
        DeviceEvent("copy", 6_500, 8_000, "memcpy"),
    )
    table = Table((OpRow("aten::mm", 1, 2.0, 2.0, 4.0, 4.0),), backend="neuron", device_label="NEURON")
    data = embedded(render_report(table, timeline=Timeline(host, device, "neuron", "NEURON")))
    tl = data["timeline"]
    lanes = [lane["name"] for lane in tl["lanes"]]
    assert lanes == ["steps", "host thread 0 · depth 0", "NEURON · lane 0", "NEURON · lane 1"]
    by_name = {tl["names"][e[3]]: e for e in tl["events"]}
    assert by_name["mm_kernel"][0] == by_name["copy"][0] == 2
    assert by_name["add_kernel"][0] == 3
    assert by_name["mm_kernel"][1:3] == [2.0, 4.0]  # µs from the first event, duration in µs
    assert [c["header"] for c in data["table"]["columns"]][6:9] == [
        "Self NEURON (µs)",
        "NEURON total (µs)",
        "Self NEURON (%)",
    ]


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5_000), st.integers(1, 2_000), st.sampled_from(["0", "1"])), min_size=0, max_size=60
    ),
    st.lists(st.tuples(st.integers(0, 5_000), st.integers(1, 2_000)), max_size=30),
)
def test_timeline_keeps_every_event_or_counts_it_as_dropped(
    host_spans: list[tuple[int, int, str]], dev_spans: list[tuple[int, int]]
) -> None:
    host = tuple(HostEvent(f"op{i}", s, s + d, thread=t) for i, (s, d, t) in enumerate(host_spans))
    device = tuple(DeviceEvent(f"k{i}", s, s + d) for i, (s, d) in enumerate(dev_spans))
    tl = embedded(render_report(Table(()), timeline=Timeline(host, device, "x", "X")))["timeline"]
    assert len(tl["events"]) + tl["dropped"] == len(host) + len(device)
    # Nested host calls go one lane down and overlapping kernels to another lane: no lane has overlaps.
    per_lane: dict[int, list[tuple[float, float]]] = {}
    for lane, start, dur, _, _ in tl["events"]:
        per_lane.setdefault(lane, []).append((start, start + dur))
    for spans in per_lane.values():
        spans.sort()
        for (s1, e1), (s2, _) in zip(spans, spans[1:]):
            assert s2 >= e1 - 1e-6, (s1, e1, s2)


@pytest.mark.slow
def test_a_huge_timeline_is_capped_and_says_so() -> None:
    n = MAX_TIMELINE_EVENTS + 500
    host = tuple(HostEvent("aten::add", i * 10, i * 10 + 5) for i in range(n))
    page = render_report(Table(()), timeline=Timeline(host))
    tl = embedded(page)["timeline"]
    assert len(tl["events"]) <= MAX_TIMELINE_EVENTS and tl["dropped"] >= 500
    assert len(page.encode()) < 1_000_000


@pytest.mark.parametrize("record_shapes", [True, False])
def test_the_session_report_and_the_report_of_its_export_hold_the_same_table(
    tmp_path: Path, record_shapes: bool
) -> None:
    x, w = torch.randn(32, 64), torch.randn(64, 64)
    with neuronprof.session(
        backend="cpu", wait=0, warmup=1, active=2, record_shapes=record_shapes, output_dir=tmp_path
    ) as s:
        for i in s.steps():
            workload(x[: 8 + 8 * (i % 2)], w)  # two input shapes of the same ops
    live = embedded(s.report(tmp_path / "live.html").read_text(encoding="utf-8"))["table"]
    trace = s.export(tmp_path / "run.json")
    assert analysis_main(["report", str(trace), "-o", str(tmp_path / "offline.html")]) == 0
    offline = embedded((tmp_path / "offline.html").read_text(encoding="utf-8"))["table"]
    assert offline["rows"] == live["rows"]
    names = [r["name"] for r in live["rows"]]
    assert (len(names) > len(set(names))) is record_shapes  # by shape: one op name on several rows


def test_a_page_is_the_same_with_its_compiled_template_cached_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    # Jinja's bytecode cache keeps the compiled template in a private temporary folder; where none can be
    # had, the template is compiled each time and the page is the same.
    import jinja2

    host = (HostEvent("ProfilerStep#1", 0, 10_000, category="step"), HostEvent("aten::mm", 100, 9_000))
    timeline = Timeline(host, (DeviceEvent("gemm", 200, 8_000),), "cuda", "CUDA")
    cached = render_report(Table(()), timeline=timeline)

    def refused(*_: Any, **__: Any) -> Any:
        raise RuntimeError("no private temporary folder")

    monkeypatch.setattr(jinja2, "FileSystemBytecodeCache", refused)
    assert render_report(Table(()), timeline=timeline) == cached


def test_the_host_is_named_without_a_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import platform
    import subprocess

    from neuronprof.report import environment

    if sys.platform != "linux":
        pytest.skip("elsewhere the host is named by platform.platform, whatever it runs")

    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a subprocess was started")

    monkeypatch.setattr(subprocess, "Popen", refused)
    monkeypatch.setattr(platform, "_platform_cache", {})  # platform.platform's own, filled by earlier calls
    monkeypatch.setattr(platform, "_uname_cache", None)
    named = environment()["platform"]
    u = os.uname()
    assert named.startswith(f"{u.sysname}-{u.release}-{u.machine}")
    libc = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names else None
    if libc:
        assert named.endswith("-with-" + libc.replace(" ", ""))
