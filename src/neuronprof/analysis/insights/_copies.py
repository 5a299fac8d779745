"""What a copy or conversion looks like in a step's call tree: its direction, dtypes, source and cause.

Read by the host↔device copy, hidden synchronisation and dtype conversion rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from neuronprof.analysis.insights._dtypes import _torch_dtype
from neuronprof.analysis.insights._tree import (
    _DTOD,
    _DTOH,
    _HTOD,
    _MEMCPY,
    _OPTIMIZER,
    CONVERSION_WRAPPERS,
    SYNC_OPS,
    _is_region,
    _Node,
)


def _cause(node: _Node) -> Optional[_Node]:
    """The op a copy or conversion was made for: the nearest ancestor that is not a conversion wrapper."""
    p = node.parent
    while p is not None and p.category != "step":
        if (p.category == "op" or _is_region(p.name)) and p.name not in CONVERSION_WRAPPERS:
            return p
        p = p.parent
    return None


def _in_sync_op(node: _Node) -> bool:
    """Whether the node or one above it is a synchronising op (``SYNC_OPS``)."""
    p: Optional[_Node] = node
    while p is not None:
        if p.name in SYNC_OPS:
            return True
        p = p.parent
    return False


HOST_TO_DEVICE = "host→device"
DEVICE_TO_HOST = "device→host"
DEVICE_TO_DEVICE = "device→device"


def _direction(names: Iterable[str]) -> Optional[str]:
    """A copy's direction in the trace's own words (``Memcpy HtoD``, ``cuMemcpyDtoHAsync``...); ``None``: unknown.

    A device-to-device word (``DtoD``, ``PtoP``) wins over the others: one such copy
    makes the whole copy device-side. ``cudaMemcpyAsync`` names no direction.
    """
    found = None
    for name in names:
        if _DTOD.search(name):
            return DEVICE_TO_DEVICE
        if found is None and _HTOD.search(name):
            found = HOST_TO_DEVICE
        elif found is None and _DTOH.search(name):
            found = DEVICE_TO_HOST
    return found


def _copy_evidence(node: _Node) -> tuple[bool, bool, Optional[str]]:
    """Return (a host↔device copy named by the trace, launched device work, direction) for a copy op's subtree.

    The direction comes from the names of the device memcpys and runtime copy calls
    under the op; a copy is host↔device only when one of them says so. A copy whose
    words name no direction (a bare ``cudaMemcpyAsync`` with no device event) or a
    device-to-device one is no host↔device evidence.
    """
    memcpy_names: list[str] = []
    device_work = False
    for n in node.walk():
        for d in n.device:
            device_work = True
            if d.category == "memcpy" or _MEMCPY.search(d.name):
                memcpy_names.append(d.name)
        if n.category == "runtime" and _MEMCPY.search(n.name):
            memcpy_names.append(n.name)
    direction = _direction(memcpy_names)
    return direction in (HOST_TO_DEVICE, DEVICE_TO_HOST), device_work, direction


def _dtype_pair(copy: _Node) -> Optional[tuple[str, str]]:
    """(from, to) dtypes of a copy, read from ``aten::copy_(dst, src)`` input types."""
    for n in copy.walk():
        if n.name == "aten::copy_" and n.input_dtypes and len(n.input_dtypes) >= 2:
            dst, src = n.input_dtypes[0], n.input_dtypes[1]
            if dst and src:
                return _torch_dtype(src), _torch_dtype(dst)
    return None


def _in_optimizer(node: _Node) -> bool:
    """Whether the op runs inside ``Optimizer.step``/``zero_grad`` (torch.optim's own internals)."""
    p: Optional[_Node] = node.parent
    while p is not None and p.category != "step":
        if _OPTIMIZER.match(p.name):
            return True
        p = p.parent
    return False


def _is_scalar_source(copy: _Node) -> Optional[bool]:
    for n in copy.walk():
        if n.name == "aten::copy_" and n.input_shapes and len(n.input_shapes) >= 2:
            return n.input_shapes[1] == ()
    return None


def _claimed_ancestor(node: _Node, claimed: set[int]) -> bool:
    """Whether the node or one above it is among the ``claimed`` rows."""
    p: Optional[_Node] = node
    while p is not None:
        if p._i in claimed:
            return True
        p = p.parent
    return False


def _outer_wrapper(node: _Node) -> _Node:
    out = node
    p = node.parent
    while p is not None and p.name in CONVERSION_WRAPPERS:
        out = p
        p = p.parent
    return out
