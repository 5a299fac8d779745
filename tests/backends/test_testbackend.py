"""The PrivateUse1 test backend and the stand-ins behave like real backends.

Each case runs in its own interpreter (torch renames PrivateUse1 once per
process) and is skipped when the plugin cannot be built here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from run_in_subprocess import check, result, run_script  # noqa: E402

_SELF_CHECK = """
import json, os, tempfile
import torch
from torch.profiler import profile, ProfilerActivity
import testbackend as tb

name = tb.registered_name()
x = torch.randn(16, 16)
lin = torch.nn.Linear(16, 16)

class Config(torch._C._profiler._ExperimentalConfig):
    def __init__(self):
        # The correlating TorchNeuron stand-in emits linked kernels only when asked to.
        super().__init__(custom_profiler_config="answer:42;correlate_device_time:true")

with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
             experimental_config=Config()) as p:
    lin(x).relu().sum()
averages = p.key_averages()
header = averages.table(sort_by="self_device_time_total").splitlines()[1]
op_device = {e.key: e.self_device_time_total for e in averages}
path = os.path.join(tempfile.mkdtemp(), "trace.json")
p.export_chrome_trace(path)
events = json.load(open(path))["traceEvents"]
kernels = [e for e in events if e.get("cat") == "kernel"]
flows = [e for e in events if e.get("cat") == "ac2g"]

tb.set_emit(False)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p2:
    lin(x).relu().sum()
header_off = p2.key_averages().table(sort_by="self_device_time_total").splitlines()[1]

try:
    tb.register("another")
    second = "accepted"
except tb.BackendAlreadyRegistered as exc:
    second = str(exc)

report(dict(
    name=name, header=header, header_off=header_off, op_device=op_device,
    kernel_names=sorted({k["name"] for k in kernels}),
    kernel_lanes=sorted({(k["pid"], k["tid"]) for k in kernels}),
    flow_starts=sum(f["ph"] == "s" for f in flows), flow_ends=sum(f["ph"] == "f" for f in flows),
    kernels=len(kernels), custom=tb.stats()["custom_configs"],
    sync_calls=getattr(torch, name).sync_calls, second=second,
))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["neuron", "mydev"])
def test_device_columns_kernels_and_flows(backend: str, tmp_path: Path) -> None:
    env = {"NEURONPROF_STANDIN_NEURON_BUILD": "correlating"}
    # cwd: Neuron Runtime's default output folder is ./output.
    r = result(check(run_script(_SELF_CHECK, backend=backend, env=env, cwd=tmp_path)))
    up = backend.upper()
    assert r["name"] == backend
    assert f"Self {up}" in r["header"] and f"{up} total" in r["header"]
    assert r["op_device"]["aten::addmm"] > 0
    assert r["op_device"]["aten::linear"] == 0  # composite: its addmm launches
    assert r["kernels"] > 0
    assert all(n.startswith(f"{backend}_kernel[aten::") for n in r["kernel_names"])
    assert r["kernel_lanes"] == [[0, 7]]
    assert r["flow_starts"] == r["flow_ends"] == r["kernels"]
    assert r["custom"][0] == "answer:42;correlate_device_time:true"
    assert up not in r["header_off"]  # emit=False: no device time, no device columns
    assert r["sync_calls"] == 2  # torch.profiler's own exit, once per profile
    assert "separate subprocess" in r["second"]


@pytest.mark.slow
def test_neuron_standin_export_and_config() -> None:
    code = """
    import inspect, os, tempfile
    import torch
    from torch.profiler import profile, ProfilerActivity
    from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode
    import torch_neuronx.profiling as records

    out = tempfile.mkdtemp()
    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=out,
                       capture_enabled_for_nc="0,1")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 experimental_config=cfg, on_trace_ready=NeuronProfiler(cfg).export_trace) as p:
        torch.ones(4, 4) @ torch.ones(4, 4)
        torch.neuron.synchronize()
    try:
        p.export_chrome_trace(os.path.join(out, "again.json"))
        again = "exported twice"
    except RuntimeError as exc:
        again = str(exc)
    rec = records.exports[-1]
    report(dict(files=sorted(f.name for f in rec.files), parts=rec.directory.relative_to(out).parts,
                again=again, sync=torch.neuron.sync_calls,
                correlate="correlate_device_time" in inspect.signature(NeuronConfig).parameters))
    """
    r = result(check(run_script(code, backend="neuron", env={"TORCH_NEURONX_NEFF_CACHE_DIR": "neff-cache"})))
    files = r["files"]
    assert "trace.json" in files and "trace_info.pb" in files and "ntrace.pb" in files
    assert [f for f in files if f.endswith(".ntff")] == ["profile_nc_0_session_0.ntff", "profile_nc_1_session_0.ntff"]
    # NEFFs reach the profile only with a NEFF cache folder (set in env below).
    assert len([f for f in files if f.endswith(".neff")]) == 2
    assert r["parts"][0].endswith(f"_pid_{r['parts'][0].rsplit('_', 1)[1]}") and len(r["parts"]) == 2
    assert r["again"] == "Trace is already saved."
    assert r["sync"] == 2  # the snippet's call plus torch.profiler's exit
    assert r["correlate"] is False


@pytest.mark.slow
def test_tpu_standin_sync_goes_through_the_accelerator() -> None:
    code = """
    import torch
    from torch.profiler import profile, ProfilerActivity
    import torch_tpu
    from torch.tpu.profiler import TpuProfilerConfig
    import testbackend as tb

    try:
        torch.tpu.synchronize()
        direct = "allowed"
    except RuntimeError as exc:
        direct = str(exc)
    import tempfile
    run = tempfile.mkdtemp()
    cfg = TpuProfilerConfig(run_dir=run)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg) as p:
        for _ in range(3):
            torch.ones(4) * 2
            torch.accelerator.synchronize()
    report(dict(direct=direct, accel=torch_tpu.accelerator_sync_calls(), run=run,
                custom=tb.stats()["last_custom_config"],
                header=p.key_averages().table(sort_by="self_device_time_total").splitlines()[1]))
    """
    r = result(check(run_script(code, backend="tpu", env={"NEURONPROF_STANDIN_TPU_WARN": "0"})))
    assert "torch.accelerator.synchronize()" in r["direct"]
    assert r["accel"] == 3
    assert r["custom"] == f"host_tracer_level:2,device_tracer_level:1,python_tracer_level:0,run_dir:{r['run']}"
    assert "Self TPU" in r["header"]


def test_pypi_placeholder_refuses_to_import() -> None:
    code = """
    try:
        import torch_neuronx
        report("imported")
    except ImportError as exc:
        report(str(exc))
    """
    assert result(check(run_script(code, placeholder=True))).startswith("WRONG PACKAGE.")
