"""benchmarks/scale.py: its arithmetic on hand-built figures, and a run end to end at a tiny size.

No figure is judged here (timings belong to the benchmark itself): the tests check that
the growth fit, the ratios and the README block are computed as documented, and that a
run prints a row for every contender, ratio and command.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from neuronprof._executors import cores
from neuronprof.cli import spare_blas_threads
from neuronprof.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "scale.py"


@pytest.fixture(scope="module")
def scale() -> ModuleType:
    # scale.py imports its siblings (summarize.py's trace writer) as top-level modules,
    # as it does when run as a script; they are taken out of sys.modules again after.
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("scale_benchmark", BENCH)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while it runs
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH.parent))
        for name in ("summarize", "neuron_profile", "scale_benchmark"):
            sys.modules.pop(name, None)
    return module


def _size(label: str, mb: float, size: int) -> Any:
    return SimpleNamespace(label=label, mb=mb, size=size, rank_size=size)


def test_growth_is_the_slope_of_log_time_less_the_fixed_cost(scale: ModuleType) -> None:
    fig, fixed = scale.Figures, scale.FIXED
    sizes = [_size(f"{mb} MB", mb, mb * 10**6) for mb in (10, 100, 600)]
    by_size = {
        i.label: {
            "linear": fig(1.0, 0.5 + 3e-8 * i.size, 0),
            "square": fig(1.0, 0.5 + 1e-15 * i.size**2, 0),
            # The fixed cost of each size is its own: it moves with the load of the machine.
            fixed + "linear": fig(0.1, 0.5, 0),
            fixed + "square": fig(0.1, 0.5, 0),
        }
        for i in sizes
    }
    assert scale.growth(sizes, by_size, "linear") == pytest.approx(1.0)
    assert scale.growth(sizes, by_size, "square") == pytest.approx(2.0)
    by_size["10 MB"] = {k: fig(1.0, v.cpu + 0.2, 0) for k, v in by_size["10 MB"].items()}
    assert scale.growth(sizes, by_size, "linear") == pytest.approx(1.0)
    # One size, or a time not above the fixed cost: no exponent rather than a made-up one.
    assert scale.growth(sizes[:1], by_size, "linear") is None
    for i in sizes[1:]:
        by_size[i.label][fixed + "linear"] = fig(0.1, 100.0, 0)
    assert scale.growth(sizes, by_size, "linear") is None
    assert scale._growth_cell(1.05, True) == "1.05 PASS"
    assert scale._growth_cell(0.85, True) == "0.85 MISS"


def test_growth_is_judged_on_the_sizes_the_ratios_are_judged_on(scale: ModuleType) -> None:
    # Under --judge-from the fixed cost is most of a run and small files take another reader: a size
    # there read at three times the cost per byte must not make the judged exponent, only the one beside.
    fig, fixed = scale.Figures, scale.FIXED
    sizes = [_size(f"{mb} MB", mb, mb * 10**6) for mb in (10, 100, 600)]
    by_size = {i.label: {"cmd": fig(1.0, 0.1 + 4e-9 * i.size, 0), fixed + "cmd": fig(0.1, 0.1, 0)} for i in sizes}
    by_size["10 MB"]["cmd"] = fig(1.0, 0.1 + 12e-9 * 10**7, 0)
    g = scale.growths(sizes, by_size, ["cmd"], 100)
    assert g.judged["cmd"] == pytest.approx(1.0)
    assert g.every is not None and g.every["cmd"] < 0.8
    assert scale.growths(sizes[1:], by_size, ["cmd"], 100).every is None  # every size judged: no second fit
    assert scale.growths(sizes, by_size, ["cmd"], 0).judged["cmd"] == pytest.approx(g.every["cmd"])
    missed = scale.print_growth([("cmd", "the command")], g, 100)
    assert missed == []
    missed = scale.print_growth([("cmd", "the command")], scale.growths(sizes, by_size, ["cmd"], 0), 0)
    assert missed == ["growth of the command"]


def test_a_rank_folders_fixed_cost_starts_the_workers_its_large_runs_start(scale: ModuleType, tmp_path: Path) -> None:
    # The tiny folder is read in the process unless --jobs is given: its run would leave the
    # workers' start-up out of the fixed cost, and count it as growth.
    tiny = SimpleNamespace(trace=tmp_path / "t.json", sibling=tmp_path / "s.json", neuron=tmp_path, ranks=tmp_path)
    runs = scale.contenders(tiny, tmp_path, frozenset({"summarize", "report", "typed"}), False)
    small = SimpleNamespace(size=10 << 20, rank_size=10 << 20)
    fixed = {c.key: scale._fixed_cost(c, 4, small) for c in runs}
    assert set(fixed) == {"typed", "summarize", "report", "ranks summarize", "ranks report"}
    for key, c in fixed.items():
        assert c.key == scale.FIXED + key
        assert ("--jobs" in c.argv) == key.startswith("ranks ")
        assert not c.argv[1].startswith(scale.NUMPY_FIRST)  # 10 MB: read without numpy
    jobs = fixed["ranks report"].argv
    assert jobs[jobs.index("--jobs") + 1] == str(min(4, cores()))
    # From 16 MiB a file is read into columns with numpy: a neuronprof command's fixed cost imports it too,
    # a rank folder's when each of its files is that large; a reference's never.
    large = SimpleNamespace(size=100 << 20, rank_size=4 * (20 << 20))
    numpy_first = {c.key for c in runs if scale._fixed_cost(c, 4, large).argv[1].startswith(scale.NUMPY_FIRST)}
    assert numpy_first == {"summarize", "report", "ranks summarize", "ranks report"}
    folder = next(c for c in runs if c.key == "ranks report")
    eighths = SimpleNamespace(size=100 << 20, rank_size=100 << 20)  # 8 rank files of 12.5 MiB: no numpy
    assert scale._fixed_cost(folder, 8, eighths).argv[1] == folder.argv[1]


def test_a_fixed_cost_imports_numpy_as_the_command_line_does(
    scale: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Imported plainly, numpy's OpenBLAS threads spin on after the import; the command line's own
    # import has them told to sleep first. A fixed cost that imports it otherwise is too high by
    # that spin, and the growth fitted on the rest too steep.
    tiny = SimpleNamespace(trace=tmp_path / "t.json", sibling=tmp_path / "s.json", neuron=tmp_path, ranks=tmp_path)
    run = next(c for c in scale.contenders(tiny, tmp_path, frozenset({"summarize"}), False) if c.key == "summarize")
    code = scale._fixed_cost(run, 1, SimpleNamespace(size=100 << 20, rank_size=100 << 20)).argv[1]
    assert code.endswith(run.argv[1])
    # What the fixed-cost run has set when numpy loads, in a process of its own ...
    probe = code[: -len(run.argv[1])] + "import os\nprint(os.environ.get('OPENBLAS_THREAD_TIMEOUT'))"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    fixed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    # ... against what the command line sets before its own import of numpy.
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    monkeypatch.delitem(sys.modules, "numpy", raising=False)
    spare_blas_threads()
    assert fixed.stdout.split()[-1] == os.environ["OPENBLAS_THREAD_TIMEOUT"]


def test_ratios_count_cpu_per_file_read_and_memory_above_the_baseline(scale: ModuleType) -> None:
    fig, mib = scale.Figures, 2**20
    runs = {
        c.key: c
        for c in scale.contenders(
            SimpleNamespace(
                trace=Path("t.json"), sibling=Path("s.json"), neuron=Path("n"), ranks=None, label="100 MB", mb=100
            ),
            Path("out"),
            frozenset(("typed", "summarize", "advise", "diff")),
            hta=False,
        )
    }
    assert set(runs) == {"typed", "summarize", "advise", "diff"} and runs["diff"].reads == 2
    baseline = 20 * mib
    by_size = {
        "100 MB": {
            "typed": fig(1.0, 1.0, 200 * mib),
            "summarize": fig(3.0, 3.0, 70 * mib),
            "advise": fig(6.0, 6.0, 170 * mib),
            "diff": fig(6.0, 6.0, 70 * mib),
        }
    }
    rows = {
        r.name: r.values["100 MB"] for r in scale.ratios([_size("100 MB", 100, 100 * 10**6)], by_size, runs, baseline)
    }
    assert rows["summarize CPU / typed decode CPU"] == pytest.approx(3.0)
    assert rows["summarize memory / file size"] == pytest.approx(50 * mib / 10**8)
    assert rows["advise CPU / summarize's"] == pytest.approx(2.0)
    assert rows["advise memory / summarize's"] == pytest.approx(3.0)
    assert rows["diff CPU per file / summarize's"] == pytest.approx(1.0)
    assert rows["diff memory / summarize's"] == pytest.approx(1.0)
    assert scale._cell(3.0, 2.0, True) == "3.00x MISS"
    assert scale._cell(1.5, 1.5, True) == "1.50x PASS"
    assert scale._cell(3.0, 2.0, False) == "3.00x"


def test_a_run_counts_only_when_it_ends_with_its_expected_status(scale: ModuleType) -> None:
    code = "import sys; print('oops', file=sys.stderr); sys.exit(2)"
    figures, why = scale.run_once(("-c", code), _env())
    assert figures is None and why.startswith("exit status 2") and "oops" in why
    # `neuron` refusing a kineto trace ends with status 2: that is the run to measure.
    figures, why = scale.run_once(("-c", code), _env(), 2)
    assert why == "" and figures.cpu > 0 and figures.rss > 0


def test_a_child_takes_the_cpu_time_of_its_first_read_under_the_inputs(scale: ModuleType, tmp_path: Path) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "trace.json").write_text("{}", encoding="utf-8")
    elsewhere = tmp_path / "other.json"
    elsewhere.write_text("{}", encoding="utf-8")
    # Files elsewhere are no input; the first open under the inputs' folder is the first read.
    code = f"open({str(elsewhere)!r}).read(); sum(range(10**6)); open({str(inputs / 'trace.json')!r}).read()"
    env = {**_env(), scale._INPUTS: str(inputs)}
    figures, why = scale.run_once(("-c", code), env)
    assert why == "" and figures.first_read is not None and 0 < figures.first_read <= figures.cpu
    figures, _ = scale.run_once(("-c", f"open({str(elsewhere)!r}).read()"), env)
    assert figures.first_read is None  # never read an input
    figures, _ = scale.run_once(("-c", code), _env())
    assert figures.first_read is None  # not a start-up run: no hook


def test_start_up_judges_help_an_argument_error_and_the_first_read_not_the_whole_run(scale: ModuleType) -> None:
    fig, ok = scale.Figures, scale.STARTUP_LIMIT_MS / 1000 * 0.9
    tiny = fig(0.5, 0.4, 0, first_read=ok)  # the whole run is over the target, its start-up is not
    assert scale.Startup("summarize", fig(0.1, ok, 0), fig(0.1, ok, 0), tiny).ok
    late = fig(0.5, 0.4, 0, first_read=ok * 1.2)
    assert not scale.Startup("summarize", fig(0.1, ok, 0), fig(0.1, ok, 0), late).ok
    never = fig(0.5, 0.4, 0)  # the hook saw no read: not a pass
    assert not scale.Startup("summarize", fig(0.1, ok, 0), fig(0.1, ok, 0), never).ok
    assert not scale.Startup("doctor", fig(0.1, ok, 0), fig(0.1, ok * 1.2, 0), None).ok
    doctor = scale.Startup("doctor", fig(0.1, ok, 0), fig(0.1, ok, 0), None)
    assert doctor.ok and scale._startup_cells(doctor)[2:] == ["-", "-"]


def test_readme_block_is_replaced_between_its_markers_only(scale: ModuleType, tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{scale.README_START}\nold\n{scale.README_END}\nafter\n", encoding="utf-8")
    scale.rewrite_readme(readme, "| new |")
    assert readme.read_text(encoding="utf-8") == f"before\n{scale.README_START}\n| new |\n{scale.README_END}\nafter\n"


def test_a_readme_without_the_markers_is_refused_before_any_work(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("no block\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--traces", str(tmp_path / "traces"), "--readme", str(readme)],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert proc.returncode == 2
    assert "has no <!-- scale-benchmark:start --> ... <!-- scale-benchmark:end --> block" in proc.stderr
    assert not (tmp_path / "traces").exists()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
def test_a_tiny_run_prints_every_row_ratio_and_table(scale: ModuleType, tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{scale.README_START}\nold\n{scale.README_END}\nafter\n", encoding="utf-8")
    args = ["--sizes", "0.4", "--rounds", "1", "--ranks", "2", "--judge-from", "0", "--markdown"]
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args, "--traces", str(tmp_path / "traces"), "--readme", str(readme)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    number = r"\d+\.\d+"
    labels = [
        "json.load + per-name sums",
        "msgspec typed decode + per-name sums",
        *(f"neuronprof {name}" for name in ("summarize", "advise", "report", "roofline")),
        "neuronprof diff (against a sibling)",
        "neuronprof check (against a sibling)",
        "neuronprof neuron (as framework trace)",
        "neuronprof neuron (the trace: refused)",
        *(f"rank folder: neuronprof {name}" for name in ("summarize", "advise", "report", "roofline")),
    ]
    figures, _, rest = out.partition("== ratios")
    for label in labels:  # wall, CPU (the least), its median and spread, the fixed cost, peak RSS, above the baseline
        row = rf"^{re.escape(label)} +{number} +{number} +{number} +\d+% +{number} +\d+ +-?\d+$"
        assert re.search(row, figures, re.M), label
    assert "HTA TraceAnalysis" in figures or "HTA is not installed" in out
    ratios, _, rest = rest.partition("== growth exponent")
    names = ["summarize CPU / typed decode CPU"]
    names += [
        f"{where}{c} CPU / summarize's" for where in ("", "rank folder: ") for c in ("advise", "report", "roofline")
    ]
    names += ["neuron CPU / summarize's", "neuron, refusing the trace CPU / summarize's"]
    names += ["diff CPU per file / summarize's", "check CPU per file / summarize's"]
    for name in names:
        assert re.search(rf"^{re.escape(name)} +<= [\d.]+x +{number}x (PASS|MISS)$", ratios, re.M), name
    memory = ["summarize memory / file size"]
    memory += [f"{c} memory / summarize's" for c in ("advise", "report", "diff", "check", "roofline", "neuron")]
    memory.append("neuron, refusing the trace memory / summarize's")
    memory += [f"rank folder: {c} memory / summarize's" for c in ("advise", "report", "roofline")]
    for name in memory:  # n/a where summarize's own peak is not above the baseline at this size
        assert re.search(rf"^{re.escape(name)} +<= [\d.]+x +({number}x (PASS|MISS)|n/a)$", ratios, re.M), name
    assert re.search(rf"^rank folder summarize wall / the trace's +- +{number}x$", ratios, re.M)
    growth, _, startup = rest.partition("== start-up")
    for label in labels:
        assert re.search(rf"^{re.escape(label)} +n/a$", growth, re.M), label  # one size: no exponent
    for name in COMMANDS:
        assert re.search(rf"^{name} +\d+ +\d+ +(\d+ +\d+ +\d+|- +- +-) +(PASS|MISS)$", startup, re.M), name
    block = readme.read_text(encoding="utf-8")
    assert block.startswith(f"before\n{scale.README_START}\nMeasured by `python benchmarks/scale.py --sizes 0.4`")
    assert block.endswith(f"{scale.README_END}\nafter\n") and "\nold\n" not in block
    for line in (
        "| neuronprof summarize | ",
        "| advise / summarize: CPU; memory | <= 1.5x | ",
        "| `neuronprof doctor` |",
    ):
        assert line in block and line in out, line
