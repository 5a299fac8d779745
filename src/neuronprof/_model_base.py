"""The one base of the result models: JSON with a schema tag, rows, and text/Markdown/CSV/HTML.

Every result model ([`Table`][neuronprof.Table], ``RankTable``, ``Comparison``,
``TraceDiff``, ``Roofline``, ``NeuronProfile``, ``Insights``, ``RankInsights``) is a
frozen dataclass on [`ResultModel`][neuronprof._model_base.ResultModel], so each has the
same verbs: ``to_dict``/``from_dict``/``to_json``/``from_json`` (the dict carries the
model's ``schema`` tag), ``head``/``row`` over its rows, and ``to_text`` (``print()``),
``to_markdown``, ``to_csv`` and ``to_html`` (notebooks), all laid out by the one column
engine of [`neuronprof.render`][neuronprof.render]. A model says only what is its own:
its fields as JSON (``_data``/``_from_data``), which field holds its rows, which fields
are totals over every row, and its view (``_view``: lines and column tables).

Nothing here imports a renderer at module level: the view is imported on use, so a
model can be built, saved and read back without the rendering code.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Optional, TypeVar, Union

from neuronprof._deprecation import renamed_keyword
from neuronprof._model_rows import loads, row_from_dict, row_to_dict
from neuronprof._vocabulary import check_row_limit, limit_rows

if TYPE_CHECKING:
    import pandas

    from neuronprof.render import Block, Format

M = TypeVar("M", bound="ResultModel")
RowT = TypeVar("RowT", bound="ResultRow")


def dataframe(caller: str, rows: list[dict[str, Any]], columns: list[str]) -> pandas.DataFrame:
    """``pandas.DataFrame(rows, columns=columns)``, for ``<caller>.to_dataframe()``.

    Raises:
        ImportError: pandas is not installed (``pip install pandas``).
    """
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(f"{caller}.to_dataframe() needs pandas: pip install pandas") from None
    return pd.DataFrame(rows, columns=columns)


def frame_of(caller: str, rows: Sequence[Any], row_type: Optional[type]) -> pandas.DataFrame:
    """A DataFrame of result rows (dataclasses or named tuples), one column per field of ``row_type``."""
    if row_type is not None and dataclasses.is_dataclass(row_type):
        columns = [f.name for f in dataclasses.fields(row_type)]
    else:
        columns = list(getattr(row_type, "_fields", ()))
    return dataframe(caller, [_row_values(r) for r in rows], columns)


def _row_values(row: Any) -> dict[str, Any]:
    if isinstance(row, ResultRow):
        return row.to_dict()
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        return dataclasses.asdict(row)
    return dict(row._asdict())


class ResultRow:
    """The JSON verbs of one row of a result model (a frozen dataclass; shapes and dtypes as lists).

    ``_KIND`` names the row in errors (``"OpRow"``, ``"diff row"``).
    """

    _KIND: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """Return the row as a JSON-ready dict (shapes and dtypes as lists)."""
        return row_to_dict(self)

    @classmethod
    def from_dict(cls: type[RowT], data: Mapping[str, Any]) -> RowT:
        """Build a row from ``to_dict()`` output.

        Args:
            data: A dict as ``to_dict()`` returns it (e.g. parsed from JSON).

        Raises:
            ValueError: A field is missing, unknown or of the wrong type.
        """
        return row_from_dict(cls, data, cls._KIND)


class ResultModel:
    """The verbs every result model shares; a subclass is a frozen dataclass.

    Class attributes a subclass sets:

    * ``SCHEMA``: the tag of its JSON form (``"neuronprof.table/1"``).
    * ``_KIND``: what it is, in words, for errors (``"a neuronprof table"``).
    * ``_ROWS``: the field that holds its rows (``"rows"``, ``"findings"``), or
      ``None`` for a model of several sections (``head`` keeps it whole).
    * ``_ROW_KEY``: the attribute ``row()`` looks a row up by (``"name"``; a finding's ``"kind"``).
    * ``_TOTALS``: fields computed from every row before any cut; ``head`` and the
      JSON form carry them, so a cut model still reports the whole one's totals.
    * ``_JSON``: options for ``json.dumps`` (e.g. ``ensure_ascii=False``).
    """

    SCHEMA: ClassVar[str]
    _KIND: ClassVar[str]
    _ROWS: ClassVar[Optional[str]] = "rows"
    _ROW_TYPE: ClassVar[Optional[type]] = None  # the class of its rows: the columns of to_dataframe()
    _ROW_KEY: ClassVar[str] = "name"
    _ROW_WORDS: ClassVar[str] = "row named"  # what row()'s KeyError calls a missing row
    _TOTALS: ClassVar[tuple[str, ...]] = ()
    _JSON: ClassVar[Mapping[str, Any]] = {}
    _STR_ROW_LIMIT: ClassVar[Optional[int]] = None

    # -- what a subclass provides ------------------------------------------------------
    def _data(self) -> dict[str, Any]:
        """The model's fields as a JSON-ready dict, without the schema tag."""
        raise NotImplementedError

    @classmethod
    def _from_data(cls: type[M], data: Mapping[str, Any]) -> M:
        """Build the model from ``_data()`` output whose schema tag (and rows list) is checked."""
        raise NotImplementedError

    def _view(self, fmt: Format, row_limit: Optional[int]) -> list[Block]:
        """The model laid out for ``fmt`` (its first ``row_limit`` rows): lines and tables (``neuronprof.render``)."""
        raise NotImplementedError

    # -- JSON --------------------------------------------------------------------------
    @renamed_keyword("limit", "row_limit")
    def to_dict(self, row_limit: Optional[int] = None) -> dict[str, Any]:
        """Return the model as a JSON-ready dict, its ``schema`` tag first.

        Args:
            row_limit: Keep the first ``row_limit`` rows (as [`head`][neuronprof.Table.head]);
                the totals still cover every row. None for all.
        """
        if row_limit is not None:
            return self.head(row_limit).to_dict()
        return {"schema": self.SCHEMA, **self._data()}

    @renamed_keyword("limit", "row_limit")
    def to_json(self, indent: Optional[int] = 2, row_limit: Optional[int] = None) -> str:
        """Return the model as JSON; ``from_json`` of the same class reads it back.

        Args:
            indent: Spaces per indentation level; None for one line.
            row_limit: Keep the first ``row_limit`` rows; the totals still cover every row. None for all.

        Returns:
            A JSON document (a ``str``), such that ``M.from_json(m.to_json(row_limit=n)) == m.head(n)``.
        """
        return json.dumps(self.to_dict(row_limit), indent=indent, **self._JSON)

    @classmethod
    def from_dict(cls: type[M], data: Mapping[str, Any]) -> M:
        """Build the model from ``to_dict()`` output.

        Args:
            data: A dict as ``to_dict()`` returns it (e.g. parsed from JSON).

        Raises:
            ValueError: The data is not this kind of model (its ``schema`` tag), or a field is malformed.
        """
        if not isinstance(data, Mapping) or data.get("schema") != cls.SCHEMA:
            raise ValueError(f"not {cls._KIND} (expected schema {cls.SCHEMA!r})")
        init = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        if cls._ROWS in init and not isinstance(data.get(cls._ROWS), list):
            raise ValueError(f"{cls._KIND} needs a {cls._ROWS!r} list in its JSON")
        out = cls._from_data(data)
        # Totals that are no __init__ parameter are set from the JSON as written (the whole model's).
        for name in cls._TOTALS:
            value = data.get(name.lstrip("_"))
            if name not in init and value is not None:
                object.__setattr__(out, name, float(value))
        return out

    @classmethod
    def from_json(cls: type[M], text: Union[str, bytes]) -> M:
        """Read a model written by ``to_json()``.

        Args:
            text: JSON as ``to_json()`` writes it (``str`` or ``bytes``).

        Raises:
            ValueError: The text is not JSON, or not this kind of model.
        """
        return cls.from_dict(loads(text))

    # -- rows --------------------------------------------------------------------------
    def _rows(self) -> tuple[Any, ...]:
        return () if self._ROWS is None else tuple(getattr(self, self._ROWS))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows())

    def __len__(self) -> int:
        return len(self._rows())

    def __bool__(self) -> bool:
        # A model of sections has no length of its own: it is never false for being "empty".
        return self._ROWS is None or bool(self._rows())

    def head(self: M, n: Optional[int]) -> M:
        """Return a copy with the first ``n`` rows (all when ``n`` is None or negative).

        ``total_rows`` and every total stay those of the whole model. A model of
        several sections (a Neuron profile) is returned whole.

        Args:
            n: How many rows to keep; None or negative keeps all.
        """
        rows = self._rows()
        kept = limit_rows(rows, n)
        if self._ROWS is None or len(kept) == len(rows):
            return self
        return self._carry(**{self._ROWS: tuple(kept)})

    def _as_tuples(self, *names: str) -> None:
        """Store the fields ``names``, given as any iterable, as tuples, so that the frozen model stays immutable."""
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))

    def _carry(self: M, **changes: Any) -> M:
        """``dataclasses.replace`` that keeps the whole model's totals (the fields in ``_TOTALS``)."""
        out = dataclasses.replace(self, **changes)  # type: ignore[type-var]
        for name in self._TOTALS:
            object.__setattr__(out, name, getattr(self, name))
        return out

    def row(self, name: str) -> Any:
        """Return the first row called ``name`` (the first finding of that kind, for findings).

        Args:
            name: The row's name, e.g. ``"aten::mm"`` (a finding's kind, e.g. ``"idle_device"``).

        Raises:
            TypeError: ``name`` is not a string.
            KeyError: No row has that name; the message lists close matches.
        """
        if not isinstance(name, str):
            raise TypeError(f"row() takes a row's name (a str), got {type(name).__name__}: {name!r}")
        keys = [getattr(r, self._ROW_KEY) for r in self._rows()]
        if name in keys:
            return self._rows()[keys.index(name)]
        close = [k for k in keys if name.lower() in k.lower()][:5]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"no {self._ROW_WORDS} {name!r}{hint}")

    # -- renderings --------------------------------------------------------------------
    def _render(self, fmt: Format, row_limit: Optional[int]) -> str:
        from neuronprof.render import lay_out

        check_row_limit(row_limit)  # also where a model of sections shows every row
        return lay_out(self._view(fmt, row_limit), fmt)

    def __str__(self) -> str:
        return self.to_text(self._STR_ROW_LIMIT)

    @renamed_keyword("limit", "row_limit")
    def to_text(self, row_limit: Optional[int] = None) -> str:
        """Return the model as aligned plain text: what ``print()`` shows (a cross-rank table prints 20 rows).

        Args:
            row_limit: Show the first ``row_limit`` rows; the totals still cover every row. None for all.
        """
        return self._render("text", row_limit)

    @renamed_keyword("limit", "row_limit")
    def to_markdown(self, row_limit: Optional[int] = None) -> str:
        """Return the model as GitHub-flavoured Markdown.

        Args:
            row_limit: Show the first ``row_limit`` rows; the totals still cover every row. None for all.
        """
        return self._render("markdown", row_limit)

    @renamed_keyword("limit", "row_limit")
    def to_csv(self, row_limit: Optional[int] = None, *, notes: bool = False) -> str:
        """Return the model's rows as CSV, a header line first; a missing value is an empty cell.

        Args:
            row_limit: Keep the first ``row_limit`` rows. None for all.
            notes: Also write the notes after the rows, as ``# note: ...`` comment lines
                (read it back with ``pandas.read_csv(..., comment="#")``).

        Raises:
            ValueError: ``row_limit`` is not an int or None; a bool says that ``to_csv(True)``
                once meant ``notes=True``.
        """
        from neuronprof.render import csv_notes

        if isinstance(row_limit, bool):
            raise ValueError(
                f"row_limit must be an int or None, got {row_limit!r}: to_csv() takes row_limit first; for the "
                f"notes, pass notes={row_limit} by name"
            )
        text = self._render("csv", row_limit)
        return text + (csv_notes(getattr(self, "notes", ())) if notes else "")

    def to_dataframe(self, row_limit: Optional[int] = None) -> pandas.DataFrame:
        """Return the rows as a pandas DataFrame: one line per row, one column per field of a row.

        Values are those of ``to_dict()`` (times in µs, shapes as lists).

        Args:
            row_limit: Keep the first ``row_limit`` rows. None for all.

        Raises:
            ImportError: pandas is not installed (``pip install pandas``).
        """
        return frame_of(type(self).__name__, limit_rows(self._rows(), row_limit), self._ROW_TYPE)

    @renamed_keyword("limit", "row_limit")
    def to_html(self, row_limit: Optional[int] = None) -> str:
        """Return the model as an HTML fragment (a ``<table>`` and paragraphs), as notebooks show it.

        Args:
            row_limit: Show the first ``row_limit`` rows; the totals still cover every row. None for all.
        """
        return self._render("html", row_limit)

    def _repr_html_(self) -> str:
        return self.to_html(self._STR_ROW_LIMIT)
