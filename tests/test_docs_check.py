"""`make docs-check` fails on what a reader would see broken: an empty API section, a table
wider than its container at 1280 px, a page wider than a phone, a broken image."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_check", ROOT / "scripts" / "docs_check.py")
assert _spec is not None and _spec.loader is not None
docs_check = importlib.util.module_from_spec(_spec)
sys.modules["docs_check"] = docs_check
_spec.loader.exec_module(docs_check)

_PAGE = """<!doctype html><html><head><meta name="viewport" content="width=device-width"></head><body>
<article class="md-content__inner" style="width: 600px">{body}</article></body></html>"""


def _site(tmp_path: Path, pages: dict[str, str]) -> Path:
    for rel, body in pages.items():
        page = tmp_path / rel / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(_PAGE.format(body=body), encoding="utf-8")
    return tmp_path


def test_empty_api_section_is_a_problem(tmp_path: Path) -> None:
    site = _site(tmp_path, {".": "<p>home</p>", "api": "<h1>API</h1><p>nothing rendered</p>"})
    problems = docs_check.check_html(site)
    assert any("api/index.html: the API section is empty" in p for p in problems)


def test_unrendered_directive_is_a_problem(tmp_path: Path) -> None:
    site = _site(tmp_path, {".": "<p>::: neuronprof.session</p>"})
    assert any("unrendered API directive" in p for p in docs_check.check_html(site))


@pytest.mark.skipif(docs_check.find_chromium() is None, reason="needs a headless Chromium")
def test_layout_probe_finds_wide_tables_overflow_and_broken_images(tmp_path: Path) -> None:
    wide = "<table><tr>" + "".join(f"<th>column_{i}_with_a_long_name</th>" for i in range(12)) + "</tr></table>"
    narrow = "<table><tr><th>Name</th><th>Calls</th></tr></table>"
    site = _site(
        tmp_path / "site",
        {
            "wide": wide + '<img src="missing.png">',
            "ok": narrow,
            "overflow": '<div style="width: 2000px">a block that does not scroll</div>',
        },
    )
    profile = tmp_path / "profile"
    with docs_check.serve(site) as base:
        chromium = docs_check.find_chromium()
        wide_problems = docs_check.check_layout(chromium, base + "wide/", profile, 1280)
        ok_problems = docs_check.check_layout(chromium, base + "ok/", profile, 1280)
        phone_problems = docs_check.check_layout(chromium, base + "overflow/", profile, 390)
    assert any("table wider than its container: column_0" in p for p in wide_problems), wide_problems
    assert any("broken image missing.png" in p for p in wide_problems), wide_problems
    assert ok_problems == []
    assert any("at 390 px: the page is" in p for p in phone_problems), phone_problems
