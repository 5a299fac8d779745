"""A runtime call is put on its op's thread whatever the order of kineto's event list."""

from __future__ import annotations

from typing import Any

from neuronprof import _kineto
from neuronprof.analysis.trace import EventAggregator


class _Event:
    """The methods of torch's ``_KinetoEvent`` that the live reader calls, with fixed answers."""

    def __init__(self, name: str, activity: str, corr: int, linked: int, tid: int, start: int, stream: int = 0) -> None:
        self._a = (name, activity, corr, linked, tid, start, stream)

    def name(self) -> str:
        return self._a[0]

    def activity_type(self) -> str:
        return self._a[1]

    def correlation_id(self) -> int:
        return self._a[2]

    def linked_correlation_id(self) -> int:
        return self._a[3]

    def start_thread_id(self) -> int:
        return self._a[4]

    def start_ns(self) -> int:
        return self._a[5]

    def duration_ns(self) -> int:
        return 10

    def device_index(self) -> int:
        return 0

    def device_resource_id(self) -> int:
        return self._a[6]

    def is_hidden_event(self) -> bool:
        return False

    def shapes(self) -> list[Any]:
        return [[2, 2]]

    def dtypes(self) -> list[str]:
        return ["float"]

    def concrete_inputs(self) -> list[Any]:
        return [None]

    def flops(self) -> int:
        return 0


class _Profile:
    def __init__(self, events: list[_Event]) -> None:
        self.kineto_results = self
        self._events = events

    def events(self) -> list[_Event]:
        return self._events


def _threads(events: list[_Event]) -> dict[Any, list[int]]:
    agg = EventAggregator("<session>")
    _kineto._feed(agg, _Profile(events))
    table = agg.events_table()
    return {where: list(th.ts) for where, th in table.threads.items()}


def test_a_runtime_call_listed_before_its_op_is_still_put_on_the_op_s_thread():
    op = _Event("aten::mm", "cpu_op", 5, 0, tid=1, start=100)
    call = _Event("cudaLaunchKernel", "cuda_runtime", 900, 5, tid=2, start=105)
    kernel = _Event("gemm", "kernel", 900, 5, tid=0, start=110, stream=7)
    lone = _Event("cudaDeviceSynchronize", "cuda_runtime", 901, 0, tid=2, start=200)
    in_order = _threads([op, call, kernel, lone])
    # The op's thread holds the op and its call; a call that names no op stays on its own thread.
    assert in_order == {("host", 1): [100, 105], ("device 0", 7): [110], ("host", 2): [200]}
    # Listed the other way round (the call first), the cycle is read again with the op's thread known.
    assert _threads([call, op, kernel, lone]) == {("host", 1): [105, 100], ("device 0", 7): [110], ("host", 2): [200]}
