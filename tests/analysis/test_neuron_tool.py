"""Running Neuron's profile viewer: found, timed out, failing, missing, and nothing left behind.

The tool here is ``tests/neuron_tools/fake_neuron_explorer``, a test double that
emits the formats AWS documents; its output is not real profile data.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

from neuronprof.analysis import NeuronProfile, UnknownDeviceError, neuron_profile
from neuronprof.analysis.neuron import ENV_VAR, NeuronToolError, find_neuron_tool
from neuronprof.analysis.neuron import _tool as tool_module
from neuronprof.cli import main
from neuronprof.errors import NeuronProfWarning

FAKE = Path(__file__).resolve().parents[1] / "neuron_tools" / "fake_neuron_explorer"
pytestmark = pytest.mark.skipif(os.name != "posix", reason="the fake tool is a POSIX script")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No real tool can be found; temporary folders go to a folder the test can inspect."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.delenv("FAKE_NEURON_EXPLORER_MODE", raising=False)
    empty = tmp_path / "emptybin"
    empty.mkdir()
    # The fake runs with `/usr/bin/env python3`: keep the interpreter's folder on PATH.
    monkeypatch.setenv("PATH", f"{empty}{os.pathsep}{os.path.dirname(sys.executable)}")
    monkeypatch.setattr(tool_module, "SEARCH_DIRS", (str(tmp_path / "no-opt"),))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    log = tmp_path / "tool-calls.jsonl"
    monkeypatch.setenv("FAKE_NEURON_EXPLORER_LOG", str(log))
    return {"bin": empty, "scratch": scratch, "log": log}


@pytest.fixture
def session_folder(tmp_path: Path) -> Path:
    """A runtime session folder as TorchNeuron leaves it: binary files only, no JSON yet."""
    folder = tmp_path / "out" / "i-0abc_pid_4242" / "20260101_000000"
    folder.mkdir(parents=True)
    (folder / "ntrace.pb").write_bytes(b"\x08\x01binary runtime trace")
    (folder / "trace_info.pb").write_bytes(b"\x08\x02")
    (folder / "neff_aaaa_vnc_0.neff").write_bytes(b"neff")
    (folder / "profile_nc_0_session_0.ntff").write_bytes(b"ntff")
    return folder


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line)["argv"] for line in log.read_text().splitlines()] if log.exists() else []


def _left_behind(scratch: Path) -> list[str]:
    return sorted(p.name for p in scratch.iterdir())


@pytest.mark.slow
def test_tool_from_env_var_runs_in_empty_folder_with_output_file(clean_env, session_folder, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = neuron_profile(session_folder.parent.parent)
    assert p.tool is not None and "2.99.0+fake" in p.tool  # the version is recorded
    assert [(n.neff, n.calls) for n in p.neffs] == [("neff_aaaa_vnc_0", 2), ("neff_bbbb_vnc_0", 1)]
    assert p.neff("neff_aaaa_vnc_0").device_us == pytest.approx(80.0)
    assert all(len(ex.cores) == 2 for ex in p.executions)  # two physical cores, merged by exec_id
    first, second, system = p.summaries
    assert first.engine("gpsimd").share_pct is None  # the fake's -1 sentinel
    assert first.mbu_pct is None and second.mbu_pct == pytest.approx(45.6)
    assert system.kind == "system"
    calls = _calls(clean_env["log"])
    assert ["--version"] in calls
    views = [c for c in calls if c[:1] == ["view"] and "--ingest-only" not in c]
    assert {c[c.index("--output-format") + 1] for c in views} == {"json", "summary-json"}
    assert all("--output-file" in c and c[c.index("-d") + 1] == str(session_folder) for c in views)
    if importlib.util.find_spec("pyarrow") is not None:  # the Parquet output, written into a temporary folder
        (ingest,) = [c for c in calls if "--ingest-only" in c]
        assert ingest[ingest.index("-d") + 1] == str(session_folder) and "--ignore-instruction-trace" in ingest
        assert Path(ingest[ingest.index("--data-path") + 1]).parent == clean_env["scratch"]
    cwds = [json.loads(line)["cwd"] for line in clean_env["log"].read_text().splitlines()]
    assert all(Path(c).parent == clean_env["scratch"] for c in cwds)  # each run in its own temporary folder
    assert _left_behind(clean_env["scratch"]) == []  # ... removed afterwards
    assert not (session_folder / "system_profile.json").exists()  # save=False writes nothing
    assert not (session_folder / "neuron_parquet").exists()


@pytest.mark.slow
def test_tool_on_path_and_saved_json_is_reused(clean_env, session_folder):
    (clean_env["bin"] / "neuron-explorer").symlink_to(FAKE)
    assert find_neuron_tool().name == "neuron-explorer"
    first = neuron_profile(session_folder, save=True)
    assert (session_folder / "system_profile.json").exists() and (session_folder / "neuron_summary.json").exists()
    before = len(_calls(clean_env["log"]))
    again = neuron_profile(session_folder)  # the saved JSON is read; the tool is not run again
    assert len(_calls(clean_env["log"])) == before
    assert again.tool is None and again.neffs == first.neffs and again.summaries[0].total_us == 40.0


def test_neff_ntff_pair(clean_env, session_folder, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    neff = session_folder / "neff_aaaa_vnc_0.neff"
    p = neuron_profile(neff, session_folder / "profile_nc_0_session_0.ntff")
    (s,) = p.summaries
    assert s.label == "neff_aaaa_vnc_0.neff" and s.total_us == pytest.approx(40.0)
    view = [c for c in _calls(clean_env["log"]) if c[:1] == ["view"]][0]
    assert view[view.index("-n") + 1] == str(neff)
    with pytest.raises(ValueError, match=".ntff"):
        neuron_profile(neff)


def _one_warning(record: list[warnings.WarningMessage]) -> str:
    messages = [str(w.message) for w in record if issubclass(w.category, NeuronProfWarning)]
    assert len(messages) == 1, messages
    return messages[0]


def test_missing_tool_warns_once_with_the_fix(clean_env, session_folder):
    with pytest.warns(NeuronProfWarning) as record:
        p = neuron_profile(session_folder)
    message = _one_warning(record)
    assert "neuron-explorer was not found" in message and "aws-neuronx-tools" in message
    assert p.executions == () and p.summaries == () and any("aws-neuronx-tools" in n for n in p.notes)
    assert _left_behind(clean_env["scratch"]) == []


def test_missing_tool_as_a_note_when_asked(clean_env, session_folder):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = neuron_profile(session_folder, warn_missing=False)
    assert any("neuron-explorer was not found" in n and "aws-neuronx-tools" in n for n in p.notes)


def test_env_var_naming_nothing(clean_env, session_folder, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(clean_env["bin"] / "nope"))
    with pytest.raises(NeuronToolError, match=ENV_VAR):
        find_neuron_tool()
    with pytest.warns(NeuronProfWarning, match="aws-neuronx-tools"):
        neuron_profile(session_folder)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("fail", "failed with exit status 2: ERRO"),
        ("garbage", "not the documented"),
        ("hang-silent", "did not finish within 1.5 s"),
    ],
)
def test_failing_tool_one_warning_nothing_left(clean_env, session_folder, monkeypatch, mode, expected):
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    monkeypatch.setenv("FAKE_NEURON_EXPLORER_MODE", mode)
    (session_folder / "trace.json").write_text('{"traceEvents": []}')
    with pytest.warns(NeuronProfWarning) as record:
        p = neuron_profile(session_folder, timeout=1.5, save=True)
    message = _one_warning(record)  # after the first failure the tool is not run again
    assert expected in message and "fake_neuron_explorer" in message and "aws-neuronx-tools" in message
    assert p.executions == ()
    assert _left_behind(clean_env["scratch"]) == []
    assert sorted(x.name for x in session_folder.iterdir()) == [
        "neff_aaaa_vnc_0.neff",
        "ntrace.pb",
        "profile_nc_0_session_0.ntff",
        "trace.json",
        "trace_info.pb",
    ]


@pytest.mark.slow
def test_tool_that_hangs_after_writing_is_stopped_and_its_output_used(clean_env, session_folder, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    monkeypatch.setenv("FAKE_NEURON_EXPLORER_MODE", "hang")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = neuron_profile(session_folder, timeout=1.5)
    assert len(p.executions) == 3 and len(p.summaries) == 3
    assert _left_behind(clean_env["scratch"]) == []


def test_cli_without_tool_says_what_to_install(clean_env, session_folder, capsys):
    # Changed by the review of issue 14: the tool's absence is the exit status, the header and one note
    # (it was a warning plus a note, exit status 0 and "no system profile" advice).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["neuron", str(session_folder)]) == 1
    captured = capsys.readouterr()
    out = captured.out
    assert "neuron-explorer was not found" in out and "aws-neuronx-tools" in out
    assert out.splitlines()[0].endswith("(neuron-explorer was needed and is not installed: see the note below)")
    assert "read from existing JSON files" not in out and "capture with modes" not in out
    everything = out + captured.err
    assert everything.count("neuron-explorer was not found") == 1  # said once, not as a warning and a note
    assert ".py:" not in captured.err and "Warning" not in captured.err  # plain lines, no Python warning format


@pytest.mark.parametrize("mode", ["fail", "garbage"])
def test_cli_with_failing_tool_says_it_failed_once(clean_env, session_folder, monkeypatch, capsys, mode):
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    monkeypatch.setenv("FAKE_NEURON_EXPLORER_MODE", mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["neuron", str(session_folder), "--timeout", "20"]) == 1
    captured = capsys.readouterr()
    assert "(neuron-explorer was needed and failed: see the note below)" in captured.out.splitlines()[0]
    assert "capture with modes" not in captured.out and "read from existing JSON files" not in captured.out
    assert (captured.out + captured.err).count("fake_neuron_explorer view") == 1
    assert ".py:" not in captured.err
    assert "neuronprof-neuron-explorer-" not in captured.out + captured.err  # no temporary file is named
    assert _left_behind(clean_env["scratch"]) == []


@pytest.mark.slow
def test_cli_prints_engine_breakdown_through_the_tool(clean_env, session_folder, monkeypatch, capsys):
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    assert main(["neuron", str(session_folder), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "Engines per device profile" in out and "20.0 (50.0%)" in out and "| neff_aaaa_vnc_0 | 2 |" in out


@pytest.mark.slow
def test_relative_paths_reach_the_tool_as_absolute_paths(clean_env, session_folder, monkeypatch, capsys):
    # The tool runs in its own temporary folder: a relative path would name nothing there (the fake checks).
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    monkeypatch.chdir(session_folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = neuron_profile(".")
    assert len(p.executions) == 3 and len(p.summaries) == 3 and p.tool_error is None
    monkeypatch.chdir(session_folder.parent)
    pair = neuron_profile(
        Path(session_folder.name) / "neff_aaaa_vnc_0.neff", Path(session_folder.name) / "profile_nc_0_session_0.ntff"
    )
    assert pair.summaries[0].total_us == pytest.approx(40.0)
    views = [c for c in _calls(clean_env["log"]) if c[:1] == ["view"]]
    paths = [c[i + 1] for c in views for i, a in enumerate(c) if a in ("-d", "-n", "-s")]
    assert paths and all(os.path.isabs(x) for x in paths)
    monkeypatch.chdir(session_folder)
    assert main(["neuron", "."]) == 0  # `cd d && neuronprof neuron .`
    assert "neff_aaaa_vnc_0" in capsys.readouterr().out
    # The fake refuses a folder that does not exist where it runs, as the real tool does: a relative path
    # handed over unchanged would have failed above.
    import subprocess

    done = subprocess.run(
        [str(FAKE), "view", "-d", session_folder.name, "--output-format", "json"],
        cwd=clean_env["scratch"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "no such file or directory" in done.stderr


@pytest.mark.slow
def test_tool_that_hangs_after_writing_is_stopped_at_once_with_a_note(clean_env, session_folder, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    monkeypatch.setenv("FAKE_NEURON_EXPLORER_MODE", "hang")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # The timeout is long: the runs end because their output is complete, not because of it.
        p = neuron_profile(session_folder, timeout=300)
    assert len(p.executions) == 3 and len(p.summaries) == 3 and p.tool_error is None
    stopped = [n for n in p.notes if "stopped after writing" in n]
    parquet = importlib.util.find_spec("pyarrow") is not None  # then the Parquet output is written (and used) too
    assert len(stopped) == 2 + parquet and not any("after the timeout" in n for n in p.notes)
    assert sum("--ingest-only" in n for n in stopped) == parquet and (p.flow_join is not None) == parquet
    for call in (json.loads(line) for line in clean_env["log"].read_text().splitlines()):
        with pytest.raises(ProcessLookupError):
            os.kill(call["pid"], 0)  # no tool left running
    assert _left_behind(clean_env["scratch"]) == []


@pytest.mark.parametrize("what", ["interrupt", "error"])
def test_interrupt_while_the_tool_runs_kills_it(clean_env, session_folder, monkeypatch, request, what):
    import _thread
    import threading
    import time

    monkeypatch.setenv(ENV_VAR, str(FAKE))
    monkeypatch.setenv("FAKE_NEURON_EXPLORER_MODE", "hang-silent")
    log = clean_env["log"]

    def started() -> bool:
        return any(c[:1] == ["view"] for c in _calls(log))

    if what == "interrupt":

        def press_ctrl_c() -> None:
            while not started():
                time.sleep(0.05)
            _thread.interrupt_main()

        # interrupt_main() does nothing while SIGINT is ignored, as it is in a process started in the
        # background by a shell without job control: Ctrl-C gets Python's own handler for this test.
        import signal

        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
        threading.Thread(target=press_ctrl_c, daemon=True).start()
        expected: type[BaseException] = KeyboardInterrupt
    else:
        real = tool_module._complete

        def failing(*args):
            if started():
                raise RuntimeError("simulated failure while waiting")
            return real(*args)

        monkeypatch.setattr(tool_module, "_complete", failing)
        expected = RuntimeError
    with pytest.raises(expected):
        neuron_profile(session_folder, timeout=300)
    pids = [json.loads(line)["pid"] for line in log.read_text().splitlines() if '"view"' in line]
    assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the tool's process group was killed (and reaped) in a finally
    assert _left_behind(clean_env["scratch"]) == []


@pytest.mark.slow
def test_the_bottleneck_engine_by_aws_rule(clean_env, session_folder, monkeypatch):
    # AWS's bound analysis: the engine with the most active time among Tensor, Vector, Scalar,
    # GpSimd and DMA; the sync engine is no candidate even when it is the busiest.
    spec = {
        "fake_neuron_explorer_spec": 1,
        "process_id": 4242,
        "executions": [
            {"neff": "neff_aaaa_vnc_0", "start_ns": 1_790_000_000_000_000_000, "duration_ns": 40_000, "cores": [0, 1]}
        ],
        "device_profiles": [
            {
                "neff": "neff_aaaa_vnc_0",
                "total_time": 60e-6,
                "tensor": 30e-6,
                "vector": 8e-6,
                "scalar": 4e-6,
                "gpsimd": 1e-6,
                "sync": 50e-6,
                "dma": 20e-6,
                "hbm_read_bytes": 1,
                "hbm_write_bytes": 1,
                "hardware_flops": 1.0,
                "model_flops": 1.0,
            },
            {
                "neff": "neff_bbbb_vnc_0",
                "total_time": 25e-6,
                "tensor": 0.0,
                "vector": 15e-6,
                "scalar": 5e-6,
                "gpsimd": 0.0,
                "sync": 0.2e-6,
                "dma": 20e-6,
                "hbm_read_bytes": 1,
                "hbm_write_bytes": 1,
                "hardware_flops": 1.0,
                "model_flops": 1.0,
            },
        ],
    }
    (session_folder / "ntrace.pb").write_text(json.dumps(spec))
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    p = neuron_profile(session_folder.parent.parent)
    first, second, system = p.summaries
    assert (first.bottleneck, second.bottleneck, system.bottleneck) == ("tensor", "dma", None)
    text = p.to_text()
    assert "Bottleneck" in text and "by AWS's rule" in text and "not verified on hardware" in text
    [row_a] = [line for line in text.splitlines() if line.startswith(first.label)]
    assert "(33.3%)  Tensor " in row_a


# -- Neuron's Parquet output: the profile's own peaks and the flow_id join (pyarrow) ----------------------

T0 = 1_790_000_000_000_000_000


def _parquet_spec(metadata: object = "default") -> dict:
    """Three executions with flow ids 1001-1003; the fake writes them as Parquet (and as JSON)."""
    spec: dict = {
        "fake_neuron_explorer_spec": 1,
        "process_id": 4242,
        "executions": [
            {"neff": "neff_mm", "start_ns": T0, "duration_ns": 40_000, "cores": [0, 1], "flow_id": [1001]},
            {"neff": "neff_add", "start_ns": T0 + 60_000, "duration_ns": 25_000, "cores": [0, 1], "flow_id": [1002]},
            {"neff": "neff_mm", "start_ns": T0 + 100_000, "duration_ns": 30_000, "cores": [0, 1], "flow_id": [1003]},
        ],
        "device_profiles": [
            {
                "neff": "neff_mm",
                "total_time": 40e-6,
                "tensor": 20e-6,
                "vector": 8e-6,
                "scalar": 4e-6,
                "gpsimd": 1e-6,
                "sync": 0.5e-6,
                "dma": 30e-6,
                "hbm_read_bytes": 4_000_000,
                "hbm_write_bytes": 1_000_000,
                "hardware_flops": 2.0e9,
                "model_flops": 1.6e9,
            },
        ],
    }
    if metadata != "default":
        spec["metadata"] = metadata
    return spec


def _framework_trace(path: Path, ids: tuple[object, object]) -> None:
    """torch.profiler's side: aten::mm carries an nrt_sequence_id itself; aten::add through a runtime event in it."""
    base_us = T0 / 1000
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": base_us - 20,
            "dur": 10,
            "args": {"nrt_sequence_id": ids[0]},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::add",
            "pid": 1,
            "tid": 1,
            "ts": base_us + 30,
            "dur": 20,
            "args": {},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::add",
            "pid": 1,
            "tid": 2,
            "ts": base_us + 30,
            "dur": 50,
            "args": {},
        },  # another thread: not the one around the runtime event
        {
            "ph": "X",
            "cat": "neuron_runtime",
            "name": "nrt_execute",
            "pid": 1,
            "tid": 1,
            "ts": base_us + 35,
            "dur": 5,
            "args": {"nrt_sequence_id": ids[1]},
        },
    ]
    path.write_text(json.dumps({"traceEvents": events}))


# Every open of a file, by any route, raises the interpreter's "open" audit event; a hook
# cannot be removed, so it records only while a test listens.
_OPENED: list[list[str]] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _OPENED and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED[-1].append(os.path.abspath(os.fsdecode(args[0])))


sys.addaudithook(_audit)


@pytest.mark.slow
def test_parquet_output_gives_the_profiles_peaks_and_joins_executions_to_ops(
    clean_env, session_folder, monkeypatch, capsys
):
    pytest.importorskip("pyarrow")
    (session_folder / "ntrace.pb").write_text(json.dumps(_parquet_spec()))
    _framework_trace(session_folder / "trace.json", (1001, "1002"))  # an id written as text matches too
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    _OPENED.append([])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            p = neuron_profile(session_folder, save=True)
    finally:
        opened = _OPENED.pop()
    # The framework trace is read once, for its steps and its nrt_sequence_id links both.
    assert opened.count(os.path.abspath(session_folder / "trace.json")) == 1, opened
    # The peaks the profile carries: the fake's toy Metadata, 100 x 100 x 2 x 5 GHz and 1 TB/s.
    assert p.peak is not None
    assert (p.peak.flops_per_s, p.peak.bytes_per_s) == (pytest.approx(1.0e14), pytest.approx(1.0e12))
    assert "Metadata" in p.peak_note and "not verified on hardware" in p.peak_note
    # The join: two of three executions matched an nrt_sequence_id; the third stays on its NEFF row only.
    j = p.flow_join
    assert j is not None and (j.executions, j.matched, j.links) == (3, 2, 2)
    assert j.match_rate == pytest.approx(2 / 3)
    assert [(o.op, o.neff, o.executions) for o in j.ops] == [("aten::mm", "neff_mm", 1), ("aten::add", "neff_add", 1)]
    assert j.by_op() == {"aten::mm": pytest.approx(40.0), "aten::add": pytest.approx(25.0)}
    assert p.neff("neff_mm").device_us == pytest.approx(70.0)  # the NEFF rows keep every execution
    text = p.to_text()
    assert "Device time per op (a join through SystemProfileEvents.flow_id)" in text
    assert "2 of 3 execution(s)" in text and "(66.7%" in text and "not verified on hardware" in text
    # Without device=, the roofline uses the profile's peaks, and says so.
    rl = p.roofline()
    assert rl.peak_source == "profile" and rl.device.flops_per_s == pytest.approx(1.0e14)
    assert "the peaks Neuron's profile carries" in rl.to_text()
    assert any("peaks from the profile itself" in n for n in rl.notes)
    preset = p.roofline("trn2")
    assert preset.peak_source == "preset" and any("not the profile's own" in n for n in preset.notes)
    # The Parquet output is kept beside the runtime's files: read again with no tool, the same answer.
    assert (session_folder / "neuron_parquet").is_dir()
    again = neuron_profile(session_folder, tool="never")
    assert again.flow_join == p.flow_join and again.peak == p.peak
    assert NeuronProfile.from_json(p.to_json()) == p
    # The command line: --roofline without a device uses the profile's peaks.
    assert main(["neuron", str(session_folder), "--tool", "never", "--roofline"]) == 0
    out = capsys.readouterr().out
    assert "aten::mm" in out and "the peaks Neuron's profile carries" in out
    rows = list(csv.DictReader(io.StringIO(p.to_csv())))
    assert {(r["name"], r["field"], r["value"]) for r in rows if r["section"] == "join"} >= {
        ("flow_id", "matched", "2"),
        ("aten::mm / neff_mm", "executions", "1"),
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        (None, "holds no Metadata table"),
        ({"clock": 1.0, "rows": 2}, "does not give tensor_engine_num_rows"),
        (
            {
                "tensor_engine_num_rows": 100,
                "tensor_engine_num_cols": 100,
                "tensor_engine_clock_freq": -1.0,
                "dma_ddr_bandwidth": 1e12,
            },
            "as positive numbers",
        ),
    ],
)
def test_without_usable_metadata_the_preset_table_is_the_labelled_fallback(
    clean_env, session_folder, monkeypatch, capsys, metadata, why
):
    pytest.importorskip("pyarrow")
    (session_folder / "ntrace.pb").write_text(json.dumps(_parquet_spec(metadata)))
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    p = neuron_profile(session_folder, save=True)
    assert p.peak is None and why in p.peak_note
    assert any(n.startswith("no hardware peaks from the profile") and why in n for n in p.notes)
    with pytest.raises(UnknownDeviceError, match="carries no hardware peaks"):
        p.roofline()
    rl = p.roofline("trn2")
    assert rl.peak_source == "preset" and rl.device.name == "trn2"
    (note,) = [n for n in rl.notes if "hand-typed preset table" in n]
    assert "a fallback" in note and why in note
    assert main(["neuron", str(session_folder), "--tool", "never", "--roofline"]) == 2  # the saved output, read again
    assert "carries no hardware peaks" in capsys.readouterr().err


@pytest.mark.slow
def test_a_join_that_matches_nothing_says_its_match_rate_is_zero(clean_env, session_folder, monkeypatch):
    pytest.importorskip("pyarrow")
    # The times written as Arrow timestamps this time: read as the same nanoseconds.
    (session_folder / "ntrace.pb").write_text(json.dumps({**_parquet_spec(), "arrow_timestamps": True}))
    _framework_trace(session_folder / "trace.json", (7, 8))  # ids no execution has
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    p = neuron_profile(session_folder)
    j = p.flow_join
    assert j is not None and (j.executions, j.matched, j.match_rate, j.ops) == (3, 0, 0.0, ())
    assert [(n.neff, n.calls) for n in p.neffs] == [("neff_mm", 2), ("neff_add", 1)]  # unjoined, all kept
    assert any(n.startswith("SystemProfileEvents.parquet: 6 nc_exec_running row(s), 3 execution(s)") for n in p.notes)
    text = p.to_text()
    assert "0 of 3 execution(s)" in text and "(0.0%" in text and "match rate 0%" in text


def test_without_pyarrow_the_notes_say_how_to_install_it(clean_env, session_folder, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    monkeypatch.setenv(ENV_VAR, str(FAKE))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = neuron_profile(session_folder)
    assert len(p.executions) == 3 and p.peak is None and p.flow_join is None
    assert "pyarrow is not installed" in p.peak_note and "pip install 'neuronprof[neuron]'" in p.peak_note
    assert not any("--ingest-only" in c for c in _calls(clean_env["log"]))  # the tool is not run for nothing
    with pytest.raises(UnknownDeviceError, match=r"neuronprof\[neuron\]"):
        p.roofline()


def test_a_failed_ingest_is_a_note_and_the_json_is_still_read(clean_env, session_folder, monkeypatch, tmp_path):
    pytest.importorskip("pyarrow")
    # A tool that writes JSON but no Parquet (an older release without --ingest-only, say).
    wrapper = tmp_path / "old-neuron-explorer"
    wrapper.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = "--ingest-only" ] && { echo "unknown flag: --ingest-only" >&2; exit 2; }; done\n'
        f'exec "{FAKE}" "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv(ENV_VAR, str(wrapper))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = neuron_profile(session_folder)
    assert len(p.executions) == 3 and p.tool_error is None and p.flow_join is None and p.peak is None
    (note,) = [n for n in p.notes if "--ingest-only failed" in n]
    assert "unknown flag" in note and "no flow_id join" in note
    assert _left_behind(clean_env["scratch"]) == []
