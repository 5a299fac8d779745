"""What to fix first: findings read from a profile's timeline, with their evidence.

A table sorted by device time says where the time went; this module says what to
do about it. It looks for the patterns experienced engineers look for in every
trace (host↔device copies, hidden synchronisations, an idle device, a CPU-bound
loop, unfused elementwise chains, dtype conversions, recompilations and graph
breaks, a slow input pipeline, host time between ops, waiting in collectives, low
precision without hardware support, CPU fallbacks, one dominant op) and returns them as
[`Finding`][neuronprof.analysis.insights.Finding]s, most costly first.

The engine, [`analyze`][neuronprof.analysis.insights.analyze], is torch-free and
works on a small [`Timeline`][neuronprof.analysis.insights.Timeline]: the host
events, device events and ``ProfilerStep`` spans of the recorded steps. One feeder
builds it, [`Trace.timeline`][neuronprof.analysis.Trace.timeline], from the event
tables a trace file's reader and a live session (``s.recording``) both write, so a
live session and its exported trace give the same findings.

Every rule and threshold is written in the docstring of the function that applies
it and on the guide page "Reading the findings" (``docs/insights.md``). Device
findings need device time: on a profile without it they are skipped with a note,
never guessed.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional, Union

from neuronprof.analysis._gc import collector_paused
from neuronprof.analysis.insights import _compile_rules, _device_rules, _dominant_rules, _op_rules, _step_rules
from neuronprof.analysis.insights._findings import (
    DEVICE_KINDS,
    DOCS_URL_ENV,
    FINDING_KINDS,
    INSIGHTS_SCHEMA,
    Evidence,
    Finding,
    FindingKind,
    Insights,
    docs_base_url,
    guide_url,
)
from neuronprof.analysis.insights._ranks import RANK_INSIGHTS_SCHEMA, RankInsights, analyze_ranks
from neuronprof.analysis.insights._timeline import DeviceCategory, DeviceEvent, HostCategory, HostEvent, Timeline
from neuronprof.analysis.insights._trace import timeline_from_trace
from neuronprof.analysis.insights._tree import _Profile

if TYPE_CHECKING:
    from neuronprof.analysis.insights._forest import _Forest
    from neuronprof.analysis.trace import Trace

__all__ = [
    "DEVICE_KINDS",
    "DOCS_URL_ENV",
    "FINDING_KINDS",
    "INSIGHTS_SCHEMA",
    "RANK_INSIGHTS_SCHEMA",
    "DeviceCategory",
    "DeviceEvent",
    "Evidence",
    "Finding",
    "FindingKind",
    "HostCategory",
    "HostEvent",
    "Insights",
    "RankInsights",
    "Timeline",
    "advise",
    "analyze",
    "analyze_ranks",
    "docs_base_url",
    "guide_url",
    "analyze_timeline",
    "timeline_from_trace",
]

RULE_MODULES = (_device_rules, _op_rules, _compile_rules, _step_rules, _dominant_rules)
"""The modules holding the rules; ``analyze`` applies each one's ``RULES`` in this order.

A new finding's rule is a function ``rule(p) -> list[Finding]`` added to the ``RULES`` of
the module it belongs to (a new module goes in this list). Rules run in order on one
``_Profile``: a rule may read what an earlier one left on it (``p.claimed``: the copies
a ``host_device_copy`` finding explains, which ``dtype_conversion`` leaves out).
"""


def analyze(timeline: Timeline) -> Insights:
    """Return the findings of a profile's timeline, most costly first.

    Every rule is applied to the recorded steps (``ProfilerStep#N``; a profile
    without them is read as one step) and its figures are averaged over them.

    Args:
        timeline: The events, from ``Session.insights()``'s feeder or
            [`timeline_from_trace`][neuronprof.analysis.insights.timeline_from_trace].

    Returns:
        [`Insights`][neuronprof.analysis.insights.Insights]; device findings are
        skipped with a note when the profile has no device time.

    Raises:
        TypeError: ``timeline`` is not a [`Timeline`][neuronprof.analysis.insights.Timeline].
        ValueError: The timeline holds several ranks (``timeline.ranks``): their steps
            ran side by side, so read each rank on its own with
            [`analyze_ranks`][neuronprof.analysis.insights.analyze_ranks]; or an event's
            time or id does not fit in int64.
    """
    if not isinstance(timeline, Timeline):
        raise TypeError(f"analyze() takes a Timeline, got {type(timeline).__name__}")
    if timeline.ranks:
        raise ValueError(
            f"this timeline holds {len(timeline.ranks)} ranks, whose steps ran side by side: read each rank on its "
            "own with analyze_ranks(timeline)"
        )
    return _analyze(timeline)


def _analyze(timeline: Timeline, forest: Optional[_Forest] = None) -> Insights:
    """``analyze`` of one rank's timeline.

    ``forest``, when given: the timeline's events read into their call trees already (a trace's,
    read straight from its tables by ``insights_of``); else ``timeline``'s events are read here.
    """
    with collector_paused():
        p = _Profile(timeline, forest)
        try:
            notes = p.notes
            if not p.steps:
                notes.append("the profile holds no events to analyse")
                return Insights(
                    (), timeline.backend, timeline.device_label, 0, notes=tuple(notes), source=timeline.source
                )
            findings = [f for module in RULE_MODULES for rule in module.RULES for f in rule(p)]
        finally:
            p.release()
    if timeline.device_label is None and not p.has_device_time:
        notes.append(
            "CPU-only profile: there is no device, so the device findings (host↔device copies, hidden "
            "synchronisations, idle device, CPU-bound loop) do not apply"
        )
    elif not p.has_device_time:
        why = (
            "run `neuronprof doctor` to see what this build can record"
            if timeline.source == "session"
            else "the trace holds no device events"
        )
        notes.append(
            f"no {timeline.device_label or 'device'} time in this profile: the idle-device and CPU-bound findings "
            f"were skipped, not guessed ({why})"
        )
    if p.unlinked and p.has_device_time:
        notes.append(f"{p.unlinked} device event(s) carry no link to a host op; they count as device time only")
    return Insights(
        findings=tuple(findings),
        backend=timeline.backend,
        device_label=timeline.device_label,
        steps=p.n,
        step_us=p.mean_step_ns / 1000,
        host_op_us=p.host_op_us,
        device_busy_us=p.device_busy_us,
        bound=p.bound,  # type: ignore[arg-type]
        notes=tuple(notes),
        source=timeline.source,
    )


def analyze_timeline(timeline: Timeline) -> Union[Insights, RankInsights]:
    """[`analyze`][neuronprof.analysis.insights.analyze] a timeline, or each of its ranks when it holds several.

    Args:
        timeline: The events, e.g. from [`Trace.timeline`][neuronprof.analysis.Trace.timeline].

    Raises:
        TypeError: ``timeline`` is not a [`Timeline`][neuronprof.analysis.insights.Timeline].
        ValueError: An event's time or id does not fit in int64 (a trace's always do).
    """
    return analyze_ranks(timeline) if timeline.ranks else analyze(timeline)


def advise(source: Union[str, os.PathLike[str], Trace]) -> Union[Insights, RankInsights]:
    """Return the findings of a trace file or folder (what ``neuronprof advise`` prints).

    Args:
        source: A Chrome/Perfetto trace (``.json``, ``.json.gz``), a folder of them, or a
            [`Trace`][neuronprof.analysis.Trace] already loaded (its events are read, not the file).

    Returns:
        [`Insights`][neuronprof.analysis.insights.Insights] for one profile (a file, or
        a folder of one rank's traces); for a folder of several ranks' traces, a
        [`RankInsights`][neuronprof.analysis.insights.RankInsights] with each rank's
        findings over its own steps and the straggler named. Both print, and render
        with ``to_markdown()`` and ``to_json()``.

    Raises:
        TraceError: The trace cannot be read.
    """
    from neuronprof.analysis.trace import load_trace

    return load_trace(source).insights()
