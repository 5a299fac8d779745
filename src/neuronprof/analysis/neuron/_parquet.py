"""Neuron's Parquet output: hardware peaks (``Metadata``) and executions by flow id (``SystemProfileEvents``).

``neuron-explorer view -d <session> --ingest-only --data-path P --display-name N``
writes Neuron's profile as Parquet tables under ``P/profiles/global/N@latest/``:
``SystemProfileEvents.parquet`` holds the runtime's events, among them one
``nc_exec_running`` row per execution and physical NeuronCore, with the
``flow_id`` that links the execution to the framework; ``Metadata.parquet`` holds
the profile's hardware constants. pyarrow reads them (an optional dependency:
``pip install 'neuronprof[neuron]'``); it is imported only here, and only when a
Parquet file is read.

Not verified on hardware: the names read are in ``_names`` (not confirmed by AWS documentation).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from neuronprof.analysis._peaks import DevicePeak
from neuronprof.analysis.neuron._join import FlowJoin, join_flows, link_key, sum_ops

if TYPE_CHECKING:
    from neuronprof.analysis.trace import EventTable

from neuronprof.analysis.neuron._names import (
    DMA_BANDWIDTH,
    EVENT_COLUMNS,
    EXEC_EVENT,
    METADATA,
    SYSTEM_EVENTS,
    TE_CLOCK_GHZ,
    TE_COLS,
    TE_ROWS,
)

__all__ = [
    "PARQUET_DIR",
    "PYARROW_HINT",
    "FlowExecution",
    "ParquetReads",
    "find_events",
    "read_flow_executions",
    "read_folder",
    "framework_links",
    "read_peak",
]


PARQUET_DIR = "neuron_parquet"
"""The folder neuronprof keeps the tool's Parquet output in, beside the runtime's files (``--data-path``)."""

PYARROW_HINT = "pip install 'neuronprof[neuron]' (or pip install pyarrow)"

DISPLAY_NAME = "neuronprof"
"""The ``--display-name`` of the Parquet output neuronprof asks for."""


def pyarrow_parquet() -> Any:
    """Return ``pyarrow.parquet``.

    Raises:
        ImportError: pyarrow is not installed; the message says how to install it.
    """
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(f"reading Neuron's Parquet output needs pyarrow: {PYARROW_HINT}") from None
    return pq


def find_events(data_path: Path) -> Optional[Path]:
    """Return the ``SystemProfileEvents.parquet`` under ``data_path/profiles`` (the newest name first), or None."""
    found = sorted((data_path / "profiles").glob(f"*/*@latest/{SYSTEM_EVENTS}"))
    return found[-1] if found else None


class FlowExecution(NamedTuple):
    """One execution of a NEFF from ``SystemProfileEvents``: its ``nc_exec_running`` rows merged per ``flow_id``.

    Attributes:
        flow_ids: The row's ``flow_id`` (a list of ids in the output; one id becomes a 1-tuple).
        neff: The NEFF (``model_name`` of ``extra_attributes_json``; ``"model <model_id>"`` without one).
        model_id: ``model_id`` of ``extra_attributes_json``.
        start_ns: Earliest ``start_ts`` of its rows (ns).
        end_ns: Latest ``end_ts`` of its rows (ns).
        cores: Physical NeuronCores (``pcore_idx``) it ran on, one row each.
    """

    flow_ids: tuple[Any, ...]
    neff: str
    model_id: Any
    start_ns: int
    end_ns: int
    cores: tuple[Any, ...] = ()

    @property
    def duration_us(self) -> float:
        """Device time of this execution, in microseconds."""
        return (self.end_ns - self.start_ns) / 1000.0


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


def read_peak(data_path: Path) -> tuple[Optional[DevicePeak], str]:
    """Read the hardware peaks of the profile's ``Metadata`` tables under ``data_path``.

    Peak compute is ``rows x cols x 2 x clock`` of the TensorEngine (FLOP/s), peak bandwidth
    ``dma_ddr_bandwidth`` (bytes/s), per NeuronCore. Every ``Metadata.parquet`` found must
    give the same peaks.

    Returns:
        The peaks (``None`` when no table gives them), and a sentence saying where they came
        from or why there are none.

    Raises:
        ImportError: pyarrow is missing.
    """
    pq = pyarrow_parquet()
    tables = sorted((data_path / "profiles").glob(f"**/{METADATA}"))
    if not tables:
        return None, "the Parquet output holds no Metadata table"
    peaks: set[tuple[float, float, float, float]] = set()
    for path in tables:
        try:
            table = pq.read_table(str(path))
            row = table.slice(0, 1).to_pylist()[0] if table.num_rows else {}
        except Exception as exc:  # pyarrow's errors (ArrowInvalid, OSError...): a table it cannot read
            return None, f"its Metadata table cannot be read ({type(exc).__name__}: {exc})"
        values = [_number(row.get(k)) for k in (TE_ROWS, TE_COLS, TE_CLOCK_GHZ, DMA_BANDWIDTH)]
        if any(v is None for v in values):
            wanted = ", ".join((TE_ROWS, TE_COLS, TE_CLOCK_GHZ, DMA_BANDWIDTH))
            shown = ", ".join(sorted(row)[:12]) or "none"
            return None, f"its Metadata table does not give {wanted} as positive numbers (its columns: {shown})"
        peaks.add(tuple(values))  # type: ignore[arg-type]
    if len(peaks) > 1:
        return None, f"its {len(tables)} Metadata tables give different peaks"
    ((rows, cols, clock, bandwidth),) = peaks
    flops = rows * cols * 2.0 * clock * 1e9
    description = (
        f"from the profile's Metadata table: TensorEngine {rows:g} x {cols:g} x 2 x {clock:g} GHz = "
        f"{flops / 1e12:.4g} TFLOP/s, dma_ddr_bandwidth {bandwidth / 1e9:.4g} GB/s, per NeuronCore "
        "(not verified on hardware)"
    )
    peak = DevicePeak("neuron-profile", flops, bandwidth, None, description)
    return peak, f"hardware peaks {description}"


def read_flow_executions(path: Path) -> tuple[list[FlowExecution], list[str]]:
    """Read the ``nc_exec_running`` rows of a ``SystemProfileEvents.parquet``, merged per ``flow_id``.

    With more than one physical core per logical NeuronCore (LNC > 1) each execution has
    one row per physical core, all with the same ``flow_id``; they become one execution
    from the earliest start to the latest end.

    Raises:
        ImportError: pyarrow is missing.
        ValueError: The table cannot be read or lacks the columns it needs.
    """
    pq = pyarrow_parquet()
    try:
        names = set(pq.read_schema(str(path)).names)
    except Exception as exc:  # pyarrow's own errors: not a Parquet file
        raise ValueError(f"{path.name} cannot be read ({type(exc).__name__}: {exc})") from None
    needed = {"name", "start_ts", "end_ts", "flow_id"}
    if not needed <= names:
        raise ValueError(f"{path.name} has no {', '.join(sorted(needed - names))} column")
    try:
        # Only the executions are read (the filter is pushed down to the file); timestamps as integer ns.
        table = pq.read_table(
            str(path), columns=[c for c in EVENT_COLUMNS if c in names], filters=[("name", "==", EXEC_EVENT)]
        )
        table = _timestamps_as_ns(table)
    except Exception as exc:  # pyarrow's own errors (a column of another type, say)
        raise ValueError(f"{path.name} cannot be read ({type(exc).__name__}: {exc})") from None
    merged: dict[tuple[Any, ...], list[Any]] = {}
    rows = skipped = 0
    for row in table.to_pylist():
        rows += 1
        flow = row.get("flow_id")
        flows = tuple(flow) if isinstance(flow, (list, tuple)) else (() if flow is None else (flow,))
        start, end = _ns(row.get("start_ts")), _ns(row.get("end_ts"))
        if not flows or start is None or end is None or end < start:
            skipped += 1
            continue
        attrs = _attributes(row.get("extra_attributes_json"))
        model_id = attrs.get("model_id")
        core = row.get("pcore_idx")
        old = merged.get(flows)
        if old is None:
            name = attrs.get("model_name")
            neff = name if isinstance(name, str) and name else f"model {model_id}"
            merged[flows] = [flows, neff, model_id, start, end, () if core is None else (core,)]
        else:
            old[3], old[4] = min(old[3], start), max(old[4], end)
            if core is not None and core not in old[5]:
                old[5] = (*old[5], core)
    executions = sorted((FlowExecution(*e) for e in merged.values()), key=lambda e: e.start_ns)
    notes = [f"{path.name}: {rows} {EXEC_EVENT} row(s), {len(executions)} execution(s) by flow_id"]
    if skipped:
        notes.append(f"{skipped} {EXEC_EVENT} row(s) of {path.name} without a flow_id or valid times were skipped")
    return executions, notes


def _timestamps_as_ns(table: Any) -> Any:
    """``start_ts``/``end_ts`` written as Arrow timestamps become integer nanoseconds."""
    import pyarrow as pa

    for name in ("start_ts", "end_ts"):
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            ns = column.cast(pa.timestamp("ns")).cast(pa.int64())
            table = table.set_column(table.schema.get_field_index(name), name, ns)
    return table


def _ns(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return round(value)
    return None


def _attributes(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def data_path_of(folder: Path) -> Optional[Path]:
    """The saved Parquet output beside a session folder's files, when there is one."""
    path = folder / PARQUET_DIR
    return path if os.path.isdir(path) else None


@dataclass
class ParquetReads:
    """What Neuron's Parquet output of one or more session folders adds: their peaks and the flow_id join."""

    peaks: list[tuple[DevicePeak, str]] = field(default_factory=list)
    peak_notes: list[str] = field(default_factory=list)
    joins: list[FlowJoin] = field(default_factory=list)
    no_pyarrow: bool = False

    def peak(self) -> tuple[Optional[DevicePeak], str]:
        """The peaks every folder agrees on (None when none, or when they differ), and a sentence on them."""
        found = {p for p, _ in self.peaks}
        if len(found) == 1:
            return self.peaks[0]
        if len(found) > 1:
            return None, "the session folders' Metadata tables give different peaks"
        if self.no_pyarrow:
            return None, f"Neuron's Parquet output was not read: pyarrow is not installed ({PYARROW_HINT})"
        return None, "; ".join(dict.fromkeys(self.peak_notes)) or "Neuron's Parquet output was not read"

    def join(self) -> Optional[FlowJoin]:
        """The folders' joins as one (None when no folder's Parquet output was joined)."""
        if len(self.joins) <= 1:
            return self.joins[0] if self.joins else None
        return FlowJoin(
            sum_ops((o.op, o.neff, o.executions, o.device_us) for j in self.joins for o in j.ops),
            sum(j.executions for j in self.joins),
            sum(j.matched for j in self.joins),
            sum(j.links for j in self.joins),
            "; ".join(j.source for j in self.joins),
        )


def framework_links(events: EventTable) -> dict[Any, str]:
    """Return ``nrt_sequence_id`` -> op name for the events of a framework (torch.profiler) trace.

    An event that carries the id is an op itself (``cpu_op``), or it sits inside one on
    its thread: the innermost op around it is named (the event's own name where none is).

    Args:
        events: The framework trace's event table, as the trace reader read it (it keeps
            the events that carry an ``nrt_sequence_id``).
    """
    keys = events.keys
    links: dict[Any, str] = {}
    carriers: dict[tuple[Any, Any], list[tuple[int, int, Any, str]]] = {}
    for seq, where, start, dur, kid in events.sequence_ids:
        if keys.keys[kid][1] == "cpu_op":
            links[link_key(seq)] = keys.raw_names[kid]
        else:
            carriers.setdefault(where, []).append((start, start + dur, seq, keys.raw_names[kid]))
    for where, found in carriers.items():
        th = events.threads.get(where)
        ops = (
            [(t, t + d, keys.raw_names[k]) for t, d, k in zip(th.ts, th.dur, th.kid) if keys.keys[k][1] == "cpu_op"]
            if th is not None
            else []
        )
        for (_, _, seq, name), op in zip(found, _innermost(ops, found)):
            links[link_key(seq)] = op or name
    return links


def _innermost(spans: list[tuple[int, int, str]], carriers: list[tuple[int, int, Any, str]]) -> list[Optional[str]]:
    """For each carrier ``(start, end, ...)``, the innermost op span of its thread around it (None: none).

    One sweep in start order with a stack of the op spans still open (ops on one thread nest),
    so a trace with many executions costs a sort, not a scan per execution.
    """
    spans = sorted(spans, key=lambda s: (s[0], -s[1]))
    order = sorted(range(len(carriers)), key=lambda k: carriers[k][0])
    out: list[Optional[str]] = [None] * len(carriers)
    stack: list[tuple[int, int, str]] = []
    i = 0
    for k in order:
        start, end = carriers[k][0], carriers[k][1]
        while i < len(spans) and spans[i][0] <= start:
            while stack and stack[-1][1] < spans[i][0]:
                stack.pop()  # a sibling that ended before this span starts
            stack.append(spans[i])
            i += 1
        while stack and stack[-1][1] < start:
            stack.pop()  # ended before this carrier starts, so before every later one too
        out[k] = next((name for s, e, name in reversed(stack) if s <= start and e >= end), None)
    return out


class _NotWritten(Exception):
    """The tool wrote no Parquet output (its note is taken already): the folder being built is dropped."""


def read_folder(
    folder: Path,
    ingest: Optional[Callable[[Path, Path], Optional[Path]]],
    *,
    save: bool,
    framework: Optional[EventTable],
    reads: ParquetReads,
    notes: list[str],
) -> None:
    """Read a session folder's Parquet output (``neuron_parquet/``), or first have the tool write it.

    Args:
        folder: The Neuron Runtime session folder.
        ingest: Runs ``neuron-explorer view --ingest-only`` of ``folder`` into a data path and returns
            its ``SystemProfileEvents.parquet`` (None when it failed, with a note); None: never run it.
        save: Keep the output beside the runtime's files as ``neuron_parquet/``.
        framework: The framework trace's events, whose ``nrt_sequence_id`` events the executions are joined to.
        reads: Gets the peaks and the join.
        notes: Gets remarks.
    """
    from neuronprof._io import atomic_folder

    data = data_path_of(folder)
    if data is None and ingest is None:
        return
    try:
        pyarrow_parquet()
    except ImportError:
        reads.no_pyarrow = True
        return
    if data is not None:
        _read_data(data, folder, framework, reads, notes)
        return
    assert ingest is not None
    if save:
        try:
            with atomic_folder(folder / PARQUET_DIR) as tmp:
                tmp.mkdir()  # the data path, made for the tool as for a temporary one
                if ingest(folder, tmp) is None:
                    raise _NotWritten
        except _NotWritten:
            return
        except OSError as exc:
            notes.append(f"could not keep Neuron's Parquet output beside the profile ({exc.strerror or exc})")
            return
        _read_data(folder / PARQUET_DIR, folder, framework, reads, notes)
        return
    scratch = Path(tempfile.mkdtemp(prefix="neuronprof-parquet-"))
    try:
        if ingest(folder, scratch) is not None:
            _read_data(scratch, folder, framework, reads, notes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _read_data(
    data: Path, folder: Path, framework: Optional[EventTable], reads: ParquetReads, notes: list[str]
) -> None:
    peak, said = read_peak(data)
    if peak is not None:
        reads.peaks.append((peak, said))
    else:
        reads.peak_notes.append(said)
    events = find_events(data)
    if events is None:
        notes.append(f"Neuron's Parquet output of {folder} holds no {SYSTEM_EVENTS}: no flow_id join")
        return
    try:
        flows, more = read_flow_executions(events)
    except ValueError as exc:
        notes.append(f"{exc}: no flow_id join of executions to ops")
        return
    notes.extend(more)
    if framework is None:
        notes.append("no framework trace beside the system profile: the flow_id join has no framework events")
    links = framework_links(framework) if framework is not None else {}
    where = f"{SYSTEM_EVENTS} of {folder}" + (f" and {Path(framework.source).name}" if framework is not None else "")
    reads.joins.append(join_flows(flows, links, source=where))
