"""A real PrivateUse1 profiler backend for CPU-only test machines.

``testbackend.cpp`` is a kineto plugin registered through torch's
``PrivateUse1ProfilerRegistry``. Once a process has called :func:`register`,
``torch.profiler.profile(activities=[CPU, PrivateUse1])`` records a fake
device kernel for each CPU op, so ``key_averages()`` grows real device columns
(``Self NEURON``, ``NEURON total`` ...) and ``export_chrome_trace`` writes
kernel events, a device lane and CPU-to-device flow arrows, exactly as it does
for a real accelerator.

What the plugin puts in a trace (``<name>`` is the registered backend name):

* kernels: ``"cat": "kernel"``, ``"name": "<name>_kernel[<op name>]"``
  (for example ``neuron_kernel[aten::add]``), ``pid`` = device 0,
  ``tid`` = stream 7, args ``device``, ``stream``, ``correlation``,
  ``backend``; each lasts :data:`DEFAULT_KERNEL_NS` ns (see
  :func:`set_kernel_ns`) and they run back to back on the one stream;
* host launch calls: one ``"cat": "privateuse1_runtime"``,
  ``"name": "<name>LaunchKernel"`` event per kernel, nested in the launching
  op on its thread (like ``cudaLaunchKernel``); they are CPU-side events and
  show up as rows in ``key_averages()``; turn them off with
  :func:`set_runtime_events`;
* flows: ``"cat": "ac2g"`` pairs, ``"ph": "s"`` on the launch call and
  ``"ph": "f"`` on the kernel, sharing the correlation id;
* every operator (``ns::name``) launches one kernel except the ops in
  :func:`no_kernel_ops` (views, metadata, allocation, ``aten::to`` /
  ``aten::_to_copy`` wrappers and composites such as ``aten::linear``,
  ``aten::matmul``, ``aten::rms_norm``) and the autograd engine's wrappers
  (``autograd::...``, ``torch::autograd::...``); each
  ``Torch-Compiled Region: ...`` launches one too; other ranges
  (``MmBackward0``, ``TorchDynamo Cache Lookup`` ...) launch nothing. So
  ``Self`` and ``total`` device times differ as on real hardware;
  ``record_function`` ranges and ``ProfilerStep#N`` never launch, and a
  profile without ``ProfilerActivity.PrivateUse1`` gets nothing.

``torch.utils.rename_privateuse1_backend`` works once per process, so a process
can host one backend name only: run each backend in its own subprocess (see
``run_in_subprocess.run_script``).

The plugin also registers a minimal C++ ``DeviceGuardImpl`` for PrivateUse1.
``torch.accelerator.synchronize()`` ends in that guard's ``synchronizeDevice``
(it never calls the Python device module); :func:`guard_sync_calls` counts it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_KERNEL_NS",
    "MODULE_NAME",
    "BackendAlreadyRegistered",
    "DeviceModule",
    "TestBackendUnavailable",
    "build",
    "cache_dir",
    "get_emit",
    "guard_sync_calls",
    "kernel_prefix",
    "no_kernel_ops",
    "register",
    "registered_name",
    "reset_stats",
    "KERNEL_MODES",
    "SessionHook",
    "set_emit",
    "set_kernel_mode",
    "set_kernel_ns",
    "set_session_hook",
    "set_runtime_events",
    "stats",
]

MODULE_NAME = "neuronprof_testbackend"
DEFAULT_KERNEL_NS = 5000

_HERE = Path(__file__).resolve().parent
_SOURCE = _HERE / "testbackend.cpp"
_REPO_ROOT = _HERE.parent.parent
_DEFINES = ["-DUSE_KINETO", "-DFMT_HEADER_ONLY", "-DKINETO_NAMESPACE=libkineto"]

_lock = threading.Lock()
_module: types.ModuleType | None = None
_registered: DeviceModule | None = None


class TestBackendUnavailable(RuntimeError):
    """The test backend cannot be built or loaded here; ``reason`` says why.

    Tests turn this into a skip: ``pytest.skip(exc.reason)``.
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BackendAlreadyRegistered(RuntimeError):
    """This process already renamed PrivateUse1; torch allows that only once."""


def cache_dir() -> Path:
    """Folder holding compiled builds, shared by all test processes.

    ``NEURONPROF_TESTBACKEND_CACHE`` overrides the default
    ``<repo>/.cache/neuronprof-testbackend``.
    """
    override = os.environ.get("NEURONPROF_TESTBACKEND_CACHE")
    if override:
        return Path(override)
    return _REPO_ROOT / ".cache" / "neuronprof-testbackend"


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "c++"))


def _build_key(torch: Any, cxx: str) -> str:
    h = hashlib.sha256()
    h.update(_SOURCE.read_bytes())
    for part in (torch.__version__, sys.version, cxx, " ".join(_DEFINES), MODULE_NAME):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:16]


def _so_path(build_dir: Path) -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    # cpp_extension.load names the library <name>.so on Linux.
    for candidate in (build_dir / f"{MODULE_NAME}.so", build_dir / f"{MODULE_NAME}{suffix}"):
        if candidate.exists():
            return candidate
    return build_dir / f"{MODULE_NAME}.so"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _import_so(so: Path) -> types.ModuleType:
    existing = sys.modules.get(MODULE_NAME)
    if existing is not None:
        return existing
    spec = importlib.util.spec_from_file_location(MODULE_NAME, so)
    if spec is None or spec.loader is None:
        raise TestBackendUnavailable(f"cannot load the test backend library {so}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[MODULE_NAME] = module
    return module


def _compile_directly(cxx: str, build_dir: Path, include_dirs: list[str], lib_dirs: list[str], abi: int) -> None:
    """Build without ninja (cpp_extension.load requires it)."""
    out = build_dir / f"{MODULE_NAME}.so"
    tmp = build_dir / f"{MODULE_NAME}.so.tmp{os.getpid()}"
    cmd = [
        cxx,
        "-shared",
        "-fPIC",
        "-O1",
        "-std=c++17",
        "-w",
        f"-DTORCH_EXTENSION_NAME={MODULE_NAME}",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        *_DEFINES,
        *(f"-I{d}" for d in include_dirs),
        f"-I{sysconfig.get_paths()['include']}",
        str(_SOURCE),
        "-o",
        str(tmp),
        *(f"-L{d}" for d in lib_dirs),
        "-lc10",
        "-ltorch",
        "-ltorch_cpu",
        "-ltorch_python",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-2000:]
        raise TestBackendUnavailable(f"building the test backend failed:\n{tail}")
    os.replace(tmp, out)


def build(*, verbose: bool = False) -> types.ModuleType:
    """Compile (once, cached on disk) and import the plugin; return the module.

    Safe to call from several processes at once: builds are serialised with a
    file lock in :func:`cache_dir`, and a finished build is reused by every
    later process (a cold build takes a few seconds to half a minute).

    Raises:
        TestBackendUnavailable: no C++ compiler, a torch without kineto or
            without the PrivateUse1 profiler registry, or the build failed.
    """
    global _module
    with _lock:
        if _module is not None:
            return _module
        try:
            import torch
            import torch.utils.cpp_extension as cpp_extension
        except ImportError as exc:  # pragma: no cover - torch is a test dependency
            raise TestBackendUnavailable(f"torch is not importable: {exc}") from exc
        if not torch.autograd.kineto_available():
            raise TestBackendUnavailable("this torch build has no kineto profiler")
        include_dirs = list(cpp_extension.include_paths())
        header = "torch/csrc/profiler/standalone/privateuse1_profiler.h"
        if not any((Path(d) / header).exists() for d in include_dirs):
            raise TestBackendUnavailable(f"torch {torch.__version__} has no PrivateUse1 profiler registry ({header})")
        kineto_dirs = [str(Path(d) / "kineto") for d in include_dirs if (Path(d) / "kineto").is_dir()]
        if not kineto_dirs:
            raise TestBackendUnavailable("torch ships no kineto headers (include/kineto)")
        cxx = _compiler()
        if cxx is None:
            raise TestBackendUnavailable(
                f"no C++ compiler found (looked for {os.environ.get('CXX', 'c++')!r}; set CXX)"
            )

        build_dir = cache_dir() / _build_key(torch, cxx)
        # The marker is written only after a complete build, so a process that
        # looks while another one is still linking never loads a partial file.
        done = build_dir / ".complete"
        if not done.exists():
            with _file_lock(cache_dir() / "build.lock"):
                if not done.exists():
                    build_dir.mkdir(parents=True, exist_ok=True)
                    # A build killed half-way leaves cpp_extension's own lock
                    # file behind and the next load() would wait on it forever;
                    # under our lock any such file is stale.
                    (build_dir / "lock").unlink(missing_ok=True)
                    if cpp_extension.is_ninja_available():
                        try:
                            cpp_extension.load(
                                name=MODULE_NAME,
                                sources=[str(_SOURCE)],
                                extra_cflags=["-O1", "-w", *_DEFINES],
                                extra_include_paths=kineto_dirs,
                                build_directory=str(build_dir),
                                verbose=verbose,
                            )
                        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                            raise TestBackendUnavailable(
                                f"building the test backend failed:\n{str(exc)[-2000:]}"
                            ) from exc
                    else:
                        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
                        _compile_directly(
                            cxx,
                            build_dir,
                            include_dirs + kineto_dirs,
                            list(cpp_extension.library_paths()),
                            abi,
                        )
                    done.write_text(str(_so_path(build_dir).name))
        so = _so_path(build_dir)
        try:
            _module = _import_so(so)
        except ImportError as exc:
            raise TestBackendUnavailable(f"the test backend library does not load: {exc}") from exc
        return _module


class DeviceModule(types.ModuleType):
    """The ``torch.<name>`` module :func:`register` installs.

    Counts Python-level synchronisation in ``sync_calls`` (torch.profiler's
    own ``__exit__`` calls ``torch.<name>.synchronize()`` once per profile).
    """

    def __init__(self, name: str) -> None:
        super().__init__(f"torch.{name}", f"Test device module for the {name!r} PrivateUse1 backend.")
        self.backend_name = name
        self.sync_calls = 0
        self.sync_devices: list[Any] = []
        self._initialized = False

    def synchronize(self, device: Any = None) -> None:
        """Count the call; the fake device has nothing in flight."""
        self.sync_calls += 1
        self.sync_devices.append(device)

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def set_device(self, device: Any) -> None:
        index = getattr(device, "index", device)
        if index not in (None, 0):
            raise ValueError(f"the {self.backend_name} test backend has one device (index 0), got {device!r}")

    def is_initialized(self) -> bool:
        return self._initialized

    def _lazy_init(self) -> None:
        self._initialized = True

    def _is_in_bad_fork(self) -> bool:
        return False

    def manual_seed_all(self, seed: int) -> None:
        """Nothing to seed; present so ``torch.manual_seed`` does not warn."""

    def reset_counts(self) -> None:
        self.sync_calls = 0
        self.sync_devices.clear()


def register(name: str, *, emit: bool = True, device_module: DeviceModule | None = None) -> DeviceModule:
    """Make ``name`` a profiled PrivateUse1 backend in this process.

    Builds/loads the plugin, calls ``torch.utils.rename_privateuse1_backend(name)``
    and ``torch._register_device_module(name, module)``. Calling it again with
    the same name returns the same module (and applies ``emit``); any other
    name raises, because torch allows one rename per process.

    Args:
        name: backend name, e.g. ``"neuron"``; table headers become ``Self NEURON``.
        emit: whether the plugin emits device kernels. ``False`` gives profiles
            with no device time at all (no device columns); see :func:`set_emit`.
        device_module: the module to install as ``torch.<name>``; default a
            fresh :class:`DeviceModule`.

    Raises:
        TestBackendUnavailable: the plugin cannot be built here.
        BackendAlreadyRegistered: this process already registered another name,
            or PrivateUse1 was renamed by someone else.
    """
    global _registered
    module = build()
    import torch

    with _lock:
        if _registered is not None:
            if _registered.backend_name != name:
                raise BackendAlreadyRegistered(
                    f"this process already registered the test backend as "
                    f"{_registered.backend_name!r}; torch renames PrivateUse1 once per "
                    f"process, so run {name!r} in a separate subprocess "
                    f"(tests/backends/run_in_subprocess.py: run_script)"
                )
            module.set_emit(bool(emit))
            return _registered
        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", name):
            raise BackendAlreadyRegistered(
                f"PrivateUse1 is already renamed to {current!r} in this process; "
                f"cannot register {name!r} (run it in a separate subprocess)"
            )
        if hasattr(torch, name) and not isinstance(getattr(torch, name), DeviceModule):
            raise BackendAlreadyRegistered(f"torch.{name} already exists and is not a test device module")
        module.set_emit(bool(emit))
        if current != name:
            torch.utils.rename_privateuse1_backend(name)
        existing = getattr(torch, name, None)
        if isinstance(existing, DeviceModule):
            dev = existing
        else:
            dev = device_module if device_module is not None else DeviceModule(name)
            torch._register_device_module(name, dev)
        _registered = dev
        return dev


def registered_name() -> str | None:
    """The backend name :func:`register` installed in this process, if any."""
    return None if _registered is None else _registered.backend_name


def kernel_prefix(name: str | None = None) -> str:
    """Start of every kernel name the plugin emits, e.g. ``"neuron_kernel["``."""
    name = name or registered_name()
    if name is None:
        raise RuntimeError("no test backend registered in this process; call register(name) first")
    return f"{name}_kernel["


def no_kernel_ops() -> tuple[str, ...]:
    """CPU op names that never get a device kernel (sorted)."""
    return tuple(build().no_kernel_ops())


def set_emit(flag: bool) -> None:
    """Turn device-kernel emission on or off for the next profiles."""
    build().set_emit(bool(flag))


def get_emit() -> bool:
    return bool(build().get_emit())


def set_kernel_ns(ns: int) -> None:
    """Duration of every fake kernel in nanoseconds (default 5000)."""
    build().set_kernel_ns(int(ns))


KERNEL_MODES = {"none": 0, "linked": 1, "unlinked": 2}
"""What the plugin emits per op, by name: no kernel, a kernel linked to its op
(as CUDA kernels are, so ops carry device time), or a kernel linked to nothing
(device time only on the kernel rows, as TorchTPU's kernels are)."""


def set_kernel_mode(mode: str) -> None:
    """Choose ``"linked"`` (default), ``"unlinked"`` or ``"none"`` kernels for the next profiles."""
    if mode not in KERNEL_MODES:
        raise ValueError(f"kernel mode must be one of {', '.join(KERNEL_MODES)}, got {mode!r}")
    build().set_kernel_mode(KERNEL_MODES[mode])


SessionHook = Any
"""``hook(event, custom_config, device_requested)``, see :func:`set_session_hook`."""


def set_session_hook(hook: SessionHook | None) -> None:
    """Call ``hook`` when kineto configures and when it stops each profile.

    ``hook("configure", custom_config, device_requested)`` runs when a profile
    is set up; returning ``(kernel_mode, runtime_events)`` (an int from
    :data:`KERNEL_MODES` and a bool) sets what the plugin emits for that
    profile only. ``hook("stop", custom_config, device_requested)`` runs when
    the profile stops, before torch.profiler's ``on_trace_ready``, which is
    when a device runtime writes its own files. Exceptions are printed and
    ignored. ``None`` removes the hook.
    """
    build().set_session_hook(hook)


def set_runtime_events(flag: bool) -> None:
    """Emit (default) or omit the host-side ``<name>LaunchKernel`` events."""
    build().set_runtime_events(bool(flag))


def guard_sync_calls() -> int:
    """How often the C++ PrivateUse1 guard synchronised (``torch.accelerator.synchronize``)."""
    return int(build().guard_sync_calls())


def stats() -> dict[str, Any]:
    """Counters and what the plugin last received.

    Keys: ``emit``, ``runtime_events``, ``kernel_mode``, ``kernel_ns``, ``sessions_configured``,
    ``sessions_started``, ``sessions_processed``, ``correlations_seen``,
    ``correlations_unlinked``, ``correlations_outside_window``,
    ``kernels_emitted``, ``runtime_events_emitted``, ``last_custom_config``
    (the ``custom_profiler_config`` string of the last profile),
    ``custom_configs`` (all of them, in order) and ``last_activity_types``
    (the kineto activity names kineto asked for).
    """
    return dict(build().stats())


def reset_stats() -> None:
    """Zero the plugin counters (and the guard sync counter)."""
    build().reset_stats()
