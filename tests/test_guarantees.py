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
