"""The Neuron adapter on each TorchNeuron build of the public record, through the public API.

Builds (tests/backends/standins/torch_neuronx): ``correlating`` (NeuronConfig takes
``correlate_device_time``; only then do NeuronCore executions reach torch linked to
ops), ``beta`` (the public beta, torch-neuronx 2.13.3.0/2.14.3.0: the documented
surface, told apart by its version), ``documented`` (no such keyword: runtime events
only), ``legacy`` (no NeuronConfig at all). Device times are the test plugin's, never a Trainium's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

from run_in_subprocess import check, result, run_script  # noqa: E402

BUILDS = ("correlating", "beta", "documented", "legacy")

_SESSION = """
import json, os, warnings
from pathlib import Path
import torch, neuronprof
import testbackend as tb
from torch_neuronx import _runtime

from workload import profile_linear

def run(out, **kw):
    return profile_linear(out, "neuron", **kw)

def facts(s, t, caught):
    return dict(
        text=str(t), notes=s.notes, warnings=[f"{w.category.__name__}: {w.message}" for w in caught],
        device=t.self_device_us, has_device=t.has_device_time, core=s.core,
        customs=[c for c in tb.stats()["custom_configs"] if c],
        runtime_cores=[r.cores for r in _runtime.sessions], runtime_log=list(_runtime.log),
    )
"""


def _run(code: str, build: str, env: dict[str, str] | None = None) -> dict:
    full_env = {"NEURONPROF_STANDIN_NEURON_BUILD": build, **(env or {})}
    return result(check(run_script(_SESSION + code, backend="neuron", env=full_env)))


@pytest.mark.slow
@pytest.mark.parametrize("build", BUILDS)
def test_device_column_note_and_bundle_per_build(tmp_path: Path, build: str) -> None:
    r = _run(
        f"""
s, t, caught = run({str(tmp_path / "out")!r}, repeat=2)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    bundle = s.export(format="neuron")
sessions = sorted({{str(p.parent.relative_to(bundle)) for p in (bundle / "system").rglob("*.ntff")}})
from neuronprof import _doctor
first = facts(s, t, caught)
# compare() and s.table() agree on the device columns (one session per variant, same folder).
cmp = neuronprof.compare({{"a": lambda: torch.ones(4) + 1, "b": lambda: torch.ones(4) * 2}},
                         output_dir={str(tmp_path / "out")!r}, quiet=True, backend="neuron", repeats=1, warmup=0)
first.update(cmp_text=str(cmp), cmp_device=[r.self_device_us for r in cmp.rows], cmp_notes=list(cmp.notes),
             row_devices=sorted({{repr(r.self_device_us) for r in t.rows}}))
# A second session in the same process and output folder (a notebook, compare()): its
# bundle holds its own runtime folders only, each with its own cycle's framework trace.
s2, t2, caught2 = run({str(tmp_path / "out")!r}, repeat=2)
bundle2 = s2.export(format="neuron")
def steps(folder):
    trace = next(folder.glob("*trace*.json"))
    return sorted(int(e["name"].split("#")[1]) for e in json.loads(trace.read_text())["traceEvents"]
                  if str(e.get("name", "")).startswith("ProfilerStep#"))
second = [p for p in sorted((bundle2 / "system").glob("*/*"), key=lambda d: d.name) if p.is_dir()]
report(dict(first, readme=(bundle / "README.txt").read_text(), sessions=sessions,
            sessions2=[str(p.relative_to(bundle2)) for p in second], steps2=[steps(p) for p in second],
            files=sorted(str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file()),
            bundle_warnings=[str(x.message) for x in w], probe=_doctor.probe("neuron"),
            diagnosis=_doctor.diagnose()))
""",
        build,
        env={"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff-cache")},
    )
    assert r["warnings"] == [] and r["bundle_warnings"] == [], "no warning on any build"
    if build == "correlating":
        assert r["has_device"] and r["device"] > 0
        assert all("correlate_device_time:true" in c for c in r["customs"])
        assert not any("stays in Neuron's own profile" in n for n in r["notes"])
    else:
        assert not r["has_device"]
        assert not any("correlate_device_time" in c for c in r["customs"]), "only passed when accepted"
        [note] = [n for n in r["notes"] if "stays in Neuron's own profile" in n]
        assert "correlate_device_time" in note and "s.export(format='neuron')" in note and "Neuron Explorer" in note
        assert f"note: {note}" in r["text"], "the note is in the table's footer"
        assert not any("torch >= 2.12" in n or "plugin" in n for n in r["notes"])
        # Issue 10 review: no device time reaches torch, so no device columns (never 0.0), in both.
        assert r["row_devices"] == ["None"] and "Self NEURON" not in r["text"]
        assert r["cmp_device"] == [None, None] and "Self NEURON" not in r["cmp_text"]
        assert note in r["cmp_notes"] and f"note: {note}" in r["cmp_text"]
    # The settings reach the plugin as custom_profiler_config on every build.
    assert r["customs"] and all("profile_output_dir:" in c for c in r["customs"])
    # core=None: capture_enabled_for_nc is left out; the runtime captures every core of the process.
    assert not any("capture_enabled_for_nc" in c for c in r["customs"])
    assert r["runtime_cores"] == [[0, 1], [0, 1]]
    assert r["runtime_log"] == []

    # The bundle: one Neuron Runtime session folder per profiling cycle, each with
    # its NEFFs, one NTFF per NeuronCore and the framework trace.
    assert len(r["sessions"]) == 2
    # Issue 10 review: the second session's bundle has only its own two folders, and each
    # cycle's framework trace in its own folder (earlier cycles hold earlier steps).
    assert len(r["sessions2"]) == 2 and not set(r["sessions2"]) & set(r["sessions"])
    first, later = r["steps2"]
    assert first and later and max(first) < min(later)
    readme = r["readme"]
    for folder in r["sessions"]:
        names = [f.rsplit("/", 1)[1] for f in r["files"] if f.startswith(folder + "/")]
        neffs = [n for n in names if n.endswith(".neff")]
        ntffs = [n for n in names if n.endswith(".ntff")]
        assert len(neffs) == 2 and ntffs == ["profile_nc_0_session_0.ntff", "profile_nc_1_session_0.ntff"]
        assert "trace.json" in names
        # Every file listed with what it is; one NTFF per core covers every NEFF.
        for name in names:
            assert f"{folder}/{name}\n" in readme
        assert f"neuron-explorer view -d {folder}\n" in readme
        for n in neffs:
            for f in ntffs:
                assert f"neuron-explorer view -n {folder}/{n} -s {folder}/{f}" in readme
    assert "device trace of NeuronCore 1" in readme and "framework trace" in readme and "WARNING" not in readme
    assert "Run the commands below from this folder" in readme

    # `neuronprof doctor --probe` reports what this build delivers, and doctor names the build.
    expected = "linked" if build == "correlating" else "runtime"
    assert r["probe"]["result"] == expected
    if expected == "linked":
        assert r["probe"]["kernels"] and r["probe"]["linked_ops"]
    else:
        assert r["probe"]["runtime_events"] > 0 and not r["probe"]["kernels"]
    assert r["diagnosis"]["neuron_build"] == build
    problems = r["diagnosis"]["problems"]
    assert any("stays empty by design" in p for p in problems) is (build != "correlating")
    assert any("doctor --probe" in p for p in problems)
    assert not any("did not load" in p for p in problems), "that check could not detect a missing plugin"
    if build == "legacy":
        # No NeuronConfig on this build: the hint names what to upgrade to, not a keyword it lacks.
        [hint] = [p for p in problems if "stays empty by design" in p]
        assert "correlate_device_time" not in hint and "NeuronConfig's" not in hint and "upgrade to" in hint


# The correlating and documented builds share NeuronConfig; the legacy build has its own config string.
@pytest.mark.slow
@pytest.mark.parametrize("build", ["documented", "legacy"])
def test_cores_are_process_local_and_validated_before_start(tmp_path: Path, build: str) -> None:
    r = _run(
        f"""
out = Path({str(tmp_path)!r})
seen = {{}}
for core in (None, "all", "1", "0-1"):
    torch.neuron.reset_counts()
    s, t, caught = run(out / str(core), core=core)
    seen[str(core)] = dict(custom=tb.stats()["last_custom_config"], cores=_runtime.sessions[-1].cores,
                           syncs=list(torch.neuron.sync_devices), log=list(_runtime.log))
refused = []
for bad in ("0-", "all,1", "3-1", "-1", 1.5):
    configured = tb.stats()["sessions_configured"]
    try:
        neuronprof.session(core=bad, backend="neuron")
        refused.append(None)
    except ValueError as exc:
        refused.append(str(exc))
    assert tb.stats()["sessions_configured"] == configured, "nothing started"
report(dict(seen=seen, refused=refused))
""",
        build,
    )
    seen = r["seen"]
    for core in ("None", "all"):
        assert "capture_enabled_for_nc" not in seen[core]["custom"]
        assert seen[core]["cores"] == [0, 1]
    assert "capture_enabled_for_nc:1" in seen["1"]["custom"] and seen["1"]["cores"] == [1]
    assert "capture_enabled_for_nc:0-1" in seen["0-1"]["custom"]
    assert all(s["log"] == [] for s in seen.values()), "the runtime never rejects what neuronprof sends"
    # Every captured device is synchronised each step (4 steps), not only the current one.
    assert seen["None"]["syncs"].count(1) == 4 and seen["all"]["syncs"].count(1) == 4
    assert seen["1"]["syncs"].count(1) == 4
    assert None not in r["refused"]
    assert all("invalid core" in msg or "core must" in msg for msg in r["refused"])


@pytest.mark.slow
def test_torchrun_rank_cores_and_a_bundle_without_neffs(tmp_path: Path) -> None:
    # torchrun: TorchNeuron gives rank 3 NEURON_RT_VISIBLE_CORES=3, seen as core 0 in the process.
    r = _run(
        f"""
s, t, caught = run({str(tmp_path / "out")!r})
plain = facts(s, t, caught)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    bundle = s.export(format="neuron")
s2, t2, caught2 = run({str(tmp_path / "out2")!r}, core="0,1")
syncs = list(torch.neuron.sync_devices)
# A selector naming none of the process's cores: warned at start; steps still sync core 0.
torch.neuron.reset_counts()
s3, t3, caught3 = run({str(tmp_path / "out3")!r}, core="2-5")
none_visible = dict(facts(s3, t3, caught3), syncs=list(torch.neuron.sync_devices))
report(dict(plain=plain, two=facts(s2, t2, caught2), syncs=syncs, none=none_visible,
            readme=(bundle / "README.txt").read_text(), warnings=[str(x.message) for x in w],
            where=[x.filename for x in w],
            categories=[x.category.__name__ for x in w]))
""",
        "documented",
        env={"LOCAL_RANK": "3", "RANK": "3", "NEURON_RT_VISIBLE_CORES": "3", "TORCH_NEURONX_NEFF_CACHE_DIR": ""},
    )
    assert not any("capture_enabled_for_nc" in c for c in r["plain"]["customs"]), "never str(local_rank)"
    assert r["plain"]["runtime_cores"] == [[0]] and r["plain"]["runtime_log"] == []
    assert 3 not in r["syncs"]
    # AWS's multi-rank example passes "0,1" on every rank: not refused, but the user is told.
    assert any("not captured" in n and "process-local" in n for n in r["two"]["notes"])
    # No NEFF cache folder: a note at start, and the bundle warns how to fix it.
    assert any("TORCH_NEURONX_NEFF_CACHE_DIR is not set" in n for n in r["plain"]["notes"])
    assert r["categories"] == ["NeuronProfWarning"]
    assert "no .neff" in r["warnings"][0] and "TORCH_NEURONX_NEFF_CACHE_DIR=<folder>" in r["warnings"][0]
    # The fix names no NeuronConfig (the legacy build has none), and the warning points at the user's line.
    assert "NeuronConfig" not in r["warnings"][0] and r["where"] == ["<string>"]
    assert "WARNING" in r["readme"] and "TORCH_NEURONX_NEFF_CACHE_DIR" in r["readme"]
    # Issue 10 review: core="2-5" in a process that sees one NeuronCore.
    none = r["none"]
    [warned] = [w for w in none["warnings"] if "names no NeuronCore visible" in w]
    assert warned.startswith("NeuronProfWarning") and "sees 1 NeuronCore(s) (indices 0-0)" in warned
    assert set(none["syncs"]) == {0} and len(none["syncs"]) >= 4, "each step still syncs the process's own core"


# Whether TorchNeuron's export_trace consumes kineto's one-time save ("kineto") or not
# ("python") is undocumented, and so is the one framework-trace name: cover each.
_EXPORT_CASES = [
    ("kineto", "trace.json"),
    ("python", "trace.json"),
    ("kineto", "neuron_framework_trace_rank_{rank}.json"),
    ("kineto", "pytorch_trace.json"),
]


@pytest.mark.slow
@pytest.mark.parametrize("build", BUILDS)
def test_export_works_whether_or_not_export_trace_consumed_kinetos_save(tmp_path: Path, build: str) -> None:
    cases = _EXPORT_CASES[:1] if build == "legacy" else _EXPORT_CASES  # legacy runs no exporter
    r = _run(
        f"""
import gzip
import neuronprof._cycle_files as collect  # where the exporter check lives
supported = collect._python_export_supported
results = {{}}
for exporter, trace_name in {cases!r}:
    os.environ["NEURONPROF_STANDIN_NEURON_EXPORT"] = exporter
    os.environ["NEURONPROF_STANDIN_NEURON_TRACE_NAME"] = trace_name
    for forced in (False, True):
        # forced: the path torch < 2.13 takes (no repeatable Python exporter).
        collect._python_export_supported = (lambda profile: False) if forced else supported
        out = Path({str(tmp_path)!r}) / f"{{exporter}}-{{len(results)}}"
        s, t, caught = run(out)
        names = []
        for target in (None, out / "again.json.gz"):
            path = s.export(target)
            with (gzip.open if path.suffix == ".gz" else open)(path, "rt") as f:
                events = json.load(f)["traceEvents"]
            names.append(sum(1 for e in events if e.get("name") == "aten::addmm"))
        results[f"{{exporter}} {{trace_name}} forced={{forced}}"] = dict(
            names=names, warnings=[str(w.message) for w in caught])
report(results)
""",
        build,
        env={"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff-cache")},
    )
    assert len(r) == 2 * len(cases)
    for case, res in r.items():
        assert res["names"] == [1, 1], f"export twice ({case})"
        assert res["warnings"] == [], case


@pytest.mark.slow
def test_torch_version_gate_states_each_backends_reason() -> None:
    code = """
import neuronprof
import neuronprof.backends.privateuse1 as pu1
pu1.torch_version = lambda: (2, 11)
from neuronprof.backends import get_backend
neuron = neuronprof.session(backend="neuron")
report(dict(neuron=neuron.backend, tpu_problem=get_backend("tpu").torch_problem(),
            neuron_problem=get_backend("neuron").torch_problem()))
"""
    r = result(check(run_script(code, backend="neuron")))
    assert r["neuron"] == "neuron" and r["neuron_problem"] is None, "TorchNeuron registers with kineto directly"
    assert "TorchTPU" in r["tpu_problem"] and "needs torch >= 2.12" in r["tpu_problem"]
    assert "PrivateUse1ProfilerRegistry" in r["tpu_problem"]
