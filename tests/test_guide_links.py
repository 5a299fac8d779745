"""Findings link to their guide sections: one base address for the site and the code, anchors that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import neuronprof
from neuronprof.analysis.insights import (
    DOCS_URL_ENV,
    FINDING_KINDS,
    Evidence,
    Finding,
    Insights,
    docs_base_url,
    guide_url,
)
from neuronprof.analysis.insights._findings import GUIDE_PAGE, GUIDE_TITLE, GUIDE_URL, SECTIONS
from neuronprof.cli import main as analysis_main
from neuronprof.model import Table
from neuronprof.report import render_report

ROOT = Path(__file__).resolve().parents[1]
# An address reserved for examples (RFC 2606): the tests publish nothing.
BASE = "https://example.org/neuronprof"


def _site() -> object:
    mkdocs_config = pytest.importorskip("mkdocs.config")
    return mkdocs_config.load_config(config_file=str(ROOT / "mkdocs.yml"))


def _finding(kind: str = "unfused_chain") -> Finding:
    return Finding(kind, "a chain", Evidence(("aten::mul", "aten::add")), 5.0, "fuse it")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [None, "", BASE, BASE + "/", "http://127.0.0.1:8000/docs"])
def test_the_site_and_the_findings_read_one_base_address(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is not None:
        monkeypatch.setenv(DOCS_URL_ENV, value)
    site = _site()
    assert (site.site_url or None) == docs_base_url()  # type: ignore[attr-defined]
    if site.site_url:  # type: ignore[attr-defined]
        # mkdocs publishes docs/insights.md at insights/ (directory URLs), where the findings point.
        assert site.use_directory_urls  # type: ignore[attr-defined]
        assert guide_url("unfused_chain") == f"{site.site_url}insights/#unfused_chain"  # type: ignore[attr-defined]
        assert _finding().docs == guide_url("unfused_chain")
    else:
        assert _finding().docs == f"{GUIDE_URL}#unfused_chain" == "docs/insights.md#unfused_chain"


def test_an_address_that_is_not_http_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("example.org/neuronprof", "javascript://x/alert(1)", "file:///srv/site/"):
        monkeypatch.setenv(DOCS_URL_ENV, value)
        assert docs_base_url() is None and _finding().docs == f"{GUIDE_URL}#unfused_chain", value


def test_every_kind_has_its_section_heading_with_the_kind_as_id() -> None:
    page = (ROOT / "docs" / GUIDE_PAGE).read_text(encoding="utf-8")
    assert page.splitlines()[0] == f"# {GUIDE_TITLE}"
    headings = {m.group(2): m.group(1) for m in re.finditer(r"^## (.+?) \{#([a-z_]+)\}\s*$", page, re.M)}
    missing = [kind for kind in FINDING_KINDS if kind not in headings]
    assert missing == [], f"docs/{GUIDE_PAGE} has no '## <title> {{#<kind>}}' heading for {missing}"
    for kind in FINDING_KINDS:
        assert headings[kind] == SECTIONS[kind], f"{kind}: the heading and SECTIONS name it differently"
    assert "attr_list" in _site().markdown_extensions  # type: ignore[attr-defined]  # makes {#kind} the id


def test_text_and_markdown_name_the_page_and_the_section(monkeypatch: pytest.MonkeyPatch) -> None:
    ins = Insights((_finding(),), backend="cpu", steps=1)
    assert "see: docs/insights.md#unfused_chain (the guide, 'Reading the findings' → Unfused elementwise chains)" in (
        str(ins)
    )
    monkeypatch.setenv(DOCS_URL_ENV, BASE)
    published = Insights((_finding(),), backend="cpu", steps=1)
    assert f"see: {BASE}/insights/#unfused_chain (the guide, 'Reading the findings'" in str(published)
    assert f"[Unfused elementwise chains]({BASE}/insights/#unfused_chain)" in published.to_markdown()


def _guide_links(page: str) -> list[tuple[str, str, str]]:
    """(href, link text, what follows it) of each guide link of a report."""
    return re.findall(r'guide: <a class="guide" href="([^"]*)">([^<]*)</a>([^<]*)</span>', page)


def test_the_report_links_each_finding_to_its_section(monkeypatch: pytest.MonkeyPatch) -> None:
    ins = Insights((_finding(), _finding("dominant_op")), backend="cpu", steps=1)
    page = render_report(Table(()), insights=ins)
    # Unpublished: a path in the sources would resolve against the report's own folder, so it is named, not linked.
    assert _guide_links(page) == []
    for kind, section in (("unfused_chain", "Unfused elementwise chains"), ("dominant_op", "One dominant op")):
        assert (
            f"guide: Reading the findings → {section} (docs/insights.md#{kind}, a page in neuronprof&#39;s sources)"
            in page
        )
    monkeypatch.setenv(DOCS_URL_ENV, BASE)
    published = Insights((_finding(),), backend="cpu", steps=1)
    page = render_report(Table(()), insights=published)
    link = (f"{BASE}/insights/#unfused_chain", "Reading the findings → Unfused elementwise chains", "")
    assert _guide_links(page) == [link]  # the published page: no note


def test_a_finding_address_of_another_scheme_is_shown_not_linked() -> None:
    odd = Finding("unfused_chain", "t", Evidence(()), None, "s", docs="javascript:alert(1)")
    page = render_report(Table(()), insights=Insights((odd,), backend="cpu", steps=1))
    assert _guide_links(page) == [] and 'href="javascript' not in page
    assert "guide: Reading the findings → Unfused elementwise chains (javascript:alert(1))" in page


@pytest.mark.slow
def test_a_real_report_links_every_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DOCS_URL_ENV, BASE)
    x, w = torch.randn(64, 64), torch.ones(64)
    with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=tmp_path) as s:
        for _ in s.steps():
            x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    kinds = s.insights().kinds()
    assert "unfused_chain" in kinds
    trace = s.export(tmp_path / "t.json")
    for page in (s.report(tmp_path / "live.html"), tmp_path / "t.html"):
        if page.name == "t.html":
            assert analysis_main(["report", str(trace), "-o", str(page)]) == 0
        links = _guide_links(page.read_text(encoding="utf-8"))
        assert [href for href, _, _ in links] == [f"{BASE}/insights/#{kind}" for kind in kinds]
        assert all(text == f"{GUIDE_TITLE} → {SECTIONS[kind]}" for (_, text, _), kind in zip(links, kinds))
