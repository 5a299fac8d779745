"""`make docs-check` fails on what a reader would see broken: an empty API section, a table
wider than its container at 1280 px, a page wider than a phone, a broken image."""

from __future__ import annotations

import importlib.util
import shutil
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


def _object(ident: str, signature: str = "", body: str = "<p>Does a thing.</p>") -> str:
    return (
        f'<div class="doc doc-object doc-function"><h2 id="{ident}" class="doc doc-heading">{ident}</h2>'
        f'<div class="language-python doc-signature highlight"><pre><code>{signature}</code></pre></div>'
        f'<div class="doc doc-contents">{body}</div></div>'
    )


def _returns(annotation: str) -> str:
    return (
        '<p><span class="doc-section-title">Returns:</span></p><ul><li class="doc-section-item field-body">'
        f"<code>{annotation}</code> – <div><p>what it is.</p></div></li></ul>"
    )


def _attributes(typed: bool) -> str:
    """An "Attributes:" list as mkdocstrings renders it; the type in parentheses only when annotated."""
    kind = '(<code><span title="str">str</span></code>)' if typed else ""
    return (
        '<p><span class="doc-section-title">Attributes:</span></p><ul><li class="doc-section-item field-body">'
        f'<b><code><span title="x.variant">variant</span></code></b>\n  {kind}\n  –\n'
        '<div class="doc-md-description"><p>Label of the variant.</p></div></li></ul>'
    )


def test_private_or_plumbing_names_and_empty_types_on_an_api_page_are_problems(tmp_path: Path) -> None:
    pages = {
        ".": "<p>home</p>",
        "api": _object("neuronprof.session", "session(modes: Sequence[Mode])"),
        "api/backends": _object("neuronprof.backends._PackagedPrivateUse1Backend"),
        "api/export": _object("neuronprof.export.atomic_write", "atomic_write(path)"),
        "api/model": _object("neuronprof.model.Table.head", "head(rows: Sequence[<span>_T</span>]) -&gt; _G"),
        "api/empty": _object("neuronprof.Table.sorted", "sorted(by)", "<ul><li>by (<code></code>)</li></ul>"),
        "api/fine": _object("neuronprof.Session.__init__", "__init__(config: Config)", _returns("tuple[list[X], str]")),
        "api/fragment": _object("neuronprof.analysis.summarize_ranks", "f()", _returns("The cross-rank view")),
        "api/untyped": _object("neuronprof.VariantError", "VariantError(variant)", _attributes(typed=False)),
        "api/typed": _object("neuronprof.OpRow", "OpRow(variant)", _attributes(typed=True)),
    }
    problems = docs_check.check_html(_site(tmp_path, pages))
    private = "api/backends/index.html: documents a private name: neuronprof.backends._PackagedPrivateUse1Backend"
    assert private in problems
    assert "api/export/index.html: documents plumbing, not API: neuronprof.export.atomic_write" in problems
    assert "api/model/index.html: private name(s) in a signature: _G, _T" in problems
    assert "api/empty/index.html: an empty type cell in a parameter or return list" in problems
    assert (
        "api/fragment/index.html: a Returns entry whose type is a sentence fragment: 'The cross-rank view'" in problems
    )
    assert "api/untyped/index.html: an entry without a type: variant" in problems
    assert not [p for p in problems if p.startswith(("api/index.html", "api/fine/", "api/typed/"))], problems


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None, reason="needs mkdocs")
def test_the_built_api_reference_has_no_private_plumbing_or_empty_entries(built_site: Path) -> None:
    assert docs_check.check_html(built_site) == []


def test_unrendered_directive_is_a_problem(tmp_path: Path) -> None:
    site = _site(tmp_path, {".": "<p>::: neuronprof.session</p>"})
    assert any("unrendered API directive" in p for p in docs_check.check_html(site))


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.skipif(docs_check.find_chromium() is None, reason="needs a headless Chromium")
def test_screenshot_covers_the_whole_page(tmp_path: Path) -> None:
    """A table far below the first screen is in the screenshot: the window is as tall as the page."""
    tall = '<div style="height: 2500px">intro</div><table><tr><th>Name</th></tr></table><p>end</p>'
    site = _site(tmp_path / "site", {"tall": tall})
    profile = tmp_path / "profile"
    target = tmp_path / "tall.png"
    with docs_check.serve(site) as base:
        chromium = docs_check.find_chromium()
        problems, height = docs_check.probe_layout(chromium, base + "tall/", profile, 1280)
        assert problems == [] and height > 2500
        assert docs_check.screenshot(chromium, base + "tall/", target, profile, 1280, height) is None
    png = target.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width_px, height_px = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert width_px == 1280 and height_px >= 2500


_PRINTED = (
    "<pre><code>Name{pad}  Calls  Self CPU (µs)  CPU total (µs)\n"
    "{dash}  -----  -------------  --------------\n"
    "aten::addmm{pad2}      2          12.0            13.0\n</code></pre>"
)


def _printed_table(name_width: int) -> str:
    return _PRINTED.format(pad=" " * (name_width - 4), dash="-" * name_width, pad2=" " * (name_width - 11))


@pytest.mark.slow
@pytest.mark.skipif(docs_check.find_chromium() is None, reason="needs a headless Chromium")
def test_a_discussed_column_off_screen_in_a_printed_table_is_a_problem(tmp_path: Path) -> None:
    """At 1280 px a printed table's column that the text names must be in view; one it does not name may scroll."""
    wide, narrow = _printed_table(90), _printed_table(20)
    site = _site(
        tmp_path / "site",
        {
            "discussed": "<p>Sorted by <code>CPU total</code>, the phases come first.</p>" + wide,
            "undiscussed": "<p>The first rows are the slowest.</p>" + wide,
            "fits": "<p>Sorted by <code>CPU total</code>.</p>" + narrow,
            "unsticky": '<table style="display: block; overflow-x: auto; max-width: 100%">'
            + "<tr>"
            + "".join(f"<th>column_{i}_with_a_long_name</th>" for i in range(12))
            + "</tr></table>",
        },
    )
    profile = tmp_path / "profile"
    chromium = docs_check.find_chromium()
    with docs_check.serve(site) as base:
        discussed = docs_check.check_layout(chromium, base + "discussed/", profile, 1280)
        undiscussed = docs_check.check_layout(chromium, base + "undiscussed/", profile, 1280)
        fits = docs_check.check_layout(chromium, base + "fits/", profile, 1280)
        phone = docs_check.check_layout(chromium, base + "discussed/", profile, 390)
        unsticky = docs_check.check_layout(chromium, base + "unsticky/", profile, 390)
    assert [p for p in discussed if "a discussed column is off-screen: CPU total (µs)" in p], discussed
    assert not [p for p in discussed if "Self CPU" in p], discussed  # not named in the text
    assert undiscussed == [] and fits == []
    assert not [p for p in phone if "discussed column" in p], phone  # on a phone it scrolls
    assert [p for p in unsticky if "scrolls without its name column in view: column_0" in p], unsticky
