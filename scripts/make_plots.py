"""Regenerate the measured figures and sample outputs that the docs include.

Everything under ``docs/assets/`` that shows a number measured by this project is
written by this script, never by hand:

* ``docs/assets/<case>_<hw>.png``: the comparison chart of a case study, drawn from
  ``neuronprof.compare()`` output, with the hardware it ran on written under it;
* ``docs/assets/generated/<case>_<hw>.md``: the same comparison as a Markdown table,
  with a caption naming the hardware, the shapes and the torch version;
* ``docs/assets/generated/<case>_<hw>_tables.md``: each variant's profile table;
* ``docs/assets/generated/first_profile_<hw>.txt``, ``doctor_<hw>.txt``,
  ``rmsnorm_naive_tree_<hw>.txt``: sample outputs shown in the guide;
* ``docs/assets/generated/training_step_<hw>.txt``: the table and findings of
  ``examples/training_step.py`` (the "Profile your training step" page);
* ``docs/assets/generated/device_table_testbackend_*.txt``: tables with device columns
  from the PrivateUse1 **test backend** in ``tests/backends/`` (a kineto plugin that
  runs on the CPU and reports each kernel as 5 µs), for "Reading a device table".
  They show the *shape* of a device table; their times are not Trainium or TPU times.

``<hw>`` is the backend the figures were measured on (``cpu`` on a machine without
an accelerator). Figures from a CPU are labelled as CPU figures wherever they
appear; they are not Trainium or TPU results.

Usage (from the repository root)::

    python scripts/make_plots.py                  # everything, on the best device here
    python scripts/make_plots.py --only rmsnorm   # one case study
    python scripts/make_plots.py --repeats 301    # more timing rounds on a noisy machine
    python scripts/make_plots.py --threads 8      # CPU figures with 8 torch threads (default 1)

The first ``torch.compile`` of each case study takes 10-30 s on a small CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import importlib.util
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "docs" / "assets"
GENERATED = ASSETS / "generated"

# Steps profiled per variant (compare()'s default is 3): self times are per-step
# averages over these, so that one noisy step does not set a published figure.
PROFILED_STEPS = 30

CASES = ("rmsnorm", "mlp", "attention", "samples", "training", "device_tables")


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` as a module (examples are scripts, not a package)."""
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"neuronprof_example_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def cpu_model() -> str:
    """Return the CPU's marketing name, e.g. ``"AMD EPYC 7R13 Processor"``."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=False).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name" and value.strip():
                return value.strip()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def _threads(n: int) -> str:
    return f"{n} torch thread" + ("" if n == 1 else "s")


def hardware_label(backend: str) -> str:
    """Describe where the figures were measured, for captions and image footers."""
    import torch

    if backend == "cuda":
        device = torch.cuda.get_device_name()
    elif backend == "cpu":
        device = f"CPU only: {cpu_model()}, {os.cpu_count()} logical CPUs, {_threads(torch.get_num_threads())}"
        if _malloc_settled():
            device += ", glibc malloc keeping freed memory"
    else:
        device = f"{backend} device, host CPU {cpu_model()}"
    return f"{device}; torch {torch.__version__}; {platform.system()}"


def device_and_options(requested: Optional[str]) -> tuple[str, dict[str, str]]:
    """Return the torch device to measure on and the matching ``compare()`` options."""
    import neuronprof.backends

    if requested is None:
        backend, _ = neuronprof.backends.resolve_backend("auto")
        requested = backend.name if backend.name in ("neuron", "tpu", "cuda") else "cpu"
    import torch

    dev = torch.device(requested)
    options = {"backend": dev.type}
    if dev.index is not None:
        options["core"] = str(dev.index)
    return requested, options


def compile_backend(device: str) -> str:
    import torch

    return "neuron" if torch.device(device).type == "neuron" else "inductor"


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)}")


def write_comparison(case: str, title: str, cmp: Any, hw: str, details: str) -> None:
    """Write a case study's chart, Markdown table and per-variant tables."""
    from neuronprof.render import render_comparison_figure

    tag = cmp.backend
    figure = render_comparison_figure(cmp, title=title)
    # The hardware goes into the image itself, so that the chart cannot be
    # mistaken for device figures once it is copied out of the page.
    note = textwrap.fill(f"Measured by scripts/make_plots.py on {hw}; {details}", 56)
    figure.text(0.5, 0.0, note, ha="center", va="top", fontsize=12)
    png = ASSETS / f"{case}_{tag}.png"
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png, format="png", dpi=110, bbox_inches="tight", facecolor="white")
    print(f"wrote {png.relative_to(ROOT)}")

    date = _dt.date.today().isoformat()
    # The spread says how far to trust a median: the interquartile range of the wall
    # samples as a share of the median, per variant (min-max is set by the one slowest
    # sample, which a shared machine always has; the table shows it too).
    spread = ", ".join(f"{r.name} {_iqr_share(r.wall_samples_us, r.wall_us):.0f} %" for r in cmp)
    caption = (
        f"*{title}: measured by `scripts/make_plots.py` with `neuronprof.compare()` on {hw}. "
        f"{details}; spread of the wall samples (interquartile range ÷ median): {spread}; {date}. "
        f"These are {tag.upper()} figures, not Trainium or TPU results.*"
    )
    write_text(GENERATED / f"{case}_{tag}.md", f"{_markdown(cmp)}\n\n{caption}\n")

    parts = []
    for row in cmp:
        parts.append(f'=== "{row.name}"\n\n    ```text\n{_indent(str(row.table))}\n    ```\n')
    write_text(GENERATED / f"{case}_{tag}_tables.md", "\n".join(parts))


def _iqr_share(samples: Sequence[float], median: float) -> float:
    """The interquartile range of ``samples`` (µs) as a percentage of ``median`` (µs)."""
    import statistics

    if len(samples) < 4 or median <= 0:
        return float("nan")
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return 100 * (q3 - q1) / median


def _markdown(cmp: Any) -> str:
    """The comparison's Markdown table, its footer lines as a list (Markdown would join them)."""
    table, footer = [], []
    for line in cmp.to_markdown().splitlines():
        if line.startswith("|"):
            # Spaces around the range's dash let a narrow page wrap "min – max" in its cell.
            table.append(line.replace("–", " – "))
        elif line.strip():
            footer.append(f"- {line.strip()}")
    return "\n".join(table) + ("\n\n" + "\n".join(footer) if footer else "")


def _indent(text: str) -> str:
    return "\n".join(("    " + line) if line else "" for line in text.splitlines())


def run_rmsnorm(device: str, options: dict[str, str], repeats: int, hw: str) -> None:
    import torch

    import neuronprof

    ex = load_example("rmsnorm")
    shape = (2048, 2048)
    x = torch.randn(*shape, device=device)
    weight = torch.randn(shape[-1], device=device)
    variants = {
        "naive": ex.rmsnorm_naive,
        "torch.rms_norm": ex.rmsnorm_fused,
        "torch.compile": torch.compile(ex.rmsnorm_naive, fullgraph=True, backend=compile_backend(device)),
    }
    with torch.no_grad():
        cmp = neuronprof.compare(variants, x, weight, repeats=repeats, quiet=True, active=PROFILED_STEPS, **options)
    write_comparison(
        "rmsnorm",
        "RMSNorm three ways",
        cmp,
        hw,
        f"x: {shape[0]}×{shape[1]} float32, {repeats} rounds, {PROFILED_STEPS} profiled steps",
    )


def run_mlp(device: str, options: dict[str, str], repeats: int, hw: str) -> None:
    import torch
    from torch import nn

    import neuronprof

    ex = load_example("linear_mlp")
    tokens, dim, hidden = 256, 512, 2048
    x = torch.randn(tokens, dim, device=device)
    linear = nn.Linear(dim, hidden).to(device)
    weight_t = linear.weight.detach().t()
    bias = linear.bias.detach()

    def matmul_add(x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, weight_t) + bias

    mlp = ex.make_mlp(dim, hidden).to(device).eval()
    compiled = torch.compile(mlp, fullgraph=True, backend=compile_backend(device))
    with torch.no_grad():
        layer = neuronprof.compare(
            {"matmul + add": matmul_add, "nn.Linear": linear},
            x,
            repeats=repeats,
            quiet=True,
            active=PROFILED_STEPS,
            **options,
        )
        block = neuronprof.compare(
            {"eager": mlp, "torch.compile": compiled}, x, repeats=repeats, quiet=True, active=PROFILED_STEPS, **options
        )
    details = f"x: {tokens}×{dim} float32, hidden {hidden}, {repeats} rounds, {PROFILED_STEPS} profiled steps"
    write_comparison("linear", "One linear layer", layer, hw, details)
    write_comparison("mlp", "Three-layer MLP", block, hw, details)


def run_attention(device: str, options: dict[str, str], repeats: int, hw: str) -> None:
    import torch

    import neuronprof

    ex = load_example("attention")
    shape = (4, 8, 512, 64)
    q, k, v = (torch.randn(*shape, device=device) for _ in range(3))
    variants = {
        "naive": ex.attention_naive,
        "F.scaled_dot_product_attention": ex.attention_sdpa,
        "torch.compile": torch.compile(ex.attention_naive, fullgraph=True, backend=compile_backend(device)),
    }
    with torch.no_grad():
        cmp = neuronprof.compare(variants, q, k, v, repeats=repeats, quiet=True, active=PROFILED_STEPS, **options)
    details = (
        f"q, k, v: {'×'.join(map(str, shape))} (batch, heads, seq, head_dim) float32, "
        f"{repeats} rounds, {PROFILED_STEPS} profiled steps"
    )
    write_comparison("attention", "Attention three ways", cmp, hw, details)


def run_samples(device: str, options: dict[str, str], repeats: int, hw: str) -> None:
    """Sample outputs shown on Getting started, Command line and the RMSNorm page."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import neuronprof

    tag = options["backend"]
    with tempfile.TemporaryDirectory() as tmp:
        # The same model and input as the first profile on Getting started.
        model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, 128)).to(device)
        x = torch.randn(16, 128, device=device)
        with neuronprof.session(output_dir=tmp, **options) as s:
            for _ in s.steps():
                model(x)
        write_text(GENERATED / f"first_profile_{tag}.txt", str(s.table()))

    report = subprocess.run(
        [sys.executable, "-m", "neuronprof", "doctor"], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    # A console transcript, prompt line first: the pages include it in a console block, whose
    # copy button copies the command without its `$ ` prompt (tests/test_docs.py checks it).
    write_text(GENERATED / f"doctor_{tag}.txt", "$ neuronprof doctor\n" + report)

    # The call tree of the naive RMSNorm: how `+ eps` becomes a copy.
    ex = load_example("rmsnorm")
    xs = torch.randn(64, 256, device=device)
    ws = torch.randn(256, device=device)
    ex.rmsnorm_naive(xs, ws)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        ex.rmsnorm_naive(xs, ws)
    lines: list[str] = []

    def walk(event: Any, prefix: str, last: bool, top: bool) -> None:
        lines.append(event.name if top else f"{prefix}{'└── ' if last else '├── '}{event.name}")
        children = list(event.cpu_children)
        for i, child in enumerate(children):
            walk(child, "" if top else prefix + ("    " if last else "│   "), i == len(children) - 1, False)

    for event in prof.events():
        if event.cpu_parent is None:
            walk(event, "", True, True)
    write_text(GENERATED / f"rmsnorm_naive_tree_{tag}.txt", "\n".join(lines))


def run_training(device: str, options: dict[str, str], repeats: int, hw: str) -> None:
    """The table and findings of examples/training_step.py, as the training-step page shows them."""
    tag = options["backend"]
    ex = load_example("training_step")
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            s = ex.train(device=device, active=5)
        finally:
            os.chdir(cwd)
    text = f"{s.table(sort_by='cpu_total', row_limit=20)}\n\n{s.table(row_limit=10)}\n\n{s.insights()}"
    # A console transcript, included in a console block like doctor_<tag>.txt above.
    write_text(GENERATED / f"training_step_{tag}.txt", f"$ python training_step.py\n{text}")


# The device tables come from the test backend in a fresh process each (torch renames
# PrivateUse1 once per process). The model is the one of "A first profile", with a backward.
# The test backend has no device memory: tensors stay on the CPU, and its kineto plugin
# reports one device kernel per operator, as a device's profiler would.
_DEVICE_TABLE_CODE = """
import torch
import neuronprof
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, 128))
x = torch.randn(16, 128)
with neuronprof.session(backend=DEVICE, output_dir=OUT) as s:
    for _ in s.steps():
        model(x).sum().backward()
report(str(s.table(row_limit=12)))
"""

DEVICE_TABLES = {
    # file suffix: (run_script backend, neuronprof backend, environment, label)
    "neuron_correlating": (
        "neuron",
        "neuron",
        {"NEURONPROF_STANDIN_NEURON_BUILD": "correlating"},
        "TorchNeuron stand-in, correlating build (correlate_device_time)",
    ),
    "neuron_documented": (
        "neuron",
        "neuron",
        {"NEURONPROF_STANDIN_NEURON_BUILD": "documented"},
        "TorchNeuron stand-in, documented build (Neuron 2.30-2.32 API)",
    ),
    "tpu": ("tpu", "tpu", {}, "TorchTPU stand-in (device kernels not linked to ops)"),
}


def run_device_tables(device: str, options: dict[str, str], repeats: int, hw: str) -> None:
    """Device-column tables from the PrivateUse1 test backend, labelled as such."""
    sys.path.insert(0, str(ROOT / "tests" / "backends"))
    from run_in_subprocess import check, result, run_script

    for suffix, (backend, dev, env, label) in DEVICE_TABLES.items():
        with tempfile.TemporaryDirectory() as tmp:
            code = _DEVICE_TABLE_CODE.replace("DEVICE", repr(dev)).replace("OUT", repr(tmp))
            proc = check(run_script(code, backend=backend, env=env, cwd=tmp))
            # The output folder was a temporary one: show the default instead of a machine path.
            table = result(proc).replace(tmp, "neuronprof_output")
        header = (
            f"# TEST BACKEND, not Trainium/TPU output: {label}.\n"
            "# tests/backends/ plugin on the CPU; every device kernel is reported as 5 us.\n"
        )
        write_text(GENERATED / f"device_table_testbackend_{suffix}.txt", header + table)


# glibc malloc tunables (see mallopt(3)): serve large blocks from the heap and never
# hand freed memory back to the kernel, so repeated calls reuse the same pages.
_MALLOC_SETTINGS = {"MALLOC_MMAP_THRESHOLD_": str(1 << 32), "MALLOC_TRIM_THRESHOLD_": str(1 << 32)}


def _malloc_settled() -> Optional[bool]:
    """Whether the allocator settings are in force; None where they do not apply (not glibc)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    return all(os.environ.get(k) == v for k, v in _MALLOC_SETTINGS.items())


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help=f"comma-separated subset of: {', '.join(CASES)}")
    parser.add_argument("--device", help="torch device to measure on (default: the best one available)")
    parser.add_argument(
        "--repeats", type=int, default=101, help="interleaved timing rounds per comparison (default: 101)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default: 1; one thread keeps CPU figures steady on a shared machine)",
    )
    args = parser.parse_args(argv)
    if argv is None and _malloc_settled() is False:
        # Re-run with glibc's allocator told to keep freed memory (the settings are
        # read only at process start). Without it every call of a case study that
        # allocates multi-MB tensors gets fresh pages from the kernel, and on a
        # virtual machine those page faults make a call take 2-10x its usual time at
        # random: the medians then move from run to run. Nothing is changed for
        # the code measured; the caption of each figure says so.
        env = dict(os.environ, **_MALLOC_SETTINGS)
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]], env)
    chosen = CASES if not args.only else tuple(c.strip() for c in args.only.split(","))
    unknown = [c for c in chosen if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)}; choose from {', '.join(CASES)}")

    # A fresh compile cache, so that the "First call" column shows a cold
    # torch.compile, as a reader's first run would.
    cache = tempfile.TemporaryDirectory(prefix="neuronprof-make-plots-inductor-")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", cache.name)
    import matplotlib

    matplotlib.use("Agg")
    import neuronprof

    if any(c != "samples" for c in chosen) and not callable(getattr(neuronprof, "compare", None)):
        print("neuronprof.compare() is not available in this checkout", file=sys.stderr)
        return 1
    import torch

    torch.set_num_threads(args.threads)
    device, options = device_and_options(args.device)
    hw = hardware_label(options["backend"])
    print(f"measuring on {device}: {hw}")
    runners = {
        "rmsnorm": run_rmsnorm,
        "mlp": run_mlp,
        "attention": run_attention,
        "samples": run_samples,
        "training": run_training,
        "device_tables": run_device_tables,
    }
    for case in chosen:
        runners[case](device, options, args.repeats, hw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
