"""`mqindex search` prints a match a line (topic/partition@offset, time, key, value, tab-separated): a key or value
holding a line break of any kind (a newline, NEL, \\x1c-\\x1e, U+2028/U+2029: what str.splitlines and many readers
break on) or a tab is shown escaped, never as a break, and every other character as it is."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from api.cli.search import _visible


@given(st.text())
def test_any_text_is_shown_on_one_line_without_tabs(text: str) -> None:
    shown = _visible(text)
    assert len(shown.splitlines()) <= 1
    assert "\t" not in shown


def test_breaks_are_escaped_and_the_rest_kept() -> None:
    assert _visible("a\nb\x85c\u2028d\x1ee\tf") == "a\\x0ab\\x85c\\u2028d\\x1ee\\x09f"
    assert _visible("plain é 値 \U0001f600") == "plain é 値 \U0001f600"
    assert _visible(None) == "null"
