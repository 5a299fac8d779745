"""Kineto events of torch older than 2.12 (no ``activity_type()``) are still read by kind.

``scripts/gpu_check.py`` runs on a GPU image whose torch predates that method.
"""

from __future__ import annotations

from typing import Any

import torch

from neuronprof._kineto import activity_of


class _Older:
    """A kineto event as torch < 2.12 binds it: the same methods, without activity_type()."""

    def __init__(self, evt: Any) -> None:
        self._evt = evt

    def __getattr__(self, name: str) -> Any:
        if name in ("activity_type", "is_python_function"):
            raise AttributeError(name)
        return getattr(self._evt, name)


def test_the_activity_of_an_event_without_activity_type_is_told_from_what_it_has():
    with torch.profiler.profile() as prof:
        with torch.profiler.record_function("my_block"):
            torch.relu(torch.randn(8, 8) @ torch.randn(8, 8))
    events = list(prof.profiler.kineto_results.events())
    assert events
    seen = set()
    for evt in events:
        real = str(evt.activity_type())
        if real in ("cpu_op", "user_annotation"):
            assert activity_of(_Older(evt)) == real, evt.name()
            seen.add(real)
        assert activity_of(evt) == real
    assert seen == {"cpu_op", "user_annotation"}
