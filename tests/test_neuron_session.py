"""A Neuron session on the documented TorchNeuron build: NeuronCore time from Neuron's own profile in s.table().

Runs the TorchNeuron stand-in (no device time reaches torch.profiler, as on
the documented builds) with ``tests/neuron_tools/fake_neuron_explorer`` (a
test double emitting the documented formats, not real output). The test plays
the Neuron Runtime: after the with-block it writes the executions the runtime
would have recorded into the session folder's ``ntrace.pb``, which the fake
tool decodes.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

from run_in_subprocess import check, result, run_script  # noqa: E402

FAKE = Path(__file__).resolve().parent / "neuron_tools" / "fake_neuron_explorer"
pytestmark = pytest.mark.skipif(os.name != "posix", reason="the fake tool is a POSIX script")

_SNIPPET = r"""
import decimal, glob, json, os, warnings
from pathlib import Path
import torch
import neuronprof
import neuronprof.analysis.neuron._tool as tool_module

# The stand-in is loaded (its build needed the compiler on PATH); from here on no real
# neuron-explorer can be found, only the fake named in NEURONPROF_NEURON_EXPLORER.
os.environ["PATH"] = os.environ.pop("NEURONPROF_TEST_PATH")
tool_module.SEARCH_DIRS = ()

out = Path(OUT)
with neuronprof.session(backend="neuron", output_dir=out, wait=1, warmup=1, active=2) as s:
    for _ in s.steps():
        torch.ones(64) * 2 + 1

# Play the Neuron Runtime: executions inside each profiled step, in the session folder it wrote.
pattern = out / "neuron_profile" / f"*_pid_{os.getpid()}" / "*" / "trace.json"
(folder,) = [Path(p).parent for p in glob.glob(str(pattern))]
trace = json.loads((folder / "trace.json").read_text())
base = int(trace.get("baseTimeNanoseconds", 0))
# The steps' times read exactly, as a trace reader must (µs with ns decimals lose ns as floats).
exact = json.loads((folder / "trace.json").read_text(), parse_float=decimal.Decimal)
steps = sorted(
    (int(e["name"].split("#")[1]), base + round(e["ts"] * 1000), base + round((e["ts"] + e["dur"]) * 1000))
    for e in exact["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
)
execs, expected = [], []
for n, a, b in steps:
    L = b - a
    plan = [("neff_aten_mul_1", a + L // 10, L // 5), ("neff_aten_add_2", a + L // 2, L // 10),
            ("neff_aten_mul_1", a + 7 * L // 10, L // 5)]
    # flow ids 100n+1..3: the first two name the step's aten::mul and aten::add below, the third no framework event
    execs += [{"neff": f, "start_ns": t, "duration_ns": d, "cores": [0, 1], "flow_id": [100 * n + k]}
              for k, (f, t, d) in enumerate(plan, start=1)]
    expected.append({"step": n, "busy_ns": sum(d for _, _, d in plan), "length_ns": L,
                     "joined_ns": {"aten::mul": L // 5, "aten::add": L // 10}})
if JOIN:  # play TorchNeuron's framework events: an op carries the nrt_sequence_id of the execution it launched
    for ev in trace["traceEvents"]:
        if ev.get("ph") == "X" and ev.get("cat") == "cpu_op" and ev.get("name") in ("aten::mul", "aten::add"):
            t = base + round(ev["ts"] * 1000)
            for n, a, b in steps:
                if a <= t < b:
                    ev.setdefault("args", {})["nrt_sequence_id"] = 100 * n + (1 if ev["name"] == "aten::mul" else 2)
    (folder / "trace.json").write_text(json.dumps(trace))
if EXTRA_EARLY:  # one execution a second before the first profiled step (a warm-up step, say)
    execs.append({"neff": "neff_aten_mul_1", "start_ns": steps[0][1] - 10**9, "duration_ns": 7_000, "cores": [0, 1]})
spec = {"fake_neuron_explorer_spec": 1, "process_id": os.getpid(), "executions": execs,
        "device_profiles": [{"neff": "neff_aten_mul_1", "total_time": 4e-5, "tensor": 2e-5, "vector": 1e-5,
                             "scalar": 0.0, "gpsimd": 0.0, "sync": 0.0, "dma": 3e-5, "hbm_read_bytes": 1000,
                             "hbm_write_bytes": 1000, "hardware_flops": 4096.0, "model_flops": 4096.0}]}
if WRITE_SPEC:
    (folder / "ntrace.pb").write_text(json.dumps(spec))

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    t = s.table(row_limit=None, neuron_heuristic=HEURISTIC)
    t2 = s.table(row_limit=None)
info = {"rows": [r.to_dict() for r in t.rows], "notes": list(t.notes), "text": str(t),
        "device_total": t.self_device_us, "again": [r.to_dict() for r in t2.rows],
        "warnings": [str(w.message) for w in caught], "expected": expected, "files": sorted(os.listdir(folder))}
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = s.neuron_profile()
    info["profile_warnings"] = [str(w.message) for w in caught]
    info["profile"] = {"steps": [[x.step, x.busy_us, x.idle_us, x.executions] for x in p.steps],
                       "neffs": [[x.neff, x.calls, x.device_us] for x in p.neffs], "tool": p.tool,
                       "engines": [[e.engine, e.active_us] for e in p.summaries[0].engines] if p.summaries else []}
except Exception as exc:
    info["profile_error"] = f"{type(exc).__name__}: {exc}"
bundle = s.export(format="neuron")
info["bundle_files"] = sorted(x.name for x in (bundle / "system").rglob("*.json"))
info["bundle_parquet"] = sorted(x.name for x in (bundle / "system").rglob("*.parquet"))
try:
    rl = p.roofline()  # the profile's own peaks, where its Parquet output gave them
    info["roofline"] = [rl.peak_source, rl.device.flops_per_s, rl.device.bytes_per_s, list(rl.notes)]
except Exception as exc:
    info["roofline"] = f"{type(exc).__name__}: {exc}"
report(info)
"""


def _run(
    tmp_path: Path,
    *,
    tool: bool = True,
    emit: bool = False,
    heuristic: bool = False,
    write_spec: bool = True,
    outside: bool = False,
    join: bool = False,
):
    # emit=True: the correlating TorchNeuron build, the one that puts NeuronCore time into torch.profiler.
    env = {
        "NEURONPROF_STANDIN_NEURON_BUILD": "correlating" if emit else "documented",
        "FAKE_NEURON_EXPLORER_LOG": str(tmp_path / "calls.log"),
    }
    empty = tmp_path / "emptybin"
    empty.mkdir(exist_ok=True)
    # Once the stand-in is loaded, PATH holds only the interpreter's folder (for the fake's shebang).
    env["NEURONPROF_TEST_PATH"] = f"{empty}{os.pathsep}{os.path.dirname(sys.executable)}"
    env["NEURONPROF_NEURON_EXPLORER"] = str(FAKE) if tool else ""
    code = (
        _SNIPPET.replace("EXTRA_EARLY", repr(outside))
        .replace("OUT", repr(str(tmp_path / "out")))
        .replace("HEURISTIC", repr(heuristic))
        .replace("WRITE_SPEC", repr(write_spec))
        .replace("JOIN", repr(join))
    )
    return result(check(run_script(code, backend="neuron", env=env)))


def _row(info: dict, name: str) -> dict:
    return next(r for r in info["rows"] if r["name"] == name)


@pytest.mark.slow
def test_neff_rows_and_per_step_time_from_neurons_profile(tmp_path):
    info = _run(tmp_path)
    steps = info["expected"]
    assert [s["step"] for s in steps] == [2, 3]
    mul, add = _row(info, "NEFF neff_aten_mul_1"), _row(info, "NEFF neff_aten_add_2")
    # Two executions of neff_aten_mul_1 per step, on two physical cores each: counted once.
    assert mul["calls"] == 4 and add["calls"] == 2 and mul["on_device"] and add["on_device"]
    mul_us = sum(2 * (s["length_ns"] // 5) for s in steps) / 1000
    add_us = sum(s["length_ns"] // 10 for s in steps) / 1000
    assert mul["self_device_us"] == pytest.approx(mul_us) and add["self_device_us"] == pytest.approx(add_us)
    assert info["device_total"] == pytest.approx(mul_us + add_us)
    # No documented link to the launching op: the ops keep no device time.
    assert all(not r["self_device_us"] for r in info["rows"] if r["name"].startswith("aten::"))
    notes = " | ".join(info["notes"])
    assert "NEURON column: NeuronCore time from Neuron's own profile" in notes and "2.99.0+fake" in notes
    assert "NeuronCore time per step" in notes and "ProfilerStep#2" in info["text"]
    # One story: the backend's "empty by design" note is reworded once the NEFF rows fill the column.
    assert "empty by design" not in notes and "the NEFF rows come from Neuron's own profile" in notes
    assert "ops carry no device time" in notes and "fell outside" not in notes
    assert not any("no NEURON device time" in w for w in info["warnings"]), info["warnings"]
    got = {s[0]: s for s in info["profile"]["steps"]}
    for s in steps:
        n, busy, idle, count = got[s["step"]]
        assert busy == pytest.approx(s["busy_ns"] / 1000) and count == 3
        assert busy + idle == pytest.approx(s["length_ns"] / 1000)
    assert info["profile"]["engines"][0] == ["tensor", pytest.approx(20.0)]
    assert info["again"] == info["rows"]  # read once, same answer
    calls = (tmp_path / "calls.log").read_text().splitlines()
    # json, summary-json and, where pyarrow can read it, the Parquet output (--ingest-only): once for the session
    parquet = importlib.util.find_spec("pyarrow") is not None
    assert sum('"view"' in c for c in calls) == 2 + parquet
    if parquet:  # no framework event carries an nrt_sequence_id here: the join matched none, and says so
        assert "flow_id join: 0 of 6 execution(s)" in notes and "(0.0%" in notes
        assert "the flow_id join below put none of the executions on an op" in notes
    # The tool's JSON is kept beside the runtime's files, and travels in the bundle.
    assert "system_profile.json" in info["files"] and "neuron_summary.json" in info["files"]
    assert {"system_profile.json", "neuron_summary.json"} <= set(info["bundle_files"])


@pytest.mark.slow
def test_ops_get_device_time_from_the_flow_id_join_with_its_match_rate(tmp_path):
    pytest.importorskip("pyarrow")
    info = _run(tmp_path, join=True, heuristic=True)
    steps = info["expected"]
    for op in ("aten::mul", "aten::add"):
        want = sum(s["joined_ns"][op] for s in steps) / 1000
        assert _row(info, op)["self_device_us"] == pytest.approx(want)
    # The second aten_mul execution of each step matched no framework event: its time stays on the NEFF row only.
    mul_neff = _row(info, "NEFF neff_aten_mul_1")
    assert mul_neff["calls"] == 4 and mul_neff["self_device_us"] == pytest.approx(
        sum(2 * (s["length_ns"] // 5) for s in steps) / 1000
    )
    notes = " | ".join(info["notes"])
    assert "flow_id join: 4 of 6 execution(s)" in notes and "(66.7%" in notes and "not verified on hardware" in notes
    assert "ops carry device time where the flow_id join below put" in notes
    assert "heuristic (neuron_heuristic=True) not used: the flow_id join put device time on the ops" in notes
    assert "ops carry no device time" not in notes
    assert info["bundle_parquet"] == ["Metadata.parquet", "SystemProfileEvents.parquet"]  # kept for offline reads
    # The roofline of the session's Neuron profile needs no device=: the profile carries the fake's toy peaks.
    source, flops, bw, rl_notes = info["roofline"]
    assert (source, flops, bw) == ("profile", pytest.approx(1.0e14), pytest.approx(1.0e12))
    assert any("peaks from the profile itself" in n for n in rl_notes)


@pytest.mark.slow
def test_name_heuristic_only_when_asked_and_labelled(tmp_path):
    info = _run(tmp_path, heuristic=True)
    mul_op = _row(info, "aten::mul")
    assert mul_op["self_device_us"] == pytest.approx(_row(info, "NEFF neff_aten_mul_1")["self_device_us"])
    add_neff = _row(info, "NEFF neff_aten_add_2")["self_device_us"]
    assert _row(info, "aten::add")["self_device_us"] == pytest.approx(add_neff)
    assert any(n.startswith("heuristic (neuron_heuristic=True)") and "guess" in n for n in info["notes"])
    # The footer does not say "ops carry no device time" next to ops that carry heuristic device time.
    notes = " | ".join(info["notes"])
    assert "ops carry no device time" not in notes and "ops carry device time only where the heuristic" in notes
    assert "empty by design" not in notes
    # The table without the option (read from the same cached profile) guesses nothing.
    assert not next(r for r in info["again"] if r["name"] == "aten::mul")["self_device_us"]


@pytest.mark.slow
def test_executions_outside_the_profiled_steps_are_noted_in_the_footer(tmp_path):
    info = _run(tmp_path, outside=True)
    assert _row(info, "NEFF neff_aten_mul_1")["calls"] == 5  # counted in the NEFF total ...
    (note,) = [n for n in info["notes"] if "fell outside the profiled steps" in n]
    assert note.startswith("1 execution(s) (7.0 µs) fell outside the profiled steps")  # ... and said so
    assert note in info["text"]


@pytest.mark.slow
def test_without_the_tool_the_table_says_what_to_install(tmp_path):
    info = _run(tmp_path, tool=False)
    assert not any(r["name"].startswith("NEFF ") for r in info["rows"])
    # The table's footer says what to install; asking for Neuron's profile itself warns once.
    assert not [w for w in info["warnings"] if "neuron-explorer" in w]
    notes = " | ".join(info["notes"])
    assert "NEURON column: empty" in notes and "neuron-explorer was not found" in notes
    assert "aws-neuronx-tools" in notes
    (warning,) = info["profile_warnings"]
    assert "neuron-explorer was not found" in warning and "aws-neuronx-tools" in warning
    assert "profile_error" not in info and info["profile"]["neffs"] == []
    assert info["bundle_files"] == ["trace.json"]  # nothing written beside the runtime's files


@pytest.mark.slow
def test_torch_device_time_is_kept_and_named_as_the_source(tmp_path):
    info = _run(tmp_path, emit=True, write_spec=False)
    assert not any(r["name"].startswith("NEFF ") for r in info["rows"])
    assert any(n.startswith("NEURON column: device time from torch.profiler") for n in info["notes"])
    # The tool ran only for s.neuron_profile(), not for the table.
    assert info["profile"]["tool"] is not None


@pytest.mark.slow
def test_neuron_profile_refused_where_it_cannot_work(tmp_path):
    import neuronprof
    from neuronprof.errors import SessionStateError

    s = neuronprof.session(backend="cpu", output_dir=tmp_path / "cpu", wait=0, warmup=0, active=1)
    with pytest.raises(SessionStateError, match="after the session has run"):
        s.neuron_profile()
    with s:
        for _ in s.steps():
            pass
    with pytest.raises(ValueError, match="neuron backend"):
        s.neuron_profile()
    with pytest.raises(ValueError, match="neuron_heuristic"):
        s.table(neuron_heuristic="yes")  # type: ignore[arg-type]
    assert not any(n.startswith("NEURON column") for n in s.table().notes)  # other backends: untouched


_TWO_SESSIONS = r"""
import glob, json, os
from pathlib import Path
import torch
import neuronprof
import neuronprof.analysis.neuron._tool as tool_module

os.environ["PATH"] = os.environ.pop("NEURONPROF_TEST_PATH")
tool_module.SEARCH_DIRS = ()
out = Path(OUT)
pattern = str(out / "neuron_profile" / f"*_pid_{os.getpid()}" / "*")


def run(neff):
    before = set(glob.glob(pattern))
    with neuronprof.session(backend="neuron", output_dir=out, wait=0, warmup=0, active=2) as s:
        for _ in s.steps():
            torch.ones(64) * 2 + 1
    # Play the Neuron Runtime: one execution of this session's own NEFF in each of its steps.
    (folder,) = [Path(p) for p in set(glob.glob(pattern)) - before]
    trace = json.loads((folder / "trace.json").read_text())
    base = int(trace.get("baseTimeNanoseconds", 0))
    spans = [(base + round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in trace["traceEvents"]
             if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"]
    execs = [{"neff": neff, "start_ns": a + d // 4, "duration_ns": d // 4, "cores": [0]} for a, d in spans]
    spec = {"fake_neuron_explorer_spec": 1, "process_id": os.getpid(), "executions": execs}
    (folder / "ntrace.pb").write_text(json.dumps(spec))
    return s, len(execs)


# Both sessions run before either reads Neuron's profile (a notebook; compare()'s variants).
first, first_execs = run("neff_first")
second, second_execs = run("neff_second")
info = {}
for name, s in (("first", first), ("second", second)):
    p = s.neuron_profile()
    t = s.table(row_limit=None)
    bundle = s.export(format="neuron")
    info[name] = {
        "neffs": sorted((x.neff, x.calls) for x in p.neffs),
        "steps": [x.executions for x in p.steps],
        "rows": sorted((r.name, r.calls) for r in t.rows if r.name.startswith("NEFF ")),
        "bundle_sessions": len([d for d in (bundle / "system").glob("*/*") if d.is_dir()]),
    }
report(dict(info, first_execs=first_execs, second_execs=second_execs))
"""


@pytest.mark.slow
def test_two_sessions_in_one_process_and_folder_read_their_own_neuron_profile(tmp_path):
    env = {"NEURONPROF_STANDIN_NEURON_BUILD": "documented", "FAKE_NEURON_EXPLORER_LOG": str(tmp_path / "calls.log")}
    empty = tmp_path / "emptybin"
    empty.mkdir()
    env["NEURONPROF_TEST_PATH"] = f"{empty}{os.pathsep}{os.path.dirname(sys.executable)}"
    env["NEURONPROF_NEURON_EXPLORER"] = str(FAKE)
    code = _TWO_SESSIONS.replace("OUT", repr(str(tmp_path / "out")))
    info = result(check(run_script(code, backend="neuron", env=env)))
    assert info["first_execs"] == info["second_execs"] == 2
    # Each session's profile, table and bundle hold its own NEFF and runtime folder, never the other's.
    assert info["first"]["neffs"] == [["neff_first", 2]]
    assert info["second"]["neffs"] == [["neff_second", 2]]
    assert info["first"]["rows"] == [["NEFF neff_first", 2]]
    assert info["second"]["rows"] == [["NEFF neff_second", 2]]
    assert info["first"]["steps"] == info["second"]["steps"] == [1, 1]
    assert info["first"]["bundle_sessions"] == info["second"]["bundle_sessions"] == 1
