"""Text shown on one line of a command's output: a key, a value or a header value holds any character, and a line
break or tab among them would split the line a reader (or `cut`, `grep`) takes as one record."""

from __future__ import annotations

import re

# what ends a line for some reader: C0 and C1 controls (a newline, \x1c-\x1e, NEL \x85) and the Unicode line and
# paragraph separators (str.splitlines breaks on each of them); decoded record bytes hold any of them
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}"


def visible(text: str | None) -> str:
    """A text field on one line: control characters and line separators (a newline in a value) as \\xNN or
    \\uNNNN escapes; null as `null`."""
    if text is None:
        return "null"
    return _CONTROL.sub(_escape, text)
