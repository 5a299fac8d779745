"""The public surface: names that mean one thing, options typed and documented once, one session config."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import typing
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args, get_origin

import griffe
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import neuronprof
import neuronprof.analysis
import neuronprof.typing as np_typing
from neuronprof import Session, SessionConfig, SessionOptions, compare, session
from neuronprof.analysis import DEVICE_PEAKS

SRC = Path(neuronprof.__file__).parent


def _packages() -> list[Any]:
    found = [neuronprof]
    for info in pkgutil.walk_packages(neuronprof.__path__, "neuronprof."):
        if info.ispkg:
            found.append(importlib.import_module(info.name))
    return found


# -- no module hidden behind a function of the same name ----------------------------


def test_no_package_attribute_shadows_a_submodule() -> None:
    shadowed = []
    for package in _packages():
        for info in pkgutil.iter_modules(package.__path__):
            if not hasattr(package, info.name):
                continue
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            if getattr(package, info.name) is not module:
                shadowed.append(f"{package.__name__}.{info.name}")
    assert shadowed == []


@pytest.mark.parametrize(
    ("owner", "name"), [(neuronprof, "compare"), (neuronprof.analysis, "diff"), (neuronprof.analysis, "roofline")]
)
def test_package_level_functions_are_functions_and_import_as_such(owner: Any, name: str) -> None:
    func = getattr(owner, name)
    assert inspect.isfunction(func)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{owner.__name__}.{name}")
    # `from package import name` gives the same function, whatever was imported before.
    namespace: dict[str, Any] = {}
    exec(f"from {owner.__name__} import {name}", namespace)
    assert namespace[name] is func


# -- every string option: one Literal in neuronprof.typing, documented value by value --


def _literal_values(alias: Any) -> list[str]:
    if get_origin(alias) is typing.Literal:
        return [v for v in get_args(alias) if isinstance(v, str)]
    return [v for arg in get_args(alias) for v in _literal_values(arg)]


_TYPING_DOCS = griffe.load("neuronprof.typing")
_OPTION_TYPES = [n for n in np_typing.__all__ if not n.isupper()]


@pytest.mark.parametrize("name", _OPTION_TYPES)
def test_every_option_value_is_documented(name: str) -> None:
    doc = _TYPING_DOCS[name].docstring
    assert doc is not None, f"{name} has no docstring"
    values = _literal_values(getattr(np_typing, name))
    if name == "Core":  # a grammar, not a set: its forms are documented instead
        values = ["all", "0,1", "2-5"]
    assert values, name
    for value in values:
        assert f'* ``"{value}"``' in doc.value or f'``"{value}"``' in doc.value, f"{name}: {value!r} is not explained"


@pytest.mark.parametrize(
    ("tuple_name", "alias"),
    [("MODES", "Mode"), ("SORT_KEYS", "SortKey"), ("RANKS", "Ranks"), ("EXPORT_FORMATS", "ExportFormat")],
)
def test_value_tuples_are_the_literals(tuple_name: str, alias: str) -> None:
    assert getattr(np_typing, tuple_name) == get_args(getattr(np_typing, alias))


def test_device_presets_are_the_roofline_presets() -> None:
    assert set(get_args(np_typing.DevicePreset)) == set(DEVICE_PEAKS)


def _literal_nodes(path: Path) -> list[int]:
    """Line numbers of ``Literal[...]`` written in a module outside an ``@overload``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    overloads: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            (isinstance(d, ast.Name) and d.id == "overload") for d in node.decorator_list
        ):
            overloads.update(n.lineno for n in ast.walk(node) if hasattr(n, "lineno"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "Literal"
        and node.lineno not in overloads
    ]


# Modules that still define their own Literals, each with the reason.
_OWN_LITERALS = {
    # Output categories of findings (not options); the module is being split into a package.
    "analysis/insights.py",
    "analysis/insights",
    # The demo names of `neuronprof demo` and the verdicts of `doctor --probe` are command-line values.
    "_demo.py",
    "_doctor.py",
    # kineto's category names as a decode type of the typed reader (what a file holds, not an option).
    "analysis/_typed_reader.py",
}


@pytest.mark.slow
def test_literals_are_defined_only_in_neuronprof_typing() -> None:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "typing.py" or rel in _OWN_LITERALS or any(rel.startswith(p + "/") for p in _OWN_LITERALS):
            continue
        lines = _literal_nodes(path)
        if lines:
            found[rel] = lines
    assert found == {}, f"Literal written outside neuronprof.typing (define it there): {found}"


# -- one word per idea ----------------------------------------------------------------


def _public_callables() -> list[tuple[str, Callable[..., Any]]]:
    out: list[tuple[str, Callable[..., Any]]] = []
    for module in (neuronprof, neuronprof.analysis):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                out.append((f"{module.__name__}.{name}", obj))
            elif inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr != "__init__":
                        continue
                    func = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
                    if inspect.isfunction(func):
                        out.append((f"{module.__name__}.{name}.{attr}", func))
    return out


def test_no_public_signature_uses_a_retired_word() -> None:
    retired = {"limit": "row_limit", "time": "time_source"}
    offenders = [
        f"{qualname}({param})"
        for qualname, func in _public_callables()
        for param in inspect.signature(func).parameters
        if param in retired
    ]
    assert offenders == []


def _two_op_trace(tmp_path: Path) -> Path:
    import json

    events = [
        {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}
        for name, ts, dur in (("aten::add", 0, 5), ("aten::mul", 10, 3))
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    return path


def test_old_keywords_still_work_with_a_deprecation_warning(tmp_path: Path) -> None:
    from neuronprof import analysis

    trace = _two_op_trace(tmp_path)
    with pytest.warns(DeprecationWarning, match=r"summarize\(limit=\.\.\.\) is deprecated; use row_limit="):
        old = analysis.summarize(trace, limit=1)
    assert old == analysis.summarize(trace, row_limit=1)
    assert len(old.rows) == 1
    d = analysis.diff(trace, trace)
    # Named by the class the user called it on, not the base class that defines it.
    with pytest.warns(DeprecationWarning, match=r"^TraceDiff\.to_text\(limit=\.\.\.\) is deprecated; use row_limit"):
        assert d.to_text(limit=1) == d.to_text(row_limit=1)
    with pytest.warns(DeprecationWarning, match="row_limit"):
        assert d.to_json(limit=1) == d.to_json(row_limit=1)
    with pytest.raises(TypeError, match="both limit= and row_limit="):
        d.to_text(limit=1, row_limit=1)  # type: ignore[call-arg]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the current names never warn
        analysis.summarize(trace, row_limit=1)


# -- one SessionConfig ----------------------------------------------------------------

_FIELDS = dataclasses.fields(SessionConfig)


def test_session_parameters_are_the_config_fields() -> None:
    params = inspect.signature(session).parameters
    assert list(params) == [f.name for f in _FIELDS]
    for f in _FIELDS:
        assert params[f.name].default == f.default, f.name
        assert params[f.name].annotation == f.type, f.name
    assert inspect.signature(session).return_annotation == "Session"


def test_compare_session_options_are_the_config_fields_but_warmup() -> None:
    fields = {f.name: f.type for f in _FIELDS}
    assert SessionOptions.__annotations__.keys() == fields.keys() - {"warmup"}
    annotations = SessionOptions.__annotations__.items()
    hints = {k: v.__forward_arg__ if hasattr(v, "__forward_arg__") else v for k, v in annotations}
    assert hints == {k: v for k, v in fields.items() if k != "warmup"}
    # compare's own parameters do not collide with a session option, except warmup, which sets it.
    own = set(inspect.signature(compare).parameters) - {"variants", "args", "options"}
    assert own & fields.keys() == {"warmup"}


def test_session_and_session_config_are_one_thing(tmp_path: Path) -> None:
    config = SessionConfig(modes=["runtime", "runtime"], core=0, backend="cpu", active=2, output_dir=str(tmp_path))
    assert config.modes == ("runtime",) and config.core == "0" and config.output_dir == tmp_path
    s = Session(config)
    assert s.config is config and s.active == 2 and s.modes == ("runtime",)
    assert s.output_dir == tmp_path
    assert session(["runtime"], 0, backend="cpu", active=2, output_dir=tmp_path).config == config
    assert Session().config == SessionConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.active = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match="takes a SessionConfig"):
        Session(("device",))  # type: ignore[arg-type]


_VALID = {
    "modes": st.lists(st.sampled_from(np_typing.MODES), min_size=0, max_size=4),
    "core": st.one_of(st.none(), st.integers(0, 64), st.sampled_from(["all", "0,1", "2-5", "0, 2-3"])),
    "backend": st.just("cpu"),
    "wait": st.integers(0, 5),
    "warmup": st.integers(0, 5),
    "active": st.integers(1, 5),
    "repeat": st.integers(0, 5),
    "record_shapes": st.booleans(),
    "with_stack": st.booleans(),
    "profile_memory": st.booleans(),
    "with_flops": st.booleans(),
    "keep_cycles": st.integers(1, 8),
}
_INVALID = {
    "modes": st.sampled_from([("gpu",), 3, ("device", "cpu")]),
    "core": st.sampled_from(["x", "3-1", -1, 1.5, "0 1"]),
    "backend": st.sampled_from(["", 0]),
    "wait": st.sampled_from([-1, 1.0, True, "2"]),
    "warmup": st.sampled_from([-1, 0.5, False]),
    "active": st.sampled_from([0, -1, 1.0]),
    "repeat": st.sampled_from([-1, None]),
    "record_shapes": st.sampled_from([1, "yes", None]),
    "with_stack": st.sampled_from([0, "no"]),
    "keep_cycles": st.sampled_from([0, -2, 2.0]),
    "output_dir": st.sampled_from([3, 1.5]),
}


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({}, optional=_VALID))
def test_session_compare_and_config_accept_the_same_options(options: dict[str, Any]) -> None:
    config = SessionConfig(**options)
    assert session(**options).config == config
    assert dataclasses.replace(config) == config
    # compare() takes the same options (less warmup, its own argument) and checks them before running
    # anything: with repeat=0 it gets as far as refusing the endless schedule, which comes after the config.
    keywords = {k: v for k, v in options.items() if k != "warmup"}
    keywords["repeat"] = 0
    with pytest.raises(ValueError, match="repeat must be at least 1 in compare"):
        compare({"f": lambda: None}, **keywords)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(_INVALID)).flatmap(lambda k: st.tuples(st.just(k), _INVALID[k])))
def test_a_bad_option_is_refused_the_same_way_everywhere(bad: tuple[str, Any]) -> None:
    name, value = bad
    with pytest.raises(ValueError) as from_config:
        SessionConfig(**{name: value})
    assert name in str(from_config.value) or "mode" in str(from_config.value) or "core" in str(from_config.value)
    with pytest.raises(ValueError) as from_session:
        session(**{name: value})
    assert str(from_session.value) == str(from_config.value)
    if name != "warmup":
        with pytest.raises(ValueError) as from_compare:
            compare({"f": lambda: None}, **{name: value})
        assert str(from_compare.value) == str(from_config.value)


# -- every public callable: typed, and each parameter documented -------------------------

_DOCUMENTED_MODULES = (
    "neuronprof",
    "neuronprof.analysis",
    "neuronprof.analysis.neuron",
    "neuronprof.backends",
    "neuronprof.errors",
    "neuronprof.integrations",
)
# The findings module is being split into a package; its own docstrings are checked after that.
_NOT_YET = ("neuronprof.analysis.insights",)


def _public_functions() -> list[Any]:
    loader = griffe.GriffeLoader(docstring_parser=griffe.Parser.google)
    root = loader.load("neuronprof")
    loader.resolve_aliases(implicit=False, external=False)
    seen: dict[str, Any] = {}
    for module_path in _DOCUMENTED_MODULES:
        module = root if module_path == "neuronprof" else root[module_path[len("neuronprof.") :]]
        for name in sorted(module.exports or ()):
            obj = module[name]
            obj = obj.final_target if obj.is_alias else obj
            if obj.path.startswith(_NOT_YET):
                continue
            if obj.is_function:
                seen[obj.path] = obj
            elif obj.is_class:
                for member in obj.members.values():
                    member = member.final_target if member.is_alias else member
                    if member.is_function and (not member.name.startswith("_") or member.name == "__init__"):
                        seen[member.path] = member
    return list(seen.values())


_FUNCTIONS = _public_functions()


def test_the_public_api_is_found() -> None:
    paths = {f.path for f in _FUNCTIONS}
    assert {"neuronprof._session.session", "neuronprof._compare.compare", "neuronprof.model.Table.sorted"} <= paths


@pytest.mark.parametrize("func", _FUNCTIONS, ids=lambda f: f.path)
def test_every_public_parameter_is_typed_and_documented(func: Any) -> None:
    params = [
        p
        for p in func.parameters
        if p.name not in ("self", "cls") and p.kind.value not in ("variadic positional", "variadic keyword")
    ]
    assert [p.name for p in params if p.annotation is None] == [], "parameters without a type"
    if func.name != "__init__":
        assert func.returns is not None, "no return type"
    if not params:
        return
    docstrings = [func.docstring]
    kinds = {griffe.DocstringSectionKind.parameters}
    documented: set[str] = set()
    if func.name == "__init__" and func.docstring is None:
        # A generated or bare __init__: its parameters are the class's documented attributes,
        # in the class docstring or each with its own docstring.
        docstrings = [func.parent.docstring]
        kinds.add(griffe.DocstringSectionKind.attributes)
        documented = {name for name, member in func.parent.members.items() if member.docstring}
    else:
        # An override documents nothing new: the base class's docstring says what its parameters are.
        for base in func.parent.mro() if func.parent.is_class else ():
            if func.name in base.members:
                docstrings.append(base.members[func.name].docstring)
    assert any(d is not None for d in docstrings), "no docstring"
    documented |= {
        p.name
        for d in docstrings
        if d is not None
        for section in d.parse(griffe.Parser.google)
        if section.kind in kinds
        for p in section.value
    }
    assert [p.name for p in params if p.name not in documented] == [], "parameters missing from Args"
