"""Build the docs, serve them locally, screenshot key pages and check the built HTML.

``make docs-check`` runs this. It is a look-before-you-merge check for people, not a CI
step: it needs a headless Chromium (Debian: ``apt-get install chromium``).

1. ``mkdocs build --strict`` into ``<out>/site``;
2. checks the built HTML: no page shows an unexpanded include (``--8<--``), an
   unrendered API directive (``::: name``) or an error; the API reference renders
   ``neuronprof.session`` as a function and ``neuronprof.Session`` and
   ``neuronprof.Table`` as classes, with content; every API page has rendered objects;
   no API page documents a private name (``neuronprof._x``, a ``_T`` in a signature)
   or a plumbing helper (``atomic_write`` and the other file helpers), and no
   parameter or attribute list shows an empty or missing type;
3. serves the site on 127.0.0.1 (a free port) and fetches every page;
4. loads every page in headless Chromium at 1280 px and at 390 px (a phone) and fails on
   a table wider than its container at 1280 px, a page wider than the window at either
   width (tables must scroll inside the page on a phone), a table that scrolls sideways
   without its first (name) column sticky, an image that does not load, or, at 1280 px,
   a column of a printed table (a ``Name  Calls ...`` header in a code block) that the
   page's text names but that is off-screen until the block is scrolled;
5. saves a full-page screenshot of Home, Getting started, the training-step and
   device-table pages, the recipes, the glossary, the RMSNorm and MLP case studies and
   the API reference (up to 16,000 px tall, so the case study's tables and plots are in
   it) into ``<out>`` (default ``.cache/docs-check/``), named ``<page>-<width>.png``, to
   look at before merging.

Exit status 0 when every check passed, 1 when one failed, 2 when a tool is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]

SCREENSHOTS = {
    "home": "",
    "getting-started": "getting-started/",
    "training-step": "training-step/",
    "device-table": "device-table/",
    "read-a-trace": "recipes/read-a-trace/",
    "profile-a-window": "recipes/profile-a-window/",
    "find-your-code": "recipes/find-your-code/",
    "glossary": "glossary/",
    "case-study-rmsnorm": "case-studies/rmsnorm/",
    "case-study-mlp": "case-studies/mlp/",
    "api-reference": "api/",
}
# Desktop and phone widths, in CSS pixels.
WIDTHS = (1280, 390)
# The layout check runs in the page (Chromium has no other way to measure a layout
# without a driver library). The served copy of a checked page gets this script; it
# writes its findings, as JSON, into an element that `--dump-dom` prints.
LAYOUT_PROBE = r"""
<script>
window.addEventListener("load", function () {
  var out = {window: window.innerWidth, page: document.documentElement.scrollWidth,
             height: document.documentElement.scrollHeight, wide: [], broken: [], unsticky: [], offscreen: []};
  var article = document.querySelector("article") || document.body;
  var room = article.clientWidth;
  document.querySelectorAll("article table").forEach(function (t) {
    if (t.scrollWidth > room + 1) {
      var head = t.querySelector("th");
      out.wide.push((head ? head.textContent.trim() : "table") + " (" + t.scrollWidth + " px in " + room + " px)");
    }
  });
  // Wider than its box, a table keeps its first column (the name) in view while it scrolls.
  document.querySelectorAll("article table").forEach(function (t) {
    var cell = t.querySelector("th, td");
    if (t.scrollWidth > t.clientWidth + 1 && cell && getComputedStyle(cell).position !== "sticky") {
      out.unsticky.push(cell.textContent.trim() + " (" + t.scrollWidth + " px in " + t.clientWidth + " px)");
    }
  });
  // Printed tables (a "Name  Calls  Self CPU (µs) ..." header in a code block): a column
  // that the page's text discusses must be in view without scrolling the block, also in
  // a collapsed block once the reader opens it (a tab not shown is not measured).
  document.querySelectorAll("article details").forEach(function (d) { d.open = true; });
  var prose = "";
  article.querySelectorAll("p, li, td, th, h1, h2, h3, h4, dt, dd, figcaption").forEach(function (el) {
    if (!el.closest("pre")) prose += " " + el.textContent;
  });
  article.querySelectorAll("pre > code").forEach(function (code) {
    var nodes = [], walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT), node;
    while ((node = walker.nextNode())) nodes.push(node);
    function rect(start, end) {
      var range = document.createRange(), at = 0, placed = 0;
      nodes.forEach(function (n) {
        var len = n.textContent.length;
        if (!(placed & 1) && start < at + len) { range.setStart(n, start - at); placed |= 1; }
        if (!(placed & 2) && end <= at + len) { range.setEnd(n, end - at); placed |= 2; }
        at += len;
      });
      return range.getBoundingClientRect();
    }
    // The block's visible box: the code element where it scrolls (mkdocs-material), else the pre.
    var box = code.getBoundingClientRect(), style = getComputedStyle(code);
    if (box.width === 0) return;  // not shown: a tab other than the open one
    var right = Math.min(box.right, code.parentElement.getBoundingClientRect().right)
      - parseFloat(style.paddingRight || "0");
    var offset = 0;
    code.textContent.split("\n").forEach(function (line) {
      var header = /^\s*Name {2,}\S/.test(line);
      var column = / *(\S+(?: \S+)*)/g, m;
      while (header && (m = column.exec(line))) {
        var name = m[1], topic = name.replace(/ \((µs|%)\)$/, "");
        var start = offset + m.index + m[0].length - name.length;
        if (name === "Name" || !/[A-Za-z]/.test(topic) || prose.indexOf(topic) < 0) continue;  // "..." is no column
        var r = rect(start, start + name.length);
        if (r.right > right + 1) {
          out.offscreen.push(name + " (right edge " + Math.round(r.right - box.left) + " px in "
                             + Math.round(right - box.left) + " px)");
        }
      }
      offset += line.length + 1;
    });
  });
  document.querySelectorAll("img").forEach(function (img) {
    if (!img.complete || img.naturalWidth === 0) out.broken.push(img.getAttribute("src"));
  });
  var pre = document.createElement("pre");
  pre.id = "docs-check-layout";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""
PROBE_QUERY = "docs-check-layout"
# Full-page screenshots stop here (CSS px): the API reference is tens of thousands of px
# tall, and Chromium's software compositor refuses much larger windows.
MAX_SCREENSHOT_HEIGHT = 16_000
# (heading id, kind) that the API reference must render, with content.
REQUIRED_API_OBJECTS = (
    ("neuronprof.session", "function"),
    ("neuronprof.Session", "class"),
    ("neuronprof.Table", "class"),
)
# Helpers that write files for neuronprof itself: not API, whatever module holds them.
PLUMBING_NAMES = frozenset(
    {
        "add_neuron_profile",
        "atomic_write",
        "copy_trace",
        "default_trace_name",
        "ensure_writable_dir",
        "neuron_bundle",
        "neuron_device_pairs",
        "tensorboard_file_name",
        "text_writer",
        "unique_path",
        "view",  # NeuronTool.view: how the readers run neuron-explorer
        "warn_user",
    }
)
_HEADING_ID = re.compile(r'<h[1-6] id="(neuronprof[\w.]*)" class="doc doc-heading')
_SIGNATURE = re.compile(r'<div class="[^"]*\bdoc-signature\b[^"]*">(.*?)</div>', re.S)
_RETURNS = re.compile(r'<span class="doc-section-title">(?:Returns|Yields):</span></p>\s*<ul>(.*?)</ul>', re.S)
# A named entry (parameter, attribute) rendered with no "(type)" between its name and its description.
_UNTYPED_ITEM = re.compile(r'<li class="doc-section-item field-body">\s*<b><code>(.*?)</code></b>\s*–', re.S)
_ITEM_TYPE = re.compile(r'<li class="doc-section-item field-body">\s*<code>(.*?)</code>', re.S)
# A private identifier (``_T``, ``_Col``), not a dunder and not part of a longer name.
_PRIVATE_NAME = re.compile(r"(?<![\w.])_(?!_)[A-Za-z]\w*")
BROKEN_MARKERS = ("--8<--", "Traceback (most recent call last)", "mkdocstrings: error")
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class _DocObjects(HTMLParser):
    """Collect mkdocstrings objects as (kind, heading id, length of the text in their contents)."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: list[tuple[str, str, int]] = []
        self.directives: list[str] = []
        # Open elements: (tag, role), role "object", "contents" or "".
        self._stack: list[tuple[str, str]] = []
        # Open objects: [kind, heading id, text length], innermost last.
        self._open: list[list] = []
        self._contents_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        role = ""
        if tag == "div" and "doc-object" in classes:
            kind = next((c[4:] for c in classes if c.startswith("doc-") and c != "doc-object"), "object")
            self._open.append([kind, "", 0])
            role = "object"
        elif tag == "div" and "doc-contents" in classes:
            self._contents_depth += 1
            role = "contents"
        elif "doc-heading" in classes and self._open and not self._open[-1][1]:
            self._open[-1][1] = attributes.get("id") or ""
        if tag not in _VOID:
            self._stack.append((tag, role))

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        while self._stack:
            open_tag, role = self._stack.pop()
            if role == "object" and self._open:
                kind, ident, length = self._open.pop()
                self.objects.append((kind, ident, length))
            elif role == "contents":
                self._contents_depth -= 1
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        text = data.strip()
        if text.startswith("::: "):
            self.directives.append(text)
        if text and self._contents_depth > 0:
            for obj in self._open:
                obj[2] += len(text)


_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"})


def build(site: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    print("$ mkdocs build --strict")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit("docs-check: the strict build failed (warnings above)")


def _surface_problems(rel: str, main: str) -> list[str]:
    """Private or plumbing names, and empty type cells, on one API page."""
    problems = []
    for ident in _HEADING_ID.findall(main):
        parts = ident.split(".")
        if any(p.startswith("_") and not p.startswith("__") for p in parts):
            problems.append(f"{rel}: documents a private name: {ident}")
        elif parts[-1] in PLUMBING_NAMES:
            problems.append(f"{rel}: documents plumbing, not API: {ident}")
    for block in _SIGNATURE.findall(main):
        text = html.unescape(re.sub(r"<[^>]+>", "", block))
        names = sorted(set(_PRIVATE_NAME.findall(text)))
        if names:
            problems.append(f"{rel}: private name(s) in a signature: {', '.join(names)}")
    for section in _RETURNS.findall(main):
        for annotation in _ITEM_TYPE.findall(section):
            text = html.unescape(re.sub(r"<[^>]+>", "", annotation)).strip()
            # A type is a Python expression; words with spaces between them, a Markdown link or
            # braces mean a sentence was read as "type: description".
            if re.search(r"\w\s+\w", text) or any(c in text for c in "`{"):
                problems.append(f"{rel}: a Returns entry whose type is a sentence fragment: {text[:60]!r}")
    if "<code></code>" in main:
        problems.append(f"{rel}: an empty type cell in a parameter or return list")
    for name in _UNTYPED_ITEM.findall(main):
        text = html.unescape(re.sub(r"<[^>]+>", "", name)).strip()
        problems.append(f"{rel}: an entry without a type: {text}")
    return problems


def check_html(site: Path) -> list[str]:
    """Return the problems found in the built pages."""
    problems: list[str] = []
    pages = sorted(p for p in site.rglob("index.html") if "assets" not in p.parts)
    if not pages:
        return ["no pages were built"]
    for page in pages:
        rel = page.relative_to(site).as_posix()
        html = page.read_text(encoding="utf-8")
        main = html.split('<article class="md-content__inner', 1)[-1]
        for marker in BROKEN_MARKERS:
            if marker in main:
                problems.append(f"{rel}: shows {marker!r}")
        parser = _DocObjects()
        parser.feed(main)
        if parser.directives:
            problems.append(f"{rel}: unrendered API directive(s): {', '.join(parser.directives[:3])}")
        if rel.startswith("api/"):
            if not parser.objects:
                problems.append(f"{rel}: the API section is empty (no rendered objects)")
            empty = [ident for kind, ident, length in parser.objects if ident and length == 0]
            if empty:
                problems.append(f"{rel}: API objects without content: {', '.join(empty[:5])}")
            problems += _surface_problems(rel, main)
    api_objects: set[tuple[str, str]] = set()
    for page in (site / "api").rglob("index.html"):
        parser = _DocObjects()
        parser.feed(page.read_text(encoding="utf-8"))
        api_objects.update((ident, kind) for kind, ident, length in parser.objects if length > 0)
    for ident, kind in REQUIRED_API_OBJECTS:
        if (ident, kind) not in api_objects:
            problems.append(f"api/: no rendered doc-{kind} block for {ident}")
    return problems


@contextlib.contextmanager
def serve(site: Path) -> Iterator[str]:
    """Serve ``site`` on 127.0.0.1 at a free port; yield the base URL."""

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass

        def do_GET(self) -> None:  # noqa: N802 - the base class's name
            path, _, query = self.path.partition("?")
            if query != PROBE_QUERY:
                super().do_GET()
                return
            page = site / path.lstrip("/") / "index.html"
            body = page.read_bytes().replace(b"</body>", LAYOUT_PROBE.encode() + b"</body>", 1)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class QuietServer(http.server.ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            # Chromium drops connections it no longer needs; that is not a docs problem.
            if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                super().handle_error(request, client_address)  # type: ignore[arg-type]

    handler = functools.partial(QuietHandler, directory=str(site))
    server = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def site_paths(site: Path) -> list[str]:
    """The served path of every page of the built site (``""`` for Home, ``"install/"``...)."""
    pages = sorted(p for p in site.rglob("index.html") if "assets" not in p.relative_to(site).parts)
    paths = [p.parent.relative_to(site).as_posix() for p in pages]
    return ["" if rel == "." else rel + "/" for rel in paths]


def fetch_all(base: str, site: Path) -> list[str]:
    problems = []
    for page in sorted(site.rglob("index.html")):
        rel = page.parent.relative_to(site).as_posix()
        url = base + ("" if rel == "." else rel + "/")
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                if response.status != 200:
                    problems.append(f"{url}: HTTP {response.status}")
        except OSError as exc:
            problems.append(f"{url}: {exc}")
    return problems


def find_chromium() -> Optional[str]:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _chromium(chromium: str, profile: Path, width: int, *extra: str, height: int = 900) -> list[str]:
    return [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        f"--window-size={width},{height}",
        *extra,
    ]


def screenshot(
    chromium: str, url: str, target: Path, profile: Path, width: int = 1280, height: int = 900
) -> Optional[str]:
    """Save a ``width``×``height`` screenshot of ``url``; return a problem, or None.

    Headless Chromium's ``--screenshot`` captures the window, not the page: pass the page's
    height (from ``probe_layout``) for a full-page screenshot, tables and plots included.
    """
    height = max(1, min(height, MAX_SCREENSHOT_HEIGHT))
    cmd = _chromium(chromium, profile, width, f"--screenshot={target}", url, height=height)
    target.unlink(missing_ok=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return f"{url}: chromium timed out"
    if not target.is_file() or target.stat().st_size < 10_000:
        return f"{url}: no usable screenshot (chromium exit {proc.returncode}): {proc.stderr.strip()[-400:]}"
    return None


def check_layout(chromium: str, url: str, profile: Path, width: int) -> list[str]:
    """Load ``url`` at ``width`` px with the layout probe; return tables too wide, page overflow, broken images."""
    return probe_layout(chromium, url, profile, width)[0]


def probe_layout(chromium: str, url: str, profile: Path, width: int) -> tuple[list[str], int]:
    """Like ``check_layout``, and also return the page's height in CSS px (900 when unknown)."""
    cmd = _chromium(chromium, profile, width, "--dump-dom", f"{url}?{PROBE_QUERY}")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return [f"{url} at {width} px: chromium timed out"], 900
    marker = '<pre id="docs-check-layout">'
    if marker not in proc.stdout:
        return [f"{url} at {width} px: the layout probe did not run (chromium exit {proc.returncode})"], 900
    raw = proc.stdout.split(marker, 1)[1].split("</pre>", 1)[0]
    found = json.loads(html.unescape(raw))
    problems = [f"{url} at {width} px: broken image {src}" for src in found["broken"]]
    if found["page"] > found["window"] + 1:
        problems.append(f"{url} at {width} px: the page is {found['page']} px wide (a table or block does not scroll)")
    problems += [
        f"{url} at {width} px: a table scrolls without its name column in view: {what}" for what in found["unsticky"]
    ]
    if width >= 1280:
        problems += [f"{url} at {width} px: table wider than its container: {what}" for what in found["wide"]]
        # On a phone a printed table scrolls sideways; at 1280 px what the text discusses is in view.
        problems += [f"{url} at {width} px: a discussed column is off-screen: {what}" for what in found["offscreen"]]
    return problems, int(found.get("height") or 900)


def _shown(path: Path) -> str:
    """A path relative to the repository when it is inside it (no machine paths in the output)."""
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return path.name


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "docs-check", help="screenshots folder")
    parser.add_argument("--no-screenshots", action="store_true", help="check the HTML and the server only")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    site = out / "site"
    if site.exists():
        shutil.rmtree(site)
    build(site)

    problems = check_html(site)
    chromium = None if args.no_screenshots else find_chromium()
    if not args.no_screenshots and chromium is None:
        print(
            "docs-check: no headless Chromium found; install it (Debian: apt-get update && "
            "apt-get install -y chromium) or pass --no-screenshots",
            file=sys.stderr,
        )
        return 2
    with serve(site) as base:
        print(f"serving {_shown(site)} at {base}")
        problems += fetch_all(base, site)
        if chromium is not None:
            with tempfile.TemporaryDirectory(prefix="docs-check-chromium-") as profile:
                # Every other page: the same layout checks, without screenshots.
                shot = set(SCREENSHOTS.values())
                for path in site_paths(site):
                    if path not in shot:
                        for width in WIDTHS:
                            problems += check_layout(chromium, base + path, Path(profile), width)
                for name, path in SCREENSHOTS.items():
                    for width in WIDTHS:
                        target = out / f"{name}-{width}.png"
                        layout, height = probe_layout(chromium, base + path, Path(profile), width)
                        problems += layout
                        # The whole page, so that its tables and plots are in the screenshot too.
                        problem = screenshot(chromium, base + path, target, Path(profile), width, height)
                        if problem:
                            problems.append(problem)
                        else:
                            print(f"screenshot: {_shown(target)} ({width}x{min(height, MAX_SCREENSHOT_HEIGHT)})")
    if problems:
        print("docs-check failed:", file=sys.stderr)
        for line in problems:
            print(f"  - {line}", file=sys.stderr)
        return 1
    print("docs-check: all pages built, served and checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
