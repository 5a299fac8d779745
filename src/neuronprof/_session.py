"""The profiling session: validate, start, step with a device sync, stop.

A [`Session`][neuronprof.Session] owns the torch.profiler lifecycle and nothing
else. What it recorded is turned into the model by ``_collect`` and written by
``export``; the session only orchestrates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import types
import warnings
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, TypeVar, Union, overload

from neuronprof import _collect
from neuronprof import _vocabulary as vocab
from neuronprof._config import DEFAULT_OUTPUT_DIR, PathLike, SessionConfig
from neuronprof._io import atomic_write, ensure_writable_dir, text_writer, unique_path
from neuronprof.backends import SessionContext, resolve_backend
from neuronprof.errors import NeuronProfWarning, SessionStateError
from neuronprof.export import EXPORT_FORMATS, ExportFormat, default_trace_name, neuron_bundle, tensorboard_file_name
from neuronprof.model import SORT_KEYS, RankTable, SortKey, Table
from neuronprof.typing import RANKS, BackendName, Core, DevicePreset, Mode, Ranks

if TYPE_CHECKING:
    import torch.profiler

    from neuronprof.analysis import DevicePeak, NeuronProfile, Roofline
    from neuronprof.analysis.insights import Insights
    from neuronprof.analysis.neuron import ToolChoice
    from neuronprof.analysis.neuron.session import SessionNeuronProfile

__all__ = ["Session", "SessionConfig", "session"]

logger = logging.getLogger("neuronprof")

T = TypeVar("T")

# One profiler per process: torch.profiler's state is global, so a second
# session would silently corrupt the first. The lock is taken without blocking.
_active_lock = threading.Lock()
_active: Optional[Session] = None

# Signals whose Python handlers are held back while torch.profiler changes state
# (see _signals_deferred): Ctrl-C, termination requests, timers, user signals.
_DEFERRED_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGALRM", "SIGVTALRM", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)


def _distributed_rank() -> tuple[Optional[int], Optional[int]]:
    """Return (rank, world size) under an initialised torch.distributed, else (None, None)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None, None


def _local_rank() -> Optional[int]:
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value is not None and value.isdigit() else None


def _profiler_running() -> bool:
    import torch

    probe = getattr(torch.autograd.profiler, "_is_profiler_enabled", None)
    if isinstance(probe, bool):
        return probe
    return bool(torch._C._autograd._profiler_enabled())


class Session:
    """A torch.profiler run with the device setup, sync and schedule done for you.

    Create one with [`neuronprof.session`][neuronprof.session] and use it as a
    context manager. Inside the block, iterate [`steps`][neuronprof.Session.steps]
    (or call [`step`][neuronprof.Session.step] at the end of each iteration);
    after the block, read [`table`][neuronprof.Session.table] and call
    [`export`][neuronprof.Session.export].
    """

    config: SessionConfig
    """The options this session was opened with, checked and normalised."""
    modes: tuple[Mode, ...]
    """The requested capture modes (see [`Mode`][neuronprof.typing.Mode]), without repeats."""
    wait: int
    """Steps skipped at the start of each cycle."""
    warmup: int
    """Steps run with the profiler on but discarded (lazy compilation, caches and allocators settle here)."""
    active: int
    """Steps recorded per cycle."""
    repeat: int
    """Number of wait/warmup/active cycles; 0 runs until the block ends."""
    keep_cycles: int
    """How many of the last cycles keep their raw events for ``export()``."""
    record_shapes: bool
    """Whether input shapes are recorded (rows are split per shape)."""
    with_stack: bool
    """Whether Python stacks are recorded."""
    profile_memory: bool
    """Whether memory allocated per op is recorded."""
    with_flops: bool
    """Whether FLOPs of matrix multiplications and convolutions are estimated."""
    profile_all_threads: bool
    """Whether ops of every thread are recorded, not only the one that started the session."""

    def __init__(self, config: Optional[SessionConfig] = None) -> None:
        """Make a session from a [`SessionConfig`][neuronprof.SessionConfig] (default: every option's default).

        [`neuronprof.session(...)`][neuronprof.session] builds the config from keywords
        and calls this. The backend is resolved and an explicit ``output_dir`` created
        here, so that both fail before anything is profiled.

        Args:
            config: The session's options; None for every default.

        Raises:
            TypeError: ``config`` is not a ``SessionConfig`` (pass options to
                ``neuronprof.session(...)`` instead).
            BackendUnavailableError: The configured backend cannot run here.
            PermissionError: ``output_dir`` cannot be written.
            NotADirectoryError: ``output_dir`` is (inside) a file.
        """
        if config is None:
            config = SessionConfig()
        if not isinstance(config, SessionConfig):
            raise TypeError(
                f"Session() takes a SessionConfig, got {type(config).__name__}; pass options to "
                "neuronprof.session(...) or build neuronprof.SessionConfig(...)"
            )
        self.config = config
        self.modes = tuple(config.modes)
        self._core_arg = config.core if config.core is None else str(config.core)
        self.wait = config.wait
        self.warmup = config.warmup
        self.active = config.active
        self.repeat = config.repeat
        self.keep_cycles = config.keep_cycles
        self.profile_all_threads = config.profile_all_threads
        self.record_shapes = config.record_shapes
        self.with_stack = config.with_stack
        self.profile_memory = config.profile_memory
        self.with_flops = config.with_flops
        output_dir = config.output_dir
        backend = config.backend

        self._backend, skipped = resolve_backend(backend)
        for line in skipped:
            logger.debug(line)
        self._explicit_output_dir = output_dir is not None
        raw_dir = Path(output_dir) if output_dir is not None else Path(DEFAULT_OUTPUT_DIR)
        # An explicit folder is created now, so that an impossible one fails here;
        # the default one is only created when something is written into it.
        self._output_dir = ensure_writable_dir(raw_dir, create=self._explicit_output_dir)

        self._notes: list[str] = []
        self._state = "new"
        self._profiler: Optional[torch.profiler.profile] = None
        self._cycles: list[_collect.Cycle] = []
        self._cycle_count = 0
        self._dropped: Optional[_collect.CycleStats] = None
        self._cache_dir: Optional[Path] = None
        self._exiting = False
        self._abandoned = False
        self._left_in_step: Optional[int] = None
        self._steps_taken = 0
        self._started = 0.0
        self._rank: Optional[int] = None
        self._world_size: Optional[int] = None
        self._ctx: Optional[SessionContext] = None
        self._table_notes: list[str] = []
        self._neuron: Optional[SessionNeuronProfile] = None
        self._unguard: Callable[[], None] = lambda: None
        self._start_thread: Optional[int] = None
        self._interrupted: Optional[str] = None

    # -- read-only facts -------------------------------------------------------
    @property
    def backend(self) -> str:
        """Name of the backend in use (``"neuron"``, ``"tpu"``, ``"cuda"``, ``"cpu"``...)."""
        return self._backend.name

    @property
    def device_label(self) -> Optional[str]:
        """Label of the device columns (``"NEURON"``), or None without a device."""
        return self._backend.device_label

    @property
    def core(self) -> Optional[str]:
        """The captured cores; before the session starts, what the user asked for."""
        return self._ctx.core if self._ctx is not None else self._core_arg

    @property
    def output_dir(self) -> Path:
        """Folder for traces and backend files (created when first written)."""
        return self._output_dir

    @property
    def notes(self) -> list[str]:
        """Remarks about this session: modes the backend cannot capture, short loops..."""
        return [*self._notes, *self._data_notes(), *self._table_notes]

    @property
    def profiler(self) -> torch.profiler.profile:
        """The underlying ``torch.profiler.profile``, for anything neuronprof does not cover.

        Raises:
            SessionStateError: The session has not started yet.
        """
        if self._profiler is None:
            raise SessionStateError("the profiler exists once the with-block has started")
        return self._profiler

    @property
    def total_steps(self) -> Optional[int]:
        """Steps the schedule needs: ``(wait + warmup + active) * repeat``; None if repeat is 0."""
        if self.repeat == 0:
            return None
        return (self.wait + self.warmup + self.active) * self.repeat

    @property
    def steps_taken(self) -> int:
        """How many steps have ended so far."""
        return self._steps_taken

    @property
    def rank(self) -> Optional[int]:
        """The ``torch.distributed`` rank, when the session ran under it."""
        return self._rank

    def __repr__(self) -> str:
        return (
            f"<neuronprof.Session backend={self.backend!r} modes={self.modes} core={self.core!r} "
            f"schedule=wait{self.wait}/warmup{self.warmup}/active{self.active}x{self.repeat} state={self._state}>"
        )

    def _note(self, message: str) -> None:
        if message not in self._notes:
            self._notes.append(message)
            logger.info(message)

    # -- lifecycle -------------------------------------------------------------
    def __enter__(self) -> Session:
        if self._state != "new":
            raise SessionStateError("a session runs once; create a new one with neuronprof.session(...)")
        try:
            # Python raises a signal's exception right after any C call, e.g. after the
            # lock was taken and before the code that would release it: hold signals back.
            with _signals_deferred():
                self._enter()
        except BaseException:
            if self._state == "running":
                # A held-back Ctrl-C arrived once the start was complete; with-statements
                # do not call __exit__ when __enter__ raises, so stop here.
                self.__exit__(*sys.exc_info())
            raise
        return self

    def _enter(self) -> None:
        global _active
        if not _active_lock.acquire(blocking=False):
            other = _active
            raise SessionStateError(
                "another neuronprof session is already profiling in this process"
                + (f" ({other!r})" if other is not None else "")
                + "; torch.profiler is process-wide, so end that session first"
            )
        try:
            if _profiler_running():
                raise SessionStateError(
                    "a torch.profiler profile is already running in this process; "
                    "stop it before starting a neuronprof session"
                )
            _active = self
            self._unguard = _guard_profiler_starts()
            self._start()
        except BaseException:
            self._unguard()
            _active = None
            self._profiler = None
            self._state = "new"
            _active_lock.release()
            raise

    def _start(self) -> None:
        import torch.profiler

        self._rank, self._world_size = _distributed_rank()
        ctx = self._context()
        unsupported = [m for m in self.modes if m not in self._backend.supported_modes]
        for mode in unsupported:
            self._note(f"mode {mode!r} is not captured by the {self.backend} backend; ignored")
        if self._backend.writes_output:
            ensure_writable_dir(self._output_dir, create=True)
        experimental = self._experimental_config(self._backend.experimental_config(ctx))
        self._take_backend_notes()
        kwargs: dict[str, Any] = {
            "activities": self._backend.activities(),
            "schedule": torch.profiler.schedule(
                wait=self.wait, warmup=self.warmup, active=self.active, repeat=self.repeat
            ),
            "on_trace_ready": self._on_trace_ready,
            "record_shapes": self.record_shapes,
            "with_stack": self.with_stack,
            "profile_memory": self.profile_memory,
            "with_flops": self.with_flops,
        }
        if experimental is not None:
            kwargs["experimental_config"] = experimental
        prof = _tracked_profile_class()(**kwargs)
        # kineto writes these into every cycle's trace header itself, so an export is a plain copy.
        # (torch adds record_shapes and distributedInfo there on its own.)
        prof.neuronprof_metadata = self._kineto_metadata(stopped_in_last_step=False)
        self._started = time.time()
        self._start_thread = threading.get_ident()
        self._profiler = prof
        with _signals_deferred():
            try:
                prof.__enter__()
            except BaseException:
                # A half-started profiler would block every later session in this process.
                _stop_abandoned(prof)
                self._profiler = None
                raise
        self._state = "running"

    def _kineto_metadata(self, *, stopped_in_last_step: bool) -> dict[str, str]:
        """The ``neuronprof`` header kineto writes into a cycle's trace, with how the cycle ended."""
        own = {**self._trace_metadata()["neuronprof"], vocab.STOPPED_IN_LAST_STEP: stopped_in_last_step}
        return {"neuronprof": json.dumps(own)}

    def _experimental_config(self, backend_config: Any) -> Any:
        """Add the session's own kineto options to the backend's ``experimental_config``.

        ``with_stack`` needs kineto's ``verbose`` (else ``export_stacks`` writes
        nothing); ``profile_all_threads`` records ops of every thread.
        """
        wanted: dict[str, Any] = {"verbose": True} if self.with_stack else {}
        if self.profile_all_threads:
            wanted["profile_all_threads"] = True
        if not wanted:
            return backend_config
        from torch._C._profiler import _ExperimentalConfig

        if backend_config is None:
            return _ExperimentalConfig(**wanted)
        if type(backend_config) is _ExperimentalConfig:
            # Its other fields cannot be read back; the backends set only these two.
            return _ExperimentalConfig(
                custom_profiler_config=backend_config.custom_profiler_config,  # type: ignore[attr-defined]
                trace_only=backend_config.trace_only,
                **wanted,
            )
        names = " and ".join(
            n for n, on in (("stack export", self.with_stack), ("profile_all_threads", self.profile_all_threads)) if on
        )
        self._note(
            f"the {self.backend} backend configures torch.profiler with its own {type(backend_config).__name__}, "
            f"which cannot carry {names}; they are off in this session"
        )
        return backend_config

    def _context(self) -> SessionContext:
        """Return what the backend needs to know, resolving the default core once."""
        if self._ctx is None:
            ctx = SessionContext(
                modes=self.modes, core=self._core_arg, output_dir=self._output_dir, local_rank=_local_rank()
            )
            if ctx.core is None:
                ctx = dataclasses.replace(ctx, core=self._backend.default_core(ctx))
            self._ctx = ctx
        return self._ctx

    def synchronize(self) -> None:
        """Wait until the device has finished the work queued so far, as every step does.

        Works before, inside and after the ``with`` block, e.g. to time code
        outside the profiler on the same device and cores.
        """
        self._backend.synchronize(self._context())

    def _on_trace_ready(self, prof: torch.profiler.profile) -> None:
        # Keep this cycle's results before torch replaces them with the next cycle's.
        cycle = _collect.Cycle(index=self._cycle_count, profile=prof.profiler, closed_at_exit=self._exiting)
        self._cycle_count += 1
        self._cycles.append(cycle)
        # kineto's save works once; take it before the backend's exporter (TorchNeuron's
        # may consume it), into a private cache that every export() copies.
        try:
            _collect.save_native_trace(cycle, self._private_dir() / f"cycle{cycle.index}.json")
        except OSError as exc:
            # No room for the private copy: exports fall back to torch's Python exporter.
            self._note(f"could not keep a copy of cycle {cycle.index}'s trace ({exc}); exports are written from events")
        assert self._ctx is not None
        # Once saved, the cycle's export_chrome_trace copies the cache, so the backend's
        # exporter (TorchNeuron's writes trace.json for Neuron Explorer) gets the same trace.
        cycle.backend_trace = self._backend.on_trace_ready(prof, self._ctx)
        self._take_backend_notes()
        self._drop_old_cycles()

    def _private_dir(self) -> Path:
        if self._cache_dir is None:
            self._cache_dir = Path(tempfile.mkdtemp(prefix="neuronprof-"))
            # The cache lives as long as the session object.
            weakref.finalize(self, shutil.rmtree, str(self._cache_dir), True)
        return self._cache_dir

    def _drop_old_cycles(self) -> None:
        """Fold cycles beyond ``keep_cycles`` into running statistics and free their events."""
        has_device = self._has_device()
        while len(self._cycles) > self.keep_cycles:
            old = self._cycles.pop(0)
            stats = _collect.summarize_cycle(old, has_device=has_device, record_shapes=self.record_shapes)
            self._dropped = stats if self._dropped is None else _collect.fold_stats(self._dropped, stats)
            if old.cache is not None:
                old.cache.unlink(missing_ok=True)
            old.profile = None
            old.cache = None

    def _take_backend_notes(self) -> None:
        if self._ctx is not None:
            for message in self._backend.session_notes(self._ctx):
                self._note(message)

    def _has_device(self) -> bool:
        # Device columns exist where the backend has a device and its time reaches
        # torch.profiler; elsewhere (TorchNeuron without correlation) they stay blank, not 0.0.
        return self.device_label is not None and self._backend.device_time(self._context()) != "none"

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        global _active
        failure: Optional[BaseException] = None
        try:
            if self._profiler is not None and self._state == "running" and not self._abandoned:
                foreign = self._foreign_profiler()
                if foreign is not None:
                    failure = SessionStateError(foreign)
                else:
                    self._exiting = True
                    # A cycle the exit ends stops inside its last step; the trace says so.
                    self._profiler.neuronprof_metadata = self._kineto_metadata(stopped_in_last_step=True)
                    try:
                        self._drive(self._profiler.__exit__, None, None, None)
                    except BaseException as error:
                        failure = error
        except BaseException as error:
            # An interrupt before the stop began: stop without torch's schedule.
            failure = error
            if not self._abandoned:
                self._abandon()
        finally:
            self._state = "done"
            self._unguard()
            _active = None
            _active_lock.release()
        if exc_type is not None or failure is not None:
            self._interrupted = (exc_type or type(failure)).__name__
        if failure is not None and exc_type is not None:
            # The block's own exception reaches the user unchanged; the failed stop is noted.
            self._note(f"stopping the profiler after the block's {exc_type.__name__} failed too: {failure!r}")
            failure = None
        self._check_steps(interrupted=exc_type is not None or failure is not None)
        if failure is not None:
            raise failure

    def _drive(self, transition: Callable[..., Any], *args: Any) -> None:
        """Run one torch.profiler state change so that an interrupt cannot leave it half-made.

        Signals that would raise (Ctrl-C, alarms) wait until the change is complete;
        any exception that still escapes it stops the profiler without re-entering
        torch's schedule (which crashes on a half-made profiler) and is re-raised.
        """
        with _signals_deferred():
            try:
                if self.repeat == 1:
                    transition(*args)
                else:
                    with _quiet_cycle_warning():
                        transition(*args)
            except BaseException:
                self._abandon()
                raise

    def _abandon(self) -> None:
        """Leave torch.profiler stopped after a failed state change; keep the finished cycles."""
        self._abandoned = True
        if self._profiler is not None:
            _stop_abandoned(self._profiler)

    def _refuse_foreign_start(self) -> SessionStateError:
        """The error for a profiler started inside the block; torch's flags are left as the session's."""
        from torch.autograd import profiler as autograd_profiler

        # emit_nvtx / emit_itt raise torch's "profiler enabled" flag before they start.
        recording = getattr(self._profiler, "kineto_state", "idle") == "recording"
        autograd_profiler._set_is_profiler_enabled(recording)
        message = (
            f"another torch.profiler was started inside the session's block: {_foreign_starter()}, "
            f"during step {self._steps_taken} ({self._phase()}). torch has one profiler per process, and a "
            "second one would end this session's recording or crash the process, so neuronprof refused it; "
            "the session's recording is unharmed. Profile one thing at a time: remove the inner profiler, "
            "or end the session before it starts"
        )
        self._note(message)
        return SessionStateError(message)

    def _phase(self) -> str:
        """The schedule phase of the current step: ``"wait"``, ``"warmup"`` or ``"active"``."""
        cycle = self.wait + self.warmup + self.active
        position = self._steps_taken % cycle
        if self.repeat and self._steps_taken >= cycle * self.repeat:
            return "after the schedule"
        if position < self.wait:
            return "a wait step"
        if position < self.wait + self.warmup:
            return "a warmup step"
        return "an active step"

    def _foreign_profiler(self) -> Optional[str]:
        """Say what happened if another profiler took torch's one profiler from this session."""
        prof = self._profiler
        if prof is None or self._abandoned:
            return None
        from torch.autograd import profiler as autograd_profiler

        # Profilers started through torch's Python API are refused when they start
        # (_guard_profiler_starts); these checks catch those started beneath it.
        recording = getattr(prof, "kineto_state", "idle") == "recording"
        started = _profiler_started()
        # A profiler running while the session's is not: one was started and left running.
        running = not recording and started
        # torch's C++ state is per thread: trust it in the thread that started the session,
        # and not with profile_all_threads (where the threads it records change it).
        import torch

        here = threading.get_ident() == self._start_thread and not self.profile_all_threads
        stopped = recording and (not started or (here and not torch._C._autograd._profiler_enabled()))
        # torch.profiler.profile registers its step counter on creation and erases it
        # on exit: a profile that ended inside the block erased this session's.
        tracker = getattr(getattr(autograd_profiler, "KinetoStepTracker", None), "_step_dict", None)
        erased = isinstance(tracker, dict) and "ProfilerStep" not in tracker
        if not (running or stopped or erased):
            return None
        # The session stops nothing it does not own: a profiler left running is its starter's to stop.
        self._abandon()
        what = "started and is still running" if running else "started and stopped"
        consequence = "the session stopped recording" if running else "it ended this session's recording"
        return (
            f"another torch.profiler was {what} inside the session's block (noticed at step "
            f"{self._steps_taken}); torch has one profiler per process, so {consequence}. "
            f"{self._cycle_count} completed cycle(s) are kept. Profile one thing at a time: remove the inner "
            "profiler, or end the session before it starts"
        )

    def _nothing_recorded(self, what: str) -> str:
        """Say why no cycle was recorded: the block was interrupted, or the loop was too short."""
        if self._interrupted is not None:
            return (
                f"nothing was recorded, so {what}: the session was interrupted by {self._interrupted} during "
                f"step {self._steps_taken}, before a profiling cycle completed (see s.notes)"
            )
        return (
            f"nothing was recorded, so {what}: the loop ended before the schedule's active steps (see s.notes)"
        )

    def _check_steps(self, *, interrupted: bool) -> None:
        needed = self.total_steps
        if needed is None or self._steps_taken >= needed:
            return
        if interrupted:
            self._note(
                f"the block was interrupted after {self._steps_taken} of {needed} steps; "
                f"{self._cycle_count} profiling cycle(s) completed and are kept"
            )
            return
        if self._steps_taken == 0 and self._cycle_count:
            # A schedule that starts recording at once (wait=0, warmup=0) makes a
            # step-less block one recorded step: a legitimate single pass.
            self._note("no step() was called; the whole block was recorded as one step")
            return
        message = (
            f"the schedule needs {needed} steps ((wait={self.wait} + warmup={self.warmup} + "
            f"active={self.active}) x repeat={self.repeat}) but only {self._steps_taken} completed"
        )
        if self._steps_taken == 0:
            message += "; call s.step() at the end of each iteration, or loop over s.steps()"
        recorded, cut_short = self._recorded_steps()
        if cut_short:
            message += f"; the loop left during step {self._steps_taken}, an active step, which was cut short"
        if recorded == 0:
            message += ", so nothing was recorded"
        else:
            message += f"; {recorded} recorded step(s) are kept"
        self._note(message)
        warnings.warn(message, NeuronProfWarning, stacklevel=3)

    def _recorded_steps(self) -> tuple[int, bool]:
        """Return (recorded steps, whether the last one was cut short by leaving ``steps()``).

        Active steps whose ``step()`` ran are recorded; so is the active step a
        ``break`` left (torch saves it at exit), but not a step that ``step()``
        opened and nothing ran in.
        """
        cycle = self.wait + self.warmup + self.active
        full, rest = divmod(self._steps_taken, cycle)
        recorded = full * self.active + max(0, rest - self.wait - self.warmup)
        cut_short = self._left_in_step == self._steps_taken and rest >= self.wait + self.warmup
        return recorded + int(cut_short), cut_short

    # -- inside the block ------------------------------------------------------
    def _require_running(self, what: str) -> None:
        if self._state == "new":
            raise SessionStateError(f"{what} works inside the with-block; use `with neuronprof.session() as s:`")
        if self._state == "done":
            raise SessionStateError(f"{what} works inside the with-block, and this session has ended")

    def step(self) -> None:
        """End one step: wait for the device, then advance the profiler's schedule.

        Call it at the end of each iteration of a hand-written loop; ``steps()``
        and ``run()`` call it for you.

        torch has one profiler per process: while the session is open, any other
        profiler start (``torch.profiler.profile``, ``torch.autograd.profiler.profile``,
        the legacy profiler) raises ``SessionStateError`` where it is started. For
        that, the functions those profilers start through are replaced in torch's
        modules for the session's lifetime only, and put back when it ends.

        Raises:
            SessionStateError: Called outside the ``with`` block; or another profiler
                took torch's profiler from the session (started beneath torch's Python
                API, so it could not be refused when it started).
        """
        self._require_running("step()")
        assert self._profiler is not None
        if self._abandoned:
            raise SessionStateError(
                "the profiler was stopped when an earlier step() was interrupted; "
                f"the {self._cycle_count} completed cycle(s) are kept. Leave the with-block and read the results"
            )
        # Without this sync the device work of the step would be attributed to
        # the next one, or lost when the trace is cut: empty device columns.
        self.synchronize()
        foreign = self._foreign_profiler()
        if foreign is not None:
            raise SessionStateError(foreign)
        self._drive(self._advance)

    def _advance(self) -> None:
        assert self._profiler is not None
        self._profiler.step()
        self._steps_taken += 1

    def steps(self) -> Iterator[int]:
        """Yield step numbers, running exactly the schedule: ``(wait + warmup + active) * repeat``.

        After each iteration's body the device is synchronised and the schedule
        advanced. Breaking out of the loop early is allowed (a warning says how
        many steps were missing).

        Yields:
            The step index, from 0.

        Raises:
            SessionStateError: Used outside the ``with`` block, or with ``repeat=0``
                (an endless schedule: call ``step()`` yourself).
        """
        self._require_running("steps()")
        total = self.total_steps
        if total is None:
            raise SessionStateError("steps() needs a finite schedule; with repeat=0 call s.step() in your own loop")
        for index in range(total):
            try:
                yield index
            except GeneratorExit:
                # break / return inside the body: this step ran (part of) its body.
                self._left_in_step = index
                raise
            if self._state != "running":
                return
            self.step()

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call ``fn(*args, **kwargs)`` once per scheduled step and return the last result.

        Args:
            fn: The work of one step, called as ``fn(*args, **kwargs)`` once per scheduled step.

        Raises:
            SessionStateError: Called outside the ``with`` block.
        """
        result: Any = None
        for _ in self.steps():
            result = fn(*args, **kwargs)
        return result

    # -- after the block -------------------------------------------------------
    def _require_done(self, what: str) -> None:
        if self._state == "new":
            raise SessionStateError(f"{what} is available after the session has run; use it in a with-block first")
        if self._state == "running":
            raise SessionStateError(f"{what} is available after the with-block ends; call it after the block")

    @overload
    def table(
        self,
        sort_by: SortKey = ...,
        row_limit: Optional[int] = ...,
        device_only: bool = ...,
        *,
        ranks: Literal["local"] = ...,
        neuron_heuristic: bool = ...,
        timeout: float = ...,
    ) -> Table: ...

    @overload
    def table(
        self,
        sort_by: SortKey = ...,
        row_limit: Optional[int] = ...,
        device_only: bool = ...,
        *,
        ranks: Literal["all"],
        neuron_heuristic: bool = ...,
        timeout: float = ...,
    ) -> RankTable: ...

    def table(
        self,
        sort_by: SortKey = "device",
        row_limit: Optional[int] = 20,
        device_only: bool = False,
        *,
        ranks: Ranks = "local",
        neuron_heuristic: bool = False,
        timeout: float = 60.0,
    ) -> Union[Table, RankTable]:
        """Summarise the recorded steps per operator.

        Args:
            sort_by: ``"device"`` (default), ``"cpu"``, ``"calls"``, ``"name"`` or one
                of torch's keys; see [`SortKey`][neuronprof.typing.SortKey]. Device
                keys fall back to CPU time when there is no device time.
            row_limit: Keep this many rows (None or -1 for all).
            device_only: Keep only rows with device time.
            ranks: ``"local"`` for this process's table; ``"all"`` to gather every
                rank's statistics under ``torch.distributed`` (a collective call: every
                rank must make it). ``sort_by``, ``row_limit`` and ``device_only`` apply
                to ``"local"`` only.
            neuron_heuristic: On the neuron backend, when the NEURON column comes from
                Neuron's own profile, also put each NEFF's time on the op whose name the
                NEFF's name contains (eager mode runs one small NEFF per op). A guess by
                name, labelled as one in the footer; off by default.
            timeout: With ``ranks="all"``, seconds to wait for every rank to arrive
                before giving up with ``SessionStateError`` (instead of hanging until
                the process group's own timeout).

        Returns:
            A [`Table`][neuronprof.Table]; ``print()`` it, or render it as Markdown,
            CSV, JSON or a DataFrame. With ``ranks="all"``, a
            [`RankTable`][neuronprof.model.RankTable] with min / median / max per op
            across ranks and the slowest rank, on every rank.

        Raises:
            SessionStateError: Called before the with-block has ended;
                ``ranks="all"`` without an initialised process group, or not
                called on every rank within ``timeout``.
            ValueError: Unknown ``sort_by``.

        Warns:
            NeuronProfWarning: Device time was requested on a backend that delivers
                it to torch.profiler, but every row has none (see ``neuronprof doctor
                --probe``). Where the backend delivers none (TorchNeuron without
                ``correlate_device_time``), ``s.notes`` says so instead.
        """
        if sort_by not in SORT_KEYS:
            raise ValueError(f"unknown sort_by {sort_by!r}; use one of: {', '.join(SORT_KEYS)}")
        if row_limit is not None and (isinstance(row_limit, bool) or not isinstance(row_limit, int)):
            raise ValueError(f"row_limit must be an int or None, got {row_limit!r}")
        if ranks not in RANKS:
            raise ValueError(f"ranks must be 'local' or 'all', got {ranks!r}")
        if not isinstance(neuron_heuristic, bool):
            raise ValueError(f"neuron_heuristic must be True or False, got {neuron_heuristic!r}")
        self._require_done("table()")
        if ranks == "all":
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
                raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
            return self._gather_rank_table(float(timeout))
        table = self._local_table()
        if self.backend == "neuron":
            # No NeuronCore time from torch: take it from Neuron's own profile (see analysis.neuron).
            table = self._neuron_side().table(table, heuristic=neuron_heuristic)
        message = self._empty_device_message(table)
        if message is not None and message not in table.notes:
            table = dataclasses.replace(table, notes=(*table.notes, message))
        table = table.sorted(sort_by)
        if device_only:
            kept = table.device_only()
            if self.device_label is None:
                # One note, the one that says why: Table.device_only()'s own cannot know the backend.
                kept = dataclasses.replace(
                    kept,
                    notes=(
                        *table.notes,
                        f"device_only=True keeps rows with device time, and no row has device time: the "
                        f"{self.backend} backend has no device, so every row was left out (totals are of the "
                        "whole session)",
                    ),
                )
            table = kept
        return table.head(row_limit)

    def insights(self) -> Insights:
        """Say what to fix first: findings read from the recorded steps, most costly first.

        Host↔device copies, hidden synchronisations, an idle device, a CPU-bound
        loop, unfused elementwise chains, dtype conversions, recompilations and graph
        breaks, a slow input pipeline and one dominant op, each with its evidence, the
        time at stake, one suggestion and a link to the guide. The same engine reads
        exported traces (``neuronprof advise TRACE``). Record shapes
        (``record_shapes=True``) for dtype and scalar details.

        Returns:
            [`Insights`][neuronprof.analysis.insights.Insights]; ``print()`` it.
            Device findings are skipped with a note when no device time was recorded.

        Raises:
            SessionStateError: Called before the with-block has ended, or nothing was recorded.
        """
        from neuronprof.analysis.insights import analyze

        self._require_done("insights()")
        if not self._cycles:
            raise SessionStateError(self._nothing_recorded("there is nothing to advise on"))
        timeline = _collect.build_timeline(self._cycles, backend=self.backend, device_label=self.device_label)
        return analyze(timeline)

    def neuron_profile(self, *, tool: ToolChoice = "auto") -> NeuronProfile:
        """Read Neuron's own profile of this session: engines, NEFF executions, busy time per step.

        Neuron Runtime writes its files at profiler stop; ``neuron-explorer``
        (package ``aws-neuronx-tools``) turns them into JSON, which is kept beside
        them so that later reads and ``export(format="neuron")`` bundles need no
        tool. Read once per session.

        Args:
            tool: ``"auto"`` (find ``neuron-explorer``), ``"never"`` (existing JSON
                only) or the tool's path; see [`ToolChoice`][neuronprof.typing.ToolChoice].

        Returns:
            A [`NeuronProfile`][neuronprof.analysis.NeuronProfile]; without the tool
            or its JSON it is empty and a ``NeuronProfWarning`` says what to install.

        Raises:
            SessionStateError: Called before the with-block has ended, or the
                session wrote no Neuron profile files.
            ValueError: The session did not use the neuron backend.
        """
        self._require_done("neuron_profile()")
        if self.backend != "neuron":
            raise ValueError(f"neuron_profile() needs the neuron backend; this session used {self.backend!r}")
        profile = self._neuron_side().get(tool)
        if profile is None:
            raise SessionStateError(f"no Neuron profile to read: {self._neuron_side().why}")
        return profile

    def _neuron_side(self) -> SessionNeuronProfile:
        if self._neuron is None:
            from neuronprof.analysis.neuron.session import SessionNeuronProfile

            ctx = self._ctx
            root = self._backend.neuron_bundle_source(ctx) if ctx is not None else None
            # This session's folders only, as export(format="neuron") bundles them.
            sessions = self._backend.neuron_session_dirs(ctx) if ctx is not None else []
            self._neuron = SessionNeuronProfile(root, sessions=sessions)
        return self._neuron

    def report(self, path: Optional[PathLike] = None, *, overwrite: bool = False) -> Path:
        """Write one self-contained HTML report to look at and share: settings, op table, findings, timeline.

        The file opens offline in any browser (no network request): the session's
        settings and environment (backend, device, torch and neuronprof versions,
        schedule), the op table (sortable, filterable), the findings of
        [`insights`][neuronprof.Session.insights] and a zoomable timeline of the
        recorded steps (host ops and device executions). ``neuronprof report TRACE``
        makes the same page from an exported trace.

        Args:
            path: The ``.html`` file to write. Default: a timestamped name in ``output_dir``.
            overwrite: Replace an existing file instead of raising ``FileExistsError``.

        Returns:
            The file written.

        Raises:
            SessionStateError: Called before the with-block has ended, or nothing was recorded.
            FileExistsError: The file exists and ``overwrite`` is False.
            OSError: The disk refused the write; no partial file is left.
        """
        from neuronprof.analysis.insights import analyze
        from neuronprof.report import environment, render_report

        self._require_done("report()")
        if not self._cycles:
            raise SessionStateError(self._nothing_recorded("there is nothing to report"))
        timeline = _collect.build_timeline(self._cycles, backend=self.backend, device_label=self.device_label)
        meta = self._trace_metadata()["neuronprof"]
        settings: dict[str, Any] = {
            "backend": self.backend,
            "device": self.device_label or "none (CPU only)",
            "core": self.core,
            "modes": meta["modes"],
            "schedule": meta["schedule"],
            "torch": meta.get("torch"),
            **environment(),
            "rank": None if self._rank is None else f"{self._rank} of {self._world_size}",
            "record_shapes": self.record_shapes,
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self._started)),
        }
        text = render_report(
            self._local_table().sorted("device"), insights=analyze(timeline), timeline=timeline, settings=settings
        )
        if path is None:
            ensure_writable_dir(self._output_dir, create=True)
            name = default_trace_name(self.backend, self._started, rank=self._rank, suffix=".html")
            target = unique_path(self._output_dir / name)
        else:
            target = Path(path)
            ensure_writable_dir(target.parent, create=True)
        return atomic_write(target, text_writer(text), overwrite=overwrite)

    def _cycle_stats(self) -> list[_collect.CycleStats]:
        has_device = self._has_device()
        stats = [
            _collect.summarize_cycle(c, has_device=has_device, record_shapes=self.record_shapes) for c in self._cycles
        ]
        return ([self._dropped] if self._dropped is not None else []) + stats

    def _data_notes(self) -> tuple[str, ...]:
        """Notes that follow from what was recorded: computed from it each time, never stored."""
        if self._state != "done":
            return ()
        stats = self._cycle_stats()
        if any(s.steps for s in stats) and not any(s.ops for s in stats):
            hint = "" if self.profile_all_threads else "; pass profile_all_threads=True to record every thread"
            return (
                "the recorded steps hold nothing but ProfilerStep*: the work may have run in other threads, "
                f"which torch.profiler records only in the thread that started it{hint}",
            )
        return ()

    def _local_table(self) -> Table:
        """Summarise every recorded cycle of this process (kept or dropped), unsorted and uncut.

        A pure function of what was recorded: calling it twice gives equal tables.
        """
        return _collect.build_table(
            self._cycle_stats(),
            backend=self.backend,
            device_label=self.device_label,
            rank=self._rank,
            notes=(*self._notes, *self._data_notes()),
        )

    def _gather_rank_table(self, timeout: float) -> RankTable:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise SessionStateError(
                "table(ranks='all') gathers from every rank: call it after "
                "torch.distributed.init_process_group(), on every rank"
            )
        local = self._local_table()
        gathered: list[Any] = [None] * dist.get_world_size()
        hint = (
            f"table(ranks='all') is a collective call and must be called on every rank: rank {dist.get_rank()} of "
            f"{dist.get_world_size()} waited up to {timeout:g} s for the others. Call it on every rank (not inside "
            "`if rank == 0:`), or use table() for this rank's own table"
        )
        try:
            # A barrier with a deadline first: a rank that never calls would otherwise
            # block this one until the process group's own timeout (30 min on gloo).
            work = dist.barrier(async_op=True)
            if work is not None and work.wait(timeout=datetime.timedelta(seconds=timeout)) is False:
                raise SessionStateError(hint)
            # Plain dicts travel well over every backend's object collectives (gloo, nccl, neuron).
            dist.all_gather_object(gathered, local.to_dict())
        except SessionStateError:
            raise
        except Exception as exc:  # gloo/nccl report a missing peer as RuntimeError or DistBackendError
            raise SessionStateError(f"{hint} ({type(exc).__name__}: {str(exc)[:300]})") from exc
        return RankTable.from_tables([Table.from_dict(d) for d in gathered])

    def _empty_device_message(self, table: Table) -> Optional[str]:
        """Say so when device time was asked for and expected but no row has any (warned once)."""
        wants_device = "device" in self.modes and "device" in self._backend.supported_modes
        if not wants_device or not self._cycles or table.has_device_time:
            return None
        # The backend knows whether device time was expected at all; when it was not,
        # its note (already in s.notes) explains why instead.
        message = self._backend.empty_device_warning(self._context())
        if message and message not in self._table_notes:
            self._table_notes.append(message)
            warnings.warn(message, NeuronProfWarning, stacklevel=3)
        return message or None

    def _trace_metadata(self) -> dict[str, Any]:
        import torch

        from neuronprof import __version__

        meta: dict[str, Any] = {
            "neuronprof": {
                "version": __version__,
                "torch": torch.__version__,
                "backend": self.backend,
                "device_label": self.device_label,
                "modes": list(self.modes),
                "core": self.core,
                "schedule": {"wait": self.wait, "warmup": self.warmup, "active": self.active, "repeat": self.repeat},
            }
        }
        if self.record_shapes:
            meta["record_shapes"] = 1
        if self._rank is not None:
            meta["distributedInfo"] = {"rank": self._rank, "world_size": self._world_size, "backend": _dist_backend()}
        return meta

    def export(
        self,
        path: Optional[PathLike] = None,
        *,
        format: ExportFormat = "chrome",
        overwrite: bool = False,
        cycle: Optional[int] = None,
    ) -> Path:
        """Write the recorded trace for Perfetto, TensorBoard or Neuron Explorer.

        Export as often as you like, in any format: each call writes a fresh file.

        Args:
            path: Target file (``"chrome"``) or folder (``"tensorboard"``, ``"neuron"``).
                Default: a timestamped name in ``output_dir``. A ``.json.gz`` path is
                gzipped.
            format: ``"chrome"``, ``"tensorboard"``, ``"neuron"`` or ``"stacks"``; see
                [`ExportFormat`][neuronprof.typing.ExportFormat].
            overwrite: Replace an existing target instead of raising ``FileExistsError``.
            cycle: Which profiling cycle to write when ``repeat != 1``: 0 the first,
                negative counts from the end (-1 the last). Default: the last cycle that
                recorded something (a cycle the block's end cut short before any of its
                active steps ran is skipped, with a ``NeuronProfWarning`` naming the cycle
                written). Only the last ``keep_cycles`` cycles keep their events.

        Returns:
            The trace file (``"chrome"``, ``"stacks"``) or the folder written
            (``"tensorboard"``, ``"neuron"``).

        Raises:
            SessionStateError: Called before the with-block has ended, or nothing was recorded.
            FileExistsError: The target exists and ``overwrite`` is False.
            ValueError: Unknown format, ``"neuron"`` on another backend, ``"stacks"``
                without ``with_stack=True``, or a cycle that does not exist or whose
                events were dropped (``keep_cycles``).
            OSError: The disk refused the write (full, file too large, permission);
                no partial or temporary file is left.
        """
        if format not in EXPORT_FORMATS:
            raise ValueError(f"unknown export format {format!r}; use one of: {', '.join(EXPORT_FORMATS)}")
        self._require_done("export()")
        if format == "neuron":
            return self._export_neuron(path, overwrite=overwrite)
        if not self._cycles:
            raise SessionStateError(self._nothing_recorded("there is no trace to export"))
        chosen = self._default_cycle() if cycle is None else self._choose_cycle(cycle)
        logger.info("exporting cycle %d of %d (%s)", chosen.index, self._cycle_count, format)
        if format == "tensorboard":
            folder = Path(path) if path is not None else self._output_dir / "tensorboard"
            ensure_writable_dir(folder, create=True)
            # One worker per process, one span per file, as tensorboard_trace_handler names them:
            # the span number varies, the worker part never does.
            span = time.time_ns()
            while True:
                target = folder / tensorboard_file_name(span, rank=self._rank)
                if not target.exists():
                    break
                span += 1
            atomic_write(target, self._trace_writer(chosen), overwrite=overwrite)
            return folder
        if format == "stacks":
            target = self._target(path, suffix=".stacks.txt")
            return atomic_write(target, self._stacks_writer(chosen), overwrite=overwrite)
        if path is None:
            ensure_writable_dir(self._output_dir, create=True)
            target = unique_path(self._output_dir / default_trace_name(self.backend, self._started, rank=self._rank))
        else:
            target = Path(path)
            ensure_writable_dir(target.parent, create=True)
        return atomic_write(target, self._trace_writer(chosen), overwrite=overwrite)

    def _target(self, path: Optional[PathLike], *, suffix: str) -> Path:
        if path is None:
            ensure_writable_dir(self._output_dir, create=True)
            name = default_trace_name(self.backend, self._started, rank=self._rank, suffix=suffix)
            return unique_path(self._output_dir / name)
        target = Path(path)
        ensure_writable_dir(target.parent, create=True)
        return target

    def _default_cycle(self) -> _collect.Cycle:
        """The last cycle that recorded something: not one the exit cut short before its active steps ran."""
        last = self._cycles[-1]
        if not last.closed_at_exit or len(self._cycles) == 1:
            return last
        stats = _collect.summarize_cycle(last, has_device=self._has_device(), record_shapes=self.record_shapes)
        if stats.steps:
            return last
        previous = self._cycles[-2]
        warnings.warn(
            f"exported cycle {previous.index} of cycles 0 to {last.index}: the last cycle ({last.index}) was cut "
            f"short by the block's end before any of its active steps ran, so it recorded nothing "
            f"(pass cycle={last.index} to export it anyway)",
            NeuronProfWarning,
            stacklevel=3,
        )
        return previous

    def _choose_cycle(self, cycle: int) -> _collect.Cycle:
        if isinstance(cycle, bool) or not isinstance(cycle, int):
            raise ValueError(f"cycle must be an int (0 for the first, -1 for the last), got {cycle!r}")
        index = cycle + self._cycle_count if cycle < 0 else cycle
        if not 0 <= index < self._cycle_count:
            raise ValueError(f"cycle {cycle!r} does not exist; this session recorded {self._cycle_count}")
        for kept in self._cycles:
            if kept.index == index:
                return kept
        first = self._cycles[0].index
        raise ValueError(
            f"cycle {cycle!r}'s events were dropped: keep_cycles={self.keep_cycles} keeps the last "
            f"{self.keep_cycles} of the {self._cycle_count} cycles (cycles {first} to {self._cycle_count - 1}); "
            "table() still counts every cycle. Raise keep_cycles to export older ones"
        )

    def _stacks_writer(self, chosen: _collect.Cycle) -> Callable[[Path], None]:
        if not self.with_stack:
            raise ValueError("format='stacks' needs stacks: start the session with with_stack=True")
        metric = "self_device_time_total" if self.device_label is not None else "self_cpu_time_total"

        def write(dest: Path) -> None:
            _collect.write_stacks(chosen, dest, metric)

        return write

    def _trace_writer(self, chosen: _collect.Cycle) -> Callable[[Path], None]:
        metadata = self._trace_metadata()
        metadata["neuronprof"][vocab.STOPPED_IN_LAST_STEP] = chosen.closed_at_exit

        def write(dest: Path) -> None:
            _collect.write_chrome_trace(chosen, dest, metadata)

        return write

    def _export_neuron(self, path: Optional[PathLike], *, overwrite: bool) -> Path:
        if self.backend != "neuron":
            raise ValueError(
                f"format='neuron' needs the neuron backend; this session used {self.backend!r}. "
                "Use format='chrome' or 'tensorboard'"
            )
        source = self._backend.neuron_bundle_source(self._ctx) if self._ctx is not None else None
        if source is None:
            raise SessionStateError("TorchNeuron wrote no profile files in this session (see s.notes)")
        if path is None:
            name = default_trace_name(self.backend, self._started, rank=self._rank, suffix="")
            target = unique_path(self._output_dir / name.replace("neuronprof_", "neuron_explorer_"))
        else:
            target = Path(path)
        if target.exists():
            if not overwrite:
                raise FileExistsError(
                    errno.EEXIST, "export target exists; pass overwrite=True to replace it", str(target)
                )
            import shutil

            shutil.rmtree(target) if target.is_dir() else target.unlink()

        def framework_trace(index: int, dest: Path) -> bool:
            # For session folders TorchNeuron left without a framework trace (legacy build).
            if index >= len(self._cycles):
                return False
            self._trace_writer(self._cycles[index])(dest)
            return True

        sessions = self._backend.neuron_session_dirs(self._ctx) if self._ctx is not None else None
        return neuron_bundle(source, target, sessions=sessions or None, framework_trace=framework_trace)

    def roofline(
        self,
        device: Union[DevicePreset, DevicePeak] = "trn2",
        *,
        peak_flops: Optional[float] = None,
        peak_bw: Optional[float] = None,
    ) -> Roofline:
        """Place each recorded op on a device's roofline: is it compute- or memory-bound?

        Needs ``record_shapes=True`` (bytes moved come from shapes and dtypes);
        ``with_flops=True`` adds torch's own FLOP counts where it has them. Read
        from the recorded events of the kept cycles (``keep_cycles``) in memory:
        no trace is written or parsed back.

        Args:
            device: A preset (``"trn2"``, ``"trn1"``, ``"h100"``, ``"h200"``, ``"a100"``)
                or a [`DevicePeak`][neuronprof.analysis.DevicePeak].
            peak_flops: Peak FLOP/s overriding the preset's.
            peak_bw: Peak memory bandwidth in bytes/s overriding the preset's.

        Returns:
            A [`Roofline`][neuronprof.analysis.Roofline]; print it or ``plot()`` it.

        Raises:
            SessionStateError: Called before the with-block has ended, or nothing was recorded.
        """
        from neuronprof.analysis import roofline as _roofline

        self._require_done("roofline()")
        if not self._cycles:
            raise SessionStateError(self._nothing_recorded("there is nothing to place on a roofline"))
        # From the events in memory: no trace is written or parsed back.
        trace = _collect.build_trace(self._cycles, has_device=self._has_device(), device_label=self.device_label)
        return _roofline(trace, device=device, peak_flops=peak_flops, peak_bw=peak_bw)


@contextlib.contextmanager
def _quiet_cycle_warning() -> Iterator[None]:
    # torch warns that each cycle clears the previous one's events; the session
    # keeps every cycle itself, so the warning would only mislead.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        yield


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold back Python signal handlers (Ctrl-C, alarms) until the block is done, then run them.

    torch.profiler's state changes are not interrupt-safe: a KeyboardInterrupt in
    the middle of one leaves a half-made profiler that crashes the process when it
    is stopped. Python runs signal handlers in the main thread only, so other
    threads need nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        pending.append(signum)

    saved: dict[int, Callable[[int, Any], Any]] = {}
    try:
        for sig in _DEFERRED_SIGNALS:
            handler = signal.getsignal(sig)
            if callable(handler):
                saved[sig] = handler
                signal.signal(sig, hold)
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        for sig in pending:
            saved[sig](sig, None)


_tracked_profile: Any = None


def _tracked_profile_class() -> Any:
    """Return a ``torch.profiler.profile`` that records how far kineto may have got.

    ``kineto_state`` is set before each state change (a change that is cut short
    may or may not have reached kineto) so that stopping an abandoned profiler
    never disables a profiler that was not enabled: torch dereferences null there.
    """
    global _tracked_profile
    if _tracked_profile is None:
        import torch.profiler

        class _TrackedProfile(torch.profiler.profile):
            kineto_state = "idle"

            def prepare_trace(self) -> None:
                self.kineto_state = "prepared"
                with _own_profiler_calls():
                    super().prepare_trace()

            neuronprof_metadata: dict[str, str] = {}

            def start_trace(self) -> None:
                self.kineto_state = "recording"
                with _own_profiler_calls():
                    super().start_trace()
                for key, value in self.neuronprof_metadata.items():
                    self.add_metadata_json(key, value)

            def stop_trace(self) -> None:
                # Again at the stop: the session's exit rewrites how the cycle ended (see Session.__exit__).
                if self.kineto_state == "recording":
                    for key, value in self.neuronprof_metadata.items():
                        self.add_metadata_json(key, value)
                super().stop_trace()
                self.kineto_state = "stopped"

        _tracked_profile = _TrackedProfile
    return _tracked_profile


# -- refusing a second profiler while a session is open -------------------------------------
# torch has one profiler per process, and a profiler started inside the session's block either
# ends the session's recording or, during a warmup step, leaves kineto in a state that crashes
# the process at the session's next step (a segfault). No torch API tells a prepared profiler
# that another one ran, so while a session is open the functions every Python-level profiler
# starts through (torch.autograd.profiler.profile, torch.profiler.profile, emit_nvtx, emit_itt,
# the legacy profiler) are replaced, in the torch modules that call them, by a guard that refuses
# any start that is not the session's own. The originals are put back when the session ends.
_GUARDED_STARTS = (
    ("torch.autograd.profiler", "_prepare_profiler"),
    ("torch.autograd.profiler", "_enable_profiler"),
    ("torch.autograd.profiler_legacy", "_enable_profiler_legacy"),
    ("torch.autograd", "_prepare_profiler"),
    ("torch.autograd", "_enable_profiler"),
    ("torch.autograd", "_enable_profiler_legacy"),
)
_own_calls = threading.local()


@contextlib.contextmanager
def _own_profiler_calls() -> Iterator[None]:
    """Let the session's own profiler through the start guard (in this thread)."""
    depth = _own_depth()
    _own_calls.depth = depth + 1
    try:
        yield
    finally:
        _own_calls.depth = depth


def _own_depth() -> int:
    depth: int = getattr(_own_calls, "depth", 0)
    return depth


def _guard_profiler_starts() -> Callable[[], None]:
    """Refuse other profiler starts until the returned function is called (it restores torch)."""
    import importlib

    installed: list[tuple[Any, str, Any, Any]] = []
    for module_name, attr in _GUARDED_STARTS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        original = getattr(module, attr, None)
        if original is None:
            continue

        def guard(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            session = _active
            if session is None or _own_depth():
                return _original(*args, **kwargs)
            raise session._refuse_foreign_start()

        setattr(module, attr, guard)
        installed.append((module, attr, original, guard))

    def restore() -> None:
        for module, attr, original, guard in reversed(installed):
            # Someone who replaced it after us keeps theirs.
            if getattr(module, attr, None) is guard:
                setattr(module, attr, original)
        installed.clear()

    return restore


def _foreign_starter() -> str:
    """Name the profiler being started and where the user's code started it, from the call stack."""
    frame: Optional[types.FrameType] = sys._getframe(2)
    torch_dir = os.path.dirname(os.path.dirname(sys.modules["torch"].__file__ or ""))
    own_dir = os.path.dirname(__file__)
    what: Optional[str] = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(torch_dir + os.sep + "torch") or filename.startswith(own_dir):
            owner = frame.f_locals.get("self")
            if owner is not None and type(owner).__module__.startswith("torch."):
                name = f"{type(owner).__module__}.{type(owner).__qualname__}"
                what = name.replace("torch.profiler.profiler.", "torch.profiler.")
            frame = frame.f_back
            continue
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        return f"{what or 'a profiler'} at {where}"
    return what or "a profiler"


def _stop_abandoned(prof: Any) -> None:
    """Stop a profiler whose state change failed, without re-entering torch's schedule."""
    from torch.autograd import profiler as autograd_profiler

    step = getattr(prof, "step_rec_fn", None)
    if step is not None:
        prof.step_rec_fn = None
        with contextlib.suppress(Exception):
            step.__exit__(None, None, None)
    inner = getattr(prof, "profiler", None)
    if getattr(prof, "kineto_state", "recording") == "recording" and _profiler_started():
        with contextlib.suppress(Exception):
            if inner is not None and getattr(inner, "enabled", False):
                inner.__exit__(None, None, None)
            else:
                autograd_profiler._disable_profiler()
    prof.kineto_state = "stopped"
    tracker = getattr(autograd_profiler, "KinetoStepTracker", None)
    if tracker is not None:
        with contextlib.suppress(Exception):
            tracker.erase_step_count("ProfilerStep")


def _profiler_started() -> bool:
    """True while a torch profiler is started: torch's own flag, set at start and cleared by any stop.

    The C++ state is per thread unless profile_all_threads is on, so it alone
    cannot tell; the flag is what any profile's exit clears.
    """
    import torch
    from torch.autograd import profiler as autograd_profiler

    flag = getattr(autograd_profiler, "_is_profiler_enabled", None)
    return bool(flag) or bool(torch._C._autograd._profiler_enabled())


def _dist_backend() -> Optional[str]:
    import torch.distributed as dist

    try:
        return str(dist.get_backend())
    except Exception:  # not initialised, or a backend without a name
        return None


def session(
    modes: Sequence[Mode] = ("device", "runtime"),
    core: Core = None,
    *,
    backend: BackendName = "auto",
    wait: int = 2,
    warmup: int = 1,
    active: int = 1,
    repeat: int = 1,
    output_dir: Optional[PathLike] = None,
    record_shapes: bool = False,
    with_stack: bool = False,
    profile_memory: bool = False,
    with_flops: bool = False,
    keep_cycles: int = 4,
    profile_all_threads: bool = False,
) -> Session:
    """Open a profiling session: one ``with`` statement instead of a page of torch.profiler setup.

    ```python
    with neuronprof.session(modes=("device", "runtime"), core="0") as s:
        for _ in s.steps():
            model(x)
    print(s.table())
    s.export()
    ```

    The same script runs on Trainium (TorchNeuron), TPU (TorchTPU), CUDA GPUs and
    the CPU. Every argument is checked here, before anything is profiled. The
    arguments are the fields of [`SessionConfig`][neuronprof.SessionConfig], which
    the session keeps as ``s.config``.

    Args:
        modes: What to capture, any of ``"device"``, ``"runtime"``, ``"cpu_util"``,
            ``"host_memory"`` (each explained under [`Mode`][neuronprof.typing.Mode]). A
            mode the backend cannot capture is recorded in ``s.notes``, not an error.
        core: Device cores to capture: ``"0"``, ``"0,1"``, ``"2-5"`` or ``"all"``, as
            indices of the devices this process sees (process-local: under torchrun
            each process's cores start at 0). On Neuron this is
            ``capture_enabled_for_nc``, and the cores synchronised each step; None or
            ``"all"`` captures every NeuronCore of the process. On CUDA, the GPU
            indices to synchronise; None means the current GPU.
        backend: ``"auto"``, ``"neuron"``, ``"tpu"``, ``"cuda"``, ``"cpu"``, or the name
            of a PrivateUse1 device or registered backend (see
            [`BackendName`][neuronprof.typing.BackendName]).
        wait: Steps skipped at the start of each cycle.
        warmup: Steps profiled but discarded, so that one-time costs (compilation,
            caches) do not pollute the result.
        active: Steps recorded per cycle (at least 1).
        repeat: Number of wait/warmup/active cycles; their statistics are summed.
        output_dir: Folder for traces and backend files; default ``./neuronprof_output``.
            An explicit folder is created and checked for writing immediately.
        record_shapes: Record input shapes (rows are split per shape).
        with_stack: Record Python stacks (larger traces).
        profile_memory: Record memory allocated per op.
        with_flops: Estimate FLOPs of matrix multiplications and convolutions.
        keep_cycles: How many of the last cycles keep their raw events for
            ``export()`` (at least 1). Older cycles are folded into the table's
            statistics and their events freed, so ``repeat=0`` runs in flat memory;
            ``table()`` always covers every cycle.
        profile_all_threads: Record ops of every thread, not only the one that
            started the session (kineto's ``profile_all_threads``; needs a torch
            that has it, else ``ValueError``).

    Returns:
        A [`Session`][neuronprof.Session] to use in a ``with`` statement.

    Raises:
        ValueError: A mode, core or schedule number is invalid.
        BackendUnavailableError: The named backend cannot run here; the message
            says what to install.
        PermissionError: ``output_dir`` cannot be written.
        NotADirectoryError: ``output_dir`` is (inside) a file.
    """
    # The parameters are SessionConfig's fields, with its defaults (tests/test_public_api.py checks).
    return Session(
        SessionConfig(
            modes=modes,
            core=core,
            backend=backend,
            wait=wait,
            warmup=warmup,
            active=active,
            repeat=repeat,
            output_dir=output_dir,
            record_shapes=record_shapes,
            with_stack=with_stack,
            profile_memory=profile_memory,
            with_flops=with_flops,
            keep_cycles=keep_cycles,
            profile_all_threads=profile_all_threads,
        )
    )


def _active_session() -> Optional[Session]:
    """Return the session currently profiling in this process, if any."""
    return _active
