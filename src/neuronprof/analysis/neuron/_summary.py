"""Read ``neuron-explorer view --output-format summary-json`` into device summaries.

The format, as AWS documents it (the legacy ``neuron-profile view`` takes the same
inputs): ``{"n_<40 hex>": {metrics}, "s_<hex>": {metrics}}``, one flat object per
device profile (``n_``) or system profile (``s_``). Times are in seconds
(``total_time``, ``<engine>_engine_active_time`` for the tensor, vector, scalar,
gpsimd and sync engines, ``dma_active_time``); every ``*_percent`` field is a
fraction from 0 to 1; sizes in bytes (``hbm_read_bytes``, ``hbm_write_bytes``);
FLOP counts (``hardware_flops``, ``model_flops``); ``mfu_estimated_percent`` and
``mbu_estimated_percent``. A negative value means "not available". New keys appear
between versions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from neuronprof.analysis.errors import TraceError
from neuronprof.analysis.neuron._model import ENGINES, DeviceSummary, EngineTime
from neuronprof.analysis.neuron._tool import extract_json
from neuronprof.typing import ProfileKind

__all__ = ["SUMMARY_GLOB", "looks_like_summary", "parse_summary", "read_summary_file"]

SUMMARY_GLOB = "*summary*.json"
"""File names read as ``summary-json`` output."""
_NAME_FIELDS = ("model_name", "neff_name")


# Figures larger than these are not believable for one profile (a decoding error, or a sentinel such as
# 1e308): they are "not available", with a note. Seconds: 11 days; fractions: 10 000 %; bytes: 1 EB;
# FLOPs: 1e21 (a 1 PFLOP/s core busy for 11 days).
_LIMITS = {"s": 1e6, "fraction": 100.0, "bytes": 1e18, "flops": 1e21}


def _metric(
    metrics: Mapping[str, Any], key: str, kind: str = "flops", bad: Optional[list[str]] = None
) -> Optional[float]:
    """A metric as a float: ``None`` when absent, not a number, not finite, negative or absurd (not available).

    ``bad`` gets the key of each non-finite or absurd value (above ``_LIMITS[kind]``).
    """
    value = metrics.get(key)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if not isinstance(value, (int, float)) or value < 0:
        return None
    if not math.isfinite(value) or value > _LIMITS[kind]:
        if bad is not None:
            bad.append(key)
        return None
    return float(value)


def _scaled(
    metrics: Mapping[str, Any], key: str, scale: float, kind: str, bad: Optional[list[str]] = None
) -> Optional[float]:
    value = _metric(metrics, key, kind, bad)
    return None if value is None else value * scale


def _as_int(value: Optional[float]) -> Optional[int]:
    return None if value is None else int(round(value))


def parse_summary(
    data: Any, *, source: str = "", label: Optional[str] = None, notes: Optional[list[str]] = None
) -> list[DeviceSummary]:
    """Turn ``summary-json`` output into [`DeviceSummary`][neuronprof.analysis.neuron.DeviceSummary] objects.

    Seconds become microseconds, 0-1 fractions become percentages, negative
    values ``None``; unknown keys are ignored. Non-finite or absurd values
    (such as ``1e308``) are ``None`` too, and ``notes`` (when given) says which.

    Args:
        data: The parsed JSON: ``{"n_<hex>": {...}, "s_<hex>": {...}}``.
        source: Where it came from, kept on each summary.
        label: Name for a lone device profile (the NEFF's file name for a
            ``.neff``/``.ntff`` pair).
        notes: Gets one line per profile with values left out as not believable.

    Raises:
        ValueError: ``data`` is not an object of metric objects.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"summary-json must be a JSON object of profiles, got {type(data).__name__}")
    profiles = {k: v for k, v in data.items() if isinstance(v, Mapping)}
    if not profiles and any(k in data for k in ("total_time", "tensor_engine_active_time")):
        profiles = {"n_profile": data}  # a lone metrics object, without the key around it
    if not profiles:
        raise ValueError('summary-json holds no profile (expected {"n_<hex>": {...}})')
    devices = [k for k in profiles if k.startswith("n_")]
    out = []
    for key, m in profiles.items():
        kind: ProfileKind = "device" if key.startswith("n_") else "system"
        bad: list[str] = []
        engines = []
        for engine in ENGINES:
            base = "dma_active_time" if engine == "dma" else f"{engine}_engine_active_time"
            engines.append(
                EngineTime(
                    engine, _scaled(m, base, 1e6, "s", bad), _scaled(m, f"{base}_percent", 100.0, "fraction", bad)
                )
            )
        name = next((str(m[f]) for f in _NAME_FIELDS if isinstance(m.get(f), str) and m[f]), None)
        if name is None and label is not None and kind == "device" and len(devices) == 1:
            name = label
        out.append(
            DeviceSummary(
                key=str(key),
                kind=kind,
                label=name or str(key),
                total_us=_scaled(m, "total_time", 1e6, "s", bad),
                engines=tuple(engines),
                hbm_read_bytes=_as_int(_metric(m, "hbm_read_bytes", "bytes", bad)),
                hbm_write_bytes=_as_int(_metric(m, "hbm_write_bytes", "bytes", bad)),
                hardware_flops=_metric(m, "hardware_flops", "flops", bad),
                model_flops=_metric(m, "model_flops", "flops", bad),
                mfu_pct=_scaled(m, "mfu_estimated_percent", 100.0, "fraction", bad),
                mbu_pct=_scaled(m, "mbu_estimated_percent", 100.0, "fraction", bad),
                source=source,
            )
        )
        if bad and notes is not None:
            notes.append(f"{name or key}: {', '.join(bad)} not finite or too large to be real; shown as not available")
    return out


def read_summary_file(path: str, label: Optional[str] = None, notes: Optional[list[str]] = None) -> list[DeviceSummary]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not UTF-8 text; is this a summary-json file?") from None
    try:
        return parse_summary(extract_json(text, what=path), source=path, label=label, notes=notes)
    except ValueError as exc:
        raise TraceError(f"{path}: {exc}") from None


_SUMMARY_KEY = re.compile(rb'"[ns]_[0-9a-fA-F]+"\s*:\s*\{|"(total_time|tensor_engine_active_time)"\s*:')


def looks_like_summary(path: Path) -> bool:
    """True when a file's start reads like ``summary-json`` rather than a system profile (whatever its name)."""
    if path.suffix == ".gz":
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return False
    return b'"trace_event"' not in head and _SUMMARY_KEY.search(head) is not None
