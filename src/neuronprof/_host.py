"""The host a recording or a report names: its platform, read without the cost of ``platform.platform``."""

from __future__ import annotations

import os

__all__ = ["host_platform"]


def host_platform() -> str:
    """Return the host's platform as the report's settings show it: ``Linux-6.8.0-x86_64-with-glibc2.39``.

    On Linux, the kernel's name, release and machine from ``os.uname()`` and the running
    C library's name and version (``confstr``: glibc's; none on musl), in the form of
    ``platform.platform(terse=True)``. That call itself runs ``uname -p`` in a subprocess and
    scans the interpreter's executable for the C library it was linked against: about
    20 ms of CPU, a tenth of what a report of a small trace costs. Elsewhere,
    ``platform.platform(terse=True)`` itself.
    """
    uname = getattr(os, "uname", None)
    system = uname() if uname is not None else None
    if system is None or system.sysname != "Linux":
        import platform

        return platform.platform(terse=True)
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.39"
    except (ValueError, OSError):  # not glibc (musl): no such name
        libc = ""
    with_libc = f"-with-{libc.replace(' ', '')}" if libc else ""
    return f"{system.sysname}-{system.release}-{system.machine}{with_libc}"
