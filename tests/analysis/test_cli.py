"""The summarize / diff / roofline commands: output formats, and no torch anywhere on their import path."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from trace_builders import op, write_trace

import neuronprof
from neuronprof.analysis import Roofline, TraceDiff
from neuronprof.analysis.cli import main as analysis_main
from neuronprof.model import Table

_SRC = str(Path(neuronprof.__file__).resolve().parents[1])

# Run in a fresh interpreter where `import torch` fails, as on a laptop without it.
_BLOCK_TORCH = textwrap.dedent(
    """
    import sys

    class _NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("torch is blocked in this test")
            return None

    sys.meta_path.insert(0, _NoTorch())
    """
)


def _run_without_torch(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCK_TORCH + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": _SRC, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def test_analysis_package_and_its_commands_never_import_torch(cuda_trace: Path, tmp_path: Path) -> None:
    result = _run_without_torch(
        f"""
        import neuronprof.analysis as analysis
        from neuronprof.analysis.cli import main
        trace = {str(cuda_trace)!r}
        codes = [
            main(["summarize", trace, "--format", "json"]),
            main(["diff", trace, trace]),
            main(["roofline", trace, "--device", "h100"]),
        ]
        analysis.roofline(trace, "trn2")
        assert "torch" not in sys.modules, "torch was imported"
        print("codes", codes)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "codes [0, 0, 0]" in result.stdout


def test_neuronprof_command_summarize_never_imports_torch(cuda_trace: Path) -> None:
    # The whole chain: neuronprof/__init__ -> neuronprof.cli -> neuronprof.analysis.
    result = _run_without_torch(
        f"""
        from neuronprof.cli import main
        code = main(["summarize", {str(cuda_trace)!r}, "--limit", "3"])
        assert "torch" not in sys.modules, "torch was imported"
        missing = main(["summarize", "/no/such/trace.json"])
        print("codes", code, missing)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "codes 0 2" in result.stdout
    assert "sm90_gemm_bf16" in result.stdout
    assert "Traceback" not in result.stderr


def test_summarize_without_msgspec_uses_the_pure_python_reader(cuda_trace: Path) -> None:
    result = _run_without_torch(
        f"""
        class _NoMsgspec:
            def find_spec(self, name, path=None, target=None):
                if name == "msgspec" or name.startswith("msgspec."):
                    raise ImportError("msgspec is blocked in this test")
                return None

        sys.meta_path.insert(0, _NoMsgspec())
        from neuronprof.cli import main
        code = main(["summarize", {str(cuda_trace)!r}, "--format", "json"])
        assert "msgspec" not in sys.modules and "torch" not in sys.modules
        print("code", code)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "code 0" in result.stdout and '"sm90_gemm_bf16"' in result.stdout


def test_summarize_formats(cuda_trace: Path, capsys) -> None:
    assert analysis_main(["summarize", str(cuda_trace), "--limit", "2"]) == 0
    text = capsys.readouterr().out
    assert "Self CUDA (µs)" in text and "showing 2 of" in text and "2 profiled steps" in text

    assert analysis_main(["summarize", str(cuda_trace), "--format", "json", "--by", "shape"]) == 0
    table = Table.from_json(capsys.readouterr().out)
    assert table.device_label == "CUDA" and table.steps == 2
    assert any(r.input_shapes for r in table.rows)

    assert analysis_main(["summarize", str(cuda_trace), "--format", "csv", "--device-only", "--sort", "calls"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows and all(float(r["self_device_us"] or 0) > 0 or float(r["device_total_us"] or 0) > 0 for r in rows)

    assert analysis_main(["summarize", str(cuda_trace), "--format", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("| Name |")


def test_diff_and_roofline_json_round_trip(cuda_trace: Path, tmp_path: Path, capsys) -> None:
    assert analysis_main(["diff", str(cuda_trace), str(cuda_trace), "--format", "json"]) == 0
    d = TraceDiff.from_json(capsys.readouterr().out)
    assert d.metric == "device" and all(r.delta_us == 0 for r in d.rows)

    assert analysis_main(["roofline", str(cuda_trace), "--device", "h100", "--format", "json"]) == 0
    rl = Roofline.from_json(capsys.readouterr().out)
    assert rl.device.name == "h100" and rl.time_source == "device"
    assert [r.name for r in rl.rows] == ["aten::addmm"]


@pytest.mark.slow
def test_roofline_custom_peaks_and_plot(cuda_trace: Path, tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    png, svg = tmp_path / "r.png", tmp_path / "r.svg"
    argv = ["roofline", str(cuda_trace), "--peak-flops", "100T", "--peak-bw", "2e12", "--plot", str(png)]
    assert analysis_main(argv) == 0
    out = capsys.readouterr().out
    assert "100 TFLOP/s, 2000 GB/s; ridge point 50.0 FLOP/byte" in out
    assert png.read_bytes().startswith(b"\x89PNG")
    assert analysis_main(["roofline", str(cuda_trace), "--plot", str(svg), "--format", "markdown"]) == 0
    assert b"<svg" in svg.read_bytes()[:500]


def test_limit_keeps_totals_over_every_row(tmp_path: Path, capsys) -> None:
    a = write_trace(tmp_path / "a.json", [op("x", 0, 10), op("y", 20, 30), op("z", 60, 1)])
    b = write_trace(tmp_path / "b.json", [op("x", 0, 20), op("y", 20, 30)])
    assert analysis_main(["diff", str(a), str(b), "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "showing 1 of 3 rows" in out
    assert "total: A 41.0 µs, B 50.0 µs" in out
    assert analysis_main(["diff", str(a), str(b), "--format", "json", "--limit", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["rows"]) == 1 and data["total_rows"] == 3
