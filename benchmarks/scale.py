"""Every offline command on 10 MB, 100 MB and 600 MB traces: time, peak memory and growth, against the parse limit.

For each size it writes (or, with ``--traces DIR``, reuses) a synthetic kineto CUDA
trace, benchmarks/summarize.py's ``write_trace``: ProfilerStep spans, nested aten ops
with recorded shapes, runtime launches, kernels with their correlation ids, flow
events, ``--threads`` host threads each launching on its own stream; and a rank
folder of the same total size (``--ranks`` files naming their rank in kineto's
``distributedInfo``). Then it runs, each in its own process so that the peak RSS
(``ru_maxrss`` from ``wait4``) is that run's own, in ``--rounds`` interleaved rounds
(A, B, C..., then again), and takes each contender's least CPU and wall time over the
rounds (with the median CPU time printed beside it) and its median peak RSS. The least:
other processes on a shared machine add far more time to a run than anything takes away,
so the least time is the run they disturbed least (the reason Python's ``timeit`` reports
the least of its repeats; the least of a few rounds leans low); peak memory does not move
with the load.

* the references: ``json.load`` + per-name sums; msgspec's typed decode of only
  ``name``, ``ph`` and ``dur`` + per-name sums (the parse limit); Holistic Trace
  Analysis' ``TraceAnalysis`` + kernel breakdown when ``hta`` is installed;
* every offline command on the trace: ``summarize``, ``advise``, ``report``, ``diff``
  and ``check`` (against a hard link of the trace, so that two files are read),
  ``roofline``, and ``neuron``, which reads Neuron's own profile: twice, once with the
  trace as the framework trace beside a small ``system_profile.json`` (its ProfilerStep
  spans give the per-step busy time), once given the trace itself, which it refuses
  as not Neuron's (exit status 2: what that costs is measured);
* ``summarize``, ``advise``, ``report`` and ``roofline`` on the rank folder.

A tiny trace (about 50 kB) is run the same way first, beside ``python -c pass``,
``python -c "import neuronprof"`` (the interpreter baseline that memory is counted
above), and ``neuronprof COMMAND --help`` and ``neuronprof COMMAND --no-such-option``
for every command: these give the start-up times. In each size's rounds every
contender runs on the tiny trace too, just before its own run: that is its fixed
cost, taken off before the growth is fitted (a rank folder's run on the tiny folder
starts the worker processes its large runs start: ``--jobs``; where each file of the
size is read into columns with numpy, 16 MiB and up, a neuronprof command's run imports
numpy first, as its runs on those files do, which the tiny trace's read would not, and
the way the command line imports it: with OpenBLAS's idle threads told to sleep).

It prints each size's figures (wall time, CPU time = user + system of the child, its
median and spread over the rounds, the fixed cost, peak RSS), then the ratios with
their targets, PASS or MISS:

* ``summarize`` CPU time over the typed decode's: at most 2x;
* ``summarize`` peak RSS above the interpreter baseline over the file size: at most 0.5x;
* every other command over ``summarize`` on the same input, CPU time and memory above
  the baseline: at most 1.5x (``diff`` and ``check`` read two files: their CPU time is
  counted per file read);
* the growth exponent of each command: the least-squares slope of log(CPU time less
  its fixed cost) against log(file size), over the sizes judged (below): 1.0 +- 0.1;
  the slope over every size run is printed beside, not judged;
* start-up: under 150 ms of CPU time (``python -c pass`` printed as the reference) for
  ``neuronprof COMMAND --help``, for an argument error, and, for each command that
  reads an input, from the process's start to its first read of that input: the
  first ``open`` of an input file or listing of an input folder, taken by an audit
  hook (PEP 578) in the child on the tiny trace. The whole run on the tiny trace is
  printed beside it, not judged: it adds the reading, the analysis and the output.
  ``doctor`` and ``demo`` read no input (``demo`` runs a training loop): their
  start-up is their ``--help`` and an argument error.

Ratios and growth are judged from ``--judge-from`` MB up (default 100: below, the
interpreter's start-up dominates the figures, and files under 16 MiB are read event by
event, by another reader than the larger files'); smaller sizes print theirs unjudged. CPU time is the
judged figure because on a shared machine wall time also counts the wait for a core.
Peak RSS is each child's own high-water mark (VmHWM, written by the child at exit),
or its largest worker's; a run that starts worker processes has its CPU time summed
over them (they are waited for), but its peak RSS is that of its largest process,
not their sum.

Exit status: 0 when every run succeeded; 1 when one failed, or, with ``--check``,
when a judged ratio misses its target.

Usage::

    python benchmarks/scale.py [--sizes 10,100,600] [--rounds 3] [--traces DIR] [--only summarize,advise]
    python benchmarks/scale.py --sizes 100,600 --readme  # rewrite README.md's performance tables

Over 500 lines on purpose: a benchmark is one script to copy and run, and its parts
(traces, runs, ratios, tables) all read the one list of contenders.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Union

from neuron_profile import write_profile
from summarize import _BASELINE, _HTA, write_trace

ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000
MIB = 2**20
TINY_MB = 0.05
"""The start-up trace: 50 kB, read in a few milliseconds."""
OPS_PER_STEP = 250
MIN_STEPS = 4
"""Steps every file holds at least (``diff`` and ``check`` take each step as a sample)."""
GENERATOR = 2
"""Bumped when the traces written change, so that kept ones are written again."""
FIXED = "fixed "
"""The key prefix of a contender's runs on the tiny trace beside each size's."""
README_START = "<!-- scale-benchmark:start -->"
README_END = "<!-- scale-benchmark:end -->"

TYPED_LIMIT, RSS_LIMIT, COMMAND_LIMIT, STARTUP_LIMIT_MS = 2.0, 0.5, 1.5, 150.0
GROWTH_TOLERANCE = 0.1

_TYPED = textwrap.dedent(
    """
    import sys
    from collections import defaultdict

    import msgspec

    class Event(msgspec.Struct):
        name: str = ""
        ph: str = ""
        dur: float = 0.0

    class Trace(msgspec.Struct):
        traceEvents: list[Event]

    with open(sys.argv[1], "rb") as f:
        trace = msgspec.json.decode(f.read(), type=Trace)
    sums = defaultdict(float)
    for e in trace.traceEvents:
        if e.ph == "X":
            sums[e.name] += e.dur
    print(len(sums), "names")
    """
)

# As the `neuronprof` console script runs it.
_CLI = "import sys\nfrom neuronprof.cli import main\nsys.exit(main())"

REFERENCES = ("json.load", "typed", "hta")
OFFLINE = ("summarize", "advise", "report", "diff", "check", "roofline", "neuron")
REFUSED = "neuron, refusing the trace"
"""``neuron`` given the kineto trace itself (selected by ``--only neuron``)."""
FOLDER_COMMANDS = ("summarize", "advise", "report", "roofline")
"""Commands run on the rank folder too (``diff``/``check`` take a folder as runs, ``neuron`` as Neuron's files)."""


@dataclass(frozen=True)
class Inputs:
    """The files of one size: the trace, its hard-linked sibling, the Neuron folder, the rank folder."""

    label: str
    mb: float
    trace: Path
    sibling: Path
    neuron: Path
    events: int
    ranks: Optional[Path]
    rank_events: int

    @property
    def size(self) -> int:
        return self.trace.stat().st_size

    @property
    def rank_size(self) -> int:
        return sum(p.stat().st_size for p in self.ranks.glob("*.json")) if self.ranks else 0


@dataclass(frozen=True)
class Contender:
    """One thing to run: ``key`` names its row (``advise``, ``ranks advise``, ``typed``...)."""

    key: str
    label: str
    argv: tuple[str, ...]
    reads: int = 1
    """Trace files it reads: CPU time is compared per file read."""
    status: int = 0
    """The exit status it ends with when it works as it should."""


@dataclass(frozen=True)
class Figures:
    """Least wall time (s) and CPU time (s, user + system), and median peak RSS (bytes), of a contender's runs."""

    wall: float
    cpu: float
    rss: int
    spread: float = 0.0
    """(largest - smallest CPU time) / median over the rounds: how much the load moved the figure."""
    first_read: Optional[float] = None
    """CPU time (s) from the process's start to its first read of an input (start-up runs only)."""
    cpu_median: Optional[float] = None
    """Median CPU time (s) over the rounds, printed beside the least."""


Result = Union[Figures, str]
"""The figures, or why the run failed."""


# -- traces --------------------------------------------------------------------------------------


def _plan(target_bytes: float, threads: int) -> tuple[int, int]:
    """(``n_events`` for write_trace, ops per step): the whole steps nearest ``target_bytes``, MIN_STEPS at least."""
    ops = OPS_PER_STEP
    for _ in range(2):  # the bytes per event depend a little on the ops per step: measure, choose, measure again
        with tempfile.TemporaryDirectory(prefix="neuronprof-scale-") as tmp:
            probe = Path(tmp) / "probe.json"
            n = write_trace(probe, 2 * (6 * ops + 1), threads=threads, ops_per_step=ops)
            per_event = probe.stat().st_size / n
        events = target_bytes / per_event
        ops = max(1, min(OPS_PER_STEP, int(events // (6 * MIN_STEPS))))
    step = 6 * ops + 1  # events per step (write_trace's docstring)
    steps = max(MIN_STEPS, round(events / step))
    # write_trace writes 4 metadata events, then whole steps while it has written fewer than n_events.
    return 4 + (steps - 1) * step + 1, ops


def _write(path: Path, target_bytes: float, threads: int, **kwargs: int) -> int:
    events, ops = _plan(target_bytes, threads)
    partial = path.with_name(path.name + ".partial")
    written = write_trace(partial, events, threads=threads, ops_per_step=ops, **kwargs)
    os.replace(partial, path)  # a trace cut short by an interruption is never reused
    return written


def _kept(params_file: Path, params: dict[str, float], *files: Path) -> Optional[int]:
    """The events of traces written earlier with the same parameters, else None."""
    try:
        saved = json.loads(params_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if saved.get("params") != params or not all(f.is_file() for f in files):
        return None
    return int(saved["events"])


def _link(src: Path, dst: Path) -> None:
    """``dst`` is ``src`` under another name: a hard link (no disk space), else a symbolic one."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists() and os.path.samefile(src, dst):
        return
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        dst.symlink_to(src.resolve())


def _label(mb: float) -> str:
    return "tiny" if mb == TINY_MB else f"{mb:g} MB"


def _home(root: Path, mb: float) -> Path:
    return root / ("tiny" if mb == TINY_MB else f"{mb:g}MB")


def _params(mb: float, threads: int, ranks: int = 0) -> dict[str, float]:
    return {"generator": GENERATOR, "mb": mb, "threads": threads, **({"ranks": ranks} if ranks else {})}


def _rank_files(home: Path, ranks: int) -> list[Path]:
    return [home / "ranks" / f"rank{r}.pt.trace.json" for r in range(ranks)]


def bytes_to_write(root: Path, sizes: Sequence[float], threads: int, ranks: int) -> int:
    """Bytes the traces not already kept under ``root`` will take."""
    need = 0.0
    for mb in sizes:
        home = _home(root, mb)
        if _kept(home / "trace.params.json", _params(mb, threads), home / "trace" / "trace.pt.trace.json") is None:
            need += mb * MB
        if ranks and _kept(home / "ranks.params.json", _params(mb, threads, ranks), *_rank_files(home, ranks)) is None:
            need += mb * MB
    return int(need)


def prepare(root: Path, mb: float, threads: int, ranks: int) -> Inputs:
    """Write the traces of one size under ``root`` (or reuse those kept there)."""
    home = _home(root, mb)
    trace = home / "trace" / "trace.pt.trace.json"
    params = _params(mb, threads)
    events = _kept(home / "trace.params.json", params, trace)
    if events is None:
        print(f"writing the {_label(mb)} trace to {trace}", file=sys.stderr, flush=True)
        # The links to the old trace go with it, or its disk space would stay taken.
        for old in (trace.parent, home / "sibling", home / "neuron"):
            shutil.rmtree(old, ignore_errors=True)
        trace.parent.mkdir(parents=True)
        events = _write(trace, mb * MB, threads)
        (home / "trace.params.json").write_text(json.dumps({"params": params, "events": events}), encoding="utf-8")
    sibling = home / "sibling" / trace.name
    _link(trace, sibling)
    neuron = home / "neuron"
    _link(trace, neuron / "trace.json")  # the framework trace, as TorchNeuron's export_trace names it
    if not (neuron / "system_profile.json").is_file():
        write_profile(neuron / "system_profile.json", 60)
    folder, rank_events = None, 0
    if ranks:
        folder = home / "ranks"
        files = _rank_files(home, ranks)
        rparams = _params(mb, threads, ranks)
        kept = _kept(home / "ranks.params.json", rparams, *files)
        if kept is None:
            print(f"writing the {_label(mb)} rank folder to {folder}", file=sys.stderr, flush=True)
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            kept = sum(
                _write(f, mb * MB / ranks, threads, seed=r, rank=r, world_size=ranks) for r, f in enumerate(files)
            )
            (home / "ranks.params.json").write_text(json.dumps({"params": rparams, "events": kept}), encoding="utf-8")
        rank_events = kept
    return Inputs(_label(mb), mb, trace, sibling, neuron, events, folder, rank_events)


# -- runs ----------------------------------------------------------------------------------------


def contenders(inputs: Inputs, out: Path, only: frozenset[str], hta: bool) -> list[Contender]:
    """Everything run on one size, in the order of a round."""
    t, s = str(inputs.trace), str(inputs.sibling)
    cli = ("-c", _CLI)
    single = {
        "json.load": Contender("json.load", "json.load + per-name sums", ("-c", _BASELINE, t)),
        "typed": Contender("typed", "msgspec typed decode + per-name sums", ("-c", _TYPED, t)),
        "hta": Contender("hta", "HTA TraceAnalysis + kernel breakdown", ("-c", _HTA, str(inputs.trace.parent))),
        "summarize": Contender("summarize", "neuronprof summarize", (*cli, "summarize", t)),
        "advise": Contender("advise", "neuronprof advise", (*cli, "advise", t)),
        "report": Contender(
            "report", "neuronprof report", (*cli, "report", t, "-o", str(out / "trace.html"), "--overwrite")
        ),
        "diff": Contender("diff", "neuronprof diff (against a sibling)", (*cli, "diff", t, s), reads=2),
        "check": Contender("check", "neuronprof check (against a sibling)", (*cli, "check", t, s), reads=2),
        "roofline": Contender("roofline", "neuronprof roofline", (*cli, "roofline", t)),
        "neuron": Contender(
            "neuron", "neuronprof neuron (as framework trace)", (*cli, "neuron", str(inputs.neuron), "--tool", "never")
        ),
        # Given the kineto trace itself, `neuron` says it is not Neuron's profile (exit status 2).
        REFUSED: Contender(
            REFUSED, "neuronprof neuron (the trace: refused)", (*cli, "neuron", t, "--tool", "never"), status=2
        ),
    }
    runs = [c for key, c in single.items() if key.split(",")[0] in only and (key != "hta" or hta)]
    if inputs.ranks is not None:
        folder = str(inputs.ranks)
        for name in FOLDER_COMMANDS:
            if name in only:
                extra = ("-o", str(out / "ranks.html"), "--overwrite") if name == "report" else ()
                runs.append(Contender(f"ranks {name}", f"rank folder: neuronprof {name}", (*cli, name, folder, *extra)))
    return runs


NUMPY_FIRST = "from neuronprof.cli import spare_blas_threads\nspare_blas_threads()\nimport numpy\n"
"""How a fixed-cost run imports numpy first: as the command line's own import of it does, once
OpenBLAS's idle threads are told to sleep (imported plainly, they spin 0.05-0.1 s of CPU that
the command's runs do not: up to a quarter of a 100 MB ``summarize``'s growth, which pushed
the fitted exponent up by up to about 0.15)."""


def _fixed_cost(tiny: Contender, ranks: int, inputs: Inputs) -> Contender:
    """A contender's run on the tiny trace, as the fixed cost of its growth fit.

    A rank folder's run starts the worker processes its large runs start (one per core, one
    per file at most): the tiny folder, under ``SMALL_FOLDER``, would be read in the process
    without ``--jobs``, and the workers' start-up would then count as growth. Where the
    files of ``inputs`` are read into columns with numpy (``COLUMNS_FILE`` and up, each), a
    neuronprof command's run imports numpy first (``NUMPY_FIRST``), as its runs on them do.
    """
    from neuronprof.analysis.trace._reader_columns import COLUMNS_FILE

    argv = tiny.argv
    each = inputs.rank_size / max(ranks, 1) if tiny.key.startswith("ranks ") else inputs.size
    if _growth_judged(tiny.key) and each >= COLUMNS_FILE:
        # Imported once by the reading process (before a folder's workers fork), whatever the size from there on;
        # the tiny trace is read without it, which would count the import as growth.
        argv = ("-c", NUMPY_FIRST + argv[1], *argv[2:])
    if tiny.key.startswith("ranks "):
        from neuronprof._executors import cores

        argv = (*argv, "--jobs", str(max(1, min(cores(), ranks))))
    return replace(tiny, key=FIXED + tiny.key, label=f"{tiny.label} (tiny trace)", argv=argv)


BAD_OPTION = "--no-such-option"
"""The argument error of the start-up runs (argparse refuses it: exit status 2)."""


def startup_contenders(commands: Sequence[str]) -> list[Contender]:
    """The interpreter's own start-up, the baseline of memory, every command's ``--help`` and an argument error."""
    return [
        Contender("python", "python -c pass", ("-c", "pass")),
        Contender("baseline", "python -c 'import neuronprof'", ("-c", "import neuronprof")),
        *(Contender(f"{name} --help", f"neuronprof {name} --help", ("-c", _CLI, name, "--help")) for name in commands),
        *(
            Contender(
                f"{name} {BAD_OPTION}", f"neuronprof {name} {BAD_OPTION}", ("-c", _CLI, name, BAD_OPTION), status=2
            )
            for name in commands
        ),
    ]


_RSS_UNIT = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux

# Each child writes its own peak RSS at exit. wait4's ru_maxrss is not enough: Linux carries the
# resident size of the process that forked the child over its exec, so every child would read at
# least this benchmark's own size. VmHWM is the exec'd program's own peak; RUSAGE_CHILDREN covers
# the worker processes it waited for. Registered first, so it runs after every other exit handler.
_PEAK_FILE = "NEURONPROF_SCALE_PEAK_FILE"
_INPUTS = "NEURONPROF_SCALE_INPUTS"
"""Where the inputs of the start-up runs lie: the child takes the CPU time of its first read there."""
# The first read of an input: the first open of a file, or listing of a folder, under _INPUTS.
# Its CPU time (process_time: this process's, from its start) is written with the peak RSS.
_PROBE = textwrap.dedent(
    f"""
    import atexit as _atexit, os as _os, sys as _sys, time as _time

    _first_read = []
    _inputs = tuple(p for p in _os.environ.pop("{_INPUTS}", "").split(_os.pathsep) if p)
    if _inputs:
        _under = tuple(p + _os.sep for p in _inputs)

        def _read_hook(event, args):
            # Called for every audited event (each module file an import opens, too): kept cheap.
            if _first_read or event not in ("open", "os.listdir", "os.scandir", "glob.glob") or not args:
                return
            if isinstance(args[0], (str, bytes, _os.PathLike)):
                path = _os.fsdecode(args[0])
                path = path if _os.path.isabs(path) else _os.path.abspath(path)
                if path in _inputs or path.startswith(_under):
                    _first_read.append(_time.process_time())

        _sys.addaudithook(_read_hook)

    def _peak(pid=_os.getpid(), path=_os.environ.pop("{_PEAK_FILE}")):
        if _os.getpid() != pid:  # a forked worker ending normally
            return
        import resource
        try:
            with open("/proc/self/status") as f:
                own = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) * 1024
        except (OSError, StopIteration):
            return  # no /proc: the parent falls back on wait4's figure
        workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * {_RSS_UNIT}
        with open(path, "w") as f:
            f.write(" ".join(map(str, (max(own, workers), *_first_read[:1]))))

    _atexit.register(_peak)
    """
)


def run_once(argv: Sequence[str], env: dict[str, str], status: int = 0) -> tuple[Optional[Figures], str]:
    """Run ``python -c CODE *args`` in its own process; its figures, or None and why it did not end with ``status``."""
    assert argv[0] == "-c", argv
    with tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory(prefix="neuronprof-scale-") as tmp:
        peak_file = Path(tmp) / "peak"
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", _PROBE + argv[1], *argv[2:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**env, _PEAK_FILE: str(peak_file)},
        )
        # wait4: this child's CPU time, with that of the workers it waited for.
        _, wait_status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
        if proc.returncode != status:
            err.seek(0)
            tail = err.read()[-1500:].decode("utf-8", "replace")
            return None, f"exit status {proc.returncode}\n{textwrap.indent(tail.rstrip(), '    ')}"
        first_read: Optional[float] = None
        try:
            written = peak_file.read_text().split()
            rss = int(written[0])
            first_read = float(written[1]) if len(written) > 1 else None
        except (OSError, ValueError, IndexError):
            rss = usage.ru_maxrss * _RSS_UNIT
    return Figures(wall, usage.ru_utime + usage.ru_stime, rss, first_read=first_read), ""


def measure(runs: Sequence[Contender], rounds: int, env: dict[str, str], what: str) -> dict[str, Result]:
    """Run every contender once per round, in order, for ``rounds`` rounds: the least times, the median peak RSS."""
    samples: dict[str, list[Figures]] = {c.key: [] for c in runs}
    failed: dict[str, str] = {}
    for r in range(rounds):
        for c in runs:
            if c.key in failed:
                continue
            print(f"  {what}, round {r + 1}/{rounds}: {c.label}", file=sys.stderr, flush=True)
            figures, why = run_once(c.argv, env, c.status)
            if figures is None:
                failed[c.key] = why
            else:
                samples[c.key].append(figures)
    results: dict[str, Result] = dict(failed)
    for key, figs in samples.items():
        if key not in failed:
            cpus = [f.cpu for f in figs]
            median = statistics.median(cpus)
            reads = [f.first_read for f in figs if f.first_read is not None]
            results[key] = Figures(
                min(f.wall for f in figs),
                min(cpus),
                int(statistics.median(f.rss for f in figs)),
                (max(cpus) - min(cpus)) / median if median > 0 else 0.0,
                min(reads) if len(reads) == len(figs) else None,
                cpu_median=median,
            )
    return results


# -- ratios --------------------------------------------------------------------------------------


@dataclass
class Ratio:
    """One ratio across the sizes: ``values`` by size label (None: a run is missing or failed)."""

    name: str
    limit: Optional[float]
    """The target: at most this (None: printed, not judged)."""
    values: dict[str, Optional[float]]
    subject: str = ""
    """What the CPU and memory rows of one command share (the Markdown table gives them one row)."""


def _fig(results: dict[str, Result], key: str) -> Optional[Figures]:
    r = results.get(key)
    return r if isinstance(r, Figures) else None


def _over(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None or b <= 0 else a / b


def ratios(
    sizes: Sequence[Inputs], by_size: dict[str, dict[str, Result]], runs: dict[str, Contender], baseline: int
) -> list[Ratio]:
    """The targets' ratios, size by size; memory is peak RSS above ``baseline`` (bytes)."""
    table: dict[str, Ratio] = {}

    def put(name: str, limit: Optional[float], label: str, value: Optional[float], subject: str = "") -> None:
        table.setdefault(name, Ratio(name, limit, {}, subject)).values[label] = value

    for i in sizes:
        res = by_size[i.label]

        def cpu(key: str, res: dict[str, Result] = res) -> Optional[float]:
            f = _fig(res, key)
            return None if f is None else f.cpu / runs[key].reads

        def mem(key: str, res: dict[str, Result] = res) -> Optional[float]:
            f = _fig(res, key)
            return None if f is None else float(f.rss - baseline)

        def wall(key: str, res: dict[str, Result] = res) -> Optional[float]:
            f = _fig(res, key)
            return None if f is None else f.wall

        put("summarize CPU / typed decode CPU", TYPED_LIMIT, i.label, _over(cpu("summarize"), cpu("typed")))
        put("summarize memory / file size", RSS_LIMIT, i.label, _over(mem("summarize"), i.size))
        for prefix, names in (("", (*OFFLINE[1:], REFUSED)), ("ranks ", FOLDER_COMMANDS[1:])):
            where = "rank folder: " if prefix else ""
            for name in names:
                key, base = prefix + name, prefix + "summarize"
                if key in runs:
                    per = " per file" if runs[key].reads > 1 else ""
                    subject = f"{where}{name} / summarize"
                    put(
                        f"{where}{name} CPU{per} / summarize's",
                        COMMAND_LIMIT,
                        i.label,
                        _over(cpu(key), cpu(base)),
                        subject,
                    )
                    put(
                        f"{where}{name} memory / summarize's",
                        COMMAND_LIMIT,
                        i.label,
                        _over(mem(key), mem(base)),
                        subject,
                    )
        if "ranks summarize" in runs:
            put(
                "rank folder summarize wall / the trace's",
                None,
                i.label,
                _over(wall("ranks summarize"), wall("summarize")),
            )
    return list(table.values())


def growth(sizes: Sequence[Inputs], by_size: dict[str, dict[str, Result]], key: str) -> Optional[float]:
    """Least-squares slope of log(CPU time less the fixed cost) against log(size); None below two points.

    The fixed cost of each size is the same contender's on the tiny trace, run in the same rounds.
    """
    points = []
    for i in sizes:
        f, tiny = _fig(by_size[i.label], key), _fig(by_size[i.label], FIXED + key)
        size = i.rank_size if key.startswith("ranks ") else i.size
        if f is not None and tiny is not None and f.cpu > tiny.cpu:
            points.append((math.log(size), math.log(f.cpu - tiny.cpu)))
    if len({x for x, _ in points}) < 2:
        return None
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


@dataclass
class Growth:
    """Each contender's growth exponent: over the judged sizes, and over every size run."""

    judged: dict[str, Optional[float]]
    """Fitted on the sizes from ``--judge-from`` up, as the ratios are judged."""
    every: Optional[dict[str, Optional[float]]]
    """Fitted on every size run (not judged); None when every size was judged."""


def growths(
    sizes: Sequence[Inputs], by_size: dict[str, dict[str, Result]], keys: Sequence[str], judge_from: float
) -> Growth:
    """The exponents of ``keys``, judged on the sizes from ``judge_from`` MB up, as the ratios are.

    Below that the fixed cost is near half of a run (at 10 MB, 0.09 of 0.22 s for ``summarize``),
    so the time it leaves is small and any error in the fixed cost weighs on it; and files under
    ``COLUMNS_FILE`` (16 MiB) are read event by event, another reader than the larger files'
    column reader (about three times the CPU time per byte, without numpy's import). The fit over
    every size is printed beside, not judged.
    """
    judged = [i for i in sizes if i.mb >= judge_from]
    every = None
    if len(judged) < len(sizes):
        every = {key: growth(sizes, by_size, key) for key in keys}
    return Growth({key: growth(judged, by_size, key) for key in keys}, every)


# -- printing ------------------------------------------------------------------------------------


def _cell(value: Optional[float], limit: Optional[float], judged: bool) -> str:
    if value is None:
        return "n/a"
    if limit is None or not judged:
        return f"{value:.2f}x"
    return f"{value:.2f}x {'PASS' if value <= limit else 'MISS'}"


def _target(limit: Optional[float]) -> str:
    return "-" if limit is None else f"<= {limit:g}x"


def _growth_judged(key: str) -> bool:
    """Whether a contender's growth is judged: not a reference's, nor a refusal's (it reads a few bytes
    whatever the file's size, so its time does not grow, by design)."""
    return key not in REFERENCES and key != REFUSED


def _growth_cell(k: Optional[float], judged: bool) -> str:
    if k is None:
        return "n/a"
    if not judged:
        return f"{k:.2f}"
    return f"{k:.2f} {'PASS' if abs(k - 1.0) <= GROWTH_TOLERANCE else 'MISS'}"


def print_figures(i: Inputs, runs: Sequence[Contender], res: dict[str, Result], baseline: int) -> None:
    folder = ""
    if i.ranks is not None:
        files = len(list(i.ranks.glob("*.json")))
        folder = f"; rank folder: {files} files, {i.rank_size / MB:.1f} MB, {i.rank_events:,} events"
    print(f"\n== {i.label}: the trace {i.size / MB:.1f} MB, {i.events:,} events{folder}")
    heads = ("wall s", "CPU s", "median", "spread", "tiny CPU s", "peak RSS MiB", "above baseline")
    print(
        f"{'':46s} {heads[0]:>8s} {heads[1]:>8s} {heads[2]:>7s} {heads[3]:>7s} {heads[4]:>11s} {heads[5]:>13s} "
        f"{heads[6]:>15s}"
    )
    for c in runs:
        r, tiny = res[c.key], _fig(res, FIXED + c.key)
        if isinstance(r, Figures):
            fixed = "n/a" if tiny is None else f"{tiny.cpu:.2f}"
            print(
                f"{c.label:46s} {r.wall:8.2f} {r.cpu:8.2f} {r.cpu_median or r.cpu:7.2f} {r.spread:6.0%} {fixed:>11s} "
                f"{r.rss / MIB:13.0f} {(r.rss - baseline) / MIB:15.0f}"
            )
        else:
            print(f"{c.label:46s} FAILED, {r}")


def print_ratios(rows: Sequence[Ratio], sizes: Sequence[Inputs], judge_from: float) -> list[str]:
    """Print the ratios; return the names of those that miss their target where judged."""
    print("\n== ratios (CPU time; memory = peak RSS above the interpreter baseline)")
    print(f"{'':54s} {'target':>8s}" + "".join(f"{i.label:>14s}" for i in sizes))
    missed = []
    for row in rows:
        cells = []
        for i in sizes:
            value, judged = row.values.get(i.label), i.mb >= judge_from
            cells.append(_cell(value, row.limit, judged))
            if judged and row.limit is not None and value is not None and value > row.limit:
                missed.append(f"{row.name} at {i.label}")
        print(f"{row.name:54s} {_target(row.limit):>8s}" + "".join(f"{c:>14s}" for c in cells))
    if any(i.mb < judge_from for i in sizes):
        print(f"(sizes under {judge_from:g} MB are not judged: the interpreter's start-up dominates them)")
    return missed


def print_growth(keys: Sequence[tuple[str, str]], exponents: Growth, judge_from: float) -> list[str]:
    print(
        "\n== growth exponent: slope of log(CPU time less the tiny trace's, run beside) against log(file size), "
        f"target 1.0 +- {GROWTH_TOLERANCE:g}"
    )
    every = exponents.every
    if every is not None:
        print(f"{'':54s} {f'from {judge_from:g} MB':>10s} {'all sizes':>10s}")
    missed = []
    for key, label in keys:
        k, judged = exponents.judged[key], _growth_judged(key)
        line = f"{label:54s} {_growth_cell(k, judged):>10s}"
        print(line if every is None else f"{line} {_growth_cell(every[key], False):>10s}")
        if judged and k is not None and abs(k - 1.0) > GROWTH_TOLERANCE:
            missed.append(f"growth of {label}")
    if all(k is None for k in exponents.judged.values()):
        print(f"(n/a: the judged exponent needs two sizes or more from {judge_from:g} MB up)")
    if every is not None:
        from neuronprof.analysis.trace._reader_columns import COLUMNS_FILE

        print(
            f"(all sizes: not judged; under {judge_from:g} MB the fixed cost is near half of a run, and files "
            f"under {COLUMNS_FILE / MIB:g} MiB are read event by event, by another reader than the larger files')"
        )
    return missed


@dataclass(frozen=True)
class Startup:
    """One command's start-up runs (None: not run, or failed)."""

    name: str
    help: Optional[Figures]
    """``neuronprof NAME --help``."""
    bad: Optional[Figures]
    """``neuronprof NAME --no-such-option``: an argument error."""
    tiny: Optional[Figures]
    """The whole run on the tiny trace (None for a command that reads no input)."""

    @property
    def judged(self) -> list[Optional[float]]:
        """The CPU times (ms) held to the target: ``--help``, the argument error, the first read of the input."""
        times = [None if f is None else f.cpu * 1000 for f in (self.help, self.bad)]
        if self.tiny is not None:
            times.append(None if self.tiny.first_read is None else self.tiny.first_read * 1000)
        return times

    @property
    def ok(self) -> bool:
        return all(t is not None and t < STARTUP_LIMIT_MS for t in self.judged)


def startup_rows(commands: Sequence[str], fixed: dict[str, Result], reading: Sequence[str]) -> list[Startup]:
    """Every command's start-up figures; ``reading``: the commands run on the tiny trace."""
    return [
        Startup(
            name,
            _fig(fixed, f"{name} --help"),
            _fig(fixed, f"{name} {BAD_OPTION}"),
            _fig(fixed, name) if name in reading else None,
        )
        for name in commands
    ]


def _ms(f: Optional[Figures], attr: str) -> str:
    value = None if f is None else getattr(f, attr)
    return "n/a" if value is None else f"{value * 1000:.0f}"


def _startup_cells(row: Startup) -> list[str]:
    """``--help``, argument error, to the first read, whole tiny run: CPU ms ("-": reads no input)."""
    tiny = [_ms(row.tiny, "first_read"), _ms(row.tiny, "cpu")] if row.tiny is not None else ["-", "-"]
    return [_ms(row.help, "cpu"), _ms(row.bad, "cpu"), *tiny]


def print_startup(rows: Sequence[Startup], fixed: dict[str, Result]) -> list[str]:
    python = _fig(fixed, "python")
    ref = f"python -c pass: {_ms(python, 'cpu')} ms CPU, {_ms(python, 'wall')} ms wall"
    judged = "--help, an argument error and to the first read"
    print(f"\n== start-up, CPU ms (target < {STARTUP_LIMIT_MS:g} ms for {judged}; {ref})")
    print(f"{'':22s} {'--help':>8s} {'bad option':>11s} {'to first read':>14s} {'whole tiny run':>15s} {'wall ms':>8s}")
    missed = []
    for row in rows:
        if not row.ok:
            missed.append(f"start-up of {row.name}")
        help_cpu, bad_cpu, first, whole = _startup_cells(row)
        wall = _ms(row.tiny, "wall") if row.tiny is not None else "-"
        print(
            f"{row.name:22s} {help_cpu:>8s} {bad_cpu:>11s} {first:>14s} {whole:>15s} {wall:>8s}  "
            f"{'PASS' if row.ok else 'MISS'}"
        )
    print(
        "(to first read: from the process's start to its first open of an input file or listing of an input "
        "folder; whole tiny run: to its exit, not judged; doctor and demo read no input)"
    )
    return missed


def markdown(
    header: str,
    sizes: Sequence[Inputs],
    keys: Sequence[tuple[str, str]],
    by_size: dict[str, dict[str, Result]],
    exponents: Growth,
    rows: Sequence[Ratio],
    startup: Sequence[Startup],
    fixed: dict[str, Result],
    judge_from: float,
) -> str:
    """The README's performance tables."""
    every = exponents.every
    heads = [f"growth exponent (from {judge_from:g} MB)"] + ([] if every is None else ["all sizes (not judged)"])
    out = [header, "", "| CPU time, peak RSS | " + " | ".join([*(i.label for i in sizes), *heads]) + " |"]
    out.append("|---|" + "---|" * (len(sizes) + len(heads)))
    for key, label in keys:
        cells = []
        for i in sizes:
            f = _fig(by_size[i.label], key)
            cells.append("n/a" if f is None else f"{f.cpu:.2f} s, {f.rss / MIB:,.0f} MiB")
        cells.append(_growth_cell(exponents.judged[key], _growth_judged(key)))
        if every is not None:
            cells.append(_growth_cell(every[key], False))
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out += ["", "| ratio | target | " + " | ".join(i.label for i in sizes) + " |", "|---|---|" + "---|" * len(sizes)]
    done: set[str] = set()
    for row in rows:
        pair = [r for r in rows if row.subject and r.subject == row.subject]
        if row.subject in done:
            continue
        if len(pair) == 2:  # one command's CPU and memory: one row, "CPU; memory"
            done.add(row.subject)
            per = " per file" if "per file" in pair[0].name else ""
            name = f"{row.subject}: CPU{per}; memory"
            cells = ["; ".join(_cell(r.values.get(i.label), r.limit, i.mb >= judge_from) for r in pair) for i in sizes]
        else:
            name = row.name
            cells = [_cell(row.values.get(i.label), row.limit, i.mb >= judge_from) for i in sizes]
        out.append(f"| {name} | {_target(row.limit)} | " + " | ".join(cells) + " |")
    python = _fig(fixed, "python")
    out += [
        "",
        f"| start-up, CPU ms (target < {STARTUP_LIMIT_MS:g}) | `--help` | bad option | to first read of the input "
        "| whole tiny run (not judged) |",
        "|---|---|---|---|---|",
        f"| `python -c pass` (reference) | {_ms(python, 'cpu')} | - | - | - |",
    ]
    for command in startup:
        out.append(f"| `neuronprof {command.name}` | " + " | ".join(_startup_cells(command)) + " |")
    return "\n".join(out)


def rewrite_readme(path: Path, block: str) -> None:
    text = path.read_text(encoding="utf-8")
    head, _, rest = text.partition(README_START)
    _, _, tail = rest.partition(README_END)
    path.write_text(f"{head}{README_START}\n{block}\n{README_END}{tail}", encoding="utf-8")


# -- main ----------------------------------------------------------------------------------------


def _sizes(text: str) -> list[float]:
    try:
        sizes = sorted({float(s) for s in text.split(",") if s.strip()})
    except ValueError:
        sizes = [math.nan]
    if not all(map(math.isfinite, sizes)):
        raise argparse.ArgumentTypeError(f"sizes are MB numbers separated by commas, e.g. 10,100,600; not {text!r}")
    if not sizes or sizes[0] <= TINY_MB * 2:
        raise argparse.ArgumentTypeError(f"every size must be over {TINY_MB * 2:g} MB (the start-up trace's twice)")
    return sizes


def _only(text: str) -> frozenset[str]:
    names = frozenset(s.strip() for s in text.split(",") if s.strip())
    unknown = names - set(REFERENCES) - set(OFFLINE)
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {', '.join(sorted(unknown)) or 'empty list'}; choose among {', '.join((*REFERENCES, *OFFLINE))}"
        )
    return names


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--sizes", type=_sizes, default=[10.0, 100.0, 600.0], help="trace sizes in MB (default 10,100,600)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds, least time taken (default 3)")
    parser.add_argument("--threads", type=int, default=2, help="host threads of the traces (default 2)")
    parser.add_argument("--ranks", type=int, default=4, help="files of the rank folder (default 4; 0: no folder)")
    parser.add_argument(
        "--traces",
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="write the traces here, keep them, and reuse those already there (default: a temporary folder)",
    )
    parser.add_argument(
        "--only",
        type=_only,
        default=frozenset((*REFERENCES, *OFFLINE)),
        metavar="NAMES",
        help=f"run only these, comma-separated: {', '.join((*REFERENCES, *OFFLINE))} (default all)",
    )
    parser.add_argument(
        "--judge-from",
        type=float,
        default=100.0,
        metavar="MB",
        help="judge the ratios and the growth from this size up (default 100)",
    )
    parser.add_argument("--markdown", action="store_true", help="also print the README's performance tables")
    parser.add_argument(
        "--readme",
        nargs="?",
        type=Path,
        const=ROOT / "README.md",
        default=None,
        metavar="PATH",
        help="rewrite the tables between the scale-benchmark markers of PATH (default README.md)",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a judged ratio misses its target")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.threads < 1 or args.ranks < 0:
        parser.error("--rounds and --threads must be at least 1, --ranks at least 0")
    if args.readme is not None:
        text = args.readme.read_text(encoding="utf-8") if args.readme.is_file() else ""
        if README_START not in text or README_END not in text.partition(README_START)[2]:
            parser.error(f"{args.readme} has no {README_START} ... {README_END} block to rewrite")

    sys.path.insert(0, str(ROOT / "src"))
    from neuronprof.commands import COMMANDS as cli_commands

    where = args.traces if args.traces is not None else Path(tempfile.gettempdir())
    if args.traces is not None:
        need = bytes_to_write(args.traces, [TINY_MB, *args.sizes], args.threads, args.ranks)
    else:
        need = int(sum(args.sizes) * MB * (2 if args.ranks else 1))
    existing = next(p for p in (where.resolve(), *where.resolve().parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if need > 0.9 * free:
        parser.error(f"the traces need {need / MB:,.0f} MB and {existing} has {free / MB:,.0f} MB free")
    root = args.traces if args.traces is not None else Path(tempfile.mkdtemp(prefix="neuronprof-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    import importlib.util

    hta = importlib.util.find_spec("hta") is not None
    import msgspec

    load = os.getloadavg()[0]
    print(
        f"python {platform.python_version()}, msgspec {msgspec.__version__}, {os.cpu_count()} CPUs, "
        f"load average {load:.1f}; {args.rounds} round(s), least times"
    )
    if "hta" in args.only and not hta:
        print("HTA is not installed (pip install HolisticTraceAnalysis): its row is skipped")
    # Compiled once before anything is timed: in a fresh checkout the first run of each
    # command would otherwise also write the package's bytecode, and read as start-up.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src")], check=True, env=env)
    out = Path(tempfile.mkdtemp(prefix="neuronprof-scale-out-"))
    try:
        tiny = prepare(root, TINY_MB, args.threads, args.ranks)
        tiny_runs = contenders(tiny, out, args.only, hta)
        first = [*startup_contenders(cli_commands), *tiny_runs]
        # Each start-up run takes the CPU time of its first read of an input: all lie under the tiny trace's folder.
        home = _home(root, TINY_MB)
        tiny_home = os.pathsep.join(dict.fromkeys((os.path.abspath(home), os.path.realpath(home))))
        fixed = measure(first, args.rounds, {**env, _INPUTS: tiny_home}, "start-up")
        base = _fig(fixed, "baseline")
        if base is None:
            print(f"python -c 'import neuronprof' failed: {fixed['baseline']}")
            return 1
        failed = [f"{c.label} (tiny trace): {fixed[c.key]}" for c in first if isinstance(fixed[c.key], str)]
        print(
            f"interpreter baseline (import neuronprof): {base.rss / MIB:.0f} MiB peak RSS, {base.cpu * 1000:.0f} ms CPU"
        )
        runs: dict[str, Contender] = {}
        by_size: dict[str, dict[str, Result]] = {}
        sizes: list[Inputs] = []
        for mb in args.sizes:
            inputs = prepare(root, mb, args.threads, args.ranks)
            these = contenders(inputs, out, args.only, hta)
            runs.update((c.key, c) for c in these)
            # Each contender right after its own run on the tiny trace: the fixed cost of the growth fit,
            # measured in the same rounds, so under the same load.
            fixed_cost = {c.key: _fixed_cost(c, args.ranks, inputs) for c in tiny_runs}
            interleaved = [r for c in these for r in (fixed_cost[c.key], c)]
            by_size[inputs.label] = measure(interleaved, args.rounds, env, inputs.label)
            sizes.append(inputs)
            print_figures(inputs, these, by_size[inputs.label], base.rss)
            failed += [
                f"{c.label} ({inputs.label}): {by_size[inputs.label][c.key]}"
                for c in interleaved
                if isinstance(by_size[inputs.label][c.key], str)
            ]
        rows = ratios(sizes, by_size, runs, base.rss)
        missed = print_ratios(rows, sizes, args.judge_from)
        keys = [(key, c.label) for key, c in runs.items()]
        exponents = growths(sizes, by_size, [key for key, _ in keys], args.judge_from)
        missed += print_growth(keys, exponents, args.judge_from)
        startup = startup_rows(cli_commands, fixed, [c.key for c in tiny_runs])
        missed += print_startup(startup, fixed)
        if args.markdown or args.readme is not None:
            header = (
                f"Measured by `python benchmarks/scale.py --sizes {','.join(f'{mb:g}' for mb in args.sizes)}` on "
                f"{datetime.date.today().isoformat()}: {platform.system()} {platform.machine()}, {os.cpu_count()} "
                f"cores, shared (load average {load:.1f} at the start), Python {platform.python_version()}; least "
                f"CPU and wall time and median peak RSS of {args.rounds} round(s), each run in its own process. Memory "
                f"ratios count peak RSS above the interpreter's with neuronprof imported ({base.rss / MIB:.0f} MiB); "
                f"ratios and growth are judged from {args.judge_from:g} MB up."
            )
            block = markdown(header, sizes, keys, by_size, exponents, rows, startup, fixed, args.judge_from)
            if args.markdown:
                print("\n" + block)
            if args.readme is not None:
                rewrite_readme(args.readme, block)
                print(f"\nrewrote the performance tables of {args.readme}")
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
        if failed:
            print("\nfailed runs:\n" + "\n".join(failed))
            return 1
        if missed:
            print(f"\n{len(missed)} target(s) missed: " + "; ".join(missed))
        return 1 if args.check and missed else 0
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if args.traces is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
