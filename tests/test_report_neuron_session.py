"""``s.report()`` of a Neuron session adds Neuron's own profile (NEFF rows, engine breakdown), or says why it cannot.

Runs the TorchNeuron stand-in on the documented build (no device time reaches
torch.profiler) with ``tests/neuron_tools/fake_neuron_explorer``, a test double that
emits AWS's documented formats from a spec the test writes: the figures below are the
test's own, not output captured on Trainium.
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

from run_in_subprocess import check, result, run_script  # noqa: E402

FAKE = Path(__file__).resolve().parent / "neuron_tools" / "fake_neuron_explorer"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.name != "posix", reason="the fake tool is a POSIX script")]

_SNIPPET = r"""
import glob, json, os, shutil
from pathlib import Path
import torch
import neuronprof
import neuronprof.analysis.neuron._tool as tool_module

os.environ["PATH"] = os.environ.pop("NEURONPROF_TEST_PATH")
tool_module.SEARCH_DIRS = ()
out = Path(OUT)
with neuronprof.session(backend="neuron", output_dir=out, wait=0, warmup=1, active=2) as s:
    for _ in s.steps():
        torch.ones(64) * 2 + 1
if NOTHING_WRITTEN:  # play a runtime that wrote no profile files
    shutil.rmtree(out / "neuron_profile")
# Play the Neuron Runtime: two executions of one NEFF in each profiled step, and its device profile.
found = glob.glob(str(out / "neuron_profile" / f"*_pid_{os.getpid()}" / "*" / "trace.json"))
for folder in [Path(p).parent for p in found]:
    trace = json.loads((folder / "trace.json").read_text())
    base = int(trace.get("baseTimeNanoseconds", 0))
    spans = [(base + round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in trace["traceEvents"]
             if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"]
    execs = [{"neff": "neff_rmsnorm", "start_ns": a + k * d // 3, "duration_ns": d // 5, "cores": [0, 1]}
             for a, d in spans for k in (0, 1)]
    spec = {"fake_neuron_explorer_spec": 1, "process_id": os.getpid(), "executions": execs,
            "device_profiles": [{"neff": "neff_rmsnorm", "total_time": 4e-5, "tensor": 2e-5, "vector": 1e-5,
                                 "scalar": 0.0, "gpsimd": 0.0, "sync": 0.0, "dma": 3e-5, "hbm_read_bytes": 1000,
                                 "hbm_write_bytes": 1000, "hardware_flops": 4096.0, "model_flops": 4096.0}]}
    (folder / "ntrace.pb").write_text(json.dumps(spec))
log = Path(os.environ["FAKE_NEURON_EXPLORER_LOG"])
page = s.report(out / "report.html").read_text(encoding="utf-8")
runs_after_report = len(log.read_text().splitlines()) if log.exists() else 0
info = {"page": page, "runs_after_report": runs_after_report}
try:
    p = s.neuron_profile()
    info["neffs"] = [[n.neff, n.calls, n.device_us] for n in p.neffs]
except Exception as exc:
    info["error"] = f"{type(exc).__name__}: {exc}"
info["runs_after_profile"] = len(log.read_text().splitlines()) if log.exists() else 0
report(info)
"""


def _run(tmp_path: Path, *, tool: bool = True, nothing_written: bool = False) -> dict[str, Any]:
    empty = tmp_path / "emptybin"
    empty.mkdir(parents=True, exist_ok=True)
    env = {
        "NEURONPROF_STANDIN_NEURON_BUILD": "documented",
        "FAKE_NEURON_EXPLORER_LOG": str(tmp_path / "calls.log"),
        # Once the stand-in is loaded, PATH holds only the interpreter's folder (for the fake's shebang).
        "NEURONPROF_TEST_PATH": f"{empty}{os.pathsep}{os.path.dirname(sys.executable)}",
        "NEURONPROF_NEURON_EXPLORER": str(FAKE) if tool else "",
    }
    code = _SNIPPET.replace("OUT", repr(str(tmp_path / "out"))).replace("NOTHING_WRITTEN", repr(nothing_written))
    return dict(result(check(run_script(code, backend="neuron", env=env))))


def _kernels(page: str) -> str:
    m = re.search(r'<section id="kernels">(.*?)</section>', page, re.S)
    assert m
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", m.group(1))))


def _grids(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="neuronprof-data">(.*?)</script>', page, re.S)
    assert m
    return dict(json.loads(m.group(1))["grids"])


def test_session_report_adds_neurons_own_profile_read_once(tmp_path: Path) -> None:
    info = _run(tmp_path)
    grids = _grids(info["page"])
    # The NEFF rows are those s.neuron_profile() reads: the same executions and NeuronCore time.
    neffs = {r["name"]: r for r in grids["neffs"]["rows"]}
    ((name, calls, device_us),) = info["neffs"]
    assert set(neffs) == {name} == {"neff_rmsnorm"}
    assert neffs[name]["calls"] == calls == 4  # two executions in each of the two profiled steps
    assert neffs[name]["device_us"] == pytest.approx(device_us, abs=1e-3)
    # The NEFF's device profile (its key starts "n_"; the tool's system summary, "s_", has no engine times).
    engines = {r["engine"]: r["active_us"] for r in grids["engines"]["rows"] if r["profile"].startswith("n_")}
    assert engines["tensor"] == pytest.approx(20.0) and engines["dma"] == pytest.approx(30.0)
    text = _kernels(info["page"])
    assert "NEFF executions (Neuron's own profile)" in text and "Engine breakdown" in text
    assert "read from Neuron's own profile" in text
    # Read once per session: s.neuron_profile() after the report runs the tool no more.
    assert info["runs_after_report"] > 0 and info["runs_after_profile"] == info["runs_after_report"]


def test_session_report_says_why_neurons_own_profile_is_absent(tmp_path: Path) -> None:
    # The tool is not installed: the pane says what to install.
    text = _kernels(_run(tmp_path / "notool", tool=False)["page"])
    assert "neuron-explorer was not found" in text and "aws-neuronx-tools" in text
    assert "neff_rmsnorm" not in text
    # The runtime wrote no profile files: the pane says so, as s.neuron_profile() does.
    info = _run(tmp_path / "nothing", nothing_written=True)
    text = _kernels(info["page"])
    assert "the device's own profile is not in this report" in text
    assert "no Neuron profile" in text and "NEFF executions" not in text
    assert "error" in info and "SessionStateError" in info["error"]  # as s.neuron_profile() says
