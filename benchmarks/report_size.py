"""How large `neuronprof report` makes its page from a giant trace, against the size the guide states.

The report draws a bounded sample of what it was given (the timeline's events, the
overview's steps, the kernel names, the call tree; docs/report.md, "How large the file
gets") and says what it left out, so its file must stay small however large the trace.
This writes (or, with ``--traces DIR``, reuses) benchmarks/scale.py's synthetic kineto
CUDA trace of ``--mb`` MB (1 GB by default: nested ops with shapes, kernels with their
correlation ids, two host threads), runs ``neuronprof report`` on it in its own
process, and prints:

* the trace's size and events, the command's CPU time and peak RSS;
* the page's size against ``--limit`` (the bound docs/report.md states), PASS or MISS,
  and its parts: the embedded data, the timeline's drawn events and how many it left out;
* the page's own sentences about what it left out.

Usage::

    python benchmarks/report_size.py [--mb 1000] [--traces DIR] [--limit-mb 2]

Exit status: 0 when the page is within the limit and says what it left out, 1 otherwise.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from scale import _CLI, MB, ROOT, prepare, run_once

_DATA = re.compile(r'<script type="application/json" id="neuronprof-data">(.*?)</script>', re.S)
_CODE = re.compile(r"<(script|style)\b.*?</\1>", re.S)


# The page's own words for what it drew in part (docs/report.md, "How large the file gets").
_SAID = re.compile(
    r"the first [\d,]+ of [\d,]+ [a-z]+(?: are listed)?"
    r"|[\d,]+ event\(s\) are not op or kernel spans and are left out"
    r"|the [\d,]+ heaviest of [\d,]+ [a-z ]+ are listed"
    r"|The timeline is a bounded sample[^.]*"
)


def _left_out(page: str) -> list[str]:
    """The page's visible sentences that say what a pane left out or drew in part."""
    text = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", _CODE.sub("", page))))
    return list(dict.fromkeys(m.group(0).strip() for m in _SAID.finditer(text)))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=1000, help="trace size in MB (default 1000)")
    parser.add_argument("--traces", "--keep", type=Path, help="write the trace here and keep it (reused when there)")
    parser.add_argument("--limit-mb", type=float, default=2.0, help="the page's stated size limit in MB (default 2)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="neuronprof-report-size-") as tmp:
        root = args.traces or Path(tmp) / "traces"
        inputs = prepare(root, args.mb, threads=2, ranks=0)
        page_file = Path(tmp) / "report.html"
        # This checkout's package, as scale.py runs it.
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
        }
        figures, why = run_once(("-c", _CLI, "report", str(inputs.trace), "-o", str(page_file)), env)
        if figures is None:
            print(f"neuronprof report failed: {why}")
            return 1
        page = page_file.read_text(encoding="utf-8")
        trace_mb, events = inputs.size / MB, inputs.events
    size = len(page.encode())
    m = _DATA.search(page)
    data: dict[str, Any] = json.loads(m.group(1)) if m else {}
    timeline = data.get("timeline") or {}
    left_out = _left_out(page)
    ok = size <= args.limit_mb * MB and bool(timeline.get("dropped")) and bool(left_out)
    print(f"trace: {trace_mb:,.0f} MB, {events:,} events (benchmarks/scale.py's generator)")
    print(f"neuronprof report: {figures.cpu:.1f} s CPU, {figures.wall:.1f} s wall, peak {figures.rss / 2**20:,.0f} MiB")
    verdict = "PASS" if size <= args.limit_mb * MB else "MISS"
    print(
        f"page: {size / MB:.2f} MB against the stated {args.limit_mb:g} MB: {verdict}"
        f" ({size / MB / trace_mb:.1e} of the trace)"
    )
    print(f"  embedded data: {len(m.group(1).encode()) / MB:.2f} MB" if m else "  no embedded data")
    print(f"  timeline: {len(timeline.get('events', ())):,} events drawn, {timeline.get('dropped', 0):,} left out")
    print(f"  op table rows: {len((data.get('table') or {}).get('rows', ())):,}")
    parts = {k: len(json.dumps(v).encode()) for k, v in data.items()}
    print(
        "  embedded parts: "
        + ", ".join(f"{k} {n / MB:.2f} MB" for k, n in sorted(parts.items(), key=lambda kv: -kv[1]))
    )
    print("the page says:")
    for line in left_out:
        print(f"  - {line}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
