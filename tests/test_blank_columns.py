"""A column left blank by a known torch limitation comes with a note that says so."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import neuronprof  # noqa: E402
from neuronprof._config import _torch_supports_all_threads  # noqa: E402

NOTE = "no memory per op: with profile_all_threads=True"


def _memory_session(tmp_path: Path, *, all_threads: bool) -> neuronprof.Session:
    with neuronprof.session(
        backend="cpu", profile_memory=True, profile_all_threads=all_threads, output_dir=tmp_path
    ) as s:
        for _ in s.steps():
            torch.randn(128, 128).relu()
    return s


@pytest.mark.skipif(not _torch_supports_all_threads(), reason="this torch cannot record every thread")
@pytest.mark.slow
def test_memory_with_all_threads_is_blank_and_says_why(tmp_path: Path) -> None:
    s = _memory_session(tmp_path / "all", all_threads=True)
    table = s.table()
    blank = not any(r.self_cpu_memory_bytes for r in table)
    # The note comes exactly when the column is blank (a torch that fixes pytorch#192290 gives figures, no note).
    assert any(n.startswith(NOTE) for n in table.notes) == blank
    assert any(n.startswith(NOTE) for n in s.notes) == blank
    plain = _memory_session(tmp_path / "one", all_threads=False).table()
    assert any(r.self_cpu_memory_bytes for r in plain)
    assert not any(n.startswith(NOTE) for n in plain.notes)
