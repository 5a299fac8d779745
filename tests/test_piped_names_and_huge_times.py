"""A piped input is named as the user named it in the two-run pane; a timeline's times past int64 are refused clearly.

1. ``neuronprof report A -`` (or ``--baseline -``) names the piped trace ``-`` in the two-run
   pane, as the rest of the page does, never by its private copy (whose path changes every run).
2. ``analyze_timeline`` of a hand-made timeline with times beyond int64 says so in a
   ``ValueError`` (it raised a bare ``OverflowError``): a trace's times always fit.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuronprof.analysis.insights import DeviceEvent, HostEvent, Timeline, analyze_timeline

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "corpus" / "traces" / "bert_train.json.gz"
BASELINE = ROOT / "tests" / "corpus" / "traces" / "gpt2_train.json.gz"


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["A", "-"], ["-", "--baseline", "A"]])
def test_the_two_run_pane_names_a_piped_trace_as_the_user_did(argv: list[str], tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    args = [str(BASELINE) if a == "A" else a for a in argv]
    proc = subprocess.run(
        [sys.executable, "-m", "neuronprof", "report", *args, "-o", str(target)],
        input=gzip.decompress(TRACE.read_bytes()),
        capture_output=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    page = target.read_text(encoding="utf-8")
    assert "neuronprof-input-" not in page  # the private copy's path (got: 'B: /tmp/neuronprof-input-.../stdin')


def test_a_hand_made_timeline_with_times_beyond_int64_is_refused_with_the_reason() -> None:
    base = 2**64
    timeline = Timeline(
        (
            HostEvent("ProfilerStep#1", base, base + 100, "0", "step"),
            HostEvent("aten::add", base + 10, base + 20, "0"),
        ),
        (DeviceEvent("k", base + 12, base + 30),),
        backend="cuda",
        device_label="CUDA",
    )
    with pytest.raises(ValueError, match="does not fit in int64"):
        analyze_timeline(timeline)
    # Shifted nearer 0, the same events are read.
    near = Timeline(
        tuple(dataclasses.replace(e, start_ns=e.start_ns - base, end_ns=e.end_ns - base) for e in timeline.host),
        tuple(dataclasses.replace(d, start_ns=d.start_ns - base, end_ns=d.end_ns - base) for d in timeline.device),
        backend="cuda",
        device_label="CUDA",
    )
    assert analyze_timeline(near).steps == 1
