"""The straggler of several ranks, and advise/report on a folder of ranks, through the public API.

The straggler is the rank the others wait for: the most compute per step, a rank's
compute being its step time less the time in collectives. In the folders built
here rank 0 computes little and waits long in a collective; rank 1 computes long
and waits little. Rank 0 has the longest collective; rank 1 is the straggler.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_builders import op, write_trace

from neuronprof.analysis import load_trace, summarize, summarize_ranks
from neuronprof.analysis.insights import (
    Insights,
    RankInsights,
    advise,
    analyze,
    analyze_ranks,
    timeline_from_trace,
)
from neuronprof.analysis.trace import EventAggregator
from neuronprof.cli import main as analysis_main
from neuronprof.model import RankTable, Table

# Per rank: (its own compute before the collective, µs). Each step lasts 1000 µs.
COMPUTE = {0: 100, 1: 840}


def _cpu_rank(rank: int, steps: int = 2) -> list[dict[str, Any]]:
    """A gloo run as a real trace holds it: the op that issues the collective on the step's
    thread, the process group's async span on its own thread, the wait in no op at all."""
    events = []
    for i in range(steps):
        base = i * 1000
        busy = COMPUTE[rank]
        events += [
            op(f"ProfilerStep#{i + 1}", base, 1000, cat="user_annotation", pid=7, tid=1),
            op("aten::mm", base + 10, busy, pid=7, tid=1),
            op("c10d::allreduce_", base + busy + 20, 10, pid=7, tid=1),
            # Every rank's collective ends when the last rank (rank 1) joins it.
            op("gloo:all_reduce", base + busy + 25, 990 - (busy + 25), cat="user_annotation", pid=7, tid=2),
            op("aten::add_", base + 992, 4, pid=7, tid=1),
        ]
    return events


def _gpu_rank(rank: int) -> list[dict[str, Any]]:
    """A CUDA run: NCCL's kernel on its stream spins until the last rank joins."""
    busy = COMPUTE[rank]
    return [
        {"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}},
        op("ProfilerStep#1", 0, 1000, cat="user_annotation", pid=7, tid=1),
        op("aten::mm", 5, 10, pid=7, tid=1, External_id=1),
        op("cudaLaunchKernel", 6, 4, cat="cuda_runtime", pid=7, tid=1, correlation=1),
        op("c10d::allreduce_", 20, 10, pid=7, tid=1, External_id=2),
        op("cudaLaunchKernel", 22, 4, cat="cuda_runtime", pid=7, tid=1, correlation=2),
        op("cudaDeviceSynchronize", 40, 955, cat="cuda_runtime", pid=7, tid=1),
        op("sm90_gemm", 10, busy, cat="kernel", pid=0, tid=7, correlation=1),
        op("ncclDevKernel_AllReduce_Sum_f32_RING", busy + 15, 975 - busy, cat="kernel", pid=0, tid=20, correlation=2),
    ]


def _folder(tmp_path: Path, events: Any, name: str = "run") -> Path:
    run = tmp_path / name
    for rank in (0, 1):
        write_trace(run / f"rank-{rank}.json", events(rank), distributedInfo={"rank": rank, "world_size": 2})
    return run


@pytest.fixture
def cpu_run(tmp_path: Path) -> Path:
    return _folder(tmp_path, _cpu_rank)


# -- 1. the straggler is the rank the others wait for --------------------------------------


def test_the_straggler_is_the_rank_that_computes_longest_not_the_one_with_the_longest_collective(
    cpu_run: Path, reader: str
) -> None:
    view = summarize_ranks(cpu_run, sort_by="cpu_total")
    gloo = view.row("gloo:all_reduce")
    assert gloo.values[0] > gloo.values[1]  # rank 0 has the longest collective: it waited
    assert view.straggler == 1
    # Per step: 1000 µs less the time a collective was in flight (the issuing op and the
    # span overlap; each instant counts once).
    assert view.compute_per_step_us == (1000 - 870, 1000 - 130)
    assert view.collective_wait_per_step_us == (870, 130)
    # Every collective row names the rank the others wait for; an op of the ranks' own work, its largest.
    assert gloo.slowest_rank == view.row("c10d::allreduce_").slowest_rank == 1
    assert view.row("aten::mm").slowest_rank == 1
    assert [t.steps for t in view.tables] == [2, 2]
    assert [t.step_us for t in view.tables] == [2000, 2000]


def test_the_straggler_on_a_device_is_read_from_the_communication_kernels(tmp_path: Path) -> None:
    view = summarize_ranks(_folder(tmp_path, _gpu_rank))
    nccl = next(r for r in view.rows if r.name.startswith("ncclDevKernel"))
    assert nccl.on_device and nccl.values[0] > nccl.values[1]
    assert view.straggler == 1 and nccl.slowest_rank == 1
    # The host spends the step in cudaDeviceSynchronize on both ranks: the kernels tell them apart.
    # In collectives: the issuing op (10 µs) and the NCCL kernel, from its start to 990 µs.
    assert view.compute_per_step_us == (1000 - 10 - (990 - 115), 1000 - 10 - (990 - 855))


def test_summarize_names_the_straggler_in_every_format(cpu_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert analysis_main(["summarize", str(cpu_run)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^straggler: rank 1, the rank the others wait for: 870\.0 µs of compute per step", out, re.M)
    assert re.search(r"^rank 0: .*compute 130\.0 µs/step \(its step less 870\.0 µs/step in collectives\)", out, re.M)
    assert analysis_main(["summarize", str(cpu_run), "--format", "markdown"]) == 0
    assert "straggler: rank 1" in capsys.readouterr().out
    assert analysis_main(["summarize", str(cpu_run), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["straggler"] == 1 and data["compute_per_step_us"] == [130, 870]
    back = RankTable.from_dict(data)
    assert back.straggler == 1 and back.tables[1].collective_wait_us == 260


def test_no_straggler_is_named_without_two_ranks_of_steps_or_when_they_compute_as_long() -> None:
    def table(step_us: float | None, waited: float | None, steps: int = 1) -> Table:
        return Table((), steps=steps, step_us=step_us, collective_wait_us=waited)

    assert RankTable.from_tables([table(100, 10), table(100, 90)]).straggler == 0
    assert RankTable.from_tables([table(100, 10), table(100, 10)]).straggler is None  # a tie
    assert RankTable.from_tables([table(100, 10), table(None, None, 0)]).straggler is None
    assert RankTable.from_tables([table(100, 10)]).straggler is None
    # Per step: rank 1's two steps take twice as long as rank 0's one, and compute as long each.
    assert RankTable.from_tables([table(100, 10), table(200, 20, 2)]).straggler is None
    assert "straggler: not known" in str(RankTable.from_tables([table(100, 10), table(None, None, 0)]))


# -- 2. advise reads each rank on its own ---------------------------------------------------


def test_advise_on_a_rank_folder_reads_each_rank_over_its_own_steps(
    cpu_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = advise(cpu_run)
    assert isinstance(result, RankInsights)
    assert result.world_size == 2 and result.straggler == 1
    assert [r.steps for r in result.ranks] == [2, 2]  # never 4: ranks are not steps
    assert result.rank(1).step_us == pytest.approx(1000)
    # The figures are the cross-rank view's: one rule.
    view = summarize_ranks(cpu_run)
    assert result.compute_per_step_us == pytest.approx(view.compute_per_step_us)
    assert result.collective_wait_per_step_us == pytest.approx(view.collective_wait_per_step_us)
    # Each rank's figures are its own, not the mean of the two (470 µs).
    mm = [result.rank(r).of_kind("dominant_op")[0].evidence.us_per_step for r in (0, 1)]
    assert mm == [pytest.approx(100), pytest.approx(840)]
    assert result.order() == [1, 0]
    # Like Insights, it lists findings and kinds: every rank's, the straggler's first.
    assert result.findings == (*result.rank(1).findings, *result.rank(0).findings)
    assert result.kinds() == [*result.rank(1).kinds(), *result.rank(0).kinds()]

    assert analysis_main(["advise", str(cpu_run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 ranks (cpu), each read on its own: rank 1 is the straggler")
    sections = re.findall(r"^== (rank \d)\b.*==$", out, re.M)
    assert sections == ["rank 1", "rank 0"]  # the straggler's findings first
    assert out.count("over 2 step(s)") == 2 and "over 4 step(s)" not in out
    assert "aten::mm" in out.split("== rank 1")[1].split("== rank 0")[0]

    assert analysis_main(["advise", str(cpu_run), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "neuronprof.rank_insights/1" and data["straggler"] == 1
    assert [(r["rank"], r["insights"]["steps"]) for r in data["ranks"]] == [(0, 2), (1, 2)]
    assert RankInsights.from_json(json.dumps(data)) == result

    assert analysis_main(["advise", str(cpu_run), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "### Rank 1 (the straggler): compute 870.0 µs/step" in md and "### Rank 0: compute" in md


def test_one_rank_is_plain_insights_and_a_timeline_of_ranks_is_never_read_as_one(cpu_run: Path) -> None:
    assert isinstance(advise(cpu_run / "rank-0.json"), Insights)
    timeline = timeline_from_trace(cpu_run)
    assert [t.rank for t in timeline.ranks] == [0, 1]
    with pytest.raises(ValueError, match="2 ranks.*analyze_ranks"):
        analyze(timeline)
    assert analyze_ranks(timeline) == advise(cpu_run)


def test_a_rank_without_a_trace_is_said_and_has_no_steps(tmp_path: Path) -> None:
    run = tmp_path / "gap"
    write_trace(run / "rank-0.json", _cpu_rank(0))
    write_trace(run / "rank-2.json", _cpu_rank(1))
    result = advise(run)
    assert isinstance(result, RankInsights)
    assert [r.steps for r in result.ranks] == [2, 0, 2]
    assert result.compute_per_step_us[1] is None and result.straggler == 2
    assert "rank 1 has no trace" in result.rank(1).notes
    assert "== rank 1: no steps recorded ==" in str(result)


# -- 3. report draws each rank on its own lanes ----------------------------------------------


def _embedded(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="neuronprof-data">(.*?)</script>', page, re.S)
    assert m
    data: dict[str, Any] = json.loads(m.group(1))
    return data


def test_report_on_a_rank_folder_draws_each_rank_on_its_own_lanes(cpu_run: Path, tmp_path: Path) -> None:
    target = tmp_path / "ranks.html"
    assert analysis_main(["report", str(cpu_run), "-o", str(target)]) == 0
    page = target.read_text(encoding="utf-8")
    tl = _embedded(page)["timeline"]
    assert tl["ranks"] == [0, 1]
    lanes = [(lane["rank"], lane["name"]) for lane in tl["lanes"]]
    assert all(name.startswith(f"rank {rank} · ") for rank, name in lanes)
    assert [name for _, name in lanes if name.endswith("· steps")] == ["rank 0 · steps", "rank 1 · steps"]
    # Each rank's events are on its own lanes: rank 0's mm lasts 100 µs, rank 1's 840 µs.
    mm = tl["names"].index("aten::mm")
    on = {(tl["lanes"][ev[0]]["rank"], ev[2]) for ev in tl["events"] if ev[3] == mm}
    assert on == {(0, 100.0), (1, 840.0)}
    steps = [ev for ev in tl["events"] if ev[4] == 1]
    assert len(steps) == 4 and len({ev[0] for ev in steps}) == 2  # two steps on each rank's steps lane
    assert [s[0] for s in tl["steps"]] == [
        "rank 0 · ProfilerStep#1",
        "rank 0 · ProfilerStep#2",
        "rank 1 · ProfilerStep#1",
        "rank 1 · ProfilerStep#2",
    ]
    # The findings name their rank and the straggler; the settings count steps per rank.
    assert "rank 1 is the straggler" in page
    assert "rank 1: aten::mm" in page
    assert "rank 0: 2, rank 1: 2" in page
    # The trace's lanes for one rank are as they always were.
    one = tmp_path / "one.html"
    assert analysis_main(["report", str(cpu_run / "rank-1.json"), "-o", str(one)]) == 0
    names = [lane["name"] for lane in _embedded(one.read_text(encoding="utf-8"))["timeline"]["lanes"]]
    assert names[0] == "steps" and not any(n.startswith("rank") for n in names)


def test_report_lanes_of_a_device_rank_folder_are_per_rank(tmp_path: Path) -> None:
    run = _folder(tmp_path, _gpu_rank)
    timeline = timeline_from_trace(run)
    assert load_trace(run).ranks and len(timeline.ranks) == 2
    from neuronprof.report import render_report

    data = _embedded(render_report(Table(()), insights=analyze_ranks(timeline), timeline=timeline))
    device = [lane["name"] for lane in data["timeline"]["lanes"] if lane["kind"] == "device"]
    # On each rank the NCCL kernel starts after the GEMM: one device lane per rank.
    assert device == ["rank 0 · CUDA · lane 0", "rank 1 · CUDA · lane 0"]


# -- 4. one rule: the table, the live aggregation and advise measure the same time ------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(1, 40)), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 250), st.integers(1, 80), st.sampled_from([2, 3])), max_size=8),
)
def test_time_in_collectives_is_each_instant_once_inside_the_steps(
    tmp_path: Path, gaps_and_lengths: list[tuple[int, int]], spans: list[tuple[int, int, int]]
) -> None:
    steps, t = [], 0
    for gap, length in gaps_and_lengths:
        steps.append((t + gap, t + gap + length))
        t += gap + length
    events = []
    for i, (s, e) in enumerate(steps):
        events += [
            op(f"ProfilerStep#{i + 1}", s, e - s, cat="user_annotation", pid=7, tid=1),
            op("aten::add", s, 1, pid=7, tid=1),
        ]
    for start, dur, tid in spans:
        # Async spans on the process group's thread; the ops that wait, on another.
        name, cat = ("gloo:all_reduce", "user_annotation") if tid == 2 else ("c10d::allreduce_", "cpu_op")
        events.append(op(name, start, dur, cat=cat, pid=7, tid=tid))
    # Counted by hand, one microsecond at a time.
    covered = [sum(any(lo <= u < lo + d for lo, d, _ in spans) for u in range(s, e)) for s, e in steps]
    path = write_trace(tmp_path / "one-rank.json", events)  # each example rewrites it

    table = summarize(path)
    assert table.steps == len(steps)
    assert table.collective_wait_us == pytest.approx(sum(covered))
    assert table.compute_us == pytest.approx(sum(e - s for s, e in steps) - sum(covered))
    live = EventAggregator()
    for ev in events:
        live.add(ev["name"], ev["cat"], int(ev["ts"] * 1000), int(ev["dur"] * 1000), (ev["pid"], ev["tid"]))
    assert live.trace().table().collective_wait_us == pytest.approx(sum(covered))
    found = analyze_ranks(timeline_from_trace(path))
    assert found.collective_wait_per_step_us == (pytest.approx(sum(covered) / len(steps)),)
