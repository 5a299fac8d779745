"""The Guarantees page names real tests and benchmarks, so it cannot drift from them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guarantees.md"


def test_every_backing_test_exists():
    text = PAGE.read_text()
    refs = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", text)
    assert len(refs) >= 15
    for path, name in refs:
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {name}\(", source, re.M), f"{path}::{name} named in guarantees.md does not exist"


def test_every_named_benchmark_exists():
    for path in re.findall(r"`(benchmarks/\w+\.py)`", PAGE.read_text()):
        assert (ROOT / path).is_file(), path


def test_no_promise_without_a_test():
    rows = [ln for ln in PAGE.read_text().splitlines() if ln.startswith("| ") and not ln.startswith("| Promise")]
    promises = [ln for ln in rows if not set(ln) <= set("| -")]
    assert len(promises) >= 25
    for line in promises:
        backing = line.rstrip(" |").rsplit(" | ", 1)[-1]
        assert re.search(r"`tests/[\w/]+\.py::\w+`|`benchmarks/\w+\.py`", backing), f"promise without a test: {line}"
