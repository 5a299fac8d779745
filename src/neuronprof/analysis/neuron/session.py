"""The session's side of Neuron's own profile: per-NEFF device rows and per-step busy time in ``s.table()``.

On the TorchNeuron builds in the public record before ``correlate_device_time``,
torch.profiler gets no NeuronCore time: the NEURON column stays empty and the
time lives only in Neuron Runtime's files, written at profiler stop into
``<profile_output_dir>/<instance-id>_pid_<pid>/<timestamp>/``. This module reads
those files of one process with
[`neuron_profile`][neuronprof.analysis.neuron_profile] (running
``neuron-explorer`` when their JSON is not there yet, and keeping the JSON
beside them so that a later read, or an exported bundle, needs no tool) and
adds what they say to the session's table. It never imports torch.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Optional

from neuronprof._vocabulary import is_step_row
from neuronprof.analysis.errors import TraceError
from neuronprof.analysis.neuron._model import NEFF_ROW_PREFIX, NeuronProfile
from neuronprof.analysis.neuron._read import DEFAULT_TIMEOUT, neuron_profile
from neuronprof.errors import warn_user
from neuronprof.model import OpRow, Table
from neuronprof.typing import ToolChoice

__all__ = ["SessionNeuronProfile", "add_neuron_profile"]

_SHOWN_STEPS = 5
_TOKEN = re.compile(r"[^a-z0-9]+")

SOURCE_TORCH = "NEURON column: device time from torch.profiler (TorchNeuron put NeuronCore time into the profile)"
SOURCE_NEURON = (
    "NEURON column: NeuronCore time from Neuron's own profile ({tool}; nc_exec_running records of "
    "system_profile.json), one row per NEFF ('NEFF <name>': executions and µs); {ops}"
)
OPS_NO_TIME = "ops carry no device time because the JSON output documents no link between an execution and the op"
OPS_JOINED = (
    "ops carry device time where the flow_id join below put an execution on the op that launched it (Neuron's "
    "Parquet output; not verified on hardware)"
)
OPS_UNJOINED = "ops carry no device time: the flow_id join below put none of the executions on an op in this table"
OPS_HEURISTIC = (
    "ops carry device time only where the heuristic below put a NEFF's time on them (the JSON output documents "
    "no link between an execution and the op, so this is a guess)"
)
EMPTY_BY_DESIGN = "column is empty by design"
"""Marks the neuron backend's note that torch.profiler got no NeuronCore time (see ``NeuronBackend``)."""
FILLED_FROM_PROFILE = (
    "this TorchNeuron build puts no NeuronCore time into torch.profiler (its NeuronConfig has no "
    "correlate_device_time), so the NEFF rows come from Neuron's own profile; s.export(format='neuron') keeps it "
    "for Neuron Explorer"
)
SOURCE_EMPTY = "NEURON column: empty; this TorchNeuron build puts no NeuronCore time into torch.profiler, and {why}"


class SessionNeuronProfile:
    """Reads a session's Neuron profile once, on first use, and adds it to the session's tables.

    Args:
        root: The session's Neuron profile output folder (``NeuronConfig``'s
            ``profile_output_dir``), or ``None`` when nothing was written.
        sessions: The Neuron Runtime session folders this session wrote (``None`` entries,
            for cycles that wrote none, are skipped): the backend's
            ``DeviceFiles.cycle_dirs``, the same folders ``export(format="neuron")`` bundles.
            Only these are read, so another session of the same process writing to the
            same ``output_dir`` stays out. ``None``: every folder of ``pid``.
        pid: Without ``sessions``, the process whose session folders (``*_pid_<pid>``) are read.
        timeout: Seconds each run of ``neuron-explorer`` may take.
    """

    def __init__(
        self,
        root: Optional[Path],
        *,
        sessions: Optional[Sequence[Optional[Path]]] = None,
        pid: Optional[int] = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.root = root
        self.sessions = None if sessions is None else [Path(s) for s in sessions if s is not None]
        self.pid = pid
        self.timeout = timeout
        self._profile: Optional[NeuronProfile] = None
        self._read = False
        self._warned = False
        self.why = ""
        self.missing: Optional[str] = None

    def get(self, tool: ToolChoice = "auto", *, warn_missing: bool = True) -> Optional[NeuronProfile]:
        """Return the session's [`NeuronProfile`][neuronprof.analysis.NeuronProfile], read once.

        ``None`` when the session wrote no Neuron profile or it cannot be read
        (a ``NeuronProfWarning`` says why, and so does ``why``). A tool that is not
        installed is reported with a warning once ``warn_missing`` is True (the
        table's footer says it in any case).
        """
        if not self._read:
            self._read = True
            self._profile = self._load(tool)
        if warn_missing and self.missing and not self._warned:
            self._warned = True
            warn_user(
                f"{self.missing} (NeuronCore time from Neuron's profile is left out; the profile data itself is kept)"
            )
        return self._profile

    def _load(self, tool: ToolChoice) -> Optional[NeuronProfile]:
        if self.root is None or not self.root.is_dir() or self.sessions == []:
            self.why = "the session wrote no Neuron profile files (capture with modes 'device'/'runtime')"
            return None
        try:
            profile = neuron_profile(
                self.root,
                pid=self.pid,
                sessions=self.sessions,
                tool=tool,
                timeout=self.timeout,
                save=True,
                warn_missing=False,
            )
        except TraceError as exc:
            self.why = f"Neuron's profile could not be read ({exc})"
            warn_user(f"Neuron's profile in {self.root} could not be read: {exc}; the torch.profiler data is kept")
            return None
        self.missing = profile.tool_error if profile.tool_missing else None
        if not profile.executions:
            if self.missing:
                self.why = self.missing
            elif profile.tool_error is not None:
                self.why = f"Neuron's profile could not be read ({profile.tool_error})"
            else:
                self.why = "Neuron's profile holds no NEFF execution on the profiled NeuronCores"
        return profile

    def table(self, table: Table, *, heuristic: bool = False) -> Table:
        """Return ``table`` with the device side from Neuron's profile, when torch recorded none.

        See [`add_neuron_profile`][neuronprof.analysis.neuron.session.add_neuron_profile].
        """
        if table.has_device_time:
            return add_neuron_profile(table, None, heuristic=heuristic)
        profile = self.get(warn_missing=False)  # the footer says what to install
        return add_neuron_profile(table, profile, heuristic=heuristic, why=self.why)


def add_neuron_profile(
    table: Table, profile: Optional[NeuronProfile], *, heuristic: bool = False, why: str = ""
) -> Table:
    """Add per-NEFF device rows and per-step busy time from Neuron's profile to a session table.

    When torch.profiler already recorded device time, only the footer changes:
    it names torch as the NEURON column's source. Otherwise, with a profile that
    holds NEFF executions, one row per NEFF (``"NEFF <name>"``, ``on_device``,
    executions as calls, NeuronCore µs as device time) is added and the footer
    names Neuron's profile as the source, with busy/idle time per step.

    Args:
        table: The session's unsorted table.
        profile: Neuron's profile of the session, or ``None``.
        heuristic: Also put each NEFF's time on the op whose name it contains
            (eager mode runs one small NEFF per op). A guess, not a documented
            link, and labelled as one in the footer.
        why: Why there is no profile, for the footer.
    """
    notes = list(table.notes)
    if table.has_device_time:
        notes.append(SOURCE_TORCH)
        return dataclasses.replace(table, notes=tuple(notes))
    if profile is None or not profile.executions:
        notes.append(SOURCE_EMPTY.format(why=why or "Neuron's profile holds no NEFF execution"))
        return dataclasses.replace(table, notes=tuple(notes))
    rows = list(table.rows)
    # The backend said the column would stay empty; here it is filled from Neuron's profile: say that instead.
    notes = [FILLED_FROM_PROFILE if EMPTY_BY_DESIGN in n else n for n in notes]
    joined = 0
    matched = 0
    if profile.flow_join is not None:
        rows, joined = _join_onto_ops(rows, profile)
        notes.append(f"{profile.flow_join.describe()}; {joined} op row(s) got device time from it")
    if heuristic and joined:
        notes.append("heuristic (neuron_heuristic=True) not used: the flow_id join put device time on the ops")
    elif heuristic:
        rows, matched = _match_by_name(rows, profile)
        notes.append(
            f"heuristic (neuron_heuristic=True): device time of {matched} NEFF(s) put on the op whose name the "
            "NEFF's name contains, assuming eager mode's one small NEFF per op; a guess by name, not a "
            "documented link"
        )
    rows.extend(profile.rows())
    if joined:
        ops = OPS_JOINED
    elif heuristic and matched:
        ops = OPS_HEURISTIC
    else:
        ops = OPS_NO_TIME if profile.flow_join is None else OPS_UNJOINED
    notes.append(SOURCE_NEURON.format(tool=profile.tool or "existing JSON files", ops=ops))
    notes += [n for n in profile.notes if _OUTSIDE in n or _STOPPED in n]
    if profile.steps:
        shown = "; ".join(
            f"ProfilerStep#{s.step} {s.busy_us:.1f} µs busy / {s.idle_us:.1f} µs idle "
            f"(largest gap {s.largest_gap_us:.1f} µs)"
            for s in profile.steps[:_SHOWN_STEPS]
        )
        more = len(profile.steps) - _SHOWN_STEPS
        rest = f"; {more} more in s.neuron_profile().steps" if more > 0 else ""
        notes.append(f"NeuronCore time per step (Neuron's profile): {shown}{rest}")
    return table.with_rows(rows, notes=notes)


_OUTSIDE = "fell outside the profiled steps"
_STOPPED = "stopped after writing"


def _key(op: str) -> str:
    return op.split("::")[-1].strip("_").lower()


def _op_rows(rows: list[OpRow], key: Callable[[str], str]) -> dict[str, list[int]]:
    """The positions of the host op rows (not kernels, steps or NEFF rows), by ``key`` of their name."""
    found: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if not (r.on_device or is_step_row(r.name) or r.name.startswith(NEFF_ROW_PREFIX)):
            found.setdefault(key(r.name), []).append(i)
    return found


def _join_onto_ops(rows: list[OpRow], profile: NeuronProfile) -> tuple[list[OpRow], int]:
    """Put the flow_id join's device time on the op rows of that name; return the rows and how many got time.

    A name held by several rows (a table grouped by input shape) is left alone: the join
    names the op, not its shapes, and a split between the rows would be a guess.
    """
    assert profile.flow_join is not None
    by_name = _op_rows(rows, lambda name: name)
    out = list(rows)
    done = 0
    for op, us in profile.flow_join.by_op().items():
        hits = by_name.get(op, [])
        if len(hits) == 1:
            out[hits[0]] = dataclasses.replace(out[hits[0]], self_device_us=us, device_total_us=us)
            done += 1
    return out, done


def _match_by_name(rows: list[OpRow], profile: NeuronProfile) -> tuple[list[OpRow], int]:
    """Put each NEFF's device time on the one op whose name is a token of the NEFF's name."""
    by_key = _op_rows(rows, _key)
    extra: dict[int, float] = {}
    matched = 0
    for s in profile.neffs:
        tokens = set(_TOKEN.split(s.neff.lower()))
        hits = {i for k, idx in by_key.items() if k and k in tokens for i in idx}
        if len(hits) == 1:
            (i,) = hits
            extra[i] = extra.get(i, 0.0) + s.device_us
            matched += 1
    out = list(rows)
    for i, us in extra.items():
        out[i] = dataclasses.replace(out[i], self_device_us=us, device_total_us=us)
    return out, matched
