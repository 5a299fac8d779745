"""The reader of Neuron's profile outputs: summary-json, system_profile.json, steps, renderers, CLI, plot, roofline.

Inputs follow AWS's documented formats (``neuron_builders``); they are not
output captured on Trainium.
"""

from __future__ import annotations

import csv
import io
import json
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from neuron_builders import BASE_NS, exec_record, framework_trace, summary_metrics, write_system_profile

from neuronprof.analysis import NeuronProfile, TraceError, neuron_profile
from neuronprof.analysis.neuron import (
    ENGINES,
    extract_json,
    parse_summary,
    read_system_profile,
    step_activity,
)
from neuronprof.cli import main

HEX40 = "0123456789abcdef0123456789abcdef01234567"


# -- summary-json ----------------------------------------------------------------------


def test_summary_converts_units_and_keeps_not_available_blank():
    m = summary_metrics(2e-3, gpsimd_engine_active_time_percent=-1, model_flops=-1.0, some_future_metric=12)
    (s,) = parse_summary({f"n_{HEX40}": m}, source="x")
    assert s.kind == "device" and s.key == f"n_{HEX40}" and s.label == s.key
    assert s.total_us == pytest.approx(2000.0)
    assert s.engine("tensor").active_us == pytest.approx(1000.0)  # 0.5 of 2 ms
    assert s.engine("tensor").share_pct == pytest.approx(50.0)
    assert s.engine("dma").active_us == pytest.approx(1600.0) and s.engine("dma").share_pct == pytest.approx(80.0)
    # -1 means "not available": blank, never 0; the active time beside it is kept.
    assert s.engine("gpsimd").share_pct is None
    assert s.engine("gpsimd").active_us == pytest.approx(2e-3 * 0.2 * 1e6)
    assert s.model_flops is None and s.hardware_flops == 3.0e9
    assert s.mfu_pct == pytest.approx(25.0) and s.mbu_pct == pytest.approx(50.0)
    assert (s.hbm_read_bytes, s.hbm_write_bytes, s.hbm_bytes) == (2_000_000, 1_000_000, 3_000_000)
    assert [e.engine for e in s.engines] == list(ENGINES)


def test_summary_system_key_and_pair_label():
    out = parse_summary({f"n_{HEX40}": summary_metrics(), "s_abc123": {"total_time": 0.5}}, label="graph.neff")
    device, system = out
    assert device.label == "graph.neff" and system.kind == "system" and system.label == "s_abc123"
    assert system.total_us == pytest.approx(5e5) and system.engine("tensor").active_us is None


def test_summary_rejects_what_is_not_summary_json():
    with pytest.raises(ValueError, match="JSON object"):
        parse_summary([1, 2])
    with pytest.raises(ValueError, match="no profile"):
        parse_summary({"a": 1})


def test_extract_json_tolerates_log_lines_before_the_document():
    text = 'INFO[0000] reading profile\nWARN[0001] something {odd}\n{"n_1": {"total_time": 1}}\n'
    assert extract_json(text) == {"n_1": {"total_time": 1}}
    with pytest.raises(ValueError, match="no JSON"):
        extract_json("INFO[0000] only logs\n")


# -- system_profile.json ------------------------------------------------------------------


def test_duplicates_on_two_physical_cores_merge_by_exec_id(tmp_path):
    recs = [
        exec_record(BASE_NS, 1000, exec_id=1, core=4),
        exec_record(BASE_NS + 100, 1200, exec_id=1, core=5),  # same execution, second physical core
        exec_record(BASE_NS + 5000, 500, exec_id=2, core=4, neff="neff_b", model_id=8),
        exec_record(BASE_NS + 5050, 450, exec_id=2, core=5, neff="neff_b", model_id=8),
        {"name": "nrt_model_submit", "timestamp": BASE_NS - 10, "duration": 5, "process_id": "100"},
    ]
    path = write_system_profile(tmp_path / "system_profile.json", recs, unknown_top={"x": 1})
    execs, notes = read_system_profile(path)
    assert [(e.neff, e.start_ns - BASE_NS, e.end_ns - BASE_NS, e.cores) for e in execs] == [
        ("neff_a", 0, 1300, (4, 5)),
        ("neff_b", 5000, 5500, (4, 5)),
    ]
    assert execs[0].exec_id == 1 and execs[0].process_id == "100" and execs[0].lnc_idx == 0
    assert any("merged" in n for n in notes)


def test_reused_exec_id_apart_in_time_and_bad_records(tmp_path):
    recs = [
        exec_record(BASE_NS, 1000, exec_id=1),
        exec_record(BASE_NS + 10_000, 1000, exec_id=1),  # same id much later: not a second core
        exec_record(BASE_NS + 20_000, -5, exec_id=3),  # negative duration
        exec_record(BASE_NS + 30_000, 10, exec_id=4, timestamp="soon"),  # not a number
        exec_record(BASE_NS + 40_000, 7, exec_id=None, neff=""),  # no id, no name
        exec_record(3, 2, exec_id=9, timestamp_unit="us"),  # microseconds, converted
    ]
    path = write_system_profile(tmp_path / "system_profile.json", recs)
    execs, notes = read_system_profile(path)
    assert [(e.start_ns, e.end_ns - e.start_ns) for e in execs] == [
        (3000, 2000),
        (BASE_NS, 1000),
        (BASE_NS + 10_000, 1000),
        (BASE_NS + 40_000, 7),
    ]
    assert execs[-1].neff == "model 7"
    assert any("reused an exec_id" in n for n in notes)
    assert any("2 nc_exec_running record(s) without a valid" in n for n in notes)


def test_system_profile_errors_are_trace_errors(tmp_path):
    bad = tmp_path / "system_profile.json"
    bad.write_text('{"traceEvents": []}')
    with pytest.raises(TraceError, match="trace_event"):
        read_system_profile(bad)
    bad.write_text('{"trace_event": [{"name": "nc_exec_running", ')
    with pytest.raises(TraceError, match="truncated"):
        neuron_profile(bad)
    with pytest.raises(TraceError, match="no such"):
        neuron_profile(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="no Neuron profile"):
        neuron_profile(tmp_path / "empty")


# -- steps -------------------------------------------------------------------------------------


def test_per_step_busy_and_idle_from_the_framework_trace(tmp_path):
    s1, s2 = BASE_NS, BASE_NS + 100_000
    recs = [
        exec_record(s1 + 10_000, 20_000, exec_id=1, core=0),
        exec_record(s1 + 10_000, 20_000, exec_id=1, core=1),
        exec_record(s1 + 25_000, 15_000, exec_id=2, neff="neff_b", model_id=8),  # overlaps the first
        exec_record(s1 + 90_000, 20_000, exec_id=3),  # runs past the end of step 1 into step 2
        exec_record(s2 + 50_000, 10_000, exec_id=4),
    ]
    folder = tmp_path / "host_pid_100" / "20260101_000000"
    write_system_profile(folder / "system_profile.json", recs)
    framework_trace(folder / "trace.json", [(1, s1, s1 + 100_000), (2, s2, s2 + 100_000)])
    p = neuron_profile(tmp_path, tool="never")
    one, two = p.steps
    assert (one.step, one.executions, two.executions) == (1, 3, 1)
    assert one.busy_us == pytest.approx(30.0 + 10.0)  # [10, 40] and [90, 100] µs
    assert one.idle_us == pytest.approx(60.0) and one.gaps == 2 and one.largest_gap_us == pytest.approx(50.0)
    assert two.busy_us == pytest.approx(10.0 + 10.0) and two.largest_gap_us == pytest.approx(40.0)
    assert one.busy_pct == pytest.approx(40.0)
    assert p.tool is None
    a = p.neff("neff_a")
    assert (a.calls, a.device_us, a.min_us, a.max_us, a.cores) == (3, pytest.approx(50.0), 10.0, 20.0, (0, 1))
    assert p.device_us == pytest.approx(65.0)
    with pytest.raises(KeyError, match="neff_a"):
        p.neff("nope")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2_000), st.integers(0, 400), st.booleans()), max_size=25),
    st.lists(st.tuples(st.integers(0, 2_000), st.integers(1, 800)), min_size=1, max_size=5),
)
def test_step_activity_invariants(spans, steps):
    """Busy + idle is the step; busy never exceeds it; splitting an execution over two cores changes nothing."""
    from neuronprof.analysis.neuron import NeffExecution

    single = sorted((NeffExecution("n", a, a + d) for a, d, _ in spans), key=lambda e: e.start_ns)
    step_rows = [(i, a, a + d) for i, (a, d) in enumerate(steps)]
    for row in step_activity(single, step_rows):
        assert row.busy_us + row.idle_us == pytest.approx(row.duration_us)
        assert 0 <= row.busy_us <= row.duration_us + 1e-9
        assert row.largest_gap_us <= row.idle_us + 1e-9
        covered = set()
        for e in single:
            covered.update(range(max(e.start_ns, row.start_ns), min(e.end_ns, row.end_ns)))
        assert row.busy_us == pytest.approx(len(covered) / 1000.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 10**4), st.integers(0, 50)), max_size=20))
def test_merge_of_physical_cores_property(tmp_path_factory, spans):
    """Any execution recorded on two cores (second starting later, same exec_id) reads as one execution."""
    tmp = tmp_path_factory.mktemp("merge")
    recs = []
    for i, (start, dur, skew) in enumerate(spans):
        skew = min(skew, dur - 1) if dur > 1 else 0
        recs.append(exec_record(BASE_NS + start, dur, exec_id=i, core=0))
        recs.append(exec_record(BASE_NS + start + skew, dur - skew, exec_id=i, core=1))
    path = write_system_profile(tmp / "system_profile.json", recs)
    execs, _ = read_system_profile(path)
    assert len(execs) == len(spans)
    assert sorted((e.start_ns - BASE_NS, e.end_ns - e.start_ns) for e in execs) == sorted((s, d) for s, d, _ in spans)
    assert all(e.cores == (0, 1) for e in execs)


# -- the model: JSON, renderers, plot, roofline ------------------------------------------------------


@pytest.fixture
def profile_folder(tmp_path: Path) -> Path:
    """A session folder with the tool's JSON already beside the runtime's files (a copied bundle)."""
    folder = tmp_path / "bundle" / "system" / "i-0abc_pid_100" / "20260101_000000"
    folder.mkdir(parents=True)
    (folder / "ntrace.pb").write_bytes(b"\x00binary")
    recs = [exec_record(BASE_NS + 1000 * i, 400, exec_id=i, neff="neff_a" if i % 3 else "neff_b") for i in range(9)]
    write_system_profile(folder / "system_profile.json", recs)
    summaries = {
        f"n_{HEX40}": summary_metrics(1e-3, gpsimd_engine_active_time_percent=-1, new_metric="x"),
        "n_" + "f" * 40: summary_metrics(2e-4, hardware_flops=1.0e5, hbm_read_bytes=4_000_000),
        "s_1234": {"total_time": 0.01},
    }
    (folder / "neuron_summary.json").write_text("INFO[0000] log line\n" + json.dumps(summaries))
    framework_trace(folder / "trace.json", [(5, BASE_NS, BASE_NS + 10_000)])
    device = tmp_path / "bundle" / "device" / "neff_a"
    device.mkdir(parents=True)
    (device / "neff_a.neff").write_bytes(b"n")
    (device / "profile_nc_0_session_0.ntff").write_bytes(b"t")
    return tmp_path / "bundle"


def test_bundle_with_json_reads_without_the_tool(profile_folder, monkeypatch):
    monkeypatch.setenv("NEURONPROF_NEURON_EXPLORER", "/nonexistent/neuron-explorer")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no tool is needed, so none is looked for
        p = neuron_profile(profile_folder)
    assert p.tool is None
    assert [n.neff for n in p.neffs] == ["neff_a", "neff_b"]
    assert (p.neff("neff_a").calls, p.neff("neff_b").calls) == (6, 3)
    assert len(p.summaries) == 3 and p.steps[0].step == 5
    assert any("device-only folder(s) skipped" in n for n in p.notes)


def test_json_round_trip_and_rows(profile_folder):
    p = neuron_profile(profile_folder, tool="never")
    back = NeuronProfile.from_json(p.to_json())
    assert back == p
    assert back.neffs == p.neffs
    rows = p.rows()
    assert [r.name for r in rows] == ["NEFF neff_a", "NEFF neff_b"]
    assert rows[0].on_device and rows[0].calls == 6 and rows[0].self_device_us == pytest.approx(2.4)
    with pytest.raises(ValueError, match="schema"):
        NeuronProfile.from_json('{"schema": "x"}')


def test_text_markdown_csv(profile_folder):
    p = neuron_profile(profile_folder, tool="never")
    text = p.to_text()
    assert "Engines per device profile" in text and "NEFF executions" in text and "ProfilerStep#5" in text
    assert "500.0 (50.0%)" in text  # tensor active µs (share) of the 1 ms profile
    md = p.to_markdown()
    assert "| Profile |" in md and "| neff_a |" in md
    rows = list(csv.DictReader(io.StringIO(p.to_csv())))
    assert {r["section"] for r in rows} == {"engines", "neffs", "steps"}
    got = {(r["name"], r["field"]): r["value"] for r in rows}
    assert got[(f"n_{HEX40}", "gpsimd_share_pct")] == ""  # not available: blank, never 0
    assert float(got[(f"n_{HEX40}", "tensor_active_us")]) == pytest.approx(500.0)
    assert got[("neff_a", "calls")] == "6"


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_stacked_engine_bars(profile_folder, tmp_path, suffix):
    pytest.importorskip("matplotlib")
    p = neuron_profile(profile_folder, tool="never")
    out = p.plot(tmp_path / "plots" / f"engines{suffix}")
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in data[:2000]
    with pytest.raises(ValueError, match="png"):
        p.plot(tmp_path / "engines.pdf")
    with pytest.raises(ValueError, match="no device profile"):
        NeuronProfile().plot(tmp_path / "x.png")


def test_roofline_per_neff_against_presets(profile_folder):
    p = neuron_profile(profile_folder, tool="never")
    for device in ("trn1", "trn2"):
        rl = p.roofline(device=device)
        assert rl.device.name == device
        by_name = {r.name: r for r in rl.rows}
        big = by_name[f"n_{HEX40}"]  # 3 GFLOP over 3 MB: 1000 FLOP/byte, right of both ridges
        assert big.bound == "compute" and big.intensity == pytest.approx(1000.0)
        assert big.flops_source == "counters" and big.time_us == pytest.approx(1000.0)
        small = by_name["n_" + "f" * 40]  # 1e5 FLOP over 5 MB: memory-bound
        assert small.bound == "memory"
        assert small.achieved_bytes_per_s == pytest.approx(5_000_000 / 2e-4)
    with pytest.raises(ValueError, match="unknown device"):
        p.roofline(device="trn9")


# -- the command line ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "markdown", "csv", "json"])
def test_cli_neuron_formats(profile_folder, capsys, fmt):
    assert main(["neuron", str(profile_folder), "--format", fmt, "--tool", "never"]) == 0
    out = capsys.readouterr().out
    if fmt == "json":
        assert NeuronProfile.from_json(out).neff("neff_a").calls == 6
    elif fmt == "csv":
        assert out.startswith("section,name,field,value")
    else:
        assert "neff_a" in out and "Tensor" in out


def test_cli_neuron_roofline_plot_and_errors(profile_folder, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "e.png"
    assert main(["neuron", str(profile_folder), "--tool", "never", "--roofline", "trn1", "--plot", str(png)]) == 0
    out = capsys.readouterr()
    assert "roofline on trn1" in out.out and "compute" in out.out and png.exists()
    assert main(["neuron", str(tmp_path / "missing")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["neuron", str(profile_folder), "--format", "csv", "--roofline", "trn2"]) == 2
    assert "--roofline" in capsys.readouterr().err
    assert main(["neuron", str(profile_folder / "x.neff")]) == 2


# -- review fixes: missing figures, executions outside steps, sniffing, strict JSON, CSV notes -------------------


@pytest.mark.parametrize("missing", ["hbm_read_bytes", "hbm_write_bytes"])
def test_missing_byte_count_is_never_counted_as_zero(tmp_path, missing):
    path = tmp_path / "neuron_summary.json"
    data = {f"n_{HEX40}": summary_metrics(1e-3, **{missing: -1}), "n_" + "e" * 40: summary_metrics()}
    path.write_text(json.dumps(data))
    p = neuron_profile(path, tool="never")
    gone, kept = p.summaries
    assert gone.hbm_bytes is None and kept.hbm_bytes == 3_000_000  # not (read or 0) + (write or 0)
    rl = p.roofline("trn2")
    assert [r.name for r in rl.rows] == [kept.label]  # the row without its bytes is left out, not put at 0 bytes
    assert any(f"{missing} not available" in n and gone.label in n for n in rl.notes)
    text = p.to_text()
    row = next(line for line in text.splitlines() if line.startswith(gone.label))
    assert " 0.00 " not in row  # the missing byte count is a blank cell


def test_executions_outside_the_profiled_steps_are_noted(tmp_path):
    s1 = BASE_NS
    recs = [
        exec_record(s1 - 50_000, 20_000, exec_id=1),  # before the step (warm-up)
        exec_record(s1 + 10_000, 20_000, exec_id=2),  # inside
        exec_record(s1 + 95_000, 10_000, exec_id=3),  # overlaps the end: counted in the step
        exec_record(s1 + 300_000, 5_000, exec_id=4),  # after the step
    ]
    folder = tmp_path / "host_pid_100" / "20260101_000000"
    write_system_profile(folder / "system_profile.json", recs)
    framework_trace(folder / "trace.json", [(1, s1, s1 + 100_000)])
    p = neuron_profile(tmp_path, tool="never")
    (note,) = [n for n in p.notes if "fell outside the profiled steps" in n]
    assert note.startswith("2 execution(s) (25.0 µs) fell outside the profiled steps")
    assert p.neff("neff_a").calls == 4  # still counted in the NEFF totals, with the note beside them
    assert note in p.to_text()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2_000), st.integers(0, 300)), min_size=1, max_size=20),
    st.lists(st.tuples(st.integers(0, 2_000), st.integers(1, 500)), min_size=1, max_size=4),
)
def test_outside_steps_matches_a_direct_count(tmp_path_factory, spans, steps):
    recs = [exec_record(BASE_NS + 1000 * a, 1000 * d, exec_id=i) for i, (a, d) in enumerate(spans)]
    step_ns = [(i, BASE_NS + 1000 * a, BASE_NS + 1000 * (a + d)) for i, (a, d) in enumerate(steps)]
    folder = tmp_path_factory.mktemp("p") / "h_pid_1" / "t"
    write_system_profile(folder / "system_profile.json", recs)
    framework_trace(folder / "trace.json", step_ns)
    p = neuron_profile(folder.parent.parent, tool="never")
    outside = [ex for ex in p.executions if not any(ex.start_ns < e and ex.end_ns > s for _, s, e in step_ns)]
    notes = [n for n in p.notes if "fell outside" in n]
    if outside:
        us = sum(ex.end_ns - ex.start_ns for ex in outside) / 1000.0
        assert notes == [notes[0]] and notes[0].startswith(f"{len(outside)} execution(s) ({us:.1f} µs)")
    else:
        assert notes == []


def test_summary_sniffed_whatever_its_name_and_absurd_values(tmp_path, capsys):
    path = tmp_path / "metrics.json"  # not named *summary*.json
    path.write_text(json.dumps({f"n_{HEX40}": summary_metrics(1e-3, hardware_flops=1e308, total_time=1e308)}))
    p = neuron_profile(path, tool="never")
    (s,) = p.summaries
    assert s.hardware_flops is None and s.total_us is None  # not believable: not available
    assert any("hardware_flops" in n and "total_time" in n and "not available" in n for n in p.notes)
    assert main(["neuron", str(path), "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "Infinity" not in out and "NaN" not in out
    json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_empty_system_profile_beside_a_valid_summary_is_a_note(tmp_path):
    folder = tmp_path / "h_pid_1" / "t"
    folder.mkdir(parents=True)
    (folder / "system_profile.json").write_text("")
    (folder / "neuron_summary.json").write_text(json.dumps({f"n_{HEX40}": summary_metrics()}))
    p = neuron_profile(tmp_path, tool="never")
    assert len(p.summaries) == 1 and p.executions == ()
    assert any("system_profile.json" in n and "left out" in n for n in p.notes)


def test_cli_csv_notes_on_stderr_like_summarize(profile_folder, capsys):
    assert main(["neuron", str(profile_folder), "--format", "csv", "--tool", "never"]) == 0
    captured = capsys.readouterr()
    assert "# note" not in captured.out
    lines = captured.err.splitlines()
    assert lines[0].startswith("# note: source: ") and "existing JSON files" in lines[0]
    assert all(line.startswith("# note: ") for line in lines)
    assert any("device-only folder(s) skipped" in line for line in lines)


_FIELD_VALUES = st.one_of(st.none(), st.integers(-5, 10**6), st.text(max_size=3), st.floats(allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "start": st.integers(0, 10**6),
                "dur": st.integers(-2, 10**4),
                "exec_id": st.integers(0, 4),
                "core": st.integers(0, 2),
                "lnc": st.integers(0, 1),
            },
            optional={
                "unit": st.sampled_from(["ns", "us", "weird"]),
                "odd": _FIELD_VALUES,
                "drop": st.sampled_from(["lnc_idx", "exec_id", "device_core_idx", "model_name"]),
            },
        ),
        max_size=25,
    )
)
def test_typed_fast_path_reads_as_the_plain_path(tmp_path_factory, recs):
    """Indented JSON goes through the msgspec fast path; one-line JSON through plain dicts: same executions."""
    events = []
    for i, r in enumerate(recs):
        ev = exec_record(BASE_NS + r["start"], r["dur"], exec_id=r["exec_id"], core=r["core"], lnc=r["lnc"])
        if "unit" in r:
            ev["timestamp_unit"] = r["unit"]
        if "odd" in r:
            ev["a_field_from_a_future_release"] = r["odd"]
        ev.pop(r.get("drop", ""), None)
        events += [ev, {"name": "nrt_model_submit", "timestamp": i, "model_name": "nc_exec_running"}]
    tmp = tmp_path_factory.mktemp("paths")
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    compact = tmp / "a" / "system_profile.json"
    compact.write_text(json.dumps({"trace_event": events}))
    indented = tmp / "b" / "system_profile.json"
    indented.write_text(json.dumps({"trace_event": events}, indent=1))
    assert read_system_profile(compact, label="x") == read_system_profile(indented, label="x")


@pytest.mark.slow
def test_plot_normalized_keeps_a_far_shorter_profile_visible(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "neuron_summary.json"
    path.write_text(json.dumps({f"n_{HEX40}": summary_metrics(1e-2), "n_" + "b" * 40: summary_metrics(1e-5)}))
    svg = tmp_path / "e.svg"
    assert main(["neuron", str(path), "--tool", "never", "--plot", str(svg), "--normalize"]) == 0
    text = svg.read_text()
    assert "% of each profile" in text.replace("&#37;", "%") or "each profile" in text
    p = neuron_profile(path, tool="never")
    plain = p.plot(tmp_path / "plain.svg").read_text()
    assert plain != p.plot(tmp_path / "n.svg", normalize=True).read_text()  # another x scale: % of each total


def test_neff_roofline_text_speaks_of_neffs_not_operators(profile_folder):
    rl = neuron_profile(profile_folder, tool="never").roofline("trn2")
    for text in (rl.to_text(), rl.to_markdown()):
        assert "op signature" not in text and "Input shapes" not in text
        assert "device profile(s) (NEFFs)" in text and "overall (by time" in text


def test_sessions_reads_only_the_session_folders_given(tmp_path):
    out = tmp_path / "neuron_profile"
    for stamp, neff in (("1000", "neff_first"), ("2000", "neff_second")):
        folder = out / "i-0abc_pid_100" / stamp
        write_system_profile(folder / "system_profile.json", [exec_record(BASE_NS, 5_000, neff=neff)])
    everything = neuron_profile(out, tool="never")
    assert sorted(s.neff for s in everything.neffs) == ["neff_first", "neff_second"]
    first = neuron_profile(out, tool="never", sessions=[out / "i-0abc_pid_100" / "1000"])
    assert [s.neff for s in first.neffs] == ["neff_first"]
    with pytest.raises(ValueError, match="list of folders"):
        neuron_profile(out, tool="never", sessions=str(out / "i-0abc_pid_100" / "1000"))  # type: ignore[arg-type]
    with pytest.raises(TraceError, match="no such session folder"):
        neuron_profile(out, tool="never", sessions=[out / "i-0abc_pid_100" / "3000"])


def test_a_chrome_trace_is_refused_from_its_first_bytes_before_it_is_read(tmp_path, capsys):
    # A torch.profiler trace given where Neuron's system profile is expected. Past its start the
    # file is not JSON at all: reading it would fail on that, so the error below shows that the
    # refusal came from the start alone, before any event was read.
    trace = tmp_path / "trace.pt.trace.json"
    head = json.dumps({"schemaVersion": 1, "deviceProperties": [{"name": "GPU"}]})[:-1]
    trace.write_text(head + ', "traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2}, not json at all')
    with pytest.raises(TraceError, match="a Chrome trace .*'traceEvents'.*not Neuron's system profile"):
        read_system_profile(trace)
    with pytest.raises(TraceError, match="neuronprof summarize"):
        neuron_profile(trace, tool="never")
    assert main(["neuron", str(trace), "--tool", "never"]) == 2
    assert "a Chrome trace" in capsys.readouterr().err
    # A system profile is still read, whatever else its start names.
    profile = tmp_path / "system_profile.json"
    write_system_profile(profile, [exec_record(0, 1_000)], traceEvents=[])
    assert len(read_system_profile(profile)[0]) == 1
