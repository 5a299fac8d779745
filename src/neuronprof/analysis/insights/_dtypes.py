"""The profiler's C++ type names ("Input type") as torch dtypes, and their families, for the rules' words."""

from __future__ import annotations

import re
from typing import Optional

# The C++ type names the profiler records ("Input type"), as torch dtypes.
_TORCH_DTYPES = {
    "float": "torch.float32",
    "double": "torch.float64",
    "c10::Half": "torch.float16",
    "c10::BFloat16": "torch.bfloat16",
    "c10::Float8_e4m3fn": "torch.float8_e4m3fn",
    "c10::Float8_e5m2": "torch.float8_e5m2",
    "c10::complex<float>": "torch.complex64",
    "c10::complex<double>": "torch.complex128",
    "long int": "torch.int64",
    "int64_t": "torch.int64",
    "int": "torch.int32",
    "short int": "torch.int16",
    "signed char": "torch.int8",
    "unsigned char": "torch.uint8",
    "bool": "torch.bool",
}
_FAMILY = {"bool": 0, "int": 1, "uint": 1, "float": 2, "bfloat": 2, "complex": 3}


def _torch_dtype(name: str) -> str:
    """``c10::Half`` → ``torch.float16``; names already torch's, or unknown, unchanged."""
    return _TORCH_DTYPES.get(name.strip(), name)


def _family(dtype: str) -> Optional[int]:
    m = re.match(r"torch\.([a-z]+)", _torch_dtype(dtype))
    return _FAMILY.get(m.group(1)) if m else None
