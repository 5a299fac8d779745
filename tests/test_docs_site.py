"""The built guide in headless Chromium: site search finds the recipes by a reader's words,
console blocks copy without their prompts, and printed tables show the columns the text discusses.

Reads the site built once per run (``mkdocs build --strict``: conftest's ``built_site``), serves
it on 127.0.0.1 and drives the system's Chromium with playwright, as ``tests/test_report_browser.py`` does. Search is
mkdocs-material's own (its lunr index in a web worker), typed into the search box.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("NEURONPROF_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("Chromium is not installed (Debian: apt-get install chromium)", allow_module_level=True)
if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
    pytest.skip("needs mkdocs (the docs extra)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")

# Every test here reads the built site (a strict mkdocs build and a browser): none is quick.
pytestmark = pytest.mark.slow

_spec = importlib.util.spec_from_file_location("docs_check", ROOT / "scripts" / "docs_check.py")
assert _spec is not None and _spec.loader is not None
docs_check = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("docs_check", docs_check)
_spec.loader.exec_module(docs_check)


@pytest.fixture(scope="module")
def site(built_site: Path) -> Iterator[str]:
    with docs_check.serve(built_site) as base:
        yield base


@pytest.fixture(scope="module")
def page(site: str) -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 900})
        finally:
            browser.close()


def _first_results(page: Any, site: str, query: str, n: int = 1) -> list[str]:
    """The pages of the first ``n`` search results for ``query``, as mkdocs-material lists them."""
    page.goto(site)
    page.wait_for_load_state("load")
    page.keyboard.press("s")  # mkdocs-material opens its search on "s"
    # Typed key by key, as a reader types: mkdocs-material reads the box on a key being released (or
    # when its index is ready), so a value set without key events is searched only if it was set
    # before the index was built.
    page.locator("input.md-search__input").press_sequentially(query)
    page.wait_for_selector(".md-search-result__item > a", timeout=20_000)
    # The search worker answers each change of the box: read the list once it stops changing.
    links: list[str] = []
    for _ in range(40):
        page.wait_for_timeout(500)
        now = page.eval_on_selector_all(".md-search-result__item > a", "els => els.map(a => a.getAttribute('href'))")
        if now and now == links:
            break
        links = now
    return [link.split(site, 1)[-1].split("?", 1)[0] for link in links[:n]]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("profile only some steps", "recipes/profile-a-window/"),
        ("skip the first steps of a long job", "recipes/profile-a-window/"),
        ("what is a NEFF", "glossary/"),
        ("find my code from an op", "recipes/find-your-code/"),
        ("read a trace", "recipes/read-a-trace/"),
        ("glossary", "glossary/"),
    ],
)
def test_site_search_finds_each_recipe_by_a_readers_words(page: Any, site: str, query: str, expected: str) -> None:
    first = _first_results(page, site, query)
    assert first and first[0].split("#", 1)[0].endswith(expected), (query, first)


def test_console_blocks_copy_without_prompts_or_output(page: Any, site: str) -> None:
    """The copy button copies what mkdocs-material reads while it marks the block ``data-md-copying``."""
    page.goto(site + "install/")
    copied = page.eval_on_selector_all(
        "code",
        """els => els.filter(c => c.querySelector('.gp') && c.checkVisibility()).map(c => {
             c.setAttribute('data-md-copying', ''); const text = c.innerText; c.removeAttribute('data-md-copying');
             return text; })""",
    )
    assert copied, "the install page has console blocks with prompts"
    lines = [line for text in copied for line in text.splitlines()]
    assert "pip install ." in lines
    assert not [line for line in lines if line.startswith("$")], lines
    shown = page.eval_on_selector_all("code", "els => els.filter(c => c.querySelector('.gp')).map(c => c.innerText)")
    assert any(line.startswith("$ pip install .") for text in shown for line in text.splitlines())


def test_install_page_shows_no_clone_address_while_repo_url_is_unset(page: Any, site: str) -> None:
    page.goto(site + "install/")
    text = page.inner_text("article")
    assert "git clone" not in text and "names no public address" in text


@pytest.mark.parametrize("path", ["training-step/", "device-table/", "getting-started/", "recipes/read-a-trace/"])
def test_printed_tables_show_the_discussed_columns_at_1280_px(site: str, tmp_path: Path, path: str) -> None:
    assert CHROMIUM is not None
    assert docs_check.check_layout(CHROMIUM, site + path, tmp_path / "profile", 1280) == []
