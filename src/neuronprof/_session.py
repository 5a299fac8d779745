"""The profiling session: validate, start, step with a device sync, stop.

A [`Session`][neuronprof.Session] owns the torch.profiler lifecycle and nothing
else. When its block ends, what it recorded is a frozen ``_recording.Recording``;
``table()``, ``export()``, ``roofline()``, ``insights()`` and ``report()`` are
functions of it (``_recording``, ``_recording_export``), and the guard of torch's
one profiler is ``_guard``.

This file is over 500 lines, kept in one module because ``Session``'s public methods and ``session()``
carry the API reference's docstrings (about half of it) next to the lifecycle
they document; the work behind the read-outs is in the modules above.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import logging
import os
import platform
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Optional, TypeVar, Union, overload

from neuronprof import _cycle_files, _io, _kineto, _recording, _recording_export
from neuronprof import _vocabulary as vocab
from neuronprof._config import DEFAULT_MODES, DEFAULT_OUTPUT_DIR, PathLike, SessionConfig, modes_given
from neuronprof._guard import (
    UTF8_ERROR,
    SignalGuard,
    dist_backend,
    foreign_starter,
    guard_profiler_starts,
    idle_transition,
    local_rank,
    profiler_running,
    profiler_taken,
    quiet_cycle_warning,
    release_profile,
    schedule_phase,
    stop_abandoned,
    taken_message,
    tracked_profile_class,
    unreadable_source_files,
)
from neuronprof._host import host_platform
from neuronprof._io import ensure_writable_dir, unique_path
from neuronprof._recording import Recording
from neuronprof.backends import SessionContext, format_writers, resolve_backend
from neuronprof.backends.base import Backend, distributed_rank
from neuronprof.errors import BackendUnavailableError, SessionStateError, warn_user
from neuronprof.export import DEVICE_EXPORTS, EXPORT_FORMATS, ExportFormat, default_trace_name
from neuronprof.model import RankTable, SortKey, Table
from neuronprof.typing import RANKS, BackendName, Core, DevicePreset, Mode, Ranks, ToolChoice

if TYPE_CHECKING:
    import torch.profiler

    from neuronprof.analysis import DevicePeak, NeuronProfile, Roofline, Trace
    from neuronprof.analysis.insights import Insights
    from neuronprof.analysis.trace import EventTable

__all__ = ["Session", "session"]

logger = logging.getLogger("neuronprof")

T = TypeVar("T")

# One profiler per process: torch.profiler's state is global, so a second
# session would silently corrupt the first. The lock is taken without blocking.
_active_lock = threading.Lock()
_active: Optional[Session] = None


class Session:
    """A torch.profiler run with the device setup, sync and schedule done for you.

    Create one with [`neuronprof.session`][neuronprof.session] and use it as a
    context manager (or call [`start`][neuronprof.Session.start] and
    [`stop`][neuronprof.Session.stop] where a block does not fit). Inside the block,
    iterate [`steps`][neuronprof.Session.steps] (or call
    [`step`][neuronprof.Session.step] at the end of each iteration); after the
    block, read [`table`][neuronprof.Session.table] and call
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
            BackendUnavailableError: The configured backend cannot run here, or not now
                (TorchNeuron with a ``NEURON_RT_INSPECT_*`` variable set); the message says the fix.
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

        self._backend, skipped = resolve_backend(config.backend)
        for line in skipped:
            logger.debug(line)
        self._refuse_if_conflicting()
        explicit = config.output_dir is not None
        # An explicit folder is created now, so that an impossible one fails here;
        # the default one is only created when something is written into it.
        self._output_dir = ensure_writable_dir(Path(config.output_dir or DEFAULT_OUTPUT_DIR), create=explicit)

        self._notes: list[str] = []
        self._state = "new"
        self._profiler: Optional[torch.profiler.profile] = None
        self._cycles: list[_kineto.Cycle] = []
        self._cycle_count = 0
        # The session's event keys (shared by its cycles' tables), the dropped cycles'
        # sums and memory (``keep_cycles``), and the record, read once after the block.
        self._keys: Any = None
        self._dropped: Any = None
        self._dropped_memory: dict[tuple[str, Any], tuple[int, int]] = {}
        self._recorded: Optional[Trace] = None
        self._cache_dir: Optional[Path] = None
        self._exiting = False
        self._abandoned = False
        self._left_in_step: Optional[int] = None
        self._steps_taken = 0
        self._started = 0.0
        self._rank: Optional[int] = None
        self._world_size: Optional[int] = None
        self._ctx: Optional[SessionContext] = None
        self._unguard: Callable[[], None] = lambda: None
        self._signals = SignalGuard()
        self._record_function: Any = None
        self._start_thread: Optional[int] = None
        self._interrupted: Optional[str] = None
        self._device_name: Optional[str] = None
        self._forked = False
        self._inherited_flags = False

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
        data = _recording.data_notes(self._record()) if self._state == "done" else ()
        device = self._empty_device_note if self._state == "done" else None
        return [*self._notes, *data, *([device] if device else [])]

    @property
    def profiler(self) -> torch.profiler.profile:
        """The underlying ``torch.profiler.profile``, for anything neuronprof does not cover.

        Raises:
            SessionStateError: The session has not started yet.
        """
        if self._profiler is None:
            raise SessionStateError("the profiler exists once the with-block has started (or s.start() was called)")
        return self._profiler

    @property
    def total_steps(self) -> Optional[int]:
        """Steps the schedule needs: ``(wait + warmup + active) * repeat``; None if repeat is 0."""
        return self.config.total_steps

    @property
    def steps_taken(self) -> int:
        """How many steps have ended so far."""
        return self._steps_taken

    @property
    def recorded_steps(self) -> int:
        """How many steps the profiler recorded so far.

        The active steps whose ``step()`` ran, plus an active step that a ``break``
        out of ``steps()`` left (torch saves it when the session stops).
        """
        return self._recorded_steps()[0]

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
    def start(self) -> None:
        """Start profiling, as entering the ``with`` block does, for code that cannot wrap a block.

        ```python
        s = neuronprof.session()
        s.start()
        try:
            for _ in s.steps():
                model(x)
        finally:
            s.stop()
        print(s.table())
        ```

        Pair it with [`stop`][neuronprof.Session.stop], in a ``finally`` so that an
        error in between does not leave torch's one profiler running; the ``with``
        block does both for you. A start that fails undoes itself: nothing is left
        running, and the error says why.

        Raises:
            SessionStateError: The session is already profiling (``start()`` called
                twice, or inside its ``with`` block), or it has stopped (a session runs
                once: make a new one); another session or torch.profiler profile is
                running in this process.
            BackendUnavailableError: The backend refuses to start now (TorchNeuron: a
                ``NEURON_RT_INSPECT_*`` variable is set); the message says the fix.
        """
        if self._state == "running":
            raise SessionStateError(
                "this session is already profiling: start() was called twice, or inside its with-block; "
                "call s.stop() to end it"
            )
        if self._state != "new":
            raise SessionStateError("a session runs once; create a new one with neuronprof.session(...)")
        try:
            # Python raises a signal's exception right after any C call, e.g. after the
            # lock was taken and before the code that would release it: hold signals back
            # (their handlers stay wrapped until the session stops: see SignalGuard).
            self._signals = SignalGuard()
            with self._signals.hold():
                self._enter()
        except BaseException:
            if self._state == "running":
                # A held-back Ctrl-C arrived once the start was complete; with-statements
                # do not call __exit__ when __enter__ raises, so stop here.
                self.stop(exc=sys.exc_info()[1])
            else:
                self._signals.uninstall()
            raise

    def __enter__(self) -> Session:
        self.start()
        try:
            return self
        except BaseException:
            # A Ctrl-C (or a signal's exception) that lands after start() has returned
            # but before the block begins: with-statements do not call __exit__ when
            # __enter__ raises, so the session stops here, as start() does for its own.
            self.stop(exc=sys.exc_info()[1])
            raise

    def _enter(self) -> None:
        global _active, _forked_from_a_session
        if not _active_lock.acquire(blocking=False):
            other = _active
            raise SessionStateError(
                "another neuronprof session is already profiling in this process"
                + (f" ({other!r})" if other is not None else "")
                + "; torch.profiler is process-wide, so end that session first"
            )
        try:
            # A child forked from an open session inherits torch's "profiler running" flags,
            # not a profiler: torch starts a new one there, and so does a session.
            if profiler_running() and not _forked_from_a_session:
                raise SessionStateError(
                    "a torch.profiler profile is already running in this process; "
                    "stop it before starting a neuronprof session"
                )
            _active = self
            _remove_stale_once()
            if self._output_dir.is_dir():
                _io.remove_stale_private_dirs(self._output_dir)
            self._inherited_flags, _forked_from_a_session = _forked_from_a_session, False
            self._unguard = guard_profiler_starts(self._refuse_foreign_start)
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

        # Checked again: the environment may have changed since the session was made.
        self._refuse_if_conflicting()
        self._rank, self._world_size = distributed_rank()
        ctx = self._context()
        self._device_name = self._backend.device_name(ctx)
        if self.with_stack:
            self._check_source_files()
        # Only modes the user asked for: the default ones are for the device backends and
        # mean nothing to a CPU run.
        unsupported = [m for m in self.modes if m not in self._backend.supported_modes]
        for mode in unsupported if modes_given(self.config.modes) else ():
            self._note(f"mode {mode!r} is not captured by the {self.backend} backend; ignored")
        if self._backend.writes_output:
            ensure_writable_dir(self._output_dir, create=True)
        experimental = self._experimental_config(self._backend.experimental_config(ctx))
        self._take_backend_notes()
        prof = tracked_profile_class()(
            activities=self._backend.activities(),
            schedule=_schedule(self.wait, self.warmup, self.active, self.repeat),
            on_trace_ready=self._on_trace_ready,
            record_shapes=self.record_shapes,
            with_stack=self.with_stack,
            profile_memory=self.profile_memory,
            with_flops=self.with_flops,
            experimental_config=experimental,
        )
        # kineto writes these into every cycle's trace header itself, so an export is a plain copy.
        # (torch adds record_shapes and distributedInfo there on its own.)
        self._started = time.time()  # (before the metadata, which names it)
        prof.neuronprof_metadata = self._kineto_metadata(stopped_in_last_step=False)
        self._start_thread = threading.get_ident()
        self._record_function = torch.autograd.profiler.record_function  # (looked up once: every step opens one)
        if self.with_stack:
            # torch imports a module at a process's first record_function (2.13: the CUPTI monitor's).
            # Imported inside the recording, with Python stacks, that module's top-level frame names
            # code freed once the import ends, and reading the frame's name later fails or gives
            # garbage: one record_function before recording makes that import happen here.
            with self._record_function("neuronprof: warm-up"):
                pass
        self._profiler = prof
        with self._signals.hold():
            try:
                prof.__enter__()
            except BaseException:
                # A half-started profiler would block every later session in this process.
                stop_abandoned(prof)
                self._profiler = None
                raise
        self._state = "running"

    def _check_source_files(self) -> None:
        """Turn Python stacks off, saying why, where torch's tracer would fail on a file name."""
        unreadable = unreadable_source_files()
        if not unreadable:
            return
        self.with_stack = False
        self.config = dataclasses.replace(self.config, with_stack=False)
        more = f" and {len(unreadable) - 1} more" if len(unreadable) > 1 else ""
        self._note(
            f"with_stack is off in this session: code was loaded from a path that is not valid UTF-8 "
            f"({ascii(unreadable[0])}{more}), whose frames torch's Python tracer cannot read: it would raise "
            "'error unpacking string as utf-8' inside your code and lose the cycle (pytorch#121219). Operators "
            "are recorded as usual. For Python stacks, load that code from a folder whose name is UTF-8"
        )

    def _kineto_metadata(self, *, stopped_in_last_step: bool) -> dict[str, str]:
        """The ``neuronprof`` header kineto writes into a cycle's trace, with how the cycle ended."""
        own = {**self._trace_metadata()["neuronprof"], vocab.STOPPED_IN_LAST_STEP: stopped_in_last_step}
        return {"neuronprof": json.dumps(own)}

    def _experimental_config(self, backend_config: Any) -> Any:
        """Add ``profile_all_threads`` to the backend's ``experimental_config``.

        (kineto's ``verbose`` is never asked for: it adds a "Call stack" field that kineto writes unescaped.)
        """
        if not self.profile_all_threads:
            return backend_config
        from torch._C._profiler import _ExperimentalConfig

        if backend_config is None:
            return _ExperimentalConfig(profile_all_threads=True)
        if type(backend_config) is _ExperimentalConfig:
            # Its other fields cannot be read back; the backends set only these two.
            return _ExperimentalConfig(
                custom_profiler_config=backend_config.custom_profiler_config,  # type: ignore[attr-defined]
                trace_only=backend_config.trace_only,
                profile_all_threads=True,
            )
        self._note(
            f"the {self.backend} backend configures torch.profiler with its own {type(backend_config).__name__}, "
            "which cannot carry profile_all_threads; it is off in this session"
        )
        return backend_config

    def _context(self) -> SessionContext:
        """Return what the backend needs to know, resolving the default core once."""
        if self._ctx is None:
            ctx = SessionContext(
                modes=self.modes,
                core=self._core_arg,
                output_dir=self._output_dir,
                local_rank=local_rank(),
                max_events_per_nc=self.config.max_events_per_nc,
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
        cycle = _kineto.Cycle(index=self._cycle_count, profile=prof.profiler, closed_at_exit=self._exiting)
        self._cycle_count += 1
        self._cycles.append(cycle)
        # kineto's save works once: it is taken into a private cache that every export copies, by
        # the first export that needs it (a cycle nobody exports is never written: the end of the
        # block costs what torch's stop does). The cycle's export_chrome_trace takes and copies it too.
        cycle.save = functools.partial(_keep_native_trace, weakref.ref(self))  # (no reference cycle)
        cycle.read = functools.partial(_read_kept_cycle, weakref.ref(self))
        _cycle_files.route_torch_export(cycle)
        assert self._ctx is not None
        if type(self._backend).on_trace_ready is not Backend.on_trace_ready:
            # A backend's exporter (TorchNeuron's writes trace.json for Neuron Explorer) may spend
            # kineto's save itself: it is taken first, and the backend's export gets a copy.
            _cycle_files.take_save(cycle)
        cycle.backend_trace = self._backend.on_trace_ready(prof, self._ctx)
        self._take_backend_notes()
        self._drop_old_cycles()

    def _keep_native_trace(self, cycle: _kineto.Cycle) -> None:
        """Take kineto's one-time save of ``cycle`` into the private cache, or say what exports lose."""
        reason = "kineto could not write it (see its log above)"
        if cycle.profile is None:
            return  # dropped (keep_cycles): nothing is exported of it
        try:
            # A termination request while kineto writes removes the private copy first.
            with _io.cleaned_up_on_termination():
                if _cycle_files.save_native_trace(cycle, self._private_dir() / f"cycle{cycle.index}.json"):
                    return
        except OSError as exc:
            reason = f"{exc.strerror or exc} ({exc.filename or 'the temporary folder'})"
        self._note(
            f"could not keep torch's own save of cycle {cycle.index}'s trace: {reason}. Exports of it are "
            "written by torch's Python exporter from the recorded events instead, which differs from torch's "
            "save: memory events as slices (TensorBoard's memory view is empty), and no host_name or trace_id "
            "in the header. Free space in $TMPDIR or output_dir to keep torch's save"
        )

    def _refuse_if_conflicting(self) -> None:
        reason = self._backend.refusal()
        if reason:
            raise BackendUnavailableError(reason)

    def _private_dir(self) -> Path:
        if self._cache_dir is None:
            try:
                self._cache_dir = _io.private_dir("cycles")
            except OSError:
                # No room in $TMPDIR (or not writable): a hidden folder in output_dir instead.
                ensure_writable_dir(self._output_dir, create=True)
                self._cache_dir = _io.private_dir("cycles", parent=self._output_dir)
            # The cache lives as long as the session object (and is removed if the process is terminated).
            weakref.finalize(self, _io.remove_private_dir, self._cache_dir)
        return self._cache_dir

    def _drop_old_cycles(self) -> None:
        """Fold cycles beyond ``keep_cycles`` into running statistics and free their events."""
        if len(self._cycles) <= self.keep_cycles:
            return
        from neuronprof.analysis.trace import sum_events

        while len(self._cycles) > self.keep_cycles:
            old = self._cycles.pop(0)
            sums = sum_events(self._read_cycle(old))
            if self._dropped is None:
                self._dropped = sums
            else:
                self._dropped.add(sums)
            _add_memory(self._dropped_memory, old.memory)
            old.events = None
            old.save = old.read = None
            if old.cache is not None:
                old.cache.unlink(missing_ok=True)
            old.profile = None
            old.cache = None

    def _take_backend_notes(self) -> None:
        for message in self._backend.session_notes(self._context()):
            self._note(message)

    def _has_device(self) -> bool:
        # Device columns exist where the backend has a device and its time reaches
        # torch.profiler; elsewhere (TorchNeuron without correlation) they stay blank, not 0.0.
        return self.device_label is not None and self._backend.device_time(self._context()) != "none"

    def stop(self, *, exc: Optional[BaseException] = None) -> None:
        """Stop profiling and keep what was recorded, as the end of the ``with`` block does.

        The cycle in progress is saved (an active step it cuts short is kept and
        said so), the session's notes are made (a schedule that did not run to its
        end warns), torch's profiler is free again, and the results are ready:
        ``table()``, ``export()``, ``insights()``, ``report()``. Inside a ``with``
        block, the block's end then has nothing left to do.

        Args:
            exc: The exception that ended the profiled work, if any. The session then
                ends as its block would when that exception leaves it: what was recorded
                is kept, ``s.notes`` says the run was interrupted (no warning about
                missing steps), and a failure to stop the profiler is noted instead of
                raised over ``exc``.

        Raises:
            SessionStateError: The session has not started (call ``start()`` first) or
                has already stopped; or another profiler took torch's profiler from the
                session while it ran (the message says which, and the cycles completed
                before are kept).
        """
        if self._state == "new":
            raise SessionStateError(
                "stop() was called before start(): this session is not profiling; call s.start() first, "
                "or use `with neuronprof.session() as s:`"
            )
        if self._state == "done":
            raise SessionStateError(
                "this session has already stopped: stop() was called twice, or after its with-block; "
                "read its results with s.table() or s.export()"
            )
        # The end saves the last cycle: a termination request until it is done removes
        # the private copies (and what else is in progress) before it ends the process.
        try:
            with _io.cleaned_up_on_termination():
                self._exit(None if exc is None else type(exc), exc)
        finally:
            # The program's own signal handlers, as they were (or as it set them inside the block).
            self._signals.uninstall()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        # A block whose session was stopped inside it with stop() has nothing left to end.
        if self._state != "done":
            self.stop(exc=exc)

    def _exit(self, exc_type: Any, exc: Any) -> None:
        global _active
        if self._forked:
            # A forked child leaving the parent's block: nothing of it is this process's.
            self._state = "done"
            self._note("this process was forked from the one that opened the session; its cycles are the parent's")
            return
        failure: Optional[BaseException] = None
        try:
            if self._profiler is not None and self._state == "running" and not self._abandoned:
                self._close_step_span()
                foreign = self._foreign_profiler()
                if foreign is not None:
                    failure = SessionStateError(foreign)
                else:
                    self._exiting = True
                    # A cycle the exit ends stops inside its last step; the trace says so.
                    setattr(self._profiler, "neuronprof_metadata", self._kineto_metadata(stopped_in_last_step=True))  # noqa: B010
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
            # A signal's exception can surface between any two of these (this is not
            # inside the signal guard): each step runs even when the one before raised,
            # and the process-wide lock goes first, so a new session can always start.
            try:
                _active_lock.release()
                _active = None
            finally:
                try:
                    self._state = "done"
                finally:
                    self._unguard()
        if exc_type is not None or failure is not None:
            self._interrupted = (exc_type or type(failure)).__name__
        if self.with_stack and UTF8_ERROR in str(exc if exc is not None else failure or ""):
            unreadable = unreadable_source_files()
            self._note(
                f"torch's Python tracer raised '{UTF8_ERROR}' inside the block: a frame's file name is not valid "
                f"UTF-8 ({', '.join(map(ascii, unreadable)) or 'code compiled from such a name'}); torch loses "
                "the cycle then (pytorch#121219). Import that code before the session starts (the session then "
                "records without Python stacks and says so), or load it from a folder whose name is UTF-8"
            )
        if failure is not None and exc_type is not None:
            # The block's own exception reaches the user unchanged; the failed stop is noted.
            self._note(f"stopping the profiler after the block's {exc_type.__name__} failed too: {failure!r}")
            failure = None
        self._check_steps(interrupted=exc_type is not None or failure is not None)
        # So that session after session does not grow, without a full collection (as raw torch.profiler
        # users are told to make) at every block's end: a dropped session frees its profiler at once.
        release_profile(self._profiler)
        if failure is not None:
            raise failure

    def _drive(self, transition: Callable[..., Any], *args: Any, idle: bool = False) -> None:
        """Run one torch.profiler state change so that an interrupt cannot leave it half-made.

        Signals that would raise (Ctrl-C, alarms) wait until the change is complete;
        any exception that still escapes it stops the profiler without re-entering
        torch's schedule (which crashes on a half-made profiler) and is re-raised.
        ``idle``: the transition starts, stops and saves nothing (see ``idle_transition``).
        """
        with self._signals.hold(state_change=not idle):
            try:
                if idle or self.repeat == 1:
                    transition(*args)
                else:
                    with quiet_cycle_warning():
                        transition(*args)
            except BaseException:
                if not idle:
                    self._abandon()
                elif self._profiler is not None:
                    # A wait step's transition only counts: cut short (by a handler the block installed,
                    # which is wrapped at the next state change), it leaves no profiler state half-made,
                    # so the session goes on, with torch's count.
                    self._steps_taken = getattr(self._profiler, "step_num", self._steps_taken)
                raise

    def _left_in_fork(self) -> None:
        """In a forked child: the copy only counts steps, stops nothing and keeps no cycles (the parent's)."""
        self._forked = True
        self._unguard()
        self._unguard = lambda: None
        self._signals.uninstall()
        self._profiler = None
        self._cycles = []

    def _abandon(self) -> None:
        """Leave torch.profiler stopped after a failed state change; keep the finished cycles."""
        self._abandoned = True
        if self._profiler is not None:
            stop_abandoned(self._profiler)

    def _refuse_foreign_start(self) -> SessionStateError:
        """The error for a profiler started inside the block; torch's flags are left as the session's."""
        from torch.autograd import profiler as autograd_profiler

        # emit_nvtx / emit_itt raise torch's "profiler enabled" flag before they start.
        recording = getattr(self._profiler, "kineto_state", "idle") == "recording"
        autograd_profiler._set_is_profiler_enabled(recording)
        phase = schedule_phase(self.config, self._steps_taken)
        message = (
            f"another torch.profiler was started inside the session's block: {foreign_starter()}, "
            f"during step {self._steps_taken} ({phase}). torch has one profiler per process, and a "
            "second one would end this session's recording or crash the process, so neuronprof refused it; "
            "the session's recording is unharmed. Profile one thing at a time: remove the inner profiler, "
            "or end the session before it starts"
        )
        self._note(message)
        return SessionStateError(message)

    def _foreign_profiler(self) -> Optional[str]:
        """Say what happened if another profiler took torch's one profiler from this session."""
        if self._profiler is None or self._abandoned:
            return None
        if self._inherited_flags:
            # Forked from an open session: torch's flags say "running" until this profiler records.
            if getattr(self._profiler, "kineto_state", "idle") != "recording":
                return None
            self._inherited_flags = False
        taken = profiler_taken(self._profiler, start_thread=self._start_thread, all_threads=self.profile_all_threads)
        if taken is None:
            return None
        # The session stops nothing it does not own: a profiler left running is its starter's to stop.
        self._abandon()
        return taken_message(taken, steps_taken=self._steps_taken, cycle_count=self._cycle_count)

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
        warn_user(message)

    def _recorded_steps(self) -> tuple[int, bool]:
        """Return (recorded steps, whether the last one was cut short by leaving ``steps()``; torch saves it)."""
        cycle = self.wait + self.warmup + self.active
        full, rest = divmod(self._steps_taken, cycle)
        recorded = full * self.active + max(0, rest - self.wait - self.warmup)
        cut_short = self._left_in_step == self._steps_taken and rest >= self.wait + self.warmup
        return recorded + int(cut_short), cut_short

    # -- inside the block ------------------------------------------------------
    def _require_running(self, what: str) -> None:
        if self._state == "new":
            raise SessionStateError(
                f"{what} works inside the with-block; use `with neuronprof.session() as s:` (or call s.start() first)"
            )
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
        # Kept short while the step's span is open: what runs here is recorded in the step.
        if self._forked and self._state == "running":
            self._steps_taken += 1
            return
        if self._state != "running" or self._abandoned:
            self._step_refused()
        # Without this sync the device work of the step would be attributed to
        # the next one, or lost when the trace is cut: empty device columns. (A backend
        # with nothing to wait for is not called: with_stack would record the call.)
        if type(self._backend).synchronize is not Backend.synchronize:
            self._backend.synchronize(self._ctx or self._context())
        # The session's own work (checks, signal guard, schedule bookkeeping) runs
        # between the recorded steps, not inside one: the step span closes here and
        # the next one opens when that work is done (see ``_open_step_span``).
        self._close_step_span()
        foreign = self._foreign_profiler()
        if foreign is not None:
            raise SessionStateError(foreign)
        self._drive(self._advance, idle=idle_transition(self.config, self._steps_taken))
        self._open_step_span()

    def _step_refused(self) -> NoReturn:
        """Raise why ``step()`` cannot run: outside the block, or after an interrupted step."""
        self._require_running("step()")
        raise SessionStateError(
            "the profiler was stopped when an earlier step() was interrupted; "
            f"the {self._cycle_count} completed cycle(s) are kept. Leave the with-block and read the results"
        )

    def _close_step_span(self) -> None:
        """End the open ``ProfilerStep#N`` span now, as torch's ``step()`` would at its start."""
        prof = self._profiler
        span = getattr(prof, "step_rec_fn", None)
        if span is not None and getattr(prof, "record_steps", False):
            prof.step_rec_fn = None  # type: ignore[union-attr]
            span.__exit__(None, None, None)

    def _open_step_span(self) -> None:
        """Open ``ProfilerStep#N`` for the step that starts now, as torch's ``step()`` does at its end."""
        prof = self._profiler
        if prof is None or self._abandoned or not getattr(prof, "record_steps", False):
            return
        if getattr(prof, "step_rec_fn", None) is None:
            span = self._record_function(f"{vocab.STEP_PREFIX}{prof.step_num}")
            span.__enter__()
            prof.step_rec_fn = span

    def _advance(self) -> None:
        prof = self._profiler
        assert prof is not None
        # torch's step() would open the next step's span before this transition's own
        # work is done (the signal guard is restored after it): ``step()`` opens it.
        record = getattr(prof, "record_steps", None)
        if record:
            prof.record_steps = False
        try:
            prof.step()
        finally:
            if record:
                prof.record_steps = True
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
            raise SessionStateError(
                f"{what} is available after the session has run; use it in a with-block (or between s.start() "
                "and s.stop()) first"
            )
        if self._state == "running":
            raise SessionStateError(
                f"{what} is available after the with-block ends; call it after the block (or after s.stop())"
            )

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
            across ranks and the slowest rank, on every rank; its
            [`straggler`][neuronprof.model.RankTable.straggler] is the rank the others
            wait for: the most compute per step (step time less the time in collectives).

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
        from neuronprof.analysis.trace._model import check_table_options

        check_table_options(sort_by, row_limit, device_only, "name")  # the offline table's own check
        if ranks not in RANKS:
            raise ValueError(f"ranks must be 'local' or 'all', got {ranks!r}")
        _flags(neuron_heuristic=neuron_heuristic)
        self._require_done("table()")
        if ranks == "all":
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
                raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
            return _recording.gather_rank_table(self._record(), float(timeout))
        record = self._record()
        table = _recording.local_table(record)
        # What only the backend's own files say (TorchNeuron: NeuronCore time from Neuron's profile).
        table = self._backend.complete_table(table, self._context(), heuristic=neuron_heuristic)
        message = self._empty_device_note
        if message is not None and not table.has_device_time:
            warn_user(message)
            if message not in table.notes:
                table = dataclasses.replace(table, notes=(*table.notes, message))
        return _recording.sort_and_cut(record, table, sort_by=sort_by, row_limit=row_limit, device_only=device_only)

    def insights(self) -> Insights:
        """Say what to fix first: findings read from the recorded steps, most costly first.

        Host↔device copies, hidden synchronisations, an idle device, a CPU-bound
        loop, unfused elementwise chains, dtype conversions, recompilations and graph
        breaks, a slow input pipeline, host time between ops, waiting in collectives,
        low precision without hardware support, CPU fallbacks and one dominant op, each
        with its evidence, the
        time at stake, one suggestion and a link to the guide. The same engine reads
        exported traces (``neuronprof advise TRACE``). Record shapes
        (``record_shapes=True``) for dtype and scalar details.

        Returns:
            [`Insights`][neuronprof.analysis.insights.Insights]; ``print()`` it.
            Device findings are skipped with a note when no device time was recorded.

        Raises:
            SessionStateError: Called before the with-block has ended, or nothing was recorded.
        """
        self._require_done("insights()")
        return _recording.insights(self._record())

    def neuron_profile(self, *, tool: ToolChoice = "auto") -> NeuronProfile:
        """Read Neuron's own profile of this session: engines, NEFF executions, busy time per step.

        Neuron Runtime writes its files at profiler stop; ``neuron-explorer``
        (package ``aws-neuronx-tools``) turns them into JSON, which is kept beside
        them so that later reads and ``export(format="neuron")`` bundles need no
        tool; with pyarrow (``neuronprof[neuron]``) so is its Parquet output, which gives
        the profile's own hardware peaks (``roofline()`` without ``device``) and device
        time joined to ops through ``flow_id`` (not verified on hardware). Read once per
        session.

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
        profile = self._backend.device_profile(self._context(), tool=tool)
        if profile is None:
            raise ValueError(
                f"neuron_profile() reads the device's own profile, and the {self.backend!r} backend of this session "
                "writes none (the neuron backend does: TorchNeuron writes Neuron's profile)"
            )
        return profile

    def report(self, path: Optional[PathLike] = None, *, overwrite: bool = False, baseline: Any = None) -> Path:
        """Write one self-contained HTML report to look at and share: the panes TensorBoard's profiler had.

        The file opens offline in any browser (no network request), on a phone as on a
        wall: an overview (step time per step, each step broken down by category, the
        top findings of [`insights`][neuronprof.Session.insights], the settings and
        environment), the operators (sortable, filterable, by name or input shape, by
        ``nn.Module`` with ``with_stack``, the heaviest op's call tree), the device's
        kernels (with the device's own profile where the backend wrote one: on the neuron
        backend, Neuron's NEFF executions and engine breakdown, read once per session as
        [`neuron_profile`][neuronprof.Session.neuron_profile] reads it), memory (with
        ``profile_memory=True``: allocated and reserved memory over the steps per device,
        the peak and the ops around it, the top allocating ops), the ranks of a distributed run,
        a zoomable timeline of the recorded steps, and with ``baseline`` the two runs side
        by side as differences (the overview per category and the op table, A, B and the
        change) under the verdict of ``neuronprof diff``. A pane this run cannot fill says
        why. ``neuronprof report TRACE`` makes the same page from an exported trace.

        Args:
            path: The ``.html`` file to write. Default: a timestamped name in ``output_dir``.
            overwrite: Replace an existing file instead of raising ``FileExistsError``.
            baseline: A baseline run to compare this one with (a trace file, a folder of
                runs, a [`Trace`][neuronprof.analysis.Trace] or an earlier session): adds
                the two-run pane with ``neuronprof diff``'s verdicts (each step a sample;
                with several runs on each side, each run's median step). ``None``: no pane.

        Returns:
            The file written.

        Raises:
            SessionStateError: Called before the with-block has ended, or nothing was recorded.
            FileExistsError: The file exists and ``overwrite`` is False.
            OSError: The disk refused the write; no partial file is left.
        """
        _flags(overwrite=overwrite)
        self._require_done("report()")
        record = self._record()
        _recording.require_recorded(record, "there is nothing to report")
        device, why = self._device_profile_for_report()
        # A termination request from here to the written file removes the private copies first.
        with _io.cleaned_up_on_termination():
            return _recording.report(
                record,
                path,
                overwrite=overwrite,
                world_size=self._world_size,
                baseline=baseline,
                device_profile=device,
                device_note=why,
            )

    def _device_profile_for_report(self) -> tuple[Any, Optional[str]]:
        """The device's own profile for the report (read once per session, as ``neuron_profile()``), or why not.

        ``(None, None)`` where the backend has no profile of its own.
        """
        try:
            return self._backend.device_profile(self._context()), None
        except SessionStateError as exc:
            return None, f"the device's own profile is not in this report: {exc}"

    def _read_cycle(self, cycle: _kineto.Cycle) -> EventTable:
        """A cycle's event table, converted from kineto's events once, with the backend's remarks on it."""
        if cycle.events is None:
            table = _kineto.read_cycle(cycle, self._keys, self._trace_metadata())
            self._keys = table.keys  # the first cycle's keys, shared by the others
            cycle.notes = tuple(self._backend.cycle_notes(table, self._context(), cycle.index))
            for message in cycle.notes:
                self._note(message)
        assert cycle.events is not None
        return cycle.events

    @property
    def recording(self) -> Trace:
        """What the session recorded, read once: the same type [`load_trace`][neuronprof.analysis.load_trace] returns.

        Built the first time it is needed after the block ends (kineto's events of each
        cycle are converted once into an event table); every read-out (``table()``,
        ``insights()``, ``roofline()``, ``report()``, ``trace()``) reads it, and reading
        it changes nothing. Per-op sums cover every cycle (those beyond
        ``keep_cycles`` too); the events held are those of the kept cycles.

        Raises:
            SessionStateError: Called before the with-block has ended.
        """
        self._require_done("recording")
        if self._recorded is None:
            tables = [self._read_cycle(c) for c in self._cycles]
            memory = dict(self._dropped_memory)
            for c in self._cycles:
                _add_memory(memory, c.memory)
            self._recorded = _recording.record_trace(
                tables,
                earlier=self._dropped,
                memory=memory,
                backend=self.backend,
                device_label=self.device_label,
                has_device=self._has_device(),
                device_name=self._device_name,
                notes=[n for c in self._cycles for n in c.notes],
            )
        return self._recorded

    def _record(self) -> Recording:
        """A read-only view of what this session recorded, for one read-out (``table()``, ``export()``...)."""
        return Recording(
            config=self.config,
            backend=self.backend,
            device_label=self.device_label,
            core=self.core,
            cycles=tuple(self._cycles),
            cycle_count=self._cycle_count,
            read=lambda: self.recording,
            notes=tuple(self._notes),
            interrupted=self._interrupted,
            steps_taken=self._steps_taken,
            rank=self._rank,
            started=self._started,
            output_dir=self._output_dir,
            metadata=self._trace_metadata(),
            device_name=self._device_name,
        )

    @functools.cached_property
    def _empty_device_note(self) -> Optional[str]:
        """The note for device time asked for and expected, of which no row has any; found once, after the block."""
        wants_device = "device" in self.modes and "device" in self._backend.supported_modes
        # The backend knows whether device time was expected at all; when it was not,
        # its note (already in s.notes) explains why instead.
        expected = self._backend.empty_device_warning(self._context()) if wants_device and self._cycles else None
        if not expected:
            return None
        table = _recording.local_table(self._record())
        if not table.has_device_time:
            # Device time may come from the backend's own files (TorchNeuron: Neuron's profile).
            table = self._backend.complete_table(table, self._context(), heuristic=False)
        return None if table.has_device_time else expected

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
                # The modes this backend captured (a CPU run captures none of the default ones).
                "captured_modes": [m for m in self.modes if m in self._backend.supported_modes],
                "core": self.core,
                "schedule": {"wait": self.wait, "warmup": self.warmup, "active": self.active, "repeat": self.repeat},
                # The recording's options and machine, for the report's settings (live and of the export alike).
                "options": {
                    "record_shapes": self.record_shapes,
                    "profile_memory": self.profile_memory,
                    "with_stack": self.with_stack,
                    "with_flops": self.with_flops,
                },
                "python": platform.python_version(),
                "platform": host_platform(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self._started)) if self._started else None,
                # What the findings need to judge low-precision work on the host's CPU.
                "native_dtypes": list(_kineto.native_dtypes()),
            }
        }
        if self.record_shapes:
            meta["record_shapes"] = 1
        if self._rank is not None:
            meta["distributedInfo"] = {"rank": self._rank, "world_size": self._world_size, "backend": dist_backend()}
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
        _flags(overwrite=overwrite)
        self._require_done("export()")
        # A termination request from here to the written file removes the private copies first.
        with _io.cleaned_up_on_termination():
            if format in DEVICE_EXPORTS:
                return self._export_device_files(format, path, overwrite=overwrite)
            return _recording_export.export(self._record(), path, format=format, overwrite=overwrite, cycle=cycle)

    def _export_device_files(self, format: str, path: Optional[PathLike], *, overwrite: bool) -> Path:
        """Write a format made from the backend's own files (TorchNeuron's: the Neuron Explorer bundle)."""
        # Raises, saying why, where the backend has files of its own but this session wrote none.
        files = self._backend.device_files(self._context()) if format in self._backend.export_formats else None
        if files is None:
            raise ValueError(
                f"format={format!r} needs the {' or '.join(format_writers(format))} backend; this session used "
                f"{self.backend!r}. Use format='chrome' or 'tensorboard'"
            )
        prefix, write = DEVICE_EXPORTS[format]
        if path is None:
            name = default_trace_name(self.backend, self._started, rank=self._rank, suffix="")
            target = unique_path(self._output_dir / name.replace("neuronprof_", f"{prefix}_", 1))
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
            # For cycle folders the device's runtime left without a framework trace (TorchNeuron's legacy build).
            if index >= len(self._cycles):
                return False
            _recording_export.trace_writer(record, self._cycles[index])(dest)
            return True

        record = self._record()
        sessions = list(files.cycle_dirs) or None
        return write(files.root, target, sessions=sessions, framework_trace=framework_trace)

    def roofline(
        self,
        device: Optional[Union[DevicePreset, DevicePeak]] = None,
        *,
        peak_flops: Optional[float] = None,
        peak_bw: Optional[float] = None,
    ) -> Roofline:
        """Place each recorded op on a device's roofline: is it compute- or memory-bound?

        Needs ``record_shapes=True`` (bytes moved come from shapes and dtypes);
        ``with_flops=True`` adds torch's own FLOP counts where it has them. Read
        from the recorded events of the kept cycles (``keep_cycles``) in memory:
        no trace is written or parsed back.

        Without ``device``, the roofs are those of the device the session ran on, as
        its backend names it (a CUDA GPU by ``torch.cuda.get_device_name()``:
        ``"NVIDIA H200"`` is ``"h200"``). A session on the CPU, on a device without a
        preset, or on one whose model the backend does not name (TorchNeuron does not
        say which Trainium generation it runs on) is refused; name a preset then, and
        the result says that its peaks are a preset's.

        Args:
            device: A preset (``"trn2"``, ``"trn1"``, ``"h100"``, ``"h200"``, ``"a100"``)
                or a [`DevicePeak`][neuronprof.analysis.DevicePeak]; ``None`` (the
                default) for the session's own device.
            peak_flops: Peak FLOP/s overriding the preset's.
            peak_bw: Peak memory bandwidth in bytes/s overriding the preset's. Given with
                ``peak_flops`` and no ``device``, the two are the peaks.

        Returns:
            A [`Roofline`][neuronprof.analysis.Roofline]; print it or ``plot()`` it.

        Raises:
            SessionStateError: Called before the with-block has ended, or nothing was recorded.
            UnknownDeviceError: No ``device`` was given and the session's device has no
                known peaks (the message says what it ran on); raised before any work.
            ValueError: Unknown preset, or a peak that is not positive.
        """
        self._require_done("roofline()")
        return _recording.roofline(self._record(), device, peak_flops=peak_flops, peak_bw=peak_bw)

    def trace(self) -> Trace:
        """The recording as an offline [`Trace`][neuronprof.analysis.Trace]: what ``load_trace`` reads from its export.

        Per-op sums and one [`StepSample`][neuronprof.analysis.StepSample] per recorded
        step, from the events in memory (no trace is written). What
        [`diff`][neuronprof.analysis.diff] and [`check`][neuronprof.analysis.check] read
        when given a session: ``diff(before, after)`` with two sessions says whether the
        step got faster, with its confidence interval.

        Raises:
            SessionStateError: Called before the with-block has ended, or nothing was recorded.
        """
        self._require_done("trace()")
        rec = self._record()
        _recording.require_recorded(rec, "there is no trace")
        return rec.trace


def session(
    modes: Sequence[Mode] = DEFAULT_MODES,
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
    max_events_per_nc: Optional[int] = None,
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
            ``"host_memory"`` (each explained under [`Mode`][neuronprof.typing.Mode]);
            default ``("device", "runtime")``. A mode passed here that the backend cannot
            capture is recorded in ``s.notes``, not an error; the default modes are
            ignored silently where they do not apply (the CPU).
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
        max_events_per_nc: Neuron only: Neuron Runtime's cap on the events it captures
            per NeuronCore (``NeuronConfig(max_events_per_nc=...)``); None keeps Neuron's
            default, 1,000,000. The runtime drops events past it without a word; a
            correlated capture that reaches it says so in ``s.notes`` and the table.
            Other backends ignore it (a note says so).

    Returns:
        A [`Session`][neuronprof.Session] to use in a ``with`` statement.

    Raises:
        ValueError: A mode, core or schedule number is invalid.
        BackendUnavailableError: The named backend cannot run here (TorchNeuron: also while a
            ``NEURON_RT_INSPECT_*`` variable is set, which conflicts with torch.profiler); the message
            says what to install or change.
        PermissionError: ``output_dir`` cannot be written.
        NotADirectoryError: ``output_dir`` is (inside) a file.
    """
    # The parameters are SessionConfig's fields, with its defaults (tests/test_public_api.py checks),
    # so they are handed on as they are: a new field is one more parameter here, nothing else.
    return Session(SessionConfig(**locals()))


def _keep_native_trace(session: weakref.ref[Session], cycle: _kineto.Cycle) -> None:
    alive = session()
    if alive is not None:
        alive._keep_native_trace(cycle)


def _flags(**given: Any) -> None:
    """Refuse an on/off option that is not a bool (``overwrite="no"`` would read as on), before any work."""
    for name, value in given.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r}")


def _schedule(wait: int, warmup: int, active: int, repeat: int) -> Any:
    """torch.profiler's schedule, its warnings (``warmup=0``) given at the user's line, not this file's."""
    import torch

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        schedule = torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)
    for w in said:
        warn_user(str(w.message), w.category)
    return schedule


def _read_kept_cycle(session: weakref.ref[Session], cycle: _kineto.Cycle) -> EventTable:
    alive = session()
    if alive is None:
        raise RuntimeError("the session that recorded this cycle is gone; its events cannot be read")
    return alive._read_cycle(cycle)


def _add_memory(
    total: dict[tuple[str, Any], tuple[int, int]], memory: Mapping[tuple[str, Any], tuple[int, int]]
) -> None:
    """Add one cycle's self host/device memory (bytes) per ``(name, input shapes)`` into ``total``."""
    for key, (cpu, dev) in memory.items():
        was = total.get(key, (0, 0))
        total[key] = (was[0] + cpu, was[1] + dev)


def _active_session() -> Optional[Session]:
    """Return the session currently profiling in this process, if any."""
    return _active


# Set in a child forked while a session was open, until the child's own first session starts.
_forked_from_a_session = False


@functools.cache
def _remove_stale_once() -> None:
    # Private folders of processes that died without cleaning up (SIGKILL, a crash): once a process.
    _io.remove_stale_private_dirs()


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) may profile: torch.profiler's state is per process."""
    global _active_lock, _active, _forked_from_a_session
    _active_lock = threading.Lock()
    parent, _active = _active, None
    if parent is not None:
        _forked_from_a_session = True
        parent._left_in_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
