"""What ``jobs=`` and ``executor=`` (``--jobs``, ``--executor``) accept: checked before any file is read.

Kept apart from the readers (``analysis/trace/_parallel.py``) and free of heavy
imports, so that the command line checks its options as it parses them.
"""

from __future__ import annotations

import os
from typing import Optional

__all__ = ["DASK_PORT", "check_jobs", "cores", "dask_address"]

DASK_PORT = 8786
"""The port of a Dask scheduler when the address names none (Dask's own default)."""


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one): the default number of jobs."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def check_jobs(jobs: object) -> Optional[int]:
    """``jobs`` as a number of worker processes; ``None`` (one per core) stays ``None``.

    Raises:
        TypeError: ``jobs`` is not a whole number (a ``bool``, a ``float``, a string).
        ValueError: ``jobs`` is 0 or negative.
    """
    if jobs is None:
        return None
    if isinstance(jobs, bool) or not isinstance(jobs, int):
        raise TypeError(f"jobs must be a whole number of worker processes (1 reads in this process), got {jobs!r}")
    if jobs < 1:
        raise ValueError(f"jobs must be 1 or more (1 reads in this process, one after another), got {jobs}")
    return jobs


def dask_address(text: str) -> str:
    """The scheduler address (``tcp://HOST:PORT``) of an executor written ``dask://HOST:PORT``.

    The port defaults to Dask's 8786.

    Raises:
        ValueError: ``text`` is not ``dask://HOST[:PORT]``; the message shows the form,
            and the ``dask://`` spelling of a ``tcp://`` address.
    """
    from urllib.parse import urlsplit

    form = "expected dask://HOST:PORT (the address of a running Dask scheduler)"
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        raise ValueError(f"{form}, got {text!r}: the port must be a number from 1 to 65535") from None
    if parts.scheme == "tcp" and parts.hostname:
        raise ValueError(f"{form}, got {text!r}: write it dask://{parts.netloc}")
    extra = parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password
    if parts.scheme != "dask" or not parts.hostname or extra:
        raise ValueError(f"{form}, got {text!r}")
    if port == 0:
        raise ValueError(f"{form}, got {text!r}: the port must be a number from 1 to 65535")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"tcp://{host}:{DASK_PORT if port is None else port}"
