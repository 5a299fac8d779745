"""Wall time of ``neuronprof summarize`` on a rank folder: ``--jobs 1`` against ``--jobs N`` (one worker per core).

Writes 16 ranks' traces (``rank-0.json`` ... ``rank-15.json``, kineto's layout as
``benchmarks/summarize.py`` writes it, 20 MB each by default) to a temporary
folder, then runs the command line on it, ``--jobs 1`` and ``--jobs N`` in turn
(interleaved rounds, each run its own process), and prints each side's median wall
time, CPU time (the workers' included), the cores each had (CPU over wall time)
and the ratio of wall times. Both sides must print the same table; the benchmark
says so, or fails.

With N idle cores the ratio can approach N; on a machine busy with other work the
"cores had" column shows how much of it the runs got, and the ratio is less.

Usage::

    python benchmarks/folders.py [--ranks 16] [--mb 20] [--jobs N] [--rounds 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from summarize import ROOT, write_trace  # noqa: E402  (the trace writer of the summarize benchmark)

_EVENTS_PER_MB = 3100
"""About how many events of ``write_trace``'s layout a MB holds."""


def run(folder: Path, jobs: int, env: dict[str, str]) -> tuple[float, float, str]:
    """Run ``neuronprof summarize FOLDER --jobs N``; return (wall s, CPU s of it and its workers, stdout)."""
    import resource

    # RUSAGE_CHILDREN grows by each reaped child's usage, its own reaped workers included.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "neuronprof", "summarize", str(folder), "--jobs", str(jobs)],
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"--jobs {jobs}: exit status {proc.returncode}\n{proc.stderr[-2000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return seconds, cpu, proc.stdout


def main(argv: Optional[list[str]] = None) -> int:
    from neuronprof._executors import cores

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=16, help="rank files (default 16)")
    parser.add_argument("--mb", type=float, default=20.0, help="size of each file in MB (default 20)")
    parser.add_argument("--jobs", type=int, default=cores(), help="workers of the other side (default: one per core)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--keep", type=Path, default=None, help="write the traces here and keep them")
    args = parser.parse_args(argv)

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    tmp = Path(tempfile.mkdtemp(prefix="neuronprof-bench-")) if args.keep is None else args.keep
    folder = tmp / "ranks"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        events = max(1000, int(args.mb * _EVENTS_PER_MB))
        for r in range(args.ranks):
            path = folder / f"rank-{r}.json"
            if not path.exists():
                write_trace(path, events, seed=r)
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(
            f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs ({cores()} usable); {args.ranks} ranks x "
            f"{size / args.ranks / 1e6:.1f} MB = {size / 1e6:,.0f} MB"
        )
        figures: dict[int, list[tuple[float, float]]] = {1: [], args.jobs: []}
        printed: dict[int, str] = {}
        for i in range(args.rounds):
            for jobs in (1, args.jobs) if i % 2 == 0 else (args.jobs, 1):
                seconds, cpu, out = run(folder, jobs, env)
                figures[jobs].append((seconds, cpu))
                printed.setdefault(jobs, out)
                print(f"round {i + 1}: --jobs {jobs:<3d} wall {seconds:7.2f} s  CPU {cpu:7.2f} s")
        if printed[1] != printed[args.jobs]:
            print(f"--jobs 1 and --jobs {args.jobs} printed different tables")
            return 1
        serial = statistics.median(s for s, _ in figures[1])
        parallel = statistics.median(s for s, _ in figures[args.jobs])
        cpu_serial = statistics.median(c for _, c in figures[1])
        cpu_parallel = statistics.median(c for _, c in figures[args.jobs])
        print()
        # CPU over wall time: the cores a run had. Below its number of workers, the machine was busy with other work.
        print(f"{'':12s} {'wall (median)':>14s} {'CPU (median)':>14s} {'cores had':>10s}")
        print(f"{'--jobs 1':12s} {serial:12.2f} s {cpu_serial:12.2f} s {cpu_serial / serial:10.2f}")
        print(f"{f'--jobs {args.jobs}':12s} {parallel:12.2f} s {cpu_parallel:12.2f} s {cpu_parallel / parallel:10.2f}")
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"\nwall time, --jobs 1 / --jobs {args.jobs}: x{serial / parallel:.2f} "
            f"(at most x{min(args.jobs, cores(), args.ranks)} with this machine's usable cores; load average "
            f"{load:.1f} at the end); CPU time, --jobs {args.jobs} / --jobs 1: x{cpu_parallel / cpu_serial:.2f}; "
            "both printed the same table"
        )
        return 0
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
