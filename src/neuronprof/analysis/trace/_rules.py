"""How a trace's numbers, ids and producers are read: one rule each, shared by every reader.

Times are integer nanoseconds read from the text of the numbers; ids are ints
or their text (0 is an id, -1 is none); processes and lanes are told apart by
their names (device timelines, derived views, container lanes); the device
label and the rank are read from the trace itself.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import re
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from itertools import islice
from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab

if TYPE_CHECKING:
    from neuronprof.model import Shape

# What each event is (its kind, its row, whether it is a step or a top-level call)
# is the vocabulary's rule, shared with the live table.
_SKIP_CATS = vocab.SKIP_CATS
_K_OTHER, _K_OP, _K_PY, _K_RUNTIME, _K_STEP, _K_DEVICE = (
    vocab.K_OTHER,
    vocab.K_OP,
    vocab.K_PY,
    vocab.K_RUNTIME,
    vocab.K_STEP,
    vocab.K_DEVICE,
)
_RANK_FILE = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE)

# Process names/labels that mark a device timeline (kineto labels GPU pids "GPU 0";
# XLA/TPU traces name them "/device:TPU:0").
# torch_npu names its device process "Ascend Hardware".
_DEVICE_PROC = re.compile(
    r"(\bGPU\b|\bTPU\b|/device:|neuron\s*core|neuron\s*device|\bNC\s*\d|\bXPU\b|\bNPU\b|\bMTIA\b|\bHPU\b"
    r"|Ascend Hardware|\bHCCL\b|\bHIP\b)",
    re.IGNORECASE,
)
# Processes that hold views derived from other events, not events: torch_npu's
# "Overlap Analysis" ("Computing", "Communication", "Free" spans over the device
# timeline). Counting them would add their time a second time, as host time.
_ANALYSIS_PROC = re.compile(r"^\s*Overlap Analysis\s*$", re.IGNORECASE)
# Lanes of a device process whose spans contain the ops of another lane: the XLA/TPU
# trace viewer's "Steps" and "XLA Modules" (and the framework views derived from
# "XLA Ops"). Only the op lanes are device op time.
_CONTAINER_LANE = re.compile(
    r"^\s*(Steps|XLA Modules|Framework (Name Scope|Ops)|TensorFlow (Name Scope|Ops)|Source code|XLA TraceMe)\s*$",
    re.IGNORECASE,
)
# A lane derived from a stream's events (XProf / TensorBoard's trace viewer on GPU:
# "XLA Ops - from #16", "Framework Name Scope - from #16"): a view of the stream's
# time, never time of its own.
_DERIVED_LANE = re.compile(r"\s-\s*from\s*#\d+\s*$", re.IGNORECASE)
_NEURON_LAYOUT = re.compile(r"_pid_\d+")

_MAX_ID = 1 << 62
# Times are stored as signed 64-bit nanoseconds: anything at or beyond this many µs is out of range.
_MAX_US = (1 << 63) // 1000
_MISSING: Any = object()
_ENCODE: Any = None  # msgspec's JSON encoder (a list of raw texts in one call), made on first use
_INTS: Any = None  # msgspec's decoder of a list of ints


def process_roles(procs: Mapping[Any, Sequence[str]]) -> tuple[set[Any], set[Any]]:
    """Split a file's processes by their names/labels: ``(derived-view pids, device pids)``.

    Derived views (torch_npu's "Overlap Analysis") are left out; every event of a
    device process (kineto's "GPU 0", XLA's "/device:TPU:0", "Ascend Hardware") is
    device work. Shared by the table reader and the findings' trace adapter.
    """
    analysis = {pid for pid, names in procs.items() if any(_ANALYSIS_PROC.search(n) for n in names)}
    device = {pid for pid, names in procs.items() if pid not in analysis and any(_DEVICE_PROC.search(n) for n in names)}
    return analysis, device


_STREAM_LANE = re.compile(r"^\s*Stream #\d+", re.IGNORECASE)
_XLA_OPS_LANE = re.compile(r"^\s*XLA Ops\s*$", re.IGNORECASE)


def derived_lanes(lanes: Mapping[Any, str], device_pids: Iterable[Any]) -> set[Any]:
    """The ``(pid, tid)`` lanes of device processes that hold views, not time (``is_container_lane``).

    On a process with stream lanes (``Stream #16(Kernel)``: a GPU under XLA), the
    stream is the time and "XLA Ops" a view of it; on a TPU process "XLA Ops" is the
    op lane itself.

    Args:
        lanes: Thread names by ``(pid, tid)``.
        device_pids: The device processes (``process_roles``).
    """
    device = set(device_pids)
    with_streams = {pid for (pid, _tid), name in lanes.items() if pid in device and _STREAM_LANE.match(name)}
    return {
        (pid, tid)
        for (pid, tid), name in lanes.items()
        if pid in device and (is_container_lane(name) or (pid in with_streams and _XLA_OPS_LANE.match(name)))
    }


def is_container_lane(lane: Optional[str]) -> bool:
    """Whether a device process's lane (thread name) holds spans that contain or copy other lanes' ops.

    The XLA/TPU trace viewer's "Steps" and "XLA Modules" (and the framework views),
    with or without a " - from #N" suffix, and any lane derived from stream N
    (" - from #N", "XLA Ops - from #16" included): left out, only the op lanes
    (a stream's kernels, or "XLA Ops" on a TPU) are device op time.
    """
    return lane is not None and bool(_CONTAINER_LANE.match(lane) or _DERIVED_LANE.search(lane))


def _ns(value: Any) -> Optional[int]:
    """A trace time in µs (int, or the text of a number) as integer nanoseconds; None when not a number."""
    kind = type(value)
    if kind is int:
        return int(value) * 1000 if -_MAX_US < value < _MAX_US else None
    if kind is str:
        try:
            d = Decimal(value.strip())
        except InvalidOperation:
            return None
    elif kind is float:
        d = Decimal(repr(value))
    else:
        return None
    if not d.is_finite() or abs(d) >= _MAX_US:
        return None
    return int((d * 1000).to_integral_value())


def _time_ns(value: Any) -> Optional[int]:
    """``ts``/``dur`` as integer ns: kineto's "1712195495520835.103" read exactly and fast, anything else by ``_ns``."""
    if type(value) is str and value[-4:-3] == ".":
        try:
            return int(value.replace(".", ""))
        except ValueError:
            pass
    return _ns(value)


def ns_column(raws: Sequence[Any], number: Callable[[Any], Any]) -> Any:
    """Times in µs, each the JSON text of a number (``msgspec.Raw``), as an int64 numpy array of ns; None if one is not.

    The same values as ``_time_ns(number(raw))`` one by one, read in a few calls:
    kineto writes every time with three decimals (``"5106267470000.500"``), which
    read without their point are the integer ns (msgspec parses them as integers,
    never through a binary float, whose 53 bits cannot tell nanoseconds apart at
    1.7e15 µs); integers are µs. Any other spelling (more or fewer decimals, an
    exponent, a string, ``0.5`` whose digits would start with a zero) is read one by one.

    Args:
        raws: The JSON texts (empty for a time that is absent).
        number: Turns one text into what ``_time_ns`` reads (``int``, or ``str`` for a fraction).
    """
    import msgspec
    import numpy as np

    global _ENCODE, _INTS
    if _ENCODE is None:
        _ENCODE = msgspec.json.Encoder().encode
        _INTS = msgspec.json.Decoder(list[int])
    n = len(raws)
    if not n:
        return np.zeros(0, np.int64)
    text = _ENCODE(raws)  # "[t0,t1,...]", each time's text as the file has it
    dots = text.count(b".")
    try:
        if dots == n:
            # Three characters after each point, up to the comma (or the closing bracket) that ends its time.
            u = np.frombuffer(text, np.uint8)
            ends = np.append(np.flatnonzero(u == 44), len(text) - 1)
            if len(ends) == n and (u[ends - 4] == 46).all():
                return np.fromiter(_INTS.decode(text.replace(b".", b"")), np.int64, n)
        elif dots == 0:
            whole = np.fromiter(_INTS.decode(text), np.int64, n)
            if whole.max() < _MAX_US and whole.min() > -_MAX_US:
                return whole * 1000
    except (msgspec.DecodeError, OverflowError, ValueError):
        pass  # not integers once read so: read one by one
    out = [_time_ns(number(raw)) for raw in raws]
    if None in out:
        return None
    try:
        return np.array(out, np.int64)
    except OverflowError:
        return None


def _id(value: Any) -> int:
    """A correlation or External id: an int, or the text of one (``"7"``); -1 when none or out of range.

    0 is a valid id (kineto numbers from 0 on some builds), so "none" is -1, never 0.
    """
    if type(value) is str:
        text = value.strip()
        if text.isascii() and text.isdigit():
            value = int(text)
    if type(value) is int and 0 <= value < _MAX_ID:
        return value
    return -1


def _time_error(path: str, index: int, what: str, key: str, value: Any) -> str:
    """The message for an event whose ``ts``/``dur`` cannot be read: missing, not a number, or out of range."""
    label = what if what.startswith("ph ") else repr(what)
    number: Optional[Decimal] = None
    if type(value) in (int, float):
        number = Decimal(repr(value)) if type(value) is float else Decimal(value)
    elif type(value) is str:
        with contextlib.suppress(InvalidOperation):
            number = Decimal(value.strip())
    if number is not None and not number.is_nan():
        return f"{path}: event #{index} ({label}) has a '{key}' out of range ({value!r} µs)"
    return f"{path}: event #{index} ({label}) has no numeric '{key}'"


def _add_flops(flops_by_key: dict[int, int], kid: int, flops: Any) -> None:
    if type(flops) is str:
        try:
            flops = float(flops)
        except ValueError:
            return
    if type(flops) in (int, float) and 0 <= flops < float("inf"):
        flops_by_key[kid] = flops_by_key.get(kid, 0) + int(flops)


def _us_text(ns: int) -> str:
    """Integer nanoseconds as the text of a µs value with three decimals."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}"


def _rank_of(path: str, metadata: Mapping[str, Any]) -> Optional[int]:
    """The distributed rank a trace file belongs to: kineto's ``distributedInfo``, else its file name."""
    info = metadata.get("distributedInfo")
    if isinstance(info, dict):
        rank = info.get("rank")
        if type(rank) is int and rank >= 0:
            return rank
        if isinstance(rank, str) and rank.isdigit():
            return int(rank)
    m = _RANK_FILE.search(os.path.basename(path))
    return int(m.group(1)) if m else None


_LEFT_OUT = {
    "s": "flow",
    "t": "flow",
    "f": "flow",
    "b": "async",
    "e": "async",
    "n": "async",
    "S": "async",
    "T": "async",
    "p": "async",
    "F": "async",
    "i": "instant",
    "I": "instant",
    "R": "mark",
    "C": "counter",
    "P": "sample",
    "O": "object",
    "N": "object",
    "D": "object",
    "c": "clock sync",
    "Trace": "profiler span",
    "gpu_user_annotation": "device copy of an annotation",
}


def _left_out_note(skipped: Mapping[str, int]) -> Optional[str]:
    """Say which events are not rows and how many, e.g. "flow ('s', 'f') ×120"."""
    if not skipped:
        return None
    groups: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for what, n in skipped.items():
        label = _LEFT_OUT.get(what, "unknown") if isinstance(what, str) else "unknown"
        groups.setdefault(label, []).append(repr(what))
        counts[label] = counts.get(label, 0) + n
    total = sum(counts.values())
    parts = []
    for label in sorted(groups, key=lambda g: -counts[g]):
        kinds = ", ".join(groups[label])
        what = "cat" if label in ("profiler span", "device copy of an annotation") else "ph"
        parts.append(f"{label} ({what} {kinds}) ×{counts[label]:,}")
    return f"{total:,} event(s) are not op or kernel spans and are left out: " + "; ".join(parts)


def _decode_input(raw: Optional[bytes]) -> Any:
    """``Input Dims`` / ``Input type`` / ``Concrete Inputs`` JSON text as nested tuples (hashable)."""
    if raw is None:
        return None
    try:
        return _freeze_any(json.loads(raw))
    except ValueError:
        return None


# -- helpers -------------------------------------------------------------------------


def _is_sorted(ts: array[int], dur: array[int]) -> bool:
    """True when events are ordered by start, and equal starts by longest first."""
    after = islice(ts, 1, None)
    if not all(map(operator.le, ts, after)):
        return False
    if not any(map(operator.eq, ts, islice(ts, 1, None))):
        return True
    return all(dur[i] >= dur[i + 1] for i in range(len(ts) - 1) if ts[i] == ts[i + 1])


def _freeze_any(value: Any) -> Any:
    """Turn nested lists into nested tuples; anything else that is not a plain scalar becomes None."""
    if type(value) is list:
        return tuple(_freeze_any(v) for v in value)
    if value is None or type(value) in (int, float, str, bool):
        return value
    return None


def _all_str(values: Any) -> bool:
    return isinstance(values, tuple) and all(isinstance(v, str) for v in values)


def _flat_shapes(dims: Optional[tuple[Any, ...]]) -> Optional[tuple[Shape, ...]]:
    if dims is None:
        return None
    out: list[Shape] = []
    for d in dims:
        if isinstance(d, tuple) and all(type(x) is int for x in d):
            out.append(d)
        else:
            out.append(())
    return tuple(out)


# The device label, read from the trace itself: process names and labels of device
# timelines, deviceProperties, device and runtime categories, runtime call names.
# First match wins; nothing defaults to CUDA.
_LABELS = (
    (re.compile(r"ascend|\bnpu\b|\bhccl\b", re.IGNORECASE), "NPU"),
    (re.compile(r"mtia", re.IGNORECASE), "MTIA"),
    (re.compile(r"\btpu\b", re.IGNORECASE), "TPU"),
    (re.compile(r"neuron|\bNC\s*\d", re.IGNORECASE), "NEURON"),
    (re.compile(r"\bxpu", re.IGNORECASE), "XPU"),
    (re.compile(r"\bhpu", re.IGNORECASE), "HPU"),
    (re.compile(r"\bhip|\brocm|\bamd\b|gcnArchName", re.IGNORECASE), "HIP"),
    (re.compile(r"\bcuda|\bcu[A-Z]|(?i:nvidia)"), "CUDA"),
    (re.compile(r"\bgpu\b", re.IGNORECASE), "GPU"),
)


def process_evidence(procs: Mapping[Any, Sequence[str]], device_pids: Iterable[Any], metadata: Any) -> list[str]:
    """What a file's header says of its device, for ``_device_label``: device process names, ``deviceProperties``.

    Shared by the table reader and the findings' trace adapter, with the categories and
    runtime call names each adds, so both label a trace alike.
    """
    out = [name for pid in device_pids for name in procs[pid]]
    props = metadata.get("deviceProperties") if isinstance(metadata, Mapping) else None
    if isinstance(props, list):
        for prop in props:
            if isinstance(prop, dict):
                out.extend(f"{k}={v}" for k, v in prop.items() if isinstance(v, str))
    return out


def _device_label(evidence: Iterable[str]) -> str:
    text = "\n".join(evidence)
    for pattern, label in _LABELS:
        if pattern.search(text):
            return label
    return "DEVICE"
