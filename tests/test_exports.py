"""Exports carry exactly what torch.profiler recorded; long runs keep memory flat."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import neuronprof
from neuronprof import _cycle_files
from neuronprof.export import tensorboard_worker

ROOT = Path(__file__).resolve().parents[1]
# torch_tb_profiler's consts.WORKER_PATTERN: how TensorBoard reads a worker from a file name.
WORKER = re.compile(r"^(.*?)(\.\d+)?\.pt\.trace\.json(\.gz)?$")


def load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


@pytest.fixture
def torch_saves(monkeypatch, tmp_path):
    """Keep a copy of kineto's own save of every cycle, as torch wrote it (a test seam)."""
    saves: dict[int, Path] = {}
    original = _cycle_files.save_native_trace

    def spy(cycle, dest):
        ok = original(cycle, dest)
        if ok:
            copy = tmp_path / f"torch_cycle{cycle.index}.json"
            copy.write_bytes(dest.read_bytes())
            saves[cycle.index] = copy
        return ok

    monkeypatch.setattr(_cycle_files, "save_native_trace", spy)
    return saves


@pytest.mark.slow
def test_export_is_torchs_own_trace_of_that_cycle(torch_saves, tmp_path):
    model = torch.nn.Linear(64, 64)
    x = torch.randn(16, 64)
    with neuronprof.session(
        backend="cpu",
        wait=0,
        warmup=1,
        active=1,
        repeat=2,
        profile_memory=True,
        record_shapes=True,
        with_flops=True,
        output_dir=tmp_path,
    ) as s:
        for _ in s.steps():
            model(x).relu()
    # The block's end writes nothing: kineto's save of a cycle is taken by its first export.
    assert torch_saves == {}
    for cycle in (0, 1):
        first = load(s.export(tmp_path / f"first{cycle}.json", cycle=cycle))
        assert sorted(torch_saves) == list(range(cycle + 1))
        own = load(torch_saves[cycle])
        assert first == own
        for path in (tmp_path / f"c{cycle}.json", tmp_path / f"c{cycle}.json.gz"):
            ours = load(s.export(path, cycle=cycle))
            # Event by event, the same events torch.profiler's own save of the cycle holds.
            assert ours["traceEvents"] == own["traceEvents"]
            # The same header: kineto wrote neuronprof's metadata into it while recording.
            assert ours == own
            assert ours["neuronprof"]["backend"] == "cpu"
            assert {"profile_memory", "record_shapes", "with_flops", "trace_id"} <= set(ours)
        memory = [e for e in ours["traceEvents"] if e.get("name") == "[memory]"]
        assert memory, "profile_memory=True records allocations"
        assert all(e["ph"] == "i" and e.get("s") == "t" and "dur" not in e for e in memory), "instants, as torch's"
    # Any number of exports, in any format, after the first.
    folder = s.export(tmp_path / "tb", format="tensorboard", cycle=0)
    (tb,) = folder.iterdir()
    assert load(tb)["traceEvents"] == load(torch_saves[0])["traceEvents"]


def test_editing_an_export_in_place_never_changes_later_exports(torch_saves, tmp_path):
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, profile_memory=True, output_dir=tmp_path) as s:
        for _ in s.steps():
            torch.relu(torch.randn(8))
    first = s.export(tmp_path / "first.json")
    events = load(first)["traceEvents"]
    assert os.stat(first).st_nlink == 1, "an export is a file of its own, never a second name of the cache"
    with open(first, "w") as f:  # a post-processing script rewrites the file in place
        f.write('{"traceEvents": []}')
    own = load(torch_saves[0])
    for name in ("second.json", "third.json.gz", "fourth.json"):
        later = s.export(tmp_path / name)
        assert os.stat(later).st_nlink == 1
        # Still torch's own save, event by event, header included: memory events stay instants.
        assert load(later) == own
    assert any(e.get("name") == "[memory]" and e["ph"] == "i" for e in own["traceEvents"])
    assert len(own["traceEvents"]) == len(events)
    assert load(first) == {"traceEvents": []}


def test_a_changed_private_copy_is_noticed_and_never_exported_as_torchs_save(tmp_path):
    from neuronprof import NeuronProfWarning

    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=tmp_path) as s:
        for _ in s.steps():
            torch.relu(torch.randn(8))
    s.export(tmp_path / "before.json")  # the first export takes kineto's save into the private copy
    (cycle,) = s._cycles  # a test seam: the private copy, changed by another program
    cycle.cache.chmod(0o644)
    cycle.cache.write_text('{"traceEvents": []}')
    with pytest.warns(NeuronProfWarning, match="was changed or removed by another program"):
        trace = load(s.export(tmp_path / "after.json"))
    assert any(e.get("name") == "aten::relu" for e in trace["traceEvents"]), "written from the recorded events"
    assert trace["neuronprof"]["backend"] == "cpu"


@pytest.mark.slow
def test_torchs_own_export_of_the_session_profiler_works_any_number_of_times(torch_saves, tmp_path):
    """s.profiler.export_chrome_trace used to raise torch's "Trace is already saved"."""
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, profile_memory=True, output_dir=tmp_path) as s:
        for _ in s.steps():
            torch.nn.functional.linear(torch.randn(4, 8), torch.randn(8, 8))
    for name in ("a.json", "b.json", "c.json.gz"):
        path = tmp_path / name
        s.profiler.export_chrome_trace(str(path))  # the first takes kineto's save, then copies it
        own = load(torch_saves[0])
        assert load(path) == own
    assert load(s.export(tmp_path / "ours.json")) == own


def test_torchs_python_exporter_and_its_newer_arguments_reach_torch(tmp_path):
    """torch 2.15's profile.export_chrome_trace passes cuda_graph_annotations, graph_lanes and
    default_stream on to the cycle's exporter; the session's trace cache must let them through."""
    import inspect

    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=tmp_path) as s:
        for _ in s.steps():
            torch.nn.functional.linear(torch.randn(4, 8), torch.randn(8, 8))
    s.profiler.export_chrome_trace(str(tmp_path / "python.json"), use_python_export=True)
    names = {e.get("name") for e in load(tmp_path / "python.json")["traceEvents"]}
    assert "aten::linear" in names
    if "graph_lanes" in inspect.signature(torch.profiler.profile.export_chrome_trace).parameters:
        # Anything but graph_lanes="none" is for torch's Python exporter, which rejects a bad value.
        with pytest.raises(Exception, match="graph_lanes"):
            s.profiler.export_chrome_trace(str(tmp_path / "bad.json"), graph_lanes="not-a-mode")
    # The cache still serves the plain export afterwards.
    s.profiler.export_chrome_trace(str(tmp_path / "plain.json"))
    assert "aten::linear" in {e.get("name") for e in load(tmp_path / "plain.json")["traceEvents"]}


def test_export_falls_back_when_kinetos_save_is_not_available(monkeypatch, tmp_path):
    monkeypatch.setattr(_cycle_files, "save_native_trace", lambda cycle, dest: False)
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=tmp_path) as s:
        for _ in s.steps():
            torch.relu(torch.randn(8))
    for name in ("a.json", "b.json"):
        trace = load(s.export(tmp_path / name))
        assert any(e.get("name") == "aten::relu" for e in trace["traceEvents"])
        assert trace["neuronprof"]["backend"] == "cpu"


@pytest.mark.parametrize("host", ["vm", "ip-10-0-0-1.ec2.internal"])
def test_tensorboard_exports_are_spans_of_one_worker(monkeypatch, tmp_path, host):
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: host)
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, repeat=2, output_dir=tmp_path) as s:
        for _ in s.steps():
            torch.relu(torch.randn(8))
    folder = tmp_path / "tb"
    for cycle in (0, 1, 1, -1):
        assert s.export(folder, format="tensorboard", cycle=cycle) == folder
    names = sorted(p.name for p in folder.iterdir())
    assert len(names) == 4
    matches = [WORKER.match(n) for n in names]
    assert all(matches), names
    assert {m.group(1) for m in matches if m} == {f"{host}_{os.getpid()}"} == {tensorboard_worker()}
    spans = [m.group(2) for m in matches if m]
    assert all(spans) and len(set(spans)) == 4, "each file is its own span"


def test_keep_cycles_bounds_the_kept_events_and_the_table_covers_every_cycle(tmp_path):
    with neuronprof.session(
        backend="cpu", wait=0, warmup=1, active=1, repeat=0, keep_cycles=2, output_dir=tmp_path
    ) as s:
        for _ in range(20):
            torch.relu(torch.randn(8))
            s.step()
    t = s.table(row_limit=None)
    assert t.steps == 10 and t.row("aten::relu").calls == 10
    assert s.export(tmp_path / "last.json", cycle=-1).exists()
    assert s.export(tmp_path / "eight.json", cycle=8).exists()
    with pytest.raises(ValueError, match=r"cycle 0's events were dropped: keep_cycles=2"):
        s.export(tmp_path / "first.json", cycle=0)
    with pytest.raises(ValueError, match="does not exist"):
        s.export(tmp_path / "none.json", cycle=10)
    with pytest.raises(ValueError, match="keep_cycles must be at least 1"):
        neuronprof.session(backend="cpu", keep_cycles=0)


def test_repeat0_steps_count_only_steps_that_ran(tmp_path):
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=5, repeat=0, output_dir=tmp_path) as s:
        for _ in range(7):
            torch.add(torch.ones(1), 2)
            s.step()
    t = s.table(row_limit=None)
    # torch recorded 5 steps of work; the step opened by the last step() never ran.
    assert t.row("aten::add").calls == 5
    assert t.steps == 5
    assert "5 profiled steps" in str(t)


_RSS_RUN = """
import gc, json, sys, torch, neuronprof
torch.set_num_threads(1)  # tiny ops on a shared machine: one thread keeps the run short
def rss_mb():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) / 1024
model = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(20)]); x = torch.randn(4, 32)
kind = sys.argv[1]
if kind == "raw":
    prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=1, repeat=0))
else:
    prof = neuronprof.session(backend="cpu", wait=1, warmup=1, active=1, repeat=0, output_dir=sys.argv[2])
marks = {}
with prof as p:
    for step in range(1, 601):
        model(x); p.step()
        if step in (150, 600):
            gc.collect(); marks[step] = rss_mb()
print("RESULT" + json.dumps(marks))
"""


def _rss_growth(kind: str, tmp_path: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_RSS_RUN), kind, str(tmp_path / kind)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    marks = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))[len("RESULT") :])
    return marks["600"] - marks["150"]


@pytest.mark.slow
def test_endless_schedule_memory_stays_flat_like_raw_torch(tmp_path):
    """repeat=0 from cycle 50 to 200: RSS grows no more than raw torch.profiler's, within 15 MB.

    Keeping every cycle grew ~0.3 MB per cycle here (45 MB over these 150 cycles);
    benchmarks/endless.py measures 300 cycles side by side.
    """
    raw = _rss_growth("raw", tmp_path)
    ours = _rss_growth("session", tmp_path)
    assert ours - raw < 15, f"neuronprof grew {ours:.0f} MB, raw torch.profiler {raw:.0f} MB"


@pytest.mark.slow
def test_endless_schedule_exports_the_last_cycle_that_recorded_something(torch_saves, tmp_path):
    from neuronprof import NeuronProfWarning

    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, repeat=0, output_dir=tmp_path) as s:
        for _ in range(5):  # cycles 0 and 1 complete; the exit cuts cycle 2 short before its active step ran
            torch.relu(torch.randn(8))
            s.step()
    with pytest.warns(NeuronProfWarning, match=r"exported cycle 1 of cycles 0 to 2: the last cycle \(2\) was cut"):
        default = load(s.export(tmp_path / "default.json"))
    assert default == load(torch_saves[1])
    assert any(e.get("name") == "aten::relu" for e in default["traceEvents"])
    # Asked for by number, the empty cycle is still exported.
    assert load(s.export(tmp_path / "last.json", cycle=-1)) == load(torch_saves[2])
    # A cycle that ended normally is the default without a word.
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, repeat=2, output_dir=tmp_path) as full:
        for _ in full.steps():
            torch.relu(torch.randn(8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert full.export(tmp_path / "full.json").exists()
