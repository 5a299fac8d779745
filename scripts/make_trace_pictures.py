"""Draw the pictures of "Read a trace" from a real run of examples/training_step.py on this CPU.

    python scripts/make_trace_pictures.py --speedscope node_modules/speedscope/dist/release

1. runs ``training_step.train(active=2)`` on the CPU, exports its trace and writes its
   HTML report (``s.report()``);
2. screenshots the report's step timeline in headless Chromium (playwright driving the
   system's Chromium), whole and zoomed on the end of one step;
3. with ``--speedscope`` (the built app of the ``speedscope`` npm package: a trace
   viewer that runs offline; Perfetto's UI needs the network), screenshots the exported
   trace opened in it;
4. writes each screenshot, with numbered callouts, into ``docs/assets/`` as
   ``trace_*.png``: on the report, placed on the elements they name (found in the page);
   on speedscope, which draws on a canvas, at its fixed row positions.

The pictures are of a CPU run: the captions on the page say so.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "docs" / "assets"
CHROMIUM = os.environ.get("NEURONPROF_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")

# Where each callout points, found in the report's timeline: (label, JS returning [x, y] in the section's box).
_REPORT_SPOTS = """
(section) => {
  const base = section.getBoundingClientRect();
  const at = (el) => { const r = el.getBoundingClientRect();
                       return [r.left - base.left + Math.min(r.width / 2, 60), r.top - base.top + r.height / 2]; };
  const texts = [...section.querySelectorAll('#timeline text')];
  const named = (name) => texts.find(t => t.textContent === name);
  const rects = [...section.querySelectorAll('#timeline rect')];
  const step = rects.find(r => r.getAttribute('fill') === 'var(--step)');
  const stepEnd = step.getBoundingClientRect().right;
  const ops = rects.filter(r => r.getAttribute('fill') === 'var(--op)');
  const last = ops.filter(r => r.getBoundingClientRect().right <= stepEnd + 1).pop() || ops[0];
  const lr = last.getBoundingClientRect();
  return {step: at(named('ProfilerStep#3') || step), data: at(named('data')),
          end: [lr.right - base.left - 4, lr.top - base.top + lr.height / 2],
          ruler: at(texts[1])};
}
"""


def record(tmp: Path) -> tuple[Path, Path]:
    """Run the training-step example on the CPU; return its exported trace and its report."""
    sys.path.insert(0, str(ROOT / "examples"))
    import training_step

    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        s = training_step.train(active=2)
        return s.export(tmp / "trace.json"), s.report(tmp / "report.html")
    finally:
        os.chdir(cwd)


def annotate(
    png: Path, target: Path, spots: Sequence[tuple[str, tuple[float, float], tuple[float, float]]], pad: int = 0
) -> None:
    """Draw numbered callouts on ``png``: (label, point in px, text offset in px) each; write ``target``.

    ``pad`` adds that many px of white below the screenshot, room for callouts.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt
    import numpy as np

    img = mpimg.imread(png)
    if pad:
        img = np.concatenate([img, np.ones((pad, *img.shape[1:]), dtype=img.dtype)])
    h, w = img.shape[:2]
    dpi = 100
    fig = plt.figure(figsize=(w / dpi, h / dpi), dpi=dpi)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.imshow(img)
    ax.set_axis_off()
    for i, (label, (x, y), (dx, dy)) in enumerate(spots, 1):
        ax.annotate(
            f"{i}  {label}",
            xy=(x, y),
            xytext=(x + dx, y + dy),
            fontsize=11,
            color="white",
            weight="bold",
            bbox={"boxstyle": "round,pad=0.3", "fc": "#c2410c", "ec": "none"},
            arrowprops={"arrowstyle": "-|>", "color": "#c2410c", "lw": 2},
        )
    fig.savefig(target, dpi=dpi)
    plt.close(fig)
    print(f"wrote {target.relative_to(ROOT)}")


def report_pictures(browser: Any, report: Path, tmp: Path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(report.as_uri())
    section = page.locator("#timeline-section")
    section.scroll_into_view_if_needed()
    shot = tmp / "report.png"
    section.screenshot(path=str(shot))
    spot = section.evaluate(_REPORT_SPOTS)
    annotate(
        shot,
        ASSETS / "trace_report_timeline.png",
        [
            ("one recorded step", tuple(spot["step"]), (120, -55)),
            ("data: loading the batch", tuple(spot["data"]), (260, 40)),
            ("forward, backward, optimizer", tuple(spot["end"]), (-420, 80)),
            ("time since the first step", tuple(spot["ruler"]), (420, -50)),
        ],
        pad=50,
    )
    # Zoom on the end of the first step: the phases after `data`, each with its operators.
    box = page.locator("#timeline").bounding_box()
    base = section.bounding_box()
    x = base["x"] + spot["end"][0]
    page.mouse.move(x, box["y"] + box["height"] / 2)
    for _ in range(12):
        page.mouse.wheel(0, -400)
        page.wait_for_timeout(50)
    page.wait_for_timeout(300)
    section.screenshot(path=str(tmp / "report-zoom.png"))
    labels = section.evaluate(
        """(section) => { const base = section.getBoundingClientRect(); const out = {};
             for (const t of section.querySelectorAll('#timeline text')) {
               const r = t.getBoundingClientRect();
               if (['forward', 'backward', 'optimizer'].includes(t.textContent) && !(t.textContent in out)
                   && r.left >= base.left && r.right <= base.right)
                 out[t.textContent] = [r.left - base.left + 10, r.top - base.top + r.height / 2];
             } return out; }"""
    )
    order = [name for name in ("forward", "backward", "optimizer") if name in labels]
    spots = [(name, tuple(labels[name]), (40, 60 + 25 * i)) for i, name in enumerate(order)]
    annotate(tmp / "report-zoom.png", ASSETS / "trace_report_zoom.png", spots)
    page.close()


def speedscope_picture(browser: Any, app: Path, trace: Path, tmp: Path) -> None:
    """The exported trace in speedscope, served with the app from 127.0.0.1."""
    site = tmp / "site"
    shutil.copytree(app, site / "speedscope")
    data = json.loads(trace.read_text(encoding="utf-8"))
    # speedscope reads the complete events ("X") and the thread names ("M") of the process;
    # kineto's flow arrows and its profiler-wide instants stop its importer.
    data["traceEvents"] = [
        e for e in data["traceEvents"] if isinstance(e.get("pid"), int) and e.get("ph") in ("X", "M")
    ]
    (site / "trace.json").write_text(json.dumps(data), encoding="utf-8")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        page = browser.new_page(viewport={"width": 1280, "height": 420})
        page.goto(f"{base}speedscope/index.html#profileURL={base}trace.json&title=training_step.py")
        page.wait_for_timeout(4000)
        shot = tmp / "speedscope.png"
        page.screenshot(path=str(shot))
        page.close()
    finally:
        server.shutdown()
        server.server_close()
    annotate(
        shot,
        ASSETS / "trace_speedscope.png",
        [
            # speedscope draws on a canvas: its rows are 20 px apart under a 140 px overview.
            ("the whole run, to pick a range", (640, 60), (60, 40)),
            ("ProfilerStep#3: one step", (440, 153), (-420, 95)),
            ("data: the label around the loading", (480, 173), (-200, 125)),
            ("the DataLoader's __next__ inside it", (520, 193), (20, 155)),
        ],
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speedscope", type=Path, help="the speedscope app folder (npm package, dist/release)")
    args = parser.parse_args(argv)
    if CHROMIUM is None:
        print("needs Chromium (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    import torch
    from playwright.sync_api import sync_playwright

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="neuronprof-trace-pictures-") as name:
        tmp = Path(name)
        trace, report = record(tmp)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            try:
                report_pictures(browser, report, tmp)
                if args.speedscope:
                    speedscope_picture(browser, args.speedscope, trace, tmp)
            finally:
                browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
