"""How the host events of one timeline nest, and what each one's self time is: torch's rule, once.

Used by ``_aggregate._Aggregator`` for trace files and the live session's events alike.
The rules (``neuronprof._vocabulary``): host spans nest per timeline as torch nests
them (by start, longest first); self time is the duration less the union of the
children; an only child of the same name is folded into its parent, as
``key_averages()`` does; async collective spans take no part; a span that crosses a
step's edge, or the end of the span it started in, is cut there.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis.trace import _nesting_columns
from neuronprof.analysis.trace._rules import _K_OTHER, _K_PY, _K_RUNTIME, _K_STEP, _is_sorted
from neuronprof.analysis.trace._sums import EventColumns, EventKeys, _Sums

_END = 1 << 62  # later than any event (times are signed 64-bit ns)


class _Nesting:
    """The walk over one timeline's host events; state of the aggregation it adds up into."""

    keys: EventKeys
    sums: _Sums
    stopped_in_last_step: bool
    # The program's spans that ran in two steps or more, per key: (count, ns left out between steps).
    crossed: dict[int, tuple[int, int]]
    # Self time on timelines without steps: (ns, the key with the most of it), per timeline.
    off_steps: list[tuple[int, int]]

    def _walk(
        self, th: EventColumns, rows: Optional[list[int]], dev_by_corr: dict[int, int], dev_by_ext: dict[int, int]
    ) -> None:
        """Nest the host events of one timeline (torch's rule) and add up self/total and device times."""
        if _nesting_columns.worth_it(len(th.kid if rows is None else rows)):
            kc = getattr(self, "_key_columns", None)
            if kc is None or kc.size != len(self.keys.kind):
                kc = self._key_columns = _nesting_columns.KeyColumns(self.keys)
            if _nesting_columns.walk_columns(self, th, rows, dev_by_corr, dev_by_ext, kc):
                return
        if rows is not None and not isinstance(rows, list):
            rows = rows.tolist()  # the column reader's rows, a numpy array
        ts, dur, kids, corrs, exts = th.ts, th.dur, th.kid, th.corr, th.ext
        kind, names = self.keys.kind, self.keys.names
        raw_names = self.keys.raw_names
        idx: list[int] = list(range(len(ts))) if rows is None else rows
        if not idx:
            return
        # Spans that cross a step's edge are cut at it (the vocabulary's rule); a part
        # is (start, end, index of the event, whether it counts the call).
        parts = self._cut_at_steps(ts, dur, kids, idx)
        sums = self.sums
        calls, cpu_self, cpu_total = sums.calls, sums.cpu_self, sums.cpu_total
        dev_self, dev_total = sums.dev_self, sums.dev_total
        # A frame: [0 end, 1 key, 2 duration, 3 children's covered time (their union),
        #           4 own device time, 5 device time incl. children, 6 directly under a step
        #           (through Python frames), 7 index of the step span in ``step_work`` (-1 when
        #           not a step), 8 inside the profiler's or neuronprof's own frames, 9 left out
        #           as such, 10 end of the children's covered time, 11 children,
        #           12 the only child's sums when it has the frame's name (for the fold),
        #           13 counts a call (the first part of a cut span), 14 not a row (its self
        #           time is its parent's), 15 index of its step's sample (-1 outside steps)]
        stack: list[list[Any]] = []
        frame_flags: dict[int, tuple[bool, bool]] = {}  # per key: (own frame, support frame)
        asynchronous, not_rows = self.keys.asynchronous, self.keys.not_row
        top_level = 0
        step_work: list[bool] = []  # per step span, in start order: whether any event is nested in it
        linked = False
        pop = stack.pop

        # Self time of the rows per key, on a timeline without steps (for the note on them).
        row_self: dict[int, int] = {}
        track_off_steps = not any(kind[kids[x]] == _K_STEP for x in idx)
        # Per step of this timeline, its figures for a verdict (see ``_Sums.samples``).
        samples = sums.samples
        first_sample = len(samples)
        # The rest of a span cut at the end of the span it started in, waiting its turn:
        # (start, -duration, is a step, sequence, end, index).
        rests: list[tuple[int, int, bool, int, int, int]] = []
        seq = 0
        ordered = iter(parts)
        nxt = next(ordered, None)
        while True:
            if rests and (nxt is None or rests[0][:3] < (nxt[0], nxt[0] - nxt[1], kind[kids[nxt[2]]] == _K_STEP)):
                t, _neg, _step, _seq, e, i = heapq.heappop(rests)
                counted = False
            elif nxt is not None:
                t, e, i, counted = nxt
                nxt = next(ordered, None)
            else:
                t = e = _END  # past every event: closes what is still open, then ends
                i = -1
                counted = False
            k = kids[i] if i >= 0 else -1
            kd = kind[k] if i >= 0 else _K_OTHER
            if i >= 0 and asynchronous[k]:
                # Async (a collective's work): no self host time, no part in nesting.
                if counted:
                    calls[k] += 1
                cpu_total[k] += e - t
                sums.async_ns += e - t
                sums.async_keys.add(k)
                continue
            while stack:
                top = stack[-1]
                if e > top[0] and t < top[0] and kd != _K_STEP and top[7] < 0:
                    # It runs past the end of the span it starts in: cut it there; the rest
                    # nests beside that span, as one call. (Steps never cut nor are cut:
                    # spans were cut at their edges.)
                    seq += 1
                    heapq.heappush(rests, (top[0], top[0] - e, False, seq, e, i))
                    e = top[0]
                    break
                if t < top[0] and e <= top[0]:
                    break
                # The frame ends here: add up its times.
                pop()
                fk = top[1]
                self_ns = top[2] - top[3]
                only = top[12]
                if only is not None and top[11] == 1:
                    # key_averages()' fold: the only same-name child is this call; its self
                    # time and kernels are the parent's.
                    ck, c_self, c_dur, c_own_dev, c_dev_total, c_counted = only
                    if c_counted:
                        calls[ck] -= 1
                    cpu_self[ck] -= c_self
                    cpu_total[ck] -= c_dur
                    dev_self[ck] -= c_own_dev
                    dev_total[ck] -= c_dev_total
                    self_ns += c_self
                    top[4] += c_own_dev
                    if track_off_steps:
                        row_self[ck] = row_self.get(ck, 0) - c_self
                    if top[15] >= 0:
                        sample = samples[top[15]]
                        sample[1] -= c_own_dev
                        sample[2][ck] -= c_self
                        if c_own_dev:
                            sample[3][ck] -= c_own_dev
                if not top[9]:
                    cpu_self[fk] += self_ns
                    cpu_total[fk] += top[2]
                    if not top[14]:
                        if track_off_steps:
                            row_self[fk] = row_self.get(fk, 0) + self_ns
                        if top[15] >= 0:
                            sample = samples[top[15]]
                            by_key = sample[2]
                            by_key[fk] = by_key.get(fk, 0) + self_ns
                            if top[4]:
                                sample[1] += top[4]
                                sample[3][fk] = sample[3].get(fk, 0) + top[4]
                dev_self[fk] += top[4]
                dev_total[fk] += top[5]
                if stack:
                    parent = stack[-1]
                    parent[5] += top[5]
                    if top[14]:
                        # What is not a row (the profiler's own frames and bookkeeping ops)
                        # hands its self time to its parent, as torch's table, which drops
                        # such events: self times still add up to the step.
                        parent[3] -= self_ns
                    elif (
                        parent[11] == 1
                        and not parent[9]
                        and vocab.folds_into_parent(raw_names[parent[1]], raw_names[fk], kind[fk])
                    ):
                        parent[12] = (fk, self_ns, top[2], top[4], top[5], top[13])
            if i < 0:
                break
            d = e - t
            own = 0
            if kd == _K_RUNTIME:
                c = corrs[i]
                if c >= 0 and dev_by_corr:
                    found = dev_by_corr.pop(c, 0)
                    if found:
                        linked = True
                        for frame in reversed(stack):
                            if kind[frame[1]] not in (_K_RUNTIME, _K_PY):
                                frame[4] += found
                                frame[5] += found
                                break
                        else:  # no op around the call (e.g. a graph launch): the call carries it
                            own = found
            else:
                x = exts[i]
                if x >= 0 and dev_by_ext and counted:
                    own = dev_by_ext.pop(x, 0)
                    if own:
                        linked = True
            # Python frames called by the profiler's or neuronprof's own frames (signal
            # handling, metadata) are their work, not the program's: no row, as the
            # profiler's own frames themselves (``vocab.is_row``).
            # Under them means nested in one (own frames that cross a step's edge keep
            # their parts outside the steps, see ``_cut_at_steps``). The program's own
            # frames under them (``Session.run``, ``compare``) stay rows, and so does all
            # they call.
            parent_own = bool(stack) and stack[-1][8]
            hidden = False
            in_own = parent_own
            if kd == _K_PY:
                flags = frame_flags.get(k)
                if flags is None:
                    flags = frame_flags[k] = (vocab.is_own_frame(names[k]), vocab.is_support_frame(names[k]))
                hidden = flags[1] and parent_own
                in_own = hidden or flags[0]
            if not hidden and counted:
                calls[k] += 1
            not_row = not_rows[k]
            anchored = False
            if stack:
                parent = stack[-1]
                if not (hidden or not_row):
                    parent[11] += 1  # torch's table drops what is not a row: no child of the fold
                covered_to = parent[10]
                if e > covered_to:  # self time is the duration less the union of the children
                    parent[3] += e - (t if t > covered_to else covered_to)
                    parent[10] = e
                if parent[7] >= 0:
                    step_work[parent[7]] = True
                if parent[6]:
                    if counted and vocab.counts_as_call(kd, names[k]):
                        top_level += 1  # the first part of a cut span is the call
                    elif vocab.is_transparent(kd):
                        anchored = True  # Python frames and annotations: the ops under them count
            if kd == _K_STEP:
                anchored = True
                step_work.append(False)
                sample_at = len(samples)
                samples.append([d, 0, {}, {}, 0, t, 0])
            else:
                sample_at = stack[-1][15] if stack else -1
            stack.append(
                [
                    e,
                    k,
                    d,
                    0,
                    own,
                    own,
                    anchored,
                    len(step_work) - 1 if kd == _K_STEP else -1,
                    in_own,
                    hidden,
                    t,
                    0,
                    None,
                    counted,
                    hidden or not_row,
                    sample_at,
                ]
            )
        if row_self:
            ns = sum(row_self.values())
            if ns > 0:
                self.off_steps.append((ns, max(row_self, key=row_self.__getitem__)))
        sums.top_level += top_level
        steps = vocab.step_count(step_work, stopped_in_last=self.stopped_in_last_step)
        del samples[first_sample + steps :]  # the empty step torch opened as it stopped
        sums.steps += steps
        sums.linked |= linked

    def _cut_at_steps(self, ts: Any, dur: Any, kids: Any, idx: list[int]) -> Iterable[tuple[int, int, int, bool]]:
        """The timeline's spans as ``(start, end, index, counts the call)``, parents first, cut at its steps' edges.

        Sorted as torch nests: by start, longest first; of equal spans, a step last
        (inside the others), so that a frame cut to a step's edges is its parent.
        Spans that cross a step's edge are cut by ``vocab.step_pieces``: their parts
        outside the steps are left out (a note says how much of a span that ran in
        two steps or more), except for the profiler's own frames, which are no row
        and keep the frames they call where they are.
        """
        keys = self.keys
        kind, raw_names, asynchronous = keys.kind, keys.raw_names, keys.asynchronous
        in_order = _is_sorted_idx(ts, dur, idx)
        if not in_order:
            idx = sorted(idx, key=dur.__getitem__, reverse=True)
            idx.sort(key=ts.__getitem__)
        steps = [(ts[i], ts[i] + dur[i]) for i in idx if kind[kids[i]] == _K_STEP]
        crossing = _crossing(ts, dur, kids, idx, steps, kind, asynchronous) if steps else []
        if not crossing:
            # Nothing to cut (the common case): the events in nesting order, as they are.
            return ((ts[i], ts[i] + dur[i], i, True) for i in idx)
        steps.sort()
        starts = [s for s, _ in steps]
        cut = set(crossing)
        parts: list[tuple[int, int, int, bool]] = [(ts[i], ts[i] + dur[i], i, True) for i in idx if i not in cut]
        crossed = self.crossed
        for i in crossing:
            t = ts[i]
            e = t + dur[i]
            k = kids[i]
            pieces = vocab.step_pieces(t, e, steps, starts)
            if pieces is None:
                parts.append((t, e, i, True))
                continue
            keep_all = kind[k] == _K_PY and vocab.is_own_frame(raw_names[k])
            first = True
            for lo, hi, inside in pieces:
                if inside or keep_all:
                    parts.append((lo, hi, i, first))
                    first = False
            # A span across a boundary runs in two steps or more; the part of one that was
            # still open when recording stopped (or already open when it started) is
            # clipped as every span is, with no note.
            inside_at = [n for n, piece in enumerate(pieces) if piece[2]]
            if len(inside_at) >= 2 and _noted(raw_names[k], kind[k]):
                between = pieces[inside_at[0] : inside_at[-1]]
                left_out = sum(hi - lo for lo, hi, inside in between if not inside)
                seen = crossed.get(k)
                crossed[k] = (1, left_out) if seen is None else (seen[0] + 1, seen[1] + left_out)
        parts.sort(key=lambda p: (p[0], p[0] - p[1], kind[kids[p[2]]] == _K_STEP))
        return parts


def _crossing(
    ts: Any, dur: Any, kids: Any, idx: list[int], steps: list[tuple[int, int]], kind: Any, asynchronous: Any
) -> list[int]:
    """The events (in nesting order) that cross an edge of a step: one sweep, steps and events both by start."""
    ordered = sorted(steps)
    out: list[int] = []
    j, n = 0, len(ordered)
    for i in idx:
        k = kids[i]
        if kind[k] == _K_STEP or asynchronous[k]:
            continue
        t = ts[i]
        e = t + dur[i]
        while j < n and ordered[j][1] <= t:
            j += 1  # steps that ended before this event: no later event starts in them either
        if j == n:
            continue
        s0, s1 = ordered[j]
        # It starts before this step and runs into it, or starts in it and runs past its end.
        if (t < s0 < e) or (s0 <= t and e > s1):
            out.append(i)
    return out


def _noted(name: str, kind: int) -> bool:
    """Whether a span cut at a step boundary is named in a note: a row of the program's, not the profiler's."""
    return vocab.is_row(name) and not (kind == _K_PY and vocab.is_support_frame(name))


def _is_sorted_idx(ts: Any, dur: Any, idx: list[int]) -> bool:
    """Whether a timeline's events (all of them, in file order) are already nested order."""
    return len(idx) == len(ts) and _is_sorted(ts, dur)
