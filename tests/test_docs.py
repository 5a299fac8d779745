"""Every Python code block in ``docs/`` runs, so the guide cannot drift from the code.

CONTRIBUTING: writing code blocks in the docs
=============================================

* A fenced block whose language is ``python`` (or ``py``) is executed by this test,
  **on its own**: in a fresh namespace and an empty working folder, as a reader who
  copies that one block into a file would run it. So every block has its imports,
  its model and its data. The blocks of a page run in one Python process (in order),
  whose working folder is a temporary directory.
* **A continuation block** (one that uses what the block before it defined) gets a
  title that starts with ``Continued``::

      ```python title="Continued: uses s from the block above"

  It runs in the namespace and folder of the block before it. Use it sparingly: a
  reader copies blocks one at a time.
* Keep it fast: tiny tensors (tens to hundreds of elements per side), the default
  schedule, at most one ``torch.compile`` in the whole guide (the RMSNorm case study
  has it). The test sets ``TORCHINDUCTOR_CACHE_DIR`` to a temporary folder and
  ``MPLBACKEND=Agg``.
* **A block that needs hardware** gets a title that starts with ``Needs``::

      ```python title="Needs a Neuron device"
      ```python title="Needs a TPU"
      ```python title="Needs a CUDA GPU"

  The title is shown above the block on the site, so readers know it will not run
  on a laptop, and this test only checks such a block on a CPU: it compiles; its first
  statement after the imports is ``neuronprof.require_backend("neuron")`` (``"tpu"``,
  ``"cuda"``), which imports the package that registers the device, and it says
  ``neuronprof doctor`` in a comment; run here, the block stops there with
  neuronprof's ``BackendUnavailableError`` (not a ``ModuleNotFoundError`` or a torch
  traceback at ``.to(device)``); and every ``neuronprof`` name it uses exists. A device
  block that continues the one before it says so:
  ``title="Needs a Neuron device (continued)"``. The ``Needs`` title is the only way to
  skip running a block; use it for hardware only.
* Output, shell commands and file trees go in ``text`` / ``console`` blocks, which are
  not executed. ``pycon`` / ``ipython`` blocks are refused: write ``python``.
* Examples are included from ``examples/*.py`` with ``--8<-- "examples/name.py"``
  (pymdownx.snippets), never pasted. The test expands the include exactly as the site
  does and runs the file's code as part of the page, as a module that is not
  ``__main__``: the example's ``if __name__ == "__main__":`` part does not run, so a
  following block calls its functions with small sizes.
* A failing block fails with the page and its line number in the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

PYTHON_LANGS = frozenset({"python", "py", "python3"})
REFUSED_LANGS = frozenset({"pycon", "ipython", "ipython3", "jupyter"})
DEVICE_TITLE = re.compile(r"^Needs\b")
CONTINUATION_TITLE = re.compile(r"^Continued\b")
# The backend each device block asks neuronprof.require_backend for, by the device named in the title.
# None: the reader's own package (a PrivateUse1 device), any import will do.
# A "Needs" block that names none of these (e.g. Neuron profile files to read) has no device to register.
DEVICE_BACKENDS: dict[str, str | None] = {
    "Neuron device": "neuron",
    "TPU": "tpu",
    "CUDA": "cuda",
    "PrivateUse1": None,
}
# Imported by require_backend, never by the block itself: the block's own import would fail
# with a bare ModuleNotFoundError on a machine without the device.
REGISTERING_PACKAGES = frozenset({"torch_neuronx", "torch_tpu"})
PAGE_TIMEOUT_S = 300

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_TITLE = re.compile(r"""title\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_SNIPPET = re.compile(r"""^(?P<indent>[ \t]*)-{1,}8<-{1,}[ \t]+(?:"(?P<dq>[^"]+)"|'(?P<sq>[^']+)')[ \t]*$""")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    line: int  # 1-based line of the first line of code in the Markdown file
    lang: str
    title: str | None
    source: str

    @property
    def is_python(self) -> bool:
        return self.lang in PYTHON_LANGS

    @property
    def needs_device(self) -> bool:
        return self.title is not None and bool(DEVICE_TITLE.match(self.title))

    @property
    def continues(self) -> bool:
        """The block uses what the block before it defined (title ``Continued...``, or a device ``(continued)``)."""
        if self.title is None:
            return False
        return bool(CONTINUATION_TITLE.match(self.title)) or (self.needs_device and "continued" in self.title.lower())


def _parse_info(info: str) -> tuple[str, str | None]:
    info = info.strip()
    lang = info.split(None, 1)[0].lower() if info else ""
    lang = lang.lstrip("{").lstrip(".")
    match = _TITLE.search(info)
    title = (match.group(1) if match.group(1) is not None else match.group(2)) if match else None
    return lang, title


def _include(spec: str) -> str:
    """Expand one pymdownx.snippets include: ``file``, ``file:start:end`` or ``file:section``."""
    path, start, end, section = spec, None, None, None
    parts = spec.split(":")
    if len(parts) >= 2 and not (ROOT / spec).exists():
        path = parts[0]
        rest = parts[1:]
        if all(p.isdigit() or p == "" for p in rest):
            start = int(rest[0]) if rest[0] else None
            end = int(rest[1]) if len(rest) > 1 and rest[1] else None
        else:
            section = rest[0]
    file = ROOT / path
    if not file.is_file():
        raise FileNotFoundError(f"snippet {spec!r}: {path} does not exist (paths are relative to the repository root)")
    lines = file.read_text(encoding="utf-8").splitlines()
    if section is not None:
        begin = [i for i, ln in enumerate(lines) if re.search(rf"--8<--\s*\[start:{re.escape(section)}\]", ln)]
        stop = [i for i, ln in enumerate(lines) if re.search(rf"--8<--\s*\[end:{re.escape(section)}\]", ln)]
        if not begin or not stop:
            raise ValueError(f"snippet {spec!r}: section {section!r} not found in {path}")
        lines = lines[begin[0] + 1 : stop[0]]
    elif start is not None or end is not None:
        lines = lines[(start or 1) - 1 : end]
    # Section markers inside an included file are not shown on the site either.
    lines = [ln for ln in lines if not re.search(r"--8<--\s*\[(start|end):", ln)]
    return "\n".join(lines)


def _expand(source: str) -> tuple[str, bool]:
    """Expand snippet includes inside a code block; return the code and whether it included any."""
    out, included = [], False
    for line in source.splitlines():
        m = _SNIPPET.match(line)
        if m:
            text = _include(m.group("dq") or m.group("sq"))
            out.append(textwrap.indent(text, m.group("indent")))
            included = True
        else:
            out.append(line)
    return "\n".join(out) + "\n", included


def parse_blocks(path: Path, root: Path = ROOT) -> list[Block]:
    """Return the fenced code blocks of a Markdown page, dedented, includes not expanded."""
    rel = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m.group("indent"), m.group("fence")
        lang, title = _parse_info(m.group("info"))
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        if j >= len(lines):
            raise AssertionError(f"{rel}:{i + 1}: code fence {fence!r} is never closed")
        blocks.append(Block(page=rel, line=i + 2, lang=lang, title=title, source="\n".join(body) + "\n"))
        i = j + 1
    return blocks


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _runnable_pages() -> list[Path]:
    return [p for p in _pages() if any(b.is_python and not b.needs_device for b in parse_blocks(p))]


def _id(path: Path) -> str:
    return path.relative_to(DOCS).as_posix()


# The runner executes one page's blocks in order, in one module namespace. Each
# block is compiled with its page as file name and padded so that line numbers in
# a traceback are the Markdown file's own.
_RUNNER = r"""
import json, os, sys, types
blocks = json.load(open(sys.argv[1], encoding="utf-8"))
top = os.getcwd()
module = None
for number, block in enumerate(blocks):
    if module is None or not block["continues"]:
        # A block that does not continue the one before it runs alone: fresh namespace, empty folder.
        module = types.ModuleType("docs_page")
        module.__file__ = block["page"]
        sys.modules["docs_page"] = module
        folder = os.path.join(top, "block%d_line%d" % (number, block["line"]))
        os.mkdir(folder)
        os.chdir(folder)
    padding = "" if block["included"] else "\n" * (block["line"] - 1)
    name = block["page"] if not block["included"] else block["page"] + " (included at line %d)" % block["line"]
    how = "continues the block above" if block["continues"] else "runs alone"
    print("--- docs test: %s:%d (%s) ---" % (block["page"], block["line"], how), flush=True)
    exec(compile(padding + block["source"], name, "exec"), module.__dict__)
"""


def test_pages_found() -> None:
    assert (DOCS / "index.md").is_file()
    assert _runnable_pages(), "no page has a runnable python block"


@pytest.mark.parametrize("page", _pages(), ids=_id)
def test_code_blocks_are_well_formed(page: Path) -> None:
    """Fences close, no refused languages, device blocks at least compile, includes resolve."""
    for block in parse_blocks(page):
        where = f"{block.page}:{block.line}"
        assert block.lang not in REFUSED_LANGS, f"{where}: write ```python, not ```{block.lang} (it is not executed)"
        if block.title is not None and block.title.lower().startswith("needs") and not block.needs_device:
            pytest.fail(f"{where}: device titles start with a capital 'Needs', e.g. title=\"Needs a Neuron device\"")
        if block.is_python:
            source, _ = _expand(block.source)
            compile(source, where, "exec")
        elif _SNIPPET.search(block.source):
            _expand(block.source)


@pytest.mark.parametrize("page", _runnable_pages(), ids=_id)
@pytest.mark.slow
def test_page_snippets_run(page: Path, tmp_path: Path) -> None:
    blocks = []
    for block in parse_blocks(page):
        if not block.is_python or block.needs_device:
            continue
        source, included = _expand(block.source)
        blocks.append(
            {
                "page": block.page,
                "line": block.line,
                "source": source,
                "included": included,
                "continues": block.continues,
            }
        )
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps(blocks), encoding="utf-8")
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = dict(os.environ)
    env.update(
        {
            "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(tmp_path / "inductor"),
            "MPLBACKEND": "Agg",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    runner = tmp_path / "runner.py"
    runner.write_text(_RUNNER, encoding="utf-8")
    try:
        proc = subprocess.run(
            [sys.executable, str(runner), str(spec)],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=PAGE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{_id(page)}: snippets took longer than {PAGE_TIMEOUT_S} s\n{exc.stdout or ''}{exc.stderr or ''}")
    if proc.returncode != 0:
        stderr = "\n".join(ln for ln in proc.stderr.splitlines() if not ln.startswith("USDT:"))
        pytest.fail(
            f"a python block in docs/{_id(page)} failed (exit {proc.returncode}). Each block runs alone "
            "(fresh namespace and folder) unless its title starts with 'Continued'; see this file's docstring.\n"
            f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{stderr[-6000:]}",
            pytrace=False,
        )


def test_cli_reference_matches_the_parser() -> None:
    """docs/cli.md documents every sub-command and option of `neuronprof`, and no others."""
    from neuronprof.cli import build_parser

    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands = dict(subparsers.choices)
    for name, sub in commands.items():
        assert re.search(rf"^## {re.escape(name)}$", text, re.M), f"docs/cli.md has no '## {name}' section"
        section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in section, f"docs/cli.md, '## {name}': option {option} is not documented"
    documented = set(re.findall(r"^\| \[`([a-z-]+)`\]\(#", text, re.M))
    missing = sorted(documented - set(commands))
    assert not missing, f"docs/cli.md documents command(s) that `neuronprof` does not have: {', '.join(missing)}"


def test_parser_handles_tabs_titles_and_fences(tmp_path: Path) -> None:
    """The block parser itself: indented fences (tabs, admonitions), titles, nested fences."""
    text = (
        '=== "CPU"\n\n'
        "    ```python\n    x = 1\n    ```\n\n"
        '```python title="Needs a Neuron device"\nimport torch_neuronx\n```\n\n'
        "~~~text\n```python\n~~~\n"
    )
    probe = tmp_path / "probe.md"
    probe.write_text(text, encoding="utf-8")
    blocks = parse_blocks(probe, root=tmp_path)
    assert [(b.lang, b.needs_device, b.source) for b in blocks] == [
        ("python", False, "x = 1\n"),
        ("python", True, "import torch_neuronx\n"),
        ("text", False, "```python\n"),
    ]
    assert blocks[0].line == 4


def test_snippet_include_expands_like_the_site() -> None:
    source, included = _expand('--8<-- "pyproject.toml:1:2"\n')
    assert included
    assert source == "\n".join((ROOT / "pyproject.toml").read_text().splitlines()[:2]) + "\n"


def test_reference_trainium_figures_are_labelled_as_the_articles() -> None:
    # The Trainium RMSNorm figures come from the write-up, never from this project: every
    # page or example quoting them says so, and names the build that fills the column.
    quoting = [
        p
        for p in [*(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").glob("*.py"), ROOT / "README.md"]
        if "2355" in p.read_text(encoding="utf-8")
    ]
    assert quoting
    for page in quoting:
        text = " ".join(page.read_text(encoding="utf-8").split())
        assert "correlate_device_time" in text, page
        assert re.search(r"not measured by this project|not this project's measurements", text), page
        assert "reproduces" not in text, page


def test_blocks_that_show_a_prompt_are_console_blocks() -> None:
    # The copy button leaves out the `$ ` prompts and the output of console blocks only
    # (docs/assets/extra.css): a command shown with its prompt in any other block would be
    # copied with the prompt. Included files count as the site shows them.
    wrong = [
        f"{block.page}:{block.line} ({block.lang or 'no language'})"
        for page in _pages()
        for block in parse_blocks(page)
        if block.lang != "console" and any(line.startswith("$ ") for line in _expand(block.source)[0].splitlines())
    ]
    assert wrong == [], f"blocks with `$ ` prompts that are not console blocks: {wrong}"


def _require_call(node: object) -> str | None:
    """The backend name of a ``neuronprof.require_backend("name")`` statement, else None."""
    import ast

    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return None
    call = node.value
    func = call.func
    named = isinstance(func, ast.Attribute) and func.attr == "require_backend"
    named = named or (isinstance(func, ast.Name) and func.id == "require_backend")
    if not named or len(call.args) != 1 or not isinstance(call.args[0], ast.Constant):
        return None
    value = call.args[0].value
    return value if isinstance(value, str) else None


def _device_block_problems(block: Block) -> list[str]:
    """What a ``Needs ...`` block lacks: the registering import first, a doctor hint, real neuronprof names."""
    import ast

    import neuronprof

    where = f"{block.page}:{block.line}"
    source, _ = _expand(block.source)
    tree = ast.parse(source)
    problems = []
    device = next((key for key in DEVICE_BACKENDS if key in (block.title or "")), None)
    wanted = DEVICE_BACKENDS[device] if device is not None else None
    if wanted is not None:
        imports: list[str] = []
        first = None
        for node in tree.body:
            if isinstance(node, ast.Import):
                imports += [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                imports.append(node.module.split(".")[0])
            else:
                first = node
                break
        if REGISTERING_PACKAGES & set(imports):
            problems.append(f"{where}: import the device package through neuronprof.require_backend, not directly")
        if _require_call(first) != wanted:
            problems.append(
                f"{where}: a {device} block's first statement after its imports is "
                f'neuronprof.require_backend("{wanted}") (it registers the device or says what is missing)'
            )
    if device is not None and not block.continues and "neuronprof doctor" not in source:
        problems.append(f"{where}: say `neuronprof doctor` in a comment, for a machine without the device")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "neuronprof":
            if not hasattr(neuronprof, node.attr):
                problems.append(f"{where}: neuronprof has no attribute {node.attr!r}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "neuronprof":
            module = importlib.import_module(node.module)
            problems += [
                f"{where}: {node.module} has no name {alias.name!r}"
                for alias in node.names
                if alias.name != "*" and not hasattr(module, alias.name)
            ]
    return problems


@pytest.mark.parametrize("page", _pages(), ids=_id)
def test_device_blocks_register_their_device(page: Path) -> None:
    """Device-only blocks, checked on a CPU: registering import first, a doctor hint, existing names."""
    device_blocks = [block for block in parse_blocks(page) if block.is_python and block.needs_device]
    problems = [problem for block in device_blocks for problem in _device_block_problems(block)]
    assert not problems, "\n".join(problems)


def test_blocks_run_alone_unless_marked(tmp_path: Path) -> None:
    """The runner gives every unmarked block a fresh namespace: a block that leans on the one above fails."""
    probe = tmp_path / "docs" / "probe.md"
    probe.parent.mkdir()
    probe.write_text(
        '```python\nvalue = 41\n```\n\n```python title="Continued: uses value"\nassert value == 41\n```\n\n'
        "```python\nprint(value)\n```\n",
        encoding="utf-8",
    )
    blocks = [
        {"page": b.page, "line": b.line, "source": b.source, "included": False, "continues": b.continues}
        for b in parse_blocks(probe, root=tmp_path)
    ]
    assert [b["continues"] for b in blocks] == [False, True, False]
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps(blocks), encoding="utf-8")
    runner = tmp_path / "runner.py"
    runner.write_text(_RUNNER, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, str(runner), str(spec)], cwd=work, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "NameError: name 'value' is not defined" in proc.stderr
    assert "probe.md:2 (runs alone)" in proc.stdout and "probe.md:6 (continues the block above)" in proc.stdout


def test_device_block_check_catches_a_bare_block(tmp_path: Path) -> None:
    """A device block without the registering import, the doctor hint or with an unknown name is refused."""
    probe = tmp_path / "probe.md"
    probe.write_text(
        '```python title="Needs a Neuron device"\nimport torch\nimport neuronprof\n'
        'x = torch.ones(2).to("neuron")\nneuronprof.no_such_name()\n```\n\n'
        '```python title="Needs a TPU"\nimport neuronprof\n\n'
        'neuronprof.require_backend("tpu")  # `neuronprof doctor --probe` says what is missing\n```\n',
        encoding="utf-8",
    )
    bare, good = parse_blocks(probe, root=tmp_path)
    problems = _device_block_problems(bare)
    assert len(problems) == 3
    assert 'neuronprof.require_backend("neuron")' in problems[0] and "neuronprof doctor" in problems[1]
    assert "no_such_name" in problems[2]
    assert _device_block_problems(good) == []
    direct = tmp_path / "direct.md"
    direct.write_text(
        '```python title="Needs a Neuron device (continued)"\nimport torch_neuronx\nx = x.to("neuron")\n```\n',
        encoding="utf-8",
    )
    (block,) = parse_blocks(direct, root=tmp_path)
    problems = _device_block_problems(block)
    assert len(problems) == 2 and "not directly" in problems[0] and "require_backend" in problems[1]


_DEVICE_RUNNER = r"""
import json, sys
from neuronprof.backends import get_backend
results = []
for block in json.load(open(sys.argv[1], encoding="utf-8")):
    if get_backend(block["backend"]).is_available():
        results.append({"where": block["where"], "error": None, "message": "available here"})
        continue
    try:
        exec(compile(block["source"], block["where"], "exec"), {"__name__": "__main__"})
    except BaseException as exc:
        kind = type(exc)
        results.append({"where": block["where"], "error": kind.__module__ + "." + kind.__qualname__,
                        "message": str(exc)})
    else:
        results.append({"where": block["where"], "error": "", "message": "ran to the end"})
print(json.dumps(results))
"""


@pytest.mark.slow
def test_device_blocks_stop_with_neuronprofs_message(tmp_path: Path) -> None:
    """On a machine without the device, each device block stops at neuronprof's clear error, not a torch one."""
    blocks = []
    for page in _pages():
        for block in parse_blocks(page):
            device = next((key for key in DEVICE_BACKENDS if key in (block.title or "")), None)
            if block.is_python and block.needs_device and not block.continues and device is not None:
                backend = DEVICE_BACKENDS[device]
                if backend is not None:
                    source, _ = _expand(block.source)
                    blocks.append({"where": f"{block.page}:{block.line}", "source": source, "backend": backend})
    assert len(blocks) >= 6  # getting started, device table, training step, and the backends page
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps(blocks), encoding="utf-8")
    runner = tmp_path / "runner.py"
    runner.write_text(_DEVICE_RUNNER, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(runner), str(spec)], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    wrong = [
        result
        for result in json.loads(proc.stdout.splitlines()[-1])
        if result["message"] != "available here"
        and not (
            result["error"] == "neuronprof.errors.BackendUnavailableError"
            and "neuronprof doctor --probe" in result["message"]
        )
    ]
    assert not wrong, wrong
