"""Run one side of a benchmark in a fresh interpreter and read back its RESULT line.

Each side gets its own process, so that one side's peak memory and torch's
one-time start-up cost never leak into the other's figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile


def run_child(code: str, *args: str, prefix: str = "neuronprof-bench-") -> dict[str, float]:
    """Run ``code`` with ``args`` and a temporary folder as its last argument; return its ``RESULT`` JSON."""
    with tempfile.TemporaryDirectory(prefix=prefix) as out:
        proc = subprocess.run(
            [sys.executable, "-c", code, *args, out], capture_output=True, text=True, env=dict(os.environ)
        )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1]
    result: dict[str, float] = json.loads(line[len("RESULT") :])
    return result
