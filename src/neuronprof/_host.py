"""The host a recording or a report names: its platform, without the subprocess of ``platform.platform``."""

from __future__ import annotations

import platform

__all__ = ["host_platform"]


def host_platform() -> str:
    """Return the host's platform as the report's settings show it: ``Linux-6.8.0-x86_64-with-glibc2.39``.

    On Linux: the system, its release and machine, and the C library with its version, each
    from ``platform``'s own functions; what ``platform.platform(terse=True)`` shows on a glibc
    host whose ``uname -p`` names no processor of its own, without the ``uname -p`` subprocess
    that call runs (5 to 10 ms of CPU, measured on a two-core Linux host). Elsewhere,
    ``platform.platform(terse=True)`` itself.
    """
    system = platform.system()
    if system != "Linux":
        return platform.platform(terse=True)
    libc = "".join(platform.libc_ver())  # glibc: asked of the running library (os.confstr), no file read
    return "-".join(part for part in (system, platform.release(), platform.machine(), libc and f"with-{libc}") if part)
