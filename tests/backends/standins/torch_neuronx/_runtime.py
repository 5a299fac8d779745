"""A fake Neuron Runtime: what the torch_neuronx kineto plugin and NRT do for a profile.

It follows the public record (AWS Neuron docs 2.30-2.32 and the
Feb-Apr 2026 TorchNeuron source):

* the settings arrive as kineto's ``custom_profiler_config``, ``key:value``
  pairs joined by ``;`` (``profile_output_dir:<dir>;max_events_per_nc:<n>;
  capture_enabled_for_nc:0,1;host_memory:true``). Keys named after the other
  modes (``device_profile``, ``system_profile``, ``cpu_util``) and
  ``neff_cache_dir`` / ``precache_node_info`` / ``correlate_device_time`` are
  this stand-in's guess at how ``NeuronConfig`` encodes them;
* ``capture_enabled_for_nc`` takes comma-separated indices and ranges only
  (``"0"``, ``"0,1"``, ``"2-5"``); anything else (``"all"``) is rejected with an
  error in :data:`log` and the key is ignored, so every core the process sees
  is captured. Indices are process-local: a core the process does not see is
  not captured (and logged);
* the files are written when the profiler **stops**, before torch.profiler's
  ``on_trace_ready``, into ``<profile_output_dir>/<instance-id>_pid_<pid>/<timestamp>/``
  (``./output`` when no folder is given): ``neff_<hash>_vnc_0.neff`` (only when a
  NEFF cache folder is configured, by key or by ``TORCH_NEURONX_NEFF_CACHE_DIR``;
  two compiled graphs here), ``profile_nc_<n>_session_0.ntff`` per captured core
  for DEVICE (one per core for the whole session, not one per NEFF),
  ``ntrace.pb`` and ``trace_info.pb`` for RUNTIME, ``cpu_util.pb``, ``host_mem.pb``;
* ``max_events_per_nc`` (default 1,000,000) caps the events kept per NeuronCore;
  the rest are dropped without a word;
* what reaches torch.profiler: PRIVATEUSE1_RUNTIME events only (torch files them
  as CPU rows), except on the correlating build with
  ``correlate_device_time:true``, where NeuronCore executions come back as device
  kernels linked to their ops.

File contents are placeholders, never real Neuron data.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["RuntimeSession", "hook", "log", "parse", "reset", "sessions", "visible_cores"]

INSTANCE_ID = os.environ.get("NEURONPROF_STANDIN_INSTANCE_ID", "i-0123456789abcdef0")
DEFAULT_OUTPUT_DIR = "./output"
DEFAULT_MAX_EVENTS_PER_NC = 1_000_000
_NC_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_MODE_DEFAULTS = {"device_profile": True, "system_profile": True, "cpu_util": False, "host_memory": False}

log: list[str] = []
"""Runtime messages, in order (errors start with ``ERROR``)."""


@dataclass
class RuntimeSession:
    """One profile as the runtime saw it."""

    config: dict[str, str]
    rejected: list[str] = field(default_factory=list)
    cores: list[int] = field(default_factory=list)
    directory: Path | None = None
    files: list[Path] = field(default_factory=list)


sessions: list[RuntimeSession] = []


def reset() -> None:
    """Forget every recorded session and log line."""
    sessions.clear()
    log.clear()


def visible_cores() -> int:
    """NeuronCores this process sees: ``NEURON_RT_VISIBLE_CORES`` (as torchrun sets it), else 2."""
    spec = os.environ.get("NEURON_RT_VISIBLE_CORES")
    if spec:
        return len(_indices(spec))
    return int(os.environ.get("NEURONPROF_STANDIN_NEURON_CORES", "2"))


def _indices(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def parse(custom: str) -> RuntimeSession:
    """Parse a ``custom_profiler_config`` string the way the plugin does."""
    config: dict[str, str] = {}
    for item in custom.split(";"):
        if not item:
            continue
        key, sep, value = item.partition(":")
        if not sep:
            log.append(f"ERROR: malformed profiler option {item!r} ignored")
            continue
        config[key.strip()] = value.strip()
    session = RuntimeSession(config=config)
    spec = config.get("capture_enabled_for_nc")
    count = visible_cores()
    if spec is not None and not _NC_LIST.match(spec):
        log.append(f"ERROR: invalid capture_enabled_for_nc {spec!r}: expected indices or ranges such as '0,1,2-5'")
        session.rejected.append("capture_enabled_for_nc")
        del config["capture_enabled_for_nc"]
        spec = None
    if spec is None:
        session.cores = list(range(count))
    else:
        for part in spec.split(","):
            lo, _, hi = part.partition("-")
            first, last = int(lo), int(hi or lo)
            session.cores.extend(c for c in range(first, min(last, count - 1) + 1) if c not in session.cores)
            if last >= count:
                log.append(f"ERROR: NeuronCore {max(first, count)} is not visible to this process (it sees {count})")
    return session


def _enabled(session: RuntimeSession, key: str) -> bool:
    value = session.config.get(key)
    return _MODE_DEFAULTS[key] if value is None else value.lower() == "true"


def _configure(custom: str, device_requested: bool, correlating_build: bool) -> tuple[int, bool]:
    session = parse(custom)
    sessions.append(session)
    linked = correlating_build and session.config.get("correlate_device_time", "false").lower() == "true"
    # (kernel mode, runtime events, cap): 1 = kernels linked to ops, 0 = none. The runtime keeps
    # at most max_events_per_nc events per NeuronCore and drops the rest silently (the test
    # plugin has one device lane, so the cap counts its kernels).
    cap = int(session.config.get("max_events_per_nc", DEFAULT_MAX_EVENTS_PER_NC))
    return (1 if linked and _enabled(session, "device_profile") else 0, True, cap)


def _stop(custom: str) -> None:
    session = next((s for s in reversed(sessions) if s.directory is None), None)
    if session is None:  # pragma: no cover - stop without configure
        session = parse(custom)
        sessions.append(session)
    root = Path(session.config.get("profile_output_dir") or DEFAULT_OUTPUT_DIR)
    stamp = _dt.datetime.now().strftime("%Y%m%d_%H%M%S_%f")
    directory = root / f"{INSTANCE_ID}_pid_{os.getpid()}" / stamp
    directory.mkdir(parents=True, exist_ok=True)
    session.directory = directory
    names: list[str] = []
    if _enabled(session, "device_profile"):
        neff_cache = session.config.get("neff_cache_dir") or os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
        if neff_cache:
            for graph in ("graph_a", "graph_b"):
                digest = hashlib.sha1(f"{neff_cache}/{graph}".encode()).hexdigest()[:20]
                names.append(f"neff_{digest}_vnc_0.neff")
        names.extend(f"profile_nc_{nc}_session_0.ntff" for nc in session.cores)
    if _enabled(session, "system_profile"):
        names += ["ntrace.pb", "trace_info.pb"]
    if _enabled(session, "cpu_util"):
        names.append("cpu_util.pb")
    if _enabled(session, "host_memory"):
        names.append("host_mem.pb")
    for name in names:
        path = directory / name
        path.write_bytes(f"torch_neuronx stand-in placeholder: {name}\n".encode())
        session.files.append(path)


def hook(correlating_build: bool):  # type: ignore[no-untyped-def]
    """Return the plugin session hook for this build (see ``testbackend.set_session_hook``)."""

    def _hook(event: str, custom: str, device_requested: bool):  # type: ignore[no-untyped-def]
        if not device_requested:
            return None  # a CPU-only profile: the Neuron plugin does nothing
        if event == "configure":
            return _configure(custom, device_requested, correlating_build)
        if event == "stop":
            _stop(custom)
        return None

    return _hook


def latest_directory(root: str | os.PathLike[str] | None) -> Path | None:
    """The newest session folder this process's runtime wrote under ``root``."""
    want = Path(root or DEFAULT_OUTPUT_DIR).absolute()
    for session in reversed(sessions):
        if session.directory is not None and session.directory.absolute().parents[1] == want:
            return session.directory
    return None
