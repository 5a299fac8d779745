"""Public names imported on first use (PEP 562), for the packages whose parts are heavy.

Written here rather than taken from a library: ``lazy_loader`` reads stub files, and the
standard library's ``importlib.util.LazyLoader`` defers whole modules, not names.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["defining_modules", "lazy_names"]


def defining_modules(package: str, modules: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """The module that defines each public name, as ``lazy_names`` imports it (see its ``modules``)."""
    return {
        name: module if module.startswith("neuronprof.") else f"{package}.{module}"
        for module, names in modules.items()
        for name in names
    }


def lazy_names(
    package: str, modules: Mapping[str, Iterable[str]], public: Iterable[str], submodules: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return a package's ``__getattr__`` and ``__dir__``: each public name imported from its module on first use.

    Args:
        package: The package's ``__name__``.
        modules: Per module (relative to the package, or absolute when it starts with
            ``neuronprof.``), the public names it defines.
        public: The package's ``__all__``.
        submodules: Modules that are attributes of the package without their own import.
    """
    where = defining_modules(package, modules)
    subs = tuple(submodules)
    listed = (*public, *subs)

    def __getattr__(name: str) -> Any:
        if name in subs:
            return importlib.import_module(f"{package}.{name}")  # the import sets the attribute
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        vars(sys.modules[package])[name] = value  # later reads are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *listed})

    return __getattr__, __dir__
