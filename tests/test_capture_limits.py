"""TorchNeuron's public beta, the refused ``NEURON_RT_INSPECT_*`` capture and the caps that cut a capture.

Through the public API on the real torch.profiler, with the TorchNeuron and TorchTPU
stand-ins (tests/backends/standins), which follow NEURON-FACTS: the beta build is
``torch-neuronx`` <torch major.minor>.3.0 with the documented build's profiling surface;
Neuron Runtime keeps at most ``max_events_per_nc`` events per NeuronCore and TorchTPU at
most 1,000,000 per profiling session, both dropping the rest silently. Device times are the test
plugin's, never a Trainium's or a TPU's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

from run_in_subprocess import check, result, run_script  # noqa: E402

_NEURON = """
import os, warnings
import torch, neuronprof
import testbackend as tb
from neuronprof import _doctor
from workload import profile_linear
"""


def _neuron(code: str, env: dict[str, str]) -> dict:
    return result(check(run_script(_NEURON + code, backend="neuron", env=env)))


@pytest.mark.slow
def test_the_public_beta_is_told_apart_and_its_torch_pairing_checked(tmp_path: Path) -> None:
    r = _neuron(
        f"""
import torch_neuronx
s, t, caught = profile_linear({str(tmp_path / "a")!r}, "neuron")
paired = dict(notes=s.notes, text=str(t), diagnosis=_doctor.diagnose(), version=torch_neuronx.__version__,
              torch=torch.__version__, has_device=t.has_device_time, customs=tb.stats()["custom_configs"])
report(paired)
""",
        {"NEURONPROF_STANDIN_NEURON_BUILD": "beta"},
    )
    line = ".".join(r["torch"].split("+")[0].split(".")[:2])
    assert r["version"] == f"{line}.3.0"
    d = r["diagnosis"]
    assert d["neuron_build"] == "beta" and d["neuron_version"] == r["version"]
    # The beta's documented surface is build 2's: no correlate_device_time, no NEURON column.
    assert not r["has_device"] and "Self NEURON" not in r["text"]
    assert not any("correlate_device_time" in c for c in r["customs"])
    [note] = [n for n in r["notes"] if "stays in Neuron's own profile" in n]
    assert f"(the public beta, torch-neuronx {r['version']})" in note and f"note: {note}" in r["text"]
    [problem] = [p for p in d["problems"] if "stays empty by design" in p]
    assert "public beta" in problem
    # A release paired with the installed torch: no pairing complaint anywhere.
    assert not any("pairs with torch" in n for n in r["notes"] + d["problems"])

    other = "2.14.3.0" if line != "2.14" else "2.13.3.0"
    r2 = _neuron(
        f"""
s, t, caught = profile_linear({str(tmp_path / "b")!r}, "neuron")
report(dict(notes=s.notes, text=str(t), diagnosis=_doctor.diagnose()))
""",
        {"NEURONPROF_STANDIN_NEURON_BUILD": "beta", "NEURONPROF_STANDIN_NEURON_VERSION": other},
    )
    want = "2.14.0" if other.startswith("2.14") else "2.13.0"
    [mismatch] = [n for n in r2["notes"] if "pairs with torch" in n]
    assert mismatch.startswith(f"torch-neuronx {other} pairs with torch {want}, but torch ")
    assert f"install torch=={want}" in mismatch and "2.13.3.0 for torch 2.13.0" in mismatch
    assert f"note: {mismatch}" in r2["text"]
    assert f"neuron: {mismatch}" in r2["diagnosis"]["problems"]


@pytest.mark.parametrize("variable", ["NEURON_RT_INSPECT_ENABLE", "NEURON_RT_INSPECT_OUTPUT_DIR"])
@pytest.mark.slow
def test_a_neuron_rt_inspect_variable_is_refused_before_anything_starts(tmp_path: Path, variable: str) -> None:
    r = _neuron(
        f"""
from torch_neuronx import _runtime
errors = []
try:
    neuronprof.session(backend="neuron", output_dir={str(tmp_path / "made")!r})
except neuronprof.BackendUnavailableError as exc:
    errors.append(str(exc))
# Set after the session was made: refused when it starts, with nothing started.
del os.environ[{variable!r}]
s = neuronprof.session(backend="neuron", output_dir={str(tmp_path / "late")!r})
os.environ[{variable!r}] = "1"
try:
    with s:
        pass
except neuronprof.BackendUnavailableError as exc:
    errors.append(str(exc))
# A CPU session is not concerned; the doctor says why a Neuron session would refuse.
with neuronprof.session(backend="cpu", output_dir={str(tmp_path / "cpu")!r}) as c:
    c.run(lambda: None)
report(dict(errors=errors, configured=tb.stats()["sessions_configured"], runtime=len(_runtime.sessions),
            made=os.path.exists({str(tmp_path / "made")!r}), state=repr(s),
            doctor=_doctor.diagnose()["problems"]))
""",
        {"NEURONPROF_STANDIN_NEURON_BUILD": "beta", variable: "1"},
    )
    assert [p for p in r["doctor"] if p.startswith(f"neuron: {variable} is set")], r["doctor"]
    assert len(r["errors"]) == 2
    for message in r["errors"]:
        assert message.startswith(f"{variable} is set: Neuron Runtime's environment-variable capture conflicts")
        assert "The two mechanisms conflict." in message and f"Unset {variable}" in message
        assert "modes and core" in message
    assert r["configured"] == 0 and r["runtime"] == 0, "no profile was configured"
    assert not r["made"], "refused before the output folder was made"


@pytest.mark.slow
def test_neuron_max_events_per_nc_is_passed_and_a_cut_capture_said(tmp_path: Path) -> None:
    r = _neuron(
        f"""
out = {{}}
for cap in (None, 3, 10_000):
    s, t, caught = profile_linear({str(tmp_path)!r} + "/" + str(cap), "neuron", max_events_per_nc=cap)
    page = s.report()
    out[str(cap)] = dict(notes=s.notes, text=str(t), custom=tb.stats()["last_custom_config"],
                         kernels=len([r for r in t.rows if r.name.startswith("neuron_kernel")]),
                         page=page.read_text())
refused = []
for bad in (0, -1, 2.5, "many"):
    try:
        neuronprof.session(backend="neuron", max_events_per_nc=bad)
    except ValueError as exc:
        refused.append(str(exc))
cpu = neuronprof.session(backend="cpu", max_events_per_nc=5)
with cpu:
    for _ in cpu.steps():
        torch.ones(2) + 1
report(dict(out=out, refused=refused, cpu_notes=cpu.notes))
""",
        {"NEURONPROF_STANDIN_NEURON_BUILD": "correlating"},
    )
    out = r["out"]
    assert "max_events_per_nc:1000000" in out["None"]["custom"], "Neuron's default when none is asked for"
    assert "max_events_per_nc:3" in out["3"]["custom"] and "max_events_per_nc:10000" in out["10000"]["custom"]
    cut = [n for n in out["3"]["notes"] if n.startswith("the capture was cut")]
    assert cut == [
        "the capture was cut: NeuronCore 0 reached max_events_per_nc=3 in profiling cycle 0 (its executions "
        "that reached torch.profiler alone number 3 or more; Neuron Runtime counts its own events, at least as "
        "many), and Neuron Runtime keeps no event past it, so the NEURON time of what ran later is missing. "
        "Shorten the window (fewer active steps) or raise the cap (neuronprof.session(..., max_events_per_nc=12))"
    ]
    assert f"note: {cut[0]}" in out["3"]["text"]
    assert "the capture was cut" in out["3"]["page"], "the HTML report says it too"
    for uncut in ("None", "10000"):
        assert not any("capture was cut" in n for n in out[uncut]["notes"])
        assert "capture was cut" not in out[uncut]["page"]
    assert len(r["refused"]) == 4 and all("max_events_per_nc" in m for m in r["refused"])
    assert "max_events_per_nc is a Neuron Runtime setting; the cpu backend ignores it" in r["cpu_notes"]


@pytest.mark.slow
def test_tpu_event_cap_cut_is_said(tmp_path: Path) -> None:
    r = result(
        check(
            run_script(
                f"""
import neuronprof, neuronprof.backends.tpu as tpu_backend
from workload import profile_linear
tpu_backend.MAX_EVENTS_PER_SESSION = 2  # the stand-in plugin drops events past 4 too (see env)
s, t, caught = profile_linear({str(tmp_path / "cut")!r}, "tpu")
page = s.report()
cut = dict(notes=s.notes, text=str(t), page=page.read_text())
tpu_backend.MAX_EVENTS_PER_SESSION = 1_000_000
import torch_tpu
torch_tpu.profiler.MAX_EVENTS = 1_000_000
s2, t2, caught2 = profile_linear({str(tmp_path / "whole")!r}, "tpu")
report(dict(cut=cut, whole=s2.notes, kernels=[r.name for r in t.rows if "kernel" in r.name],
            kernels2=[r.name for r in t2.rows if "kernel" in r.name]))
""",
                backend="tpu",
                env={"NEURONPROF_STANDIN_TPU_MAX_EVENTS": "2"},
            )
        )
    )
    [note] = [n for n in r["cut"]["notes"] if n.startswith("the capture was cut")]
    assert "profiling cycle 0 reached TorchTPU's limit of 2 events per profiling session" in note
    assert "truncating trace parsing to avoid OOM" in note and "Shorten the window" in note
    assert f"note: {note}" in r["cut"]["text"] and "the capture was cut" in r["cut"]["page"]
    assert not any("capture was cut" in n for n in r["whole"])
    assert len(r["kernels"]) < len(r["kernels2"]), "the cut capture lost kernels"


@pytest.mark.slow
def test_device_memory_per_step_is_read_after_each_sync(tmp_path: Path) -> None:
    r = _neuron(
        f"""
s, t, caught = profile_linear({str(tmp_path / "mem")!r}, "neuron", wait=1, warmup=1, active=2)
report(dict(notes=s.notes, text=str(t)))
""",
        {"NEURONPROF_STANDIN_NEURON_BUILD": "beta", "NEURONPROF_STANDIN_NEURON_MEMORY": "1"},
    )
    [note] = [n for n in r["notes"] if n.startswith("device memory")]
    # Two NeuronCores synchronised per step, each settling 1 MiB per sync: 2, 4, 6, 8 MiB after
    # steps 1-4. Read before each sync, the statistic would lag one step behind.
    assert note == (
        "device memory in profiling cycle 0, read after each step's sync (torch_neuronx.memory_allocated, summed "
        "over the synchronised NeuronCores; wait and warmup steps included): 2.0, 4.0, 6.0, 8.0 MiB; peak 8.0 MiB"
    )
    assert f"note: {note}" in r["text"]


@pytest.mark.slow
def test_without_memory_statistics_nothing_is_said(tmp_path: Path) -> None:
    r = _neuron(
        f"""
s, t, caught = profile_linear({str(tmp_path / "nomem")!r}, "neuron")
report(dict(notes=s.notes))
""",
        {"NEURONPROF_STANDIN_NEURON_BUILD": "beta"},
    )
    assert not any(n.startswith("device memory") for n in r["notes"])


@pytest.mark.slow
def test_an_op_that_falls_back_to_the_cpu_in_a_device_step_is_a_finding(tmp_path: Path) -> None:
    r = _neuron(
        f"""
@torch.library.custom_op("standin::eigh_like", mutates_args=())
def eigh_like(x: torch.Tensor) -> torch.Tensor:
    # What torch's boxed CPU fallback does for an op the device has no kernel for.
    (host,) = torch.ops.aten._to_cpu([x])
    return host * 2

lin = torch.nn.Linear(16, 16)
x = torch.randn(8, 16)
with neuronprof.session(backend="neuron", output_dir={str(tmp_path / "fb")!r}) as s:
    for _ in s.steps():
        with torch.no_grad():
            eigh_like(lin(x)).sum()
ins = s.insights()
found = [f for f in ins if f.kind == "cpu_fallback"]
report(dict(kinds=list(ins.kinds()), titles=[f.title for f in found], details=[f.evidence.detail for f in found]))
""",
        {"NEURONPROF_STANDIN_NEURON_BUILD": "correlating"},
    )
    assert r["titles"] == ["standin::eigh_like fell back to the CPU in every step"]
    assert "no NEURON kernel here" in r["details"][0]
