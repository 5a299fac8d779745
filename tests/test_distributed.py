"""Two ranks on the CPU with gloo over loopback: per-rank traces and the cross-rank table."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, port: int, out: str) -> None:
    import neuronprof

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        torch.set_num_threads(1)
        x = torch.randn(64, 64)
        # Rank 1 is the straggler: its matmul is 4x larger and it makes 20 of them (tens of
        # ms) before the step's all-reduce, which rank 0 reaches first and waits in.
        big = torch.randn(256, 256) if rank == 1 else torch.randn(64, 64)
        with neuronprof.session(backend="cpu", output_dir=out) as s:
            for _ in s.steps():
                torch.relu(x)
                for _ in range(20 if rank == 1 else 1):
                    big @ big
                dist.all_reduce(torch.ones(4))
        local = s.table(row_limit=None)
        summary = s.table(ranks="all")
        path = s.export()
        s.export(Path(out, "ranks", f"rank-{rank}.json"))
        gloo = summary.row("gloo:all_reduce")
        result = {
            "rank_attr": s.rank,
            "local_rank": local.rank,
            "trace": str(path),
            "world": summary.world_size,
            "mm_slowest": summary.row("aten::mm").slowest_rank,
            "mm_calls": list(summary.row("aten::mm").calls),
            "straggler": summary.straggler,
            "gloo_slowest": gloo.slowest_rank,
            "text": str(summary),
        }
        Path(out, f"result{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_write_own_traces_and_gather_statistics(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    mp.start_processes(_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=True, start_method="spawn")
    results = [json.loads((out / f"result{r}.json").read_text()) for r in range(WORLD)]
    traces = set()
    for rank, res in enumerate(results):
        assert res["rank_attr"] == res["local_rank"] == rank
        assert res["world"] == WORLD
        assert res["mm_calls"] == [1, 20]
        assert res["mm_slowest"] == 1, res["text"]
        # The straggler is the rank the others wait for, not the one with the longest collective;
        # the collective's row names it too.
        assert res["straggler"] == res["gloo_slowest"] == 1, res["text"]
        assert "straggler: rank 1, the rank the others wait for" in res["text"]
        name = Path(res["trace"]).name
        assert f"_rank{rank}" in name and f"_pid{os.getpid()}" not in name
        trace = json.loads(Path(res["trace"]).read_text())
        assert trace["distributedInfo"]["rank"] == rank
        assert trace["distributedInfo"]["world_size"] == WORLD
        assert trace["distributedInfo"]["backend"] == "gloo"
        traces.add(name)
    assert len(traces) == WORLD
    assert "Slowest rank" in results[0]["text"]

    # Offline, the folder of both ranks' exports: each rank read on its own, the same straggler.
    from neuronprof.analysis import summarize_ranks
    from neuronprof.analysis.insights import RankInsights, advise, timeline_from_trace
    from neuronprof.model import Table
    from neuronprof.report import render_report

    folder = out / "ranks"
    found = advise(folder)
    assert isinstance(found, RankInsights)
    assert [r.steps for r in found.ranks] == [1, 1]
    assert found.straggler == summarize_ranks(folder).straggler == 1
    page = render_report(Table(()), insights=found, timeline=timeline_from_trace(folder))
    lanes = json.loads(page.split('id="neuronprof-data">', 1)[1].split("</script>", 1)[0])["timeline"]["lanes"]
    assert {lane["rank"] for lane in lanes} == {0, 1}
    assert [lane["name"] for lane in lanes if lane["kind"] == "step"] == ["rank 0 · steps", "rank 1 · steps"]


def test_ranks_all_without_process_group_is_refused(tmp_path):
    import neuronprof

    with neuronprof.session(backend="cpu", output_dir=tmp_path) as s:
        s.run(torch.relu, torch.randn(4))
    with pytest.raises(neuronprof.SessionStateError, match="init_process_group"):
        s.table(ranks="all")


def _one_rank_asks(rank: int, port: int, out: str) -> None:
    import time

    import neuronprof

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=out) as s:
            for _ in s.steps():
                torch.relu(torch.randn(8))
        if rank == 0:
            try:
                s.table(ranks="all", timeout=2)
                message = "no error"
            except neuronprof.SessionStateError as exc:
                message = str(exc)
            Path(out, "rank0.json").write_text(json.dumps({"message": message}))
        else:
            # Rank 1 goes on with its work and never makes the collective call.
            deadline = time.monotonic() + 60
            while not Path(out, "rank0.json").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_ranks_all_on_one_rank_fails_fast_and_says_it_is_collective(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    mp.start_processes(_one_rank_asks, args=(_free_port(), str(out)), nprocs=WORLD, join=True, start_method="spawn")
    result = json.loads((out / "rank0.json").read_text())
    # (Without the deadline, rank 0 would block for the process group's timeout, 30 min on gloo.)
    assert "must be called on every rank" in result["message"]
