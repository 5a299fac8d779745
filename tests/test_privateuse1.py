"""The Neuron, TPU and generic PrivateUse1 paths, on a real kineto plugin.

Each case runs in its own interpreter (torch renames PrivateUse1 once per
process) with the test backend from ``tests/backends`` and, for Neuron and TPU,
the stand-in packages that follow TorchNeuron's and TorchTPU's documented APIs.
The device times are the test plugin's, not a Trainium's or a TPU's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

from run_in_subprocess import check, result, run_script  # noqa: E402

# Shared by the scripts below: profile a small Linear, report what the public API shows.
_PROFILE = """
import json, warnings
from pathlib import Path
import torch, neuronprof

def profile(out, **kw):
    lin = torch.nn.Linear(16, 16)
    x = torch.randn(8, 16)
    counts = []
    sync = getattr(getattr(torch, neuronprof.backends.base.privateuse1_name() or "cpu", None), "sync_calls", None)
    with neuronprof.session(output_dir=out, **kw) as s:
        for _ in s.steps():
            counts.append(getattr(getattr(torch, s.backend), "sync_calls", 0))
            lin(x).relu().sum()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = s.table(row_limit=None)
    traces = [s.export(), s.export(Path(out) / "again.json.gz")]
    kernels = []
    import gzip
    for p in traces:
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rt") as f:
            events = json.load(f)["traceEvents"]
        kernels.append(sum(1 for e in events if e.get("cat") == "kernel"))
    return s, t, dict(
        backend=s.backend, label=t.device_label, text=str(t), device=[r.self_device_us for r in t.rows],
        rows=[r.name for r in t.rows], kernels=kernels, sync_counts=counts,
        warnings=[str(w.message) for w in caught], notes=s.notes,
        addmm=t.row("aten::addmm").self_device_us,
    )
"""


def _run(code: str, **kwargs):
    return result(check(run_script(_PROFILE + code, **kwargs)))


def _assert_device_table(r: dict, label: str) -> None:
    assert r["label"] == label
    assert f"Self {label} (µs)" in r["text"]
    assert r["addmm"] > 0
    devices = [d for d in r["device"] if d is not None]
    assert devices == sorted(devices, reverse=True), "sorted by device time, largest first"
    assert devices[0] > 0
    assert all(k > 0 for k in r["kernels"]), "both exports hold the device kernels"
    assert r["warnings"] == []


@pytest.mark.slow
def test_neuron_session_end_to_end(tmp_path):
    r = _run(
        f"""
import torch_neuronx.profiling as tnp
out = {str(tmp_path / "out")!r}
s, t, info = profile(out, modes=("device", "runtime"), core="0")
cfg = tnp.last_config
info.update(
    modes=sorted(m.name for m in cfg.modes), core=cfg.capture_enabled_for_nc,
    profile_dir=cfg.profile_output_dir, exports=len(tnp.exports),
    neuron_trace=str(tnp.exports[-1].trace_path), sync_total=torch.neuron.sync_calls,
    correlate=hasattr(cfg, "correlate_device_time"),
)
bundle = s.export(format="neuron")
info.update(bundle=str(bundle), readme=(bundle / "README.txt").read_text(),
            system_files=sorted(p.name for p in (bundle / "system").rglob("*") if p.is_file()))
report(info)
""",
        backend="neuron",
        # The TorchNeuron build that puts NeuronCore time into torch.profiler.
        env={"NEURONPROF_STANDIN_NEURON_BUILD": "correlating", "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neffs")},
    )
    _assert_device_table(r, "NEURON")
    assert r["backend"] == "neuron"
    assert r["modes"] == ["DEVICE", "RUNTIME"]
    assert r["core"] == "0"
    assert Path(r["profile_dir"]).parent == tmp_path / "out"
    assert r["correlate"] is True, "passed because this NeuronConfig accepts it"
    # TorchNeuron's exporter ran (and consumed kineto's one-shot save); ours still worked twice.
    assert r["exports"] == 1 and Path(r["neuron_trace"]).exists()
    # One sync per step, before the schedule advanced.
    assert [b - a for a, b in zip(r["sync_counts"], r["sync_counts"][1:])] == [1, 1, 1]
    assert r["sync_total"] >= 4
    assert any(n.endswith(".neff") for n in r["system_files"])
    assert any(n.endswith(".ntff") for n in r["system_files"])
    assert "trace.json" in r["system_files"] and "ntrace.pb" in r["system_files"]
    assert ".neff" in r["readme"] and ".ntff" in r["readme"] and "system/" in r["readme"]


@pytest.mark.slow
def test_neuron_config_options_pass_through(tmp_path):
    r = _run(
        f"""
import torch_neuronx.profiling as tnp
seen = []
for core in ("0,1", "2-5", None):
    profile({str(tmp_path)!r} + "/" + str(core), modes=("device", "cpu_util", "host_memory"), core=core)
    seen.append([tnp.last_config.capture_enabled_for_nc, sorted(m.name for m in tnp.last_config.modes),
                 getattr(tnp.last_config, "correlate_device_time", None)])
try:
    neuronprof.session(core="0-", backend="neuron")
    refused = None
except ValueError as exc:
    refused = str(exc)
# No core under torchrun: each rank captures its local NeuronCore.
profile({str(tmp_path)!r} + "/local")
report(dict(seen=seen, refused=refused, local=tnp.last_config.capture_enabled_for_nc))
""",
        backend="neuron",
        env={"NEURONPROF_STANDIN_CORRELATE": "1", "LOCAL_RANK": "3"},
    )
    # Core indices are process-local: never str(LOCAL_RANK); no core captures every core of the process.
    assert r["local"] is None
    assert [s[0] for s in r["seen"]] == ["0,1", "2-5", None]
    assert all(s[1] == ["CPU_UTIL", "DEVICE", "HOST_MEMORY"] for s in r["seen"])
    assert all(s[2] is True for s in r["seen"]), "passed when the signature accepts it"
    assert "invalid core" in r["refused"]


@pytest.mark.slow
def test_tpu_session_uses_accelerator_sync(tmp_path):
    r = _run(
        f"""
import torch_tpu
before = torch_tpu.accelerator_sync_calls()
s, t, info = profile({str(tmp_path / "out")!r})
cfg = torch_tpu.profiler.last_config
info.update(run_dir=cfg.run_dir, rejected=torch.tpu.sync_calls_rejected,
            accel=torch_tpu.accelerator_sync_calls() - before, total=t.self_device_us,
            kernel_rows=[r.self_device_us for r in t.rows if r.on_device])
report(info)
""",
        backend="tpu",
        env={"NEURONPROF_STANDIN_TPU_WARN": "0"},
    )
    # TorchTPU's kernels are linked to no op: the time is on the kernel rows, which the totals count.
    assert r["label"] == "TPU" and "Self TPU (µs)" in r["text"]
    assert r["addmm"] == 0
    assert r["kernel_rows"] and r["total"] == pytest.approx(sum(r["kernel_rows"]))
    assert all(k > 0 for k in r["kernels"]), "both exports hold the device kernels"
    assert r["warnings"] == []
    assert r["backend"] == "tpu"
    assert r["rejected"] == 0, "torch.tpu.synchronize() raises on torch >= 2.11: never call it"
    assert r["accel"] == 4
    # A run_dir of the session's own under output_dir (issue 10 review: sessions in one second shared one).
    assert Path(r["run_dir"]).parent.parent == tmp_path / "out"


@pytest.mark.slow
def test_generic_privateuse1_backend(tmp_path):
    r = _run(
        f"""
s, t, info = profile({str(tmp_path / "out")!r})
info["sync_total"] = torch.mydev.sync_calls
try:
    s.export(format="neuron")
except ValueError as exc:
    info["neuron_format"] = str(exc)
report(info)
""",
        backend="mydev",
    )
    _assert_device_table(r, "MYDEV")
    assert r["backend"] == "mydev"
    assert [b - a for a, b in zip(r["sync_counts"], r["sync_counts"][1:])] == [1, 1, 1]
    assert "neuron backend" in r["neuron_format"]


@pytest.mark.slow
def test_empty_device_column_warns_and_points_to_doctor(tmp_path):
    # Only where device time is expected: the correlating TorchNeuron build, here with nothing emitted.
    r = _run(
        f"""
s, t, info = profile({str(tmp_path / "out")!r})
report(info)
""",
        backend="neuron",
        env={"NEURONPROF_STANDIN_EMIT": "0", "NEURONPROF_STANDIN_NEURON_BUILD": "correlating"},
    )
    assert len(r["warnings"]) == 1
    message = r["warnings"][0]
    assert "no NEURON device time" in message and "neuronprof doctor" in message
    assert "synchronised" in message and "plugin" in message
    assert "doctor --probe" in message and "torch >= 2.12" not in message
    assert any("no NEURON device time" in n for n in r["notes"])


@pytest.mark.slow
def test_placeholder_torch_neuronx_is_refused_with_the_real_source(tmp_path):
    r = result(
        check(
            run_script(
                """
import neuronprof
try:
    neuronprof.session(backend="neuron")
    message = None
except neuronprof.BackendUnavailableError as exc:
    message = str(exc)
report(dict(message=message, auto=neuronprof.session().backend))
""",
                placeholder=True,
            )
        )
    )
    assert "WRONG PACKAGE" in r["message"]
    assert "Neuron package repository" in r["message"]
    assert r["auto"] != "neuron", "auto skips the placeholder and goes on"


@pytest.mark.slow
def test_old_torch_is_refused_for_privateuse1(tmp_path):
    r = _run(
        """
import neuronprof.backends.privateuse1 as pu1
pu1.torch_version = lambda: (2, 11)
try:
    neuronprof.session(backend="mydev")
    message = None
except neuronprof.BackendUnavailableError as exc:
    message = str(exc)
report(dict(message=message))
""",
        backend="mydev",
    )
    assert "needs torch >= 2.12" in r["message"]


@pytest.mark.slow
def test_doctor_reports_the_privateuse1_backend():
    r = _run(
        """
from neuronprof._doctor import diagnose
report(diagnose())
""",
        backend="mydev",
    )
    assert r["privateuse1"] == "mydev"
    assert "PrivateUse1 (MYDEV)" in r["activities"]
    assert r["auto"] == "mydev"
    assert r["backends"][0] == {"name": "mydev", "available": True, "reason": None}


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--json", None])
def test_doctor_cli_runs(flag):
    argv = ["neuronprof", "doctor"] + ([flag] if flag else [])
    code = f"""
import runpy, sys
sys.argv = {argv!r}
runpy.run_module("neuronprof", run_name="__main__")
"""
    proc = run_script(code, backend=None)
    assert proc.returncode == 0, proc.stderr
    assert "cpu" in proc.stdout


@pytest.mark.slow
def test_compare_on_a_privateuse1_device_counts_kernel_time_once(tmp_path):
    r = _run(
        f"""
lin = torch.nn.Linear(16, 16)
x = torch.randn(8, 16)
cmp = neuronprof.compare({{"linear": lin, "relu": lambda t: torch.relu(lin(t))}}, x,
                         output_dir={str(tmp_path)!r}, quiet=True)
rows = []
for row in cmp.rows:
    kernels = sum(k.self_device_us for k in row.table.rows if k.on_device)
    rows.append(dict(name=row.name, device=row.self_device_us, kernels_per_step=kernels / row.table.steps))
report(dict(label=cmp.device_label, rows=rows, text=str(cmp)))
""",
        backend="mydev",
    )
    assert r["label"] == "MYDEV"
    for row in r["rows"]:
        assert row["device"] > 0
        assert row["device"] == pytest.approx(row["kernels_per_step"])
    assert "MYDEV" in r["text"]
