"""The options of a profiling session, held once: [`SessionConfig`][neuronprof.SessionConfig].

[`session()`][neuronprof.session], [`Session`][neuronprof.Session] and
[`compare()`][neuronprof.compare] all take these options; each builds one
``SessionConfig`` and works from it, so an option is checked in one place and
means the same everywhere. ``tests/test_public_api.py`` keeps the spelled-out
signatures (``session()``'s parameters, compare's ``SessionOptions``) equal to
the fields here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

from typing_extensions import TypedDict

from neuronprof.backends.base import parse_core
from neuronprof.typing import MODES, BackendName, Core, Mode

__all__ = ["DEFAULT_MODES", "DEFAULT_OUTPUT_DIR", "PathLike", "SessionConfig", "SessionOptions", "modes_given"]

PathLike = Union[str, "os.PathLike[str]"]
"""A file or folder path: a ``str`` or a ``pathlib.Path`` (any ``os.PathLike[str]``)."""


class _DefaultModes(tuple):
    """The default modes, told apart from the same modes passed by the user (by type, not value)."""

    __slots__ = ()


DEFAULT_MODES: tuple[Mode, ...] = _DefaultModes(("device", "runtime"))
"""The modes a session asks for when none are passed: ``("device", "runtime")``. A backend
that cannot capture them ignores them silently; modes passed by the user that a backend
cannot capture get a note."""


def modes_given(modes: Sequence[Mode]) -> bool:
    """Whether ``modes`` were passed by the user rather than left at [`DEFAULT_MODES`][neuronprof.SessionConfig]."""
    return not isinstance(modes, _DefaultModes)


DEFAULT_OUTPUT_DIR = "neuronprof_output"
"""Where a session writes when ``output_dir`` is None, relative to the working directory."""


def _check_count(name: str, value: Any, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    if value < minimum:
        if name == "active":
            raise ValueError("active must be at least 1: it is the number of steps that are recorded")
        if name == "keep_cycles":
            raise ValueError("keep_cycles must be at least 1: the last cycle's events are always kept")
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


def _check_modes(modes: Any) -> tuple[Mode, ...]:
    if isinstance(modes, str):
        modes = (modes,)
    try:
        items = tuple(modes)
    except TypeError:
        raise ValueError(f"modes must be a sequence of strings such as ('device', 'runtime'), got {modes!r}") from None
    for m in items:
        if m not in MODES:
            raise ValueError(f"unknown mode {m!r}; valid modes: {', '.join(MODES)}")
    return tuple(dict.fromkeys(items))


def _torch_supports_all_threads() -> bool:
    from torch._C._profiler import _ExperimentalConfig

    return "profile_all_threads" in (_ExperimentalConfig.__init__.__doc__ or "")


@dataclasses.dataclass(frozen=True)
class SessionConfig:
    """Every option of a profiling session, checked once when it is built.

    [`neuronprof.session(...)`][neuronprof.session] takes these as keywords and
    builds one; build it yourself to keep a configuration, change one field with
    ``dataclasses.replace(config, active=5)``, or hand it to
    [`Session(config)`][neuronprof.Session]. Building one imports no torch (except
    ``profile_all_threads=True``, which asks torch whether it can) and touches no
    file: the backend is resolved and ``output_dir`` created when the session is made.

    ```python
    config = neuronprof.SessionConfig(modes=("device",), core="0", active=3)
    with neuronprof.Session(config) as s:
        for _ in s.steps():
            model(x)
    ```

    Raises:
        ValueError: A mode, core, schedule number or flag is invalid; the message
            names the option and the values it takes.
    """

    modes: Sequence[Mode] = DEFAULT_MODES
    """What to capture (default ``("device", "runtime")``); see [`Mode`][neuronprof.typing.Mode].
    Stored as a tuple without repeats."""
    core: Core = None
    """Device cores to capture and synchronise; see [`Core`][neuronprof.typing.Core]. Stored in
    canonical form (``"0,2-3"``, ``"all"``) or None."""
    backend: BackendName = "auto"
    """Which backend to use; see [`BackendName`][neuronprof.typing.BackendName]."""
    wait: int = 2
    """Steps skipped at the start of each cycle (>= 0)."""
    warmup: int = 1
    """Steps profiled but discarded, so that one-time costs (compilation, caches) stay out (>= 0)."""
    active: int = 1
    """Steps recorded per cycle (>= 1)."""
    repeat: int = 1
    """Number of wait/warmup/active cycles (>= 0; 0: until the block ends, stepping by hand)."""
    output_dir: Optional[PathLike] = None
    """Folder for traces and backend files; None means ``./neuronprof_output``. Stored as a ``Path``."""
    record_shapes: bool = False
    """Record input shapes (rows are split per shape)."""
    with_stack: bool = False
    """Record Python stacks (larger traces)."""
    profile_memory: bool = False
    """Record memory allocated per op."""
    with_flops: bool = False
    """Estimate FLOPs of matrix multiplications and convolutions."""
    keep_cycles: int = 4
    """How many of the last cycles keep their raw events for ``export()`` (>= 1)."""
    profile_all_threads: bool = False
    """Record ops of every thread, not only the one that started the session."""
    max_events_per_nc: Optional[int] = None
    """Neuron only: Neuron Runtime's cap on the events it captures per NeuronCore (>= 1); None keeps
    Neuron's default (1,000,000). Events past the cap are dropped by the runtime; other backends ignore it."""

    def __post_init__(self) -> None:
        # Frozen: normalised values are written once, here, through object.__setattr__.
        set_ = object.__setattr__
        if modes_given(self.modes):
            set_(self, "modes", _check_modes(self.modes))
        set_(self, "core", parse_core(self.core))
        if not isinstance(self.backend, str) or not self.backend:
            raise ValueError(f"backend must be a name such as 'auto', 'neuron' or 'cpu', got {self.backend!r}")
        for name in ("wait", "warmup", "repeat"):
            _check_count(name, getattr(self, name))
        _check_count("active", self.active, minimum=1)
        _check_count("keep_cycles", self.keep_cycles, minimum=1)
        for flag in ("record_shapes", "with_stack", "profile_memory", "with_flops", "profile_all_threads"):
            value = getattr(self, flag)
            if not isinstance(value, bool):
                raise ValueError(f"{flag} must be True or False, got {value!r}")
        if self.max_events_per_nc is not None:
            _check_count("max_events_per_nc", self.max_events_per_nc, minimum=1)
        if self.output_dir is not None:
            if not isinstance(self.output_dir, (str, os.PathLike)):
                raise ValueError(f"output_dir must be a path or None, got {type(self.output_dir).__name__}")
            set_(self, "output_dir", Path(self.output_dir))
        if self.profile_all_threads and not _torch_supports_all_threads():
            raise ValueError(
                "profile_all_threads=True needs a torch whose profiler can record every thread "
                "(_ExperimentalConfig(profile_all_threads=...), torch >= 2.7); this torch cannot"
            )

    @property
    def total_steps(self) -> Optional[int]:
        """Steps the schedule needs: ``(wait + warmup + active) * repeat``; None if ``repeat`` is 0."""
        if self.repeat == 0:
            return None
        return (self.wait + self.warmup + self.active) * self.repeat


class SessionOptions(TypedDict, total=False):
    """The session options [`compare`][neuronprof.compare] accepts as keywords.

    They are [`SessionConfig`][neuronprof.SessionConfig]'s fields, less ``warmup``
    (compare's own ``warmup`` argument sets it, at least 1), and mean what they
    mean there; they are the same for every variant. ``compare()`` changes two
    defaults: ``wait=0`` (the variants are warm by the time they are profiled) and
    ``active=3`` (self times are averaged over three steps).
    """

    modes: Sequence[Mode]
    core: Core
    backend: BackendName
    wait: int
    active: int
    repeat: int
    output_dir: Optional[PathLike]
    record_shapes: bool
    with_stack: bool
    profile_memory: bool
    with_flops: bool
    keep_cycles: int
    profile_all_threads: bool
    max_events_per_nc: Optional[int]
