"""The commands: output formats, old option spellings, and what they import (no torch; on --help, no heavy part)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from trace_builders import op, write_trace

import neuronprof
from neuronprof.analysis import Roofline, TraceDiff
from neuronprof.cli import main
from neuronprof.model import Table

_SRC = str(Path(neuronprof.__file__).resolve().parents[1])

# Run in a fresh interpreter where `import torch` fails, as on a laptop without it.
_BLOCK_TORCH = textwrap.dedent(
    """
    import sys

    class _NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("torch is blocked in this test")
            return None

    sys.meta_path.insert(0, _NoTorch())
    """
)


def _run_without_torch(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCK_TORCH + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": _SRC, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def test_analysis_package_and_its_commands_never_import_torch(cuda_trace: Path, tmp_path: Path) -> None:
    result = _run_without_torch(
        f"""
        import neuronprof.analysis as analysis
        from neuronprof.cli import main
        trace = {str(cuda_trace)!r}
        codes = [
            main(["summarize", trace, "--format", "json"]),
            main(["diff", trace, trace]),
            main(["roofline", trace, "--device", "h100"]),
        ]
        analysis.roofline(trace, "trn2")
        assert "torch" not in sys.modules, "torch was imported"
        print("codes", codes)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "codes [0, 0, 0]" in result.stdout


def test_neuronprof_command_summarize_never_imports_torch(cuda_trace: Path) -> None:
    # The whole chain: neuronprof/__init__ -> neuronprof.cli -> neuronprof.analysis.
    result = _run_without_torch(
        f"""
        from neuronprof.cli import main
        code = main(["summarize", {str(cuda_trace)!r}, "--row-limit", "3"])
        assert "torch" not in sys.modules, "torch was imported"
        missing = main(["summarize", "/no/such/trace.json"])
        print("codes", code, missing)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "codes 0 2" in result.stdout
    assert "sm90_gemm_bf16" in result.stdout
    assert "Traceback" not in result.stderr


def test_summarize_without_msgspec_uses_the_pure_python_reader(cuda_trace: Path) -> None:
    result = _run_without_torch(
        f"""
        class _NoMsgspec:
            def find_spec(self, name, path=None, target=None):
                if name == "msgspec" or name.startswith("msgspec."):
                    raise ImportError("msgspec is blocked in this test")
                return None

        sys.meta_path.insert(0, _NoMsgspec())
        from neuronprof.cli import main
        code = main(["summarize", {str(cuda_trace)!r}, "--format", "json"])
        assert "msgspec" not in sys.modules and "torch" not in sys.modules
        print("code", code)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "code 0" in result.stdout and '"sm90_gemm_bf16"' in result.stdout


def test_summarize_formats(cuda_trace: Path, capsys) -> None:
    assert main(["summarize", str(cuda_trace), "--row-limit", "2"]) == 0
    text = capsys.readouterr().out
    assert "Self CUDA (µs)" in text and "showing 2 of" in text and "2 profiled steps" in text

    assert main(["summarize", str(cuda_trace), "--format", "json", "--group-by", "shape"]) == 0
    table = Table.from_json(capsys.readouterr().out)
    assert table.device_label == "CUDA" and table.steps == 2
    assert any(r.input_shapes for r in table.rows)

    assert main(["summarize", str(cuda_trace), "--format", "csv", "--device-only", "--sort-by", "calls"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows and all(float(r["self_device_us"] or 0) > 0 or float(r["device_total_us"] or 0) > 0 for r in rows)

    assert main(["summarize", str(cuda_trace), "--format", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("| Name |")


def test_diff_and_roofline_json_round_trip(cuda_trace: Path, tmp_path: Path, capsys) -> None:
    assert main(["diff", str(cuda_trace), str(cuda_trace), "--format", "json"]) == 0
    d = TraceDiff.from_json(capsys.readouterr().out)
    assert d.metric == "device" and all(r.delta_us == 0 for r in d.rows)

    assert main(["roofline", str(cuda_trace), "--device", "h100", "--format", "json"]) == 0
    rl = Roofline.from_json(capsys.readouterr().out)
    assert rl.device.name == "h100" and rl.time_source == "device"
    assert [r.name for r in rl.rows] == ["aten::addmm"]


@pytest.mark.slow
def test_roofline_custom_peaks_and_plot(cuda_trace: Path, tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    png, svg = tmp_path / "r.png", tmp_path / "r.svg"
    argv = ["roofline", str(cuda_trace), "--peak-flops", "100T", "--peak-bw", "2e12", "--plot", str(png)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "100 TFLOP/s, 2000 GB/s; ridge point 50.0 FLOP/byte" in out
    assert png.read_bytes().startswith(b"\x89PNG")
    assert main(["roofline", str(cuda_trace), "--plot", str(svg), "--format", "markdown"]) == 0
    assert b"<svg" in svg.read_bytes()[:500]


def test_limit_keeps_totals_over_every_row(tmp_path: Path, capsys) -> None:
    a = write_trace(tmp_path / "a.json", [op("x", 0, 10), op("y", 20, 30), op("z", 60, 1)])
    b = write_trace(tmp_path / "b.json", [op("x", 0, 20), op("y", 20, 30)])
    assert main(["diff", str(a), str(b), "--row-limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "showing 1 of 3 rows" in out
    assert "total: A 41.0 µs, B 50.0 µs" in out
    assert main(["diff", str(a), str(b), "--format", "json", "--row-limit", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["rows"]) == 1 and data["total_rows"] == 3


# -- what --help imports -------------------------------------------------------------------------

_HEAVY = ("torch", "neuronprof.analysis.neuron", "neuronprof.analysis.insights", "neuronprof.analysis._roofline")


def test_help_and_parsing_of_every_command_import_no_heavy_part() -> None:
    # Each command imports what it drives inside run(): parsing its arguments, or its --help,
    # loads none of torch, the Neuron reader, the findings or the roofline.
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import contextlib, io, sys
                from neuronprof.cli import build_parser
                from neuronprof.commands import COMMANDS

                HEAVY = {_HEAVY!r}
                def heavy():
                    return sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in HEAVY))

                typical = {{"diff": ["a", "b"], "check": ["a", "b"], "neuron": ["p"], "doctor": [], "demo": []}}
                helps = [["--help"], *([c, "--help"] for c in COMMANDS)]
                for argv in [*helps, *([c, *typical.get(c, ["t"])] for c in COMMANDS)]:
                    with contextlib.redirect_stdout(io.StringIO()) as out:
                        try:
                            build_parser().parse_args(argv)
                        except SystemExit as exit:
                            assert exit.code == 0, (argv, exit.code)
                    assert "usage: neuronprof" in out.getvalue() or "--help" not in argv, argv
                    assert heavy() == [], (argv, heavy())
                print("checked", len(COMMANDS))
                print("neuronprof modules:", " ".join(sorted(m for m in sys.modules if m.startswith("neuronprof"))))
                """
            ),
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": _SRC, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "checked 9" in result.stdout
    # The check sees what it claims to: the commands' modules are loaded, and running one loads its part.
    assert "neuronprof.commands.neuron" in result.stdout and "neuronprof.commands.roofline" in result.stdout


def test_running_a_command_imports_what_it_drives(cuda_trace: Path) -> None:
    # The other side of the check above: the heavy parts are imported on run, so their absence on --help
    # is laziness, not a command that lost its engine.
    result = _run_without_torch(
        f"""
        from neuronprof.cli import main
        assert "neuronprof.analysis._roofline" not in sys.modules
        assert main(["roofline", {str(cuda_trace)!r}, "--device", "h100"]) == 0
        assert "neuronprof.analysis._roofline" in sys.modules
        assert main(["advise", {str(cuda_trace)!r}]) == 0
        assert "neuronprof.analysis.insights" in sys.modules
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_neuron_help_gives_the_readers_own_default_timeout() -> None:
    import inspect

    from neuronprof.analysis.neuron import neuron_profile
    from neuronprof.commands import neuron

    assert inspect.signature(neuron_profile).parameters["timeout"].default == neuron.TIMEOUT


# -- options spelled as the Python keywords; the old spellings still work --------------------------

# (the command and its inputs, the option with its old spelling, the same with the new one)
_RENAMED = [
    (["summarize", "t"], ["--limit", "3"], ["--row-limit", "3"]),
    (["summarize", "t"], ["--sort", "cpu"], ["--sort-by", "cpu"]),
    (["summarize", "t"], ["--by", "shape"], ["--group-by", "shape"]),
    (["diff", "a", "b"], ["--by", "name"], ["--match", "name"]),
    (["diff", "a", "b"], ["--limit", "2"], ["--row-limit", "2"]),
    (["check", "a", "b"], ["--op", "aten::mm", "--op", "aten::add"], ["--ops", "aten::mm", "--ops", "aten::add"]),
    (["roofline", "t"], ["--time", "cpu"], ["--time-source", "cpu"]),
    (["roofline", "t"], ["--limit", "4"], ["--row-limit", "4"]),
    (["neuron", "p"], ["--plot-normalize"], ["--normalize"]),
    (["neuron", "p"], ["--no-tool"], ["--tool", "never"]),
]


@pytest.mark.parametrize(("command", "old", "new"), _RENAMED, ids=[f"{c[0]} {o[0]}" for c, o, _ in _RENAMED])
def test_an_old_option_spelling_means_the_same_with_a_note(
    command: list[str], old: list[str], new: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from neuronprof.cli import build_parser

    parser = build_parser()
    by_new = parser.parse_args(command + new)
    assert capsys.readouterr().err == ""
    by_old = parser.parse_args(command + old)
    err = capsys.readouterr().err
    assert vars(by_old) == vars(by_new) != vars(parser.parse_args(command))
    # One note per use of the old spelling, naming the new one.
    instead = "--tool never" if old == ["--no-tool"] else new[0]  # a flag that stood for a value names it
    note = f"neuronprof {command[0]}: {old[0]} is deprecated; use {instead} (the same meaning)"
    assert err.splitlines() == [note] * old.count(old[0])


def test_old_spellings_are_left_out_of_help() -> None:
    from neuronprof.cli import build_parser

    parser = build_parser()
    for argv in (["summarize", "t"], ["diff", "a", "b"], ["check", "a", "b"], ["roofline", "t"], ["neuron", "p"]):
        sub = parser._subparsers._group_actions[0].choices[argv[0]]  # type: ignore[union-attr]
        text = sub.format_help()
        for old in ("--limit ", "--sort ", "--by ", "--op ", "--time ", "--plot-normalize", "--no-tool"):
            assert old not in text, (argv[0], old)


def test_an_old_spelling_runs_the_command_as_the_new_one(cuda_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", str(cuda_trace), "--row-limit", "1", "--sort-by", "calls"]) == 0
    new = capsys.readouterr()
    assert main(["summarize", str(cuda_trace), "--limit", "1", "--sort", "calls"]) == 0
    old = capsys.readouterr()
    assert old.out == new.out and new.err == ""
    assert "--limit is deprecated; use --row-limit" in old.err and "--sort is deprecated; use --sort-by" in old.err


# -- the command protocol: a new command is one module; its failure carries the exit status ---------


def test_a_command_module_is_all_a_new_command_needs(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import types

    import neuronprof.cli
    from neuronprof.commands import COMMANDS, CommandError

    toy = types.ModuleType("neuronprof.commands.toy")
    toy.HELP = "a toy command"  # type: ignore[attr-defined]
    toy.DESCRIPTION = "Says hello, or fails with the status asked for."  # type: ignore[attr-defined]
    toy.add_arguments = lambda parser: parser.add_argument("--fail", type=int)  # type: ignore[attr-defined]

    def run(args: object) -> int:
        if getattr(args, "fail", None):
            raise CommandError("first line", "second line", exit_code=args.fail)  # type: ignore[attr-defined]
        print("hello")
        return 0

    toy.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "neuronprof.commands.toy", toy)
    monkeypatch.setattr(neuronprof.cli, "COMMANDS", (*COMMANDS, "toy"))
    assert main(["toy"]) == 0
    assert capsys.readouterr().out == "hello\n"
    assert main(["toy", "--fail", "5"]) == 5
    assert capsys.readouterr().err == "neuronprof toy: first line\nneuronprof toy: second line\n"
    assert "a toy command" in neuronprof.cli.build_parser().format_help()


def test_roofline_on_device_time_a_trace_lacks_says_the_flag_to_use(tmp_path: Path, capsys) -> None:
    path = write_trace(tmp_path / "cpu.json", [op("aten::mm", 0, 100, dims=[[64, 64], [64, 64]])])
    assert main(["roofline", str(path), "--device", "h100", "--time-source", "device"]) == 2
    err = capsys.readouterr().err
    assert "--time-source cpu" in err and "no device time is attributed" in err


_OPENED: list[list[str]] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _OPENED and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED[-1].append(os.path.abspath(os.fsdecode(args[0])))


sys.addaudithook(_audit)  # a hook cannot be removed: it records only while a test listens


@pytest.mark.parametrize(
    "command",
    [
        ["diff", "{a}", "{missing}"],
        ["check", "{a}", "{missing}"],
        ["report", "{a}", "--baseline", "{missing}", "-o", "{out}"],
        ["roofline", "{a}", "--device", "h100", "--plot", "{out}.txt"],
    ],
)
def test_bad_input_is_refused_before_any_trace_is_read(tmp_path: Path, capsys, command: list[str]) -> None:
    a = write_trace(tmp_path / "a.json", [op("aten::mm", 0, 100, dims=[[64, 64], [64, 64]])])
    names = {"a": str(a), "missing": str(tmp_path / "missing.json"), "out": str(tmp_path / "r.html")}
    _OPENED.append([])
    try:
        status = main([part.format(**names) for part in command])
    finally:
        opened = _OPENED.pop()
    assert status == 2
    assert str(a) not in opened, "the first trace was read before the bad input was seen"
    assert f"neuronprof {command[0]}: error: " in capsys.readouterr().err


def test_report_to_a_folder_says_to_name_the_file(tmp_path: Path, capsys) -> None:
    a = write_trace(tmp_path / "a.json", [op("aten::mm", 0, 100)])
    (tmp_path / "out").mkdir()
    for extra in ([], ["--overwrite"]):
        assert main(["report", str(a), "-o", str(tmp_path / "out"), *extra]) == 2
        assert "is a folder: pass -o with the path of the .html file to write" in capsys.readouterr().err
