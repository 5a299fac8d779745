"""The import rules of docs/architecture.md, checked on the source with ``ast``.

Each rule names the modules it governs by prefix, so a module added to a layer
(a new renderer, a new analysis) is covered as soon as it is in the right folder.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "neuronprof"


@dataclass
class Module:
    name: str
    path: Path
    top: set[str] = field(default_factory=set)  # imported when the module is imported
    lazy: set[str] = field(default_factory=set)  # imported inside a function or for type checking only
    calls: list[tuple[str, str, int]] = field(default_factory=list)  # (function, call text, line)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        parts = parts if is_package else parts[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    # `from neuronprof import _kineto` imports neuronprof._kineto.
    return [base] + [f"{base}.{a.name}" for a in node.names]


def _load(path: Path) -> Module:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    is_package = parts[-1] == "__init__"
    name = ".".join(parts[:-1] if is_package else parts)
    mod = Module(name, path)

    def visit(node: ast.AST, where: str | None, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                names = _absolute(child, name, is_package)
            else:
                names = []
            for n in names:
                (mod.lazy if where or type_only else mod.top).add(n)
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), where, True)
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), where, type_only)
                continue
            if isinstance(child, ast.Call):
                mod.calls.append((where or "<module>", ast.unparse(child), child.lineno))
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.ClassDef):
                inner = where
            visit(child, inner, type_only)

    visit(ast.parse(path.read_text(encoding="utf-8")), None, False)
    return mod


MODULES = {m.name: m for m in (_load(p) for p in sorted(PKG.rglob("*.py")))}


def _in(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _governed(prefixes: tuple[str, ...]) -> list[Module]:
    found = [m for n, m in MODULES.items() if _in(n, prefixes)]
    assert found, f"no module matches {prefixes}: the rule would check nothing"
    return found


def _broken(mods: list[Module], banned: tuple[str, ...], *, anywhere: bool) -> list[str]:
    bad = []
    for m in mods:
        for n in sorted(m.top | (m.lazy if anywhere else set())):
            if _in(n, banned) and not _in(n, (m.name,)):
                bad.append(f"{m.name} imports {n}" + ("" if n in m.top else " (inside a function)"))
    return bad


RENDERERS = (
    "neuronprof.render",
    "neuronprof.report",
    "neuronprof._report_timeline",
    "neuronprof.analysis.render",
    "neuronprof.analysis.neuron._render",
)
WRITERS = ("neuronprof.export", "neuronprof._io")
# The live session: its lifecycle, what it recorded, and the guard of torch's one profiler.
SESSION = ("neuronprof._session", "neuronprof._recording", "neuronprof._recording_export", "neuronprof._guard")
# What reads torch.profiler objects into the model, and writes a recorded cycle's files.
LIVE = ("neuronprof._kineto", "neuronprof._cycle_files")
FRONT_ENDS = (
    *SESSION,
    "neuronprof._kineto",
    "neuronprof._cycle_files",
    "neuronprof._compare",
    "neuronprof.cli",
    "neuronprof.commands",
    "neuronprof.integrations",
)
MODELS = (
    "neuronprof._model_base",
    "neuronprof.model",
    "neuronprof._model_rows",
    "neuronprof._model_ranks",
    "neuronprof._model_comparison",
    "neuronprof.analysis.trace",
    "neuronprof.analysis._diff",
    "neuronprof.analysis._roofline",
    "neuronprof.analysis.flops",
    "neuronprof.analysis.insights",
    "neuronprof.analysis.neuron._model",
)


def test_the_rules_see_every_layer() -> None:
    # A renamed module would silently drop out of a rule: name each layer's modules here.
    for layer in (RENDERERS, WRITERS, MODELS, ("neuronprof.backends",), ("neuronprof.analysis",)):
        for prefix in layer:
            assert _governed((prefix,)), prefix
    assert "neuronprof._io" in MODULES["neuronprof.export"].top


def test_the_model_imports_no_renderer_no_writer_and_no_torch() -> None:
    bad = _broken(
        _governed(MODELS), (*RENDERERS, *WRITERS, *FRONT_ENDS, "neuronprof.backends", "torch"), anywhere=False
    )
    # A model's report()/plot() may call export on use, but never the writer's plumbing itself.
    bad += _broken(_governed(MODELS), ("neuronprof._io", "torch"), anywhere=True)
    assert not bad, "\n".join(bad)


def test_renderers_import_no_writer_no_session_and_no_torch() -> None:
    banned = (*WRITERS, *SESSION, *LIVE, "neuronprof.backends", "torch")
    bad = _broken(_governed(RENDERERS), banned, anywhere=True)
    assert not bad, "\n".join(bad)


def test_analysis_never_imports_torch_or_the_live_session() -> None:
    banned = ("torch", *SESSION, *LIVE, "neuronprof.backends", "neuronprof._compare")
    bad = _broken(_governed(("neuronprof.analysis",)), banned, anywhere=True)
    assert not bad, "\n".join(bad)


def test_backends_import_no_session_renderer_or_writer_and_torch_only_on_use() -> None:
    backends = _governed(("neuronprof.backends",))
    banned = (*SESSION, *LIVE, "neuronprof._compare", *RENDERERS, *WRITERS)
    bad = _broken(backends, banned, anywhere=True)
    bad += _broken(backends, ("torch",), anywhere=False)
    assert not bad, "\n".join(bad)


def test_writers_and_plumbing_import_no_torch_session_or_backend() -> None:
    banned = ("torch", *SESSION, *LIVE, "neuronprof.backends", "neuronprof._compare")
    bad = _broken(_governed(WRITERS), banned, anywhere=True)
    # The plumbing sits under everything: it imports nothing of neuronprof.
    bad += [f"neuronprof._io imports {n}" for n in MODULES["neuronprof._io"].top if n.startswith("neuronprof")]
    # errors and typing are leaves: errors may name typing's option types; typing imports nothing of neuronprof.
    bad += [
        f"neuronprof.errors imports {n}"
        for n in MODULES["neuronprof.errors"].top
        if n.startswith("neuronprof") and not n.startswith("neuronprof.typing")
    ]
    bad += [f"neuronprof.typing imports {n}" for n in MODULES["neuronprof.typing"].top if n.startswith("neuronprof")]
    # The vocabulary, the deprecation and lazy-name helpers are leaves too (anywhere, not only at module level),
    # and none of the plumbing imports torch.
    for leaf in _LEAVES:
        bad += [f"{leaf} imports {n}" for n in MODULES[leaf].top | MODULES[leaf].lazy if n.startswith("neuronprof")]
    plumbing = [MODULES[n] for n in ("neuronprof._io", "neuronprof.errors", "neuronprof.typing", *_LEAVES)]
    bad += _broken(plumbing, ("torch",), anywhere=True)
    # The options: plumbing and backends/base.py's core parsing; torch only inside the checks that need it.
    config = [MODULES["neuronprof._config"]]
    bad += _broken(config, (*SESSION, *LIVE, "neuronprof._compare", *RENDERERS, *WRITERS), anywhere=True)
    bad += _broken(config, ("torch",), anywhere=False)
    assert not bad, "\n".join(bad)


_LEAVES = ("neuronprof._vocabulary", "neuronprof._deprecation", "neuronprof._lazy", "neuronprof._host")


# Calls that write a file. Outside _io.py they may appear only in the content
# functions _io.atomic_write is handed (they write the temporary path it gives them)
# or in the capture of an external tool's output in its private scratch folder.
_WRITES = (
    ".write_text(",
    ".write_bytes(",
    ".savefig(",
    "os.replace(",
    "os.rename(",
    "os.link(",
    "shutil.copy",
    "shutil.move(",
    "copyfileobj(",
)
_WRITE_MODES = ("'w", '"w', "'a", '"a', "'x", '"x', "mode='w", 'mode="w')
ALLOWED_WRITES = {
    # torch's trace, kineto's cache hard-linked, and collapsed stacks: each writes the
    # temporary path _io.atomic_write hands to Session.export's writer.
    ("neuronprof._cycle_files", "_export_cache"),
    ("neuronprof._cycle_files", "write_stacks"),
    # kineto's save with its unescaped names escaped, into the temporary path of _io.atomic_write.
    ("neuronprof._cycle_files", "_write_escaped"),
    # A piped trace's bytes (stdin, a FIFO), copied into the command's private temporary
    # folder, which is removed when the command ends.
    ("neuronprof.analysis._pipes", "_copy"),
    # neuron-explorer's stdout and stderr, redirected into its private scratch folder.
    ("neuronprof.analysis.neuron._tool", "_run"),
}


def _writes(mod: Module) -> list[tuple[str, str, int]]:
    found = []
    for where, call, line in mod.calls:
        head = call.split("(", 1)[0]
        opens = head in ("open", "gzip.open", "io.open") or head.endswith(".open")
        if any(w in call for w in _WRITES) or (opens and any(m in call for m in _WRITE_MODES)):
            found.append((where, call.splitlines()[0][:80], line))
    return found


def test_every_file_write_goes_through_the_one_atomic_writer() -> None:
    assert _writes(MODULES["neuronprof._io"]), "the write check finds nothing even in _io.py"
    bad = []
    for mod in MODULES.values():
        if mod.name == "neuronprof._io":
            continue
        for where, call, line in _writes(mod):
            if (mod.name, where) not in ALLOWED_WRITES:
                bad.append(f"{mod.path.relative_to(SRC)}:{line} in {where}(): {call}")
    assert not bad, "write files through neuronprof._io:\n" + "\n".join(bad)


def test_renderers_return_values_and_write_nothing() -> None:
    bad = [f"{m.name}:{line} {call}" for m in _governed(RENDERERS) for _, call, line in _writes(m)]
    assert not bad, "\n".join(bad)


_DOCS = PKG.parents[1] / "docs"
_API_PAGES = sorted(p.relative_to(_DOCS).as_posix() for p in (_DOCS / "api").glob("*.md"))


@pytest.mark.parametrize("page", _API_PAGES)
def test_the_plumbing_is_out_of_the_api_reference(page: str) -> None:
    docs = PKG.parents[1] / "docs"
    text = (docs / page).read_text(encoding="utf-8")
    for name in ("atomic_write", "ensure_writable_dir", "unique_path", "copy_trace", "neuronprof._io"):
        assert name not in text, f"docs/{page} documents the private writer's {name}"


def test_the_architecture_page_states_the_rules_checked_here() -> None:
    text = (PKG.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    for module in ("_io.py", "export.py", "model.py", "render.py", "report.py", "backends/", "analysis/"):
        assert module in text
    assert "tests/test_architecture.py" in text


# -- module size: a file of src/ over 500 lines says at its top why it stays one module --

MAX_LINES = 500
KEPT = "kept in one module"


def _size_problem(text: str) -> str | None:
    """Why a module's size is not in order, or None: over MAX_LINES lines needs a reason in its docstring.

    The reason is a sentence of the module docstring that contains "kept in one module" and goes
    on to say why (at least a few words after the phrase).
    """
    lines = len(text.splitlines())
    if lines <= MAX_LINES:
        return None
    doc = ast.get_docstring(ast.parse(text)) or ""
    flat = " ".join(doc.split())
    at = flat.find(KEPT)
    reason = flat[at + len(KEPT) :].split(". ")[0] if at >= 0 else ""
    if len(reason.split()) < 6:
        return f"{lines} lines: split it, or say at the top of its docstring why it is {KEPT!r}"
    return None


def _source_files() -> list[object]:
    cases: list[object] = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        cases.append(pytest.param(rel, id=rel))
    return cases


@pytest.mark.parametrize("rel", _source_files())
def test_no_module_is_over_500_lines_without_a_stated_reason(rel: str) -> None:
    problem = _size_problem((SRC / rel).read_text(encoding="utf-8"))
    assert problem is None, f"src/{rel}: {problem}"


def test_the_size_rule_catches_a_long_module_and_accepts_a_stated_reason() -> None:
    body = "x = 1\n" * MAX_LINES
    assert _size_problem('"""Short."""\n' + "x = 1\n" * (MAX_LINES - 1)) is None
    assert _size_problem('"""Short."""\n' + body) is not None
    assert _size_problem(f'"""Long, {KEPT}."""\n' + body) is not None  # the phrase without a reason
    reason = f'"""Parts.\n\nA little over 500 lines, {KEPT} on purpose: its two classes share one state.\n"""\n'
    assert _size_problem(reason + body) is None
    # A comment is not the docstring.
    assert _size_problem(f"# {KEPT} on purpose: its two classes share one state.\n" + body) is not None


def test_what_was_recorded_knows_nothing_of_the_lifecycle_or_the_backends() -> None:
    # table(), export(), roofline(), insights() and report() are functions of a frozen Recording.
    import dataclasses

    from neuronprof._recording import Recording

    assert dataclasses.is_dataclass(Recording) and Recording.__dataclass_params__.frozen  # type: ignore[attr-defined]
    mods = _governed(("neuronprof._recording", "neuronprof._recording_export"))
    assert len(mods) == 2
    assert _broken(mods, ("neuronprof._session", "neuronprof._guard", "neuronprof.backends"), anywhere=True) == []


def _fixed_stacklevel_warnings(text: str) -> list[int]:
    """Lines of ``warnings.warn(..., NeuronProfWarning, stacklevel=N)``: a fixed depth, wrong from another path."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "warnings.warn":
            rest = [*node.args[1:], *(k.value for k in node.keywords if k.arg == "category")]
            if any("NeuronProfWarning" in ast.unparse(c) for c in rest):
                found.append(node.lineno)
    return found


def test_every_warning_to_the_user_names_the_users_line() -> None:
    # A warning with a fixed stacklevel points into neuronprof when it is reached by another
    # path (a with-block's end or stop()); errors.warn_user walks out to the user's frame.
    assert _fixed_stacklevel_warnings("warnings.warn(m, NeuronProfWarning, stacklevel=3)") == [1]
    assert not _fixed_stacklevel_warnings("warn_user(m)")
    bad = [
        f"{m.path.relative_to(SRC)}:{line}"
        for m in MODULES.values()
        for line in _fixed_stacklevel_warnings(m.path.read_text(encoding="utf-8"))
    ]
    assert not bad, "warn through neuronprof.errors.warn_user:\n" + "\n".join(bad)
