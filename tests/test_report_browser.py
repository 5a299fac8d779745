"""The HTML report in a real browser: headless Chromium loads it offline, sorts, filters, zooms, draws.

Needs the system's Chromium (Debian: ``apt-get install chromium``; CI installs it)
and the ``playwright`` Python package (the ``dev`` extra), which drives that
Chromium; no browser is downloaded. Without either the tests are skipped with the
reason. Set ``NEURONPROF_CHROMIUM`` to use another Chromium binary.

The device report comes from a session on the PrivateUse1 test backend (the
``torch_neuronx`` stand-in): its kernel times are the test plugin's, not a Trainium's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

import neuronprof
from neuronprof.cli import main as analysis_main

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

from run_in_subprocess import result, run_script, unavailable_reason  # noqa: E402

CHROMIUM = os.environ.get("NEURONPROF_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("Chromium is not installed (Debian: apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
# Every test here drives a headless browser (started once, seconds): none is quick.
pytestmark = pytest.mark.slow

FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

_DEVICE_SCRIPT = """
import os, torch, neuronprof, testbackend
out = os.environ["REPORT_OUT"]
testbackend.set_kernel_ns(200_000)
x, w = torch.randn(32, 64), torch.randn(64)
with neuronprof.session(backend="neuron", wait=0, warmup=1, active=2, output_dir=out) as s:
    for _ in s.steps():
        x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
report({"live": str(s.report(os.path.join(out, "live.html"))),
        "trace": str(s.export(os.path.join(out, "trace.json")))})
"""


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Report pages: a CPU session's, and a device session's live and from its trace (when the backend loads)."""
    out = tmp_path_factory.mktemp("browser")
    x, w = torch.randn(48, 48), torch.randn(48, 48)
    with neuronprof.session(wait=0, warmup=1, active=2, output_dir=out) as s:
        for _ in s.steps():
            ((x @ w).relu() + 1).sum()
    pages = {"cpu": s.report(out / "cpu.html")}
    # The correlating TorchNeuron build: the one that puts NeuronCore time into torch.profiler.
    env = {"REPORT_OUT": str(out), "NEURONPROF_STANDIN_NEURON_BUILD": "correlating"}
    proc = run_script(_DEVICE_SCRIPT, backend="neuron", env=env, cwd=out)
    if unavailable_reason(proc) is None and proc.returncode == 0:
        made = result(proc)
        pages["device"] = Path(made["live"])
        assert analysis_main(["report", made["trace"], "-o", str(out / "device-trace.html")]) == 0
        pages["device_trace"] = out / "device-trace.html"
    else:
        assert unavailable_reason(proc) is not None, proc.stderr
    return pages


class Browser:
    """One headless Chromium page that records console errors and every request it makes."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self.errors: list[str] = []
        self.requests: list[str] = []
        # Every request is recorded; anything that is not the report file itself is refused.
        context.route("**/*", self._route)
        self.page = context.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _route(self, route: Any) -> None:
        url = route.request.url
        self.requests.append(url)
        if url.startswith(("file:", "data:")):
            route.continue_()
        else:
            route.abort()

    def open(self, path: Path) -> Any:
        self.errors.clear()
        self.requests.clear()
        self.page.goto(path.resolve().as_uri(), wait_until="load")
        return self.page


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1280, "height": 900},
            offline=True,
        )
        try:
            yield Browser(context)
        finally:
            context.close()


def column(page: Any, header: str, table: str = "#op-table") -> list[str]:
    return list(
        page.evaluate(
            """([table, header]) => {
                const heads = [...document.querySelectorAll(table + ' thead th')].map(th => th.textContent);
                const i = heads.indexOf(header);
                return [...document.querySelectorAll(table + ' tbody tr')].map(r => r.cells[i].textContent);
            }""",
            [table, header],
        )
    )


def number(text: str) -> float:
    return float(text.replace(",", "")) if text else float("nan")


def png_width(path: Path) -> int:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return int(struct.unpack(">I", head[16:20])[0])


@pytest.mark.parametrize("which", ["cpu", "device", "device_trace"])
def test_report_loads_offline_sorts_filters_zooms_and_shows_table_and_timeline(
    browser: Browser, reports: dict[str, Path], which: str, tmp_path: Path
) -> None:
    if which not in reports:
        pytest.skip("the neuron test backend is not available in this build")
    page = browser.open(reports[which])
    assert browser.errors == []
    assert browser.requests == [reports[which].resolve().as_uri()]

    # Sorting: the first click on a number column sorts it high to low, the second low to high.
    rows = page.locator("#op-table tbody tr").count()
    assert rows > 3
    page.click("#op-table th:has-text('Self CPU (µs)')")
    desc = [number(t) for t in column(page, "Self CPU (µs)")]
    assert desc == sorted(desc, reverse=True) and len(desc) == rows
    assert page.get_attribute("#op-table th:has-text('Self CPU (µs)')", "aria-sort") == "descending"
    page.click("#op-table th:has-text('Self CPU (µs)')")
    assert [number(t) for t in column(page, "Self CPU (µs)")] == sorted(desc)
    page.click("#op-table th:has-text('Name')")
    names = column(page, "Name")
    assert names == sorted(names, key=lambda n: n.lower()) or names == sorted(names)

    # Filtering by name.
    page.fill("#op-filter", "aten::m")
    kept = column(page, "Name")
    assert kept and all("aten::m" in n.lower() for n in kept) and len(kept) < rows
    page.fill("#op-filter", "")
    assert page.locator("#op-table tbody tr").count() == rows

    # The timeline draws the steps and ops, and zooms around the pointer.
    drawn = int(page.get_attribute("#timeline", "data-drawn") or 0)
    assert drawn > 0
    before = page.get_attribute("#timeline", "data-view")
    page.locator("#timeline").scroll_into_view_if_needed()
    box = page.locator("#timeline").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -400)
    page.wait_for_function("v => document.getElementById('timeline').dataset.view !== v", arg=before)
    after = page.get_attribute("#timeline", "data-view")
    assert after != before
    lo, hi = (float(v) for v in (after or "").split(","))
    blo, bhi = (float(v) for v in (before or "").split(","))
    assert blo <= lo < hi <= bhi and hi - lo < bhi - blo
    page.click("#tl-reset")
    assert page.get_attribute("#timeline", "data-view") == before
    if which.startswith("device"):
        lanes = page.evaluate("[...document.querySelectorAll('#timeline text')].map(t => t.textContent)")
        assert "NEURON · lane 0" in lanes
        assert page.locator("#timeline rect[fill='var(--dev)']").count() > 0
        assert "Self NEURON (µs)" in page.locator("#op-table thead").inner_text()

    # A screenshot 1280 px wide shows the table and the timeline.
    shot = tmp_path / f"{which}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert png_width(shot) == 1280
    height = page.evaluate("document.documentElement.scrollHeight")
    for selector in ("#op-table", "#timeline"):
        b = page.locator(selector).bounding_box()
        assert b is not None and b["width"] > 600 and b["height"] > 50, selector
        assert b["x"] >= 0 and b["x"] + b["width"] <= 1280 and b["y"] + b["height"] <= height, selector
    assert browser.errors == []
    assert len(browser.requests) == 1


def test_comparison_report_in_the_browser(browser: Browser, tmp_path: Path) -> None:
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    cmp = neuronprof.compare(
        {"a": lambda: (x @ w).relu(), "b": lambda: torch.relu(x @ w)}, repeats=1, quiet=True, output_dir=tmp_path
    )
    path = cmp.report(tmp_path / "cmp.html")
    page = browser.open(path)
    assert browser.errors == [] and browser.requests == [path.resolve().as_uri()]
    assert page.locator("#cmp-table tbody tr").count() == 2
    assert page.locator("#cmp-chart rect").count() == 2
    # Each variant's op table is sortable too.
    table = 'table.optable[data-variant="0"]'
    page.click(f"{table} th:has-text('Calls')")
    calls = [number(t) for t in column(page, "Calls", table)]
    assert calls == sorted(calls, reverse=True)
    page.screenshot(path=str(tmp_path / "cmp.png"), full_page=True)
    assert png_width(tmp_path / "cmp.png") == 1280


def test_report_settings_fit_a_phone_screen(browser: Browser, tmp_path: Path) -> None:
    """At 390 px the settings grid wraps inside its box: the page does not scroll sideways."""
    with neuronprof.session(wait=0, warmup=0, active=1, output_dir=tmp_path / "s") as s:
        torch.randn(8, 8) @ torch.randn(8, 8)
    path = s.report(tmp_path / "r.html")
    page = browser.page
    page.set_viewport_size({"width": 390, "height": 800})
    try:
        page = browser.open(path)
        assert browser.errors == []
        page.click("#settings > summary")  # folded under the overview: opened by a click
        box = page.evaluate(
            """() => { const dl = document.querySelector('#settings dl.facts');
                       return [dl.scrollWidth, dl.clientWidth, dl.getBoundingClientRect().right]; }"""
        )
        assert 0 < box[0] <= box[1] and box[2] <= 390, box
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})


@pytest.mark.parametrize("width", [1280, 390])
def test_report_op_table_keeps_the_name_column_in_view_while_its_numbers_scroll(
    browser: Browser, reports: dict[str, Path], width: int
) -> None:
    """Every column is reachable by scrolling the table's box sideways, and the name stays beside it."""
    page = browser.page
    page.set_viewport_size({"width": width, "height": 800})
    try:
        page = browser.open(reports["device"] if "device" in reports else reports["cpu"])
        assert browser.errors == []
        box = page.evaluate(
            """() => {
              const wrap = document.querySelector('#op-table').closest('.tablewrap');
              wrap.scrollLeft = wrap.scrollWidth;
              const w = wrap.getBoundingClientRect();
              const heads = [...document.querySelectorAll('#op-table thead th')];
              const last = heads[heads.length - 1].getBoundingClientRect();
              const name = document.querySelector('#op-table tbody td.name').getBoundingClientRect();
              return {page: document.documentElement.scrollWidth, wrapLeft: w.left, wrapRight: w.right,
                      lastRight: last.right, nameLeft: name.left, nameRight: name.right};
            }"""
        )
        assert box["page"] <= width, box  # the page itself does not scroll sideways
        assert box["lastRight"] <= box["wrapRight"] + 1, box  # the last column, scrolled into view
        assert abs(box["nameLeft"] - box["wrapLeft"]) <= 2, box  # the name column, still at the left edge
        assert box["nameRight"] - box["wrapLeft"] <= 0.5 * width, box  # and it leaves room for the numbers
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})


def _rank_trace(path: Path, rank: int, busy: int) -> None:
    """One rank of a gloo run: its own work, then the all-reduce it waits in until the last rank joins."""

    def span(name: str, ts: int, dur: int, cat: str = "cpu_op", tid: int = 1) -> dict[str, Any]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}

    events = [
        span("ProfilerStep#1", 0, 1000, "user_annotation"),
        span("aten::mm", 10, busy),
        span("c10d::allreduce_", busy + 20, 10),
        span("gloo:all_reduce", busy + 25, 965 - busy, "user_annotation", tid=2),
    ]
    data = {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}
    path.write_text(json.dumps(data))


def test_rank_folder_report_draws_each_rank_on_its_own_labelled_lanes(browser: Browser, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for rank, busy in ((0, 100), (1, 840)):
        _rank_trace(run / f"rank-{rank}.json", rank, busy)
    path = tmp_path / "ranks.html"
    assert analysis_main(["report", str(run), "-o", str(path)]) == 0
    page = browser.open(path)
    assert browser.errors == [] and browser.requests == [path.resolve().as_uri()]
    labels = page.evaluate(
        """() => [...document.querySelectorAll('#timeline > g > text')]
                  .filter(t => t.textContent.startsWith('rank '))
                  .map(t => [t.textContent, t.getComputedTextLength()])"""
    )
    names = [name for name, _ in labels]
    assert "rank 0 · steps" in names and "rank 1 · host thread 0 · depth 0" in names
    # Every lane's name fits left of the plot, and one rule parts rank 0's lanes from rank 1's.
    plot_x = float(page.get_attribute("#timeline > svg", "x") or 0)
    assert all(4 + width <= plot_x for _, width in labels), (plot_x, labels)
    assert page.locator("#timeline > g > line[stroke='#9aa3b5']").count() == 1


_PANES = ("#overview", "#ops", "#kernels", "#memory", "#distributed", "#timeline-section")
_RANKS = Path(__file__).resolve().parent / "corpus" / "traces" / "ddp_straggler"


@pytest.fixture(scope="module")
def pane_reports(reports: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Pages that fill the panes: a CPU session with every mode, the device session's, the two-rank gloo run's."""
    out = tmp_path_factory.mktemp("panes")
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x = torch.randn(16, 32)
    with neuronprof.session(
        wait=0, warmup=1, active=3, output_dir=out, with_stack=True, record_shapes=True, profile_memory=True
    ) as s:
        for _ in s.steps():
            model(x).sum().backward()
    pages = {"cpu": s.report(out / "cpu.html")}
    if "device" in reports:
        pages["device"] = reports["device"]
    assert analysis_main(["report", str(_RANKS), "-o", str(out / "ranks.html")]) == 0
    pages["ranks"] = out / "ranks.html"
    # Two runs: the rank folder of a balanced run (A) and the straggler's (B).
    clean = _RANKS.parent / "ddp_clean"
    assert analysis_main(["report", str(clean), str(_RANKS), "-o", str(out / "two.html")]) == 0
    pages["two"] = out / "two.html"
    return pages


def _sorted_by_keyboard(page: Any, table: str) -> None:
    """Focus the table's second column header, press Enter: it sorts high to low (numbers) and says so."""
    th = page.locator(f"{table} thead th").nth(1 if table != "#kernel-table" else 3)
    header = th.inner_text()
    th.focus()
    page.keyboard.press("Enter")
    assert th.get_attribute("aria-sort") == "descending"
    values = [number(t) for t in column(page, header, table)]
    assert values == sorted(values, reverse=True) and values
    page.keyboard.press("Enter")
    assert th.get_attribute("aria-sort") == "ascending"


@contextmanager
def opened_at(browser: Browser, path: Path, width: int, shot: Path) -> Iterator[Any]:
    """``path`` opened at ``width`` px: nothing but its own file loaded, no error, no sideways scroll of the page.

    On leaving, a full-page screenshot is taken to ``shot`` (checked to be ``width`` wide) and the
    browser's size is set back.
    """
    browser.page.set_viewport_size({"width": width, "height": 900})
    try:
        page = browser.open(path)
        assert browser.errors == [] and browser.requests == [path.resolve().as_uri()]
        assert page.evaluate("document.documentElement.scrollWidth") <= width  # no sideways scroll of the page
        yield page
        page.screenshot(path=str(shot), full_page=True)
        assert png_width(shot) == width
        assert browser.errors == []
    finally:
        browser.page.set_viewport_size({"width": 1280, "height": 900})


def in_view(page: Any, selector: str, width: int, min_height: float = 0) -> None:
    """The element is drawn (taller than ``min_height``) and fits the ``width`` of the screen."""
    page.locator(selector).scroll_into_view_if_needed()
    box = page.locator(selector).bounding_box()
    assert box is not None and box["height"] > min_height, selector
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, selector


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("which", ["cpu", "device", "ranks", "two"])
def test_every_pane_is_drawn_and_usable_at_desktop_and_phone_width(
    browser: Browser, pane_reports: dict[str, Path], which: str, width: int, tmp_path: Path
) -> None:
    if which not in pane_reports:
        pytest.skip("the neuron test backend is not available in this build")
    with opened_at(browser, pane_reports[which], width, tmp_path / f"{which}-{width}.png") as page:
        for pane in _PANES + (("#two-runs",) if which == "two" else ()):
            in_view(page, pane, width, min_height=20)
        # Overview: one bar per step, the tallest the longest step; the mean step's stack fills its box.
        bars = page.evaluate(
            """() => [...document.querySelectorAll('#step-chart > div')].map(
                 d => [d.getBoundingClientRect().height, +d.dataset.us])"""
        )
        assert len(bars) == page.locator("#steps-table tbody tr").count() > 0
        tallest = max(bars)
        assert tallest[1] == max(us for _, us in bars) and tallest[0] > 0
        fill = page.evaluate(
            """() => { const s = document.querySelector('#overview > .stack');
                       const w = [...s.children].reduce((a, c) => a + c.getBoundingClientRect().width, 0);
                       return [w, s.clientWidth]; }"""
        )
        assert abs(fill[0] - fill[1]) <= 2, fill
        # The pane of each run: sorted from the keyboard, name column in view.
        table = {"cpu": "#module-table", "device": "#kernel-table", "ranks": "#rank-table", "two": "#rank-table"}[which]
        page.locator(table).scroll_into_view_if_needed()
        _sorted_by_keyboard(page, table)
        if which == "cpu":
            rows = page.locator("#op-table tbody tr").count()
            page.select_option("#op-group", "other")  # by name instead of by input shape
            names = column(page, "Name")
            assert len(names) == len(set(names)) and len(names) < rows
            page.fill("#op-filter", "aten::addmm")
            assert set(column(page, "Name")) == {"aten::addmm"}
            assert page.locator("#memory-table tbody tr").count() > 0
            for chart in ("#memory-chart-0", "#memory-peak-0"):  # memory over time and its peak, in view
                in_view(page, chart, width)
            child = page.locator("#call-tree > details > details > summary").first
            child.focus()
            page.keyboard.press("Enter")
            assert page.locator("#call-tree > details > details").first.get_attribute("open") is not None
        if which in ("ranks", "two"):
            assert "Straggler: rank 1" in page.locator("#distributed").inner_text()
        if which == "two":
            rows = column(page, "Category", "#two-runs-overview")
            assert rows[0] == "step time" and "communication" in rows
            wrap = page.evaluate(
                """() => { const w = document.querySelector('#two-runs-overview').closest('.tablewrap');
                           w.scrollLeft = w.scrollWidth;
                           const heads = [...document.querySelectorAll('#two-runs-overview th')];
                           const last = heads[heads.length - 1].getBoundingClientRect();
                           return [last.right, w.getBoundingClientRect().right]; }"""
            )
            assert wrap[0] <= wrap[1] + 1, wrap  # the last column reachable by scrolling the box


def test_report_follows_the_dark_colour_scheme(browser: Browser, pane_reports: dict[str, Path]) -> None:
    page = browser.open(pane_reports["cpu"])
    background = "getComputedStyle(document.body).backgroundColor"
    try:
        page.emulate_media(color_scheme="light")
        assert page.evaluate(background) == "rgb(255, 255, 255)"
        page.emulate_media(color_scheme="dark")
        dark = page.evaluate(background)
        assert dark != "rgb(255, 255, 255)"
        assert sum(int(v) for v in re.findall(r"\d+", dark)) < 3 * 64  # a dark background
        # The timeline's lane names follow it too (no hard-coded light colour).
        fill = page.evaluate("getComputedStyle(document.querySelector('#timeline > g > text')).fill")
        assert fill != "rgb(91, 100, 117)"
    finally:
        page.emulate_media(color_scheme="light")


@pytest.fixture(scope="module")
def two_run_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two runs side by side: naive RMSNorm against torch.rms_norm, as cmp.report() and `neuronprof report A B`."""
    out = tmp_path_factory.mktemp("two-runs")
    x, w = torch.randn(32, 128), torch.randn(128)
    variants = {
        "naive": lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
        "torch.rms_norm": lambda: torch.rms_norm(x, (128,), w, 1e-6),
    }
    cmp = neuronprof.compare(variants, repeats=3, quiet=True, output_dir=out)
    pages = {"cmp": cmp.report(out / "cmp.html")}
    traces = []
    for name, fn in variants.items():
        with neuronprof.session(wait=0, warmup=1, active=3, output_dir=out) as s:
            for _ in s.steps():
                fn()
        traces.append(str(s.export(out / f"{name}.pt.trace.json")))
    assert analysis_main(["report", *traces, "-o", str(out / "ab.html")]) == 0
    pages["ab"] = out / "ab.html"
    return pages


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("which", ["cmp", "ab"])
def test_two_runs_diff_is_visible_sortable_and_filterable_at_desktop_and_phone_width(
    browser: Browser, two_run_pages: dict[str, Path], which: str, width: int, tmp_path: Path
) -> None:
    pane = {"cmp": "#against-1", "ab": "#two-runs"}[which]
    table = f"{pane}-table"
    with opened_at(browser, two_run_pages[which], width, tmp_path / f"{which}-{width}.png") as page:
        # A table is seen through its box (which scrolls sideways on a phone).
        for selector in (pane, f"{pane}-verdict", f"{pane}-overview >> xpath=..", f"{table} >> xpath=.."):
            in_view(page, selector, width, min_height=20)
        assert "Did it get faster?" in page.locator(f"{pane}-verdict").inner_text()
        overview = column(page, "Category", f"{pane}-overview")
        assert overview[0] == "step time" and "host compute in ops" in overview
        # The op diff: drawn by the page's script, sorted from the keyboard by the change, high to low and back.
        rows = page.locator(f"{table} tbody tr").count()
        assert rows > 3
        th = page.locator(f"{table} thead th", has_text="Δ self CPU")
        header = th.inner_text()
        th.focus()
        page.keyboard.press("Enter")
        assert th.get_attribute("aria-sort") == "descending"
        deltas = [number(t) for t in column(page, header, table)]
        assert deltas == sorted(deltas, reverse=True) and len(deltas) == rows
        page.keyboard.press("Enter")
        assert th.get_attribute("aria-sort") == "ascending"
        assert [number(t) for t in column(page, header, table)] == sorted(deltas)
        # The ops of one run only are marked, and the filter finds them.
        page.fill(f"{pane} input[data-grid-filter]", "aten::rms_norm")
        assert column(page, "Name", table) == ["aten::rms_norm"]
        assert column(page, "In", table) == ["only in B"]
        page.fill(f"{pane} input[data-grid-filter]", "")
        # Every column reachable by scrolling the table's box sideways, the name column still in view.
        box = page.evaluate(
            """(table) => {
              const wrap = document.querySelector(table).closest('.tablewrap');
              wrap.scrollLeft = wrap.scrollWidth;
              const w = wrap.getBoundingClientRect();
              const heads = [...document.querySelectorAll(table + ' thead th')];
              const last = heads[heads.length - 1].getBoundingClientRect();
              const name = document.querySelector(table + ' tbody td.name').getBoundingClientRect();
              return {wrapLeft: w.left, wrapRight: w.right, lastRight: last.right, nameLeft: name.left};
            }""",
            table,
        )
        assert box["lastRight"] <= box["wrapRight"] + 1 and abs(box["nameLeft"] - box["wrapLeft"]) <= 2, box


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("which", ["cpu", "device"])
def test_a_long_name_is_read_whole_in_its_cell_at_desktop_and_phone_width(
    browser: Browser, pane_reports: dict[str, Path], which: str, width: int, tmp_path: Path
) -> None:
    """A name wraps inside its cell (no hover needed to read it) while the name column stays sticky."""
    if which not in pane_reports:
        pytest.skip("the neuron test backend is not available in this build")
    with opened_at(browser, pane_reports[which], width, tmp_path / f"names-{which}-{width}.png") as page:
        cells = page.evaluate(
            """() => [...document.querySelectorAll('td.name')].filter(td => td.offsetParent !== null).map(td => {
                 const range = document.createRange();
                 range.selectNodeContents(td);
                 const text = range.getBoundingClientRect(), box = td.getBoundingClientRect();
                 return {name: td.textContent, scroll: td.scrollWidth, client: td.clientWidth,
                         textLeft: text.left, textRight: text.right, left: box.left, right: box.right,
                         sticky: getComputedStyle(td).position};
               })"""
        )
        longest = max(cells, key=lambda c: len(c["name"]))
        # Names longer than the name column's width on a phone (a Python frame's, a kernel's).
        assert len(longest["name"]) > {"cpu": 60, "device": 25}[which], longest
        for cell in cells:
            assert cell["scroll"] <= cell["client"], cell  # nothing clipped
            assert cell["left"] - 1 <= cell["textLeft"] and cell["textRight"] <= cell["right"] + 1, cell
        assert {c["sticky"] for c in cells if c["name"] == longest["name"]} == {"sticky"}
        # Long notes and paths wrap inside the screen too.
        right = page.evaluate(
            "Math.max(...[...document.querySelectorAll('main p')].map(p => p.getBoundingClientRect().right))"
        )
        assert right <= width, right


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("which", ["cpu", "device", "ranks"])
def test_timeline_axis_labels_neither_overlap_nor_pass_the_edge(
    browser: Browser, pane_reports: dict[str, Path], which: str, width: int, tmp_path: Path
) -> None:
    """Time ticks by the plot's width: each label clear of the next and inside the SVG, zoomed out and in."""
    if which not in pane_reports:
        pytest.skip("the neuron test backend is not available in this build")
    with opened_at(browser, pane_reports[which], width, tmp_path / f"axis-{which}-{width}.png") as page:
        page.locator("#timeline").scroll_into_view_if_needed()
        for _ in range(7):  # zoomed out, then in six times: spans that round to a nice step every way
            boxes = page.evaluate(
                """() => { const svg = document.getElementById('timeline').getBoundingClientRect();
                     return {right: svg.right, left: svg.left,
                       ticks: [...document.querySelectorAll('#timeline > g > text')]
                         .filter(t => t.getAttribute('y') === '12').map(t => {
                         const b = t.getBoundingClientRect(); return [b.left, b.right, t.textContent]; })}; }"""
            )
            ticks = sorted(boxes["ticks"])
            assert len(ticks) >= 2, boxes
            for (_, right, _), (left, _, _) in zip(ticks, ticks[1:]):
                assert right < left, ticks  # no two labels overlap
            assert boxes["left"] <= ticks[0][0] and ticks[-1][1] <= boxes["right"], boxes  # none cut off
            page.click("#tl-in")
        # The lane names fit left of the plot, which keeps most of the width on a phone.
        lanes = page.evaluate(
            """() => [...document.querySelectorAll('#timeline > g > text')].filter(t => t.getAttribute('y') !== '12')
                  .map(t => t.getComputedTextLength())"""
        )
        plot = page.evaluate(
            "[+document.querySelector('#timeline > svg').getAttribute('x'),"
            " document.getElementById('timeline').clientWidth]"
        )
        assert all(4 + w <= plot[0] for w in lanes), (plot, lanes)
        assert plot[0] <= 0.35 * plot[1], plot


@pytest.mark.parametrize("width", [1280, 390])
def test_comparison_chart_text_stays_readable_at_desktop_and_phone_width(
    browser: Browser, two_run_pages: dict[str, Path], width: int, tmp_path: Path
) -> None:
    """The chart is never shrunk below 10 px text: on a phone its box scrolls sideways to the last label."""
    with opened_at(browser, two_run_pages["cmp"], width, tmp_path / f"cmp-chart-{width}.png") as page:
        in_view(page, "#cmp-chart >> xpath=..", width, min_height=40)
        sizes = page.evaluate(
            """() => { const svg = document.getElementById('cmp-chart'), scale = svg.getScreenCTM().a;
                 return [...svg.querySelectorAll('text')].map(
                   t => parseFloat(getComputedStyle(t).fontSize) * scale); }"""
        )
        assert len(sizes) >= 3 and min(sizes) >= 10, sizes
        reach = page.evaluate(
            """() => { const svg = document.getElementById('cmp-chart'), box = svg.parentElement;
                 box.scrollLeft = box.scrollWidth;
                 const right = Math.max(...[...svg.querySelectorAll('text')].map(t => t.getBoundingClientRect().right));
                 return [right, box.getBoundingClientRect().right]; }"""
        )
        assert reach[0] <= reach[1] + 1, reach  # the last label reached by scrolling the chart's box


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("which", ["cpu", "two"])
def test_a_nav_link_leaves_its_pane_heading_below_the_sticky_nav(
    browser: Browser, pane_reports: dict[str, Path], which: str, width: int, tmp_path: Path
) -> None:
    with opened_at(browser, pane_reports[which], width, tmp_path / f"nav-{which}-{width}.png") as page:
        links = page.evaluate("[...document.querySelectorAll('nav.panes a')].map(a => a.getAttribute('href'))")
        assert len(links) >= 6
        for href in links:
            page.click(f"nav.panes a[href='{href}']")
            tops = page.evaluate(
                """(href) => [document.querySelector('nav.panes').getBoundingClientRect().bottom,
                              document.querySelector(href + ' h2').getBoundingClientRect().top, window.scrollY]""",
                href,
            )
            assert tops[2] > 0 or href == links[0], (href, tops)  # the page scrolled to it
            assert tops[1] >= tops[0], (href, tops)  # its heading below the nav, not under it


def _luminance(rgb: tuple[float, ...]) -> float:
    """WCAG 2's relative luminance of an sRGB colour (0-255 per channel)."""
    lin = [c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _rgb(css: str) -> tuple[float, ...]:
    return tuple(float(v) for v in re.findall(r"[\d.]+", css)[:3])


@pytest.mark.parametrize("scheme", ["dark", "light"])
@pytest.mark.parametrize("width", [1280, 390])
def test_timeline_labels_contrast_with_their_bars_in_dark_and_light_mode(
    browser: Browser, pane_reports: dict[str, Path], scheme: str, width: int, tmp_path: Path
) -> None:
    """Each name drawn on a bar (step names too) has a contrast of 3:1 or more with the bar as painted."""
    with opened_at(browser, pane_reports["ranks"], width, tmp_path / f"tl-{scheme}-{width}.png") as page:
        try:
            page.emulate_media(color_scheme=scheme)
            page.locator("#timeline").scroll_into_view_if_needed()
            pairs = page.evaluate(
                """() => { const bg = getComputedStyle(document.getElementById('timeline')).backgroundColor;
                     return [...document.querySelectorAll('#timeline > svg text')].map(t => {
                       const bar = t.previousElementSibling, s = getComputedStyle(bar);
                       return {text: t.textContent, fill: getComputedStyle(t).fill, bar: s.fill,
                               opacity: +s.fillOpacity, kind: bar.getAttribute('fill'), bg}; }); }"""
            )
            assert any(p["kind"] == "var(--step)" for p in pairs), pairs  # step names are among them
            for p in pairs:
                bar, bg = _rgb(p["bar"]), _rgb(p["bg"])
                painted = tuple(p["opacity"] * b + (1 - p["opacity"]) * g for b, g in zip(bar, bg))
                lum = sorted((_luminance(_rgb(p["fill"])), _luminance(painted)))
                assert (lum[1] + 0.05) / (lum[0] + 0.05) >= 3, p
        finally:
            page.emulate_media(color_scheme="light")


@pytest.mark.parametrize("width", [1280, 390])
def test_a_finger_drag_pans_the_timeline_and_a_tap_names_the_event(
    browser: Browser, pane_reports: dict[str, Path], width: int, tmp_path: Path
) -> None:
    """Touch input (pointer events) pans the zoomed timeline as a mouse drag does."""
    with opened_at(browser, pane_reports["cpu"], width, tmp_path / f"touch-{width}.png") as page:
        cdp = browser.context.new_cdp_session(page)
        cdp.send("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 1})
        try:
            page.locator("#timeline").scroll_into_view_if_needed()
            page.click("#tl-in")
            page.click("#tl-in")
            before = [float(v) for v in (page.get_attribute("#timeline", "data-view") or "").split(",")]
            box = page.locator("#timeline").bounding_box()
            assert box is not None
            x, y = box["x"] + box["width"] * 0.7, box["y"] + box["height"] * 0.5

            def touch(kind: str, px: float) -> None:
                points = [] if kind == "touchEnd" else [{"x": px, "y": y}]
                cdp.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": points})

            touch("touchStart", x)
            for i in range(1, 11):
                touch("touchMove", x - i * box["width"] * 0.03)
            touch("touchEnd", x)
            after = [float(v) for v in (page.get_attribute("#timeline", "data-view") or "").split(",")]
            assert after[0] > before[0], (before, after)  # dragged left: later time in view
            assert abs((after[1] - after[0]) - (before[1] - before[0])) < 1e-2, (before, after)  # same zoom
            # A tap on a step's bar names it. The bar is tapped in the middle of its widest part in view:
            # where the steps (and the gaps between them) fall depends on the recording's times.
            tx, ty, hit = page.evaluate(
                """([left, right]) => {
                     let best = null;
                     for (const r of document.querySelectorAll("#timeline rect[fill='var(--step)']")) {
                       const b = r.getBoundingClientRect(), lo = Math.max(b.left, left), hi = Math.min(b.right, right);
                       if (hi - lo > 4 && (!best || hi - lo > best[1] - best[0])) best = [lo, hi, b.top + b.height / 2];
                     }
                     const x = (best[0] + best[1]) / 2, y = best[2], at = document.elementFromPoint(x, y);
                     return [x, y, at && at.getAttribute('fill')]; }""",
                [box["x"], box["x"] + box["width"]],
            )
            assert hit == "var(--step)", (tx, ty, hit)  # nothing else lies on the bar where it is tapped
            cdp.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [{"x": tx, "y": ty}]})
            cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
            page.locator("#tl-tip").wait_for(state="visible", timeout=10_000)  # the page answers the tap when it can
            assert "ProfilerStep" in page.locator("#tl-tip").inner_text()
        finally:
            cdp.send("Emulation.setTouchEmulationEnabled", {"enabled": False})
            cdp.detach()


def test_timeline_draws_collectives_in_the_communication_colour(
    browser: Browser, pane_reports: dict[str, Path], tmp_path: Path
) -> None:
    """gloo's all_reduce spans: drawn and listed as communication, in the overview's colour for it."""
    with opened_at(browser, pane_reports["ranks"], 1280, tmp_path / "comm.png") as page:
        drawn = page.evaluate(
            """() => { const tl = JSON.parse(document.getElementById('neuronprof-data').textContent).timeline;
                 return [...document.querySelectorAll('#timeline rect[data-i]')].map(
                   r => [tl.names[+r.dataset.i], r.getAttribute('fill'), getComputedStyle(r).fill]); }"""
        )
        comm = {name for name, fill, _ in drawn if fill == "var(--c-communication)"}
        assert "gloo:all_reduce" in comm, comm
        assert not any(name == "gloo:all_reduce" and fill != "var(--c-communication)" for name, fill, _ in drawn)
        legend = page.evaluate(
            """() => [...document.querySelectorAll('.legend > span')].map(
                 s => [s.textContent.trim(), getComputedStyle(s.firstElementChild).backgroundColor])"""
        )
        colour = {fill for name, _, fill in drawn if name in comm}
        assert ["communication", *colour] in [list(x) for x in legend], (legend, colour)


def test_byte_and_count_columns_have_thousands_separators(browser: Browser, pane_reports: dict[str, Path]) -> None:
    page = browser.open(pane_reports["cpu"])
    cells = column(page, "Self CPU memory (B)", "#memory-table")
    assert cells and all(re.fullmatch(r"-?\d{1,3}(,\d{3})*", c) for c in cells), cells
    assert any("," in c for c in cells), cells
