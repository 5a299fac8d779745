"""A CPU session imports only what it runs: ``neuronprof.analysis`` loads its parts on first use."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import neuronprof
import neuronprof.analysis as analysis
from neuronprof._lazy import defining_modules

_SRC = Path(neuronprof.__file__).resolve().parents[1]

# The parts a CPU table never needs: Neuron's profile reader, the findings, the roofline.
_NOT_ON_A_CPU_TABLE = ("neuronprof.analysis.neuron", "neuronprof.analysis.insights", "neuronprof.analysis._roofline")


@pytest.mark.slow
def test_a_cpu_session_table_and_export_import_no_neuron_reader_findings_or_roofline(tmp_path: Path) -> None:
    code = f"""
        import sys
        import torch
        import neuronprof

        with neuronprof.session(backend="cpu") as s:
            for _ in s.steps():
                torch.ones(8) @ torch.ones(8)
        table = s.table()
        assert any(row.name == "aten::matmul" for row in table.rows), table
        written = s.export({str(tmp_path / "trace.json")!r})
        assert written.exists()
        NOT = {_NOT_ON_A_CPU_TABLE!r}
        loaded = sorted(m for m in sys.modules if m.startswith("neuronprof"))
        print("loaded:", " ".join(loaded))
        print("unwanted:", [m for m in loaded if any(m == n or m.startswith(n + ".") for n in NOT)])
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(_SRC), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "unwanted: []" in result.stdout, result.stdout
    # The check sees what it claims to: the table came through the analysis package's trace aggregator.
    assert "neuronprof.analysis.trace" in result.stdout


_WHERE = defining_modules(analysis.__name__, analysis._MODULES)


def test_every_public_name_of_analysis_resolves_to_its_defining_module() -> None:
    for name in analysis.__all__:
        where = _WHERE[name]
        assert getattr(analysis, name) is getattr(importlib.import_module(where), name), name
    assert set(_WHERE) == set(analysis.__all__)
    assert set(analysis.__all__) <= set(dir(analysis))
    try:
        analysis.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_the_names_type_checkers_see_are_the_names_imported_on_use() -> None:
    # The TYPE_CHECKING imports (for mypy and the API reference) and the map __getattr__ reads
    # must name the same things from the same modules.
    tree = ast.parse((_SRC / "neuronprof" / "analysis" / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))
    typed = {a.name: node.module for node in block.body if isinstance(node, ast.ImportFrom) for a in node.names}
    assert typed == _WHERE
