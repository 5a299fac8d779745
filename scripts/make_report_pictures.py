"""Draw the pictures of "Sharing a report": each pane of the HTML report, from real recorded runs.

    python scripts/make_report_pictures.py [NAME ...]

(with names, e.g. ``two_runs_cpu``, only those pictures are drawn)

1. records a small ``nn.Sequential`` training step on this CPU (``with_stack``,
   ``record_shapes`` and ``profile_memory`` on) and writes its report;
2. records the same kind of step on the PrivateUse1 test backend, the ``torch_neuronx``
   stand-in of ``tests/backends`` (its kernel times are the test plugin's, not a
   Trainium's: the captions say so), when it builds here;
3. writes the report of the two-rank gloo run of the findings corpus
   (``tests/corpus/traces/ddp_straggler``, recorded on a CPU), the report of four CPU runs
   of naive RMSNorm beside four of ``torch.rms_norm`` (``neuronprof report A B`` of two
   folders of runs), and the comparison report of the two (``cmp.report()``);
4. screenshots each pane in headless Chromium (playwright driving the system's
   Chromium) into ``docs/assets/report_*.png``, 1280 px wide, the overview also 390 px.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "docs" / "assets"
CORPUS = ROOT / "tests" / "corpus" / "traces"
CHROMIUM = os.environ.get("NEURONPROF_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
MAX_HEIGHT = 760  # px of a pane kept in a picture: its top, where the pane's point is
WANTED = set(sys.argv[1:])  # the pictures to draw (by name); all of them when none is named

_DEVICE_SCRIPT = """
import os, torch, neuronprof, testbackend
# The stand-in runs torch's CPU kernels and reports a kernel of 200 µs per op to torch.profiler.
testbackend.set_kernel_ns(200_000)
x, w = torch.randn(32, 64), torch.randn(64)
with neuronprof.session(backend="neuron", wait=0, warmup=1, active=3, output_dir="profiles") as s:
    for _ in s.steps():
        x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
report(str(s.report("device.html").resolve()))
"""


def cpu_report(tmp: Path) -> Path:
    import torch

    import neuronprof

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    with neuronprof.session(
        wait=0, warmup=1, active=4, output_dir=tmp, with_stack=True, record_shapes=True, profile_memory=True
    ) as s:
        for _ in s.steps():
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    return s.report(tmp / "cpu.html")


def device_report(tmp: Path) -> Any:
    sys.path.insert(0, str(ROOT / "tests" / "backends"))
    from run_in_subprocess import result, run_script, unavailable_reason

    proc = run_script(_DEVICE_SCRIPT, backend="neuron", env={"NEURONPROF_STANDIN_NEURON_BUILD": "correlating"}, cwd=tmp)
    why = unavailable_reason(proc)
    if why is not None or proc.returncode != 0:
        print(f"no test-backend pictures: {why or proc.stderr[-400:]}")
        return None
    return Path(result(proc))


def rmsnorm_reports(tmp: Path) -> tuple[Path, Path]:
    """Naive RMSNorm against torch.rms_norm: four runs of each as two folders, and a comparison of the two."""
    import torch

    import neuronprof
    from neuronprof.cli import main as neuronprof_main

    torch.set_num_threads(1)  # one thread: the pictures' machine is shared, and threads would wait on each other
    x, w = torch.randn(64, 512), torch.randn(512)
    variants = {
        "naive": lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
        "torch.rms_norm": lambda: torch.rms_norm(x, (512,), w, 1e-6),
    }
    for side, fn in zip(("naive", "rms_norm"), variants.values()):
        for i in range(4):
            with neuronprof.session(wait=0, warmup=1, active=4, output_dir=tmp / "s") as s:
                for _ in s.steps():
                    fn()
            s.export(tmp / side / f"run-{i}.pt.trace.json")
    two = tmp / "two.html"
    # From the folder itself, so that the page names the runs' files by relative paths (no machine's folders).
    here = Path.cwd()
    os.chdir(tmp)
    try:
        assert neuronprof_main(["report", "naive", "rms_norm", "-o", str(two)]) == 0
    finally:
        os.chdir(here)
    cmp = neuronprof.compare(variants, repeats=5, quiet=True, output_dir=tmp / "s")
    return two, cmp.report(tmp / "cmp.html")


def shoot(browser: Any, report: Path, pane: str, name: str, width: int = 1280) -> None:
    if WANTED and name not in WANTED:
        return
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(report.as_uri())
    page.add_style_tag(content="nav.panes { position: static !important; }")
    section = page.locator(pane)
    box = section.bounding_box()
    section.scroll_into_view_if_needed()
    target = ASSETS / f"report_{name}.png"
    clip = {"x": box["x"], "y": box["y"], "width": box["width"], "height": min(box["height"], MAX_HEIGHT)}
    page.screenshot(path=str(target), clip=clip, full_page=True)
    page.close()
    print(f"wrote {target.relative_to(ROOT)}")


def main() -> int:
    from playwright.sync_api import sync_playwright

    from neuronprof.cli import main as neuronprof_main

    if CHROMIUM is None:
        print("Chromium is not installed", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        cpu = cpu_report(tmp)
        device = device_report(tmp)
        ranks = tmp / "ranks.html"
        assert neuronprof_main(["report", str(CORPUS / "ddp_straggler"), "-o", str(ranks)]) == 0
        two, cmp = rmsnorm_reports(tmp)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            shoot(browser, cpu, "#overview", "overview_cpu")
            shoot(browser, cpu, "#overview", "overview_cpu_phone", width=390)
            shoot(browser, cpu, "#ops", "operators_cpu")
            shoot(browser, cpu, "#memory", "memory_cpu")
            if device is not None:
                shoot(browser, device, "#kernels", "kernels_testbackend")
            shoot(browser, ranks, "#distributed", "distributed_cpu")
            shoot(browser, two, "#two-runs", "two_runs_cpu")
            shoot(browser, cmp, "#against-1", "comparison_cpu")
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
