"""Per-NEFF device time joined to the framework ops that launched it, through ``flow_id``: the model and the join.

AWS documents the link between an execution and its framework op only in the Parquet
output: ``SystemProfileEvents.flow_id``. Framework events carry ``nrt_sequence_id``.
The join below takes an execution to belong to the framework event whose
``args.nrt_sequence_id`` is one of the execution's flow ids, and the op to be that
event when it is an operator (``cat`` ``cpu_op``), else the innermost operator around
it on the same thread. How the two ids match is NOT CONFIRMED BY AWS DOCUMENTATION
(``_names`` is the one place that says it); the join reports its match rate
and keeps unmatched executions on their NEFF rows. Not verified on hardware.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neuronprof.analysis.neuron._names import FRAMEWORK_LINK

__all__ = ["FlowJoin", "JoinedOp", "join_flows", "link_key", "sum_ops"]


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

        Args:
            data: The dictionary ``to_dict`` wrote (or its JSON, decoded).

        Raises:
            ValueError: A field is missing or unknown.
        """
        try:
            ops = tuple(JoinedOp(**o) for o in data.get("ops", ()))
            return cls(**{**data, "ops": ops})
        except TypeError as exc:
            raise ValueError(f"invalid FlowJoin: {exc}") from None


def link_key(value: Any) -> Any:
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
    joined = []
    for ex in executions:
        op = next((links[k] for k in map(link_key, ex.flow_ids) if k in links), None)
        if op is not None:
            joined.append((op, ex.neff, 1, ex.duration_us))
    return FlowJoin(sum_ops(joined), len(executions), len(joined), len(links), source)


def sum_ops(ops: Iterable[tuple[str, str, int, float]]) -> tuple[JoinedOp, ...]:
    """``(op, NEFF, executions, device µs)`` summed into one row per (op, NEFF), most device time first."""
    totals: dict[tuple[str, str], list[float]] = {}
    for op, neff, n, us in ops:
        t = totals.setdefault((op, neff), [0, 0.0])
        t[0] += n
        t[1] += us
    rows = (JoinedOp(op, neff, int(n), us) for (op, neff), (n, us) in totals.items())
    return tuple(sorted(rows, key=lambda j: j.device_us, reverse=True))
