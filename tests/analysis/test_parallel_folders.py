"""Folders read side by side (``--jobs N``, ``jobs=``; ``--executor dask://…``) give what one process gives."""

from __future__ import annotations

import concurrent.futures
import gzip
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuronprof.analysis import load_trace, summarize
from neuronprof.analysis.trace import EventKeys, _parallel, find_trace_files, read_events, trace_of
from neuronprof.cli import main
from neuronprof.commands import EXIT_BAD_INPUT, EXIT_PARTIAL

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "traces"
CASES = ROOT / "tests" / "analysis" / "cases"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four ranks' traces, each a real torch.profiler recording (rank-N file names say which rank)."""
    folder = tmp_path_factory.mktemp("ranks")
    recorded = [CORPUS / f"{name}.json.gz" for name in ("resnet_infer", "bert_infer", "gpt2_infer")]
    for r, f in enumerate([*recorded, ROOT / "tests" / "recorded" / "training_step.pt.trace.json.gz"]):
        shutil.copy(f, folder / f"rank-{r}.json.gz")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of runs of other models: each file has keys the others lack, first seen in another order."""
    folder = tmp_path_factory.mktemp("runs")
    for name in ("llama_compile", "planted_item_per_step", "llama_infer"):
        shutil.copy(CORPUS / f"{name}.json.gz", folder / f"{name}.pt.trace.json.gz")
    return folder


@pytest.fixture(scope="module")
def producers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Reduced real traces of other producers (XLA lanes whose events get device rows of their own, Ascend, CUDA)."""
    folder = tmp_path_factory.mktemp("producers")
    for r, name in enumerate(("xla_host_event_named_like_device_op", "xla_gpu_derived_lanes", "torch_npu_string_ts")):
        shutil.copy(CASES / f"{name}.json", folder / f"rank-{r}.json")
    return folder


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The executors the folder reads ran on (``None``: read in this process)."""
    used: list[Any] = []
    read_each = _parallel.read_each

    def spy(files: Any, read: Any, executor: Any = None) -> Any:
        used.append(executor)
        return read_each(files, read, executor)

    monkeypatch.setattr(_parallel, "read_each", spy)
    return used


def _everything(trace: Any) -> list[Any]:
    """What a Trace holds, and every event of it that the findings read (``event_tables`` is left out of ``==``)."""
    tables = [
        (
            t.source,
            t.keys.keys,
            t.keys.names,
            t.keys.kind,
            {w: (list(th.ts), list(th.dur), list(th.kid), list(th.corr), list(th.ext)) for w, th in t.threads.items()},
            (dict(t.procs), dict(t.thread_names), t.runtime_corr, dict(t.metadata), dict(t.flops)),
            (t.events, dict(t.skipped), t.evidence, t.notes, t.file_notes),
        )
        for t in trace.event_tables
    ]
    return [trace, trace.ranks, tables]


@pytest.mark.parametrize("folder_name", ["ranks", "ddp", "runs", "producers"])
def test_jobs_2_reads_a_folder_into_what_one_process_reads(
    folder_name: str, request: pytest.FixtureRequest, pools: list[Any]
) -> None:
    # ddp: two ranks of a DDP run recorded with torch.profiler, with distributedInfo.
    folder = CORPUS / "ddp_straggler" if folder_name == "ddp" else request.getfixturevalue(folder_name)
    serial = load_trace(folder, jobs=1)
    parallel = load_trace(folder, jobs=2)
    assert pools[0] is None
    assert isinstance(pools[1], concurrent.futures.ProcessPoolExecutor)
    assert _everything(parallel) == _everything(serial)
    # Both read each file with keys of its own, then merge: the same as one set of keys shared by the files.
    keys = EventKeys()
    assert _everything(parallel) == _everything(trace_of([read_events(f, keys) for f in find_trace_files(folder)]))
    assert summarize(folder, jobs=2, group_by="shape") == serial.table(group_by="shape")


@pytest.mark.parametrize(
    "command",
    [
        ["summarize", "{ranks}"],
        ["summarize", "{ranks}", "--ranks", "sum", "--format", "json"],
        ["advise", "{ranks}", "--format", "json"],
        ["diff", "{runs}", "{ranks}"],
        ["check", "{runs}", "{ranks}"],
    ],
)
def test_commands_print_the_same_with_jobs_1_and_jobs_2(
    command: list[str], ranks: Path, runs: Path, pools: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [a.format(ranks=ranks, runs=runs) for a in command]
    status = main([*argv, "--jobs", "1"])
    serial = (status, *capsys.readouterr())
    assert pools and not any(pools)
    pools.clear()
    status = main([*argv, "--jobs", "2"])
    assert (status, *capsys.readouterr()) == serial
    assert serial[1] and pools and all(isinstance(p, concurrent.futures.ProcessPoolExecutor) for p in pools)


def test_report_is_the_same_with_jobs_1_and_jobs_2(ranks: Path, tmp_path: Path, pools: list[Any]) -> None:
    pages = []
    for jobs in ("1", "2"):
        target = tmp_path / f"jobs{jobs}.html"
        assert main(["report", str(ranks), "-o", str(target), "--jobs", jobs]) == 0
        pages.append(target.read_text(encoding="utf-8").replace(target.name, "REPORT"))
    assert pages[0] == pages[1]
    assert isinstance(pools[-1], concurrent.futures.ProcessPoolExecutor)


def test_a_corrupt_file_is_named_as_one_process_names_it(
    ranks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ranks"
    shutil.copytree(ranks, folder)
    whole = (folder / "rank-2.json.gz").read_bytes()
    (folder / "rank-2.json.gz").write_bytes(whole[: len(whole) // 2])
    printed = []
    for jobs in ("1", "2"):
        status = main(["summarize", str(folder), "--jobs", jobs])
        printed.append((status, *capsys.readouterr()))
    assert printed[0] == printed[1]
    status, out, err = printed[1]
    assert status == EXIT_PARTIAL
    assert err.startswith(f"neuronprof summarize: left out {folder / 'rank-2.json.gz'}: ") and "truncated" in err
    assert "rank 2 has no trace" in out

    # No file readable: one error naming each file, the same either way.
    for f in folder.iterdir():
        with gzip.open(f, "wt") as g:
            g.write('{"traceEvents": [')
    printed = []
    for jobs in ("1", "2"):
        status = main(["summarize", str(folder), "--jobs", jobs])
        printed.append((status, *capsys.readouterr()))
    assert printed[0] == printed[1]
    status, out, err = printed[1]
    assert status == EXIT_BAD_INPUT and not out
    assert err.startswith("neuronprof summarize: error: none of the 4 trace files can be read: rank-0.json.gz (")


def _load_in_a_pool_worker(folder: str, jobs: Any) -> Any:
    try:
        return load_trace(folder, jobs=jobs).events
    except ValueError as exc:
        return str(exc)


def test_a_pool_worker_reads_a_folder_in_its_own_process(ranks: Path) -> None:
    """A daemon process (a multiprocessing pool's worker, Dask's) cannot start workers of its own."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:
        events, refused = pool.starmap(_load_in_a_pool_worker, [(str(ranks), None), (str(ranks), 2)])
    assert events == load_trace(ranks, jobs=1).events
    assert refused == (
        "jobs=2: this process is a worker of a pool (a daemon process), which cannot start worker processes of its "
        "own; pass jobs=1"
    )


def _killed(path: str) -> None:
    os._exit(9)  # a worker that ends at once, as one killed for memory does


def test_a_worker_that_dies_is_a_clear_error_and_the_next_read_starts_new_workers(
    ranks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _parallel.reading(jobs=2) as readers:
        monkeypatch.setattr(_parallel, "read_file", _killed)
        with pytest.raises(ChildProcessError, match="a worker process reading the traces stopped abruptly"):
            load_trace(ranks)
        monkeypatch.undo()
        assert readers.pool is None
        assert load_trace(ranks) == load_trace(ranks, jobs=1)


@pytest.mark.parametrize(
    ("jobs", "error", "message"),
    [
        (0, ValueError, "jobs must be 1 or more"),
        (-3, ValueError, "jobs must be 1 or more"),
        (1.5, TypeError, "jobs must be a whole number"),
        ("2", TypeError, "jobs must be a whole number"),
        (True, TypeError, "jobs must be a whole number"),
    ],
)
def test_bad_jobs_are_refused_before_any_file_is_read(
    jobs: Any, error: type[Exception], message: str, tmp_path: Path
) -> None:
    with pytest.raises(error, match=message):
        load_trace(tmp_path / "missing", jobs=jobs)


@pytest.mark.parametrize(
    ("executor", "error", "message"),
    [
        ("tcp://127.0.0.1:8786", ValueError, "write it dask://127.0.0.1:8786"),
        ("dask://", ValueError, r"expected dask://HOST:PORT"),
        ("dask://host:port", ValueError, "the port must be a number"),
        ("ray://host:1", ValueError, r"expected dask://HOST:PORT"),
        (object(), TypeError, "executor must be 'dask://HOST:PORT' or a concurrent.futures.Executor"),
    ],
)
def test_bad_executors_are_refused_before_any_file_is_read(
    executor: Any, error: type[Exception], message: str, tmp_path: Path
) -> None:
    with pytest.raises(error, match=message):
        load_trace(tmp_path / "missing", executor=executor)
    with pytest.raises(ValueError, match="pass jobs or executor, not both"):
        load_trace(tmp_path / "missing", jobs=2, executor="dask://127.0.0.1:8786")


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            ["--jobs", "0"],
            "argument --jobs: jobs must be 1 or more (1 reads in this process, one after another), got 0",
        ),
        (["--jobs", "-1"], "argument --jobs: jobs must be 1 or more"),
        (["--jobs", "two"], "argument --jobs: expected a whole number of worker processes, got 'two'"),
        (["--jobs", "1.5"], "argument --jobs: expected a whole number of worker processes, got '1.5'"),
        (["--executor", "tcp://h:1"], "argument --executor: expected dask://HOST:PORT"),
        (["--executor", "dask://h:99999"], "the port must be a number from 1 to 65535"),
        (["--jobs", "2", "--executor", "dask://h:1"], "argument --executor: not allowed with argument --jobs"),
    ],
)
def test_command_line_refuses_bad_jobs_and_executors(
    option: list[str], message: str, ranks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["summarize", str(ranks), *option])
    assert exit.value.code == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert message in err and not out


def test_dask_executor_without_the_extra_says_how_to_install_it(
    ranks: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # what an environment without it raises
    with pytest.raises(ImportError, match=r"pip install 'neuronprof\[dask\]'"):
        load_trace(ranks, executor="dask://127.0.0.1:8786")
    assert main(["advise", str(ranks), "--executor", "dask://127.0.0.1:8786"]) == EXIT_BAD_INPUT
    assert "needs Dask's distributed scheduler, an optional extra: pip install 'neuronprof[dask]'" in (
        capsys.readouterr().err
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow  # importing Dask's distributed, then a second of waiting for the scheduler
def test_dask_scheduler_out_of_reach_is_an_error_before_any_file_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("distributed")
    import dask

    address = f"dask://127.0.0.1:{_free_port()}"
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        # The path does not exist: the scheduler is reached first.
        with pytest.raises(ConnectionError, match=f"cannot reach the Dask scheduler at {address}"):
            load_trace(tmp_path / "missing", executor=address)
        assert main(["summarize", str(tmp_path / "missing"), "--executor", address]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith(f"neuronprof summarize: error: cannot reach the Dask scheduler at {address}: ")


@pytest.fixture(scope="module")
def dask_cluster() -> Iterator[Any]:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cluster:
        yield cluster


@pytest.mark.slow  # a local cluster of two worker processes starts in seconds
def test_dask_cluster_reads_a_folder_into_what_one_process_reads(
    dask_cluster: Any, ranks: Path, runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import distributed

    address = "dask://" + dask_cluster.scheduler_address.removeprefix("tcp://")
    commands = (["summarize", str(ranks)], ["advise", str(ranks), "--format", "json"], ["diff", str(runs), str(ranks)])
    for argv in commands:
        printed = []
        for where in (["--jobs", "1"], ["--executor", address]):
            status = main([*argv, *where])
            printed.append((status, *capsys.readouterr()))
        assert printed[0] == printed[1]
    # An executor of one's own: a client's.
    with distributed.Client(dask_cluster, set_as_default=False) as client:
        on_cluster = load_trace(ranks, executor=client.get_executor())
        assert client.run(lambda: "neuronprof.analysis.trace._parallel" in sys.modules) == dict.fromkeys(
            client.scheduler_info()["workers"], True
        )
    assert _everything(on_cluster) == _everything(load_trace(ranks, jobs=1))
