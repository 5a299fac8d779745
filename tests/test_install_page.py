"""Install's two ways to get neuronprof, tried as the page writes them, from an empty folder.

The page's "get the source" block comes from ``repo_url`` (scripts/docs_hooks.py): the clone
command when the address is set, no address at all when it is not. Here the address is this
repository itself (a local clone works as a remote would), and each console block of the
section is run in an empty folder: the clone, ``pip install .``, ``python -m build`` and the
wheel's install. The installs go to a folder of their own (``--target``, ``--no-deps``) so
that the test leaves its own environment as it was; the rest is the page's commands.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts" / "docs_hooks.py")
assert _spec is not None and _spec.loader is not None
docs_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_hooks)

PAGE = ROOT / "docs" / "install.md"


def _section(markdown: str) -> str:
    return markdown.split("## 2. neuronprof", 1)[1].split("\n## ", 1)[0]


def _commands(section: str) -> list[str]:
    """The ``$ `` lines of the section's console blocks, comments dropped."""
    blocks = re.findall(r"```console\n(.*?)```", section, re.S)
    lines = [line[2:].split("  #", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line]


def test_without_repo_url_the_page_shows_no_address() -> None:
    section = _section(docs_hooks.on_page_markdown(PAGE.read_text(encoding="utf-8"), None, {"repo_url": None}, None))
    assert docs_hooks.MARKER not in section
    assert "git clone" not in section and "://" not in section.split("Or build a wheel", 1)[0]
    assert _commands(section)[:2] == ["cd neuronprof", "pip install ."]


def test_with_repo_url_the_page_shows_its_clone_command() -> None:
    url = "https://example.org/team/neuronprof.git"
    section = _section(docs_hooks.on_page_markdown(PAGE.read_text(encoding="utf-8"), None, {"repo_url": url}, None))
    assert _commands(section)[:3] == [f"git clone {url}", "cd neuronprof", "pip install ."]


def _run(cmd: str, cwd: Path, target: Path) -> subprocess.CompletedProcess[str]:
    """Run one of the page's commands; pip and python are this interpreter's, installs go to ``target``."""
    args = shlex.split(cmd)
    if args[0] == "pip":
        args = [sys.executable, "-m", "pip", *args[1:]]
        if args[3] == "install":
            args[4:4] = ["-q", "--no-deps", "--target", str(target)]
    elif args[0] == "python":
        args[0] = sys.executable
    if any("*" in a for a in args):  # the shell's glob, as in `pip install dist/neuronprof-*.whl`
        args = [str(p) for a in args for p in (sorted(cwd.glob(a)) if "*" in a else [a])]
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)


def _imports_from(target: Path) -> str:
    code = "import neuronprof; print(neuronprof.__file__)"
    env = dict(os.environ, PYTHONPATH=str(target))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=target.parent)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a clone")
@pytest.mark.skipif(importlib.util.find_spec("build") is None, reason="`build` comes with the dev extra")
@pytest.mark.slow
def test_each_install_path_of_the_page_works_from_an_empty_folder(tmp_path: Path) -> None:
    markdown = docs_hooks.on_page_markdown(PAGE.read_text(encoding="utf-8"), None, {"repo_url": ROOT.as_uri()}, None)
    commands = _commands(_section(markdown))
    here = tmp_path / "empty"
    here.mkdir()
    source_target, wheel_target = tmp_path / "from-source", tmp_path / "from-wheel"
    target = source_target
    for cmd in commands:
        if cmd.startswith("cd "):
            here = here / cmd[3:]
            continue
        if "[plot]" in cmd or cmd == "pip install build":  # the optional extra; `build`, already here
            continue
        if "build" in cmd:
            target = wheel_target
        proc = _run(cmd, here, target)
        assert proc.returncode == 0, f"$ {cmd}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    # The clone has the source, the wheel was built from it, and each install imports.
    assert (here / "pyproject.toml").is_file()
    assert list((here / "dist").glob("neuronprof-*-py3-none-any.whl"))
    assert _imports_from(source_target).startswith(str(source_target))
    assert _imports_from(wheel_target).startswith(str(wheel_target))
