"""`make quick` (``pytest -m "not slow"``): the marker is registered and leaves a fast selection behind."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def test_the_slow_marker_is_registered(pytestconfig: pytest.Config) -> None:
    names = [line.split(":", 1)[0].strip() for line in pytestconfig.getini("markers")]
    assert "slow" in names
    assert 'pytest -q -m "not slow"' in (TESTS.parent / "Makefile").read_text(encoding="utf-8")


def _is_slow_mark(node: ast.expr) -> bool:
    """``pytest.mark.slow`` (also inside a list of marks)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(_is_slow_mark(e) for e in node.elts)
    return ast.unparse(node) == "pytest.mark.slow"


def _tests(path: Path) -> tuple[int, int]:
    """(quick, slow) test functions of one module, read from its source: a module's ``pytestmark`` or a decorator."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module_slow = any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        and _is_slow_mark(node.value)
        for node in tree.body
    )
    quick = slow = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            if module_slow or any(_is_slow_mark(d) for d in node.decorator_list):
                slow += 1
            else:
                quick += 1
    return quick, slow


def test_the_quick_selection_keeps_most_tests_and_leaves_out_some() -> None:
    counts = [_tests(p) for p in sorted(TESTS.rglob("test_*.py")) if "cases" not in p.parts]
    quick = sum(q for q, _ in counts)
    slow = sum(s for _, s in counts)
    # Test functions, before parametrisation: the slow ones are the few that take most of the time.
    assert slow > 0 and quick > 3 * slow, (quick, slow)


def test_the_examples_story_is_in_the_quick_loop_and_its_subprocess_runs_are_not() -> None:
    import test_training_step as t

    def marks(fn: object) -> set[str]:
        return {m.name for m in getattr(fn, "pytestmark", [])}

    assert "slow" not in marks(t.test_the_examples_recorded_steps_lead_with_the_input_pipeline)
    assert "slow" in marks(t.test_copied_training_script_prints_table_and_findings)
