"""Mend the text of a trace that torch wrote but that is not quite JSON, so that it can be read.

torch's exporter writes names and source paths as it finds them: a control
character in an event name, or a ``"`` in a file path under ``with_stack=True``,
goes into the file unescaped, and the file is then not valid JSON. Those traces
hold everything else intact, so the stream readers switch this mending on at the
first decode error (never before: a valid trace is read untouched and at full
speed) and count what they changed, so that a note can say so.

Written here rather than taken from a lenient JSON library: the repair has to
follow kineto's layout (one string per line at most between structural
characters), and has to work a chunk at a time inside the streaming reader.
"""

from __future__ import annotations

import re

__all__ = ["TextMender"]

# Control characters JSON never allows raw (tab, line feed and carriage return are
# whitespace between values, so they are kept).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_CLOSERS = frozenset(":,}]")
_WS = " \t\r"
# A line longer than this is mended as it stands rather than waiting for its end.
_MAX_PENDING = 64 << 20


def escape_stray_quotes(line: str) -> tuple[str, int]:
    """Escape the ``"`` inside the strings of one line that end no string; return the line and how many.

    A quote inside a string ends it only when what follows it (after blanks) is
    ``:``, ``,``, ``}``, ``]`` or the end of the line, as in any valid JSON line
    written one member per line; any other quote there is part of the text
    (``exp "v2"/m.py``) and is escaped. On a valid line nothing changes.
    """
    find = line.find
    j = find('"')
    if j < 0:
        return line, 0
    out: list[str] = []
    start = 0
    fixed = 0
    in_string = False
    n = len(line)
    while j >= 0:
        if not in_string:
            in_string = True
        else:
            k = j - 1
            while k >= 0 and line[k] == "\\":
                k -= 1
            if (j - 1 - k) % 2 == 0:  # not escaped
                m = j + 1
                while m < n and line[m] in _WS:
                    m += 1
                if m == n or line[m] in _CLOSERS:
                    in_string = False
                else:
                    out.append(line[start:j])
                    out.append('\\"')
                    start = j + 1
                    fixed += 1
        j = find('"', j + 1)
    if not fixed:
        return line, 0
    out.append(line[start:])
    return "".join(out), fixed


class TextMender:
    """Mends the text of a trace a chunk at a time, counting what it changed.

    Attributes:
        quotes: ``"`` characters escaped inside strings.
        controls: Control characters replaced by U+FFFD.
    """

    def __init__(self) -> None:
        self.quotes = 0
        self.controls = 0
        self._pending = ""

    def mend(self, text: str, *, final: bool) -> str:
        """Return the mended complete lines of what has been given so far; hold back a trailing partial line."""
        text = self._pending + text
        self._pending = ""
        if not final:
            cut = text.rfind("\n") + 1
            if cut == 0 and len(text) < _MAX_PENDING:
                self._pending = text
                return ""
            if cut:
                text, self._pending = text[:cut], text[cut:]
        text, n = _CONTROL.subn("\ufffd", text)
        self.controls += n
        if '"' in text:
            lines = text.split("\n")
            for i, line in enumerate(lines):
                mended, fixed = escape_stray_quotes(line)
                if fixed:
                    lines[i] = mended
                    self.quotes += fixed
            text = "\n".join(lines)
        return text

    def notes(self, name: str) -> list[str]:
        """One true sentence per kind of change made to the file ``name``."""
        out = []
        if self.quotes:
            out.append(
                f"{name}: {self.quotes} unescaped '\"' inside names or source paths read as part of them "
                "(torch's exporter does not escape them, e.g. in with_stack's file paths)"
            )
        if self.controls:
            out.append(f"{name}: {self.controls} control character(s) in names shown as U+FFFD")
        return out
