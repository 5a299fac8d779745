"""Bad input: one-line errors and exit status 2 from the CLI, and TraceError (never anything else) from the API."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_builders import cuda_trace_events, op, write_trace

from neuronprof.analysis import TraceError, diff, load_trace, roofline
from neuronprof.cli import main as analysis_main
from neuronprof.errors import NeuronProfError


def _bad_inputs(root: Path) -> dict[str, tuple[Path, str]]:
    """Each kind of bad input, with a fragment the one-line message must contain."""
    root.mkdir(parents=True, exist_ok=True)
    good = json.dumps({"traceEvents": cuda_trace_events()}).encode()
    (root / "truncated.json.gz").write_bytes(gzip.compress(good)[: len(gzip.compress(good)) // 2])
    (root / "invalid.json").write_text('{"traceEvents": [{"ph": "X",, }]}')
    (root / "not_a_trace.json").write_text('{"hello": "world"}')
    (root / "a_list.json").write_text("[1, 2, 3]")
    (root / "binary.json").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    write_trace(root / "no_dur.json", [{"ph": "X", "name": "a", "ts": 0, "pid": 1, "tid": 1}])
    write_trace(root / "no_ts.json", [{"ph": "X", "name": "a", "dur": 1}])
    write_trace(root / "no_name.json", [{"ph": "X", "ts": 0, "dur": 1}])
    write_trace(root / "string_ts.json", [op("a", "soon", 1)])  # type: ignore[arg-type]
    write_trace(root / "negative.json", [op("a", 0, -5)])
    write_trace(root / "nan.json", [op("a", 0, float("nan"))])
    (root / "empty_folder").mkdir(exist_ok=True)
    (root / "folder_without_traces").mkdir(exist_ok=True)
    (root / "folder_without_traces" / "readme.txt").write_text("nothing here")
    return {
        "missing": (root / "does_not_exist.json", "no such file"),
        "truncated gzip": (root / "truncated.json.gz", "truncated"),
        "invalid JSON": (root / "invalid.json", "invalid JSON"),
        "not a trace": (root / "not_a_trace.json", "traceEvents"),
        "a list of numbers": (root / "a_list.json", "not a JSON object"),
        "binary": (root / "binary.json", "not UTF-8"),
        "no dur": (root / "no_dur.json", "'dur'"),
        "no ts": (root / "no_ts.json", "'ts'"),
        "no name": (root / "no_name.json", "'name'"),
        "string ts": (root / "string_ts.json", "'ts'"),
        "negative duration": (root / "negative.json", "negative duration"),
        "NaN duration": (root / "nan.json", "'dur'"),
        "empty folder": (root / "empty_folder", "no trace files"),
        "folder without traces": (root / "folder_without_traces", "no trace files"),
    }


_KINDS = [
    "missing",
    "truncated gzip",
    "invalid JSON",
    "not a trace",
    "a list of numbers",
    "binary",
    "no dur",
    "no ts",
    "no name",
    "string ts",
    "negative duration",
    "NaN duration",
    "empty folder",
    "folder without traces",
]


@pytest.mark.parametrize("kind", _KINDS)
@pytest.mark.parametrize("command", ["summarize", "roofline", "diff"])
def test_cli_reports_bad_input_in_one_line_with_status_2(tmp_path: Path, capsys, kind: str, command: str) -> None:
    path, fragment = _bad_inputs(tmp_path)[kind]
    argv = [command, str(path)] + ([str(path)] if command == "diff" else [])
    assert analysis_main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"neuronprof {command}: error: ")
    assert fragment in lines[0]
    assert "Traceback" not in err


@pytest.mark.parametrize("kind", _KINDS)
def test_api_raises_trace_error_which_is_a_neuronprof_error_and_a_value_error(tmp_path: Path, kind: str) -> None:
    path, fragment = _bad_inputs(tmp_path)[kind]
    with pytest.raises(TraceError, match=fragment) as info:
        load_trace(path)
    assert isinstance(info.value, NeuronProfError) and isinstance(info.value, ValueError)


def test_bad_options_are_one_line_errors_too(tmp_path: Path, capsys) -> None:
    path = write_trace(tmp_path / "t.json", [op("a", 0, 1)])
    assert analysis_main(["roofline", str(path), "--device", "tpu-v9"]) == 2
    assert "unknown device 'tpu-v9'" in capsys.readouterr().err
    assert analysis_main(["roofline", str(path)]) == 2  # a CPU trace, and no preset named
    assert "a CPU has no peak preset" in capsys.readouterr().err
    assert analysis_main(["roofline", str(path), "--device", "trn2", "--time-source", "device"]) == 2
    assert "no device time" in capsys.readouterr().err
    assert analysis_main(["roofline", str(path), "--device", "trn2", "--plot", str(tmp_path / "plot.pdf")]) == 2
    assert ".png or .svg" in capsys.readouterr().err
    plot = str(tmp_path / "no" / "such" / "dir.png")
    assert analysis_main(["roofline", str(path), "--device", "trn2", "--plot", plot]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exit_info:  # argparse: usage plus one error line, status 2
        analysis_main(["roofline", str(path), "--peak-flops", "fast"])
    assert exit_info.value.code == 2


# -- property-based: malformed traces never escape as anything but TraceError ------------------

_GOOD_TEXT = json.dumps(
    {"deviceProperties": [{"name": "GPU"}], "traceEvents": cuda_trace_events()}, separators=(",", ":")
)

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
_field_values = {
    "ph": st.sampled_from(["X", "B", "E", "M", "i", "s", "f", "C", ""]) | _json,
    "name": st.sampled_from(["aten::mm", "ProfilerStep#1", "process_name", "process_labels", "k"]) | _json,
    "cat": st.sampled_from(["cpu_op", "kernel", "cuda_runtime", "python_function", "Trace", "gpu_memcpy"]) | _json,
    "ts": st.integers(-5, 50) | st.floats(-1e3, 1e3) | _json,
    "dur": st.integers(0, 50) | st.floats(0, 1e3) | _json,
    "pid": st.integers(0, 3) | st.text(max_size=3) | _json,
    "tid": st.integers(0, 3) | _json,
    "args": st.fixed_dictionaries(
        {},
        optional={
            "External id": st.integers(-3, 20) | _json,
            "correlation": st.integers(-3, 20) | _json,
            "Input Dims": st.lists(st.lists(st.integers(-2, 70), max_size=3) | _json, max_size=4) | _json,
            "Input type": st.lists(
                st.sampled_from(["float", "c10::BFloat16", "Scalar", "", "TensorList"]) | _json, max_size=4
            )
            | _json,
            "Concrete Inputs": st.lists(st.sampled_from(["", "[-1]", "True", "1"]) | _json, max_size=4) | _json,
            "flops": st.integers(-5, 10**6) | _json,
            "name": _json,
            "labels": st.sampled_from(["CPU", "GPU 0", "TPU"]) | _json,
        },
    )
    | _json,
}
_events = st.lists(st.fixed_dictionaries({}, optional=_field_values) | _json, max_size=12)

_PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _load_and_use(path: Path) -> None:
    """Load, then drive every consumer: none may fail on anything the loader accepted."""
    try:
        trace = load_trace(path)
    except TraceError:
        return
    for group in ("name", "shape"):
        str(trace.table("device", group_by=group))  # type: ignore[arg-type]
    roofline(trace, "h100").to_json()
    diff(trace, trace).to_text()


@_PROPERTY
@given(events=_events)
@pytest.mark.slow
def test_arbitrary_events_load_or_raise_trace_error(tmp_path_factory: Any, events: list[Any]) -> None:
    path = tmp_path_factory.mktemp("prop") / "t.json"
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    _load_and_use(path)


@_PROPERTY
@given(cut=st.integers(0, len(_GOOD_TEXT)), gz=st.booleans())
def test_truncated_traces_raise_trace_error(tmp_path_factory: Any, cut: int, gz: bool) -> None:
    data = _GOOD_TEXT[:cut].encode()
    path = tmp_path_factory.mktemp("cut") / "t.json"
    path.write_bytes(gzip.compress(data) if gz else data)
    _load_and_use(path)


@_PROPERTY
@given(edits=st.lists(st.tuples(st.integers(0, len(_GOOD_TEXT) - 1), st.binary(min_size=0, max_size=3)), max_size=4))
def test_corrupted_bytes_raise_trace_error_or_load(tmp_path_factory: Any, edits: list[tuple[int, bytes]]) -> None:
    data = bytearray(_GOOD_TEXT.encode())
    for at, new in edits:
        data[at : at + 1] = new
    path = tmp_path_factory.mktemp("bytes") / "t.json"
    path.write_bytes(bytes(data))
    _load_and_use(path)
