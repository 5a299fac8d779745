"""The session asks every backend the same questions: no backend is named in its code.

A backend contributes its notes, the table rows its own files hold, its own profile
and the files its runtime wrote (the export formats made from them) through the
hooks of ``backends.base.Backend``; a toy backend registered from a test gets each
of them into a real session without any change to the session.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path

import pytest
import torch

import neuronprof
from neuronprof import _session
from neuronprof.backends import (
    Backend,
    DeviceFiles,
    SessionContext,
    add_note,
    register_backend,
    unregister_backend,
)
from neuronprof.model import Table

BUILTIN_NAMES = {"neuron", "tpu", "cuda", "cpu"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _backend_mentions(source: str) -> list[tuple[int, str]]:
    """Where code (not docstrings) names one backend: its name as a string (or the start of one
    in a comparison or a string test), a backend module or a backend's class."""
    from neuronprof import backends

    classes = {c.__name__ for c in vars(backends).values() if isinstance(c, type) and issubclass(c, Backend)}
    classes -= {"Backend", "PrivateUse1Backend"}  # the interface and the base any PrivateUse1 device subclasses
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docstrings and isinstance(node.value, str):
            text = node.value.lower()
            if text in BUILTIN_NAMES or (len(text) >= 3 and any(n.startswith(text) for n in BUILTIN_NAMES)):
                found.append((node.lineno, node.value))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name and (name.split(".")[-1] in BUILTIN_NAMES or name in classes):
                    found.append((node.lineno, name))
        elif isinstance(node, (ast.Name, ast.Attribute)):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name in classes:
                found.append((node.lineno, name))
    return found


def test_the_session_module_names_no_backend():
    # The check finds each way of naming a backend.
    probes = [
        'if self.backend == "neuron": pass',
        'if name.startswith("neu"): pass',
        "from neuronprof.backends import neuron",
        "from neuronprof.backends.tpu import TpuBackend",
        "isinstance(b, CudaBackend)",
    ]
    assert all(_backend_mentions(p) for p in probes)
    assert not _backend_mentions('"""Works on neuron and tpu."""\nx = self.backend')
    named = _backend_mentions(Path(_session.__file__).read_text(encoding="utf-8"))
    assert named == [], f"_session.py branches on backend names: {named}"


def test_the_backend_interface_has_nothing_of_one_device():
    assert [name for name in dir(Backend) if "neuron" in name.lower()] == []


class FilesBackend(Backend):
    """The CPU, plus the after-the-block contributions of a device whose runtime writes files of its own."""

    name = "toy-files"
    export_formats = ("neuron",)  # its files are laid out as Neuron Runtime lays out its own

    def is_available(self) -> bool:
        return True

    def on_trace_ready(self, prof, ctx: SessionContext):
        folder = ctx.output_dir / "toy_profile" / f"host_pid_{os.getpid()}" / f"cycle{len(ctx.extras)}"
        folder.mkdir(parents=True)
        (folder / "ntrace.pb").write_bytes(b"toy")
        ctx.extras.setdefault("cycle_dirs", []).append(folder)
        add_note(ctx, "toy: a cycle ended")
        return None

    def complete_table(self, table: Table, ctx: SessionContext, *, heuristic: bool = False) -> Table:
        return dataclasses.replace(table, notes=(*table.notes, f"toy rows added (heuristic={heuristic})"))

    def device_profile(self, ctx: SessionContext, *, tool="auto"):
        return {"tool": tool, "output_dir": ctx.output_dir}

    def device_files(self, ctx: SessionContext) -> DeviceFiles:
        return DeviceFiles(ctx.output_dir / "toy_profile", tuple(ctx.extras["cycle_dirs"]))


@pytest.fixture
def files_backend():
    register_backend(FilesBackend())
    yield
    unregister_backend("toy-files")


def test_a_new_backend_contributes_notes_rows_profile_and_files(files_backend, tmp_path):
    x = torch.randn(16, 16)
    with neuronprof.session(backend="toy-files", output_dir=tmp_path, max_events_per_nc=10) as s:
        for _ in s.steps():
            x @ x
    assert "toy: a cycle ended" in s.notes
    assert "max_events_per_nc is a Neuron Runtime setting; the toy-files backend ignores it" in s.notes
    assert "toy rows added (heuristic=True)" in s.table(neuron_heuristic=True).notes
    assert s.neuron_profile(tool="never") == {"tool": "never", "output_dir": tmp_path}

    bundle = s.export(format="neuron")
    assert bundle.parent == tmp_path and bundle.name.startswith("neuron_explorer_toy-files")
    cycle = bundle / "system" / f"host_pid_{os.getpid()}" / "cycle0"
    assert (cycle / "ntrace.pb").read_bytes() == b"toy"
    # The cycle's folder had no framework trace: the session's own trace of that cycle is put there.
    assert "aten::mm" in (cycle / "trace.json").read_text(encoding="utf-8")
    assert "neuron-explorer view -d system" in (bundle / "README.txt").read_text(encoding="utf-8")
    assert s.export(tmp_path / "t.json").is_file()


def test_another_backends_format_and_profile_are_refused_on_the_cpu(files_backend, tmp_path):
    with neuronprof.session(backend="cpu", output_dir=tmp_path) as s:
        for _ in s.steps():
            torch.ones(4) + 1
    with pytest.raises(ValueError, match="format='neuron' needs the neuron or toy-files backend; this session used"):
        s.export(format="neuron")
    with pytest.raises(ValueError, match="the .cpu. backend of this session writes none"):
        s.neuron_profile()
    with pytest.raises(ValueError, match="unknown export format 'nope'; use one of: chrome, tensorboard, neuron"):
        s.export(format="nope")  # type: ignore[arg-type]


class CountingBackend(Backend):
    """The CPU, remarking on each cycle's events as a device with a capture limit does."""

    name = "toy-counting"

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def is_available(self) -> bool:
        return True

    def cycle_notes(self, events, ctx: SessionContext, cycle: int) -> list[str]:
        ops = sum(len(th.ts) for _, th, _ in events.timelines())
        self.seen.append((cycle, ops))
        return [f"toy: cycle {cycle} held {ops} events"]


def test_a_backend_remarks_on_each_cycle_from_its_event_table_read_once(tmp_path, monkeypatch):
    from neuronprof import _kineto

    walks = []
    original = _kineto._kineto_events
    monkeypatch.setattr(_kineto, "_kineto_events", lambda profile: walks.append(1) or original(profile))
    backend = CountingBackend()
    register_backend(backend)
    try:
        x = torch.randn(16, 16)
        # Three cycles, one kept: two are folded into sums as the block runs, one is read at the first read-out.
        with neuronprof.session(
            backend="toy-counting", wait=0, warmup=1, active=1, repeat=3, keep_cycles=1, output_dir=tmp_path
        ) as s:
            for _ in s.steps():
                x @ x
        assert [c for c, _ in backend.seen] == [0, 1], "the dropped cycles were remarked on as they were folded"
        table = s.table()
        page = s.report(tmp_path / "r.html").read_text()
        notes = s.notes
    finally:
        unregister_backend("toy-counting")
    assert [c for c, _ in backend.seen] == [0, 1, 2], "each cycle once, whatever was read"
    assert len(walks) == 3, "kineto's events are walked once per cycle, by the conversion alone"
    assert all(n > 0 for _, n in backend.seen)
    for cycle, n in backend.seen:
        said = f"toy: cycle {cycle} held {n} events"
        assert said in notes
        assert said in table.notes and said in page
