"""A timeline's events as numpy columns: what the report's panes read, a trace of millions of events included.

The same events as a [`Timeline`][neuronprof.analysis.insights.Timeline]'s, in the same
order, without an object apiece (a trace's: host events thread by thread, each thread's
by start then the longer first, the order of its call tree; device events in the order read).
A trace's columns come from the findings' reader (``read_of(trace).columns``); a
timeline made by hand, or a session's, is read into them by ``of_timeline``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from neuronprof.analysis.insights._timeline import Timeline


@dataclass(frozen=True, eq=False)
class EventColumns:
    """One timeline's events as columns, and what the timeline says of the run.

    Per key (what a trace repeats: ``names[k]``...): ``names``, ``categories`` (a host
    event's ``HostCategory``, or a device event's ``DeviceCategory``), ``shapes`` and
    ``dtypes`` (a host key's recorded inputs, else ``None``).

    Per host event (numpy arrays of one length): ``key`` (int32), ``start`` and ``end``
    (int64 ns; Python ints, dtype object, in a timeline made by hand with a time past
    int64), ``thread`` (int32, an index into ``threads``), ``ext`` (its External id,
    int64, -1 for none) and ``corr`` (a runtime call's correlation id, -1 for none or for
    any other event).

    Per device event: ``dkey`` (int32), ``dstart``, ``dend`` (int64 ns), ``dext`` and
    ``dcorr`` (int64, -1 for none).

    ``backend``, ``device_label``, ``source``, ``notes``, ``rank`` are the timeline's; ``ranks``
    holds one ``EventColumns`` per rank when the timeline holds several (the events above are
    then every rank's together, as a ``Timeline``'s are).
    """

    names: Sequence[str]
    categories: Sequence[Optional[str]]
    shapes: Sequence[Any]
    dtypes: Sequence[Any]
    threads: Sequence[str]
    key: Any
    start: Any
    end: Any
    thread: Any
    ext: Any
    corr: Any
    dkey: Any
    dstart: Any
    dend: Any
    dext: Any
    dcorr: Any
    backend: str = "cpu"
    device_label: Optional[str] = None
    source: str = ""
    notes: tuple[str, ...] = ()
    rank: Optional[int] = None
    ranks: tuple[EventColumns, ...] = field(default=())

    @property
    def host_count(self) -> int:
        return len(self.key)

    @property
    def device_count(self) -> int:
        return len(self.dkey)

    def key_mask(self, test: Any) -> Any:
        """Per key, ``test(name, category)``: a mask to index with ``key`` or ``dkey``."""
        import numpy as np

        return np.fromiter((bool(test(n, c)) for n, c in zip(self.names, self.categories)), bool, len(self.names))

    def host_names(self, rows: Any = None) -> list[str]:
        """The names of host events (all, or ``rows``), in order."""
        keys = self.key if rows is None else self.key[rows]
        names = self.names
        return [names[k] for k in keys.tolist()]

    def device_names(self, rows: Any = None) -> list[str]:
        """The names of device events (all, or ``rows``), in order."""
        keys = self.dkey if rows is None else self.dkey[rows]
        names = self.names
        return [names[k] for k in keys.tolist()]


def of_timeline(timeline: Timeline) -> EventColumns:
    """A timeline's events (``HostEvent``s and ``DeviceEvent``s) as columns, in their order, its ranks' too."""
    import numpy as np

    from neuronprof.analysis.insights._intervals import _array  # int64, or Python ints past it
    from neuronprof.analysis.insights._tree_reader import _frozen

    keys: dict[tuple[Any, ...], int] = {}

    def key_of(what: tuple[Any, ...]) -> int:
        return keys.setdefault(what, len(keys))

    def ids(values: Any) -> Any:
        return np.array([-1 if v is None else v for v in values], np.int64)

    def columns(tl: Timeline) -> dict[str, Any]:  # (every field but the keys' and ``ranks``)
        host = tl.host
        threads: dict[str, int] = {}
        thread = [threads.setdefault(e.thread, len(threads)) for e in host]
        device = tl.device
        return {
            "threads": list(threads),
            "key": np.array(
                [key_of((e.name, e.category, _frozen(e.input_shapes), _frozen(e.input_dtypes))) for e in host], np.int32
            ),
            "start": _array([e.start_ns for e in host]),
            "end": _array([e.end_ns for e in host]),
            "thread": np.array(thread, np.int32),
            "ext": ids(e.ext_id for e in host),
            "corr": ids(e.correlation for e in host),
            "dkey": np.array([key_of((d.name, d.category, None, None)) for d in device], np.int32),
            "dstart": _array([d.start_ns for d in device]),
            "dend": _array([d.end_ns for d in device]),
            "dext": ids(d.ext_id for d in device),
            "dcorr": ids(d.correlation for d in device),
            "backend": tl.backend,
            "device_label": tl.device_label,
            "source": tl.source,
            "notes": tl.notes,
            "rank": tl.rank,
        }

    whole = columns(timeline)
    parts = [columns(part) for part in timeline.ranks]
    table = list(keys)
    shared: dict[str, Any] = {
        "names": [k[0] for k in table],
        "categories": [k[1] for k in table],
        "shapes": [k[2] for k in table],
        "dtypes": [k[3] for k in table],
    }
    return EventColumns(**shared, **whole, ranks=tuple(EventColumns(**shared, **part) for part in parts))
