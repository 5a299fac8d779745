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
