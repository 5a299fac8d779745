"""Every trace neuronprof writes is valid JSON, whatever the names kineto wrote unescaped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import neuronprof
from neuronprof._cycle_files import escape_names


def _kineto_file(path: Path, names: list[str]) -> None:
    # kineto's layout: one key per line in X events, names written as they are (no escaping).
    events = []
    for i, name in enumerate(names):
        events.append(
            "  {\n"
            '    "ph": "X", "cat": "cpu_op",\n'
            f'    "name": "{name}",\n'
            f'    "pid": 1, "tid": 1,\n    "ts": {i}, "dur": 1\n'
            "  }"
        )
    meta = '  {"name": "process_name", "ph": "M", "ts": 0, "pid": 1, "tid": 0, "args": {"name": "python3"}}'
    text = '{\n  "schemaVersion": 1,\n  "traceEvents": [\n' + ",\n".join([meta, *events]) + "\n]\n}\n"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))


_NAMES = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\\"), max_size=30
) | st.sampled_from(['exp "v2"/m.py(2): work', 'say "hi", now', "tab\there", 'end"', '"', "ctl\x01x", 'a", "b'])


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(names=st.lists(_NAMES, min_size=1, max_size=6))
def test_escaped_names_make_valid_json_and_keep_every_name(tmp_path_factory, names):
    path = tmp_path_factory.mktemp("esc") / "trace.json"
    _kineto_file(path, names)
    escape_names(path)
    trace = json.loads(path.read_text(encoding="utf-8"))
    written = [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"]
    assert written == names
    assert trace["traceEvents"][0]["args"] == {"name": "python3"}


def test_a_valid_trace_is_left_byte_for_byte(tmp_path):
    path = tmp_path / "trace.json"
    _kineto_file(path, ["aten::mm", "nn.Module: Linear_0", "x.py(1): f"])
    before = path.read_bytes()
    assert escape_names(path) is False
    assert path.read_bytes() == before


@pytest.mark.slow
def test_a_label_with_quotes_is_exported_as_valid_json(tmp_path):
    import torch

    with neuronprof.session(backend="cpu", output_dir=tmp_path) as s:
        for _ in s.steps():
            with torch.profiler.record_function('load "batch", then step'):
                torch.relu(torch.randn(8, 8))
    for target in ("t.json", "t.json.gz"):
        path = s.export(tmp_path / target)
        if target.endswith(".gz"):
            import gzip

            trace = json.loads(gzip.decompress(path.read_bytes()))
        else:
            trace = json.loads(path.read_text())
        assert 'load "batch", then step' in {e.get("name") for e in trace["traceEvents"]}
    assert s.table(row_limit=None).row('load "batch", then step').calls == 1
