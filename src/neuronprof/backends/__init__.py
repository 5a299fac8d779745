"""Backends: one module per device family, and the registry that picks one.

``backend="auto"`` tries, in order: a PrivateUse1 backend already registered in
this process (``neuron`` and ``tpu`` get their own adapters), then Neuron, TPU,
CUDA, any backend added with [`register_backend`][neuronprof.backends.register_backend],
and finally the CPU. Optional packages are looked up with
``importlib.util.find_spec`` before anything is imported, so ``auto`` stays fast
and quiet on a laptop.
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

from neuronprof.backends.base import (
    MODES,
    Backend,
    DeviceFiles,
    DeviceTime,
    Mode,
    SessionContext,
    add_note,
    parse_core,
    privateuse1_name,
)
from neuronprof.backends.cpu import CpuBackend
from neuronprof.backends.cuda import CudaBackend
from neuronprof.backends.neuron import NeuronBackend
from neuronprof.backends.privateuse1 import PrivateUse1Backend, _PackagedPrivateUse1Backend
from neuronprof.backends.tpu import TpuBackend
from neuronprof.errors import BackendUnavailableError
from neuronprof.typing import BackendName

__all__ = [
    "MODES",
    "Backend",
    "CpuBackend",
    "CudaBackend",
    "DeviceFiles",
    "DeviceTime",
    "Mode",
    "NeuronBackend",
    "PrivateUse1Backend",
    "SessionContext",
    "TpuBackend",
    "add_note",
    "format_writers",
    "get_backend",
    "installed_but_unusable",
    "parse_core",
    "register_backend",
    "registered_backends",
    "require_backend",
    "resolve_backend",
    "unregister_backend",
]

_BUILTIN_ORDER = ("neuron", "tpu", "cuda")
_lock = threading.Lock()
_registry: dict[str, Backend] = {}


def _builtins() -> dict[str, Backend]:
    return {"neuron": NeuronBackend(), "tpu": TpuBackend(), "cuda": CudaBackend(), "cpu": CpuBackend()}


def _ensure_builtins() -> None:
    if not _registry:
        _registry.update(_builtins())


def register_backend(backend: Backend, *, replace: bool = False) -> None:
    """Add a backend to the registry so ``session(backend=name)`` can use it.

    Args:
        backend: The backend instance; its ``name`` is the key.
        replace: Allow replacing a backend already registered under that name.

    Raises:
        TypeError: ``backend`` is not a [`Backend`][neuronprof.backends.Backend].
        ValueError: The name is taken (and ``replace`` is False) or is ``"auto"``.
    """
    if not isinstance(backend, Backend):
        raise TypeError(f"expected a neuronprof.backends.Backend, got {type(backend).__name__}")
    if backend.name == "auto":
        raise ValueError("'auto' is reserved for automatic selection")
    with _lock:
        _ensure_builtins()
        if backend.name in _registry and not replace:
            raise ValueError(f"a backend named {backend.name!r} is already registered; pass replace=True")
        _registry[backend.name] = backend


def unregister_backend(name: str) -> None:
    """Remove a backend from the registry; built-in ones come back on the next lookup.

    Args:
        name: The name it was registered under.
    """
    with _lock:
        _registry.pop(name, None)
        if not _registry:
            return
        for key, value in _builtins().items():
            _registry.setdefault(key, value)


def registered_backends() -> list[str]:
    """Return the names of all registered backends, in ``auto`` order."""
    with _lock:
        _ensure_builtins()
        names = list(_registry)
    ordered = [n for n in _BUILTIN_ORDER if n in names]
    ordered += [n for n in names if n not in ordered and n != "cpu"]
    return ordered + (["cpu"] if "cpu" in names else [])


def format_writers(format: str) -> list[str]:
    """Return the names of the registered backends whose own files make the export format ``format``.

    Args:
        format: An [`ExportFormat`][neuronprof.typing.ExportFormat] (``"neuron"``: the
            backends listing it in their ``export_formats``).
    """
    with _lock:
        _ensure_builtins()
        backends = list(_registry.values())
    return [b.name for b in backends if format in b.export_formats]


def get_backend(name: str) -> Backend:
    """Return the backend registered as ``name``.

    A PrivateUse1 device renamed to ``name`` in this process is found even when it
    was never registered; it gets the generic PrivateUse1 adapter.

    Args:
        name: A registered backend's name (``"neuron"``, ``"cpu"``...) or a PrivateUse1 device's.

    Raises:
        ValueError: No backend of that name exists.
    """
    with _lock:
        _ensure_builtins()
        found = _registry.get(name)
    if found is not None:
        return found
    current = privateuse1_name()
    if name in ("privateuse1", "privateuseone") and current is not None:
        return get_backend(current)
    if current == name:
        return PrivateUse1Backend(name)
    raise ValueError(
        f"unknown backend {name!r}; use 'auto' or one of: {', '.join(registered_backends())}"
        + (f" (or the PrivateUse1 backend {current!r})" if current else "")
    )


def resolve_backend(name: BackendName = "auto") -> tuple[Backend, list[str]]:
    """Pick the backend for a session.

    Args:
        name: ``"auto"`` or a backend name.

    Returns:
        The backend and notes on what ``auto`` skipped and why.

    Raises:
        BackendUnavailableError: A named backend cannot run here; the message says how to fix it.
        ValueError: The name is unknown.
    """
    if not isinstance(name, str):
        raise TypeError(f"backend must be a string, got {type(name).__name__}")
    if name != "auto":
        backend = get_backend(name)
        if not backend.is_available():
            raise BackendUnavailableError(
                f"backend {name!r} is unavailable: {backend.unavailable_reason()}. {_DOCTOR_HINT}"
            )
        return backend, []
    notes: list[str] = []
    candidates: list[Backend] = []
    current = privateuse1_name()
    if current is not None:
        candidates.append(get_backend(current))
    candidates += [get_backend(n) for n in registered_backends() if n != current]
    for backend in candidates:
        if backend.is_available():
            return backend, notes
        unusable = installed_but_unusable(backend)
        if unusable is not None:
            # Not a missing package but one that cannot work here: the user must hear it.
            logging.getLogger("neuronprof").warning("auto: skipped %s: %s", backend.name, unusable)
        notes.append(f"auto: skipped {backend.name}: {unusable or backend.unavailable_reason()}")
    raise BackendUnavailableError("no backend is available, not even the CPU")  # pragma: no cover


_DOCTOR_HINT = "Run `neuronprof doctor --probe` to see what this machine can profile."


def require_backend(name: BackendName = "auto") -> str:
    """Make sure a backend can run here before any model or tensor is moved to its device.

    Imports the package that registers the device (``torch_neuronx`` for ``"neuron"``,
    ``torch_tpu`` for ``"tpu"``), checks that torch sees the device, and returns the
    device name to pass to ``.to(...)``. Call it first in a script for an accelerator:
    on a machine without the device the user then gets this clear message instead of
    a ``ModuleNotFoundError`` or torch's ``Expected one of cpu, cuda, ...`` at ``.to(device)``.

    ```python
    import neuronprof

    device = neuronprof.require_backend("cpu")  # "neuron", "tpu", "cuda" on an accelerator
    ```

    Args:
        name: A backend name (see [`BackendName`][neuronprof.typing.BackendName]); ``"auto"``
            returns the backend a session with ``backend="auto"`` would pick.

    Returns:
        The backend's name, which is also its torch device type (``"neuron"``, ``"tpu"``,
        ``"cuda"``, ``"cpu"`` or a PrivateUse1 device's name).

    Raises:
        BackendUnavailableError: The backend cannot run here (package missing, no device
            visible, torch too old); the message says why and to run ``neuronprof doctor --probe``.
        ValueError: The name is unknown.
        TypeError: The name is not a string.
    """
    return resolve_backend(name)[0].name


def installed_but_unusable(backend: Backend) -> Optional[str]:
    """Say why a backend whose device package is installed still cannot run (``None`` otherwise).

    For example TorchTPU on torch < 2.12: the package imports, but its profiler plugin
    needs a newer torch. ``auto`` then falls back to the CPU; this is what to tell the user.

    Args:
        backend: The backend to ask about.
    """
    if not isinstance(backend, _PackagedPrivateUse1Backend) or backend.is_available():
        return None
    if backend._import() is None:
        return None
    problem = backend.torch_problem()
    return f"{backend.package} is installed but unusable: {problem}" if problem else None


def describe_backends() -> list[dict[str, object]]:
    """Return, for ``neuronprof doctor``, each backend's availability and the reason when not."""
    out: list[dict[str, object]] = []
    names = registered_backends()
    current = privateuse1_name()
    if current is not None and current not in names:
        names.insert(0, current)
    for n in names:
        b = get_backend(n)
        ok = b.is_available()
        out.append({"name": n, "available": ok, "reason": None if ok else b.unavailable_reason()})
    return out


def auto_choice() -> Optional[str]:
    """Return the name ``backend="auto"`` would pick now."""
    try:
        return resolve_backend("auto")[0].name
    except BackendUnavailableError:  # pragma: no cover
        return None
