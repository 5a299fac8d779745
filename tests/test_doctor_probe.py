"""``neuronprof doctor --probe``: one tiny op under the profiler, and what reached torch.

Each case runs the command line in its own interpreter with one backend (the
stand-ins cannot hold tensors, so the op runs on the CPU and the test plugin
answers as each real plugin would).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

from run_in_subprocess import check, result, run_script  # noqa: E402

_CLI = """
import contextlib, io, json, runpy, sys
out = io.StringIO()
sys.argv = ["neuronprof", "doctor", "--probe", "--json"] + {extra!r}
code = 0
with contextlib.redirect_stdout(out):
    try:
        runpy.run_module("neuronprof", run_name="__main__")
    except SystemExit as exc:
        code = exc.code
report(dict(code=code, facts=json.loads(out.getvalue())))
"""

# The probe on each TorchNeuron build and on TorchTPU is checked in test_neuron_builds.py and
# test_tpu_backend.py (in-process, beside their sessions); here the command line end to end.
_CASES = {
    # name: (run_script backend, env, --backend, expected result)
    "neuron-documented": ("neuron", {"NEURONPROF_STANDIN_NEURON_BUILD": "documented"}, "neuron", "runtime"),
    "plugin-silent": ("mydev", {"NEURONPROF_STANDIN_EMIT": "0"}, "mydev", "nothing"),
}


@pytest.mark.parametrize("case", list(_CASES))
@pytest.mark.slow
def test_probe_reports_what_reached_torch(case: str) -> None:
    backend, env, name, expected = _CASES[case]
    emit = env.get("NEURONPROF_STANDIN_EMIT") != "0"
    proc = run_script(_CLI.format(extra=["--backend", name]), backend=backend, env=env, emit=emit)
    r = result(check(proc))
    assert r["code"] == 0
    found = r["facts"]["probe"]
    assert found["backend"] == name
    assert found["result"] == expected
    from neuronprof._doctor import PROBE_MEANINGS

    assert found["meaning"] == PROBE_MEANINGS[expected]
    if expected == "linked":
        assert found["kernels"] and found["linked_ops"]
    if expected == "unlinked":
        assert found["kernels"] and not found["linked_ops"]
    if expected == "runtime":
        assert found["runtime_events"] > 0 and not found["kernels"]
        assert any("NeuronCore time stays in Neuron's own profile" in n for n in found["notes"])
    problems = r["facts"]["problems"]
    assert not any("did not load" in p for p in problems), "that check could not detect a missing plugin"
    # Issue 10 review: inside --probe output, no hint to run --probe and no empty-column warning.
    assert not any("doctor --probe" in p for p in problems)
    assert not any("doctor --probe" in n or "device time was recorded" in n for n in found["notes"])
    if backend == "neuron":
        assert r["facts"]["neuron_build"] == env["NEURONPROF_STANDIN_NEURON_BUILD"]
        assert any("stays empty by design" in p for p in problems) is (expected == "runtime")


@pytest.mark.slow
def test_probe_text_output_and_unavailable_backend() -> None:
    code = """
import contextlib, io, runpy, sys
def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["neuronprof", "doctor", *argv]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module("neuronprof", run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code
    return dict(code=code, out=out.getvalue(), err=err.getvalue())
report(dict(ok=cli("--probe", "--backend", "cpu"), missing=cli("--probe", "--backend", "neuron")))
"""
    r = result(check(run_script(code, placeholder=True)))
    assert r["ok"]["code"] == 0
    # Issue 10 review: plain CPU has no device to probe; no plugin or mode noise.
    assert "result:      cpu: CPU only: no device to probe." in r["ok"]["out"]
    assert "plugin" not in r["ok"]["out"] and "ignored" not in r["ok"]["out"] and "--probe" not in r["ok"]["out"]
    assert r["missing"]["code"] == 1 and "backend 'neuron' is unavailable" in r["missing"]["err"]
    json.dumps(r)  # plain data all the way


@pytest.mark.slow
def test_doctor_suggests_installing_a_backend_only_when_asked_or_its_device_is_here(monkeypatch, tmp_path):
    """A laptop is not told to install TorchNeuron; `--backend neuron`, or a Neuron device file, brings the advice."""
    from neuronprof import _doctor

    nowhere = str(tmp_path / "no-such-device[0-9]*")
    monkeypatch.setattr(_doctor, "_DEVICE_FILES", {"neuron": (nowhere,), "tpu": (nowhere,), "cuda": (nowhere,)})
    if _doctor.diagnose()["auto"] != "cpu":
        pytest.skip("this machine has an accelerator backend")

    def advice(facts):
        lines = [str(i["reason"]) for i in facts["backends"] if not i["available"]] + facts["problems"]
        return [line for line in lines if "pip install" in line or "; install" in line]

    laptop = _doctor.diagnose()
    assert advice(laptop) == [], advice(laptop)
    assert any("doctor --backend neuron" in p for p in laptop["problems"])
    neuron = next(i for i in laptop["backends"] if i["name"] == "neuron")
    assert neuron["reason"] == "torch_neuronx is not installed"

    asked = _doctor.diagnose("neuron")
    assert [line for line in advice(asked) if "torch-neuronx" in line]
    assert not [line for line in advice(asked) if "torch_tpu" in line or "CUDA" in line]

    (tmp_path / "neuron0").write_text("")
    monkeypatch.setattr(_doctor, "_DEVICE_FILES", {"neuron": (str(tmp_path / "neuron[0-9]*"),)})
    with_device = _doctor.diagnose()
    assert [line for line in advice(with_device) if "torch-neuronx" in line]


def test_doctor_cli_backend_option_brings_the_install_advice(capsys):
    from neuronprof.cli import main

    assert main(["doctor", "--backend", "neuron"]) == 0
    out = capsys.readouterr().out
    if "[ok] neuron" not in out:
        assert "pip install torch-neuronx --extra-index-url" in out
