"""The architecture guide's "Where new code goes" is enough: a toy backend, finding and export format.

The test copies ``src/neuronprof`` into a temporary folder and writes there exactly the files the
guide names for a new backend, a new finding and a new export format (the ``.py`` names followed by
what goes in them in parentheses), nothing else; a session on the toy backend in a subprocess, with
the copy on ``PYTHONPATH``, then shows the toy finding and writes the toy format. A step the guide
stops naming, or one that stops being enough, fails here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import neuronprof

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "architecture.md"
PLACEHOLDERS = {"<name>": "toy", "<topic>": "step"}


def _entry(title: str) -> str:
    """The text of one entry ("- **A new backend**...") of the guide's "Where new code goes"."""
    section = GUIDE.read_text(encoding="utf-8").split("## Where new code goes", 1)[1].split("\n## ", 1)[0]
    entries = re.split(r"\n(?=- \*\*)", section)
    found = [e for e in entries if e.startswith(f"- **{title}**")]
    assert len(found) == 1, f"the guide has no single entry {title!r}"
    return " ".join(found[0].split())


def _named_files(title: str) -> set[str]:
    names = re.findall(r"`([\w<>/]+\.py)` \(", _entry(title))
    files = set()
    for name in names:
        for placeholder, value in PLACEHOLDERS.items():
            name = name.replace(placeholder, value)
        files.add(name)
    return files


def _insert_after(text: str, anchor: str, addition: str) -> str:
    assert text.count(anchor) == 1, anchor
    return text.replace(anchor, anchor + addition)


def _edits(package: Path) -> dict[str, dict[str, str]]:
    """What the test writes for each entry: the new text of each file, keyed by path in the package."""

    def read(name: str) -> str:
        return (package / name).read_text(encoding="utf-8")

    backend = {
        "backends/toy.py": (
            '"""A toy device: the CPU under another name."""\n\n'
            "from neuronprof.backends.base import Backend\n\n\n"
            "class ToyBackend(Backend):\n"
            '    name = "toy"\n\n'
            "    def is_available(self) -> bool:\n"
            "        return True\n"
        ),
        "backends/__init__.py": _insert_after(
            _insert_after(read("backends/__init__.py"), '"cpu": CpuBackend()', ', "toy": ToyBackend()'),
            "from neuronprof.backends.tpu import TpuBackend\n",
            "from neuronprof.backends.toy import ToyBackend\n",
        ),
    }
    findings = read("analysis/insights/_findings.py")
    findings = _insert_after(findings, "FindingKind = Literal[\n", '    "toy_finding",\n')
    findings = _insert_after(
        findings,
        '"""What a finding is about; stable names, used as anchors of the guide page.\n',
        '\n* ``"toy_finding"``: raised on every profile, to show where a finding goes.\n',
    )
    findings = _insert_after(findings, "SECTIONS: dict[str, str] = {\n", '    "toy_finding": "A toy finding",\n')
    finding = {
        "analysis/insights/_findings.py": findings,
        "analysis/insights/_step_rules.py": read("analysis/insights/_step_rules.py")
        + (
            "\n\ndef _toy(p: _Profile) -> list[Finding]:\n"
            '    """``toy_finding``: on every profile."""\n'
            '    return [Finding("toy_finding", "A toy finding", Evidence(()), None, "nothing: it is a toy")]\n\n\n'
            "RULES = (*RULES, _toy)\n"
        ),
    }
    kind = 'ExportFormat = Literal["chrome", "tensorboard", "neuron", "stacks"'
    typing = _insert_after(read("typing.py"), kind, ', "toy"')
    typing = _insert_after(
        typing,
        '"""What ``Session.export(format=...)`` writes.\n',
        '\n* ``"toy"``: which cycle it is, in a text file.\n',
    )
    writer = """


def _write_toy(rec: Recording, chosen: _kineto.Cycle, path: Optional[PathLike], overwrite: bool) -> Path:
    def write(dest: Path) -> None:
        dest.write_text(f"cycle {chosen.index} of {rec.cycle_count}\\n", encoding="utf-8")

    return atomic_write(target_path(rec, path, suffix=".toy.txt"), write, overwrite=overwrite)


FORMATS["toy"] = _write_toy
"""
    export = {"typing.py": typing, "_recording_export.py": read("_recording_export.py") + writer}
    return {"A new backend": backend, "A new finding": finding, "A new export format": export}


SCRIPT = """
import json, sys
import torch
import neuronprof

with neuronprof.session(backend="toy", output_dir=sys.argv[1], wait=0, warmup=0, active=2) as s:
    for _ in s.steps():
        torch.ones(8, 8) @ torch.ones(8, 8)
written = s.export(format="toy")
print(json.dumps({
    "module": neuronprof.__file__,
    "backend": s.backend,
    "kinds": s.insights().kinds(),
    "written": str(written),
    "content": open(written, encoding="utf-8").read(),
}))
"""


@pytest.mark.slow  # a subprocess that imports torch and runs a first profile
def test_the_guide_names_every_file_a_toy_backend_finding_and_format_need(tmp_path: Path) -> None:
    source = Path(neuronprof.__file__).parent
    copy = tmp_path / "src" / "neuronprof"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for title, files in _edits(copy).items():
        assert set(files) == _named_files(title), f"{title}: the guide names other files than these"
        for name, text in files.items():
            (copy / name).write_text(text, encoding="utf-8")

    env = {**os.environ, "PYTHONPATH": str(copy.parent), "PYTHONDONTWRITEBYTECODE": "1"}
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["module"]).parent == copy
    assert result["backend"] == "toy"
    assert "toy_finding" in result["kinds"]
    assert Path(result["written"]).parent == out and result["written"].endswith(".toy.txt")
    assert result["content"] == "cycle 0 of 1\n"
