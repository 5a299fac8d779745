"""What keeps torch's one profiler the session's: signal deferral, the start guard, a safe stop.

torch.profiler's state is process-wide and its state changes are not interrupt-safe.
These helpers hold signals back while it changes state, refuse any other profiler
start while a session is open, and stop a profiler whose state change failed
without re-entering torch's schedule. The [`Session`][neuronprof.Session] uses them;
they know nothing of what it records.
"""

from __future__ import annotations

import _signal  # signal's C functions: the same handlers without the enum conversions of every call
import contextlib
import os
import signal
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional

from neuronprof._io import terminate

__all__ = [
    "dist_backend",
    "guard_profiler_starts",
    "idle_transition",
    "local_rank",
    "profiler_running",
    "profiler_started",
    "profiler_taken",
    "schedule_phase",
    "taken_message",
    "quiet_cycle_warning",
    "release_profile",
    "SignalGuard",
    "stop_abandoned",
    "tracked_profile_class",
    "unreadable_source_files",
]

# Signals whose Python handlers are held back while torch.profiler changes state
# (see SignalGuard): Ctrl-C, termination requests, timers, user signals.
_DEFERRED_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGALRM", "SIGVTALRM", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)
# The termination requests whose default action ends the process (as ``_io.terminate`` knows them).
_TERMINATION_REQUESTS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def local_rank() -> Optional[int]:
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value is not None and value.isdigit() else None


def profiler_running() -> bool:
    import torch

    return torch.autograd.profiler._is_profiler_enabled


@contextlib.contextmanager
def quiet_cycle_warning() -> Iterator[None]:
    # torch warns that each cycle clears the previous one's events; the session
    # keeps every cycle itself, so the warning would only mislead.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        yield


class _Relay:
    """A signal handler as a ``SignalGuard`` installs it: runs ``run``, or holds the signal during a change."""

    __slots__ = ("guard", "original", "run")

    def __init__(self, guard: SignalGuard, run: Callable[[int, Any], Any], original: Any) -> None:
        self.guard = guard
        self.run = run
        self.original = original  # what the guard puts back

    def __call__(self, signum: int, frame: Any) -> Any:
        if self.guard._depth:
            self.guard._pending.append((signum, self.run))
            return None
        return self.run(signum, frame)

    def __repr__(self) -> str:
        return f"<neuronprof's relay of {self.original!r}>"


class SignalGuard:
    """Holds signal handlers back while torch.profiler changes state, then runs them: one per session.

    torch.profiler's state changes are not interrupt-safe: a KeyboardInterrupt in the
    middle of one leaves a half-made profiler that crashes the process when it is
    stopped. Inside ``with guard.hold():`` the Python handlers of Ctrl-C, timers and user
    signals wait until the change is complete, then run, in the order the signals came.
    Python runs signal handlers in the main thread only, so other threads need nothing.

    Each Python handler is wrapped once, by the first ``hold()``, in a relay that runs it
    at once outside a change; ``uninstall()`` (when the session ends) puts it back. So
    entering the guard changes no handler and makes no system call (re-installing seven
    handlers at every step cost more than torch's own ``step()``). While the session is
    open, ``signal.getsignal`` returns the relay (which calls the handler); a handler the
    program installs inside the block is wrapped at the next state change.

    SIGTERM and SIGHUP left at their default action keep it between changes (the process
    ends at once, even inside a long C call); a state change (one that may start, stop or
    save a profile) makes them wait too, and when one came, what neuronprof was writing or
    keeps privately is removed and the process then ends as the default action would have
    ended it.
    """

    __slots__ = ("_change", "_depth", "_main", "_pending", "_seen", "_terminations_held")

    def __init__(self) -> None:
        """Make the guard of a session that starts now (in this process: a fork has its own main thread)."""
        self._main = threading.main_thread().ident
        self._depth = 0
        self._pending: list[tuple[int, Callable[[int, Any], Any]]] = []
        self._seen: tuple[Any, ...] = ()  # the handlers as the last change left them: nothing new to wrap
        self._change = True
        self._terminations_held: list[int] = []

    def hold(self, *, state_change: bool = True) -> SignalGuard:
        """Return the guard, to enter: ``with guard.hold():`` holds signals until the block is done.

        Args:
            state_change: False for a transition that starts, stops and saves nothing (a wait
                step's): the handlers wrapped so far wait, and nothing else is looked at.
        """
        self._change = state_change
        return self

    def __enter__(self) -> None:
        if threading.get_ident() != self._main:
            return
        self._depth += 1
        if self._depth > 1 or not self._change:
            return
        try:
            handlers = tuple(map(_signal.getsignal, _DEFERRED_SIGNALS))
            if handlers != self._seen:
                self._wrap(handlers)
            self._hold_terminations()
        except BaseException:
            # A handler not wrapped yet raised: what was held is put back and run, as at the end.
            self.__exit__(None, None, None)
            raise

    def _wrap(self, handlers: tuple[Any, ...]) -> None:
        for sig, handler in zip(_DEFERRED_SIGNALS, handlers):
            if callable(handler) and not (type(handler) is _Relay and handler.guard is self):
                _signal.signal(sig, _Relay(self, handler, handler))
        self._seen = tuple(map(_signal.getsignal, _DEFERRED_SIGNALS))

    def _hold_terminations(self) -> None:
        # A termination request would end the process at once, mid-change and leaving its
        # files: it waits too, then removes them and ends the process.
        for sig in _TERMINATION_REQUESTS:
            if _signal.getsignal(sig) == _signal.SIG_DFL:
                _signal.signal(sig, _Relay(self, terminate, _signal.SIG_DFL))
                self._terminations_held.append(sig)

    def __exit__(self, *exc: object) -> None:
        if threading.get_ident() != self._main:
            return
        self._depth -= 1
        if self._depth:
            return
        if self._terminations_held:
            self._put_back(self._terminations_held)
            self._terminations_held.clear()
        if self._pending:
            pending, self._pending = self._pending, []
            for sig, run in pending:
                run(sig, None)

    def uninstall(self) -> None:
        """Put every wrapped handler back (a handler the program replaced the relay with stays)."""
        self._depth = 0
        self._pending.clear()
        self._terminations_held.clear()
        if threading.get_ident() == threading.main_thread().ident:
            self._put_back(_DEFERRED_SIGNALS)

    def _put_back(self, signals: Iterable[int]) -> None:
        for sig in signals:
            handler = _signal.getsignal(sig)
            if type(handler) is _Relay and handler.guard is self:
                _signal.signal(sig, handler.original)


def unreadable_source_files() -> list[str]:
    """Source files of loaded modules whose path is not valid UTF-8, as Python shows them.

    torch's Python tracer (``with_stack=True``) converts each frame's file name to
    UTF-8 and raises ``RuntimeError: error unpacking string as utf-8`` inside the
    profiled code when it cannot, then loses the whole cycle at the stop
    (pytorch#121219). A file name Python decoded with surrogate escapes (a folder
    name in another encoding) is such a name.
    """
    found = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str):
            try:
                file.encode("utf-8")
            except UnicodeEncodeError:
                found.append(file)
    return found


UTF8_ERROR = "error unpacking string as utf-8"
"""What torch's Python tracer raises for a frame whose file name is not valid UTF-8."""


_tracked_profile: Any = None


def tracked_profile_class() -> Any:
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
    depth = getattr(_own_calls, "depth", 0)
    _own_calls.depth = depth + 1
    try:
        yield
    finally:
        _own_calls.depth = depth


def guard_profiler_starts(refuse: Callable[[], BaseException]) -> Callable[[], None]:
    """Refuse other profiler starts until the returned function is called (it restores torch).

    Args:
        refuse: Called for each start that is not the session's own; what it returns is raised.
    """
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
            if getattr(_own_calls, "depth", 0):
                return _original(*args, **kwargs)
            raise refuse()

        setattr(module, attr, guard)
        installed.append((module, attr, original, guard))

    def restore() -> None:
        for module, attr, original, guard in reversed(installed):
            # Someone who replaced it after us keeps theirs.
            if getattr(module, attr, None) is guard:
                setattr(module, attr, original)
        installed.clear()

    return restore


def foreign_starter() -> str:
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


def stop_abandoned(prof: Any) -> None:
    """Stop a profiler whose state change failed, without re-entering torch's schedule."""
    from torch.autograd import profiler as autograd_profiler

    step = getattr(prof, "step_rec_fn", None)
    if step is not None:
        prof.step_rec_fn = None
        with contextlib.suppress(Exception):
            step.__exit__(None, None, None)
    inner = getattr(prof, "profiler", None)
    if getattr(prof, "kineto_state", "recording") == "recording" and profiler_started():
        with contextlib.suppress(Exception):
            if inner is not None and getattr(inner, "enabled", False):
                inner.__exit__(None, None, None)
            else:
                autograd_profiler._disable_profiler()
    prof.kineto_state = "stopped"
    with contextlib.suppress(Exception):
        autograd_profiler.KinetoStepTracker.erase_step_count("ProfilerStep")


def release_profile(prof: Any) -> None:
    """Break the reference cycles a stopped ``torch.profiler.profile`` is left in (pytorch#193348).

    torch keeps bound methods of the profile in its own ``action_map`` (and the
    session's ``on_trace_ready`` points back at the session), so a profile nobody
    holds any more stays in memory, with its cycles' events, until a full garbage
    collection. With these links cut, dropping the session frees them at once. A
    stopped profile never changes state again, so its read-outs and exports still work.
    """
    if prof is None:
        return
    action_map = getattr(prof, "action_map", None)
    if isinstance(action_map, dict):
        action_map.clear()
    prof.on_trace_ready = None


def profiler_started() -> bool:
    """True while a torch profiler is started: torch's own flag, set at start and cleared by any stop.

    The C++ state is per thread unless profile_all_threads is on, so it alone
    cannot tell; the flag is what any profile's exit clears.
    """
    import torch  # (torch's modules read as attributes: a from-import costs more than the check, every step)

    return torch.autograd.profiler._is_profiler_enabled or bool(torch._C._autograd._profiler_enabled())


def dist_backend() -> Optional[str]:
    import torch.distributed as dist

    try:
        return str(dist.get_backend())
    except Exception:  # not initialised, or a backend without a name
        return None


def idle_transition(config: Any, steps_taken: int) -> bool:
    """Whether torch's ``step()`` after step ``steps_taken`` leaves the profiler off: wait step to wait step.

    That transition starts, stops and saves nothing (torch's ``schedule`` returns
    ``NONE`` for both steps: within a cycle's wait, or after the last cycle).
    """
    cycle = config.wait + config.warmup + config.active
    if config.repeat and steps_taken >= cycle * config.repeat:
        return True
    return steps_taken % cycle + 1 < config.wait


def schedule_phase(config: Any, steps_taken: int) -> str:
    """The schedule phase of the current step, as a phrase: ``"a warmup step"``, ``"an active step"``..."""
    cycle = config.wait + config.warmup + config.active
    position = steps_taken % cycle
    if config.repeat and steps_taken >= cycle * config.repeat:
        return "after the schedule"
    if position < config.wait:
        return "a wait step"
    if position < config.wait + config.warmup:
        return "a warmup step"
    return "an active step"


def profiler_taken(prof: Any, *, start_thread: Optional[int], all_threads: bool) -> Optional[str]:
    """How another profiler took torch's one profiler from ``prof``: ``"running"``, ``"stopped"`` or None.

    Profilers started through torch's Python API are refused when they start
    (``guard_profiler_starts``); these checks catch those started beneath it.
    """
    import torch

    # (Checked at every step: written with as few calls as it takes.)
    recording = getattr(prof, "kineto_state", "idle") == "recording"
    enabled = torch._C._autograd._profiler_enabled()
    started = enabled or torch.autograd.profiler._is_profiler_enabled  # profiler_started()
    if not recording:
        # A profiler running while the session's is not: one was started and left running.
        return "running" if started else _erased_step_counter(torch)
    # torch's C++ state is per thread: trust it in the thread that started the session,
    # and not with profile_all_threads (where the threads it records change it).
    if not started or (not enabled and not all_threads and threading.get_ident() == start_thread):
        return "stopped"
    return _erased_step_counter(torch)


def _erased_step_counter(torch: Any) -> Optional[str]:
    """``"stopped"`` when the session's step counter is gone: a ``torch.profiler.profile`` ended inside the block.

    torch.profiler.profile registers its step counter on creation and erases it on exit.
    """
    return None if "ProfilerStep" in torch.autograd.profiler.KinetoStepTracker._step_dict else "stopped"


def taken_message(taken: str, *, steps_taken: int, cycle_count: int) -> str:
    """Say what another profiler did to the session (``taken`` from ``profiler_taken``)."""
    running = taken == "running"
    what = "started and is still running" if running else "started and stopped"
    consequence = "the session stopped recording" if running else "it ended this session's recording"
    return (
        f"another torch.profiler was {what} inside the session's block (noticed at step "
        f"{steps_taken}); torch has one profiler per process, so {consequence}. "
        f"{cycle_count} completed cycle(s) are kept. Profile one thing at a time: remove the inner "
        "profiler, or end the session before it starts"
    )
