"""Neuron Runtime's own files of a TorchNeuron session: which folders are its, and reading them.

The profile folder's session folders (one per profiling cycle, claimed as each
cycle ends into ``ctx.extras["cycle_dirs"]``) are read once
per session by ``analysis.neuron.session.SessionNeuronProfile`` (and bundled for
Neuron Explorer by ``export.neuron_bundle``, through ``NeuronBackend.device_files``).
Only this session's folders are used, so another session of the same process
writing to the same ``output_dir`` stays out.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from neuronprof.backends.base import SessionContext
from neuronprof.errors import SessionStateError
from neuronprof.typing import ToolChoice

if TYPE_CHECKING:
    from neuronprof.analysis import NeuronProfile
    from neuronprof.analysis.neuron.session import SessionNeuronProfile

__all__ = ["claim_cycle_dir", "framework_traces", "pid_dirs", "read_profile", "reader"]


def pid_dirs(root: Path) -> list[Path]:
    """Return this process's Neuron Runtime session folders under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = [d for d in root.glob(f"*_pid_{os.getpid()}/*") if d.is_dir()]
    return sorted(found, key=lambda d: (d.stat().st_mtime, d.name))


def claim_cycle_dir(ctx: SessionContext, session_dirs: Sequence[Path]) -> Optional[Path]:
    """Record which of the session's folders the cycle that just ended wrote (None: none), and return it.

    Called once per cycle, after the runtime has written that cycle's folder.
    """
    claimed: list[Optional[Path]] = ctx.extras.setdefault("cycle_dirs", [])
    new = [d for d in session_dirs if d not in claimed]
    folder = new[-1] if new else None
    claimed.append(folder)
    return folder


def framework_traces(folder: Optional[Path], patterns: Sequence[str]) -> list[Path]:
    """Return the framework traces in a session folder (names matching ``patterns``)."""
    return [] if folder is None else [p for pattern in patterns for p in folder.glob(pattern)]


def reader(ctx: SessionContext, root: Optional[Path]) -> SessionNeuronProfile:
    """The session's reader of Neuron's own profile, made once; it reads the files on first use.

    Args:
        ctx: The session's context.
        root: The profile folder, or None when this session's runtime wrote nothing.
    """
    found = ctx.extras.get("profile_reader")
    if found is None:
        from neuronprof.analysis.neuron.session import SessionNeuronProfile

        found = SessionNeuronProfile(root, sessions=list(ctx.extras.get("cycle_dirs", ())))
        ctx.extras["profile_reader"] = found
    return found


def read_profile(ctx: SessionContext, root: Optional[Path], tool: ToolChoice) -> NeuronProfile:
    """Return the session's Neuron profile (``s.neuron_profile()``).

    Raises:
        SessionStateError: The session wrote no Neuron profile, or it cannot be read; the message says why.
    """
    session_reader = reader(ctx, root)
    profile = session_reader.get(tool)
    if profile is None:
        raise SessionStateError(f"no Neuron profile to read: {session_reader.why}")
    return profile
