"""Exceptions raised by neuronprof.

Every error neuronprof raises on purpose derives from
[`NeuronProfError`][neuronprof.NeuronProfError], so one ``except`` clause catches
them all. Bad arguments are reported as ``ValueError`` or ``TypeError``, as
Python users expect.
"""

from __future__ import annotations

from neuronprof.typing import Phase

__all__ = [
    "BackendUnavailableError",
    "NeuronProfError",
    "NeuronProfWarning",
    "SessionStateError",
    "VariantError",
]
# warn_user is plumbing for neuronprof's own modules (it picks the warning's stack
# level), so it is not exported and not on the API pages.


class NeuronProfError(Exception):
    """Base class of every error raised by neuronprof."""


class BackendUnavailableError(NeuronProfError):
    """The requested backend cannot be used in this Python environment.

    The message says what is missing and how to install it.
    """


class SessionStateError(NeuronProfError):
    """A session method was called at the wrong time.

    For example ``table()`` inside the ``with`` block, ``step()`` after it, or a
    second session opened while another one is profiling in the same process.
    """


class VariantError(NeuronProfError):
    """A variant raised while ``neuronprof.compare()`` ran it.

    ``compare()`` stops at the first failing variant: the variants after it do
    not run, no partial result is returned, and a profiling session in progress
    is closed first. The original exception is chained as ``__cause__``.

    Attributes:
        variant: Label of the variant that raised.
        phase: What it was doing (``"first call"``, ``"warm-up"``, ``"calibration"``, ``"timing"`` or
            ``"profiling"``); see [`Phase`][neuronprof.typing.Phase].
        message: The error's text, as ``str(error)`` gives it.
    """

    variant: str
    phase: Phase
    message: str

    def __init__(self, variant: str, phase: Phase, message: str) -> None:
        super().__init__(variant, phase, message)
        self.variant = variant
        self.phase = phase
        self.message = message

    def __str__(self) -> str:
        return self.message


class NeuronProfWarning(UserWarning):
    """Something in a profile looks wrong, although the data is still usable.

    Raised as a warning (never an exception) for, e.g., an empty device column
    or a loop that ran fewer steps than the schedule needs.
    """


def warn_user(message: str, category: type[Warning] = NeuronProfWarning) -> None:
    """Issue a warning attributed to the user's own line, not to neuronprof's or torch's internals.

    The stack is walked to the first frame outside neuronprof, torch and ``contextlib``
    (a session's ``with`` block reaches the backends through both), so the warning's
    file and line are where the user called neuronprof, however deep the call came from.

    Args:
        message: The warning text.
        category: The warning class; default ``NeuronProfWarning``.
    """
    import contextlib
    import os
    import sys
    import warnings

    skip = [os.path.dirname(__file__) + os.sep, os.path.dirname(contextlib.__file__) + os.sep + "contextlib"]
    torch_mod = sys.modules.get("torch")
    torch_file = getattr(torch_mod, "__file__", None)
    if torch_file:
        skip.append(os.path.dirname(torch_file) + os.sep)
    frame = sys._getframe(1)
    level = 2  # the caller of warn_user
    while frame is not None and frame.f_code.co_filename.startswith(tuple(skip)):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(message, category, stacklevel=level - 1 if frame is None else level)
