"""Faults and hostile conditions: nothing collected is lost, nothing corrupt is left."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

import neuronprof
from neuronprof import SessionStateError

ROOT = Path(__file__).resolve().parents[1]


def work() -> torch.Tensor:
    x = torch.randn(32, 32)
    return torch.relu(x @ x)


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_export_when_the_disk_refuses_the_write(tmp_path):
    """RLIMIT_FSIZE makes every write past the limit fail with EFBIG (SIGXFSZ ignored)."""
    code = """
        import errno, json, os, resource, signal, sys
        import torch, neuronprof
        out = sys.argv[1] if len(sys.argv) > 1 else "out"
        with neuronprof.session(backend="cpu", output_dir=out) as s:
            for _ in s.steps():
                x = torch.randn(64, 64)
                for _ in range(50):
                    x = torch.relu(x @ x)
        # One export before the limit: the failures below must not consume what it used.
        s.export("first.json")
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
        result = {}
        for target in ("out/trace.json", "out/trace.json.gz"):
            try:
                s.export(target)
                result[target] = "written"
            except OSError as exc:
                result[target] = [type(exc).__name__, exc.errno]
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        result["files"] = sorted(os.listdir(out))
        # The data survived the failures: a later export works.
        result["retry"] = os.path.getsize(s.export("out/retry.json"))
        print("RESULT" + json.dumps(result))
    """
    proc = run_python(code, tmp_path)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stderr
    result = json.loads(line[0][len("RESULT") :])
    assert result["out/trace.json"] == ["OSError", errno.EFBIG]
    assert result["out/trace.json.gz"] == ["OSError", errno.EFBIG]
    assert result["files"] == [], "no partial or temporary file may be left"
    assert result["retry"] > 4096


@pytest.mark.skipif(not hasattr(os, "fork") or os.geteuid() != 0, reason="needs root to drop to an unprivileged user")
def test_read_only_output_folder_is_refused_before_the_body_runs(tmp_path):
    # Root may write anywhere, so drop to 'nobody' in a forked child to see a real refusal.
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    tmp_path.chmod(0o755)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            ran = []
            try:
                with neuronprof.session(backend="cpu", output_dir=ro / "traces") as s:
                    ran.append(s)
            except PermissionError:
                code = 0 if not ran else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


def test_output_path_that_is_a_file(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    body_ran = []
    with pytest.raises(NotADirectoryError):
        with neuronprof.session(backend="cpu", output_dir=blocker):
            body_ran.append(True)
    assert not body_ran
    with neuronprof.session(backend="cpu", output_dir=tmp_path / "ok") as s:
        s.run(work)
    with pytest.raises(NotADirectoryError):
        s.export(blocker / "trace.json")
    assert blocker.read_text() == ""


@pytest.mark.slow
def test_two_threads_opening_sessions_at_once(tmp_path):
    barrier = threading.Barrier(2)
    release = threading.Event()
    outcomes: dict[str, object] = {}

    def opener(name: str) -> None:
        barrier.wait()
        try:
            with neuronprof.session(backend="cpu", output_dir=tmp_path / name) as s:
                outcomes[name] = "won"
                release.wait(10)
                s.run(work)
        except SessionStateError as exc:
            outcomes[name] = exc
            release.set()

    threads = [threading.Thread(target=opener, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    values = list(outcomes.values())
    assert values.count("won") == 1
    losers = [v for v in values if isinstance(v, SessionStateError)]
    assert len(losers) == 1 and "already profiling" in str(losers[0])
    assert not torch._C._autograd._profiler_enabled()
    # torch's global profiler state is usable afterwards.
    with torch.profiler.profile() as raw:
        work()
    assert any(e.key == "aten::relu" for e in raw.key_averages())
    with neuronprof.session(backend="cpu", output_dir=tmp_path / "c") as s:
        s.run(work)
    assert s.table(row_limit=None).row("aten::relu").calls == 1


@pytest.mark.slow
def test_keyboard_interrupt_then_new_session(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with neuronprof.session(backend="cpu", wait=0, warmup=0, active=2, output_dir=tmp_path) as s:
            for _ in s.steps():
                work()
                raise KeyboardInterrupt
    assert s.table(row_limit=None).row("aten::relu").calls == 1
    with neuronprof.session(backend="cpu", output_dir=tmp_path) as again:
        again.run(work)
    assert again.table(row_limit=None).row("aten::relu").calls == 1


def test_failed_start_undoes_itself(tmp_path, monkeypatch):
    import torch.profiler

    def broken_enter(self):
        raise RuntimeError("kineto refused to start")

    monkeypatch.setattr(torch.profiler.profile, "__enter__", broken_enter)
    with pytest.raises(RuntimeError, match="kineto refused"):
        with neuronprof.session(backend="cpu", output_dir=tmp_path):
            pass
    monkeypatch.undo()
    with neuronprof.session(backend="cpu", output_dir=tmp_path) as s:
        s.run(work)
    assert s.table(row_limit=None).row("aten::relu").calls == 1


# -- interrupts inside torch.profiler's own state changes ------------------------------------
# torch.profiler changes state in prepare_trace / start_trace / stop_trace / _trace_ready,
# called from step(), __enter__ and __exit__. Each test below replays a repeat=3 schedule,
# raising at one of those calls (before or after torch's own code ran).

_ACTIONS = ("prepare_trace", "start_trace", "stop_trace", "_trace_ready")


def _wrap_actions(monkeypatch, on_call):
    """Route every torch.profiler state change through on_call(name, run) (a test seam)."""
    import torch.profiler.profiler as tp

    for name in _ACTIONS:
        owner = tp.profile if name == "_trace_ready" else tp._KinetoProfile
        original = getattr(owner, name)

        def wrapper(self, _name=name, _original=original):
            return on_call(_name, lambda: _original(self))

        monkeypatch.setattr(owner, name, wrapper)


def _schedule_run(stop_at, out):
    """A repeat=3 schedule (cycles of warmup 1 + active 1) that may leave the loop at stop_at."""
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, repeat=3, output_dir=out) as s:
        for i in s.steps():
            work()
            if i == stop_at:
                break
    return s


def _transitions(monkeypatch, stop_at, out):
    seen: list[str] = []

    def record(name, run):
        seen.append(name)
        return run()

    _wrap_actions(monkeypatch, record)
    with warnings_ignored():
        _schedule_run(stop_at, out)
    monkeypatch.undo()
    return seen


def warnings_ignored():
    import warnings

    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("ignore")

    class _Exit:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            ctx.__exit__(*exc)
            return False

    return _Exit()


@pytest.mark.slow
@pytest.mark.parametrize("stop_at", [None, 3, 4], ids=["full", "break-in-active", "break-in-warmup"])
@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, RuntimeError])
def test_interrupt_at_every_schedule_transition(monkeypatch, tmp_path, stop_at, exc_type):
    """An exception at any of torch's state changes reaches the user as itself; the process stays usable."""
    sequence = _transitions(monkeypatch, stop_at, tmp_path / "clean")
    assert sequence.count("_trace_ready") == (3 if stop_at is None else 2)
    for position in range(len(sequence)):
        for after in (False, True):
            calls = [0]
            ready_before = [0]

            def inject(name, run, position=position, after=after, calls=calls, ready_before=ready_before):
                calls[0] += 1
                if calls[0] - 1 != position:
                    result = run()
                    ready_before[0] += name == "_trace_ready"
                    return result
                if after:
                    run()
                raise exc_type(f"injected at {name} #{position}")

            _wrap_actions(monkeypatch, inject)
            with warnings_ignored(), pytest.raises(exc_type, match="injected at"):
                s = None
                session = neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, repeat=3, output_dir=tmp_path)
                s = session
                with session:
                    for i in session.steps():
                        work()
                        if i == stop_at:
                            break
            monkeypatch.undo()
            assert s is not None
            assert not torch._C._autograd._profiler_enabled(), (position, after)
            assert neuronprof._session._active_session() is None
            if position == 0:
                # The fault hit __enter__: the start undid itself, and nothing ran.
                with pytest.raises(SessionStateError, match="after the session has run"):
                    s.table()
                continue
            # What completed is kept: every cycle handed over before the fault.
            t = s.table(row_limit=None)
            assert t.steps >= ready_before[0], (position, after)
            if t.steps:
                assert t.row("aten::relu").calls >= ready_before[0]
                assert s.export(tmp_path / f"kept{position}{after}.json").exists()
    # ... and a new session works in the same process.
    with neuronprof.session(backend="cpu", output_dir=tmp_path) as again:
        again.run(work)
    assert again.table(row_limit=None).row("aten::relu").calls == 1


@pytest.mark.slow
def test_real_alarm_signals_during_a_repeating_schedule(tmp_path):
    """Seeded SIGALRM interrupts at random moments: always KeyboardInterrupt, never a crash."""
    code = """
        import json, random, signal, sys, warnings
        import torch, neuronprof
        warnings.simplefilter("ignore")

        def interrupt(*_):
            raise KeyboardInterrupt

        signal.signal(signal.SIGALRM, interrupt)
        x = torch.randn(16, 16)
        seen = {"KeyboardInterrupt": 0, "finished": 0}
        for seed in (1, 2, 3):
            rng = random.Random(seed)
            for _ in range(12):
                s = neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, repeat=3)
                try:
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0005, 0.03))
                    with s:
                        for _ in s.steps():
                            for _ in range(20):
                                x = torch.relu(x @ x).clamp(max=1.0)
                    seen["finished"] += 1
                except KeyboardInterrupt:
                    seen["KeyboardInterrupt"] += 1
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                assert not torch._C._autograd._profiler_enabled()
                try:
                    s.table()
                except neuronprof.SessionStateError:
                    assert "after the session has run" in str(sys.exc_info()[1])  # interrupted start
        with neuronprof.session(backend="cpu") as s:
            s.run(lambda: torch.relu(x))
        seen["after"] = s.table(row_limit=None).row("aten::relu").calls
        print("RESULT" + json.dumps(seen))
    """
    proc = run_python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    result = json.loads(line[0][len("RESULT") :])
    assert result["KeyboardInterrupt"] > 0
    assert result["after"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("at", [1, 2], ids=["in-warmup", "in-active"])
def test_a_profiler_opened_inside_the_block_is_named(tmp_path, at):
    """A library's own torch.profiler inside the block: SessionStateError naming it, never a crash or silence."""
    x = torch.randn(8, 8)
    with pytest.raises(SessionStateError, match="another torch.profiler was started"):
        with neuronprof.session(backend="cpu", wait=1, warmup=1, active=1, output_dir=tmp_path) as s:
            for i in s.steps():
                torch.relu(x)
                if i == at:
                    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
                        torch.relu(x)
    assert not torch._C._autograd._profiler_enabled()
    # The inner profiler is refused when it starts, so the session's active step is kept.
    assert s.table().steps == (1 if at == 2 else 0)
    # The guard is the session's only: torch's own functions are back once it ends.
    assert torch.autograd.profiler._prepare_profiler is torch._C._autograd._prepare_profiler
    assert torch.autograd._enable_profiler is torch._C._autograd._enable_profiler
    with neuronprof.session(backend="cpu", output_dir=tmp_path) as again:
        again.run(work)
    assert again.table(row_limit=None).row("aten::relu").calls == 1


_FOREIGN_RUN = """
import json, sys, warnings, faulthandler
import torch, neuronprof
faulthandler.enable()
warnings.simplefilter("ignore")
C = torch._C._autograd
x = torch.randn(8, 8)

def start(kind):
    if kind == "legacy":
        with torch.autograd.profiler.profile():
            torch.relu(x)
    elif kind == "legacy-cpu-only":
        with torch.autograd.profiler_legacy.profile():
            torch.relu(x)
    elif kind == "kineto":
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            torch.relu(x)
    elif kind == "left-running":
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]).start()
        torch.relu(x)
    elif kind == "beneath":  # torch's C functions, called directly: beyond any Python-level guard
        p = torch.autograd.profiler.profile()
        C._prepare_profiler(p.config(create_trace_id=True), p.kineto_activities)
        C._enable_profiler(p.config(create_trace_id=False), p.kineto_activities)
        torch.relu(x)

result = {}
for kind, at, leave in json.loads(sys.argv[1]):
    s = neuronprof.session(backend="cpu", wait=1, warmup=1, active=1, output_dir=sys.argv[2])
    outcome = {"error": None}
    try:
        with s:
            for i in s.steps():
                torch.relu(x)
                if i == at:
                    start(kind)
                    if leave:
                        break
    except Exception as e:
        outcome["error"] = [type(e).__name__, str(e)]
    outcome["still_running"] = bool(C._profiler_enabled())
    if outcome["still_running"]:
        C._disable_profiler()  # the starter's to stop
    t = s.table(row_limit=None)
    outcome["steps"] = t.steps
    outcome["relu"] = t.row("aten::relu").calls if "aten::relu" in t.names() else 0
    outcome["noted"] = any("another torch.profiler" in n for n in s.notes)
    with neuronprof.session(backend="cpu", output_dir=sys.argv[2]) as again:
        again.run(lambda: torch.relu(x))
    outcome["again"] = again.table(row_limit=None).row("aten::relu").calls
    result[f"{kind}@{at}{'-exit' if leave else ''}"] = outcome
print("RESULT" + json.dumps(result))
"""

_PHASES = {0: "a wait step", 1: "a warmup step", 2: "an active step"}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["legacy", "legacy-cpu-only", "kineto", "left-running"])
def test_any_profiler_started_inside_the_block_is_refused_in_every_phase(tmp_path, kind):
    """torch.autograd.profiler.profile in a warmup step used to segfault: each start is refused, in each phase.

    Run in a subprocess, so that a crash fails this test instead of killing pytest.
    """
    cases = [[kind, at, False] for at in (0, 1, 2)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(
        [sys.executable, "-c", _FOREIGN_RUN, json.dumps(cases), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    result = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))[len("RESULT") :])
    for at, phase in _PHASES.items():
        outcome = result[f"{kind}@{at}"]
        error_type, message = outcome["error"]
        assert error_type == "SessionStateError", outcome
        assert "another torch.profiler was started inside the session's block" in message
        assert f"({phase})" in message and "neuronprof refused it" in message
        assert "test_faults.py" not in message and "<string>:" in message, "it names where it was started"
        assert not outcome["still_running"], "the refused profiler never started"
        assert outcome["noted"]
        # The session's own recording is unharmed: the active step was recorded.
        assert (outcome["steps"], outcome["relu"]) == ((1, 1) if at == 2 else (0, 0)), outcome
        assert outcome["again"] == 1


@pytest.mark.slow
def test_a_profiler_started_beneath_torchs_python_api_is_named_at_the_next_step_or_exit(tmp_path):
    """One started through torch's C functions is seen at the next step() or at exit, left running or stopped."""
    cases = [["beneath", 0, False], ["beneath", 1, False], ["beneath", 1, True]]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(
        [sys.executable, "-c", _FOREIGN_RUN, json.dumps(cases), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    result = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))[len("RESULT") :])
    for key in ("beneath@0", "beneath@1", "beneath@1-exit"):
        outcome = result[key]
        assert outcome["error"][0] == "SessionStateError", (key, outcome)
        assert "another torch.profiler was started and is still running" in outcome["error"][1]
        assert outcome["still_running"], "the session stops nothing it does not own"
        assert outcome["again"] == 1


# -- termination requests, forks, private folders -------------------------------------------

_TERMINATED = """
    import json, os, signal, sys, tempfile
    import torch, neuronprof
    where, out = sys.argv[1], sys.argv[2]
    x = torch.randn(8, 8)

    def terminate_now(*_):
        os.kill(os.getpid(), signal.SIGTERM)

    if where == "save":
        # At the second cycle's stop: the first cycle's private copy exists, the second's save is due.
        stops = []
        original = torch.profiler.profile.stop_trace

        def stop_trace(self):
            stops.append(1)
            if len(stops) == 2:
                terminate_now()
            original(self)

        torch.profiler.profile.stop_trace = stop_trace
    with neuronprof.session(backend="cpu", output_dir=out, wait=0, warmup=1, active=1, repeat=2) as s:
        for _ in s.steps():
            for _ in range(200):
                torch.tanh(x)
    if where == "export":
        import gzip
        write = gzip.GzipFile.write

        def write_then_terminate(self, data):
            n = write(self, data)
            terminate_now()
            return n

        gzip.GzipFile.write = write_then_terminate
        s.export(os.path.join(out, "trace.json.gz"))
    print("not terminated")
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["save", "export"])
def test_sigterm_during_a_save_or_an_export_leaves_nothing_behind(tmp_path, where):
    """The default SIGTERM still ends the process, as the signal; what neuronprof was writing goes first."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    script = tmp_path / "terminated.py"
    script.write_text(textwrap.dedent(_TERMINATED))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TMPDIR=str(temp))
    proc = subprocess.run(
        [sys.executable, str(script), where, "out"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -15, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "not terminated" not in proc.stdout
    assert list(temp.iterdir()) == [], "no private copy of a cycle is left in $TMPDIR"
    assert list((tmp_path / "out").iterdir()) == [], "no temporary (or half-written) file is left"


@pytest.mark.slow
def test_sigterm_at_random_moments_leaves_nothing_behind(tmp_path):
    """Seeded random SIGTERMs around the block's end and an export: nothing is ever left but whole exports."""
    code = """
        import gzip, json, os, random, signal, sys, tempfile, time
        import torch, neuronprof
        out = os.path.abspath("out")
        os.makedirs(out)
        rng = random.Random(int(sys.argv[1]))
        x = torch.randn(8, 8)
        outcomes = []
        for i in range(4):
            ready_r, ready_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(ready_r)
                with neuronprof.session(backend="cpu", output_dir=out) as s:
                    for step in s.steps():
                        if step == 3:
                            for _ in range(2000):
                                torch.tanh(x)
                            os.write(ready_w, b"1")
                s.export(os.path.join(out, f"trace{i}.json.gz"))
                sys.exit(0)  # (os._exit would skip the clean-up of a normal exit)
            os.close(ready_w)
            os.read(ready_r, 1)
            time.sleep(rng.uniform(0.0, 0.3))
            os.kill(pid, signal.SIGTERM)
            _, status = os.waitpid(pid, 0)
            outcomes.append(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
        whole = []
        for name in os.listdir(out):
            with gzip.open(os.path.join(out, name)) as f:
                whole.append(bool(json.load(f)["traceEvents"]))
        # A request between the save and an export (not while neuronprof writes) ends the process
        # at once, as it always did: its private copy is removed by the next session that starts.
        with neuronprof.session(backend="cpu", output_dir=os.path.abspath("again")) as s:
            s.run(lambda: torch.relu(x))
        del s
        import gc; gc.collect()
        print("RESULT" + json.dumps({"outcomes": outcomes, "files": sorted(os.listdir(out)), "whole": whole,
                                     "tmp": sorted(os.listdir(tempfile.gettempdir()))}))
    """
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TMPDIR=str(temp))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), os.environ.get("NEURONPROF_FAULT_SEED", "7")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stderr[-3000:]
    result = json.loads(line[0][len("RESULT") :])
    assert set(result["outcomes"]) <= {-15, 0}, result
    assert all(name.startswith("trace") and name.endswith(".json.gz") for name in result["files"]), result
    assert all(result["whole"]), "an export is whole or absent"
    assert result["tmp"] == [], "no private copy of a cycle is left in $TMPDIR"


@pytest.mark.slow
def test_a_session_removes_private_folders_of_processes_that_died(tmp_path):
    """A process killed outright (SIGKILL) cannot clean up: the next session does."""
    code = """
        import os, signal, sys, tempfile
        import torch, neuronprof
        from neuronprof import _cycle_files
        with neuronprof.session(backend="cpu", output_dir="out", wait=0, warmup=1, active=1, repeat=2) as s:
            for _ in s.steps():
                torch.relu(torch.randn(4, 4))
                if s.steps_taken == 2:
                    # The first cycle's private copy, as its first export would take it (a test seam).
                    _cycle_files.take_save(s._cycles[0])
                    print(sorted(os.listdir(tempfile.gettempdir())), flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
    """
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TMPDIR=str(temp))
    command = [sys.executable, "-c", textwrap.dedent(code)]
    killed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr[-2000:]
    left = list(temp.iterdir())
    assert len(left) == 1 and left[0].name.startswith("neuronprof-cycles-"), left
    # Someone else's folder of the same look, and a live process's, are left alone.
    alive = temp / left[0].name.replace(left[0].name.split("-")[2], str(os.getpid()))
    alive.mkdir()
    other = temp / "neuronprof-cycles-notapid-x"
    other.mkdir()
    again = run_python(
        f"""
        import os, torch, neuronprof
        os.environ["TMPDIR"] = {str(temp)!r}
        import tempfile; tempfile.tempdir = None
        with neuronprof.session(backend="cpu", output_dir="out") as s:
            s.run(lambda: torch.relu(torch.randn(4, 4)))
        """,
        tmp_path,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    names = sorted(p.name for p in temp.iterdir())
    assert left[0].name not in names, "the dead process's folder is removed"
    assert alive.name in names and other.name in names


@pytest.mark.slow
def test_a_temporary_folder_that_cannot_be_written_keeps_torchs_own_save(tmp_path):
    """$TMPDIR unusable: the private copy goes into output_dir (hidden, removed with the session)."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    code = f"""
        import json, os, tempfile
        import torch, neuronprof
        tempfile.tempdir = {str(blocked)!r}
        with neuronprof.session(backend="cpu", output_dir="out", profile_memory=True) as s:
            s.run(lambda: torch.relu(torch.randn(64, 64)))
        path = s.export("out/t.json")
        header = json.load(open(path))
        during = sorted(os.listdir("out"))
        del s
        import gc; gc.collect()
        print("RESULT" + json.dumps({{"notes": [], "host_name": "host_name" in header.get("deviceProperties", [{{}}])[0]
              if False else "trace_id" in header, "during": during, "after": sorted(os.listdir("out"))}}))
    """
    proc = run_python(code, tmp_path)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stderr[-3000:]
    result = json.loads(line[0][len("RESULT") :])
    assert result["host_name"], "torch's own save, with its header (trace_id), not the Python exporter's"
    assert any(name.startswith(".neuronprof-cycles-") for name in result["during"]), result
    assert result["after"] == ["t.json"], "the hidden copy goes with the session"


@pytest.mark.slow
def test_a_failed_save_says_what_exports_lose(tmp_path):
    """kineto cannot write its save (a file-size limit): the note says what the exports lose and why."""
    code = """
        import json, resource, signal
        import torch, neuronprof
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, hard))
        with neuronprof.session(backend="cpu", output_dir="out") as s:
            s.run(lambda: torch.relu(torch.randn(64, 64)))
        try:
            s.export("out/first.json")  # the first export takes kineto's save: it cannot be written
        except OSError:
            pass  # (nor can the export itself, under the same limit)
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        written = s.export("out/second.json")
        names = {e.get("name") for e in json.load(open(written))["traceEvents"]}
        print("RESULT" + json.dumps({"notes": s.notes, "kept": "aten::relu" in names}))
    """
    proc = run_python(code, tmp_path)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stderr[-3000:]
    result = json.loads(line[0][len("RESULT") :])
    notes = result["notes"]
    said = [n for n in notes if "could not keep torch's own save" in n]
    assert said and "Python exporter" in said[0] and "memory events" in said[0], notes
    assert result["kept"], "what was recorded is exported all the same"


@pytest.mark.slow
def test_a_forked_child_can_profile_with_raw_torch_and_the_parent_is_unaffected(tmp_path):
    code = """
        import json, os, torch, neuronprof
        x = torch.randn(16, 16)
        with neuronprof.session(backend="cpu", output_dir="out") as s:
            for i in s.steps():
                torch.relu(x)
                if i == 3:
                    r, w = os.pipe()
                    pid = os.fork()
                    if pid == 0:
                        try:
                            with torch.profiler.profile() as p:
                                torch.tanh(x)
                            answer = sorted({e.key for e in p.key_averages()})
                        except Exception as e:
                            answer = [type(e).__name__, str(e)]
                        os.write(w, json.dumps(answer).encode())
                        os._exit(0)
                    os.close(w)
                    child = json.loads(os.read(r, 100000))
                    os.waitpid(pid, 0)
        print("RESULT" + json.dumps({"child": child, "parent": s.table(row_limit=None).names()}))
    """
    proc = run_python(code, tmp_path)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stderr[-3000:]
    result = json.loads(line[0][len("RESULT") :])
    assert "aten::tanh" in result["child"], result
    assert "aten::relu" in result["parent"] and "aten::tanh" not in result["parent"]


@pytest.mark.slow
def test_forks_at_random_moments_can_profile_and_leave_the_parent_whole(tmp_path):
    """Seeded SIGALRMs fork the process at random moments of a repeating schedule; each child profiles."""
    code = """
        import json, os, random, signal, sys
        import torch, neuronprof
        rng = random.Random(int(sys.argv[1]))
        x = torch.randn(16, 16)
        children = []

        def fork_here(*_):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                try:
                    with neuronprof.session(backend="cpu", output_dir="child", wait=0, warmup=1, active=1) as c:
                        for _ in c.steps():
                            torch.tanh(x)
                    answer = c.table(row_limit=None).row("aten::tanh").calls
                except BaseException as e:
                    answer = f"{type(e).__name__}: {e}"
                os.write(w, json.dumps(answer).encode())
                os._exit(0)
            os.close(w)
            children.append((pid, r))

        # neuronprof imports its session on first use: done before the alarms, as any module a
        # signal handler uses must be (a handler that runs mid-import sees a half-made module).
        neuronprof.session
        signal.signal(signal.SIGALRM, fork_here)
        for _ in range(3):
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0005, 0.05))
            with neuronprof.session(backend="cpu", output_dir="parent", wait=1, warmup=1, active=1, repeat=2) as s:
                for _ in s.steps():
                    for _ in range(10):
                        torch.relu(x @ x)
            signal.setitimer(signal.ITIMER_REAL, 0)
            parent_calls = s.table(row_limit=None).row("aten::relu").calls
        answers = []
        for pid, r in children:
            answers.append(json.loads(os.read(r, 100000)))
            os.waitpid(pid, 0)
        print("RESULT" + json.dumps({"answers": answers, "parent": parent_calls}))
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    command = [sys.executable, "-c", textwrap.dedent(code), os.environ.get("NEURONPROF_FAULT_SEED", "3")]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stderr[-3000:]
    result = json.loads(line[0][len("RESULT") :])
    assert result["answers"] and all(a == 1 for a in result["answers"]), result
    assert result["parent"] == 2 * 10, "the parent's two cycles are whole"


@pytest.mark.slow
def test_a_child_forked_after_a_session_never_removes_the_parents_private_copy(tmp_path):
    code = """
        import gc, json, os
        import torch, neuronprof
        with neuronprof.session(backend="cpu", output_dir="out", wait=0, warmup=1, active=1, repeat=2) as s:
            for _ in s.steps():
                torch.relu(torch.randn(8, 8))
        pid = os.fork()
        if pid == 0:
            del s
            gc.collect()
            os._exit(0)
        os.waitpid(pid, 0)
        header = json.load(open(s.export("out/first.json", cycle=0)))
        print("RESULT" + json.dumps({"torch_save": "trace_id" in header}))
    """
    proc = run_python(code, tmp_path)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stderr[-3000:]
    assert json.loads(line[0][len("RESULT") :]) == {"torch_save": True}, "the parent's copy is still torch's own save"
    assert "changed or removed by another program" not in proc.stderr
