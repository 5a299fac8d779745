"""The rules about torch.compile's regions: recompilations and graph breaks."""

from __future__ import annotations

from collections import defaultdict
from typing import Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis.insights._findings import Evidence, Finding
from neuronprof.analysis.insights._intervals import _clip, _union
from neuronprof.analysis.insights._tally import (
    _per_step,
    _share,
)
from neuronprof.analysis.insights._tree import (
    _COMPILE_WORK,
    _REGION,
    _is_region,
    _NameMemo,
    _Profile,
)


def _compiled(p: _Profile) -> list[Finding]:
    """``recompilation`` and ``graph_break``: what ``Torch-Compiled Region: k/n`` says.

    * ``recompilation``: a region ``k/n`` with ``n > 0`` ran: frame ``k`` was compiled
      ``n + 1`` times (guards failed: new shapes, dtypes or Python values). Threshold:
      any. Time at stake: torch.compile's own work (``... (dynamo_timed)`` ranges,
      guard building, compiling) recorded inside the steps, per step, as the *union*
      of those ranges in each step (they nest, and are never added up), so it can
      never exceed the step; no estimate when the recompilation happened before the
      recorded steps (no compile work inside them).
    * ``graph_break``: more than one distinct compiled frame per step (on average):
      the function was split into several graphs with eager Python between them.
      Threshold: more than one frame per step. Time at stake: the host time of the
      ops run between the regions, per step; not estimated when no op runs between them.
    """
    findings = []
    versions: dict[int, set[int]] = defaultdict(set)
    frames_per_step: list[int] = []
    between_ns = 0
    compile_ns = 0
    # Per distinct name: its region's (frame, version), else whether it is compile work.
    read = _NameMemo(_read_name)
    named = p.forest.key_mask(lambda name, _category: read[name][0] is not None or read[name][1])
    for st in p.steps:
        frames: set[int] = set()
        compile_spans: list[tuple[int, int]] = []
        for node in p.find(st, named):
            region, compile_work = read[node.name]
            if region is not None:
                k, n = region
                frames.add(k)
                versions[k].add(n)
            elif compile_work:
                compile_spans.append((node.start_ns, node.end_ns))
        # The union of the compile ranges inside the step: the ranges nest ("compile_attempt_0
        # (dynamo_timed)" inside "compile_attempt_0") and must not be added up.
        compile_ns += sum(e - s for s, e in _clip(_union(compile_spans), st.start, st.end))
        frames_per_step.append(len(frames))
        if len(frames) > 1:
            tops = list(zip(st.top_names(), st.top_column(p.forest.start), st.top_column(p.forest.end)))
            regions = [t for t in tops if _is_region(t[0])]
            if regions:
                lo, hi = regions[0][1], regions[-1][2]
                between_ns += sum(e - s for name, s, e in tops if not _is_region(name) and lo <= s <= hi)
    step_us = p.mean_step_ns / 1000
    recompiled = {k: sorted(v) for k, v in versions.items() if any(n > 0 for n in v)}
    if recompiled:
        names = tuple(f"{vocab.COMPILED_REGION}: {k}/{max(v)}" for k, v in sorted(recompiled.items()))
        stake = _per_step(compile_ns, p.n) if compile_ns else None
        findings.append(
            Finding(
                kind="recompilation",
                title="torch.compile recompiled: "
                + ", ".join(f"frame {k} has {max(v) + 1} versions" for k, v in sorted(recompiled.items())),
                evidence=Evidence(
                    names,
                    None,
                    stake,
                    _share(stake, step_us),
                    "a compiled function's guards failed (new shapes, dtypes or Python values) and it was compiled "
                    "again",
                ),
                estimated_us=stake,
                suggestion=(
                    "keep shapes and dtypes stable (pad to fixed sizes), mark varying sizes dynamic "
                    "(torch._dynamo.mark_dynamic) and see why with TORCH_LOGS=recompiles"
                ),
            )
        )
    if frames_per_step and p.n and sum(frames_per_step) / p.n > 1:
        per = sum(frames_per_step) / p.n
        us = _per_step(between_ns, p.n) if between_ns else None  # nothing between: not estimated
        findings.append(
            Finding(
                kind="graph_break",
                title=f"{per:g} compiled regions per step: graph breaks split the compiled function",
                evidence=Evidence(
                    tuple(sorted({f"{vocab.COMPILED_REGION}: {k}/*" for k in versions})),
                    per,
                    us,
                    _share(us, step_us),
                    "eager Python and ops run between the compiled graphs, and each graph is launched separately",
                ),
                estimated_us=us,
                suggestion=(
                    "find the breaks with TORCH_LOGS=graph_breaks (or torch._dynamo.explain) and remove them; "
                    "fullgraph=True makes any break an error"
                ),
            )
        )
    return findings


def _read_name(name: str) -> tuple[Optional[tuple[int, int]], bool]:
    """A compiled region's ``(frame, version)``, or ``None``; and whether the name is torch.compile's own work."""
    m = _REGION.match(name)
    if m:
        return (int(m.group(1)), int(m.group(2))), False
    # (the cache lookup is the guard check of every call, not compiling)
    return None, bool(_COMPILE_WORK.search(name)) and not name.startswith(vocab.CACHE_LOOKUP)


RULES = (_compiled,)
"""The rules of this module, in the order ``analyze`` applies them."""
