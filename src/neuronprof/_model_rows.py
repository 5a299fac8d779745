"""The model's shared pieces: the schema tags, ``Shape``, and the JSON helpers every row type uses.

Part of [`neuronprof.model`][neuronprof.model], which re-exports every public name;
import from there.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any, Optional, TypeVar, Union

from neuronprof import _vocabulary
from neuronprof.typing import SORT_KEYS

Shape = tuple[int, ...]
"""The shape of one input tensor, e.g. ``(4096, 4096)``; ``()`` for a scalar or non-tensor."""


TABLE_SCHEMA = "neuronprof.table/1"
RANK_TABLE_SCHEMA = "neuronprof.rank_table/1"

# Which OpRow field each sort key orders by: one map, in the vocabulary.
_SORT_FIELD = _vocabulary.SORT_FIELD
_DEVICE_FIELDS = _vocabulary.DEVICE_FIELDS
_MEMORY_FIELDS = frozenset({"self_cpu_memory_bytes", "self_device_memory_bytes"})


RowT = TypeVar("RowT")


def row_to_dict(row: Any) -> dict[str, Any]:
    """Return a frozen row dataclass as a JSON-ready dict (shape and dtype tuples as lists).

    Shared by every row type with ``input_shapes``/``input_dtypes``
    ([`OpRow`][neuronprof.OpRow] and the analysis rows).
    """
    data = dataclasses.asdict(row)
    if data.get("input_shapes") is not None:
        data["input_shapes"] = [list(s) for s in data["input_shapes"]]
    if data.get("input_dtypes") is not None:
        data["input_dtypes"] = list(data["input_dtypes"])
    return data


def row_from_dict(cls: Callable[..., RowT], data: Mapping[str, Any], what: str) -> RowT:
    """Build a row of type ``cls`` from [`row_to_dict`][neuronprof.model.row_to_dict] output.

    Raises:
        ValueError: A required field is missing, or one is unknown (``what`` names the row type).
    """
    if dataclasses.is_dataclass(cls):
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown {what} field(s): {', '.join(sorted(unknown))}")
    kwargs = dict(data)
    if kwargs.get("input_shapes") is not None:
        kwargs["input_shapes"] = tuple(tuple(int(d) for d in s) for s in kwargs["input_shapes"])
    if kwargs.get("input_dtypes") is not None:
        kwargs["input_dtypes"] = tuple(str(d) for d in kwargs["input_dtypes"])
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a missing or unknown field
        raise ValueError(f"invalid {what}: {exc}") from None


def loads(text: Union[str, bytes]) -> Any:
    """Parse JSON for a model's ``from_json``, reporting bad text as ``ValueError``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None


def _sort_field(by: str) -> str:
    if not isinstance(by, str) or by not in _SORT_FIELD:
        raise ValueError(f"unknown sort_by {by!r}; use one of: {', '.join(SORT_KEYS)}")
    return _SORT_FIELD[by]


COMPARISON_SCHEMA = "neuronprof.comparison/1"


def _opt_float(value: Any) -> Optional[float]:
    return None if value is None else float(value)


def _opt_int(value: Any) -> Optional[int]:
    return None if value is None else int(value)
