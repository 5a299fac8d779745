"""What ``neuronprof COMMAND`` has imported when it first reads its input, and on ``--help`` or a bad option.

Start-up is checked by what is imported, not by a clock: each command runs in a fresh
``python`` process, as the console script runs it, with an audit hook (PEP 578) that
writes the modules imported at the first ``open`` of an input file or listing of an
input folder, and again at exit. Before that first read, a command imports its
arguments' parser and the reader of its input only: none of torch, numpy, jinja2,
the result models, the renderers, the report or the findings' rules. The time this
takes is measured by ``benchmarks/scale.py`` (its "start-up" table).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

import pytest

import neuronprof
from neuronprof.commands import COMMANDS

_SRC = str(Path(neuronprof.__file__).resolve().parents[1])
_RECORDED = Path(__file__).parent / "recorded" / "training_step.pt.trace.json.gz"
"""A trace written by torch.profiler's export_chrome_trace (tests/recorded/record.py)."""

# The hook is installed before neuronprof is imported; the first read of a path under
# PROBE_INPUTS writes the modules imported so far to PROBE_OUT, the exit writes them again.
_PROBE = textwrap.dedent(
    """
    import atexit, os, sys

    inputs = [os.path.realpath(p) for p in os.environ["PROBE_INPUTS"].split(os.pathsep) if p]
    out = os.environ["PROBE_OUT"]
    seen = []

    def hook(event, args):
        if seen or event not in ("open", "os.listdir", "os.scandir", "glob.glob") or not args:
            return
        path = args[0]
        if path is None or isinstance(path, int):
            return
        real = os.path.realpath(os.fsdecode(path))
        if any(real == p or real.startswith(p + os.sep) for p in inputs):
            seen.append(real)  # first, so that the open below does not call back in here
            with open(out + ".read", "w") as f:
                f.write("\\n".join([event, real, *sorted(sys.modules)]))

    def at_exit():
        with open(out + ".exit", "w") as f:
            f.write("\\n".join(sorted(sys.modules)))

    sys.addaudithook(hook)
    atexit.register(at_exit)
    from neuronprof.cli import main
    sys.exit(main())
    """
)

_NEVER_BEFORE_THE_READ = (
    "torch",
    "numpy",
    "pandas",
    "matplotlib",
    "scipy",
    "jinja2",
    "neuronprof.model",  # the result models: made from what was read
    "neuronprof._model_ranks",
    "neuronprof._model_comparison",
    "neuronprof.render",
    "neuronprof.report",
    "neuronprof._report_parts",
    "neuronprof._report_timeline",
    "neuronprof._report_overview",
    "neuronprof.analysis.insights",  # the findings' rules
    "neuronprof._session",
    "neuronprof.backends",
)
"""Imported by no command before it reads its input."""

_NOT_FOR_ARGUMENTS = (*_NEVER_BEFORE_THE_READ, "msgspec", "neuronprof.analysis.trace", "neuronprof.analysis.neuron")
"""Besides: imported by no ``--help`` and no argument error (the readers, msgspec)."""


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def _run(tmp_path: Path, argv: list[str], inputs: tuple[Path, ...] = ()) -> tuple[int, Optional[list[str]], list[str]]:
    """(exit status, the modules at the first read of an input or None, the modules at exit)."""
    out = tmp_path / "modules"
    env = {
        "PYTHONPATH": _SRC,
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PROBE_INPUTS": os.pathsep.join(map(str, inputs)),
        "PROBE_OUT": str(out),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    read = out.with_suffix(".read")
    at_read = read.read_text(encoding="utf-8").splitlines()[2:] if read.exists() else None
    at_exit = out.with_suffix(".exit").read_text(encoding="utf-8").splitlines()
    return proc.returncode, at_read, at_exit


def _neuron_folder(where: Path) -> Path:
    """A Neuron ``system_profile.json`` of three NEFF executions (the format of NEURON-FACTS.md)."""
    records = [
        {
            "name": "nc_exec_running",
            "timestamp": 1_790_000_000_000_000_000 + i * 100_000,
            "duration": 20_000,
            "exec_id": i + 1,
            "model_id": 7,
            "model_name": "neff_a",
            "nc_idx": 0,
            "lnc_idx": 0,
            "device_core_idx": 0,
            "process_id": "100",
        }
        for i in range(3)
    ]
    where.mkdir()
    (where / "system_profile.json").write_text(json.dumps({"trace_event": records}), encoding="utf-8")
    return where


# Each command on real input: what it must have imported by the end (so that the check at the
# read sees an import deferred past it, not a part the command never needed), its exit status.
_READING = {
    "summarize": (["summarize", "A"], "neuronprof.model", 0),
    "advise": (["advise", "A"], "neuronprof.analysis.insights", 0),
    "report": (["report", "A", "-o", "out.html"], "jinja2", 0),
    "diff": (["diff", "A", "B"], "neuronprof.analysis._diff", 0),
    # Two steps a run are too few for a verdict: "cannot tell", exit status 2, once both are read.
    "check": (["check", "A", "B"], "neuronprof.analysis._check", 2),
    "roofline": (["roofline", "A", "--device", "h100"], "neuronprof.analysis._roofline", 0),
    "neuron": (["neuron", "NEURON", "--tool", "never"], "neuronprof.render", 0),
}


def test_every_command_that_reads_an_input_is_listed_here() -> None:
    assert set(_READING) | {"doctor", "demo"} == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(_READING))
def test_a_command_reads_its_input_before_importing_what_it_analyses_with(tmp_path: Path, command: str) -> None:
    a, b = tmp_path / "a.pt.trace.json.gz", tmp_path / "b.pt.trace.json.gz"
    shutil.copyfile(_RECORDED, a)
    shutil.copyfile(_RECORDED, b)
    folder = _neuron_folder(tmp_path / "neuron")
    argv, later, expected = _READING[command]
    given = {"A": a, "B": b, "NEURON": folder}
    status, at_read, at_exit = _run(tmp_path, [str(given.get(x, x)) for x in argv], (a, b, folder))
    assert status == expected, (command, status)
    assert at_read is not None, f"{command} never read its input"
    assert _loaded(at_read, _NEVER_BEFORE_THE_READ) == [], command
    # The check sees what it claims to: the reader was there at the read, the deferred part came after.
    reader = "neuronprof.analysis.neuron" if command == "neuron" else "neuronprof.analysis.trace"
    assert reader in at_read, command
    assert later not in at_read and later in at_exit, (command, later)


@pytest.mark.parametrize(("command", "expected"), [("diff", 0), ("check", 2)])
def test_verdicts_of_a_small_trace_never_import_numpy(tmp_path: Path, command: str, expected: int) -> None:
    # A small trace is read without numpy, and a verdict lists its few pairwise ratios: numpy's
    # import (about as long as the rest of the command) is for samples too long to list.
    a, b = tmp_path / "a.pt.trace.json.gz", tmp_path / "b.pt.trace.json.gz"
    shutil.copyfile(_RECORDED, a)
    shutil.copyfile(_RECORDED, b)
    status, _, at_exit = _run(tmp_path, [command, str(a), str(b)], (a, b))
    assert status == expected
    assert "neuronprof.analysis._verdict" in at_exit and _loaded(at_exit, ("numpy",)) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_help_and_a_bad_option_load_only_the_command_asked_for(tmp_path: Path, command: str) -> None:
    others = [f"neuronprof.commands.{c}" for c in COMMANDS if c != command]
    for argv, expected in (([command, "--help"], 0), ([command, "--no-such-option"], 2)):
        status, _, at_exit = _run(tmp_path, argv)
        assert status == expected, (argv, status)
        assert _loaded(at_exit, _NOT_FOR_ARGUMENTS) == [], argv
        assert _loaded(at_exit, tuple(others)) == [], argv
        assert f"neuronprof.commands.{command}" in at_exit, argv


def test_the_list_of_commands_loads_every_command_and_no_reader(tmp_path: Path) -> None:
    status, _, at_exit = _run(tmp_path, ["--help"])
    assert status == 0
    assert _loaded(at_exit, _NOT_FOR_ARGUMENTS) == []
    assert all(f"neuronprof.commands.{c}" in at_exit for c in COMMANDS)


def test_the_command_line_tells_blas_threads_to_sleep_in_its_own_process_only() -> None:
    # OpenBLAS's idle threads spin before they sleep: the command line (no BLAS) asks for the shortest
    # wait in a process of its own; a process that imported numpy first (a user's script) keeps its BLAS.
    script = textwrap.dedent(
        """
        import os, sys
        first = sys.argv[1] == "first"
        if not first:
            import numpy
        from neuronprof.cli import main
        try:
            main(["summarize", "--help"])
        except SystemExit:
            pass
        print(os.environ.get("OPENBLAS_THREAD_TIMEOUT"))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    run = [sys.executable, "-c", script]
    first = subprocess.run([*run, "first"], capture_output=True, text=True, env=env, check=True).stdout
    after = subprocess.run([*run, "after"], capture_output=True, text=True, env=env, check=True).stdout
    assert (first.split()[-1], after.split()[-1]) == ("4", "None")
