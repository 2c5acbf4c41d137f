"""`mqindex search` prints a match a line (topic/partition@offset, time, key, value, tab-separated): a key or value
holding a line break of any kind (a newline, NEL, \\x1c-\\x1e, U+2028/U+2029: what str.splitlines and many readers
break on) or a tab is shown escaped, never as a break, and every other character as it is."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from api.cli.search import _visible
from api.http.message_json import message_dict
from broker.partitions.client_messages import OutMessage
from broker.partitions.message_id import encode_message_id
from jobs.value_search import RAW_HEADERS, RAW_KEY, RAW_VALUE


@given(st.text())
def test_any_text_is_shown_on_one_line_without_tabs(text: str) -> None:
    shown = _visible(text)
    assert len(shown.splitlines()) <= 1
    assert "\t" not in shown


def test_breaks_are_escaped_and_the_rest_kept() -> None:
    assert _visible("a\nb\x85c\u2028d\x1ee\tf") == "a\\x0ab\\x85c\\u2028d\\x1ee\\x09f"
    assert _visible("plain é 値 \U0001f600") == "plain é 値 \U0001f600"
    assert _visible(None) == "null"


def _row(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> Any:
    """A match of the search's raw frame as Spark hands it (binary columns as bytearray, the time naive local)."""
    from pyspark.sql import Row

    def raw(b: bytes | None) -> bytearray | None:
        return None if b is None else bytearray(b)

    return Row(**{"key": None, "value": None, "topic": "orders", "partition": 1, "offset": 7,
                  "timestamp": dt.datetime.fromtimestamp(1_767_225_600.123), "headers": {}, RAW_KEY: raw(key),
                  RAW_VALUE: raw(value), RAW_HEADERS: [Row(key=k, value=raw(v)) for k, v in headers]})


def test_a_match_is_shown_as_the_http_api_shows_the_message() -> None:
    """--json prints the object the HTTP API answers for the message (the key search's, the value search's): a key,
    value or header value that is not UTF-8 as base64 with its encoding, `header_list` when `headers` cannot hold
    the headers exactly; the text line shows such a key or value as base64:...."""
    from api.cli.search import _line
    from api.http.search_jobs import message_of

    headers: list[tuple[str, bytes | None]] = [("trace", b"\x00\xff"), ("KEYS", b"a"), ("KEYS", b"b"), ("n", None)]
    row = _row(b"\xfe\x01", b"\xff\xfe", headers)
    doc = json.loads(_line(row, 3, as_json=True))
    assert doc == message_of(row, 3) == message_dict(OutMessage("orders", 1, 7, encode_message_id(3, 1, 7), b"\xfe\x01",
                                                                b"\xff\xfe", headers, 1_767_225_600_123))
    assert (doc["key"], doc["key_encoding"], doc["value"], doc["encoding"]) == ("/gE=", "base64", "//4=", "base64")
    assert doc["header_list"] == [{"name": "trace", "value": "AP8=", "encoding": "base64"},
                                  {"name": "KEYS", "value": "a", "encoding": "utf-8"},
                                  {"name": "KEYS", "value": "b", "encoding": "utf-8"},
                                  {"name": "n", "value": None, "encoding": "utf-8"}]
    assert _line(row, 3, as_json=False) == "orders/1@7\t2026-01-01T00:00:00.123+00:00\tbase64:/gE=\tbase64://4="
    text = _row(b"k\n1", None, [("app", b"web")])
    assert json.loads(_line(text, 3, as_json=True))["headers"] == {"app": "web"}
    assert "header_list" not in json.loads(_line(text, 3, as_json=True))
    assert _line(text, 3, as_json=False) == "orders/1@7\t2026-01-01T00:00:00.123+00:00\tk\\x0a1\tnull"
