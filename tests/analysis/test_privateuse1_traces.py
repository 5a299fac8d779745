"""A real torch.profiler trace with device events (the PrivateUse1 test plugin, as TorchNeuron's):
the offline table agrees with the live ``s.table()``.

The device times are the test plugin's, not a Trainium's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from neuronprof.analysis import load_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends"))

from run_in_subprocess import check, result, run_script  # noqa: E402

_SCRIPT = """
import torch, neuronprof
lin = torch.nn.Linear(16, 16)
x = torch.randn(8, 16)
with neuronprof.session(output_dir={out!r}, wait=0, warmup=1, active=2) as s:
    for _ in s.steps():
        lin(x).relu().sum()
t = s.table(row_limit=None)
path = s.export()
report(dict(
    path=str(path), label=t.device_label, steps=t.steps, top=t.top_level_calls,
    rows=[[r.name, r.on_device, r.calls, r.self_cpu_us, r.self_device_us] for r in t.rows],
))
"""


@pytest.mark.slow
def test_offline_table_of_a_neuron_trace_agrees_with_the_live_table(tmp_path: Path) -> None:
    # The correlating TorchNeuron build: the one whose NeuronCore time reaches torch.profiler.
    env = {"NEURONPROF_STANDIN_NEURON_BUILD": "correlating"}
    live = result(check(run_script(_SCRIPT.format(out=str(tmp_path)), backend="neuron", env=env)))
    trace = load_trace(live["path"])
    assert trace.device_label == live["label"] == "NEURON"
    assert (trace.steps, trace.top_level_calls) == (live["steps"], live["top"])
    offline = {(r.name, r.on_device): r for r in trace.rows()}
    kernels = [row for row in live["rows"] if row[1]]
    assert kernels, "the plugin recorded no kernels"
    assert set(offline) == {(name, on_device) for name, on_device, *_ in live["rows"]}
    for name, on_device, calls, self_cpu, self_device in live["rows"]:
        row = offline[(name, on_device)]
        # Trace times are µs with three decimals; torch's come from integer ns.
        tolerance = 0.002 * row.calls + 1e-9
        # One rule on both sides: every event counts once, recursive same-name ops
        # (aten::sum redispatching to aten::sum) and their kernels included.
        assert row.calls == calls, name
        assert row.self_cpu_us == pytest.approx(self_cpu, abs=tolerance), name
        assert row.self_device_us == pytest.approx(self_device or 0, abs=tolerance), name
    # Every kernel is a row in both, with the same time: nothing lost, nothing counted twice.
    live_kernels = sum(row[4] for row in live["rows"] if row[1])
    assert sum(r.self_device_us or 0 for r in trace.rows() if r.on_device) == pytest.approx(live_kernels, abs=0.05)
    host_direct = sum(r.self_device_us or 0 for r in trace.rows() if not r.on_device)
    assert host_direct == pytest.approx(live_kernels, abs=0.05)  # each kernel's time on exactly one host op


@pytest.mark.slow
def test_tpu_events_written_with_cat_trace_are_read_as_device_events(tmp_path: Path) -> None:
    # TorchTPU's own test reads its TPU events from a kineto JSON by "cat" == "Trace"; kineto's
    # span of the whole capture ("PyTorch Profiler (0)") has that category too and stays out.
    script = _SCRIPT.format(out=str(tmp_path)).replace("neuronprof.session(", 'neuronprof.session(backend="tpu", ')
    live = result(check(run_script(script, backend="tpu")))
    events = json.loads(Path(live["path"]).read_text())
    kernels = [e for e in events["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels and any(
        e.get("cat") == "Trace" and e["name"].startswith("PyTorch Profiler (") for e in events["traceEvents"]
    )
    for e in kernels:
        e["cat"] = "Trace"
    as_tpu = tmp_path / "tpu_trace_cat.json"
    as_tpu.write_text(json.dumps(events))
    original, rewritten = load_trace(live["path"]), load_trace(as_tpu)
    rows = {(r.name, r.on_device): (r.calls, r.self_device_us) for r in original.rows()}
    assert {(r.name, r.on_device): (r.calls, r.self_device_us) for r in rewritten.rows()} == rows
    device = [r for r in rewritten.rows() if r.on_device]
    assert sorted(r.name for r in device) == sorted({e["name"] for e in kernels})
    assert sum(r.self_device_us or 0 for r in device) > 0
    assert not any(r.name.startswith("PyTorch Profiler") for r in rewritten.rows())
    # The live table agrees: the same kernel rows with the same device time.
    live_device = sorted((name, dev) for name, on_device, _, _, dev in live["rows"] if on_device)
    offline_device = sorted((r.name, r.self_device_us) for r in device)
    assert [n for n, _ in offline_device] == [n for n, _ in live_device]
    for (_, got), (_, want) in zip(offline_device, live_device):
        assert got == pytest.approx(want, abs=0.01)
