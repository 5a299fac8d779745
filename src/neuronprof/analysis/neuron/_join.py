"""Per-NEFF device time joined to the framework ops that launched it, through ``flow_id``.

AWS documents the link between an execution and its framework op only in the Parquet
output: ``SystemProfileEvents.flow_id``. Framework events carry ``nrt_sequence_id``.
The join below takes an execution to belong to the framework event whose
``args.nrt_sequence_id`` is one of the execution's flow ids, and the op to be that
event when it is an operator (``cat`` ``cpu_op``), else the innermost operator around
it on the same thread. How the two ids match is NOT CONFIRMED BY AWS DOCUMENTATION
(``FRAMEWORK_LINK`` is the one place that says it); the join reports its match rate
and keeps unmatched executions on their NEFF rows. Not verified on hardware.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from neuronprof.analysis._eventstream import EventBatches

__all__ = ["FRAMEWORK_LINK", "FlowJoin", "JoinedOp", "join_flows", "read_framework_links"]

FRAMEWORK_LINK = "nrt_sequence_id"
"""The framework event's ``args`` key matched against an element of an execution's ``flow_id`` (unconfirmed)."""


@dataclass(frozen=True)
class JoinedOp:
    """Device time of one NEFF's executions that the join put on one framework op.

    Attributes:
        op: The framework op (``aten::mm``...) that launched the executions.
        neff: The NEFF that ran.
        executions: Executions joined to the op.
        device_us: Their NeuronCore time, in microseconds.
    """

    op: str
    neff: str
    executions: int
    device_us: float


@dataclass(frozen=True)
class FlowJoin:
    """The executions of Neuron's Parquet output joined to framework ops through ``flow_id``.

    Attributes:
        ops: One row per (op, NEFF) pair, most device time first.
        executions: Executions in the Parquet output.
        matched: Executions whose flow id matched a framework event's ``nrt_sequence_id``.
        links: Framework events carrying an ``nrt_sequence_id``.
        source: The ``SystemProfileEvents.parquet`` and framework trace joined.
    """

    ops: tuple[JoinedOp, ...] = ()
    executions: int = 0
    matched: int = 0
    links: int = 0
    source: str = ""

    @property
    def match_rate(self) -> float:
        """Matched executions as a fraction (0-1) of all executions; 0 without executions."""
        return self.matched / self.executions if self.executions else 0.0

    def by_op(self) -> dict[str, float]:
        """NeuronCore µs per framework op, summed over NEFFs."""
        out: dict[str, float] = {}
        for j in self.ops:
            out[j.op] = out.get(j.op, 0.0) + j.device_us
        return out

    def describe(self) -> str:
        """One sentence: what was joined, the match rate, and that the join is unverified."""
        return (
            f"flow_id join: {self.matched} of {self.executions} execution(s) of Neuron's Parquet output matched a "
            f"framework event's {FRAMEWORK_LINK} ({100 * self.match_rate:.1f}%; {self.links} framework event(s) "
            "carry one); a join by id as Neuron's Parquet output is read here, not verified on hardware"
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the join as a JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FlowJoin:
        """Build a join from [`to_dict`][neuronprof.analysis.neuron.FlowJoin.to_dict] output.

        Raises:
            ValueError: A field is missing or unknown.
        """
        try:
            ops = tuple(JoinedOp(**o) for o in data.get("ops", ()))
            return cls(**{**data, "ops": ops})
        except TypeError as exc:
            raise ValueError(f"invalid FlowJoin: {exc}") from None


def read_framework_links(path: Union[str, os.PathLike[str]]) -> dict[Any, str]:
    """Return ``nrt_sequence_id`` -> op name for the events of a framework (torch.profiler) trace.

    Raises:
        TraceError: The trace cannot be read.
    """
    carriers: list[tuple[Any, tuple[Any, Any], float, float, str, Optional[str]]] = []
    ops: dict[tuple[Any, Any], list[tuple[float, float, str]]] = {}
    for batch in EventBatches(os.fspath(path)):
        for ev in batch:
            ts, dur = ev.get("ts"), ev.get("dur")
            if ev.get("ph") != "X" or not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
                continue
            name = ev.get("name")
            thread = (ev.get("pid"), ev.get("tid"))
            op = name if ev.get("cat") == "cpu_op" and isinstance(name, str) else None
            if op is not None:
                ops.setdefault(thread, []).append((float(ts), float(ts + dur), op))
            args = ev.get("args")
            if isinstance(args, dict) and args.get(FRAMEWORK_LINK) is not None:
                own = op
                carriers.append((args[FRAMEWORK_LINK], thread, float(ts), float(ts + dur), str(name), own))
    links: dict[Any, str] = {}
    by_thread: dict[tuple[Any, Any], list[tuple[float, float, Any, str]]] = {}
    for seq, thread, start, end, name, own in carriers:
        if own is not None:
            links[_key(seq)] = own
        else:
            by_thread.setdefault(thread, []).append((start, end, seq, name))
    for thread, found in by_thread.items():
        for (_, _, seq, name), op in zip(found, _innermost(ops.get(thread, []), found)):
            links[_key(seq)] = op or name
    return links


def _innermost(
    spans: list[tuple[float, float, str]], carriers: list[tuple[float, float, Any, str]]
) -> list[Optional[str]]:
    """For each carrier ``(start, end, ...)``, the innermost op span of its thread around it (None: none).

    One sweep in start order with a stack of the op spans still open (ops on one thread nest),
    so a trace with many executions costs a sort, not a scan per execution.
    """
    spans = sorted(spans, key=lambda s: (s[0], -s[1]))
    order = sorted(range(len(carriers)), key=lambda k: carriers[k][0])
    out: list[Optional[str]] = [None] * len(carriers)
    stack: list[tuple[float, float, str]] = []
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


def _key(value: Any) -> Any:
    """Ids compare as integers when they are integers written as text (``"17"`` is ``17``)."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


def join_flows(executions: Sequence[Any], links: Mapping[Any, str], *, source: str = "") -> FlowJoin:
    """Join executions (``FlowExecution``) to ops: the first of an execution's flow ids that names an op wins.

    Args:
        executions: The executions of ``SystemProfileEvents``, merged per ``flow_id``.
        links: ``nrt_sequence_id`` -> op, as ``read_framework_links`` returns it.
        source: What was joined, for the result.
    """
    totals: dict[tuple[str, str], list[float]] = {}
    matched = 0
    for ex in executions:
        op = next((links[k] for k in map(_key, ex.flow_ids) if k in links), None)
        if op is None:
            continue
        matched += 1
        t = totals.setdefault((op, ex.neff), [0, 0.0])
        t[0] += 1
        t[1] += ex.duration_us
    ops = sorted(
        (JoinedOp(op, neff, int(n), us) for (op, neff), (n, us) in totals.items()),
        key=lambda j: j.device_us,
        reverse=True,
    )
    return FlowJoin(tuple(ops), len(executions), matched, len(links), source)
