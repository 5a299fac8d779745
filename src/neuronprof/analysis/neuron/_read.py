"""Read Neuron's profile outputs (``summary-json`` and ``system_profile.json``) into the model.

``neuron-explorer view`` (and the legacy ``neuron-profile view``, which takes the
same inputs) turns Neuron Runtime's files into JSON: the formats are described in
``_summary`` (the engine breakdown per device profile) and ``_system`` (the NEFF
executions). This module finds what a folder holds, runs the tool where only the
runtime's files are there, and puts the pieces together.

Where the record is silent (whether the JSON carries flow ids linking an
execution to its framework op, how a ``n_`` key maps to a NEFF), nothing is
guessed: see the notes of the returned model. Neuron's Parquet output (its
peaks and the flow_id join) is read in ``_parquet``.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from neuronprof.analysis.errors import TraceError
from neuronprof.analysis.neuron import _parquet
from neuronprof.analysis.neuron._model import _START, DeviceSummary, NeffExecution, NeuronProfile
from neuronprof.analysis.neuron._summary import SUMMARY_GLOB, looks_like_summary, read_summary_file
from neuronprof.analysis.neuron._system import (
    SYSTEM_JSON,
    outside_steps,
    read_framework,
    read_steps,
    read_system_profile,
    step_activity,
)
from neuronprof.analysis.neuron._tool import (
    NeuronTool,
    NeuronToolError,
    NeuronToolMissing,
    find_neuron_tool,
)
from neuronprof.errors import warn_user
from neuronprof.typing import ToolChoice

if TYPE_CHECKING:
    from neuronprof.analysis.trace import EventTable

__all__ = ["DEFAULT_TIMEOUT", "SUMMARY_JSON", "neuron_profile"]

SUMMARY_JSON = "neuron_summary.json"
"""The name neuronprof saves ``summary-json`` output under, beside the runtime's files."""

_RUNTIME_FILES = ("ntrace.pb", "trace_info.pb")
_FRAMEWORK_TRACES = (
    "trace.json",
    "trace.json.gz",
    "pytorch_trace.json",
    "neuron_framework_trace_rank_*.json",
    "*.pt.trace.json",
    "*.pt.trace.json.gz",
)
_OLD_NTFF = re.compile(r"^(\d+)_instid_\d+_vnc_\d+$")
DEFAULT_TIMEOUT = 120.0
"""Seconds one ``neuron-explorer`` run may take (a run whose output is complete is stopped at once; after a
failure the tool is not run again, so a session's ``s.table()`` waits at most this long per tool run)."""


# -- folders ------------------------------------------------------------------------------------


@dataclass
class _Folder:
    """One folder of Neuron Runtime output (a session folder), or of the tool's JSON."""

    path: Path
    runtime: bool = False
    system_json: Optional[Path] = None
    summaries: list[Path] = field(default_factory=list)
    framework: Optional[Path] = None
    neffs: list[Path] = field(default_factory=list)
    ntffs: list[Path] = field(default_factory=list)

    @property
    def has_system(self) -> bool:
        return self.runtime or self.system_json is not None


def _scan(root: Path, pid: Optional[int], sessions: Optional[Sequence[Path]] = None) -> list[_Folder]:
    folders = []
    tops = [root] if sessions is None else list(dict.fromkeys(sessions))
    for here, dirs, files in (entry for top in tops for entry in os.walk(top)):
        dirs.sort()
        names = set(files)
        d = Path(here)
        if pid is not None and not any(part.endswith(f"_pid_{pid}") for part in d.parts):
            continue
        folder = _Folder(d, runtime=any(n in names for n in _RUNTIME_FILES))
        if SYSTEM_JSON in names:
            folder.system_json = d / SYSTEM_JSON
        folder.summaries = sorted(d / n for n in names if fnmatch.fnmatch(n, SUMMARY_GLOB))
        folder.neffs = sorted(d / n for n in names if n.endswith(".neff"))
        folder.ntffs = sorted(d / n for n in names if n.endswith(".ntff"))
        for pattern in _FRAMEWORK_TRACES:
            hits = sorted(glob.glob(os.path.join(glob.escape(here), pattern)))
            if hits:
                folder.framework = Path(hits[0])
                break
        if folder.has_system or folder.summaries or folder.ntffs:
            folders.append(folder)
    return folders


def _pairs(folder: _Folder) -> tuple[list[tuple[Path, Path]], list[Path]]:
    """Pair each ``.ntff`` of a device-only folder with its ``.neff``; return the pairs and the unpaired."""
    by_hash: dict[str, Path] = {}
    for path in folder.neffs:
        stem = path.stem
        by_hash[stem[5:] if stem.startswith("neff_") else stem] = path
    pairs: list[tuple[Path, Path]] = []
    lost: list[Path] = []
    for ntff in folder.ntffs:
        m = _OLD_NTFF.match(ntff.stem)
        neff: Optional[Path] = by_hash.get(m.group(1)) if m else None
        if neff is None and len(folder.neffs) == 1:
            neff = folder.neffs[0]
        if neff is None:
            lost.append(ntff)
        else:
            pairs.append((neff, ntff))
    return pairs, lost


class _Runner:
    """Finds the tool once, runs it, and turns each failure into one warning (a missing tool: maybe a note)."""

    def __init__(self, tool: ToolChoice, timeout: float, *, warn_missing: bool = True) -> None:
        self.choice = tool
        self.timeout = timeout
        self.warn_missing = warn_missing
        self._tool: Optional[NeuronTool] = None
        self.failed = False
        self.missing: Optional[str] = None
        self.used: Optional[str] = None
        self.notes: list[str] = []
        self.error: Optional[str] = None

    def tool(self) -> Optional[NeuronTool]:
        if self.choice == "never" or self.failed:
            return None
        if self._tool is None:
            try:
                self._tool = find_neuron_tool(None if self.choice == "auto" else os.fspath(self.choice))
            except NeuronToolError as exc:
                self.fail(exc)
                return None
        return self._tool

    def fail(self, exc: Exception) -> None:
        self.failed = True
        self.error = str(exc)
        if isinstance(exc, NeuronToolMissing):
            self.missing = str(exc)
            if not self.warn_missing:
                return
        warn_user(f"{exc} (NeuronCore time from Neuron's profile is left out; the profile data itself is kept)")

    def view(
        self, inputs: Sequence[tuple[str, Union[str, os.PathLike[str]]]], fmt: str, consume: Callable[[str], Any]
    ) -> Any:
        tool = self.tool()
        if tool is None:
            return None
        try:
            result = tool.view(inputs, fmt, consume, timeout=self.timeout, notes=self.notes)
        except NeuronToolError as exc:
            self.fail(exc)
            return None
        self.used = tool.label
        return result

    def ingest(self, folder: Path, data: Path) -> Optional[Path]:
        """Write ``folder``'s Parquet output into ``data``; a failure is a note (the JSON was read already)."""
        tool = self.tool()
        if tool is None:
            return None
        try:
            return Path(
                tool.ingest(folder, data, display_name=_parquet.DISPLAY_NAME, timeout=self.timeout, notes=self.notes)
            )
        except NeuronToolError as exc:
            self.notes.append(f"{exc}: no hardware peaks from the profile and no flow_id join of executions to ops")
            return None


def _save(src: str, dest: Path, notes: list[str]) -> None:
    from neuronprof._io import atomic_write, copy_file

    try:
        atomic_write(dest, lambda tmp: copy_file(Path(src), tmp), overwrite=False)
    except FileExistsError:
        pass
    except OSError as exc:
        notes.append(f"could not save {dest.name} beside the profile ({exc.strerror or exc})")


def _read_folders(
    folders: list[_Folder],
    runner: _Runner,
    *,
    save: bool,
    framework_trace: Optional[Path],
    notes: list[str],
    extras: _parquet.ParquetReads,
) -> tuple[list[DeviceSummary], list[NeffExecution], list[tuple[int, int, int]]]:
    summaries: list[DeviceSummary] = []
    executions: list[NeffExecution] = []
    steps: list[tuple[int, int, int]] = []

    def from_tool(f: _Folder, fmt: str, read: Callable[[str], Any], name: str) -> Any:
        """Have the tool write ``f``'s ``fmt`` JSON and read it; with ``save``, keep it beside the runtime's files."""

        def consume(path: str) -> Any:
            result = read(path)
            if save:
                _save(path, f.path / name, notes)
            return result

        return runner.view([("-d", f.path)], fmt, consume)

    from neuronprof.analysis.trace import step_windows

    # Each framework trace is read once, for both its steps and its nrt_sequence_id links.
    read: dict[Path, EventTable] = {}

    def framework(path: Path) -> EventTable:
        if path not in read:
            read[path] = read_framework(path)
        return read[path]

    system_folders = [f for f in folders if f.has_system]
    device_only = [f for f in folders if not f.has_system and f.ntffs]
    if system_folders and device_only:
        # A bundle holds copies of the device files beside the system profile.
        notes.append(
            f"{len(device_only)} device-only folder(s) skipped: the system profile's folder holds the same profiles"
        )
        device_only = []
    for f in folders:
        for s in f.summaries:
            summaries.extend(read_summary_file(str(s), notes=notes))
    for f in system_folders:
        if f.system_json is not None:
            try:
                found, more = read_system_profile(f.system_json, label=str(f.system_json))
            except TraceError as exc:
                if not summaries:
                    raise
                # The engine breakdown beside it is still worth reading.
                notes.append(f"{exc}; its NEFF executions are left out")
            else:
                executions.extend(found)
                notes.extend(more)
        elif f.runtime:
            got = from_tool(f, "json", partial(read_system_profile, label=f"system profile of {f.path}"), SYSTEM_JSON)
            if got is not None:
                executions.extend(got[0])
                notes.extend(got[1])
        if not f.summaries and f.runtime:
            summaries.extend(from_tool(f, "summary-json", partial(read_summary_file, notes=notes), SUMMARY_JSON) or ())
        # The tool is run for the Parquet output only where it ran for the JSON: a bundle needs none.
        ingest = runner.ingest if f.runtime and runner.used is not None and not runner.failed else None
        joined = framework_trace or f.framework
        events = framework(joined) if joined is not None else None
        _parquet.read_folder(f.path, ingest, save=save, framework=events, reads=extras, notes=notes)
        if framework_trace is None and events is not None:
            steps.extend(step_windows(events))
    if framework_trace is not None:
        steps = step_windows(framework(framework_trace))
    for f in device_only:
        pairs, lost = _pairs(f)
        if lost:
            notes.append(f"{len(lost)} .ntff file(s) in {f.path} have no .neff to pair with and were skipped")
        if f.summaries:
            continue
        for neff, ntff in pairs:
            pair_summary = partial(read_summary_file, label=neff.name, notes=notes)
            summaries.extend(runner.view([("-n", neff), ("-s", ntff)], "summary-json", pair_summary) or ())
    return summaries, executions, steps


def neuron_profile(
    path: Union[str, os.PathLike[str]],
    ntff: Union[str, os.PathLike[str], None] = None,
    *,
    framework_trace: Union[str, os.PathLike[str], None] = None,
    tool: ToolChoice = "auto",
    timeout: float = DEFAULT_TIMEOUT,
    save: bool = False,
    pid: Optional[int] = None,
    sessions: Optional[Sequence[Union[str, os.PathLike[str]]]] = None,
    warn_missing: bool = True,
) -> NeuronProfile:
    """Read Neuron's own profile: engine breakdown per device profile, NEFF executions, busy time per step.

    ``path`` may be:

    * a TorchNeuron profile output folder, or one session folder in it
      (``<instance>_pid_<pid>/<timestamp>/``, holding ``ntrace.pb`` and
      ``trace_info.pb``, with any ``.neff``/``.ntff``);
    * a bundle written by ``Session.export(format="neuron")``;
    * a folder holding the tool's JSON (``system_profile.json``, ``*summary*.json``);
    * a ``.neff`` file, with its ``.ntff`` as ``ntff``;
    * a ``system_profile.json`` or a ``*summary*.json`` file.

    JSON files that exist are read directly, without the tool, so a bundle
    copied to a machine without the Neuron tools still reads. Where only
    Neuron Runtime's files exist, ``neuron-explorer view`` (or ``neuron-profile
    view``) turns them into JSON: ``--output-format json`` for the system
    profile and ``summary-json`` for the engine breakdown. When the tool is
    missing, fails, hangs or writes something unreadable, one
    ``NeuronProfWarning`` names it and the fix (install ``aws-neuronx-tools``)
    and the rest is still returned.

    Per-step busy time needs the framework trace (``trace.json`` beside the
    runtime's files, as ``NeuronProfiler.export_trace`` writes it, or
    ``framework_trace``).

    With pyarrow (``pip install 'neuronprof[neuron]'``), Neuron's Parquet output is read
    too: a ``neuron_parquet/`` folder beside the runtime's files, or, where the tool runs
    for the JSON anyway, what ``neuron-explorer view --ingest-only`` writes (kept there
    when ``save``). It gives the profile's own hardware peaks (``peak``, from its
    ``Metadata`` table) and per-NEFF device time joined to framework ops through
    ``SystemProfileEvents.flow_id`` (``flow_join``, with its match rate). Its column names
    are not confirmed by AWS documentation and it is not verified on hardware: anything
    absent or unrecognised leaves ``peak`` ``None`` (a preset is the fallback) or the join
    at a match rate of 0, and the notes say why.

    Args:
        path: What to read (see above).
        ntff: The ``.ntff`` of a ``.neff`` given as ``path``.
        framework_trace: A torch.profiler Chrome trace whose ``ProfilerStep#N``
            spans define the steps; default: the one in each session folder.
        tool: See [`ToolChoice`][neuronprof.typing.ToolChoice].
        timeout: Seconds each run of the tool may take before it is stopped.
        save: Keep the tool's JSON beside the runtime's files (``system_profile.json``,
            ``neuron_summary.json``), so later reads need no tool.
        pid: Only read session folders of this process (``*_pid_<pid>``).
        sessions: Only read these Neuron Runtime session folders (and what is under them),
            e.g. the ones one ``neuronprof.session`` wrote: a process that ran several
            sessions into one output folder holds the folders of all of them.
        warn_missing: Warn when the tool is needed but not installed; when False the
            notes say so instead (a failing tool always warns).

    Returns:
        A [`NeuronProfile`][neuronprof.analysis.NeuronProfile].

    Raises:
        TraceError: ``path`` does not exist, holds no Neuron profile, or a JSON
            file in it is not the documented format.
        ValueError: ``ntff`` without a ``.neff``, a bad ``timeout``, or ``sessions`` that is
            not a list of folders.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not (tool in ("auto", "never") or isinstance(tool, (str, os.PathLike))):
        raise ValueError(f"tool must be 'auto', 'never' or a path, got {tool!r}")
    if isinstance(sessions, (str, bytes, os.PathLike)):
        raise ValueError(f"sessions takes a list of folders, got one path {sessions!r}; use sessions=[...]")
    session_dirs = None if sessions is None else [Path(s) for s in sessions]
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file or folder")
    for folder in session_dirs or ():
        if not folder.is_dir():
            raise TraceError(f"{folder}: no such session folder")
    runner = _Runner(tool, float(timeout), warn_missing=warn_missing)
    extras = _parquet.ParquetReads()
    notes: list[str] = []
    summaries: list[DeviceSummary] = []
    executions: list[NeffExecution] = []
    steps: list[tuple[int, int, int]] = []
    trace = Path(framework_trace) if framework_trace is not None else None
    if ntff is not None or p.suffix == ".neff":
        if p.suffix != ".neff" or ntff is None:
            raise ValueError("give a device profile as a .neff file and its .ntff: neuron_profile('x.neff', 'x.ntff')")
        if not Path(ntff).is_file():
            raise TraceError(f"{ntff}: no such file")
        got = runner.view(
            [("-n", p), ("-s", ntff)],
            "summary-json",
            lambda out: read_summary_file(out, label=p.name, notes=notes),
        )
        summaries.extend(got or ())
    elif p.is_file():
        if fnmatch.fnmatch(p.name, SUMMARY_GLOB) or looks_like_summary(p):
            summaries.extend(read_summary_file(str(p), notes=notes))
        else:
            executions, more = read_system_profile(p)
            notes.extend(more)
            if trace is not None:
                steps = read_steps(trace)
    else:
        folders = _scan(p, pid, session_dirs)
        if not folders:
            raise TraceError(
                f"{p}: no Neuron profile here (looked for ntrace.pb/trace_info.pb, {SYSTEM_JSON}, "
                f"{SUMMARY_GLOB} and .ntff files)"
            )
        summaries, executions, steps = _read_folders(
            folders, runner, save=save, framework_trace=trace, notes=notes, extras=extras
        )
    executions.sort(key=_START)
    step_rows = step_activity(executions, steps) if executions and steps else []
    if executions and not steps:
        notes.append("no framework trace with ProfilerStep spans beside the system profile: no per-step busy time")
    notes.extend(runner.notes)
    if runner.error is not None:
        notes.append(runner.error)  # the whole message, with its fix, once
    if steps and executions:
        notes.extend(outside_steps(executions, steps))
    join = extras.join()
    peak, peak_note = extras.peak()
    if join is not None:
        kept = "" if join.matched == join.executions else "; unmatched executions stay on their NEFF rows only"
        notes.append(join.describe() + kept)
    elif executions:
        notes.append(
            "executions are not linked to framework ops: the JSON output documents no link (flow ids are "
            "documented only in the Parquet output, and no flow_id join was made from it)"
        )
    if executions or summaries:
        notes.append(peak_note if peak is not None else f"no hardware peaks from the profile: {peak_note}")
    return NeuronProfile(
        summaries=tuple(summaries),
        executions=tuple(executions),
        steps=tuple(step_rows),
        source=str(p),
        tool=runner.used,
        notes=tuple(notes),
        tool_error=runner.error,
        tool_missing=runner.missing is not None,
        peak=peak,
        peak_note=peak_note,
        flow_join=join,
    )
