"""Neuron's Parquet output: hardware peaks (``Metadata``) and executions by flow id (``SystemProfileEvents``).

``neuron-explorer view -d <session> --ingest-only --data-path P --display-name N``
writes Neuron's profile as Parquet tables under ``P/profiles/global/N@latest/``:
``SystemProfileEvents.parquet`` holds the runtime's events, among them one
``nc_exec_running`` row per execution and physical NeuronCore, with the
``flow_id`` that links the execution to the framework; ``Metadata.parquet`` holds
the profile's hardware constants. pyarrow reads them (an optional dependency:
``pip install 'neuronprof[neuron]'``); it is imported only here, and only when a
Parquet file is read.

Not verified on hardware: see the names below.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple, Optional

from neuronprof.analysis._peaks import DevicePeak

__all__ = [
    "INGEST_FLAGS",
    "PARQUET_DIR",
    "PYARROW_HINT",
    "FlowExecution",
    "find_events",
    "read_flow_executions",
    "read_peak",
]

# -- The names read from Neuron's Parquet output: the one place for them. ------------------------------
# NOT CONFIRMED BY AWS DOCUMENTATION. AWS documents that the Parquet output has a ``Metadata`` table and a
# ``SystemProfileEvents`` table with ``flow_id``; the column names, their types and units below are the most
# plausible reading of AWS's own device-profile analysis notes (which read ``Metadata.parquet``'s first row
# as ``tensor_engine_num_rows * tensor_engine_num_cols * 2 * tensor_engine_clock_freq * 1e9`` FLOP/s and
# ``dma_ddr_bandwidth`` as bytes/s, per NeuronCore) and of a recipe seen on trn2 with neuron-explorer 2.32
# (``nc_exec_running`` rows with ``start_ts``/``end_ts`` in ns, ``flow_id`` a list of ids, the model id in
# ``extra_attributes_json``). Everything that reads them tolerates their absence: no peaks (the preset
# table is the fallback, and says so) and no join (a match rate of 0).
INGEST_FLAGS: tuple[str, ...] = (
    "--ingest-only",
    "--ignore-instruction-trace",
    "--ignore-dma-trace",
    "--ignore-event-trace",
)
"""Flags of ``neuron-explorer view -d`` that write Parquet only and skip the device traces (about 3x faster)."""
SYSTEM_EVENTS = "SystemProfileEvents.parquet"
METADATA = "Metadata.parquet"
EXEC_EVENT = "nc_exec_running"
EVENT_COLUMNS = ("name", "start_ts", "end_ts", "flow_id", "pcore_idx", "extra_attributes_json")
TE_ROWS = "tensor_engine_num_rows"
TE_COLS = "tensor_engine_num_cols"
TE_CLOCK_GHZ = "tensor_engine_clock_freq"  # in GHz
DMA_BANDWIDTH = "dma_ddr_bandwidth"  # bytes/s
# ------------------------------------------------------------------------------------------------------

PARQUET_DIR = "neuron_parquet"
"""The folder neuronprof keeps the tool's Parquet output in, beside the runtime's files (``--data-path``)."""

PYARROW_HINT = "pip install 'neuronprof[neuron]' (or pip install pyarrow)"


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


def _first_row(pq: Any, path: Path) -> dict[str, Any]:
    table = pq.read_table(str(path))
    return table.slice(0, 1).to_pylist()[0] if table.num_rows else {}


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
            row = _first_row(pq, path)
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
    table = pq.read_table(str(path), columns=[c for c in EVENT_COLUMNS if c in names])
    merged: dict[tuple[Any, ...], list[Any]] = {}
    rows = skipped = 0
    for row in _exec_rows(table.to_pylist()):
        rows += 1
        flow = row.get("flow_id")
        flows = tuple(flow) if isinstance(flow, (list, tuple)) else (() if flow is None else (flow,))
        start, end = row.get("start_ts"), row.get("end_ts")
        if not flows or not isinstance(start, int) or not isinstance(end, int) or end < start:
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


def _exec_rows(rows: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    return (r for r in rows if r.get("name") == EXEC_EVENT)


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
