"""What keeps torch's one profiler the session's: signal deferral, the start guard, a safe stop.

torch.profiler's state is process-wide and its state changes are not interrupt-safe.
These helpers hold signals back while it changes state, refuse any other profiler
start while a session is open, and stop a profiler whose state change failed
without re-entering torch's schedule. The [`Session`][neuronprof.Session] uses them;
they know nothing of what it records.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Optional

from neuronprof._io import default_termination, terminate

__all__ = [
    "dist_backend",
    "guard_profiler_starts",
    "local_rank",
    "profiler_running",
    "profiler_started",
    "profiler_taken",
    "schedule_phase",
    "taken_message",
    "quiet_cycle_warning",
    "signals_deferred",
    "stop_abandoned",
    "tracked_profile_class",
    "unreadable_source_files",
]

# Signals whose Python handlers are held back while torch.profiler changes state
# (see signals_deferred): Ctrl-C, termination requests, timers, user signals.
_DEFERRED_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGALRM", "SIGVTALRM", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)


def local_rank() -> Optional[int]:
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value is not None and value.isdigit() else None


def profiler_running() -> bool:
    import torch

    probe = getattr(torch.autograd.profiler, "_is_profiler_enabled", None)
    if isinstance(probe, bool):
        return probe
    return bool(torch._C._autograd._profiler_enabled())


@contextlib.contextmanager
def quiet_cycle_warning() -> Iterator[None]:
    # torch warns that each cycle clears the previous one's events; the session
    # keeps every cycle itself, so the warning would only mislead.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        yield


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold back Python signal handlers (Ctrl-C, alarms) until the block is done, then run them.

    SIGTERM and SIGHUP left at their default action wait too; when one came, what
    neuronprof was writing or keeps privately is removed and the process then ends
    as the signal's default action would have ended it.

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
    default: set[int] = set()
    try:
        for sig in _DEFERRED_SIGNALS:
            handler = signal.getsignal(sig)
            if callable(handler):
                saved[sig] = handler
            elif default_termination(sig):
                # A termination request would end the process at once, mid-change and
                # leaving its files: it waits too, then removes them and ends the process.
                saved[sig] = terminate
                default.add(sig)
            else:
                continue
            signal.signal(sig, hold)
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, signal.SIG_DFL if sig in default else handler)
        for sig in pending:
            saved[sig](sig, None)


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
    tracker = getattr(autograd_profiler, "KinetoStepTracker", None)
    if tracker is not None:
        with contextlib.suppress(Exception):
            tracker.erase_step_count("ProfilerStep")


def profiler_started() -> bool:
    """True while a torch profiler is started: torch's own flag, set at start and cleared by any stop.

    The C++ state is per thread unless profile_all_threads is on, so it alone
    cannot tell; the flag is what any profile's exit clears.
    """
    import torch
    from torch.autograd import profiler as autograd_profiler

    flag = getattr(autograd_profiler, "_is_profiler_enabled", None)
    return bool(flag) or bool(torch._C._autograd._profiler_enabled())


def dist_backend() -> Optional[str]:
    import torch.distributed as dist

    try:
        return str(dist.get_backend())
    except Exception:  # not initialised, or a backend without a name
        return None


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
    from torch.autograd import profiler as autograd_profiler

    recording = getattr(prof, "kineto_state", "idle") == "recording"
    started = profiler_started()
    # A profiler running while the session's is not: one was started and left running.
    running = not recording and started
    # torch's C++ state is per thread: trust it in the thread that started the session,
    # and not with profile_all_threads (where the threads it records change it).
    here = threading.get_ident() == start_thread and not all_threads
    stopped = recording and (not started or (here and not torch._C._autograd._profiler_enabled()))
    # torch.profiler.profile registers its step counter on creation and erases it
    # on exit: a profile that ended inside the block erased this session's.
    tracker = getattr(getattr(autograd_profiler, "KinetoStepTracker", None), "_step_dict", None)
    erased = isinstance(tracker, dict) and "ProfilerStep" not in tracker
    if running:
        return "running"
    return "stopped" if stopped or erased else None


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
