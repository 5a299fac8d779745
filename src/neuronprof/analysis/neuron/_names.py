"""The names neuronprof reads from Neuron's Parquet output and matches in the framework trace: the one place.

NOT CONFIRMED BY AWS DOCUMENTATION. AWS documents that the Parquet output has a ``Metadata``
table and a ``SystemProfileEvents`` table with ``flow_id``, and that framework events carry
``nrt_sequence_id``. The column names, their types and units, and how the two ids match are
the most plausible reading of AWS's own device-profile analysis notes (which read
``Metadata.parquet``'s first row as ``tensor_engine_num_rows * tensor_engine_num_cols * 2 *
tensor_engine_clock_freq * 1e9`` FLOP/s and ``dma_ddr_bandwidth`` as bytes/s, per NeuronCore)
and of a recipe seen on trn2 with neuron-explorer 2.32 (``nc_exec_running`` rows with
``start_ts``/``end_ts`` in ns, ``flow_id`` a list of ids, the model id in
``extra_attributes_json``). Everything that reads them tolerates their absence: no peaks (the
preset table is the fallback, and says so) and no join (a match rate of 0).
"""

from __future__ import annotations

__all__ = [
    "DMA_BANDWIDTH",
    "EVENT_COLUMNS",
    "EXEC_EVENT",
    "FRAMEWORK_LINK",
    "INGEST_FLAGS",
    "METADATA",
    "SYSTEM_EVENTS",
    "TE_CLOCK_GHZ",
    "TE_COLS",
    "TE_ROWS",
]

# Not confirmed by AWS documentation: see above. Change a name here and nowhere else.
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
FRAMEWORK_LINK = "nrt_sequence_id"
"""The framework event's ``args`` key matched against an element of an execution's ``flow_id``."""
