"""Offline input that can be read is read: folders with bad files, bad names, pipes, link loops, empty traces."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from neuronprof.analysis import load_trace, summarize
from neuronprof.analysis.errors import TraceError
from neuronprof.cli import main as analysis_main
from neuronprof.commands import EXIT_BAD_INPUT, EXIT_PARTIAL

RANKS = 200


def _rank_events(rank: int) -> list[dict]:
    return [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 400},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 100 + rank},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 350, "dur": 10},
    ]


@pytest.fixture(scope="module")
def rank_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """200 ranks' small traces, 4 of them broken and 1 a link to nowhere; the bad ones with what their reason says."""
    folder = tmp_path_factory.mktemp("ranks")
    for r in range(RANKS):
        with gzip.open(folder / f"rank-{r}.json.gz", "wt") as f:
            json.dump({"traceEvents": _rank_events(r), "distributedInfo": {"rank": r, "world_size": RANKS}}, f)
    whole = (folder / "rank-4.json.gz").read_bytes()
    (folder / "rank-3.json.gz").write_bytes(whole[: len(whole) // 2])
    (folder / "rank-50.json.gz").write_text('{"traceEvents": [{"ph": "X", "name": @}]}')
    (folder / "rank-51.json.gz").write_text('{"schemaVersion": 1}')
    (folder / "rank-99.json.gz").write_text('{"traceEvents": []}')
    (folder / "rank-150.json.gz").unlink()
    (folder / "rank-150.json.gz").symlink_to(folder / "gone" / "rank-150.json.gz")
    bad = {
        "rank-3.json.gz": "truncated",
        "rank-50.json.gz": "invalid JSON",
        "rank-51.json.gz": "no 'traceEvents'",
        "rank-99.json.gz": "empty trace",
        "rank-150.json.gz": "broken symbolic link",
    }
    return folder, bad


def test_rank_folder_with_broken_files_is_summarised_and_every_bad_file_named(
    rank_folder: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, bad = rank_folder
    trace = load_trace(folder)
    good = RANKS - len(bad)
    assert len(trace.files) == good
    assert {t.rank for t in trace.ranks if t.files} == set(range(RANKS)) - {3, 50, 51, 99, 150}
    mm = next(op for op in trace.ops if op.name == "aten::mm")
    assert mm.calls == good
    assert mm.self_cpu_us == sum(100 + r for r in range(RANKS) if r not in (3, 50, 51, 99, 150))
    left_out = [n for n in trace.notes if n.startswith(f"left out {len(bad)} of {RANKS} trace files")]
    assert len(left_out) == 1
    for name, reason in bad.items():
        assert f"{name} (" in left_out[0]
        assert reason in left_out[0].split(f"{name} (", 1)[1]

    assert analysis_main(["summarize", str(folder), "--ranks", "sum"]) == EXIT_PARTIAL
    out, err = capsys.readouterr()
    assert f"{good} profiled steps" in out
    lines = err.strip().splitlines()
    assert len(lines) == len(bad)
    for name, reason in bad.items():
        (line,) = [line for line in lines if line.startswith(f"neuronprof summarize: left out {folder / name}: ")]
        assert reason in line

    assert analysis_main(["advise", str(folder)]) == EXIT_PARTIAL
    err = capsys.readouterr().err
    assert all(str(folder / name) in err for name in bad)


def test_folder_of_runs_with_a_bad_run_compares_the_others(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = {}
    for side in ("a", "b"):
        runs[side] = tmp_path / side
        runs[side].mkdir()
        for i in range(3):
            (runs[side] / f"run{i}.pt.trace.json").write_text(json.dumps({"traceEvents": _rank_events(i)}))
    (runs["b"] / "run1.pt.trace.json").write_text('{"traceEvents": [')
    assert analysis_main(["diff", str(runs["a"]), str(runs["b"])]) == EXIT_PARTIAL
    out, err = capsys.readouterr()
    assert "aten::mm" in out
    assert f"left out {runs['b'] / 'run1.pt.trace.json'}: " in err and "truncated" in err
    # No file readable: an error that names each, not a partial result.
    for f in runs["b"].iterdir():
        f.write_text("{")
    with pytest.raises(TraceError, match="none of the 3 trace files can be read: run0.pt.trace.json"):
        load_trace(runs["b"])


def test_bad_bytes_and_control_characters_in_names_are_replaced(
    reader: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = _rank_events(0)
    text = json.dumps({"traceEvents": events}).encode()
    text = text.replace(b"aten::mm", b"aten::m\xffm").replace(b"aten::add", b"aten::a\x01dd")
    path = tmp_path / "names.json"
    path.write_bytes(text)
    table = summarize(path)
    names = {row.name for row in table}
    assert {"aten::m\ufffdm", "aten::a\ufffddd"} <= names
    assert any("not UTF-8" in n and "U+FFFD" in n for n in table.notes)
    assert any("1 control character(s)" in n for n in table.notes)
    assert analysis_main(["advise", str(path)]) == 0


def test_symlink_loop_and_empty_trace_each_get_their_own_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    assert analysis_main(["summarize", str(loop)]) == EXIT_BAD_INPUT
    assert (
        capsys.readouterr().err
        == f"neuronprof summarize: error: {loop}: a loop of symbolic links (following the link leads back to it)\n"
    )
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": []}')
    for command in ("summarize", "advise", "roofline"):
        assert analysis_main([command, str(empty)]) == EXIT_BAD_INPUT
        out, err = capsys.readouterr()
        assert out == ""
        message = f"{empty}: empty trace: it holds no events (the profiler recorded nothing)"
        assert err == f"neuronprof {command}: error: {message}\n"


def _cli(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "neuronprof", *args], capture_output=True, text=True, env=env, timeout=120, **kw
    )  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def trace_text() -> str:
    return json.dumps({"traceEvents": _rank_events(7)})


@pytest.mark.slow
def test_standard_input_and_dev_stdin_are_read(trace_text: str, tmp_path: Path) -> None:
    dash = _cli(["summarize", "-"], input=trace_text)
    assert dash.returncode == 0, dash.stderr
    assert "aten::mm" in dash.stdout
    gz = gzip.compress(trace_text.encode())
    proc = subprocess.run(
        [sys.executable, "-m", "neuronprof", "advise", "/dev/stdin"],
        input=gz,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    bad = _cli(["summarize", "-"], input="{")
    assert bad.returncode == EXIT_BAD_INPUT
    assert bad.stderr.startswith("neuronprof summarize: error: <stdin>: ")
    no_output = _cli(["report", "-"], input=trace_text)
    assert no_output.returncode == EXIT_BAD_INPUT and "pass -o PATH" in no_output.stderr
    report = _cli(["report", "-", "-o", str(tmp_path / "r.html")], input=trace_text)
    assert report.returncode == 0, report.stderr
    assert "aten::mm" in (tmp_path / "r.html").read_text()


@pytest.mark.slow
def test_fifo_and_process_substitution_are_read(trace_text: str, tmp_path: Path) -> None:
    source = tmp_path / "t.json"
    source.write_text(trace_text)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=(trace_text,))
    writer.start()
    result = _cli(["summarize", str(fifo)])
    writer.join()
    assert result.returncode == 0, result.stderr
    assert "aten::mm" in result.stdout
    command = f"{sys.executable} -m neuronprof summarize <(cat {source})"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    sub = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=120)
    assert sub.returncode == 0, sub.stderr
    assert "aten::mm" in sub.stdout


@pytest.mark.slow
def test_trace_torch_wrote_with_a_quote_in_a_source_path_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    folder = tmp_path / 'exp "v2"'
    folder.mkdir()
    (folder / "quoted_mod.py").write_text("import torch\ndef work(x):\n    return torch.relu(x) * 2\n")
    spec = importlib.util.spec_from_file_location("quoted_mod", folder / "quoted_mod.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with torch.profiler.profile(with_stack=True) as prof:
        module.work(torch.randn(8, 8))
    path = tmp_path / "with_stack.json"
    prof.export_chrome_trace(str(path))
    try:
        json.loads(path.read_text())
        torch_wrote_invalid_json = False
    except ValueError:
        torch_wrote_invalid_json = True
    assert analysis_main(["summarize", str(path)]) == 0
    out = capsys.readouterr().out
    assert "aten::relu" in out
    if torch_wrote_invalid_json:
        assert "unescaped '\"' inside names or source paths" in out
    assert analysis_main(["advise", str(path)]) == 0
    assert analysis_main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    capsys.readouterr()
    # The frame itself is read with its quotes.
    from neuronprof.analysis.insights import timeline_from_trace

    assert any('exp "v2"' in e.name for e in timeline_from_trace(path).host)


def test_mending_leaves_valid_json_lines_unchanged() -> None:
    from neuronprof.analysis._mend import escape_stray_quotes

    value = {
        "traceEvents": [
            {"name": 'a "quoted", name: with } and ]', "args": {"Call stack": 'x\\"y;z "w"', "k": ["a", "b"]}},
            {"name": "", "cat": "\\", "args": {}},
        ]
    }
    for indent in (None, 2):
        text = json.dumps(value, indent=indent)
        assert [escape_stray_quotes(line)[0] for line in text.split("\n")] == text.split("\n")
    assert escape_stray_quotes('    "name": "dir/exp "v2"/m.py(2): work",') == (
        '    "name": "dir/exp \\"v2\\"/m.py(2): work",',
        2,
    )
