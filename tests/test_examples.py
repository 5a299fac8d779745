"""The case studies in examples/ and `neuronprof demo`, which runs them from an installed package."""

from __future__ import annotations

import argparse
import ast
import os
import runpy
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from neuronprof import _demo

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FILES = {"rmsnorm": "rmsnorm.py", "mlp": "linear_mlp.py", "attention": "attention.py"}

# Small enough that each example runs in a second or two on a CPU.
TINY = {
    "rmsnorm": ["--shape", "4x32"],
    "mlp": ["--tokens", "4", "--dim", "8", "--hidden", "16"],
    "attention": ["--batch", "1", "--heads", "2", "--seq", "8", "--head-dim", "4"],
}
COMMON = ["--device", "cpu", "--repeats", "1"]


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[dict[str, Any]]]:
    """Stand in for torch.compile: test_compare covers a real compile; here its cost would dominate."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    calls: list[dict[str, Any]] = []

    def fake_compile(fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        calls.append(kwargs)
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    yield calls


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # compare() profiles into ./neuronprof_output by default.
    monkeypatch.chdir(tmp_path)
    return tmp_path


def load(demo: str) -> dict[str, Any]:
    return runpy.run_path(str(EXAMPLES / FILES[demo]), run_name="example_under_test")


@pytest.mark.parametrize("demo", sorted(FILES))
def test_example_is_self_contained(demo: str) -> None:
    tree = ast.parse((EXAMPLES / FILES[demo]).read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    stdlib = getattr(sys, "stdlib_module_names", None)
    if stdlib is None:
        pytest.skip("needs Python >= 3.10 to tell the standard library apart")
    third_party = {name for name in imported if name not in stdlib and name != "__future__"}
    assert third_party <= {"torch", "neuronprof"}
    assert "TORCHINDUCTOR_CACHE_DIR" not in (EXAMPLES / FILES[demo]).read_text(encoding="utf-8")
    assert callable(load(demo)["main"])


@pytest.mark.slow
def test_rmsnorm_example(compiled: list[dict[str, Any]], in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = in_tmp / "rms.png"
    assert load("rmsnorm")["main"]([*COMMON, *TINY["rmsnorm"], "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "naive (baseline)" in out and "torch.rms_norm" in out and "torch.compile" in out
    assert "aten::rsqrt" in out  # each variant's own table is printed too
    # What to fix first, per variant: the naive chain of six ops, and its fused form.
    naive = out.split("== naive: what to fix first ==")[1].split("==")[0]
    assert "[unfused_chain] 6 elementwise ops" in naive and "torch.rms_norm" in naive
    # `+ EPS` is a Python number's promotion; without recorded dtypes it looks like a conversion, so no claim.
    assert "[dtype_conversion]" not in naive and "record_shapes=True would tell" in naive
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert compiled == [{"fullgraph": True, "backend": "inductor"}]


def test_rmsnorm_naive_is_six_ops(in_tmp: Path) -> None:
    from neuronprof import compare

    example = load("rmsnorm")
    x, w = torch.randn(4, 8), torch.randn(8)
    variants = {"naive": example["rmsnorm_naive"], "fused": example["rmsnorm_fused"]}
    cmp = compare(variants, x, w, repeats=1, quiet=True, backend="cpu")
    assert cmp.row("naive").op_calls == 6
    assert cmp.row("fused").op_calls == 1
    torch.testing.assert_close(example["rmsnorm_naive"](x, w), example["rmsnorm_fused"](x, w))


@pytest.mark.slow
def test_linear_mlp_example(compiled: list[dict[str, Any]], in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = in_tmp / "mlp.svg"
    assert load("mlp")["main"]([*COMMON, *TINY["mlp"], "--no-tables", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "matmul + add (baseline)" in out and "nn.Linear" in out
    assert "eager (baseline)" in out and "torch.compile" in out
    assert (in_tmp / "mlp-linear.svg").is_file() and (in_tmp / "mlp-mlp.svg").is_file()
    assert compiled == [{"fullgraph": True, "backend": "inductor"}]


@pytest.mark.slow
def test_attention_example(compiled: list[dict[str, Any]], in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert load("attention")["main"]([*COMMON, *TINY["attention"]]) == 0
    out = capsys.readouterr().out
    assert "F.scaled_dot_product_attention" in out and "torch.compile" in out
    example = load("attention")
    q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
    torch.testing.assert_close(example["attention_naive"](q, k, v), example["attention_sdpa"](q, k, v))


def test_bad_shape_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        load("rmsnorm")["main"](["--shape", "4xfour"])
    assert "write it like 4096x4096" in capsys.readouterr().err


# -- neuronprof demo ---------------------------------------------------------------------------


def demo_parser() -> argparse.ArgumentParser:
    from neuronprof.cli import build_parser

    return build_parser()


@pytest.mark.parametrize("demo", _demo.DEMOS)
def test_demo_finds_the_examples_in_a_checkout(demo: str) -> None:
    assert _demo.example_path(demo) == EXAMPLES / FILES[demo]


def test_demo_refuses_unknown_case() -> None:
    with pytest.raises(ValueError, match="rmsnorm, mlp, attention"):
        _demo.example_path("resnet")
    with pytest.raises(SystemExit):
        demo_parser().parse_args(["demo", "resnet"])


@pytest.mark.parametrize("demo", _demo.DEMOS)
@pytest.mark.slow
def test_demo_runs_each_case(
    demo: str, compiled: list[dict[str, Any]], in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = demo_parser().parse_args(["demo", demo, *COMMON, *TINY[demo], "--no-tables"])
    assert args.func(args) == 0
    assert "Speedup" in capsys.readouterr().out


def test_demo_defaults_to_rmsnorm_and_forwards_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = demo_parser()
    assert parser.parse_args(["demo"]).demo == "rmsnorm"
    args = parser.parse_args(["demo", "attention", "--help"])
    with pytest.raises(SystemExit) as info:
        args.func(args)
    assert info.value.code == 0
    assert "usage: neuronprof demo attention" in capsys.readouterr().out


def test_cli_has_demo() -> None:
    from neuronprof.cli import build_parser

    args = build_parser().parse_args(["demo", "mlp", "--tokens", "4"])
    assert (args.demo, args.demo_args) == ("mlp", ["--tokens", "4"])


@pytest.mark.slow
def test_wheel_ships_the_examples(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", str(ROOT), "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if build.returncode != 0 and "hatchling" in build.stderr and "No matching distribution" in build.stderr:
        pytest.skip("the build backend (hatchling) cannot be downloaded here")
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("neuronprof-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for file in FILES.values():
            assert f"neuronprof/_examples/{file}" in names
            assert zf.read(f"neuronprof/_examples/{file}") == (EXAMPLES / file).read_bytes()
        assert "neuronprof/_demo.py" in names
        zf.extractall(tmp_path / "site")
    # Installed from the wheel, demo finds the packaged copies (no checkout around them).
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    found = subprocess.run(
        [sys.executable, "-c", "from neuronprof import _demo; print(_demo.example_path('attention'))"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()) == tmp_path / "site" / "neuronprof" / "_examples" / "attention.py"
