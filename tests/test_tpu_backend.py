"""The TPU adapter against the TorchTPU 0.2.0 facts, through the public API.

The TorchTPU stand-in (tests/backends/standins/torch_tpu) emits device kernels
linked to no op, writes ``<base>/plugins/profile/<ts>/<host>[_<rank>].xplane.pb``
when a profile stops, and honours ``TORCH_TPU_PROFILER_OUTPUT_DIR``. Device times
are the test plugin's, never a TPU's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

from run_in_subprocess import check, result, run_script  # noqa: E402

_RUN = """
import os, socket, tempfile, warnings
from pathlib import Path
import torch, neuronprof
import torch_tpu

from workload import profile_linear

def run(out, **kw):
    s, t, caught = profile_linear(out, "tpu", **kw)
    cfg = torch_tpu.profiler.last_config
    return dict(notes=s.notes, text=str(t), warnings=[f"{w.category.__name__}: {w.message}" for w in caught],
                worker_rank=cfg.worker_rank, written=str(torch_tpu.profiler.written[-1]),
                host=socket.gethostname(), total=t.self_device_us, has_device=t.has_device_time,
                op_device=t.row("aten::addmm").self_device_us)
"""


@pytest.mark.slow
def test_worker_rank_env_override_and_written_folder(tmp_path: Path) -> None:
    code = (
        _RUN
        + f"""
import torch.distributed as dist
plain = run({str(tmp_path / "plain")!r})
os.environ["TORCH_TPU_PROFILER_OUTPUT_DIR"] = {str(tmp_path / "env")!r}
overridden = run({str(tmp_path / "over")!r})
# Two sessions in one second under the override write one file: the second one warns.
import datetime as real_dt, types
import torch_tpu.profiler as tpu_profiler
class Fixed(real_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return real_dt.datetime(2026, 1, 2, 3, 4, 5)
tpu_profiler._dt = types.SimpleNamespace(datetime=Fixed)
same1 = run({str(tmp_path / "same1")!r})
same2 = run({str(tmp_path / "same2")!r})
del os.environ["TORCH_TPU_PROFILER_OUTPUT_DIR"]
# Without it, sessions in one second keep their own files (compare()'s variants).
n = len(torch_tpu.profiler.written)
variants = {{"a": lambda: torch.ones(8) + 1, "b": lambda: torch.ones(8) * 2, "c": lambda: torch.ones(8) - 1}}
cmp = neuronprof.compare(variants,
                         output_dir={str(tmp_path / "cmp3")!r}, quiet=True, backend="tpu")
cmp_written = [str(p) for p in torch_tpu.profiler.written[n:]]
tpu_profiler._dt = real_dt
dist.init_process_group("gloo", init_method="file://" + {str(tmp_path / "pg")!r}, rank=0, world_size=1)
ranked = run({str(tmp_path / "ranked")!r})
dist.destroy_process_group()
from neuronprof import _doctor
report(dict(plain=plain, overridden=overridden, ranked=ranked, probe=_doctor.probe("tpu"), same1=same1,
            same2=same2, cmp_written=cmp_written))
"""
    )
    r = result(check(run_script(code, backend="tpu")))
    plain, over, ranked = r["plain"], r["overridden"], r["ranked"]
    # No process group: no worker_rank; its own run_dir under output_dir.
    assert plain["worker_rank"] is None
    written = Path(plain["written"])
    assert written.name == f"{plain['host']}.xplane.pb"
    # A run_dir of the session's own (issue 10 review: sessions in one second shared a file).
    assert written.parent.parent.parent.parent.parent == tmp_path / "plain" / "tpu_profile"
    assert written.parent.parent.parent.name == "plugins"
    assert f"TorchTPU wrote its profile (XPlane) to {written}" in plain["notes"]
    # Ranks on one host get their own file.
    assert ranked["worker_rank"] == "0" and Path(ranked["written"]).name == f"{ranked['host']}_0.xplane.pb"
    # The environment override is detected, and the folder really written is reported.
    over_written = Path(over["written"])
    assert over_written.is_relative_to(tmp_path / "env")
    assert any("TORCH_TPU_PROFILER_OUTPUT_DIR" in n and "overrides run_dir" in n for n in over["notes"])
    assert f"TorchTPU wrote its profile (XPlane) to {over_written}" in over["notes"]
    assert not (tmp_path / "over" / "tpu_profile").exists()
    # Issue 10 review: under the override a session that overwrites an earlier one's file warns.
    assert not any("overwrote" in w for w in r["same1"]["warnings"])
    [clash] = [w for w in r["same2"]["warnings"] if "overwrote" in w]
    assert clash.startswith("NeuronProfWarning") and r["same2"]["written"] in clash
    assert f"TorchTPU wrote its profile (XPlane) to {r['same2']['written']}" in r["same2"]["notes"]
    assert len(r["cmp_written"]) == 3 and len(set(r["cmp_written"])) == 3, "one file per compare() variant"
    # `neuronprof doctor --probe`: TorchTPU's kernels reach torch unlinked.
    assert r["probe"]["result"] == "unlinked" and r["probe"]["kernels"] and not r["probe"]["linked_ops"]
    assert not any("neuronprof-probe-" in n for n in r["probe"]["notes"]), "no note names the deleted temp folder"
    for res in (plain, over, ranked):
        # Device time sits on unlinked kernel rows; the totals count it, so no empty-column warning.
        assert res["has_device"] and res["total"] > 0 and res["op_device"] == 0
        assert not any("NeuronProfWarning" in w for w in res["warnings"])


@pytest.mark.slow
def test_experimental_warning_once_compare_totals_and_runtime_mode(tmp_path: Path) -> None:
    code = (
        _RUN
        + f"""
first = run({str(tmp_path / "a")!r})
second = run({str(tmp_path / "b")!r})
lin = torch.nn.Linear(16, 16)
x = torch.randn(8, 16)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cmp = neuronprof.compare({{"linear": lin, "relu": lambda t: torch.relu(lin(t))}}, x,
                             output_dir={str(tmp_path / "cmp")!r}, quiet=True)
runtime_only = run({str(tmp_path / "rt")!r}, modes=("runtime",))
# torch < 2.12 with TorchTPU loaded: doctor and auto say so, at WARNING, not "no accelerator".
import logging
import neuronprof.backends.privateuse1 as pu1
from neuronprof import _doctor
logged = []
class Keep(logging.Handler):
    def emit(self, record):
        logged.append((record.levelname, record.getMessage()))
logging.getLogger("neuronprof").addHandler(Keep())
pu1.torch_version = lambda: (2, 11)
with neuronprof.session(output_dir={str(tmp_path / "old")!r}) as old:
    for _ in old.steps():
        torch.ones(2) + 1
old_torch = dict(backend=old.backend, problems=_doctor.diagnose()["problems"], logged=logged)
report(dict(first=first["warnings"], second=second["warnings"], label=cmp.device_label, old_torch=old_torch,
            devices=[row.self_device_us for row in cmp.rows],
            compare_warnings=[str(w.message) for w in caught], runtime_only=runtime_only,
            level=torch_tpu.profiler.last_config.device_tracer_level))
"""
    )
    r = result(check(run_script(code, backend="tpu")))
    # Without the device mode TorchTPU is asked not to trace the device, and nothing warns.
    assert r["level"] == 0 and not r["runtime_only"]["has_device"]
    assert not any("NeuronProfWarning" in w for w in r["runtime_only"]["warnings"])
    experimental = [w for w in r["first"] + r["second"] + r["compare_warnings"] if "experimental" in w]
    assert len(experimental) == 1, "TorchTPU's experimental-config warning is shown once, not per session"
    assert r["label"] == "TPU"
    old = r["old_torch"]
    assert old["backend"] == "cpu"
    assert not any("no accelerator found" in p for p in old["problems"])
    [hint] = [p for p in old["problems"] if "installed but unusable" in p]
    assert "torch_tpu" in hint and "needs torch >= 2.12" in hint
    assert any(level == "WARNING" and "torch_tpu is installed" in m and "2.12" in m for level, m in old["logged"])
    assert all(d is not None and d > 0 for d in r["devices"])
    assert not any("device time" in w for w in r["compare_warnings"])
