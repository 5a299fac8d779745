"""The TorchNeuron and TorchTPU stand-ins follow the public record, build by build.

Each case runs plain torch.profiler (no neuronprof) in its own interpreter, so
these tests pin what the stand-ins do; the adapter tests rely on it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from run_in_subprocess import check, result, run_script  # noqa: E402

_NEURON_PROFILE = """
import inspect, os, tempfile
import torch
from torch.profiler import profile, ProfilerActivity
import torch_neuronx
from torch_neuronx import _runtime, profiling
import testbackend as tb

out = tempfile.mkdtemp()
seen_at_trace_ready = []
returned = []

def run(config, on_trace_ready=None):
    def ready(prof):
        d = _runtime.sessions[-1].directory
        seen_at_trace_ready.append(sorted(p.name for p in d.iterdir()) if d else None)
        if on_trace_ready:
            returned.append(repr(on_trace_ready(prof)))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=config,
                 on_trace_ready=ready) as p:
        torch.nn.Linear(4, 4)(torch.randn(2, 4)).sum()
    ka = p.key_averages()
    return dict(
        op_device=sum(e.self_device_time_total for e in ka if e.key.startswith("aten::")),
        device_rows=[e.key for e in ka if str(e.device_type) != "DeviceType.CPU"],
        cpu_rows=[e.key for e in ka if "Launch" in e.key],
        session=dict(cores=_runtime.sessions[-1].cores, rejected=_runtime.sessions[-1].rejected,
                     files=sorted(f.name for f in _runtime.sessions[-1].files),
                     parts=list(_runtime.sessions[-1].directory.relative_to(out).parts)),
        log=list(_runtime.log), custom=tb.stats()["last_custom_config"],
    )
"""


@pytest.mark.slow
@pytest.mark.parametrize("build", ["documented", "correlating"])
def test_neuron_config_builds_and_what_reaches_torch(build: str) -> None:
    code = (
        _NEURON_PROFILE
        + """
has_correlate = "correlate_device_time" in inspect.signature(profiling.NeuronConfig).parameters
kw = {"correlate_device_time": True} if has_correlate else {}
cfg = profiling.NeuronConfig(profile_output_dir=out, capture_enabled_for_nc="all", **kw)
exporter = profiling.NeuronProfiler(cfg)
with_key = run(cfg, exporter.export_trace)
plain = run(profiling.NeuronConfig(profile_output_dir=out, capture_enabled_for_nc="1"))
record = profiling.exports[-1]
report(dict(build=torch_neuronx.BUILD, has_correlate=has_correlate, with_key=with_key, plain=plain,
            returned=returned,
            trace=str(record.trace_path.relative_to(out)), seen=seen_at_trace_ready))
"""
    )
    r = result(check(run_script(code, backend="neuron", env={"NEURONPROF_STANDIN_NEURON_BUILD": build})))
    assert r["build"] == build
    assert r["has_correlate"] is (build == "correlating")
    w = r["with_key"]
    # "all" is not a value: the runtime rejects it, ignores the key and captures every visible core.
    assert w["session"]["rejected"] == ["capture_enabled_for_nc"] and w["session"]["cores"] == [0, 1]
    assert any("invalid capture_enabled_for_nc 'all'" in line for line in w["log"])
    assert "capture_enabled_for_nc:all" in w["custom"]
    # Runtime files, real names, written at stop: already there when on_trace_ready runs.
    assert w["session"]["files"] == sorted(
        ["ntrace.pb", "trace_info.pb", "profile_nc_0_session_0.ntff", "profile_nc_1_session_0.ntff"]
    ), "no NEFF without a NEFF cache folder"
    assert r["seen"][0] == w["session"]["files"]
    assert w["session"]["parts"][0].endswith(f"_pid_{w['session']['parts'][0].rsplit('_', 1)[1]}")
    # export_trace writes trace.json beside them and returns nothing.
    assert r["returned"] == ["None"]
    assert r["trace"] == "/".join(w["session"]["parts"] + ["trace.json"])
    if build == "correlating":
        assert w["op_device"] > 0 and w["device_rows"], "correlated: kernels linked to their ops"
    else:
        assert w["op_device"] == 0 and w["device_rows"] == []
        assert w["cpu_rows"] == ["neuronLaunchKernel"], "runtime events are filed as CPU rows"
    # Without correlate_device_time no build emits device kernels.
    assert r["plain"]["device_rows"] == [] and r["plain"]["session"]["cores"] == [1]


@pytest.mark.slow
def test_neuron_legacy_build_takes_a_plain_experimental_config() -> None:
    code = (
        _NEURON_PROFILE
        + """
from torch._C._profiler import _ExperimentalConfig
names = sorted(n for n in dir(profiling) if not n.startswith("_"))
cfg = _ExperimentalConfig(custom_profiler_config=f"profile_output_dir:{out};max_events_per_nc:10;"
                          "capture_enabled_for_nc:0;host_memory:true")
r = run(cfg)
with profiling.NeuronProfiler(neuron_output_dir=out, pytorch_trace_file=os.path.join(out, "t.json")):
    torch.ones(2) + 1
report(dict(names=names, run=r, legacy_trace=os.path.exists(os.path.join(out, "t.json")),
            sig=list(inspect.signature(profiling.NeuronProfiler).parameters)))
"""
    )
    r = result(check(run_script(code, backend="neuron", env={"NEURONPROF_STANDIN_NEURON_BUILD": "legacy"})))
    assert "NeuronConfig" not in r["names"] and "ProfileMode" not in r["names"]
    assert r["sig"] == [
        "pytorch_activities",
        "record_shapes",
        "pytorch_trace_file",
        "neuron_output_dir",
        "event_filters",
    ]
    assert r["legacy_trace"]
    assert r["run"]["session"]["cores"] == [0]
    assert "host_mem.pb" in r["run"]["session"]["files"]
    assert r["run"]["device_rows"] == []


@pytest.mark.slow
def test_neuron_neffs_need_a_cache_folder_and_trace_names_vary(tmp_path: Path) -> None:
    code = (
        _NEURON_PROFILE
        + """
cfg = profiling.NeuronConfig(profile_output_dir=out, neff_cache_dir=os.path.join(out, "cache"))
exporter = profiling.NeuronProfiler(cfg)
r = run(cfg, exporter.export_trace)
try:
    profiling.exports[-1].prof.export_chrome_trace(os.path.join(out, "again.json"))
    again = "saved again"
except RuntimeError as exc:
    again = str(exc)
report(dict(files=r["session"]["files"], trace=profiling.exports[-1].trace_path.name, again=again))
"""
    )
    env = {
        "NEURONPROF_STANDIN_NEURON_TRACE_NAME": "neuron_framework_trace_rank_{rank}.json",
        "NEURONPROF_STANDIN_NEURON_EXPORT": "python",
        "RANK": "3",
    }
    r = result(check(run_script(code, backend="neuron", env=env)))
    neffs = [f for f in r["files"] if f.endswith(".neff")]
    assert len(neffs) == 2 and all(n.startswith("neff_") and n.endswith("_vnc_0.neff") for n in neffs)
    assert r["trace"] == "neuron_framework_trace_rank_3.json"
    assert r["again"] == "saved again", "the python exporter leaves kineto's save alone"


@pytest.mark.slow
def test_tpu_kernels_unlinked_and_xplane_layout(tmp_path: Path) -> None:
    code = f"""
    import os, socket, torch
    from torch.profiler import profile, ProfilerActivity
    import torch_tpu
    from torch.tpu.profiler import TpuProfilerConfig

    def run(**kw):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                     experimental_config=TpuProfilerConfig(**kw)) as p:
            torch.nn.Linear(4, 4)(torch.randn(2, 4)).sum()
        ka = p.key_averages()
        return dict(ops=sum(e.self_device_time_total for e in ka if e.key.startswith("aten::")),
                    kernels=sum(e.self_device_time_total for e in ka if "kernel[" in e.key),
                    file=str(torch_tpu.profiler.written[-1]))
    base = {str(tmp_path)!r}
    a = run(run_dir=os.path.join(base, "run"), worker_rank="1")
    b = run(run_dir=os.path.join(base, "run"))
    os.environ["TORCH_TPU_PROFILER_OUTPUT_DIR"] = os.path.join(base, "env")
    c = run(run_dir=os.path.join(base, "run"), worker_rank="2")
    report(dict(a=a, b=b, c=c, host=socket.gethostname()))
    """
    r = result(check(run_script(code, backend="tpu", env={"NEURONPROF_STANDIN_TPU_WARN": "0"})))
    assert r["a"]["ops"] == 0 and r["a"]["kernels"] > 0, "TPU kernels are linked to no op"
    a, b, c = (Path(r[k]["file"]) for k in "abc")
    assert a.relative_to(tmp_path / "run").parts[:2] == ("plugins", "profile") and a.name == f"{r['host']}_1.xplane.pb"
    assert b.name == f"{r['host']}.xplane.pb"
    assert c.relative_to(tmp_path / "env").parts[:2] == ("plugins", "profile"), "the env var overrides run_dir"
    stamp = a.parent.name
    assert len(stamp.split("_")) == 6 and all(p.isdigit() for p in stamp.split("_"))
