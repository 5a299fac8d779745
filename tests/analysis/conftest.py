"""Fixtures for the analysis tests: a hand-made CUDA trace, and real torch.profiler traces made once."""

from __future__ import annotations

from pathlib import Path

import pytest
from trace_builders import TorchTraces, cuda_trace_events, write_trace


@pytest.fixture
def cuda_trace(tmp_path: Path) -> Path:
    """A hand-made CUDA trace file (see ``cuda_trace_events``)."""
    return write_trace(
        tmp_path / "cuda.pt.trace.json",
        cuda_trace_events(),
        deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9}],
    )


@pytest.fixture(scope="session")
def torch_traces(tmp_path_factory: pytest.TempPathFactory) -> TorchTraces:
    """Real traces from torch.profiler on CPU (made once; torch is only needed here)."""
    pytest.importorskip("torch")
    return TorchTraces(tmp_path_factory.mktemp("torch_traces"))


@pytest.fixture(params=["fast", "stdlib"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the msgspec reader (when installed) and with the pure-Python one.

    The fast reader reads every piece column by column and nests every timeline with
    numpy, as it does a large trace, however small the test's trace.
    """
    if request.param == "fast":
        pytest.importorskip("msgspec")
        from neuronprof.analysis.trace import _nesting_columns, _reader_columns

        monkeypatch.setattr(_reader_columns, "COLUMNS_MIN", 0)
        monkeypatch.setattr(_reader_columns, "COLUMNS_FILE", 0)
        monkeypatch.setattr(_nesting_columns, "COLUMNS_MIN", 0)
        monkeypatch.setattr(_nesting_columns, "COLUMNS_MIN_COLD", 0)
    else:
        import neuronprof.analysis._typed_reader as jsonstream

        monkeypatch.setattr(jsonstream, "msgspec", None)
    return str(request.param)
